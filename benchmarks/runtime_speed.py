"""Throughput of the batched runtime against tracr's own ``apply`` on the same compiled model.

Prints sequences per second for both, measured in the same run, and their ratio.

    python benchmarks/runtime_speed.py [--k 4] [--n 32] [--vocab 4] [--tracr-seqs 30] [--batch 4096]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from constructions.compiler import assemble_program
from constructions.model import BOS, from_tracr
from rasp_programs.khop import khop_doubling


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--n", type=int, default=32, help="max_seq_len and input length")
    ap.add_argument("--vocab", type=int, default=4)
    ap.add_argument("--tracr-seqs", type=int, default=30, help="sequences timed through tracr apply")
    ap.add_argument("--batch", type=int, default=4096, help="batch size of the runtime")
    ap.add_argument("--batches", type=int, default=8, help="timed runtime batches")
    args = ap.parse_args()

    assembled, labels, _ = assemble_program(khop_doubling(args.k), vocab=range(args.vocab), max_seq_len=args.n)
    model = from_tracr(assembled, output_labels=labels, max_seq_len=args.n, causal=True)
    rng = np.random.default_rng(0)
    x = rng.integers(0, args.vocab, size=(args.batch, args.n))

    assembled.apply([BOS] + x[0].tolist())  # warm-up (haiku tracing caches)
    t = time.perf_counter()
    tracr_out = [assembled.apply([BOS] + x[i].tolist()).decoded[1:] for i in range(args.tracr_seqs)]
    tracr_s = (time.perf_counter() - t) / args.tracr_seqs

    ids = model.encode(x)
    model.forward_ids(ids).logits.block_until_ready()  # compile
    t = time.perf_counter()
    for _ in range(args.batches):
        logits = model.forward_ids(ids).logits
    logits.block_until_ready()
    ours_s = (time.perf_counter() - t) / (args.batches * args.batch)

    ours_out = model.decode(np.asarray(logits[: args.tracr_seqs]), none_value=-1)[:, 1:]
    agree = all(list(ours_out[i]) == tracr_out[i] for i in range(args.tracr_seqs))
    print(f"model: khop_doubling k={args.k} n={args.n} vocab={args.vocab}, d_model={len(model.residual_labels)}, "
          f"{len(model.arch.sublayers)} sublayers")
    print(f"tracr apply      : {1 / tracr_s:12.1f} seq/s  ({tracr_s * 1e3:.2f} ms/seq, {args.tracr_seqs} seqs)")
    print(f"batched runtime  : {1 / ours_s:12.1f} seq/s  ({ours_s * 1e6:.2f} us/seq, batch {args.batch})")
    print(f"ratio            : {tracr_s / ours_s:12.1f}x")
    print(f"outputs agree on the {args.tracr_seqs} timed tracr inputs: {agree}")


if __name__ == "__main__":
    main()
