"""The abstract state of the tables route: residual blocks, their ideal vectors, one radius per row.

**Invariant** (checked sublayer by sublayer, :mod:`.tables`). On every input of length 1..N
over the vocabulary (BOS first) and at every position p, the float32 residual stream, restricted
to a block's rows, is within ``radius`` (per row, absolute) of one of the block's *ideal
vectors*: for a position block, the position embedding's row p itself; for any other block, one
of the finite set ``sets[kind][block]`` (kind 0 at BOS, 1 at positions 1..n). The state keeps no
relation between blocks, except through positions and *guards*: ``guard[kind][block][m]`` is a
position g such that whenever a position holds vector m in that block, positions 0..g exist in
the input and, in a causal model, are visible to it (a copied pointer's target was attended).
The embedding makes the invariant hold with radius 0 (:func:`initial`).

**Blocks** are tracr's label groups (``name:value`` rows of one SOp, ``one``, ``tokens``, a
position encoding). A block is a *position* block when the position embedding sets one of its
rows, a *token* block when the token embedding does, else *written*; a block both embeddings set,
or a position block a sublayer writes, is refused (no such layout is certified).

**Sides** (:func:`side`): every combination of the ideal vectors of the blocks one projection
reads (and of the blocks whose values the program check needs), with the position where a
position block is read; vectors a projection maps to the same point are one combination unless
their block is *kept* (its values are decoded).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional, Sequence

import numpy as np

from depthcraft.checker.float32 import U64, gamma
from depthcraft.checker.modelfile import Model

#: Most combinations one side may enumerate.
MAX_COMBOS = 4_000_000
#: A categorical row counts as holding its value above this, as not holding it below 1 - this.
HOT = 0.5


class Refused(Exception):
    """The tables route cannot certify this model: ``why`` and a JSON-safe ``witness``."""

    def __init__(self, why: str, witness: Any = None):
        super().__init__(why)
        self.why, self.witness = why, witness


class Mismatch(Refused):
    """A table of the weights differs from the program (the program half fails): *rejected*."""


class Unsupported(Refused):
    """A route or a block kind this checker version does not check: the certificate is *not
    independently checked* (neither valid nor a failure of the model)."""


@dataclasses.dataclass
class Block:
    """A residual block: ``name``, its ``rows`` [r], ``kind`` (position / token / written), and per
    row its program value (``values``; ``NUM`` for a number row, ``ANGLE`` for a cos/sin row)."""

    name: str
    rows: np.ndarray
    kind: str
    values: List[Any]


NUM, ANGLE, UNKNOWN = object(), object(), object()


def blocks_of(model: Model, vsets: Dict[str, List[Any]]) -> Dict[str, Block]:
    """The residual blocks (module docstring), each row given its value from the program's value sets.

    Raises:
        Refused: a block both embeddings set, or two values print as one row label.
    """
    from depthcraft.checker.program import same
    tok = np.abs(model.token).sum(0) > 0
    pos = np.abs(model.pos).sum(0) > 0
    groups: Dict[str, List[int]] = {}
    for i, lab in enumerate(model.labels):
        groups.setdefault(lab.split(":", 1)[0], []).append(i)
    out = {}
    for name, rows in groups.items():
        rows_a = np.asarray(rows, np.int64)
        if pos[rows_a].any() and tok[rows_a].any():
            raise Refused(f"residual block {name!r} is set by both the token and the position embedding")
        kind = "position" if pos[rows_a].any() else "token" if tok[rows_a].any() else "written"
        values = []
        for i in rows:
            lab = model.labels[i]
            if ":" not in lab:
                values.append(NUM)
                continue
            suffix = lab.split(":", 1)[1]
            known = vsets.get(name) or (list(range(model.n)) if name == "indices" else [])
            hits = [v for v in known if str(v) == suffix]
            if name == "tokens" and suffix in ("BOS", "PAD"):
                values.append(suffix)
            elif len(hits) == 1:
                values.append(hits[0])
            elif len(hits) > 1 and all(same(hits[0], h) for h in hits):
                values.append(hits[0])
            elif len(hits) > 1:
                raise Refused(f"the values {hits!r} of {name} print as one residual label {lab!r}")
            elif suffix in ("cos", "sin", "lin"):
                values.append(ANGLE)
            else:
                values.append(UNKNOWN)
        out[name] = Block(name, rows_a, kind, values)
    return out


@dataclasses.dataclass
class State:
    """Ideal vectors per block and kind of position, position tables, guards and row radii."""

    sets: List[Dict[str, np.ndarray]]
    guard: List[Dict[str, np.ndarray]]
    pos: Dict[str, np.ndarray]
    radius: np.ndarray


def initial(model: Model, blocks: Dict[str, Block]) -> State:
    """The state after the embedding: tokens and positions exactly, written blocks 0, radius 0."""
    tok, pos, n = model.token.astype(np.float64), model.pos.astype(np.float64), model.n
    sets: List[Dict[str, np.ndarray]] = [{}, {}]
    guard: List[Dict[str, np.ndarray]] = [{}, {}]
    tables = {}
    for b in blocks.values():
        if b.kind == "position":
            tables[b.name] = pos[: n + 1][:, b.rows]
            continue
        if b.kind == "token":
            sets[0][b.name] = tok[[model.bos_id]][:, b.rows]
            sets[1][b.name] = unique_rows(tok[model.vocab_ids][:, b.rows])[0]
        else:
            sets[0][b.name] = np.zeros((1, len(b.rows)))
            sets[1][b.name] = np.zeros((1, len(b.rows)))
        guard[0][b.name] = np.zeros(len(sets[0][b.name]), np.int64)
        guard[1][b.name] = np.ones(len(sets[1][b.name]), np.int64)
    return State(sets, guard, tables, np.zeros(model.d))


def unique_rows(a: np.ndarray):
    """(unique rows of ``a`` [m, d], index of each one's first occurrence, [m] inverse), rows
    compared by their float64 bytes (with -0.0 made 0.0): exact equality."""
    a = np.ascontiguousarray(np.asarray(a, np.float64) + 0.0)
    if a.shape[1] == 0:
        return a[:1], np.zeros(min(len(a), 1), np.int64), np.zeros(len(a), np.int64)
    v = a.view(np.dtype((np.void, a.dtype.itemsize * a.shape[1]))).ravel()
    _, first, inv = np.unique(v, return_index=True, return_inverse=True)
    return a[first], first, inv.ravel()


def row_blocks(blocks: Dict[str, Block], rows: np.ndarray) -> Dict[str, np.ndarray]:
    """name -> positions (into ``rows``) of each block's rows among ``rows``."""
    where = {int(r): i for i, r in enumerate(rows)}
    out = {}
    for b in blocks.values():
        idx = [where[int(r)] for r in b.rows if int(r) in where]
        if idx:
            out[b.name] = np.asarray(idx, np.int64)
    return out


@dataclasses.dataclass
class Side:
    """Every combination of one side (module docstring).

    x: [m, e] the ideal projections; a: [m, e] the magnitude bound (|ideal| + radius)|W|;
    kind, pos, guard: [m] (pos -1: no position block read); parts: kept block -> [m] index of
    its ideal vector (into ``sets[kind]``, or the position for a position block); vec: kept block
    -> [m, rows] the vector itself.
    """

    x: np.ndarray
    a: np.ndarray
    kind: np.ndarray
    pos: np.ndarray
    guard: np.ndarray
    vec: Dict[str, np.ndarray]


def side(st: State, blocks: Dict[str, Block], rows: np.ndarray, w: np.ndarray, n: int,
         keep: Sequence[str] = (), kinds: Sequence[int] = (0, 1)) -> Side:
    """Every combination of the ideal vectors of the blocks ``w`` [len(rows), e] reads, and of ``keep``.

    Raises:
        Refused: more than :data:`MAX_COMBOS` combinations.
    """
    w = np.asarray(w, np.float64)
    live = np.abs(w).sum(1) > 0
    read = row_blocks(blocks, rows[live])
    live_idx = np.flatnonzero(live)
    names = sorted(set(read) | {k for k in keep if k in blocks})
    e = w.shape[1]
    parts = []
    for kind in kinds:
        factors = []  # (name, contrib [m, e], absval [m, e], guard [m], position [m] or None, vectors [m, r])
        for nm in names:
            b = blocks[nm]
            sub = live_idx[read[nm]] if nm in read else np.zeros(0, np.int64)
            brow = {int(r): j for j, r in enumerate(b.rows)}
            cols = np.asarray([brow[int(rows[i])] for i in sub], np.int64)
            wb = w[sub]
            r = st.radius[b.rows[cols]] if len(cols) else np.zeros(0)
            if b.kind == "position":
                ps = np.array([0]) if kind == 0 else np.arange(1, n + 1)
                vecs = st.pos[nm][ps]
                g, posv = ps.copy(), ps
            else:
                vecs, g, posv = st.sets[kind][nm], st.guard[kind][nm], None
                if nm not in keep and len(vecs) > 1:
                    proj = vecs[:, cols] if len(cols) else np.zeros((len(vecs), 0))
                    _, first, inv = unique_rows(proj)
                    gm = np.full(len(first), np.iinfo(np.int64).max)
                    np.minimum.at(gm, inv.ravel(), g)
                    vecs, g = vecs[first], gm
            sel = vecs[:, cols]
            factors.append((nm, sel @ wb, (np.abs(sel) + r) @ np.abs(wb), g, posv, vecs))
        count = int(np.prod([len(f[1]) for f in factors], dtype=np.float64)) if factors else 1
        if count > MAX_COMBOS:
            raise Refused(f"{count} combinations of {names} on one side of a sublayer (more than {MAX_COMBOS})")
        sizes = [len(f[1]) for f in factors]
        m = int(np.prod(sizes, dtype=np.int64)) if factors else 1
        x, a = np.zeros(tuple(sizes) + (e,)), np.zeros(tuple(sizes) + (e,))
        guard = np.full(tuple(sizes), kind, np.int64)
        posa = np.full(m, -1 if kind else 0, np.int64)
        vec = {}
        for t, f in enumerate(factors):
            shape = [1] * len(sizes)
            shape[t] = sizes[t]
            x += f[1].reshape(shape + [e])
            a += f[2].reshape(shape + [e])
            guard = np.maximum(guard, f[3].reshape(shape))
            if f[4] is not None or f[0] in keep:
                ix = np.broadcast_to(np.arange(sizes[t]).reshape(shape), sizes).ravel()
                if f[4] is not None:
                    posa = f[4][ix]
                vec[f[0]] = f[5][ix]
        x, a, guard = x.reshape(m, e), a.reshape(m, e), guard.reshape(m)
        parts.append((x, a, np.full(m, kind, np.int64), posa, guard, vec))
    cat = lambda i: np.concatenate([p[i] for p in parts])  # noqa: E731
    bounded(cat(1), "a projection's magnitude")
    vec = {k: np.concatenate([p[5][k] for p in parts]) for k in parts[0][5]}
    return Side(cat(0), cat(1), cat(2), cat(3), cat(4), vec)


def bounded(x: Any, what: str) -> None:
    """Refuse a quantity whose magnitude bound reaches :data:`.float32.LIMIT` (float32 would overflow)."""
    from depthcraft.checker.float32 import LIMIT
    m = float(np.max(np.abs(x), initial=0.0)) if np.size(x) else 0.0
    if not m < LIMIT:
        raise Refused(f"{what} reaches {m:.3g}, beyond what the float32 model bounds (2^100: no overflow)")


def f64_err(a: np.ndarray, terms: int) -> np.ndarray:
    """Bound on the float64 rounding of sums whose terms' magnitudes sum to ``a`` (``terms`` of them)."""
    return gamma(terms + 2, U64) * a


def write(st: State, blocks: Dict[str, Block], out_rows: np.ndarray, outs: Sequence[Any], r_out: np.ndarray,
          name: str) -> Dict[str, np.ndarray]:
    """Add one sublayer's writes to the state; returns the new radius of the written rows.

    Args:
        outs: per part of the sublayer (a head, an MLP component), ((BOS vectors [m, Do], guards),
            (regular vectors, guards)) over ``out_rows``.
        r_out: [Do] bound on |real write - ideal write| on each written row.
    On each written block every sum of an old ideal vector and one ideal write of each part is an
    ideal vector (the state keeps no relation between them: a superset); guards take the largest
    of the parts'. The residual addition rounds within U of |old + write| (+ the radii).

    Raises:
        Refused: a sublayer writes a position block, or more than :data:`MAX_COMBOS` vectors.
    """
    from depthcraft.checker.float32 import U, up
    where = row_blocks(blocks, out_rows)
    radius = st.radius.copy()
    for nm, cols in where.items():
        b = blocks[nm]
        touched = [o for o in outs if any(np.any(o[k][0][:, cols] != 0) for k in (0, 1))]
        if not touched:
            continue
        if b.kind == "position":
            raise Refused(f"{name} writes the position block {nm!r}")
        brow = {int(r): j for j, r in enumerate(b.rows)}
        inb = np.asarray([brow[int(out_rows[c])] for c in cols], np.int64)  # the written rows within the block
        for kind in (0, 1):
            vecs, g = st.sets[kind][nm], st.guard[kind][nm]
            for o in touched:
                wv = np.zeros((len(o[kind][0]), len(b.rows)))
                wv[:, inb] = o[kind][0][:, cols]
                wv, _, inv = unique_rows(wv)
                gm = np.full(len(wv), np.iinfo(np.int64).max)
                np.minimum.at(gm, inv.ravel(), o[kind][1])
                if len(vecs) * len(wv) > MAX_COMBOS:
                    raise Refused(f"{name}: {len(vecs) * len(wv)} ideal vectors of block {nm!r}")
                vecs = (vecs[:, None, :] + wv[None, :, :]).reshape(-1, len(b.rows))
                g = np.maximum(g[:, None], gm[None, :]).ravel()
            vecs, _, inv = unique_rows(vecs)
            gg = np.full(len(vecs), np.iinfo(np.int64).max)
            np.minimum.at(gg, inv.ravel(), g)
            st.sets[kind][nm], st.guard[kind][nm] = vecs, gg
        rows = b.rows[inb]
        mag = np.maximum(np.abs(st.sets[0][nm][:, inb]).max(0), np.abs(st.sets[1][nm][:, inb]).max(0))
        bounded(mag, f"{name}: the residual block {nm}")
        r_new = radius[rows] + r_out[cols]
        radius[rows] = np.array([up(v) for v in r_new + U * (mag + r_new) + f64_err(mag, 4)])
    st.radius = radius
    return {nm: radius[blocks[nm].rows] for nm in where}


def decode(b: Block, vecs: np.ndarray, pos_table: Optional[np.ndarray] = None) -> List[Any]:
    """The program value each ideal vector [m, rows] of block ``b`` stands for.

    A categorical vector holds the value of its one entry above 1/2, or None when every entry is
    below 1/2; a number row holds its number; an angle-coded pointer (cos, sin rows) the position
    whose (cos, sin) of the position block it equals within 1e-6. Any fixed rule is sound: the
    tables are computed on the vectors; the decoded values only name what each one stands for.
    A vector that holds no single value decodes to :data:`AMBIGUOUS`.
    """
    out: List[Any] = []
    vals = b.values
    if all(v is NUM for v in vals) and len(vals) == 1:
        return [float(v[0]) for v in vecs]
    if any(v is ANGLE for v in vals):
        if pos_table is None:
            return [AMBIGUOUS] * len(vecs)
        for v in vecs:
            d = np.abs(pos_table - v[None, :]).max(1)
            hit = np.flatnonzero(d <= 1e-6)
            out.append(int(hit[0]) if len(hit) == 1 else AMBIGUOUS)
        return out
    vecs = np.asarray(vecs, np.float64)
    hot, cold = vecs > HOT, np.abs(vecs) < HOT
    nhot, ncold = hot.sum(1), cold.sum(1)
    arg = hot.argmax(1) if vecs.shape[1] else np.zeros(len(vecs), np.int64)
    named = np.array([v is not NUM and v is not UNKNOWN and v is not ANGLE for v in vals] or [False])
    for i in range(len(vecs)):
        if nhot[i] == 0 and ncold[i] == vecs.shape[1]:
            out.append(None)
        elif nhot[i] == 1 and ncold[i] == vecs.shape[1] - 1 and named[arg[i]]:
            out.append(vals[arg[i]])
        else:
            out.append(AMBIGUOUS)
    return out


AMBIGUOUS = object()
