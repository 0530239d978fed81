"""Attention scores by gathers (``runtime.SPARSE_KEYS``) against the dense product: same weights, one process.

For each case (a catalogue construction at k, n) the weights are planned twice: as before
(``runtime.plan(..., sparse_min_key=<never>)``: every score a dense ``q @ k^T`` product) and
with the default plan (marked sublayers compute their scores by gathers when the call's keys
allow it, ``runtime._sparse_scores``). Both forwards run on the same batch (the checks' batch
size, ``checks.batch_rows``), interleaved ``--rounds`` times; the best rate of each is kept.
The logits of the two are compared bit for bit. Prints, and with ``--json`` appends, per case:
d_model, attention layers, the marked layers, the layers whose keys passed the check on the
batch, sequences/s before and after, the speed-up, and whether the logits are identical.

    python benchmarks/sparse_scores.py --cases khop_doubling:16:256 khop_doubling:64:1024
"""

from __future__ import annotations

import argparse
import os
import pathlib
import platform
import time
from typing import Any, Dict, List

import jax
import jax.numpy as jnp
import numpy as np

from depthcraft.constructions import runtime as R
from depthcraft.constructions.files import write_json_atomic
from depthcraft.verify import lookup
from depthcraft.verify.checks import batch_rows

# the case parser and the rate loop are runtime_speed's (this script runs from benchmarks/)
from runtime_speed import _case, _rate  # noqa: E402

DEFAULT_CASES = ("khop_doubling:16:256", "khop_doubling:16:1024", "khop_doubling:64:1024",
                 "khop_constant_width:16:1024")
NEVER = 1 << 30


def measure(name: str, k: int, n: int, rounds: int, min_seconds: float) -> Dict[str, Any]:
    """One case: rates of the dense-score and the gathered-score forward on the same batch (see the module doc)."""
    r = lookup.resolve(name, {"k": k, "n": n})
    t0 = time.perf_counter()
    model = r.build()
    build_s = time.perf_counter() - t0
    arch = model.arch
    rows = batch_rows(model)
    ids = jnp.asarray(model.encode(r.task.sample(r.params, np.random.default_rng(0), rows),
                                   length=model.max_seq_len + 1))
    before = jax.tree_util.tree_map(jnp.asarray, R.plan(model.params, arch, sparse_min_key=NEVER))
    after = jax.tree_util.tree_map(jnp.asarray, R.plan(model.params, arch))
    marked = [i for i, p in enumerate(after["layers"]) if R.SPARSE_KEYS in p]
    out = R.forward(after, ids, arch, collect_residuals=True)
    passed = [i for i in marked if bool(R._sparse_scores_ok(
        R._head_proj(out.residuals[i], after["layers"][i], "w_q", arch.sublayers[i].q_rows),
        R._head_proj(out.residuals[i], after["layers"][i], "w_k", arch.sublayers[i].k_rows)))]
    del out
    first = {}
    for label, w in (("before", before), ("after", after)):
        t0 = time.perf_counter()
        jax.block_until_ready(R.forward(w, ids, arch).logits)
        first[label] = round(time.perf_counter() - t0, 2)
    same = np.array_equal(np.asarray(R.forward(before, ids, arch).logits).view(np.uint32),
                          np.asarray(R.forward(after, ids, arch).logits).view(np.uint32))
    rates: Dict[str, List[float]] = {"before": [], "after": []}
    for _ in range(rounds):
        for label, w in (("before", before), ("after", after)):
            rates[label].append(_rate(lambda: R.forward(w, ids, arch).logits, rows, min_seconds))
    best = {label: max(v) for label, v in rates.items()}
    return {"construction": name, "k": k, "n": n, "d_model": len(model.residual_labels),
            "build_s": round(build_s, 2), "batch": rows,
            "attn_layers": sum(s.kind == "attn" for s in arch.sublayers), "marked_layers": marked,
            "gathered_layers": passed, "first_call_s": first,
            "seq_per_s": {label: round(v, 3) for label, v in best.items()},
            "all_seq_per_s": {label: [round(x, 3) for x in v] for label, v in rates.items()},
            "speedup": round(best["after"] / best["before"], 3), "same_logits_bits": bool(same),
            "load_1min": round(os.getloadavg()[0], 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="+", type=_case, default=[_case(s) for s in DEFAULT_CASES], metavar="NAME:K:N")
    ap.add_argument("--rounds", type=int, default=2, help="interleaved before/after timings per case")
    ap.add_argument("--min-seconds", type=float, default=3.0, help="time each measurement at least this long")
    ap.add_argument("--json", type=pathlib.Path, help="write (or with --append, extend) this results file")
    ap.add_argument("--append", action="store_true")
    args = ap.parse_args()
    doc = {"benchmark": "sparse_scores", "machine": platform.machine(), "cpus": len(os.sched_getaffinity(0)),
           "jax": jax.__version__, "cases": []}
    if args.append and args.json and args.json.is_file():
        import json

        doc = json.loads(args.json.read_text())
    for name, k, n in args.cases:
        c = measure(name, k, n, args.rounds, args.min_seconds)
        doc["cases"].append(c)
        print(f"{name} k={k} n={n} d_model={c['d_model']} batch={c['batch']}: marked {c['marked_layers']}, "
              f"gathered {c['gathered_layers']}; {c['seq_per_s']['before']:.2f} -> {c['seq_per_s']['after']:.2f} "
              f"seq/s ({c['speedup']:.2f}x), same logits: {c['same_logits_bits']}, load {c['load_1min']}",
              flush=True)
        if args.json:
            write_json_atomic(str(args.json), doc)


if __name__ == "__main__":
    main()
