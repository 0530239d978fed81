"""Set-valued blocks: union heads, their threshold MLPs, copies of a set, and the meet read-out.

A set-valued SOp (:func:`constructions.nodes.is_multi`: the reads of a ``union`` head and
copies of them) is a multi-hot vector over its elements. The state's finite sets of ideal
vectors cannot hold it (2^n subsets), so a set block gets a *product domain* instead
(:class:`SetDom`): for each coordinate, at BOS and at regular positions, at most two ideal
intervals, the *off* interval [lo0, hi0] and the *on* interval [lo1, hi1] (points for a 0/1
multi-hot), each possible or not, and every combination of the coordinates' choices
allowed. That over-approximates every set of ideal vectors whose coordinates take those
values, so everything proved over the product holds for the real one. The residual rows
keep their radius (``|x - ideal| <= r``, the ideal now any point of the coordinate's
interval) and the block its l1 bound, as for every block (:mod:`.state`). The generic
enumeration (:func:`state.side`, :func:`program.combos`) refuses a set block; the sublayers
that read or write one are analysed here, each from the weights (the float32 part) and then
against the program (the program check), as for every other sublayer:

* **Union head** (:func:`certify_union_head`, the connectivity construction's ``union``):
  key k matches when its token names the query's element. The query reads categorical
  blocks (enumerated) and at most one set block; the key only categorical blocks. The score
  is c0(q, k) + sum_i x_i C[i, k] (bilinear), and every key's score must depend on at most
  one set coordinate i (else not certified), so each key has at most two *options*
  (x_i off or on). For every query combination the options split in three tiers: *selected*
  above every BOS alternative by more than 2 eps, *unselected* below every BOS alternative by
  more than 2 eps (anything in between: not certified). BOS is always present, so on every
  input the keys the softmax weights most are the present selected ones, S, when S is not
  empty, else BOS. With every value coordinate >= 0 (checked) and BOS's value zero
  (checked), the head's real output at coordinate o is, in exact arithmetic:
  - when some key of S has v_o > 0, at least (1 - lambda) e^-x vmin_o / N and at most vmax_o:
    the weights off S sum to at most the leak bound lambda, the weights inside S are within
    e^x of each other (x = the selected scores' span + 2 eps + 2 delta), |S| <= N, and a
    positive v_o is at least vmin_o (every term of the value is >= 0, so a positive one is at
    least the smallest positive term);
  - otherwise in [0, lambda vmax_o] (only the mass off S carries it).
  These are the scratch block's on and off intervals; the radius adds the input error through
  W_OV and the float32 term of the softmax average (the order-independent
  :func:`float32.softmax_output_rel`: S holds several keys). lambda is the usual leak sum:
  BOS and the N regular positions, each at most exp(-(gap - 2 delta)) (shift rounding:
  exponents times :data:`float32.SHRINK`).
* **Threshold MLP** (:func:`certify_threshold_mlp`): every output row reads hidden units of at
  most one set coordinate (checked); each possible input interval widened by its radius goes
  through the MLP exactly (the output is a piecewise linear function of that one variable:
  its range is taken at the interval's ends and the ReLUs' breakpoints inside), plus the
  categorical inputs' radius and the float32 rounding of every pre-activation (ReLU is
  1-Lipschitz) and of the output sum; the output interval must lie within 1/4 of 0 or of 1:
  that is its ideal point, the rest joins the radius. Where the on interval fails, the witness
  names the smallest fan-in m (one holder among m selected keys, hardmax mean unit / m) whose
  output decodes as absent, and the one where it is 0 (:func:`_fan_in`); for a union over the
  tokens, :func:`fan_in_inputs` builds inputs of that fan-in for the wrong-input search.
* **Copy of a set** (:func:`certify_set_copy`): a one-position head (the generic level and leak
  analysis, :mod:`.heads`) whose value reads a 0/1 set block; every output row reads at most one
  set row, so the write's coordinates take the points {0, W[i, o]}; radius: leak x spread +
  input error through W_OV + the one-key float32 term.
* **Meet** (:func:`certify_meet_mlp`): hidden units grouped by element (the rows of the two
  sets with one element value, :func:`_groups`); the groups' choices are independent, so the
  output set is every sum of one choice per group, enumerated with deduplication, each with
  the program's value (1 when some element is on in both). Its vectors decode by argmax
  (:attr:`program.Decoder.argmax`), as the unembedding reads them.

The program check of each (``check_*``) compares the same tables with the hand-built
head's reference semantics (:func:`constructions.reference._union_keys`, ``_eval_head_read``):
a union head selects key j when ``predicate(key[j], e)`` for the query value e, or for some
element e of a set-valued query; every selected key writes exactly the elements of its read
(``fn`` applied), BOS nothing; the threshold maps a scratch coordinate's off interval to 0
and its on interval to 1 of the element with the same value; a copy writes element fn(e) for
each source element e, BOS the empty set; the meet writes 1 exactly when the sets share an
element. Every element of the source set is compared, also one the weights read with weight 0
(it then writes nothing, which is wrong when the element is on), and an output element whose
threshold reads no scratch coordinate (a constant 0) is accepted only where the scratch of that
element is never on. With these, the decoded set at every position is the program's set, by the same
induction as :mod:`.program`: the union's coordinate e is on exactly when some present key
the program selects holds e.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from depthcraft.constructions.nodes import HeadRead, HeadSpec, SetMeet, apply_fn
from depthcraft.verify.certify.float32 import (SHRINK, U32, U64, gamma, pointer_output_rel, score_rel,
                                               softmax_output_rel, terms, up)
from depthcraft.verify.certify.state import Block, State, TooLarge, Unclean, head_weights, lin_err, side

#: Suffix of a union head's scratch block (the mean before the threshold MLP), see constructions.heads.
SCRATCH = "_sum"
#: Most bit assignments the union program check enumerates for one key (2^k, k the bits it reads).
MAX_BITS = 12
#: Most distinct (output, value) pairs the meet's sum enumeration may hold.
MAX_SUMS = 200_000


@dataclasses.dataclass
class SetDom:
    """Product domain of a set block: per kind (0 BOS, 1 regular) and coordinate, two intervals.

    ``lo[c][k]``, ``hi[c][k]``: [d] the off (k = 0) and on (k = 1) interval per coordinate;
    ``can[c][k]``: [d] bool, whether the coordinate can take it at that kind of position.
    """

    lo: List[List[np.ndarray]]
    hi: List[List[np.ndarray]]
    can: List[List[np.ndarray]]
    #: a union's scratch: [d] the smallest positive value one selected key writes (for witnesses: with m
    #: selected keys of which one holds the element, the hardmax mean is unit / m), else None
    unit: Optional[np.ndarray] = None

    @property
    def points(self) -> bool:
        """Every possible interval is a point (a 0/1 multi-hot after its threshold)."""
        return all(np.all(~self.can[c][k] | (self.lo[c][k] == self.hi[c][k])) for c in (0, 1) for k in (0, 1))

    def magnitude(self) -> np.ndarray:
        """[d] the largest |ideal| of each coordinate over both kinds."""
        m = np.zeros(len(self.lo[0][0]))
        for c in (0, 1):
            for k in (0, 1):
                m = np.maximum(m, np.where(self.can[c][k], np.maximum(np.abs(self.lo[c][k]), np.abs(self.hi[c][k])),
                                           0.0))
        return m


def _dom(d: int) -> SetDom:
    z = lambda: np.zeros(d)  # noqa: E731
    return SetDom([[z(), z()], [z(), z()]], [[z(), z()], [z(), z()]],
                  [[np.zeros(d, bool), np.zeros(d, bool)], [np.zeros(d, bool), np.zeros(d, bool)]])


def set_blocks(dec, blocks: Dict[str, Block]) -> Dict[str, str]:
    """{block name: "set" or "scratch"} for the program's set-valued SOps and union scratch blocks."""
    out = {}
    for nm in blocks:
        expr = dec.link.nodes.get(nm)
        if isinstance(expr, HeadRead) and expr.multi:
            out[nm] = "set"
            if expr.head.kind.selects == "union" and nm + SCRATCH in blocks:
                out[nm + SCRATCH] = "scratch"
    return out


