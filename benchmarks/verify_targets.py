"""Wall time and peak memory of ``depthcraft verify`` at the sizes of issue 12's table.

Each case runs ``depthcraft verify NAME -p ... --samples S`` (or ``depthcraft verify --all``) in its own process and records
its wall time, its peak resident memory (``wait4``'s ``ru_maxrss``), its exit status, the
report's verdict and the machine's load average before and after (a shared machine); a case that runs past ``--timeout`` seconds is stopped and recorded as
such. Targets (issue 12) are printed next to each case, not asserted.

    python benchmarks/verify_targets.py                      # every case, 300 s each
    python benchmarks/verify_targets.py --cases 0 4 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence

from depthcraft.constructions.files import write_json_atomic

#: (construction, params, samples, target wall seconds or None, target peak RSS GiB or None).
CASES = (
    ("khop_doubling", {"k": 16, "n": 100}, 200, None, None),
    ("khop_doubling", {"k": 16, "n": 256}, 200, 60, None),
    ("khop_doubling", {"k": 64, "n": 512}, 200, None, None),
    ("khop_doubling", {"k": 64, "n": 1024}, 1000, 300, 4.0),
    ("khop_constant_width", {"k": 16, "n": 1024}, 200, 60, None),
    ("--all", {}, 1000, 90, None),
)


def run_case(command: Sequence[str], name: str, params: Dict[str, int], samples: int, timeout: float,
             env: Optional[Dict[str, str]] = None, stderr_file: Optional[str] = None,
             report_file: Optional[str] = None) -> Dict[str, Any]:
    """Run one ``depthcraft verify`` and measure it.

    Args:
        command: how to start depthcraft (e.g. ``[sys.executable, "-m", "depthcraft"]``).
        name, params, samples: the construction, its ``-p`` parameters, ``--samples``.
        timeout: seconds before the process is stopped.
        env: environment of the process (default: this one's).
        stderr_file: write the process's whole stderr here (e.g. a ``/usr/bin/time -v`` report).
        report_file: copy the verify report (JSON) here.
    Returns:
        {"construction", "params", "samples", "argv", "exit", "timed_out", "wall_s", "peak_rss_mib",
         "passed", "report_seconds"} (``passed``/``report_seconds`` None without a report).
    """
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report.json")
        argv = list(command) + ["verify", name] + [a for k, v in params.items() for a in ("-p", f"{k}={v}")] + \
            (["--samples", str(samples)] if name != "--all" else []) + ["--json", report]
        load_before = os.getloadavg()[0]
        t0 = time.perf_counter()
        err_path = os.path.join(tmp, "stderr.txt")  # a file, not a pipe: a long stderr never blocks the process
        err_out = open(err_path, "w", encoding="utf-8")
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err_out, env=env)
        timed_out = False
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() - t0 > timeout:
                proc.kill()
                timed_out = True
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.2)
        wall = time.perf_counter() - t0
        load_after = os.getloadavg()
        proc.returncode = os.waitstatus_to_exitcode(status)
        err_out.close()
        with open(err_path, encoding="utf-8", errors="replace") as f:
            err = f.read()
        if stderr_file:
            with open(stderr_file, "w", encoding="utf-8") as f:
                f.write(err)
        # a command wrapped in `timeout S` (e.g. under /usr/bin/time -v) exits 124 when stopped
        timed_out = timed_out or proc.returncode == 124
        passed, seconds = None, None
        if os.path.exists(report):
            with open(report, encoding="utf-8") as f:
                data = json.load(f)
            if report_file:
                write_json_atomic(report_file, data)
            reports = data.get("results", [])
            passed = bool(data.get("passed"))
            seconds = sum(r.get("seconds", 0) for r in reports)
    return {"construction": name, "params": params, "samples": samples,
            "argv": " ".join(shlex.quote(a) for a in ["depthcraft"] + argv[len(command):]),
            "exit": proc.returncode, "timed_out": timed_out, "wall_s": round(wall, 1),
            "peak_rss_mib": round(usage.ru_maxrss / 1024), "passed": passed,
            "report_seconds": None if seconds is None else round(seconds, 1),
            "load_1min_before": round(load_before, 2), "load_1min_after": round(load_after[0], 2),
            "load_5min_after": round(load_after[1], 2),
            "stderr_tail": err.strip().splitlines()[-1] if err.strip() else ""}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="+", type=int, default=list(range(len(CASES))), metavar="I",
                    help="indices into CASES (default: all): " +
                    "; ".join(f"{i} {c[0]} {c[1]}" for i, c in enumerate(CASES)))
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per case before it is stopped")
    ap.add_argument("--command", default=f"{shlex.quote(sys.executable)} -m depthcraft",
                    help="how to start depthcraft (default: this Python's -m depthcraft)")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--append", action="store_true",
                    help="add the cases to those already in --json (a case measured again replaces its row)")
    ap.add_argument("--stderr-dir", help="write each case's stderr to DIR/verify_<i>.stderr.txt")
    ap.add_argument("--reports-dir", help="keep each case's verify report as DIR/verify_<i>.report.json")
    args = ap.parse_args()
    bad = [i for i in args.cases if not 0 <= i < len(CASES)]
    if bad:
        ap.error(f"case index {bad[0]} is not in 0..{len(CASES) - 1}")

    rows: List[Dict[str, Any]] = []
    print(f"{'case':<36} {'wall s':>7} {'RSS MiB':>8} {'exit':>5} {'passed':>7}  target")
    for i in args.cases:
        name, params, samples, t_wall, t_rss = CASES[i]
        err_file = os.path.join(args.stderr_dir, f"verify_{i}.stderr.txt") if args.stderr_dir else None
        report_file = os.path.join(args.reports_dir, f"verify_{i}.report.json") if args.reports_dir else None
        row = run_case(shlex.split(args.command), name, params, samples, args.timeout, stderr_file=err_file,
                       report_file=report_file)
        row["target_wall_s"], row["target_rss_gib"] = t_wall, t_rss
        rows.append(row)
        label = f"{name} " + " ".join(f"{k}={v}" for k, v in params.items()) + f" s={samples}"
        target = " ".join(filter(None, [f"< {t_wall} s" if t_wall else "", f"< {t_rss} GiB" if t_rss else ""]))
        wall = f">{row['wall_s']:.0f}" if row["timed_out"] else f"{row['wall_s']:.1f}"
        print(f"{label:<36} {wall:>7} {row['peak_rss_mib']:>8} {row['exit']:>5} {str(row['passed']):>7}  {target}",
              flush=True)
    if args.json:
        if args.append and os.path.exists(args.json):
            with open(args.json, encoding="utf-8") as f:
                old = json.load(f)["cases"]
            key = (lambda c: (c["construction"], json.dumps(c["params"], sort_keys=True), c["samples"]))
            again = {key(c): c for c in rows}  # a case measured again replaces its old row, in place
            rows = [again.pop(key(c), c) for c in old] + list(again.values())
        write_json_atomic(args.json, {"benchmark": "verify_targets", "timeout_s": args.timeout,
                                      "machine": platform.machine(), "cpus": os.cpu_count(),
                                      "cpus_usable": len(os.sched_getaffinity(0)), "cases": rows})


if __name__ == "__main__":
    main()
