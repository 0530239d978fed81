"""The k-hop paper preset (SPEC §7, C1 at the paper's scale) on one GPU in a fixed wall-time budget.

Trains the ``khop`` ``paper`` preset (N = 100, |Σ| = 4, k = 0..16 mixed and named by the BOS
token, depths 2-6, 4 heads, width 128, GPT-2 block, batch 32, AdamW lr 1e-4 with warm-up;
``--seeds`` seeds per depth, the capacity controls at ceil(log2 k) + 1 with twice the heads and
width) with the fused trainer (:mod:`verify.crosscheck.fused`: every group and seed in one
compiled step, bfloat16 products on a GPU, ``--precision``), and as many optimiser steps as fit
in ``--budget-s`` seconds of wall time (default 540 s = 9 min).

How the number of steps is chosen (printed and written to ``results.json`` under ``paper_gpu``):

1. the constructions are built (their depth is compared with training) and the time is counted;
2. calibration (:func:`calibrate`): the fused trainer runs ``(CAL_CHUNKS + 1) * chunk`` steps of
   the schedule with a curve evaluation after every chunk, then the final evaluation and
   alignment of every run once (nothing is kept). ``compile_s`` = the first chunk; ``step_s`` =
   seconds per optimiser step of the other chunks (all runs together); ``curve_eval_s`` = the
   slowest curve evaluation after the first; ``final_eval_s`` = the final evaluation. The run
   length is a runtime argument of the compiled step, so the main run compiles nothing new;
0. before anything is built or compiled, an up-front bound (:func:`upfront_floor`): the
   seconds the run needs at least, ``elapsed + (CAL_CHUNKS + 2) * chunk * step_flops / PEAK
   + 0.05 * budget + 10 s`` (calibration and one chunk of training at the device's stated peak
   rate, :func:`peak_flops`, and the reserve's fixed part; compilation and evaluation counted
   as free), ``step_flops`` the weight-matrix products of every run's forward and backward pass
   (:func:`step_flops`, a lower bound). If even that exceeds the budget, the script exits 2
   with one line saying so, within seconds;
3. ``reserve = 1.5 * final_eval_s + 0.05 * budget + 10 s`` (final evaluation, results, figures),
   ``steps = (budget - elapsed - reserve - CURVE_POINTS * (curve_eval_s + checkpoint_s)) /
   step_s`` (``checkpoint_s``: the slowest checkpoint of the calibration), rounded down to a
   multiple of CURVE_POINTS * chunk (every curve interval a whole number of chunks: one
   compiled chunk length), capped at the preset's 1e5. If not even one chunk fits, the script
   says so and exits 1 before training;
4. the training also stops at the deadline ``start + budget - reserve`` whatever the estimate
   said (``exit_reason`` "deadline"), so the run ends inside the budget.

``results.json`` is written after every curve point (``complete`` false, ``partial_step``, each
run's errors those of its latest curve point) and at the end: a run killed at its time limit
keeps what it trained. Every curve point is also a checkpoint of every run
(``OUT/checkpoints/fused``, :func:`verify.crosscheck.sweep.fused_checkpoint_dir`): the same
command run again calibrates, then takes the checkpoint's number of steps (not a new estimate:
the schedule depends on it) and continues from its step, the steps after it those of an
uninterrupted run; ``--fresh`` discards the checkpoint.

Writes to ``--out`` (default results/crosscheck/paper_gpu/): results.json, error_by_depth.png,
loss_curves.png (:mod:`verify.crosscheck.report`), table.md (the error table by depth and k
beside SPEC §7a's), COMMAND.

``--preset TASK:NAME`` (e.g. ``ictm_dense:c3``, ``retrieval_slots:c5``, a claim's preset): the same
path for another sweep, its steps times ``--scale`` (default 20) as the cap, written to
``OUT/TASK_NAME`` (no k-hop table). Curriculum presets need the per-group trainer and are refused.

``--smoke --layout padded --precision bfloat16``: the GPU's settings on the CPU (the default
suite runs it, tests/test_paper_gpu.py), so a first GPU run is not the path's first run.

``--smoke``: a tiny configuration of the same code path (N = 8, k = 0..1, depth 2 and the control
at 1, width 16, 2 seeds, 40 steps in chunks of 2, eval 32) for a CPU (tests/test_paper_gpu.py);
its steps are fixed, and the budget is checked and held the same way.

Usage:
    python scripts/paper_gpu.py                      # on a GPU machine: 9 minutes
    python scripts/paper_gpu.py --budget-s 500 --seeds 3
    python scripts/paper_gpu.py --preset ictm_dense:c3 --budget-s 240
    python scripts/paper_gpu.py --smoke --out /tmp/paper_gpu_smoke
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import sys
import time
from typing import Any, Dict, List, Tuple

from depthcraft.constructions.errors import DepthcraftError
from depthcraft.constructions.files import write_text_atomic
from depthcraft.verify.crosscheck import report, sweep
from depthcraft.verify.crosscheck.checkpoint import read_meta
from depthcraft.verify.crosscheck.claims import PAPER_KHOP
from depthcraft.verify.crosscheck.fused import PRECISIONS
from depthcraft.verify.crosscheck.presets import get_preset

OUT = "results/crosscheck/paper_gpu"
#: Timed chunks per group in the calibration (after one untimed chunk that compiles).
CAL_CHUNKS = 3
#: Curve evaluations per run (the sweep's default cadence); steps are a multiple of this x chunk.
CURVE_POINTS = sweep.DEFAULT_CURVE_POINTS
#: Stated peak rates (FLOP/s) for the up-front bound, above what the hardware can do, so that
#: the bound never refuses a budget that could hold: a CPU core (AVX-512, two FMA units, 16
#: float32 lanes, 2 FLOP per FMA, at a 6.25 GHz clock no core reaches); any GPU or TPU (above
#: the dense bfloat16 peak of every current single accelerator, e.g. ~2.25e15 for a B200).
PEAK_FLOPS = {"cpu_core": 2 * 16 * 2 * 6.25e9, "accelerator": 5e15}


def smoke_overrides() -> Dict[str, Any]:
    """The ``--smoke`` configuration: the paper preset's code path at a size a CPU runs in seconds."""
    return {"params": {"k": "0,1", "n": "8"}, "depths": (2,), "width": 16, "heads": 4, "seeds": 2,
            "steps": 40, "eval_size": 32, "alignment_size": 8, "chunk": 2, "warmup": 5,
            "checkpoint_every": 0}


