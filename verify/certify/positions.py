"""Position-wise value sets: which values a hand-built head's read can take at one model position.

The abstract state (:mod:`.state`) holds one set of ideal vectors per block for every regular
position alike, so the program check (:mod:`.program`) also meets combinations no input
reaches: a value a SOp takes only at some positions, paired with a position where it never
occurs. ``ictm_parse_copy_match``'s match head is one: its copies P_s hold 0 (the BOS value,
``position_map``'s fallback) at the positions before a block's last content position, and
the head's BOS scores with a query whose P_s is 0; but the head reads only last content and
label positions, where P_s is always at least 1.

Soundness argument. :func:`possible` returns a set that contains the SOp's value at model
position ``pos`` on EVERY input of length >= pos (RASP semantics, :mod:`constructions.reference`),
or None (no claim). Rules, by the head's kind (anything else: None):

* ``match`` with ``select`` ``"first"`` or ``"last"`` reading POSITION (through ``fn``): the
  attended key is a candidate j (1 <= j <= pos, ``where(pos, j)``), or BOS when nothing
  matches; so the value is ``fn(j)`` for a candidate j, or the read's BOS value. BOS is
  left out when the match is certain: ``pos`` is its own candidate and every pair compares
  one SOp with itself whose value at a regular position is never None (``tokens``), so
  key ``pos`` agrees with the query on every pair.
* ``position`` (``prev_token``, ``position_map``): the value is the source read at
  ``target(pos)`` (mapped by ``fn``) when 1 <= target(pos) <= pos, where the source's own
  set is :func:`possible` of it at that position (None: no claim); otherwise the head
  reads BOS (softmax) or nothing (ReLU: None, or the empty set for a set-valued read), so the
  value is the read's BOS value (softmax) or that.

A filter built on this drops only combinations that no input reaches, given that the decoded
values of the ideal vectors are the program's values (the program check's own induction).
"""

from __future__ import annotations

from typing import Any, Optional, Set

from tracr.rasp import rasp

from depthcraft.constructions.nodes import POSITION, HeadRead, apply_fn


def _never_none(sop: Any) -> bool:
    """Whether ``sop`` holds a value (not None) at every regular position of every input."""
    return sop is rasp.tokens


def possible(link, label: str, pos: int, n: int, _depth: int = 0) -> Optional[Set[Any]]:
    """The values SOp ``label`` can hold at model position ``pos`` (1..n) on every input, or None.

    Args:
        link: the model's :class:`~constructions.model.ProgramLink` (``nodes``: label -> expression).
        label: the SOp's label.
        pos: a model position 1..n.
        n: the longest input.
    Returns:
        A set of values (frozensets for set-valued reads), or None where no rule applies.
    """
    expr = link.nodes.get(label)
    if not isinstance(expr, HeadRead) or _depth > 16 or not 1 <= pos <= n:
        return None
    head, read = expr.head, expr.read
    kind = head.kind
    if kind.selects == "match" and head.spec.select in ("first", "last") and read.source is POSITION:
        spec = head.spec
        cands = [j for j in range(1, pos + 1) if spec.where is None or spec.where(pos, j)]
        out = {apply_fn(read.fn, j) for j in cands}
        certain = pos in cands and all(q is k and _never_none(q) for q, k in spec.pairs)
        if not certain:
            out.add(expr.bos_value)
        return out
    if kind.selects == "position":
        t = head.spec.target(pos)
        if t is not None and 1 <= t <= pos:
            if read.source is POSITION:
                return {apply_fn(read.fn, t)}
            if not isinstance(read.source, rasp.SOp):
                return None
            src = possible(link, read.source.label, t, n, _depth + 1)
            if src is None:
                return None
            out = {apply_fn(read.fn, v) for v in src}
            if expr.multi:  # a set-valued copy of a single value is its one-element set
                out = {v if isinstance(v, frozenset) else (frozenset() if v is None else frozenset([v]))
                       for v in out}
            return out
        if head.attention == "softmax" or t == 0:
            return {expr.bos_value}
        return {frozenset() if expr.multi else None}
    return None
