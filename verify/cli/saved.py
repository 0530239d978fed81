"""``depthcraft save`` and ``depthcraft verify-saved``: compiled weights to a file and back.

``save`` compiles a registered construction and writes it with
:func:`constructions.io.save` (safetensors + JSON metadata, atomic).
``verify-saved`` loads such a file and runs the verifier on the loaded weights
(structure, the bound recorded in the file, exactness against the task's
reference), so a model can be checked without recompiling it; it prints the
report as ``verify`` does (:mod:`~depthcraft.verify.cli.render`).
"""

from __future__ import annotations

import sys
import time

import click

from depthcraft.constructions import files, io
from depthcraft.constructions.errors import ParameterError
from depthcraft.constructions.params import parse_assignments
from depthcraft.verify.cli import options
from depthcraft.verify.cli.render import echo, finish, params_text, stream_reports, width
from depthcraft.verify.views.text import wrap


@click.command("save")
@click.argument("name")
@options.params_option()
@click.option("-o", "--out", "out", required=True, type=click.Path(dir_okay=False),
              help="Output file (.safetensors); written atomically.")
@click.option("--certify", is_flag=True, help="Also certify the model and bundle the certificate in the file "
              "(re-check it with depthcraft check-certificate FILE).")
@options.max_memory_option()
def save_cmd(name, params, out, certify, max_memory) -> None:
    """Compile a construction and save its weights + metadata (safetensors)."""
    from depthcraft.verify import lookup
    from depthcraft.verify.cost import gate

    files.check_writable(out)
    r = lookup.resolve(name, parse_assignments(params), sampling=False)  # saving samples nothing
    gate(r, max_memory, samples=0, hypothesis_examples=0)
    p = r.params
    click.echo(f"compiling {name} {params_text(p)} ...", err=True)
    model = r.build()
    bundle = None
    if certify:
        from depthcraft.verify.certify import prove

        click.echo("certifying ...", err=True)
        cert = prove(model, atol=float(getattr(r.task, "atol", 1e-3)), domain=r.task.domain(p),
                     precondition=r.task.domain_precondition(p))
        if cert.file is None or not cert.certified:
            why = cert.check.failure if cert.check is not None else "; ".join(
                u["why"] for u in cert.proof.get("uncertified", [])[:1])
            raise ParameterError(f"{name} is not certified with a certificate file ({why}); nothing was written")
        bundle = cert.file_bytes(out + ".gz")
    meta = io.save(model, out, certificate=bundle)
    for line in wrap(f"saved {name} ({params_text(p)}) to {out}: {len(meta['arch']['sublayers'])} sublayers, "
                     f"d_model={len(meta['residual_labels'])}, format v{meta['format_version']}"
                     + (", certificate bundled" if bundle else ""), width()):
        echo(line)


@click.command("verify-saved")
@click.argument("path", type=click.Path(dir_okay=False))
@options.check_options(1000, "Random inputs.")
@options.json_option()
def verify_saved_cmd(path, samples, exhaustive, hyp, seed, json_path) -> None:
    """Load a saved model and verify it (bound recorded in the file, task reference)."""
    from depthcraft.verify.api import check_program
    from depthcraft.verify.cli.verify import write_outputs

    started = time.perf_counter()
    files.check_outputs([json_path], inputs=[path])
    model = io.load(path)
    if not model.meta.get("construction"):
        raise ParameterError(f"{path} holds no registered construction; verify it in Python with "
                             f"depthcraft.check_program(depthcraft.load(path), reference=...)")

    def reports():
        report = check_program(model, samples=samples, exhaustive=exhaustive, seed=seed, hypothesis_examples=hyp)
        report["loaded_from"] = path
        yield report

    label = params_text(model.meta.get("params") or {})
    done = stream_reports(reports(), [label], [path])
    finish(done, time.perf_counter() - started, write_outputs(done, json_path, None, ["construction", "params"]))
    sys.exit(0 if done[0]["passed"] else 1)


__all__ = ["save_cmd", "verify_saved_cmd"]
