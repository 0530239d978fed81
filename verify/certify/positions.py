"""Position-wise value sets: which values a hand-built head's read can take at one model position.

The abstract state (:mod:`.state`) holds one set of ideal vectors per block for every regular
position alike, so the program check (:mod:`.program`) also meets combinations no input
reaches: a value a SOp takes only at some positions, paired with a position where it never
occurs. ``ictm_parse_copy_match``'s match head is one: its copies P_s hold 0 (the BOS value,
``position_map``'s fallback) at the positions before a block's last content position, and
the head's BOS scores with a query whose P_s is 0; but the head reads only last content and
label positions, where P_s is always at least 1.

Soundness argument. :func:`possible` returns a set that contains the SOp's value at model
position ``pos`` on EVERY input of length >= pos (RASP semantics, :mod:`constructions.reference`;
tracr's evaluator for its own SOps), or None (no claim). tracr's SOps:

* ``indices`` holds pos - 1 (RASP indices are 0-based over the tokens, model position 0 is BOS);
  ``tokens`` a token of its value set (never None at a regular position);
* ``Map(f, a)`` holds f(x) for x in a's set (None for None: tracr's evaluator), a's set being
  :func:`possible` of it or its whole value set plus None; ``SequenceMap(f, a, b)`` likewise
  over pairs (None when either is None). A function that raises gives no claim;
* any other SOp: its whole value set (the residual labels', a superset of what occurs) plus
  None; a SOp with no categorical value set: no claim.

This is how a pair-valued SOp (value, index) ties its index component to the position, so
``khop_rasp``'s selectors "(value, index), key index <= query index" select no later key.

Hand-built heads, by kind (anything else: None):

* ``match`` with ``select`` ``"first"`` or ``"last"`` reading POSITION (through ``fn``): the
  attended key is a candidate j (1 <= j <= pos, ``where(pos, j)``), or BOS when nothing
  matches; so the value is ``fn(j)`` for a candidate j, or the read's BOS value. BOS is
  left out when the match is certain: ``pos`` is its own candidate and every pair compares
  one SOp with itself whose value at a regular position is never None (``tokens``), so
  key ``pos`` agrees with the query on every pair.
* ``match`` with ``select="all"`` (ReLU) reading POSITION: the head attends to a subset A of
  the candidates (never BOS), so the value is the set {fn(j) : j in A}; A contains ``pos``
  when the match is certain (as above). Every such set is listed (None, no claim, beyond
  :data:`MAX_POSSIBLE` subsets); the read is set-valued, so :func:`possible` keeps the sets.
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
    if expr is None or _depth > 16 or not 1 <= pos <= n:
        return None
    if not isinstance(expr, HeadRead):
        return _rasp_possible(link, expr, pos, n, _depth)
    head, read = expr.head, expr.read
    out = _head_possible(link, expr, head, read, pos, n, _depth)
    if out is None or not expr.multi:
        return out
    # a set-valued read holds the union of what its attended keys hold (reference.Evaluator)
    return {v if isinstance(v, frozenset) else (frozenset() if v is None else frozenset([v])) for v in out}


def _head_possible(link, expr, head, read, pos: int, n: int, depth: int) -> Optional[Set[Any]]:
    """:func:`possible` of a hand-built head's read, before a set-valued read's values become sets."""
    kind = head.kind
    if kind.selects == "match" and head.spec.select in ("first", "last") and read.source is POSITION:
        spec = head.spec
        cands = [j for j in range(1, pos + 1) if spec.where is None or spec.where(pos, j)]
        out = {apply_fn(read.fn, j) for j in cands}
        certain = pos in cands and all(q is k and _never_none(q) for q, k in spec.pairs)
        if not certain:
            out.add(expr.bos_value)
        return out
    if kind.selects == "match" and head.spec.select == "all" and read.source is POSITION:
        # ReLU, every match: the attended keys are a set of candidates (pos among them when certain)
        spec = head.spec
        cands = [j for j in range(1, pos + 1) if spec.where is None or spec.where(pos, j)]
        certain = pos in cands and all(q is k and _never_none(q) for q, k in spec.pairs)
        free = [j for j in cands if not (certain and j == pos)]
        if 2 ** len(free) > MAX_POSSIBLE:
            return None
        fixed = [pos] if certain else []
        out = set()
        for mask in range(2 ** len(free)):
            vals: Set[Any] = set()  # the union of the attended keys' reads, as reference.Evaluator forms it
            for j in fixed + [c for b, c in enumerate(free) if mask >> b & 1]:
                v = apply_fn(read.fn, j)
                if isinstance(v, frozenset):
                    vals |= v
                elif v is not None:
                    vals.add(v)
            out.add(frozenset(vals))
        return out
    if kind.selects == "position":
        t = head.spec.target(pos)
        if t is not None and 1 <= t <= pos:
            if read.source is POSITION:
                return {apply_fn(read.fn, t)}
            if not isinstance(read.source, rasp.SOp):
                return None
            src = possible(link, read.source.label, t, n, depth + 1)
            return None if src is None else {apply_fn(read.fn, v) for v in src}
        if head.attention == "softmax" or t == 0:
            return {expr.bos_value}
        return {None}  # ReLU, no target: nothing attended (the empty set for a set-valued read)
    return None

#: A position-wise set larger than this is no claim (None).
MAX_POSSIBLE = 10_000
#: id(link) -> (link, its value sets): the link is kept, so the id is not reused while cached.
_SETS: dict = {}


def _value_sets(link) -> dict:
    """SOp label -> its categorical values (the residual labels'), as :func:`values.value_sets`: a SOp two
    of whose values compare equal, or one with an unhashable value, has no set."""
    out: dict = {}
    count: dict = {}
    for _, (label, v) in link.values.items():
        try:
            out.setdefault(label, set()).add(v)
        except TypeError:
            out[label] = set()
        count[label] = count.get(label, 0) + 1
    return {k: v for k, v in out.items() if len(v) == count[k]}


def _global(link, label: str) -> Optional[Set[Any]]:
    """Every value SOp ``label`` can hold at a regular position (its residual value set), plus None;
    None when the SOp has no categorical value set (:func:`_value_sets`)."""
    sets = _SETS.get(id(link))
    if sets is None or sets[0] is not link:
        if len(_SETS) > 16:
            _SETS.clear()
        sets = _SETS[id(link)] = (link, _value_sets(link))
    vals = sets[1].get(label)
    return None if vals is None else set(vals) | {None}


def _rasp_possible(link, expr: Any, pos: int, n: int, depth: int) -> Optional[Set[Any]]:
    """:func:`possible` for tracr's own SOps (module docstring of the rules: ``indices``, ``Map``,
    ``SequenceMap``; any other SOp: its value set plus None)."""
    if isinstance(expr, rasp.IndicesType):
        return {pos - 1}  # RASP index = model position - 1
    if isinstance(expr, rasp.TokensType):  # a token of the vocabulary, never None at a regular position
        g = _global(link, expr.label)
        return None if g is None else g - {None}
    if isinstance(expr, rasp.Map) and not isinstance(expr, rasp.SequenceMap):
        inner = possible(link, expr.inner.label, pos, n, depth + 1)
        if inner is None:
            inner = _global(link, expr.inner.label)
        if inner is None:
            return None
        try:
            out = {None if x is None else expr.f(x) for x in inner}
        except Exception:  # noqa: BLE001 - the function raises somewhere: no claim
            return None
        return out if len(out) <= MAX_POSSIBLE else None
    if isinstance(expr, rasp.SequenceMap):
        sides = []
        for sub in (expr.fst, expr.snd):
            got = possible(link, sub.label, pos, n, depth + 1)
            sides.append(got if got is not None else _global(link, sub.label))
        if any(x is None for x in sides) or len(sides[0]) * len(sides[1]) > MAX_POSSIBLE:
            return None
        try:
            return {None if (x is None or y is None) else expr.f(x, y) for x in sides[0] for y in sides[1]}
        except Exception:  # noqa: BLE001 - no claim
            return None
    if isinstance(expr, rasp.SOp):
        return _global(link, expr.label)
    return None