def _split(state: State, rows: np.ndarray, w: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(finite rows, their weights, set rows, their weights) of a projection ``w`` [len(rows), e]."""
    is_set = np.zeros(len(rows), bool)
    for nm in state.setdom:
        is_set |= np.isin(rows, state.setdom_rows[nm])
    live = np.abs(w).sum(1) > 0
    fin = ~is_set
    return rows[fin], w[fin], rows[is_set & live], w[is_set & live]


def _every_source_row(state: State, blocks: Dict[str, Block], source: str, s_rows: np.ndarray,
                      w_s: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """(rows, weights) over EVERY coordinate of the set block ``source``, not only the live ones.

    ``s_rows``/``w_s`` are :func:`_split`'s set rows that a projection reads with a non-zero weight;
    a coordinate of ``source`` that is not among them is read with weight 0 (it writes nothing).
    A program check of a value that copies the elements of ``source`` must see those rows too:
    the program writes fn(e) when element e is on, whatever the weights read. Returns rows
    [len(source rows)] int and weights [len(source rows), e] float64 (zero rows where not read).
    """
    rows = np.asarray(blocks[source].rows)
    w = np.zeros((len(rows), w_s.shape[1] if w_s.ndim == 2 else 0), np.float64)
    for i, r in enumerate(s_rows):
        hit = np.flatnonzero(rows == r)
        if len(hit):
            w[hit[0]] = w_s[i]
    return rows, w


def _coord(state: State, blocks: Dict[str, Block], row: int) -> Tuple[str, int]:
    """(set block name, coordinate index) of a residual row of a set block."""
    for nm in state.setdom:
        hit = np.flatnonzero(blocks[nm].rows == row)
        if len(hit):
            return nm, int(hit[0])
    raise KeyError(row)


def _point_options(state: State, blocks: Dict[str, Block], row: int, kind: int) -> List[Tuple[int, float]]:
    """[(k, value)] the ideal points a 0/1 set row can hold at that kind of position.

    Raises:
        Unclean: the row's intervals are not points (a scratch read by something other than its threshold).
    """
    nm, j = _coord(state, blocks, row)
    dom = state.setdom[nm]
    out = []
    for k in (0, 1):
        if dom.can[kind][k][j]:
            if dom.lo[kind][k][j] != dom.hi[kind][k][j]:
                raise Unclean(f"the set block {nm!r} is read as a set before its threshold", {"block": nm})
            out.append((k, float(dom.lo[kind][k][j])))
    if not out:
        raise Unclean(f"the set block {nm!r} has a coordinate with no possible value", {"block": nm, "row": row})
    return out


def _set_hi(state: State, blocks: Dict[str, Block], rows: np.ndarray) -> np.ndarray:
    """[len(rows)] the largest |ideal| of each set row."""
    return np.array([state.setdom[nm].magnitude()[j] for nm, j in (_coord(state, blocks, int(r)) for r in rows)])


def register_write(state: State, blocks: Dict[str, Block], name: str, dom: SetDom, out_rows: np.ndarray,
                   r_out: np.ndarray, write_fn) -> None:
    """Write a set block once: its product domain, and the radius through :func:`state.write`.

    The block must be zero before (each set block is written by one sublayer). The state's
    finite sets get two representatives (zero and the largest magnitude per coordinate) so
    that ``write``'s float32 term of the residual addition and its l1 update see the block's
    magnitude; they are never enumerated (:func:`state.side` refuses a set block).

    Raises:
        Unclean: the block was written before, or the sublayer writes other blocks too.
    """
    b = blocks[name]
    if name in state.setdom or any(np.abs(state.sets[c][name]).max(initial=0) != 0 for c in (0, 1)):
        raise Unclean(f"the set block {name!r} is written twice", {"block": name})
    if not np.isin(out_rows, b.rows).all():
        raise Unclean(f"a set sublayer writes outside {name!r}", {"block": name})
    cols = np.searchsorted(b.rows, out_rows)
    rest = np.setdiff1d(np.arange(len(b.rows)), cols)  # coordinates the sublayer does not write stay 0
    for c in (0, 1):
        dom.can[c][0][rest], dom.can[c][1][rest] = True, False
        dom.lo[c][0][rest] = dom.hi[c][0][rest] = 0.0
    writes = []
    for c in (0, 1):
        top = np.zeros(len(b.rows))
        for k in (0, 1):
            top = np.maximum(top, np.where(dom.can[c][k], np.maximum(np.abs(dom.lo[c][k]), np.abs(dom.hi[c][k])), 0))
        vecs = np.stack([np.zeros(len(out_rows)), top[cols]])
        writes.append((vecs, np.full(2, c, dtype=np.int64)))
    write_fn(state, blocks, out_rows, writes, (r_out, {name: up(float(np.sum(r_out)))}))
    state.setdom[name] = dom
    state.setdom_rows[name] = b.rows


def _value_magnitude(state: State, blocks: Dict[str, Block], v_rows: np.ndarray, w_v: np.ndarray, n: int
                     ) -> np.ndarray:
    """[d_head] M: max over every value of ((|x| + r) |W_V|) per head dimension (what the float32
    softmax average is relative to): the categorical rows by enumeration, the set rows at their
    largest value (every row W_V reads, whether or not W_O keeps it)."""
    f_rows, wf, s_rows, ws = _split(state, v_rows, w_v)
    m = side(state, blocks, f_rows, wf, n).absval.max(0) if len(f_rows) else np.zeros(w_v.shape[1])
    if len(s_rows):
        m = m + (_set_hi(state, blocks, s_rows) + state.radius[s_rows]) @ np.abs(ws)
    return m


# ------------------------------------------------------------------------------------ union head


@dataclasses.dataclass
class UnionTables:
    """What :func:`certify_union_head` computed, for the program check: the query's categorical side
    ``qs`` (:class:`state.Side`), the key side ``ks``, the query's set rows ``q_set`` and their
    score coefficients ``coef`` [len(q_set), nk], each key's set row ``dep`` [nk] (index into
    ``q_set``, -1 none), the scores ``c0`` [nq, nk] without the set rows, and ``eps``."""

    qs: Any
    ks: Any
    q_set: np.ndarray
    coef: np.ndarray
    dep: np.ndarray
    c0: np.ndarray
    eps: float


def _option_scores(t: UnionTables, state, blocks, r: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For query row ``r``: (scores [m], key index [m], option bit [m]) of every key option."""
    kind = int(t.qs.kind[r])
    scores, keys, bits = [t.c0[r]], [np.arange(len(t.dep))], [np.full(len(t.dep), -1)]
    for i, row in enumerate(t.q_set):
        ks_i = np.flatnonzero(t.dep == i)
        if not len(ks_i):
            continue
        for k, val in _point_options(state, blocks, int(row), kind):
            if k == 1 or val != 0.0:
                scores.append(t.c0[r, ks_i] + t.coef[i, ks_i] * val)
                keys.append(ks_i)
                bits.append(np.full(len(ks_i), k))
    # a key that depends on a bit: its plain c0 entry is the off option only if off is possible
    s, kk, bb = np.concatenate(scores), np.concatenate(keys), np.concatenate(bits)
    keep = np.ones(len(s), bool)
    for i, row in enumerate(t.q_set):
        opts = dict(_point_options(state, blocks, int(row), kind))
        if 0 not in opts or opts[0] != 0.0:
            keep &= ~((bb == -1) & (t.dep[kk] == i))
    return s[keep], kk[keep], bb[keep]


