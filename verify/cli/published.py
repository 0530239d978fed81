"""``depthcraft published REPO``: the k-hop paper's published models, evaluated and aligned (issue 31).

REPO is a checkout of ``chsanford/hop-induction-heads``. Writes ``results/crosscheck/published/``:
``models/<run>.json`` (one per evaluated run, written as it finishes: a rerun resumes),
``alignment/<run>.json``, ``results.json``, ``COMMAND`` and the figures
(:func:`depthcraft.verify.crosscheck.published.write_figures`). ``--port-check`` instead compares the
runtime's logits with Hugging Face's GPT-2 (needs torch and transformers, not dependencies of
depthcraft) and writes ``port.json``. Bad usage or input exits 2 with one line.
"""

from __future__ import annotations

import json
import os
import shlex
import sys

import click

from depthcraft.constructions.errors import InputError, ParameterError
from depthcraft.verify.cli.render import echo


def _runs_option(value):
    if value is None:
        return None
    return [r.strip() for r in value.split(",") if r.strip()]


@click.command("published")
@click.argument("repo", type=click.Path(file_okay=False))
@click.option("--out", default=None, help="Output folder [default: results/crosscheck/published under --root].")
@click.option("--root", default=".", show_default=True, type=click.Path(file_okay=False, exists=True),
              help="Project root.")
@click.option("--size", default=2048, show_default=True, type=click.IntRange(1, 1 << 16),
              help="Fresh inputs per k.")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(0, 2 ** 31 - 1),
              help="Seed of the evaluation inputs (the same inputs for every model).")
@click.option("--runs", default=None, help="Comma-separated run names [default: every present run].")
@click.option("--port-check", is_flag=True,
              help="Compare logits with Hugging Face's GPT-2 (needs torch, transformers); write port.json.")
@click.option("--dropout-size", default=1024, show_default=True, type=click.IntRange(0, 1 << 16),
              help="With --port-check: inputs per k for the dropout-on error (0: skip).")
@click.option("--ours", "ours", multiple=True, type=click.Path(file_okay=False, exists=True),
              help="A k-hop sweep folder of our own (with checkpoints/) whose models' hop schedules go into "
                   "schedules.json beside the authors' (repeatable).")
