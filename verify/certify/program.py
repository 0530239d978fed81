"""The program check: every head's and MLP's tables equal the RASP expression it implements.

The float32 part of the certificate (:mod:`.heads`, :mod:`.mlps`, :mod:`.report`) proves that
the model decodes like the exact hardmax evaluation of *its own weights*. This module closes
the loop to the RASP program (SPEC §6): with the abstract state before each sublayer (every
ideal vector each block can hold), it compares the sublayer's exact tables with the
semantics of the expression that the compiler built it from (:class:`ProgramLink`, kept on
the model), on every value of the value sets:

* **Selection.** For a head implementing ``Aggregate(Select(keys, queries, predicate), sop)``
  (tracr) the reference selects key j for query i when ``predicate(keys[j], queries[i])``,
  and BOS when nothing is selected. For a hand-built head (:mod:`constructions.nodes`) the
  reference is its kind's semantics (:mod:`constructions.reference`): a fixed position map,
  the position a pointer holds, or the latest key matching the query (up to a stored
  pointer, over the allowed key positions). The hardmax evaluation picks the highest score
  present and BOS is always present, so it equals the reference on EVERY input exactly when,
  for every query combination: every selected key scores above every BOS alternative, every
  other key below every BOS alternative, and (latest-match heads) a selected key at a later
  position above every selected key at an earlier one. Scores are exact up to the table's
  float64 rounding ``eps``; a comparison within 2 eps fails. Keys a causal model may hide
  from the query: a tracr selector is bidirectional (RASP), so a selected key that can stand
  after the query is a failure; a hand-built head's range is the visible prefix by design
  (its kind says causal) or must be visible by the query's guard.
* **Values.** The head's OV circuit, on every ideal vector the value side can read at a
  regular key, writes the output SOp's value of that key's value (the aggregated SOp's value,
  or the read's value map of it; a pointer read writes the key's position), and on every
  BOS alternative the no-match value (the Aggregate's default, the read's BOS value).
* **MLPs.** For a ``Map`` or ``SequenceMap`` every input combination's exact output decodes to
  ``f`` of its decoded inputs (None where an input is None, as tracr's evaluator does).
* **Read-out.** Every ideal vector of the output SOp decodes through the unembedding to the
  value it holds.

A categorical vector decodes to the value of its one entry above 1/2, or to None when every
entry is below 1/2 (the read-out's rule); anything else is a failure. The decoded values of
the ideal vectors are, by induction over the sublayers, the program's values: the embedding
holds tokens and indices exactly, and every sublayer maps decoded values as its expression
does. Together with the float32 part, the float32 forward decodes to the RASP program's
output at every position of every input up to N.

A block with no semantics here (numerical aggregates and MLPs, SelectorWidth, set-valued and
scored heads, memorised read-outs, angle-coded positions, a model with no program linked)
raises :class:`NoSemantics`: the certificate then does not claim the program.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
from tracr.rasp import rasp

from depthcraft.constructions.model import BOS, PAD, CompiledModel, ProgramLink
from depthcraft.constructions.nodes import POSITION, HeadRead, HeadSpec, apply_fn, is_pointer
from depthcraft.verify.certify.state import MAX_TUPLES, Block, State, TooLarge, Unclean


class NoSemantics(Exception):
    """A sublayer implements no expression whose tables this module can check (the reason)."""


class _Ambiguous(Exception):
    pass


_MISSING = object()


def _value(v: Any) -> Any:
    """JSON-friendly value for a witness."""
    return v.item() if isinstance(v, np.generic) else v


# ------------------------------------------------------------------------------ decoding


@dataclasses.dataclass
class Decoder:
    """Decodes a block's vector to the RASP value it holds (see the module docstring).

    ``labels[name]``: the value of each row of block ``name`` (:data:`_MISSING` where the
    row has no categorical value in the program).
    """

    link: ProgramLink
    labels: Dict[str, List[Any]]

    @classmethod
    def of(cls, model: CompiledModel, blocks: Dict[str, Block]) -> "Decoder":
        link = model.program
        special = {f"{rasp.tokens.label}:{BOS}": BOS, f"{rasp.tokens.label}:{PAD}": PAD}  # never a regular value
        labels = {name: [link.values.get(model.residual_labels[r], (None, special.get(model.residual_labels[r],
                                                                                        _MISSING)))[1]
                         for r in b.rows] for name, b in blocks.items()}
        if model.meta.get("positions") == "angle":  # pointers are (cos, sin) angles there, not one-hot values
            for name in labels:
                if is_pointer(link.nodes.get(name)):
                    labels[name] = [_MISSING] * len(labels[name])
        return cls(link, labels)

    def decodable(self, name: str) -> bool:
        """Whether every row of block ``name`` is a categorical value of the program."""
        return all(v is not _MISSING for v in self.labels[name])

    def decode(self, name: str, vec: np.ndarray) -> Any:
        """The value block ``name`` holds as ``vec``; None when every entry is below 1/2.

        Raises:
            NoSemantics: the block is not a categorical SOp of the program.
            _Ambiguous: several entries at or above 1/2, or one at exactly 1/2.
        """
        if not self.decodable(name):
            raise NoSemantics(f"block {name!r} is not a categorical SOp of the program (numerical or angle-coded)")
        on = np.flatnonzero(np.asarray(vec) >= 0.5)
        if len(on) == 0:
            return None
        if len(on) > 1 or vec[on[0]] == 0.5:
            raise _Ambiguous(name)
        return self.labels[name][int(on[0])]


# --------------------------------------------------------------------------- enumeration


@dataclasses.dataclass
class Combos:
    """Every combination of the ideal vectors of some blocks, at BOS (kind 0) or regular positions.

    x: [m, len(rows)] the residual restricted to ``rows``; kind: [m]; position: [m] model
    position (-1 when no position is enumerated); guard: [m] (see :class:`state.State`);
    index: block name -> [m] index of the block's vector (into ``state.sets[kind]``, or the
    position for a position block).
    """

    x: np.ndarray
    kind: np.ndarray
    position: np.ndarray
    guard: np.ndarray
    index: Dict[str, np.ndarray]


def combos(state: State, blocks: Dict[str, Block], names: Sequence[str], rows: np.ndarray, n: int,
           positions: bool = False) -> Combos:
    """Enumerate the full vectors of the blocks ``names`` (no merging), placed on ``rows``.

    Positions 1..n are enumerated (0 at BOS) when a position block is among ``names`` or
    ``positions`` is set; the position blocks hold their embedding row there.

    Raises:
        TooLarge: more than :data:`state.MAX_TUPLES` combinations.
    """
    where = {int(r): i for i, r in enumerate(rows)}
    pos_names = [nm for nm in names if blocks[nm].kind == "position"]
    val_names = [nm for nm in names if blocks[nm].kind != "position"]
    out = []
    for kind in (0, 1):
        ps = (np.array([0]) if kind == 0 else np.arange(1, n + 1)) if (pos_names or positions) else np.array([-1])
        sizes = [len(ps)] + [len(state.sets[kind][nm]) for nm in val_names]
        if int(np.prod(sizes, dtype=np.int64)) > MAX_TUPLES:
            raise TooLarge(f"{int(np.prod(sizes, dtype=np.int64))} combinations of {list(names)}")
        grid = [g.ravel() for g in np.meshgrid(*[np.arange(s) for s in sizes], indexing="ij")]
        m = len(grid[0])
        x = np.zeros((m, len(rows)))
        pos = ps[grid[0]]
        guard = np.maximum(pos, kind)
        index = {}
        for nm in pos_names:
            b = blocks[nm]
            cols = [where[int(r)] for r in b.rows if int(r) in where]
            sel = [j for j, r in enumerate(b.rows) if int(r) in where]
            x[:, cols] = state.pos[nm][np.maximum(pos, 0)][:, sel]
            index[nm] = pos
        for nm, g in zip(val_names, grid[1:]):
            b = blocks[nm]
            cols = [where[int(r)] for r in b.rows if int(r) in where]
            sel = [j for j, r in enumerate(b.rows) if int(r) in where]
            x[:, cols] = state.sets[kind][nm][g][:, sel]
            guard = np.maximum(guard, state.guard[kind][nm][g])
            index[nm] = g
        out.append((x, np.full(m, kind), pos, guard, index))
    x = np.concatenate([o[0] for o in out])
    index = {nm: np.concatenate([o[4][nm] for o in out]) for nm in names}
    return Combos(x, np.concatenate([o[1] for o in out]), np.concatenate([o[2] for o in out]),
                  np.concatenate([o[3] for o in out]), index)


def _read_blocks(blocks: Dict[str, Block], rows: np.ndarray, w: np.ndarray) -> List[str]:
    """The blocks with a row in ``rows`` that ``w`` [len(rows), e] reads (a non-zero row)."""
    live = set(int(r) for r in rows[np.abs(np.asarray(w)).sum(1) > 0])
    return [nm for nm, b in blocks.items() if live & set(int(r) for r in b.rows)]


class _Values:
    """The RASP value of an SOp in a combination: its block's decoded vector, or the position's index."""

    def __init__(self, state: State, blocks: Dict[str, Block], dec: Decoder, c: Combos):
        self.state, self.blocks, self.dec, self.c = state, blocks, dec, c

    def of(self, label: str, i: int) -> Any:
        b = self.blocks.get(label)
        if b is None:
            raise NoSemantics(f"the SOp {label!r} has no residual block")
        j = int(self.c.index[label][i])
        vec = self.state.pos[label][j] if b.kind == "position" else self.state.sets[int(self.c.kind[i])][label][j]
        return self.dec.decode(label, vec)


# ----------------------------------------------------------------------------- the heads


def head_node(link: ProgramLink, out_blocks: Sequence[str]) -> Any:
    """The one expression a head implements (an Aggregate or a :class:`HeadSpec`), from the blocks it writes.

    Raises:
        NoSemantics: the head writes blocks of no expression, or of several.
    """
    found = []
    for nm in out_blocks:
        expr = link.nodes.get(nm)
        impl = expr.head if isinstance(expr, HeadRead) else expr if isinstance(expr, rasp.Aggregate) else None
        if impl is None:
            what = type(expr).__name__ if expr is not None else "no expression of the program"
            raise NoSemantics(f"the head writes {nm!r} ({what}): no selection semantics to check")
        if all(impl is not f for f in found):
            found.append(impl)
    if len(found) != 1:
        raise NoSemantics(f"the head writes the outputs of {len(found)} expressions")
    return found[0]


@dataclasses.dataclass
class _Ref:
    """The reference selection of one head: which keys a query selects, and how they rank."""

    query_sops: List[str]        # SOp labels the query side needs
    key_sops: List[str]          # SOp labels the key side needs
    query_position: bool         # the selection depends on the query's position
    key_position: bool           # ... on the key's position
    select: Callable[[Dict[str, Any], int, Dict[str, Any], int], bool]  # (q values, i, k values, j)
    latest: bool                 # among selected keys the latest wins
    tracr: bool                  # a RASP selector (bidirectional): no key may hide behind the mask
    prefix: bool = False         # the reference's range is the visible prefix (a causal head kind)
    single: bool = False         # one position is selected, and it exists whenever it is visible


def _reference(expr: Any, causal: bool) -> _Ref:
    """The :class:`_Ref` of an Aggregate or a hand-built head.

    Raises:
        NoSemantics: numerical or compound-selector Aggregates, set-valued, scored,
            matching and memorising heads.
    """
    if isinstance(expr, rasp.Aggregate):
        if not rasp.is_categorical(expr):
            raise NoSemantics(f"numerical Aggregate {expr.label}: a mean over the selected keys is not "
                              f"checked against the program here")
        sel = expr.selector
        if not isinstance(sel, rasp.Select):
            raise NoSemantics(f"Aggregate {expr.label} uses a {type(sel).__name__}, not a Select")
        keys, queries = sel.keys.label, sel.queries.label
        return _Ref([queries], [keys], False, False,
                    lambda qv, i, kv, j: bool(sel.predicate(kv[keys], qv[queries])), False, True)
    head: HeadSpec = expr
    kind = head.kind
    if head.attention != "softmax":
        raise NoSemantics(f"{kind} head {head.label} is a {head.attention} head")
    if kind.selects == "position":
        target = head.spec.target

        def pick(qv, i, kv, j):
            t = target(i)
            return t is not None and 1 <= t <= i and j == t
        return _Ref([], [], True, True, pick, False, False, single=True)
    if kind.selects == "pointer":
        ptr = head.query.label
        return _Ref([ptr], [], False, True,
                    lambda qv, i, kv, j: isinstance(qv[ptr], (int, np.integer)) and j == qv[ptr] >= 1, False, False,
                    single=True)
    if kind.selects == "search":
        q, k = head.query.label, head.key.label
        p = head.pointer.label if kind.pointer else None
        allowed = head.key_positions if kind.key_positions else None

        def pick(qv, i, kv, j):
            if qv[q] is None or kv[k] is None:
                return False
            if p is not None and not (isinstance(qv[p], (int, np.integer)) and 1 <= j <= qv[p]):
                return False
            if allowed is not None and not allowed(j):
                return False
            return bool(head.predicate(kv[k], qv[q]))
        return _Ref([q] + ([p] if p else []), [k], False, True, pick, True, False, kind.causal is True)
    raise NoSemantics(f"{kind} head {head.label}: no table semantics for a '{kind.selects}' head here")


def _visible(cq: Combos, i: int, ck: Combos, j: int, causal: bool) -> str:
    """'always', 'never' or 'maybe': whether query combination i sees key combination j."""
    if not causal or ck.kind[j] == 0:
        return "always"
    kp, qp = int(ck.position[j]), int(cq.position[i])
    if qp >= 0 and kp >= 0:
        return "always" if kp <= qp else "never"
    if kp >= 0 and kp <= cq.guard[i]:
        return "always"
    return "maybe"


def check_head(state: State, blocks: Dict[str, Block], dec: Decoder, spec, p: Dict[str, Any], h: int,
               n: int, causal: bool, eps: float) -> None:
    """Check head ``h``'s selection and OV tables against the expression it implements.

    Args:
        state: the abstract state before the sublayer.
        blocks: the residual blocks by name.
        dec: the program's decoder.
        spec: the sublayer's rows and ``qk_scale``; p: its weights.
        h: the head; n: N; causal: the model masks later keys.
        eps: the float64 rounding of the head's score table (:mod:`.heads`).
    Raises:
        Unclean: a table differs from the program (why, witness: query, key, expected, got).
        NoSemantics: the head implements nothing checkable here.
        TooLarge: too many combinations.
    """
    d = len(state.radius)
    q_rows, k_rows, v_rows = spec.rows("q_rows", d), spec.rows("k_rows", d), spec.rows("v_rows", d)
    out_rows = spec.rows("out_rows", d)
    wq = np.asarray(p["w_q"][h], np.float64) * float(spec.qk_scale)
    wk = np.asarray(p["w_k"][h], np.float64)
    wvo = np.asarray(p["w_v"][h], np.float64) @ np.asarray(p["w_o"][h], np.float64)
    written = [nm for nm, b in blocks.items() if np.isin(out_rows[np.abs(wvo).sum(0) > 0], b.rows).any()]
    expr = head_node(dec.link, written)
    ref = _reference(expr, causal)
    for nm in ref.query_sops + ref.key_sops:
        if nm not in blocks:
            raise NoSemantics(f"the SOp {nm!r} has no residual block")
    qn = sorted(set(_read_blocks(blocks, q_rows, wq)) | set(ref.query_sops))
    kn = sorted(set(_read_blocks(blocks, k_rows, wk)) | set(ref.key_sops))
    cq = combos(state, blocks, qn, q_rows, n, positions=ref.query_position)
    ck = combos(state, blocks, kn, k_rows, n, positions=ref.key_position)
    if ref.query_position and (cq.position[cq.kind == 1] < 0).any() or \
            ref.key_position and (ck.position[ck.kind == 1] < 0).any():
        raise NoSemantics("the head's selection depends on positions that are not enumerated")
    if len(cq.x) * len(ck.x) > 50_000_000:
        raise TooLarge(f"program table of {len(cq.x)} queries x {len(ck.x)} keys")
    s = (cq.x @ wq) @ (ck.x @ wk).T  # [nq, nk] exact scores up to eps
    qvals, kvals = _Values(state, blocks, dec, cq), _Values(state, blocks, dec, ck)
    bos_keys = np.flatnonzero(ck.kind == 0)
    reg_keys = np.flatnonzero(ck.kind == 1)
    kv_cache = {}
    for i in np.flatnonzero(cq.kind == 1):
        try:
            qv = {nm: qvals.of(nm, i) for nm in ref.query_sops}
        except _Ambiguous as e:
            raise Unclean(f"the query's {e} is no single value", {"query": _where(cq, i)})
        qi = int(cq.position[i])
        bos_hi, bos_lo = s[i, bos_keys].max(), s[i, bos_keys].min()
        chosen = []  # (position, score, key) of the selected keys
        sel, rest = [], list(bos_keys)  # single-position heads: the selected keys, every other key
        for j in reg_keys:
            if j not in kv_cache:
                try:
                    kv_cache[j] = {nm: kvals.of(nm, j) for nm in ref.key_sops}
                except _Ambiguous as e:
                    raise Unclean(f"the key's {e} is no single value", {"key": _where(ck, j)})
            kv = kv_cache[j]
            vis = _visible(cq, i, ck, j, causal)
            try:
                want = ref.select(qv, qi, kv, int(ck.position[j]))
            except Exception as e:  # the RASP predicate has no value here (tracr's Comparison on None)
                raise Unclean(f"the selector's predicate raises on (key {kv}, query {qv}): "
                              f"{type(e).__name__}: {e}", {"query": {**_where(cq, i), **_json(qv)},
                                                            "key": {**_where(ck, j), **_json(kv)}})
            witness = lambda: {"query": {**_where(cq, i), **_json(qv)},  # noqa: E731
                               "key": {**_where(ck, j), **_json(kv)}, "selects": bool(want)}
            if want and vis != "always" and not ref.prefix:
                raise Unclean(f"{_name(expr)}: the {'selector' if ref.tracr else 'reference'} selects a key "
                              f"that the causal mask hides (a later position)", witness())
            if vis == "never":
                continue
            if ref.single:  # the selected position exists: it must beat every other key, BOS included
                (sel if want else rest).append(int(j))
                continue
            if want and not s[i, j] > bos_hi + 2 * eps:
                raise Unclean(f"{_name(expr)}: a selected key does not score above BOS "
                              f"({s[i, j]:.4g} vs {bos_hi:.4g})", witness())
            if not want and not s[i, j] < bos_lo - 2 * eps:
                raise Unclean(f"{_name(expr)}: a key the program does not select scores at or above BOS "
                              f"({s[i, j]:.4g} vs {bos_lo:.4g})", witness())
            if want and ref.latest:
                chosen.append((int(ck.position[j]), float(s[i, j]), int(j)))
        if ref.latest and chosen:
            _check_latest(chosen, eps, expr, cq, i, ck)
        if ref.single:
            _check_single(s[i], sel, rest, eps, expr, cq, i, ck)
    _check_values(state, blocks, dec, expr, v_rows, out_rows, wvo, written, n)


def _check_single(s: np.ndarray, sel: List[int], rest: List[int], eps: float, expr, cq: Combos, i: int,
                  ck: Combos) -> None:
    """A single-position head: the selected keys (or BOS, when none) beat every other visible key."""
    win = sel or [j for j in rest if ck.kind[j] == 0]
    lose = [j for j in rest if j not in set(win)]
    if not lose:
        return
    lo, hi = s[win].min(), s[lose].max()
    if not lo > hi + 2 * eps:
        j = lose[int(np.argmax(s[lose]))]
        raise Unclean(f"{_name(expr)}: a key the reference does not attend to scores at or above the one it "
                      f"attends to ({hi:.4g} vs {lo:.4g})",
                      {"query": _where(cq, i), "key": _where(ck, j), "attends": _where(ck, win[0])})


def _check_latest(chosen, eps, expr, cq: Combos, i: int, ck: Combos) -> None:
    """Among a query's selected keys, every later position must score above every earlier one."""
    if any(pos < 0 for pos, _, _ in chosen):
        raise Unclean(f"{_name(expr)}: the key reads no position, so the latest match is not determined",
                      {"query": _where(cq, i)})
    chosen.sort()
    best_below, best_j = -np.inf, None
    k = 0
    while k < len(chosen):
        pos = chosen[k][0]
        group = [c for c in chosen[k:] if c[0] == pos]
        low = min(c[1] for c in group)
        if not low > best_below + 2 * eps:
            raise Unclean(f"{_name(expr)}: a later match does not score above an earlier one",
                          {"query": _where(cq, i), "later_key": _where(ck, min(group, key=lambda c: c[1])[2]),
                           "earlier_key": _where(ck, best_j)})
        top = max(group, key=lambda c: c[1])
        if top[1] > best_below:
            best_below, best_j = top[1], top[2]
        k += len(group)


