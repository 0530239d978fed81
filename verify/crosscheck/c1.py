"""C1's verdict rule, calibrated on the k-hop paper's own models (issue 31; SPEC §7).

Claim C1 (Sanford, Hsu & Telgarsky 2024): each added layer roughly doubles the largest
k learned with small error.

Written 2026-12-04, before our own C1 sweeps were re-judged by it (the commit that adds
this file precedes the one that applies it to ``results/crosscheck/c1*``). When it was
written, the k* of our 5000-step sweep were known (1, 3, 6, 6 at depths 2-5 on the grid
{1, 2, 3, 4, 6, 8}, issue 31's text), as were the authors' errors.json.

Why a new rule. The rule of issue 11 asked every step between consecutive depths to
grow k* by a ratio in [1.5, 3]. On a coarse k grid the ratio is quantised: the authors'
own 100k-step models (their ``local/errors.json``, 4 heads, fresh samples) give
k* = 1, 3, 4, 8 at depths 2-5 on the grid {1, 2, 3, 4, 6, 8}, steps x3, x1.33, x2, so
that rule rejects the models the claim comes from. A rule that rejects the authors'
models does not test their claim (SPEC §7).

The rule (:func:`judge_growth`):

* k*(L) = the largest k of the grid whose error is < :data:`LEARNED` (0.05), 0 when none
  (as before: the paper's "small error");
* the *fitted depths* are the depths with k*(L) >= 1, in order, up to and including the
  first depth whose k* is the grid's largest k (a saturated k* is only a lower bound, and
  deeper depths would add nothing);
* the *growth* b = the least-squares slope of log2 k*(L) against L over the fitted depths
  (doubling per layer is b = 1; the per-layer factor is 2^b);
* **reproduced**: at least :data:`MIN_DEPTHS` (3) fitted depths, k* never decreases with
  depth (over every depth), and :data:`GROWTH_LOW` <= b <= :data:`GROWTH_HIGH`
  (0.5 <= b <= 1.5: b within 0.5 of doubling, a per-layer factor between 2^0.5 = 1.41 and
  2^1.5 = 2.83);
* **not reproduced**: at least 3 fitted depths and (k* decreases somewhere, or b is outside
  [0.5, 1.5]);
* **inconclusive**: fewer than 3 fitted depths.

What the rule cannot do: over four depths starting at k* = 1, linear growth 1, 2, 3, 4 has
b = 0.66 and passes; geometric and linear growth separate only over more depths or larger k*.
The rule tests "k* grows by roughly a constant factor near 2 per layer", not the functional form.

The sweep-level conditions of issue 11 stay with the sweep (:mod:`verify.crosscheck.claims.sanford`,
which applies this rule to our sweeps and to the authors' models): fewer than 3 seeds for a
configuration, or a capacity control (2x heads and width) reaching a larger k* than its depth, make
the verdict inconclusive.

Calibration (:func:`calibrate`, run by the tests and by ``depthcraft published``): the rule must
say *reproduced* on the authors' own numbers (their errors.json, 4 heads, fresh samples, depths
2-6) on the paper's grid k = 1..16 and on our sweep's grid {1, 2, 3, 4, 6, 8}, and on our
evaluation of their published models (depths 2-5, ``results/crosscheck/published/``).
"""

from __future__ import annotations

import math
from typing import Any, Dict, Mapping, Sequence

#: Error below which k counts as learned (SPEC §7; the paper's "small error").
LEARNED = 0.05
#: Fitted depths needed for a verdict.
MIN_DEPTHS = 3
#: Bounds on the growth b (slope of log2 k* per layer) for "roughly doubles".
GROWTH_LOW, GROWTH_HIGH = 0.5, 1.5
#: The date the rule was written (before it re-judged our sweeps).
WRITTEN = "2026-12-04"

REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE = "reproduced", "not reproduced", "inconclusive"


