"""``depthcraft train TASK``: the trained-model cross-check sweep (SPEC §7).

Registered in :mod:`depthcraft.verify.cli` (``COMMANDS``). Bad usage or input exits 2 with
one line (the CLI's handler of :class:`~constructions.errors.DepthcraftError`).
"""

from __future__ import annotations

import os
import shlex
from typing import Any, Dict

import click
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from depthcraft.constructions.errors import ParameterError
from depthcraft.constructions.params import (MAX_ALIGNMENT, MAX_BATCH, MAX_EVAL, MAX_HEADS, MAX_SEEDS, MAX_STEPS,
                                  MAX_WIDTH, parse_assignments)
from depthcraft.verify.cli import options
from depthcraft.verify.cli.render import console
from depthcraft.verify.crosscheck import sweep as sweep_mod
from depthcraft.verify.crosscheck.model import EMBEDDINGS
from depthcraft.verify.crosscheck.presets import PRESET_NAMES, get_preset, load_preset_file


class _RichProgress(sweep_mod.Progress):
    """Two bars: runs of the sweep, steps of the current run (with its last logged loss)."""

    def __init__(self, bar: Progress):
        self.bar = bar
        self.overall = None
        self.current = None
        self.done = {}  # run_id -> steps counted in the overall bar

    def begin(self, runs):
        self.overall = self.bar.add_task(f"sweep ({len(runs)} runs)", total=sum(r.train.steps for r in runs))

    def start_run(self, index, total, run, resumed_from):
        if self.current is not None:
            self.bar.remove_task(self.current)
        what = f"run {index + 1}/{total} {run.run_id}" + (f" (resumed at {resumed_from})" if resumed_from else "")
        self.current = self.bar.add_task(what, total=run.train.steps, completed=resumed_from)
        self.bar.advance(self.overall, resumed_from)
        self.done[run.run_id] = resumed_from

    def step(self, run, step, loss):
        # the fast trainer reports once per chunk, for each seed of a group: count each run's steps once
        self.bar.advance(self.overall, step - self.done.get(run.run_id, 0))
        self.done[run.run_id] = step
        self.bar.update(self.current, completed=step)
        if loss is not None:
            self.bar.update(self.current, description=f"{run.run_id} loss {loss:.4f}")

    def end_run(self, index, run, record):
        errs = " ".join(f"{k}: {v:.3f}" for k, v in record["error"].items() if v is not None)
        self.bar.console.print(f"{run.run_id}: error {errs} ({record['train_seconds']:.0f} s)")

    def message(self, text):
        self.bar.console.print(text)


def print_summary(results: Dict[str, Any]) -> None:
    """Table: per condition, error per depth, smallest depth under the threshold, bound, verdict."""
    summary = results["summary"]
    depths = sorted({int(d) for s in summary for d in s["errors"]})
    t = Table(title=f"depthcraft train {results['task']} ({results['preset']}): token error (best seed)")
    t.add_column("condition")
    for d in depths:
        t.add_column(f"L={d}", justify="right")
    for col in ("smallest L", "construction L", "bound", "verdict"):
        t.add_column(col)
    for s in summary:
        cells = []
        for d in depths:
            e = s["errors"].get(str(d))
            cells.append("-" if e is None else f"{e['best']:.3f}")
        verdict = {"agree": "[green]agree[/]", "disagree": "[red]disagree[/]"}.get(s["verdict"], s["verdict"])
        t.add_row(s["condition"], *cells, str(s["smallest_depth"] or "-"), str(s["construction_depth"] or "-"),
                  "-" if s["bound"] is None else f"{s['bound']} ({s['bound_formula']})", verdict)
    console.print(t)
    for s in summary:
        console.print(f"{s['condition']}: {s['note']}")
        if "errors_training_distribution" in s:
            errs = ", ".join(f"L={d} {e['best']:.3f}" for d, e in s["errors_training_distribution"].items())
            console.print(f"{s['condition']} on the training distribution: {errs} "
                          f"(smallest L < threshold: {s['smallest_depth_training_distribution'] or '-'})")


@click.command("train")
@click.argument("task")
@options.params_option("Task parameter; a comma list is swept, e.g. -p k=1,2,4 -p n=32.")
@click.option("--preset", type=click.Choice(PRESET_NAMES), default="cpu", show_default=True, metavar="NAME",
              help="cpu: minutes on 2 cores; paper: the paper's setting (GPU); c1..c7_curriculum: the "
                   f"training claims' sweeps. One of {', '.join(PRESET_NAMES)}.")
