"""The largest size each construction verifies within 5 minutes (issue 12, Deliver 5).

For each construction with a size parameter, a doubling search over that size: every probe is one
fresh process ``/usr/bin/time -v timeout 300 depthcraft verify NAME -p SIZE=S -p <fixed> --json F``
with the default checks (default samples, edge, hypothesis, ablation: what a user gets). A probe
verifies within 5 minutes when it exits 0 (report passed) within ``--timeout`` seconds of wall time,
build included. A construction's search stops at the first probe that times out, fails or errors,
or after its last listed size. Each probe records its wall time (time -v's elapsed), peak resident
memory (time -v's ``Maximum resident set size``), exit status, verdict, the one-line error of a
failed process and the 1-minute load average before and after. Each probe gets an empty compilation
cache (``DEPTHCRAFT_CACHE_DIR`` a fresh temporary folder): a user's first run at that size, compiling
everything. Every probe is written to ``--json``
as soon as it finishes; probes already there are skipped (the search resumes).

    python benchmarks/verify_sizes.py --json results/performance/verify_sizes.json --only khop_doubling
    python benchmarks/verify_sizes.py --json results/performance/verify_sizes.json --budget 1180
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

from depthcraft.constructions.files import write_json_atomic
from depthcraft.verify.report import checked_inputs

# time -v's field parser is exhaustive_stream's (this script runs from benchmarks/)
from exhaustive_stream import _seconds, _time_field  # noqa: E402

#: Issue 12: "verifies within 5 minutes".
LIMIT_S = 300

#: (construction, fixed parameters, size parameter, sizes in search order), in priority order. Each
#: list of sizes ends at the parameter's largest allowed value (``depthcraft list NAME``) or the last
#: doubling below it; the other parameters are the defaults, except where the defaults admit no
#: large size (icqa: m questions and answers; ictm and tm: m or K distinct templates of length n).
SEARCHES: Tuple[Tuple[str, Dict[str, Any], str, Tuple[int, ...]], ...] = (
    ("khop_doubling", {"k": 16, "vocab": 4}, "n", (64, 128, 256, 512, 1024)),
    ("khop_constant_width", {"k": 16}, "n", (256, 512, 1024, 2048, 4096)),
    ("khop_floor", {"k": 16}, "n", (64, 128, 256, 512, 1024)),
    ("retrieval_tripling", {}, "d", (5, 10, 20, 40, 64)),
    ("retrieval_doubling", {}, "d", (4, 8, 16, 32, 64)),
    ("graph_connectivity", {}, "n", (9, 17, 33, 64)),
    ("khop_rasp", {"k": 2, "vocab": 3}, "n", (8, 16, 32, 64, 128)),
    ("icqa_copy_match", {"questions": 512, "answers": 512}, "m", (8, 16, 32, 64, 128, 256, 512)),
    ("ictm_parse_copy_match", {"n": 8}, "m", (4, 8, 16, 32, 64, 128, 256)),
    ("tm_parse_map", {"n": 10}, "templates", (12, 24, 48, 96, 192, 384, 768, 1536, 3072, 6144, 12288)),
    ("sc_memorize", {}, "sequences", tuple(64 * 2 ** i for i in range(11))),
)


def probe(command: Sequence[str], name: str, fixed: Dict[str, Any], size_param: str, size: int,
          limit_s: float) -> Dict[str, Any]:
    """Run one ``depthcraft verify`` at one size under ``/usr/bin/time -v timeout LIMIT``.

    Args:
        command: how to start depthcraft (e.g. ``[sys.executable, "-m", "depthcraft"]``).
        name, fixed: the construction and its fixed ``-p`` parameters.
        size_param, size: the searched parameter and its value.
        limit_s: seconds before ``timeout`` stops the process (exit 124).
    Returns:
        {"size", "argv", "exit", "outcome" ("verified" | "timeout" | "fail" | "error"), "wall_s" (time -v),
         "own_wall_s" (this process's clock), "peak_rss_mib", "passed", "message", "load_1min_before",
         "load_1min_after"}, and from the report when there is one: "d_model", "attn_layers", "inputs"
        (checked per check kind), "report_seconds".
    Raises:
        RuntimeError: /usr/bin/time is missing or printed no figures.
    """
    if not os.path.exists("/usr/bin/time"):
        raise RuntimeError("/usr/bin/time (GNU time) is needed for the peak RSS")
    params = [a for k, v in {**fixed, size_param: size}.items() for a in ("-p", f"{k}={v}")]
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "report.json")
        argv = ["verify", name, *params, "--json", report]
        env = {**os.environ, "DEPTHCRAFT_CACHE_DIR": os.path.join(tmp, "cache")}  # cold: compiles everything
        load_before = os.getloadavg()[0]
        t0 = time.perf_counter()
        with open(os.path.join(tmp, "stderr.txt"), "w+", encoding="utf-8", errors="replace") as err_f:
            # its own process group, stopped with this process (e.g. a chunk's `timeout` stopping the search);
            # --foreground keeps `timeout` and verify in that group (plain `timeout` makes a group of its own)
            proc = subprocess.Popen(["/usr/bin/time", "-v", "timeout", "--foreground", str(int(limit_s)),
                                     *command, *argv],
                                    stdout=subprocess.DEVNULL, stderr=err_f, env=env, start_new_session=True)
            try:
                proc.wait()
            finally:
                if proc.poll() is None:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
            err_f.seek(0)
            err = err_f.read()
        own_wall = time.perf_counter() - t0
        load_after = os.getloadavg()[0]
        passed, facts = None, {}
        if os.path.exists(report):
            with open(report, encoding="utf-8") as f:
                doc = json.load(f)
            passed = bool(doc.get("passed"))
            r = doc["results"][0]
            facts = {"d_model": r["structure"]["d_model"], "attn_layers": r["structure"]["attn_layers"],
                     "inputs": checked_inputs(r), "report_seconds": r.get("seconds"),
                     "not_passed": [k for k, ok in (("bound", r.get("bound_ok")), ("exact", r.get("exact")),
                                                    ("ablation", r.get("ablation_ok"))) if ok is False]}
    # time -v's own lines start at "Command exited ..." or "\tCommand being timed"; before them: depthcraft's
    cut = re.search(r"^(Command exited with non-zero status|\tCommand being timed)", err, re.M)
    own = (err[:cut.start()] if cut else err).strip().splitlines()
    wall = _seconds(_time_field(err, "Elapsed (wall clock) time (h:mm:ss or m:ss)"))
    code = int(_time_field(err, "Exit status"))
    if code == 124 or wall >= limit_s:
        outcome = "timeout"
    elif code == 0 and passed:
        outcome = "verified"
    elif passed is False:
        outcome = "fail"
    else:
        outcome = "error"
    message = ""
    if outcome == "fail" and facts.get("not_passed"):
        message = "report not passed: " + ", ".join(f"{k} not ok" for k in facts["not_passed"])
    elif outcome in ("fail", "error"):
        message = next((line.strip() for line in reversed(own) if line.strip()), f"exit status {code}")
    return {"size": size, "argv": " ".join(shlex.quote(a) for a in ["depthcraft", *argv[:-2]]),
            "exit": code, "outcome": outcome, "wall_s": round(wall, 1), "own_wall_s": round(own_wall, 1),
            "peak_rss_mib": round(int(_time_field(err, "Maximum resident set size (kbytes)")) / 1024),
            "passed": passed, "message": message[:200], **facts,
            "load_1min_before": round(load_before, 2), "load_1min_after": round(load_after, 2)}


def machine() -> Dict[str, Any]:
    """The machine the probes ran on: CPU counts, the cores this process may use, the load now."""
    return {"machine": platform.machine(), "cpus": os.cpu_count(),
            "cpus_usable": sorted(os.sched_getaffinity(0)), "load_1min_at_start": round(os.getloadavg()[0], 2)}


def summarise(probes: List[Dict[str, Any]]) -> Dict[str, Any]:
    """A search's outcome from its probes (in search order).

    Returns:
        {"largest_verified": size or None, "first_not_verified": size or None,
         "reason": outcome of that probe or None, "message": its one-line message}.
    """
    largest, first = None, None
    for p in probes:
        if p["outcome"] == "verified":
            largest = p["size"] if largest is None else max(largest, p["size"])
        elif first is None:
            first = p
    return {"largest_verified": largest, "first_not_verified": first["size"] if first else None,
            "reason": first["outcome"] if first else None, "message": first["message"] if first else ""}


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", required=True, help="results file (read to resume, rewritten after each probe)")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="search only these constructions")
    ap.add_argument("--timeout", type=float, default=LIMIT_S, help="seconds per probe (default 300)")
    ap.add_argument("--budget", type=float, metavar="S",
                    help="start no probe that could end more than S seconds after this run began "
                         "(exit status 3 when a probe was left for a later run)")
    ap.add_argument("--command", default=f"{shlex.quote(sys.executable)} -m depthcraft",
                    help="how to start depthcraft (default: this Python's -m depthcraft)")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind, so the running probe is stopped too
    known = [s[0] for s in SEARCHES]
    bad = [n for n in args.only or [] if n not in known]
    if bad:
        ap.error(f"{bad[0]} has no search; known: {', '.join(known)}")
    data: Dict[str, Any] = {"benchmark": "verify_sizes", "timeout_s": args.timeout, "compilation_cache": "cold",
                            "runs": [], "searches": {}}
    if os.path.exists(args.json):
        with open(args.json, encoding="utf-8") as f:
            data = json.load(f)
    t0 = time.perf_counter()
    data["runs"].append(machine())
    data["planned"] = [s[0] for s in SEARCHES]
    for name, fixed, size_param, sizes in SEARCHES:
        if args.only and name not in args.only:
            continue
        s = data["searches"].get(name)
        if s is not None and (s["fixed"] != fixed or s["size_param"] != size_param):
            # the search changed: its old probes are kept, apart, and it starts again
            data.setdefault("superseded", []).append({"construction": name, **s})
            s = None
        if s is None:
            s = data["searches"][name] = {"fixed": fixed, "size_param": size_param, "sizes": list(sizes),
                                          "probes": []}
        for size in sizes:
            if any(p["outcome"] != "verified" for p in s["probes"]):
                break
            if any(p["size"] == size for p in s["probes"]):
                continue
            if args.budget is not None and time.perf_counter() - t0 + args.timeout > args.budget:
                print(f"budget: {name} {size_param}={size} left for a later run", flush=True)
                return 3
            row = probe(shlex.split(args.command), name, fixed, size_param, size, args.timeout)
            row["run"] = len(data["runs"]) - 1
            s["probes"].append(row)
            s.update(summarise(s["probes"]))
            write_json_atomic(args.json, data)
            print(f"{name} {size_param}={size}: {row['outcome']} {row['wall_s']} s, {row['peak_rss_mib']} MiB, "
                  f"load {row['load_1min_before']:.1f}->{row['load_1min_after']:.1f}"
                  + (f"\n  {row['message'][:76]}" if row["message"] else ""), flush=True)
        s.update(summarise(s["probes"]))
        write_json_atomic(args.json, data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
