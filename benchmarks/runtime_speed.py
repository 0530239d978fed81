"""Throughput of the runtime against plain tracr and the numpy reference, on the same compiled weights, in one process.

For each case (a catalogue construction at k, n), prints sequences per second of

* ``apply``: tracr's own ``AssembledTransformerModel.apply``, one sequence per call;
* ``jit(tracr)``: ``jax.jit`` of tracr's Haiku forward (``assembled.forward``) returning only
  the read-out, on batches (what a tracr user writes in five lines), at its best batch;
* ``runtime``: the project's planned runtime (:func:`depthcraft.constructions.runtime.forward`),
  at its best batch;
* ``reference``: the task's numpy reference (``task.reference``), on one batch;

with the ratios runtime / jit(tracr), runtime / apply and runtime / reference; each jitted
call's memory (XLA's count of arguments + temporaries + outputs at the best batch); the FLOPs
per sequence on live rows (the products of the restricted weights the runtime holds, plus
the attention scores and weighted sums) and the FLOP/s each implementation achieves on that
count, against a float32 matmul's rate measured in the same process. The weights are the
catalogue's build (``compiler.using_assembly("tracr")``, which keeps tracr's model object;
the row-based build gives the same weights bit for bit, tests/test_build_paths.py); with
``positions="angle"`` tracr's model gets the position embedding the project writes
(``compiler._angle_embedding``), so every implementation computes the same function. The
read-out argmax of jit(tracr) and apply is compared with the runtime's.

tracr's paths are not run where d_model grows with n above ``--max-tracr-n`` (its dense
assembly and its forward over the whole residual stream take minutes per sequence there);
such cells say so. A batch whose residual stream exceeds ``--max-gib`` is not run; larger
batches are not tried once the rate falls below the best one's.

    python benchmarks/runtime_speed.py                                  # the default cases
    python benchmarks/runtime_speed.py --cases khop_doubling:16:100 --json out.json
"""

from __future__ import annotations

import argparse
import os
import pathlib
import platform
import resource
import time
import tracemalloc
from typing import Any, Callable, Dict, List, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from depthcraft.constructions import compiler
from depthcraft.constructions.files import write_json_atomic
from depthcraft.constructions.model import BOS
from depthcraft.constructions.runtime import forward
from depthcraft.verify import lookup

DEFAULT_CASES = tuple(f"khop_doubling:16:{n}" for n in (16, 64, 100, 256, 512, 1024)) + \
    tuple(f"khop_constant_width:16:{n}" for n in (16, 64, 100, 256, 512, 1024))
DEFAULT_BATCHES = (1, 4, 16, 64, 256)
IMPLS = ("apply", "jit(tracr)", "runtime", "reference")
#: d_model of these does not grow with n: tracr's paths run at every n.
CONSTANT_WIDTH = ("khop_constant_width",)


def _case(text: str) -> Tuple[str, int, int]:
    try:
        name, k, n = text.split(":")
        return name, int(k), int(n)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a case is NAME:K:N (e.g. khop_doubling:16:100), got {text!r}") from None


def _rate(fn: Callable[[], Any], rows: int, min_seconds: float) -> float:
    """Sequences per second of ``fn`` (already compiled), repeated until ``min_seconds``."""
    reps, t0 = 0, time.perf_counter()
    while True:
        jax.block_until_ready(fn())
        reps += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= min_seconds:
            return reps * rows / elapsed


def matmul_rate(size: int = 1024, min_seconds: float = 2.0) -> float:
    """FLOP/s of a jitted float32 [size, size] @ [size, size] product on this machine, now."""
    a = jnp.asarray(np.random.default_rng(0).standard_normal((size, size)), jnp.float32)
    f = jax.jit(lambda x: x @ x)
    jax.block_until_ready(f(a))
    return _rate(lambda: f(a), 1, min_seconds) * 2 * size ** 3


def live_flops(model) -> int:
    """Multiply-adds x 2 of one sequence of max_seq_len + 1 positions on the runtime's restricted weights.

    Every projection counts ``2 x T x rows read x columns`` (the restricted matrices the runtime
    holds, whatever is zero in them), every attention head ``2 x T^2 x (key width + value width)``
    for its scores and weighted sum, the read-out ``2 x T x D x outputs``.
    """
    t = model.max_seq_len + 1
    total = 0
    for spec, p in zip(model.arch.sublayers, model.params["layers"]):
        if spec.kind == "attn":
            h, _, dk = np.shape(p["w_q"])
            for name in ("w_q", "w_k", "w_v"):
                total += 2 * t * int(np.prod(np.shape(p[name])))
            dv = np.shape(p["w_v"])[2]
            total += 2 * t * t * h * (dk + dv) + 2 * t * int(np.prod(np.shape(p["w_o"])))
        else:
            total += 2 * t * (int(np.prod(np.shape(p["w_1"]))) + int(np.prod(np.shape(p["w_2"]))))
    return total + 2 * t * int(np.prod(np.shape(model.params["unembed"]["w"])))


