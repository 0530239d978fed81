"""XLA kernels per optimiser step: the per-group trainer against the fused one (issue 32).

For the k-hop ``paper`` preset's groups of runs (depths 2-6 at width 128 and the capacity
controls at width 256, ``--seeds`` seeds each), compiles the training step of

* ``before``: :func:`~verify.crosscheck.train.train_seeds`' chunk function, one program per
  group (seeds vmapped), the groups run one after another (or in threads: the same launches);
* ``after``: :func:`~verify.crosscheck.fused.train_fused`' chunk function, one program for
  every group and seed;

and counts, in the compiled HLO (``jax.jit(f).lower(...).compile().as_text()``), the operations
that run as kernels: fusions, custom calls and every other instruction outside fused
computations, except the free ones (parameters, constants, tuples, bitcasts and control flow);
a while loop's body counts its trip count times. Each chunk is compiled for ``--n`` steps and the
count divided by ``--n``. The counts come from the CPU back end (no GPU here): XLA's GPU
back end fuses differently, so the absolute numbers differ there, but both trainers are counted
by the same back end and the ratio is the measured quantity. The compiler's LLVM stage runs at
-O0 (``--xla_backend_optimization_level=0``, set before JAX starts) to keep the 11 compilations
short: it does not change the HLO passes that decide the fusions.

Also counted: the jitted calls of the final evaluation and alignment (the per-run path of
:func:`verify.crosscheck.sweep._record` against the fused batched one), and timed, wall seconds
including compilation, of the ``smoke`` configuration of scripts/paper_gpu.py and of the k-hop
``cpu`` preset (``--cpu-steps`` steps), each swept both ways in this process (``fast`` then
``fused``, no figures).

    python benchmarks/train_kernels.py --json results/performance/train_kernels.json
"""

from __future__ import annotations

import os

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0").strip()

import argparse  # noqa: E402
import math  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from typing import Any, Dict, List  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from depthcraft.constructions.files import write_json_atomic  # noqa: E402
from depthcraft.verify.crosscheck import sweep  # noqa: E402
from depthcraft.verify.crosscheck.fused import (EVAL_ROWS, fused_chunk_fn, init_states,  # noqa: E402
                                                make_families)
from depthcraft.verify.crosscheck.presets import get_preset  # noqa: E402
from depthcraft.verify.crosscheck.samplers import jax_sampler  # noqa: E402
from depthcraft.verify.crosscheck.train import (DATA_STREAM, seed_chunk_fn, optimiser_init, optimiser_key,  # noqa: E402
                                                stack_trees)
from depthcraft.verify.crosscheck.model import init_params  # noqa: E402

#: Instructions that launch no kernel.
FREE = {"parameter", "constant", "get-tuple-element", "tuple", "bitcast", "while", "conditional", "call",
        "after-all", "opt-barrier", "partition-id", "replica-id", "add-dependency"}

_HEADER = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")
_INSTR = re.compile(r"^\s+(?:ROOT\s+)?%?[\w.\-]+\s*=\s*.*?\s([a-z][a-z0-9\-]*)\(")


