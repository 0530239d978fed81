"""Verification reports as tables: the terminal table (rich) and a Markdown table for docs."""

from __future__ import annotations

import sys
from typing import Any, Dict, List, Optional, Sequence

from rich.console import Console
from rich.table import Table

# Wide tables when the output is a file or a pipe (rich would wrap them at 80 columns).
console = Console(highlight=False, width=None if sys.stdout.isatty() else 160)


def _fmt_bound(report: Dict[str, Any], key: str) -> str:
    m = report["structure"][key]
    b = report["bound"].get(key)
    check = report.get("bound_checks", {}).get(key, {})
    lower = "≥" if check.get("kind") == "lower" else ""
    return f"{m}" if b is None else f"{m} / {lower}{b}" + ("" if check.get("ok", m <= b) else " ✗")


def _fmt_check(c: Optional[Dict[str, Any]]) -> str:
    if c is None:
        return "-"
    return f"{c['inputs']} ✓" if c["exact"] else f"{c['failed']}/{c['inputs']} ✗"


def _fmt_ablation(ablation: Optional[List[Dict[str, Any]]]) -> str:
    """Exact fraction with each attention layer removed, e.g. '0.00 0.31' (a redundant layer in red)."""
    if not ablation:
        return "-"
    return " ".join(f"[red]{a['exact_fraction']:.2f}[/]" if a["redundant"] else f"{a['exact_fraction']:.2f}"
                    for a in ablation)


def print_reports(reports: List[Dict[str, Any]]) -> None:
    """Print the verification table, then counterexamples and warnings."""
    t = Table(title="depthcraft verify")
    for col in ("construction", "params", "L / bound", "H / bound", "d_model", "random", "edge", "exhaustive",
                "hypothesis", "min attn", "ablated", "passed", "s"):
        t.add_column(col, overflow="fold")
    for r in reports:
        params = " ".join(f"{k}={v}" for k, v in r["params"].items())
        att = r["min_margin"]["attention"]
        t.add_row(r["construction"], params, _fmt_bound(r, "attn_layers"), _fmt_bound(r, "heads"),
                  _fmt_bound(r, "d_model"), *(_fmt_check(r["checks"][k]) for k in
                                              ("random", "edge", "exhaustive", "hypothesis")),
                  "-" if att is None else f"{att:.4f}", _fmt_ablation(r.get("ablation")),
                  "[green]yes[/]" if r["passed"] else "[red]NO[/]",
                  f"{r['seconds']:.1f}")
    console.print(t)
    for r in reports:
        cx = r.get("counterexample")
        if cx:
            note = f" (found by the {cx['check']} check" + (", shrunk)" if cx.get("shrunk") else ")")
            console.print(f"[red]{r['construction']}[/] counterexample{note}, wrong at positions {cx['positions']}:")
            console.print(f"  input    {cx['tokens_text']}")
            console.print(f"  expected {cx['expected_text']}")
            console.print(f"  got      {cx['got_text']}")
        for w in r.get("warnings", []):
            console.print(f"[yellow]warning[/] {r['construction']}: {w}")
        for key, b in r.get("bound_checks", {}).items():
            if not b["ok"]:
                side = "is below the lower" if b.get("kind") == "lower" else "exceeds the"
                console.print(f"[red]{r['construction']}[/]: {key} = {b['measured']} {side} bound {b['bound']}")


def markdown_table(reports: List[Dict[str, Any]], varying: Sequence[str]) -> str:
    """One row per report: the varying parameters, measured vs bound (with gap) per bounded key, d_model, passed.

    ``varying`` names the columns that identify a row: parameter names, or
    ``"construction"`` / ``"params"`` (all parameters in one cell).
    """
    keys = [k for k in ("attn_layers", "heads", "d_model")
            if any(k in r.get("bound_checks", {}) for r in reports)]
    head = list(varying) + [f"{k} (measured / bound, gap)" for k in keys]
    head += [k for k in ("attn_layers", "heads", "d_model") if k not in keys] + ["exact", "min attention", "passed"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in reports:
        row = [str(r["construction"]) if k == "construction" else
               " ".join(f"{pk}={pv}" for pk, pv in r["params"].items()) if k == "params" else
               str(r["params"][k]) for k in varying]
        for k in keys:
            b = r["bound_checks"].get(k)
            if b is None:
                row.append(str(r["structure"][k]))
            else:
                rel = "≥ " if b["kind"] == "lower" else "≤ "
                row.append(f"{b['measured']} / {rel}{b['bound']}, gap {b['gap']}")
        row += [str(r["structure"][k]) for k in ("attn_layers", "heads", "d_model") if k not in keys]
        att = r["min_margin"]["attention"]
        row += ["yes" if r["exact"] else "NO", "-" if att is None else f"{att:.4f}", "yes" if r["passed"] else "NO"]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"
