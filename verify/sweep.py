"""``depthcraft sweep``: verify one construction over a grid of parameters.

``-p k=1-16 -p n=64`` verifies k = 1..16 at n = 64; ``-p n=16,128,1024`` a list;
ranges and lists combine (``1-4,8,16``). Every grid point gets the full report of
:func:`verify.verifier.verify`; the table shows measured depth, bound and gap per
point, and ``--markdown`` writes the same table for docs.
"""

from __future__ import annotations

import itertools
import sys
from typing import Any, Dict, List, Sequence, Tuple

import click

from constructions.errors import ParameterError

#: Largest grid a sweep accepts.
MAX_POINTS = 1000


def parse_values(key: str, text: str) -> List[str]:
    """``"1-4,8"`` -> ``["1", "2", "3", "4", "8"]``; other items are kept as given.

    Raises:
        ParameterError: an empty item or a descending range.
    """
    out: List[str] = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            raise ParameterError(f"{key}={text!r}: empty value in the list")
        lo, sep, hi = item.partition("-")
        if sep and lo.strip().isdigit() and hi.strip().isdigit():
            a, b = int(lo), int(hi)
            if a > b:
                raise ParameterError(f"{key}={item!r}: the range must go up (a-b with a <= b)")
            out += [str(v) for v in range(a, b + 1)]
        else:
            out.append(item)
    return out


def grid(assignments: Sequence[str]) -> Tuple[List[str], List[Dict[str, str]]]:
    """``["k=1-3", "n=8"]`` -> (varying keys, list of parameter dicts, first key slowest).

    Raises:
        ParameterError: a malformed item, a repeated key, or more than MAX_POINTS points.
    """
    keys: List[str] = []
    values: List[List[str]] = []
    for item in assignments:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ParameterError(f"parameter {item!r} is not of the form KEY=VALUES")
        if key in keys:
            raise ParameterError(f"parameter {key!r} is given twice")
        keys.append(key)
        values.append(parse_values(key, text))
    size = 1
    for v in values:
        size *= len(v)
    if size > MAX_POINTS:
        raise ParameterError(f"the grid has {size} points, above the limit of {MAX_POINTS}")
    varying = [k for k, v in zip(keys, values) if len(v) > 1]
    return varying, [dict(zip(keys, combo)) for combo in itertools.product(*values)]


def markdown_table(reports: List[Dict[str, Any]], varying: Sequence[str]) -> str:
    """One row per report: the varying parameters, measured vs bound (with gap) per bounded key, d_model, passed."""
    keys = [k for k in ("attn_layers", "heads", "d_model")
            if any(k in r.get("bound_checks", {}) for r in reports)]
    head = list(varying) + [f"{k} (measured / bound, gap)" for k in keys]
    head += [k for k in ("attn_layers", "heads", "d_model") if k not in keys] + ["exact", "min attention", "passed"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in reports:
        row = [str(r["params"][k]) for k in varying]
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


@click.command("sweep")
@click.argument("name")
@click.option("-p", "--param", "params", multiple=True, metavar="KEY=VALUES",
              help="Parameter values: a list and/or ranges, e.g. -p k=1-16 or -p n=16,128,1024.")
@click.option("--samples", type=click.IntRange(min=0), default=500, show_default=True,
              help="Random inputs per grid point.")
@click.option("--exhaustive", is_flag=True, help="Also check every input at each point (small sizes only).")
@click.option("--hypothesis", "hyp", type=click.IntRange(min=0), default=50, show_default=True,
              help="Hypothesis examples per grid point.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for random inputs and hypothesis.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
              help="Write every report here ({'results': [...], 'passed': ...}).")
@click.option("--markdown", "md_path", type=click.Path(dir_okay=False), default=None,
              help="Write the measured-vs-bound table here (Markdown).")
def sweep_cmd(name, params, samples, exhaustive, hyp, seed, json_path, md_path) -> None:
    """Verify construction NAME at every point of a parameter grid."""
    from constructions import registry
    from verify.cli import check_writable, console, print_reports, write_json_atomic
    from verify.verifier import verify

    registry.get(name)  # unknown names fail before any work
    for path in (json_path, md_path):
        if path:
            check_writable(path)
    varying, points = grid(params)
    reports = []
    with console.status(f"sweeping {name}") as status:
        for i, given in enumerate(points):
            status.update(f"sweeping {name} {i + 1}/{len(points)}: {' '.join(f'{k}={v}' for k, v in given.items())}")
            reports.append(verify(name, given, samples=samples, exhaustive=exhaustive, seed=seed,
                                  hypothesis_examples=hyp))
    print_reports(reports)
    passed = all(r["passed"] for r in reports)
    if json_path:
        write_json_atomic(json_path, {"results": reports, "passed": passed})
        console.print(f"reports written to {json_path}")
    if md_path:
        from verify.outputs import write_text_atomic

        write_text_atomic(md_path, markdown_table(reports, varying))
        console.print(f"table written to {md_path}")
    sys.exit(0 if passed else 1)
