"""Time the README's two commands as a new user runs them: a fresh clone, a fresh venv, an empty cache.

    python benchmarks/readme_commands.py --out results/performance/readme_commands.json

Clones the current checkout's HEAD (``git clone``, so only committed files) into a temporary
folder, and for each command (:data:`COMMANDS`: the main job and the test suite) times the
install (``python3 -m venv .venv && pip install -e ...``) and then the command itself, with
``DEPTHCRAFT_CACHE_DIR`` set to an empty folder (no JAX compilation or hypothesis cache from
earlier runs). Records wall seconds, exit status, the command's last line (its summary), the
machine's CPUs and 1-minute load average before and after, the commit and the date. The README's
time figures are generated from this file by ``depthcraft docs`` (tools/docgen.py,
``render_readme_commands``). ``--only main`` / ``--only tests`` re-measures one command and keeps
the other's entry.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

#: name -> (install, run): the README's two commands, split where the install ends.
COMMANDS = {
    "main": ("python3 -m venv .venv && . .venv/bin/activate && pip install -q -e .",
             ". .venv/bin/activate && depthcraft verify --all --certify"),
    "tests": ("python3 -m venv .venv && . .venv/bin/activate && pip install -q -e '.[test]'",
              ". .venv/bin/activate && pytest -q"),
}


def _timed(cmd: str, cwd: str, env: dict) -> dict:
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    p = subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    lines = [ln for ln in (p.stdout + p.stderr).splitlines() if ln.strip()]
    return {"command": cmd, "wall_s": round(wall, 1), "exit": p.returncode, "last_line": lines[-1] if lines else "",
            "failed": [ln for ln in lines if ln.startswith(("FAILED", "ERROR"))],
            "load_1min_before": round(load, 2), "load_1min_after": round(os.getloadavg()[0], 2)}


def measure(name: str) -> dict:
    """Clone, install and run the README command ``name`` (:data:`COMMANDS`); the record for the results file."""
    install, run = COMMANDS[name]
    with tempfile.TemporaryDirectory(prefix="depthcraft-readme-") as tmp:
        clone = os.path.join(tmp, "depthcraft")
        subprocess.run(["git", "clone", "-q", ROOT, clone], check=True)
        cache = os.path.join(tmp, "cache")
        os.makedirs(cache)
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "COLUMNS")}
        env["DEPTHCRAFT_CACHE_DIR"] = cache
        env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if ".venv" not in p)
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=clone, capture_output=True,
                                text=True).stdout.strip()
        record = {"name": name, "commit": commit, "install": _timed(install, clone, env), "run": _timed(run, clone, env),
                  "cpus": os.cpu_count(), "date": datetime.date.today().isoformat(),
                  "readme_command": f"{install.replace(' -q', '')} && {run.split(' && ', 1)[1]}"}
        return record


def main(argv=None) -> int:
    from depthcraft.constructions.files import write_json_atomic

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="results/performance/readme_commands.json")
    ap.add_argument("--only", choices=sorted(COMMANDS), action="append")
    args = ap.parse_args(argv)
    out = os.path.join(ROOT, args.out) if not os.path.isabs(args.out) else args.out
    try:
        with open(out, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        data = {"commands": {}}
    for name in args.only or list(COMMANDS):
        print(f"measuring {name} ...", file=sys.stderr, flush=True)
        data["commands"][name] = rec = measure(name)
        print(f"  install {rec['install']['wall_s']} s, run {rec['run']['wall_s']} s (exit {rec['run']['exit']}): "
              f"{rec['run']['last_line']}", file=sys.stderr, flush=True)
        write_json_atomic(out, data)
    return 0 if all(c["run"]["exit"] == 0 for c in data["commands"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