@click.option("--config", "config_file", default=None, type=click.Path(dir_okay=False), metavar="FILE",
              help="A preset file (JSON object of preset fields, 'preset' naming the built-in one it starts "
                   "from); the options below override it.")
@click.option("--depths", default=None, metavar="RANGE", help="Attention depths, e.g. 1-6 or 1,2,4.")
@click.option("--heads", type=click.IntRange(1, MAX_HEADS), default=None, help="Heads per attention layer.")
@click.option("--width", type=click.IntRange(1, MAX_WIDTH), default=None, help="Residual width d_model.")
@click.option("--steps", type=click.IntRange(1, MAX_STEPS), default=None, help="Optimiser steps per run.")
@click.option("--batch", type=click.IntRange(1, MAX_BATCH), default=None, help="Sequences per step.")
@click.option("--lr", type=click.FloatRange(0, 10, min_open=True), default=None, help="Peak learning rate.")
@click.option("--warmup", type=click.IntRange(0, MAX_STEPS), default=None, help="Warm-up steps.")
@click.option("--seeds", type=click.IntRange(1, MAX_SEEDS), default=None, help="Seeds per (condition, depth).")
@click.option("--mlp/--no-mlp", default=None, help="MLP after each attention layer.")
@click.option("--layer-norm/--no-layer-norm", default=None, help="Pre-LayerNorm.")
@click.option("--attention", type=click.Choice(["softmax", "relu"]), default=None, help="Attention kind.")
@click.option("--embedding", type=click.Choice(list(EMBEDDINGS)), default=None,
              help="Token embedding: learned, or fixed onehot / random rows (never updated).")
@click.option("--looped/--no-looped", default=None,
              help="One block's weights shared by every layer (looped depth, Saunshi et al. 2025).")
@click.option("--mixed/--separate", default=None,
              help="One model on all swept conditions (named by the BOS token), or one model per condition.")
@click.option("--mix-over", default=None, metavar="NAMES",
              help="With --mixed: the swept parameters mixed in one model, comma-separated (e.g. d); one model "
                   "per value of the other swept parameters.")
@click.option("--curriculum", type=click.FloatRange(0, 1, min_open=True), default=None, metavar="ACC",
              help="With --mixed: move on to the next condition (easiest first) once the accuracy on the "
                   "current one reaches ACC (e.g. 0.99); recorded per run in results.json.")
@click.option("--control/--no-control", default=None,
              help="Also train at bound-1 with twice the heads and width.")
@click.option("--threshold", type=click.FloatRange(0, 1, min_open=True, max_open=True), default=None,
              help="Error below which a depth solves a condition.")
@click.option("--construction", default=None, help="Construction to compare with (default: the preset's).")
@click.option("--eval-size", type=click.IntRange(1, MAX_EVAL), default=None, help="Evaluation sequences per condition.")
@click.option("--alignment-size", type=click.IntRange(0, MAX_ALIGNMENT), default=None,
              help="Sequences per condition for the attention alignment (0 = skip it).")
@click.option("--checkpoint-every", type=click.IntRange(0, MAX_STEPS), default=None,
              help="Steps between checkpoints (0 = only at the end).")
@click.option("--trainer", type=click.Choice(["fast", "fused", "loop"]), default=None,
              help="The backend of verify.crosscheck.trainer.train: fast: a (condition, depth)'s seeds vmapped, "
                   "--chunk steps per call; fused: every run of the sweep in one compiled step; loop: one step "
                   "per call.")
@click.option("--sampler", type=click.Choice(["auto", "jax", "numpy"]), default=None,
              help="Training batches of the fast trainer: JAX sampler in the step, or numpy (auto: JAX if any).")
@click.option("--chunk", type=click.IntRange(1, MAX_STEPS), default=None,
              help="Optimiser steps per jitted call (fast trainer).")
@click.option("--exit-error", type=click.FloatRange(0, 1, max_open=True), default=None,
              help="Early exit: stop when every seed's curve error is <= this twice in a row.")
@click.option("--dense/--no-dense", default=None,
              help="Dense supervision: the task's dense variant (every in-context answer scored).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Output directory (default results/crosscheck/TASK_PRESET).")
@click.option("--fresh", is_flag=True, help="Discard existing checkpoints of these runs (default: resume them).")
@click.option("--ray", "use_ray", is_flag=True,
              help="Train the independent runs as Ray tasks on a local Ray instance (pip install 'depthcraft[ray]').")
@click.option("--ray-address", default=None, metavar="ADDR",
              help="Join the Ray cluster at ADDR (e.g. ray://head:10001 or auto); OUT must be shared by its nodes.")
