"""The float32 model: sound bounds on every rounding of the float32 forward.

Soundness argument. The model runs in IEEE binary32 with round to nearest. Every
elementary operation obeys the standard model |fl(a op b) - a op b| <= u |a op b| with
u = 2^-24 (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., §2.2). A
dot product of n terms computed in any order, fused or not, is within
gamma_n = n u / (1 - n u) of the exact sum of the absolute terms (Higham, Lemma 3.1 and
§3.1); a zero weight gives an exact zero product and adding an exact zero is exact, so
only the non-zero weights of a column count (:func:`terms`). exp is taken within 4 ulp.
The bounds themselves are computed in float64 and rounded outward (:func:`up`), and the
tables' own float64 products carry a gamma term with u = 2^-53 (:data:`U64`).

**Sums with a few dominant terms (:func:`dominant_sum`).** The same fact with k dominant
terms: a dot product of n terms errs by about k u D + (1 + 2 gamma_n) L (D the dominant
terms' magnitude, L the others'), whatever the order; the certifier uses it for the scores,
whose projections and q . k have as many dominant terms as the ideal inputs have non-zero
entries, the others being input errors. A projection that only copies inputs
(:func:`copies`) is exact.

**MLP dot products (:func:`dot_rounding`).** Per input combination, per output: only the
terms non-zero there count, a product with a weight +-1 or an exact input 0 / +-1 is exact,
and each remaining rounding is within half an ulp of the binade of its largest possible
magnitude (:func:`rounding`), whatever the order; never more than gamma_k.

The functions here give the *relative* factors; the callers multiply them by the
absolute values the float32 forward adds (ideal value plus radius), so every term is an
upper bound on the real rounding error whatever the summation order.

**Softmax of a one-key head (:func:`pointer_output_rel`).** The forward computes
a_j = fl(e^_j / S^), e^_j = exp(fl(s_j - m)), m = max_j s_j, S^ = fl(sum_j e^_j), then
y^ = fl(sum_j a_j v_j). For a head whose top level holds one key t of the input (a clean,
non-constant, categorical head) the leak bound lambda bounds sum_{j != t} exp(s_j - s_t)
(the shift s_j - m is rounded within u |s_j - m|: the leak sum takes every exponent
times 1 - u, :data:`SHRINK`, so lambda covers the computed exponents; the top key's is
exactly 0, and exp(0) is taken within 4 ulp of 1 below).
Two facts replace the order-independent gamma_{n+1}:

1. *A rounded addition errs by at most its smaller operand*: fl(a + b) is the float
   nearest a + b and a is a float, so |fl(a + b) - (a + b)| <= min(|b|, u |a + b|) (and
   symmetrically |a|); the same holds for a fused multiply-add fl(P + x), P a float. In
   any summation tree the additions whose operands both lack the dominant term only sum
   the small terms (error <= gamma_n L, L the small terms' total magnitude); each other
   addition adds a partial sum of small terms to the dominant path, erring by at most
   that partial sum (<= (1 + gamma_n) times its terms' magnitudes), and each small term
   joins the dominant path once. So a sum of one dominant term d and small terms of total
   magnitude L is within (1 + 2 gamma_n) L + u (|d| + L) of its value, whatever the order
   (the u (|d| + L): the products' own rounding, or one final rounding of a wider
   accumulator).
2. *The normalisation is a common scale*: S^ = S (1 + theta), and dividing by S^
   multiplies every weight by the same 1 / (1 + theta). With e^_t within 4u of 1 and the
   other e^_j summing to at most (1 + 4u) lambda, fact 1 gives
   |theta| <= 4u + (1 + 4u) ((1 + 2 gamma_{n+1}) lambda + u (1 + lambda)); the old
   gamma_{n+1} + 4u stays a bound, so the smaller is used.

Then every weight is a_j (1 + psi_j), |psi_j| <= (1 + 4u)(1 + u) / (1 - |theta|) - 1 (exp,
division, normalisation), so sum_j a_j psi_j v_j is within psi max_j |v_j| of zero per
coordinate (sum a_j = 1), and the weighted sum itself (fact 1, dominant a_t v_t, the rest
of magnitude <= (1 + psi) lambda max |v|) adds (1 + 2 gamma_{n+1})(1 + u)(1 + psi) lambda
+ u (1 + psi)(1 + lambda), times max |v|. The total is about 7u + 2 lambda instead of
2 gamma_{n+1} + 6u: the output's float32 error is relative to its own magnitude, not
n u, so it leaves the decoding gaps intact at any n where the leak is small. Heads whose
top level holds several keys (numerical means, constant heads) keep
:func:`softmax_output_rel`.
"""

