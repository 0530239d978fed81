"""``results.json`` and the plot of a cross-check sweep.

``results.json``::

    {"task", "preset", "command", "complete", "device", "seconds" (this invocation; resumed runs
     cost only their evaluation), "train_seconds_total" (training wall time of every run, summed
     over resumed parts), "eval_seconds_total", "settings",
     "runs": [{"run_id", "depth", "heads", "width", "seed", "control", "conditions",
               "config", "steps", "final_loss", "train_seconds", "error": {condition: error},
               "eval": [{"condition", "error", "loss", "error_per_position", ...}],
               "alignment": [...], "history": [...], "curve": [{"step", "error", "loss", ...}],
               "plateau": {condition: {"plateau_loss", "margin", "exit_step"}},
               "steps_done", "exit_reason", "trainer", "sampler", "seeds_together"}],
     "supervision": {"dense", "task", "scored_positions_per_sequence"},
     "summary": [{"condition", "params", "construction", "construction_depth", "bound",
                  "bound_formula", "bound_source", "errors": {depth: {"best", "mean", "std", "seeds"}},
                  "plateau_exit_steps": {depth: [step or null per seed]},
                  "smallest_depth", "control", "verdict", "note",
                  "errors_training_distribution", "smallest_depth_training_distribution"
                  (only when evaluation samples other parameters, e.g. held-out tokens)}]}

Verdict of a condition (SPEC §7): the *smallest trained depth* is the smallest
depth whose best seed's error is below the threshold (best over seeds: a
depth can learn the task if some seed learns it). Against the construction's
depth bound B:

* ``agree``: the smallest trained depth is B (and depth B-1 was trained and failed);
* ``disagree``: it is below B (training beat the bound: the lower side of the
  claim fails at this size), or above B / never reached with B in the sweep
  (training did not find a solution the construction shows exists);
* ``inconclusive``: no bound, or the sweep does not include the depths needed
  to decide (B-1 missing when B succeeds; B missing when nothing succeeds).
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Sequence

import numpy as np


def depth_verdict(smallest: Optional[int], bound: Optional[int], depths: Sequence[int], kind: str = "upper",
                  construction_depth: Optional[int] = None) -> Dict[str, str]:
    """Compare the smallest trained depth under the threshold with the bound.

    An ``upper`` bound (a construction's depth, or a paper's claimed depth) predicts a
    threshold: depth ``bound`` succeeds and ``bound - 1`` fails. A ``lower`` bound (an
    impossibility result) only predicts that depths below it fail; it says nothing
    about which depth suffices.
    """
    if bound is None:
        return {"verdict": "inconclusive", "note": "no depth bound for this condition"}
    if kind == "lower":
        if smallest is None:
            built = f" (the construction uses {construction_depth})" if construction_depth is not None else ""
            return {"verdict": "inconclusive",
                    "note": f"no trained depth up to {max(depths)} reached the threshold; the lower bound "
                            f"{bound} says nothing about which depth suffices{built}"}
        if smallest < bound:
            return {"verdict": "disagree",
                    "note": f"depth {smallest} below the lower bound {bound} reached the threshold"}
        return {"verdict": "agree",
                "note": f"smallest successful depth {smallest} >= lower bound {bound}"}
    if smallest is None:
        if max(depths) < bound:
            return {"verdict": "inconclusive",
                    "note": f"no trained depth reached the threshold; the sweep stops at {max(depths)} < bound {bound}"}
        return {"verdict": "disagree",
                "note": f"no trained depth up to {max(depths)} reached the threshold, though depth {bound} suffices"}
    if smallest < bound:
        return {"verdict": "disagree", "note": f"depth {smallest} < bound {bound} already reached the threshold"}
    if smallest > bound:
        return {"verdict": "disagree", "note": f"training needed depth {smallest} > bound {bound}"}
    if bound - 1 not in depths:
        return {"verdict": "inconclusive",
                "note": f"depth {bound} reached the threshold, but depth {bound - 1} was not trained"}
    return {"verdict": "agree", "note": f"depth {bound} reached the threshold, depth {bound - 1} did not"}


def _bound_word(entry: Dict[str, Any]) -> str:
    return "lower bound" if entry.get("bound_kind") == "lower" else "bound"


def _by_depth(errs: Dict[int, List[float]]) -> Dict[str, Dict[str, Any]]:
    """Per depth: best and mean error over seeds, ``std`` (sample standard deviation, ddof = 1;
    0 for one seed) and every seed's error."""
    return {str(d): {"best": round(min(v), 5), "mean": round(float(np.mean(v)), 5),
                     "std": round(float(np.std(v, ddof=1)) if len(v) > 1 else 0.0, 5),
                     "seeds": [round(x, 5) for x in v]} for d, v in sorted(errs.items())}


