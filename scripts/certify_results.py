"""Certificates at the issue's scale targets and the worked layer of docs/certification.md.

    python scripts/certify_results.py --out results/certify/certify.json

Writes, for each scale target, the certificate (certified, or the sublayer, head and reason it
stops at), its time and the process's peak RSS so far; the theorem's half (verify/theorem.py) for
the k-hop constructions (once each: every input of length <= 8, and 10^5 random inputs at n = 1024); and, for the worked example, the score levels of khop_doubling k=8 n=16's
layer-3 head (the pointer look-up) for pointers 0 and 5, with that head's certificate entry.
No sampled check runs here (``depthcraft verify --certify`` adds them).
"""
import argparse
import resource
import time

import numpy as np

from depthcraft.constructions.files import write_json_atomic
from depthcraft.verify import lookup
from depthcraft.verify.certify import certify
from depthcraft.verify.theorem import theorem_check

TARGETS = [("khop_doubling", {"k": 64, "n": 1024}), ("khop_floor", {"k": 16, "n": 1024}),
           ("khop_constant_width", {"k": 4, "n": 4096}), ("khop_constant_width", {"k": 4, "n": 100}),
           ("khop_constant_width", {"k": 16, "n": 100}), ("retrieval_doubling", {"d": 64}),
           ("retrieval_tripling", {"d": 64}), ("graph_connectivity", {"n": 64})]


def summary(cert):
    per = cert["per_layer"]
    u = cert["uncertified"][0] if cert["uncertified"] else None
    return {"certified": cert["certified"], "seconds": cert["seconds"],
            "max_leak_bound": max((e["leak_bound"] or 0.0 for e in per if e["head"] is not None), default=None),
            "min_gap": min((e["min_gap"] for e in per if e.get("min_gap") is not None), default=None),
            "readout": cert["readout"], "stops_at": None if u is None else
            {"layer": u["layer"], "head": u["head"], "why": u["why"]}, "sublayers_proved": len(per)}


def worked():
    r = lookup.resolve("khop_doubling", {"k": 8, "n": 16, "vocab": 4})
    m = r.build()
    spec, p = m.arch.sublayers[2], m.params["layers"][2]
    labels = m.residual_labels
    a = (p["w_q"][0].astype(np.float64) @ p["w_k"][0].T.astype(np.float64)) * spec.qk_scale
    q_labels, k_labels = [labels[i] for i in spec.q_rows], [labels[i] for i in spec.k_rows]
    levels = {}
    for ptr in (0, 5):
        q = np.zeros(len(q_labels))
        q[q_labels.index(f"{labels[spec.q_rows[0]].split(':')[0]}:{ptr}")] = 1.0
        q[q_labels.index("one")] = 1.0
        row = []
        for j in range(0, 17):  # model positions: 0 = BOS, j >= 1 reads indices:j-1
            k = np.zeros(len(k_labels))
            k[k_labels.index("tokens:BOS" if j == 0 else f"indices:{j - 1}")] = 1.0
            row.append(float(q @ a @ k))
        levels[str(ptr)] = row
    cert = certify(m)
    return {"construction": "khop_doubling", "params": r.params, "layer": "attn 3", "query_reads": q_labels,
            "key_reads": k_labels, "scores_by_key_position": levels,
            "certificate_entry": cert["per_layer"][2], "certified": cert["certified"]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    rows, seen = [], set()
    for name, given in TARGETS:
        r = lookup.resolve(name, given)
        t = time.perf_counter()
        model = r.build()
        build_s = time.perf_counter() - t
        cert = certify(model)
        row = {"construction": name, "params": r.params, "d_model": len(model.residual_labels),
               "build_s": round(build_s, 2), **summary(cert),
               "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
               "theorem": None if name in seen else theorem_check(name, r.params, random_inputs=100_000, random_n=1024)}
        seen.add(name)
        rows.append(row)
        print(name, given, row["certified"], row["seconds"], row["stops_at"], flush=True)
        lookup.get(name)  # keep the registry warm; models are dropped below
        from depthcraft.verify.api import release_memory
        release_memory()
    write_json_atomic(a.out, {"targets": rows, "worked": worked(),
                              "command": "python scripts/certify_results.py --out " + a.out})


if __name__ == "__main__":
    main()
