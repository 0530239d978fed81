"""``depthcraft explore NAME -p ... --input "..." -o page.html``: one self-contained interactive page.

NAME is a registered construction (with ``-p KEY=VALUE`` parameters), a saved model file
(``.safetensors``, from ``depthcraft save``) or a training checkpoint directory (from
``depthcraft train``: ``<out>/checkpoints/<run>``; ``-p`` picks the training condition,
``--construction`` the construction to align with), or one run of the k-hop paper's published
models (a folder with ``config.yaml`` and ``model_100000.pt``; ``-p k=K`` gives the hop count). The page
(:mod:`depthcraft.verify.views.explore`) opens in a browser with no server and no network.
"""

from __future__ import annotations

import os
import sys

import click

from depthcraft.constructions.errors import ParameterError
from depthcraft.constructions.params import parse_assignments
from depthcraft.verify.cli import options


@click.command("explore")
@click.argument("name")
@options.params_option()
@options.input_option()
@click.option("-o", "--output", "output", required=True, type=click.Path(dir_okay=False),
              help="The HTML page to write (one file; plotly inlined, no network needed).")
@click.option("--construction", default=None,
              help="For a training checkpoint: the construction to align with (default: the task's).")
def explore_cmd(name, params, text, output, construction) -> None:
    """Write an interactive HTML page of a construction, saved model, trained checkpoint or published k-hop
    model (a folder with config.yaml and model_100000.pt; -p k=K) on one input.

    The page shows the RASP program by layer, every head's attention map, the
    residual stream after each sublayer (what it wrote outlined), the output beside
    the reference, and a control stepping through the layers.
    """
    from depthcraft.constructions.files import check_outputs
    from depthcraft.verify import lookup
    from depthcraft.verify.views import data as views_data
    from depthcraft.verify.views.explore import write_explore

    registered = name in {c.name for c in lookup.all_constructions()}  # a construction name wins over a path
    checkpoint = not registered and os.path.isdir(name)
    saved = not registered and not checkpoint and (name.endswith(".safetensors") or os.path.isfile(name))
    if construction is not None and not checkpoint:
        raise ParameterError("--construction applies to a training checkpoint directory only")
    check_outputs([output], inputs=[name] if saved else [])
    if checkpoint and views_data.is_published_run(name):
        page = views_data.explore_published(name, parse_assignments(params), text, construction)
    elif checkpoint:
        page = views_data.explore_trained(name, parse_assignments(params), text, construction)
    elif saved:
        if params:
            raise ParameterError("-p cannot be combined with a saved model (its parameters are in the file)")
        page = views_data.explore_saved(name, text)
    else:
        page = views_data.explore_construction(name, parse_assignments(params), text)
    write_explore(page, output)
    click.echo(f"explore page written to {output} ({os.path.getsize(output) / 1e6:.1f} MB, no network needed)")
    sys.exit(0)


__all__ = ["explore_cmd"]
