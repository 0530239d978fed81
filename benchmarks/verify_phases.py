"""Where `depthcraft verify` spends its time at one khop_doubling size: build, forward per row, edge and hypothesis checks.

    python benchmarks/verify_phases.py 64 512      # k n

Prints the build time, d_model and the rows per call `checks.batch_rows` picks, the forward's
first call (compilation) and steady time at batch 1, 4 and 16, and the time of the edge-case
check and of a 20-example hypothesis check. docs/performance.md ("Checks") quotes a run of it.
"""
import sys
import time

import numpy as np, jax
t0 = time.perf_counter()
from depthcraft.verify import lookup
from depthcraft.verify.checks import batch_rows, check_batches, hypothesis_check
k, n = int(sys.argv[1]), int(sys.argv[2])
r = lookup.resolve(lookup.get("khop_doubling"), {"k": k, "n": n})
m = r.build()
print(f"build {time.perf_counter()-t0:.1f} s, d_model {len(m.residual_labels)}, batch_rows {batch_rows(m)}", flush=True)
x = r.task.sample(r.params, np.random.default_rng(0), 16)
for b in (1, 4, 16):
    ids = m.encode(x[:b], length=n + 1)
    t = time.perf_counter(); jax.block_until_ready(m.forward_ids(ids).logits); c = time.perf_counter() - t
    t = time.perf_counter(); jax.block_until_ready(m.forward_ids(ids).logits); e = time.perf_counter() - t
    print(f"batch {b}: first call {c:.1f} s, then {e:.2f} s = {e / b:.3f} s per row", flush=True)
t = time.perf_counter(); res = check_batches(m, r.task, r.params, r.task.edge_cases(r.params), "edge")
print(f"edge check {res.inputs} inputs {time.perf_counter()-t:.1f} s", flush=True)
t = time.perf_counter(); res = hypothesis_check(m, r.task, r.params, 20)
print(f"hypothesis 20 examples {time.perf_counter()-t:.1f} s", flush=True)
