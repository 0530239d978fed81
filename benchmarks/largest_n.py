"""Build time and peak memory of the k-hop constructions as n grows: tracr's assembly vs live rows.

Each build runs in a fresh child process (so its peak RSS is its own) and is timed
there; the three build paths of ``compile_program`` give the same weights bit for
bit (``tests/test_build_paths.py``, ``tests/test_tracr_patches.py``):

* ``tracr``: tracr's ``assemble_craft_model`` as the project used it before
  (dense d_model x d_model assembly, tracr's own ``vectorspace_fns.project``);
* ``tracr+proj``: the same with the ``fast_project`` patch
  (:mod:`depthcraft.constructions.tracr_patches`);
* ``rows``: :func:`depthcraft.constructions.model.from_craft`, the default.

The tracr paths are skipped above ``--max-tracr-n`` where d_model grows with n
(their dense arrays take gigabytes there). Prints one row per (construction, n)
with the ratios tracr / rows, and writes the figures as JSON.

    python benchmarks/largest_n.py                                  # the default cases and sizes
    python benchmarks/largest_n.py --json results/performance/build.json
    python benchmarks/largest_n.py --n 100 256 --max-tracr-n 256
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import resource
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional

#: (construction, k) cases; vocab 4 (the catalogue default).
CASES = (("khop_doubling", 16), ("khop_doubling", 64), ("khop_constant_width", 16))
PATHS = ("tracr", "tracr+proj", "rows")
DEFAULT_N = (100, 256, 512, 1024)
#: d_model of these constructions does not grow with n: tracr's paths run at every n.
CONSTANT_WIDTH = ("khop_constant_width",)


def _rss_mb() -> float:
    """Peak resident set size of this process so far, MB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


#: Functions whose cumulative time a profiled build reports: label -> (file name ending, function name).
PROFILED = {
    "CRAFT blocks (_craft_program)": ("constructions/compiler.py", "_craft_program"),
    "tracr assemble_craft_model": ("tracr/compiler/assemble.py", "assemble_craft_model"),
    "tracr project (all calls)": ("tracr/craft/vectorspace_fns.py", "project"),
    "index project (all calls)": ("constructions/tracr_patches.py", "index_project"),
    "from_tracr": ("constructions/model.py", "from_tracr"),
    "from_craft": ("constructions/model.py", "from_craft"),
}


def child(name: str, k: int, n: int, path: str, profile: bool = False) -> Dict[str, Any]:
    """Build ``name`` at k, n along ``path`` in this process; time, peak RSS and d_model.

    With ``profile``, the build runs under cProfile (slower) and the cumulative
    seconds of the :data:`PROFILED` functions are reported instead of the peak RSS.
    """
    import cProfile
    import pstats

    from depthcraft.constructions import compiler, tracr_patches
    from depthcraft.verify import lookup

    r = lookup.resolve(name, {"k": k, "n": n, "vocab": 4})
    base = _rss_mb()
    off = ("fast_project",) if path == "tracr" else ()
    prof = cProfile.Profile() if profile else None
    with compiler.using_assembly("rows" if path == "rows" else "tracr"), tracr_patches.disabled(*off):
        t = time.perf_counter()
        if prof:
            prof.enable()
        model = r.construction.builder(r.params)
        if prof:
            prof.disable()
        seconds = time.perf_counter() - t
    out = {"seconds": seconds, "peak_rss_mb": _rss_mb(), "base_rss_mb": base, "d_model": len(model.residual_labels)}
    if prof:
        stats = pstats.Stats(prof).stats  # (file, line, function) -> (calls, prim calls, tottime, cumtime, callers)
        out["profile"] = {label: round(sum(v[3] for (f, _, fn), v in stats.items()
                                           if f.replace(os.sep, "/").endswith(suffix) and fn == func), 3)
                          for label, (suffix, func) in PROFILED.items()}
        del out["peak_rss_mb"]
    return out


