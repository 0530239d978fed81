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

The functions here give the *relative* factors; the callers multiply them by the
absolute values the float32 forward adds (ideal value plus radius), so every term is an
upper bound on the real rounding error whatever the summation order.
"""

from __future__ import annotations

import math

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


def softmax_output_rel(n: int, w_v: np.ndarray, w_o: np.ndarray) -> float:
    """Relative float32 error of one head's output, sum_j a_j (x_j W_V) W_O, over n + 1 keys.

    The softmax weights (exp within 4 ulp, the normalising sum of n + 1 terms, the
    division) are each within gamma_{n+1} + 6u of their value; the weighted sum of the
    values adds gamma_{n+1}; W_V and W_O add their terms, the residual add one u.
    Multiply by (|x| + r) |W_V| |W_O|.
    """
    return (2 * gamma(n + 1, U32) + 6 * U32 + gamma(terms(w_v), U32) + gamma(terms(w_o), U32) + U32)
