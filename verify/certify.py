"""Certification: a proof, from finite tables, that a compiled model is exact for EVERY input up to N.

Sampling checks a model on some inputs; this module proves, for every input of length
1..N over the vocabulary (BOS prepended), that at every position 1..n the model's decoded
float32 output equals the decoded output of the model's *ideal* evaluation: the same
weights run in exact arithmetic with hardmax attention (SPEC §3, the reference semantics)
on the exact one-hot SOp encodings. It is abstract interpretation over the residual stream
(docs/certification.md has the method for a reviewer and a worked layer for a teacher):

* **Abstract state.** The residual stream is cut into *blocks* by tracr's labels
  (``name:value`` rows of one SOp, ``one``, ``tokens``, ``indices``, angle ``position``).
  Every position is BOS (position 0) or a regular position (1..n). For every block and
  both kinds of position the state holds the finite set of *ideal vectors* the block can
  hold (one-hot vectors of the SOp's values, or the exact angle vectors), except the
  position blocks (``indices``, ``position``), whose ideal vector at position p is the
  position-embedding row p. One radius per residual row bounds ``|x - ideal|`` at every
  position of every input (infinity norm).
* **Attention head.** The query reads some blocks, the key others. The tables enumerate
  every combination of the blocks' ideal vectors (with the position where a position block
  is read) and give the exact score of every (query, key) pair (float64, outward rounded by
  a stated term). For a query, the keys are grouped in levels (scores equal up to the float64
  term); the hardmax reference attends to the highest level present, which is at least the
  level of the BOS key (always present). For every level that can be the top, the head is
  *clean* when the level is one key that names a single position (it reads the position, or
  it is BOS) or when every value the head can read writes the same vector; otherwise the
  certificate fails and names the head and a witness (query, keys of that level). The
  attention outside the top level (the *leak*) is at most N * exp(-(gap - 2 delta)), where
  gap is the smallest score gap below a possible top level and delta bounds how far the input
  radii (and float32 rounding) can move a score. The head writes at most
  ``leak * range(OV outputs) + |W_OV|^T r`` away from the ideal, plus the float32 term.
* **MLP.** Every combination of its input blocks' ideal vectors is run in float64; interval
  bounds through the ReLU give the output radius; a categorical output must be a clean
  one-hot (or zero) up to a quarter, and the difference is added to the radius. MLPs that
  read a numerical (non-one-hot) SOp are not certified (tracr's discretising MLPs only
  approximate their function).
* **Read-out.** For every ideal output vector the decoded value (argmax, or "no value"
  below 0.5) must win by more than twice the read-out error.

Float32 term: every rounding of the float32 forward is bounded with the standard model
(|fl(a op b) - a op b| <= u |a op b|, u = 2^-24, dot products of length n within
gamma_n = n u / (1 - n u) of the exact sum of |terms|, exp within 4 ulp), so the proof
holds for any summation order, fused or not.

What is NOT proved here: that the RASP program computes the task (the theorem's half,
:func:`depthcraft.verify.certify.theorem_check` checks it on the cheap reference semantics);
and that tracr's categorical tables equal the RASP functions they were built from (they are
built entry by entry from the function's values; the sampled and exhaustive checks compare
the model with the reference).
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from depthcraft.constructions.model import BOS, PAD, CompiledModel, sublayer_names

#: Unit roundoff of float32 and float64.
U32 = 2.0 ** -24
U64 = 2.0 ** -53
#: Most (query, key) score entries one head's table may hold (memory: 8 bytes each, in chunks).
MAX_TABLE = 400_000_000
#: Most combinations one side of a head (or one MLP) may enumerate.
MAX_TUPLES = 2_000_000
#: Rows of the query table handled at once (bounds memory to ROW_CHUNK x keys x 8 bytes, several times).
ROW_CHUNK_ENTRIES = 4_000_000


def _gamma(n: int, u: float) -> float:
    """gamma_n = n u / (1 - n u): relative error bound of an n-term float sum (Higham, Lemma 3.1)."""
    nu = n * u
    if nu >= 0.5:
        return math.inf
    return nu / (1.0 - nu)


def _terms(w: np.ndarray) -> int:
    """Most non-zero entries in a column of ``w`` [rows, cols]: the terms a float32 dot product with a
    column really adds (a zero weight gives an exact zero product, and adding an exact zero is exact)."""
    w = np.asarray(w)
    return int((w != 0).sum(0).max(initial=0)) if w.size else 0


def _up(x: float) -> float:
    """Round a float64 bound outward (one ulp up, and a relative 1e-12 for the bound's own arithmetic)."""
    if not np.isfinite(x):
        return x
    return float(np.nextafter(x * (1.0 + 1e-12) + 1e-300, np.inf))


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
class _State:
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


def _unique_rows(a: np.ndarray) -> np.ndarray:
    return np.unique(a, axis=0) if len(a) else a


def _unique_min(vecs: np.ndarray, guard: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Unique rows of ``vecs`` [m, d] and, for each, the smallest ``guard`` [m] among its copies."""
    uniq, inv = np.unique(vecs, axis=0, return_inverse=True)
    g = np.full(len(uniq), np.iinfo(np.int64).max)
    np.minimum.at(g, inv.ravel(), guard)
    return uniq, g


def _initial_state(model: CompiledModel, blocks: Sequence[Block]) -> _State:
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
            sets[1][b.name] = _unique_rows(token[vocab_ids][:, b.rows])
        else:
            z = np.zeros((1, len(b.rows)))
            sets[0][b.name], sets[1][b.name] = z, z.copy()
    # a regular position i >= 1 always has positions 0 and 1 before it; BOS only itself
    guard = [{k: np.zeros(len(v), int) for k, v in sets[0].items()}, {k: np.ones(len(v), int) for k, v in sets[1].items()}]
    row_block = np.zeros(len(model.residual_labels), int)
    for i, b in enumerate(blocks):
        row_block[b.rows] = i
    return _State(sets, positions, np.zeros(len(model.residual_labels)), guard,
                  {b.name: 0.0 for b in blocks}, row_block)


def _lin_err(state: _State, blocks: Sequence[Block], rows: np.ndarray, m: np.ndarray) -> np.ndarray:
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
class _Side:
    """Every combination of the ideal vectors of the blocks one projection reads.

    contrib: [n, e] the projection of each combination (float64).
    absval: [n, e] the projection of |ideal| + radius through |W| (for the float32 term).
    kind: [n] 0 (BOS) or 1 (regular position).
    position: [n] model position, or -1 where no position block is read.
    pinned: [n] whether the combination names a single position (reads a position block, or BOS).
    guard: [n] a position that exists whenever the combination is read (see :class:`_State`).
    parts: per combination, the index of a vector taken from each non-position block (a
        representative: values the projection maps to the same vector are one combination).
    names: the non-position blocks read (order of ``parts``).
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


class _TooLarge(Exception):
    pass


def _side(state: _State, blocks: Dict[str, Block], rows: np.ndarray, w: np.ndarray, n: int) -> _Side:
    """Enumerate the combinations read through ``w`` ([len(rows), e]) at BOS and regular positions."""
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
    e = w.shape[1]
    pos_names = [nm for nm in read if blocks[nm].kind == "position"]
    names = [nm for nm in read if blocks[nm].kind != "position"]
    out, reps = [], {}
    for kind in (0, 1):
        positions = np.array([0]) if kind == 0 else np.arange(1, n + 1)
        if pos_names:
            pc = np.zeros((len(positions), e))
            pa = np.zeros((len(positions), e))
            for nm in pos_names:
                idx = read[nm]
                wi = w[[i for i, _ in idx]]
                v = state.pos[nm][positions][:, [j for _, j in idx]]
                r = state.radius[blocks[nm].rows[[j for _, j in idx]]]
                pc += v @ wi
                pa += (np.abs(v) + r) @ np.abs(wi)
            pos_col = positions
        else:
            pc, pa, pos_col = np.zeros((1, e)), np.zeros((1, e)), np.array([-1])
        tables = []
        for nm in names:
            idx = read[nm]
            wi = w[[i for i, _ in idx]]
            vecs = state.sets[kind][nm]
            proj = vecs[:, [j for _, j in idx]]
            proj, first, inv = np.unique(proj, axis=0, return_index=True, return_inverse=True)  # values this
            reps.setdefault(kind, {})[nm] = first  # projection cannot tell apart are one combination
            g = np.full(len(proj), np.iinfo(np.int64).max)
            np.minimum.at(g, inv.ravel(), state.guard[kind][nm])
            r = state.radius[blocks[nm].rows[[j for _, j in idx]]]
            tables.append((proj @ wi, (np.abs(proj) + r) @ np.abs(wi), g))
        count = len(pc) * int(np.prod([len(t[0]) for t in tables], dtype=np.int64))
        if count > MAX_TUPLES:
            raise _TooLarge(f"{count} combinations of {names + pos_names}")
        grids = np.meshgrid(np.arange(len(pc)), *[np.arange(len(t[0])) for t in tables], indexing="ij")
        flat = [g.ravel() for g in grids]
        contrib, absval = pc[flat[0]].copy(), pa[flat[0]].copy()
        guard = np.maximum(pos_col[flat[0]], kind)
        for t, f in zip(tables, flat[1:]):
            contrib += t[0][f]
            absval += t[1][f]
            guard = np.maximum(guard, t[2][f])
        parts = np.stack([reps[kind][nm][f] for nm, f in zip(names, flat[1:])], 1) if tables else \
            np.zeros((len(flat[0]), 0), int)
        out.append((contrib, absval, np.full(len(contrib), kind), pos_col[flat[0]], parts, guard))
    contrib, absval, kinds, position, parts, guard = (np.concatenate(x) for x in zip(*out))
    pinned = (kinds == 0) | (position >= 0)
    return _Side(contrib, absval, kinds, position, pinned, parts, names, pos_names, guard)


def _describe(side: _Side, i: int, blocks: Dict[str, Block], state: _State) -> Dict[str, Any]:
    d: Dict[str, Any] = {"position": "BOS" if side.kind[i] == 0 else (int(side.position[i]) if side.position[i] >= 0
                                                                       else "any")}
    for nm, k in zip(side.names, side.parts[i]):
        d[nm] = blocks[nm].describe(state.sets[int(side.kind[i])][nm][k])
    return d


# ------------------------------------------------------------------------------- attention


def _head(state, blocks, spec, p, h, n, causal):
    """Certify head ``h`` of one attention sublayer.

    Returns:
        (entry {min_gap, delta, leak_bound}, uncertified {why, witness} or None,
        ((BOS ideal outputs [m, Do], guards [m]), (regular ...)), ([Do] row radius, {block: l1}))
    """
    q_rows, k_rows = spec.rows("q_rows", len(state.radius)), spec.rows("k_rows", len(state.radius))
    v_rows = spec.rows("v_rows", len(state.radius))
    wq, wk = np.asarray(p["w_q"][h], np.float64), np.asarray(p["w_k"][h], np.float64)
    wvo = np.asarray(p["w_v"][h], np.float64) @ np.asarray(p["w_o"][h], np.float64)  # [Dv, Do]
    scale = float(spec.qk_scale)
    qs = _side(state, blocks, q_rows, wq * scale, n)
    ks = _side(state, blocks, k_rows, wk, n)
    n_entries = len(qs.contrib) * len(ks.contrib)
    if n_entries > MAX_TABLE:
        raise _TooLarge(f"score table of {len(qs.contrib)} queries x {len(ks.contrib)} keys")
    vs = _side(state, blocks, v_rows, wvo, n)
    outs = vs.contrib  # [nv, Do] ideal outputs of every value combination
    uniq = _unique_rows(outs)
    constant = len(uniq) == 1
    spread = outs.max(0) - outs.min(0)  # [Do] range of the ideal outputs per row
    # score perturbation: delta = max |s - s_ideal| from the radii, plus float32 rounding of q.k
    rq, rk = state.radius[q_rows], state.radius[k_rows]
    a = (wq * scale) @ wk.T  # [Dq, Dk]
    qv = _ideal_side_vectors(state, blocks, q_rows, n)
    kv = _ideal_side_vectors(state, blocks, k_rows, n)
    blist = list(blocks.values())
    d1 = float(_lin_err(state, blist, q_rows, a @ kv.T).max()) if rq.any() else 0.0
    d2 = float(_lin_err(state, blist, k_rows, a.T @ qv.T).max()) if rk.any() else 0.0
    l1q = float(sum(min(state.l1[b.name], state.radius[b.rows].sum()) for b in blist if np.isin(b.rows, q_rows).any()))
    l1k = float(sum(min(state.l1[b.name], state.radius[b.rows].sum()) for b in blist if np.isin(b.rows, k_rows).any()))
    d3 = min(float(rq @ np.abs(a) @ rk), l1q * float(np.abs(a).max(initial=0)) * l1k)
    dk = wq.shape[1]
    # float32 rounding of the score: (gamma_Dq + gamma_Dk + gamma_dk + 2u) x max over pairs of
    # sum_e |q_e| |k_e| with |x| + r in place of x (computed with the table, below)
    g32 = _gamma(_terms(p["w_q"][h]), U32) + _gamma(_terms(p["w_k"][h]), U32) + _gamma(dk, U32) + 2 * U32
    abs_max = 0.0
    # float64 rounding of the tables themselves (products of float32 weights with exact vectors, then q.k)
    eps = _up(_gamma(len(q_rows) + len(k_rows) + 2 * dk + 4, U64)
              * float(np.abs(qs.contrib).sum(1).max() * np.abs(ks.contrib).max()) + 1e-300)
    chunk = max(1, ROW_CHUNK_ENTRIES // max(len(ks.contrib), 1))
    min_gap, witness, leak_sum = math.inf, None, 0.0
    kpos_all = np.where(ks.kind == 0, 0, ks.position)
    pin_order = np.argsort(np.where(ks.pinned, kpos_all, -1), kind="stable")
    pinned_sorted = ks.pinned[pin_order]
    groups_at = np.unique(kpos_all[pin_order][pinned_sorted], return_index=True)[1]
    for start in range(0, len(qs.contrib), chunk):
        stop = min(start + chunk, len(qs.contrib))
        s = qs.contrib[start:stop] @ ks.contrib.T  # [r, nk]
        abs_max = max(abs_max, float((qs.absval[start:stop] @ ks.absval.T).max(initial=0.0)))
        masked = np.zeros(s.shape, bool)
        if causal:
            qp = np.where(qs.kind[start:stop] == 0, 0, qs.position[start:stop])
            has = (qs.kind[start:stop] == 0) | (qs.position[start:stop] >= 0)
            kp = np.where(ks.kind == 0, 0, ks.position)
            kh = (ks.kind == 0) | (ks.position >= 0)
            masked = has[:, None] & kh[None, :] & (kp[None, :] > qp[:, None])
            # a BOS query (causal) sees only BOS
            masked |= (qs.kind[start:stop] == 0)[:, None] & (ks.kind != 0)[None, :]
        s = np.where(masked, -np.inf, s)
        order = np.argsort(-s, axis=1, kind="stable")
        ss = np.take_along_axis(s, order, 1)
        with np.errstate(invalid="ignore"):
            diffs = ss[:, :-1] - ss[:, 1:]  # NaN between two masked keys: no break there
        brk = diffs > 2 * eps
        cid = np.concatenate([np.zeros((len(ss), 1), int), np.cumsum(brk, 1)], 1)
        floor = _floor(s, qs, ks, start, stop, causal)
        # the levels that can be the top: every level down to the one holding the floor
        reach = np.where(ss >= (floor - 2 * eps)[:, None], cid, -1).max(1)
        cand = cid <= reach[:, None]
        valid = np.isfinite(ss)
        # smallest gap below any level that can be the top (breaks inside the candidate region)
        gaps = np.where(brk & cand[:, :-1] & valid[:, 1:], diffs, np.inf)
        gaps = np.where(brk & cand[:, :-1] & ~valid[:, 1:], np.inf, gaps)
        row_gap = gaps.min(1) if gaps.shape[1] else np.full(len(ss), np.inf)
        if len(row_gap) and row_gap.min() < min_gap:
            min_gap = float(row_gap.min())
        leak_sum = max(leak_sum, _leak_sum(s, ss, cid, cand & valid, reach, row_gap, eps, ks, pin_order,
                                            pinned_sorted, groups_at, n))
        if not constant:
            # a candidate level is clean when all its keys name one and the same position
            # (combinations at one position are alternatives: only one of them is the input's)
            live = cand & valid
            flat = (np.arange(len(ss))[:, None] * ss.shape[1] + cid)[live]
            kpos = np.where(ks.pinned, np.where(ks.kind == 0, 0, ks.position), -1)[order]
            lo = np.full(len(ss) * ss.shape[1], np.iinfo(np.int64).max)
            hi = np.full(len(ss) * ss.shape[1], -2)
            np.minimum.at(lo, flat, kpos[live])
            np.maximum.at(hi, flat, kpos[live])
            lo_at = np.take_along_axis(lo.reshape(len(ss), -1), cid, 1)
            hi_at = np.take_along_axis(hi.reshape(len(ss), -1), cid, 1)
            bad = live & ((lo_at < 0) | (lo_at != hi_at))
            if bad.any():
                r, c = np.argwhere(bad)[0]
                members = order[r][(cid[r] == cid[r, c]) & valid[r]][:6]
                witness = {"query": _describe(qs, start + r, blocks, state),
                           "keys": [_describe(ks, int(j), blocks, state) for j in members],
                           "values_written": int(len(uniq))}
                why = ("categorical aggregate: a level that can be the top holds keys at several positions "
                       if lo_at[r, c] >= 0 else "a level that can be the top holds a key that names no single "
                       "position (")
                why += "whose values may differ" if lo_at[r, c] >= 0 else "several positions may match)"
                return None, {"why": why, "witness": witness}, None, None
    delta = _up(d1 + d2 + d3 + g32 * abs_max)
    leak = 0.0 if leak_sum == 0 else _up(leak_sum * math.exp(2 * delta)) if min_gap > 2 * delta else math.inf
    if leak == math.inf or leak >= 1.0:
        return ({"min_gap": min_gap, "delta": delta, "leak_bound": leak}, {
            "why": f"score gap {min_gap:.4g} is not clear of the perturbation 2 x {delta:.4g}: leak bound "
                   f"{leak:.3g} >= 1", "witness": {"min_gap": min_gap, "delta": delta, "leak_bound": leak, "n": n}}, None, None)
    # [Do] bound on (|x| + r) |W_V| |W_O| over every value: what float32 rounding is relative to
    vabs = np.abs(np.asarray(p["w_v"][h], np.float64)) @ np.abs(np.asarray(p["w_o"][h], np.float64))
    vside = _side(state, blocks, v_rows, vabs, n).absval  # [combinations, Do]
    # softmax weights: exp (4 ulp), the normalising sum of n + 1 terms, the division: each weight within
    # gamma_{n+1} + 6u of its value; the weighted sum of the values: gamma_{n+1}; W_V and W_O: their terms
    f32_rel = (2 * _gamma(n + 1, U32) + 6 * U32 + _gamma(_terms(p["w_v"][h]), U32)
               + _gamma(_terms(p["w_o"][h]), U32) + U32)
    f32 = f32_rel * vside.max(0)
    r_out = leak * spread + _lin_err(state, blist, v_rows, wvo) + f32
    # l1 per written block: the leak moves mass between ideal outputs, the input errors pass through W_OV
    out_rows = spec.rows("out_rows", len(state.radius))
    l1_out = {}
    for b in blist:
        cols = np.flatnonzero(np.isin(out_rows, b.rows))
        if len(cols):
            l1_out[b.name] = _up(leak * 2 * float(np.abs(outs[:, cols]).sum(1).max())
                                 + float(_lin_err(state, blist, v_rows, np.abs(wvo[:, cols]).sum(1)).max())
                                 + f32_rel * float(vside[:, cols].sum(1).max()))
    entry = {"min_gap": min_gap, "delta": delta, "leak_bound": leak}
    # the attended key exists, so does what its value names: the written vector's guard
    every = _unique_min(outs, vs.guard)
    bos = _unique_min(outs[vs.kind == 0], vs.guard[vs.kind == 0]) if causal else every  # causal BOS: only itself
    return entry, None, (bos, every), (np.array([_up(x) for x in r_out]), l1_out)


def _leak_sum(s, ss, cid, live, reach, row_gap, eps, ks: _Side, pin_order, pinned_sorted, groups_at, n) -> float:
    """max over query rows of sum over key positions of exp(score - top), without the perturbation.

    For each query row the actual top is one of the candidate levels; t is the lowest of them. A key
    at a candidate level that is not the top lies at least the row's smallest gap g below it
    (weight <= exp(-g)); a key below every candidate lies below t (weight <= exp(s - t)). The
    members of the highest level count as intended when it is the only candidate. Each position
    holds one of its alternatives, so a position adds its largest weight; a key that names no
    position may stand at every one of the n positions.
    """
    lowest = np.where(live, ss, np.inf).min(1)  # [r] t
    single = reach == 0
    near = s >= (lowest - 2 * eps)[:, None]
    with np.errstate(over="ignore", invalid="ignore"):
        w = np.where(near, np.where(single[:, None], 0.0, np.exp(-row_gap)[:, None]), np.exp(s - lowest[:, None]))
    w = np.where(np.isfinite(s), w, 0.0)
    total = np.zeros(len(s))
    if pinned_sorted.any():
        ws = w[:, pin_order[pinned_sorted]]
        total += np.maximum.reduceat(ws, groups_at, axis=1).sum(1)
    if (~pinned_sorted).any():
        total += n * w[:, pin_order[~pinned_sorted]].max(1)
    return float(total.max(initial=0.0))


def _floor(s: np.ndarray, qs: _Side, ks: _Side, start: int, stop: int, causal: bool) -> np.ndarray:
    """[r] a score the top key of each query row reaches on EVERY input (the top level is at least this).

    Every position 0..i exists when the query sits at position i (0..1 when the query reads no
    position: it sits at some i >= 1; a BOS query of a causal model sees only BOS). Each existing
    position holds one of its alternatives, so the top score is at least
    max over existing positions of (min over that position's alternatives).
    """
    qkind, qpos = qs.kind[start:stop], qs.position[start:stop]
    reach = np.where(qkind == 0, 0 if causal else 1, np.maximum(qpos, qs.guard[start:stop]))  # [r] exists
    kpos = np.where(ks.kind == 0, 0, ks.position)  # -1: a regular key that reads no position
    if (kpos >= 0).all():
        order = np.argsort(kpos, kind="stable")
        groups, starts = np.unique(kpos[order], return_index=True)
        mins = np.minimum.reduceat(s[:, order], starts, axis=1)  # [r, positions]
        best = np.maximum.accumulate(mins, axis=1)
        col = np.searchsorted(groups, reach, side="right") - 1
        return best[np.arange(len(s)), col]
    bos = s[:, ks.kind == 0].min(1)
    reg = s[:, ks.kind == 1].min(1) if (ks.kind == 1).any() else np.full(len(s), -np.inf)
    return np.where(reach >= 1, np.maximum(bos, reg), bos)


def _ideal_side_vectors(state: _State, blocks: Dict[str, Block], rows: np.ndarray, n: int) -> np.ndarray:
    """[m, len(rows)] every ideal residual (restricted to ``rows``) over the combinations read, for delta."""
    eye = np.eye(len(rows))
    return _side(state, blocks, rows, eye, n).contrib


# ------------------------------------------------------------------------------------ MLP


def _mlp(state, blocks, spec, p, n):
    """Certify one MLP sublayer.

    Returns:
        (ideal outputs [m, Dout] of every input combination, their position kinds [m], their guards
        [m], ([Dout] row radius, {block: l1})).
    Raises:
        _Unclean: the MLP reads a numerical SOp, or a categorical output is not a clean one-hot.
    """
    d = len(state.radius)
    in_rows, out_rows = spec.rows("in_rows", d), spec.rows("out_rows", d)
    w1, b1 = np.asarray(p["w_1"], np.float64), np.asarray(p["b_1"], np.float64)
    w2, b2 = np.asarray(p["w_2"], np.float64), np.asarray(p["b_2"], np.float64)
    for b in blocks.values():
        if np.isin(b.rows, in_rows).any() and b.kind == "written" and not b.categorical:
            raise _Unclean(f"MLP reads the numerical SOp {b.name!r}: tracr's discretising MLPs only approximate "
                           f"their function", {"block": b.name})
    side = _side(state, blocks, in_rows, np.eye(len(in_rows)), n)
    x = side.contrib  # [m, Din] ideal inputs
    r_in = state.radius[in_rows]
    pre = x @ w1 + b1
    hw = _lin_err(state, list(blocks.values()), in_rows, w1)
    pre_err = _gamma(_terms(w1) + 1, U32) * ((np.abs(x) + r_in) @ np.abs(w1) + np.abs(b1))
    hw = hw + pre_err
    h = np.maximum(pre, 0)
    lo, hi = np.maximum(pre - hw, 0), np.maximum(pre + hw, 0)
    y = h @ w2 + b2
    dev = np.maximum(hi - h, h - lo)  # [m, hidden]
    out_err = dev @ np.abs(w2) + _gamma(_terms(w2) + 1, U32) * (hi @ np.abs(w2) + np.abs(b2))
    ideal = y.copy()
    for b in blocks.values():
        sel = np.isin(out_rows, b.rows)
        if not sel.any() or not b.categorical:
            continue
        cols = np.flatnonzero(sel)
        blk = y[:, cols]
        snapped = np.zeros_like(blk)
        top = blk.argmax(1)
        on = blk.max(1) > 0.5
        snapped[np.flatnonzero(on), top[on]] = 1.0
        off = np.abs(blk - snapped).max(1)
        if off.max(initial=0) >= 0.25:
            i = int(off.argmax())
            raise _Unclean(f"MLP output {b.name!r} is not a clean one-hot ({off.max():.3g} away)",
                           {"input": _describe(side, i, blocks, state), "output": [round(float(v), 4) for v in blk[i]]})
        ideal[:, cols] = snapped
    r_out = out_err.max(0) + np.abs(y - ideal).max(0) + _gamma(len(in_rows) + w2.shape[0] + 4, U64) * np.abs(y).max(0)
    r_out = np.array([_up(v) for v in r_out])
    l1_out = {b.name: float(r_out[np.isin(out_rows, b.rows)].sum()) for b in blocks.values()
              if np.isin(out_rows, b.rows).any()}
    return ideal, side.kind, side.guard, (r_out, l1_out)


class _Unclean(Exception):
    def __init__(self, why, witness):
        super().__init__(why)
        self.why, self.witness = why, witness


def _write(state: _State, blocks: Dict[str, Block], out_rows: np.ndarray, writes: Sequence[np.ndarray],
           r_out: Tuple[np.ndarray, Dict[str, float]]) -> None:
    """Add the ideal writes (per kind [m, Do]) to the blocks of ``out_rows``; grow their radii.

    ``r_out``: ([Do] row radius of the write, {block: l1 bound of the write}).
    """
    r_out, l1_out = r_out
    for b in blocks.values():
        sel = np.isin(out_rows, b.rows)
        if not sel.any():
            continue
        if b.kind == "position":
            raise _Unclean(f"a sublayer writes into the position block {b.name!r}", {"block": b.name})
        cols = np.flatnonzero(sel)
        where = np.searchsorted(b.rows, out_rows[cols])
        for kind in (0, 1):
            old, old_g = state.sets[kind][b.name], state.guard[kind][b.name]
            vecs, g = writes[kind]
            w = np.zeros((len(vecs), len(b.rows)))
            w[:, where] = vecs[:, cols]
            w, g = _unique_min(w, g)
            new = (old[:, None, :] + w[None, :, :]).reshape(-1, len(b.rows))
            if len(new) > MAX_TUPLES:
                raise _TooLarge(f"block {b.name} would hold {len(new)} ideal vectors")
            state.sets[kind][b.name], state.guard[kind][b.name] = _unique_min(
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
            state.l1[b.name] = _up(state.l1[b.name] + l1_out.get(b.name, float(r_out[sel].sum()))
                                   + U32 * (norm1 + state.l1[b.name]))
            state.radius[b.rows] = np.minimum(state.radius[b.rows], state.l1[b.name])
    state.radius[out_rows] = [_up(v) for v in state.radius[out_rows]]


# ------------------------------------------------------------------------------- read-out


def _readout(model: CompiledModel, state: _State, blocks: Dict[str, Block]):
    """(decode margin, error bound, uncertified or None) for every ideal output."""
    u = np.asarray(model.params["unembed"]["w"], np.float64)
    rows = np.flatnonzero(np.abs(u).sum(1) > 0)
    side = _side(state, blocks, rows, u[rows], model.max_seq_len)
    reg = side.kind == 1
    logits = side.contrib[reg]
    err = _lin_err(state, list(blocks.values()), rows, u[rows])[None, :] + _gamma(_terms(u[rows]) + 1, U32) * side.absval[reg]
    err = err.max(1)
    if not model.categorical_output:
        return None, float(err.max()), {"why": "numerical read-out: the certifier proves categorical outputs",
                                        "witness": None}
    top = np.sort(logits, 1)
    best = top[:, -1]
    second = top[:, -2] if logits.shape[1] > 1 else np.full(len(logits), -np.inf)
    none = best < 0.5
    # a value: the top logit must beat the others and stay >= 0.5; no value: every logit must stay < 0.5
    margin = np.where(none, 0.5 - best, np.minimum(best - second, 2 * (best - 0.5)))
    ok = margin > 2 * err
    if not ok.all():
        i = int(np.flatnonzero(~ok)[0])
        return float(margin.min()), float(err.max()), {
            "why": f"read-out margin {margin[i]:.4g} is not above twice the error bound {err[i]:.4g}",
            "witness": {"output": _describe(side, int(np.flatnonzero(reg)[i]), blocks, state)}}
    return float(margin.min()), float(err.max()), None


# --------------------------------------------------------------------------------- driver


def certify(model: CompiledModel) -> Dict[str, Any]:
    """Prove (or fail to prove) that ``model`` decodes exactly on every input of length 1..N.

    Args:
        model: a compiled model (softmax attention; tracr's one-hot SOp layout).
    Returns:
        ``{"certified": bool, "scope": str, "per_layer": [{"layer", "head", "min_gap",
        "leak_bound", "radius_in", "radius_out"}], "uncertified": [{"layer", "head", "why",
        "witness"}], "readout": {"margin", "error"}, "float32": str, "seconds": float}``.
        ``layer`` is the sublayer's display name (``attn 2``, ``MLP 1``) and ``head`` the 0-based
        head (None for an MLP). A certificate that fails names the first sublayer it cannot
        prove and a witness; later sublayers are not analysed (their inputs are not defined).
    Raises:
        ValueError: the model is not a compiled model's layout (biases, layer norm).
    """
    t0 = time.perf_counter()
    n = int(model.max_seq_len)
    scope = (f"every input of length 1..{n} over the {len(model.vocab)}-token vocabulary (BOS first), every "
             f"position 1..n: the float32 {model.arch.attention} forward decodes to the output of the exact "
             f"hardmax evaluation of the same weights (SPEC §3 reference semantics)")
    cert: Dict[str, Any] = {"certified": False, "scope": scope, "per_layer": [], "uncertified": [],
                            "readout": None, "seconds": None,
                            "float32": "IEEE binary32, round to nearest: u = 2^-24, sums within gamma_n, "
                                       "exp within 4 ulp; bounds in float64 rounded outward"}

    def done():
        cert["seconds"] = round(time.perf_counter() - t0, 3)
        return cert

    if model.arch.layer_norm:
        raise ValueError("certify: the model has layer norm (a trained model, not a compiled one)")
    if model.arch.attention != "softmax":
        cert["uncertified"].append({"layer": None, "head": None, "why": f"{model.arch.attention} attention: the "
                                    "certifier proves softmax models", "witness": None})
        return done()
    blocks = {b.name: b for b in blocks_of(model)}
    state = _initial_state(model, list(blocks.values()))
    names = sublayer_names(model.arch)
    soft = {i for i in model.meta.get("soft_attention_layers", ())}
    attn_no = -1
    for name, spec, p in zip(names, model.arch.sublayers, model.params["layers"]):
        if any(k.startswith("b_") for k in p if k not in ("b_1", "b_2")) or "ln" in p:
            raise ValueError(f"certify: sublayer {name} has biases or layer norm (not a compiled model)")
        d = len(state.radius)
        out_rows = spec.rows("out_rows", d)
        try:
            if spec.kind == "attn":
                attn_no += 1
                if attn_no in soft:
                    raise _Unclean("soft by design (a memorising head averages over several keys)",
                                   {"layer": name})
                writes, radius, l1_sum = [], np.zeros(len(out_rows)), {}
                r_in = float(state.radius[np.unique(np.concatenate(
                    [spec.rows(k, d) for k in ("q_rows", "k_rows", "v_rows")]))].max(initial=0))
                nh = np.asarray(p["w_q"]).shape[0]
                fail = None
                for h in range(nh):
                    entry, bad, outs, r_out = _head(state, blocks, spec, p, h, n, model.arch.causal)
                    if bad is not None:
                        fail = {"layer": name, "head": h, **bad}
                        break
                    writes.append(outs)
                    radius = radius + r_out[0]
                    for k, v in r_out[1].items():
                        l1_sum[k] = l1_sum.get(k, 0.0) + v
                    cert["per_layer"].append({"layer": name, "head": h, "min_gap": _num(entry["min_gap"]),
                                              "delta": _num(entry["delta"]), "leak_bound": _num(entry["leak_bound"]),
                                              "radius_in": r_in, "radius_out": None})
                if fail is not None:
                    cert["uncertified"].append(fail)
                    return done()
                # heads add their writes: every combination of the heads' ideal outputs, per position kind
                totals = []
                for kind in (0, 1):
                    total, tg = writes[0][kind]
                    for w in writes[1:]:
                        wv, wg = w[kind]
                        if len(total) * len(wv) > MAX_TUPLES:
                            raise _TooLarge("combinations of the heads' outputs")
                        total, tg = _unique_min((total[:, None, :] + wv[None, :, :]).reshape(-1, total.shape[1]),
                                                np.maximum(tg[:, None], wg[None, :]).ravel())
                    totals.append((total, tg))
                _write(state, blocks, out_rows, totals, (radius, l1_sum))
                for e in cert["per_layer"][-nh:]:
                    e["radius_out"] = float(state.radius[out_rows].max(initial=0))
            else:
                r_in = float(state.radius[spec.rows("in_rows", d)].max(initial=0))
                ideal, kinds, guard, r_out = _mlp(state, blocks, spec, p, n)
                _write(state, blocks, out_rows, [(ideal[kinds == k], guard[kinds == k]) for k in (0, 1)], r_out)
                cert["per_layer"].append({"layer": name, "head": None, "min_gap": None, "delta": None,
                                          "leak_bound": None, "radius_in": r_in,
                                          "radius_out": float(state.radius[out_rows].max(initial=0))})
        except _Unclean as e:
            cert["uncertified"].append({"layer": name, "head": None, "why": e.why, "witness": e.witness})
            return done()
        except _TooLarge as e:
            cert["uncertified"].append({"layer": name, "head": None, "why": f"table too large to enumerate: {e}",
                                        "witness": None})
            return done()
    margin, err, bad = _readout(model, state, blocks)
    cert["readout"] = {"margin": margin, "error": err}
    if bad is not None:
        cert["uncertified"].append({"layer": "read-out", "head": None, **bad})
        return done()
    cert["certified"] = True
    return done()


def _num(x: float) -> Optional[float]:
    """JSON-safe float: inf becomes None."""
    return None if x is None or not np.isfinite(x) else float(x)
