"""The float32 noise floor of a training trajectory, and how closely the fused trainer meets it.

Issue 32 asks that in float32 the fused trainer (:func:`~verify.crosscheck.fused.train_fused`)
give the per-group trainer's (:func:`~verify.crosscheck.train.train_seeds`) losses to a relative
difference < 1e-5 after 100 steps on the k-hop ``cpu`` preset. On the sweep of
tests/test_crosscheck_fused.py (the ``cpu`` preset at N = 8, width 16, depths 1-2 and the
capacity controls at 1-3, 2 seeds, batch 8, 100 steps; 10 runs) at the preset's learning rate
(2e-3; ``--lr``), this measures the largest relative difference of the logged losses over every
run and step between:

* ``per_group_vmapped_vs_one_at_a_time``: the per-group trainer against itself, each group's
  seeds vmapped together against each seed trained alone (a semantically null change: the
  same weights, batches and optimiser; XLA compiles a batch of 2 and of 1);
* ``per_group_chunk_20_vs_25``: the per-group trainer against itself, 20 against 25 steps per
  compiled call;
* ``fused_split_vs_per_group``: the fused trainer, ``layout="split"`` (each depth's seeds vmapped
  on their own, the learning rates from optax's schedule), against the per-group trainer;
* ``fused_padded_vs_per_group``: the same, ``layout="padded"`` (every depth of a family in one
  padded stack: other reduction shapes);
* ``fused_split_runtime_schedule_vs_per_group``: ``split`` with the learning rates of
  :func:`~verify.crosscheck.train.runtime_schedule` (the run length a traced argument: equal to
  optax's values up to the last bit, ``schedule_last_bit``) instead of :func:`fused.learning_rates`;

and, with ``--kernels``, the kernels per step of the k-hop ``paper`` preset's fused program in
both layouts (CPU back end's HLO, benchmarks/train_kernels.py's count).

    python benchmarks/fused_noise.py --kernels --json results/performance/fused_noise.json
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any, Dict, List

import jax
import jax.numpy as jnp
import numpy as np

from depthcraft.constructions.files import write_json_atomic
from depthcraft.verify.crosscheck import fused, sweep
from depthcraft.verify.crosscheck.presets import get_preset
from depthcraft.verify.crosscheck.train import TrainConfig, runtime_schedule, schedule, train_seeds


def small_sweep(lr: float):
    """The test sweep of tests/test_crosscheck_fused.py at learning rate ``lr``."""
    cfg = sweep.make_config(get_preset("khop", "cpu"), {"n": "8"}, steps=100, seeds=2, width=16, depths=(1, 2),
                            warmup=10, batch=8, chunk=20, lr=lr)
    infos = [sweep.construction_info(cfg.construction, c, compile_model=False) for c in cfg.conditions]
    return cfg, sweep.seed_groups(sweep.plan(cfg, [i.bound for i in infos]))


def worst(a: List[Any], b: List[Any]) -> float:
    """Largest relative difference of the logged losses, over runs and steps."""
    out = 0.0
    for x, y in zip(a, b):
        assert [h["step"] for h in x.history] == [h["step"] for h in y.history]
        u = np.array([h["loss"] for h in x.history])
        v = np.array([h["loss"] for h in y.history])
        out = max(out, float((np.abs(u - v) / np.abs(u)).max()))
    return out


def per_group(cfg, groups, one_at_a_time: bool = False, chunk: int = 0):
    task = sweep.get_task(cfg.task)
    out = []
    for g in groups:
        data = sweep._group_data(cfg, task, g[0])
        seeds = [r.train.seed for r in g]
        for part in ([[s] for s in seeds] if one_at_a_time else [seeds]):
            out += train_seeds(data, g[0].model, g[0].train, part, chunk=chunk or cfg.chunk, sampler="auto")
    return out


def fused_runs(cfg, groups, layout: str):
    task = sweep.get_task(cfg.task)
    runs = [(sweep._group_data(cfg, task, g[0]), r.model, r.train.seed) for g in groups for r in g]
    return fused.train_fused(runs, cfg.train, chunk=cfg.chunk, sampler="auto", precision="float32",
                             layout=layout).outcomes


def schedule_last_bit(cfg: TrainConfig) -> Dict[str, Any]:
    """Steps where :func:`runtime_schedule` and optax's schedule differ, and by how much."""
    counts = jnp.arange(cfg.steps)
    ref = np.asarray(jax.jit(jax.vmap(schedule(cfg)))(counts))
    got = np.asarray(jax.jit(lambda c, s, w: jax.vmap(runtime_schedule(cfg, s, w))(c))(counts, cfg.steps,
                                                                                        cfg.warmup))
    fed = np.asarray(fused.learning_rates(cfg, 0, cfg.steps))
    nz = ref != 0
    return {"steps_differing": int((ref != got).sum()), "of": int(cfg.steps),
            "max_relative": float((np.abs(ref - got)[nz] / ref[nz]).max()),
            "learning_rates_equal_optax": bool(np.array_equal(fed, ref))}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lr", type=float, default=get_preset("khop", "cpu").lr,
                    help="learning rate (default the khop cpu preset's, 2e-3)")
    ap.add_argument("--kernels", action="store_true", help="also count the paper preset's kernels per layout")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args(argv)
    t0 = time.perf_counter()
    cfg, groups = small_sweep(a.lr)
    print(f"k-hop cpu preset, small: {len(groups)} groups, {sum(map(len, groups))} runs, "
          f"{cfg.train.steps} steps, lr {a.lr:g}, float32, {jax.default_backend()}", flush=True)
    base = per_group(cfg, groups)
    diffs: Dict[str, float] = {}

    def note(name, value):
        diffs[name] = value
        print(f"  {name:44s} {value:9.2e}", flush=True)

    note("per_group_vmapped_vs_one_at_a_time", worst(base, per_group(cfg, groups, one_at_a_time=True)))
    note("per_group_chunk_20_vs_25", worst(base, per_group(cfg, groups, chunk=25)))
    note("fused_split_vs_per_group", worst(base, fused_runs(cfg, groups, "split")))
    note("fused_padded_vs_per_group", worst(base, fused_runs(cfg, groups, "padded")))
    keep = fused.learning_rates
    try:
        fused.learning_rates = lambda c, s, e: jax.vmap(runtime_schedule(c, c.steps, c.warmup))(  # noqa: E731
            jnp.arange(s, e, dtype=jnp.int32))
        note("fused_split_runtime_schedule_vs_per_group", worst(base, fused_runs(cfg, groups, "split")))
    finally:
        fused.learning_rates = keep
    bits = schedule_last_bit(cfg.train)
    print(f"  runtime_schedule vs optax: {bits['steps_differing']} of {bits['of']} steps differ, "
          f"at most {bits['max_relative']:.1e} relative", flush=True)
    out: Dict[str, Any] = {
        "device": sweep.device_info(), "lr": a.lr, "steps": cfg.train.steps, "runs": sum(map(len, groups)),
        "sweep": "khop cpu preset, n=8, width 16, depths 1-2 + controls, 2 seeds, batch 8, warmup 10, chunk 20",
        "max_relative_loss_difference": diffs, "schedule_last_bit": bits, "target": 1e-5,
    }
    if a.kernels:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import train_kernels

        pcfg, pgroups = train_kernels.paper_groups(3)
        out["paper_kernels_per_step"] = {}
        for layout in fused.LAYOUTS:
            k = train_kernels.after_kernels(pcfg, pgroups, 4, "float32", layout=layout)
            out["paper_kernels_per_step"][layout] = round(k["total"], 1)
    out["seconds"] = round(time.perf_counter() - t0, 1)
    if a.json:
        write_json_atomic(a.json, out)
        print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
