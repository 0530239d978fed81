"""XLA compilations per test file on an empty cache: each file in its own ``pytest -n 0`` process.

Runs every given test file (default: all of ``tests/test_*.py``) in a fresh process with an empty
cache folder (``DEPTHCRAFT_CACHE_DIR`` set to a new temporary folder, removed afterwards) and the
``compile_by_test`` plugin, optionally pinned to one CPU (``--cpu``, Linux ``sched_setaffinity``),
and records per file: the compilations JAX's backend made and their seconds, the reads from the
persistent cache (within the file: every file starts cold), wall seconds, pytest's counts, and the
compilations of each test that made any. Compilation counts do not depend on the machine's load;
wall and backend seconds do.

Rows are written under ``--label`` (e.g. ``before`` / ``after``) in the ``--json`` file, with the
commit and the command::

    python benchmarks/compile_by_file.py --cpu 0 --label after --json results/performance/compile_by_file.json \\
        tests/test_crosscheck_fast.py tests/test_pitfalls.py
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence

from depthcraft.constructions import cache
from depthcraft.constructions.files import write_json_atomic

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from suite_cost import _commit, summary_counts  # noqa: E402


def run_file(path: str, cpu: Optional[int] = None, pytest_args: Sequence[str] = ()) -> Dict[str, Any]:
    """Run one test file cold in its own process; return its row (see the module docstring)."""
    logs = tempfile.mkdtemp(prefix="depthcraft-compile-log-")
    cold = tempfile.mkdtemp(prefix="depthcraft-cold-cache-")
    per_test = os.path.join(logs, "tests.tsv")
    env = {**os.environ, cache.ENV: cold, "COMPILE_LOG_DIR": logs, "COMPILE_LOG_TESTS": per_test,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "benchmarks"), os.environ.get("PYTHONPATH")]))}
    argv = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "compile_by_test", *pytest_args, path]
    pin = (lambda: os.sched_setaffinity(0, {cpu})) if cpu is not None else None
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, preexec_fn=pin)
    wall = time.perf_counter() - t0
    try:
        totals = json.loads(pathlib.Path(logs, "main.json").read_text())
    except OSError:
        totals = {}
    tests: Dict[str, int] = {}
    if os.path.exists(per_test):
        for line in pathlib.Path(per_test).read_text().splitlines():
            nodeid, n, *_ = line.split("\t")
            if int(n):
                tests[nodeid.split("::", 1)[1]] = int(n)
    shutil.rmtree(logs, ignore_errors=True)
    shutil.rmtree(cold, ignore_errors=True)
    return {"compilations": int(totals.get("compilations", 0)), "cache_hits": int(totals.get("cache_hits", 0)),
            "backend_compile_s": totals.get("backend_compile_s"), "wall_s": round(wall, 1), "exit": proc.returncode,
            "counts": summary_counts(proc.stdout), "tests": tests}


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", help="test files (default: every tests/test_*.py)")
    ap.add_argument("--cpu", type=int, help="pin each run to this CPU")
    ap.add_argument("--label", default="after", help="key of this run in the JSON file (before, after, ...)")
    ap.add_argument("--json", help="write (or update) this results file")
    a = ap.parse_args(argv)
    files: List[str] = a.files or sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_*.py"))
    path = pathlib.Path(a.json) if a.json else None
    data = json.loads(path.read_text()) if path and path.exists() else {}
    run = data.setdefault(a.label, {"files": {}})
    run.update(commit=_commit(), command="python benchmarks/compile_by_file.py " + " ".join(
        (argv if argv is not None else sys.argv[1:])), cpus_usable=[a.cpu] if a.cpu is not None else
        sorted(os.sched_getaffinity(0)))
    print(f"{'file':<40}{'compilations':>13}{'backend':>9}{'wall':>8}  result")
    for f in files:
        row = run_file(f, a.cpu)
        run["files"][f] = row
        print(f"{f:<40}{row['compilations']:>13}{row['backend_compile_s'] or 0:>8.1f}s{row['wall_s']:>7.1f}s  "
              f"{row['counts']}", flush=True)
        if path:
            write_json_atomic(str(path), data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
