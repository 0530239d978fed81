"""Reference (hardmax) semantics of RASP programs with the hand-built heads.

:func:`evaluate` runs a RASP program, standard primitives (tracr's evaluator) and
hand-built heads alike, on one input: every softmax head attends to exactly the
key its scores are built to pick (the hardmax limit, the semantics the papers'
constructions assume), every ReLU head to every selected key with weight 1.
The compiled model is checked against this semantics (and against the task's
own reference) by :mod:`verify`. Positions follow :mod:`constructions.nodes`:
model position 0 = BOS, input tokens at 1..N, pointer 0 = BOS = ⊥.
"""

from __future__ import annotations

import weakref
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
from tracr.rasp import rasp

from depthcraft.constructions.errors import CompileError
from depthcraft.constructions.nodes import (POSITION, HeadRead, HeadSpec, MatchSpec, MemorySpec, ScoreSpec, SetMeet,
                                            apply_fn)

#: Attended model positions of one head: for each query position 1..n, a list of key positions.
Attended = List[List[int]]


def attended_keys(head: HeadSpec, ev: "Evaluator", xs: Sequence[Any]) -> Attended:
    """Model positions each query position 1..n attends to under the head's reference semantics.

    One position per query for softmax heads (0 = BOS when nothing else is selected);
    for ReLU heads every selected key (weight 1 each), possibly none.

    Raises:
        CompileError: the head has no attended position (a ``memorise`` read-out).
    """
    select = _ATTENDED.get(head.kind.selects)
    if select is None:
        raise CompileError(f"a {head.kind} head has no attended position in its reference semantics")
    return select(head, ev, xs)


def _position_keys(head: HeadSpec, ev: "Evaluator", xs: Sequence[Any]) -> Attended:
    """``selects="position"``: query i attends to target(i) (BOS / nothing when outside 0..i)."""
    out = []
    for i in range(1, len(xs) + 1):
        t = head.spec.target(i)
        if t is None or not 0 <= t <= i:
            out.append([0] if head.attention == "softmax" else [])
        else:
            out.append([t])
    return out


def _pointer_keys(head: HeadSpec, ev: "Evaluator", xs: Sequence[Any]) -> Attended:
    """``selects="pointer"``: query i attends to the model position its pointer holds (BOS if none)."""
    n = len(xs)
    ptr = ev.evaluate(head.query, xs)
    return [[p if isinstance(p, int) and 0 <= p <= n else 0] for p in ptr]


def _search_keys(head: HeadSpec, ev: "Evaluator", xs: Sequence[Any]) -> Attended:
    """``selects="search"``: the latest key j with predicate(key[j], query[i]) in the head's range, else BOS.

    The range: model positions 1..p(i) for a head with a stored pointer p (BOS when p is
    0 or missing), the allowed ``key_positions`` among 1..n for such a head, else 1..i.
    """
    n = len(xs)
    kind = head.kind
    q = ev.evaluate(head.query, xs)
    k = ev.evaluate(head.key, xs)
    if kind.pointer:
        ptr = ev.evaluate(head.pointer, xs)
        # RASP index i is model position i+1; search model positions 1..min(p, i+1).
        upto = [min(p, i + 1) if isinstance(p, int) and p > 0 else 0 for i, p in enumerate(ptr)]
    elif kind.causal is False:
        upto = [n] * n
    else:  # causal: up to the query itself
        upto = [i + 1 for i in range(n)]
    allowed = [bool(head.key_positions(j + 1)) for j in range(n)] if kind.key_positions else [True] * n
    out = []
    for i in range(n):
        best = 0
        if q[i] is not None:
            for j in range(upto[i] - 1, -1, -1):
                if not allowed[j]:
                    continue
                if k[j] is not None and head.predicate(k[j], q[i]):
                    best = j + 1
                    break
        out.append([best])
    return out


def _same(a: Any, b: Any) -> bool:
    """Equality of two SOp values; None never equals anything, sets compare as sets (None = empty)."""
    if isinstance(a, frozenset) or isinstance(b, frozenset):
        return (a or frozenset()) == (b or frozenset())
    return a is not None and b is not None and a == b


def _match_keys(head: HeadSpec, ev: "Evaluator", xs: Sequence[Any]) -> Attended:
    """``selects="match"``: keys j <= i in the window agreeing on every pair; the last, first or all."""
    spec: MatchSpec = head.spec
    vals = [(ev.evaluate(q, xs), ev.evaluate(k, xs)) for q, k in spec.pairs]
    out = []
    for i in range(1, len(xs) + 1):
        hits = [j for j in range(1, i + 1)
                if (spec.where is None or spec.where(i, j))
                and all(_same(qv[i - 1], kv[j - 1]) for qv, kv in vals)]
        if spec.select == "all":
            out.append(hits)
        else:
            out.append([(hits[-1] if spec.select == "last" else hits[0]) if hits else 0])
    return out


