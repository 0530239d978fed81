"""Mușat's claims: C5 (D = 3 retrieval needs the implicit curriculum) and C6 (depth against ceil(log_3 2D))."""

from __future__ import annotations

from typing import Any, Dict, List, Sequence

import numpy as np

from depthcraft.constructions.errors import InputError
from depthcraft.verify.crosscheck.claims.stats import (CURRICULUM, FAILED, HARD_ONLY, INCONCLUSIVE, LEARNED,
    MIXED, NOT_REPRODUCED, REPRODUCED, Results, Stat, by_recipe, combine, conditions, depths, hard_condition,
    make_verdict, recipe, select, stat)

def judge_c5(res: Results) -> Dict[str, Any]:
    """C5 rule (D = 3 retrieval, answer slots, the final answer at the last position).
    Without the curriculum (``targets=final``): not learned when every run at every trained
    depth has final-answer error >= 0.25. With it (``targets=every``): learned when some
    trained depth's mean final-answer error is < 0.05. Order: in the curriculum runs of the
    shallowest depth that learns, hop h's learning step (first evaluation at which its error
    is < 0.05, from the run's ``curve``) does not decrease with h in the median over seeds.
    reproduced: all three; not reproduced: a no-curriculum run learns (< 0.05 mean at a
    depth), or the hops are learned out of order; inconclusive otherwise (the curriculum
    not learning at any depth included: then the budget may be why nothing learns).
    Recipes (issue 25; the change for mixed training written before those sweeps ran): hard-only
    (D = 3 alone), mixed (D = 1, 2, 3 in one model per targets value) and curriculum (D = 1 first,
    the next D added at 99% accuracy); a mixed or curriculum sweep is judged by the same rule on
    its D = 3 conditions (the largest D with each targets value), the per-hop order read from the
    D = 3 condition's curve. The claim's verdict is the mixed sweep's when it is complete, else the
    hard-only sweep's; every recipe's verdict is reported."""
    return by_recipe(res, C5_RECIPES, _judge_c5_one)


#: The sweeps of each of C5's recipes (labels).
C5_RECIPES = {HARD_ONLY: ("retrieval",), MIXED: ("retrieval_mixed",), CURRICULUM: ("retrieval_curriculum",)}


