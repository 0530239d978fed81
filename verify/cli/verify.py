"""``depthcraft verify NAME | --all``: compile, measure, check the bound and exactness; one line per report.

The output format is described in :mod:`~depthcraft.verify.cli.render`; ``--json`` and
``--markdown`` write the full reports and the wide measured-vs-bound table.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Dict, Iterable, Iterator, List, Sequence

import click

from depthcraft.constructions.files import check_outputs
from depthcraft.constructions.params import expand_sweeps, parse_assignments
from depthcraft.verify.cli import options
from depthcraft.verify.cli.saved import is_saved_model, verify_saved
from depthcraft.verify.cli.render import write_outputs, finish, inputs_progress, params_text, progress_bar, stream_reports, timed

#: Random inputs per check when --samples is not given (one construction; --all).
DEFAULT_SAMPLES, DEFAULT_SAMPLES_ALL = 1000, 500


def varying_keys(params: Sequence[Dict[str, Any]]) -> List[str]:
    """The parameter names whose values differ between the given parameter sets (first set's order)."""
    if not params:
        return []
    return [k for k in params[0] if any(p.get(k) != params[0][k] for p in params[1:])]


def with_estimates(reports: Iterable[Dict[str, Any]], estimates: Sequence[Any]) -> Iterator[Dict[str, Any]]:
    """The reports, each with its ``cost_estimate`` (:meth:`verify.cost.Estimate.to_json`) added."""
    for r, est in zip(reports, estimates):
        r["cost_estimate"] = est.to_json()
        yield r


@click.command("verify")
@click.argument("name", required=False)
@click.option("--all", "run_all", is_flag=True, help="Verify every construction at its embedded defaults.")
@options.params_option("Parameter, e.g. -p k=8; a sweep: -p k=1..16, -p k=1-16 or -p n=16,128,1024 "
                       "(one report per combination).")
@options.check_options(None, f"Random inputs per check (default {DEFAULT_SAMPLES}; "
                             f"{DEFAULT_SAMPLES_ALL} with --all).")
@click.option("--certify", is_flag=True, help="Also prove exactness for every input up to N from the heads' "
              "finite tables (docs/certification.md).")
@options.certificate_option()
@options.max_memory_option()
@options.json_option()
@options.markdown_option()
def verify_cmd(name, run_all, params, samples, exhaustive, hyp, seed, certify, cert_path, max_memory, json_path,
               md_path) -> None:
    """Compile a construction (or load a saved .safetensors model), measure it, check its bound and exactness.

    Prints one line per report (construction, parameters, L and H against their
    bounds, d_model, inputs checked, passed, time), the counterexample of any
    failure, and a summary line. --markdown writes the wide table.
    """
    from depthcraft.verify.cost import gate
    from depthcraft.verify.lookup import all_constructions, resolve
    from depthcraft.verify.verifier import verify, verify_all

    started = time.perf_counter()
    if bool(name) == bool(run_all):
        raise click.UsageError("give a construction NAME or --all (not both)")
    if name and name.endswith(".py"):
        raise click.UsageError(f"{name} is a Python file: check a RASP program in it with "
                               f"depthcraft check {name}[:NAME] --vocab ... --max-seq-len N")
    if name and is_saved_model(name):  # a saved model file: what verify-saved does
        if params:
            raise click.UsageError("-p cannot be combined with a saved model (its parameters are in the file)")
        verify_saved(name, samples=DEFAULT_SAMPLES if samples is None else samples, exhaustive=exhaustive, hyp=hyp,
                     seed=seed, json_path=json_path, certify=certify, cert_path=cert_path)
    if run_all and params:
        raise click.UsageError("-p cannot be combined with --all (it uses each construction's defaults)")
    if run_all and exhaustive:
        raise click.UsageError("--exhaustive cannot be combined with --all (most defaults have far too many inputs; "
                               "--all already checks every input where the input set is small)")
    options.check_certificate_path(cert_path, certify)
    if cert_path and run_all:
        raise click.UsageError("--certificate writes one file: give one construction, not --all")
    check_outputs([json_path, md_path, cert_path])
    given = parse_assignments(params)
    bar = progress_bar()
    if run_all:
        varying = ["construction", "params"]
        plan = [(c.name, resolve(c, g).params) for c in all_constructions() for g in c.defaults]
        keys = {c.name: varying_keys([p for n, p in plan if n == c.name]) for c in all_constructions()}
        labels = [params_text(p, keys[n]) for n, p in plan]
        reports = verify_all(samples=DEFAULT_SAMPLES_ALL if samples is None else samples, exhaustive=exhaustive,
                             seed=seed, hypothesis_examples=hyp, certify=certify)
    else:
        varying, sweep = expand_sweeps(given)
        if cert_path and len(sweep) > 1:
            raise click.UsageError("--certificate writes one file: give one parameter set, not a sweep")
        plan = [(name, resolve(name, p).params) for p in sweep]  # a bad value anywhere fails before any compile
        labels = [params_text(p, list(given)) for _, p in plan]
        reports = (verify(name, p, samples=DEFAULT_SAMPLES if samples is None else samples, exhaustive=exhaustive,
                          seed=seed, hypothesis_examples=hyp, progress=inputs_progress(bar), certify=certify,
                          certificate_path=cert_path)
                   for p in sweep)
    # every parameter set estimated (value sets only) and held to the memory budget before any build
    count = DEFAULT_SAMPLES_ALL if run_all else DEFAULT_SAMPLES
    estimates = [gate(resolve(n, p, sampling=False), max_memory, samples=count if samples is None else samples,
                      hypothesis_examples=hyp, certify=certify) for n, p in plan]
    shown = [f"{n} {label}".rstrip() for (n, _), label in zip(plan, labels)]
    done = stream_reports(timed(bar, with_estimates(reports, estimates), estimates, labels), labels, shown, bar,
                          certify=certify)
    written = write_outputs(done, json_path, md_path, varying)
    finish(done, time.perf_counter() - started, written, certify=certify)
    sys.exit(0 if all(r["passed"] for r in done) else 1)


__all__ = ["verify_cmd", "varying_keys"]
