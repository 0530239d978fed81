"""``depthcraft dedupe [NAME]``: d_model before and after the compile-time dedupe (:mod:`depthcraft.verify.widths`)."""

from __future__ import annotations

import sys
from typing import Any, Dict

import click

from depthcraft.constructions.files import check_outputs, write_json_atomic
from depthcraft.constructions.params import parse_assignments
from depthcraft.verify.cli import options
from depthcraft.verify.cli.render import console, echo, params_text
from depthcraft.verify.widths import savings, savings_all


def print_savings(result: Dict[str, Any]) -> None:
    """One line per construction and parameter set: d_model before -> after, and what was merged."""
    for r in result["rows"]:
        merged = ", ".join(f"{a}={b}" for a, b in r["merged"]) or "-"
        echo(f"{r['construction']} {params_text(r['params'])}")
        echo(f"  d_model {r['d_model_before']} -> {r['d_model_after']} (saved {r['saved']}); merged: {merged}")
    echo(f"total saved: {result['total_saved']} residual dimensions over {len(result['rows'])} models")


@click.command("dedupe")
@click.argument("name", required=False)
@options.params_option("Parameter of NAME, e.g. -p k=8.")
@click.option("--all", "all_", is_flag=True, help="Every construction at its verify --all parameter sets.")
@options.json_option("Write the rows as JSON here.")
def dedupe_cmd(name, params, all_, json_path) -> None:
    """d_model of NAME (or of every construction, --all) with and without storing identical SOps once."""
    if bool(name) == all_:
        raise click.UsageError("give a construction NAME or --all (not both)")
    if json_path:
        check_outputs([json_path])
    if all_:
        with console.status("compiling every construction twice") as status:
            result = savings_all(progress=lambda n, p: status.update(f"{n} {params_text(p)}"))
    else:
        row = savings(name, parse_assignments(params))
        result = {"rows": [row], "total_saved": row["saved"]}
    print_savings(result)
    if json_path:
        write_json_atomic(json_path, result)
        echo(f"written {json_path}")
    sys.exit(0)


__all__ = ["dedupe_cmd", "print_savings"]