def _check_values(state, blocks, dec, expr, v_rows, out_rows, wvo, written, n) -> None:
    """Every ideal value vector's OV write decodes to the expression's value (see the module docstring)."""
    if isinstance(expr, rasp.Aggregate):
        reads = [(expr.label, expr.sop, None, expr.default)]
    else:
        reads = []
        for nm in written:
            r = dec.link.nodes[nm]
            if r.multi:
                raise NoSemantics(f"the read {nm!r} is set-valued")
            reads.append((nm, r.read.source, r.read.fn, r.bos_value))
    sources = [src.label for _, src, _, _ in reads if src is not POSITION]
    need_pos = any(src is POSITION for _, src, _, _ in reads)
    vn = sorted(set(_read_blocks(blocks, v_rows, wvo)) | set(sources))
    cv = combos(state, blocks, vn, v_rows, n, positions=need_pos)
    out = cv.x @ wvo  # [m, Do]
    vals = _Values(state, blocks, dec, cv)
    for nm, src, fn, default in reads:
        cols = np.flatnonzero(np.isin(out_rows, blocks[nm].rows))
        where = np.searchsorted(blocks[nm].rows, out_rows[cols])
        for i in range(len(cv.x)):
            if cv.kind[i] == 0:
                want = default
            elif src is POSITION:
                want = apply_fn(fn, int(cv.position[i]))
            else:
                try:
                    want = apply_fn(fn, vals.of(src.label, i))
                except _Ambiguous as e:
                    raise Unclean(f"the value's {e} is no single value", {"value": _where(cv, i)})
            vec = np.zeros(len(blocks[nm].rows))
            vec[where] = out[i, cols]
            try:
                got = dec.decode(nm, vec)
            except _Ambiguous:
                got = [round(float(v), 4) for v in vec]
            if got is None and want is None or (got is not None and want is not None and got == want
                                                and not isinstance(got, list)):
                continue
            raise Unclean(f"{_name(expr)}: the OV circuit writes {nm} = {_value(got)!r} where the program "
                          f"has {_value(want)!r}", {"value": _where(cv, i), "expected": _value(want),
                                                    "got": _value(got)})