def certify_union_head(state: State, blocks: Dict[str, Block], spec, p: Dict[str, Any], h: int, n: int,
                       causal: bool, out_name: str) -> Tuple[Dict[str, float], SetDom, np.ndarray, UnionTables]:
    """The float32 part of a union head (module docstring): its entry, the scratch block's domain,
    the row radius of the write and the tables for the program check.

    Raises:
        Unclean: a key reads several set coordinates, an option between the tiers, a negative
            value, BOS writing a value, a leak bound >= 1, a causal model.
        TooLarge: a side too large to enumerate.
    """
    if causal:
        raise Unclean("a union head in a causal model: not analysed", {"head": h})
    d = len(state.radius)
    q_rows, k_rows, v_rows = spec.rows("q_rows", d), spec.rows("k_rows", d), spec.rows("v_rows", d)
    out_rows = spec.rows("out_rows", d)
    wq = np.asarray(p["w_q"][h], np.float64) * float(spec.qk_scale)
    wk = np.asarray(p["w_k"][h], np.float64)
    w_v, w_o = np.asarray(p["w_v"][h], np.float64), np.asarray(p["w_o"][h], np.float64)
    wvo = w_v @ w_o
    qf_rows, wq_f, qs_rows, wq_s = _split(state, q_rows, wq)
    qs = side(state, blocks, qf_rows, wq_f, n)
    ks = side(state, blocks, k_rows, wk, n)  # refuses a set block on the key side
    kmat = ks.contrib.T  # [e, nk]
    c0 = qs.contrib @ kmat
    coef = wq_s @ kmat  # [set rows, nk]
    nz = coef != 0
    many = nz.sum(0) > 1
    if many.any():
        j = int(np.flatnonzero(many)[0])
        raise Unclean("union head: a key's score depends on several set coordinates",
                      {"key": int(j), "rows": [int(r) for r in qs_rows[nz[:, j]]]})
    dep = np.where(nz.any(0), nz.argmax(0), -1) if len(qs_rows) else np.full(nz.shape[1], -1)
    # the table's float64 rounding (as heads.table_rounding, the set rows at their largest value)
    hi_q = _set_hi(state, blocks, qs_rows) if len(qs_rows) else np.zeros(0)
    qsum = float(np.abs(qs.contrib).sum(1).max()) + float(hi_q @ np.abs(wq_s).sum(1)) if len(qs_rows) else \
        float(np.abs(qs.contrib).sum(1).max())
    eps = up(gamma(len(q_rows) + len(k_rows) + 2 * wq.shape[1] + 4, U64) * qsum * float(np.abs(ks.contrib).max())
             + 1e-300)
    t = UnionTables(qs, ks, qs_rows, coef, dep, c0, eps)
    # delta: the input radii through W_QK (d1 query error, d2 key error, d3 both) and the score's float32 term
    blist = list(blocks.values())
    a = wq @ wk.T
    rq, rk = state.radius[q_rows], state.radius[k_rows]
    # W_QK applied to every ideal key is W_Q (k W_K)^T: the key side's projections (ks.contrib, merged
    # only where equal); likewise for the queries, the set rows at their largest value
    d1 = float(lin_err(state, blist, q_rows, wq @ ks.contrib.T).max()) if rq.any() else 0.0
    if rk.any():
        bound = np.abs(wk @ qs.contrib.T)  # [len(k_rows), m]
        if len(qs_rows):
            bound = bound + (np.abs(wk @ wq_s.T) @ hi_q)[:, None]
        d2 = float(lin_err(state, blist, k_rows, bound).max())
    else:
        d2 = 0.0
    l1q = float(sum(min(state.l1[b.name], state.radius[b.rows].sum()) for b in blist if np.isin(b.rows, q_rows).any()))
    l1k = float(sum(min(state.l1[b.name], state.radius[b.rows].sum()) for b in blist if np.isin(b.rows, k_rows).any()))
    d3 = min(float(rq @ np.abs(a) @ rk), l1q * float(np.abs(a).max(initial=0)) * l1k)
    qabs = qs.absval.max(0) + ((hi_q + state.radius[qs_rows]) @ np.abs(wq_s) if len(qs_rows) else 0.0)
    abs_max = float((ks.absval @ qabs).max(initial=0.0))
    delta = up(d1 + d2 + d3 + score_rel(p["w_q"][h], p["w_k"][h], wq.shape[1]) * abs_max)
    # the three tiers, per query row
    bos_k = ks.kind == 0
    min_gap, span, leak_sum = math.inf, 0.0, 0.0
    any_sel = [False, False]
    for r in range(len(qs.kind)):
        s, kk, _ = _option_scores(t, state, blocks, r)
        b_s = s[bos_k[kk]]
        hib, lob = float(b_s.max()), float(b_s.min())
        reg = ~bos_k[kk]
        sr = s[reg]
        sel = sr > hib + 2 * eps
        uns = sr < lob - 2 * eps
        if (~sel & ~uns).any():
            i = int(np.flatnonzero(~sel & ~uns)[0])
            raise Unclean("union head: a key scores with BOS (neither selected nor below every BOS alternative)",
                          {"query_row": r, "score": float(sr[i]), "bos": [lob, hib]})
        u_top = float(sr[uns].max()) if uns.any() else -math.inf
        cases = [math.exp(-SHRINK * (lob - u_top)) * n if uns.any() else 0.0]
        gaps = [lob - u_top]
        if sel.any():
            any_sel[int(qs.kind[r])] = True
            lo_s = float(sr[sel].min())
            span = max(span, float(sr[sel].max()) - lo_s)
            gaps += [lo_s - hib, lo_s - u_top]
            cases.append(math.exp(-SHRINK * (lo_s - hib)) + (n * math.exp(-SHRINK * (lo_s - u_top)) if uns.any()
                                                               else 0.0))
        min_gap = min(min_gap, min(gaps))
        leak_sum = max(leak_sum, max(cases))
    leak = up(leak_sum * math.exp(2 * delta)) if min_gap > 2 * delta else math.inf
    entry = {"min_gap": min_gap, "delta": delta, "leak_bound": leak, "level_span": span}
    if not leak < 1.0:
        raise Unclean(f"union head: score gap {min_gap:.4g} is not clear of the perturbation 2 x {delta:.4g}: "
                      f"leak bound {leak:.3g} >= 1", {"min_gap": min_gap, "delta": delta, "leak_bound": leak, "n": n})
    # values: every coordinate >= 0, BOS writes zero
    vf_rows, wvo_f, vs_rows, wvo_s = _split(state, v_rows, wvo)
    vs = side(state, blocks, vf_rows, wvo_f, n)
    fin = vs.contrib  # [m, Do]
    if (fin < 0).any() or (wvo_s < 0).any():
        raise Unclean("union head: a value coordinate can be negative", {"head": h})
    if np.abs(fin[vs.kind == 0]).max(initial=0) != 0:
        raise Unclean("union head: BOS writes a value", {"head": h})
    do = wvo.shape[1]
    pos_terms = [np.where(fin[vs.kind == 1] > 0, fin[vs.kind == 1], np.inf).min(0)]
    vmax = fin[vs.kind == 1].max(0) if (vs.kind == 1).any() else np.zeros(do)
    for i, row in enumerate(vs_rows):
        for c in (0, 1):
            for k, val in _point_options(state, blocks, int(row), c):
                if c == 0 and val != 0:
                    raise Unclean("union head: BOS writes a value (its set is not empty)", {"row": int(row)})
                if c == 1 and val > 0:
                    pos_terms.append(np.where(wvo_s[i] > 0, wvo_s[i] * val, np.inf))
        opts = [val for _, val in _point_options(state, blocks, int(row), 1)]
        vmax = vmax + wvo_s[i] * max(opts + [0.0])
        if any(v < 0 for v in opts):
            raise Unclean("union head: a value coordinate can be negative", {"row": int(row)})
    vmin = np.min(np.stack(pos_terms), 0)
    x = span + 2 * eps + 2 * delta
    dom = _dom(len(blocks[out_name].rows))
    cols = np.searchsorted(blocks[out_name].rows, out_rows)
    dom.unit = np.zeros(len(blocks[out_name].rows))
    dom.unit[cols] = np.where(np.isfinite(vmin), vmin, 0.0)
    for c in (0, 1):
        dom.can[c][0][cols] = True
        dom.hi[c][0][cols] = [up(v) for v in leak * vmax]
        on = any_sel[c] & np.isfinite(vmin) & (vmax > 0)
        dom.can[c][1][cols] = on
        dom.lo[c][1][cols] = np.where(on, (1 - leak) * math.exp(-x) * np.where(np.isfinite(vmin), vmin, 0) / n
                                      * (1 - 1e-12), 0.0)
        dom.hi[c][1][cols] = np.where(on, [up(v) for v in vmax], 0.0)
    # radius: input error through W_OV and the float32 term of a several-key average
    f32 = softmax_output_rel(n, p["w_v"][h], p["w_o"][h]) * (_value_magnitude(state, blocks, v_rows, w_v, n)
                                                              @ np.abs(w_o))
    r_out = lin_err(state, blist, v_rows, wvo) + f32
    return entry, dom, np.array([up(v) for v in r_out]), t


