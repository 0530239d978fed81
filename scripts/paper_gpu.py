"""The k-hop paper preset (SPEC §7, C1 at the paper's scale) on one GPU in a fixed wall-time budget.

Trains the ``khop`` ``paper`` preset (N = 100, |Σ| = 4, k = 0..16 mixed and named by the BOS
token, depths 2-6, 4 heads, width 128, GPT-2 block, batch 32, AdamW lr 1e-4 with warm-up;
``--seeds`` seeds vmapped per depth, the capacity controls at ceil(log2 k) + 1 with twice the
heads and width) with every group of runs (one per depth and per control depth) trained at once
in threads of one process (:func:`verify.crosscheck.sweep.run_sweep` with ``workers``), and as
many optimiser steps as fit in ``--budget-s`` seconds of wall time (default 720 s = 12 min).

How the number of steps is chosen (printed and written to ``results.json`` under ``paper_gpu``):

1. the constructions are built (their depth is compared with training) and the time is counted;
2. calibration: every group trains the first ``(CAL_CHUNKS + 1) * chunk`` steps of the preset's
   schedule at once, in threads, with a curve evaluation after every chunk (nothing is kept);
   after the first chunk (compilation) the threads wait for each other, then each times
   ``CAL_CHUNKS`` chunks. ``step_s`` = the slowest group's seconds per step with all groups
   running (an upper bound once faster groups finish); ``compile_s`` = the slowest group's first
   chunk (the main run compiles again unless its steps are the preset's: the schedule's length
   is part of the compiled step);
3. ``steps = (budget - elapsed - compile_s - reserve) / step_s``, rounded down to a multiple of
   20 * chunk (so every chunk between the 20 curve evaluations has the same length: one
   compilation per group), capped at the preset's 1e5; ``reserve`` = 10 % of the budget + 30 s
   for the final evaluation, alignment and figures.

Writes to ``--out`` (default results/crosscheck/paper_gpu/): results.json, error_by_depth.png,
loss_curves.png (:mod:`verify.crosscheck.report`), table.md (the error table by depth and k
beside SPEC §7a's), COMMAND. Checkpoints go to OUT/checkpoints (not committed; a rerun with the
same ``--steps`` resumes them).

``--smoke``: a tiny configuration of the same code path (N = 8, k = 0..1, depth 2 and the control
at 1, width 16, 2 seeds, 40 steps in chunks of 2, eval 32) for a CPU (tests/test_paper_gpu.py).

Usage:
    python scripts/paper_gpu.py                      # on a GPU machine: about 12 minutes
    python scripts/paper_gpu.py --budget-s 600 --seeds 3
    python scripts/paper_gpu.py --smoke --out /tmp/paper_gpu_smoke
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import sys
import threading
import time
from typing import Any, Dict, List, Tuple

import jax

from depthcraft.constructions.files import write_text_atomic
from depthcraft.verify.crosscheck import report, sweep
from depthcraft.verify.crosscheck.claims import PAPER_KHOP
from depthcraft.verify.crosscheck.data import TaskData
from depthcraft.verify.crosscheck.presets import get_preset
from depthcraft.verify.crosscheck.train import train_seeds
from depthcraft.verify.tasks import get_task

OUT = "results/crosscheck/paper_gpu"
#: Timed chunks per group in the calibration (after one untimed chunk that compiles).
CAL_CHUNKS = 3
#: Curve evaluations per run (the sweep's default cadence); steps are a multiple of this x chunk.
CURVE_POINTS = sweep.DEFAULT_CURVE_POINTS


def smoke_overrides() -> Dict[str, Any]:
    """The ``--smoke`` configuration: the paper preset's code path at a size a CPU runs in seconds."""
    return {"params": {"k": "0,1", "n": "8"}, "depths": (2,), "width": 16, "heads": 4, "seeds": 2,
            "steps": 40, "eval_size": 32, "alignment_size": 8, "chunk": 2, "warmup": 5,
            "checkpoint_every": 0}


def build_config(a: argparse.Namespace) -> sweep.SweepConfig:
    """The sweep: the khop paper preset, with the smoke sizes or the command line's seeds/control."""
    preset = get_preset("khop", "paper")
    if a.smoke:
        o = smoke_overrides()
        params = o.pop("params")
        return sweep.make_config(preset, params, control=a.control, **o)
    return sweep.make_config(preset, seeds=a.seeds, control=a.control)