def count_kernels(hlo: str) -> Dict[str, float]:
    """Kernels one execution of a compiled HLO module launches.

    Args:
        hlo: ``Compiled.as_text()``.
    Returns:
        ``{"total", "fusion", "custom-call", "other"}``: instructions outside fused and reducer
        computations that are not :data:`FREE`, a while body weighted by its known trip count
        (1 when XLA recorded none).
    """
    comps: Dict[str, List[str]] = {}
    entry, name = None, None
    for line in hlo.splitlines():
        if not line.startswith(" ") and line.rstrip().endswith("{"):
            m = _HEADER.match(line)
            if m:
                name = m.group(2)
                comps[name] = []
                if m.group(1):
                    entry = name
                continue
        if line.startswith("}"):
            name = None
            continue
        if name is not None and line.strip():
            comps[name].append(line)

    def walk(comp: str, weight: float, out: Dict[str, float], depth: int = 0) -> None:
        if depth > 20:
            return
        for line in comps.get(comp, []):
            m = _INSTR.match(line)
            if not m:
                continue
            op = m.group(1)
            if op == "while":
                trip = re.search(r'"known_trip_count":\{"n":"(\d+)"', line)
                n = int(trip.group(1)) if trip else 1
                for key in ("condition", "body"):
                    c = re.search(key + r"=%?([\w.\-]+)", line)
                    if c:
                        walk(c.group(1), weight * (n if key == "body" else n + 1), out, depth + 1)
                continue
            if op == "conditional":
                for c in re.findall(r"(?:branch_computations=\{|true_computation=|false_computation=)%?([\w.\-]+)",
                                    line):
                    walk(c, weight, out, depth + 1)
                branches = re.search(r"branch_computations=\{([^}]*)\}", line)
                if branches:
                    for c in branches.group(1).split(",")[1:]:
                        walk(c.strip().lstrip("%"), weight, out, depth + 1)
                continue
            if op == "call":
                c = re.search(r"to_apply=%?([\w.\-]+)", line)
                if c:
                    walk(c.group(1), weight, out, depth + 1)
                continue
            if op in FREE:
                continue
            kind = op if op in ("fusion", "custom-call") else "other"
            out[kind] = out.get(kind, 0) + weight
            out["total"] = out.get("total", 0) + weight

    out: Dict[str, float] = {"total": 0, "fusion": 0, "custom-call": 0, "other": 0}
    walk(entry, 1.0, out)
    return out


def paper_groups(seeds: int):
    cfg = sweep.make_config(get_preset("khop", "paper"), seeds=seeds)
    infos = [sweep.construction_info(cfg.construction, c, compile_model=False) for c in cfg.conditions]
    return cfg, sweep.seed_groups(sweep.plan(cfg, [i.bound for i in infos]))


def before_kernels(cfg, groups, n: int, fed: bool = False) -> List[Dict[str, Any]]:
    """Per group: kernels per step of :func:`train_seeds`' JAX-sampled chunk function (``fed``: its
    numpy-fed one, the batches given: the model, loss and optimiser alone)."""
    task = sweep.get_task(cfg.task)
    out = []
    for g in groups:
        run0 = g[0]
        data = sweep._group_data(cfg, task, run0)
        seeds = [r.train.seed for r in g]
        draw = None if fed else jax_sampler(data, cfg.train.batch)
        sig = ("numpy",) if fed else ("jax", data.task.name, repr(data.conditions), cfg.train.batch, data.seq_len)
        opt_key = optimiser_key(cfg.train)
        fn = seed_chunk_fn(run0.model.arch(data.pad_id), opt_key, run0.model.frozen, n, draw, sig)
        inits = [init_params(run0.model, jax.random.PRNGKey(s), data.n_inputs, data.n_classes, data.seq_len)
                 for s in seeds]
        init_state = optimiser_init(opt_key, run0.model.frozen)
        params, opt = stack_trees(inits), stack_trees([init_state(p) for p in inits])
        keys = jnp.stack([jax.random.fold_in(jax.random.PRNGKey(s), DATA_STREAM) for s in seeds])
        t = time.perf_counter()
        if fed:
            b = cfg.train.batch
            hlo = fn.lower(params, opt, *_feed((len(seeds), n, b, data.seq_len))).compile().as_text()
        else:
            hlo = fn.lower(params, opt, keys, jnp.arange(n)).compile().as_text()
        c = count_kernels(hlo)
        out.append({"group": sweep.group_id(g), **{k: v / n for k, v in c.items()},
                    "compile_s": round(time.perf_counter() - t, 1)})
        print(f"  before{' (fed)' if fed else ''} {sweep.group_id(g):28s} {c['total'] / n:7.0f} kernels/step "
              f"({out[-1]['compile_s']:.0f} s to compile)", flush=True)
    return out


def _feed(shape):
    ids = np.zeros(shape, np.int32)
    return jnp.asarray(ids), jnp.asarray(ids), jnp.asarray(np.ones(shape, np.float32))


