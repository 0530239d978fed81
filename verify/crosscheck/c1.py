"""C1's verdict rule: doubling against linear growth of k* by depth (issue 41; SPEC §7, §7a).

Claim C1 (Sanford, Hsu & Telgarsky 2024): each added layer roughly doubles the largest k
learned with small error.

Written 2026-12-07, before it re-judged anything: the commit that adds this file (with its
synthetic tests, ``tests/test_c1_rule.py``) precedes the commits that apply it to the authors'
models (``results/crosscheck/published/``) and to our sweeps (``results/crosscheck/claims.json``).
When it was written the k* of the previous rule were known: on the authors' errors.json 1, 3, 5,
8, 15 (depths 2-6), on our eval-mode evaluation of their models 2, 4, 7, 12 (depths 2-5), on
our 5000-step sweep 1, 3, 6, 6 (depths 2-5, grid {1, 2, 3, 4, 6, 8}). None of the constants
below was changed after seeing what it gives on them.

Why a new rule. The rule of issue 31 said "reproduced" when the least-squares slope of log2 k*
per layer was in [0.5, 1.5]; linear growth 1, 2, 3, 4 (slope 0.66), plateaus 1, 4, 4, 4 and our
own flat 1, 3, 6, 6 passed it too: it could not fail on doubling's rivals (issue 41).

The rule (:func:`judge_series`, :func:`judge_errors`):

1. **k* with a confidence interval.** At depth L, k counts as *learned* when its error is below
   :data:`LEARNED` (0.05). With an error e and its standard error s, k is *surely* learned when
   e + z s < 0.05 and *possibly* learned when e - z s < 0.05 (z = :data:`Z` = 1.645: one-sided
   95 %). k*_lo = the largest k of the grid such that every grid k' <= k is surely learned;
   k*_hi = the same with "possibly", then (grid not dense) up to the next grid value minus 1: the
   true k* is only known to lie in [k*_lo, k*_hi]. A k*_hi at the grid's largest k is
   *saturated* (only a lower bound). The rule's k grid should be dense (every k = 1..16 for the
   paper's models); a coarse grid is accepted and widens the intervals.
2. **The fitted depths**: those with k*_hi >= 1, in order, stopping before the first saturated
   depth. Each fitted depth gives a centre m = (k*_lo + k*_hi) / 2 and a standard deviation
   sigma = max(:data:`RESOLUTION`, (k*_hi - k*_lo) / 2): k* is an integer, so an exact k*
   still carries the resolution 1 / sqrt(12) of a rounding to integers.
3. **Two models of k*(L)**, each with two parameters, fitted by weighted least squares to the
   centres: geometric k = A 2^(b L) (b = 1 is doubling, 2^b the factor per layer) and linear
   k = c + d L. chi2_geo and chi2_lin are their sums of squared standardised residuals.
   Delta = chi2_lin - chi2_geo is twice the log likelihood ratio of the two (Gaussian errors,
   same number of parameters).
4. **Verdict**:

   * *reproduced* ("doubling"): at least :data:`MIN_DEPTHS` (3) fitted depths, no certain
     decrease, Delta >= :data:`MARGIN` (6: the geometric model at least e^3 = 20 times as
     likely as the linear one), the geometric fit acceptable (chi-square p-value >=
     :data:`FIT_P` = 0.01 on n - 2 degrees of freedom) and :data:`GROWTH_LOW` <= b <=
     :data:`GROWTH_HIGH` (0.5..1.5: a factor per layer between 1.41 and 2.83, "roughly doubles");
   * *not reproduced*, checked in this order: a certain decrease (k*_hi(L') < k*_lo(L) for
     some L' > L); neither model fits (both p-values < 0.01: a plateau or an irregular
     series); the linear model beats the geometric one by the margin (-Delta >= 6: linear
     growth); the geometric model fits (p >= 0.01) with b outside 0.5..1.5 (growth by a
     factor per layer, but not roughly 2);
   * *inconclusive*: fewer than 3 fitted depths; or otherwise (in particular |Delta| < 6 with
     an acceptable geometric fit of b in 0.5..1.5): "cannot tell doubling from linear growth".

   Worked by hand (exact series at depths 2-5, sigma = 0.29): 1, 2, 4, 8 gives chi2_geo = 0,
   chi2_lin = 27.6: reproduced; 1, 2, 3, 4 gives chi2_geo = 1.8 (b = 0.56, p = 0.41) and
   chi2_lin = 0: inconclusive; 1, 4, 4, 4 fits neither: not reproduced.

Sources of the standard errors: our evaluation of the published models (2048 fresh inputs per
k, the ratio estimator's standard error over sequences, :func:`verify.crosscheck.published.ratio_se`);
the authors' errors.json, which gives no standard errors: the binomial bound
sqrt(e (1 - e) / n) with n = :data:`THEIR_INPUTS` (100 inputs per k, their notebook), the largest
standard deviation a mean of n sequence-level error rates in [0, 1] can have (sequences weighted
equally); our sweeps (>= 3 seeds): the seeds' mean with Student's t at one-sided 95 % on the
seeds' standard error (t * std / sqrt(n), ``ddof=1``).

The sweep-level conditions stay with the sweep (:func:`verify.crosscheck.claims.sanford.judge_c1`):
fewer than 3 seeds for a configuration, or a capacity control (2x heads and width) whose k*_lo
exceeds its depth's k*_hi, make the verdict inconclusive.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Mapping, Sequence, Tuple

import numpy as np

from depthcraft.constructions.errors import ParameterError

#: Error below which k counts as learned (SPEC §7; the paper's "small error").
LEARNED = 0.05
#: One-sided 95 % normal quantile for an error's confidence bound.
Z = 1.645
#: The smallest standard deviation of a k* (an integer: 1 / sqrt(12)).
RESOLUTION = 1.0 / math.sqrt(12.0)
#: Fitted depths needed for a verdict.
MIN_DEPTHS = 3
#: chi2_lin - chi2_geo (twice the log likelihood ratio) that decides between the two models.
MARGIN = 6.0
#: A fit is acceptable when its chi-square p-value is at least this.
FIT_P = 0.01
#: Bounds on the geometric model's b (log2 of the factor per layer) for "roughly doubles".
GROWTH_LOW, GROWTH_HIGH = 0.5, 1.5
#: Inputs per k behind the authors' errors.json (their notebook evaluates 100 sequences per k).
THEIR_INPUTS = 100
#: The date the rule was written (before it re-judged anything).
WRITTEN = "2026-12-07"

REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE = "reproduced", "not reproduced", "inconclusive"

#: The grids: the paper's (every k = 1..16) and our C1 sweeps' (k = 1, 2, 3, 4, 6, 8).
PAPER_GRID = tuple(range(1, 17))
SWEEP_GRID = (1, 2, 3, 4, 6, 8)

#: One line that names the rule (claims.json, results.json).
RULE_TEXT = (f"k* interval from one-sided 95 % bounds on each error (< {LEARNED}); geometric k = A 2^(bL) "
             f"against linear k = c + dL by weighted least squares; doubling when chi2_lin - chi2_geo >= "
             f"{MARGIN:g}, the geometric fit's p >= {FIT_P} and {GROWTH_LOW} <= b <= {GROWTH_HIGH}; not "
             f"reproduced when linear wins by {MARGIN:g}, neither fits, or k* surely decreases; else "
             f"inconclusive (verify/crosscheck/c1.py, written {WRITTEN})")


def k_star_interval(errors: Mapping[int, float], se: Mapping[int, float], grid: Sequence[int],
                    z: float = Z, threshold: float = LEARNED) -> Tuple[int, float]:
    """(k*_lo, k*_hi) of one depth (module docstring, step 1).

    Args:
        errors: k -> error (a fraction in [0, 1]); a grid k missing here counts as not learned.
        se: k -> standard error of that error (0 or missing: exact).
        grid: the k's, ascending, >= 1.
        z: the bound's quantile (Student's t for seeds).
        threshold: the learned threshold.
    Returns:
        ``(lo, hi)``: ints, except ``hi = math.inf`` when saturated (possibly learned up to the
        grid's largest k).
    Raises:
        ParameterError: an empty or unsorted grid, or a k < 1.
    """
    grid = [int(k) for k in grid]
    if not grid or grid != sorted(set(grid)) or grid[0] < 1:
        raise ParameterError(f"the k grid must be ascending distinct integers >= 1, got {grid}")

    def run(bound: float) -> int:
        best = 0
        for k in grid:
            if k not in errors or errors[k] is None or not errors[k] + bound * float(se.get(k) or 0.0) < threshold:
                break
            best = k
        return best

    lo, hi = run(z), run(-z)
    if hi == grid[-1]:
        return lo, math.inf
    nxt = grid[grid.index(hi) + 1] if hi else grid[0]
    return lo, max(hi, nxt - 1)


def _geometric_fit(L: np.ndarray, m: np.ndarray, w: np.ndarray) -> Tuple[float, float, float]:
    """Weighted least squares of m = A 2^(b L): (chi2, b, A). Given b the best A is closed form;
    b is found by a grid over [-2, 6] refined by bounded scalar minimisation (scipy)."""
    from scipy.optimize import minimize_scalar

    def chi2_at(b: float) -> Tuple[float, float]:
        g = 2.0 ** (b * (L - L[0]))
        a = float((w * m * g).sum() / (w * g * g).sum())
        return float((w * (m - a * g) ** 2).sum()), a

    grid = np.linspace(-2.0, 6.0, 801)
    vals = [chi2_at(b)[0] for b in grid]
    i = int(np.argmin(vals))
    lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
    res = minimize_scalar(lambda b: chi2_at(b)[0], bounds=(lo, hi), method="bounded",
                          options={"xatol": 1e-10})
    b = float(res.x) if res.fun <= vals[i] else float(grid[i])
    chi2, a = chi2_at(b)
    return chi2, b, a * 2.0 ** (-b * L[0])


def _linear_fit(L: np.ndarray, m: np.ndarray, w: np.ndarray) -> Tuple[float, float, float]:
    """Weighted least squares of m = c + d L: (chi2, d, c)."""
    X = np.stack([np.ones_like(L), L], 1)
    W = np.diag(w)
    c, d = np.linalg.solve(X.T @ W @ X, X.T @ W @ m)
    return float((w * (m - c - d * L) ** 2).sum()), float(d), float(c)


def judge_series(intervals: Mapping[int, Tuple[int, float]]) -> Dict[str, Any]:
    """The rule on k* intervals by depth (module docstring, steps 2-4).

    Args:
        intervals: depth -> (k*_lo, k*_hi) (:func:`k_star_interval`; ``hi`` may be ``math.inf``);
            an exact series is ``{L: (k, k)}``.
    Returns:
        ``{"verdict", "reason", "k_star": {L: [lo, hi]}, "fitted": [L], "saturated": [L],
        "decreasing": ["L3->L4"], "geometric": {"chi2", "p", "b", "factor", "A"},
        "linear": {"chi2", "p", "slope", "intercept"}, "delta_chi2", "margin"}`` (fits None with
        fewer than 3 fitted depths).
    Raises:
        ParameterError: an interval with lo > hi or a negative k.
    """
    from scipy.stats import chi2 as chi2_dist

    ds = sorted(int(d) for d in intervals)
    iv = {}
    for d in ds:
        lo, hi = intervals[d]
        if lo < 0 or hi < lo:
            raise ParameterError(f"depth {d}: k* interval [{lo}, {hi}] is not 0 <= lo <= hi")
        iv[d] = (int(lo), hi if hi == math.inf else int(hi))
    fitted, saturated = [], [d for d in ds if iv[d][1] == math.inf]
    for d in ds:
        if iv[d][1] == math.inf:
            break
        if iv[d][1] >= 1:
            fitted.append(d)
    dec = [f"L{a}->L{b}" for i, a in enumerate(ds) for b in ds[i + 1:] if iv[b][1] < iv[a][0]]
    out: Dict[str, Any] = {
        "k_star": {str(d): [iv[d][0], None if iv[d][1] == math.inf else iv[d][1]] for d in ds},
        "fitted": fitted, "saturated": saturated, "decreasing": dec, "geometric": None, "linear": None,
        "delta_chi2": None, "margin": MARGIN}
    if len(fitted) < MIN_DEPTHS:
        return {"verdict": INCONCLUSIVE, **out,
                "reason": f"{len(fitted)} depths with an unsaturated k* >= 1 (need {MIN_DEPTHS})"}
    L = np.asarray(fitted, float)
    m = np.asarray([(iv[d][0] + iv[d][1]) / 2.0 for d in fitted])
    sig = np.asarray([max(RESOLUTION, (iv[d][1] - iv[d][0]) / 2.0) for d in fitted])
    w = 1.0 / sig ** 2
    dof = len(fitted) - 2
    cg, b, a = _geometric_fit(L, m, w)
    cl, slope, icpt = _linear_fit(L, m, w)
    pg, pl = float(chi2_dist.sf(cg, dof)), float(chi2_dist.sf(cl, dof))
    delta = cl - cg
    out.update(geometric={"chi2": round(cg, 4), "p": round(pg, 4), "b": round(b, 4), "factor": round(2 ** b, 4),
                          "A": round(a, 6)},
               linear={"chi2": round(cl, 4), "p": round(pl, 4), "slope": round(slope, 4), "intercept": round(icpt, 4)},
               delta_chi2=round(delta, 4))
    fits = (f"chi2 geometric {cg:.2f} (b = {b:.2f}, x{2 ** b:.2f}/layer, p = {pg:.3f}), "
            f"linear {cl:.2f} (p = {pl:.3f})")
    if dec:
        return {"verdict": NOT_REPRODUCED, **out, "reason": "k* surely decreases at " + ", ".join(dec)}
    if pg < FIT_P and pl < FIT_P:
        return {"verdict": NOT_REPRODUCED, **out, "reason": f"neither geometric nor linear growth fits: {fits}"}
    if -delta >= MARGIN:
        return {"verdict": NOT_REPRODUCED, **out, "reason": f"linear growth fits better by {-delta:.1f} >= "
                                                            f"{MARGIN:g}: {fits}"}
    if pg >= FIT_P and not GROWTH_LOW <= b <= GROWTH_HIGH:
        return {"verdict": NOT_REPRODUCED, **out,
                "reason": f"geometric growth x{2 ** b:.2f} per layer, outside x{2 ** GROWTH_LOW:.2f}.."
                          f"x{2 ** GROWTH_HIGH:.2f}: {fits}"}
    if delta >= MARGIN and pg >= FIT_P:
        return {"verdict": REPRODUCED, **out, "reason": f"geometric beats linear by {delta:.1f} >= {MARGIN:g}: "
                                                        f"{fits}"}
    return {"verdict": INCONCLUSIVE, **out,
            "reason": f"cannot tell doubling from linear growth (chi2_lin - chi2_geo = {delta:.1f}, "
                      f"|.| < {MARGIN:g}): {fits}"}


def exact(series: Mapping[int, int]) -> Dict[int, Tuple[int, int]]:
    """An exact k* series ``{L: k}`` as intervals ``{L: (k, k)}`` (synthetic series, tests)."""
    return {int(d): (int(k), int(k)) for d, k in series.items()}


def judge_errors(errors: Mapping[int, Mapping[int, float]], se: Mapping[int, Mapping[int, float]],
                 grid: Sequence[int], z: float = Z) -> Dict[str, Any]:
    """:func:`judge_series` from errors by depth and k (one model, or a mean over seeds, per depth).

    Args:
        errors: depth -> {k: error}.
        se: depth -> {k: standard error} (missing: exact).
        grid: the k's to judge on (ascending).
        z: the bound's quantile.
    Returns:
        :func:`judge_series`' dict with ``"grid"`` and ``"z"``.
    """
    iv = {int(d): k_star_interval(e, se.get(d, {}), grid, z) for d, e in errors.items()}
    return {"grid": list(grid), "z": round(z, 4), **judge_series(iv)}


def binomial_se(errors: Mapping[int, float], n: int = THEIR_INPUTS) -> Dict[int, float]:
    """The standard-error bound sqrt(e (1 - e) / n) of each error (errors given without one:
    the authors' errors.json; module docstring).

    Raises:
        ParameterError: n < 1 or an error outside [0, 1].
    """
    if n < 1:
        raise ParameterError(f"n must be >= 1, got {n}")
    out = {}
    for k, e in errors.items():
        if not 0.0 <= e <= 1.0:
            raise ParameterError(f"error {e!r} at k={k} is not in [0, 1]")
        out[k] = math.sqrt(e * (1.0 - e) / n)
    return out


def seeds_quantile(n: int) -> float:
    """Student's t at one-sided 95 % with n - 1 degrees of freedom (n seeds; :data:`Z` when n is
    1, where no spread is known)."""
    if n <= 1:
        return Z
    from scipy.stats import t

    return float(t.ppf(0.95, n - 1))


def describe(result: Mapping[str, Any]) -> str:
    """One line: k* intervals, both fits, the verdict (at most ~150 characters)."""
    ks = ", ".join(f"L{d}: {lo}" + ("" if hi == lo else f"-{'>' if hi is None else hi}")
                   for d, (lo, hi) in result["k_star"].items())
    g, lin = result.get("geometric"), result.get("linear")
    fits = "" if not g else (f"; chi2 geo {g['chi2']:.1f} (x{g['factor']:.2f}/layer), lin {lin['chi2']:.1f}")
    return f"k* {ks}{fits}: {result['verdict']}"