def build_config(a: argparse.Namespace) -> sweep.SweepConfig:
    """The sweep: the khop paper preset, with the smoke sizes or the command line's seeds/control,
    trained by the fused trainer at ``a.precision``."""
    precision = getattr(a, "precision", "auto")
    layout = getattr(a, "layout", "auto")
    if getattr(a, "preset", None):
        task, _, name = a.preset.partition(":")
        preset = get_preset(task, name)
        return sweep.make_config(preset, trainer="fused", precision=precision, layout=layout, steps=preset.steps * a.scale,
                                 **({"seeds": a.seeds} if a.seeds is not None else {}),
                                 **({"control": a.control} if a.control is not None else {}))
    preset = get_preset("khop", "paper")
    control = True if a.control is None else a.control
    seeds = 3 if a.seeds is None else a.seeds
    if a.smoke:
        o = smoke_overrides()
        params = o.pop("params")
        return sweep.make_config(preset, params, control=control, trainer="fused", precision=precision,
                                 layout=layout, **o)
    return sweep.make_config(preset, seeds=seeds, control=control, trainer="fused", precision=precision,
                             layout=layout)


def peak_flops(backend: str) -> Tuple[float, str]:
    """The stated peak FLOP/s of this machine (:data:`PEAK_FLOPS`) and how it was made."""
    if backend == "cpu":
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        return cores * PEAK_FLOPS["cpu_core"], f"{cores * PEAK_FLOPS['cpu_core']:.1e} FLOP/s ({cores} cores)"
    return PEAK_FLOPS["accelerator"], f"{PEAK_FLOPS['accelerator']:.1e} FLOP/s ({backend})"


def step_flops(cfg: sweep.SweepConfig, runs: List[sweep.RunSpec], seq_len: int, n_outputs: int) -> float:
    """A lower bound on the FLOPs of one optimiser step of every run together: the products with
    weight matrices only (attention scores, softmax, LayerNorm, the optimiser: left out), 2 per
    multiply-add, forward once and backward twice (input and weight gradients), for ``batch``
    sequences of ``seq_len`` tokens. Per layer of width d: q, k, v, o (4 d^2) and the MLP
    (2 r d^2); the read-out d x ``n_outputs``."""
    tokens = cfg.train.batch * seq_len
    total = 0.0
    for r in runs:
        m = r.model
        per_layer = 4 * m.width ** 2 + (2 * m.mlp_ratio * m.width ** 2 if m.mlp else 0)
        total += m.depth * per_layer + m.width * n_outputs
    return 3 * 2 * tokens * total


