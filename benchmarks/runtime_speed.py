"""Throughput of the batched runtime against tracr's own ``apply`` on the same compiled model.

For each model size, prints sequences per second of tracr ``apply`` (one sequence
at a time, as tracr offers it) and of the jitted batched runtime, measured in the
same run on the same compiled ``khop_doubling`` weights, their ratio, and whether
the two agree on the timed inputs.

    python benchmarks/runtime_speed.py                      # the default table of sizes
    python benchmarks/runtime_speed.py --sizes 4:32 16:100  # k:n pairs
"""

from __future__ import annotations

import argparse
import time
from typing import Dict, Tuple

import numpy as np

from depthcraft.constructions.compiler import assemble_program
from depthcraft.constructions.model import BOS, from_tracr
from depthcraft.rasp_programs.khop import khop_doubling

DEFAULT_SIZES = ("1:16", "2:16", "4:32", "8:64", "16:100")


def _size(text: str) -> Tuple[int, int]:
    try:
        k, n = (int(v) for v in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"size must be k:n (e.g. 4:32), got {text!r}") from None
    if k < 1 or n < 1:
        raise argparse.ArgumentTypeError(f"k and n must be >= 1, got {text!r}")
    return k, n


def measure(k: int, n: int, vocab: int, tracr_seqs: int, batch: int, batches: int) -> Dict[str, float]:
    """Time tracr ``apply`` and the batched runtime on ``khop_doubling(k)`` at max_seq_len ``n``.

    Returns seconds per sequence for both, d_model, and whether the decoded outputs agree.
    """
    assembled, labels, _ = assemble_program(khop_doubling(k), vocab=range(vocab), max_seq_len=n)
    model = from_tracr(assembled, output_labels=labels, max_seq_len=n, causal=True)
    x = np.random.default_rng(0).integers(0, vocab, size=(batch, n))

    assembled.apply([BOS] + x[0].tolist())  # warm-up (haiku tracing caches)
    t = time.perf_counter()
    tracr_out = [assembled.apply([BOS] + x[i].tolist()).decoded[1:] for i in range(tracr_seqs)]
    tracr_s = (time.perf_counter() - t) / tracr_seqs

    ids = model.encode(x)
    model.forward_ids(ids).logits.block_until_ready()  # jit compile
    t = time.perf_counter()
    for _ in range(batches):
        logits = model.forward_ids(ids).logits
    logits.block_until_ready()
    ours_s = (time.perf_counter() - t) / (batches * batch)

    ours_out = model.decode(np.asarray(logits[:tracr_seqs]), none_value=-1)[:, 1:]
    agree = all(list(ours_out[i]) == tracr_out[i] for i in range(tracr_seqs))
    return {"d_model": len(model.residual_labels), "tracr_s": tracr_s, "ours_s": ours_s, "agree": agree}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", nargs="+", type=_size, default=[_size(s) for s in DEFAULT_SIZES],
                    metavar="K:N", help="khop_doubling sizes (k:n) to time; default " + " ".join(DEFAULT_SIZES))
    ap.add_argument("--vocab", type=int, default=4)
    ap.add_argument("--tracr-seqs", type=int, default=20, help="sequences timed through tracr apply")
    ap.add_argument("--batch", type=int, default=4096, help="batch size of the runtime")
    ap.add_argument("--batches", type=int, default=4, help="timed runtime batches")
    args = ap.parse_args()

    header = f"{'k':>3} {'n':>4} {'d_model':>7} {'tracr apply seq/s':>18} {'runtime seq/s':>14} {'ratio':>9}  agree"
    print("khop_doubling, vocab", args.vocab, "| tracr apply: one sequence per call; runtime: batch", args.batch)
    print(header)
    for k, n in args.sizes:
        m = measure(k, n, args.vocab, args.tracr_seqs, args.batch, args.batches)
        row = (f"{k:>3} {n:>4} {m['d_model']:>7} {1 / m['tracr_s']:>18.1f} {1 / m['ours_s']:>14.0f} "
               f"{m['tracr_s'] / m['ours_s']:>8.0f}x  {m['agree']}")
        print(row, flush=True)


if __name__ == "__main__":
    main()
