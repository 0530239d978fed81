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
from typing import Optional

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


def is_saved_model(name: str) -> bool:
    """Whether a command's NAME argument means a saved model file: not a registered construction, and a
    ``.safetensors`` name or an existing file (a construction name wins over a file of that name)."""
    import os

    from depthcraft.verify import lookup

    if name in {c.name for c in lookup.all_constructions()}:
        return False
    return name.endswith(".safetensors") or (os.path.isfile(name) and not name.endswith(".py"))


def verify_saved(path: str, *, samples: int, exhaustive: bool, hyp: int, seed: int, json_path, certify: bool = False,
                 reference: Optional[str] = None, cert_path: Optional[str] = None) -> None:
    """``depthcraft verify-saved PATH`` (and ``depthcraft verify PATH``): load, verify, print, exit.

    A file of a registered construction is checked against its task's reference and the bound it
    records; a file of a user's own program needs ``reference`` (``FILE.py:FN``). ``certify``
    proves what a loaded file allows (a file keeps the weights, not the RASP program: the
    certificate says so where it needs the program); ``cert_path`` writes its certificate file.

    Raises:
        SystemExit: 0 passed, 1 a check failed.
        ParameterError: an unreadable or foreign file; a user's model without ``reference``.
    """
    from depthcraft.verify.api import check_program
    from depthcraft.verify.cli.render import write_outputs

    started = time.perf_counter()
    options.check_certificate_path(cert_path, certify)
    files.check_outputs([json_path, cert_path], inputs=[path])
    model = io.load(path)
    ref = None
    if reference is not None:
        from depthcraft.verify.userfiles import load_reference

        ref = load_reference(reference)
    elif not model.meta.get("construction"):
        raise ParameterError(f"{path} holds no registered construction: give its reference, "
                             f"--reference FILE.py:FN (FN(tokens) -> one output per token)")

    def reports():
        report = check_program(model, reference=ref, samples=samples, exhaustive=exhaustive, seed=seed,
                               hypothesis_examples=hyp, certify=certify, certificate_path=cert_path)
        report["loaded_from"] = path
        yield report

    label = params_text(model.meta.get("params") or {}) or f"n={model.max_seq_len}"
    done = stream_reports(reports(), [label], [path], certify=certify)
    finish(done, time.perf_counter() - started, write_outputs(done, json_path, None, ["construction", "params"]),
           certify=certify)
    sys.exit(0 if done[0]["passed"] else 1)


@click.command("verify-saved")
@click.argument("path", type=click.Path(dir_okay=False))
@options.check_options(1000, "Random inputs.")
@click.option("--certify", is_flag=True, help="Also prove exactness for every input up to N (docs/certification.md).")
@click.option("--reference", default=None, metavar="FILE.py:FN",
              help="The reference of a model of your own program (a registered construction's is its task's).")
@options.certificate_option()
@options.json_option()
def verify_saved_cmd(path, samples, exhaustive, hyp, seed, certify, reference, cert_path, json_path) -> None:
    """Load a saved model and verify it (bound recorded in the file, task reference)."""
    verify_saved(path, samples=samples, exhaustive=exhaustive, hyp=hyp, seed=seed, json_path=json_path,
                 certify=certify, reference=reference, cert_path=cert_path)


__all__ = ["is_saved_model", "save_cmd", "verify_saved", "verify_saved_cmd"]
