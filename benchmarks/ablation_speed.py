"""Layer ablation time before (each ablated model from the embeddings) and after (shared prefixes).

    python benchmarks/ablation_speed.py khop_doubling k=16 n=100 --samples 500 [--out FILE]

Runs ``verify.ablation.ablate_from_embeddings`` (the ablation before issue 12's change) and
``verify.ablation.ablate`` on the same inputs (the task's random inputs, ``--samples`` of them,
plus its edge cases: what ``depthcraft verify`` ablates, there with 500 samples): once each
with compilation (the persistent compilation cache, if on, may already hold the shapes), then
``--repeats`` compiled runs of each, interleaved, keeping the fastest (the machine is shared);
checks that both give the same
result and prints the times and the ratio of the compiled times. ``--out`` appends the row to a JSON list (results/performance/ablation.json).
"""
import argparse
import json
import os
import pathlib
import time

from depthcraft.verify import lookup
from depthcraft.verify.ablation import ablate, ablate_from_embeddings, ablation_inputs
from depthcraft.verify.checks import batch_rows

ap = argparse.ArgumentParser()
ap.add_argument("construction")
ap.add_argument("params", nargs="*", help="key=value")
ap.add_argument("--samples", type=int, default=500)
ap.add_argument("--out")
ap.add_argument("--skip-old", action="store_true", help="time only the new ablation")
ap.add_argument("--repeats", type=int, default=3, help="compiled runs of each, interleaved; the fastest is kept")
a = ap.parse_args()
params = dict(kv.split("=", 1) for kv in a.params)
r = lookup.resolve(lookup.get(a.construction), params)
m = r.build()
inputs = ablation_inputs(r.task, r.params, a.samples, 0)
n_in = sum(len(x) for x in inputs)
n_attn = sum(s.kind == "attn" for s in m.arch.sublayers)
print(f"{a.construction} {params}: d_model {len(m.residual_labels)}, {n_attn} attention layers, "
      f"{len(m.arch.sublayers)} sublayers, {n_in} inputs, {batch_rows(m)} rows per call", flush=True)
row = {"construction": a.construction, "params": params, "d_model": len(m.residual_labels),
       "attn_layers": n_attn, "sublayers": len(m.arch.sublayers), "inputs": n_in,
       "load_1min": round(os.getloadavg()[0], 2)}
results = {}
fns = [(name, fn) for name, fn in (("old", ablate_from_embeddings), ("new", ablate))
       if not (name == "old" and a.skip_old)]
for name, fn in fns:
    t = time.perf_counter()
    fn(m, r.task, r.params, inputs)  # first run: compiles every shape it uses
    row[f"{name}_first_s"] = round(time.perf_counter() - t, 2)
times = {name: [] for name, _ in fns}
for rep in range(a.repeats):  # compiled runs, interleaved (a shared machine: the load moves)
    for name, fn in fns:
        t = time.perf_counter()
        results[name] = fn(m, r.task, r.params, inputs)
        times[name].append(time.perf_counter() - t)
for name, _ in fns:
    row[f"{name}_s"] = round(min(times[name]), 2)
    row[f"{name}_all_s"] = [round(v, 2) for v in times[name]]
    print(f"{name}: {row[f'{name}_s']:.1f} s compiled, fastest of {a.repeats} "
          f"({row[f'{name}_s'] / n_in * 1000:.1f} ms per input); first run with compilation "
          f"{row[f'{name}_first_s']:.1f} s", flush=True)
if "old" in results:
    row["same_result"] = results["old"] == results["new"]
    row["speedup"] = round(row["old_s"] / row["new_s"], 2)
    print(f"same result: {row['same_result']}; old / new = {row['speedup']:.2f}x")
if a.out:
    path = pathlib.Path(a.out)
    rows = json.loads(path.read_text()) if path.exists() else []
    rows.append(row)
    path.write_text(json.dumps(rows, indent=1) + "\n")
