"""Sanford, Hsu & Telgarsky's claims: C1 (k-hop, each layer roughly doubles k*) and C7 (connectivity).

C1's verdict rule and its calibration on the authors' own models live in
:mod:`verify.crosscheck.c1` (``verify/crosscheck/c1.py``, dated before it re-judged our sweeps;
its tests in ``tests/test_c1_rule.py``); this module applies it to our sweeps (:func:`judge_c1`)
and to the authors' published models (:func:`published_c1`, from ``depthcraft published``).
C7 (graph connectivity needs depth growing like log n) is :func:`judge_c7`.
"""

from __future__ import annotations

import json
import math
import pathlib
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from depthcraft.constructions.errors import InputError
from depthcraft.verify.crosscheck import c1 as c1_rule
from depthcraft.verify.crosscheck.claims.stats import (BUDGET_NOTE, CURRICULUM, HARD_ONLY, INCONCLUSIVE,
    LEARNED, MIN_SEEDS, MIXED, NOT_REPRODUCED, REPRODUCED, ROOT, Results, by_recipe, conditions, depths,
    make_verdict, param_of, recipe, rule_text, select, stat)


#: SPEC §7a: token error of Sanford et al.'s trained GPT-2 (4 heads, width 128, N = 100, |Σ| = 4),
#: by depth L and k.
PAPER_KHOP: Dict[int, Dict[int, float]] = {
    2: {1: .010, 2: .140, 4: .423, 8: .658, 16: .737},
    3: {1: .003, 2: .008, 4: .150, 8: .456, 16: .706},
    4: {1: .001, 2: .003, 4: .015, 8: .216, 16: .612},
    5: {1: .001, 2: .001, 4: .003, 8: .037, 16: .414},
    6: {1: .000, 2: .000, 4: .002, 8: .006, 16: .062},
}


def judge_c1(res: Results) -> Dict[str, Any]:
    """C1 rule (issue 41's rule, verify/crosscheck/c1.py, written 2026-12-07 before this re-judging).
    For each trained depth L, the k* interval [k*_lo, k*_hi]: the largest k of the sweep's grid such
    that every grid k' <= k has a mean error (over seeds) surely (resp. possibly) below 0.05, at a
    one-sided 95 % Student t bound on the seeds' standard error, widened up to the next grid value
    minus 1 (the grid {1, 2, 3, 4, 6, 8} is not dense). Then a geometric k = A 2^(bL) and a linear
    k = c + dL fit of the intervals' centres (weighted least squares, sigma = max(1/sqrt(12), half
    the interval)): reproduced when chi2_lin - chi2_geo >= 6, the geometric fit's p >= 0.01,
    0.5 <= b <= 1.5, every configuration has 3 seeds and no capacity control (2x heads and width at a
    depth L) has a k*_lo above k*_hi(L); not reproduced when k* surely decreases, neither model fits,
    the linear one wins by 6, or the geometric one fits with b outside 0.5..1.5; inconclusive
    otherwise ("cannot tell doubling from linear growth"). Two sweeps (issue 25): c1 (2500 steps) and
    c1_long (5000 steps), each judged on its own runs; the claim's verdict is the 5000-step sweep's
    when present, else the 2500-step one's."""
    per = {steps: _judge_c1_one(res[label]) for steps, label in C1_SWEEPS.items() if label in res.docs}
    if not per:
        raise InputError(f"no C1 sweep is present: {list(C1_SWEEPS.values())}")
    head = max(per, key=int)
    out = dict(per[head])
    if len(per) > 1:
        out["evidence"] = f"verdict from the {head}-step sweep. " + " | ".join(
            f"{s} STEPS ({C1_SWEEPS[s]}): {v['verdict']}: {v['evidence']}" for s, v in per.items())
    out["measured"] = {**per[head]["measured"], "train_steps": int(head),
                       "by_steps": {s: {"verdict": v["verdict"], **v["measured"]} for s, v in per.items()}}
    return out


#: C1's sweeps by their number of training steps (labels; the longest present gives the verdict).
C1_SWEEPS = {"2500": "khop", "5000": "khop_long"}


