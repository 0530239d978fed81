"""C1's calibrated rule (verify/crosscheck/c1.py, issue 31): synthetic k* series and the paper's numbers."""

import os

import pytest

from depthcraft.verify.crosscheck import c1

HOP_REPO = os.environ.get("DEPTHCRAFT_HOP_REPO", "")


def test_doubling_is_reproduced():
    r = c1.judge_growth({2: 1, 3: 2, 4: 4, 5: 8}, kmax=16)
    assert r["verdict"] == c1.REPRODUCED and r["slope"] == pytest.approx(1.0)
    assert r["fitted"] == [2, 3, 4, 5]


def test_flat_and_too_fast_are_not_reproduced():
    assert c1.judge_growth({2: 2, 3: 2, 4: 3, 5: 3}, kmax=16)["verdict"] == c1.NOT_REPRODUCED  # b = 0.29
    assert c1.judge_growth({2: 1, 3: 4, 4: 16, 5: 64}, kmax=64)["verdict"] == c1.NOT_REPRODUCED  # b = 2


def test_a_decrease_is_not_reproduced():
    r = c1.judge_growth({2: 1, 3: 4, 4: 2, 5: 8}, kmax=16)
    assert r["verdict"] == c1.NOT_REPRODUCED and r["decreasing"] == ["L3->L4"]


def test_fit_stops_at_the_first_saturated_depth():
    r = c1.judge_growth({2: 1, 3: 2, 4: 4, 5: 8, 6: 8}, kmax=8)
    assert r["fitted"] == [2, 3, 4, 5] and r["slope"] == pytest.approx(1.0)
    assert r["verdict"] == c1.REPRODUCED


def test_too_few_depths_is_inconclusive():
    assert c1.judge_growth({2: 0, 3: 0, 4: 1, 5: 2}, kmax=8)["verdict"] == c1.INCONCLUSIVE


def test_k_star_ignores_missing_and_takes_the_largest_learned():
    assert c1.k_star({1: 0.0, 2: 0.2, 3: 0.01, 4: 0.5}, (1, 2, 3, 4, 6)) == 3
    assert c1.k_star({1: 0.5}, (1, 2)) == 0


def test_the_papers_table_is_reproduced():
    """SPEC §7a (the paper's table, k = 1, 2, 4, 8, 16): the rule must accept the authors' own numbers."""
    from depthcraft.verify.crosscheck.claims import PAPER_KHOP

    r = c1.judge_errors(PAPER_KHOP, (1, 2, 4, 8, 16))
    assert r["verdict"] == c1.REPRODUCED, r


@pytest.mark.skipif(not os.path.isfile(os.path.join(HOP_REPO, "local", "errors.json")),
                    reason="set DEPTHCRAFT_HOP_REPO to a checkout of chsanford/hop-induction-heads")
def test_calibrated_on_the_authors_errors_json():
    from depthcraft.verify.crosscheck import published

    theirs = published.authors_errors(HOP_REPO)
    by_depth = {d: theirs[f"width4-depth{d}"] for d in range(2, 7)}
    cal = c1.calibrate(by_depth)
    assert cal["ok"], cal