def after_kernels(cfg, groups, n: int, precision: str, fed: bool = False, widen: bool = False,
                  layout: str = "padded") -> Dict[str, Any]:
    """Kernels per step of the fused chunk function (every group and seed; ``fed``: numpy-fed, the
    batches given; ``widen``: every run at the widest group's width and heads, one family, an
    estimate of padding the width too; masked LayerNorm statistics would add a few kernels;
    ``layout``: :data:`~verify.crosscheck.fused.LAYOUTS`)."""
    import dataclasses

    task = sweep.get_task(cfg.task)
    wide = max((g[0].model for g in groups), key=lambda m: m.width)
    runs = []
    for g in groups:
        for r in g:
            model = dataclasses.replace(r.model, width=wide.width, heads=wide.heads) if widen else r.model
            seed = r.train.seed + (1000 if widen and r.control else 0)  # distinct (depth, seed) in one family
            runs.append((sweep._group_data(cfg, task, g[0]), model, seed))
    fams = make_families(runs, "numpy" if fed else cfg.sampler, layout)
    states = init_states(fams, runs, cfg.train)
    keys = [None if fed else jnp.stack([jax.random.fold_in(jax.random.PRNGKey(s), DATA_STREAM) for s in f.seed_list])
            for f in fams]
    feeds = [_feed((n, len(f.seed_list), cfg.train.batch, f.data.seq_len)) if fed else None for f in fams]
    fn = fused_chunk_fn(fams, cfg.train, n, precision)
    t = time.perf_counter()
    hlo = fn.lower(states, keys, jnp.arange(n, dtype=jnp.int32), jnp.zeros(n, jnp.float32),
                   feeds).compile().as_text()
    c = count_kernels(hlo)
    out = {**{k: v / n for k, v in c.items()}, "families": len(fams), "models": len(runs),
           "compile_s": round(time.perf_counter() - t, 1), "precision": precision}
    what = ("width padded, " if widen else "") + ("depths split, " if layout == "split" else "")
    out["layout"] = layout
    print(f"  after{' (fed)' if fed else ''} (one program, {what}{len(fams)} families, {len(runs)} models, {precision}) "
          f"{c['total'] / n:7.0f} kernels/step ({out['compile_s']:.0f} s to compile)", flush=True)
    return out


