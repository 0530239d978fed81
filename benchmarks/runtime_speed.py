"""Throughput of the runtime against plain tracr on the same compiled weights, in one process.

For each ``khop_doubling`` size and batch size, prints inputs per second of

* ``jit(tracr)``: ``jax.jit`` of tracr's own Haiku forward (``assembled.forward``) returning
  only the read-out, what a tracr user writes in five lines; the baseline of the ratios;
* ``dense``: the project's runtime with every projection a matmul on the read rows;
* ``plan``: the project's runtime with one-hot projections as gathers
  (:func:`depthcraft.constructions.runtime.plan`; the default);

and optionally tracr's own ``apply`` (one sequence per call, ``--apply``). All run the same
random inputs; the read-out argmax of every implementation is compared with ``jit(tracr)``'s.
A batch whose residual stream (batch x (n + 1) x d_model x 4 bytes) exceeds ``--max-gib`` is
skipped and reported as such (tracr's dense forward holds several of them).

    python benchmarks/runtime_speed.py                          # the default sizes and batches
    python benchmarks/runtime_speed.py --sizes 4:32 --batches 1 16 --json out.json
"""

from __future__ import annotations

import argparse
import pathlib
import platform
import resource
import time
from typing import Any, Callable, Dict, List, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from depthcraft.constructions.compiler import assemble_program
from depthcraft.constructions.files import write_json_atomic
from depthcraft.constructions.model import BOS, from_tracr
from depthcraft.rasp_programs.khop import khop_doubling

DEFAULT_SIZES = ("16:100", "16:256")
DEFAULT_BATCHES = (1, 16, 64, 4096)
IMPLS = ("jit(tracr)", "dense", "plan")


def _size(text: str) -> Tuple[int, int]:
    try:
        k, n = (int(v) for v in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"size must be k:n (e.g. 16:100), got {text!r}") from None
    if k < 1 or n < 1:
        raise argparse.ArgumentTypeError(f"k and n must be >= 1, got {text!r}")
    return k, n


def _rate(fn: Callable[[], Any], rows: int, min_seconds: float, min_reps: int = 2) -> float:
    """Inputs per second of ``fn`` (already compiled): repeated until ``min_seconds`` and ``min_reps``."""
    reps, t0 = 0, time.perf_counter()
    while True:
        jax.block_until_ready(fn())
        reps += 1
        elapsed = time.perf_counter() - t0
        if reps >= min_reps and elapsed >= min_seconds:
            return reps * rows / elapsed


def measure(k: int, n: int, vocab: int, batches: List[int], min_seconds: float, max_gib: float,
            apply_seqs: int) -> Dict[str, Any]:
    """Time the implementations on ``khop_doubling(k)`` at max_seq_len ``n``, one batch size at a time.

    Returns:
        {"k", "n", "d_model", "rows": [{"batch", "skipped", "<impl>": inputs/s, "agree"}...],
         "apply": inputs/s of tracr apply or None, "best": {impl: [inputs/s, batch]}}.
    """
    assembled, labels, _ = assemble_program(khop_doubling(k), vocab=range(vocab), max_seq_len=n)
    model = from_tracr(assembled, output_labels=labels, max_seq_len=n, causal=True)
    d = len(model.residual_labels)
    tracr_params = jax.tree_util.tree_map(jnp.asarray, assembled.params)
    # tracr's read-out: the argmax output index per position (its index i is our read-out column i)
    tracr_fwd = jax.jit(lambda p, ids: assembled.forward(p, ids).unembedded_output)
    fns = {
        "jit(tracr)": lambda ids: tracr_fwd(tracr_params, ids),
        "dense": lambda ids: model.forward_ids(ids, planned=False).logits,
        "plan": lambda ids: model.forward_ids(ids, planned=True).logits,
    }
    rng = np.random.default_rng(0)
    rows: List[Dict[str, Any]] = []
    for b in batches:
        row: Dict[str, Any] = {"batch": b, "residual_mib": b * (n + 1) * d * 4 / 2 ** 20}
        if row["residual_mib"] > max_gib * 1024:
            row["skipped"] = f"residual stream {row['residual_mib'] / 1024:.1f} GiB > --max-gib {max_gib}"
            rows.append(row)
            continue
        ids = jnp.asarray(model.encode(rng.integers(0, vocab, size=(b, n))))
        decoded = {}
        for name, fn in fns.items():
            out = np.asarray(fn(ids))  # compile (and first run)
            decoded[name] = out if out.ndim == 2 else out.argmax(-1)
            row[name] = _rate(lambda: fn(ids), b, min_seconds)
        row["agree"] = all(np.array_equal(decoded[name], decoded["jit(tracr)"]) for name in fns)
        rows.append(row)
    apply_rate = None
    if apply_seqs:
        x = rng.integers(0, vocab, size=(apply_seqs, n))
        assembled.apply([BOS] + x[0].tolist())  # warm-up
        t0 = time.perf_counter()
        for i in range(apply_seqs):
            assembled.apply([BOS] + x[i].tolist())
        apply_rate = apply_seqs / (time.perf_counter() - t0)
    best = {}
    for name in IMPLS:
        timed = [(r[name], r["batch"]) for r in rows if name in r]
        if timed:
            best[name] = list(max(timed))
    return {"k": k, "n": n, "d_model": d, "rows": rows, "apply": apply_rate, "best": best}


