"""Certificate time against sampled-forward time, n = 16 .. 1024 (issue 24, Deliver 4).

    python benchmarks/certify_speed.py [--construction khop_doubling] [--k 8] [--ns 16 64 256 1024]
        [--samples 1000] [--json results/performance/certify_speed.json]

For each n: builds the construction, times :func:`verify.certify.certify` (it covers EVERY input of
length 1..n), and times the sampled forward on a few random inputs of length n (after a first call
that compiles), from which the time of ``--samples`` sampled inputs (what ``depthcraft verify`` runs
by default) is extrapolated. Prints one line per n and the ratio sampled / certificate, both measured
in the same run; ``--json`` writes the rows.
"""
import argparse
import os
import pathlib
import time

import numpy as np

from depthcraft.constructions.files import write_json_atomic
from depthcraft.verify import lookup
from depthcraft.verify.certify import certify
from depthcraft.verify.checks import predict_many

ap = argparse.ArgumentParser()
ap.add_argument("--construction", default="khop_doubling")
ap.add_argument("--k", type=int, default=8)
ap.add_argument("--ns", type=int, nargs="+", default=[16, 64, 256, 1024])
ap.add_argument("--samples", type=int, default=1000, help="sampled inputs the extrapolation is for")
ap.add_argument("--timed", type=int, default=4, help="random inputs timed per n (after a compiling call)")
ap.add_argument("--json")
a = ap.parse_args()

rows = []
print(f"{a.construction} k={a.k}: certificate (every input) vs sampled forward ({a.samples} inputs)")
print(f"{'n':>6} {'d_model':>8} {'certify s':>10} {'certified':>9} {'fwd s/input':>12} "
      f"{'sampled s':>10} {'ratio':>7}")
for n in a.ns:
    r = lookup.resolve(a.construction, {"k": a.k, "n": n})
    model = r.build()
    t = time.perf_counter()
    cert = certify(model)
    t_cert = time.perf_counter() - t
    x = np.random.default_rng(0).integers(0, r.params["vocab"], size=(a.timed, n))
    predict_many(model, [x[:1]])  # compiles the one-row shape
    t = time.perf_counter()
    for i in range(a.timed):
        predict_many(model, [x[i:i + 1]])
    per_input = (time.perf_counter() - t) / a.timed
    sampled = per_input * a.samples
    row = {"construction": a.construction, "k": a.k, "n": n, "d_model": len(model.residual_labels),
           "certify_s": round(t_cert, 3), "certified": cert["certified"], "forward_s_per_input": round(per_input, 4),
           "sampled_s_extrapolated": round(sampled, 1), "samples": a.samples,
           "ratio_sampled_over_certify": round(sampled / t_cert, 1), "load_1min": round(os.getloadavg()[0], 2)}
    rows.append(row)
    print(f"{n:>6} {row['d_model']:>8} {t_cert:>10.2f} {str(cert['certified']):>9} {per_input:>12.4f} "
          f"{sampled:>10.1f} {sampled / t_cert:>6.1f}x", flush=True)
if a.json:
    pathlib.Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(a.json, {"rows": rows, "command": "python benchmarks/certify_speed.py " + " ".join(
        f"--{k} {' '.join(map(str, v)) if isinstance(v, list) else v}" for k, v in vars(a).items()
        if k != "json" and v is not None)})