def _judge_c5_one(docs: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    doc = docs[0]
    every = hard_condition(doc, "d", "targets=every")
    final = hard_condition(doc, "d", "targets=final")
    ds = depths(doc)
    no_cur = {d: stat(doc, final, depth=d, position=-1) for d in ds}
    cur = {d: stat(doc, every, depth=d, position=-1) for d in ds}
    all_runs_high = all(all(e >= FAILED for e in s.errors) and s.decided for s in no_cur.values())
    no_cur_learns = any(s.learns for s in no_cur.values())
    learned = [d for d in ds if cur[d].learns]
    cur_fails = not learned and all(s.decided for s in cur.values())
    order_v, order_t, order_m = INCONCLUSIVE, "per-hop order not measured", None
    if learned:
        d = learned[0]
        runs = select(doc, depth=d, condition=every)
        hop_steps = []
        for r in runs:
            curve = r.get("curve")
            if not curve:
                hop_steps = []
                break
            final_point = {"step": int(r.get("steps") or 0),
                           "error_per_position": {every: next(e["error_per_position"] for e in r["eval"]
                                                              if e["condition"] == every)}}
            hop_steps.append(_hop_learning_steps([*curve, final_point], every))
        if hop_steps:
            med = [float(np.median([h[i] for h in hop_steps])) for i in range(len(hop_steps[0]))]
            ordered = all(b >= a for a, b in zip(med, med[1:]))
            order_v = REPRODUCED if ordered else NOT_REPRODUCED
            order_t = f"L={d}: median step each hop's error falls below {LEARNED}: " + \
                      ", ".join(f"hop {i + 1} {m:.0f}" for i, m in enumerate(med))
            order_m = {"depth": d, "median_steps": med, "per_seed": hop_steps}
    if no_cur_learns:
        v = NOT_REPRODUCED
    elif cur_fails:  # nothing learns with or without the curriculum: the budget may be the reason
        v = INCONCLUSIVE
    else:
        v = combine([REPRODUCED if all_runs_high else INCONCLUSIVE, REPRODUCED if learned else INCONCLUSIVE,
                     order_v])
    evidence = (f"final-answer error ({final}) without per-hop targets: "
                + "; ".join(f"L={d} {s.text()}" for d, s in no_cur.items())
                + f"; with per-hop targets (the implicit curriculum, {every}): "
                + "; ".join(f"L={d} {s.text()}" for d, s in cur.items())
                + f"; {order_t} [{recipe(doc)}]")
    return make_verdict(v, evidence, without={str(d): s.to_json() for d, s in no_cur.items()},
                        with_curriculum={str(d): s.to_json() for d, s in cur.items()}, order=order_m, recipe=recipe(doc))


def _hop_learning_steps(curve: List[Dict[str, Any]], condition: str) -> List[float]:
    """Per hop (the last D model positions), the first curve step with error < LEARNED
    (the run's last step + 1 when never)."""
    first = curve[0]["error_per_position"][condition]
    d = _hop_count(condition)
    out = []
    n = len(first)
    last = max(c["step"] for c in curve)
    for h in range(d):
        pos = n - d + h
        step = next((c["step"] for c in curve
                     if (c["error_per_position"][condition][pos] is not None
                         and c["error_per_position"][condition][pos] < LEARNED)), last + 1)
        out.append(float(step))
    return out


def _hop_count(condition: str) -> int:
    for part in condition.split():
        if part.startswith("d="):
            return int(part[2:])
    raise InputError(f"condition {condition!r} does not name d")


def judge_c6(res: Results) -> Dict[str, Any]:
    """C6 rule (retrieval with the curriculum, final-answer error; bound B(D) = ceil(log_3 2D),
    a lower bound). Per D: the smallest depth whose mean error is < 0.05. reproduced: at least
    two values of D are learned at some depth, none below B(D), the depth-(B-1) capacity
    controls fail (where B > 1), and at least one D is learned at exactly B(D) (the bound is met
    by training, not only respected); not reproduced: some D is learned below B(D) (by the
    model or its control); inconclusive otherwise."""
    from depthcraft.rasp_programs.retrieval import lower_bound_layers

    doc = res["retrieval"]
    ds = depths(doc)
    rows, below, at_bound, learned = [], [], [], []
    measured: Dict[str, Any] = {}
    for c in conditions(doc):
        d = _hop_count(c)
        bound = lower_bound_layers(d)
        st = {L: stat(doc, c, depth=L, position=-1) for L in ds}
        ctrl = stat(doc, c, depth=bound - 1, control=True, position=-1) if bound > 1 else Stat([])
        ok = [L for L in ds if st[L].learns]
        smallest = ok[0] if ok else None
        if smallest is not None:
            learned.append(d)
            if smallest < bound:
                below.append(d)
            if smallest == bound:
                at_bound.append(d)
        if ctrl.learns:
            below.append(d)
        rows.append(f"D={d} (bound {bound}): " + ", ".join(f"L={L} {s.text()}" for L, s in st.items())
                    + (f", control L={bound - 1} {ctrl.text()}" if ctrl.errors else "")
                    + f" -> smallest learning depth {smallest if smallest is not None else 'none'}")
        measured[f"d={d}"] = {"bound": bound, "smallest_depth": smallest,
                              "errors": {str(L): s.to_json() for L, s in st.items()},
                              "control": ctrl.to_json() if ctrl.errors else None}
    if below:
        v = NOT_REPRODUCED
    elif len(learned) >= 2 and at_bound:
        v = REPRODUCED
    else:
        v = INCONCLUSIVE
    measured["recipe"] = recipe(doc)
    return make_verdict(v, "; ".join(rows) + f" [{recipe(doc)}]", **measured)


