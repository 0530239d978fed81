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
  the position a pointer holds, the latest key matching the query (up to a stored pointer,
  over the allowed key positions), or the latest or first key agreeing on every pair in a
  window (``match``). The hardmax evaluation picks the highest score
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
entry is below 1/2 (the read-out's rule); an angle-coded pointer to the position whose
(cos, sin) it holds (within :data:`ANGLE_TOL`); anything else is a failure. Any fixed decoding
rule is sound here: the tables downstream are computed on the ideal vectors themselves, and
the decoded values only name which RASP value each vector stands for. The decoded values of
the ideal vectors are, by induction over the sublayers, the program's values: the embedding
holds tokens and indices exactly, and every sublayer maps decoded values as its expression
does. Together with the float32 part, the float32 forward decodes to the RASP program's
output at every position of every input up to N.

* **Scored look-ups** (:func:`_check_scored_head`): the weights' scores order every pair of
  keys as the reference's sum of terms does (a higher sum more than 2 eps above, an equal sum
  within 2 eps): the levels of the hardmax evaluation are the classes of equal sums, in order.
* **SelectorWidth** (:func:`_check_selector_width_head`): BOS and the selected keys score
  alike, every other key lower, BOS's value is 1 and every other 0, so the head's mean is
  1 / (w + 1); the MLP's input a decodes to the width w with 1 / a - 1 (within
  :data:`SW_TOL` of an integer, :func:`_widths`), and its output must decode to w (a
  numerical SelectorWidth: be within :data:`NUM_TOL` of w, :func:`_check_numerical_width`).
* **Numbers.** A numerical Aggregate's selected keys all score alike (one level: the mean is
  over all of them), and its OV writes each key's value (BOS: 0, the default); a Map from
  categorical SOps to a number and a LinearSequenceMap of numbers are compared with the
  function. Values match within :data:`NUM_TOL`; the deviation is recorded per SOp
  (``Decoder.num_dev``) and the read-out returns it for the report's ``atol`` comparison.
  A deviation of exactly 0 means the ideal values ARE the float64 values tracr's evaluator
  computes (a mean of values on a grid 2^-s has exact sums, so both divide the same sum by
  the same count; an MLP output equal to ``f`` of the same inputs is the same float).
* **Discretising MLPs** (tracr's Map of a numerical SOp, categorical or numerical output,
  :func:`program_inputs`): ``f`` may jump anywhere, so the MLP's output at the ideal input v'
  is compared with ``f(v)``, v the PROGRAM's value there, never ``f(v')``: v = v' where the
  deviation is exactly 0, else the one program value (``Decoder.num_vals``, a superset
  recorded as the checked sublayers compute them, :func:`mean_values`) within the deviation of
  v'; the float32 part (:func:`mlps.line_error`) bounds each interval around v' exactly.
* **BOS never attended**: where every query of a categorical Aggregate has a selected key
  that surely exists (its position, or the query's guard) and scores above BOS, BOS is the
  top of no query and its value is not compared with the default.

A block with no semantics here (a Map of a numerical SOp whose program value is not
determined by its ideal value, set-valued and select-all heads, memorised read-outs, a model with no
program linked) raises :class:`NoSemantics`: the certificate then does not claim the
program.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
from tracr.rasp import rasp

from depthcraft.constructions.model import BOS, PAD, CompiledModel, ProgramLink
from depthcraft.constructions.angles import position_features
from depthcraft.constructions.nodes import POSITION, HeadRead, HeadSpec, apply_fn, is_multi, is_pointer
from depthcraft.verify.certify.float32 import U64, gamma
from depthcraft.verify.certify.state import MAX_TUPLES, Block, State, TooLarge, Unclean, head_weights


class NoSemantics(Exception):
    """A sublayer implements no expression whose tables this module can check (the reason)."""


class _Ambiguous(Exception):
    """A vector that holds no single value (several entries at or above 1/2)."""


_MISSING = object()
#: An angle-coded pointer holds position p when its (cos, sin) is within this of p's (float32 rounding).
ANGLE_TOL = 1e-6
#: The decoded value of a vector that names no single value (several entries at or above 1/2).
AMBIGUOUS = object()


def rasp_value(v: Any) -> Any:
    """JSON-friendly value of a RASP value for a witness (a numpy scalar becomes a Python one)."""
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
    angles: Dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    #: set-valued SOps (:func:`constructions.nodes.is_multi`): a vector decodes to the set of the
    #: values whose entry is at or above 1/2 (a multi-hot), never to :data:`AMBIGUOUS`
    sets: frozenset = frozenset()
    ok: Dict[str, bool] = dataclasses.field(default_factory=dict)
    #: numerical SOp label -> bound on |ideal value - program value| (checked sublayers add to it)
    num_dev: Dict[str, float] = dataclasses.field(default_factory=dict)
    #: numerical SOp label -> the program's values it can hold at a regular position (a superset;
    #: :func:`_add_value`): each value as a float -> the distinct Python objects the program's
    #: evaluator holds for it (``True`` and ``1.0`` are one number, two objects); recorded only
    #: where the checked sublayer computes them from the program's own values
    num_vals: Dict[str, Dict[float, List[Any]]] = dataclasses.field(default_factory=dict)
    #: blocks decoded by argmax (the unembedding's rule): the value of the largest entry when it is
    #: >= 1/2 and strictly above every other, None when every entry is below 1/2 (a meet's [1, 2k])
    argmax: set = dataclasses.field(default_factory=set)

    def __post_init__(self):
        self.ok = {name: name in self.angles or all(v is not _MISSING for v in vals)
                   for name, vals in self.labels.items()}

    @classmethod
    def of(cls, model: CompiledModel, blocks: Dict[str, Block]) -> "Decoder":
        """The decoder of ``model``'s blocks, from ``model.program`` (must not be None): each row's
        value from its residual label, ``tokens:BOS``/``PAD`` as the reserved tokens, and in angle
        mode each pointer block's (cos, sin) table over positions 0..N."""
        link = model.program
        special = {f"{rasp.tokens.label}:{BOS}": BOS, f"{rasp.tokens.label}:{PAD}": PAD}  # never a regular value
        labels = {name: [link.values.get(model.residual_labels[r], (None, special.get(model.residual_labels[r],
                                                                                        _MISSING)))[1]
                         for r in b.rows] for name, b in blocks.items()}
        angle_tables = {}
        if model.meta.get("positions") == "angle":  # pointers are (cos, sin) of their position there
            feats = position_features(model.max_seq_len)
            for name in labels:
                if is_pointer(link.nodes.get(name)):
                    parts = [v if v in ("cos", "sin") else None for v in labels[name]]
                    labels[name] = [_MISSING] * len(labels[name])
                    if None not in parts:
                        angle_tables[name] = np.stack([feats[v] for v in parts], 1)  # [N + 1, rows]
        sets = frozenset(nm for nm in labels if nm not in angle_tables and is_multi(link.nodes.get(nm)))
        return cls(link, labels, angle_tables, sets=sets)

    def decodable(self, name: str) -> bool:
        """Whether every row of block ``name`` is a categorical value of the program."""
        return self.ok[name]

    def decode_rows(self, name: str, mat: np.ndarray) -> np.ndarray:
        """[m] object: the value each row of ``mat`` [m, len(block rows)] holds; None when every entry
        is below 1/2, :data:`AMBIGUOUS` when several are at or above it (or one is exactly 1/2).

        Raises:
            NoSemantics: the block is not a categorical SOp of the program.
        """
        if not self.decodable(name):
            raise NoSemantics(f"block {name!r} is not a categorical SOp of the program (numerical or angle-coded)")
        mat = np.asarray(mat, np.float64)
        if name in self.angles:  # the position whose angle it is (within float32 rounding), None for zero
            dist = np.abs(mat[:, None, :] - self.angles[name][None, :, :]).max(2)  # [m, N + 1]
            out = np.empty(len(mat), object)
            near = dist.argmin(1)
            for i in range(len(mat)):
                out[i] = int(near[i]) if dist[i, near[i]] < ANGLE_TOL else \
                    None if np.abs(mat[i]).max(initial=0) == 0 else AMBIGUOUS
            return out
        on = mat >= 0.5
        if name in self.sets:  # a multi-hot: the set of its values (an entry of exactly 1/2 holds no value)
            labels = self.labels[name]
            out = np.empty(len(mat), object)
            for i in range(len(mat)):
                out[i] = frozenset(labels[c] for c in np.flatnonzero(on[i])) \
                    if not (mat[i] == 0.5).any() else AMBIGUOUS
            return out
        count = on.sum(1)
        top = mat.argmax(1) if mat.shape[1] else np.zeros(len(mat), int)
        out = np.empty(len(mat), object)
        labels = self.labels[name]
        if name in self.argmax:
            srt = np.sort(mat, 1)
            for i in range(len(mat)):
                best, second = srt[i, -1], (srt[i, -2] if mat.shape[1] > 1 else -np.inf)
                out[i] = None if best < 0.5 else labels[top[i]] if best > second else AMBIGUOUS
            return out
        for i in range(len(mat)):
            c = count[i]
            out[i] = None if c == 0 else labels[top[i]] if c == 1 and mat[i, top[i]] != 0.5 else AMBIGUOUS
        return out

    def decode(self, name: str, vec: np.ndarray) -> Any:
        """The value block ``name`` holds as ``vec`` [len(block rows)] (see :meth:`decode_rows`).

        Raises:
            NoSemantics: the block is not a categorical SOp of the program.
            _Ambiguous: no single value.
        """
        v = self.decode_rows(name, np.asarray(vec)[None, :])[0]
        if v is AMBIGUOUS:
            raise _Ambiguous(name)
        return v


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
           positions: bool = False, w: Optional[np.ndarray] = None, keep: Sequence[str] = (),
           project: bool = False) -> Combos:
    """Enumerate the vectors of the blocks ``names``, placed on ``rows``.

    ``project`` (with ``w``): ``x`` holds the projection x w [m, e] instead of x [m, len(rows)],
    summed block by block (each block's vectors projected once): the same products in another
    order of summation, so within the same gamma bound on its float64 rounding as x @ w (every
    order of summing len(rows) products is), without the [m, len(rows)] array.

    Positions 1..n are enumerated (0 at BOS) when a position block is among ``names`` or
    ``positions`` is set; the position blocks hold their embedding row there. Given the
    projection ``w`` [len(rows), e], the vectors of a block not in ``keep`` that ``w`` maps
    alike are one combination (the projection cannot tell them apart; the smallest guard is
    kept); the blocks in ``keep`` (whose values the check reads) are never merged.

    Raises:
        TooLarge: more than :data:`state.MAX_TUPLES` combinations.
    """
    hit = [nm for nm in names if nm in state.setdom]
    if hit:
        raise Unclean(f"the set-valued block {hit[0]!r} cannot be enumerated (see .sets)", {"block": hit[0]})
    where = {int(r): i for i, r in enumerate(rows)}
    pos_names = [nm for nm in names if blocks[nm].kind == "position"]
    val_names = [nm for nm in names if blocks[nm].kind != "position"]
    out = []
    for kind in (0, 1):
        ps = (np.array([0]) if kind == 0 else np.arange(1, n + 1)) if (pos_names or positions) else np.array([-1])
        reps = {}
        for nm in val_names:
            vecs, gs = state.sets[kind][nm], state.guard[kind][nm]
            if w is None or nm in keep:
                reps[nm] = (np.arange(len(vecs)), gs)
                continue
            b = blocks[nm]
            cols = [where[int(r)] for r in b.rows if int(r) in where]
            sel = [j for j, r in enumerate(b.rows) if int(r) in where]
            _, first, inv = np.unique(vecs[:, sel] @ w[cols], axis=0, return_index=True, return_inverse=True)
            gmin = np.full(len(first), np.iinfo(np.int64).max)
            np.minimum.at(gmin, inv.ravel(), gs)
            reps[nm] = (first, gmin)
        sizes = [len(ps)] + [len(reps[nm][0]) for nm in val_names]
        if int(np.prod(sizes, dtype=np.int64)) > MAX_TUPLES:
            raise TooLarge(f"{int(np.prod(sizes, dtype=np.int64))} combinations of {list(names)}")
        grid = [g.ravel() for g in np.meshgrid(*[np.arange(s) for s in sizes], indexing="ij")]
        m = len(grid[0])
        x = np.zeros((m, w.shape[1] if project else len(rows)))
        pos = ps[grid[0]]
        guard = np.maximum(pos, kind)
        index = {}
        for nm in pos_names:
            b = blocks[nm]
            cols = [where[int(r)] for r in b.rows if int(r) in where]
            sel = [j for j, r in enumerate(b.rows) if int(r) in where]
            if project:
                x += (state.pos[nm][:, sel] @ w[cols])[np.maximum(pos, 0)]
            else:
                x[:, cols] = state.pos[nm][np.maximum(pos, 0)][:, sel]
            index[nm] = pos
        for nm, g in zip(val_names, grid[1:]):
            b = blocks[nm]
            cols = [where[int(r)] for r in b.rows if int(r) in where]
            sel = [j for j, r in enumerate(b.rows) if int(r) in where]
            rep_, gmin = reps[nm]
            if project:
                x += (state.sets[kind][nm][rep_][:, sel] @ w[cols])[g]
            else:
                x[:, cols] = state.sets[kind][nm][rep_[g]][:, sel]
            guard = np.maximum(guard, gmin[g])
            index[nm] = rep_[g]
        out.append((x, np.full(m, kind), pos, guard, index))
    x = np.concatenate([o[0] for o in out])
    index = {nm: np.concatenate([o[4][nm] for o in out]) for nm in names}
    return Combos(x, np.concatenate([o[1] for o in out]), np.concatenate([o[2] for o in out]),
                  np.concatenate([o[3] for o in out]), index)


