"""C1's rule (verify/crosscheck/c1.py, issue 41, written 2026-12-07): synthetic k* series only.

The rule must be able to fail: doubling (1, 2, 4, 8 and 2, 4, 8, 16) decides, linear growth
and plateaus do not. The expected verdicts and the fits' numbers below are worked out from the
module docstring's definitions (weighted least squares, sigma = 1 / sqrt(12) for an exact k*),
not read from the code.
"""

import math

import pytest

from depthcraft.constructions.errors import ParameterError
from depthcraft.verify.crosscheck import c1


def judge(series, first_depth=2):
    return c1.judge_series(c1.exact({first_depth + i: k for i, k in enumerate(series)}))


@pytest.mark.parametrize("series", [(1, 2, 4, 8), (2, 4, 8, 16), (1, 2, 4, 8, 16)])
def test_doubling_decides(series):
    r = judge(series)
    assert r["verdict"] == c1.REPRODUCED, r["reason"]
    assert r["geometric"]["b"] == pytest.approx(1.0, abs=1e-6)
    assert r["geometric"]["chi2"] == pytest.approx(0.0, abs=1e-9)


def test_doubling_fits_by_hand():
    """1, 2, 4, 8 at L = 2..5: the linear fit is k = 2.3 L - 4.3 (residuals 0.7, -0.6, -0.9, 0.8, sum of
    squares 2.3), chi2_lin = 2.3 x 12 = 27.6; the geometric fit is exact."""
    r = judge((1, 2, 4, 8))
    assert r["linear"]["slope"] == pytest.approx(2.3)
    assert r["linear"]["intercept"] == pytest.approx(-4.3)
    assert r["linear"]["chi2"] == pytest.approx(27.6)
    assert r["delta_chi2"] == pytest.approx(27.6)


@pytest.mark.parametrize("series", [(1, 2, 3, 4), (1, 4, 4, 4), (2, 4, 6, 8), (1, 2, 3, 4, 5), (1, 3, 5, 7, 9),
                                    (3, 3, 3, 16), (1, 3, 6, 6), (2, 2, 3, 3)])
def test_linear_growth_and_plateaus_do_not_decide_doubling(series):
    assert judge(series)["verdict"] != c1.REPRODUCED


def test_one_two_three_four_cannot_be_told_apart():
    """Linear fits exactly; the geometric fit (b ~ 0.56, x1.47 per layer) is acceptable, so the data cannot
    tell the two apart: inconclusive, not 'reproduced'."""
    r = judge((1, 2, 3, 4))
    assert r["verdict"] == c1.INCONCLUSIVE and "cannot tell" in r["reason"]
    assert r["linear"]["chi2"] == pytest.approx(0.0, abs=1e-9)
    assert 0.5 < r["geometric"]["b"] < 0.6


def test_plateau_fits_neither_model():
    r = judge((1, 4, 4, 4))
    assert r["verdict"] == c1.NOT_REPRODUCED and "neither" in r["reason"]


def test_exact_linear_growth_from_two_is_not_reproduced():
    r = judge((2, 4, 6, 8))
    assert r["verdict"] == c1.NOT_REPRODUCED and "linear" in r["reason"]
    assert -r["delta_chi2"] >= c1.MARGIN


def test_too_fast_and_too_slow_geometric_growth_are_not_doubling():
    assert judge((1, 4, 16, 64))["verdict"] == c1.NOT_REPRODUCED  # b = 2
    assert judge((2, 2, 3, 3))["verdict"] == c1.NOT_REPRODUCED  # b ~ 0.23


def test_a_certain_decrease_is_not_reproduced():
    r = judge((1, 4, 2, 8))
    assert r["verdict"] == c1.NOT_REPRODUCED and r["decreasing"] == ["L3->L4"]


def test_three_depths_of_doubling_are_not_enough_evidence():
    """1, 2, 4: the linear fit's residuals are 1/6, -1/3, 1/6 (sum of squares 1/6), chi2_lin = 2 < 6."""
    r = judge((1, 2, 4))
    assert r["verdict"] == c1.INCONCLUSIVE and r["linear"]["chi2"] == pytest.approx(2.0)