def k_star(errors: Mapping[int, float], grid: Sequence[int], threshold: float = LEARNED) -> int:
    """The largest k of ``grid`` with ``errors[k] < threshold`` (0 when none; a k missing from
    ``errors`` does not count)."""
    return max([k for k in grid if k in errors and errors[k] < threshold] or [0])


def growth(kstar: Mapping[int, int], kmax: int) -> Dict[str, Any]:
    """The fitted depths and the slope b of log2 k* on depth (module docstring).

    Args:
        kstar: depth -> k*.
        kmax: the grid's largest k (a saturated k*).
    Returns:
        ``{"fitted": [depths], "slope": b or None (fewer than 2 fitted depths), "factor": 2^b or None}``.
    """
    fitted = []
    for d in sorted(kstar):
        if kstar[d] >= 1:
            fitted.append(d)
            if kstar[d] >= kmax:
                break
    if len(fitted) < 2:
        return {"fitted": fitted, "slope": None, "factor": None}
    xs = [float(d) for d in fitted]
    ys = [math.log2(kstar[d]) for d in fitted]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return {"fitted": fitted, "slope": round(b, 4), "factor": round(2 ** b, 4)}


def judge_growth(kstar: Mapping[int, int], kmax: int) -> Dict[str, Any]:
    """The rule on k* by depth.

    Args:
        kstar: depth -> k* (every depth of the sweep).
        kmax: the grid's largest k.
    Returns:
        ``{"verdict", "reason", "k_star", "fitted", "slope", "factor", "decreasing"}``.
    """
    g = growth(kstar, kmax)
    ds = sorted(kstar)
    dec = [(a, b) for a, b in zip(ds, ds[1:]) if kstar[b] < kstar[a]]
    out = {"k_star": {str(d): int(kstar[d]) for d in ds}, **g,
           "decreasing": [f"L{a}->L{b}" for a, b in dec]}
    if len(g["fitted"]) < MIN_DEPTHS:
        return {"verdict": INCONCLUSIVE, "reason": f"{len(g['fitted'])} depths with k* >= 1 (need {MIN_DEPTHS})",
                **out}
    b = g["slope"]
    if dec:
        return {"verdict": NOT_REPRODUCED, "reason": "k* decreases at " + ", ".join(out["decreasing"]), **out}
    if not GROWTH_LOW <= b <= GROWTH_HIGH:
        return {"verdict": NOT_REPRODUCED,
                "reason": f"log2 k* grows {b:.2f} per layer, outside [{GROWTH_LOW}, {GROWTH_HIGH}]", **out}
    return {"verdict": REPRODUCED,
            "reason": f"log2 k* grows {b:.2f} per layer (x{2 ** b:.2f} per layer), k* never decreases", **out}


def judge_errors(errors: Mapping[int, Mapping[int, float]], grid: Sequence[int]) -> Dict[str, Any]:
    """:func:`judge_growth` from errors by depth and k (one model per depth).

    Args:
        errors: depth -> {k: error}.
        grid: the k's to judge on.
    """
    kst = {int(d): k_star(e, grid) for d, e in errors.items()}
    return {"grid": list(grid), **judge_growth(kst, max(grid))}


#: The grids the calibration uses: the paper's (k = 1..16) and our C1 sweeps' (k = 1, 2, 3, 4, 6, 8).
PAPER_GRID = tuple(range(1, 17))
SWEEP_GRID = (1, 2, 3, 4, 6, 8)


def calibrate(by_depth: Mapping[int, Mapping[int, float]]) -> Dict[str, Any]:
    """The rule on the authors' models at both grids; ``ok`` when it says reproduced on both.

    Args:
        by_depth: depth -> {k: error} of the authors' models (one configuration).
    Returns:
        ``{"paper_grid": judge, "sweep_grid": judge, "ok": bool}``.
    """
    a, b = judge_errors(by_depth, PAPER_GRID), judge_errors(by_depth, SWEEP_GRID)
    return {"paper_grid": a, "sweep_grid": b, "ok": a["verdict"] == b["verdict"] == REPRODUCED}
