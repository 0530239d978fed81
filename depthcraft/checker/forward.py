"""A bounded forward pass: one input's exact forward, and a bound on the float32 forward's distance to it.

For a batch of inputs of one length (BOS first), :func:`bounded` computes in float64 the *exact*
forward (real arithmetic, softmax attention with its real weights) and, per position and residual
row, a radius r with |float32 forward - exact forward| <= r, whatever the float32 summation order
(:mod:`.float32`). The float64 computation's own rounding is folded into the radii (gamma terms
with U64). Keys at PAD positions are masked (weight exactly 0 in the float32 forward), so an input
is run at its own length.

Attention, per head, query i, key j: the float32 score is within delta_ij of the exact one
(the inputs' radii through W_Q, W_K, and the rounding of the projections, of q . k and of the
scale); its shifted exponent fl(s_j - m) is within U |s_j - m| more. With d_j = delta_ij +
U(|s_ij - m_i| + 2 delta_i), every computed weight lies in [a_j e^-d_j c_lo / H, a_j e^d_j c_hi / L],
L <= sum_k a_k e^(+-d_k) <= H, c_hi = (1 + EXP_REL)(1 + U)/(1 - gamma(T)), c_lo likewise below
(exp, division, the normalising sum); the output then errs by sum_j |a^_j - a_j| |v^_j| +
sum_j a_j |v^_j - v_j| + gamma(T) sum_j a^_j |v^_j|, then W_O and the residual addition.
MLPs: the pre-activation within e1 (radii, rounding), ReLU 1-Lipschitz, then W_2.
"""

from __future__ import annotations

from typing import Tuple

import numpy as np

from depthcraft.checker.float32 import ETA, EXP_REL, LIMIT, SCORE_LIMIT, U, U64, dot_eta, dot_gamma, gamma, scale32
from depthcraft.checker.state import Refused
from depthcraft.checker.modelfile import Model


def _f64(a: np.ndarray, terms: int) -> np.ndarray:
    return gamma(terms + 2, U64) * a