def _build(name: str, k: int, n: int, with_tracr: bool):
    """(resolved, model, tracr's assembled model or None): the catalogue's weights, tracr's object kept."""
    r = lookup.resolve(lookup.get(name), {"k": k, "n": n})
    if not with_tracr:
        return r, r.build(), None
    kept = {}
    original = compiler.from_tracr

    def keep(assembled, **kw):
        kept["assembled"] = assembled
        return original(assembled, **kw)

    compiler.from_tracr = keep
    try:
        with compiler.using_assembly("tracr"):
            model = r.construction.builder(r.params)
    finally:
        compiler.from_tracr = original
    return r, model, kept["assembled"]


def _memory_mib(jitted, *args) -> Optional[float]:
    """XLA's memory of one call: arguments + temporaries + outputs, MiB (None where not reported)."""
    try:
        m = jitted.lower(*args).compile().memory_analysis()
        return (m.argument_size_in_bytes + m.temp_size_in_bytes + m.output_size_in_bytes) / 2 ** 20
    except Exception:  # noqa: BLE001 - a backend without memory statistics
        return None


def measure(name: str, k: int, n: int, batches: List[int], min_seconds: float, max_gib: float,
            max_tracr_n: int, matmul: float, apply_seconds: float) -> Dict[str, Any]:
    """Time the four implementations on one case. Returns the case's JSON row (see the module docstring)."""
    with_tracr = name in CONSTANT_WIDTH or n <= max_tracr_n
    t0 = time.perf_counter()
    r, model, assembled = _build(name, k, n, with_tracr)
    d = len(model.residual_labels)
    out: Dict[str, Any] = {"construction": name, "k": k, "n": n, "d_model": d,
                           "build_s": round(time.perf_counter() - t0, 2), "flops_per_seq": live_flops(model),
                           "rates": {}, "best_batch": {}, "memory_mib": {}, "by_batch": {}, "not_run": {}}
    rng = np.random.default_rng(0)
    length = n + 1
    fns: Dict[str, Tuple[Callable, Any]] = {}
    runtime_fwd = jax.jit(lambda p, ids: forward(p, ids, model.arch).logits)
    fns["runtime"] = (runtime_fwd, model.jparams)
    if assembled is not None:
        tparams = jax.tree_util.tree_map(jnp.asarray, assembled.params)
        pos = [key for key in tparams if key.endswith("pos_embed")][0]
        compare = tparams[pos]["embeddings"].shape == np.shape(model.params["embed"]["pos"])
        if not compare:  # angle positions: tracr's model has a 1-row position table (clamped indices)
            out["not_compared"] = ("tracr's model has no angle position embedding (a 1-row position table): "
                                   "the same work, its outputs are not compared")
        fns["jit(tracr)"] = (jax.jit(lambda p, ids: assembled.forward(p, ids).unembedded_output), tparams)
    else:
        why = f"not run: d_model {d} grows with n (tracr's dense assembly and forward above n = {max_tracr_n})"
        out["not_run"]["jit(tracr)"] = out["not_run"]["apply"] = why
    agree, compare = True, assembled is not None and "not_compared" not in out
    for impl, (fn, params) in fns.items():
        best = None
        for b in batches:
            if b * length * d * 4 > max_gib * 2 ** 30:
                out["by_batch"].setdefault(impl, {})[str(b)] = "residual stream over --max-gib"
                break
            x = r.task.sample(r.params, rng, b)
            ids = jnp.asarray(model.encode(x, length=length))
            got = np.asarray(fn(params, ids))  # compile, first run
            if impl != "runtime" and b == batches[0] and compare:  # tracr's read-out is already the argmax index per position
                runtime_out = np.asarray(runtime_fwd(model.jparams, ids)).argmax(-1)
                agree &= bool(np.array_equal(got if got.ndim == 2 else got.argmax(-1), runtime_out))
            rate = _rate(lambda: fn(params, ids), b, min_seconds)
            out["by_batch"].setdefault(impl, {})[str(b)] = round(rate, 3)
            print(f"  {impl} batch {b}: {rate:,.2f} seq/s", flush=True)
            if best is None or rate > best[0]:
                best = (rate, b, ids)
            elif rate < 0.8 * best[0]:
                break  # past the best batch
        out["rates"][impl], out["best_batch"][impl] = best[0], best[1]
        out["memory_mib"][impl] = _memory_mib(fn, params, best[2])
    if assembled is not None:  # tracr apply: one sequence per call, as a tracr user runs it
        x = r.task.sample(r.params, rng, 64)
        first = assembled.apply([BOS] + x[0].tolist())
        agree &= not compare or bool(np.array_equal(np.asarray(first.unembedded)[0],
                                     np.asarray(runtime_fwd(model.jparams, jnp.asarray(
                                         model.encode(x[:1], length=length)))).argmax(-1)[0]))
        done, t = 0, time.perf_counter()
        while done < len(x) and (done == 0 or time.perf_counter() - t < apply_seconds):
            assembled.apply([BOS] + x[done].tolist())
            done += 1
        out["rates"]["apply"] = done / (time.perf_counter() - t)
        out["apply_sequences"] = done
    x = r.task.sample(r.params, rng, 1024)
    tracemalloc.start()
    t = time.perf_counter()
    reps = 0
    while reps == 0 or time.perf_counter() - t < min_seconds:
        r.task.reference(r.params, x)
        reps += 1
    out["rates"]["reference"] = reps * len(x) / (time.perf_counter() - t)
    out["memory_mib"]["reference"] = tracemalloc.get_traced_memory()[1] / 2 ** 20
    tracemalloc.stop()
    out["agree"] = agree if compare else None
    out["gflops_per_s"] = {impl: out["flops_per_seq"] * rate / 1e9 for impl, rate in out["rates"].items()
                           if impl != "reference"}
    out["matmul_gflops_per_s"] = matmul / 1e9
    return out


