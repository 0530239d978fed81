"""Verification reports as a Markdown table (``depthcraft verify --markdown``; the tables under ``results/``).

The terminal output of the same reports (one line each) is :mod:`depthcraft.verify.cli.render`.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence


def certificate_kind(cert: Optional[Mapping[str, Any]]) -> Optional[str]:
    """How a report's ``certificate`` holds: ``"tables"`` (proved from the tables for every input up
    to n), ``"domain"`` (proved from the tables with the task's domain as a precondition: the scope
    is the domain's inputs), ``"exhaustive"`` (every input of the task's input set run), ``"no"``
    (not certified), or None (no certificate was asked for)."""
    if not cert:
        return None
    if not cert["certified"]:
        return "no"
    if cert.get("method") == "exhaustive":
        return "exhaustive"
    return "domain" if (cert.get("domain") or {}).get("used_as_precondition") else "tables"


def checked_inputs(r: Mapping[str, Any]) -> Dict[str, int]:
    """Inputs checked per check kind of a report (only the checks that ran): ``{"random": 500, ...}``."""
    return {k: v["inputs"] for k, v in (r.get("checks") or {}).items() if v}


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


__all__ = ["certificate_kind", "checked_inputs", "markdown_table"]