from __future__ import annotations

import math
from typing import Tuple

import numpy as np

#: Unit roundoff of float32 and float64.
U32 = 2.0 ** -24
U64 = 2.0 ** -53
#: How the float32 forward is modelled (the certificate's ``float32`` entry).
DESCRIPTION = ("IEEE binary32, round to nearest: u = 2^-24, sums within gamma_n, exp within 4 ulp; "
               "bounds in float64 rounded outward")


def gamma(n: int, u: float) -> float:
    """gamma_n = n u / (1 - n u): relative error bound of an n-term float sum (Higham, Lemma 3.1).

    Returns inf when n u >= 1/2 (the bound is no longer useful).
    """
    nu = n * u
    if nu >= 0.5:
        return math.inf
    return nu / (1.0 - nu)


def terms(w: np.ndarray) -> int:
    """Most non-zero entries in a column of ``w`` [rows, cols]: the terms a float32 dot product with a
    column really adds (a zero weight gives an exact zero product, and adding an exact zero is exact)."""
    w = np.asarray(w)
    return int((w != 0).sum(0).max(initial=0)) if w.size else 0


def column_gammas(w: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """[cols] gamma_k (u = 2^-24) per column of x @ w + bias: k = the column's non-zero weights, plus
    one where its bias is non-zero.

    The per-column form of :func:`terms`: a zero weight gives an exact zero product and adding
    an exact zero (a zero product, a zero bias) is exact, so column j's dot product adds k_j
    rounded terms (within gamma_{k_j} of the sum of their magnitudes, Higham Lemma 3.1), and a
    non-zero bias one more rounded addition. Multiply by (|x| + r) |w| + |bias| per column.
    """
    w = np.asarray(w)
    k = (w != 0).sum(0) + (np.asarray(bias) != 0)
    return np.array([gamma(int(v), U32) for v in k])


def copies(w: np.ndarray) -> bool:
    """Whether ``x @ w`` is exact in float32 for every float32 ``x``: every column of ``w``
    [rows, cols] has at most one non-zero entry and every non-zero entry is +1 or -1 (each
    output is a copy of one input, or of its negation: no product or sum rounds)."""
    w = np.asarray(w)
    nz = w[w != 0]
    return bool(terms(w) <= 1 and np.all(np.abs(nz) == 1.0))


def proj_gamma(w: np.ndarray) -> float:
    """Relative float32 error of one coordinate of ``x @ w`` against sum_i |x_i| |w[i, e]|:
    0 where :func:`copies` holds, else gamma_{terms(w)}."""
    return 0.0 if copies(w) else gamma(terms(w), U32)


def up(x: float) -> float:
    """Round a float64 bound outward (one ulp up, and a relative 1e-12 for the bound's own arithmetic)."""
    if not np.isfinite(x):
        return x
    return float(np.nextafter(x * (1.0 + 1e-12) + 1e-300, np.inf))


def score_rel(w_q: np.ndarray, w_k: np.ndarray, d_head: int) -> float:
    """Relative float32 error of one attention score q . k, q = x W_Q, k = x W_K.

    (gamma_{terms(W_Q)} + gamma_{terms(W_K)} + gamma_{d_head} + 2u): the two projections,
    the dot product of length ``d_head`` and the scaling. Multiply by
    max over pairs of sum_e |q_e| |k_e| (with |x| + r in place of x).
    """
    return gamma(terms(w_q), U32) + gamma(terms(w_k), U32) + gamma(d_head, U32) + 2 * U32


def dominant_sum(k: int, n: int) -> Tuple[float, float]:
    """(rho, sigma): a float32 dot product of ``n`` terms, at most ``k`` of them *dominant*, errs by
    at most rho D + sigma L, whatever the order and whether products are fused.

    D bounds the dominant terms' magnitudes sum |a_e b_e|, L the other terms' (the *small*
    ones: in the certifier, the terms an input error alone makes non-zero). Argument (fact 1
    of the module docstring, with k dominant terms instead of one): every product is rounded
    once (u D + u L; a fused fl(P + a b) errs by at most u |a b| more than an addition of the
    rounded product, so it is covered by the same budget). In the summation tree,
    (i) additions inside a subtree of small terms only err by at most gamma_n of their terms'
    magnitudes in all (Higham, Lemma 3.1: gamma_n L, product roundings included); (ii) an
    addition of such a subtree's computed sum s to a partial sum holding a dominant term errs
    by at most |s| <= (1 + gamma_n) L_s (a rounded addition errs by at most its smaller
    operand: the other operand is a float at that distance), and every small subtree is added
    so once; (iii) at most k - 1 additions have dominant terms on both sides, each within
    u of its result, whose magnitude is at most D + L + E (E the total error). So
    E <= u D + gamma_n L + (1 + gamma_n) L + (k - 1) u (D + L + E), i.e.
    rho = k u / (1 - (k - 1) u), sigma = (1 + 2 gamma_n + (k - 1) u) / (1 - (k - 1) u).
    With k = 0 the sum errs by at most gamma_n L <= sigma L. Returns (inf, inf) when the
    bound is useless (the caller keeps gamma_n (D + L)).

    Args:
        k: most dominant terms (>= 0).
        n: number of terms.
    """
    k = max(0, min(int(k), int(n)))
    g = gamma(n, U32)
    den = 1.0 - max(k - 1, 0) * U32
    if not math.isfinite(g) or den <= 0.5:
        return math.inf, math.inf
    return up(k * U32 / den), up((1 + 2 * g + max(k - 1, 0) * U32) / den)


#: The softmax's shift x_j = fl(s_j - m) is (s_j - m)(1 + d), |d| <= u (exact when s_j and m are
#: within a factor 2): an exponent below the top is at most (1 - u)(s_j - m), so the leak sum
#: multiplies its (negative) exponents by SHRINK (rounded down: a smaller factor is a larger weight).
SHRINK = float(np.nextafter(1.0 - U32, 0.0))


def pointer_weight_rel(n: int, leak: float) -> float:
    """|psi|: relative error of every softmax weight of a one-key head with leak bound ``leak``.

    (1 + 4u)(1 + u) / (1 - |theta|) - 1 with |theta| the normalisation's common scale error
    (module docstring, fact 2). Returns inf when the bound is useless.
    """
    if not (leak < 1.0):
        return math.inf
    g = gamma(n + 1, U32)
    theta = min(g + 4 * U32, 4 * U32 + (1 + 4 * U32) * ((1 + 2 * g) * leak + U32 * (1 + leak)))
    if theta >= 0.5:
        return math.inf
    return up((1 + 4 * U32) * (1 + U32) / (1 - theta) - 1)


def pointer_output_rel(n: int, leak: float, w_v: np.ndarray, w_o: np.ndarray) -> float:
    """Relative float32 error of a one-key head's output (module docstring), or inf.

    Multiply by M |W_O|, M[e] = max over keys of ((|x| + r) |W_V|)[e] (a bound on every value
    vector's e-th coordinate before rounding). With gV = gamma_{terms(W_V)}, gO likewise:
    the value vectors are within gV M of exact, the weights within psi, the weighted sum
    (dominated by the top key) within c = (1 + 2 gamma_{n+1})(1 + u)(1 + psi) lambda +
    u (1 + psi)(1 + lambda) of its magnitude (1 + gV) M, so y is within
    rel_v M, rel_v = psi (1 + gV) + gV + c (1 + gV); W_O adds gO (1 + rel_v), the residual
    addition one u.
    """
    psi = pointer_weight_rel(n, leak)
    if not math.isfinite(psi):
        return math.inf
    g, gv, go = gamma(n + 1, U32), gamma(terms(w_v), U32), gamma(terms(w_o), U32)
    c = (1 + 2 * g) * (1 + U32) * (1 + psi) * leak + U32 * (1 + psi) * (1 + leak)
    rel_v = psi * (1 + gv) + gv + c * (1 + gv)
    return up(rel_v + go * (1 + rel_v) + U32)


def softmax_output_rel(n: int, w_v: np.ndarray, w_o: np.ndarray) -> float:
    """Relative float32 error of one head's output, sum_j a_j (x_j W_V) W_O, over n + 1 keys.

    The softmax weights (exp within 4 ulp, the normalising sum of n + 1 terms, the
    division) are each within gamma_{n+1} + 6u of their value; the weighted sum of the
    values adds gamma_{n+1}; W_V and W_O add their terms, the residual add one u.
    Multiply by (|x| + r) |W_V| |W_O|.
    """
    return up(2 * gamma(n + 1, U32) + 6 * U32 + gamma(terms(w_v), U32) + gamma(terms(w_o), U32) + U32)


def rounding(v: np.ndarray) -> np.ndarray:
    """Bound on |fl(s) - s| for every real s with |s| <= v (elementwise, ``v`` >= 0, float64).

    Round to nearest errs by at most half an ulp of the binade holding s: for
    2^e <= |s| < 2^(e+1) (e >= -126) that is 2^(e-24), and |s| <= v gives e <= floor(log2 v),
    so 2^(floor(log2 v) - 24) bounds it (never more than u v, up to half of it); below the
    normal range the spacing is 2^-149, half of it 2^-150. v = 0: s = 0 is exact. ``v`` is
    first rounded up by a relative 1e-12 (it was computed in float64).
    """
    v = np.asarray(v, np.float64) * (1.0 + 1e-12)
    _, e = np.frexp(v)  # v = f 2^e, f in [0.5, 1): floor(log2 v) = e - 1
    out = np.ldexp(1.0, e - 25)
    out = np.where(v < 2.0 ** -126, 2.0 ** -150, out)
    return np.where(v > 0, out, 0.0)


#: Most (combination, output) pairs :func:`dot_rounding` bounds one by one; beyond, the
#: order-independent gamma_k of each column (the cost of the tight bound is some twenty
#: passes over an [m, out] array).
TIGHT_LIMIT = 4_000_000
#: Most (input, combination, output) products :func:`dot_rounding` bounds one by one.
PER_PRODUCT_LIMIT = 4_000_000


def dot_rounding(xl: np.ndarray, xh: np.ndarray, exact: np.ndarray, w: np.ndarray,
                 bias: np.ndarray) -> np.ndarray:
    """[m, out] bound on the float32 rounding of x @ w + bias, whatever the summation order, for
    every real input x with xl <= x <= xh (each x a float32 vector).

    Args:
        xl, xh: [m, n] float64 bounds of each input per combination (m combinations).
        exact: [m, n] bool: the input is exactly a float32 in {0, 1, -1} (no radius), so its
            product with any float32 weight is exact; or a function returning that array
            (called only where the bound is computed one by one, :data:`TIGHT_LIMIT`).
        w: [n, out] float64 holding float32 weights; bias: [out] float32 values.
    Returns:
        [m, out] float64 (not rounded outward: the caller rounds).

    Soundness argument. Output c is a sum of the non-zero terms t_i = x_i w[i, c] (a term with
    w = 0, or with x_i exactly 0 (xl = xh = 0), is an exact zero, and adding it is exact) and of
    a non-zero bias (an exact term). Let k be their number. (1) Each product is rounded once:
    within :func:`rounding` (|t_i|) <= u |t_i| (u |t_i| itself beyond
    :data:`PER_PRODUCT_LIMIT`), and exactly when |w| = 1 or the input is exact and in {0, +-1} (the result
    is +-w or +-x, a float32). (2) Whatever the order (any binary tree, fused or not), there
    are k - 1 additions; addition a rounds its real sum s_a within :func:`rounding` (|s_a|).
    s_a is the computed sum of a subset S of the terms, so |s_a| <= V_S + gamma_k sum_S |t_i|
    (the subtree's own error, Higham Lemma 3.1, products included). The root's S is every
    term: V = max over the box of |sum t_i| = max(sum_i max t_i, -sum_i min t_i). The other
    k - 2 additions have proper subsets, whose signed sums are at most
    P = max(sum_i max(max t_i, 0), sum_i max(-min t_i, 0)) in magnitude. So the error is at
    most sum_inexact rounding(|t_i|) + rounding(V') + (k - 2) rounding(P'), the primes adding
    gamma_k sum |t_i|. A fused multiply-add rounds a product and an addition once (within the
    addition's budget); a wider accumulator errs less in each addition than float32 and adds
    one final rounding: its additions err by at most (k - 1) u64 max(P', V') in all, within
    W = 2 (k + 1) u64 max(P', V'), so the root is bounded by rounding(V' + W) + W. The primes
    add gamma_k sum |t_i| + k 2^-149 (a product below the normal range errs by 2^-150, not
    u |t_i|). For k = 1 only the product rounds (exactly zero when it is exact).
    The order-independent gamma_k sum |t_i| (Higham Lemma 3.1, plus k 2^-149 for products
    below the normal range) is also a bound; the smaller of the two is returned, and it alone
    (k: the column's non-zero weights and bias, :func:`column_gammas`) beyond
    :data:`TIGHT_LIMIT` pairs (combination, output).
    """
    xl, xh = np.asarray(xl, np.float64), np.asarray(xh, np.float64)
    w = np.asarray(w, np.float64)
    bias = np.asarray(bias, np.float64)
    aw = np.abs(w)
    if xl.shape[0] * w.shape[1] > TIGHT_LIMIT:  # too many to bound one by one: Higham's gamma_k per column
        mag = np.maximum(np.abs(xl), np.abs(xh))
        return column_gammas(w, bias) * (mag @ aw + np.abs(bias)) + ((w != 0).sum(0) + 1) * 2.0 ** -149
    exact = np.asarray(exact() if callable(exact) else exact, bool)
    mag = np.maximum(np.abs(xl), np.abs(xh))  # [m, n]
    nz_in = ~((xl == 0) & (xh == 0))
    k = nz_in.astype(np.float64) @ (w != 0).astype(np.float64) + (bias != 0)  # [m, out] non-zero terms
    absum = mag @ aw + np.abs(bias)
    # the sum over the box: centre c +- radius (float64 rounding here is far inside the gamma_k slack)
    mid, rad = ((xl + xh) / 2) @ w + bias, ((xh - xl) / 2) @ aw
    v_all = np.abs(mid) + rad  # max(|max of the sum|, |min of the sum|)
    # sums of the positive parts P = max(x w, 0) and of the negative parts, from P + N and P - N
    hp, hn = np.maximum(xh, 0), np.maximum(-xl, 0)
    both, diff = (hp + hn) @ aw + np.abs(bias), (hp - hn) @ w + bias
    pos, neg = (both + diff) / 2, (both - diff) / 2
    kmax = int(k.max(initial=0))
    g = gamma(kmax, U32) if kmax else 0.0
    slack = g * absum + k * 2.0 ** -149  # the subtrees' own errors (a product below the normal range: 2^-150)
    inexact = np.abs(w) != 1.0  # [n, out]
    # products that round: weight not +-1 and input not exactly 0 / +-1
    amag = np.where(exact, 0.0, mag)
    wi = aw * inexact
    rows = np.flatnonzero(wi.any(1) & amag.any(0))
    if len(rows) * amag.shape[0] * w.shape[1] <= PER_PRODUCT_LIMIT:  # each product within its half ulp
        err = np.zeros((amag.shape[0], w.shape[1]))
        for j in rows:
            err += rounding(amag[:, j:j + 1] * wi[j][None, :])
    else:  # within u of each product
        err = U32 * (amag @ wi) + ((amag > 0).astype(np.float64) @ (wi > 0).astype(np.float64)) * 2.0 ** -150
    part = np.maximum(pos, neg) + slack  # any partial sum's magnitude
    wide = 2 * (k + 1) * U64 * np.maximum(part, v_all + slack)  # a wider accumulator's own additions
    adds = k >= 2
    err = err + np.where(adds, rounding(v_all + slack + wide) + wide, 0.0)
    err = err + np.maximum(k - 2, 0) * rounding(part)
    # never above the order-independent bound gamma_k sum |t_i| (Higham Lemma 3.1)
    nu = k * U32
    old = np.where(nu < 0.5, nu / np.maximum(1.0 - nu, 0.5), np.inf)
    return np.minimum(err, old * absum + k * 2.0 ** -149)