# -------------------------------------------------------------------------------- threshold MLP


def _fan_in(state: State, blocks: Dict[str, Block], row: int, const: np.ndarray, slope: np.ndarray,
            wo: np.ndarray, b2: float, n: int) -> Dict[str, Any]:
    """Witness of a threshold that fails on the on interval: the smallest number m of selected keys
    (1..N) such that, when one of them holds the element, the hardmax mean unit / m goes through
    the MLP (exactly, no error terms) to an output below 1/2, i.e. the union drops the element.
    ``fan_in`` None: no such m (the refusal may then be only a missing margin). ``fan_in_zero``: the
    smallest m where that output is 0 or below (the element is gone, not only below 1/2), or None."""
    nm, j = _coord(state, blocks, row)
    unit = state.setdom[nm].unit
    out = {"element": blocks[nm].values[j], "fan_in": None, "fan_in_zero": None}
    if unit is None or unit[j] <= 0:
        return out
    for m in range(1, n + 1):
        xm = float(unit[j]) / m
        y = float(np.maximum(const + xm * slope, 0) @ wo + b2)
        if y < 0.5 and out["fan_in"] is None:
            out.update(fan_in=m, scratch=xm, output=y)
        if y <= 0:
            out["fan_in_zero"] = m
            break
    return out


#: Most tokens tried on each side of a fan-in witness (:func:`fan_in_inputs`).
FAN_IN_CONTEXT = 40


def fan_in_inputs(dec, vocab: Sequence[Any], out_name: str, witness: Dict[str, Any], n: int) -> List[List[Any]]:
    """Candidate inputs for a threshold that drops an element at fan-in m (:func:`_fan_in`), for a union
    head whose query, key and value read the tokens: a query token q, one key token selected by q
    that holds the element, m - 1 copies of one selected by q that does not (q itself when it is
    one), then one token before and one after (each of the first :data:`FAN_IN_CONTEXT` tokens), so
    that a later layer can see the loss. Candidates only: the caller keeps those where the model
    and the program differ. [] when the head is not of that shape or no m is known.
    """
    from tracr.rasp import rasp

    m = witness.get("fan_in_zero") or witness.get("fan_in")
    expr = dec.link.nodes.get(out_name)
    if not m or not isinstance(expr, HeadRead) or "element" not in witness:
        return []
    head, read = expr.head, expr.read
    if not all(isinstance(x, rasp.TokensType) for x in (head.query, head.key, read.source)):
        return []
    e = witness["element"]
    for q in vocab:
        try:
            sel = [k for k in vocab if head.predicate(k, q)]
            holds = [k for k in sel if e in _as_set(apply_fn(read.fn, k))]
            other = [k for k in sel if e not in _as_set(apply_fn(read.fn, k))]
        except Exception:  # noqa: BLE001 - a predicate without a value here: no candidate from q
            continue
        if not holds or not other:
            continue
        k2 = q if q in other else other[0]
        core = [holds[0]] + [k2] * (m - 1) + ([] if k2 == q else [q])
        ctx = list(vocab[:FAN_IN_CONTEXT])
        if len(core) + 2 > n:
            return []
        return [[a] + core + [b] for a in ctx for b in ctx] + [core + [b] for b in ctx]
    return []


