"""The cost model (verify/cost.py) against measured peak RSS and wall time of ``depthcraft verify``.

    nice -n 5 python benchmarks/cost_model.py [--out results/performance/cost_model.json] [--fit] [--only I,J]

Each parameter set of :data:`CASES` runs as its own process (``depthcraft verify NAME -p ...
--max-memory 0 --samples S --hypothesis H [--certify]``: imports, build, every check, ablation),
waited for with ``os.wait4`` (peak RSS of that process, ``ru_maxrss``; its CPU time, user + system,
which is the wall time on an idle core and, unlike the wall time, does not grow when other processes
share the cores; the wall time is kept too). The
estimate is :func:`verify.cost.estimate` with the same checks, computed here before the run.

Fitting and testing: the sets alternate between ``fit`` (even index) and ``test`` (odd index).
``--fit`` fits the constants of verify/cost.py by non-negative least squares on relative error
(each row divided by its measured value) over the ``fit`` rows only, prints them (to be copied into
verify/cost.py by hand) and reports both halves with the fitted constants; without ``--fit`` the
constants shipped in verify/cost.py are used. The JSON keeps every row with its split, so the
held-out (``test``) rows are the evidence that the estimate is within 2x.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np

from depthcraft.constructions.compiler import plan_graph
from depthcraft.verify import cost, lookup

#: (construction, params, samples, hypothesis examples, certify): small enough for a few minutes in all.
CASES = [
    ("khop_doubling", {"k": 2, "n": 8}, 200, 20, False),
    ("khop_doubling", {"k": 8, "n": 32}, 200, 20, False),
    ("khop_doubling", {"k": 16, "n": 64}, 100, 10, False),
    ("khop_doubling", {"k": 4, "n": 128}, 100, 10, False),
    ("khop_floor", {"k": 3, "n": 16}, 200, 20, False),
    ("khop_floor", {"k": 7, "n": 48}, 100, 10, False),
    ("khop_floor", {"k": 5, "n": 96}, 100, 10, False),
    ("khop_constant_width", {"k": 4, "n": 32}, 100, 10, False),
    ("khop_rasp", {"k": 2, "n": 12}, 100, 10, False),
    ("khop_rasp", {"k": 3, "n": 24}, 100, 10, False),
    ("retrieval_doubling", {"d": 4, "distractors": 2}, 200, 20, False),
    ("retrieval_doubling", {"d": 8, "distractors": 4}, 100, 10, False),
    ("retrieval_tripling", {"d": 5, "distractors": 2}, 200, 20, False),
    ("retrieval_tripling", {"d": 7, "distractors": 6}, 100, 10, False),
    ("retrieval_tripling", {"d": 9, "distractors": 8}, 50, 5, False),
    ("retrieval_tripling", {"d": 12, "distractors": 10}, 20, 5, False),
    ("retrieval_doubling", {"d": 12, "distractors": 8}, 20, 5, False),
    ("khop_doubling", {"k": 8, "n": 256}, 50, 5, False),
    ("graph_connectivity", {}, 100, 10, False),
    ("sc_memorize", {}, 100, 10, False),
    ("icqa_copy_match", {}, 100, 10, False),
    ("tm_parse_map", {}, 100, 10, False),
    ("ictm_parse_copy_match", {}, 100, 10, False),
    ("khop_doubling", {"k": 4, "n": 16}, 50, 5, True),
    ("khop_floor", {"k": 3, "n": 24}, 50, 5, True),
    ("retrieval_tripling", {"d": 4, "distractors": 2}, 50, 5, True),
    ("khop_floor", {"k": 16, "n": 512}, 20, 5, False),
    ("khop_doubling", {"k": 16, "n": 384}, 20, 5, False),
    ("retrieval_doubling", {"d": 16, "distractors": 6}, 20, 5, False),
    ("khop_constant_width", {"k": 16, "n": 512}, 20, 5, False),
    ("graph_connectivity", {"n": 32}, 20, 5, False),
    ("graph_connectivity", {"n": 16}, 50, 5, False),
]

#: Runs measured once outside this script (too long to repeat here), evaluated but never fitted:
#: (construction, params, samples, hypothesis, certify, peak RSS bytes, CPU seconds, wall seconds).
#: retrieval_tripling d=14 distractors=16: ``/usr/bin/time -v depthcraft verify retrieval_tripling -p d=14
#: -p distractors=16`` (default checks), 2026-12-04, 2 cores shared with other jobs (load ~8).
EXTERNAL = [
    ("retrieval_tripling", {"d": 14, "distractors": 16}, 1000, 100, False, 3051848 * 1024, 451.66 + 34.26, 1166.7),
]

MEMORY_KEYS = tuple(cost.MEM)
TIME_KEYS = tuple(cost.TIME)


def measure(name, params, samples, hyp, certify):
    """Run ``depthcraft verify`` in a fresh process; return (peak RSS bytes, CPU seconds, wall seconds,
    report or None, exit code)."""
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "r.json"
        args = [sys.executable, "-c", "from depthcraft.verify.cli import main; main()", "verify", name,
                "--samples", str(samples), "--hypothesis", str(hyp), "--max-memory", "0", "--json", str(out)]
        for k, v in params.items():
            args += ["-p", f"{k}={v}"]
        if certify:
            args.append("--certify")
        t0 = time.perf_counter()
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        cpu = usage.ru_utime + usage.ru_stime
        proc.returncode = os.waitstatus_to_exitcode(status)
        report = json.loads(out.read_text())["results"][0] if out.exists() else None
        return usage.ru_maxrss * 1024, cpu, wall, report, proc.returncode


def predict(feats, mem_consts, time_consts):
    """(peak bytes, seconds) of one row's features under the given constants."""
    mem = sum(mem_consts[k] * feats[k] for k in MEMORY_KEYS)
    secs = sum(time_consts[k] * feats[k] for k in TIME_KEYS)
    return mem, secs