def _seed_errors(doc: Dict[str, Any], ks: Dict[str, int], d: int, control: bool):
    """(mean by k, standard error by k, fewest seeds, table row) of one depth's runs."""
    mean, se, row, n = {}, {}, {}, None
    for c, k in sorted(ks.items(), key=lambda x: x[1]):
        s = stat(doc, c, depth=d, control=control)
        if not s.errors:
            continue
        row[f"k={k}"] = s.to_json()
        mean[k] = s.mean
        se[k] = float(np.std(s.errors, ddof=1) / math.sqrt(s.n)) if s.n > 1 else 0.0
        n = s.n if n is None else min(n, s.n)
    return mean, se, n or 0, row


def _judge_c1_one(doc: Dict[str, Any]) -> Dict[str, Any]:
    """:func:`judge_c1`'s rule on one sweep's results."""
    conds = conditions(doc)
    ks = {c: int(c.split("=")[1]) for c in conds if c.startswith("k=")}
    grid = sorted(ks.values())
    grid_pos = [k for k in grid if k >= 1]
    ds = depths(doc)
    table: Dict[str, Dict[str, Any]] = {}
    intervals, fewest = {}, MIN_SEEDS
    for d in ds:
        mean, se, n, row = _seed_errors(doc, ks, d, False)
        table[str(d)] = row
        fewest = min(fewest, n)
        intervals[d] = c1_rule.k_star_interval(mean, se, grid_pos, c1_rule.seeds_quantile(n))
    control_rows, control_k, control_beats = {}, {}, []
    for d in sorted({int(r["depth"]) for r in select(doc, control=True)}):
        mean, se, n, row = _seed_errors(doc, ks, d, True)
        control_rows[str(d)] = row
        lo, hi = c1_rule.k_star_interval(mean, se, grid_pos, c1_rule.seeds_quantile(n))
        control_k[d] = [lo, None if hi == math.inf else hi]
        if d in intervals and lo > intervals[d][1]:
            control_beats.append(f"L={d}: control k*_lo = {lo} > k*_hi = {intervals[d][1]}")
    result = c1_rule.judge_series(intervals)
    ktext = ", ".join(f"L={d}: {lo}" + ("" if hi == lo else f"-{hi if hi is not None else '>'}")
                      for d, (lo, hi) in result["k_star"].items())
    evidence = f"k* interval (mean over seeds, one-sided 95 % t bound): {ktext} [{recipe(doc)}]"
    if result["geometric"]:
        g, lin = result["geometric"], result["linear"]
        evidence += (f"; geometric fit b = {g['b']:.2f} (x{g['factor']:.2f}/layer), chi2 {g['chi2']:.2f} "
                     f"(p = {g['p']:.3f}); linear fit {lin['slope']:.2f} per layer, chi2 {lin['chi2']:.2f} "
                     f"(p = {lin['p']:.3f})")
    if control_k:
        evidence += "; capacity controls (2x heads, 2x width) k*: " + \
            ", ".join(f"L={d}: {k[0]}" for d, k in sorted(control_k.items()))
    if control_beats:
        evidence += "; " + "; ".join(control_beats)
    measured = {"k_star": result["k_star"], "errors": table, "control": control_rows,
                "control_k_star": {str(d): k for d, k in sorted(control_k.items())},
                "rule": {**{k: result[k] for k in ("fitted", "saturated", "decreasing", "geometric", "linear",
                                                  "delta_chi2", "margin", "verdict", "reason")},
                         "rule_written": c1_rule.WRITTEN},
                "recipe": recipe(doc)}
    if fewest < MIN_SEEDS:
        return make_verdict(INCONCLUSIVE, evidence + f" (a configuration has fewer than {MIN_SEEDS} seeds)", **measured)
    if result["verdict"] == NOT_REPRODUCED:
        return make_verdict(NOT_REPRODUCED, evidence + f" ({result['reason']})", **measured)
    if result["verdict"] == REPRODUCED and not control_beats:
        return make_verdict(REPRODUCED, evidence + f" ({result['reason']})", **measured)
    why = result["reason"] if result["verdict"] != REPRODUCED else "a control learns more"
    return make_verdict(INCONCLUSIVE, evidence + f" ({why})", **measured)


