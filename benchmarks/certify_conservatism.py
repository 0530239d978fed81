"""How conservative is the certificate? The n where it first fails against the n where an input
first decodes wrong, for a head weakened by scaling W_Q (issue 30, "Must show").

    python benchmarks/certify_conservatism.py [--k 2] [--vocab 4] [--sublayer 2] [--factor 0.1]
        [--ns 8 16 32 ...] [--random 256] [--json results/certify/conservatism.json]

For each n: builds ``khop_doubling`` (k, vocab, n), scales the W_Q of one attention sublayer by
``factor`` (its score gaps shrink by it; the W_O-weakened and column-swapped models of
tests/test_certify_program.py fail the program check at every n instead), runs
:func:`verify.certify.certify`, and runs the float32 model on a set of inputs: the periodic
tokens 0, 1, .., vocab-1, 0, 1, .. (every late query points at a real position: the most keys
near the top), the task's edge cases at length n, and ``--random`` inputs from the task's
sampler. An input "decodes wrong" when some position differs from hop_k. The first wrong n is
the first among these inputs: a witness, not a search over every input (the certificate is the
statement about every input). Prints one line per n; ``--json`` writes the rows and the two n.
"""
import argparse
import dataclasses
import pathlib

import numpy as np

from depthcraft.constructions.files import write_json_atomic
from depthcraft.verify import lookup
from depthcraft.verify.certify import certify
from depthcraft.verify.tasks.khop import hop_k

ap = argparse.ArgumentParser()
ap.add_argument("--k", type=int, default=2)
ap.add_argument("--vocab", type=int, default=4)
ap.add_argument("--sublayer", type=int, default=2, help="the sublayer whose W_Q is scaled (0-based)")
ap.add_argument("--factor", type=float, default=0.1)
ap.add_argument("--ns", type=int, nargs="+", default=[8, 16, 24, 32, 48, 64, 96, 128, 160, 200, 256, 320, 400])
ap.add_argument("--random", type=int, default=256)
ap.add_argument("--json")
a = ap.parse_args()


def weakened(model):
    layers = [dict(p) for p in model.params["layers"]]
    layers[a.sublayer]["w_q"] = np.asarray(layers[a.sublayer]["w_q"]) * np.float32(a.factor)
    return dataclasses.replace(model, params=dict(model.params, layers=layers))


rows = []
print(f"khop_doubling k={a.k} vocab={a.vocab}, sublayer {a.sublayer} W_Q x{a.factor}")
print(f"{'n':>5} {'certified':>9} {'stops at':>9} {'leak bound':>11} {'wrong inputs':>13} {'max leak':>9}")
for n in a.ns:
    r = lookup.resolve("khop_doubling", {"k": a.k, "n": n, "vocab": a.vocab})
    model = weakened(r.build())
    cert = certify(model)
    attn = sum(1 for s in model.arch.sublayers[:a.sublayer + 1] if s.kind == "attn")
    entry = next((e for e in cert["per_layer"] if e["layer"] == f"attn {attn}"), None)
    failed = next((u for u in cert["uncertified"] if u["layer"] == f"attn {attn}"), None)
    bound = entry["leak_bound"] if entry else (failed or {}).get("witness", {}).get("leak_bound")
    rng = np.random.default_rng(0)
    inputs = [np.tile(np.arange(a.vocab), n // a.vocab + 1)[None, :n]]
    inputs += [np.asarray(e)[:, :n] for e in r.task.edge_cases(r.params) if np.asarray(e).shape[1] == n]
    inputs.append(r.task.sample(r.params, rng, a.random))
    x = np.concatenate(inputs)
    out = model.forward_ids(model.encode(x, length=n + 1))
    wrong = int((model.decode(np.asarray(out.logits)[:, 1:], -1) != hop_k(x, a.k)).any(1).sum())
    leak = float(1.0 - np.asarray(out.attn_mass[attn - 1]).min())
    stop = cert["uncertified"][0] if cert["uncertified"] else None
    row = {"n": n, "certified": cert["certified"], "float32_matches_hardmax": cert["float32_matches_hardmax"],
           "stops_at": stop and {"layer": stop["layer"], "head": stop["head"], "why": stop["why"]},
           "leak_bound": bound, "inputs": int(len(x)), "wrong": wrong, "measured_max_leak": round(leak, 6)}
    rows.append(row)
    shown = bound if bound is not None else float("nan")
    print(f"{n:>5} {str(cert['certified']):>9} {(stop or {}).get('layer') or '-':>9} {shown:>11.3g} "
          f"{wrong:>6}/{len(x):<6} {leak:>9.3g}", flush=True)
first_fail = next((r["n"] for r in rows if not r["certified"]), None)
first_wrong = next((r["n"] for r in rows if r["wrong"]), None)
print(f"certificate first fails at n = {first_fail}; an input first decodes wrong at n = {first_wrong}")
if a.json:
    pathlib.Path(a.json).parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(a.json, {"rows": rows, "first_uncertified_n": first_fail, "first_wrong_n": first_wrong,
                               "command": "python benchmarks/certify_conservatism.py " + " ".join(
                                   f"--{k} {' '.join(map(str, v)) if isinstance(v, list) else v}"
                                   for k, v in vars(a).items() if v is not None)})