def shipped():
    """The constants in verify/cost.py, as the two dicts :func:`predict` takes."""
    return dict(cost.MEM), dict(cost.TIME)


def fit(rows, keys, target):
    """Non-negative least squares of relative error over ``rows``: constants for ``keys``."""
    from scipy.optimize import nnls

    a = np.array([[r["features"][k] / r[target] for k in keys] for r in rows])
    scale = np.maximum(a.max(0), 1e-30)
    x, _ = nnls(a / scale, np.ones(len(rows)))
    return {k: float(v / s) for k, v, s in zip(keys, x, scale)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/performance/cost_model.json")
    ap.add_argument("--fit", action="store_true", help="fit the constants on the fit rows and print them")
    ap.add_argument("--reuse", help="a JSON written before: reuse its measurements (no runs), e.g. to refit")
    ap.add_argument("--only", help="comma-separated case indices to run")
    a = ap.parse_args()
    rows = []
    old = {json.dumps([r["construction"], r["params"], r["samples"], r["certify"]]): r
           for r in json.loads(pathlib.Path(a.reuse).read_text())["rows"]} if a.reuse else {}
    only = {int(i) for i in a.only.split(",")} if a.only else None
    for i, (name, params, samples, hyp, certify) in enumerate(CASES):
        if only is not None and i not in only:
            continue
        r = lookup.resolve(name, params, sampling=False)
        est = cost.estimate(name, params, samples=samples, hypothesis_examples=hyp, certify=certify, resolved=r)
        n, positions = r.task.max_seq_len(r.params), r.construction.positions
        g = cost.graph_counts(plan_graph(r.construction.program(r.params), r.task.vocab(r.params), n, positions),
                              n, positions)
        feats = cost.features(g, n, samples=samples, hypothesis_examples=hyp, certify=certify,
                              vocab=len(r.task.vocab(r.params)), family=cost.family_of(r.construction.task))
        key = json.dumps([name, params, samples, certify])
        if key in old:
            o = old[key]
            rss, cpu, wall, rc, d_model = o["rss"], o["seconds"], o["wall_seconds"], o["rc"], o["d_model"]
        else:
            rss, cpu, wall, report, rc = measure(name, params, samples, hyp, certify)
            d_model = report["structure"]["d_model"] if report else None
        rows.append({"construction": name, "params": params, "samples": samples, "hypothesis": hyp,
                     "certify": certify, "split": "fit" if i % 2 == 0 else "test", "rc": rc, "rss": rss,
                     "seconds": round(cpu, 2), "wall_seconds": round(wall, 2), "d_model": d_model, "d_model_est": est.d_model, "features": feats})
        print(f"{i:2d} {name} {params} rss {rss / 1e6:.0f} MB  cpu {cpu:.1f} s  wall {wall:.1f} s", file=sys.stderr, flush=True)
    for name, params, samples, hyp, certify, rss, cpu, wall in EXTERNAL:
        r = lookup.resolve(name, params, sampling=False)
        n, positions = r.task.max_seq_len(r.params), r.construction.positions
        g = cost.graph_counts(plan_graph(r.construction.program(r.params), r.task.vocab(r.params), n, positions),
                              n, positions)
        rows.append({"construction": name, "params": params, "samples": samples, "hypothesis": hyp,
                     "certify": certify, "split": "external", "rc": 0, "rss": rss, "seconds": cpu,
                     "wall_seconds": wall, "d_model": None, "d_model_est": g["d_model"],
                     "features": cost.features(g, n, samples=samples, hypothesis_examples=hyp, certify=certify,
                                               vocab=len(r.task.vocab(r.params)),
                                               family=cost.family_of(r.construction.task))})
    mem_c, time_c = shipped()
    if a.fit:
        fitting = [r for r in rows if r["split"] == "fit"]
        mem_c, time_c = fit(fitting, MEMORY_KEYS, "rss"), fit(fitting, TIME_KEYS, "seconds")
        print("fitted memory constants:", json.dumps(mem_c))
        print("fitted time constants:", json.dumps(time_c))
    for r in rows:
        m, s = predict(r["features"], mem_c, time_c)
        r.update(rss_est=int(m), seconds_est=round(s, 2), rss_ratio=round(m / r["rss"], 3),
                 seconds_ratio=round(s / r["seconds"], 3))
    within = lambda rs, k: sum(0.5 <= r[k] <= 2.0 for r in rs)  # noqa: E731
    summary = {}
    for split in ("fit", "test", "external"):
        rs = [r for r in rows if r["split"] == split]
        summary[split] = {"rows": len(rs), "rss_within_2x": within(rs, "rss_ratio"),
                          "seconds_within_2x": within(rs, "seconds_ratio")}
    print(f"{'construction':<22} {'params':<22} {'cert':>4} {'split':>5} {'d_model':>11} {'RSS MB':>13} "
          f"{'ratio':>5} {'time s':>13} {'ratio':>5}")
    for r in rows:
        ps = " ".join(f"{k}={v}" for k, v in r["params"].items()) or "(defaults)"
        print(f"{r['construction']:<22} {ps:<22} {'yes' if r['certify'] else '':>4} {r['split']:>5} "
              f"{r['d_model_est']:>5}/{str(r['d_model']):>5} {r['rss_est'] / 1e6:>6.0f}/{r['rss'] / 1e6:<6.0f} "
              f"{r['rss_ratio']:>5.2f} {r['seconds_est']:>6.1f}/{r['seconds']:<6.1f} {r['seconds_ratio']:>5.2f}")
    print(json.dumps(summary))
    out = pathlib.Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"constants": {"memory": mem_c, "time": time_c}, "summary": summary, "rows": rows,
                               "cpu_count": os.cpu_count(), "note": "estimate/measured: RSS bytes, wall seconds; "
                               "fit rows (even index) fitted the constants, test rows (odd) and external rows did not"},
                              indent=1) + "\n")
    print(f"written to {out}")


if __name__ == "__main__":
    main()
