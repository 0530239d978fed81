"""The tables route: the abstract state (:mod:`.state`) through every sublayer, and the read-out.

By induction over the sublayers, on every input of length 1..N and at every position, (1) the
float32 residual stream is within the row radii of one of the ideal vectors, and (2) the ideal
vectors of each SOp's block decode to the program's value of that SOp there. Each sublayer is
checked by one rule, with both halves (float32 and program):

**Softmax head** (:func:`_head`). The query side and the key side enumerate their combinations;
the score table S = q . k (float64, within ``eps`` of exact) is exact for the ideal vectors, and the
real float32 score is within ``delta`` of it (the input radii through W_QK, and the rounding of the
projections, of q . k and of the scale: :mod:`.float32`). For each query, the keys that may be
present (position 0 is BOS; a causal model hides keys after the query) are sorted into levels
(scores within 2 eps); the top present level is at least the *floor*, the best score some key
surely reaches (BOS, and every position the query's guard or position says exists). Every level
from the top to the floor may be the input's top: each must be *clean* (its keys stand at one
position, or all write the same output), and lie more than 2 delta above every lower key (the
*gap*); then the weight off it is at most the *leak*, C sum exp((1 - u)(S_k - S_top + 2 delta))
over the lower keys (a key that can stand at several positions counted once per position). The
head then writes, within ``r_out`` (:func:`_r_out`), the output of one key of its top level.
The program half: the head's selection (:class:`.program.Semantics`) agrees with the score order
on every query and key combination (selected keys above every BOS alternative, the others below,
a latest-match head's later matches above earlier ones, a tracr selector's selected keys in one
level and, in a causal model, surely visible), and its OV circuit writes, at every key, the read's
value of that key's value (at BOS: the read's BOS value).

**MLP** (:func:`_mlp`). Its hidden units split into parts reading disjoint blocks; every input
combination of a part is enumerated, the hidden pre-activation is within e1 of its ideal value
(input radii and rounding), ReLU is 1-Lipschitz, and the output within e1 |W2| plus rounding. The
program half: for a Map / SequenceMap every combination's output decodes to f of its decoded
inputs (None in, None out).

**Read-out** (:func:`readout`). Every ideal vector of the output block decodes through the
read-out with a margin above twice its error, to the program's value (argmax, or no value when
every logit is below 1/2).
"""

from __future__ import annotations

import hashlib
import math
from typing import Any, Dict, List, Optional, Tuple

import numpy as np
from tracr.rasp import rasp

from depthcraft.checker import program as prog
from depthcraft.checker.float32 import (ETA, SCORE_LIMIT, U, U64, dot_eta, dot_gamma, gamma, leak_factor, scale32,
                                        softmax_total, up)
from depthcraft.checker.modelfile import Model
from depthcraft.checker.state import (AMBIGUOUS, ANGLE, Block, Mismatch, Refused, Side, State, Unsupported, bounded,
                                      decode, f64_err,
                                      row_blocks, side, unique_rows, write)

#: Most score-table entries handled at once.
CHUNK = 2_000_000
#: A numerical table entry matches the program's value within this (tracr's numerical MLPs approximate).
NUM_TOL = 1e-4
#: Most ideal outputs of a numerical mean head.
MAX_MEANS = 200_000


class Context:
    """What every rule reads: the model, the program's nodes and value sets, the blocks, the state."""

    def __init__(self, model: Model, sink: Any, blocks: Dict[str, Block], st: State):
        self.model, self.sink, self.blocks, self.st = model, sink, blocks, st
        self.nodes = prog.graph(sink)
        self.n, self.causal = model.n, model.causal
        self._tables: Dict[str, Optional[np.ndarray]] = {}
        self.possible = prog.Possible(self.nodes, self.n)
        vocab = [model.input_values[i] for i in model.vocab_ids]
        self.numbers = prog.numeric_values(self.nodes, vocab, self.n)
        #: numerical SOp -> bound on |ideal value - program value| (the rules that write it set it)
        self.num_dev: Dict[str, float] = {}
        #: SelectorWidth label -> the value its head's OV writes at BOS (the mean is that / (w + 1))
        self.sw_scale: Dict[str, float] = {}
        #: a numerical output is certified within this of the program's value
        self.atol = 1e-3

    def program_number(self, label: str, x: float) -> Any:
        """The program value a numerical SOp's ideal value ``x`` stands for: the one value of the
        program's set within the recorded deviation (+ NUM_TOL); AMBIGUOUS when none or several."""
        vals = self.numbers.get(label)
        if vals is None or label not in self.num_dev:
            return AMBIGUOUS
        hits = self.number_cluster(label, x)
        return min(hits, key=lambda v: abs(v - x)) if hits else AMBIGUOUS

    def number_cluster(self, label: str, x: float) -> List[float]:
        """The program values within the deviation (+ NUM_TOL) of ``x``, when they are one value up to float
        rounding (within 1e-9 of each other: sums of the same fractions in another order); else []."""
        vals = self.numbers.get(label)
        if vals is None or label not in self.num_dev:
            return []
        tol = self.num_dev[label] + NUM_TOL
        i, j = np.searchsorted(vals, x - tol), np.searchsorted(vals, x + tol, side="right")
        hits = list(vals[i:j])
        return hits if hits and hits[-1] - hits[0] <= 1e-9 else []

    def pos_table(self, b: Block) -> Optional[np.ndarray]:
        """For an angle-coded pointer block: [N + 1, rows] the position block's rows of the same names."""
        if b.name not in self._tables:
            from depthcraft.checker.state import ANGLE
            self._tables[b.name] = self._pos_table(b) if any(v is ANGLE for v in b.values) else None
        return self._tables[b.name]

    def _pos_table(self, b: Block) -> Optional[np.ndarray]:
        pos = [x for x in self.blocks.values() if x.kind == "position"]
        labels = self.model.labels
        for pb in pos:
            by = {labels[r].split(":", 1)[1]: j for j, r in enumerate(pb.rows) if ":" in labels[r]}
            cols = [by.get(labels[r].split(":", 1)[1]) if ":" in labels[r] else None for r in b.rows]
            if all(c is not None for c in cols):
                return self.st.pos[pb.name][:, cols]
        return None

    def values(self, name: str, vecs: np.ndarray) -> List[Any]:
        """Decoded program values of ideal vectors [m, rows] of block ``name``."""
        b = self.blocks[name]
        return decode(b, vecs, self.pos_table(b))


def _decoded(ctx: Context, sd: Side, labels: List[str], what: str,
             rows: Optional[np.ndarray] = None) -> Dict[str, np.ndarray]:
    """label -> [m] object array: each combination's decoded value of the SOp (Mismatch if not single);
    ``rows`` (a boolean mask [m]): decode only those combinations, the others None (BOS keys, which
    hold no SOp value)."""
    out = {}
    for lab in labels:
        if lab not in sd.vec:
            raise Refused(f"the program's {lab} is not in the residual stream the {what} reads")
        keep = np.ones(len(sd.vec[lab]), bool) if rows is None else np.asarray(rows, bool)
        vecs = sd.vec[lab][keep]
        vals = ctx.values(lab, vecs)
        if lab in ctx.nodes and not prog.categorical(ctx.nodes[lab]):
            if ctx.numbers.get(lab) is None:
                raise Unsupported(f"the program's numerical {lab} has too many values (or unknown ones) to name")
            vals = [ctx.program_number(lab, float(x)) for x in vals]
        bad = [i for i, v in enumerate(vals) if v is AMBIGUOUS]
        if bad:
            raise Mismatch(f"the {what}'s {lab} holds no single value", {"vector": vecs[bad[0]].tolist()})
        arr = np.full(len(keep), None, object)
        for i, v in zip(np.flatnonzero(keep), vals):
            arr[i] = v
        out[lab] = arr
    return out


