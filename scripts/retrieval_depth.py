"""Depth of the two retrieval constructions against Mușat's lower bound, D = 1..64 (issue 13).

Reads the ``depthcraft verify`` reports of ``retrieval_tripling`` (results/retrieval_tripling/d*.json)
and ``retrieval_doubling`` (results/retrieval/d1-32.json) and writes

* ``results/retrieval_tripling/summary.json``: per D the measured L of retrieval_tripling, the lower
  bound ceil(log_3 2D), c = L - bound, H, d_model, MLP layers, whether the report passed and the
  inputs checked; the measured L of retrieval_doubling where a report exists;
* ``results/retrieval_tripling/layers_vs_d.png``: attention layers against D for both constructions
  and the bound (matplotlib, small).

Every number comes from the reports; the formulas are only drawn as reference lines, never
substituted for a missing measurement (a missing D is left out and listed in ``missing``).

Usage: python scripts/retrieval_depth.py [--root .]
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import sys
from typing import Any, Dict, List

from depthcraft.constructions.files import save_figure_atomic, write_json_atomic

TRIPLING = "results/retrieval_tripling"
DOUBLING = "results/retrieval/d1-32.json"
D_MAX = 64


def lower_bound(d: int) -> int:
    """ceil(log_3(2D)) in integers: the least L with 3^L >= 2D."""
    layers, reach = 0, 1
    while reach < 2 * d:
        layers, reach = layers + 1, reach * 3
    return layers


def tripling_formula(d: int) -> int:
    """ceil(log_3(4D + 1)) in integers: the least L with 3^L >= 4D + 1."""
    layers, reach = 0, 1
    while reach < 4 * d + 1:
        layers, reach = layers + 1, reach * 3
    return layers


def _reports(path: pathlib.Path) -> List[Dict[str, Any]]:
    return json.loads(path.read_text())["results"]


def _inputs(r: Dict[str, Any]) -> int:
    return sum((c or {}).get("inputs", 0) for c in r["checks"].values())


def summarise(root: pathlib.Path) -> Dict[str, Any]:
    """The per-D table from the reports under ``root``."""
    rows: Dict[int, Dict[str, Any]] = {}
    for path in sorted((root / TRIPLING).glob("d*.json")):
        for r in _reports(path):
            if r["construction"] != "retrieval_tripling" or r["params"].get("distractors") != 2:
                continue
            d = r["params"]["d"]
            s = r["structure"]
            rows[d] = {"d": d, "attn_layers": s["attn_layers"], "bound": r["bound"]["attn_layers"],
                       "c": s["attn_layers"] - r["bound"]["attn_layers"], "heads": s["heads"],
                       "mlp_layers": s["mlp_layers"], "d_model": s["d_model"], "passed": r["passed"],
                       "bound_ok": r["bound_ok"], "inputs": _inputs(r), "min_attention": r["min_margin"]["attention"],
                       "source": str(path.relative_to(root))}
    doubling = {}
    if (root / DOUBLING).is_file():
        doubling = {r["params"]["d"]: r["structure"]["attn_layers"] for r in _reports(root / DOUBLING)}
    for d, row in rows.items():
        row["doubling_attn_layers"] = doubling.get(d)
        assert row["bound"] == lower_bound(d), (d, row["bound"])
    exhaustive = []
    for path in sorted((root / TRIPLING).glob("exhaustive_*.json")):
        for r in _reports(path):
            ex = r["checks"].get("exhaustive")
            if not ex:
                continue
            exhaustive.append({"params": r["params"], "inputs": ex["inputs"], "exact": ex["exact"],
                               "passed": r["passed"], "attn_layers": r["structure"]["attn_layers"],
                               "source": str(path.relative_to(root))})
    table = [rows[d] for d in sorted(rows)]
    return {"construction": "retrieval_tripling", "distractors": 2, "rows": table,
            "missing": [d for d in range(1, D_MAX + 1) if d not in rows],
            "c_zero": [r["d"] for r in table if r["c"] == 0], "c_one": [r["d"] for r in table if r["c"] == 1],
            "all_passed": bool(table) and all(r["passed"] for r in table), "exhaustive": exhaustive}


def figure(summary: Dict[str, Any], path: pathlib.Path) -> None:
    """Layers against D: retrieval_doubling, retrieval_tripling (measured) and the bound ceil(log_3 2D)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = summary["rows"]
    ds = list(range(1, D_MAX + 1))
    fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=100)
    ax.step(ds, [lower_bound(d) for d in ds], where="mid", color="black", lw=1.2,
            label="lower bound ceil(log3 2D) (Mușat)")
    ax.plot([r["d"] for r in rows], [r["attn_layers"] for r in rows], "o", ms=4, color="tab:blue",
            label="retrieval_tripling (measured)")
    dbl = [r for r in rows if r["doubling_attn_layers"] is not None]
    ax.plot([r["d"] for r in dbl], [r["doubling_attn_layers"] for r in dbl], "s", ms=3, mfc="none",
            color="tab:orange", label="retrieval_doubling (measured)")
    ax.step(ds, [math.floor(math.log2(d)) + 2 for d in ds], ":", where="mid", color="tab:orange", lw=1,
            label="floor(log2 D)+2 (doubling formula)")
    ax.step(ds, [tripling_formula(d) for d in ds], "--", where="mid", color="tab:blue", lw=0.8,
            label="ceil(log3(4D+1)) (tripling formula)")
    ax.set_xlabel("D (hops)")
    ax.set_ylabel("attention layers L")
    ax.set_xscale("log", base=2)
    ax.set_xticks([1, 2, 4, 8, 16, 32, 64], labels=["1", "2", "4", "8", "16", "32", "64"])
    ax.set_yticks(range(0, 9))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    ax.set_title("D-step retrieval: depth against the lower bound", fontsize=9)
    fig.tight_layout()
    save_figure_atomic(fig, str(path), dpi=100)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=".", help="repository root (default: .)")
    args = ap.parse_args(argv)
    root = pathlib.Path(args.root)
    summary = summarise(root)
    if not summary["rows"]:
        print(f"no retrieval_tripling reports under {root / TRIPLING}", file=sys.stderr)
        return 2
    out = root / TRIPLING
    write_json_atomic(str(out / "summary.json"), summary)
    figure(summary, out / "layers_vs_d.png")
    n = len(summary["rows"])
    print(f"{n} D values, {sum(r['passed'] for r in summary['rows'])} passed; c = 0 at {summary['c_zero']}; "
          f"missing {summary['missing']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
