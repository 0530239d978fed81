"""Wall time and peak memory of the default test suite (issue 12: < 5 minutes, peak RSS < 3 GB).

Runs ``pytest -q`` (the README's test command; the default suite, ``slow`` excluded) in a child
process with the extra arguments of each mode, samples the resident memory of the whole process
tree (pytest and its xdist workers) every 0.3 s, and records per mode: wall seconds, the peak of
the tree's summed RSS and the peak of its largest process, the pass/fail counts from pytest's
summary line, the CPUs usable and the 1-minute load average before and after (a shared machine).
Modes:

* ``workers-cold``: ``workers`` with an empty cache folder (``DEPTHCRAFT_CACHE_DIR`` set to a new
  temporary folder, removed afterwards), as on a fresh machine such as CI's: every XLA compilation
  is made, none is read back from JAX's persistent compilation cache;
* ``workers-warm``: ``workers`` with the cache folder ``workers-cold`` filled in the same call
  (``--modes workers-cold workers-warm``; the folder is removed afterwards): the second run on that
  fresh machine, at the same commit, whatever the user's own cache folder holds;
* ``workers``: the default, ``pytest -q`` as configured in pyproject.toml (xdist workers), with
  the user's cache folder as it is (the row records how many compilations it held before);
* ``one-process``: ``pytest -q -n 0``, every test in one process;
* ``one-process-keep-caches``: as ``one-process`` with ``DEPTHCRAFT_TEST_KEEP_CACHES=1``, so the
  suite does not call :func:`depthcraft.release_memory` after each module (the suite before it).

Every mode loads ``benchmarks/compile_by_test.py``, so each row also records the XLA compilations
made in the test processes and their seconds (trace, lowering, backend compile) and the reads from
the persistent compilation cache. A row that replaces one of the same mode in the ``--json`` file
keeps that row's commit, wall time and compilations as ``before``, and both are printed.

Targets are printed next to each row, not asserted::

    python benchmarks/suite_cost.py --modes workers-cold workers-warm --json results/performance/test_suite.json
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence

from depthcraft.constructions import cache
from depthcraft.constructions.files import write_json_atomic

ROOT = pathlib.Path(__file__).resolve().parents[1]
#: mode -> (extra pytest arguments, extra environment, cache folder: True = a new empty one, kept for a
#: later "kept" mode of the same call; "kept" = the one the last empty-cache mode left; False = the user's).
MODES: Dict[str, tuple] = {
    "workers-cold": ([], {}, True),
    "workers-warm": ([], {}, "kept"),
    "workers": ([], {}, False),
    "one-process": (["-n", "0"], {}, False),
    "one-process-keep-caches": (["-n", "0"], {"DEPTHCRAFT_TEST_KEEP_CACHES": "1"}, False),
}
TARGET_S, TARGET_GIB = 300.0, 3.0


def _children() -> Dict[int, List[int]]:
    kids: Dict[int, List[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(entry))
    return kids


def rss_mib(pid: int) -> float:
    """Resident memory of process ``pid`` in MiB (``/proc/PID/statm``; 0 when it has exited)."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20
    except (OSError, ValueError, IndexError):
        return 0.0


def tree_rss(root: int) -> List[float]:
    """RSS in MiB of ``root`` and each of its descendants (Linux ``/proc``)."""
    kids, out, stack = _children(), [], [root]
    while stack:
        pid = stack.pop()
        out.append(rss_mib(pid))
        stack.extend(kids.get(pid, []))
    return out


def summary_counts(text: str) -> Dict[str, int]:
    """``{"passed": 771, "skipped": 4, ...}`` from pytest's last summary line."""
    lines = [ln for ln in text.splitlines() if re.search(r"\d+ (passed|failed|error)", ln)]
    return {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|deselected|errors?)", lines[-1])} \
        if lines else {}