def read_blocks(blocks: Dict[str, Block], rows: np.ndarray, w: np.ndarray) -> List[str]:
    """The blocks with a row in ``rows`` that ``w`` [len(rows), e] reads (a non-zero row)."""
    live = set(int(r) for r in rows[np.abs(np.asarray(w)).sum(1) > 0])
    return [nm for nm, b in blocks.items() if live & set(int(r) for r in b.rows)]


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


def sop_column(state: State, blocks: Dict[str, Block], dec: Decoder, c: Combos, label: str) -> np.ndarray:
    """[m] object: the decoded value of SOp ``label`` in every combination (:data:`AMBIGUOUS` where no
    single value); each distinct vector is decoded once."""
    b = blocks.get(label)
    if b is None:
        raise NoSemantics(f"the SOp {label!r} has no residual block")
    out = np.empty(len(c.kind), object)
    for kind in (0, 1):
        rows = np.flatnonzero(c.kind == kind)
        if not len(rows):
            continue
        table = state.pos[label] if b.kind == "position" else state.sets[kind][label]
        idx = c.index[label][rows]
        uniq, inv = np.unique(idx, return_inverse=True)
        out[rows] = dec.decode_rows(label, table[uniq])[inv.ravel()]
    return out


def _value_codes(col: Sequence[Any]) -> Tuple[List[Any], np.ndarray]:
    """The distinct values of ``col`` (first occurrence order; values of different types are
    distinct, None is one value) and [len(col)] int each entry's index among them."""
    uniq, code = [], np.empty(len(col), int)
    where: Dict[Any, int] = {}
    for i, v in enumerate(col):
        key = (type(v).__name__, v) if v is not None else None
        if key not in where:
            where[key] = len(uniq)
            uniq.append(v)
        code[i] = where[key]
    return uniq, code


def pair_table(pred: Callable[[Any, Any], Any], keys: np.ndarray, queries: np.ndarray,
                skip_none: bool) -> Tuple[np.ndarray, Optional[Tuple[Any, Any, Exception]]]:
    """[nq, nk] bool ``pred(key, query)`` over the columns' values, each distinct pair evaluated once.

    ``skip_none``: a None key or query selects nothing (the hand-built heads); otherwise the
    predicate is called on None too (tracr's evaluator). Returns the table and the first
    (key, query, exception) where the predicate raises (there the table says False).
    """
    uk, kc = _value_codes(keys)
    uq, qc = _value_codes(queries)
    table = np.zeros((len(uq), len(uk)), bool)
    raised = None
    for a, q in enumerate(uq):
        for b_, k in enumerate(uk):
            if skip_none and (k is None or q is None):
                continue
            try:
                table[a, b_] = bool(pred(k, q))
            except Exception as e:  # the RASP predicate has no value here (tracr's Comparison on None)
                raised = raised or (k, q, e)
    return table[qc][:, kc], raised


@dataclasses.dataclass
class _Ref:
    """The reference selection of one head (see :func:`_reference`).

    how: ``"select"`` (a RASP Select: bidirectional), ``"position"`` (a position map),
    ``"pointer"`` (the position a pointer holds), ``"search"`` (the latest match), ``"match"``
    (the latest or first key agreeing on every pair, in a window).
    """

    how: str
    query_sops: List[str]
    key_sops: List[str]
    predicate: Optional[Callable[[Any, Any], Any]] = None
    target: Optional[Callable[[int], Optional[int]]] = None
    allowed: Optional[Callable[[int], bool]] = None
    prefix: bool = False  # the reference's range is the visible prefix (a causal head kind)
    where: Optional[Callable[[int, int], bool]] = None  # match: the window where(i, j)
    first: bool = False  # match: the earliest match wins (else the latest)

    @property
    def positions(self) -> bool:
        """Whether the selection depends on the key's position (and, for a map, the query's)."""
        return self.how != "select"


def _reference(expr: Any) -> _Ref:
    """The :class:`_Ref` of an Aggregate or a hand-built head.

    Raises:
        NoSemantics: numerical or compound-selector Aggregates, ReLU, set-valued, scored,
            matching and memorising heads.
    """
    if isinstance(expr, rasp.Aggregate):
        sel = expr.selector
        if not isinstance(sel, rasp.Select):
            raise NoSemantics(f"Aggregate {expr.label} uses a {type(sel).__name__}, not a Select")
        return _Ref("select", [sel.queries.label], [sel.keys.label], predicate=sel.predicate)
    head: HeadSpec = expr
    kind = head.kind
    if head.attention != "softmax":
        raise NoSemantics(f"{kind} head {head.label} is a {head.attention} head")
    if kind.selects == "position":
        return _Ref("position", [], [], target=head.spec.target)
    if kind.selects == "pointer":
        return _Ref("pointer", [head.query.label], [])
    if kind.selects == "search":
        qs = [head.query.label] + ([head.pointer.label] if kind.pointer else [])
        return _Ref("search", qs, [head.key.label], predicate=head.predicate,
                    allowed=head.key_positions if kind.key_positions else None, prefix=kind.causal is True)
    if kind.selects == "match" and head.spec.select in ("last", "first"):
        spec = head.spec
        return _Ref("match", [q.label for q, _ in spec.pairs], [k.label for _, k in spec.pairs],
                    where=spec.where, first=spec.select == "first", prefix=kind.causal is True)
    raise NoSemantics(f"{kind} head {head.label}: no table semantics for a '{kind.selects}' head here")


def _want(ref: _Ref, qv: Dict[str, np.ndarray], qpos: np.ndarray, kv: Dict[str, np.ndarray],
          kpos: np.ndarray, n: int) -> Tuple[np.ndarray, Optional[Tuple[Any, Any, Exception]]]:
    """[nq, nk] bool: the keys the reference selects for each query (regular combinations only)."""
    def as_int(col):
        return np.array([int(v) if isinstance(v, (int, np.integer)) and not isinstance(v, bool) else -1
                         for v in col], int)
    if ref.how == "select":
        return pair_table(ref.predicate, kv[ref.key_sops[0]], qv[ref.query_sops[0]], skip_none=False)
    if ref.how == "position":
        t = np.array([(-1 if (x := ref.target(int(i))) is None else int(x)) for i in qpos], int)
        ok = (t >= 1) & (t <= qpos)
        return ok[:, None] & (kpos[None, :] == t[:, None]), None
    if ref.how == "pointer":
        ptr = as_int(qv[ref.query_sops[0]])
        return (ptr[:, None] >= 1) & (kpos[None, :] == ptr[:, None]), None
    if ref.how == "match":  # every pair agrees (None never does), j <= i, inside the window
        want = (kpos >= 1)[None, :] & np.ones((len(qpos), 1), bool)
        for qs_, ks_ in zip(ref.query_sops, ref.key_sops):
            agree, _ = pair_table(lambda k, q: k == q, kv[ks_], qv[qs_], skip_none=True)
            want &= agree
        if ref.where is not None:
            want &= kpos[None, :] <= qpos[:, None]
            want &= np.array([[bool(ref.where(int(i), int(j))) if j >= 1 else False for j in kpos] for i in qpos])
        return want, None
    want, raised = pair_table(ref.predicate, kv[ref.key_sops[0]], qv[ref.query_sops[0]], skip_none=True)
    want &= (kpos >= 1)[None, :]
    if len(ref.query_sops) > 1:  # at or before a stored pointer
        ptr = as_int(qv[ref.query_sops[1]])
        want &= kpos[None, :] <= ptr[:, None]
    if ref.allowed is not None:
        want &= np.array([bool(ref.allowed(int(j))) for j in kpos])[None, :]
    return want, raised


def _visibility(cq: Combos, qi: np.ndarray, ck: Combos, kj: np.ndarray, causal: bool
                ) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """[nq, nk] bool each: the query surely sees the key (causal mask), surely does not, and the
    key's position surely exists.

    Surely exists: the key at or before the query's position (both known) or its guard
    (positions 0..guard exist and, in a causal model, are visible to the query).
    """
    qp, kp, g = cq.position[qi][:, None], ck.position[kj][None, :], cq.guard[qi][:, None]
    known = (qp >= 0) & (kp >= 0)
    present = (known & (kp <= qp)) | ((kp >= 0) & (kp <= g))
    if not causal:
        return np.ones(present.shape, bool), np.zeros(present.shape, bool), present
    return present, known & (kp > qp), present


#: The program check refuses a table (the full query x key table, or the grouped path's value and
#: position tables) of more entries than this: "program table too large", naming the size.
MAX_PROGRAM_TABLE = 50_000_000
#: :func:`check_head` checks a table of up to this many entries row by row in chunks of
#: :data:`CHUNK_ENTRIES` (its checks are per query row); beyond, "program table too large".
MAX_PROGRAM_ROWS_TABLE = 1_000_000_000
#: Above this many (query combination x key combination) entries, a head whose query side reads no
#: position block is checked on its grouped tables (:class:`_QueryGroups`); 0 forces every such head there.
GROUP_ENTRIES = 2_000_000


@dataclasses.dataclass
class _QueryGroups:
    """The regular queries of a head whose query side reads no position block, factored.

    A query combination is a value combination v (the ideal vectors of the query's blocks, as
    :func:`combos` without positions) at a position p in 1..n, with guard max(p, guard(v)). Its
    projection x W_Q, its decoded values, hence its score row and its reference values, depend on
    v ALONE: every member (v, p) has EXACTLY the same projected vector (the position blocks are not
    read), so one score row per v is every member's row. The position enters only through the
    position class pc = (p, guard): the causal mask, the guard's existence and, for some references,
    the window. Every check below is a statement over the (v, pc) pairs that occur; ``classes``
    lists them as products (value combinations with one guard and one set of reachable positions
    share their position classes), so each check is done on a [values x keys] table and a
    [position classes x keys] table, never on the [(v, pc) x keys] one.

    c: the value combinations; vi: the regular ones (indices into c); qv: the query SOps' decoded
    values at vi; pc_pos, pc_guard: [P] each position class; classes: (rows of vi, position classes).
    """

    c: Combos
    vi: np.ndarray
    qv: Dict[str, np.ndarray]
    pc_pos: np.ndarray
    pc_guard: np.ndarray
    classes: List[Tuple[np.ndarray, np.ndarray]]


def _query_groups(state: State, blocks: Dict[str, Block], dec: Decoder, qn: Sequence[str], q_rows: np.ndarray,
                  wq: np.ndarray, n: int, keep: Sequence[str], reach: bool) -> Optional[_QueryGroups]:
    """The :class:`_QueryGroups` of a query side (``c.x`` holds the projections x W_Q, :func:`combos`
    ``project``), or None where the query reads a position block (its projection then depends on the
    position: no grouping here).

    ``reach``: drop (v, p) where a value is one the SOp never holds at p (:func:`_reachable`).
    Raises:
        Unclean: a query SOp's vector is no single value.
        TooLarge: too many combinations (:func:`combos`).
    """
    if any(blocks[nm].kind == "position" for nm in qn):
        return None
    c = combos(state, blocks, qn, q_rows, n, positions=False, w=wq, keep=keep, project=True)
    vi = np.flatnonzero(c.kind == 1)
    qv = {nm: sop_column(state, blocks, dec, c, nm)[vi] for nm in keep}
    for nm, col in qv.items():
        bad = [i for i, v in enumerate(col) if v is AMBIGUOUS]
        if bad:
            raise Unclean(f"the query's {nm} is no single value", {"query": _where(c, int(vi[bad[0]]))})
    ok = np.ones((len(vi), n), bool)  # [v, p - 1]
    if reach and qv:
        for p_ in range(1, n + 1):
            ok[:, p_ - 1] = _reachable(dec.link, qv, np.full(len(vi), p_), n)
    g = c.guard[vi]
    pcs: Dict[Tuple[int, int], int] = {}
    sig: Dict[Tuple[int, bytes], List[int]] = {}
    for i in range(len(vi)):
        sig.setdefault((int(g[i]), ok[i].tobytes()), []).append(i)
    classes = []
    for (gv, okb), rows in sig.items():
        ps = np.flatnonzero(np.frombuffer(okb, bool)) + 1
        idx = [pcs.setdefault((int(p_), max(int(p_), gv)), len(pcs)) for p_ in ps]
        if idx:
            classes.append((np.array(rows), np.array(idx)))
    pc = np.array(sorted(pcs, key=pcs.get), int).reshape(-1, 2)
    return _QueryGroups(c, vi, qv, pc[:, 0], pc[:, 1], classes)


