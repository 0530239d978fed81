"""The training claims' figures: ``results/crosscheck/<claim>/claim.png`` and the per-recipe curves."""

from __future__ import annotations

import os
import pathlib
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from depthcraft.verify.crosscheck.claims.chen_zou import C3_RECIPES
from depthcraft.verify.crosscheck.claims.musat import C5_RECIPES
from depthcraft.verify.crosscheck.claims.registry import CLAIMS
from depthcraft.verify.crosscheck.claims.sanford import C7_RECIPES, c7_items
from depthcraft.verify.crosscheck.claims.stats import (CURRICULUM, HARD_ONLY, LEARNED, LEARNED_LOSS, MIXED,
    NOT_RUN, ROOT, Results, condition_param, depths, hard_condition, select)

def write_figures(root: pathlib.Path, claims_doc: Dict[str, Any]) -> List[str]:
    """``results/crosscheck/<claim>/claim.png`` for every judged claim: C1 k* by depth beside the
    paper's, C2/C3/C6 error by depth (mean ± std over seeds, controls as open markers), C4 the
    median learning step by heads, C5 each hop's error over training. Returns the paths written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from depthcraft.constructions.files import save_figure_atomic

    written = []
    for c in claims_doc.get("claims", []):
        m = c.get("measured") or {}
        if c["verdict"] == NOT_RUN or not m:
            continue
        fig, ax = plt.subplots(figsize=(6.4, 4.0))
        drawn = _FIGURES.get(c["id"], lambda *_: False)(ax, m)
        if not drawn:
            plt.close(fig)
            continue
        ax.set_title(f"{c['id']} ({c['source']}): {c['verdict']}\n{_wrap(c['statement'], 80)}", fontsize=9)
        ax.legend(fontsize=7)
        setting = "\n".join(_wrap(r, 110) for r in _recipes(m))  # the setting on the figure, as the sweeps'
        lines = setting.count("\n") + 1 if setting else 0
        fig.set_size_inches(6.4, 4.0 + 0.12 * lines)
        if setting:
            fig.text(0.01, 0.005, setting, fontsize=6, va="bottom", ha="left")
        fig.tight_layout(rect=(0, (0.12 * lines + 0.05) / (4.0 + 0.12 * lines), 1, 1))
        path = pathlib.Path(root) / c["results"] / "claim.png"
        os.makedirs(path.parent, exist_ok=True)
        try:
            save_figure_atomic(fig, str(path), dpi=110)
        finally:
            plt.close(fig)
        written.append(str(path))
    written += write_recipe_figures(pathlib.Path(root))
    return written


#: Claims judged per recipe, their recipes' sweeps and how to find the hard instance's curve.
_RECIPE_CLAIMS = {"C3": C3_RECIPES, "C5": C5_RECIPES, "C7": C7_RECIPES}


def hard_curves(claim_id: str, doc: Dict[str, Any]) -> Dict[str, List[Tuple[int, float]]]:
    """The training curves of a sweep's hard instance, averaged over seeds, one per (non-control)
    depth and readout: ``{"L=3 targets=final (final answer)": [(step, mean error), ...]}`` (C5: each
    hop of the per-hop targets too; C7: ``"L=3 n=8"``), labelled alike in every recipe.

    C3: the m = 4 error; C5: the error of each hop of D = 3 with per-hop targets and the final-answer
    error (last position) without; C7: the span = n error (n from the sweep's conditions). Only steps every seed has.
    """
    if claim_id == "C3":
        cond = hard_condition(doc, "m")
        reads = [(cond, None, cond)]
    elif claim_id == "C5":
        every, final = (hard_condition(doc, "d", f"targets={t}") for t in ("every", "final"))
        hops = condition_param(doc, every, "d")
        reads = [(every, h - hops - 1, f"targets=every hop {h}" + (" (final answer)" if h == hops else ""))
                 for h in range(1, hops + 1)] + [(final, -1, "targets=final (final answer)")]
    else:
        reads = [(c, None, f"n={n}") for n, _, c in c7_items([doc])]
    out: Dict[str, List[Tuple[int, float]]] = {}
    for depth in depths(doc):
        for cond, pos, label in reads:
            per_step: Dict[int, List[float]] = {}
            runs = select(doc, depth=depth, condition=cond)
            for r in runs:
                for point in r.get("curve") or []:
                    if pos is None:
                        e = (point.get("error") or {}).get(cond)
                    else:
                        per = (point.get("error_per_position") or {}).get(cond) or []
                        e = per[pos] if per else None
                    if e is not None:
                        per_step.setdefault(int(point["step"]), []).append(float(e))
            pts = [(st, float(np.mean(v))) for st, v in sorted(per_step.items()) if len(v) == len(runs)]
            if pts:
                out[f"L={depth} {label}"] = pts
    return out


def write_recipe_figures(root: pathlib.Path) -> List[str]:
    """``results/crosscheck/<claim>/recipes.png`` for C3, C5 and C7 when more than one recipe has a
    complete sweep: the hard instance's error over training (mean over seeds; one colour per depth
    and readout, one line style per recipe: hard-only solid, mixed dashed, curriculum dotted).
    Returns the paths written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from depthcraft.constructions.files import save_figure_atomic

    styles = {HARD_ONLY: "-", MIXED: "--", CURRICULUM: ":"}
    written = []
    for claim in CLAIMS:
        recipes = _RECIPE_CLAIMS.get(claim.id)
        if recipes is None:
            continue
        res = Results(root, claim.id, claim.sweeps)
        present = {rec: labels for rec, labels in recipes.items() if all(lab in res.docs for lab in labels)}
        if len(present) < 2:
            continue
        fig, ax = plt.subplots(figsize=(7.0, 4.4))
        colours: Dict[str, str] = {}
        for rec, labels in present.items():
            for lab in labels:
                for name, pts in hard_curves(claim.id, res[lab]).items():
                    colour = colours.setdefault(name, f"C{len(colours) % 10}")
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], styles[rec], color=colour,
                            label=f"{rec}: {name}", lw=1.3)
        ax.set_xlabel("training step")
        ax.set_ylabel("error on the claim's instance (mean over seeds)")
        ax.set_ylim(-0.02, 1.0)
        ax.set_title(f"{claim.id}: hard-only (solid), mixed (dashed), curriculum (dotted)", fontsize=9)
        ax.legend(fontsize=5.5, ncol=2)
        fig.tight_layout()
        path = root / ROOT / claim.id.lower() / "recipes.png"
        try:
            save_figure_atomic(fig, str(path), dpi=100)
        finally:
            plt.close(fig)
        written.append(str(path))
    return written


