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
                  "smallest_depth", "control", "verdict", "note", "claim_depth", "claim_text"
                  (the preset's claimed depth, None without one),
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
                 "errors": errors, "smallest_depth": smallest, "control": control,
                 "claim_depth": cfg.claim(cfg.conditions[c]) if cfg.claim is not None else None,
                 "claim_text": cfg.claim_text}
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


#: Figure conventions (every task's sweep): colours of the two depth marks.
CONSTRUCTION_STYLE = {"color": "tab:cyan", "ls": "-", "lw": 2.5}
PAPER_STYLE = {"color": "tab:orange", "ls": "--", "lw": 2.0}


def paper_depth(results: Dict[str, Any], entry: Dict[str, Any]) -> Dict[str, Any]:
    """The paper's depth for one condition of a sweep, and how to label it.

    The preset's claim (``claim_depth`` / ``claim_text`` in the summary; for results written
    before they were recorded, recomputed from the preset named in ``results``) when there is
    one; else the theorem's bound the construction cites (``bound`` / ``bound_formula``).

    Returns:
        ``{"depth": int or None, "label": str, "kind": "claim" | "upper" | "lower"}``.
    """
    depth, text = entry.get("claim_depth"), entry.get("claim_text")
    if depth is None and "claim_depth" not in entry:
        depth, text = _preset_claim(results, entry)
    if depth is not None:
        lower = "lower bound" in (text or "")
        what = "paper's lower bound" if lower else "paper's claim"
        return {"depth": int(depth), "kind": "lower" if lower else "claim",
                "label": f"{what} L={depth}" + (f": {text}" if text else "")}
    bound = entry.get("bound")
    if bound is None:
        return {"depth": None, "kind": "claim", "label": "no paper depth"}
    lower = entry.get("bound_kind") == "lower"
    what = "paper's lower bound" if lower else "paper's bound (depth that suffices)"
    formula = entry.get("bound_formula")
    return {"depth": int(bound), "kind": "lower" if lower else "upper",
            "label": f"{what} L={bound}" + (f": {formula}" if formula else "")}


def _preset_claim(results: Dict[str, Any], entry: Dict[str, Any]):
    """(claim depth, claim text) from the preset of ``results`` (None, None when it has none)."""
    from depthcraft.verify.crosscheck.presets import get_preset

    settings = results.get("settings", {})
    preset = settings.get("preset") or results.get("preset")
    for task in dict.fromkeys([results.get("task"), str(results.get("task", "")).removesuffix("_dense")]):
        try:
            p = get_preset(task, preset)
        except Exception:  # noqa: BLE001 - an unknown (task, preset): no claim to draw
            continue
        if p.claim is None:
            return None, None
        try:
            return p.claim(entry.get("params", {})), p.claim_text
        except Exception:  # noqa: BLE001 - the claim does not apply to this condition
            return None, None
    return None, None


def setting_text(results: Dict[str, Any]) -> str:
    """One line for a figure: the task parameters shared by every condition, steps, batch, lr,
    width, heads, blocks, embedding, seeds and supervision."""
    st = results.get("settings", {})
    conds = st.get("conditions") or [{}]
    shared = {k: v for k, v in conds[0].items() if all(c.get(k) == v for c in conds)}
    names = {"n": "N", "vocab": "|Σ|"}
    params = ", ".join(f"{names.get(k, k)}={v}" for k, v in shared.items()
                       if not isinstance(v, (list, dict)) and k not in ("distribution", "seed", "split"))
    m, t = st.get("model", {}), st.get("train", {})
    steps = sorted({r.get("steps_done") or r.get("steps") for r in results.get("runs", [])} - {None})
    steps_text = "-".join(str(x) for x in (steps[:1] + steps[-1:] if len(steps) > 1 else steps)) or str(t.get("steps"))
    block = ("MLP" if m.get("mlp") else "attention-only") + (", LN" if m.get("layer_norm") else "")
    sup = results.get("supervision", {})
    parts = [f"{results.get('task')} ({results.get('preset')})", params, f"steps {steps_text}",
             f"batch {t.get('batch')}", f"lr {t.get('lr')}", f"width {m.get('width')}", f"heads {m.get('heads')}",
             block, f"{m.get('embedding', 'learned')} embedding", f"seeds {st.get('seeds')}"]
    if sup.get("dense"):
        parts.append("dense supervision")
    return " · ".join(p for p in parts if p)


def write_figures(out_dir: str, results: Dict[str, Any]) -> List[str]:
    """Write ``error_by_depth.png`` and ``loss_curves.png`` (:func:`write_plot`,
    :func:`write_loss_curves`) atomically; returns their paths."""
    return [write_plot(out_dir, results), write_loss_curves(out_dir, results)]


