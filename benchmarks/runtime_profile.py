"""Where the planned forward's time goes: its rate with pieces replaced by no-ops, and XLA's cost analysis.

    python benchmarks/runtime_profile.py 16 100 32      # khop_doubling k n batch

Prints inputs/s of the planned and the dense forward, of the planned forward with the residual
scatter-add (``runtime._write``) and with the margin computation (``runtime._top_mass``) replaced
by cheap stand-ins (outputs then differ: timing only), and the FLOPs and bytes XLA counts for one
planned call. docs/performance.md ("Runtime") quotes a run of it.
"""
import sys
import time

import numpy as np, jax, jax.numpy as jnp
from depthcraft.constructions.compiler import assemble_program
from depthcraft.constructions.model import from_tracr
from depthcraft.constructions import runtime
from depthcraft.rasp_programs.khop import khop_doubling
k, n, B = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
assembled, labels, _ = assemble_program(khop_doubling(k), vocab=range(4), max_seq_len=n)
m = from_tracr(assembled, output_labels=labels, max_seq_len=n, causal=True)
ids = jnp.asarray(m.encode(np.random.default_rng(0).integers(0, 4, size=(B, n))))
def rate(f):
    jax.block_until_ready(f(ids)); t=time.perf_counter(); r=0
    while time.perf_counter()-t < 1.5:
        jax.block_until_ready(f(ids)); r+=1
    return r*B/(time.perf_counter()-t)
print("plan", rate(lambda i: m.forward_ids(i).logits))
print("dense", rate(lambda i: m.forward_ids(i, planned=False).logits))
orig_write = runtime._write
runtime._write = lambda x, rows, out: x + out.sum() if rows is not None else x + out
runtime.forward = jax.jit(runtime.forward.__wrapped__, static_argnames=("arch", "collect_attention", "dtype"))
print("plan, no scatter", rate(lambda i: runtime.forward(m.jparams, i, m.arch).logits))
runtime._write = orig_write
orig_top = runtime._top_mass
runtime._top_mass = lambda scores, w, mask, q, kind: w[..., 0, 0]
runtime.forward = jax.jit(runtime.forward.__wrapped__, static_argnames=("arch", "collect_attention", "dtype"))
print("plan, no top_mass", rate(lambda i: runtime.forward(m.jparams, i, m.arch).logits))
runtime._top_mass = orig_top
f = jax.jit(runtime.forward.__wrapped__, static_argnames=("arch", "collect_attention", "dtype"))
c = f.lower(m.jparams, ids, m.arch).compile()
ca = c.cost_analysis()
ca = ca[0] if isinstance(ca, list) else ca
print("flops", ca.get("flops"), "bytes", ca.get("bytes accessed"))