#: The grouped program check computes its value conditions on chunks of value rows of at most this many
#: entries (rows x keys), so its memory stays bounded whatever the number of value combinations.
CHUNK_ENTRIES = 4_000_000


def _joins(qg: _QueryGroups, value_conds: Callable[[np.ndarray], List[np.ndarray]], fps: Sequence[np.ndarray],
           n_keys: int) -> List[Optional[Tuple[int, int, int]]]:
    """For each condition i: the first (v, pc, key) of an occurring query (v, pc) with
    ``value_conds(vs)[i][row of v, key]`` and ``fps[i][pc, key]``, else None.

    value_conds(vs): the value conditions ([len(vs), K'] bool each) of the value rows ``vs`` (indices
    into ``qg.vi``); fps[i]: [P, K'] bool (on the position class and the key). Exact: within a class
    every v occurs with every pc, so some occurring pair meets both at a key exactly when some v of the
    class meets the value condition there and some pc meets the position condition. Value rows are
    taken in chunks of at most :data:`CHUNK_ENTRIES` entries; per class and condition only the [K']
    OR over the members is kept.
    """
    step = max(1, CHUNK_ENTRIES // max(n_keys, 1))
    acc: List[List[Optional[np.ndarray]]] = []
    for vs, _ in qg.classes:
        row: List[Optional[np.ndarray]] = [None] * len(fps)
        for start in range(0, len(vs), step):
            for i, f in enumerate(value_conds(vs[start:start + step])):
                row[i] = f.any(0) if row[i] is None else row[i] | f.any(0)
        acc.append(row)
    out: List[Optional[Tuple[int, int, int]]] = []
    for i, fp in enumerate(fps):
        found = None
        for (vs, pcs), row in zip(qg.classes, acc):
            hit = row[i] & fp[pcs].any(0)
            if hit.any():
                k = int(np.flatnonzero(hit)[0])
                for start in range(0, len(vs), step):  # the first member meeting it at k
                    col = value_conds(vs[start:start + step])[i][:, k]
                    if col.any():
                        found = (int(vs[start + np.flatnonzero(col)[0]]), int(pcs[np.flatnonzero(fp[pcs, k])[0]]), k)
                        break
                break
        out.append(found)
    return out


def _join(qg: _QueryGroups, fv: np.ndarray, fp: np.ndarray) -> Optional[Tuple[int, int, int]]:
    """:func:`_joins` of one condition given as a whole [values, K] table ``fv``."""
    return _joins(qg, lambda vs: [fv[vs]], [fp], fv.shape[1])[0]


def _pc_visibility(qg: _QueryGroups, kpos: np.ndarray, causal: bool) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """[P, K] bool each: :func:`_visibility` (surely seen, surely hidden, surely exists) per position class."""
    qp, kp, g = qg.pc_pos[:, None], kpos[None, :], qg.pc_guard[:, None]
    known = (qp >= 0) & (kp >= 0)
    present = (known & (kp <= qp)) | ((kp >= 0) & (kp <= g))
    if not causal:
        return np.ones(present.shape, bool), np.zeros(present.shape, bool), present
    return present, known & (kp > qp), present


def _window(where: Callable[[int, int], Any], qpos: np.ndarray, kpos: np.ndarray) -> np.ndarray:
    """[len(qpos), len(kpos)] bool ``where(i, j)`` (False for j < 1), each distinct pair evaluated once."""
    uq, iq = np.unique(qpos, return_inverse=True)
    uk, ik = np.unique(kpos, return_inverse=True)
    t = np.array([[bool(where(int(i), int(j))) if j >= 1 else False for j in uk] for i in uq], bool).reshape(
        len(uq), len(uk))
    return t[iq.ravel()][:, ik.ravel()]


def _split_want(ref: _Ref, qv: Dict[str, np.ndarray], kv: Dict[str, np.ndarray], kpos: np.ndarray,
                pc_pos: np.ndarray) -> Tuple[np.ndarray, np.ndarray, Optional[Tuple[Any, Any, Exception]]]:
    """The reference's selection as ``wv`` [values, K] and ``wp`` [P, K]: query (v, pc) selects key b
    exactly when ``wv[v, b] and wp[pc, b]`` (:func:`_want`, whose terms each read the query's values or
    its position, never both). For ``select``, ``search`` and ``match`` references only."""
    ones = np.ones((len(pc_pos), len(kpos)), bool)
    if ref.how == "select":
        wv, raised = pair_table(ref.predicate, kv[ref.key_sops[0]], qv[ref.query_sops[0]], skip_none=False)
        return wv, ones, raised
    nv = len(next(iter(qv.values()))) if qv else 0
    if ref.how == "match":
        wv = (kpos >= 1)[None, :] & np.ones((nv, 1), bool)
        for qs_, ks_ in zip(ref.query_sops, ref.key_sops):
            agree, _ = pair_table(lambda k, q: k == q, kv[ks_], qv[qs_], skip_none=True)
            wv &= agree
        wp = ones
        if ref.where is not None:
            wp = (kpos[None, :] <= pc_pos[:, None]) & _window(ref.where, pc_pos, kpos)
        return wv, wp, None
    if ref.how == "search":  # its terms read the query's values and the key only
        wv, raised = _want(ref, qv, np.full(nv, -1), kv, kpos, 0)
        return wv, ones, raised
    raise NoSemantics(f"no grouped reference for a '{ref.how}' head")


def check_head(state: State, blocks: Dict[str, Block], dec: Decoder, spec, p: Dict[str, Any], h: int,
               n: int, causal: bool, eps: float, rule: str, values: bool = True, attention: str = "softmax") -> None:
    """Check head ``h``'s selection and OV tables against the expression it implements.

    Args:
        state: the abstract state before the sublayer.
        blocks: the residual blocks by name.
        dec: the program's decoder.
        spec: the sublayer's rows and ``qk_scale``; p: its weights (``w_q``... [heads, ...]).
        h: the head; n: N; causal: the model masks later keys.
        eps: the float64 rounding of the head's score table (:mod:`.heads`).
        rule: the head's rule, :func:`.rules.classify`'s answer (``.name``), the same call that chose the
            driver's float32 half.
        values: check the OV tables too (False: a set-valued read, checked by :func:`.sets.check_set_copy`).
        attention: the model's attention kind.
    Raises:
        Unclean: a table differs from the program (why, witness: query, key, what is selected).
        NoSemantics: the head implements nothing checkable here.
        TooLarge: too many combinations.
    """
    d = len(state.radius)
    q_rows, k_rows, v_rows, out_rows, wq, wk, wvo = head_weights(spec, p, h, d)
    written = [nm for nm, b in blocks.items() if np.isin(out_rows[np.abs(wvo).sum(0) > 0], b.rows).any()]
    if rule == "SelectorWidth head":
        return _check_selector_width_head(state, blocks, dec, selector_width_of(dec.link, written), written[0], q_rows,
                                          k_rows, v_rows, out_rows, wq, wk, wvo, n, causal, eps)
    expr = head_node(dec.link, written)
    if rule == "ReLU head":
        if not (isinstance(expr, HeadSpec) and expr.attention == "relu"):
            raise NoSemantics(f"a ReLU head implementing {_name(expr)}, which is not a ReLU head of the program")
        return _check_relu_head(state, blocks, dec, expr, q_rows, k_rows, v_rows, out_rows, wq, wk, wvo, written,
                                n, causal, eps)
    if isinstance(expr, HeadSpec) and expr.attention == "relu":
        raise NoSemantics(f"{_name(expr)} is a ReLU head of the program in a {attention} model")
    if rule == "scored head":
        _check_scored_head(state, blocks, dec, expr, q_rows, k_rows, wq, wk, n, causal, eps)
        return _check_values(state, blocks, dec, expr, v_rows, out_rows, wvo, written, n)
    ref = _reference(expr)
    qn = sorted(set(read_blocks(blocks, q_rows, wq)) | set(ref.query_sops))
    kn = sorted(set(read_blocks(blocks, k_rows, wk)) | set(ref.key_sops))
    q_pos = ref.how == "position" or ref.where is not None
    cq = combos(state, blocks, qn, q_rows, n, positions=q_pos, w=wq, keep=ref.query_sops)
    ck = combos(state, blocks, kn, k_rows, n, positions=ref.positions, w=wk, keep=ref.key_sops)
    qi, kj0, kb = (np.flatnonzero(cq.kind == 1), np.flatnonzero(ck.kind == 1), np.flatnonzero(ck.kind == 0))
    total = len(qi) * len(ck.kind)
    if total > MAX_PROGRAM_ROWS_TABLE:
        raise TooLarge(f"program table of {len(qi)} queries x {len(ck.kind)} keys")
    # every check below is per query row: beyond MAX_PROGRAM_TABLE entries the rows go in chunks
    step = len(qi) if total <= MAX_PROGRAM_TABLE else max(1, CHUNK_ENTRIES // max(len(ck.kind), 1))
    kx = ck.x @ wk
    qcol = {nm: sop_column(state, blocks, dec, cq, nm) for nm in ref.query_sops}
    kv0 = {nm: sop_column(state, blocks, dec, ck, nm)[kj0] for nm in ref.key_sops}
    rk0 = _reachable(dec.link, kv0, ck.position[kj0], n)  # the keys' part does not depend on the chunk

    def rows_check(qi: np.ndarray) -> bool:  # the selection checks of the query rows qi; all covered?
        kj, kv = kj0, kv0
        s = (cq.x[qi] @ wq) @ kx.T  # [nq, nk] exact scores up to eps
        qv = {nm: col[qi] for nm, col in qcol.items()}
        for side_vals, c, rows, what in ((qv, cq, qi, "query"), (kv, ck, kj, "key")):
            for nm, col in side_vals.items():
                bad = [i for i, v in enumerate(col) if v is AMBIGUOUS]
                if bad:
                    raise Unclean(f"the {what}'s {nm} is no single value", {what: _where(c, int(rows[bad[0]]))})
        # combinations no input reaches: a value a read never holds at that position (.positions)
        rq, rk = _reachable(dec.link, qv, cq.position[qi], n), rk0
        if not rq.all() or not rk.all():
            qi, kj, s = qi[rq], kj[rk], s[rq]
            qv = {k: v[rq] for k, v in qv.items()}
            kv = {k: v[rk] for k, v in kv.items()}
        want, raised = _want(ref, qv, cq.position[qi], kv, ck.position[kj], n)
        always, never, present = _visibility(cq, qi, ck, kj, causal)
        sk = s[:, kj]

        def witness(a, b):
            return {"query": {**_where(cq, int(qi[a])), **{k: rasp_value(v[a]) for k, v in qv.items()}},
                    "key": {**_where(ck, int(kj[b])), **{k: rasp_value(v[b]) for k, v in kv.items()}},
                    "selects": bool(want[a, b])}

        if raised is not None:
            k, q, e = raised
            raise Unclean(f"{_name(expr)}: the selector's predicate raises on (key {k!r}, query {q!r}): "
                          f"{type(e).__name__}: {e}", {"key": rasp_value(k), "query": rasp_value(q)})
        hidden = want & ~always if not ref.prefix else np.zeros_like(want)
        if hidden.any():
            a, b = np.argwhere(hidden)[0]
            raise Unclean(f"{_name(expr)}: the {'selector' if ref.how == 'select' else 'reference'} selects a key "
                          f"that the causal mask may hide (a later position)", witness(a, b))
        seen = ~never
        if ref.how in ("position", "pointer"):
            absent = want & ~present
            if absent.any():
                a, b = np.argwhere(absent)[0]
                raise Unclean(f"{_name(expr)}: the position the reference attends to may not exist", witness(a, b))
            _check_single(s, sk, want & seen, seen, kb, eps, expr, witness)
        else:
            bos_hi, bos_lo = s[:, kb].max(1)[:, None], s[:, kb].min(1)[:, None]
            low = want & seen & ~(sk > bos_hi + 2 * eps)
            if low.any():
                a, b = np.argwhere(low)[0]
                raise Unclean(f"{_name(expr)}: a selected key does not score above BOS "
                              f"({sk[a, b]:.4g} vs {bos_hi[a, 0]:.4g})", witness(a, b))
            high = ~want & seen & ~(sk < bos_lo - 2 * eps)
            if high.any():
                a, b = np.argwhere(high)[0]
                raise Unclean(f"{_name(expr)}: a key the program does not select scores at or above BOS "
                              f"({sk[a, b]:.4g} vs {bos_lo[a, 0]:.4g})", witness(a, b))
            if ref.how in ("search", "match"):
                _check_latest(sk, want & seen, ck.position[kj], eps, expr, witness, first=ref.first)
            if isinstance(expr, rasp.Aggregate) and rasp.is_numerical(expr):
                # a mean: every selected key in one level (scores within 2 eps), so the top level is all of them
                sel_ = want & seen
                hi = np.where(sel_, sk, -np.inf).max(1, initial=-np.inf)
                lo = np.where(sel_, sk, np.inf).min(1, initial=np.inf)
                wide = sel_.any(1) & ~(hi - lo <= 2 * eps)
                if wide.any():
                    a = int(np.flatnonzero(wide)[0])
                    b = int(np.argmin(np.where(sel_[a], sk[a], np.inf)))
                    raise Unclean(f"{_name(expr)}: the selected keys of a numerical mean do not score alike "
                                  f"(span {hi[a] - lo[a]:.4g})", witness(a, b))
        return bool((want & seen & present).any(1).all())

    covered = True
    for start in range(0, len(qi), step):
        covered = rows_check(qi[start:start + step]) and covered
    if not values:
        return
    # BOS is the top of no query when every query has a selected key that surely exists and is seen (it
    # scores above every BOS alternative, checked above): then BOS's value is never written, whatever it is
    bos_top = ref.how not in ("select", "search", "match") or not covered
    _check_values(state, blocks, dec, expr, v_rows, out_rows, wvo, written, n, bos_top=bos_top)


def _reachable(link: ProgramLink, vals: Dict[str, np.ndarray], pos: np.ndarray, n: int) -> np.ndarray:
    """[m] bool: the combinations whose decoded values the SOps can hold at their model position
    (:func:`positions.possible`; a combination at no known position, or a SOp with no rule, is kept)."""
    from depthcraft.verify.certify.positions import possible
    keep = np.ones(len(pos), bool)
    cache: Dict[Tuple[str, int], Optional[set]] = {}
    for nm, col in vals.items():
        for i, (p_, v) in enumerate(zip(pos, col)):
            if p_ < 1 or not keep[i]:
                continue
            key = (nm, int(p_))
            if key not in cache:
                cache[key] = possible(link, nm, int(p_), n)
            ok = cache[key]
            if ok is not None and v not in ok:
                keep[i] = False
    return keep


# ---------------------------------------------------------------------------- ReLU heads

#: A ReLU head's value vectors must hold 0 or at least this in every entry, none negative (so that
#: sums of them, each with a weight within :data:`RELU_WEIGHT_TOL` of 1, decode to the union: an entry
#: is >= 1/2 exactly when some summand's is non-zero, and one vector decodes as itself).
SET_ENTRY_MIN = 0.75
#: A key a ReLU head attends to must score within this of 1 (the float32 weights' "exactly 1": the
#: query and key scales are float32 numbers whose product is 1 up to their rounding).
RELU_WEIGHT_TOL = 1e-3


def _check_relu_head(state, blocks, dec, expr, q_rows, k_rows, v_rows, out_rows, wq, wk, wvo, written, n, causal,
                     eps) -> None:
    """A ReLU head (weights relu(score), no normalisation; :mod:`.relu`) against its kind's semantics.

    The reference (:mod:`constructions.reference`, ReLU): a ``position`` head (``prev_token``,
    ``position_map``) attends to target(i) (BOS for target 0, nothing for None); a ``match``
    head with ``select="all"`` to every key j <= i in its window agreeing on every pair (never
    BOS); the BOS query to BOS. The head's ideal output is the sum of relu(score) times the
    value over the keys, so it equals the reference's read on EVERY input when, for every
    query combination, every attended key (BOS included) scores 1 (within
    :data:`RELU_WEIGHT_TOL` + 2 eps: the ideal output is the weighted sum, which the decoding
    below names) and every other key the
    query may see scores at most 2 eps (weight 0 in the ideal evaluation, :mod:`.relu`);
    every attended key is visible (at or before the query); each value vector decodes to
    the read's value of its key (BOS: the read's BOS value); and every value vector holds 0
    or at least :data:`SET_ENTRY_MIN` in every entry, none negative, so a sum of them with
    weights within :data:`RELU_WEIGHT_TOL` of 1 decodes to the union of their values (the
    reference's value; one value decodes as itself). A read that is not
    set-valued has one attended key (a position head): the float32 part refuses a query
    with on keys at several positions.

    Raises:
        Unclean: a table differs (witness); NoSemantics: a ReLU head of another kind.
    """
    kind = expr.kind
    if not (kind.selects == "position" or (kind.selects == "match" and expr.spec.select == "all")):
        raise NoSemantics(f"{kind} head {expr.label}: no table semantics for a ReLU '{kind.selects}' head here")
    if not causal:
        raise NoSemantics(f"{kind} head {expr.label}: a ReLU head of a bidirectional model")
    if kind.selects == "position":
        ref = _Ref("position", [], [], target=expr.spec.target)
    else:
        spec = expr.spec
        ref = _Ref("match", [q.label for q, _ in spec.pairs], [k.label for _, k in spec.pairs], where=spec.where,
                   prefix=True)
    qn = sorted(set(read_blocks(blocks, q_rows, wq)) | set(ref.query_sops))
    kn = sorted(set(read_blocks(blocks, k_rows, wk)) | set(ref.key_sops))
    qg = _query_groups(state, blocks, dec, qn, q_rows, wq, n, ref.query_sops, True)
    ck = None if qg is None else combos(state, blocks, kn, k_rows, n, positions=True, w=wk, keep=ref.key_sops,
                                        project=True)
    if qg is not None and (len(qg.vi) * n + 1) * len(ck.kind) > GROUP_ENTRIES:
        _check_relu_grouped(state, blocks, dec, expr, ref, qg, ck, wq, wk, n, causal, eps)
        return _relu_values(state, blocks, dec, expr, v_rows, out_rows, wvo, written, n)
    ck = combos(state, blocks, kn, k_rows, n, positions=True, w=wk, keep=ref.key_sops)
    cq = combos(state, blocks, qn, q_rows, n, positions=True, w=wq, keep=ref.query_sops)
    qi, kj, kb = (np.flatnonzero(cq.kind == 1), np.flatnonzero(ck.kind == 1), np.flatnonzero(ck.kind == 0))
    qb = np.flatnonzero(cq.kind == 0)
    one = lambda x: np.abs(x - 1.0) <= RELU_WEIGHT_TOL + 2 * eps  # noqa: E731
    # the BOS query (causal: it sees only BOS) attends to BOS with weight 1
    s_bos = (cq.x[qb] @ wq) @ (ck.x[kb] @ wk).T
    if len(qb) and not one(s_bos).all():
        a, b = np.argwhere(~one(s_bos))[0]
        raise Unclean(f"{_name(expr)}: the BOS query does not attend to BOS with weight 1 "
                      f"(score {s_bos[a, b]:.4g})",
                      {"query": _where(cq, int(qb[a])), "key": _where(ck, int(kb[b]))})
    qv = {nm: sop_column(state, blocks, dec, cq, nm)[qi] for nm in ref.query_sops}
    kv = {nm: sop_column(state, blocks, dec, ck, nm)[kj] for nm in ref.key_sops}
    for side_vals, c, rows, what in ((qv, cq, qi, "query"), (kv, ck, kj, "key")):
        for nm, col in side_vals.items():
            bad = [i for i, v in enumerate(col) if v is AMBIGUOUS]
            if bad:
                raise Unclean(f"the {what}'s {nm} is no single value", {what: _where(c, int(rows[bad[0]]))})
    # combinations no input reaches: a value a read never holds at that position (.positions), as
    # :func:`check_head` drops them (the decoded values are the program's, by the check's induction)
    rq, rk = _reachable(dec.link, qv, cq.position[qi], n), _reachable(dec.link, kv, ck.position[kj], n)
    if not rq.all() or not rk.all():
        qi, kj = qi[rq], kj[rk]
        qv = {k: v[rq] for k, v in qv.items()}
        kv = {k: v[rk] for k, v in kv.items()}
    if len(qi) * (len(kj) + len(kb)) > MAX_PROGRAM_TABLE:
        raise TooLarge(f"program table of {len(qi)} queries x {len(kj) + len(kb)} keys")
    q_proj = cq.x[qi] @ wq
    s_keys, s_bos_keys = q_proj @ (ck.x[kj] @ wk).T, q_proj @ (ck.x[kb] @ wk).T
    qpos, kpos = cq.position[qi], ck.position[kj]
    want, _ = _want(ref, qv, qpos, kv, kpos, n)
    if ref.how == "position":  # ReLU: target 0 attends to BOS, None to nothing
        tgt = np.array([(-1 if (x := ref.target(int(i))) is None else int(x)) for i in qpos], int)
        want_bos = tgt == 0
    else:  # every match j <= i (the reference's range is the visible prefix)
        want &= kpos[None, :] <= qpos[:, None]
        want_bos = np.zeros(len(qi), bool)
    always, never, _ = _visibility(cq, qi, ck, kj, causal)
    sk, sb = s_keys, s_bos_keys

    def witness(a, b):
        key = {"position": "BOS"} if b is None else \
            {**_where(ck, int(kj[b])), **{k: rasp_value(v[b]) for k, v in kv.items()}}
        return {"query": {**_where(cq, int(qi[a])), **{k: rasp_value(v[a]) for k, v in qv.items()}}, "key": key,
                "selects": bool(want_bos[a]) if b is None else bool(want[a, b])}

    hidden = want & ~always
    if hidden.any():
        a, b = np.argwhere(hidden)[0]
        raise Unclean(f"{_name(expr)}: the reference attends to a key that the causal mask may hide",
                      witness(a, b))
    seen = ~never
    low = want & ~one(sk)
    if low.any():
        a, b = np.argwhere(low)[0]
        raise Unclean(f"{_name(expr)}: an attended key does not score 1 ({sk[a, b]:.4g})", witness(a, b))
    high = ~want & seen & ~(sk <= 2 * eps)
    if high.any():
        a, b = np.argwhere(high)[0]
        raise Unclean(f"{_name(expr)}: a key the reference does not attend to scores above 0 ({sk[a, b]:.4g})",
                      witness(a, b))
    bad_bos = np.where(want_bos[:, None], ~one(sb), ~(sb <= 2 * eps))
    if bad_bos.any():
        a, _ = np.argwhere(bad_bos)[0]
        raise Unclean(f"{_name(expr)}: BOS scores {sb[a].max():.4g} where the reference gives it weight "
                      f"{int(want_bos[a])}", witness(a, None))
    _relu_values(state, blocks, dec, expr, v_rows, out_rows, wvo, written, n)


def _relu_values(state, blocks, dec, expr, v_rows, out_rows, wvo, written, n) -> None:
    """A ReLU head's OV tables: every value vector holds 0 or at least :data:`SET_ENTRY_MIN` in every
    entry, none negative, and decodes to the read's value (:func:`_check_relu_head`)."""
    for nm in written:  # sums of value vectors, each weighted 1 +- tol, decode to the union
        cols = np.flatnonzero(np.isin(out_rows, blocks[nm].rows))
        w = wvo[:, cols]
        cv = combos(state, blocks, read_blocks(blocks, v_rows, w), v_rows, n, positions=True, w=w)
        vals = cv.x @ w
        bad = (vals < 0) | ((vals != 0) & (vals < SET_ENTRY_MIN))
        if bad.any():
            i = int(np.argwhere(bad)[0][0])
            raise Unclean(f"{_name(expr)}: the read {nm} writes {vals[i].round(4).tolist()}: an entry neither 0 "
                          f"nor >= {SET_ENTRY_MIN}, so a weighted sum of reads need not decode to their union",
                          {"value": _where(cv, i)})
    _check_values(state, blocks, dec, expr, v_rows, out_rows, wvo, written, n, sets_ok=True)


def _check_relu_grouped(state, blocks, dec, expr, ref: _Ref, qg: _QueryGroups, ck: Combos, wq, wk, n, causal,
                        eps) -> None:
    """:func:`_check_relu_head`'s selection checks on the grouped tables (:class:`_QueryGroups`).

    The same statements over the same (query, key) pairs: a query (v, pc) has v's score row (the
    members of v share their projected vector exactly, so their scores are one computed number, with
    the same rounding ``eps``: the projections are summed block by block, :func:`combos` ``project``)
    and selects key b when ``wv[v, b] and wp[pc, b]`` (the match's agreement on values, its window
    and j <= i on positions; a position map's target on positions); each failure condition is a
    disjunction of (value condition and position condition) terms, each decided exactly by
    :func:`_joins`, on value rows in chunks of at most :data:`CHUNK_ENTRIES` entries. Raises Unclean
    with a witness query (position, values) and key.
    """
    kj, kb = np.flatnonzero(ck.kind == 1), np.flatnonzero(ck.kind == 0)
    for what, size in (("position", len(qg.pc_pos)), ("value-group", len(qg.classes))):
        if size * len(kj) > MAX_PROGRAM_TABLE:  # the [P, K] tables, and one [K] row per class and condition
            raise TooLarge(f"program table (grouped) of {size} query {what} classes x {len(kj)} keys")
    one = lambda x: np.abs(x - 1.0) <= RELU_WEIGHT_TOL + 2 * eps  # noqa: E731
    qx = qg.c.x  # projected: x W_Q
    qb = np.flatnonzero(qg.c.kind == 0)  # the BOS query (causal: it sees only BOS)
    if len(qb):
        sbb = qx[qb] @ ck.x[kb].T
        if not one(sbb).all():
            a, b = np.argwhere(~one(sbb))[0]
            raise Unclean(f"{_name(expr)}: the BOS query does not attend to BOS with weight 1 "
                          f"(score {sbb[a, b]:.4g})", {"query": {"position": "BOS"}, "key": _where(ck, int(kb[b]))})
    qv = qg.qv
    kv = {nm: sop_column(state, blocks, dec, ck, nm)[kj] for nm in ref.key_sops}
    for nm, col in kv.items():
        bad = [i for i, v in enumerate(col) if v is AMBIGUOUS]
        if bad:
            raise Unclean(f"the key's {nm} is no single value", {"key": _where(ck, int(kj[bad[0]]))})
    rk = _reachable(dec.link, kv, ck.position[kj], n)  # keys no input reaches, as the full table drops them
    if not rk.all():
        kj = kj[rk]
        kv = {k: v[rk] for k, v in kv.items()}
    kpos, pc_pos = ck.position[kj], qg.pc_pos
    kxj, kxb = ck.x[kj], ck.x[kb]
    if ref.how == "position":  # ReLU: target 0 attends to BOS, None to nothing
        tgt = np.array([(-1 if (x := ref.target(int(i))) is None else int(x)) for i in pc_pos], int)
        wp = ((tgt >= 1) & (tgt <= pc_pos))[:, None] & (kpos[None, :] == tgt[:, None])
        want_bos = tgt == 0
    else:  # every match j <= i (the reference's range is the visible prefix)
        wp = (kpos[None, :] <= pc_pos[:, None])
        if ref.where is not None:
            wp &= _window(ref.where, pc_pos, kpos)
        want_bos = np.zeros(len(pc_pos), bool)
    always, never, _ = _pc_visibility(qg, kpos, causal)
    seen = ~never

    def value_side(vs):  # [len(vs), K] each: wv, the scores, and the value conditions below
        sk = qx[qg.vi[vs]] @ kxj.T
        if ref.how == "position":
            wv = np.ones(sk.shape, bool)
        else:
            wv, _, _ = _split_want(ref, {k: x[vs] for k, x in qv.items()}, kv, kpos, pc_pos[:0])
        sb = qx[qg.vi[vs]] @ kxb.T
        above = ~(sk <= 2 * eps)
        return sk, sb, wv, [wv, wv & ~one(sk), ~wv & above, above,
                            (~one(sb)).any(1)[:, None], (~(sb <= 2 * eps)).any(1)[:, None]]

    hits = _joins(qg, lambda vs: value_side(vs)[3],
                  [wp & ~always, wp, seen, ~wp & seen, want_bos[:, None], ~want_bos[:, None]], len(kj))

    def witness(v, pc, b):
        key = {"position": "BOS"} if b is None else \
            {**_where(ck, int(kj[b])), **{k: rasp_value(x[b]) for k, x in kv.items()}}
        sel = bool(want_bos[pc]) if b is None else bool(value_side(np.array([v]))[2][0, b] and wp[pc, b])
        return {"query": {"position": int(pc_pos[pc]), **{k: rasp_value(x[v]) for k, x in qv.items()}},
                "key": key, "selects": sel}

    def score(v, b):
        return value_side(np.array([v]))[0][0, b]

    if hits[0]:
        raise Unclean(f"{_name(expr)}: the reference attends to a key that the causal mask may hide",
                      witness(*hits[0]))
    if hits[1]:
        v, _, b = hits[1]
        raise Unclean(f"{_name(expr)}: an attended key does not score 1 ({score(v, b):.4g})", witness(*hits[1]))
    hit = hits[2] or hits[3]
    if hit:
        v, _, b = hit
        raise Unclean(f"{_name(expr)}: a key the reference does not attend to scores above 0 ({score(v, b):.4g})",
                      witness(*hit))
    # BOS: weight 1 where the reference attends to it, else score at most 2 eps (one column: "any BOS key")
    hit = hits[4] or hits[5]
    if hit:
        v, pc, _ = hit
        raise Unclean(f"{_name(expr)}: BOS scores {value_side(np.array([v]))[1][0].max():.4g} where the reference "
                      f"gives it weight {int(want_bos[pc])}", witness(v, pc, None))


# ------------------------------------------------------------------------- SelectorWidth

#: Suffix of the numerical direction tracr's SelectorWidth head writes 1 / (w + 1) into.
SW_SUFFIX = "_selector_width_attn_output"
#: The SelectorWidth MLP reads a = 1 / (w + 1) as the width w when 1 / a - 1 is within this of w.
SW_TOL = 1e-6


def selector_width_of(link: ProgramLink, written: Sequence[str]) -> Optional[Any]:
    """The SelectorWidth whose attention head writes the blocks ``written`` (its 1 / (w + 1) direction), else None."""
    if len(written) != 1 or not written[0].endswith(SW_SUFFIX):
        return None
    expr = link.nodes.get(written[0][: -len(SW_SUFFIX)])
    return expr if isinstance(expr, rasp.SelectorWidth) else None


def _check_selector_width_head(state, blocks, dec, expr, aux, q_rows, k_rows, v_rows, out_rows, wq, wk, wvo, n,
                               causal, eps) -> None:
    """SelectorWidth's head (tracr: attend to BOS and to every selected key, value 1 at BOS, 0 elsewhere).

    For every query combination: BOS and every key the selector selects score alike (their
    scores within 2 eps of each other: one level), every other key the query may see scores
    more than 2 eps below all of them; in a causal model every selected key is visible to the
    query (RASP's selector is bidirectional), and keys the mask hides do not count; BOS's value
    writes exactly 1 into ``aux`` and every regular value exactly 0. Then the top level is BOS plus the selected keys present, and
    the hardmax mean is 1 / (w + 1), w the selector's width (:mod:`.heads` bounds the real
    output around it).

    Raises:
        Unclean: a table differs (witness: query, key, what is selected); NoSemantics: a causal
            model or a compound selector.
    """
    sel = expr.selector
    if not isinstance(sel, rasp.Select):
        raise NoSemantics(f"SelectorWidth {expr.label} uses a {type(sel).__name__}, not a Select")
    qsop, ksop = sel.queries.label, sel.keys.label
    qn = sorted(set(read_blocks(blocks, q_rows, wq)) | {qsop})
    kn = sorted(set(read_blocks(blocks, k_rows, wk)) | {ksop})
    cq = combos(state, blocks, qn, q_rows, n, positions=causal, w=wq, keep=[qsop])
    ck = combos(state, blocks, kn, k_rows, n, positions=causal, w=wk, keep=[ksop])
    qi, kj, kb = (np.flatnonzero(cq.kind == 1), np.flatnonzero(ck.kind == 1), np.flatnonzero(ck.kind == 0))
    if len(qi) * len(ck.kind) > 50_000_000:
        raise TooLarge(f"program table of {len(qi)} queries x {len(ck.kind)} keys")
    s = (cq.x[qi] @ wq) @ (ck.x @ wk).T
    qv = sop_column(state, blocks, dec, cq, qsop)[qi]
    kv = sop_column(state, blocks, dec, ck, ksop)[kj]
    for col, c, rows, what in ((qv, cq, qi, "query"), (kv, ck, kj, "key")):
        bad = [i for i, v in enumerate(col) if v is AMBIGUOUS]
        if bad:
            raise Unclean(f"the {what}'s value is no single value", {what: _where(c, int(rows[bad[0]]))})
    rq = _reachable(dec.link, {qsop: qv}, cq.position[qi], n)  # combinations no input reaches (.positions)
    rk = _reachable(dec.link, {ksop: kv}, ck.position[kj], n)
    if not rq.all() or not rk.all():
        qi, kj, s, qv, kv = qi[rq], kj[rk], s[rq], qv[rq], kv[rk]
    want, raised = pair_table(sel.predicate, kv, qv, skip_none=False)
    if raised is not None:
        k, q, e = raised
        raise Unclean(f"SelectorWidth {expr.label}: the selector's predicate raises on (key {k!r}, query {q!r}): "
                      f"{type(e).__name__}: {e}", {"key": rasp_value(k), "query": rasp_value(q)})
    always, never, _ = _visibility(cq, qi, ck, kj, causal)
    sk = s[:, kj]
    sb = s[:, kb]
    hidden = want & ~always  # RASP's selector is bidirectional: a key the mask may hide is not counted
    if hidden.any():
        a, b = np.argwhere(hidden)[0]
        raise Unclean(f"SelectorWidth {expr.label}: the selector selects a key that the causal mask may hide "
                      f"(a later position)", {"query": {**_where(cq, int(qi[a])), qsop: rasp_value(qv[a])},
                                              "key": {**_where(ck, int(kj[b])), ksop: rasp_value(kv[b])}})
    hi = np.maximum(sb.max(1), np.where(want, sk, -np.inf).max(1, initial=-np.inf))
    lo = np.minimum(sb.min(1), np.where(want, sk, np.inf).min(1, initial=np.inf))

    def witness(a, b):
        return {"query": {**_where(cq, int(qi[a])), qsop: rasp_value(qv[a])},
                "key": {**_where(ck, int(kj[b])), ksop: rasp_value(kv[b])}, "selects": bool(want[a, b])}

    wide = ~(hi - lo <= 2 * eps)
    if wide.any():
        a = int(np.flatnonzero(wide)[0])
        b = int(np.argmax(np.where(want[a], np.abs(sk[a] - sb[a].mean()), -1)))
        raise Unclean(f"SelectorWidth {expr.label}: BOS and the selected keys do not score alike "
                      f"(span {hi[a] - lo[a]:.4g})", witness(a, b))
    high = ~want & ~never & ~(sk < lo[:, None] - 2 * eps)
    if high.any():
        a, b = np.argwhere(high)[0]
        raise Unclean(f"SelectorWidth {expr.label}: a key the selector does not select scores with BOS "
                      f"({sk[a, b]:.4g} vs {lo[a]:.4g})", witness(a, b))
    cols = np.flatnonzero(np.isin(out_rows, blocks[aux].rows))
    w = wvo[:, cols]
    cv = combos(state, blocks, read_blocks(blocks, v_rows, w), v_rows, n, w=w)
    vals = cv.x @ w
    target = np.where(cv.kind == 0, 1.0, 0.0)[:, None]
    off = np.abs(vals - target).max(1) if vals.shape[1] else np.ones(len(vals))
    if vals.shape[1] != 1 or (off > 1e-12).any():
        i = int(np.argmax(off))
        raise Unclean(f"SelectorWidth {expr.label}: the OV circuit writes {vals[i].round(6).tolist()} where "
                      f"BOS must write 1 and every other key 0", {"value": _where(cv, i)})


def _term_column(side: Any, state: State, blocks: Dict[str, Block], dec: Decoder, c: Combos,
                 rows: np.ndarray) -> np.ndarray:
    """[len(rows)] object: one side of a score term in the combinations ``rows`` of ``c``, as the
    reference (:func:`constructions.reference.term_values`) has it: the model position for
    POSITION, the decoded value of a SOp; at BOS a head read's BOS value, else None."""
    out = np.empty(len(rows), object)
    bos = c.kind[rows] == 0
    if side is POSITION:
        out[:] = [None if b else int(p) for b, p in zip(bos, c.position[rows])]
        return out
    out[:] = sop_column(state, blocks, dec, c, side.label)[rows]
    out[bos] = side.bos_value if isinstance(side, HeadRead) else None
    return out


def _check_scored_head(state, blocks, dec, head: HeadSpec, q_rows, k_rows, wq, wk, n, causal, eps) -> None:
    """A ``scored_lookup`` head: the weights' score orders the keys as the reference's sum of terms does.

    Reference (:func:`constructions.reference.score_table`): key j's score for query i is
    ``bos_score`` (BOS only) plus, for every term whose two values exist, ``score(q, k)``;
    query i attends to the highest-scoring position, the latest on a tie. For every regular
    query combination and every two key combinations (BOS included), with T the reference's
    sum: T(k) > T(k') must give a weights' score more than 2 eps above, and T(k) = T(k') scores
    within 2 eps of each other (one level of the hardmax evaluation). Then the levels of the
    weights' scores are the classes of equal T, in T's order: the hardmax evaluation attends to
    the reference's highest score, and where the float32 part proved that the top level holds
    one key of the input (on the domain, where a precondition was used) there is no tie, so it
    is the reference's key. Raises Unclean (a pair that breaks the order, with the values) or
    NoSemantics (a causal model: the kind is bidirectional).
    """
    if causal:
        raise NoSemantics(f"scored_lookup head {head.label} in a causal model")
    spec = head.spec
    q_sops = sorted({t.query.label for t in spec.terms if t.query is not POSITION})
    k_sops = sorted({t.key.label for t in spec.terms if t.key is not POSITION})
    q_pos = any(t.query is POSITION for t in spec.terms)
    k_pos = any(t.key is POSITION for t in spec.terms)
    qn = sorted(set(read_blocks(blocks, q_rows, wq)) | set(q_sops))
    kn = sorted(set(read_blocks(blocks, k_rows, wk)) | set(k_sops))
    # at least this many combinations (the blocks whose values are kept, and the positions)
    least = [(n if pos else 1) * int(np.prod([len(state.sets[1][nm]) for nm in sops], dtype=np.int64))
             for pos, sops in ((q_pos, q_sops), (k_pos, k_sops))]
    if least[0] * least[1] > 50_000_000:
        raise TooLarge(f"program table of at least {least[0]} queries x {least[1]} keys")
    cq = combos(state, blocks, qn, q_rows, n, positions=q_pos, w=wq, keep=q_sops)
    ck = combos(state, blocks, kn, k_rows, n, positions=k_pos, w=wk, keep=k_sops)
    qi = np.flatnonzero(cq.kind == 1)
    kall = np.arange(len(ck.kind))
    if len(qi) * len(kall) > 50_000_000:
        raise TooLarge(f"program table of {len(qi)} queries x {len(kall)} keys")
    s = (cq.x[qi] @ wq) @ (ck.x @ wk).T  # [nq, nk]
    total = np.where(ck.kind == 0, spec.bos_score, 0.0)[None, :].repeat(len(qi), 0)
    for term in spec.terms:
        qv = _term_column(term.query, state, blocks, dec, cq, qi)
        kv = _term_column(term.key, state, blocks, dec, ck, kall)
        for col, what in ((qv, "query"), (kv, "key")):
            if any(v is AMBIGUOUS for v in col):
                raise Unclean(f"scored_lookup head {head.label}: a {what} value of a term is no single value",
                              {what: str(getattr(term, what))})
        table, raised = pair_table(lambda k, q: float(term.score(q, k)), kv, qv, skip_none=True)
        if raised is not None:
            k, q, e = raised
            raise Unclean(f"scored_lookup head {head.label}: a term's score raises on (query {q!r}, key {k!r}): "
                          f"{type(e).__name__}: {e}", {"key": rasp_value(k), "query": rasp_value(q)})
        total += _pair_values(lambda k, q: float(term.score(q, k)), kv, qv)

    def witness(a, b, c):
        return {"query": _where(cq, int(qi[a])), "key": _where(ck, int(b)), "other_key": _where(ck, int(c)),
                "reference": [float(total[a, b]), float(total[a, c])], "scores": [float(s[a, b]), float(s[a, c])]}

    order = np.argsort(total, axis=1, kind="stable")
    ts, ss = np.take_along_axis(total, order, 1), np.take_along_axis(s, order, 1)
    same = ts[:, 1:] == ts[:, :-1]
    # per class of equal T: its lowest and highest weights' score (classes are runs of the sorted row)
    starts = np.concatenate([np.ones((len(ts), 1), bool), ~same], 1)
    cls = np.cumsum(starts, 1) - 1
    nc = int(cls.max(initial=0)) + 1
    flat = (np.arange(len(ts))[:, None] * nc + cls).ravel()
    lo = np.full(len(ts) * nc, np.inf)
    hi = np.full(len(ts) * nc, -np.inf)
    np.minimum.at(lo, flat, ss.ravel())
    np.maximum.at(hi, flat, ss.ravel())
    lo, hi = lo.reshape(len(ts), nc), hi.reshape(len(ts), nc)
    wide = np.isfinite(lo) & ~(hi - lo <= 2 * eps)
    if wide.any():
        a, c = (int(x) for x in np.argwhere(wide)[0])
        members = order[a][cls[a] == c]
        b1, b2 = members[np.argmin(s[a, members])], members[np.argmax(s[a, members])]
        raise Unclean(f"scored_lookup head {head.label}: keys the reference scores alike score apart in the "
                      f"weights ({hi[a, c] - lo[a, c]:.4g} > 2 eps)", witness(a, b1, b2))
    below = np.concatenate([np.full((len(ts), 1), -np.inf), np.maximum.accumulate(hi, 1)[:, :-1]], 1)
    low = np.isfinite(lo) & ~(lo > below + 2 * eps)
    if low.any():
        a, c = (int(x) for x in np.argwhere(low)[0])
        members = order[a][cls[a] == c]
        lower = order[a][cls[a] < c]
        b1 = members[np.argmin(s[a, members])]
        b2 = lower[np.argmax(s[a, lower])]
        raise Unclean(f"scored_lookup head {head.label}: a key the reference scores higher does not score more "
                      f"than 2 eps above a lower one in the weights", witness(a, b1, b2))


def _pair_values(f: Callable[[Any, Any], float], keys: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """[nq, nk] float ``f(key, query)`` over the columns' values (0 where either is None), each distinct
    pair evaluated once."""
    uk, kc = _value_codes(keys)
    uq, qc = _value_codes(queries)
    table = np.zeros((len(uq), len(uk)))
    for a, q in enumerate(uq):
        for b_, k in enumerate(uk):
            if k is not None and q is not None:
                table[a, b_] = f(k, q)
    return table[qc][:, kc]


def _check_single(s, sk, sel, seen, kb, eps, expr, witness) -> None:
    """A one-position head: the selected key (it exists whenever it is visible), or BOS when none,
    beats every other key the query may see."""
    big = np.where(sel, sk, np.inf).min(1)   # [nq] the selected key's lowest score
    none = ~sel.any(1)
    win = np.where(none, s[:, kb].min(1), big)  # BOS when nothing is selected
    rest = np.where(seen & ~sel, sk, -np.inf).max(1)
    rest = np.where(none, rest, np.maximum(rest, s[:, kb].max(1)))  # BOS loses to a selected key
    bad = ~(win > rest + 2 * eps)
    if bad.any():
        a = int(np.flatnonzero(bad)[0])
        b = int(np.argmax(np.where(seen[a] & ~sel[a], sk[a], -np.inf)))
        raise Unclean(f"{_name(expr)}: a key the reference does not attend to scores at or above the one it "
                      f"attends to ({rest[a]:.4g} vs {win[a]:.4g})", witness(a, b))


def _check_latest(sk, sel, kpos, eps, expr, witness, first: bool = False) -> None:
    """Among a query's selected keys, every later position scores above every earlier one
    (``first``: every earlier one above every later one)."""
    if (sel & (kpos < 0)[None, :]).any():
        a, b = np.argwhere(sel & (kpos < 0)[None, :])[0]
        raise Unclean(f"{_name(expr)}: the key reads no position, so the latest match is not determined",
                      witness(a, b))
    rank = -kpos if first else kpos
    order = np.argsort(rank, kind="stable")
    pos = rank[order]
    starts = np.flatnonzero(np.r_[True, pos[1:] != pos[:-1]])
    lo = np.minimum.reduceat(np.where(sel, sk, np.inf)[:, order], starts, axis=1)   # [nq, positions]
    hi = np.maximum.reduceat(np.where(sel, sk, -np.inf)[:, order], starts, axis=1)
    before = np.concatenate([np.full((len(sk), 1), -np.inf), np.maximum.accumulate(hi, 1)[:, :-1]], 1)
    bad = np.isfinite(lo) & ~(lo > before + 2 * eps)
    if bad.any():
        a, c = np.argwhere(bad)[0]
        cols = order[starts[c]:(starts[c + 1] if c + 1 < len(starts) else len(order))]
        b = int(cols[np.argmin(np.where(sel[a, cols], sk[a, cols], np.inf))])
        raise Unclean(f"{_name(expr)}: a {'n earlier' if first else ' later'} match does not score above a "
                      f"{'later' if first else 'n earlier'} one", witness(a, b))


def _check_values(state, blocks, dec, expr, v_rows, out_rows, wvo, written, n, bos_top: bool = True,
                  sets_ok: bool = False) -> None:
    """Every ideal value vector's OV write decodes to the expression's value (see the module docstring).

    ``bos_top`` False: BOS is the top of no query (every query has a selected key that surely exists,
    is visible and scores above BOS), so its write never reaches the output: not compared.
    ``sets_ok``: a set-valued read is checked too (a ReLU head, whose sums :func:`_check_relu_head`
    ties to the union); otherwise it has no semantics here.
    """
    if isinstance(expr, rasp.Aggregate) and rasp.is_numerical(expr):
        return _check_numerical_values(state, blocks, dec, expr, v_rows, out_rows, wvo, n)
    if isinstance(expr, rasp.Aggregate):
        reads = [(expr.label, expr.sop, None, expr.default)]
    else:
        reads = []
        for nm in written:
            r = dec.link.nodes[nm]
            if r.multi and not (sets_ok and nm in dec.sets):
                raise NoSemantics(f"the read {nm!r} is set-valued")
            reads.append((nm, r.read.source, r.read.fn, r.bos_value))
    for nm, src, fn, default in reads:  # each output block on its own: only what writes into it matters
        cols = np.flatnonzero(np.isin(out_rows, blocks[nm].rows))
        w = wvo[:, cols]
        keep = [] if src is POSITION else [src.label]
        cv = combos(state, blocks, sorted(set(read_blocks(blocks, v_rows, w)) | set(keep)), v_rows, n,
                    positions=src is POSITION, w=w, keep=keep)
        vecs = np.zeros((len(cv.x), len(blocks[nm].rows)))
        vecs[:, np.searchsorted(blocks[nm].rows, out_rows[cols])] = cv.x @ w
        got_all = dec.decode_rows(nm, vecs)
        source = None if src is POSITION else sop_column(state, blocks, dec, cv, src.label)
        for i in range(len(cv.x)):
            if cv.kind[i] == 0 and not bos_top:
                continue
            if cv.kind[i] == 0:
                want = default
            elif src is POSITION:
                want = apply_fn(fn, int(cv.position[i]))
            elif source[i] is AMBIGUOUS:
                raise Unclean(f"the value's {src.label} is no single value", {"value": _where(cv, i)})
            else:
                want = apply_fn(fn, source[i])
            if nm in dec.sets and not isinstance(want, frozenset):  # a set-valued read of one value
                want = frozenset() if want is None else frozenset([want])
            got = got_all[i]
            if _same_value(got, want):
                continue
            got = [round(float(v), 4) for v in vecs[i]] if got is AMBIGUOUS else got
            raise Unclean(f"{_name(expr)}: the OV circuit writes {nm} = {rasp_value(got)!r} where the program "
                          f"has {rasp_value(want)!r}", {"value": _where(cv, i), "expected": rasp_value(want),
                                                    "got": rasp_value(got)})


#: A numerical ideal value matches the program's within this (the rest is tracked in ``Decoder.num_dev``).
NUM_TOL = 1e-4


def numerical_block(blocks: Dict[str, Block], label: str) -> bool:
    """Whether ``label`` is a one-row numerical block (tracr's numerical SOp encoding)."""
    b = blocks.get(label)
    return b is not None and b.kind == "written" and len(b.rows) == 1 and b.values[0] is None


def _scalars(state: State, c: Combos, label: str) -> np.ndarray:
    """[m] float: the numerical block ``label``'s ideal value in every combination."""
    return np.array([float(state.sets[int(k)][label][j][0]) for k, j in zip(c.kind, c.index[label])])


def _check_numerical_values(state, blocks, dec, expr, v_rows, out_rows, wvo, n) -> None:
    """A numerical mean's OV circuit: every regular key writes its SOp's value, BOS writes 0 (the default).

    Each write is within :data:`NUM_TOL` of the source's ideal value; the deviation from the
    program's value (this one plus the source's own) is recorded for the output, and the mean
    of values each within d of the program's is within d of the program's mean.
    """
    src, nm = expr.sop.label, expr.label
    if not numerical_block(blocks, nm) or not numerical_block(blocks, src):
        raise NoSemantics(f"numerical Aggregate {nm}: its SOp or output is not a one-row numerical block")
    if expr.default is None or expr.default != 0 or isinstance(expr.default, bool):
        # default None: where no key is selected the program gives None and the weights 0 (BOS's value)
        raise NoSemantics(f"numerical Aggregate {nm} with default {expr.default!r}: the weights give 0 where no "
                          f"key is selected, so only default=0 is proved")
    cols = np.flatnonzero(np.isin(out_rows, blocks[nm].rows))
    w = wvo[:, cols]
    cv = combos(state, blocks, sorted(set(read_blocks(blocks, v_rows, w)) | {src}), v_rows, n, w=w, keep=[src])
    got = (cv.x @ w)[:, 0]
    want = np.where(cv.kind == 0, 0.0, _scalars(state, cv, src))
    diff = np.abs(got - want)
    if (diff > NUM_TOL).any():
        i = int(np.argmax(diff))
        raise Unclean(f"{_name(expr)}: the OV circuit writes {got[i]:.6g} where the program has {want[i]:.6g}",
                      {"value": _where(cv, i), "expected": float(want[i]), "got": float(got[i])})
    # the head's ideal mean is the float64 sum of the written values over a count, like tracr's evaluator
    # (sum(xs) / len(xs)); with values on a grid 2^-s (integers, halves...) and |sum| < 2^(53 - s) both
    # sums are exact, so both means are the same float; otherwise the two summation orders differ by at
    # most gamma_n of the values' sum each
    vals = want[cv.kind == 1]
    order = 2 * gamma(n + 1, U64) * float(np.abs(vals).max(initial=0.0))
    for s_ in range(0, 31):
        grid = vals * 2.0 ** s_  # exact: a power of two
        if np.all(grid == np.round(grid)):
            if float(np.abs(grid).max(initial=0.0)) * n < 2.0 ** 53:
                order = 0.0
            break
    dec.num_dev[nm] = float(diff.max(initial=0.0)) + dec.num_dev.get(src, 0.0) + order
    if src in dec.num_vals:  # the program's means of the program's values (mean_values)
        means = mean_values(dec.num_vals[src], expr.default, n)
        if means is not None:
            dec.num_vals[nm] = means


def _same_value(got: Any, want: Any) -> bool:
    """A decoded value equals the program's (None only equals None; no single value equals nothing)."""
    if got is AMBIGUOUS:
        return False
    if got is None or want is None:
        return got is None and want is None
    return bool(got == want)


# ----------------------------------------------------------------------------- the MLPs


def _widths(state: State, c: Combos, label: str) -> np.ndarray:
    """[m] object: the width w each combination's SelectorWidth value a = 1 / (w + 1) names (1 / a - 1
    within :data:`SW_TOL` of an integer), else the value a itself (a float, never a width)."""
    out = np.empty(len(c.kind), object)
    for i in range(len(c.kind)):
        a = float(state.sets[int(c.kind[i])][label][c.index[label][i]][0])
        w = 1.0 / a - 1.0 if a > 0 else -1.0
        out[i] = int(round(w)) if a > 0 and abs(w - round(w)) <= SW_TOL and round(w) >= 0 else a
    return out


def _check_numerical_map(dec: Decoder, expr: Any, nm: str, ins: Sequence[str], inputs: Dict[str, np.ndarray],
                         got: np.ndarray, c: Combos) -> None:
    """A Map of categorical SOps to a number, or a LinearSequenceMap of numbers: every regular input's
    output within :data:`NUM_TOL` of the function; the deviation from the program's value (with the
    inputs' own, through the linear map's factors) is recorded for ``nm``, and (not for a
    LinearSequenceMap, whose inputs here are ideal values) the function's values, which are the
    program's: its inputs are decoded categorical values or a numerical input's program values
    (:func:`program_inputs`)."""
    worst = 0.0
    vals: Optional[Dict[float, List[Any]]] = None if isinstance(expr, rasp.LinearSequenceMap) else {}
    for i in np.flatnonzero(c.kind == 1):
        xs = [inputs[lab][i] for lab in ins]
        if any(x is AMBIGUOUS or x is None for x in xs):
            raise Unclean("the MLP's input is no single value", {"input": _where(c, i)})
        try:
            raw = expr.f(*xs)
            want = float(raw)
        except Exception as e:  # noqa: BLE001 - the function has no value here: the program raises
            raise Unclean(f"{expr.label}: the function raises on {xs}: {type(e).__name__}: {e}",
                          {"input": dict(zip(ins, map(rasp_value, xs)))})
        d = abs(float(got[i]) - want)
        if not d <= NUM_TOL:
            raise Unclean(f"{expr.label}: the MLP writes {float(got[i]):.6g} where the function gives {want:.6g}",
                          {"input": dict(zip(ins, map(rasp_value, xs))), "expected": want, "got": float(got[i])})
        worst = max(worst, d)
        if vals is not None and not _add_value(vals, raw):
            vals = None
    if vals is not None:  # f of the program's values (categorical, or numerical by program_inputs)
        dec.num_vals[nm] = vals
    if isinstance(expr, rasp.LinearSequenceMap):
        worst += abs(expr.fst_fac) * dec.num_dev.get(ins[0], 0.0) + abs(expr.snd_fac) * dec.num_dev.get(ins[1], 0.0)
    dec.num_dev[nm] = worst


def _add_value(table: Dict[float, List[Any]], v: Any) -> bool:
    """Record the program value ``v`` (a number the evaluator holds) in ``table`` (float -> objects).

    Returns False where ``v`` is no finite int, bool or float (the table then names no value set).
    """
    if not isinstance(v, (bool, int, float)) or not np.isfinite(float(v)):
        return False
    reps = table.setdefault(float(v), [])
    if not any(type(r) is type(v) and r == v for r in reps):
        reps.append(v)
    return True


#: The most distinct sums :func:`mean_values` enumerates (else the mean's values are not named).
MAX_MEAN_SUMS = 200_000


def mean_values(src_vals: Dict[float, List[Any]], default: Any, n: int) -> Optional[Dict[float, List[Any]]]:
    """Every value tracr's evaluator gives a numerical mean of ``src_vals``'s values (keys 1..n), or None.

    The evaluator (``rasp._mean``) returns ``default`` for no selected key, the key's own value
    (object) for one, else ``sum(xs) / len(xs)`` over int, bool and float values. Where every
    value is on a grid 2^-s and n |value| 2^s < 2^53, every partial sum in any order is an
    exact float (an integer multiple of 2^-s below 2^53 of them), so the sum of k values is
    exactly S 2^-s for some S in the k-fold sums of the grid integers, and ``sum / k`` is the
    correctly rounded quotient, which ``float(S) * 2^-s / k`` computes too (both exact operands,
    one IEEE division). The result is a superset of the values at any regular position (every
    multiset of k <= n values of ``src_vals``). None when a value is off the grid, the sums are
    too many (:data:`MAX_MEAN_SUMS`), or the default is no number.
    """
    out: Dict[float, List[Any]] = {}
    if not _add_value(out, default):
        return None
    xs = sorted(src_vals)
    s = next((s_ for s_ in range(31) if all(float(x * 2.0 ** s_).is_integer() for x in xs)), None)
    if s is None or max(map(abs, xs), default=0.0) * 2.0 ** s * n >= 2.0 ** 53:
        return None
    grid = sorted({int(x * 2.0 ** s) for x in xs})
    for x in xs:  # one key: the mean is its value itself
        for r in src_vals[x]:
            _add_value(out, r)
    sums = set(grid)
    for k in range(2, n + 1):
        sums = {a + b for a in sums for b in grid}
        if len(sums) > MAX_MEAN_SUMS:
            return None
        for t in sums:
            _add_value(out, float(t) * 2.0 ** -s / k)
    return out


def _numerical_input(dec: Decoder, src: str, nm: str) -> None:
    """A discretising MLP's numerical input must be checked (a deviation bound recorded for ``src``).

    Raises:
        NoSemantics: the input's values are not checked.
    """
    if dec.num_dev.get(src) is None:
        raise NoSemantics(f"the MLP writes {nm!r} from the numerical SOp {src!r}, whose values are not checked")


def program_inputs(dec: Decoder, expr: Any, src: str, nm: str, ideal: np.ndarray, c: Combos, n: int
                    ) -> np.ndarray:
    """[m] object: the PROGRAM's value of the numerical input ``src`` at each regular combination.

    tracr's discretising MLP computes ``f`` of one numerical SOp, and ``f`` may jump anywhere
    (``x < 0``, ``x == 0``, ``round(1 / x) - 1``): ``f`` of a value near the program's says
    nothing about ``f`` of the program's value. So the MLP's output at the ideal input v' is
    compared with ``f(v)``, ``v`` the program's value there, never with ``f(v')``:

    * where the deviation recorded for ``src`` (:attr:`Decoder.num_dev`) is exactly 0, every
      sublayer that produced it computed the same float64 value as the program's expression on
      the same inputs (:func:`_check_numerical_values`, :func:`_check_numerical_map`): v = v';
    * otherwise the deviation d bounds |v' - v| at every regular position, and v is one of the
      program's values ``dec.num_vals[src]`` (a superset, recorded where ``src`` was checked).
      When exactly ONE of them lies within d of v' (tested with d widened by float64 rounding
      and the mean's summation order, so the true v is never left out), it is v. Several
      objects for one number (``0`` the default, ``0.0`` a mean) must give the same ``f``.

    Soundness: the float32 part (:func:`mlps.certify_mlp`) proves the real output over
    [v' - r, v' + r] decodes like the ideal output at v'; this check proves that ideal output
    decodes to ``f(v)``, the program's value; so a threshold the weights put between v and v'
    (deciding ``f`` differently from the program) is a failure here, with the program value v as
    the witness input.

    Returns:
        the program values (the ideal values themselves where d == 0 and no value set is recorded;
        BOS rows: the ideal value).
    Raises:
        NoSemantics: the input is not checked, its program values are not known (a value off a
        dyadic grid, such as a mean of x / 3), or an ideal value is within d of no or of several
        program values, or several objects of one value give different ``f``.
    """
    d = dec.num_dev.get(src)
    _numerical_input(dec, src, nm)
    vals = dec.num_vals.get(src)
    if d == 0.0 and vals is None:
        return ideal
    if vals is None:
        raise NoSemantics(f"the MLP writes {nm!r} from the numerical SOp {src!r}, whose ideal values are within "
                          f"{d:.3g} of the program's, not equal: f there is not determined")
    keys = np.array(sorted(vals))
    out = ideal.astype(object)
    # |fl(p - v')| <= (1 + u) |p - v'|, fl(d (1 + 4u)) >= (1 + u) d; the rounding slack covers a mean's two
    # float64 sums (ideal and program) of up to n values, each at most the largest program value (a key:
    # one selected key's mean is its value) plus d
    slack = d * (1.0 + 4 * U64) + 4 * gamma(n + 1, U64) * (float(np.abs(keys).max(initial=0.0)) + d)
    memo: Dict[float, Any] = {}
    for i in np.flatnonzero(c.kind == 1):
        x = float(ideal[i])
        if x not in memo:
            if d == 0.0:  # v = v' (the number); the objects the program may hold for it, where recorded
                hit = np.flatnonzero(keys == x)
                if len(hit) == 0:
                    memo[x] = ideal[i]
                    out[i] = memo[x]
                    continue
            else:
                hit = np.flatnonzero(np.abs(keys - x) <= slack + 4 * U64 * abs(x))
            if len(hit) != 1:
                raise NoSemantics(f"the MLP writes {nm!r} from {src!r}, whose ideal value {x:.9g} is within "
                                  f"{d:.3g} of {len(hit)} program values: which one it stands for is not determined")
            reps = vals[float(keys[hit[0]])]
            fs = []
            for r in reps:
                try:
                    fs.append(expr.f(r))
                except Exception:  # noqa: BLE001 - where all raise, the caller names it
                    fs.append(_MISSING)
            if any(not (a is fs[0] or _same_value(a, fs[0])) for a in fs[1:]):
                raise NoSemantics(f"{expr.label}: the program's value {reps!r} of {src!r} is several objects "
                                  f"with different f: not determined")
            memo[x] = reps[0]
        out[i] = memo[x]
    return out


def _check_numerical_width(dec: Decoder, expr: Any, nm: str, aux: str, widths: np.ndarray, got: np.ndarray,
                           c: Combos) -> None:
    """A numerical SelectorWidth's MLP: every regular input 1 / (w + 1) (the head's mean, proved by
    :func:`_check_selector_width_head`) gives w within :data:`NUM_TOL`; the deviation is recorded for ``nm``
    (the width w is an integer: the program's value exactly), and the widths as its values."""
    worst = 0.0
    vals: Dict[float, List[Any]] = {}
    for i in np.flatnonzero(c.kind == 1):
        w = widths[i]
        if not isinstance(w, int):
            raise Unclean(f"{expr.label}: the MLP reads {w!r}, which is 1 / (w + 1) for no width w",
                          {"input": _where(c, i)})
        d = abs(float(got[i]) - w)
        if not d <= NUM_TOL:
            raise Unclean(f"{expr.label}: the MLP writes {float(got[i]):.6g} where the width is {w}",
                          {"input": {aux: 1.0 / (w + 1), "width": w}, "expected": w, "got": float(got[i])})
        worst = max(worst, d)
        _add_value(vals, w)
    dec.num_dev[nm] = worst
    dec.num_vals[nm] = vals  # the widths: the program's values exactly


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
    discretising: Dict[str, str] = {}  # map -> its numerical input (f of the program's value)
    for nm in written:
        expr = dec.link.nodes.get(nm)
        base = nm[: -len(SW_SUFFIX)]
        if nm.endswith(SW_SUFFIX) and isinstance(dec.link.nodes.get(base), rasp.SelectorWidth) and base in written:
            continue  # SelectorWidth's own 1 / (w + 1) direction (cleared at BOS): no program value
        if isinstance(expr, rasp.SelectorWidth):
            if rasp.is_numerical(expr) and not numerical_block(blocks, nm):
                raise NoSemantics(f"the numerical SelectorWidth {nm!r} is not a one-row block")
            if nm + SW_SUFFIX not in blocks:
                raise NoSemantics(f"SelectorWidth {nm!r} has no {SW_SUFFIX} direction")
            maps.append((nm, expr, [nm + SW_SUFFIX]))
            continue
        if isinstance(expr, rasp.Map) and not isinstance(expr, rasp.SequenceMap):
            maps.append((nm, expr, [expr.inner.label]))
        elif isinstance(expr, rasp.SequenceMap):
            maps.append((nm, expr, [expr.fst.label, expr.snd.label]))
        else:
            what = type(expr).__name__ if expr is not None else "no expression of the program"
            raise NoSemantics(f"the MLP writes {nm!r} ({what}): no look-up semantics to check")
        ins = maps[-1][2]
        num_in = [numerical_block(blocks, lab) for lab in ins]
        linear = isinstance(expr, rasp.LinearSequenceMap)
        if any(num_in) and not linear:  # tracr's discretising MLP: f of one numerical SOp
            if isinstance(expr, rasp.SequenceMap):
                raise NoSemantics(f"the MLP writes {nm!r} from a numerical input by a SequenceMap: not checked "
                                  f"here")
            _numerical_input(dec, ins[0], nm)
            discretising[nm] = ins[0]
        if rasp.is_numerical(expr):
            if not numerical_block(blocks, nm):
                raise NoSemantics(f"the numerical SOp {nm!r} is not a one-row block")
            if linear and not all(num_in):
                raise NoSemantics(f"the LinearSequenceMap {nm!r} reads a categorical SOp: not checked here")
    names = sorted(set(read_blocks(blocks, in_rows, w1)) | {s for _, _, ins in maps for s in ins})
    c = combos(state, blocks, names, in_rows, n, w=w1, keep=[s for _, _, ins in maps for s in ins])
    y = np.maximum(c.x @ w1 + b1, 0) @ w2 + b2
    inputs = {lab: _widths(state, c, lab) if lab.endswith(SW_SUFFIX) else
              _scalars(state, c, lab) if numerical_block(blocks, lab) else sop_column(state, blocks, dec, c, lab)
              for lab in {s for _, _, ins in maps for s in ins}}
    ideal_inputs = inputs
    for nm, expr, ins in maps:
        inputs = ideal_inputs
        if nm in discretising:  # f of the PROGRAM's value of the numerical input (program_inputs)
            inputs = dict(ideal_inputs)
            inputs[ins[0]] = program_inputs(dec, expr, ins[0], nm, ideal_inputs[ins[0]], c, n)
        cols = np.flatnonzero(np.isin(out_rows, blocks[nm].rows))
        vecs = np.zeros((len(c.x), len(blocks[nm].rows)))
        vecs[:, np.searchsorted(blocks[nm].rows, out_rows[cols])] = y[:, cols]
        if isinstance(expr, rasp.SelectorWidth) and rasp.is_numerical(expr):
            _check_numerical_width(dec, expr, nm, ins[0], inputs[ins[0]], vecs[:, 0], c)
            continue
        if rasp.is_numerical(expr):
            _check_numerical_map(dec, expr, nm, ins, inputs, vecs[:, 0], c)
            continue
        got_all = dec.decode_rows(nm, vecs)
        for i in np.flatnonzero(c.kind == 1):
            xs = [inputs[lab][i] for lab in ins]
            if any(x is AMBIGUOUS for x in xs):
                raise Unclean("the MLP's input is no single value", {"input": _where(c, i)})
            if isinstance(expr, rasp.SelectorWidth):
                want = xs[0]  # the width the head's 1 / (w + 1) names
                if not isinstance(want, int):
                    raise Unclean(f"{expr.label}: the MLP reads {want!r}, which is 1 / (w + 1) for no width w",
                                  {"input": _where(c, i)})
            else:
                try:
                    want = None if any(x is None for x in xs) else expr.f(*xs)
                except Exception as e:  # the function has no value here: the program raises
                    raise Unclean(f"{expr.label}: the function raises on {xs}: {type(e).__name__}: {e}",
                                  {"input": dict(zip(ins, map(rasp_value, xs)))})
            got = got_all[i]
            if _same_value(got, want):
                continue
            got = [round(float(v), 4) for v in vecs[i]] if got is AMBIGUOUS else got
            raise Unclean(f"{expr.label}: the MLP writes {rasp_value(got)!r} where the function gives {rasp_value(want)!r}",
                          {"input": dict(zip(ins, map(rasp_value, xs))), "expected": rasp_value(want), "got": rasp_value(got)})


# -------------------------------------------------------------------------- the read-out


def check_readout(model: CompiledModel, state: State, blocks: Dict[str, Block], dec: Decoder) -> Optional[float]:
    """Every ideal vector of the output SOp decodes through the unembedding to the value it holds.

    A numerical output: returns a bound on |ideal read-out - program value| (the deviations the
    checked sublayers recorded, :attr:`Decoder.num_dev`); the report adds the float32 radius and
    compares with ``atol``. A categorical output returns None.

    Raises:
        Unclean: a read-out value differs (witness: expected, got), or an ideal vector of the
            output holds no single value (witness: the vector).
        NoSemantics: the output is numerical, or the unembedding reads another block.
    """
    sink = dec.link.sink
    u = np.asarray(model.params["unembed"]["w"], np.float64)
    if not model.categorical_output and numerical_block(blocks, sink):
        other = np.setdiff1d(np.flatnonzero(np.abs(u).sum(1) > 0), blocks[sink].rows)
        if len(other) or sink not in dec.num_dev:
            raise NoSemantics("the numerical read-out reads rows outside the output SOp, or the output's "
                              "value is not checked")
        vals = state.sets[1][sink][:, 0]
        out = vals * u[blocks[sink].rows[0], 0]
        return float(np.abs(out - vals).max(initial=0.0)) + dec.num_dev[sink]
    if sink not in blocks or not dec.decodable(sink):    u = np.asarray(model.params["unembed"]["w"], np.float64)
    other = np.setdiff1d(np.flatnonzero(np.abs(u).sum(1) > 0), blocks[sink].rows)
    if len(other):
        raise NoSemantics("the read-out reads rows outside the output SOp")
    for vec in state.sets[1][sink]:
        try:
            want = dec.decode(sink, vec)
        except _Ambiguous:  # the sublayer that wrote it is refused too; the read-out has no value to prove
            raise Unclean(f"the output {sink} has an ideal vector that holds no single value",
                          {"vector": [round(float(v), 4) for v in vec]}) from None
        logits = vec @ u[blocks[sink].rows]
        got = None if logits.max() < 0.5 else model.output_values[int(logits.argmax())]
        if isinstance(want, frozenset):  # a set-valued output reads out as the set of its one token
            if want != (frozenset() if got is None else frozenset([got])):
                raise Unclean(f"the read-out decodes {sink} = {sorted(map(rasp_value, want), key=repr)!r} as "
                              f"{rasp_value(got)!r}", {"expected": sorted(map(rasp_value, want), key=repr),
                                                  "got": rasp_value(got)})
            continue
        if not (got is None and want is None) and (got is None or want is None or got != want):
            raise Unclean(f"the read-out decodes {sink} = {rasp_value(want)!r} as {rasp_value(got)!r}",
                          {"expected": rasp_value(want), "got": rasp_value(got)})


# ------------------------------------------------------------------ causal selectors (no weights)


def causal_selector_failures(model: CompiledModel) -> List[Dict[str, Any]]:
    """RASP selectors that select a key after the query in a causal model, from the program alone.

    A RASP ``Select`` is bidirectional; a causal compile masks later keys, so such a selector
    computes something else (SPEC §8). Decided only where it is certain from the value sets:
    keys and queries that are ``indices`` (RASP index = position - 1) or ``tokens`` (any token
    at any position); a selector over other SOps (whose values depend on positions) is left to
    the certificate's table check (:func:`check_head`). Needs no certificate.

    Args:
        model: a compiled model (its :attr:`~constructions.model.CompiledModel.program`).
    Returns:
        One ``{"selector", "key", "query", "why"}`` per such selector, with a witness pair of
        RASP values (indices where the SOp is ``indices``); [] for a bidirectional model or a
        model with no program linked.
    """
    link = model.program
    if link is None or not model.arch.causal:
        return []
    n = int(model.max_seq_len)
    vocab = list(model.vocab)
    out = []
    for label, expr in link.nodes.items():
        if not isinstance(expr, rasp.Select):
            continue
        ks, qs = expr.keys, expr.queries
        if not all(isinstance(x, (rasp.IndicesType, rasp.TokensType)) for x in (ks, qs)):
            continue
        kvals = list(range(n)) if isinstance(ks, rasp.IndicesType) else vocab
        qvals = list(range(n)) if isinstance(qs, rasp.IndicesType) else vocab
        for k, q in itertools.product(kvals, qvals):
            if isinstance(ks, rasp.IndicesType):  # the key sits at index k: a query before it needs k >= 1
                later = k > q if isinstance(qs, rasp.IndicesType) else k >= 1
            else:  # any token at any index after the query's
                later = q < n - 1 if isinstance(qs, rasp.IndicesType) else n >= 2
            if not later:
                continue
            try:
                hit = bool(expr.predicate(k, q))
            except Exception:  # no value here: the certificate's table check names it
                continue
            if hit:
                out.append({"selector": label, "key": rasp_value(k), "query": rasp_value(q),
                            "why": "causal model: the selector selects a key after the query, which the mask hides"})
                break
    return out


# -------------------------------------------------------------------------------- helpers


def _where(c: Combos, i: Optional[int]) -> Dict[str, Any]:
    if i is None:
        return {}
    return {"position": "BOS" if c.kind[i] == 0 else (int(c.position[i]) if c.position[i] >= 0 else "any")}


def _name(expr: Any) -> str:
    if isinstance(expr, rasp.Aggregate):
        return f"Aggregate {expr.label}"
    return f"{expr.kind} head {expr.label}"
