"""The papers' training claims C1-C7 (SPEC §7, issue 11; C7 issue 13): which sweeps answer each, and its verdict.

Each :class:`Claim` names its paper, its statement, the sweeps that answer it (a
task, a preset and extra ``depthcraft train`` options, written to
``results/crosscheck/<claim>/<label>/``) and a *rule* that turns their
``results.json`` into a verdict: ``reproduced``, ``not reproduced`` or
``inconclusive``, with the measured numbers. :func:`write_claims` writes
``results/crosscheck/claims.json``; ``depthcraft docs`` renders it
(``tools/docgen.py``'s ``render_claims``).

The rules were written before any of their sweeps ran and are not tuned to the
results. Shared definitions (every number from the non-control runs of one
(condition, depth, heads, width), over their seeds):

* ``mean``, ``std``: mean and population standard deviation of the seeds' errors
  (``std`` is the spread reported beside every mean);
* a configuration **learns** when its mean error is below :data:`LEARNED` (0.05,
  SPEC §7's threshold and Sanford et al.'s "small error"), and **fails** when its
  mean error is at least :data:`FAILED` (0.25); between the two it is *unclear*;
* a configuration is **decided** only with at least :data:`MIN_SEEDS` (3) seeds;
  fewer make its part of a claim inconclusive;
* the **learning step** of a run is the first logged step at which its training
  loss is at most :data:`LEARNED_LOSS` (0.1 nats), None when it never is; a
  configuration's learning step is the median over its seeds (a seed that never
  learns counts as the run's last step + 1, so the median is an upper bound);
* the **capacity control** is the depth-(bound - 1) run with twice the heads and
  width (SPEC §7). A claim that a depth fails is reproduced only if its control
  fails too; a control that learns means the shallow depth suffices, so the claim
  is not reproduced.

A missing ``results.json``, or one whose sweep is not complete, makes its claim
``not run`` (never a verdict).
"""

from __future__ import annotations

import os
import pathlib
from typing import Any, Dict

# The public names of the claims (importers use ``verify.crosscheck.claims.<name>``).
from depthcraft.verify.crosscheck.claims.chen_zou import (C3_RECIPES, HEADS, heads_speed, judge_c2, judge_c3,
    judge_c4)
from depthcraft.verify.crosscheck.claims.figures import hard_curves, write_figures, write_recipe_figures
from depthcraft.verify.crosscheck.claims.musat import C5_RECIPES, judge_c5, judge_c6
from depthcraft.verify.crosscheck.claims.registry import (CLAIMS, evaluate_claim, get_claim, recipe_verdicts,
    sweep_recipe)
from depthcraft.verify.crosscheck.claims.sanford import (C1_AUTHORS, C1_SWEEPS, C7_RECIPES, PAPER_KHOP,
    PUBLISHED_RESULTS, c7_items, judge_c1, judge_c7, published_c1)
from depthcraft.verify.crosscheck.claims.stats import (CLAIMS_FILE, CLEAR_SPEEDUP, CURRICULUM, FAILED,
    HARD_ONLY, INCONCLUSIVE, LEARNED, LEARNED_LOSS, MIN_SEEDS, MIXED, NOT_REPRODUCED, NOT_RUN, RECIPES,
    REPRODUCED, ROOT, Claim, InputError, Results, Stat, Sweep, depth_threshold, rule_text, select, stat)


def build_claims(root: pathlib.Path) -> Dict[str, Any]:
    """``claims.json``: the thresholds and one entry per claim (C1-C7), with "C1, the authors' models"
    when ``depthcraft published`` has written its results (:func:`published_c1`) and the looped-depth
    row when its sweep exists (:func:`~verify.crosscheck.claims.looped.looped_row`) after C1."""
    claims = [evaluate_claim(root, c) for c in CLAIMS]
    from depthcraft.verify.crosscheck.claims.looped import looped_row

    extra = published_c1(pathlib.Path(root))
    if extra is not None:
        claims.insert(1, extra)
    loop = looped_row(pathlib.Path(root))
    if loop is not None:
        claims.insert(2 if extra is not None else 1, loop)
    return {"definitions": {"learned_mean_error_below": LEARNED, "failed_mean_error_at_least": FAILED,
                            "min_seeds": MIN_SEEDS, "learned_loss_nats": LEARNED_LOSS,
                            "clear_speedup": CLEAR_SPEEDUP, "rules_text": rule_text(__doc__ or "")},
            "claims": claims}


def write_claims(root: pathlib.Path) -> pathlib.Path:
    """Write ``results/crosscheck/claims.json`` under ``root`` (atomically); returns its path."""
    from depthcraft.constructions.files import write_json_atomic

    path = pathlib.Path(root) / CLAIMS_FILE
    os.makedirs(path.parent, exist_ok=True)
    write_json_atomic(str(path), build_claims(pathlib.Path(root)))
    return path


__all__ = ["build_claims", "C1_AUTHORS", "C1_SWEEPS", "C3_RECIPES", "C5_RECIPES", "c7_items", "C7_RECIPES",
           "Claim", "CLAIMS", "CLAIMS_FILE", "CLEAR_SPEEDUP", "CURRICULUM", "depth_threshold",
           "evaluate_claim", "FAILED", "get_claim", "hard_curves", "HARD_ONLY", "HEADS", "heads_speed",
           "INCONCLUSIVE", "InputError", "judge_c1", "judge_c2", "judge_c3", "judge_c4", "judge_c5",
           "judge_c6", "judge_c7", "LEARNED", "LEARNED_LOSS", "MIN_SEEDS", "MIXED", "NOT_REPRODUCED",
           "NOT_RUN", "PAPER_KHOP", "published_c1", "PUBLISHED_RESULTS", "recipe_verdicts", "RECIPES",
           "REPRODUCED", "Results", "ROOT", "rule_text", "select", "Stat", "stat", "Sweep", "sweep_recipe",
           "write_claims", "write_figures", "write_recipe_figures"]