def print_table(result: Dict[str, Any]) -> None:
    """The rows of one size, at most 80 columns: inputs/s and ratios vs jit(tracr)."""
    print(f"khop_doubling k={result['k']} n={result['n']} d_model={result['d_model']}")
    print(f"{'batch':>6} {'jit(tracr)/s':>13} {'dense/s':>10} {'plan/s':>10} {'dense':>7} {'plan':>7}  agree")
    for r in result["rows"]:
        if "skipped" in r:
            print(f"{r['batch']:>6}  skipped: {r['skipped']}")
            continue
        base = r["jit(tracr)"]
        print(f"{r['batch']:>6} {base:>13.1f} {r['dense']:>10.1f} {r['plan']:>10.1f} "
              f"{r['dense'] / base:>6.2f}x {r['plan'] / base:>6.2f}x  {r['agree']}")
    best = result["best"]
    if "jit(tracr)" in best:
        base = best["jit(tracr)"][0]
        parts = [f"{name} {rate:.1f}/s (batch {b}, {rate / base:.2f}x)" for name, (rate, b) in best.items()]
        print("best: " + "; ".join(parts))
    if result["apply"]:
        print(f"tracr apply (one sequence per call): {result['apply']:.2f}/s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", type=_size, default=[_size(s) for s in DEFAULT_SIZES],
                    metavar="K:N", help="khop_doubling sizes (k:n); default " + " ".join(DEFAULT_SIZES))
    ap.add_argument("--batches", nargs="+", type=int, default=list(DEFAULT_BATCHES), metavar="B",
                    help="batch sizes; default " + " ".join(map(str, DEFAULT_BATCHES)))
    ap.add_argument("--vocab", type=int, default=4)
    ap.add_argument("--min-seconds", type=float, default=1.0, help="time each measurement at least this long")
    ap.add_argument("--max-gib", type=float, default=2.0, help="skip batches whose residual stream is larger")
    ap.add_argument("--apply", type=int, default=0, metavar="SEQS", help="also time tracr apply on SEQS sequences")
    ap.add_argument("--json", type=pathlib.Path, help="write the results here")
    args = ap.parse_args()
    if any(b < 1 for b in args.batches):
        ap.error(f"batch sizes must be >= 1, got {args.batches}")

    results = []
    for k, n in args.sizes:
        res = measure(k, n, args.vocab, args.batches, args.min_seconds, args.max_gib, args.apply)
        print_table(res)
        print(flush=True)
        results.append(res)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    print(f"peak RSS {peak:.0f} MiB")
    if args.json:
        doc = {"benchmark": "runtime_speed", "construction": "khop_doubling", "vocab": args.vocab,
               "implementations": list(IMPLS), "unit": "inputs per second", "machine": platform.machine(),
               "cpus": __import__("os").cpu_count(), "jax": jax.__version__, "peak_rss_mib": round(peak),
               "sizes": results}
        write_json_atomic(str(args.json), doc)


if __name__ == "__main__":
    main()
