"""``depthcraft check-certificate CERT``: re-check a certificate file with the independent checker.

The checker (:mod:`depthcraft.checker`) needs three things: the certificate, the weights and the
program. The weights come from ``--model FILE``, from CERT itself when it is a model file with a
bundled certificate (``depthcraft save --certify``), or else from the model file written beside
it (``x.json.gz`` -> ``x.safetensors``); their SHA-256 must be the certificate's. The program
comes from ``--program FILE.py:NAME`` or from the registered construction the certificate names
(compiled again; only its RASP graph is used). Only the checker decides.

Exit status: 0 valid (one line: what is proved); 1 an obligation fails, or the checker does not
check this route (named, with its numbers); 2 not a certificate, weights whose SHA-256 differs, a
program that is not the certificate's, or bad usage.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Optional

import click

from depthcraft.constructions.errors import InputError, ParameterError
from depthcraft.verify.cli.render import echo, width
from depthcraft.verify.views.text import wrap


def _registered(cert: dict) -> Optional[Any]:
    """The compiled model of the construction the certificate names (None when it names none)."""
    by = cert.get("issued_by") or {}
    if not by.get("construction"):
        return None
    from depthcraft.verify.lookup import resolve

    return resolve(by["construction"], {k: str(v) for k, v in (by.get("params") or {}).items()}).build()


@click.command("check-certificate")
@click.argument("cert_path", metavar="CERT", type=click.Path(dir_okay=False))
@click.option("--model", "model_path", type=click.Path(dir_okay=False),
              help="The model file the certificate is about (default: CERT itself when it bundles one, else the "
                   "registered construction it names, recompiled).")
@click.option("--program", "program_spec", metavar="FILE.py[:NAME]",
              help="The RASP program (default: the registered construction's).")
def check_certificate_cmd(cert_path, model_path, program_spec) -> None:
    """Re-check a certificate with the independent checker (depthcraft.checker)."""
    from depthcraft import checker
    from depthcraft.constructions.dedupe import dedupe_program

    started = time.perf_counter()
    try:
        cert = checker.read(cert_path)
    except checker.NotACertificate as e:
        raise InputError(str(e)) from None
    from depthcraft.verify.certify.certificate import model_path_for

    if model_path is None:
        with open(cert_path, "rb") as f:
            bundled = f.read(1) not in (b"{", b"\x1f")
        model_path = cert_path if bundled else model_path_for(cert_path)
    try:
        model = checker.load_model(model_path)
    except checker.ModelFileError as e:
        raise InputError(f"{e} (give the model file with --model)") from None
    if program_spec is not None:
        from depthcraft.verify.userfiles import load_program

        sink = dedupe_program(load_program(program_spec)[0]).program
    else:
        compiled = _registered(cert)
        if compiled is None or compiled.program is None:
            raise ParameterError("the certificate names no registered construction: give --program FILE.py:NAME")
        sink = compiled.program.nodes[compiled.program.sink]
    try:
        verdict = checker.check(cert, model, sink)
    except checker.NotACertificate as e:
        raise InputError(f"{cert_path}: {e}") from None
    cols = width()
    took = f"{time.perf_counter() - started:.1f} s"
    if verdict.valid:
        for line in wrap(f"valid ({cert['route']} route, checked in {took}): {verdict.proved}", cols):
            echo(line)
        sys.exit(0)
    head = {"rejected": "invalid", "unproved": "not proved by the checker",
            "unsupported": "not independently checked"}.get(verdict.status, "invalid")
    for line in wrap(f"{head}: {verdict.failure}", cols):
        echo(line)
    sys.exit(1)


__all__ = ["check_certificate_cmd"]