def calibrate(cfg: sweep.SweepConfig, groups: List[List[sweep.RunSpec]]) -> Dict[str, Any]:
    """Time every group training at once (threads), as the main run will.

    Returns:
        ``{"step_s", "compile_s", "per_group": [{"group", "step_s", "first_chunk_s"}], "seconds"}``
        (seconds per optimiser step of the slowest group with all running, the slowest first chunk).
    Raises:
        RuntimeError: a group's calibration failed (its exception is chained).
    """
    task = get_task(cfg.task)
    chunk = cfg.chunk
    barrier = threading.Barrier(len(groups), timeout=1800)
    out: List[Dict[str, Any]] = [{} for _ in groups]
    errors: List[BaseException] = []

    def one(i: int, group: List[sweep.RunSpec]) -> None:
        run0 = group[0]
        data = TaskData(task, [cfg.conditions[c] for c in run0.conditions], [cfg.names[c] for c in run0.conditions])
        sets = data.eval_sets(sweep.EVAL_SEED + 1, sweep.CURVE_EVAL_SIZE)
        marks: List[float] = []

        def on_chunk(step, losses):
            marks.append(time.perf_counter())
            if len(marks) == 1:
                barrier.wait()  # every group compiled: time them running together
                marks[0] = time.perf_counter()

        t0 = time.perf_counter()
        try:
            # the run's own optimiser settings, stopped early: where the steps are already known
            # (--steps, --smoke, or the cap) the main run reuses this compilation
            train_seeds(data, run0.model, run0.train, [r.train.seed for r in group], chunk=chunk,
                        sampler=cfg.sampler, eval_sets=sets, eval_every=chunk, on_chunk=on_chunk,
                        stop_at=(CAL_CHUNKS + 1) * chunk)
        except BaseException as e:  # noqa: BLE001 - re-raised in the main thread
            errors.append(e)
            barrier.abort()
            return
        out[i] = {"group": sweep.group_id(group), "first_chunk_s": round(marks[0] - t0, 3),
                  "step_s": (marks[-1] - marks[0]) / (CAL_CHUNKS * chunk)}

    t = time.perf_counter()
    threads = [threading.Thread(target=one, args=(i, g)) for i, g in enumerate(groups)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise RuntimeError(f"calibration failed: {errors[0]!r}") from errors[0]
    return {"step_s": max(g["step_s"] for g in out), "compile_s": max(g["first_chunk_s"] for g in out),
            "per_group": [dict(g, step_s=round(g["step_s"], 6)) for g in out],
            "seconds": round(time.perf_counter() - t, 2)}


def choose_steps(budget_s: float, elapsed_s: float, cal: Dict[str, Any], chunk: int, cap: int) -> Tuple[int, str]:
    """Optimiser steps that fit the budget (see the module docstring), and how they were chosen.

    Raises:
        ValueError: not even ``chunk`` steps fit.
    """
    reserve = 0.1 * budget_s + 30.0
    left = budget_s - elapsed_s - cal["compile_s"] - reserve
    fit = int(left / cal["step_s"]) if cal["step_s"] > 0 else cap
    grain = CURVE_POINTS * chunk
    steps = min(cap, fit // grain * grain if fit >= grain else fit // chunk * chunk)
    why = (f"budget {budget_s:.0f} s - elapsed {elapsed_s:.0f} s - compile {cal['compile_s']:.1f} s - reserve "
           f"{reserve:.0f} s = {left:.0f} s at {cal['step_s'] * 1e3:.3f} ms/step (slowest group, all running) "
           f"-> {fit} steps; rounded down to a multiple of {grain if fit >= grain else chunk}, cap {cap}: {steps}")
    if steps < chunk:
        raise ValueError(f"no time left for training: {why}")
    return steps, why


def khop_table(results: Dict[str, Any]) -> str:
    """Markdown: error (mean ± std over seeds) by depth and k, beside SPEC §7a's published errors."""
    summary = {s["condition"]: s for s in results["summary"]}
    paper_ks = sorted({k for row in PAPER_KHOP.values() for k in row})
    depths = sorted({int(d) for s in summary.values() for d in s["errors"]} | set(PAPER_KHOP))
    head = ["L"] + [f"k={k} (ours)" for k in paper_ks] + [f"k={k} (paper)" for k in paper_ks]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for d in depths:
        ours = []
        for k in paper_ks:
            e = summary.get(f"k={k}", {}).get("errors", {}).get(str(d))
            ours.append("—" if e is None else f"{e['mean']:.3f} ± {e['std']:.3f}")
        theirs = [f"{PAPER_KHOP[d][k]:.3f}" if k in PAPER_KHOP.get(d, {}) else "—" for k in paper_ks]
        lines.append("| " + " | ".join([str(d)] + ours + theirs) + " |")
    return "\n".join(lines) + "\n"


class _Print(sweep.Progress):
    """One line per finished run (the groups train in threads: no per-step bars)."""

    def __init__(self, t0: float):
        self.t0 = t0

    def message(self, text):
        print(text, flush=True)

    def end_run(self, index, run, record):
        errs = [v for v in record["error"].values() if v is not None]
        print(f"{time.perf_counter() - self.t0:6.0f} s  {run.run_id}: mean error over k "
              f"{sum(errs) / max(len(errs), 1):.3f}, final loss {record['final_loss']}", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=OUT, help=f"output directory (default {OUT})")
    ap.add_argument("--budget-s", type=float, default=720.0, help="wall-time budget in seconds (default 720)")
    ap.add_argument("--seeds", type=int, default=3, help="seeds per depth (default 3)")
    ap.add_argument("--steps", type=int, default=None, help="train this many steps (no calibration)")
    ap.add_argument("--control", action=argparse.BooleanOptionalAction, default=True,
                    help="capacity controls at ceil(log2 k)+1 with 2x heads and width (default on)")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, CPU, seconds (tests the path)")
    a = ap.parse_args(argv)
    for name, low in (("budget_s", 1), ("seeds", 1), ("steps", 1)):
        v = getattr(a, name)
        if v is not None and v < low:
            print(f"error: --{name.replace('_', '-')} must be >= {low}, got {v}", file=sys.stderr)
            return 2
    t0 = time.perf_counter()
    command = "python scripts/paper_gpu.py " + " ".join(shlex.quote(x) for x in (argv if argv is not None
                                                                               else sys.argv[1:]))
    device = sweep.device_info()
    print(f"device: {device['backend']} ({device['device']}); output: {a.out}", flush=True)
    if device["backend"] == "cpu" and not a.smoke:
        print("warning: no GPU: the paper preset will fit few steps in the budget", file=sys.stderr)
    cfg = build_config(a)
    infos = [sweep.condition_info(cfg, c) for c in cfg.conditions]
    groups = sweep.seed_groups(sweep.plan(cfg, [i.bound for i in infos]))
    print(f"constructions built ({time.perf_counter() - t0:.0f} s); {len(groups)} groups of runs "
          f"({', '.join(sweep.group_id(g) for g in groups)})", flush=True)
    cal, why = None, "given on the command line (--steps)"
    if a.steps is not None:
        steps = a.steps
    elif a.smoke:
        cal = calibrate(cfg, groups)
        steps, why = cfg.train.steps, f"smoke: fixed at {cfg.train.steps} (calibration ran: {cal['step_s'] * 1e3:.2f} ms/step)"
    else:
        cal = calibrate(cfg, groups)
        try:
            steps, why = choose_steps(a.budget_s, time.perf_counter() - t0, cal, cfg.chunk, cfg.train.steps)
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
    print(f"steps: {steps} ({why})", flush=True)
    cfg = dataclasses.replace(cfg, train=dataclasses.replace(
        cfg.train, steps=steps, warmup=min(cfg.train.warmup, steps), log_every=max(1, min(100, steps // 20))))
    t_train = time.perf_counter()
    results = sweep.run_sweep(cfg, a.out, command=command, workers=len(groups), infos=infos, plot=False,
                              progress=_Print(t0))
    train_wall = time.perf_counter() - t_train
    results["paper_gpu"] = {"budget_s": a.budget_s, "steps": steps, "steps_chosen": why, "calibration": cal,
                            "groups": len(groups), "train_and_eval_wall_s": round(train_wall, 1),
                            "smoke": a.smoke}
    table = khop_table(results)
    results["paper_gpu"]["wall_s"] = round(time.perf_counter() - t0, 1)
    report.write_results(a.out, results)
    report.write_figures(a.out, results)
    write_text_atomic(os.path.join(a.out, "table.md"),
                      f"k-hop error by depth L and k ({steps} steps, {cfg.seeds} seeds, N = "
                      f"{cfg.conditions[0]['n']}; mean ± std over seeds) beside SPEC §7a (1e5 steps, N = 100):\n\n"
                      + table)
    write_text_atomic(os.path.join(a.out, "COMMAND"), command + "\n")
    print(table)
    print(f"wrote {a.out}/results.json, error_by_depth.png, loss_curves.png, table.md "
          f"({time.perf_counter() - t0:.0f} s wall, budget {a.budget_s:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