def eval_calls(cfg, groups) -> Dict[str, int]:
    """Jitted calls of the final evaluation and alignment, per-run path against the fused one."""
    n_cond = len(cfg.conditions)
    before = after = 0
    for g in groups:
        per_run = n_cond * math.ceil(cfg.eval_size / 512) + n_cond  # evaluate(): 512 per call; alignment
        before += per_run * len(g)
    task = sweep.get_task(cfg.task)
    runs = [(sweep._group_data(cfg, task, g[0]), r.model, r.train.seed) for g in groups for r in g]
    for f in make_families(runs, cfg.sampler):
        rows = max(1, min(n_cond * cfg.eval_size, EVAL_ROWS // f.size))
        after += math.ceil(n_cond * cfg.eval_size / rows) + n_cond
    return {"before": before, "after": after}


def sweep_wall(cfg, trainer: str) -> float:
    """Wall seconds of a sweep (no figures) in a fresh temporary directory."""
    import dataclasses

    c = dataclasses.replace(cfg, trainer=trainer)
    with tempfile.TemporaryDirectory() as d:
        t = time.perf_counter()
        sweep.run_sweep(c, d, plot=False, fresh=True)
        return round(time.perf_counter() - t, 1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3, help="seeds per group (default 3)")
    ap.add_argument("--n", type=int, default=4, help="steps per compiled chunk (default 4)")
    ap.add_argument("--cpu-steps", type=int, default=200, help="steps of the cpu preset's timed sweeps")
    ap.add_argument("--no-walls", action="store_true", help="only count kernels")
    ap.add_argument("--width-padded", action="store_true",
                    help="also count one family with every run at the controls' width (an estimate)")
    ap.add_argument("--json", help="write the results here")
    a = ap.parse_args(argv)
    print(f"device: {jax.default_backend()} ({jax.devices()[0]}); kernels counted in the CPU back end's HLO",
          flush=True)
    cfg, groups = paper_groups(a.seeds)
    print(f"k-hop paper preset: {len(groups)} groups x {a.seeds} seeds "
          f"({', '.join(sweep.group_id(g) for g in groups)})", flush=True)
    before = before_kernels(cfg, groups, a.n)
    after = after_kernels(cfg, groups, a.n, "float32")
    k_before = sum(g["total"] for g in before)
    ratio = k_before / after["total"]
    calls = eval_calls(cfg, groups)
    print(f"kernels per step: before {k_before:.0f} (sum of {len(groups)} programs), after {after['total']:.0f} "
          f"(one program): ratio {ratio:.2f}", flush=True)
    fed_before = before_kernels(cfg, groups, a.n, fed=True)
    fed_after = after_kernels(cfg, groups, a.n, "float32", fed=True)
    model_before = sum(g["total"] for g in fed_before)
    model_after = fed_after["total"]
    one = after_kernels(cfg, groups, a.n, "float32", widen=True) if a.width_padded else None
    out: Dict[str, Any] = {
        "device": sweep.device_info(), "preset": "khop paper", "groups": len(groups), "seeds": a.seeds,
        "n_steps_compiled": a.n, "kernels_per_step_before": round(k_before, 1),
        "kernels_per_step_after": round(after["total"], 1), "ratio": round(ratio, 2),
        "model_kernels_per_step_before": round(model_before, 1),
        "model_kernels_per_step_after": round(model_after, 1),
        "model_ratio": round(model_before / model_after, 2),
        "width_padded_estimate": None if one is None else
        {"kernels_per_step": round(one["total"], 1), "ratio": round(k_before / one["total"], 2)},
        "before_by_group": before, "after": after, "fed_before_by_group": fed_before, "fed_after": fed_after,
        "eval_calls": calls,
        "note": "kernels counted in the CPU back end's compiled HLO (no GPU in this run)",
    }
    print(f"  without the sampler (model, loss, optimiser): before {model_before:.0f}, after {model_after:.0f}: "
          f"ratio {model_before / model_after:.2f}")
    print(f"evaluation and alignment calls: before {calls['before']}, after {calls['after']}")
    if not a.no_walls:
        import dataclasses

        smoke = sweep.make_config(get_preset("khop", "paper"), {"k": "0,1", "n": "8"}, depths=(2,), width=16,
                                  heads=4, seeds=2, steps=40, eval_size=32, alignment_size=8, chunk=2, warmup=5,
                                  checkpoint_every=0)
        cpu = sweep.make_config(get_preset("khop", "cpu"), steps=a.cpu_steps, checkpoint_every=0)
        cpu = dataclasses.replace(cpu, train=dataclasses.replace(cpu.train, warmup=min(cpu.train.warmup,
                                                                                      a.cpu_steps)))
        walls = {}
        for name, c in (("smoke", smoke), ("cpu", cpu)):
            walls[name] = {"steps": c.train.steps}
            for trainer in ("fast", "fused"):
                walls[name][trainer] = sweep_wall(c, trainer)
                print(f"  {name:5s} preset, trainer {trainer:5s}: {walls[name][trainer]:7.1f} s wall "
                      f"(compilation included)", flush=True)
            walls[name]["ratio"] = round(walls[name]["fast"] / walls[name]["fused"], 2)
        out["wall_s"] = walls
        out["wall_note"] = (f"cpu preset at {a.cpu_steps} steps (its 4000 would take ~20x longer), smoke = "
                            f"scripts/paper_gpu.py --smoke's sizes with the control; both trainers in this process, "
                            f"one after the other, on a shared 2-core machine")
    if a.json:
        write_json_atomic(a.json, out)
        print(f"wrote {a.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