def _recipes(measured: Any) -> List[str]:
    """Every distinct ``recipe`` (a sweep's setting, :func:`recipe`) in a claim's measured numbers."""
    out: List[str] = []
    if isinstance(measured, dict):
        for k, v in measured.items():
            if k == "recipe":  # one sweep's recipe, or {sweep label: recipe}
                found = [v] if isinstance(v, str) else [f"{lab}: {r}" for lab, r in v.items() if isinstance(r, str)] \
                    if isinstance(v, dict) else []
            else:
                found = _recipes(v)
            out += [r for r in found if r not in out]
    elif isinstance(measured, list):
        for v in measured:
            out += [r for r in _recipes(v) if r not in out]
    return out


def _wrap(text: str, width: int) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width))


def _by_depth_plot(ax, series: Dict[str, Dict[str, Any]], bound: Optional[int] = None, bound_text: str = "") -> bool:
    """series: label -> {depth: Stat.to_json()}; the error threshold and the bound marked."""
    drawn = False
    ticks = set()
    for label, by_depth in series.items():
        ds = sorted(int(d) for d, s in by_depth.items() if s and s.get("mean") is not None)
        if not ds:
            continue
        y = [by_depth[str(d)]["mean"] for d in ds]
        e = [by_depth[str(d)]["std"] for d in ds]
        ax.errorbar(ds, y, yerr=e, marker="o", capsize=3, label=label,
                    ls="--" if "training distribution" in label else "-")
        ticks.update(ds)
        drawn = True
    if ticks:
        ax.set_xticks(sorted(ticks))
    ax.axhline(LEARNED, color="grey", ls="--", lw=1, label=f"learned < {LEARNED}")
    if bound is not None:
        from depthcraft.verify.crosscheck.report import PAPER_STYLE  # the sweeps' figure convention

        ax.axvline(bound, **PAPER_STYLE, label=bound_text or f"paper's claim L={bound}")
    ax.set_xlabel("attention layers L")
    ax.set_ylabel("error (mean ± std over seeds)")
    ax.set_ylim(-0.02, 1.0)
    return drawn


def _control_points(ax, control: Optional[Dict[str, Any]], depth: int, label: str) -> None:
    if control and control.get("mean") is not None:
        ax.errorbar([depth], [control["mean"]], yerr=[control["std"]], marker="s", mfc="none", capsize=3,
                    ls="none", label=label)


