"""Attention heads: score tables over the ideal vectors, levels, the leak, and the output radius.

Soundness argument. The query reads some blocks, the key others (:func:`state.side`). The
tables enumerate every combination of the blocks' ideal vectors (with the position where a
position block is read) and give the exact score of every (query, key) pair in float64,
within a stated term ``eps`` of the real product (:func:`_table_rounding`). For a query,
the keys are grouped in *levels* (scores equal up to 2 eps). The hardmax reference attends
to the highest level present in the input, which is at least the *floor*: the best score
that some key reaches on every input (:func:`_floor`: every position 0..i exists when the
query sits at i, and each holds one of its alternatives). So every level from the top down
to the floor may be the top on some input (the *candidate* levels).

* **Clean.** A candidate level is clean when its keys all name one and the same position
  (combinations at one position are alternatives: only one of them is the input's), or
  when every value the head can read writes the same vector. Otherwise the hardmax average
  of several keys may differ from every one-hot value: the certificate fails with the query
  and the keys of that level as witness (:func:`unclean_level`).
  A level of several positions is also clean when the value analysis (:mod:`.values`)
  proves from the RASP program that every selected position holds one value and the OV
  circuit writes one output per value; that holds for the weights only with the head's
  program check, which the caller (:mod:`.report`) then requires.
* **Leak.** The real scores differ from the ideal ones by at most delta: the input radii
  through W_QK (:func:`_score_perturbation`: row radii, or the blocks' l1 bounds) plus the
  float32 rounding of the projections and of q . k (:func:`_score_rounding`: relative to
  the few dominant products, :func:`float32.dominant_sum`). A key below the actual top level
  lies at least gap - 2 delta below it, so its softmax weight is at most
  exp(-(gap - 2 delta)); summed over the key positions (:func:`level_leak_sum`) this bounds the
  attention mass off the top level (the *leak*). Where a row's top is one key t and the
  table is small, the query's common errors are counted against k_j - k_t instead
  (:func:`_pair_leak`), and the smaller bound holds. A leak bound >= 1 proves nothing: the
  head is not certified.
* **Output.** The head writes at most leak x range(OV outputs) + |W_OV|^T r away from the
  ideal (the leak moves mass between ideal outputs; the input error passes through W_OV),
  plus the float32 term of the softmax average (in l1 per written block: relative to the
  largest single value's l1 norm, not the sum of per-row maxima). For a clean categorical head the input's
  top level is one key and the others' exponentials sum to at most the leak bound, so the
  normalisation is a common scale within about 5u + leak and the weighted sum is dominated
  by the top key: the term is about (7u + 2 leak) of the values' magnitude, whatever n
  (:func:`float32.pointer_output_rel`); numerical and constant heads keep the
  order-independent gamma_{n+1} (:func:`float32.softmax_output_rel`). The softmax's shift
  fl(s - max) rounds each exponent within u of itself, so a real exponent below the top,
  (1 +- u)(s^_j - s^_t), is at most (1 - u)(s_j - s_t) + 2 delta: the leak sum takes its
  exponents times (1 - u) (:data:`float32.SHRINK`).

* **Numerical heads** (the head writes only numerical blocks: a numerical mean, or the
  SelectorWidth head that always attends to BOS). Here several keys in the top level are
  intended: the hardmax output is the *mean* of the values of the keys in the top level
  (:func:`_level_patterns`, :func:`_means`). For every candidate level the tables say
  whether BOS is in it (always, maybe, never) and whether regular keys are; the ideal
  output set is every mean (b v_BOS + v_1 + ... + v_m) / (b + m) with b in the BOS options,
  0 <= m <= N regular values drawn from every value a regular key can write (a finite set
  of fractions; refused beyond :data:`MAX_MEANS`); m >= 1 where every key position 1 can
  hold scores in the level or above (position 1 is in every input, so the top level holds
  it). A mean of m regular keys gets guard m: m distinct positions exist (and, causal, are
  visible). The real weights inside the top level
  are uniform up to the factor R = exp(x), x = the level's score span + 2 eps + 2 delta (any
  two of them have a ratio in [1/R, R]), so the write is within tanh(x / 4) x range + leak x
  range of that mean (the leak moves the rest of the mass), plus the input error through
  W_OV and the float32 term. The tanh (:func:`weighted_mean_deviation`): per output
  coordinate, scale the values into [0, 1]; the weighted mean minus the plain mean is
  linear-fractional in the values, so its largest value is at values in {0, 1}: a fraction p
  of the keys at 1, weighted R, the rest at 0, weighted 1, gives
  p R / (p R + 1 - p) - p = p (1 - p)(R - 1) / (1 + p (R - 1)), whose maximum over real
  p in [0, 1] (at p = 1 / (sqrt R + 1)) is (sqrt R - 1) / (sqrt R + 1) = tanh(x / 4);
  the lower side is symmetric. That the level is what the program selects (BOS plus the
  selected keys) is the program check's part.

* **Domain preconditions** (:class:`DomainView`, :mod:`.domain`). Given facts every input of a
  task's domain satisfies, the floor counts every position up to the least domain length >= the
  query's position, and a level whose keys stand at positions of one class and hold one token is
  clean (at most one of them is in a domain input). Each use is recorded: what is then proved
  holds on the domain only. The floor also uses the key at the query's own position, which holds
  the query's own vectors (:func:`_self_floor`), on every input.
* **Grouped keys** (a table beyond :data:`MAX_TABLE`): the key side is kept as its factors and,
  per batch of query rows, a block's vectors that the batch scores alike are one key
  combination (:func:`state.reduce_side`, :func:`_key_batches`); the members' real scores differ
  by at most the rounding added to eps (:func:`_grouping_rounding`), and the perturbation is
  bounded from the factors. Every statement above holds per batch, so over all query rows.

Causal masking is part of the tables: a key after the query (both positions known) is
masked, and a BOS query of a causal model sees only BOS. At BOS the head writes BOS's own
value when no regular key can be a BOS query's top level (always so in a causal model);
otherwise any value it can read.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, Optional, Tuple

import numpy as np

from depthcraft.verify.certify.domain import Precondition
from depthcraft.verify.certify.float32 import (SHRINK, U32, U64, copies, dominant_sum, gamma, pointer_output_rel,
                                               proj_gamma, score_rel, softmax_output_rel, terms, up)
from depthcraft.verify.certify import state as _state
from depthcraft.verify.certify.state import (Block, Side, SideTables, State, TooLarge, describe, lin_err,
                                             reduce_side, side, side_tables, unique_min, unique_rows)

#: Most (query, key) score entries one head's table may hold (memory: 8 bytes each, in chunks); beyond
#: it (or beyond :data:`state.MAX_TUPLES` keys) the keys are grouped per batch of query rows by the
#: scores those rows give them (:func:`state.reduce_side`), at most :data:`MAX_FACTORED` entries in all.
MAX_TABLE = 400_000_000
#: Most score entries of a head whose keys are grouped by score (summed over its query batches).
MAX_FACTORED = 4_000_000_000
#: Most floats of one batch's grouped key side (combinations x head width: memory, 8 bytes each).
KEY_FLOATS = 25_000_000
#: Rows of the query table handled at once (bounds memory to ROW_CHUNK x keys x 8 bytes, several times).
ROW_CHUNK_ENTRIES = 4_000_000
#: Most ideal outputs a numerical (mean) head may have, per kind of query position.
MAX_MEANS = 200_000
#: The self-consistency floor compares a block's groups only when it has at most this many vectors.
SELF_MAX_VECTORS = 4096


@dataclasses.dataclass
class DomainView:
    """A domain precondition (:class:`.domain.Precondition`) as one head uses it.

    Attributes:
        pre: the precondition.
        n: N, the longest input.
        token_of: per token block never written by a sublayer, [m] the token id (index into the
            model's input values) of each regular ideal vector of the block, -1 where several
            tokens share the vector.
        used: the facts this head's analysis used (``"lengths"``, ``"classes"``, ``"scored"``).
        copies: per block that a certified position head with a passing program check wrote as a
            copy of the token (:func:`report.copy_blocks`): ([N + 1] the source position target(j)
            of each position j, -1 where none; [m] the token id each regular ideal vector of the
            block decodes to, -1 where none). On every input the block at j holds the token at
            target(j). Used by :mod:`.relu` only while every program check so far holds.
        pattern_copies: per block that a certified position head with a passing program check
            wrote as a copy of an equality parse (:func:`report.pattern_copy_blocks`): ([N + 1]
            target(j), -1 where none; per target t its parse window as pairs (j', fn(j')); [m]
            the set each regular ideal vector decodes to, None where none). On every input the
            block at j holds {fn(j') : j' in the window of t, x_{j'} = x_t}, t = target(j). Used
            by :mod:`.relu` with the ``patterns`` fact, only while every program check so far holds.
        scored_ids: the ``scored`` fact's tokens as ids (indices into the model's input values),
            or None.
        slot_ids: the ``slots`` fact with token ids, or None.
        links: what certified heads attended and the blocks linked to it (:mod:`.links`), or None.
            Used by :func:`unclean_level` only while ``links.valid`` (every program check so far holds).
    """

    pre: Precondition
    n: int
    token_of: Dict[str, np.ndarray]
    used: set = dataclasses.field(default_factory=set)
    copies: Dict[str, Tuple[np.ndarray, np.ndarray]] = dataclasses.field(default_factory=dict)
    pattern_copies: Dict[str, Any] = dataclasses.field(default_factory=dict)
    scored_ids: Optional[frozenset] = None
    slot_ids: Optional[Tuple[Optional[frozenset], ...]] = None
    #: the domain's link analysis (:class:`.links.Links`, plugged in by the route: this module does not
    #: import it), or None
    links: Any = None
    _reach: Optional[np.ndarray] = None

    def reach(self) -> np.ndarray:
        """[N + 1] :meth:`.domain.Precondition.reach` (computed once)."""
        if self._reach is None:
            self._reach = self.pre.reach(self.n)
        return self._reach


@dataclasses.dataclass
class HeadCert:
    """What :func:`certify_head` proved about one head (or where it stopped).

    Attributes:
        entry: ``{min_gap, delta, leak_bound}`` (None when a level is unclean).
        failure: ``{why, witness}`` when the head is not certified, else None.
        outs: ((BOS ideal outputs [m, Do], guards [m]), (regular ...)) when certified.
        r_out: ([Do] row radius, {block: l1 bound}) of the write when certified.
        tables: the head's query, key and value sides (:class:`state.Side`) and the
            [nq, nk] float64 score table's rounding term ``eps`` (for the program check).
        attended: {query position: {(x, a, y)}} the keys the head can attend (:func:`.links.collect`),
            or None when not recorded.
    """

    entry: Optional[Dict[str, float]]
    failure: Optional[Dict[str, Any]]
    outs: Any = None
    r_out: Any = None
    tables: Any = None
    attended: Any = None


@dataclasses.dataclass
class HeadTables:
    """The sides of one head: query (scaled W_Q), key (W_K), value (W_V W_O), and its W_QK."""

    qs: Side
    ks: Side
    vs: Side
    wq: np.ndarray
    wk: np.ndarray
    wvo: np.ndarray
    a: np.ndarray
    q_rows: np.ndarray
    k_rows: np.ndarray
    v_rows: np.ndarray
    wq_s: np.ndarray  # W_Q times the sublayer's qk_scale
    kf: Optional[SideTables] = None  # the key side's factors when ``ks`` is too large (ks is then None)


def _sides(state: State, blocks: Dict[str, Block], spec, p, h: int, n: int) -> HeadTables:
    d = len(state.radius)
    q_rows, k_rows, v_rows = spec.rows("q_rows", d), spec.rows("k_rows", d), spec.rows("v_rows", d)
    wq, wk = np.asarray(p["w_q"][h], np.float64), np.asarray(p["w_k"][h], np.float64)
    wvo = np.asarray(p["w_v"][h], np.float64) @ np.asarray(p["w_o"][h], np.float64)  # [Dv, Do]
    scale = float(spec.qk_scale)
    qs = side(state, blocks, q_rows, wq * scale, n)
    kf = side_tables(state, blocks, k_rows, wk, n)
    nk = max(kf.count(0), 1) + kf.count(1)
    ks = side(state, blocks, k_rows, wk, n) if nk <= _state.MAX_TUPLES and len(qs.contrib) * nk <= MAX_TABLE else None
    vs = side(state, blocks, v_rows, wvo, n)
    return HeadTables(qs, ks, vs, wq, wk, wvo, (wq * scale) @ wk.T, q_rows, k_rows, v_rows, wq * scale,
                   None if ks is not None else kf)


def _score_perturbation(state: State, blocks: Dict[str, Block], t: HeadTables, n: int, parts: bool = False):
    """Bound on |s - s_ideal| from the input radii alone (no float32 term): d1 + d2 + d3.

    d1: the query's error against every ideal key, d2: the key's against every ideal query
    (each the smaller of the row-radius and the l1 bound, :func:`state.lin_err`), d3: the
    product of the two errors. ``parts``: return (d1, d2, d3) instead of their sum.
    """
    rq, rk = state.radius[t.q_rows], state.radius[t.k_rows]
    blist = list(blocks.values())
    # W_QK k over every ideal key k is (scaled W_Q) (W_K^T k): the key side's projections (combinations
    # it cannot tell apart project alike), so the sides' tables serve; likewise for the queries
    if not rq.any():
        d1 = 0.0
    elif t.ks is not None:
        d1 = float(lin_err(state, blist, t.q_rows, t.wq_s @ t.ks.contrib.T).max())
    else:  # factored keys: |W_QK k| per query row is at most the sum over the factors of their largest
        d1 = float(lin_err(state, blist, t.q_rows, t.kf.abs_factors(t.wq_s)[:, None]).max())
    d2 = float(lin_err(state, blist, t.k_rows, t.wk @ t.qs.contrib.T).max()) if rk.any() else 0.0
    l1q = float(sum(min(state.l1[b.name], state.radius[b.rows].sum()) for b in blist
                    if np.isin(b.rows, t.q_rows).any()))
    l1k = float(sum(min(state.l1[b.name], state.radius[b.rows].sum()) for b in blist
                    if np.isin(b.rows, t.k_rows).any()))
    d3 = min(float(rq @ np.abs(t.a) @ rk), l1q * float(np.abs(t.a).max(initial=0)) * l1k)
    return (d1, d2, d3) if parts else d1 + d2 + d3


def _support(state: State, blocks: Dict[str, Block], rows: np.ndarray, w: np.ndarray) -> Tuple[int, int]:
    """(most non-zero ideal entries in the rows ``w`` reads, most non-zero projected coordinates).

    For every block read (rows where ``w`` [len(rows), e] is non-zero): the most non-zero
    entries of any of its ideal vectors (both kinds of position; every position of a position
    block) on those rows. The first number is their sum: a column of ``w`` meets at most that
    many rows where the ideal input is non-zero. The second bounds how many coordinates of
    the ideal projection |x| |w| can be non-zero: per block, its count times the most
    non-zero entries in one of its rows of ``w``.
    """
    w = np.asarray(w)
    live = np.abs(w).sum(1) > 0
    k_rows = k_cols = 0
    for b in blocks.values():
        sel = np.flatnonzero(live & np.isin(rows, b.rows))
        if not len(sel):
            continue
        j = np.searchsorted(b.rows, rows[sel])
        vecs = [state.pos[b.name]] if b.kind == "position" else [state.sets[0][b.name], state.sets[1][b.name]]
        nnz = max(int((v[:, j] != 0).sum(1).max(initial=0)) for v in vecs)
        k_rows += nnz
        k_cols += nnz * int((w[sel] != 0).sum(1).max())
    return k_rows, k_cols


def _score_rounding(state: State, blocks: Dict[str, Block], t: HeadTables, scale: float, abs_max: float,
                    parts: bool = False):
    """Bound on the float32 rounding of every score, q = x W_Q, k = x W_K, s = (q . k) qk_scale.

    ``abs_max`` is A = max over pairs of sum_e Q_e K_e, Q = (|ideal| + r)|W_Q| qk_scale and K
    likewise (the tables' ``absval``). The order-independent bound is
    (gamma_{terms(W_Q)} + gamma_{terms(W_K)} + gamma_{d_head} + 2u) A (:func:`float32.score_rel`).
    Most terms of these sums are products of an input *error* (a row where the ideal vector
    is zero) and a weight, or of a coordinate that no ideal input reaches: they are small,
    and a sum of a few dominant terms and small ones errs by rho D + sigma L
    (:func:`float32.dominant_sum`). With kq dominant rows per column of W_Q
    (:func:`_support`), L_e = sum_i |dx_i| |W_Q[i, e]| (dx the input error) and the
    computed key within c_k K:

    * the query projection errs by eq_e <= rho_q Q_e + sigma_q L_e, so its effect on the
      score is sum_e eq_e |k_e| <= c_k (rho_q A + sigma_q LEq), LEq = max over keys of the
      input error through |W_Q| K (:func:`state.lin_err`: row radii or l1 bounds);
      |q_e| <= c_q Q_e, c_q = 1 + min(gamma_{terms(W_Q)}, rho_q + sigma_q) (L_e <= Q_e);
    * the key projection likewise: rho_k A + sigma_k LEk;
    * the dot product of d_head terms: a coordinate that the ideal query or the ideal key
      cannot reach (|ideal| |W| is zero there) holds only an input error and its rounding,
      (1 + sigma) L_e, so at most kd = min(non-zero coordinates of either side) terms are
      dominant (D <= c_q c_k A) and the others sum to at most
      (1 + sigma_q) c_k LEq + (1 + sigma_k) c_q LEk;
    * the scaling by qk_scale: 2u of the computed product.

    Each part keeps the smaller of this and its order-independent gamma bound; the result is
    never more than the order-independent bound. A projection that only copies inputs
    (:func:`float32.copies`: one entry +-1 per column) is exact: its terms are 0.

    ``parts``: also return {"t1", "t2", "t3", "t4", "g_q", "le_k"} (g_q: every coordinate of
    the query projection errs by at most g_q Q_e; le_k: the key's input error through |W_K| Q)
    for :func:`_pair_leak`.
    """
    wq, wk = np.abs(t.wq) * scale, np.abs(t.wk)
    dh = t.wq.shape[1]
    tq, tk = terms(t.wq), terms(t.wk)
    a = abs_max
    old = score_rel(t.wq, t.wk, dh) * a
    kq_rows, kq_cols = _support(state, blocks, t.q_rows, t.wq)
    kk_rows, kk_cols = _support(state, blocks, t.k_rows, t.wk)
    g_q, g_k = proj_gamma(t.wq), proj_gamma(t.wk)
    rho_q, sig_q = (0.0, 0.0) if copies(t.wq) else dominant_sum(min(kq_rows, tq), tq)
    rho_k, sig_k = (0.0, 0.0) if copies(t.wk) else dominant_sum(min(kk_rows, tk), tk)
    c_q = 1 + min(g_q, rho_q + sig_q)
    c_k = 1 + min(g_k, rho_k + sig_k)
    blist = list(blocks.values())

    def through(rows, w, other):  # max over the other side's combinations of the input error through |w| other
        if not state.radius[rows].any():
            return 0.0
        best, step = 0.0, max(1, ROW_CHUNK_ENTRIES // max(len(rows), 1))
        for i in range(0, len(other), step):
            best = max(best, float(lin_err(state, blist, rows, w @ other[i:i + step].T).max(initial=0.0)))
        return best

    le_q = through(t.q_rows, wq, t.ks.absval)
    le_k = through(t.k_rows, wk, t.qs.absval)
    t1 = min(g_q * c_k * a, c_k * (rho_q * a + sig_q * le_q))
    t2 = min(g_k * a, rho_k * a + sig_k * le_k)
    rho_d, sig_d = dominant_sum(min(kq_cols, kk_cols, dh), dh)
    small = (1 + sig_q) * c_k * le_q + (1 + sig_k) * c_q * le_k
    t3 = min(gamma(dh, U32) * c_q * c_k * a, rho_d * c_q * c_k * a + sig_d * small)
    t4 = 2 * U32 * (c_q * c_k * a + t3)
    new = t1 + t2 + t3 + t4
    total = up(min(old, new)) if math.isfinite(new) else up(old)
    if not parts:
        return total
    return total, {"t1": t1, "t2": t2, "t3": t3, "t4": t4, "g_q": g_q, "le_k": le_k}


def _table_rounding(t: HeadTables) -> float:
    """eps: the float64 rounding of the tables themselves (float32 weights times exact vectors, then q.k)."""
    dk = t.wq.shape[1]
    kmax = float(np.abs(t.ks.contrib).max()) if t.ks is not None else float(t.kf.contrib_bound().max())
    return up(gamma(len(t.q_rows) + len(t.k_rows) + 2 * dk + 4, U64)
              * float(np.abs(t.qs.contrib).sum(1).max() * kmax) + 1e-300)


def _grouping_rounding(t: HeadTables) -> float:
    """The extra score uncertainty of keys grouped by :func:`state.reduce_side`: members whose computed
    per-block products q . c agree differ in real value by at most twice that product's float64
    rounding, gamma_{e+2} sum |q| |c|, summed over the blocks (0 without factored keys)."""
    if t.kf is None:
        return 0.0
    qmax = float(np.abs(t.qs.contrib).sum(1).max(initial=0.0))
    cmax = sum(float(np.abs(tab[1]).max(initial=0.0)) for kind in t.kf.kinds for tab in kind[3])
    return up(2 * gamma(t.wq.shape[1] + 2, U64) * qmax * cmax)


def _key_batches(t: HeadTables, budget: int):
    """(query rows, t restricted to them with its keys reduced for them) covering every query row.

    Without factored keys: one batch, every row, the full key side. With them: the query rows
    sorted by kind, then the vectors they read, then position (rows that read alike share the
    keys' grouping), cut into batches of about ``budget`` (rows x reduced keys) entries.
    """
    qs = t.qs
    if t.kf is None:
        yield np.arange(len(qs.contrib)), t
        return
    keys = [qs.position] + [qs.parts[:, i] for i in reversed(range(qs.parts.shape[1]))] + [qs.kind]
    order = np.lexsort(keys)
    i, total = 0, 0
    while i < len(order):
        size, grow = 1, True
        while True:
            rows = order[i:i + size]
            try:
                ks = reduce_side(t.kf, qs.contrib[rows], max_count=KEY_FLOATS // max(qs.contrib.shape[1], 1))
                entries = len(rows) * len(ks.contrib)
            except TooLarge:
                if size == 1:
                    raise
                ks, entries = None, 4 * budget + 1
            if entries > 2 * budget and size > 1:  # the rows read too differently: fewer of them
                size, grow = max(1, size // 2), False
                continue
            if not grow or entries * 2 > budget or i + size >= len(order):
                break
            size = min(len(order) - i, max(size * 2, budget // max(len(ks.contrib), 1)))
        total += entries
        if total > MAX_FACTORED:
            raise TooLarge(f"score table of {len(qs.contrib)} queries x keys grouped by score: more than "
                           f"{MAX_FACTORED} entries")
        yield rows, dataclasses.replace(t, qs=_rows_of(qs, rows), ks=ks)
        i += len(rows)


def _rows_of(sd: Side, rows: np.ndarray) -> Side:
    """The combinations ``rows`` of ``sd`` (a sub-side)."""
    return Side(sd.contrib[rows], sd.absval[rows], sd.kind[rows], sd.position[rows], sd.pinned[rows],
                sd.parts[rows], sd.names, sd.pos_names, sd.guard[rows], sd.member)


def causal_mask(qs: Side, ks: Side, start: int, stop: int) -> np.ndarray:
    """[r, nk] bool: keys a causal model hides from query rows start..stop-1.

    A key after the query is hidden where both positions are known; a BOS query sees only BOS.
    """
    qp = np.where(qs.kind[start:stop] == 0, 0, qs.position[start:stop])
    has = (qs.kind[start:stop] == 0) | (qs.position[start:stop] >= 0)
    kp = np.where(ks.kind == 0, 0, ks.position)
    kh = (ks.kind == 0) | (ks.position >= 0)
    masked = has[:, None] & kh[None, :] & (kp[None, :] > qp[:, None])
    masked |= (qs.kind[start:stop] == 0)[:, None] & (ks.kind != 0)[None, :]
    return masked


@dataclasses.dataclass
class _Levels:
    """The levels of a chunk of query rows: keys sorted by score, level ids and candidates."""

    s: np.ndarray       # [r, nk] scores (masked keys: -inf)
    order: np.ndarray   # [r, nk] key index by descending score
    ss: np.ndarray      # [r, nk] sorted scores
    diffs: np.ndarray   # [r, nk - 1] gaps between neighbours
    brk: np.ndarray     # [r, nk - 1] a level ends here
    cid: np.ndarray     # [r, nk] level id of each sorted key (0 = top)
    reach: np.ndarray   # [r] the lowest level that can be the top
    cand: np.ndarray    # [r, nk] the key's level can be the top
    valid: np.ndarray   # [r, nk] the key is not masked
    row_gap: np.ndarray  # [r] smallest gap below a candidate level


def score_levels(t: HeadTables, start: int, stop: int, eps: float, causal: bool,
                 dom: Optional["DomainView"] = None) -> _Levels:
    qs, ks = t.qs, t.ks
    s = qs.contrib[start:stop] @ ks.contrib.T  # [r, nk]
    if causal:
        s = np.where(causal_mask(qs, ks, start, stop), -np.inf, s)
    order = np.argsort(-s, axis=1, kind="stable")
    ss = np.take_along_axis(s, order, 1)
    with np.errstate(invalid="ignore"):
        diffs = ss[:, :-1] - ss[:, 1:]  # NaN between two masked keys: no break there
    brk = diffs > 2 * eps
    cid = np.concatenate([np.zeros((len(ss), 1), int), np.cumsum(brk, 1)], 1)
    floor = _floor(s, qs, ks, start, stop, causal, dom)
    # the levels that can be the top: every level down to the one holding the floor
    reach = np.where(ss >= (floor - 2 * eps)[:, None], cid, -1).max(1)
    cand = cid <= reach[:, None]
    valid = np.isfinite(ss)
    # smallest gap below any level that can be the top (breaks inside the candidate region)
    gaps = np.where(brk & cand[:, :-1] & valid[:, 1:], diffs, np.inf)
    gaps = np.where(brk & cand[:, :-1] & ~valid[:, 1:], np.inf, gaps)
    row_gap = gaps.min(1) if gaps.shape[1] else np.full(len(ss), np.inf)
    return _Levels(s, order, ss, diffs, brk, cid, reach, cand, valid, row_gap)


def token_codes(ks: Side, dom: Optional[DomainView]) -> Optional[np.ndarray]:
    """[nk] for each key combination: a code of (class of its position, its token) when it stands at a
    regular position and its vector determines its token (the key side reads a token block that no
    sublayer writes, and its group under W_K is one vector of one token), else -1; None when the
    precondition has no distinct-token fact or the key side reads no such block."""
    if dom is None or dom.pre.classes is None or dom.pre.prefix:  # prefix: the key may be the last position
        return None
    classes = np.asarray(dom.pre.classes, np.int64)
    for nm, tok_of in dom.token_of.items():
        if nm not in ks.names or nm not in ks.member or not (tok_of >= 0).any():  # e.g. ``one``: no token
            continue
        rep = np.where(ks.kind == 1, ks.parts[:, ks.names.index(nm)], 0)  # BOS keys: masked below
        size = np.bincount(ks.member[nm], minlength=len(tok_of))
        tok = np.where(size[rep] == 1, tok_of[rep], -1)
        cls = classes[np.clip(ks.position, 0, len(classes) - 1)]
        ok = (ks.kind == 1) & (ks.position >= 1) & (ks.position < len(classes)) & (tok >= 0) & (cls >= 0)
        width = int(tok_of.max(initial=0)) + 2
        return np.where(ok, cls * width + tok, -1)
    return None


def _level_range(vals: np.ndarray, flat: np.ndarray, shape: Tuple[int, int], cid: np.ndarray):
    """Per (query row, level) the smallest and largest of ``vals`` over the level's live keys.

    ``vals`` [live keys] int, ``flat`` their flat (row, level) index into ``shape`` = [rows,
    levels], ``cid`` [rows, keys] the level of each key. Returns two [rows, keys] int arrays, each
    key's level's min and max (no live key: int64 max and -2)."""
    lo = np.full(shape[0] * shape[1], np.iinfo(np.int64).max)
    hi = np.full(shape[0] * shape[1], -2)
    np.minimum.at(lo, flat, vals)
    np.maximum.at(hi, flat, vals)
    return (np.take_along_axis(lo.reshape(shape[0], -1), cid, 1),
            np.take_along_axis(hi.reshape(shape[0], -1), cid, 1))


def unclean_level(lv: _Levels, t: HeadTables, start: int, blocks: Dict[str, Block], state: State,
                   n_values: int, dom: Optional[DomainView] = None,
                   eps: Optional[float] = None) -> Optional[Dict[str, Any]]:
    """{why, witness} for the first candidate level whose keys do not all name one position, else None.

    Combinations at one position are alternatives (only one of them is the input's), so a
    level of one position is clean; any other level may average several different values.
    Given a precondition with a distinct-token fact (``dom``), a level whose keys all stand at
    regular positions of one class and hold one and the same token is clean too: on every
    domain input at most one of those positions holds that token (:mod:`.domain`); recorded
    as a use of ``classes``. With attended links of earlier certified heads (``dom.links``, valid
    while every program check so far holds) and the table's rounding ``eps``, a level is also clean
    for a query row when no domain input can put two of its keys at distinct positions together
    with the row where that level can be the top (:func:`.links.discharge`); also a use of
    ``classes``.
    """
    ks, ss, cid = t.ks, lv.ss, lv.cid
    live = lv.cand & lv.valid
    flat = (np.arange(len(ss))[:, None] * ss.shape[1] + cid)[live]
    kpos = np.where(ks.pinned, np.where(ks.kind == 0, 0, ks.position), -1)[lv.order]
    lo_at, hi_at = _level_range(kpos[live], flat, ss.shape, cid)
    bad = live & ((lo_at < 0) | (lo_at != hi_at))
    codes = token_codes(ks, dom) if bad.any() else None
    if codes is not None:  # one class, one token: at most one of the level's keys is in a domain input
        kc = codes[lv.order]
        clo_at, chi_at = _level_range(kc[live], flat, ss.shape, cid)
        one = (clo_at >= 0) & (clo_at == chi_at)
        if (bad & one).any():
            dom.used.add("classes")
        bad &= ~one
    if (bad.any() and eps is not None and dom is not None and dom.links is not None and dom.links.valid
            and dom.pre.classes is not None and not dom.pre.prefix):
        cleared = dom.links.discharge(lv, t, start, bad, state, dom.token_of, dom.pre.classes,
                                      dom.slot_ids, dom.reach(), dom.n, eps)
        if (bad & ~cleared).any():  # the class fact, and the lengths through the realisations' floor
            dom.used.update(("classes", "lengths"))
        bad = cleared
    if not bad.any():
        return None
    r, c = np.argwhere(bad)[0]
    members = lv.order[r][(cid[r] == cid[r, c]) & lv.valid[r]][:6]
    witness = {"query": describe(t.qs, start + r, blocks, state),
               "keys": [describe(ks, int(j), blocks, state) for j in members],
               "values_written": int(n_values)}
    why = ("categorical aggregate: a level that can be the top holds keys at several positions "
           if lo_at[r, c] >= 0 else "a level that can be the top holds a key that names no single "
           "position (")
    why += "whose values may differ" if lo_at[r, c] >= 0 else "several positions may match)"
    return {"why": why, "witness": witness}


def _position_sum(w: np.ndarray, pin_order, pinned_sorted, groups_at, n: int) -> np.ndarray:
    """[r] sum over key positions of the largest weight among that position's alternatives
    (``w`` [r, nk]); a key that names no position may stand at every one of the n positions."""
    total = np.zeros(len(w))
    if pinned_sorted.any():
        ws = w[:, pin_order[pinned_sorted]]
        total += np.maximum.reduceat(ws, groups_at, axis=1).sum(1)
    if (~pinned_sorted).any():
        total += n * w[:, pin_order[~pinned_sorted]].max(1)
    return total


#: Per-pair score errors (:func:`_pair_leak`) are computed for a head whose uniform leak bound is
#: above this (the uniform bound certifies the others with room to spare), ...
PAIR_LEAK_ABOVE = 1e-6
#: ... and whose tables are at most this large (query rows x keys x query rows read).
PAIR_LEAK_MAX = 200_000_000


def _pair_leak(t: HeadTables, state: State, blocks: Dict[str, Block], eps: float, causal: bool, n: int, scale: float,
               ins: Tuple[float, float, float], rnd: Dict[str, float], delta: float, pin_order, pinned_sorted,
               groups_at) -> float:
    """Leak bound with the score error of every (query, key) pair *relative to the top key*.

    The uniform bound takes every weight below the top key t as exp(s_j - s_t + 2 delta). But
    the query's errors are common to all keys: its input error dx and the rounding eq of its
    projection move s_j - s_t by (dx W_Q + eq) . (k_j - k_t) only (plus their products with
    the keys' errors), which is small where k_j is close to k_t (an angle pointer's
    neighbouring positions, whose scores differ by the gap alone). So for a query row whose
    only candidate level is one key combination t (the top on every input), the real
    difference s^_j - s^_t is within

        E(j) = D1(j) + R1(j) + 2 (d2 + d3 + t2 + t3 + t4 + g_q (le_k + t2))

    of the ideal one: D1(j) = the query's input error through W_Q (k_j - k_t)
    (:func:`state.lin_err`), R1(j) = g_q sum_e Q_e |k_j,e - k_t,e| (the projection's
    rounding), and, for each of the two keys, its input error against the query (d2), the
    product of the errors (d3), the key projection's rounding (t2) and the rounding of the
    dot product and the scaling (t3, t4: :func:`_score_rounding`), the query
    projection's rounding against the key's error (g_q (le_k + t2)) and the table's float64
    rounding (eps). With q^ = q + eq (q = x^ W_Q exact, x^ = x + dx) and k^_j = k_j + ek_j
    (k_j = y^_j W_K exact, y^_j = y_j + dy_j), every part of s^_j - s^_t - (s_j - s_t) is one
    of these: dx W_Q . (k_j - k_t) ideal keys (D1), q_ideal . dy W_K (d2, per key),
    dx W_Q . dy W_K (d3), q . ek (t2), eq . (ideal k_j - k_t) (R1), eq . (dy W_K + ek)
    (g_q (le_k + t2)), the dot product's and the scaling's rounding (t3 + t4). The weight of key j is
    then at most exp((1 - u)(s_j - s_t) + E(j)) (the shift's rounding, as in :func:`level_leak_sum`),
    summed over key positions as there. Every other row keeps the uniform bound
    (exp(2 delta) times its sum, inf where its gap is not above 2 delta). Returns the largest
    row's bound.
    """
    qs, ks = t.qs, t.ks
    d1, d2, d3 = ins
    # + 2 eps: the two table entries' own float64 rounding
    common = 2 * (d2 + d3 + rnd["t2"] + rnd["t3"] + rnd["t4"] + rnd["g_q"] * (rnd["le_k"] + rnd["t2"]) + eps)
    blist = list(blocks.values())
    m_all = ks.contrib @ (t.wq * scale).T  # [nk, q_rows]: W_Q k_j, the query input error's weights against key j
    q_err = bool(state.radius[t.q_rows].any())
    chunk = max(1, ROW_CHUNK_ENTRIES // max(len(ks.contrib) * max(len(t.q_rows), ks.contrib.shape[1]), 1))
    best = 0.0
    for start in range(0, len(qs.contrib), chunk):
        stop = min(start + chunk, len(qs.contrib))
        lv = score_levels(t, start, stop, eps, causal)
        top_members = ((lv.cid == 0) & lv.valid).sum(1)
        pair = (lv.reach == 0) & (top_members == 1)
        rows = np.flatnonzero(pair)
        other = np.flatnonzero(~pair)
        if len(other):
            uni = _leak_rows(lv, eps, ks, pin_order, pinned_sorted, groups_at, n)[other]
            bad = (lv.row_gap[other] <= 2 * delta) & (uni > 0)
            if bad.any():
                return math.inf
            best = max(best, float((uni * math.exp(2 * delta)).max(initial=0.0)))
        if not len(rows):
            continue
        top = lv.order[rows, 0]  # [c] the top key combination of each row
        s = lv.s[rows]
        s_top = s[np.arange(len(rows)), top]
        diff = ks.contrib[None, :, :] - ks.contrib[top][:, None, :]  # [c, nk, e]
        err = rnd["g_q"] * np.einsum("cke,ce->ck", np.abs(diff), qs.absval[start + rows]) + common
        if q_err:
            md = (m_all[None, :, :] - m_all[top][:, None, :]).reshape(-1, len(t.q_rows))
            err = err + lin_err(state, blist, t.q_rows, md.T).reshape(len(rows), -1)
        with np.errstate(over="ignore", invalid="ignore"):
            w = np.exp(SHRINK * (s - s_top[:, None]) + err)
        w = np.where(np.isfinite(s), w, 0.0)
        w[np.arange(len(rows)), top] = 0.0
        best = max(best, float(_position_sum(w, pin_order, pinned_sorted, groups_at, n).max(initial=0.0)))
    return best


def _leak_rows(lv: _Levels, eps: float, ks: Side, pin_order, pinned_sorted, groups_at, n: int) -> np.ndarray:
    """[r] the per-row sums of :func:`level_leak_sum`."""
    s, live = lv.s, lv.cand & lv.valid
    lowest = np.where(live, lv.ss, np.inf).min(1)  # [r] t
    single = lv.reach == 0
    near = s >= (lowest - 2 * eps)[:, None]
    with np.errstate(over="ignore", invalid="ignore"):
        w = np.where(near, np.where(single[:, None], 0.0, np.exp(-SHRINK * lv.row_gap)[:, None]),
                     np.exp(SHRINK * (s - lowest[:, None])))
    w = np.where(np.isfinite(s), w, 0.0)
    return _position_sum(w, pin_order, pinned_sorted, groups_at, n)


def level_leak_sum(lv: _Levels, eps: float, ks: Side, pin_order, pinned_sorted, groups_at, n: int) -> float:
    """max over query rows of sum over key positions of exp(score - top), without the perturbation.

    For each query row the actual top is one of the candidate levels; t is the lowest of them. A key
    at a candidate level that is not the top lies at least the row's smallest gap g below it
    (weight <= exp(-g)); a key below every candidate lies below t (weight <= exp(s - t)). The
    members of the highest level count as intended when it is the only candidate. Each position
    holds one of its alternatives, so a position adds its largest weight; a key that names no
    position may stand at every one of the n positions.
    """
    # (1 - u): the softmax's shift fl(s - max) rounds each exponent within u of itself
    return float(_leak_rows(lv, eps, ks, pin_order, pinned_sorted, groups_at, n).max(initial=0.0))


def _floor(s: np.ndarray, qs: Side, ks: Side, start: int, stop: int, causal: bool,
           dom: Optional["DomainView"] = None) -> np.ndarray:
    """[r] a score the top key of each query row reaches on EVERY input (the top level is at least this).

    Every position 0..i exists when the query sits at position i (0..1 when the query reads no
    position: it sits at some i >= 1; a BOS query of a causal model sees only BOS). Each existing
    position holds one of its alternatives, so the top score is at least
    max over existing positions of (min over that position's alternatives).

    The key at the query's own position holds the query's own vectors: where both sides read a
    block, only the key alternatives whose group (under W_K) meets the query's (under W_Q) can
    stand there (:func:`_self_floor`). Given a domain precondition (``dom``), positions up to
    the least domain length >= i exist (:meth:`.domain.Precondition.reach`; recorded as a use
    of ``lengths`` where it raises the floor). Not in a causal model: there a query at i sees
    positions 0..i only, and one whose position the table does not know (its side reads no
    position) is not masked from later keys in ``s``, so a later position's score is not one
    the query reaches.
    """
    base = _floor_upto(s, qs, ks, start, stop, causal, None)
    if dom is not None and dom.pre.lengths:
        ext = _floor_upto(s, qs, ks, start, stop, causal, dom)
        if (ext > base).any():
            dom.used.add("lengths")
        base = ext
    return np.maximum(base, _self_floor(s, qs, ks, start, stop))


def _self_floor(s: np.ndarray, qs: Side, ks: Side, start: int, stop: int) -> np.ndarray:
    """[r] the lowest score of a key at the query's own position that agrees with the query (-inf if none).

    The query sits at its position, so that position exists, and the key there is the same
    residual vector: for every block both sides read, the key's group of vectors (those W_K
    maps alike) and the query's (those W_Q maps alike) both hold that one vector, so they
    meet. Key alternatives whose group meets the query's for every shared block are the only
    ones that can stand there; the top is at least the lowest of their scores. Rows whose
    position is unknown (or BOS) get -inf; a block with more than :data:`SELF_MAX_VECTORS`
    vectors is not compared (fewer constraints: more alternatives, still sound).
    """
    r = stop - start
    out = np.full(r, -np.inf)
    qpos = np.where(qs.kind[start:stop] == 1, qs.position[start:stop], -1)
    kpos = np.where(ks.kind == 1, ks.position, -1)
    if not (qpos >= 1).any() or not (kpos >= 1).any():
        return out
    here = (kpos[None, :] == qpos[:, None]) & (qpos >= 1)[:, None]  # [r, nk]
    for nm in set(qs.names) & set(ks.names):
        mq, mk = qs.member.get(nm), ks.member.get(nm)
        if mq is None or mk is None or len(mq) != len(mk) or len(mq) > SELF_MAX_VECTORS:
            continue
        meet = np.zeros((len(mq), len(mq)), bool)
        meet[mq, mk] = True  # [query rep, key rep]: some vector is in both groups
        qp = np.where(qpos >= 1, qs.parts[start:stop, qs.names.index(nm)], 0)  # BOS rows index other sets:
        kp = np.where(kpos >= 1, ks.parts[:, ks.names.index(nm)], 0)  # masked by ``here`` anyway
        here &= meet[qp[:, None], kp[None, :]]
    ok = here.any(1)
    out[ok] = np.where(here, s, np.inf)[ok].min(1)
    return out


def _floor_upto(s: np.ndarray, qs: Side, ks: Side, start: int, stop: int, causal: bool,
                dom: Optional["DomainView"]) -> np.ndarray:
    """[r] max over the positions that surely exist of the lowest alternative (see :func:`_floor`)."""
    qkind, qpos = qs.kind[start:stop], qs.position[start:stop]
    reach = np.where(qkind == 0, 0 if causal else 1, np.maximum(qpos, qs.guard[start:stop]))  # [r] exists
    if dom is not None and not causal:  # causal: positions after the query exist but are hidden from it
        ext = dom.reach()
        reach = ext[np.clip(reach, 0, dom.n)]
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


def _output_radius(state: State, blocks: Dict[str, Block], t: HeadTables, spec, p, h: int, n: int,
                   leak: float, one_key: bool = False) -> Tuple[np.ndarray, Dict[str, float]]:
    """([Do] row radius, {block: l1 bound}) of the head's write: leak, input error, float32.

    The float32 term is a relative factor times M |W_O|, M[e] = max over every value of
    ((|x| + r) |W_V|)[e]: the weighted average of the value vectors is bounded per head
    dimension before W_O mixes them. ``one_key``: the top level holds one key of the input
    (a clean categorical head), so the softmax's normalisation and sum are a relative error
    of the dominant term (:func:`float32.pointer_output_rel`); otherwise the
    order-independent :func:`float32.softmax_output_rel`.
    """
    blist = list(blocks.values())
    outs = t.vs.contrib
    spread = outs.max(0) - outs.min(0)  # [Do] range of the ideal outputs per row
    # [Do] bound on what float32 rounding is relative to: max per head dimension, then through |W_O|
    w_v = np.asarray(p["w_v"][h], np.float64)
    a_v = side(state, blocks, t.v_rows, w_v, n).absval  # [combinations, d_head]
    m_v = a_v.max(0)  # [d_head]
    abs_wo = np.abs(np.asarray(p["w_o"][h], np.float64))
    vabs = m_v @ abs_wo  # [Do]
    out_rows = spec.rows("out_rows", len(state.radius))
    written = [(b, np.flatnonzero(np.isin(out_rows, b.rows))) for b in blist]
    written = [(b, cols) for b, cols in written if len(cols)]
    # per written block: max over value combinations j of M_j |W_O[:, cols]| 1 (the l1 float32 term below)
    per_key_l1 = (a_v @ np.stack([abs_wo[:, cols].sum(1) for _, cols in written], 1)).max(0, initial=0.0) \
        if written else np.zeros(0)
    del a_v
    f32_rel = softmax_output_rel(n, p["w_v"][h], p["w_o"][h])
    if one_key:
        f32_rel = min(f32_rel, pointer_output_rel(n, leak, p["w_v"][h], p["w_o"][h]))
    f32 = f32_rel * vabs
    r_out = leak * spread + lin_err(state, blist, t.v_rows, t.wvo) + f32
    # l1 per written block: the leak moves mass between ideal outputs, the input errors pass through W_OV
    l1_out = {}
    for (b, cols), key_l1 in zip(written, per_key_l1):
        # float32 term in l1: every bound on a coordinate's rounding is relative to
        # sum_j a_j M_j (M_j: key j's (|x| + r)|W_V|, sum_j a_j <= 1), so summed over the
        # block's columns through |W_O| it is at most f32_rel x max_j M_j |W_O[:, cols]| 1
        # (not the sum over columns of a per-column maximum: a one-hot value is large in
        # one column only)
        f32_l1 = min(float(vabs[cols].sum()), float(key_l1))
        l1_out[b.name] = up(leak * 2 * float(np.abs(outs[:, cols]).sum(1).max())
                            + float(lin_err(state, blist, t.v_rows, np.abs(t.wvo[:, cols]).sum(1)).max())
                            + f32_rel * f32_l1)
    return np.array([up(x) for x in r_out]), l1_out


def _level_patterns(lv: _Levels, ks: Side, rows: np.ndarray) -> Tuple[set, float]:
    """For the query rows ``rows`` (chunk-local): the set of (BOS always in, BOS maybe in, regular
    keys in, a regular key always in) over every candidate level, and the largest score span inside
    a candidate level.

    A regular key is always in level c when it is the top: position 1 exists in every input, and
    when every alternative it can hold (a regular key at position 1, or at no named position)
    scores in level c or above (none masked), the top level c holds it (no present key scores
    above the top)."""
    live = lv.cand & lv.valid
    nr, nk = lv.ss.shape
    flat = (np.arange(nr)[:, None] * nk + lv.cid)
    kind = ks.kind[lv.order]  # [r, nk] kind of each sorted key
    size = nr * nk
    acc = {}
    for name, val, init, op in (("bos_any", (kind == 0).astype(int), 0, np.maximum),
                                ("reg", (kind == 1).astype(int), 0, np.maximum),
                                ("hi", lv.ss, -np.inf, np.maximum), ("lo", lv.ss, np.inf, np.minimum)):
        a = np.full(size, init, dtype=float)
        op.at(a, flat[live], np.asarray(val, float)[live])
        acc[name] = a.reshape(nr, nk)
    # bos_all must range over the BOS alternatives only: a level holds every BOS alternative when
    # the number of BOS keys in it equals the number of BOS alternatives
    n_bos = int((ks.kind == 0).sum())
    cnt = np.zeros(size)
    np.add.at(cnt, flat[live & (kind == 0)], 1)
    cnt = cnt.reshape(nr, nk)
    pos1 = (kind == 1) & np.isin(ks.position[lv.order], (1, -1))  # [r, nk] what position 1 can hold
    big = np.iinfo(np.int64).max
    low1 = np.where(pos1, np.where(lv.valid, lv.cid, big), -1).max(1)  # [r] its lowest level (big: masked)
    pats, span = set(), 0.0
    for r in rows:
        for c in range(int(lv.reach[r]) + 1):
            if not np.isfinite(acc["hi"][r, c]):
                continue
            pats.add((bool(cnt[r, c] == n_bos and n_bos > 0), bool(acc["bos_any"][r, c]), bool(acc["reg"][r, c]),
                      bool(0 <= low1[r] <= c)))
            span = max(span, float(acc["hi"][r, c] - acc["lo"][r, c]))
    return pats, span


def _means(pats: set, v_bos: np.ndarray, v_reg: np.ndarray, n: int, kind: int = 1
           ) -> Tuple[np.ndarray, np.ndarray]:
    """([m, Do] every mean (b v_BOS + v_1 + ... + v_k) / (b + k) a level of the patterns ``pats`` gives,
    [m] its guard).

    The guard of a mean is the smallest k (at least ``kind``) over the levels that give it: a level
    of k regular keys holds k distinct positions, all in the input and (causal) visible to the query,
    so positions 0..k exist (:class:`state.State`). A SelectorWidth's 1 / (w + 1) gets guard w.

    Raises:
        TooLarge: more than :data:`MAX_MEANS` means.
    """
    do = v_reg.shape[1] if len(v_reg) else v_bos.shape[1]
    sums = [np.zeros((1, do))]  # sums[k]: every sum of k regular values
    need_reg = any(p[2] for p in pats)
    for k in range(1, n + 1 if need_reg else 1):
        nxt = unique_rows((sums[-1][:, None, :] + v_reg[None, :, :]).reshape(-1, do))
        if len(nxt) > MAX_MEANS:
            raise TooLarge(f"more than {MAX_MEANS} sums of {k} values of a mean")
        sums.append(nxt)
    out, guards = [], []
    for always, maybe, reg, reg_always in pats:
        for b in ([1] if always else [0, 1] if maybe else [0]):
            for k in (range(1 if reg_always else 0, n + 1) if reg else [0]):
                if b + k == 0 or (k and not len(v_reg)) or (b and not len(v_bos)):
                    continue
                tot = (v_bos[:, None, :] + sums[k][None, :, :]).reshape(-1, do) if b else sums[k]
                out.append(tot / (b + k))
                guards.append(np.full(len(tot), max(k, kind), dtype=np.int64))
    if not out:
        return np.zeros((0, do)), np.zeros(0, dtype=np.int64)
    res, guard = unique_min(np.concatenate(out), np.concatenate(guards))
    if len(res) > MAX_MEANS:
        raise TooLarge(f"a mean with {len(res)} values")
    return res, guard


def weighted_mean_deviation(x: float) -> float:
    """Largest |weighted mean - mean| of values in [0, 1] when any two weights have a ratio within
    exp(x), x >= 0: tanh(x / 4) (module docstring, "Numerical heads"), rounded outward."""
    if not math.isfinite(x):
        return 1.0
    return min(1.0, up(math.tanh(x / 4.0)))


def numerical_written(blocks: Dict[str, Block], out_rows: np.ndarray, wvo: np.ndarray) -> bool:
    """Whether the head writes only numerical (not one-hot) written blocks (a mean head)."""
    live = out_rows[np.abs(wvo).sum(0) > 0]
    hit = [b for b in blocks.values() if np.isin(live, b.rows).any()]
    return bool(hit) and all(b.kind == "written" and not b.categorical for b in hit)


def certify_head(state: State, blocks: Dict[str, Block], spec, p: Dict[str, Any], h: int, n: int,
                 causal: bool, clean_by: Optional[str] = None, dom: Optional[DomainView] = None) -> HeadCert:
    """Certify head ``h`` of one attention sublayer (see the module docstring).

    Args:
        state: the abstract state before the sublayer.
        blocks: the residual blocks by name.
        spec: the sublayer's :class:`~constructions.runtime.SublayerSpec` (rows, qk_scale).
        p: the sublayer's weights (``w_q``, ``w_k``: [heads, rows, d_head]; ``w_v``, ``w_o``).
        h: the head.
        n: N, the longest input.
        causal: the model masks keys after the query.
        clean_by: why every level of several positions holds one value (:mod:`.values`), or
            None. Such a level is then accepted and ``entry["level_clean_by"]`` says so: the
            argument is about the RASP program, so the caller must stop the head unless its
            table is the program's selector (:func:`program.check_head`).
        dom: a domain precondition (:class:`DomainView`), or None: every input. The facts it
            used are added to ``dom.used``; what is then proved holds on the domain only.
    Returns:
        :class:`HeadCert`.
    Raises:
        TooLarge: the score table or one side is too large to enumerate.
    """
    t = _sides(state, blocks, spec, p, h, n)
    uniq = unique_rows(t.vs.contrib)
    constant = len(uniq) == 1
    numeric = not constant and numerical_written(blocks, spec.rows("out_rows", len(state.radius)), t.wvo)
    pats: Tuple[set, set] = (set(), set())  # numerical heads: level patterns of BOS and regular queries
    span = 0.0
    ins = _score_perturbation(state, blocks, t, n, parts=True)
    d_inputs = sum(ins)
    # float32 rounding of the score: relative to max over pairs of sum_e |q_e| |k_e| with |x| + r in
    # place of x (computed with the table, below; :func:`_score_rounding`)
    eps = up(_table_rounding(t) + _grouping_rounding(t))
    min_gap, leak_sum, abs_max, bos_reads_regular = math.inf, 0.0, 0.0, False
    used_analysis = None  # the first level only the value analysis makes clean
    # the keys each query position can attend (:mod:`.links`), for later heads' levels
    attended = {} if dom is not None and dom.links is not None else None
    for _, tb in _key_batches(t, ROW_CHUNK_ENTRIES):
        qs, ks = tb.qs, tb.ks
        chunk = max(1, ROW_CHUNK_ENTRIES // max(len(ks.contrib), 1))
        kpos_all = np.where(ks.kind == 0, 0, ks.position)
        pin_order = np.argsort(np.where(ks.pinned, kpos_all, -1), kind="stable")
        pinned_sorted = ks.pinned[pin_order]
        groups_at = np.unique(kpos_all[pin_order][pinned_sorted], return_index=True)[1]
        for start in range(0, len(qs.contrib), chunk):
            stop = min(start + chunk, len(qs.contrib))
            abs_max = max(abs_max, float((qs.absval[start:stop] @ ks.absval.T).max(initial=0.0)))
            lv = score_levels(tb, start, stop, eps, causal, dom)
            if len(lv.row_gap) and lv.row_gap.min() < min_gap:
                min_gap = float(lv.row_gap.min())
            leak_sum = max(leak_sum, level_leak_sum(lv, eps, ks, pin_order, pinned_sorted, groups_at, n))
            bos_rows = qs.kind[start:stop] == 0  # can a BOS query's top level hold a regular key?
            bos_reads_regular |= bool((lv.cand & lv.valid & (ks.kind[lv.order] != 0))[bos_rows].any())
            if numeric:
                for kind in (0, 1):
                    p_k, sp = _level_patterns(lv, ks, np.flatnonzero(qs.kind[start:stop] == kind))
                    pats[kind].update(p_k)
                    span = max(span, sp)
            elif not constant:
                bad = unclean_level(lv, tb, start, blocks, state, len(uniq), dom, eps)
                if bad is not None:
                    if clean_by is None:
                        return HeadCert(None, bad)
                    used_analysis = bad
                if attended is not None and not dom.links.collect(lv, tb, start, dom.token_of, attended):
                    attended = None
    if t.ks is not None:
        rounding, rnd = _score_rounding(state, blocks, t, float(spec.qk_scale), abs_max, parts=True)
    else:  # factored keys (no full key side to split the sums by): the order-independent bound
        rounding, rnd = up(score_rel(p["w_q"][h], p["w_k"][h], t.wq.shape[1]) * abs_max), None
    delta = up(d_inputs + rounding)
    leak = 0.0 if leak_sum == 0 else up(leak_sum * math.exp(2 * delta)) if min_gap > 2 * delta else math.inf
    entry = {"min_gap": min_gap, "delta": delta, "leak_bound": leak}
    qs, ks = t.qs, t.ks
    if (not numeric and not constant and leak > PAIR_LEAK_ABOVE and rnd is not None
            and len(qs.contrib) * len(ks.contrib) * max(len(t.q_rows), ks.contrib.shape[1]) <= PAIR_LEAK_MAX):
        pair = up(_pair_leak(t, state, blocks, eps, causal, n, float(spec.qk_scale), ins, rnd, delta,
                             pin_order, pinned_sorted, groups_at))
        entry["leak_uniform"] = leak
        if pair < leak:  # both are bounds on the same leak: the smaller holds
            leak = entry["leak_bound"] = pair
            entry["leak_by"] = "per-pair score errors"
    if used_analysis is not None:
        entry["level_clean_by"] = clean_by
        entry["level_clean_witness"] = used_analysis["witness"]
    if leak == math.inf or leak >= 1.0:
        return HeadCert(entry, {
            "why": f"score gap {min_gap:.4g} is not clear of the perturbation 2 x {delta:.4g}: leak bound "
                   f"{leak:.3g} >= 1", "witness": {"min_gap": min_gap, "delta": delta, "leak_bound": leak, "n": n}})
    r_out = _output_radius(state, blocks, t, spec, p, h, n, leak, one_key=not numeric and not constant)
    if numeric:
        outs, vs = t.vs.contrib, t.vs
        v_bos, v_reg = unique_rows(outs[vs.kind == 0]), unique_rows(outs[vs.kind == 1])
        means = [_means(pats[k], v_bos, v_reg, n, kind=k) for k in (0, 1)]
        if not all(len(m) for m, _ in means):
            return HeadCert(entry, {"why": "numerical head: no level that can be the top holds a key",
                                    "witness": {"n": n}})
        x = span + 2 * eps + 2 * delta  # weights inside the top level: uniform up to exp(x)
        spread = outs.max(0) - outs.min(0)
        extra = weighted_mean_deviation(x) * spread + gamma(n + 2, U64) * np.abs(outs).max(0)
        r_row = np.array([up(v) for v in r_out[0] + extra])
        l1 = {k: up(v + float(extra.sum())) for k, v in r_out[1].items()}
        entry["level_span"] = span
        return HeadCert(entry, None, tuple(means),
                        (r_row, l1), (t, eps))
    # the attended key exists, so does what its value names: the written vector's guard
    outs, vs = t.vs.contrib, t.vs
    every = unique_min(outs, vs.guard)
    # BOS reads only BOS when no regular key can be its top (always in a causal model): its write is BOS's value
    bos = unique_min(outs[vs.kind == 0], vs.guard[vs.kind == 0]) if causal or not bos_reads_regular else every
    # a level cleared by the value analysis may average several keys: no single attended key
    return HeadCert(entry, None, (bos, every), r_out, (t, eps),
                    attended if used_analysis is None and not constant else None)


# ------------------------------------------------------------------ shared with other head kinds (.relu)


def head_sides(state: State, blocks: Dict[str, Block], spec, p, h: int, n: int) -> HeadTables:
    """Head ``h``'s query side (W_Q times ``qk_scale``), key side, value side (W_V W_O) and W_QK.

    Raises:
        TooLarge: a side, or the score table (more than :data:`MAX_TABLE` entries), is too large.
    """
    return _sides(state, blocks, spec, p, h, n)


def score_perturbation(state: State, blocks: Dict[str, Block], t: HeadTables, n: int) -> float:
    """Bound on |s - s_ideal| from the input radii alone (see :func:`_score_perturbation`)."""
    return _score_perturbation(state, blocks, t, n)


def table_rounding(t: HeadTables) -> float:
    """eps: the float64 rounding of a head's score table (see :func:`_table_rounding`)."""
    return _table_rounding(t)
