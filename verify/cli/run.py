"""``depthcraft run`` and ``depthcraft show``: a construction on one input.

``run`` prints the input, the model's output and the reference, aligned by position
(positions the task does not score show ``·``; wrong outputs are marked ``^``), and
exits 1 when a scored output differs. ``show`` adds the RASP program, where every
head attends, every MLP and the residual-stream layout (:mod:`depthcraft.verify.views`).
Both print within the output width.
"""

from __future__ import annotations

import sys

import click

from depthcraft.constructions.errors import ParameterError
from depthcraft.constructions.params import parse_assignments
from depthcraft.verify.cli import options
from depthcraft.verify.cli.render import width


@click.command("run")
@click.argument("name")
@options.params_option()
@options.input_option()
@options.max_memory_option()
def run_cmd(name, params, text, max_memory) -> None:
    """Run a construction (or a saved .safetensors model) on one input and compare with the reference."""
    from depthcraft.constructions.files import check_outputs
    from depthcraft.verify import views
    from depthcraft.verify.cli.saved import is_saved_model

    if is_saved_model(name):
        if params:
            raise ParameterError("-p cannot be combined with a saved model (its parameters are in the file)")
        check_outputs([], inputs=[name])
        data, _ = views.for_saved(name, text)
    else:
        data, _ = views.for_construction(name, parse_assignments(params), text, details=False,
                                         max_memory=max_memory)
    click.echo("\n".join(views.outcome_lines(data, width())))
    sys.exit(0 if data.exact else 1)


@click.command("show")
@click.argument("name")
@options.params_option()
@options.input_option()
@options.png_option("Also write every head's attention map to this PNG.")
@options.max_memory_option()
def show_cmd(name, params, text, png, max_memory) -> None:
    """Show a construction (or a saved .safetensors model) on one input, layer by layer.

    Prints the RASP program, where each head attends, every MLP, and the
    residual-stream layout; --png writes the attention maps.
    """
    from depthcraft.verify import views
    from depthcraft.constructions.files import check_outputs
    from depthcraft.verify.cli.saved import is_saved_model

    saved = is_saved_model(name)  # a construction name wins over a file
    check_outputs([png], inputs=[name] if saved else [])
    if saved:
        if params:
            raise ParameterError("-p cannot be combined with a saved model (its parameters are in the file)")
        data, _ = views.for_saved(name, text)
    else:
        data, _ = views.for_construction(name, parse_assignments(params), text, max_memory=max_memory)
    click.echo(views.render_text(data, width()))
    if png:
        views.attention_figure(data, png)
        click.echo(f"\nattention maps written to {png}")
    sys.exit(0)


__all__ = ["run_cmd", "show_cmd"]
