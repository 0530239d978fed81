"""Redraw every cross-check sweep's figures from its committed ``results.json`` (no training).

For each ``results.json`` under ``--root`` (default results/crosscheck; ``checkpoints`` folders
skipped) writes ``error_by_depth.png`` and ``loss_curves.png`` beside it with
:func:`verify.crosscheck.report.write_figures`, the one convention of every task's figures.

Usage: python scripts/crosscheck_figures.py [--root results/crosscheck]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

from depthcraft.verify.crosscheck import report


def sweep_results(root: pathlib.Path):
    """Every sweep's ``results.json`` under ``root``, sorted (checkpoint folders skipped)."""
    return sorted(p for p in root.rglob("results.json") if "checkpoints" not in p.parts)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default="results/crosscheck", help="folder searched for results.json")
    a = ap.parse_args(argv)
    root = pathlib.Path(a.root)
    if not root.is_dir():
        print(f"error: --root {root} is not a directory", file=sys.stderr)
        return 2
    paths = sweep_results(root)
    for p in paths:
        results = json.loads(p.read_text(encoding="utf-8"))
        if "summary" not in results:
            print(f"skipped {p}: no summary (not a sweep's results)")
            continue
        for f in report.write_figures(str(p.parent), results):
            print(f"wrote {f}")
    print(f"{len(paths)} results file(s) under {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