def upfront_floor(cfg: sweep.SweepConfig, budget_s: float, elapsed_s: float, backend: str) -> Tuple[float, str]:
    """Seconds the run needs at least (module docstring, step 0), before anything is compiled,
    and how they add up. Builds no construction: the depth bounds only (``compile_model=False``)."""
    infos = []
    for c in cfg.conditions:
        info = sweep.construction_info(cfg.construction, c, compile_model=False)
        if info.bound is None and cfg.claim is not None:
            info.bound = cfg.claim(c)
        infos.append(info)
    runs = sweep.plan(cfg, [i.bound for i in infos])
    data = sweep._group_data(cfg, sweep.get_task(cfg.task), runs[0])
    flops = step_flops(cfg, runs, data.seq_len, data.n_classes)
    peak, how = peak_flops(backend)
    steps = (CAL_CHUNKS + 2) * cfg.chunk
    train = steps * flops / peak
    fixed = 0.05 * budget_s + 10.0
    floor = elapsed_s + train + fixed
    why = (f"{floor:.0f} s = {elapsed_s:.0f} s + {steps} steps x {flops:.2e} FLOP at {how} + "
           f"reserve {fixed:.0f} s")
    return floor, why


def calibrate(cfg: sweep.SweepConfig, groups: List[List[sweep.RunSpec]],
              infos: List[sweep.ConstructionInfo]) -> Dict[str, Any]:
    """Time the fused trainer on every run at once, its curve evaluation and the final evaluation.

    Trains ``(CAL_CHUNKS + 1) * chunk`` steps (the first chunk compiles) with a curve evaluation
    after every chunk, then runs the final evaluation and alignment of every run once; the
    compiled step, evaluation and alignment functions stay cached for the main run.

    Returns:
        ``{"step_s", "compile_s", "curve_eval_s", "checkpoint_s", "final_eval_s", "seconds",
        "precision"}``: seconds per optimiser step (all runs together, mean of the timed chunks),
        the first chunk, the slowest curve evaluation after the first, the slowest checkpoint
        (every run's weights and optimiser state, written at every curve point), the final
        evaluation, the whole calibration.
    """
    import tempfile

    from depthcraft.verify.crosscheck.trainer import TrainJob, train

    t = time.perf_counter()
    chunk = cfg.chunk
    runs, datas, sets, _, _ = sweep.fused_inputs(cfg, groups)
    with tempfile.TemporaryDirectory() as ckpt:
        jobs = [TrainJob(data=d, model=r.model, train=cfg.train, seeds=(r.train.seed,), chunk=chunk,
                         sampler=cfg.sampler, eval_sets=tuple(st), eval_every=chunk,
                         stop_at=(CAL_CHUNKS + 1) * chunk, checkpoint_dir=ckpt, precision=cfg.precision,
                         layout=cfg.layout) for d, r, st in zip(datas, runs, sets)]
        res = train(jobs, "fused").fused
    timed = res.stats["chunks"][1:]
    step_s = sum(c["seconds"] for c in timed) / max(1, len(timed) * chunk)
    evals = res.stats["evals"]
    te = time.perf_counter()
    sweep.fused_final_eval(cfg, res, runs, infos, {})
    final_eval_s = time.perf_counter() - te
    return {"step_s": step_s, "compile_s": res.stats["compile_s"],
            "curve_eval_s": round(max(evals[1:] or evals), 4),
            "checkpoint_s": round(max(res.stats["checkpoints"] or [0.0]), 4), "final_eval_s": round(final_eval_s, 3),
            "seconds": round(time.perf_counter() - t, 2), "precision": res.stats["precision"]}


def reserve_s(budget_s: float, cal: Dict[str, Any]) -> float:
    """Seconds kept for the final evaluation, results and figures (module docstring, step 3)."""
    return 1.5 * cal["final_eval_s"] + 0.05 * budget_s + 10.0