def judge_c7(res: Results) -> Dict[str, Any]:
    """C7 rule (graph connectivity on path-heavy graphs; construction depth B(n) = max(2,
    ceil(log2(n-1)) + 1), 4 at n = 8 and 5 at n = 16). Per n: L*(n) = the smallest trained depth
    whose mean error is < 0.05. reproduced: every n is learned at some depth <= B(n), L*(n) grows
    with n (strictly, between the smallest and the largest n), and no capacity control (twice the
    heads and width) at a depth below L*(n) learns; not reproduced: L*(n) decreases as n grows, a
    control below L*(n) learns (the threshold is then one of width, not depth), or some n is
    learned only above B(n) while every configuration is decided; inconclusive otherwise
    (undecided configurations, an n learned at no depth: a budget artefact is not excluded, or
    equal L* at every n).
    Recipes (issue 25; the change for mixed training written before those sweeps ran): hard-only
    (the paths graphs on n vertices alone), mixed (one model per n on the paths graphs over span =
    4..n of the n vertices, the others isolated: shorter paths are easier; n = 8: spans 4, 6, 8;
    n = 16: 4, 8, 12, 16) and curriculum (the smallest span first, the next added at 99% accuracy).
    A mixed or curriculum recipe is judged by the same rule on its span = n conditions (the
    hard-only distribution) and on the depths it trained (2-4 at n = 8, 3-5 at n = 16). The
    claim's verdict is the mixed recipe's when both its sweeps are complete, else the hard-only
    sweep's; every recipe's verdict is reported."""
    return by_recipe(res, C7_RECIPES, _judge_c7_one)


#: The sweeps of each of C7's recipes (labels).
C7_RECIPES = {HARD_ONLY: ("connectivity",), MIXED: ("connectivity_mixed_n8", "connectivity_mixed_n16"),
              CURRICULUM: ("connectivity_curriculum_n8", "connectivity_curriculum_n16")}


def c7_items(docs: Sequence[Dict[str, Any]]) -> List[Tuple[int, Dict[str, Any], str]]:
    """``(n, doc, condition)`` of every hard instance in C7's sweeps: every condition of a hard-only
    sweep; of a span sweep, the condition whose span is n (or 0 = n)."""
    items = []
    for doc in docs:
        params = doc.get("settings", {}).get("conditions") or []
        for i, name in enumerate(conditions(doc)):
            p = params[i] if i < len(params) else {}
            if "span" in p and p["span"] not in (0, p["n"]):
                continue
            items.append((int(p["n"]) if "n" in p else param_of(name, "n"), doc, name))
    return sorted(items, key=lambda x: x[0])