def run_child(name: str, k: int, n: int, path: str, timeout: float, profile: bool = False) -> Dict[str, Any]:
    """:func:`child` in a fresh interpreter; ``{"error": ...}`` if it fails or runs past ``timeout``."""
    cmd = [sys.executable, __file__, "--child", name, str(k), str(n), path] + (["--profile"] if profile else [])
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"over {timeout:.0f} s"}
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["?"])[-1]
        return {"error": f"exit {out.returncode}: {last[:200]}"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def _fmt(r: Optional[Dict[str, Any]], key: str, digits: int) -> str:
    if r is None:
        return "-"
    if "error" in r:
        return "fail"
    return f"{r[key]:.{digits}f}"


def _ratio(a: Optional[Dict[str, Any]], b: Optional[Dict[str, Any]], key: str) -> Optional[float]:
    if not a or not b or "error" in a or "error" in b:
        return None
    return a[key] / b[key]


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=list(DEFAULT_N), help="max_seq_len values")
    ap.add_argument("--max-tracr-n", type=int, default=512,
                    help="largest n for the tracr paths where d_model grows with n (default 512)")
    ap.add_argument("--timeout", type=float, default=300, help="seconds per build before it is reported as failed")
    ap.add_argument("--json", type=pathlib.Path, help="write the figures here")
    ap.add_argument("--profile-case", default="khop_doubling:64:512", metavar="NAME:K:N",
                    help="also profile each path's build at this case (cProfile; 'none' to skip)")
    ap.add_argument("--child", nargs=4, metavar=("NAME", "K", "N", "PATH"), help=argparse.SUPPRESS)
    ap.add_argument("--profile", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        name, k, n, path = args.child
        print(json.dumps(child(name, int(k), int(n), path, args.profile)))
        return 0
    if any(n < 2 or n > 1024 for n in args.n):
        ap.error(f"--n values must be in 2..1024 (the catalogue's range), got {args.n}")

    load_before = os.getloadavg()
    rows: List[Dict[str, Any]] = []
    print(f"{'case':<14}{'n':>5}{'d_model':>8}  {'tracr':>11}  {'tracr+proj':>11}  {'rows':>11}  {'time':>5} {'RSS':>5}")
    print(f"{'':<27}  {'s':>5} {'MB':>5}  {'s':>5} {'MB':>5}  {'s':>5} {'MB':>5}  {'×':>5} {'×':>5}")
    for name, k in CASES:
        for n in args.n:
            got: Dict[str, Optional[Dict[str, Any]]] = {}
            for path in PATHS:
                if path != "rows" and name not in CONSTANT_WIDTH and n > args.max_tracr_n:
                    got[path] = None
                    continue
                got[path] = run_child(name, k, n, path, args.timeout)
                rows.append({"construction": name, "k": k, "n": n, "vocab": 4, "path": path, **got[path]})
            d = (got["rows"] or {}).get("d_model", "?")
            label = ("doubling" if name == "khop_doubling" else "const-w") + f" k={k}"
            t_ratio, m_ratio = _ratio(got["tracr"], got["rows"], "seconds"), _ratio(got["tracr"], got["rows"],
                                                                                       "peak_rss_mb")
            cells = "  ".join(f"{_fmt(got[p], 'seconds', 1):>5} {_fmt(got[p], 'peak_rss_mb', 0):>5}" for p in PATHS)
            print(f"{label:<14}{n:>5}{d:>8}  {cells}  "
                  f"{'-' if t_ratio is None else f'{t_ratio:.1f}':>5} {'-' if m_ratio is None else f'{m_ratio:.1f}':>5}",
                  flush=True)
    profiles = []
    if args.profile_case != "none":
        try:
            name, k, n = args.profile_case.split(":")
            k, n = int(k), int(n)
        except ValueError:
            ap.error(f"--profile-case must be NAME:K:N (e.g. khop_doubling:64:512), got {args.profile_case!r}")
        print(f"\nprofile (cProfile, cumulative seconds) of {name} k={k} n={n}:")
        for path in PATHS:
            r = run_child(name, k, n, path, args.timeout, profile=True)
            profiles.append({"construction": name, "k": k, "n": n, "vocab": 4, "path": path, **r})
        width = max(len(label) for label in PROFILED)
        print(f"{'':<{width}}" + "".join(f"{p:>11}" for p in PATHS))
        for label in ("build (under the profiler)", *PROFILED):
            cells = []
            for r in profiles:
                v = r.get("seconds") if label.startswith("build") else r.get("profile", {}).get(label)
                cells.append("fail" if "error" in r else f"{v:.1f}")
            print(f"{label:<{width}}" + "".join(f"{c:>11}" for c in cells))
    load_after = os.getloadavg()
    print("time ×, RSS ×: tracr / rows (same run). RSS is the child's peak, interpreter and JAX included.")
    print(f"load average (1 min) before / after: {load_before[0]:.1f} / {load_after[0]:.1f} on {os.cpu_count()} CPUs")
    if args.json:
        doc = {"benchmark": "build", "cases": [list(c) for c in CASES], "n": args.n,
               "max_tracr_n": args.max_tracr_n, "paths": list(PATHS),
               "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                           "load_1min_before": round(load_before[0], 2), "load_1min_after": round(load_after[0], 2)},
               "results": rows, "profile": profiles}
        from depthcraft.constructions.files import write_json_atomic

        args.json.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(str(args.json), doc)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
