"""``depthcraft precision NAME``: the precision study (:mod:`depthcraft.verify.precision`) from the shell."""

from __future__ import annotations

import os
import sys
from typing import Any, Dict

import click
from rich.table import Table

from depthcraft.constructions.errors import ParameterError
from depthcraft.constructions.files import check_outputs, write_json_atomic
from depthcraft.constructions.params import parse_assignments
from depthcraft.verify.cli import options
from depthcraft.verify.cli.render import console
from depthcraft.verify.precision import DEFAULT_OVER, DTYPES, MANTISSA_RANGE, plot, study


def print_study(result: Dict[str, Any]) -> None:
    """Table: one row per value, one column per dtype (exact, min attention, read-out gap), bits needed."""
    t = Table(title=f"depthcraft precision {result['construction']}")
    t.add_column(result["over"])
    for d in result["dtypes"]:
        t.add_column(f"{d} exact / min attn / gap")
    if result["bits_needed"]:
        t.add_column("mantissa bits needed")
    bits = {r["value"]: r["mantissa_bits"] for r in result["bits_needed"]}
    for v in result["values"]:
        row = [str(v)]
        for d in result["dtypes"]:
            pt = next(pt for pt in result["points"] if pt["value"] == v and pt["dtype"] == d)
            att = "-" if pt["min_attention"] is None else f"{pt['min_attention']:.4f}"
            gap = "-" if pt["min_output_gap"] is None else f"{pt['min_output_gap']:.3f}"
            mark = "[green]✓[/]" if pt["exact"] else f"[red]✗ {pt['failed']}/{pt['inputs']}[/]"
            row.append(f"{mark} {att} {gap}")
        if result["bits_needed"]:
            b = bits.get(v)
            row.append(f"> {MANTISSA_RANGE[1]}" if b is None else str(b))
        t.add_row(*row)
    console.print(t)
    s = Table(title="per dtype")
    for col in ("dtype", "mantissa bits", f"largest {result['over']} exact", "first failure", "min attn",
                "min gap"):
        s.add_column(col)
    for d, row in result["summary"].items():
        s.add_row(d, str(row["mantissa_bits"]), str(row["largest_exact"]), str(row["first_failure"]),
                  "-" if row["min_attention"] is None else f"{row['min_attention']:.4f}",
                  "-" if row["min_output_gap"] is None else f"{row['min_output_gap']:.3f}")
    console.print(s)
    if result.get("bits_fit"):
        f = result["bits_fit"]
        console.print(f"bits needed ≈ {f['slope_per_doubling']} log2 {result['over']} {f['intercept']:+}")


@click.command("precision")
@click.argument("name")
@options.params_option("Fixed parameter, e.g. -p k=4.")
@click.option("--over", default=DEFAULT_OVER, show_default=True, metavar="KEY=VALUES",
              help="The parameter to vary and its values (lists and ranges a-b).")
@click.option("--dtypes", default=",".join(DTYPES), show_default=True, help="Comma-separated compute dtypes.")
@options.samples_option(200, "Random inputs per value (the task's edge cases are always added).")
@click.option("--bits/--no-bits", default=True, show_default=True,
              help="Search the fewest mantissa bits that stay exact (emulated formats).")
@options.seed_option("Seed for the random inputs.")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Write precision_<NAME>.json and .png into this directory.")
def precision_cmd(name, params, over, dtypes, samples, bits, seed, out_dir) -> None:
    """Run construction NAME in float64/float32/bfloat16/float16 over a range of n; report exactness and margins."""
    json_path = png_path = None
    if out_dir:
        try:
            os.makedirs(out_dir, exist_ok=True)
        except OSError as e:
            raise ParameterError(f"--out {out_dir}: cannot create the directory ({e.strerror or e})") from None
        json_path = os.path.join(out_dir, f"precision_{name}.json")
        png_path = os.path.join(out_dir, f"precision_{name}.png")
        check_outputs([json_path, png_path])
    dts = [d.strip() for d in dtypes.split(",") if d.strip()]
    with console.status(f"precision study of {name}") as status:
        result = study(name, parse_assignments(params), over=over, dtypes=dts, samples=samples, seed=seed,
                       bits=bits, progress=status.update)
    print_study(result)
    if json_path:
        write_json_atomic(json_path, result)
        plot(result, png_path)
        console.print(f"written {json_path} and {png_path}")
    sys.exit(0)


__all__ = ["precision_cmd", "print_study"]
