"""``depthcraft list [NAME]``: the catalogue of constructions, or one construction's parameters.

Every name one must type (construction names, parameter names) is printed in full;
the long fields (bound formulas, sources, meanings) wrap with a hanging indent to
the output width instead.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import click
from rich import box
from rich.table import Table
from rich.cells import cell_len
from rich.text import Text

from depthcraft.constructions.files import json_text
from depthcraft.verify.cli.render import console, echo, width
from depthcraft.verify.views.text import wrap

#: Short names of the bound keys.
SYMBOL = {"attn_layers": "L", "heads": "H", "d_model": "d_model"}


def bounds_text(c) -> str:
    """``L ≤ ceil(log2 k)+2, H ≤ 1`` (``≥`` for a lower bound); ``no bound (measured only)`` without one."""
    parts = [f"{SYMBOL[k]} {'≥' if b.kind == 'lower' else '≤'} {b.text}" for k, b in c.bounds.items()]
    return ", ".join(parts) or "no bound (measured only)"


def allowed_text(s) -> str:
    """The values a parameter accepts: its choices, ``lo..hi``, ``>= lo``, ``<= hi`` or ``any``."""
    if s.choices:
        return ", ".join(map(str, s.choices))
    if s.minimum is None and s.maximum is None:
        return "any"
    if s.maximum is None:
        return f">= {s.minimum:g}"
    if s.minimum is None:
        return f"<= {s.maximum:g}"
    return f"{s.minimum:g}..{s.maximum:g}"


def _row(c, param_specs) -> Dict[str, Any]:
    return {"name": c.name, "task": c.task, "source": c.source, "attention": c.attention, "causal": c.causal,
            "bounds": {k: b.text for k, b in c.bounds.items()},
            "params": {s.name: s.default for s in param_specs(c)}, "summary": c.summary, "notes": c.notes}


def print_catalogue(constructions: List[Any]) -> None:
    """One block per construction: name, task and bounds on the first line; attention and source below."""
    cols = width()
    nw = max(len(c.name) for c in constructions)
    tw = max([len(c.task) for c in constructions] + [4])
    echo(Text(f"{'name':<{nw}}  {'task':<{tw}}  bounds", style="bold"))
    for c in constructions:
        lead = f"{c.name:<{nw}}  {c.task:<{tw}}  "
        first = wrap(bounds_text(c), cols - len(lead), hanging="  ")
        line = Text(c.name, style="bold")
        line.append(lead[len(c.name):] + first[0])
        echo(line)
        for more in first[1:]:
            echo(" " * len(lead) + more)
        about = f"{c.attention}, {'causal' if c.causal else 'bidirectional'}; {c.source}"
        for more in wrap(about, cols, indent="    ", hanging=""):
            echo(Text(more, style="dim"))
    echo()
    for line in wrap("depthcraft list NAME: a construction's parameters, defaults and ranges", cols):
        echo(line)


def print_construction(c, specs) -> None:
    """One construction: what it is, its bounds and notes, and a table of its parameters."""
    cols = width()
    about = f"(task {c.task}; {c.attention}, {'causal' if c.causal else 'bidirectional'})"
    head = Text(c.name, style="bold")
    if cell_len(c.name) + 1 + cell_len(about) <= cols:
        head.append(" " + about)
        echo(head)
    else:  # the name alone on its line (printed in full), the rest wrapped below it
        echo(head)
        for line in wrap(about, cols, indent="  ", hanging=""):
            echo(line)
    for label, text in (("", c.summary), ("source: ", c.source), ("bounds: ", bounds_text(c)),
                        ("notes: ", c.notes)):
        if text:
            for line in wrap(label + text, cols, hanging="  "):
                echo(line)
    echo()
    echo(Text("parameters (-p KEY=VALUE)", style="bold"))
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    t.add_column("name", no_wrap=True)
    t.add_column("type", no_wrap=True)
    t.add_column("default", overflow="fold")
    t.add_column("allowed", overflow="fold")
    t.add_column("meaning", ratio=1)
    for s in specs:
        t.add_row(s.name, s.type.__name__, str(s.default), allowed_text(s), s.help)
    console.print(t, markup=False)


@click.command("list")
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def list_cmd(name: Optional[str], as_json: bool) -> None:
    """List every construction with its task, source and bound formulas; with NAME, its parameters."""
    from depthcraft.verify.lookup import all_constructions, get, param_specs

    chosen = [get(name)] if name else all_constructions()
    if as_json:
        click.echo(json_text([_row(c, param_specs) for c in chosen]), nl=False)
    elif name:
        print_construction(chosen[0], param_specs(chosen[0]))
    else:
        print_catalogue(chosen)


__all__ = ["allowed_text", "bounds_text", "list_cmd", "print_catalogue", "print_construction"]