# ----------------------------------------------------------------------------- the MLPs


def check_mlp(state: State, blocks: Dict[str, Block], dec: Decoder, spec, p: Dict[str, Any], n: int) -> None:
    """Check one MLP sublayer's look-up tables against the Map / SequenceMap of every block it writes.

    Raises:
        Unclean: an output differs from the function (witness: input values, expected, got).
        NoSemantics: the MLP writes a block of another expression (SelectorWidth, numerical...).
        TooLarge: too many combinations.
    """
    d = len(state.radius)
    in_rows, out_rows = spec.rows("in_rows", d), spec.rows("out_rows", d)
    w1, b1 = np.asarray(p["w_1"], np.float64), np.asarray(p["b_1"], np.float64)
    w2, b2 = np.asarray(p["w_2"], np.float64), np.asarray(p["b_2"], np.float64)
    written = [nm for nm, b in blocks.items() if np.isin(out_rows, b.rows).any()]
    maps = []
    for nm in written:
        expr = dec.link.nodes.get(nm)
        if isinstance(expr, rasp.Map) and not isinstance(expr, rasp.SequenceMap):
            maps.append((nm, expr, [expr.inner.label]))
        elif isinstance(expr, rasp.SequenceMap):
            maps.append((nm, expr, [expr.fst.label, expr.snd.label]))
        else:
            what = type(expr).__name__ if expr is not None else "no expression of the program"
            raise NoSemantics(f"the MLP writes {nm!r} ({what}): no look-up semantics to check")
        if not rasp.is_categorical(expr):
            raise NoSemantics(f"the MLP writes the numerical SOp {nm!r}")
    names = sorted(set(_read_blocks(blocks, in_rows, w1)) | {s for _, _, ins in maps for s in ins})
    c = combos(state, blocks, names, in_rows, n)
    y = np.maximum(c.x @ w1 + b1, 0) @ w2 + b2
    vals = _Values(state, blocks, dec, c)
    for nm, expr, ins in maps:
        cols = np.flatnonzero(np.isin(out_rows, blocks[nm].rows))
        where = np.searchsorted(blocks[nm].rows, out_rows[cols])
        for i in np.flatnonzero(c.kind == 1):
            try:
                xs = [vals.of(s, i) for s in ins]
            except _Ambiguous as e:
                raise Unclean(f"the MLP's input {e} is no single value", {"input": _where(c, i)})
            try:
                want = None if any(x is None for x in xs) else expr.f(*xs)
            except Exception as e:  # the function has no value here: the program raises
                raise Unclean(f"{expr.label}: the function raises on {xs}: {type(e).__name__}: {e}",
                              {"input": dict(zip(ins, map(_value, xs)))})
            vec = np.zeros(len(blocks[nm].rows))
            vec[where] = y[i, cols]
            try:
                got = dec.decode(nm, vec)
            except _Ambiguous:
                got = [round(float(v), 4) for v in vec]
            if (got is None and want is None) or (not isinstance(got, list) and got is not None and got == want):
                continue
            raise Unclean(f"{expr.label}: the MLP writes {_value(got)!r} where the function gives {_value(want)!r}",
                          {"input": dict(zip(ins, map(_value, xs))), "expected": _value(want), "got": _value(got)})


