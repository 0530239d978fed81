"""CLI commands for saved models: ``depthcraft save`` and ``depthcraft verify-saved``.

``save`` compiles a registered construction and writes it with
:func:`constructions.io.save` (safetensors + JSON metadata, atomic).
``verify-saved`` loads such a file and runs the verifier on the loaded weights
(structure, the bound recorded in the file, exactness against the task's
reference), so a model can be checked without recompiling it.
"""

from __future__ import annotations

import sys

import click

from depthcraft.constructions import files, io
from depthcraft.constructions.errors import ParameterError
from depthcraft.constructions.params import MAX_SAMPLES, MAX_SEED, parse_assignments


@click.command("save")
@click.argument("name")
@click.option("-p", "--param", "params", multiple=True, metavar="KEY=VALUE", help="Parameter, e.g. -p k=2.")
@click.option("-o", "--out", "out", required=True, type=click.Path(dir_okay=False),
              help="Output file (.safetensors); written atomically.")
def save_cmd(name, params, out) -> None:
    """Compile a construction and save its weights + metadata (safetensors)."""
    from depthcraft.verify.report import console
    from depthcraft.verify import lookup

    files.check_writable(out)
    r = lookup.resolve(name, parse_assignments(params))
    p = r.params
    click.echo(f"compiling {name} {' '.join(f'{k}={v}' for k, v in p.items())} ...", err=True)
    model = r.build()
    meta = io.save(model, out)
    console.print(f"saved {name} ({' '.join(f'{k}={v}' for k, v in p.items())}) to {out}: "
                  f"{len(meta['arch']['sublayers'])} sublayers, d_model={len(meta['residual_labels'])}, "
                  f"format v{meta['format_version']}")


@click.command("verify-saved")
@click.argument("path", type=click.Path(dir_okay=False))
@click.option("--samples", type=click.IntRange(0, MAX_SAMPLES), default=1000, show_default=True, help="Random inputs.")
@click.option("--exhaustive", is_flag=True, help="Also check every input of length n.")
@click.option("--hypothesis", "hyp", type=click.IntRange(0, MAX_SAMPLES), default=100, show_default=True,
              help="Hypothesis examples.")
@click.option("--seed", type=click.IntRange(0, MAX_SEED), default=0, show_default=True,
              help="Seed for random inputs and hypothesis.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None, help="Write the JSON report here.")
def verify_saved_cmd(path, samples, exhaustive, hyp, seed, json_path) -> None:
    """Load a saved model and verify it (bound recorded in the file, task reference)."""
    from depthcraft.verify.api import check_program
    from depthcraft.constructions.files import check_outputs, write_json_atomic
    from depthcraft.verify.report import console, print_reports

    check_outputs([json_path], inputs=[path])
    model = io.load(path)
    if not model.meta.get("construction"):
        raise ParameterError(f"{path} holds no registered construction; verify it in Python with "
                             f"depthcraft.check_program(depthcraft.load(path), reference=...)")
    report = check_program(model, samples=samples, exhaustive=exhaustive, seed=seed,
                           hypothesis_examples=hyp)
    report["loaded_from"] = path
    print_reports([report])
    if json_path:
        write_json_atomic(json_path, {"results": [report], "passed": report["passed"]})
        console.print(f"report written to {json_path}")
    sys.exit(0 if report["passed"] else 1)