def published_cmd(repo, out, root, size, seed, runs, port_check, dropout_size, ours) -> None:
    """Evaluate and align Sanford et al.'s published k-hop models (REPO: a checkout of their repository)."""
    from depthcraft.constructions.files import write_json_atomic, write_text_atomic
    from depthcraft.verify.crosscheck import published as P

    if not os.path.isdir(os.path.join(repo, P.MODELS_DIR)):
        raise InputError(f"{repo}: not a checkout of chsanford/hop-induction-heads (no {P.MODELS_DIR}/)")
    out = out or os.path.join(root, P.OUT_DIR)
    present, absent = P.present_runs(repo)
    chosen = _runs_option(runs)
    if chosen is not None:
        bad = [r for r in chosen if r not in P.RUNS]
        if bad:
            raise ParameterError(f"--runs: unknown run {bad[0]!r} (e.g. width4-depth3-samples1k)")
        missing = [r for r in chosen if r not in present]
        if missing:
            raise InputError(f"--runs: {missing[0]} is absent from {repo} ({absent[missing[0]]})")
    todo = present if chosen is None else chosen
    echo(f"present: {len(present)} of {len(P.RUNS)} runs")
    if port_check:
        res = P.port_check(repo, todo, size=2, seed=seed, dropout_size=dropout_size, progress=echo)
        path = os.path.join(out, "port.json")
        os.makedirs(out, exist_ok=True)
        write_json_atomic(path, res)
        echo(f"max |logit diff| = {res['max_abs_logit_diff']:.2e} over {len(res['runs'])} runs")
        echo(f"written: {path}")
        return
    records = P.evaluate_runs(repo, out, size=size, seed=seed, runs=todo, progress=echo)
    alignments = {}
    fmt = P.AuthorsFormat()
    for r in records:
        path = os.path.join(out, "alignment", f"{r}.json")
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as fh:
                alignments[r] = json.load(fh)
            continue
        al = P.align_model(P.load_run(os.path.join(repo, P.MODELS_DIR, r)), fmt)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_json_atomic(path, al)
        alignments[r] = al
    port = None
    if os.path.isfile(os.path.join(out, "port.json")):
        with open(os.path.join(out, "port.json"), encoding="utf-8") as fh:
            port = json.load(fh)
    sched = _schedules(repo, records, ours, out)
    args = [a if a != repo else "HOP_REPO" for a in sys.argv[2:]] if sys.argv[1:2] == ["published"] else \
        ["HOP_REPO", "--size", str(size), "--seed", str(seed)]
    command = "depthcraft published " + " ".join(shlex.quote(a) for a in args)
    doc = P.build_results(repo, records, alignments, port, command=command, schedules=sched)
    write_json_atomic(os.path.join(out, "results.json"), doc)
    lines = [f"# {P.MODELS_DIR} of a checkout of github.com/chsanford/hop-induction-heads (HOP_REPO)"]
    if port is not None:
        lines.append(f"depthcraft published HOP_REPO --port-check --runs {','.join(port.get('runs', {}))} "
                     f"--dropout-size {port.get('dropout_inputs_per_k') or 0}  # port.json; needs torch, transformers")
    lines.append(command)
    write_text_atomic(os.path.join(out, "COMMAND"), "\n".join(lines) + "\n")
    figures = P.write_figures(out, doc)
    figures += _schedule_figures(out, sched)
    for line in P.summary_lines(doc):
        echo(line)
    for f in [os.path.join(out, "results.json"), *figures]:
        echo(f"written: {f}")


def _schedules(repo, records, ours, out):
    """schedules.json: every evaluated published run's hop schedule and every model of ``ours``."""
    from depthcraft.constructions.files import write_json_atomic
    from depthcraft.verify.crosscheck import published as P
    from depthcraft.verify.crosscheck import schedule as S

    fmt = P.AuthorsFormat()
    models = {}
    for r in records:
        rec = P.model_schedule(P.load_run(os.path.join(repo, P.MODELS_DIR, r)), fmt)
        rec["source"] = "authors"
        models[r] = rec
    for folder in ours:
        for name, rec in S.sweep_schedules(folder).items():
            models[f"ours:{os.path.normpath(folder)}/{name}"] = rec
    depths = sorted({m["depth"] for m in models.values()})
    doc = {"references": list(S.REFERENCES), "match": S.MATCH, "ks_authors": list(P.SCHEDULE_KS),
           "inputs_per_k": P.SCHEDULE_SIZE, "rule": " ".join((S.__doc__ or "").split("Per head and reference:")[1]
                                                              .split("Inputs are drawn")[0].split()),
           "construction": {str(d): S.construction_schedule(d) for d in depths}, "models": models}
    write_json_atomic(os.path.join(out, "schedules.json"), doc)
    return doc


def _schedule_figures(out, sched):
    """schedule_L<d>.png: the fresh-sample 4-head published run of each depth, and one per depth of
    each of our sweeps (its first seed), under the sweep's folder name."""
    from depthcraft.verify.crosscheck import published as P
    from depthcraft.verify.crosscheck import schedule as S

    written = []
    for name, rec in sched["models"].items():
        if rec.get("source") == "authors":
            if P.RUNS.get(name, (0, 0, 0))[1:] != (4, -1):
                continue
            path = os.path.join(out, f"schedule_L{rec['depth']}.png")
        else:
            if not name.endswith("/seed0"):
                continue
            path = os.path.join(out, f"schedule_ours_L{rec['depth']}{'_looped' if rec.get('looped') else ''}.png")
        S.write_figure(path, name, rec)
        written.append(path)
    return written


__all__ = ["published_cmd"]