# -------------------------------------------------------------------------- the read-out


def check_readout(model: CompiledModel, state: State, blocks: Dict[str, Block], dec: Decoder) -> None:
    """Every ideal vector of the output SOp decodes through the unembedding to the value it holds.

    Raises:
        Unclean: a read-out value differs (witness: expected, got).
        NoSemantics: the output is numerical, or the unembedding reads another block.
    """
    sink = dec.link.sink
    if sink not in blocks or not dec.decodable(sink):
        raise NoSemantics(f"the output SOp {sink!r} is not a categorical block")
    u = np.asarray(model.params["unembed"]["w"], np.float64)
    other = np.setdiff1d(np.flatnonzero(np.abs(u).sum(1) > 0), blocks[sink].rows)
    if len(other):
        raise NoSemantics("the read-out reads rows outside the output SOp")
    for vec in state.sets[1][sink]:
        want = dec.decode(sink, vec)
        logits = vec @ u[blocks[sink].rows]
        got = None if logits.max() < 0.5 else model.output_values[int(logits.argmax())]
        if not (got is None and want is None) and (got is None or want is None or got != want):
            raise Unclean(f"the read-out decodes {sink} = {_value(want)!r} as {_value(got)!r}",
                          {"expected": _value(want), "got": _value(got)})