def _fig_c1(ax, m) -> bool:
    ds = sorted(int(d) for d in m.get("k_star", {}))
    if not ds:
        return False
    for steps, sm in sorted(m["by_steps"].items()):
        sd = sorted(int(d) for d in sm["k_star"])
        ax.plot(sd, [sm["k_star"][str(d)] for d in sd], "o-",
                label=f"trained here (N=32, {steps} steps): largest k with error < 0.05")
    pd = sorted(int(d) for d in m.get("paper_k_star", {}))
    ax.plot(pd, [m["paper_k_star"][str(d)] for d in pd], "s--", label="paper, SPEC §7a (N=100)")
    ax.plot(ds, [2 ** (d - 2) for d in ds], ":", color="grey", label="doubling per layer: 2^(L-2)")
    ax.set_yscale("log", base=2)
    ax.set_xlabel("attention layers L")
    ax.set_ylabel("largest k learned (k*)")
    return True


def _depth_series(part: Dict[str, Any]) -> Dict[str, Any]:
    return {k[1:]: v for k, v in part.items() if k.startswith("L") and k[1:].isdigit()}


def _fig_c2(ax, m) -> bool:
    series = {}
    for label, what in (("icqa", "ICQA"), ("tm_onehot", "TM held-out, one-hot"), ("tm_random", "TM held-out, random"),
                        ("tm_learned", "TM held-out, learned")):
        if label in m:
            series[what] = _depth_series(m[label])
            if "training_distribution" in m[label]:
                series[what.replace("held-out", "training distribution")] = \
                    _depth_series(m[label]["training_distribution"])
    drawn = _by_depth_plot(ax, series, 2, "paper's claim: 2 layers")
    for label, what in (("icqa", "ICQA"), ("tm_onehot", "TM one-hot")):
        if label in m:
            _control_points(ax, m[label].get("control"), 1, f"{what} control (2x heads, width)")
    return drawn


def _fig_c3(ax, m) -> bool:
    drawn = _by_depth_plot(ax, {"ICTM (dense, distinct labels)": _depth_series(m)}, 3, "paper's claim: 3 layers")
    _control_points(ax, m.get("control"), 2, "control at L=2 (2x heads, width)")
    return drawn


def _fig_c4(ax, m) -> bool:
    drawn = False
    for task in ("sc", "icqa", "tm"):
        hs = m.get(task, {}).get("heads", {})
        pts = [(int(h), s["median_learning_step"]) for h, s in hs.items() if s.get("median_learning_step") is not None]
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=task.upper())
            drawn = True
    ax.set_xscale("log", base=2)
    ax.set_xlabel("heads per layer (same width)")
    ax.set_ylabel(f"median step to training loss <= {LEARNED_LOSS}")
    return drawn


def _fig_c5(ax, m) -> bool:
    order = m.get("order")
    if not order:
        series = {"without curriculum": m.get("without", {}), "with curriculum": m.get("with_curriculum", {})}
        return _by_depth_plot(ax, series)
    for i, steps in enumerate(np.asarray(order["per_seed"]).T):
        ax.plot(range(len(steps)), steps, "o", label=f"hop {i + 1}")
    ax.set_xlabel("seed")
    ax.set_ylabel(f"step at which the hop's error < {LEARNED}")
    return True


def _fig_c6(ax, m) -> bool:
    per_d = [(k, v) for k, v in m.items() if k.startswith("d=")]
    drawn = _by_depth_plot(ax, {k: v["errors"] for k, v in per_d})
    for i, (k, v) in enumerate(per_d):  # series i has the i-th colour of the cycle: its bound and control too
        ax.axvline(v["bound"], ls=":", lw=1.5, color=f"C{i}", label=f"{k}: Mușat's lower bound L={v['bound']}")
        if v.get("control") and v["control"].get("mean") is not None:
            ax.errorbar([v["bound"] - 1], [v["control"]["mean"]], yerr=[v["control"]["std"]], marker="s",
                        mfc="none", capsize=3, ls="none", color=f"C{i}", label=f"{k} control (2x heads, width)")
    return drawn


def _fig_c7(ax, m) -> bool:
    series = {f"{k} (construction: {v['construction_depth']} layers)": v["errors"]
              for k, v in m.items() if k.startswith("n=")}
    drawn = _by_depth_plot(ax, series)
    for k, v in m.items():
        if k.startswith("n="):
            for L, s in (v.get("control") or {}).items():
                _control_points(ax, s, int(L), f"{k} control (2x heads, width)")
    return drawn


_FIGURES = {"C1": _fig_c1, "C2": _fig_c2, "C3": _fig_c3, "C4": _fig_c4, "C5": _fig_c5, "C6": _fig_c6,
            "C7": _fig_c7}