def _union_keys(head: HeadSpec, ev: "Evaluator", xs: Sequence[Any]) -> Attended:
    """``selects="union"``: every key j (1..n, after the query too) with predicate(key[j], q) for the query
    value q, or for some element q of a set-valued query; BOS (softmax) or nothing (ReLU) when none."""
    q = ev.evaluate(head.query, xs)
    k = ev.evaluate(head.key, xs)
    out = []
    for i in range(len(xs)):
        qi = q[i]
        elements = () if qi is None else (qi if isinstance(qi, frozenset) else (qi,))
        hits = [j + 1 for j in range(len(xs))
                if k[j] is not None and any(head.predicate(k[j], e) for e in elements)]
        out.append(hits or ([0] if head.attention == "softmax" else []))
    return out


def term_values(side: Any, ev: "Evaluator", xs: Sequence[Any]) -> Tuple[List[Any], Any]:
    """Values of one side of a score term at positions 1..n, and its value at BOS.

    POSITION gives model positions 1..n (BOS: none), ``rasp.tokens`` the tokens (BOS: none),
    a head read its values and its BOS value, any other SOp its values (BOS: none).
    """
    if side is POSITION:
        return list(range(1, len(xs) + 1)), None
    vals = list(ev.evaluate(side, xs))
    return vals, (side.bos_value if isinstance(side, HeadRead) else None)


def score_table(head: HeadSpec, ev: "Evaluator", xs: Sequence[Any]) -> List[List[float]]:
    """``selects="score"``: scores[i-1][j] of key j = 0 (BOS) .. n for query i = 1..n (units of hardness).

    Row i starts at ``bos_score`` for BOS and 0 elsewhere, and each term in order adds
    ``float(score(query value at i, key value at j))`` where both values exist. Each distinct
    value pair is scored once (kept per term across calls, :data:`_TERM_SCORES`); the additions
    are numpy's, in the same order, so the sums are the same floats as one addition at a time.
    """
    spec: ScoreSpec = head.spec
    n = len(xs)
    table = np.zeros((n, n + 1))
    table[:, 0] = spec.bos_score
    for term in spec.terms:
        qv, _ = term_values(term.query, ev, xs)
        kv, kbos = term_values(term.key, ev, xs)
        qd, qi = _distinct(qv)
        kd, ki = _distinct([kbos] + kv)
        if not qd or not kd:
            continue
        tab = _TERM_SCORES.get(id(term))
        if tab is None:  # keyed by identity (a term's SOps are not hashable), dropped with the term
            tab = _TERM_SCORES[id(term)] = _TermScores(term.score)
            weakref.finalize(term, _TERM_SCORES.pop, id(term), None)
        vals = tab.scores(qd, kd)
        rows, cols = qi >= 0, ki >= 0
        add = np.zeros((n, n + 1))
        add[np.ix_(rows, cols)] = vals[np.ix_(qi[rows], ki[cols])]
        table += add
    return table.tolist()


class _TermScores:
    """One term's ``float(score(q, k))`` for every query and key value seen so far (a growing table)."""

    def __init__(self, score: Callable[[Any, Any], float]):
        self.score = score
        self.q: Dict[Any, int] = {}
        self.k: Dict[Any, int] = {}
        self.qv: List[Any] = []
        self.kv: List[Any] = []
        self.m = np.zeros((0, 0))

    def scores(self, qd: Sequence[Any], kd: Sequence[Any]) -> np.ndarray:
        """[len(qd), len(kd)]: the term's score of every pair (values with their types)."""
        nq, nk = len(self.qv), len(self.kv)
        for vals, index, seen in ((qd, self.q, self.qv), (kd, self.k, self.kv)):
            for v in vals:
                if (type(v), v) not in index:
                    index[(type(v), v)] = len(seen)
                    seen.append(v)
        if len(self.qv) > nq or len(self.kv) > nk:
            m = np.empty((len(self.qv), len(self.kv)))
            m[:nq, :nk] = self.m
            for a in range(len(self.qv)):
                for b in range(nk if a < nq else 0, len(self.kv)):
                    m[a, b] = float(self.score(self.qv[a], self.kv[b]))
            self.m = m
        return self.m[np.ix_([self.q[(type(v), v)] for v in qd], [self.k[(type(v), v)] for v in kd])]


#: Each ``scored_lookup`` term's scores (:class:`_TermScores`) by the term's id, kept while the term exists.
_TERM_SCORES: Dict[int, _TermScores] = {}


def _distinct(values: Sequence[Any]) -> Tuple[List[Any], np.ndarray]:
    """(distinct non-None values, [len(values)] index of each into them, -1 for None)."""
    seen: Dict[Any, int] = {}
    out, idx = [], np.full(len(values), -1, np.int64)
    for i, v in enumerate(values):
        if v is None:
            continue
        key = (type(v), v)
        j = seen.get(key)
        if j is None:
            j = seen[key] = len(out)
            out.append(v)
        idx[i] = j
    return out, idx


