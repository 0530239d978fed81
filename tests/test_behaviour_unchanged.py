"""`depthcraft verify --all` gives the same reports as release 0.1.0 (timings aside).

``tests/data/verify_all_v0.1.0.json`` is the JSON report of ``depthcraft verify --all`` run at
commit c64365a (release 0.1.0, before the package became ``depthcraft.*``), with every
``seconds`` field removed. Restructuring, speed-ups and new views must not change a single
measured structure, bound, check count, verdict, counterexample or margin; floating-point
margins may move in the last bits (a different but exact evaluation order), so they are
compared to 1e-6. A new construction adds rows; it does not change the old ones.
"""

from __future__ import annotations

import json
import math
import pathlib

import pytest

FIXTURE = pathlib.Path(__file__).parent / "data" / "verify_all_v0.1.0.json"
TIMING_KEYS = {"seconds"}


def strip(o):
    """The report without its timing fields."""
    if isinstance(o, dict):
        return {k: strip(v) for k, v in o.items() if k not in TIMING_KEYS}
    if isinstance(o, list):
        return [strip(v) for v in o]
    return o


def differences(old, new, path="", out=None):
    """Paths where ``new`` differs from ``old`` (floats to 1e-6; keys added in ``new`` are allowed)."""
    out = [] if out is None else out
    if isinstance(old, dict) and isinstance(new, dict):
        for k in old:
            if k not in new:
                out.append(f"{path}.{k}: missing")
            else:
                differences(old[k], new[k], f"{path}.{k}", out)
    elif isinstance(old, list) and isinstance(new, list):
        if len(old) != len(new):
            out.append(f"{path}: length {len(old)} -> {len(new)}")
        for i, (a, b) in enumerate(zip(old, new)):
            differences(a, b, f"{path}[{i}]", out)
    elif isinstance(old, float) and isinstance(new, (int, float)) and not isinstance(new, bool):
        if not math.isclose(old, new, rel_tol=1e-6, abs_tol=1e-6):
            out.append(f"{path}: {old} -> {new}")
    elif old != new:
        out.append(f"{path}: {old!r} -> {new!r}")
    return out


def test_differences_sees_a_change():
    """The comparison itself can fail: a changed layer count, a dropped key, a moved margin."""
    old = {"a": {"attn_layers": 3, "margin": 0.5}, "rows": [1, 2]}
    assert differences(old, {"a": {"attn_layers": 4, "margin": 0.5}, "rows": [1, 2]}) == [".a.attn_layers: 3 -> 4"]
    assert differences(old, {"a": {"margin": 0.5}, "rows": [1, 2]}) == [".a.attn_layers: missing"]
    assert differences(old, {"a": {"attn_layers": 3, "margin": 0.5001}, "rows": [1, 2]}) == [".a.margin: 0.5 -> 0.5001"]
    assert differences(old, {"a": {"attn_layers": 3, "margin": 0.5, "new": 1}, "rows": [1, 2]}) == []


@pytest.mark.slow
def test_verify_all_reports_are_unchanged():
    from depthcraft.verify.verifier import verify_all

    old = json.loads(FIXTURE.read_text())["results"]
    new = {(r["construction"], json.dumps(r["params"], sort_keys=True)): strip(json.loads(json.dumps(r)))
           for r in verify_all(samples=500, hypothesis_examples=100)}
    problems = []
    for r in old:
        key = (r["construction"], json.dumps(r["params"], sort_keys=True))
        if key not in new:
            problems.append(f"{key}: no longer verified by --all")
            continue
        problems += [f"{key}{d}" for d in differences(r, new[key])]
    assert problems == []