def test_too_few_depths_is_inconclusive():
    r = c1.judge_series({2: (0, 0), 3: (0, 0), 4: (1, 1), 5: (2, 2)})
    assert r["verdict"] == c1.INCONCLUSIVE and r["fitted"] == [4, 5] and r["geometric"] is None


def test_wide_intervals_make_doubling_inconclusive():
    """The same centres 1, 2, 4, 8 known only to +-1, +-2, +-2, +-2: with every sigma at least 1 the
    linear fit's chi2 is at most its unweighted sum of squares 2.3 < 6."""
    r = c1.judge_series({2: (0, 2), 3: (0, 4), 4: (2, 6), 5: (6, 10)})
    assert r["verdict"] == c1.INCONCLUSIVE and r["delta_chi2"] < c1.MARGIN


def test_the_fit_stops_before_the_first_saturated_depth():
    r = c1.judge_series({2: (1, 1), 3: (2, 2), 4: (4, 4), 5: (8, 8), 6: (16, math.inf), 7: (16, math.inf)})
    assert r["fitted"] == [2, 3, 4, 5] and r["saturated"] == [6, 7] and r["verdict"] == c1.REPRODUCED
    assert r["k_star"]["6"] == [16, None]


def test_k_star_interval_from_errors_and_standard_errors():
    grid = range(1, 9)
    errors = {1: 0.0, 2: 0.01, 3: 0.04, 4: 0.06, 5: 0.2}
    # k = 3: 0.04 + 1.645 x 0.01 = 0.056 is not surely below 0.05, 0.04 - 0.016 is; k = 4: 0.06 - 0.016 = 0.044
    # is possibly below; k = 5 is not
    assert c1.k_star_interval(errors, {k: 0.01 for k in errors}, grid) == (2, 4)
    assert c1.k_star_interval(errors, {}, grid) == (3, 3)
    # contiguity: a learned k after a failed one does not count
    assert c1.k_star_interval({1: 0.0, 2: 0.3, 3: 0.0}, {}, (1, 2, 3)) == (1, 1)
    assert c1.k_star_interval({1: 0.5}, {}, (1, 2)) == (0, 0)
    # a coarse grid: k* = 6 on {1, 2, 3, 4, 6, 8} means 6 or 7; learned up to the largest k: saturated
    assert c1.k_star_interval({1: 0, 2: 0, 3: 0, 4: 0, 6: 0, 8: 0.3}, {}, c1.SWEEP_GRID) == (6, 7)
    assert c1.k_star_interval({k: 0.0 for k in c1.SWEEP_GRID}, {}, c1.SWEEP_GRID) == (8, math.inf)


def test_binomial_bound_and_seed_quantile():
    assert c1.binomial_se({1: 0.5}, 100)[1] == pytest.approx(0.05)
    assert c1.binomial_se({1: 0.0}, 100)[1] == 0.0
    assert c1.seeds_quantile(3) == pytest.approx(2.919986, rel=1e-5)  # t(0.95, 2)
    assert c1.seeds_quantile(1) == c1.Z
    with pytest.raises(ParameterError):
        c1.binomial_se({1: 1.5})


def test_bad_input_is_refused():
    with pytest.raises(ParameterError, match="ascending"):
        c1.k_star_interval({1: 0.0}, {}, (2, 1))
    with pytest.raises(ParameterError, match="lo <= hi"):
        c1.judge_series({2: (3, 1)})


def test_judge_errors_passes_grid_and_quantile():
    errors = {d: {k: (0.0 if k <= kstar else 0.5) for k in range(1, 17)} for d, kstar in
              {2: 1, 3: 2, 4: 4, 5: 8}.items()}
    r = c1.judge_errors(errors, {}, c1.PAPER_GRID)
    assert r["verdict"] == c1.REPRODUCED and r["grid"] == list(range(1, 17)) and r["z"] == pytest.approx(1.645)