def certify_threshold_mlp(state: State, blocks: Dict[str, Block], spec, p: Dict[str, Any], n: int,
                          out_name: str) -> Tuple[SetDom, np.ndarray, Dict[str, Any]]:
    """The float32 part of a union head's threshold MLP (module docstring): the output set block's
    domain (points 0 / 1), the row radius, and for the program check {output row: (input set row,
    {input interval k: output point})}.

    Raises:
        Unclean: a hidden unit or an output reads several set coordinates, or an output interval
            is not within 1/4 of 0 or 1.
        TooLarge: the categorical inputs are too many.
    """
    d = len(state.radius)
    in_rows, out_rows = spec.rows("in_rows", d), spec.rows("out_rows", d)
    w1, b1 = np.asarray(p["w_1"], np.float64), np.asarray(p["b_1"], np.float64)
    w2, b2 = np.asarray(p["w_2"], np.float64), np.asarray(p["b_2"], np.float64)
    f_rows, w1_f, s_rows, w1_s = _split(state, in_rows, w1)
    reads = [np.flatnonzero(w1_s[:, u]) for u in range(w1.shape[1])]
    if any(len(r) > 1 for r in reads):
        raise Unclean("set MLP: a hidden unit reads several set coordinates", {"mlp": out_name})
    fs = side(state, blocks, f_rows, np.eye(len(f_rows)), n) if len(f_rows) else None
    fin_pre = (fs.contrib @ w1_f) if fs is not None else np.zeros((1, w1.shape[1]))
    fin_kind = fs.kind if fs is not None else np.array([1])
    fin_err = lin_err(state, list(blocks.values()), f_rows, w1_f) if len(f_rows) else np.zeros(w1.shape[1])
    fin_abs = ((np.abs(fs.contrib) + state.radius[f_rows]) @ np.abs(w1_f)) if fs is not None else \
        np.zeros((1, w1.shape[1]))
    g1, g2 = gamma(terms(w1) + 1, U32), gamma(terms(w2) + 1, U32)
    dom = _dom(len(blocks[out_name].rows))
    ocols = np.searchsorted(blocks[out_name].rows, out_rows)
    r_out = np.zeros(len(out_rows))
    table: Dict[int, Any] = {}
    for o in range(len(out_rows)):
        units = np.flatnonzero(w2[:, o])
        srcs = {int(reads[u][0]) for u in units if len(reads[u])}
        if len(srcs) > 1:
            raise Unclean("set MLP: an output reads several set coordinates", {"output_row": int(out_rows[o])})
        src = srcs.pop() if srcs else None
        table[int(out_rows[o])] = (None if src is None else int(s_rows[src]), {})
        for c in (0, 1):
            if src is None:
                cases = [(0, 0.0, 0.0, 0.0)]
            else:
                nm, j = _coord(state, blocks, int(s_rows[src]))
                dm, rr = state.setdom[nm], float(state.radius[s_rows[src]])
                cases = [(k, dm.lo[c][k][j] - rr, dm.hi[c][k][j] + rr, rr) for k in (0, 1) if dm.can[c][k][j]]
            for k, xl, xh, _ in cases:
                for f in np.flatnonzero(fin_kind == c):
                    # y(x) = sum_u w2[u] ReLU(a_u x + c_u) + b2 is piecewise linear in the one input x:
                    # its range over [xl, xh] is taken at the ends and the breakpoints inside
                    slope = w1_s[src, units] if src is not None else np.zeros(len(units))
                    const = fin_pre[f][units] + b1[units]
                    xs = [xl, xh]
                    with np.errstate(divide="ignore", invalid="ignore"):
                        brk = np.where(slope != 0, -const / slope, np.nan)
                    xs += [float(v) for v in brk if np.isfinite(v) and xl < v < xh]
                    xs = np.array(xs)
                    pre = const[None, :] + xs[:, None] * slope[None, :]  # [points, units]
                    wo = w2[units, o]
                    ys = np.maximum(pre, 0) @ wo + b2[o]
                    # each pre-activation moves by err (the categorical inputs' radius, float32 rounding);
                    # ReLU is 1-Lipschitz
                    err = fin_err[units] + g1 * (fin_abs[f][units] + max(abs(xl), abs(xh)) * np.abs(slope)
                                                 + np.abs(b1[units]))
                    hi_h = np.maximum(np.abs(pre).max(0) + err, 0)
                    mag = float(np.abs(wo) @ hi_h) + abs(b2[o])
                    # float32 output sum; the float64 evaluation here (its products and sums, and a
                    # breakpoint -c/a computed within a few ulp: y is Lipschitz with sum |w2 a|)
                    rnd = float(np.abs(wo) @ err) + g2 * mag + gamma(len(in_rows) + len(units) + 8, U64) * (
                        mag + float(np.abs(wo) @ np.abs(slope)) * (abs(xl) + abs(xh) + 1.0))
                    y_lo, y_hi = float(ys.min()) - rnd, float(ys.max()) + rnd
                    point = 0.0 if -0.25 <= y_lo and y_hi <= 0.25 else 1.0 if 0.75 <= y_lo and y_hi <= 1.25 else None
                    if point is None:
                        witness = {"output_row": int(out_rows[o]), "kind": c, "input_interval": [xl, xh],
                                   "on": bool(k)}
                        if src is not None and k == 1:
                            witness.update(_fan_in(state, blocks, int(s_rows[src]), const, slope, wo, b2[o], n))
                        raise Unclean(f"set MLP: output row {int(out_rows[o])} lies in [{y_lo:.4g}, {y_hi:.4g}], "
                                      f"not within 1/4 of 0 or 1", witness)
                    kk = int(point)
                    prev = table[int(out_rows[o])][1].get((c, k))
                    if prev is not None and prev != point:
                        raise Unclean("set MLP: one input interval gives two outputs", {"output_row": int(out_rows[o])})
                    table[int(out_rows[o])][1][(c, k)] = point
                    dom.can[c][kk][ocols[o]] = True
                    dom.lo[c][kk][ocols[o]] = dom.hi[c][kk][ocols[o]] = point
                    r_out[o] = max(r_out[o], abs(y_lo - point), abs(y_hi - point))
    return dom, np.array([up(v) for v in r_out]), table


# ------------------------------------------------------------------------------------- set copy