def run_mode(mode: str, pytest_args: Sequence[str] = (), sample_s: float = 0.3,
             warm_cache: Optional[str] = None, keep_cache: bool = False) -> Dict[str, Any]:
    """Run the default suite once in ``mode`` (:data:`MODES`) and measure it.

    Args:
        mode: a key of :data:`MODES`.
        pytest_args: extra pytest arguments.
        sample_s: seconds between memory samples.
        warm_cache: the cache folder of a ``"kept"`` mode (one an empty-cache mode kept).
        keep_cache: an empty-cache mode keeps its folder and returns it as ``row["kept_cache"]``
            (the caller removes it) instead of removing it.
    Returns:
        {"mode", "argv", "env", "wall_s", "peak_tree_rss_mib", "peak_process_rss_mib", "exit",
         "counts", "cache" ("cold", "warm" or "as found"), "cache_entries_before" (files in the JAX cache
         folder), "compile" (summed compile_by_test totals), "load_1min_before", "load_1min_after", "cpus",
         "cpus_usable"}, and "kept_cache" (a folder to remove) where the folder was kept.
    Raises:
        KeyError: ``mode`` is not in :data:`MODES`.
        ValueError: a "kept" mode without ``warm_cache``.
    """
    extra, env_extra, cache_kind = MODES[mode]
    empty_cache = cache_kind is True
    if cache_kind == "kept" and not warm_cache:
        raise ValueError(f"mode {mode} runs with the cache folder an empty-cache mode filled: "
                         f"run workers-cold before it in the same call")
    argv = [sys.executable, "-m", "pytest", "-q", *extra, "-p", "compile_by_test", *pytest_args]
    logs = tempfile.mkdtemp(prefix="depthcraft-compile-log-")
    env = {**os.environ, **env_extra, "COMPILE_LOG_DIR": logs,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "benchmarks"), os.environ.get("PYTHONPATH")]))}
    cold = tempfile.mkdtemp(prefix="depthcraft-cold-cache-") if empty_cache else None
    folder = cold or (warm_cache if cache_kind == "kept" else None)
    if folder:
        env[cache.ENV] = folder
    base = pathlib.Path(folder) if folder else cache.cache_dir()
    jax_dir = base / "jax" if base else None
    entries_before = sum(1 for _ in jax_dir.iterdir()) if jax_dir and jax_dir.is_dir() else 0
    load_before = os.getloadavg()[0]
    t0 = time.perf_counter()
    log = ROOT / f".test_suite_{mode}.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        peak_tree = peak_one = 0.0
        while proc.poll() is None:
            rss = tree_rss(proc.pid)
            peak_tree, peak_one = max(peak_tree, sum(rss)), max(peak_one, max(rss, default=0.0))
            time.sleep(sample_s)
    wall = time.perf_counter() - t0
    text = log.read_text()
    log.unlink()
    compiles = collections.Counter()
    for part in pathlib.Path(logs).glob("*.json"):
        compiles.update(json.loads(part.read_text()))
    shutil.rmtree(logs, ignore_errors=True)
    keep = bool(cold and keep_cache)
    if cold and not keep:
        shutil.rmtree(cold, ignore_errors=True)
    row = {"mode": mode, "argv": ["pytest", "-q", *extra, *pytest_args], "env": env_extra,
           "cache": "cold" if cold else "warm" if cache_kind == "kept" else "as found",
           "cache_entries_before": entries_before,
           "compile": {k: round(v, 1) for k, v in sorted(compiles.items())},
           "wall_s": round(wall, 1), "peak_tree_rss_mib": round(peak_tree), "peak_process_rss_mib": round(peak_one),
           "exit": proc.returncode, "counts": summary_counts(text),
           "load_1min_before": round(load_before, 2), "load_1min_after": round(os.getloadavg()[0], 2),
           "cpus": os.cpu_count(), "cpus_usable": sorted(os.sched_getaffinity(0))}
    if keep:
        row["kept_cache"] = cold
    return row


def _commit() -> Optional[str]:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def _compiled(row: Optional[Dict[str, Any]]) -> str:
    """"N compiled + M cache reads" of a row's compile totals ("—" when not recorded)."""
    comp = (row or {}).get("compile")
    if not comp:
        return "—"
    return f"{int(comp['compilations'] - comp['cache_hits']):,} + {int(comp['cache_hits']):,} read"


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--modes", nargs="+", choices=list(MODES), default=["workers", "one-process"])
    ap.add_argument("--json", help="write (or update, one row per mode) this results file")
    ap.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    a = ap.parse_args(argv)
    kept_needed = any(MODES[m][2] == "kept" for m in a.modes)
    for i, mode in enumerate(a.modes):
        if MODES[mode][2] == "kept" and not any(MODES[m][2] is True for m in a.modes[:i]):
            ap.error(f"--modes: {mode} needs workers-cold before it (it runs with the cache folder that one filled)")
    path = pathlib.Path(a.json) if a.json else None
    data = json.loads(path.read_text()) if path and path.exists() else {"rows": []}
    data.update(target_s=TARGET_S, target_gib=TARGET_GIB)
    print(f"{'mode':<25}{'wall':>8}{'tree RSS':>11}{'largest':>11}  {'failed':>6}  target   XLA compilations (before)")
    kept: Optional[str] = None
    try:
        for mode in a.modes:
            row = run_mode(mode, a.pytest_args, warm_cache=kept if MODES[mode][2] == "kept" else None,
                           keep_cache=kept_needed and MODES[mode][2] is True)
            if "kept_cache" in row:
                if kept:
                    shutil.rmtree(kept, ignore_errors=True)
                kept = row.pop("kept_cache")
            row["commit"] = _commit()
            old = next((r for r in data["rows"] if r["mode"] == mode), None)
            if old is not None:
                row["before"] = {k: old.get(k) for k in ("commit", "wall_s", "compile")}
            ok = row["wall_s"] < TARGET_S and row["peak_tree_rss_mib"] < TARGET_GIB * 1024
            bad = row["counts"].get("failed", 0) + row["counts"].get("errors", 0) + row["counts"].get("error", 0)
            was = f" ({_compiled(old)} at {old.get('commit')}, {old['wall_s']:.1f} s)" if old else ""
            print(f"{mode:<25}{row['wall_s']:>7.1f}s{row['peak_tree_rss_mib']:>7,} MiB"
                  f"{row['peak_process_rss_mib']:>7,} MiB  {bad:>6}  {'met' if ok else 'not met':<8} {_compiled(row)}{was}")
            data["rows"] = [r for r in data["rows"] if r["mode"] != mode] + [row]
    finally:
        if kept:
            shutil.rmtree(kept, ignore_errors=True)
    if path:  # after every mode: the suite checks that docs match results/, so the file must not change mid-run
        write_json_atomic(str(path), data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
