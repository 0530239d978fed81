"""The abstract state: residual blocks, their sets of ideal vectors, and one radius per row.

Soundness argument. The residual stream is cut into *blocks* by tracr's labels
(``name:value`` rows of one SOp, ``one``, ``tokens``, ``indices``, angle ``position``).
Every position is BOS (position 0) or a regular position (1..n). The state holds, for every
block and both kinds of position, a finite set of *ideal vectors*: every vector the block
can hold at such a position in the exact hardmax evaluation of the weights, on any input of
length 1..N. The embedding gives these sets exactly (one row per token, position rows for
the position blocks, zero for written blocks). A sublayer's write is added to every vector
the block may already hold (:func:`write`), so the sets stay a superset of what occurs.

One radius per residual row bounds |x - ideal| at every position of every input (infinity
norm), and for each block an l1 bound (a leak moves attention mass between one-hot values,
so a one-hot block's error is small in l1 even when every row may move a little); the
radius of a row is never more than its block's l1 bound. Each sublayer adds its own output
radius, and :func:`write` adds the float32 rounding of the residual addition (one u of the
magnitude). A *guard* per ideal vector is a position that exists whenever the block holds
that vector (a pointer's target was attended, so positions 0..guard are in the input and,
in a causal model, visible to the query): it only narrows which keys a query may see, and
is a minimum over every way the vector arises.

:func:`side` enumerates every combination of the ideal vectors one projection reads (the
cross product over the blocks read, and every position where a position block is read);
values the projection maps to the same vector are one combination (they are
indistinguishable to that projection). Enumeration is refused beyond :data:`MAX_TUPLES`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from depthcraft.constructions.model import BOS, PAD, CompiledModel
from depthcraft.verify.certify.float32 import U32, up

#: Most combinations one side of a head (or one MLP) may enumerate.
MAX_TUPLES = 2_000_000


class TooLarge(Exception):
    """A table or a set of ideal vectors is too large to enumerate (the certificate says so)."""


class Unclean(Exception):
    """A sublayer cannot be certified: ``why`` (a sentence) and ``witness`` (JSON-safe) say where."""

    def __init__(self, why: str, witness: Any):
        super().__init__(why)
        self.why, self.witness = why, witness


# ----------------------------------------------------------------------------------- blocks


@dataclasses.dataclass
class Block:
    """A group of residual rows holding one SOp (or ``one``, ``tokens``, a position encoding).

    Attributes:
        name: the SOp's label (tracr's label prefix before ``:``).
        rows: [r] int residual indices, in residual order.
        values: the value of each row (tracr's ``name:value`` suffix) or None for a numerical row.
        kind: ``"position"`` (set by the position embedding), ``"token"`` (set by the token
            embedding) or ``"written"`` (zero until a sublayer writes it).
    """

    name: str
    rows: np.ndarray
    values: List[Any]
    kind: str

    @property
    def categorical(self) -> bool:
        """Whether the block is one-hot over named values (tracr categorical SOp)."""
        return all(v is not None for v in self.values) and self.kind != "position"

    def describe(self, vec: np.ndarray) -> Any:
        """A value for a witness: the one-hot's value, ``None`` for zero, else the rounded vector."""
        vec = np.asarray(vec, np.float64)
        if self.categorical:
            nz = np.flatnonzero(np.abs(vec) > 1e-9)
            if len(nz) == 0:
                return None
            if len(nz) == 1 and abs(vec[nz[0]] - 1.0) < 1e-9:
                v = self.values[nz[0]]
                return v.item() if isinstance(v, np.generic) else v
        return [round(float(x), 6) for x in vec]


def _parse_value(s: str) -> Any:
    try:
        return int(s)
    except ValueError:
        return s


def blocks_of(model: CompiledModel) -> List[Block]:
    """Cut the residual stream into blocks by tracr's labels (see :class:`Block`).

    Raises:
        ValueError: a block mixes rows of the position embedding, the token embedding and
            written rows (not a layout tracr produces).
    """
    labels = model.residual_labels
    pos_rows = np.abs(np.asarray(model.params["embed"]["pos"])).sum(0) > 0
    tok_rows = np.abs(np.asarray(model.params["embed"]["token"])).sum(0) > 0
    groups: Dict[str, List[int]] = {}
    for i, lab in enumerate(labels):
        groups.setdefault(lab.split(":", 1)[0], []).append(i)
    out = []
    for name, rows in groups.items():
        rows = np.asarray(rows, int)
        kinds = {"position" if pos_rows[i] else "token" if tok_rows[i] else "written" for i in rows}
        if len(kinds) > 1 and not (kinds == {"token", "written"} and name == "tokens"):
            raise ValueError(f"residual block {name!r} mixes {sorted(kinds)} rows")
        kind = kinds.pop() if len(kinds) == 1 else "token"
        values = [_parse_value(labels[i].split(":", 1)[1]) if ":" in labels[i] else None for i in rows]
        out.append(Block(name, rows, values, kind))
    return out


# ------------------------------------------------------------------------------------ state


@dataclasses.dataclass
class State:
    """Ideal vector sets per block and position kind, the position table, and one radius per row.

    ``sets[c][name]``: [m, len(rows)] float64 unique ideal vectors of block ``name`` at
    position kind c (0 = BOS, 1 = regular). ``pos[name]``: [N + 1, len(rows)] ideal vector of
    a position block at each model position. ``radius``: [D] float64. ``guard[c][name]``: [m] int,
    for each ideal vector a position that exists whenever the block holds it (a pointer's target
    was attended, so it exists: positions 0..guard are present in the input, and, in a causal
    model, visible to the query). ``l1[name]``: bound on the l1 norm of a block's error (a leak moves
    attention mass between one-hot values, so a one-hot block's error is small in l1 even when
    every row may move a little). ``row_block``: [D] the block index of every row.
    """

    sets: List[Dict[str, np.ndarray]]
    pos: Dict[str, np.ndarray]
    radius: np.ndarray
    guard: List[Dict[str, np.ndarray]] = dataclasses.field(default_factory=lambda: [{}, {}])
    l1: Dict[str, float] = dataclasses.field(default_factory=dict)
    row_block: Optional[np.ndarray] = None
    #: set-valued blocks: name -> product domain (:class:`.sets.SetDom`) and its rows; never enumerated
    setdom: Dict[str, Any] = dataclasses.field(default_factory=dict)
    setdom_rows: Dict[str, np.ndarray] = dataclasses.field(default_factory=dict)


def unique_rows(a: np.ndarray) -> np.ndarray:
    """Unique rows of ``a`` [m, d] (sorted), or ``a`` itself when empty."""
    return np.unique(a, axis=0) if len(a) else a


def unique_min(vecs: np.ndarray, guard: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Unique rows of ``vecs`` [m, d] and, for each, the smallest ``guard`` [m] among its copies."""
    uniq, inv = np.unique(vecs, axis=0, return_inverse=True)
    g = np.full(len(uniq), np.iinfo(np.int64).max)
    np.minimum.at(g, inv.ravel(), guard)
    return uniq, g


def initial_state(model: CompiledModel, blocks: Sequence[Block]) -> State:
    """The state after the embedding: token and position rows exactly, written blocks zero, radius 0."""
    token = np.asarray(model.params["embed"]["token"], np.float64)
    pos = np.asarray(model.params["embed"]["pos"], np.float64)
    vocab_ids = [i for i, v in enumerate(model.input_values) if v not in (BOS, PAD)]
    bos = model.input_values.index(BOS)
    sets: List[Dict[str, np.ndarray]] = [{}, {}]
    positions: Dict[str, np.ndarray] = {}
    n = model.max_seq_len
    for b in blocks:
        if b.kind == "position":
            positions[b.name] = pos[: n + 1][:, b.rows]
        elif b.kind == "token":
            sets[0][b.name] = token[[bos]][:, b.rows]
            sets[1][b.name] = unique_rows(token[vocab_ids][:, b.rows])
        else:
            z = np.zeros((1, len(b.rows)))
            sets[0][b.name], sets[1][b.name] = z, z.copy()
    # a regular position i >= 1 always has positions 0 and 1 before it; BOS only itself
    guard = [{k: np.zeros(len(v), int) for k, v in sets[0].items()}, {k: np.ones(len(v), int) for k, v in sets[1].items()}]
    row_block = np.zeros(len(model.residual_labels), int)
    for i, b in enumerate(blocks):
        row_block[b.rows] = i
    return State(sets, positions, np.zeros(len(model.residual_labels)), guard,
                 {b.name: 0.0 for b in blocks}, row_block)


def lin_err(state: State, blocks: Sequence[Block], rows: np.ndarray, m: np.ndarray) -> np.ndarray:
    """[k] bound on |sum_i e_i m[i, c]| over the residual errors e on ``rows`` ([len(rows), k] ``m``).

    Per block: min(sum_i r_i |m[i, c]| (the row radii), l1 x max_i |m[i, c]| (the block's l1 bound)).
    """
    m = np.abs(np.asarray(m, np.float64))
    if m.ndim == 1:
        m = m[:, None]
    out = np.zeros(m.shape[1])
    ids = state.row_block[rows]
    for bi in np.unique(ids):
        sel = ids == bi
        sub = m[sel]
        out += np.minimum(state.radius[rows[sel]] @ sub, state.l1[blocks[bi].name] * sub.max(0))
    return out


@dataclasses.dataclass
class Side:
    """Every combination of the ideal vectors of the blocks one projection reads.

    contrib: [n, e] the projection of each combination (float64).
    absval: [n, e] the projection of |ideal| + radius through |W| (for the float32 term).
    kind: [n] 0 (BOS) or 1 (regular position).
    position: [n] model position, or -1 where no position block is read.
    pinned: [n] whether the combination names a single position (reads a position block, or BOS).
    guard: [n] a position that exists whenever the combination is read (see :class:`State`).
    parts: per combination, the index of a vector taken from each non-position block (a
        representative: values the projection maps to the same vector are one combination).
    names: the non-position blocks read (order of ``parts``).
    member: per non-position block, [m] for every regular ideal vector of the block (index into
        ``state.sets[1][name]``) the representative of its group (the index ``parts`` uses):
        the vectors the projection cannot tell apart from it.
    """

    contrib: np.ndarray
    absval: np.ndarray
    kind: np.ndarray
    position: np.ndarray
    pinned: np.ndarray
    parts: np.ndarray
    names: List[str]
    pos_names: List[str]
    guard: np.ndarray
    member: Dict[str, np.ndarray] = dataclasses.field(default_factory=dict)


def _position_part(state: "State", blocks: Dict[str, "Block"], read, pos_names, w: np.ndarray, kind: int,
                   n: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The position blocks' part of a projection ``x @ w`` [rows, e], per position of one kind
    (0: BOS, 1: positions 1..n): (ideal part [p, e], its magnitude bound (|x| + r)|w| [p, e],
    the positions [p]); one zero row at position -1 when no position block is read."""
    e = w.shape[1]
    if not pos_names:
        return np.zeros((1, e)), np.zeros((1, e)), np.array([-1])
    positions = np.array([0]) if kind == 0 else np.arange(1, n + 1)
    pc, pa = np.zeros((len(positions), e)), np.zeros((len(positions), e))
    for nm in pos_names:
        idx = read[nm]
        wi = w[[i for i, _ in idx]]
        v = state.pos[nm][positions][:, [j for _, j in idx]]
        r = state.radius[blocks[nm].rows[[j for _, j in idx]]]
        pc += v @ wi
        pa += (np.abs(v) + r) @ np.abs(wi)
    return pc, pa, positions


def _reads(blocks: Dict[str, Block], rows: np.ndarray, w: np.ndarray):
    """The live rows of ``w`` ([len(rows), e]) grouped by block: (rows, w, read, names, pos_names),
    read[name] = [(row index into w, row index into the block)], names the non-position blocks."""
    w = np.asarray(w, np.float64)
    live = np.abs(w).sum(1) > 0
    rows, w = rows[live], w[live]
    row_block = {}
    for name, b in blocks.items():
        for j, r in enumerate(b.rows):
            row_block[int(r)] = (name, j)
    read: Dict[str, List[Tuple[int, int]]] = {}
    for i, r in enumerate(rows):
        name, j = row_block[int(r)]
        read.setdefault(name, []).append((i, j))
    pos_names = [nm for nm in read if blocks[nm].kind == "position"]
    names = [nm for nm in read if blocks[nm].kind != "position"]
    return rows, w, read, names, pos_names


def _block_tables(state: State, blocks: Dict[str, Block], read, names: List[str], w: np.ndarray, kind: int):
    """Per non-position block read, its ideal vectors deduplicated by their projection through
    ``w``: [(name, contrib [m, e], absval [m, e], guard [m], first [m], inv [vectors])], contrib
    the projection, absval (|x| + r) |w|, guard the smallest of the merged vectors' guards, first
    the index of each group's first vector, inv each vector's group."""
    out = []
    for nm in names:
        idx = read[nm]
        wi = w[[i for i, _ in idx]]
        proj, first, inv = np.unique(state.sets[kind][nm][:, [j for _, j in idx]], axis=0, return_index=True,
                                     return_inverse=True)
        inv = inv.ravel()
        g = np.full(len(proj), np.iinfo(np.int64).max)
        np.minimum.at(g, inv, state.guard[kind][nm])
        r = state.radius[blocks[nm].rows[[j for _, j in idx]]]
        out.append((nm, proj @ wi, (np.abs(proj) + r) @ np.abs(wi), g, first, inv))
    return out


def _cross(pc: np.ndarray, pa: np.ndarray, pos_col: np.ndarray, kind: int, factors, limit: int, what: str):
    """The product of the position part (pc, pa, pos_col) and the blocks' ``factors``
    [(contrib, absval, guard, rep)]: (contrib, absval, kind, position, parts, guard), one entry
    per combination.

    Raises:
        TooLarge: more than ``limit`` combinations (checked before any is built); ``what`` names them.
    """
    count = len(pc) * int(np.prod([len(f[0]) for f in factors], dtype=np.int64))
    if count > limit:
        raise TooLarge(f"{count} combinations of {what}")
    grids = np.meshgrid(np.arange(len(pc)), *[np.arange(len(f[0])) for f in factors], indexing="ij")
    flat = [g.ravel() for g in grids]
    contrib, absval = pc[flat[0]].copy(), pa[flat[0]].copy()
    guard = np.maximum(pos_col[flat[0]], kind)
    for f, ix in zip(factors, flat[1:]):
        contrib += f[0][ix]
        absval += f[1][ix]
        guard = np.maximum(guard, f[2][ix])
    parts = np.stack([f[3][ix] for f, ix in zip(factors, flat[1:])], 1) if factors else \
        np.zeros((len(flat[0]), 0), int)
    return contrib, absval, np.full(len(contrib), kind), pos_col[flat[0]], parts, guard


def side(state: State, blocks: Dict[str, Block], rows: np.ndarray, w: np.ndarray, n: int) -> Side:
    """Enumerate the combinations read through ``w`` ([len(rows), e]) at BOS and regular positions.

    Raises:
        TooLarge: more than :data:`MAX_TUPLES` combinations at one kind of position.
        Unclean: ``w`` reads a set-valued block (:mod:`.sets`: a product domain, not a finite set).
    """
    rows, w, read, names, pos_names = _reads(blocks, rows, w)
    for nm, srows in state.setdom.items():
        if np.isin(rows, srows).any():
            raise Unclean(f"the set-valued block {nm!r} is read by a sublayer the set analysis does not know",
                          {"block": nm})
    out = []
    member: Dict[str, np.ndarray] = {}
    for kind in (0, 1):
        pc, pa, pos_col = _position_part(state, blocks, read, pos_names, w, kind, n)
        factors = []
        for nm, c, a, g, first, inv in _block_tables(state, blocks, read, names, w, kind):
            if kind == 1:  # values this projection cannot tell apart are one combination
                member[nm] = first[inv]
            factors.append((c, a, g, first))
        out.append(_cross(pc, pa, pos_col, kind, factors, MAX_TUPLES, f"{names + pos_names}"))
    contrib, absval, kinds, position, parts, guard = (np.concatenate(x) for x in zip(*out))
    pinned = (kinds == 0) | (position >= 0)
    return Side(contrib, absval, kinds, position, pinned, parts, names, pos_names, guard, member)


def describe(sd: Side, i: int, blocks: Dict[str, Block], state: State) -> Dict[str, Any]:
    """A witness for combination ``i`` of ``sd``: its position and the value of each block read."""
    d: Dict[str, Any] = {"position": "BOS" if sd.kind[i] == 0 else (int(sd.position[i]) if sd.position[i] >= 0
                                                                     else "any")}
    for nm, k in zip(sd.names, sd.parts[i]):
        d[nm] = blocks[nm].describe(state.sets[int(sd.kind[i])][nm][k])
    return d


def ideal_side_vectors(state: State, blocks: Dict[str, Block], rows: np.ndarray, n: int) -> np.ndarray:
    """[m, len(rows)] every ideal residual (restricted to ``rows``) over the combinations read, for delta."""
    eye = np.eye(len(rows))
    return side(state, blocks, rows, eye, n).contrib


def write(state: State, blocks: Dict[str, Block], out_rows: np.ndarray, writes: Sequence[np.ndarray],
          r_out: Tuple[np.ndarray, Dict[str, float]]) -> None:
    """Add the ideal writes (per kind [m, Do]) to the blocks of ``out_rows``; grow their radii.

    ``r_out``: ([Do] row radius of the write, {block: l1 bound of the write}).

    Raises:
        Unclean: a sublayer writes into a position block.
        TooLarge: a block would hold more than :data:`MAX_TUPLES` ideal vectors.
    """
    r_out, l1_out = r_out
    for b in blocks.values():
        sel = np.isin(out_rows, b.rows)
        if not sel.any():
            continue
        if b.kind == "position":
            raise Unclean(f"a sublayer writes into the position block {b.name!r}", {"block": b.name})
        cols = np.flatnonzero(sel)
        where = np.searchsorted(b.rows, out_rows[cols])
        for kind in (0, 1):
            old, old_g = state.sets[kind][b.name], state.guard[kind][b.name]
            vecs, g = writes[kind]
            w = np.zeros((len(vecs), len(b.rows)))
            w[:, where] = vecs[:, cols]
            w, g = unique_min(w, g)
            new = (old[:, None, :] + w[None, :, :]).reshape(-1, len(b.rows))
            if len(new) > MAX_TUPLES:
                raise TooLarge(f"block {b.name} would hold {len(new)} ideal vectors")
            state.sets[kind][b.name], state.guard[kind][b.name] = unique_min(
                new, np.maximum(old_g[:, None], g[None, :]).ravel())
    mag = np.zeros(len(state.radius))
    for b in blocks.values():
        if b.kind != "position":
            mag[b.rows] = np.maximum(np.abs(state.sets[0][b.name]).max(0), np.abs(state.sets[1][b.name]).max(0))
    state.radius[out_rows] += r_out
    add = U32 * (mag[out_rows] + state.radius[out_rows])  # float32 rounding of the residual add
    state.radius[out_rows] += add
    for b in blocks.values():
        sel = np.isin(out_rows, b.rows)
        if sel.any():
            norm1 = max(float(np.abs(state.sets[k][b.name]).sum(1).max()) for k in (0, 1))
            state.l1[b.name] = up(state.l1[b.name] + l1_out.get(b.name, float(r_out[sel].sum()))
                                  + U32 * (norm1 + state.l1[b.name]))
            state.radius[b.rows] = np.minimum(state.radius[b.rows], state.l1[b.name])
    state.radius[out_rows] = [up(v) for v in state.radius[out_rows]]


# ------------------------------------------------------------------ factored sides (large heads)


@dataclasses.dataclass
class SideTables:
    """One side of a head, not enumerated: per kind of position, the position rows and each block's
    projected vectors (the factors of :func:`side`'s cross product).

    ``kinds[c]`` for c in (0, 1): ``(pc [p, e], pa [p, e], pos_col [p], [(name, contrib [m, e],
    absval [m, e], guard [m], first [m], vec_to_row [M])])``: the projection of each position row
    (and of |x| + r through |W|), and per non-position block the projection of each distinct
    projected vector (``first``: the index of a vector of ``state.sets[c][name]`` giving it;
    ``vec_to_row``: the row each of the block's M vectors projects to).
    """

    kinds: List[Any]
    names: List[str]
    pos_names: List[str]

    def count(self, kind: int) -> int:
        """How many combinations :func:`side` would enumerate at this kind of position."""
        pc, _, _, tabs = self.kinds[kind]
        return len(pc) * int(np.prod([len(t[1]) for t in tabs], dtype=np.int64))

    def contrib_bound(self) -> np.ndarray:
        """[e] an upper bound on |contrib| of every combination (sum of the factors' largest |.|)."""
        out = []
        for pc, _, _, tabs in self.kinds:
            b = np.abs(pc).max(0) + sum((np.abs(t[1]).max(0) for t in tabs), np.zeros(pc.shape[1]))
            out.append(b)
        return np.maximum(*out)

    def abs_factors(self, m: np.ndarray) -> np.ndarray:
        """[k] max over combinations of |m^T contrib| bounded by the sum over factors of max |m^T factor|,
        for ``m`` [k, e]: every combination's contrib is the sum of one row of each factor."""
        out = np.zeros(len(m))
        for pc, _, _, tabs in self.kinds:
            tot = np.abs(m @ pc.T).max(1) + sum((np.abs(m @ t[1].T).max(1) for t in tabs), np.zeros(len(m)))
            out = np.maximum(out, tot)
        return out


def side_tables(state: State, blocks: Dict[str, Block], rows: np.ndarray, w: np.ndarray, n: int) -> SideTables:
    """The factors of :func:`side` (same projections, deduplication and guards), without the product."""
    rows, w, read, names, pos_names = _reads(blocks, rows, w)
    kinds = []
    for kind in (0, 1):
        pc, pa, pos_col = _position_part(state, blocks, read, pos_names, w, kind, n)
        kinds.append((pc, pa, pos_col, _block_tables(state, blocks, read, names, w, kind)))
    return SideTables(kinds, names, pos_names)


def reduce_side(st: SideTables, queries: np.ndarray, max_count: Optional[int] = None) -> Side:
    """The combinations of ``st`` as the query rows ``queries`` [r, e] see them: a :class:`Side`.

    Per block, vectors whose score contributions q . c agree (equal float64 values) for every
    query row are one combination (the block's vectors the rows cannot tell apart): its
    ``contrib`` is one member's, its ``absval`` the members' largest, its guard their smallest,
    and ``member`` maps every vector to its group's representative. Positions are never merged.
    The score of a combination is then one member's; the real scores of the members differ by
    at most the float64 rounding of the per-block products (the caller adds it to eps).

    Raises:
        TooLarge: more than ``max_count`` (default :data:`MAX_TUPLES`) combinations at one kind of
            position (checked before any is built).
    """
    limit = MAX_TUPLES if max_count is None else min(MAX_TUPLES, max_count)
    out, member = [], {}
    for kind in (0, 1):
        pc, pa, pos_col, tabs = st.kinds[kind]
        groups = []
        for nm, c, a, g, first, vec_to_row in tabs:
            vals = queries @ c.T  # [r, m]
            _, grp = np.unique(vals.T, axis=0, return_inverse=True)
            grp = grp.ravel()
            ng = int(grp.max(initial=-1)) + 1
            rep = np.unique(grp, return_index=True)[1]  # the first row of each group (groups 0..ng-1)
            amax = np.full((ng, a.shape[1]), -np.inf)
            np.maximum.at(amax, grp, a)
            gmin = np.full(ng, np.iinfo(np.int64).max)
            np.minimum.at(gmin, grp, g)
            groups.append((c[rep], amax, gmin, first[rep]))
            if kind == 1:
                member[nm] = first[rep][grp][vec_to_row]
        out.append(_cross(pc, pa, pos_col, kind, groups, limit, f"{st.names + st.pos_names} (grouped by score)"))
    contrib, absval, kinds, position, parts, guard = (np.concatenate(x) for x in zip(*out))
    pinned = (kinds == 0) | (position >= 0)
    return Side(contrib, absval, kinds, position, pinned, parts, list(st.names), list(st.pos_names), guard, member)


def head_weights(spec, p, h: int, d: int):
    """Head ``h``'s rows and matrices in float64: (q_rows, k_rows, v_rows, out_rows, wq, wk, wvo).

    ``spec`` is the sublayer's :class:`~constructions.runtime.SublayerSpec`, ``p`` its weights
    (``w_q``, ``w_k``: [heads, rows, d_head]; ``w_v``: [heads, rows, d_v]; ``w_o``: [heads, d_v,
    rows]), ``d`` the residual width. ``wq`` is W_Q times the sublayer's ``qk_scale``; ``wvo`` is
    W_V W_O ([len(v_rows), len(out_rows)]).
    """
    q_rows, k_rows, v_rows = spec.rows("q_rows", d), spec.rows("k_rows", d), spec.rows("v_rows", d)
    wq = np.asarray(p["w_q"][h], np.float64) * float(spec.qk_scale)
    wk = np.asarray(p["w_k"][h], np.float64)
    wvo = np.asarray(p["w_v"][h], np.float64) @ np.asarray(p["w_o"][h], np.float64)
    return q_rows, k_rows, v_rows, spec.rows("out_rows", d), wq, wk, wvo