def train_cmd(task, params, preset, config_file, depths, heads, width, steps, batch, lr, warmup, seeds, mlp, layer_norm,
              attention, embedding, looped, mixed, mix_over, curriculum, control, threshold, construction, eval_size,
              alignment_size,
              checkpoint_every, trainer, sampler, chunk, exit_error, dense, out_dir, fresh, use_ray,
              ray_address) -> None:
    """Train transformers of several depths on TASK and compare with the construction's bound.

    One run per (condition, depth, seed); writes results.json and error_by_depth.png
    to the output directory, checkpoints to OUT/checkpoints (resumed when present).
    With --ray or --ray-address the runs train as Ray tasks: same seeds, same numbers.
    """
    import jax

    if use_ray or ray_address:
        sweep_mod.ray_module()  # without Ray installed: one line, exit 2, before any work

    p = load_preset_file(config_file, task) if config_file else get_preset(task, preset)
    if construction is not None:
        from depthcraft.verify import lookup

        lookup.get(construction)  # an unknown name is a usage error, not a note in the results
    cfg = sweep_mod.make_config(
        p, parse_assignments(params),
        depths=sweep_mod.parse_depths(depths) if depths is not None else None, heads=heads, width=width,
        steps=steps, batch=batch, lr=lr, warmup=warmup, seeds=seeds, mlp=mlp, layer_norm=layer_norm,
        attention=attention, embedding=embedding, looped=looped, mixed=mixed, control=control, curriculum=curriculum,
        mix_over=None if mix_over is None else tuple(x.strip() for x in mix_over.split(",") if x.strip()),
        threshold=threshold,
        construction=construction, eval_size=eval_size, alignment_size=alignment_size,
        checkpoint_every=checkpoint_every, trainer=trainer, sampler=sampler, chunk=chunk, exit_error=exit_error,
        dense=dense)
    out_dir = out_dir or os.path.join("results", "crosscheck", f"{task}_{p.name}")
    _check_out_dir(out_dir)
    command = _command_line(click.get_current_context())
    console.print(f"device: {jax.default_backend()} ({jax.devices()[0]}); output: {out_dir}")
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TimeRemainingColumn(), console=console, transient=False) as bar:
        prog = _RichProgress(bar)
        try:
            results = sweep_mod.run_sweep(cfg, out_dir, fresh=fresh, progress=prog, command=command,
                                          ray=use_ray, ray_address=ray_address)
        except KeyboardInterrupt:  # finished runs and checkpoints stay: they are what resuming needs
            raise ParameterError(interrupted_message(out_dir)) from None
    print_summary(results)
    console.print(f"results written to {os.path.join(out_dir, 'results.json')} and "
                  f"{os.path.join(out_dir, 'error_by_depth.png')} ({results['seconds']:.0f} s)")


def interrupted_message(out_dir: str) -> str:
    """The one-line message of an interrupted sweep, saying what is on disk."""
    left = []
    if os.path.isfile(os.path.join(out_dir, "results.json")):
        left.append("results.json of the finished runs (complete: false)")
    ckpt = os.path.join(out_dir, "checkpoints")
    if os.path.isdir(ckpt) and any(os.scandir(ckpt)):
        left.append("checkpoints")
    if not left:
        return f"interrupted before the first checkpoint; nothing was written to {out_dir}"
    return f"interrupted; {' and '.join(left)} are in {out_dir}; the same command resumes"


def _command_line(ctx: click.Context) -> str:
    """The command that reproduces this sweep: every option the user gave, in a fixed order."""
    parts = ["depthcraft", "train", ctx.params["task"]]
    for item in ctx.params["params"]:
        parts += ["-p", item]
    for param in ctx.command.params:
        name = param.name
        if name in ("task", "params"):
            continue
        value = ctx.params.get(name)
        if ctx.get_parameter_source(name) != click.core.ParameterSource.COMMANDLINE or value is None:
            continue
        if isinstance(param, click.Option) and param.is_flag:
            flag = param.opts[0] if value else (param.secondary_opts or param.opts)[0]
            parts.append(flag)
        else:
            parts += [param.opts[0], str(value)]
    return " ".join(shlex.quote(x) for x in parts)


def _check_out_dir(out_dir: str) -> None:
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise ParameterError(f"--out {out_dir} exists and is not a directory")
    parent = os.path.dirname(os.path.abspath(out_dir))
    probe = out_dir if os.path.isdir(out_dir) else parent
    while not os.path.isdir(probe):
        probe = os.path.dirname(probe)
    if not os.access(probe, os.W_OK):
        raise ParameterError(f"--out {out_dir}: cannot write under {probe} (permission denied)")
