"""Training throughput: today's loop (:func:`train`) against the fast trainer (:func:`train_seeds`).

Both train the k-hop ``cpu`` preset's model (N = 32, |Σ| = 4, mixed k in {1, 2, 4},
4 heads, width 64, MLPs, pre-LayerNorm, batch 32) at one depth, in the same
process, after a warm-up call of each (compilation is not timed). Reported:
optimiser steps per second per seed (seed-steps / wall second) of

* ``loop``: :func:`train`, one seed at a time, a numpy batch and a jitted step per
  optimiser step (the sweep's loop before issue 11);
* ``scan-numpy``: :func:`train_seeds` with numpy-fed chunks (same data as the loop);
* ``scan-jax``: :func:`train_seeds` with the JAX sampler, ``--seeds`` seeds vmapped;
* ``grad-only``: forward + backward of the loss alone, seeds vmapped, on one batch already on the
  device (no optimiser, no data): the model's own cost, a ceiling for any trainer that keeps the
  model and its maths;

and the ratio of each to ``loop``. Each configuration is timed ``--repeats`` times,
interleaved, and the median is reported (the machine is shared; the spread is printed).

    python benchmarks/train_speed.py                        # depth 2, 3 seeds
    python benchmarks/train_speed.py --depth 4 --json results/performance/train_speed.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from depthcraft.constructions.files import write_json_atomic
from depthcraft.verify.crosscheck.data import TaskData
from depthcraft.verify.crosscheck.presets import get_preset
from depthcraft.verify.crosscheck.sweep import device_info, make_config
from depthcraft.verify.crosscheck.model import init_params
from depthcraft.verify.crosscheck.train import loss_fn, train_loop, train_seeds
from depthcraft.verify.tasks import get_task


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--depth", type=int, default=2, help="attention depth (default 2)")
    ap.add_argument("--seeds", type=int, default=3, help="seeds trained together by the fast trainer")
    ap.add_argument("--loop-steps", type=int, default=150, help="timed steps of the loop, per seed")
    ap.add_argument("--steps", type=int, default=600, help="timed steps of the fast trainer")
    ap.add_argument("--chunk", type=int, default=200, help="steps per jitted call of the fast trainer")
    ap.add_argument("--repeats", type=int, default=3, help="timings per configuration (median reported)")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args(argv)
    for name in ("depth", "seeds", "loop_steps", "steps", "chunk", "repeats"):
        if getattr(a, name) < 1:
            print(f"error: --{name.replace('_', '-')} must be >= 1, got {getattr(a, name)}", file=sys.stderr)
            return 2

    cfg = make_config(get_preset("khop", "cpu"))
    data = TaskData(get_task("khop"), list(cfg.conditions))
    model = dataclasses.replace(cfg.model, depth=a.depth)
    seeds = list(range(a.seeds))

    def loop_cfg(steps):
        return dataclasses.replace(cfg.train, steps=steps, log_every=50)

    def run_loop():
        t = time.perf_counter()
        for s in seeds[:1]:
            train_loop(data, model, dataclasses.replace(loop_cfg(a.loop_steps), seed=s))
        return a.loop_steps / (time.perf_counter() - t)

    def run_fast(sampler):
        def go():
            t = time.perf_counter()
            train_seeds(data, model, loop_cfg(a.steps), seeds, chunk=a.chunk, sampler=sampler)
            return a.steps * len(seeds) / (time.perf_counter() - t)
        return go

    # The model's own cost: forward + backward of the loss on one device-resident batch, the seeds
    # vmapped, no optimiser and no data (a ceiling for any trainer that keeps the model's maths).
    arch = model.arch(data.pad_id)
    tx_free = jax.jit(jax.vmap(jax.value_and_grad(lambda p, i, t, m: loss_fn(p, i, t, m, arch)),
                               in_axes=(0, None, None, None)))
    b = data.sample(np.random.default_rng(0), cfg.train.batch)
    stacked = jax.tree_util.tree_map(lambda *x: jnp.stack(x), *[
        init_params(model, jax.random.PRNGKey(s), data.n_inputs, data.n_classes, data.seq_len) for s in seeds])
    ids, tgt, msk = jnp.asarray(b.ids), jnp.asarray(b.targets), jnp.asarray(b.loss_mask)

    def run_grad():
        t = time.perf_counter()
        for _ in range(a.loop_steps):
            out = tx_free(stacked, ids, tgt, msk)
        jax.block_until_ready(out)
        return a.loop_steps * len(seeds) / (time.perf_counter() - t)

    configs = {"loop": run_loop, "scan-numpy": run_fast("numpy"), "scan-jax": run_fast("jax"),
               "grad-only": run_grad}
    # Warm-up: compile every configuration once (same shapes and chunk lengths as the timed runs).
    for fn in configs.values():
        fn()
    times = {k: [] for k in configs}
    for _ in range(a.repeats):
        for k, fn in configs.items():
            times[k].append(fn())
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"k-hop cpu preset model, depth {a.depth}: N=32, |Σ|=4, k in {{1,2,4}}, "
          f"width {model.width}, {model.heads} heads, batch {cfg.train.batch}")
    print(f"{'trainer':<12}{'seeds':>6}{'seed-steps/s':>14}{'spread':>16}{'ratio':>8}")
    for k in configs:
        s = 1 if k == "loop" else len(seeds)
        lo, hi = min(times[k]), max(times[k])
        print(f"{k:<12}{s:>6}{med[k]:>14.1f}{f'{lo:.1f}-{hi:.1f}':>16}{med[k] / med['loop']:>7.2f}x")
    out = {
        "benchmark": "train_speed", "depth": a.depth, "seeds": a.seeds, "chunk": a.chunk,
        "loop_steps": a.loop_steps, "fast_steps": a.steps, "repeats": a.repeats,
        "model": model.to_json(), "train": cfg.train.to_json(), "conditions": data.conditions,
        "seed_steps_per_second": {k: round(v, 2) for k, v in med.items()},
        "all_timings": {k: [round(x, 2) for x in v] for k, v in times.items()},
        "ratio_vs_loop": {k: round(v / med["loop"], 3) for k, v in med.items()},
        "device": device_info(), "load_average": list(os.getloadavg()),
        "jax_devices": [str(d) for d in jax.devices()],
    }
    if a.json:
        write_json_atomic(a.json, out)
        print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
