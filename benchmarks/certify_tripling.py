"""retrieval_tripling certified by symmetry (verify/certify/symmetry.py): time, memory and scope per depth.

    python benchmarks/certify_tripling.py --json results/certify/tripling_symmetry.json

For each D: the number of orbits of the task's whole domain (Sym(symbols) x Sym(fact slots),
:meth:`RetrievalTask.symmetry`) and the certificate over the whole domain through
``certify(model, precondition=...)``: by orbits where they are within the route's budget, else by
locality (one piece per chain length, :meth:`RetrievalTask.locality`); and the certificate over
the *sampler's sub-domain* alone (the one orbit of c distractor chains of exactly D facts, every
fact present). Each row has its wall time, the process's peak RSS so far, and the worst gap, leak
and radius. Prints one line per row.
"""
import argparse
import resource
import time

from depthcraft.constructions.files import write_json_atomic
from depthcraft.verify import lookup
from depthcraft.verify.certify import certify
from depthcraft.verify.certify.symmetry import MAX_ORBITS, certify_by_symmetry
from depthcraft.verify.tasks import get_task

TASK = get_task("retrieval")


def rss_mib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


def worst(per_layer):
    heads = [e for e in per_layer if e.get("head") is not None]
    return {"min_gap": min((e["min_gap"] for e in heads if e.get("min_gap") is not None), default=None),
            "max_leak_bound": max((e["leak_bound"] for e in heads if e.get("leak_bound") is not None), default=None),
            "max_radius": max((e["radius_out"] for e in per_layer if e.get("radius_out") is not None), default=None)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", required=True)
    ap.add_argument("--d", type=int, nargs="*", default=[5, 7, 64])
    a = ap.parse_args()
    rows = []
    for d in a.d:
        p = {"d": d, "distractors": 2, "symbols": 0, "hops": 0}
        t = time.perf_counter()
        model = lookup.resolve("retrieval_tripling", p).build()
        build_s = round(time.perf_counter() - t, 2)
        pre = TASK.domain_precondition(p)
        count = pre.symmetry.count()
        row = {"construction": "retrieval_tripling", "params": p, "d_model": len(model.residual_labels),
               "n": TASK.max_seq_len(p), "build_s": build_s, "domain_orbits": count, "max_orbits": MAX_ORBITS}
        t = time.perf_counter()
        cert = certify(model, domain=TASK.domain(p), precondition=pre)
        sym = cert.get("symmetry") or {}
        row["domain"] = {"certified": cert["certified"], "method": cert.get("method"), "scope": cert["scope"],
                         "pieces": sym.get("pieces"), "orbits": sym.get("orbits") or None, "why": sym.get("why"),
                         "seconds": round(time.perf_counter() - t, 2), "peak_rss_mib": rss_mib(),
                         **worst(cert["per_layer"])}
        sub = TASK.symmetry(p, sampled_only=True)
        t = time.perf_counter()
        res = certify_by_symmetry(model, sub, "the sampler's shape")
        row["sampled_shape"] = {
            "scope": f"sub-domain: {p['distractors']} distractor chains of exactly D = {d} facts, all "
                     f"{(p['distractors'] + 1) * d} facts present (n = {TASK.max_seq_len(p)}), every renaming of "
                     f"symbols and order of facts; the rest of the domain is not covered",
            "certified": res["certified"], "why": res["why"], "orbits": res["orbits"],
            "generators": res["generators"], "seconds": round(time.perf_counter() - t, 2), "peak_rss_mib": rss_mib(),
            **worst(res["per_layer"])}
        rows.append(row)
        print(f"d={d} n={row['n']} d_model={row['d_model']}: domain {count} orbits, "
              f"certified={row['domain']['certified']} by {row['domain']['method']} "
              f"({row['domain'].get('seconds', '-')} s); sampled shape "
              f"certified={res['certified']} ({row['sampled_shape']['seconds']} s), peak RSS {rss_mib()} MiB",
              flush=True)
    write_json_atomic(a.json, {"command": "python benchmarks/certify_tripling.py --json " + a.json, "rows": rows})


if __name__ == "__main__":
    main()