def write_plot(out_dir: str, results: Dict[str, Any]) -> str:
    """Write ``out_dir/error_by_depth.png`` atomically; returns its path.

    The convention of every task's figure:

    * left: error (mean over seeds, bars = standard deviation, dots = each seed) against the
      condition (the swept parameter), one curve per depth L; open squares: the capacity
      controls (twice the heads and width), at their depth's colour; with a single condition,
      error against depth instead, the depths marked as vertical lines;
    * right: the mean error as a depth x condition grid; per condition the construction's
      measured depth (solid cyan outline) and the paper's depth (dashed orange outline: its
      claim, or the theorem's bound, labelled with its kind: a lower bound is never called the
      construction's);
    * the threshold dashed grey; the setting (shared task parameters, steps, batch, lr, width,
      heads, seeds) under the title; dashed lines: error on the training distribution when the
      evaluation used other parameters (e.g. held-out tokens).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    summary = results["summary"]
    names = [s["condition"] for s in summary]
    depths = sorted({int(d) for s in summary for d in s["errors"]})
    mean = np.full((len(depths), len(names)), np.nan)
    std = np.zeros_like(mean)
    for j, s in enumerate(summary):
        for d, e in s["errors"].items():
            seeds = e.get("seeds") or [e["best"]]  # results written before mean/std were recorded
            mean[depths.index(int(d)), j] = e.get("mean", float(np.mean(seeds)))
            std[depths.index(int(d)), j] = e.get("std", float(np.std(seeds, ddof=1)) if len(seeds) > 1 else 0.0)
    marks = [(s.get("construction_depth"), paper_depth(results, s)) for s in summary]
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 4.8), gridspec_kw={"width_ratios": [1.3, 1]})
    cmap = plt.get_cmap("viridis")
    color = {d: cmap(i / max(len(depths) - 1, 1)) for i, d in enumerate(depths)}
    train_dist = any("errors_training_distribution" in s for s in summary)
    thr = summary[0]["threshold"] if summary else 0.05
    control_done = False
    if len(names) == 1:  # one condition: error against depth
        s0 = summary[0]
        ax.errorbar(depths, mean[:, 0], yerr=std[:, 0], fmt="o-", capsize=3, color=cmap(0.2),
                    label=f"{names[0]} (mean ± std over seeds)")
        for d in depths:
            seeds = s0["errors"][str(d)].get("seeds", [])
            ax.plot([d] * len(seeds), seeds, ".", color="k", alpha=0.35, ms=4)
        if train_dist:
            tdist = s0.get("errors_training_distribution", {})
            ax.plot(depths, [tdist.get(str(d), {}).get("mean", tdist.get(str(d), {}).get("best", np.nan))
                             for d in depths], "s--", color=cmap(0.7),
                    label=f"{names[0]}, training distribution")
        for c in s0.get("control", []):
            ax.plot([c["depth"]], [c["error"]], "s", mfc="none", color="tab:red",
                    label=None if control_done else "capacity control (2x heads, width)")
            control_done = True
        cons, paper = marks[0]
        if cons is not None:
            ax.axvline(cons, **CONSTRUCTION_STYLE, label=f"construction {s0.get('construction')}: L={cons}")
        if paper["depth"] is not None:
            ax.axvline(paper["depth"] + (0.04 if paper["depth"] == cons else 0), **PAPER_STYLE,
                       label=paper["label"])
        ax.set_xticks(depths)
        ax.set_xlabel("attention layers L")
    else:
        x = np.arange(len(names))
        for i, d in enumerate(depths):
            ax.errorbar(x, mean[i], yerr=std[i], fmt="o-", capsize=3, color=color[d], label=f"L = {d}")
            for j, s in enumerate(summary):
                seeds = s["errors"].get(str(d), {}).get("seeds", [])
                ax.plot([j] * len(seeds), seeds, ".", color=color[d], alpha=0.35, ms=4)
            if train_dist:
                y = [(lambda e: e.get("mean", e.get("best", np.nan)))(s.get("errors_training_distribution", {})
                                                                         .get(str(d), {})) for s in summary]
                ax.plot(x, y, "s--", color=color[d], alpha=0.6, label=f"L = {d}, training distribution")
        for j, s in enumerate(summary):
            for c in s.get("control", []):
                ax.plot([j + 0.08], [c["error"]], "s", mfc="none", color=color.get(c["depth"], "tab:red"),
                        label=None if control_done else "capacity control (2x heads, width; colour = its L)")
                control_done = True
        ax.set_xticks(x)
        ax.set_xticklabels([n + "\n" + " ".join(t for t in (f"C{cons}" if cons is not None else "",
                                                              f"P{paper['depth']}" if paper["depth"] is not None
                                                              else "") if t)
                            for n, (cons, paper) in zip(names, marks)], fontsize=8)
        ax.set_xlabel("condition (under each: C = construction's depth, P = paper's depth)", fontsize=8)
    ax.axhline(thr, color="grey", ls="--", lw=1, label=f"threshold {thr:g}")
    ax.set_ylabel("token error (mean ± std over seeds; dots: seeds)")
    finite = np.isfinite(mean)
    ax.set_ylim(-0.02, max(1.0, float(np.nanmax(mean + std)) + 0.02) if finite.any() else 1.0)
    ax.legend(fontsize=7)
    ax.set_title(f"{results['task']} ({results['preset']}): error by depth", fontsize=10)
    im = ax2.imshow(mean, cmap="magma_r", vmin=0, vmax=1, aspect="auto", origin="lower")
    for i in range(len(depths)):
        for j in range(len(names)):
            if np.isfinite(mean[i, j]):
                ax2.text(j, i, f"{mean[i, j]:.3f}", ha="center", va="center", fontsize=7,
                         color="white" if mean[i, j] > 0.5 else "black")
    kinds = set()
    for j, (cons, paper) in enumerate(marks):
        if cons in depths:
            i = depths.index(cons)
            ax2.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, ec=CONSTRUCTION_STYLE["color"],
                                        lw=CONSTRUCTION_STYLE["lw"]))
        if paper["depth"] in depths:
            i = depths.index(paper["depth"])
            ax2.add_patch(plt.Rectangle((j - 0.42, i - 0.42), 0.84, 0.84, fill=False, ec=PAPER_STYLE["color"],
                                        ls="--", lw=PAPER_STYLE["lw"]))
            kinds.add(paper["kind"])
    paper_word = {"lower": "paper's lower bound", "upper": "paper's bound", "claim": "paper's claim"}
    cons_drawn = any(cons in depths for cons, _ in marks)
    handles = [Line2D([], [], **CONSTRUCTION_STYLE, label="construction's measured depth" if cons_drawn else
                      "construction's measured depth: none in these depths"),
               Line2D([], [], **PAPER_STYLE, label=" / ".join(paper_word[k] for k in sorted(kinds)) or
                      "paper's depth")]
    ax2.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(0, -0.1), ncol=1, frameon=False)
    ax2.set_xticks(range(len(names)))
    ax2.set_xticklabels(names, fontsize=8)
    ax2.set_yticks(range(len(depths)))
    ax2.set_yticklabels([str(d) for d in depths])
    ax2.set_ylabel("attention layers L")
    ax2.set_title("mean error; outlined: construction (solid), paper (dashed)", fontsize=9)
    fig.colorbar(im, ax=ax2, fraction=0.046)
    return _finish(fig, results, out_dir, "error_by_depth.png")


def write_loss_curves(out_dir: str, results: Dict[str, Any]) -> str:
    """Write ``out_dir/loss_curves.png`` atomically; returns its path.

    Left: each run's training loss (nats, the logged ``history``) against the optimiser step,
    one colour per depth, controls dashed, one line style per condition when each condition has
    its own models. Right: each run's evaluation error (mean over the
    conditions) at its ``curve`` points (runs without a curve are left out). The setting as in
    :func:`write_plot`.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = results.get("runs", [])
    depths = sorted({r["depth"] for r in runs})
    cmap = plt.get_cmap("viridis")
    color = {d: cmap(i / max(len(depths) - 1, 1)) for i, d in enumerate(depths)}
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(12, 4.4))
    seen = set()
    groups = list(dict.fromkeys(tuple(r["conditions"]) for r in runs))  # one model per condition: styles
    styles = ["-", ":", "-.", (0, (5, 1)), (0, (1, 3))]
    for r in runs:
        g = groups.index(tuple(r["conditions"]))
        key = (r["depth"], r["control"], g)
        label = None if key in seen else (f"L = {r['depth']}" + (" control (2x heads, width)" if r["control"] else "")
                                          + (f", {', '.join(r['conditions'])}" if len(groups) > 1 else ""))
        seen.add(key)
        ls = "--" if r["control"] else styles[g % len(styles)]
        h = r.get("history") or []
        if h:
            ax.plot([p["step"] for p in h], [p["loss"] for p in h], ls, color=color[r["depth"]], lw=1, alpha=0.8,
                    label=label)
        curve = [p for p in r.get("curve") or [] if p.get("error")]
        if curve:
            y = [np.mean([e for e in p["error"].values() if e is not None] or [np.nan]) for p in curve]
            ax2.plot([p["step"] for p in curve], y, ls, color=color[r["depth"]], lw=1, alpha=0.8, label=label)
    ax.set_yscale("log")
    ax.set_xlabel("optimiser step")
    ax.set_ylabel("training loss (nats, log scale)")
    ax.set_title(f"{results['task']} ({results['preset']}): training loss, one line per run", fontsize=10)
    ax2.set_xlabel("optimiser step")
    ax2.set_ylabel("evaluation error (mean over conditions)")
    ax2.set_ylim(-0.02, 1.0)
    ax2.set_title("evaluation error during training (curve points)", fontsize=10)
    for a in (ax, ax2):
        if a.lines:
            a.legend(fontsize=7)
    return _finish(fig, results, out_dir, "loss_curves.png")


def _finish(fig, results: Dict[str, Any], out_dir: str, name: str) -> str:
    """Put the sweep's setting on ``fig``, save it atomically as ``out_dir/name`` and close it.

    Returns the path written. Raises OSError when the file cannot be written.
    """
    import matplotlib.pyplot as plt

    from depthcraft.constructions.files import save_figure_atomic

    fig.suptitle(_wrap(setting_text(results), 150), fontsize=8, y=0.995)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    path = os.path.join(out_dir, name)
    try:
        save_figure_atomic(fig, path, dpi=110)
    finally:
        plt.close(fig)
    return path


def _wrap(text: str, width: int) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width))