def bounded(model: Model, ids: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """(logits [B, T, O], their error bound [B, T, O]) for token ids [B, T] (BOS first, no PAD), float64.

    The float32 forward's logits are within the bound of the returned exact logits (module docstring).
    """
    ids = np.asarray(ids, np.int64)
    b, t = ids.shape
    x = model.token.astype(np.float64)[ids] + model.pos.astype(np.float64)[:t][None]
    r = U * np.abs(x) + _f64(np.abs(x), 1)
    mask = np.tril(np.ones((t, t), bool)) if model.causal else np.ones((t, t), bool)
    for s, p in zip(model.subs, model.layers):
        if s["kind"] == "attn":
            out, r_out = _attention(model, s, p, x, r, mask)
        else:
            out, r_out = _mlp(s, p, x, r)
        rows = s["out_rows"]
        new = x[..., rows] + out
        r_new = r[..., rows] + r_out
        r[..., rows] = r_new + U * (np.abs(new) + r_new) + _f64(np.abs(new), 1)
        x[..., rows] = new
        if not np.all(np.abs(x) + r < LIMIT):
            raise Refused("a residual value is beyond the float32 model's range (overflow)")
    u = model.unembed.astype(np.float64)
    logits = x @ u
    err = r @ np.abs(u) + dot_gamma(u) * ((np.abs(x) + r) @ np.abs(u)) + _f64(np.abs(x) @ np.abs(u), u.shape[0]) \
        + dot_eta(u)
    return logits, err * (1 + 2 ** -30)


def _proj(x: np.ndarray, r: np.ndarray, w: np.ndarray, bias=None) -> Tuple[np.ndarray, np.ndarray]:
    """x @ w (+ bias) and the bound on the float32 projection's distance to it (radii and rounding)."""
    aw = np.abs(w)
    y = x @ w + (0 if bias is None else bias)
    mag = np.abs(x) @ aw
    e = r @ aw + dot_gamma(w, bias) * ((np.abs(x) + r) @ aw + (0 if bias is None else np.abs(bias))) \
        + _f64(mag, w.shape[0]) + dot_eta(w)
    return y, e


def _attention(model: Model, s, p, x, r, mask):
    xq, rq = x[..., s["q_rows"]], r[..., s["q_rows"]]
    xk, rk = x[..., s["k_rows"]], r[..., s["k_rows"]]
    xv, rv = x[..., s["v_rows"]], r[..., s["v_rows"]]
    scale = scale32(s["qk_scale"])
    t = x.shape[1]
    g_t = gamma(t)
    c_hi = (1 + EXP_REL) * (1 + U) / (1 - g_t)
    c_lo = (1 - EXP_REL) * (1 - U) / (1 + g_t)
    outs, zabs = 0.0, 0.0
    wo_all = []
    dev = 0.0
    for h in range(p["w_q"].shape[0]):
        wq, wk, wv, wo = (np.asarray(p[k][h], np.float64) for k in ("w_q", "w_k", "w_v", "w_o"))
        wo_all.append(wo)
        q, eq = _proj(xq, rq, wq)
        k, ek = _proj(xk, rk, wk)
        v, ev = _proj(xv, rv, wv)
        sc = scale * np.einsum("bie,bje->bij", q, k)
        if not np.all(np.abs(sc) + scale * np.einsum("bie,bje->bij", np.abs(q) + eq, np.abs(k) + ek) < SCORE_LIMIT):
            raise Refused("a score is beyond the float32 model's range (near the runtime's mask score -1e9)")
        qa, ka = np.abs(q) + eq, np.abs(k) + ek
        full = np.einsum("bie,bje->bij", qa, ka)
        dh = wq.shape[1]
        delta = scale * (full - np.einsum("bie,bje->bij", np.abs(q), np.abs(k))
                         + (gamma(dh) + U * (1 + gamma(dh))) * full + _f64(full, dh + wq.shape[0]))
        delta += (dh + 2) * ETA * (1 + scale * (qa.max() + ka.max()))
        if model.attention == "relu":  # weights relu(s), no normalisation: 1-Lipschitz in the score
            a = np.where(mask[None], np.maximum(sc, 0.0), 0.0)
            ea = np.where(mask[None] & (sc + delta > 0), delta + U * np.abs(sc), 0.0)
            va = np.abs(v) + ev
            z = a @ v
            terms = int(mask.sum(-1).max())
            ez = ea @ va + a @ ev + gamma(terms) * ((a + ea) @ va) + _f64(a @ np.abs(v), t)
            outs = outs + z @ wo
            dev = dev + ez @ np.abs(wo) + _f64(np.abs(z) @ np.abs(wo), wo.shape[0])
            zabs = zabs + (np.abs(z) + ez) @ np.abs(wo)
            continue
        sm = np.where(mask[None], sc, -np.inf)
        m = sm.max(-1, keepdims=True)
        la = sm - m - np.log(np.exp(sm - m).sum(-1, keepdims=True))  # log of the exact weights
        a = np.exp(la)
        dmax = np.where(mask[None], delta, 0).max(-1, keepdims=True)
        d = delta + U * (np.abs(sc - m) + 2 * dmax)
        hi = np.where(mask[None], np.exp(la + d), 0).sum(-1, keepdims=True)
        lo = np.where(mask[None], np.exp(la - d), 0).sum(-1, keepdims=True)
        w_hi = np.where(mask[None], np.exp(la + d) * c_hi / lo, 0)
        w_lo = np.where(mask[None], np.exp(la - d) * c_lo / hi, 0)
        ea = np.maximum(w_hi - a, a - w_lo) + 8 * (t + 4) * U64 * a + ETA
        ea = np.where(mask[None], ea, 0)
        va = np.abs(v) + ev
        z = a @ v
        ez = ea @ va + a @ ev + g_t * ((a + ea) @ va) + _f64(a @ np.abs(v), t)
        outs = outs + z @ wo
        dev = dev + ez @ np.abs(wo) + _f64(np.abs(z) @ np.abs(wo), wo.shape[0])
        zabs = zabs + (np.abs(z) + ez) @ np.abs(wo)
    stacked = np.concatenate(wo_all, 0)
    return outs, dev + dot_gamma(stacked) * zabs + dot_eta(stacked)


def _mlp(s, p, x, r):
    """An MLP on concrete inputs: hidden units whose pre-activation interval lies above 0 are exactly
    affine there, so the input error passes through the combined map W1_A W2_A of the active set A
    (a discretising MLP's paired units cancel in it); a unit whose interval straddles 0 contributes
    its interval's width (ReLU is 1-Lipschitz); dead units contribute nothing."""
    w1, b1, w2, b2 = (np.asarray(p[k], np.float64) for k in ("w_1", "b_1", "w_2", "b_2"))
    xi, ri = x[..., s["in_rows"]], r[..., s["in_rows"]]
    pre = xi @ w1 + b1
    e_round = dot_gamma(w1, b1) * ((np.abs(xi) + ri) @ np.abs(w1) + np.abs(b1)) + _f64(np.abs(xi) @ np.abs(w1)
                                                                                     + np.abs(b1), w1.shape[0]) \
        + dot_eta(w1)
    e_in = ri @ np.abs(w1)
    lo, hi = pre - e_in - e_round, pre + e_in + e_round
    active, dead = lo > 0, hi < 0
    h = np.maximum(pre, 0.0)
    shape = x.shape[:-1]
    flat_a = active.reshape(-1, w1.shape[1])
    flat_r = ri.reshape(-1, ri.shape[-1])
    dev = np.zeros((flat_a.shape[0], w2.shape[1]))
    pats, inv = np.unique(flat_a, axis=0, return_inverse=True)
    aw2 = np.abs(w2)
    for k, pat in enumerate(pats):
        rows = np.flatnonzero(inv.ravel() == k)
        comb = np.abs(w1[:, pat] @ w2[pat])
        dev[rows] = flat_r[rows] @ comb + _f64(flat_r[rows] @ (np.abs(w1[:, pat]) @ aw2[pat]), w1.shape[0])
    dev = dev.reshape(shape + (w2.shape[1],))
    straddle = ~active & ~dead
    dh = np.where(active, e_round, np.where(straddle, e_in + e_round, 0.0))
    out = h @ w2 + b2
    dev = dev + dh @ aw2 + dot_gamma(w2, b2) * ((h + dh + e_in * active) @ aw2 + np.abs(b2)) \
        + _f64(h @ aw2 + np.abs(b2), w2.shape[0]) + dot_eta(w2)
    return out, dev


def float32(model: Model, ids: np.ndarray) -> np.ndarray:
    """The checker's own float32 forward (numpy, its own summation order): logits [B, T, O] float32.

    Used by the exhaustive route where the bounded forward's margin is too small to cover every
    summation order (a tracr MLP whose discretisation ramps put slopes of 100 on its inputs): the
    claim is then about this computation, and the certificate's scope says so.
    """
    f = np.float32
    ids = np.asarray(ids, np.int64)
    t = ids.shape[1]
    x = model.token[ids] + model.pos[:t][None]
    mask = np.tril(np.ones((t, t), bool)) if model.causal else np.ones((t, t), bool)
    for s, p in zip(model.subs, model.layers):
        if s["kind"] == "attn":
            out = np.zeros(x.shape[:-1] + (len(s["out_rows"]),), f)
            for h in range(p["w_q"].shape[0]):
                q, k, v = x[..., s["q_rows"]] @ p["w_q"][h], x[..., s["k_rows"]] @ p["w_k"][h], x[..., s["v_rows"]] @ p["w_v"][h]
                sc = np.einsum("bie,bje->bij", q, k) * f(s["qk_scale"])
                if model.attention == "relu":
                    a = np.where(mask[None], np.maximum(sc, f(0)), f(0))
                else:
                    sc = np.where(mask[None], sc, f(-1e9))
                    e = np.exp(sc - sc.max(-1, keepdims=True))
                    a = np.where(mask[None], e / e.sum(-1, keepdims=True), f(0))
                out = out + (a @ v) @ p["w_o"][h]
        else:
            hid = np.maximum(x[..., s["in_rows"]] @ p["w_1"] + p["b_1"], f(0))
            out = hid @ p["w_2"] + p["b_2"]
        x[..., s["out_rows"]] = x[..., s["out_rows"]] + out.astype(f)
    return (x @ model.unembed).astype(f)
