"""Compile-time dedupe: identical SOps of a RASP program are stored once in the residual stream.

tracr gives every SOp of the expression graph its own residual subspace, even when two
SOps are the same expression written twice. In the pointer-doubling program for k = 8
(:func:`depthcraft.rasp_programs.khop.khop_doubling`) the doubled pointer ``find2`` and the
partial pointer ``R1`` are both "read ``find1`` at the position ``find1`` holds" (bit 0 of
k - 1 is 1, so the partial pointer advances exactly like the doubled one): two one-hot
blocks of N + 1 directions holding the same values.

:func:`dedupe_program` hashes the expression graph structurally, bottom-up, and returns a
program in which each class of identical expressions is one object (the first met in
tracr's own child order; the output SOp when it is in the class). The rest of the graph is
copied with its children replaced; the input program is not changed, and nodes keep their
labels, so residual directions keep their names. Only the residual width can shrink:
every attention and MLP block is still built from the same expressions, so the depth,
the heads and the computed function are those of the input program.

Two expressions are identical when they have the same type, the same (deduped) children,
the same encoding and equal non-expression fields: numbers, strings, enums and tuples by
value; functions when they are the same object, or the same code with the same defaults
and closure values captured from the same place. Anything else compares by identity, so the
dedupe never merges two SOps that could differ (it may miss some that would not).
Names are not part of the key: ``R1`` is stored under ``find2``'s directions.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import types
from typing import Any, Dict, List, Tuple

from tracr.rasp import rasp

from depthcraft.constructions.nodes import HeadRead, HeadSpec, Read

#: Fields of a :class:`~constructions.nodes.HeadSpec` that are not part of its identity.
_HEAD_IGNORED = {"_annotations", "unique_id", "reads", "spec"}


@dataclasses.dataclass(frozen=True)
class Dedupe:
    """What :func:`dedupe_program` did.

    Attributes:
        program: the deduped program (the input object itself when nothing was merged).
        merged: ``(dropped, kept)`` names of the SOps stored once, in graph order
            (e.g. ``("R1", "find2")`` for ``khop_doubling`` at k = 8).
    """

    program: rasp.SOp
    merged: Tuple[Tuple[str, str], ...]


def _children(expr: rasp.RASPExpr) -> List[rasp.RASPExpr]:
    """Every expression ``expr`` refers to (for a head: its reads' sources and its spec's SOps too)."""
    return list(expr.children) + ([expr.head] if isinstance(expr, HeadRead) and expr.head not in expr.children
                                  else [])


def postorder(sink: rasp.RASPExpr) -> List[rasp.RASPExpr]:
    """Expressions reachable from ``sink``, children before parents, each once, in a deterministic order
    (iterative: no recursion limit on deep programs)."""
    order: List[rasp.RASPExpr] = []
    seen = set()
    stack = [(sink, False)]
    while stack:
        expr, done = stack.pop()
        if done:
            order.append(expr)
            continue
        if id(expr) in seen:
            continue
        seen.add(id(expr))
        stack.append((expr, True))
        for child in reversed(_children(expr)):
            if id(child) not in seen:
                stack.append((child, False))
    return order


class _Keys:
    """Structural keys: equal keys mean identical expressions (see the module docstring)."""

    def __init__(self) -> None:
        self.canon: Dict[int, rasp.RASPExpr] = {}  # id(expr) -> its class's kept expression
        self._objects: List[Any] = []              # keeps objects keyed by id alive

    def value(self, v: Any) -> Any:
        """A hashable key for one non-expression field value."""
        if isinstance(v, rasp.RASPExpr):
            return ("expr", id(self.canon.get(id(v), v)))
        if v is None or isinstance(v, (bool, int, float, str, bytes, enum.Enum)):
            return (type(v).__name__, v)
        if isinstance(v, (tuple, list)):
            return (type(v).__name__, tuple(self.value(x) for x in v))
        if isinstance(v, frozenset):
            try:
                return ("frozenset", frozenset(self.value(x) for x in v))
            except TypeError:
                return self._identity(v)
        if isinstance(v, Read):
            return ("Read", self.value(v.source), self.value(v.bos_value), self.value(v.fn))
        if isinstance(v, types.FunctionType):
            cells = tuple(self._cell(c) for c in (v.__closure__ or ()))
            return ("function", id(v.__code__), self.value(v.__defaults__), cells)
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            return (type(v).__qualname__, tuple((f.name, self.value(getattr(v, f.name)))
                                                for f in dataclasses.fields(v)))
        return self._identity(v)

    def _cell(self, cell: Any) -> Any:
        try:
            contents = cell.cell_contents
        except ValueError:  # an empty cell
            return ("empty",)
        return self.value(contents)

    def _identity(self, v: Any) -> Any:
        self._objects.append(v)
        return ("id", id(v))

    def of(self, expr: rasp.RASPExpr) -> Any:
        """The structural key of ``expr`` (its children must have been keyed before)."""
        if isinstance(expr, (rasp.TokensType, rasp.IndicesType)) or type(expr) is rasp.LengthType:
            return ("leaf", type(expr).__name__)
        # The encoding (forced: tracr fills it lazily) and every other annotation but the name.
        encoding = expr.annotations["encoding"] if isinstance(expr, rasp.SOp) else None
        notes = tuple((k, self.value(v)) for k, v in sorted(expr.annotations.items())
                      if k not in ("name", "encoding"))
        encoding = (encoding, notes)
        if isinstance(expr, HeadRead):
            return ("HeadRead", self.value(expr.head), self.value(expr.read), self.value(encoding))
        if isinstance(expr, HeadSpec):
            fields = tuple((k, self.value(v)) for k, v in sorted(vars(expr).items()) if k not in _HEAD_IGNORED)
            reads = tuple(self.value(r) for r in expr.reads)
            return ("HeadSpec", fields, reads, self.value(expr.spec))
        fields = tuple((k, self.value(v)) for k, v in sorted(vars(expr).items())
                       if k not in ("_annotations", "unique_id"))
        return (type(expr).__qualname__, fields, self.value(encoding))


def _rebuilt(expr: rasp.RASPExpr, canon: Dict[int, rasp.RASPExpr]) -> rasp.RASPExpr:
    """``expr`` with every referenced expression replaced by its kept one (a copy; same label)."""
    sub = lambda v: canon.get(id(v), v) if isinstance(v, rasp.RASPExpr) else v  # noqa: E731
    changes: Dict[str, Any] = {}
    for k, v in vars(expr).items():
        if isinstance(v, rasp.RASPExpr) and sub(v) is not v:
            changes[k] = sub(v)
    if isinstance(expr, HeadSpec):
        reads = [dataclasses.replace(r, source=sub(r.source)) if sub(r.source) is not r.source else r
                 for r in expr.reads]
        if any(a is not b for a, b in zip(reads, expr.reads)):
            changes["reads"] = reads
        spec = expr.spec
        if spec is not None and dataclasses.is_dataclass(spec):
            spec_changes = {}
            for f in dataclasses.fields(spec):
                v = getattr(spec, f.name)
                if isinstance(v, tuple):
                    new = tuple(tuple(sub(x) for x in p) if isinstance(p, tuple) else sub(p) for p in v)
                    if any(a is not b for a, b in zip(_flat(new), _flat(v))):
                        spec_changes[f.name] = new
            if spec_changes:
                changes["spec"] = dataclasses.replace(spec, **spec_changes)
    if not changes:
        return expr
    _ = expr.unique_id  # cache it on the instance, so that the copy keeps it (and the label)
    new = copy.copy(expr)
    new.__dict__.update(changes)
    new.annotations = dict(expr.annotations)  # re-bound to the copy
    return new


def _flat(v: Any) -> List[Any]:
    out: List[Any] = []
    for x in v:
        out.extend(_flat(x) if isinstance(x, tuple) else [x])
    return out


def dedupe_program(program: rasp.SOp) -> Dedupe:
    """Store identical expressions of ``program`` once (see the module docstring).

    Args:
        program: RASP program (output SOp), may use the hand-built heads.
    Returns:
        :class:`Dedupe`: the deduped program (labels kept) and the merged names. The
        input program is not modified.
    """
    order = postorder(program)
    keys = _Keys()
    first: Dict[Any, rasp.RASPExpr] = {}
    rebuilt: Dict[int, rasp.RASPExpr] = {}  # id(original) -> expression in the new program
    merged: List[Tuple[str, str]] = []
    for expr in order:
        key = keys.of(expr)
        # The output SOp is never dropped (the model's read-out keeps its name).
        if key in first and expr is not program:
            kept = first[key]
            keys.canon[id(expr)] = kept
            rebuilt[id(expr)] = rebuilt[id(kept)]
            if isinstance(expr, rasp.SOp):
                merged.append((expr.name, kept.name))
            continue
        first.setdefault(key, expr)
        keys.canon[id(expr)] = first[key]
        rebuilt[id(expr)] = _rebuilt(expr, rebuilt)
    if not merged:
        return Dedupe(program, ())
    return Dedupe(rebuilt[id(program)], tuple(merged))


__all__ = ["Dedupe", "dedupe_program", "postorder"]