def certify_set_copy(state: State, blocks: Dict[str, Block], spec, p: Dict[str, Any], h: int, n: int,
                     causal: bool, out_name: str) -> Tuple[Dict[str, float], SetDom, np.ndarray, Any]:
    """The float32 part of a one-position head whose value reads a 0/1 set block (module docstring).

    The query and key sides are the generic ones (:mod:`.heads`: levels, clean levels, the leak);
    the value side is the product domain, one set row per output row.

    Returns:
        (entry, the output set block's domain, the row radius, (tables, eps) for the program check).
    Raises:
        Unclean: an unclean level, a leak bound >= 1, a value side that reads a categorical block
            or an output row that reads several set rows.
    """
    from depthcraft.verify.certify import heads as hd

    d = len(state.radius)
    q_rows, k_rows, v_rows = spec.rows("q_rows", d), spec.rows("k_rows", d), spec.rows("v_rows", d)
    out_rows = spec.rows("out_rows", d)
    wq, wk = np.asarray(p["w_q"][h], np.float64), np.asarray(p["w_k"][h], np.float64)
    w_v, w_o = np.asarray(p["w_v"][h], np.float64), np.asarray(p["w_o"][h], np.float64)
    wvo = w_v @ w_o
    scale = float(spec.qk_scale)
    qs = side(state, blocks, q_rows, wq * scale, n)
    ks = side(state, blocks, k_rows, wk, n)
    if len(qs.contrib) * len(ks.contrib) > hd.MAX_TABLE:
        raise TooLarge(f"score table of {len(qs.contrib)} queries x {len(ks.contrib)} keys")
    t = hd.HeadTables(qs, ks, None, wq, wk, wvo, (wq * scale) @ wk.T, q_rows, k_rows, v_rows,
                   wq * scale)
    f_rows, _, s_rows, w_s = _split(state, v_rows, wvo)
    if len(f_rows) and np.abs(wvo[np.isin(v_rows, f_rows)]).max(initial=0) != 0:
        raise Unclean("set copy: the value reads a categorical block beside the set", {"head": h})
    d_inputs = hd.score_perturbation(state, blocks, t, n)
    g32 = score_rel(p["w_q"][h], p["w_k"][h], wq.shape[1])
    eps = hd.table_rounding(t)
    chunk = max(1, hd.ROW_CHUNK_ENTRIES // max(len(ks.contrib), 1))
    kpos_all = np.where(ks.kind == 0, 0, ks.position)
    pin_order = np.argsort(np.where(ks.pinned, kpos_all, -1), kind="stable")
    pinned_sorted = ks.pinned[pin_order]
    groups_at = np.unique(kpos_all[pin_order][pinned_sorted], return_index=True)[1]
    min_gap, leak_sum, abs_max, bos_reads_regular = math.inf, 0.0, 0.0, False
    for start in range(0, len(qs.contrib), chunk):
        stop = min(start + chunk, len(qs.contrib))
        abs_max = max(abs_max, float((qs.absval[start:stop] @ ks.absval.T).max(initial=0.0)))
        lv = hd.score_levels(t, start, stop, eps, causal)
        if len(lv.row_gap) and lv.row_gap.min() < min_gap:
            min_gap = float(lv.row_gap.min())
        leak_sum = max(leak_sum, hd.level_leak_sum(lv, eps, ks, pin_order, pinned_sorted, groups_at, n))
        bos_rows = qs.kind[start:stop] == 0
        bos_reads_regular |= bool((lv.cand & lv.valid & (ks.kind[lv.order] != 0))[bos_rows].any())
        bad = hd.unclean_level(lv, t, start, blocks, state, 2)
        if bad is not None:
            raise Unclean(bad["why"], bad["witness"])
    delta = up(d_inputs + g32 * abs_max)
    leak = 0.0 if leak_sum == 0 else up(leak_sum * math.exp(2 * delta)) if min_gap > 2 * delta else math.inf
    entry = {"min_gap": min_gap, "delta": delta, "leak_bound": leak}
    if not leak < 1.0:
        raise Unclean(f"score gap {min_gap:.4g} is not clear of the perturbation 2 x {delta:.4g}: leak bound "
                      f"{leak:.3g} >= 1", {"min_gap": min_gap, "delta": delta, "leak_bound": leak, "n": n})
    dom = _dom(len(blocks[out_name].rows))
    ocols = np.searchsorted(blocks[out_name].rows, out_rows)
    spread = np.zeros(len(out_rows))
    for o in range(len(out_rows)):
        src = np.flatnonzero(w_s[:, o])
        if len(src) > 1:
            raise Unclean("set copy: an output row reads several set rows", {"output_row": int(out_rows[o])})
        for c in (0, 1):
            kinds = (0, 1) if c == 1 or causal is False and bos_reads_regular else (0,)
            vals = set()
            for kc in kinds:
                if not len(src):
                    vals.add((0, 0.0))
                else:
                    vals |= {(k, float(v * w_s[src[0], o])) for k, v in _point_options(state, blocks,
                                                                                       int(s_rows[src[0]]), kc)}
            for k, v in vals:
                if dom.can[c][k][ocols[o]] and dom.lo[c][k][ocols[o]] != v:
                    raise Unclean("set copy: one input point gives two outputs", {"output_row": int(out_rows[o])})
                dom.can[c][k][ocols[o]] = True
                dom.lo[c][k][ocols[o]] = dom.hi[c][k][ocols[o]] = v
            pts = [v for _, v in vals]
            spread[o] = max(spread[o], max(pts) - min(pts))
    m_v = _value_magnitude(state, blocks, v_rows, w_v, n)
    rel = min(softmax_output_rel(n, p["w_v"][h], p["w_o"][h]), pointer_output_rel(n, leak, p["w_v"][h], p["w_o"][h]))
    r_out = leak * spread + lin_err(state, list(blocks.values()), v_rows, wvo) + rel * (m_v @ np.abs(w_o))
    return entry, dom, np.array([up(v) for v in r_out]), (t, eps)


# ------------------------------------------------------------------------------------------ meet


def _groups(state: State, blocks: Dict[str, Block], s_rows: np.ndarray, w1_s: np.ndarray) -> Dict[Any, List[int]]:
    """{element value: [hidden units]}: each hidden unit reads set rows of one element value only."""
    out: Dict[Any, List[int]] = {}
    for u in range(w1_s.shape[1]):
        rows = s_rows[np.flatnonzero(w1_s[:, u])]
        vals = {blocks[nm].values[j] for nm, j in (_coord(state, blocks, int(r)) for r in rows)}
        if len(vals) > 1:
            raise Unclean("meet: a hidden unit reads elements of several values", {"unit": int(u)})
        out.setdefault(vals.pop() if vals else None, []).append(u)
    return out


def certify_meet_mlp(state: State, blocks: Dict[str, Block], spec, p: Dict[str, Any], n: int, dec,
                     expr: SetMeet) -> Tuple[List[Tuple[np.ndarray, np.ndarray]], np.ndarray, Optional[Unclean]]:
    """The meet MLP, float32 part and program check together (module docstring).

    Returns:
        (per kind (ideal outputs [m, Do], guards [m]), the row radius, and the program check's
        failure: the first regular output that does not decode to the program's value, or None).
    Raises:
        Unclean: a unit reads two elements, the MLP reads a set block other than its two sets.
        TooLarge: too many sums.
    """
    d = len(state.radius)
    in_rows, out_rows = spec.rows("in_rows", d), spec.rows("out_rows", d)
    w1, b1 = np.asarray(p["w_1"], np.float64), np.asarray(p["b_1"], np.float64)
    w2, b2 = np.asarray(p["w_2"], np.float64), np.asarray(p["b_2"], np.float64)
    a_nm, b_nm = expr.a.label, expr.b.label
    f_rows, w1_f, s_rows, w1_s = _split(state, in_rows, w1)
    if not {a_nm, b_nm} <= set(state.setdom):
        raise Unclean("meet: its inputs are not set blocks", {"a": a_nm, "b": b_nm})
    if not np.isin(s_rows, np.concatenate([blocks[a_nm].rows, blocks[b_nm].rows])).all():
        raise Unclean("meet: the MLP reads a set block other than its two sets", {"a": a_nm, "b": b_nm})
    groups = _groups(state, blocks, s_rows, w1_s)
    fs = side(state, blocks, f_rows, np.eye(len(f_rows)), n) if len(f_rows) else None
    if fs is None:
        raise Unclean("meet: no constant input", {})
    fin_err = lin_err(state, list(blocks.values()), f_rows, w1_f)
    g1, g2 = gamma(terms(w1) + 1, U32), gamma(terms(w2) + 1, U32)
    elems_a = {v: blocks[a_nm].rows[j] for j, v in enumerate(blocks[a_nm].values)}
    elems_b = {v: blocks[b_nm].rows[j] for j, v in enumerate(blocks[b_nm].values)}
    common = set(elems_a) & set(elems_b)
    from depthcraft.verify.certify.program import AMBIGUOUS

    outs, r_max, wrong = [], np.zeros(len(out_rows)), None
    dec.argmax.add(expr.label)  # the unembedding's rule: a meet writes [1, 2k] (k shared elements)
    for c in (0, 1):
        vecs, guards = [], []
        for f in np.flatnonzero(fs.kind == c):
            x_f = fs.contrib[f] @ w1_f
            xa_f = (np.abs(fs.contrib[f]) + state.radius[f_rows]) @ np.abs(w1_f)
            sums = {(tuple(b2.tolist()), False)}
            dev_total, hi_total = np.zeros(len(out_rows)), np.abs(b2).copy()
            for e in set(groups) | common:
                units = groups.get(e, [])
                # every row of the element (read or not: the program's value needs both sets' bits)
                rows = [int(r) for r in (elems_a.get(e), elems_b.get(e)) if r is not None] if e is not None else []
                opts = [_point_options(state, blocks, int(r), c) for r in rows]
                choices, dev_e, hi_e = [], np.zeros(len(out_rows)), np.zeros(len(out_rows))
                for combo in itertools.product(*opts) if opts else [()]:
                    x = np.zeros(len(s_rows))
                    rad = np.zeros(len(s_rows))
                    for r, (_, v) in zip(rows, combo):
                        x[np.flatnonzero(s_rows == r)] = v  # rows the MLP does not read stay out of x
                        rad[np.flatnonzero(s_rows == r)] = state.radius[r]
                    flag = e in common and all(v >= 0.5 for _, v in combo)
                    if not units:
                        choices.append((np.zeros(len(out_rows)), flag))
                        continue
                    pre = x_f[units] + x @ w1_s[:, units] + b1[units]
                    err = fin_err[units] + rad @ np.abs(w1_s[:, units]) + g1 * (
                        xa_f[units] + (np.abs(x) + rad) @ np.abs(w1_s[:, units]) + np.abs(b1[units]))
                    hv = np.maximum(pre, 0)
                    dev = np.maximum(np.maximum(pre + err, 0) - hv, hv - np.maximum(pre - err, 0))
                    choices.append((hv @ w2[units], flag))
                    dev_e = np.maximum(dev_e, dev @ np.abs(w2[units]))
                    hi_e = np.maximum(hi_e, np.maximum(pre + err, 0) @ np.abs(w2[units]))
                dev_total += dev_e
                hi_total += hi_e
                nxt = set()
                for vec, fl in sums:
                    for add, f2 in choices:
                        nxt.add((tuple((np.asarray(vec) + add).tolist()), fl or f2))
                if len(nxt) > MAX_SUMS:
                    raise TooLarge(f"more than {MAX_SUMS} meet outputs")
                sums = nxt
            r_max = np.maximum(r_max, dev_total + g2 * hi_total)
            for vec, fl in sorted(sums):  # in order: the witness is the smallest wrong output
                got = dec.decode_rows(expr.label, np.asarray(vec)[None, :])[0]
                if c == 1 and wrong is None and not (isinstance(got, (int, np.integer)) and got == int(fl)):
                    wrong = Unclean(f"meet {expr.label}: the MLP writes {got if got is not AMBIGUOUS else 'no value'!r}"
                                    f" where the sets {'share' if fl else 'do not share'} an element",
                                    {"output": [round(float(v), 6) for v in vec], "expected": int(fl),
                                     "got": None if got is AMBIGUOUS else got})
                vecs.append(vec)
                guards.append(c)
        outs.append((np.asarray(vecs, np.float64), np.asarray(guards, np.int64)))
    y_max = max(float(np.abs(v).max(initial=0)) for v, _ in outs)
    r_out = r_max + gamma(len(in_rows) + w2.shape[0] + 4, U64) * y_max
    return outs, np.array([up(v) for v in r_out]), wrong


# --------------------------------------------------------------------------------- program checks


def _read_of(dec, name: str) -> HeadRead:
    expr = dec.link.nodes.get(name)
    if not isinstance(expr, HeadRead):
        from depthcraft.verify.certify.program import NoSemantics
        raise NoSemantics(f"the block {name!r} is no read of a hand-built head")
    return expr


def _as_set(v: Any) -> frozenset:
    """A read's value as a set: a frozenset itself, None nothing, a value its singleton."""
    if isinstance(v, frozenset):
        return v
    return frozenset() if v is None else frozenset((v,))


def check_union_head(state: State, blocks: Dict[str, Block], dec, spec, p: Dict[str, Any], h: int, n: int,
                     t: UnionTables, out_name: str) -> None:
    """The union head against its reference semantics (module docstring): selection and values.

    Raises:
        Unclean: a (query, key) pair the weights classify otherwise than the predicate, or a
            value whose written elements differ from the read's set (witness: values, expected, got).
        NoSemantics: not a softmax union head of the program.
        TooLarge: too many combinations or bits.
    """
    from depthcraft.verify.certify.program import (AMBIGUOUS, NoSemantics, sop_column, pair_table, rasp_value, combos,
                                                   read_blocks)

    read = _read_of(dec, out_name[: -len(SCRATCH)])
    head: HeadSpec = read.head
    if head.kind.selects != "union" or head.attention != "softmax":
        raise NoSemantics(f"{head.label}: not a softmax union head")
    d = len(state.radius)
    q_rows, k_rows, v_rows, out_rows, wq, wk, wvo = head_weights(spec, p, h, d)
    qf_rows, wq_f, qs_rows, wq_s = _split(state, q_rows, wq)
    q_is_set = head.query.label in state.setdom
    klab = head.key.label
    qn = sorted((set(read_blocks(blocks, qf_rows, wq_f)) | ({head.query.label} if not q_is_set else set()))
                - set(state.setdom))
    kn = sorted(set(read_blocks(blocks, k_rows, wk)) | {klab})
    keep_q = [] if q_is_set else [head.query.label]
    cq = combos(state, blocks, qn, qf_rows, n, w=wq_f, keep=keep_q)
    ck = combos(state, blocks, kn, k_rows, n, w=wk, keep=[klab])
    qi, kj, kb = np.flatnonzero(cq.kind == 1), np.flatnonzero(ck.kind == 1), np.flatnonzero(ck.kind == 0)
    if len(qi) * len(ck.kind) > 50_000_000:
        raise TooLarge(f"program table of {len(qi)} queries x {len(ck.kind)} keys")
    kmat = (ck.x @ wk).T
    c0 = (cq.x[qi] @ wq_f) @ kmat  # [nq, nk]
    coef = wq_s @ kmat  # [set rows, nk]
    eps = t.eps
    kv = sop_column(state, blocks, dec, ck, klab)[kj]
    if any(v is AMBIGUOUS for v in kv):
        raise Unclean("union head: a key's value is no single value", {"key": klab})
    opts = {int(r): _point_options(state, blocks, int(r), 1) for r in qs_rows}
    # BOS's scores over every option of the bits it may read
    b_hi = c0[:, kb].copy()
    b_lo = c0[:, kb].copy()
    for i, r in enumerate(qs_rows):
        vals = [v for _, v in opts[int(r)]] or [0.0]
        b_hi += np.max([coef[i, kb] * v for v in vals], 0)
        b_lo += np.min([coef[i, kb] * v for v in vals], 0)
    hib, lob = b_hi.max(1), b_lo.min(1)  # [nq]

    def classify(a, score):
        return "selected" if score > hib[a] + 2 * eps else "unselected" if score < lob[a] - 2 * eps else "with BOS"

    if not q_is_set:
        qv = sop_column(state, blocks, dec, cq, head.query.label)[qi]
        if any(v is AMBIGUOUS for v in qv):
            raise Unclean("union head: a query's value is no single value", {"query": head.query.label})
        want, raised = pair_table(head.predicate, kv, qv, skip_none=True)
        if raised is not None:
            k, q, e = raised
            raise Unclean(f"union head {head.label}: the predicate raises on (key {k!r}, query {q!r}): "
                          f"{type(e).__name__}: {e}", {"key": rasp_value(k), "query": rasp_value(q)})
        sel = c0[:, kj] > hib[:, None] + 2 * eps
        uns = c0[:, kj] < lob[:, None] - 2 * eps
        bad = (want & ~sel) | (~want & ~uns)
        if bad.any():
            a, b = np.argwhere(bad)[0]
            raise Unclean(f"union head {head.label}: the weights {classify(a, c0[a, kj[b]])} a key the "
                          f"predicate {'selects' if want[a, b] else 'does not select'}",
                          {"query": {head.query.label: rasp_value(qv[a])}, "key": {klab: rasp_value(kv[b])},
                           "selects": bool(want[a, b])})
    else:
        elems = {int(r): blocks[nm].values[j] for r in qs_rows for nm, j in [_coord(state, blocks, int(r))]}
        q_blk = blocks[head.query.label]
        rows_of = {v: int(q_blk.rows[j]) for j, v in enumerate(q_blk.values)}
        for b, key in enumerate(kv):
            hits = []
            if key is not None:
                for e, r in rows_of.items():
                    try:
                        if head.predicate(key, e):
                            hits.append(r)
                    except Exception as ex:  # noqa: BLE001 - the program has no value here
                        raise Unclean(f"union head {head.label}: the predicate raises on (key {key!r}, element "
                                      f"{e!r}): {type(ex).__name__}: {ex}", {"key": rasp_value(key), "element": rasp_value(e)})
            deps = [int(qs_rows[i]) for i in np.flatnonzero(coef[:, kj[b]] != 0)]
            bits = sorted(set(hits) | set(deps))
            for r in bits:
                if r not in opts:
                    opts[r] = _point_options(state, blocks, r, 1)
            if len(bits) > MAX_BITS:
                raise TooLarge(f"a key of {head.label} reads {len(bits)} bits")
            for assign in itertools.product(*[opts[r] for r in bits]):
                val = dict(zip(bits, (v for _, v in assign)))
                program = any(val[r] >= 0.5 for r in hits)
                extra = sum(coef[np.flatnonzero(qs_rows == r)[0], kj[b]] * val[r] for r in deps)
                for a in range(len(qi)):
                    got = classify(a, c0[a, kj[b]] + extra)
                    if got != ("selected" if program else "unselected"):
                        raise Unclean(f"union head {head.label}: the weights {got} a key the predicate "
                                      f"{'selects' if program else 'does not select'}",
                                      {"query": {head.query.label: sorted(rasp_value(elems.get(r, r)) for r in bits
                                                                          if val[r] >= 0.5)},
                                       "key": {klab: rasp_value(key)}, "selects": program})
    # values: the elements each regular key writes (coordinates > 0) are the read's set
    scratch = blocks[out_name]
    cols = np.searchsorted(scratch.rows, out_rows)
    labels = np.array([scratch.values[c] for c in cols], object)
    vf_rows, wvo_f, vs_rows, wvo_s = _split(state, v_rows, wvo)
    src = read.read.source
    src_set = getattr(src, "label", None) in state.setdom
    if not src_set:
        keep = [src.label]
        cv = combos(state, blocks, sorted((set(read_blocks(blocks, vf_rows, wvo_f)) | set(keep)) - set(state.setdom)),
                    vf_rows, n, w=wvo_f, keep=keep)
        vals = cv.x @ wvo_f
        source = sop_column(state, blocks, dec, cv, src.label)
        for i in np.flatnonzero(cv.kind == 1):
            if source[i] is AMBIGUOUS:
                raise Unclean("union head: the value's source is no single value", {"source": src.label})
            want = _as_set(apply_fn(read.read.fn, source[i]))
            got = frozenset(labels[vals[i] > 0].tolist())
            if got != want:
                raise Unclean(f"union head {head.label}: the OV circuit writes the elements {sorted(got, key=repr)} "
                              f"where the read holds {sorted(want, key=repr)}",
                              {"value": {src.label: rasp_value(source[i])}, "expected": sorted(want, key=repr),
                               "got": sorted(got, key=repr)})
        if len(vs_rows):
            raise Unclean("union head: the value reads a set block beside its categorical source", {"head": h})
    else:
        vs = side(state, blocks, vf_rows, wvo_f, n)
        if np.abs(vs.contrib).max(initial=0) != 0:
            raise Unclean("union head: the value writes something beside its set source", {"head": h})
        for i, r in enumerate(vs_rows):
            nm, j = _coord(state, blocks, int(r))
            if nm != src.label:
                raise Unclean(f"union head {head.label}: the value reads the set {nm!r}, not {src.label!r}", {})
        # every element of the source, also one the value reads with weight 0 (it must still be written)
        all_rows, all_w = _every_source_row(state, blocks, src.label, vs_rows, wvo_s.reshape(len(vs_rows), -1)
                                            if len(vs_rows) else np.zeros((0, wvo.shape[1])))
        for i, r in enumerate(all_rows):
            nm, j = _coord(state, blocks, int(r))
            e = blocks[nm].values[j]
            for k, v in _point_options(state, blocks, int(r), 1):
                got = frozenset(labels[all_w[i] * v > 0].tolist())
                want = _as_set(apply_fn(read.read.fn, frozenset((e,)))) if v >= 0.5 else frozenset()
                if got != want:
                    exp_, got_ = sorted(want, key=repr), sorted(got, key=repr)
                    raise Unclean(f"union head {head.label}: the OV circuit writes the elements {got_} for "
                                  f"element {e!r} {'on' if k else 'off'} where the read holds {exp_}",
                                  {"element": rasp_value(e), "expected": exp_, "got": got_})


def check_threshold_mlp(blocks: Dict[str, Block], out_name: str, table: Dict[int, Any],
                        scratch_dom: Optional[SetDom] = None) -> None:
    """The threshold MLP writes element e exactly when the scratch coordinate of e is on (regular positions).

    An element whose output row reads no scratch coordinate (or that no output row of the MLP
    writes) is a constant 0; that agrees with the program only where the scratch coordinate of e
    is never on at a regular position, which ``scratch_dom`` (the scratch block's
    :class:`SetDom`) must show. Without it (None) such an element is refused.

    Raises:
        Unclean: an output row that reads another element's scratch, or maps off / on otherwise,
            or an element written as a constant 0 whose scratch may be on (or is not known).
    """
    out, scratch = blocks[out_name], blocks.get(out_name + SCRATCH)

    def may_be_on(e: Any) -> bool:
        if scratch is None or scratch_dom is None:
            return True
        hit = [c for c, v in enumerate(scratch.values) if v == e]
        return not hit or bool(scratch_dom.can[1][1][hit[0]])

    for row in out.rows:
        e = out.values[int(np.flatnonzero(out.rows == row)[0])]
        src = table[int(row)][0] if int(row) in table else None
        if src is None and may_be_on(e):
            raise Unclean(f"threshold of {out_name}: element {e!r} reads no scratch coordinate (a constant), "
                          "but the union may hold it", {"element": e})
    for row, (src, points) in table.items():
        e = out.values[int(np.flatnonzero(out.rows == row)[0])]
        if src is not None:
            if scratch is None or src not in scratch.rows:
                raise Unclean(f"threshold of {out_name}: element {e!r} reads a row outside its scratch", {"element": e})
            se = scratch.values[int(np.flatnonzero(scratch.rows == src)[0])]
            if se != e:
                raise Unclean(f"threshold of {out_name}: element {e!r} reads the scratch of {se!r}",
                              {"element": e, "reads": se})
        for (c, k), point in points.items():
            if c == 1 and point != (float(k) if src is not None else 0.0):
                raise Unclean(f"threshold of {out_name}: element {e!r} writes {point:g} where the union is "
                              f"{'on' if k else 'off'}", {"element": e, "on": bool(k), "got": point})


def check_set_copy(state: State, blocks: Dict[str, Block], dec, spec, p: Dict[str, Any], h: int,
                   out_name: str, dom: SetDom) -> None:
    """A copy of a set writes element fn(e) for each element e of its source, BOS the read's BOS value.

    (The selection is :func:`program.check_head`'s, called by the driver with ``values=False``.)

    Raises:
        Unclean: an element written under another name, or a BOS value that is not the read's.
        NoSemantics: not a read of a hand-built head.
    """
    from depthcraft.verify.certify.program import NoSemantics

    read = _read_of(dec, out_name)
    if _as_set(read.bos_value):
        raise NoSemantics(f"copy {out_name}: a non-empty BOS value")
    d = len(state.radius)
    v_rows, out_rows = spec.rows("v_rows", d), spec.rows("out_rows", d)
    wvo = np.asarray(p["w_v"][h], np.float64) @ np.asarray(p["w_o"][h], np.float64)
    _, _, s_rows, w_s = _split(state, v_rows, wvo)
    out = blocks[out_name]
    labels = [out.values[int(np.flatnonzero(out.rows == r)[0])] for r in out_rows]
    src = read.read.source
    for i, r in enumerate(s_rows):
        nm, j = _coord(state, blocks, int(r))
        if nm != getattr(src, "label", None):
            raise Unclean(f"copy {out_name}: the value reads the set {nm!r}, not its source", {})
    if getattr(src, "label", None) not in state.setdom:
        raise NoSemantics(f"copy {out_name}: its source is not a set block")
    # every element of the source, also one the value reads with weight 0 (it must still be written)
    all_rows, all_w = _every_source_row(state, blocks, src.label, s_rows, w_s.reshape(len(s_rows), -1)
                                        if len(s_rows) else np.zeros((0, wvo.shape[1])))
    for i, r in enumerate(all_rows):
        nm, j = _coord(state, blocks, int(r))
        e = blocks[nm].values[j]
        for c in (0, 1):
            for k, v in _point_options(state, blocks, int(r), c):
                got = frozenset(lab for lab, wv in zip(labels, all_w[i] * v) if wv >= 0.5)
                if c == 0:
                    want = _as_set(read.bos_value)
                else:
                    want = _as_set(apply_fn(read.read.fn, frozenset((e,)))) if v >= 0.5 else frozenset()
                if got != want:
                    raise Unclean(f"copy {out_name}: element {e!r} {'on' if k else 'off'} writes "
                                  f"{sorted(got, key=repr)} where the read holds {sorted(want, key=repr)}",
                                  {"element": e, "bos": c == 0, "expected": sorted(want, key=repr),
                                   "got": sorted(got, key=repr)})
