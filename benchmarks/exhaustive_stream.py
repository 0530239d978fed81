"""Wall time and peak memory of ``depthcraft verify khop_doubling --exhaustive`` as n grows.

Each n runs ``/usr/bin/time -v depthcraft verify khop_doubling -p k=K -p vocab=V -p n=N
--exhaustive --json FILE`` in its own process and records its wall time, peak resident
memory (``Maximum resident set size``), user and system CPU seconds, the load average
before and after, and from the report: the exhaustive inputs, exactness and the check's
inputs per second of wall time. The exhaustive check streams its inputs (chunks of
``Task.exhaustive``'s batch, tallied one by one), so the peak memory should not grow
with the V^n inputs. The 5-minute target of issue 12 (n = 12) is printed, not asserted.

    python benchmarks/exhaustive_stream.py --n 10 11 --json results/performance/exhaustive.json
    python benchmarks/exhaustive_stream.py --n 12 --json results/performance/exhaustive.json --append \\
        --report results/performance/exhaustive_n12.json
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from typing import Any, Dict, List, Optional

from depthcraft.constructions.files import write_json_atomic

#: Issue 12: the n = 12 exhaustive check (4^12 = 16,777,216 inputs) within this many seconds on 2 cores.
TARGET_WALL_S = 300


def _time_field(text: str, name: str) -> str:
    m = re.search(rf"^\s*{re.escape(name)}: (.+)$", text, re.M)
    if m is None:
        raise RuntimeError(f"/usr/bin/time -v printed no {name!r} line:\n{text[-2000:]}")
    return m.group(1).strip()


def _seconds(clock: str) -> float:
    """``1:02.5`` or ``1:02:03`` (time -v's elapsed) -> seconds."""
    parts = [float(p) for p in clock.split(":")]
    return sum(p * 60 ** i for i, p in enumerate(reversed(parts)))


def run_n(n: int, k: int, vocab: int, report: Optional[str], env: Dict[str, str]) -> Dict[str, Any]:
    """Run one exhaustive verify under ``/usr/bin/time -v``; the figures as a dict.

    Raises:
        RuntimeError: /usr/bin/time is missing or printed no figures.
    """
    if not os.path.exists("/usr/bin/time"):
        raise RuntimeError("/usr/bin/time (GNU time) is needed for the peak RSS")
    with tempfile.TemporaryDirectory() as tmp:
        out = report or os.path.join(tmp, "report.json")
        cmd = ["verify", "khop_doubling", "-p", f"k={k}", "-p", f"vocab={vocab}", "-p", f"n={n}", "--exhaustive",
               "--json", out]
        load_before = os.getloadavg()
        proc = subprocess.run(["/usr/bin/time", "-v", sys.executable, "-m", "depthcraft", *cmd],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        load_after = os.getloadavg()
        err = proc.stderr
        with open(out, encoding="utf-8") as f:
            r = json.load(f)["results"][0]
    ex = r["checks"]["exhaustive"]
    wall = _seconds(_time_field(err, "Elapsed (wall clock) time (h:mm:ss or m:ss)"))
    shown = cmd if report else cmd[:-2]  # a temporary report file is not part of the command
    return {"n": n, "k": k, "vocab": vocab, "argv": " ".join(shlex.quote(a) for a in ["depthcraft", *shown]),
            "exit": proc.returncode, "wall_s": round(wall, 1), "report_seconds": r["seconds"],
            "user_s": float(_time_field(err, "User time (seconds)")),
            "system_s": float(_time_field(err, "System time (seconds)")),
            "cpu_percent": _time_field(err, "Percent of CPU this job got"),
            "peak_rss_mib": round(int(_time_field(err, "Maximum resident set size (kbytes)")) / 1024),
            "exhaustive_inputs": ex["inputs"], "exhaustive_exact": ex["exact"], "passed": r["passed"],
            "inputs_per_s": round(ex["inputs"] / wall), "load_before": [round(x, 2) for x in load_before],
            "load_after": [round(x, 2) for x in load_after]}


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[10, 11, 12], help="sequence lengths to run")
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--vocab", type=int, default=4)
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--append", action="store_true", help="add to the runs already in --json")
    ap.add_argument("--report", help="keep the report of the last n here (verify --json)")
    args = ap.parse_args(argv)
    runs: List[Dict[str, Any]] = []
    if args.append and args.json and os.path.exists(args.json):
        with open(args.json, encoding="utf-8") as f:
            runs = json.load(f)["runs"]
    env = dict(os.environ)
    for i, n in enumerate(args.n):
        row = run_n(n, args.k, args.vocab, args.report if i == len(args.n) - 1 else None, env)
        runs = [r for r in runs if (r["n"], r["k"], r["vocab"]) != (n, args.k, args.vocab)] + [row]
        print(f"n={n}: {row['exhaustive_inputs']:,} inputs, exact {row['exhaustive_exact']}, wall {row['wall_s']} s, "
              f"{row['inputs_per_s']:,}/s, peak RSS {row['peak_rss_mib']} MiB, load {row['load_before'][0]:.1f}"
              f"->{row['load_after'][0]:.1f}" + (f" (target < {TARGET_WALL_S} s: "
                                                 f"{'met' if row['wall_s'] < TARGET_WALL_S else 'NOT met'})"
                                                 if n == 12 else ""), flush=True)
    if args.json:
        write_json_atomic(args.json, {"construction": "khop_doubling", "cpus": os.cpu_count(),
                                      "target_wall_s": TARGET_WALL_S,
                                      "runs": sorted(runs, key=lambda r: (r["k"], r["vocab"], r["n"]))})
    return 0


if __name__ == "__main__":
    sys.exit(main())