def _judge_c7_one(docs: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    from depthcraft.rasp_programs.connectivity import connectivity_layers

    rows, measured = [], {}
    lstar: Dict[int, Optional[int]] = {}
    undecided, width_limited, above = False, [], []
    for n, doc, c in c7_items(docs):
        ds = depths(doc)
        ctrl_depths = sorted({int(r["depth"]) for r in select(doc, control=True)})
        bound = connectivity_layers(n)
        st = {L: stat(doc, c, depth=L) for L in ds}
        ctrl = {L: stat(doc, c, depth=L, control=True) for L in ctrl_depths}
        ctrl = {L: s for L, s in ctrl.items() if s.errors}
        undecided |= any(not s.decided for s in (*st.values(), *ctrl.values()))
        ok = [L for L in ds if st[L].learns]
        lstar[n] = ok[0] if ok else None
        if lstar[n] is not None:
            width_limited += [f"n={n}: control L={L} learns" for L, s in ctrl.items() if L < lstar[n] and s.learns]
            if lstar[n] > bound:
                above.append(n)
        label = f"n={n}" if c == f"n={n}" else f"n={n} ({c})"
        rows.append(f"{label} (construction depth {bound}): " + ", ".join(f"L={L} {s.text()}" for L, s in st.items())
                    + "".join(f", control L={L} (2x heads, 2x width) {s.text()}" for L, s in ctrl.items())
                    + f" -> smallest learning depth {lstar[n] if lstar[n] is not None else 'none'}")
        measured[f"n={n}"] = {"construction_depth": bound, "smallest_depth": lstar[n],
                              "errors": {str(L): s.to_json() for L, s in st.items()},
                              "control": {str(L): s.to_json() for L, s in ctrl.items()}}
    ns = sorted(lstar)
    learned = [lstar[n] for n in ns if lstar[n] is not None]
    recipes = list(dict.fromkeys(recipe(d) for d in docs))
    evidence = "; ".join(rows) + f" [{'; '.join(recipes)}]"
    measured["recipe"] = recipes[0] if len(recipes) == 1 else {f"sweep {i + 1}": r for i, r in enumerate(recipes)}
    decreasing = any(a > b for a, b in zip(learned, learned[1:]))
    if width_limited:
        evidence += "; " + "; ".join(width_limited)
    if decreasing or width_limited:
        return make_verdict(NOT_REPRODUCED, evidence, **measured)
    if undecided:
        return make_verdict(INCONCLUSIVE, evidence + f" (a configuration has fewer than {MIN_SEEDS} seeds)", **measured)
    if above:
        return make_verdict(NOT_REPRODUCED, evidence + f"; learned only above the construction's depth at n = "
                            f"{', '.join(map(str, above))}", **measured)
    if len(learned) == len(ns) >= 2 and learned[-1] > learned[0]:
        return make_verdict(REPRODUCED, evidence, **measured)
    if len(learned) < len(ns):
        evidence += BUDGET_NOTE.replace("the claimed depth fails", "an n is learned at no trained depth")
    return make_verdict(INCONCLUSIVE, evidence, **measured)


#: ``depthcraft published``'s results (issue 31): the k-hop paper's own trained models.
PUBLISHED_RESULTS = f"{ROOT}/published/results.json"
#: The id of the claims table's row for C1 judged on the authors' models.
C1_AUTHORS = "C1, the authors' models"


def published_c1(root: pathlib.Path) -> Optional[Dict[str, Any]]:
    """C1's rule (:mod:`verify.crosscheck.c1`, written 2026-12-07) on the authors' published models,
    from ``results/crosscheck/published/results.json`` (None when absent or without the four
    fresh-sample 4-head models). Two judgements, each with both fits' numbers: our evaluation of
    their models (depths 2-5, eval mode, every k = 1..16, the ratio estimator's standard errors) and
    their errors.json (depths 2-6, dropout on, 100 inputs per k, the binomial standard-error bound).
    One model per depth (the authors trained one seed). The row's verdict is the eval-mode one when
    the errors.json one agrees, else inconclusive."""
    path = pathlib.Path(root) / PUBLISHED_RESULTS
    if not path.is_file():
        return None
    with open(path, encoding="utf-8") as fh:
        doc = json.load(fh)
    c1 = doc.get("c1") or {}
    ours, theirs = c1.get("ours"), c1.get("theirs")
    if not ours:
        return None
    verdict = ours["verdict"] if theirs is None or theirs["verdict"] == ours["verdict"] else INCONCLUSIVE
    n = (doc.get("protocol") or {}).get("inputs_per_k")
    evidence = (f"the authors' 100k-step models (4 heads, width 128, fresh samples), evaluated here without "
                f"dropout on {n} fresh inputs per k: {c1_rule.describe(ours)} ({ours['reason']})")
    if theirs:
        evidence += f"; their errors.json (dropout on, 100 inputs per k, L = 2-6): {c1_rule.describe(theirs)} " \
                    f"({theirs['reason']})"
    evidence += f"; rule of {c1_rule.WRITTEN} (verify/crosscheck/c1.py)"
    return {"id": C1_AUTHORS, "source": "Sanford, Hsu & Telgarsky (ICML 2024)",
            "statement": "each added layer roughly doubles the largest k learned with small error, on the "
                         "paper's own published models",
            "results": f"{ROOT}/published/",
            "sweeps": [{"label": "published", "command": "depthcraft published HOP_REPO  # a checkout of "
                        "github.com/chsanford/hop-induction-heads", "results": PUBLISHED_RESULTS, "present": True}],
            "rule": rule_text(published_c1.__doc__ or ""),
            "verdict": verdict, "evidence": evidence,
            "measured": {"eval_mode": ours, "errors_json": theirs, "inputs_per_k": n}, "recipes": {}}