def _fmt(v: Optional[float]) -> str:
    if v is None:
        return "—"
    return f"{v:,.0f}" if v >= 100 else f"{v:,.2f}" if v >= 1 else f"{v:.3g}"


def print_case(c: Dict[str, Any]) -> None:
    """One case in at most 80 columns."""
    rt = c["rates"]["runtime"]
    print(f"{c['construction']} k={c['k']} n={c['n']}: d_model {c['d_model']}, "
          f"{c['flops_per_seq'] / 1e6:,.1f} MFLOP/seq on live rows, agree {c['agree']}")
    for impl in IMPLS:
        rate = c["rates"].get(impl)
        if rate is None:
            print(f"  {impl:<10} {c['not_run'].get(impl, '—')}")
            continue
        batch = c["best_batch"].get(impl)
        mem = c["memory_mib"].get(impl)
        gf = c["gflops_per_s"].get(impl)
        print(f"  {impl:<10} {_fmt(rate):>10} seq/s" + (f" (batch {batch})" if batch else "") +
              (f", {_fmt(mem)} MiB" if mem is not None else "") + (f", {gf:,.2f} GFLOP/s" if gf else "") +
              (f"; runtime / {impl} {_fmt(rt / rate)}x" if impl != "runtime" else ""))


def current_runs(runs: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The runs (in order) that measured at least one case no later run measured again."""
    last = {case: i for i, r in enumerate(runs) for case in r["cases"]}
    return [r for i, r in enumerate(runs) if i in set(last.values())]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="+", type=_case, default=[_case(s) for s in DEFAULT_CASES],
                    metavar="NAME:K:N", help="catalogue construction, k and n; default: khop_doubling and "
                    "khop_constant_width k=16 at n = 16, 64, 100, 256, 512, 1024")
    ap.add_argument("--batches", nargs="+", type=int, default=list(DEFAULT_BATCHES), metavar="B",
                    help="batch sizes tried, in order; default " + " ".join(map(str, DEFAULT_BATCHES)))
    ap.add_argument("--min-seconds", type=float, default=1.0, help="time each measurement at least this long")
    ap.add_argument("--apply-seconds", type=float, default=5.0, help="time tracr apply this long (>= 1 sequence)")
    ap.add_argument("--max-gib", type=float, default=1.0, help="do not run batches whose residual stream is larger")
    ap.add_argument("--max-tracr-n", type=int, default=512,
                    help="run tracr's paths up to this n where d_model grows with n")
    ap.add_argument("--json", type=pathlib.Path, help="write the results here")
    ap.add_argument("--append", action="store_true", help="add the cases to an existing --json file (a case measured again replaces its row)")
    args = ap.parse_args()
    if any(b < 1 for b in args.batches):
        ap.error(f"batch sizes must be >= 1, got {args.batches}")
    matmul = matmul_rate()
    print(f"float32 matmul 1024^3: {matmul / 1e9:,.1f} GFLOP/s; load {os.getloadavg()[0]:.2f}", flush=True)
    results = []
    for name, k, n in args.cases:
        res = measure(name, k, n, args.batches, args.min_seconds, args.max_gib, args.max_tracr_n, matmul,
                      args.apply_seconds)
        res["load_1min"] = round(os.getloadavg()[0], 2)
        print_case(res)
        print(flush=True)
        results.append(res)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    print(f"peak RSS {peak:.0f} MiB")
    if args.json:
        import json

        doc = {"benchmark": "runtime_speed", "implementations": list(IMPLS), "unit": "sequences per second",
               "machine": platform.machine(), "cpus": os.cpu_count(), "jax": jax.__version__, "vocab": 4,
               "cpus_usable": len(os.sched_getaffinity(0)),
               "runs": [], "cases": []}
        if args.append and args.json.exists():
            doc = json.loads(args.json.read_text())
        again = {(c["construction"], c["k"], c["n"]) for c in results}  # a case measured again replaces its row
        doc["cases"] = [c for c in doc["cases"] if (c["construction"], c["k"], c["n"]) not in again] + results
        doc["runs"].append({"peak_rss_mib": round(peak), "matmul_gflops_per_s": matmul / 1e9,
                            "cpus_usable": len(os.sched_getaffinity(0)),
                            "cases": [f"{c['construction']}:{c['k']}:{c['n']}" for c in results]})
        doc["runs"] = current_runs(doc["runs"])
        write_json_atomic(str(args.json), doc)


if __name__ == "__main__":
    main()