def summarise(cfg, infos, records: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Per condition: errors by depth, smallest successful depth, control result, verdict."""
    out = []
    for c, name in enumerate(cfg.names):
        info = infos[c]
        by_depth: Dict[int, List[float]] = {}
        train_dist: Dict[int, List[float]] = {}
        plateau_steps: Dict[int, List[Optional[int]]] = {}
        control = []
        for r in records:
            err = r["error"].get(name)
            if name not in r["conditions"] or err is None:
                continue
            if "plateau" in r and name in r["plateau"]:
                key = f"{r['depth']}c" if r["control"] else r["depth"]
                plateau_steps.setdefault(key, []).append(r["plateau"][name]["exit_step"])
            if r["control"]:
                control.append({"depth": r["depth"], "heads": r["heads"], "width": r["width"], "seed": r["seed"],
                                "error": err})
            else:
                by_depth.setdefault(r["depth"], []).append(err)
                other = (r.get("error_training_distribution") or {}).get(name)
                if other is not None:
                    train_dist.setdefault(r["depth"], []).append(other)
        errors = _by_depth(by_depth)
        ok = [d for d, v in sorted(by_depth.items()) if min(v) < cfg.threshold]
        smallest = ok[0] if ok else None
        trained = sorted(by_depth)
        entry = {"condition": name, "params": dict(cfg.conditions[c]), "construction": info.name,
                 "construction_depth": info.depth, "bound": info.bound, "bound_formula": info.bound_formula,
                 "bound_source": info.bound_source, "bound_kind": info.bound_kind,
                 "construction_note": info.note or None, "threshold": cfg.threshold,
                 "errors": errors, "smallest_depth": smallest, "control": control}
        if plateau_steps:  # per depth ("<depth>c" = capacity control), each seed's plateau exit step
            entry["plateau_exit_steps"] = {str(k): v for k, v in sorted(plateau_steps.items(), key=lambda kv: str(kv[0]))}
        if train_dist:  # evaluated on other parameters (e.g. held-out tokens): the training distribution too
            ok_train = [d for d, v in sorted(train_dist.items()) if min(v) < cfg.threshold]
            entry["errors_training_distribution"] = _by_depth(train_dist)
            entry["smallest_depth_training_distribution"] = ok_train[0] if ok_train else None
        entry.update(depth_verdict(smallest, info.bound, trained, info.bound_kind, info.depth) if trained else
                     {"verdict": "inconclusive", "note": "no finished run covers this condition"})
        if control and info.bound is not None:
            best = min(x["error"] for x in control if x["depth"] == info.bound - 1) \
                if any(x["depth"] == info.bound - 1 for x in control) else None
            if best is not None:
                entry["note"] += (f"; control at depth {info.bound - 1} with twice the heads and width: "
                                  f"error {best:.3f} ({'below' if best < cfg.threshold else 'not below'} threshold)")
        out.append(entry)
    return out


def build_results(cfg, infos, records, runs, command: Optional[str], seconds: float,
                  device: Dict[str, Any]) -> Dict[str, Any]:
    """The ``results.json`` dict (``complete`` is False until every planned run finished)."""
    return {
        "task": cfg.task,
        "preset": cfg.preset,
        "command": command,
        "complete": len(records) == len(runs),
        "planned_runs": [r.run_id for r in runs],
        "device": device,
        "seconds": round(seconds, 1),
        "train_seconds_total": round(sum(r["train_seconds"] for r in records), 1),
        "eval_seconds_total": round(sum(r["eval_seconds"] for r in records), 1),
        "settings": cfg.to_json(),
        "constructions": [dict(i.to_json(), condition=n) for i, n in zip(infos, cfg.names)],
        "runs": records,
        "summary": summarise(cfg, infos, records),
    }


def write_results(out_dir: str, results: Dict[str, Any]) -> str:
    """Write ``out_dir/results.json`` atomically; returns its path."""
    from depthcraft.constructions.files import write_json_atomic

    path = os.path.join(out_dir, "results.json")
    write_json_atomic(path, results)
    return path


def write_plot(out_dir: str, results: Dict[str, Any]) -> str:
    """Write ``out_dir/error_by_depth.png`` atomically; returns its path.

    Left: error (best seed) against the condition (k or the task parameter), one curve
    per depth, the threshold dashed, each condition's depth bound written under it
    (with a single condition: error against depth, the bound as a vertical line).
    Dashed squares: error on the training distribution, when evaluation used other
    parameters.
    Right: the same errors as a depth x condition grid, the bound's cell outlined.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from depthcraft.constructions.files import save_figure_atomic

    summary = results["summary"]
    names = [s["condition"] for s in summary]
    depths = sorted({int(d) for s in summary for d in s["errors"]})
    grid = np.full((len(depths), len(names)), np.nan)
    for j, s in enumerate(summary):
        for d, e in s["errors"].items():
            grid[depths.index(int(d)), j] = e["best"]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [1.3, 1]})
    x = np.arange(len(names))
    cmap = plt.get_cmap("viridis")
    train_dist = any("errors_training_distribution" in s for s in summary)
    thr = summary[0]["threshold"] if summary else 0.05
    if len(names) == 1:  # one condition: error against depth, the bound as a vertical line
        s0 = summary[0]
        ax.plot(depths, grid[:, 0], "o-", color=cmap(0.2), label=names[0])
        if train_dist:
            ax.plot(depths, [s0.get("errors_training_distribution", {}).get(str(d), {}).get("best", np.nan)
                             for d in depths], "s--", color=cmap(0.7), label=f"{names[0]}, training distribution")
        if s0["bound"] is not None:
            ax.axvline(s0["bound"], color="tab:cyan", lw=2, label=f"{_bound_word(s0)} L={s0['bound']}")
        ax.set_xticks(depths)
        ax.set_xlabel("attention layers L")
    else:
        for i, d in enumerate(depths):
            ax.plot(x, grid[i], "o-", color=cmap(i / max(len(depths) - 1, 1)), label=f"L = {d}")
        if train_dist:
            for i, d in enumerate(depths):
                y = [s.get("errors_training_distribution", {}).get(str(d), {}).get("best", np.nan) for s in summary]
                ax.plot(x, y, "s--", color=cmap(i / max(len(depths) - 1, 1)), alpha=0.6,
                        label=f"L = {d}, training distribution")
        ax.set_xticks(x)
        ax.set_xticklabels([f"{n}\n{_bound_word(s)} L={s['bound']}" if s["bound"] is not None else n
                            for n, s in zip(names, summary)], fontsize=8)
    ax.axhline(thr, color="grey", ls="--", lw=1, label=f"threshold {thr:g}")
    ax.set_ylabel("token error (best seed)")
    ax.set_ylim(-0.02, max(1.0, float(np.nanmax(grid)) + 0.02) if np.isfinite(grid).any() else 1.0)
    ax.legend(fontsize=8)
    title = f"{results['task']} ({results['preset']}): error by depth"
    if train_dist:
        title += "\n(solid: evaluation parameters, dashed: training distribution)"
    ax.set_title(title, fontsize=10)
    im = ax2.imshow(grid, cmap="magma_r", vmin=0, vmax=1, aspect="auto", origin="lower")
    for i in range(len(depths)):
        for j in range(len(names)):
            if np.isfinite(grid[i, j]):
                ax2.text(j, i, f"{grid[i, j]:.3f}", ha="center", va="center", fontsize=8,
                         color="white" if grid[i, j] > 0.5 else "black")
    for j, s in enumerate(summary):
        if s["bound"] in depths:
            i = depths.index(s["bound"])
            ax2.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, ec="tab:cyan", lw=2.5))
    ax2.set_xticks(range(len(names)))
    ax2.set_xticklabels(names, fontsize=8)
    ax2.set_yticks(range(len(depths)))
    ax2.set_yticklabels([str(d) for d in depths])
    ax2.set_ylabel("attention layers L")
    ax2.set_title("error (outlined: the construction's bound)", fontsize=10)
    fig.colorbar(im, ax=ax2, fraction=0.046)
    fig.tight_layout()
    path = os.path.join(out_dir, "error_by_depth.png")
    try:
        save_figure_atomic(fig, path, dpi=110)
    finally:
        plt.close(fig)
    return path
