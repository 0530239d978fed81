"""The float32 model: the one statement of how the checked forward pass may round.

The model file's forward runs in IEEE 754 binary32 with round to nearest (JAX on CPU or GPU,
any summation order, with or without fused multiply-adds). Everything the checker proves about
float32 rests on these facts and nothing else:

* **Standard model** (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., SIAM
  2002, §2.2, eq. 2.4): fl(a op b) = (a op b)(1 + d) + e, |d| <= U = 2^-24, for + - * /, where
  e = 0 except on underflow, |e| <= ETA = 2^-126: a result below the smallest normal number may be
  flushed to zero (XLA on a CPU flushes subnormals, inputs and results), so each operation and each
  operand x may err by 2^-126 absolute (an operand read as 0 errs by |x| |w| <= 2^-126 |w|). The
  model file's weights are normal or 0 (:mod:`.modelfile` refuses subnormal weights).
* **No overflow**: every quantity the checker bounds stays below LIMIT = 2^100 in magnitude (checked
  where it is bounded); far from float32's 2^128.
* **Masking**: the runtime gives masked keys the score MASK = -1e9 before the softmax and then the
  weight 0; that is the weight 0 the checker assumes only when every unmasked score is above
  MASK + 200 (exp(-200) is 0 in float32), which it checks (:data:`SCORE_LIMIT`).
* **Dot products and sums** (Higham, Lemma 3.1 and §3.1): a sum of m terms (products or
  not) computed in any order, fused or not, is within gamma(m) = m U / (1 - m U) of the sum
  of the terms' magnitudes, plus m ETA. A product with one operand exactly 0 or +-1 is exact,
  and adding an exact 0 is exact, so only the non-zero terms of a column count (:func:`terms`);
  a column with one non-zero weight of magnitude 1 copies its input exactly (:func:`dot_gamma`).
* **exp** is within EXP_REL = 4 U of its value (plus ETA), as for the correctly rounded-to-a-few-ulp
  libm and XLA implementations; exp(0) is within 4 U of 1.
* **softmax** is computed as ``e_j = exp(s_j - max_k s_k)``, ``a_j = e_j / sum_k e_k`` (JAX's
  ``jax.nn.softmax``); masked keys get weight exactly 0.
* **The score scale** ``qk_scale`` is a Python float; JAX multiplies float32 arrays by it after
  rounding it to float32 (:func:`scale32`), one more rounding.

The checker computes its own numbers in float64 (unit roundoff U64 = 2^-53). Every quantity it
compares is either (a) an *ideal* value computed in float64 whose distance to the exact real
value is bounded by a gamma(m, U64) term added to the error it is compared with, or (b) a bound
(a sum of at most 2^20 non-negative float64 terms), multiplied by BOUND_UP, which covers the
rounding of such a sum (gamma(2^20, U64) < 2^-32).
"""

from __future__ import annotations

import math

import numpy as np

#: float32 unit roundoff, float64 unit roundoff, float32 underflow (half the subnormal spacing).
U = 2.0 ** -24
U64 = 2.0 ** -53
ETA = 2.0 ** -126
#: Largest magnitude the checker lets a bounded quantity reach, and a score's.
LIMIT = 2.0 ** 100
SCORE_LIMIT = 1e8
#: Relative error of float32 exp.
EXP_REL = 4 * U
#: Factor that rounds a float64 bound up (see the module docstring).
BOUND_UP = 1.0 + 2.0 ** -30


def gamma(m: int, u: float = U) -> float:
    """gamma_m = m u / (1 - m u) (Higham, Lemma 3.1); inf when m u >= 1/2 (no useful bound)."""
    mu = float(m) * u
    return math.inf if mu >= 0.5 else mu / (1.0 - mu)


def terms(w: np.ndarray) -> np.ndarray:
    """[cols] number of non-zero weights in each column of ``w`` [rows, cols]."""
    return (np.asarray(w) != 0).sum(0)


def dot_gamma(w: np.ndarray, bias: np.ndarray = None) -> np.ndarray:
    """[cols] relative error of one float32 column of ``x @ w (+ bias)`` against sum |x||w| (+ |bias|).

    gamma(k), k the column's non-zero weights (plus one for a non-zero bias); 0 for a column that
    copies one input exactly (one weight, of magnitude 1, no bias).
    """
    w = np.asarray(w, np.float64)
    k = terms(w) + (0 if bias is None else (np.asarray(bias) != 0))
    out = np.array([gamma(int(v)) for v in np.atleast_1d(k)], np.float64)
    exact = (terms(w) <= 1) & (np.abs(w).max(0, initial=0.0) == 1.0)
    if bias is not None:
        exact &= np.asarray(bias) == 0
    return np.where(exact, 0.0, out)


def dot_eta(w: np.ndarray) -> float:
    """Absolute underflow term of one float32 dot product with a column of ``w``: each product, sum and
    operand flushed to zero errs by at most ETA (times the weight for an operand): ((terms + 2) +
    the column's sum |w|) ETA, largest over the columns."""
    w = np.abs(np.asarray(w, np.float64))
    return float(terms(w).max(initial=0) + 2 + w.sum(0).max(initial=0.0)) * ETA


def scale32(qk_scale: float) -> float:
    """The float32 value JAX multiplies the scores by (the Python float rounded to float32)."""
    return float(np.float32(qk_scale))


def softmax_total(keys: int) -> float:
    """tau: |sum_j a_j - 1| <= tau for computed softmax weights over ``keys`` keys.

    a_j = fl(e_j / S), S = fl(sum e_k) = (1 + b) sum e_k with |b| <= gamma(keys) (positive
    terms): sum a_j lies in [(1 - U) / (1 + gamma), (1 + U) / (1 - gamma)].
    """
    g = gamma(keys)
    return (1 + U) / (1 - g) - 1


def leak_factor(keys: int) -> float:
    """C: the computed weights off the top level sum to at most C sum_j exp(x_j) (plus keys ETA / ...).

    Each off-top weight is fl(e_j / S) <= (1 + U) e_j / S with e_j <= (1 + EXP_REL) exp(x_j) and
    S >= (1 - gamma(keys)) e_t >= (1 - gamma(keys))(1 - EXP_REL), e_t = exp(0) of the key with the
    largest computed score (in the top level: the score gap holds).
    """
    return (1 + U) * (1 + EXP_REL) / ((1 - gamma(keys)) * (1 - EXP_REL))


def up(x: float) -> float:
    """A float64 bound rounded up (see BOUND_UP)."""
    return float(x) * BOUND_UP if math.isfinite(x) else float(x)