def _score_keys(head: HeadSpec, ev: "Evaluator", xs: Sequence[Any]) -> Attended:
    """``selects="score"``: the key 0..n with the highest score (the latest on a tie)."""
    out = []
    for row in score_table(head, ev, xs):
        best = max(row)
        out.append([max(j for j, v in enumerate(row) if v == best)])
    return out


#: Attended keys of each way of selecting (:attr:`HeadKind.selects`); "readout" heads attend to nothing.
_ATTENDED: Dict[str, Callable[[HeadSpec, "Evaluator", Sequence[Any]], Attended]] = {
    "position": _position_keys, "pointer": _pointer_keys, "search": _search_keys, "match": _match_keys,
    "union": _union_keys, "score": _score_keys}


class Evaluator(rasp.DefaultRASPEvaluator):
    """tracr's RASP evaluator, memoised, extended with the hand-built heads' semantics.

    ``evaluate(expr, xs)`` returns a list of length len(xs) (RASP positions, no BOS).
    """

    def __init__(self):
        super().__init__()
        self._eval_fn_by_expr_type[HeadRead] = self._eval_head_read
        self._eval_fn_by_expr_type[SetMeet] = self._eval_meet
        self._cache: Dict[str, Any] = {}

    def evaluate(self, expr, xs):
        key = expr.label
        if key not in self._cache:
            self._cache[key] = super().evaluate(expr, xs)
        return self._cache[key]

    def _eval_head_read(self, sop: HeadRead, xs):
        head, read = sop.head, sop.read
        if head.kind.selects == "readout":
            return self._eval_memory(head, xs)
        cache_key = "__attended__" + head.label
        if cache_key not in self._cache:
            self._cache[cache_key] = attended_keys(head, self, xs)
        att = self._cache[cache_key]
        if read.source is POSITION:
            src = list(range(1, len(xs) + 1))
        else:
            src = self.evaluate(read.source, xs)
        src = [apply_fn(read.fn, v) for v in src]
        at = lambda a: sop.bos_value if a == 0 else src[a - 1]  # noqa: E731
        if not sop.multi:
            return [at(a[0]) if a else None for a in att]
        out = []
        for a in att:  # set-valued: the union of what every attended key holds
            vals = set()
            for j in a:
                v = at(j)
                if isinstance(v, frozenset):
                    vals |= v
                elif v is not None:
                    vals.add(v)
            out.append(frozenset(vals))
        return out

    def _eval_meet(self, sop: SetMeet, xs):
        a, b = self.evaluate(sop.a, xs), self.evaluate(sop.b, xs)
        return [int(bool((x or frozenset()) & (y or frozenset()))) for x, y in zip(a, b)]

    def _eval_memory(self, head: HeadSpec, xs):
        spec: MemorySpec = head.spec
        out = [None] * len(xs)
        if len(xs) == spec.length:
            table = _MEMORY_TABLES.get(head)
            if table is None:  # once per head, not once per evaluated input
                table = _MEMORY_TABLES[head] = memory_table(spec)
            key = tuple(tuple(self.evaluate(k, xs)) for k in spec.keys)
            out[-1] = table.get(key)
        return out


#: memory_table of each memorise head, kept as long as the head exists (a reference evaluates many inputs).
_MEMORY_TABLES: "weakref.WeakKeyDictionary[HeadSpec, Dict[Any, Any]]" = weakref.WeakKeyDictionary()


def memory_keys(spec: MemorySpec) -> List[Tuple[Tuple[Any, ...], ...]]:
    """The key values of each example of a memorise head: one tuple (over positions) per key SOp."""
    out = []
    for ex in spec.examples:
        ev = Evaluator()
        out.append(tuple(tuple(ev.evaluate(k, list(ex))) for k in spec.keys))
    return out


def memory_table(spec: MemorySpec, keys: Optional[Sequence[Any]] = None) -> Dict[Any, Any]:
    """Key values of each example of a memorise head (see :func:`memory_keys`) -> its label.

    Raises:
        CompileError: two examples with equal key values have different labels.
    """
    table: Dict[Any, Any] = {}
    for key, lab in zip(memory_keys(spec) if keys is None else keys, spec.labels):
        if table.setdefault(key, lab) != lab:
            raise CompileError(f"memorise: examples with the same key values have labels {table[key]!r} and {lab!r}")
    return table


def evaluate(program: rasp.RASPExpr, xs: Sequence[Any]) -> List[Any]:
    """Evaluate a RASP program (standard or hand-built primitives) on one input.

    Args:
        program: the RASP expression.
        xs: input tokens (no BOS), length n.
    Returns:
        A list of n values (None where the program has no value).
    """
    return Evaluator().evaluate(program, list(xs))