def choose_steps(budget_s: float, elapsed_s: float, cal: Dict[str, Any], chunk: int, cap: int) -> Tuple[int, str]:
    """Optimiser steps that fit the budget (see the module docstring), and how they were chosen.

    Raises:
        ValueError: not even ``chunk`` steps fit (the budget cannot hold the preset).
    """
    reserve = reserve_s(budget_s, cal)
    evals = CURVE_POINTS * (cal["curve_eval_s"] + cal.get("checkpoint_s", 0.0))
    left = budget_s - elapsed_s - reserve - evals
    fit = max(0, int(left / cal["step_s"])) if cal["step_s"] > 0 else cap
    grain = CURVE_POINTS * chunk
    steps = min(cap, fit // grain * grain if fit >= grain else fit // chunk * chunk)
    why = (f"budget {budget_s:.0f} s - elapsed {elapsed_s:.0f} s - reserve {reserve:.0f} s - {CURVE_POINTS} curve "
           f"evaluations and checkpoints {evals:.0f} s = {left:.0f} s at {cal['step_s'] * 1e3:.3f} ms/step "
           f"(all runs at once) "
           f"-> {fit} steps; rounded down to a multiple of {grain if fit >= grain else chunk}, cap {cap}: {steps}")
    if steps < chunk:
        raise ValueError(f"the budget cannot hold the preset: {why}")
    return steps, why


def with_steps(cfg: sweep.SweepConfig, steps: int) -> sweep.SweepConfig:
    """``cfg`` trained for ``steps`` steps (warm-up at most ``steps``, 20 logged losses at most
    every 100 steps)."""
    return dataclasses.replace(cfg, train=dataclasses.replace(
        cfg.train, steps=steps, warmup=min(cfg.train.warmup, steps), log_every=max(1, min(100, steps // 20))))


def check_checkpoint(cfg: sweep.SweepConfig, groups: List[List[sweep.RunSpec]], ckpt: str) -> None:
    """Raise :class:`ParameterError` when the checkpoint in ``ckpt`` was made with other settings
    than the fused sweep ``cfg`` of ``groups`` (compiles nothing)."""
    from depthcraft.verify.crosscheck import fused

    runs, datas, _, _, _ = sweep.fused_inputs(cfg, groups)
    triples = [(d, r.model, r.train.seed) for d, r in zip(datas, runs)]
    layout = fused.resolve_layout(cfg.layout)
    families = fused.make_families(triples, cfg.sampler, layout)
    every = cfg.eval_every or max(1, cfg.train.steps // sweep.DEFAULT_CURVE_POINTS)
    desc = fused.checkpoint_description(triples, cfg.train, families, fused.resolve_precision(cfg.precision),
                                        layout, every)
    fused.check_resumable(ckpt, desc)


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
    """One line per finished run."""

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
    ap.add_argument("--budget-s", type=float, default=540.0, help="wall-time budget in seconds (default 540)")
    ap.add_argument("--seeds", type=int, default=None, help="seeds per depth (default 3, or the --preset's)")
    ap.add_argument("--steps", type=int, default=None, help="train this many steps (no calibration)")
    ap.add_argument("--control", action=argparse.BooleanOptionalAction, default=None,
                    help="capacity controls at ceil(log2 k)+1 with 2x heads and width (default on, or the "
                         "--preset's)")
    ap.add_argument("--preset", default=None, metavar="TASK:NAME",
                    help="another claim's preset instead of k-hop paper (e.g. ictm_dense:c3, "
                         "retrieval_slots:c5), its steps times --scale as the cap")
    ap.add_argument("--scale", type=int, default=20, help="--preset's step cap: its steps times this (default 20)")
    ap.add_argument("--precision", choices=PRECISIONS, default="auto",
                    help="compute precision (default auto: bfloat16 on a GPU, float32 on the CPU)")
    ap.add_argument("--layout", choices=("auto", "padded", "split"), default="auto",
                    help="fused layout (default auto: padded on a GPU, split on the CPU); --smoke --layout padded "
                         "--precision bfloat16 runs the GPU's settings on the CPU")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, CPU, seconds (tests the path)")
    ap.add_argument("--fresh", action="store_true", help="discard OUT's checkpoint (default: continue from it)")
    a = ap.parse_args(argv)
    for name, low in (("budget_s", 1), ("seeds", 1), ("steps", 1), ("scale", 1)):
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
    if a.preset and a.smoke:
        print("error: --smoke runs the k-hop paper preset's code path; drop --preset", file=sys.stderr)
        return 2
    if a.preset and a.out == OUT:
        a.out = os.path.join(OUT, a.preset.replace(":", "_"))
    try:
        cfg = build_config(a)
    except DepthcraftError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    floor, floor_why = upfront_floor(cfg, a.budget_s, time.perf_counter() - t0, device["backend"])
    if floor > a.budget_s:
        print(f"error: the budget cannot hold the preset: {a.budget_s:.0f} s < {floor_why}", file=sys.stderr)
        return 2
    print(f"up-front bound: {floor_why}".replace(" at ", "\n  at ", 1), flush=True)
    ckpt = sweep.fused_checkpoint_dir(a.out)
    if a.fresh and os.path.isdir(ckpt):
        import shutil

        shutil.rmtree(ckpt)
    try:
        record = read_meta(ckpt)
    except DepthcraftError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    resume = None
    if record is not None:
        resume = (int(record["step"]), int(record["meta"]["config"]["train"]["steps"]))
        if a.steps is not None and a.steps != resume[1]:
            print(f"error: {ckpt} holds a run of {resume[1]} steps, not --steps {a.steps}; use --fresh",
                  file=sys.stderr)
            return 2
    infos = [sweep.condition_info(cfg, c) for c in cfg.conditions]
    groups = sweep.seed_groups(sweep.plan(cfg, [i.bound for i in infos]))
    if resume is not None:
        try:  # refuse a checkpoint of other settings now, not after the calibration
            check_checkpoint(with_steps(cfg, resume[1]), groups, ckpt)
        except DepthcraftError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    print(f"constructions built ({time.perf_counter() - t0:.0f} s); {len(groups)} groups of runs "
          f"({', '.join(sweep.group_id(g) for g in groups)}), one compiled step", flush=True)
    cal, why = None, "given on the command line (--steps)"
    reserve = 0.05 * a.budget_s + 10.0
    if a.steps is not None:
        steps = a.steps
    else:
        cal = calibrate(cfg, groups, infos)
        reserve = reserve_s(a.budget_s, cal)
        print(f"calibration ({cal['seconds']:.0f} s, {cal['precision']}): compile {cal['compile_s']:.1f} s, "
              f"{cal['step_s'] * 1e3:.2f} ms/step, curve evaluation {cal['curve_eval_s']:.2f} s, "
              f"final evaluation {cal['final_eval_s']:.1f} s", flush=True)
        try:
            fit, fit_why = choose_steps(a.budget_s, time.perf_counter() - t0, cal, cfg.chunk, cfg.train.steps)
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        if resume is not None:
            steps, why = resume[1], (f"the checkpoint's: resuming at step {resume[0]} of {resume[1]} (this "
                                     f"budget's estimate: {fit})")
        elif a.smoke:
            if fit < cfg.train.steps:
                print(f"error: the budget cannot hold the smoke run's {cfg.train.steps} steps: {fit_why}",
                      file=sys.stderr)
                return 1
            steps, why = cfg.train.steps, f"smoke: fixed at {cfg.train.steps} ({fit_why})"
        else:
            steps, why = fit, fit_why
    print(f"steps: {steps} ({why})", flush=True)
    cfg = with_steps(cfg, steps)
    deadline = t0 + a.budget_s - reserve
    t_train = time.perf_counter()
    stats: Dict[str, Any] = {}
    results = sweep.run_sweep(cfg, a.out, command=command, infos=infos, plot=False, progress=_Print(t0),
                              deadline=deadline, fused_stats=stats)
    if resume is not None:
        print(f"resumed from step {resume[0]}", flush=True)
    train_wall = time.perf_counter() - t_train
    chunks = stats.get("chunks", [])
    results["paper_gpu"] = {"budget_s": a.budget_s, "steps": steps, "steps_chosen": why, "calibration": cal,
                            "steps_done": max((r["steps_done"] for r in results["runs"]), default=0),
                            "deadline_s": round(deadline - t0, 1), "reserve_s": round(reserve, 1),
                            "groups": len(groups), "train_and_eval_wall_s": round(train_wall, 1),
                            "train_s": round(sum(c["seconds"] for c in chunks), 1),
                            "compile_s": stats.get("compile_s"), "curve_eval_s": round(sum(stats.get("evals", [])), 1),
                            "final_eval_s": stats.get("eval_s"), "precision": stats.get("precision"),
                            "layout": stats.get("layout"), "checkpoint_s": round(sum(stats.get("checkpoints", [])), 1),
                            "resumed_from": stats.get("resumed_from", 0), "upfront_floor_s": round(floor, 1),
                            "smoke": a.smoke}
    results["paper_gpu"]["preset"] = a.preset or "khop:paper"
    table = khop_table(results) if cfg.task == "khop" else None
    results["paper_gpu"]["wall_s"] = round(time.perf_counter() - t0, 1)
    report.write_results(a.out, results)
    report.write_figures(a.out, results)
    done = results["paper_gpu"]["steps_done"]
    if table is not None:
        write_text_atomic(os.path.join(a.out, "table.md"),
                          f"k-hop error by depth L and k ({done} steps, {cfg.seeds} seeds, N = "
                          f"{cfg.conditions[0]['n']}; mean ± std over seeds) beside SPEC §7a (1e5 steps, "
                          f"N = 100):\n\n" + table)
        print(table)
    write_text_atomic(os.path.join(a.out, "COMMAND"), command + "\n")
    print(f"wrote {a.out}/results.json, error_by_depth.png, loss_curves.png{', table.md' if table else ''} "
          f"({time.perf_counter() - t0:.0f} s wall, budget {a.budget_s:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