def _through(r: np.ndarray, w: np.ndarray, x: np.ndarray) -> float:
    """max over rows x_k of x [m, e] of sum_i r_i |(w x_k)_i|, w [rows, e] (input error through w).

    Computed on the rows with r_i > 0 and their non-zero weights only.
    """
    live = np.flatnonzero((r > 0) & (np.abs(w).sum(1) > 0))
    if not len(live) or not len(x):
        return 0.0
    best = 0.0
    step = max(1, CHUNK // max(len(live), 1))
    wl = w[live]
    for s in range(0, len(x), step):
        best = max(best, float((r[live] @ np.abs(wl @ x[s:s + step].T)).max(initial=0.0)))
    return best


def embedding(ctx: Context) -> None:
    """The embedding's half of the induction: at every position the blocks hold the program's values.

    The token embedding may set only ``tokens`` (token v's row: the one-hot of v; BOS's: of BOS) and
    ``one`` (1 for every token); the position embedding only ``indices`` (position p's row: the
    one-hot of the RASP index p - 1; BOS's row 0) or an angle position table (cos, sin, lin rows,
    used to decode angle-coded pointers). Anything else is refused.
    """
    m, st = ctx.model, ctx.st
    tok = m.token.astype(np.float64)
    for b in ctx.blocks.values():
        if b.kind == "token":
            if b.name == "one":
                if not np.all(tok[[i for i, v in enumerate(m.input_values) if v != "PAD"]][:, b.rows] == 1.0):
                    raise Mismatch("the token embedding does not write one = 1 for every token")
                continue
            if b.name != "tokens":
                raise Mismatch(f"the token embedding writes the block {b.name!r} (only tokens and one)")
            for i, v in enumerate(m.input_values):
                if v == "PAD":
                    continue
                got = decode(b, tok[[i]][:, b.rows])[0]
                if got is AMBIGUOUS or not (prog.same(got, v) or (v == "BOS" and got == "BOS")):
                    raise Mismatch(f"the token embedding's row of {v!r} holds tokens = {got!r}")
        elif b.kind == "position":
            rows = st.pos[b.name]
            if b.name == "indices":
                got = decode(b, rows)
                want = [None] + list(range(m.n))
                if any(g is AMBIGUOUS or not prog.same(g, w) for g, w in zip(got, want)):
                    raise Mismatch(f"the position embedding does not hold indices p - 1 at position p: {got[:6]}...")
            elif not all(v is ANGLE for v in b.values) or len(unique_rows(rows)[0]) != len(rows):
                raise Mismatch(f"the position embedding writes the block {b.name!r} (only indices or an angle "
                               f"table with one row per position)")


# ------------------------------------------------------------------------------------ attention


def _head_weights(p: Dict[str, np.ndarray], h: int):
    return tuple(np.asarray(p[k][h], np.float64) for k in ("w_q", "w_k", "w_v", "w_o"))


def _written(blocks: Dict[str, Block], out_rows: np.ndarray, m: np.ndarray) -> List[str]:
    """Blocks a projection [*, Do] onto ``out_rows`` writes (a non-zero column)."""
    live = out_rows[np.abs(m).sum(0) > 0]
    return sorted(nm for nm, b in blocks.items() if np.isin(b.rows, live).any())


def _head(ctx: Context, sub: Dict[str, Any], p: Dict[str, np.ndarray], h: int, name: str):
    """One softmax head (module docstring): (outputs, deviation [Do], |z||W_O| [Do], entry)."""
    st, blocks, n, causal = ctx.st, ctx.blocks, ctx.n, ctx.causal
    wq, wk, wv, wo = _head_weights(p, h)
    scale = scale32(sub["qk_scale"])
    q_rows, k_rows, v_rows, out_rows = sub["q_rows"], sub["k_rows"], sub["v_rows"], sub["out_rows"]
    wvo = wv @ wo
    written = _written(blocks, out_rows, wvo)
    try:
        node, reads = prog.head_reads(ctx.nodes, written)
        sem = prog.Semantics(node)
    except prog.ProgramError as e:
        raise Unsupported(f"{name} head {h}: {e}") from None
    if sem.prefix and not causal:
        raise Mismatch(f"{name} head {h}: {node.label} is a causal head kind in a bidirectional model")
    if causal and getattr(getattr(node, "kind", None), "causal", None) is False:
        raise Mismatch(f"{name} head {h}: {node.label} is a bidirectional head kind in a causal model")
    one_key = sem.how == "select" and not sem.numeric  # tracr's mean of several keys is a float or no value
    q_keep = [s.label for s in sem.query]
    k_keep = [s.label for s in sem.key]
    v_keep = sorted({src.label for src, _, _ in reads.values() if isinstance(src, rasp.RASPExpr)})
    qs = side(st, blocks, q_rows, wq * scale, n, keep=q_keep)
    ks = side(st, blocks, k_rows, wk, n, keep=k_keep)
    dk, dv = wq.shape[1], wv.shape[1]
    vs = side(st, blocks, v_rows, np.concatenate([wv, wvo], 1), n, keep=v_keep)
    kx, ka = ks.x, ks.a
    vx_abs, outs = vs.a[:, :dv], vs.x[:, dv:]
    constant = len(unique_rows(outs)[0]) == 1
    pinned = bool((ks.pos[ks.kind == 1] >= 0).all())
    # ---- delta: the real score minus the float64 table entry, for every (query, key) pair
    rq, rk = st.radius[q_rows], st.radius[k_rows]
    d_in = (_through(rq, wq * scale, kx) + _through(rk, wk, qs.x)
            + float(rq @ np.abs(wq * scale) @ np.abs(wk).T @ rk))
    gq, gk = float(dot_gamma(wq).max(initial=0)), float(dot_gamma(wk).max(initial=0))
    g_dh = gamma(dk)
    rho = gq * (1 + gk) + gk + (g_dh + U * (1 + g_dh)) * (1 + gq) * (1 + gk)
    a_max = 0.0
    for s in range(0, len(qs.x), max(1, CHUNK // max(len(kx), 1))):
        a_max = max(a_max, float((qs.a[s:s + CHUNK // max(len(kx), 1)] @ ka.T).max(initial=0.0)))
    bounded(a_max * (1 + rho) + 1, f"{name} head {h}: a score's magnitude bound")
    eps = up(gamma(len(q_rows) + len(k_rows) + dk + 4, U64) * a_max * (1 + 1e-9) + 1e-300)
    under = (dot_eta(wq) * ka.max(initial=0) * dk + dot_eta(wk) * qs.a.max(initial=0) * dk + 4 * ETA) * (1 + scale)
    delta = up(d_in + rho * a_max + under)
    dd = delta + eps  # real score vs table entry
    # ---- per query row: presence, floor, levels, gap, leak, cleanliness, outputs
    korder = np.argsort(np.where(ks.kind == 0, 0, ks.pos), kind="stable")
    kpos_s = np.where(ks.kind == 0, 0, ks.pos)[korder]
    gstart = np.flatnonzero(np.r_[True, kpos_s[1:] != kpos_s[:-1]]) if len(kpos_s) else np.zeros(0, int)
    gpos = kpos_s[gstart]
    min_gap, leak_max, single, bos_top = math.inf, 0.0, True, False
    pats: List[set] = [set(), set()]  # numerical heads: (BOS in the level, regular keys, one surely) per query kind
    span = 0.0
    att: Dict[Tuple[int, int], int] = {}  # (query kind, attended key position) -> smallest query guard
    tops = hashlib.sha256()
    n_tops = 0
    cf = leak_factor(n + 1)
    sem_q = _decoded(ctx, qs, q_keep, "query")
    sem_k = _decoded(ctx, ks, k_keep, "key")
    kkind, kpos = ks.kind, ks.pos
    step = max(1, CHUNK // max(len(kx), 1))
    for s0 in range(0, len(qs.x), step):
        rows = np.arange(s0, min(s0 + step, len(qs.x)))
        S = qs.x[rows] @ kx.T
        if not float(np.abs(S).max(initial=0.0)) + dd < SCORE_LIMIT:  # masked keys' -1e9 must lose (.float32)
            raise Refused(f"{name} head {h}: a score reaches {float(np.abs(S).max()):.3g}: near the runtime's mask "
                          f"score -1e9 (the float32 model needs every score within {SCORE_LIMIT:g})")
        qk, qp, qg = qs.kind[rows], qs.pos[rows], qs.guard[rows]
        if causal:
            lim = np.where(qk == 0, 0, np.where(qp >= 0, qp, n))
            P = (np.where(kkind == 0, 0, kpos)[None, :] <= lim[:, None]) & ((qk[:, None] == 1) | (kkind[None, :] == 0))
        else:
            P = np.ones(S.shape, bool)
        sp = np.where(qk == 0, 0 if causal else 1, np.minimum(np.maximum(np.maximum(qg, qp), 1), n))
        if pinned:
            gmin = np.minimum.reduceat(S[:, korder], gstart, axis=1)
            floor = np.where(gpos[None, :] <= sp[:, None], gmin, -np.inf).max(1)
        else:
            bmin = np.where(kkind[None, :] == 0, S, np.inf).min(1)
            rmin = np.where(kkind[None, :] == 1, S, np.inf).min(1, initial=np.inf)
            floor = np.maximum(bmin, np.where(sp >= 1, rmin, -np.inf))
        sm = np.where(P, S, -np.inf)
        order = np.argsort(-sm, axis=1, kind="stable")
        ss = np.take_along_axis(sm, order, 1)
        valid = np.isfinite(ss)
        new = np.ones(ss.shape, bool)
        with np.errstate(invalid="ignore"):  # -inf - -inf: masked keys, each its own level
            new[:, 1:] = ~(ss[:, :-1] - ss[:, 1:] <= 2 * eps)
        cand_start = new & valid & (ss >= floor[:, None] - 2 * eps)
        ncand = cand_start.sum(1)
        lvl = np.cumsum(new, 1) - 1
        incand = valid & (lvl < ncand[:, None])
        end = incand & ~np.c_[incand[:, 1:] & ~new[:, 1:], np.zeros((len(rows), 1), bool)]
        nxt = np.c_[ss[:, 1:], np.full((len(rows), 1), -np.inf)]
        with np.errstate(invalid="ignore"):
            gaps = np.where(end, ss - nxt, np.inf)
        mult = np.where((kkind == 1) & (kpos < 0), 1.0, 0.0)  # unpinned keys: once per visible position
        nvis = np.where(qp >= 0, qp, n) if causal else np.full(len(rows), n)
        logm = np.take_along_axis(mult[None, :] * np.log(np.maximum(nvis, 1))[:, None], order, 1)
        ex = np.where(valid, (1 - U) * ss + logm, -np.inf)  # a key at several positions: once per position
        with np.errstate(invalid="ignore"):
            lse = np.logaddexp.accumulate(ex[:, ::-1], axis=1)[:, ::-1]
        below = np.c_[lse[:, 1:], np.full((len(rows), 1), -np.inf)]
        slack = len(kx) * 8 * U64 * (np.abs(np.where(valid, ss, 0)).max(initial=0) + math.log(n + 2) + 1)
        with np.errstate(over="ignore", invalid="ignore"):
            leak = np.where(end, cf * (np.exp(below - (1 - U) * (ss - 2 * dd) + slack) + (n + 1) * ETA), 0.0)
        leak = np.nan_to_num(leak, nan=0.0)
        if end.any():
            bad = end & ~(gaps > 2 * dd)
            if bad.any():
                r = int(np.argwhere(bad)[0][0])
                raise Refused(f"{name} head {h}: a possible top level is {float(gaps[bad][0]):.4g} above the next key, "
                              f"not clear of twice the score error {dd:.4g}", {"query": int(rows[r])})
            min_gap = min(min_gap, float(gaps[end].min()))
            leak_max = max(leak_max, float(leak.max()))
        # the candidate top levels of every query: (query, first key, number of keys)
        rr_, tt_ = np.nonzero(cand_start & (lvl < ncand[:, None]))
        sizes = np.bincount((np.arange(len(rows))[:, None] * ss.shape[1] + lvl)[incand],
                            minlength=len(rows) * ss.shape[1]).reshape(len(rows), -1)
        tops.update(np.stack([rows[rr_], order[rr_, tt_], sizes[rr_, lvl[rr_, tt_]]], 1).astype(np.int64).tobytes())
        n_tops += len(rr_)
        # cleanliness of the candidate levels
        ko = order
        kp_s = np.where(kkind == 0, 0, kpos)[ko]
        first = np.maximum.accumulate(np.where(new, np.arange(ss.shape[1])[None, :], 0), 1)
        same_pos = (kp_s == np.take_along_axis(kp_s, first, 1)) & (kp_s >= 0)
        gid = (np.arange(len(rows))[:, None] * ss.shape[1] + lvl)[incand]
        badpos = np.bincount(gid, (~same_pos)[incand], minlength=len(rows) * ss.shape[1]) > 0
        if sem.numeric:  # a mean over the top level: which kinds of key each candidate level holds
            kind_s = kkind[ko]
            size = len(rows) * ss.shape[1]
            has_b = np.bincount(gid, (kind_s == 0)[incand], minlength=size) > 0
            has_r = np.bincount(gid, (kind_s == 1)[incand], minlength=size) > 0
            lvl_rows = np.repeat(np.arange(len(rows)), ss.shape[1])
            live = np.bincount(gid, minlength=size) > 0
            hi_l = np.full(size, -np.inf)
            lo_l = np.full(size, np.inf)
            np.maximum.at(hi_l, gid, ss[incand])
            np.minimum.at(lo_l, gid, ss[incand])
            # position 1 is in every input (and visible to a regular query): when every key it can hold
            # scores in the level or above, the level, if it is the top, holds a regular key
            alt1 = (kkind == 1) & ((kpos == 1) | (kpos < 0))
            p1 = np.where(alt1[None, :], S, np.inf).min(1)
            always = (qk == 1)[lvl_rows] & (p1[lvl_rows] >= lo_l - 2 * eps)
            for a, b_, r_, al in zip(qk[lvl_rows[live]].tolist(), has_b[live].tolist(), has_r[live].tolist(),
                                     always[live].tolist()):
                pats[a].add((b_, r_, al))
            if live.any():
                span = max(span, float((hi_l - lo_l)[live].max()))
            unclean = np.zeros(size, bool)
        else:  # one key at one position (a categorical Select: one key exactly), or a constant head
            unclean = badpos & (one_key or not constant)
        if unclean.any():
            g = int(np.flatnonzero(unclean)[0])
            r, lv = divmod(g, ss.shape[1])
            keys = ko[r][(lvl[r] == lv) & incand[r]][:4]
            raise Refused(f"{name} head {h}: a possible top level holds keys at several positions with different "
                          f"outputs (the hardmax average is no single value)",
                          {"query": int(rows[r]), "keys": [int(k) for k in keys],
                           "positions": [int(kpos[k]) for k in keys]})
        single &= not badpos.any() and not sem.numeric
        # what the clean candidate levels attend
        rr, tt = np.nonzero(incand)
        kk = ko[rr, tt]
        bos_top |= bool(((qk[rr] == 1) & (kkind[kk] == 0)).any())
        jj = np.where(kkind[kk] == 0, 0, kpos[kk])
        for a, j, c in zip(qk[rr].tolist(), jj.tolist(), qg[rr].tolist()):
            if att.get((a, j), 1 << 62) > c:
                att[(a, j)] = c
        if sem_q is not None and (qk == 1).any():
            _selection(ctx, sem, node, qs, ks, rows[qk == 1], S[qk == 1], P[qk == 1], sp[qk == 1], sem_q, sem_k,
                       eps, name, h)
    # ---- outputs, per kind of query position, with guards
    res = []
    for kind in (0, 1):
        if sem.numeric:
            res.append(_means(outs[vs.kind == 0], outs[vs.kind == 1], pats[kind], n, kind, name, h))
            continue
        vecs, guards = [], []
        # the value side at each attended position (once for all positions where it reads none)
        free = (vs.kind == 1) & (vs.pos < 0)
        g_any = min((max(g, j) for (a, j), g in att.items() if a == kind and j >= 1), default=None)
        if g_any is not None and free.any():
            vecs.extend(outs[free])
            guards.extend(np.maximum(np.maximum(vs.guard[free], g_any), kind).tolist())
        for (a, j), g in att.items():
            if a != kind:
                continue
            sel = (vs.kind == 0) if j == 0 else ((vs.kind == 1) & (vs.pos == j))
            for i in np.flatnonzero(sel):
                vecs.append(outs[i])
                guards.append(max(g, int(vs.guard[i]), j, kind))
        if not vecs:  # every query has a candidate top level (BOS at least): never empty; fail closed
            raise Refused(f"{name} head {h}: no query of this kind has a possible top level")
        res.append((np.asarray(vecs), np.asarray(guards, np.int64)))
    # ---- the write's deviation from the ideal write
    wo_abs = np.abs(wo)
    ev = st.radius[v_rows] @ np.abs(wv) + dot_gamma(wv) * vx_abs.max(0) + dot_eta(wv)
    mv = (1 + dot_gamma(wv)) * vx_abs.max(0)
    spread = outs.max(0) - outs.min(0)
    omax = np.abs(outs).max(0)
    lam = leak_max
    tau = softmax_total(n + 1)
    g_t = gamma(n + 1)
    general = g_t * (1 + tau) * (mv @ wo_abs) + tau * omax
    if single and not constant:  # one key dominates the sum (module docstring of .float32)
        theta = 4 * U + (1 + 4 * U) * ((1 + 2 * g_t) * lam + U * (1 + lam))
        tau_d = (1 + U) / (1 - theta) - 1 if theta < 0.5 else math.inf
        dom = ((1 + 2 * g_t) * lam * (1 + tau_d) + U * (1 + tau_d)) * (mv @ wo_abs) + tau_d * omax
        general = np.minimum(general, dom)
    dev = general + (1 + tau) * (ev @ wo_abs) + lam * spread + f64_err(vx_abs.max(0) @ wo_abs, dv + len(v_rows))
    if sem.numeric:  # weights inside the top level are uniform up to exp(span + 2 (delta + eps)) each way
        x_rel = span + 2 * dd
        dev = dev + min(1.0, up(math.tanh(x_rel / 4))) * spread + f64_err(omax, 2 * n + 2)
    zabs = (1 + tau) * (1 + g_t) * mv @ wo_abs + dev
    # ---- the program half: the OV circuit writes each read's value
    if sem.numeric:
        _mean_values(ctx, sem, node, vs, outs, written, out_rows, name, h)
    else:
        _values(ctx, vs, outs, reads, written, out_rows, name, h, check_bos=bos_top)
    entry = {"layer": name, "head": h, "node": node.label, "rule": sem.how, "min_gap": min_gap, "delta": delta,
             "eps": eps, "leak_bound": leak_max, "queries": int(len(qs.x)), "keys": int(len(kx)),
             "single_key": bool(single), "tops": {"levels": int(n_tops), "sha256": tops.hexdigest()}}
    return res, dev, zabs, entry


def _means(v_bos: np.ndarray, v_reg: np.ndarray, pats: set, n: int, kind: int, name: str, h: int):
    """(every mean (b v_BOS + v_1 + ... + v_k) / (b + k) a candidate level of the patterns gives [m, Do],
    guards [m]): b = 1 where BOS is in the level, k = 1..n regular values (0..n beside BOS, unless the
    level surely holds position 1's key); a mean of k regular keys gets guard k (k distinct positions exist)."""
    do = v_bos.shape[1] if len(v_bos) else v_reg.shape[1]
    v_bos, v_reg = unique_rows(v_bos)[0] if len(v_bos) else v_bos, unique_rows(v_reg)[0] if len(v_reg) else v_reg
    need = any(r for _, r, _ in pats)
    sums = [np.zeros((1, do))]
    for k in range(1, n + 1 if need else 1):
        nxt = unique_rows((sums[-1][:, None, :] + v_reg[None, :, :]).reshape(-1, do))[0]
        if len(nxt) > MAX_MEANS:
            raise Unsupported(f"{name} head {h}: more than {MAX_MEANS} means of {k} values")
        sums.append(nxt)
    vecs, guards = [], []
    for b, r, always in pats or {(True, False, False)}:
        for k in (range(0 if b and not always else 1, n + 1) if r else [0]):
            if b + k == 0 or (b and not len(v_bos)) or (k and not len(v_reg)):
                continue
            tot = (v_bos[:, None, :] + sums[k][None, :, :]).reshape(-1, do) if b else sums[k]
            vecs.append(tot / (b + k))
            guards.append(np.full(len(tot), max(k, kind), np.int64))
    if not vecs:
        return np.zeros((1, do)), np.full(1, kind, np.int64)
    return np.concatenate(vecs), np.concatenate(guards)


def _mean_values(ctx: Context, sem: prog.Semantics, node: Any, vs: Side, outs: np.ndarray, written: List[str],
                 out_rows: np.ndarray, name: str, h: int) -> None:
    """The OV half of a numerical mean. A numerical Aggregate: every regular key writes its SOp's value
    (within NUM_TOL of the program's), BOS writes the default 0; the mean's deviation from the program's
    mean is the largest of those. SelectorWidth's head: BOS writes one c > 0, every other key 0, so
    the mean over BOS and the w selected keys is c / (w + 1)."""
    if len(written) != 1 or len(row_blocks(ctx.blocks, out_rows)[written[0]]) != 1:
        raise Unsupported(f"{name} head {h}: a mean written to more than one number row")
    lab = written[0]
    col = row_blocks(ctx.blocks, out_rows)[lab][0]
    got = outs[:, col]
    if sem.how == "width":
        bos, reg = got[vs.kind == 0], got[vs.kind == 1]
        if len(np.unique(bos)) != 1 or not bos[0] > 0 or np.any(reg != 0):
            raise Mismatch(f"{name} head {h}: SelectorWidth's value is not one positive number at BOS and 0 elsewhere",
                          {"bos": sorted(set(bos.tolist())), "regular": sorted(set(reg.tolist()))[:5]})
        ctx.sw_scale[node.label] = float(bos[0])
        return
    if node.default is None or node.default != 0 or isinstance(node.default, bool):
        # default None: where no key is selected the program gives None and the weights 0 (BOS's value)
        raise Unsupported(f"{name} head {h}: a numerical mean with default {node.default!r} (the weights give 0 "
                          f"where no key is selected; only default=0 is checked)")
    src = node.sop.label
    if prog.categorical(node.sop):
        raise Unsupported(f"{name} head {h}: a numerical mean of a categorical SOp")
    want = _decoded(ctx, vs, [src], "value side", rows=vs.kind == 1)[src]  # BOS holds no SOp value: 0 there
    worst = ctx.num_dev.get(src, 0.0)
    for i in range(len(got)):
        w = 0.0 if vs.kind[i] == 0 else float(want[i])
        d = abs(float(got[i]) - w)
        if not d <= NUM_TOL:
            raise Mismatch(f"{name} head {h}: the OV circuit writes {float(got[i]):.6g} where the program's value is "
                          f"{w:.6g}", {"bos": bool(vs.kind[i] == 0)})
        worst = max(worst, d + ctx.num_dev.get(src, 0.0))
    ctx.num_dev[lab] = up(worst + f64_err(np.abs(got).max(initial=0.0), 2 * ctx.n + 2))


def _selection(ctx: Context, sem: prog.Semantics, node: Any, qs: Side, ks: Side, rows: np.ndarray, S: np.ndarray,
               P: np.ndarray, sp: np.ndarray, qv: Dict[str, np.ndarray], kv: Dict[str, np.ndarray], eps: float,
               name: str, h: int) -> None:
    """The program half of a head's selection on regular queries ``rows`` (module docstring).

    Raises:
        Refused: the weights' score order differs from what the program selects, naming a query and key.
    """
    n = ctx.n
    reg = np.flatnonzero(ks.kind == 1)
    bos = np.flatnonzero(ks.kind == 0)
    qpos, kpos = qs.pos[rows], ks.pos[reg]
    try:
        W = sem.table({k: v[rows] for k, v in qv.items()}, qpos, {k: v[reg] for k, v in kv.items()}, kpos, n)
    except Exception as e:  # noqa: BLE001 - a predicate that raises has no value here
        raise Mismatch(f"{name} head {h}: {node.label}'s selection raises: {type(e).__name__}: {e}") from None
    reach_q = _reachable(ctx, qv, rows, qs.pos[rows])
    reach_k = _reachable(ctx, kv, reg, kpos)
    P = P & reach_q[:, None]
    sk, pk = S[:, reg], P[:, reg] & reach_k[None, :]
    pb = P[:, bos]  # a query row with no possible BOS (none reachable) gets NaN, which no comparison passes
    has_bos = pb.any(1)
    bos_hi = np.where(has_bos, np.where(pb, S[:, bos], -np.inf).max(1, initial=-np.inf), np.nan)[:, None]
    bos_lo = np.where(has_bos, np.where(pb, S[:, bos], np.inf).min(1, initial=np.inf), np.nan)[:, None]

    def fail(why: str, mask: np.ndarray) -> None:
        i, j = np.argwhere(mask)[0]
        raise Mismatch(f"{name} head {h}: {node.label}: {why}",
                      {"query": {k: prog_value(v[rows[i]]) for k, v in qv.items()} | {"position": int(qpos[i])},
                       "key": {k: prog_value(v[reg[j]]) for k, v in kv.items()} | {"position": int(kpos[j])},
                       "selects": bool(W[i, j]) if sem.how != "score" else float(W[i, j])})

    if sem.how == "score":
        r_all = np.concatenate([np.full((len(rows), len(bos)), sem.bos_score()), W.astype(float)], 1)
        s_all = np.concatenate([S[:, bos], sk], 1)
        p_all = np.concatenate([P[:, bos], pk], 1)
        for i in range(len(rows)):
            live = np.flatnonzero(p_all[i])
            rv, sv = r_all[i, live], s_all[i, live]
            o = np.argsort(rv, kind="stable")
            rv, sv = rv[o], sv[o]
            grp = np.r_[True, rv[1:] != rv[:-1]]
            starts = np.flatnonzero(grp)
            hi = np.maximum.reduceat(sv, starts)
            lo = np.minimum.reduceat(sv, starts)
            if (hi - lo > 2 * eps).any() or (len(starts) > 1 and not (lo[1:] > np.maximum.accumulate(hi)[:-1] + 2 * eps).all()):
                raise Mismatch(f"{name} head {h}: {node.label}: the weights do not order the keys as the program's "
                              f"scores do", {"query": int(rows[i])})
        return
    Wb = W.astype(bool)
    sure = (kpos[None, :] >= 1) & (kpos[None, :] <= sp[:, None])
    if sem.how in ("position", "pointer"):  # one target: it outranks every other key; none: BOS does
        absent = Wb & pk & ~sure
        if absent.any():
            fail("the position the program attends may not exist or be visible", absent)
        has = (Wb & pk).any(1)
        tmin = np.where(Wb & pk, sk, np.inf).min(1)
        other = np.where(~Wb & pk, sk, -np.inf).max(1, initial=-np.inf)
        bad = has & ~(tmin > np.maximum(other, bos_hi[:, 0]) + 2 * eps)
        if bad.any():
            fail("the key the program attends does not outrank every other key", bad[:, None] & Wb & pk)
        bad = ~has & ~(bos_lo[:, 0] > other + 2 * eps)
        if bad.any():
            fail("with no key to attend, BOS does not outrank every key", bad[:, None] & pk & (sk >= bos_lo - 2 * eps))
        return
    if sem.how == "width":
        off = Wb & pk & ~((np.abs(sk - bos_hi) <= 2 * eps) & (np.abs(sk - bos_lo) <= 2 * eps))
        if off.any():
            fail("a selected key does not score with BOS (SelectorWidth's mean needs them alike)", off)
    else:
        low = Wb & pk & ~(sk > bos_hi + 2 * eps)
        if low.any():
            fail(f"a selected key does not score above BOS ({float(sk[low][0]):.4g} vs {float(bos_hi[np.argwhere(low)[0][0], 0]):.4g})", low)
    high = ~Wb & pk & ~(sk < bos_lo - 2 * eps)
    if high.any():
        fail("a key the program does not select scores at or above BOS", high)
    if ctx.causal and not sem.prefix:
        hidden = Wb & ~sure & (reach_q[:, None] & reach_k[None, :])
        if hidden.any():
            fail("the selector selects a key that the causal mask may hide (a later position)", hidden)
    if sem.how in ("select", "width"):
        hi = np.where(Wb & pk, sk, -np.inf).max(1)
        lo = np.where(Wb & pk, sk, np.inf).min(1)
        wide = (Wb & pk).any(1) & ~(hi - lo <= 2 * eps)
        if wide.any():
            i = int(np.flatnonzero(wide)[0])
            fail("the selected keys do not score alike (the hardmax top is not every selected key)",
                 (np.arange(len(rows)) == i)[:, None] & Wb & pk)
    if sem.how in ("search", "match"):
        first = sem.how == "match" and node.spec.select == "first"
        o = np.argsort(-kpos if first else kpos, kind="stable")
        for i in range(len(rows)):
            m = (Wb[i] & pk[i])[o]
            if m.sum() < 2:
                continue
            ps, sv = kpos[o][m], sk[i, o][m]
            starts = np.flatnonzero(np.r_[True, ps[1:] != ps[:-1]])
            if (ps < 0).any():
                fail("matching keys have no position (a latest-match needs position-read keys)",
                     (np.arange(len(rows)) == i)[:, None] & Wb & pk)
            hi, lo = np.maximum.reduceat(sv, starts), np.minimum.reduceat(sv, starts)
            if len(starts) > 1 and not (lo[1:] > np.maximum.accumulate(hi)[:-1] + 2 * eps).all():
                fail(f"a {'earlier' if first else 'later'} match does not score above the others",
                     (np.arange(len(rows)) == i)[:, None] & Wb & pk)


def _reachable(ctx: Context, vals: Dict[str, np.ndarray], idx: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """[m] whether each combination's decoded values can stand at its position (:class:`.program.Possible`)."""
    ok = np.ones(len(idx), bool)
    for lab, col in vals.items():
        for t, (i, p) in enumerate(zip(idx, pos)):
            if p >= 1 and ok[t]:
                allowed = ctx.possible.at(lab, int(p))
                if allowed is not None and not any(prog.same(col[i], a) for a in allowed):
                    ok[t] = False
    return ok


def prog_value(v: Any) -> Any:
    """A JSON-friendly program value for a witness."""
    if isinstance(v, np.generic):
        return v.item()
    if isinstance(v, frozenset):
        return sorted(map(repr, v))
    return v if v is None or isinstance(v, (bool, int, float, str)) else repr(v)


def _values(ctx: Context, vs: Side, outs: np.ndarray, reads: Dict[str, Tuple[Any, Any, Any]], written: List[str],
            out_rows: np.ndarray, name: str, h: int, check_bos: bool) -> None:
    """The OV half: at every value combination the head writes each read's value of it (module docstring).

    Raises:
        Refused: a written block decodes to another value, naming the combination.
    """
    for lab in written:
        if lab not in reads:
            if reads:
                raise Mismatch(f"{name} head {h} writes {lab}, which its program node does not output")
            continue
        src, fn, bos_v = reads[lab]
        if prog.is_position(src):
            if not (vs.pos[vs.kind == 1] >= 0).all():
                raise Mismatch(f"{name} head {h}: {lab} reads the key's position, but the OV circuit reads no position")
            src_vals = np.array([p if k == 1 else 0 for k, p in zip(vs.kind, vs.pos)], object)
        else:
            src_vals = _decoded(ctx, vs, [src.label], "value side")[src.label]
        old = ctx.st.sets[1][lab]
        todo = np.flatnonzero((vs.kind == 1) | check_bos)
        want = [bos_v if vs.kind[i] == 0 else prog.apply(fn, src_vals[i]) for i in todo]
        write_b = block_write(ctx, lab, out_rows, outs[todo])
        for o in old:
            got = ctx.values(lab, o[None, :] + write_b)
            for t, (g, w) in enumerate(zip(got, want)):
                if g is AMBIGUOUS or not prog.same(g, w):
                    i = int(todo[t])
                    raise Mismatch(f"{name} head {h}: the OV circuit writes {lab} = "
                                  f"{'no single value' if g is AMBIGUOUS else repr(g)} where the program "
                                  f"holds {w!r}",
                                  {"key": {"bos": bool(vs.kind[i] == 0), "position": int(vs.pos[i]),
                                           "source": prog_value(src_vals[i])}})


def attention(ctx: Context, sub: Dict[str, Any], p: Dict[str, np.ndarray], name: str) -> List[Dict[str, Any]]:
    """Check one attention sublayer and write it into the state; returns one entry per head.

    Raises:
        Refused: a head that is not certified (why and witness).
    """
    if ctx.model.attention != "softmax":
        raise Unsupported(f"{ctx.model.attention} attention (this checker version checks softmax models)")
    out_rows = sub["out_rows"]
    outs, dev, zabs, entries = [], np.zeros(len(out_rows)), np.zeros(len(out_rows)), []
    for h in range(p["w_q"].shape[0]):
        res, d, z, entry = _head(ctx, sub, p, h, name)
        outs.append(res)
        dev += d
        zabs += z
        entries.append(entry)
    wo_all = np.concatenate([np.asarray(p["w_o"][h], np.float64) for h in range(p["w_o"].shape[0])], 0)
    r_out = dev + dot_gamma(wo_all) * zabs + dot_eta(wo_all)
    r_new = write(ctx.st, ctx.blocks, out_rows, outs, r_out, name)
    for e in entries:
        e["radius_out"] = float(max((v.max(initial=0.0) for v in r_new.values()), default=0.0))
    return entries


# ------------------------------------------------------------------------------------------ MLP


def _components(w1: np.ndarray, w2: np.ndarray, out_rows: np.ndarray, blocks: Dict[str, Block]) -> List[np.ndarray]:
    """Hidden units grouped by the blocks they write (units writing a common block are one part):
    each part is one program node, a function of its own inputs only, checked alone."""
    where = row_blocks(blocks, out_rows)
    own = lambda nm: nm[: -len("_selector_width_attn_output")] if nm.endswith("_selector_width_attn_output") else nm  # noqa: E731
    unit_blocks = [set(own(nm) for nm, idx in where.items() if np.any(w2[u, idx] != 0)) for u in range(w2.shape[0])]
    groups: List[Tuple[set, List[int]]] = []
    for u, bs in enumerate(unit_blocks):
        merged = [g for g in groups if g[0] & bs]
        for g in merged:
            groups.remove(g)
        groups.append((set().union(bs, *[g[0] for g in merged]), sum([g[1] for g in merged], []) + [u]))
    return [np.array(sorted(g[1]), np.int64) for g in groups]


def mlp(ctx: Context, sub: Dict[str, Any], p: Dict[str, np.ndarray], name: str) -> List[Dict[str, Any]]:
    """Check one MLP sublayer and write it into the state (module docstring); one entry per part.

    Raises:
        Refused: an output that does not decode to the program's value, or too many combinations.
    """
    st, blocks, n = ctx.st, ctx.blocks, ctx.n
    w1, b1 = np.asarray(p["w_1"], np.float64), np.asarray(p["b_1"], np.float64)
    w2, b2 = np.asarray(p["w_2"], np.float64), np.asarray(p["b_2"], np.float64)
    in_rows, out_rows = sub["in_rows"], sub["out_rows"]
    g1 = dot_gamma(w1, b1)
    outs, dev, habs, entries = [], np.zeros(len(out_rows)), np.abs(b2).copy(), []
    r_in = st.radius[in_rows]
    for units in _components(w1, w2, out_rows, blocks):
        wu, w2u = w1[:, units], w2[units]
        written = _written(blocks, out_rows, w2u)
        node = _mlp_node(ctx, written, name)
        ins = _mlp_inputs(node)
        sd = side(st, blocks, in_rows, wu, n, keep=ins)
        pre = sd.x + b1[units]
        e_in = r_in @ np.abs(wu)  # [units]: the input radii through W1 (the same for every combination)
        e_rd = g1[units] * (sd.a + np.abs(b1[units])) + f64_err(sd.a, len(in_rows)) + dot_eta(wu)
        e1 = e_in + e_rd
        hid = np.maximum(pre, 0.0)
        bounded(sd.a, f"{name}: an MLP pre-activation")
        o = hid @ w2u
        dev = dev + _mlp_dev(pre, e_in, e_rd, r_in, wu, w2u) + f64_err((hid @ np.abs(w2u)).max(0), len(units))
        habs += ((hid + e1) @ np.abs(w2u)).max(0)
        if node is not None:
            _mlp_program(ctx, node, ins, sd, o + b2, out_rows, written, name)  # b2 is added to the block too
        outs.append(tuple((o[sd.kind == k], sd.guard[sd.kind == k]) for k in (0, 1)))
        entries.append({"layer": name, "head": None, "node": None if node is None else node.label, "rule": "mlp",
                        "combinations": int(len(sd.x)), "hidden_error": float(e1.max(initial=0.0)),
                        "written": written})
    if np.any(b2 != 0):
        parts_written = {nm for e in entries for nm in e.pop("written")}
        extra = sorted(set(_written(blocks, out_rows, b2[None, :])) - parts_written)
        if extra:
            raise Mismatch(f"{name}'s output bias writes {extra}, which none of its checked parts writes")
        outs.append(((b2[None, :], np.zeros(1, np.int64)), (b2[None, :], np.ones(1, np.int64))))
    else:
        for e in entries:
            e.pop("written")
    r_out = dev + dot_gamma(w2, b2) * habs + dot_eta(w2)
    r_new = write(st, blocks, out_rows, outs, r_out, name)
    for e in entries:
        e["radius_out"] = float(max((v.max(initial=0.0) for v in r_new.values()), default=0.0))
    return entries


#: Most distinct active sets for which :func:`_mlp_dev` forms the combined map W1_A W2_A.
MAX_PATTERNS = 4096


def _mlp_dev(pre: np.ndarray, e_in: np.ndarray, e_rd: np.ndarray, r_in: np.ndarray, w1: np.ndarray,
             w2: np.ndarray) -> np.ndarray:
    """[out] bound on |real hidden @ W2 - ideal hidden @ W2| over every combination ([m, units] ``pre``).

    A unit whose pre-activation interval [pre - e1, pre + e1] lies above 0 is the identity there, so
    on the active set A the input error passes through the combined map W1_A W2_A (the paired units
    of a tracr discretising MLP cancel in it) and the pre-activation's own rounding e_rd through
    |W2_A|; a unit whose interval straddles 0 errs by at most e1 (ReLU is 1-Lipschitz); a dead unit
    (interval below 0) outputs exactly 0, as its ideal does. Beyond :data:`MAX_PATTERNS` active sets,
    the 1-Lipschitz bound e1 |W2| for every unit.
    """
    e1 = e_in[None, :] + e_rd
    active, dead = pre - e1 > 0, pre + e1 < 0
    aw2 = np.abs(w2)
    pats, inv = np.unique(active, axis=0, return_inverse=True)
    if len(pats) > MAX_PATTERNS:
        return (np.where(dead, 0.0, e1) @ aw2).max(0)
    out = np.zeros(w2.shape[1])
    live = r_in > 0
    for k, pat in enumerate(pats):
        rows = np.flatnonzero(inv.ravel() == k)
        comb = r_in[live] @ np.abs(w1[live][:, pat] @ w2[pat]) if live.any() and pat.any() else 0.0
        comb = comb + f64_err(r_in[live] @ (np.abs(w1[live][:, pat]) @ aw2[pat]), w1.shape[0]) if live.any() else comb
        part = np.where(active[rows], e_rd[rows], np.where(dead[rows], 0.0, e1[rows])) @ aw2
        out = np.maximum(out, comb + part.max(0))
    return out


def _mlp_node(ctx: Context, written: List[str], name: str) -> Any:
    """The Map, SequenceMap or SelectorWidth an MLP part implements (from the blocks it writes)."""
    sw = [w for w in written if not w.endswith("_selector_width_attn_output")]
    nodes = [ctx.nodes.get(w) for w in sw]
    if len(nodes) == 1 and nodes[0] is not None and prog.kind_of(nodes[0]) in (
            "Map", "SequenceMap", "LinearSequenceMap", "SelectorWidth"):
        if prog.kind_of(nodes[0]) != "SelectorWidth" and len(sw) != len(written):
            raise Mismatch(f"{name} writes {written}: a Map that also writes a hidden SelectorWidth row")
        return nodes[0]
    raise Unsupported(f"{name} writes {written}: not one Map, SequenceMap or SelectorWidth of the program (not "
                      f"checked by this checker version)")


def _mlp_inputs(node: Any) -> List[str]:
    k = prog.kind_of(node)
    if k == "SelectorWidth":
        return [node.label + "_selector_width_attn_output"]
    return [node.inner.label] if k == "Map" else [node.fst.label, node.snd.label]


def block_write(ctx: Context, lab: str, out_rows: np.ndarray, o: np.ndarray) -> np.ndarray:
    """[m, rows of block ``lab``]: a write [m, Do] over ``out_rows`` placed on the block's own rows."""
    b = ctx.blocks[lab]
    where = {int(r): j for j, r in enumerate(out_rows)}
    full = np.zeros((len(o), len(b.rows)))
    for j, r in enumerate(b.rows):
        if int(r) in where:
            full[:, j] = o[:, where[int(r)]]
    return full


def _mlp_program(ctx: Context, node: Any, ins: List[str], sd: Side, o: np.ndarray, out_rows: np.ndarray,
                 written: List[str], name: str) -> None:
    """The program half of a Map / SequenceMap / SelectorWidth MLP: every regular combination decodes
    to f of its decoded inputs (None in, None out); a numerical output within NUM_TOL of f, whose
    deviation is recorded. SelectorWidth: its input a (the head's mean c / (w + 1)) gives w = c / a - 1,
    within 1e-6 of an integer 0..N."""
    k = prog.kind_of(node)
    lab = node.label
    reg = np.flatnonzero(sd.kind == 1)
    if k == "SelectorWidth":
        c = ctx.sw_scale.get(lab)
        a = sd.vec[ins[0]][:, 0] if ins[0] in sd.vec else None
        if c is None or a is None:
            raise Mismatch(f"{name}: SelectorWidth {lab}'s MLP reads no checked width head")
        args = []
        for i in reg:
            w = c / a[i] - 1 if a[i] > 0 else -1
            if not (abs(w - round(w)) <= 1e-6 and 0 <= round(w) <= ctx.n):
                raise Mismatch(f"{name}: SelectorWidth {lab}'s input {a[i]:.6g} is no width c / (w + 1)")
            args.append([int(round(w))])
        fn = lambda w: w  # noqa: E731
    else:
        vals = _decoded(ctx, sd, ins, "MLP")
        args = [[vals[x][i] for x in ins] for i in reg]
        fn = node.f
        for x in ins:  # a number the program may hold in several roundings: f must agree on all of them
            if not prog.categorical(ctx.nodes[x]):
                for t, i in enumerate(reg):
                    outs_f = set()
                    for v in ctx.number_cluster(x, float(sd.vec[x][i, 0])):
                        try:
                            outs_f.add(repr(fn(*[v if y == x else a for y, a in zip(ins, args[t])])))
                        except Exception:  # noqa: BLE001
                            outs_f.add("raises")
                    if len(outs_f) > 1:
                        raise Unsupported(f"{name}: {lab}'s function differs on roundings of one input value")
    numeric = not prog.categorical(node)
    cur = ctx.st.sets[1][lab]
    got_w = block_write(ctx, lab, out_rows, o[reg])
    worst = 0.0
    for t, i in enumerate(reg):
        xs = args[t]
        try:
            want = None if any(x is None for x in xs) else (fn(*xs) if k != "SelectorWidth" else xs[0])
        except Exception as e:  # noqa: BLE001
            raise Mismatch(f"{name}: {lab}'s function raises on {xs!r}: {type(e).__name__}: {e}") from None
        for old in cur:
            v = old + got_w[t]
            if numeric:
                if want is None or not abs(float(v[0]) - float(want)) <= NUM_TOL:
                    raise Mismatch(f"{name}: {lab} writes {float(v[0]):.6g} on {[prog_value(x) for x in xs]} where the "
                                  f"program gives {want!r}", {"inputs": [prog_value(x) for x in xs]})
                worst = max(worst, abs(float(v[0]) - float(want)))
                continue
            got = ctx.values(lab, v[None, :])[0]
            if got is AMBIGUOUS or not prog.same(got, want):
                raise Mismatch(f"{name}: {lab} gives {'no single value' if got is AMBIGUOUS else repr(got)} on "
                              f"{[prog_value(x) for x in xs]} where the program gives {want!r}",
                              {"inputs": [prog_value(x) for x in xs]})
    if numeric:
        ctx.num_dev[lab] = up(worst + sum(ctx.num_dev.get(x, 0.0) * abs(getattr(node, f, 1.0))
                                          for x, f in zip(ins, ("fst_fac", "snd_fac")))
                              if k == "LinearSequenceMap" else worst)
        if k == "Map" and not prog.categorical(node.inner):
            ctx.num_dev[lab] = up(worst)  # f of the program's input value (decoded), exactly


# ------------------------------------------------------------------------------------- read-out


def readout(ctx: Context) -> Dict[str, Any]:
    """The read-out: every regular ideal output decodes with a margin above twice its error, to the
    program's value (module docstring). Returns ``{"margin", "error"}``.

    Raises:
        Refused: a margin that is too small, or a decoded value that is not the program's.
    """
    m, st = ctx.model, ctx.st
    u = m.unembed.astype(np.float64)
    rows = np.flatnonzero(np.abs(u).sum(1) > 0)
    sd = side(st, ctx.blocks, rows, u[rows], ctx.n, keep=[ctx.sink.label], kinds=(1,))
    err = st.radius[rows] @ np.abs(u[rows]) + dot_gamma(u[rows]) * sd.a + f64_err(sd.a, len(rows)) + dot_eta(u)
    err = np.array([[up(x) for x in row] for row in err]) if err.size < 100000 else err * (1 + 2 ** -30)
    want = ctx.values(ctx.sink.label, sd.vec[ctx.sink.label]) if ctx.sink.label in sd.vec else None
    if want is None:
        raise Mismatch(f"the read-out does not read the program's output {ctx.sink.label}")
    if not m.categorical:  # a number: within atol of the program's (float32 error + ideal's deviation)
        dev = ctx.num_dev.get(ctx.sink.label)
        if dev is None:
            raise Refused(f"read-out: the output {ctx.sink.label}'s deviation from the program was never bounded")
        total = float(err.max(initial=0.0)) + dev
        bad = [i for i, v in enumerate(want) if v is AMBIGUOUS]
        if bad or not total <= ctx.atol:
            raise Refused(f"read-out: the numerical output's error bound {total:.4g} (float32 {float(err.max()):.4g} + "
                          f"deviation {dev:.4g}) is not within atol {ctx.atol:g}" if not bad else
                          "read-out: an output value is no single program value")
        return {"margin": ctx.atol - total, "error": total}
    lg = sd.x
    best = lg.argmax(1)
    top = lg[np.arange(len(lg)), best]
    second = np.sort(lg, 1)[:, -2] if lg.shape[1] > 1 else np.full(len(lg), -np.inf)
    e_top = err[np.arange(len(lg)), best]
    e_max = err.max(1)
    none = top < 0.5
    margin = np.where(none, 0.5 - top - e_max, np.minimum(top - second - e_top - e_max, top - 0.5 - e_top))
    worst = float(margin.min(initial=np.inf))
    if not (margin > 0).all():
        i = int(np.argmin(margin))
        raise Refused(f"read-out: a logit margin {float(margin[i] + e_max[i] + e_top[i]):.4g} is not above its "
                      f"error {float(e_max[i] + e_top[i]):.4g}", {"output": prog_value(want[i])})
    for i in range(len(lg)):
        got = None if none[i] else m.output_values[int(best[i])]
        if want[i] is AMBIGUOUS or not prog.same(got, want[i]):
            raise Mismatch(f"read-out: the output block holding {prog_value(want[i])!r} reads out as {got!r}")
    return {"margin": worst, "error": float(err.max(initial=0.0))}