# ------------------------------------------------------------------ causal selectors (no weights)


def causal_selector_failures(model: CompiledModel) -> List[Dict[str, Any]]:
    """RASP selectors that can select a key after the query, in a causal model (from the value sets).

    A RASP ``Select`` is bidirectional; a causal compile masks later keys, so such a selector
    computes something else (SPEC §8). Decided on the program alone: positions are known for
    ``indices`` (RASP index = position - 1), any other SOp may hold any of its values at any
    position. Needs no certificate.

    Args:
        model: a compiled model (its :attr:`~constructions.model.CompiledModel.program`).
    Returns:
        One ``{"selector", "key", "query", "why"}`` per such selector (a witness pair of values;
        ``key``/``query`` are RASP values, indices where the SOp is ``indices``); [] for a
        bidirectional model or a model with no program linked.
    """
    link = model.program
    if link is None or not model.arch.causal:
        return []
    n = int(model.max_seq_len)
    values: Dict[str, List[Any]] = {}
    for name, v in link.values.values():
        values.setdefault(name, []).append(v)
    out = []
    for label, expr in link.nodes.items():
        if not isinstance(expr, rasp.Select):
            continue
        ks, qs = expr.keys, expr.queries
        kvals = list(range(n)) if isinstance(ks, rasp.IndicesType) else values.get(ks.label)
        qvals = list(range(n)) if isinstance(qs, rasp.IndicesType) else values.get(qs.label)
        if kvals is None or qvals is None:
            continue
        for k, q in itertools.product(kvals, qvals):
            if isinstance(ks, rasp.IndicesType) and isinstance(qs, rasp.IndicesType):
                later = k > q
            elif isinstance(ks, rasp.IndicesType):
                later = k >= 1
            elif isinstance(qs, rasp.IndicesType):
                later = q < n - 1
            else:
                later = n >= 2
            if not later:
                continue
            try:
                hit = bool(expr.predicate(k, q))
            except Exception:  # no value: the table check of the certificate names it
                continue
            if hit:
                out.append({"selector": label, "key": _value(k), "query": _value(q),
                            "why": "causal model: the selector selects a key after the query, which the mask hides"})
                break
    return out


# -------------------------------------------------------------------------------- helpers


def _where(c: Combos, i: Optional[int]) -> Dict[str, Any]:
    if i is None:
        return {}
    return {"position": "BOS" if c.kind[i] == 0 else (int(c.position[i]) if c.position[i] >= 0 else "any")}


def _json(vals: Dict[str, Any]) -> Dict[str, Any]:
    return {k: _value(v) for k, v in vals.items()}


def _name(expr: Any) -> str:
    if isinstance(expr, rasp.Aggregate):
        return f"Aggregate {expr.label}"
    return f"{expr.kind} head {expr.label}"
