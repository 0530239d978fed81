"""`depthcraft verify --all` gives the same reports as release 0.1.0 (timings aside).

``tests/data/verify_all_v0.1.0.json`` is the JSON report of ``depthcraft verify --all`` run at
commit c64365a (release 0.1.0, before the package became ``depthcraft.*``), with every
``seconds`` field removed. Restructuring, speed-ups and new views must not change a single
measured structure, bound, check count, verdict, counterexample or margin; floating-point
margins may move in the last bits (a different but exact evaluation order), so they are
compared to 1e-6. A new construction adds rows; it does not change the old ones.

One change is expected since 0.1.0: the compile-time dedupe (identical SOps stored once,
``constructions/dedupe.py``) narrows some models. For those rows ``d_model`` must have gone
down by exactly the saving that ``results/dedupe/dedupe.json`` reports (``depthcraft dedupe
--all``), and the fields that follow from the width (``n_params``, ``d_head``) may only go down;
every other field, the depth and heads included, is unchanged.

A second one since issue 30: constructions that ``verify --all`` now proves by the exhaustive check
(``exhaustive_in_all``, e.g. ``khop_rasp``, whose 3^8 inputs 0.1.0 never enumerated) gain
``checks.exhaustive``. It must be exact, with no failure; every other field stays as it was.
"""

from __future__ import annotations

import json
import math
import pathlib

import pytest

FIXTURE = pathlib.Path(__file__).parent / "data" / "verify_all_v0.1.0.json"
DEDUPE = pathlib.Path(__file__).parent.parent / "results" / "dedupe" / "dedupe.json"
TIMING_KEYS = {"seconds"}
#: Structure fields that follow from the residual width: the dedupe may lower them, never raise them.
NARROWER = {".structure.d_head", ".structure.n_params.total", ".structure.n_params.nonzero"}


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


def width_changes(old, new, saved):
    """Problems with a row's width after the dedupe: ``d_model`` must be ``old - saved``, the
    :data:`NARROWER` fields at most their old values; returns (problems, the row pair with those
    fields set to the old values, for :func:`differences`)."""
    problems = []
    if new["structure"]["d_model"] != old["structure"]["d_model"] - saved:
        problems.append(f".structure.d_model: {old['structure']['d_model']} -> {new['structure']['d_model']}, "
                        f"expected a saving of {saved}")
    new = json.loads(json.dumps(new))
    new["structure"]["d_model"] = old["structure"]["d_model"]
    # A d_model bound (an upper bound): the measured value drops by the saving, the gap grows by it.
    old_b, new_b = (old.get("bound_checks") or {}).get("d_model"), (new.get("bound_checks") or {}).get("d_model")
    if old_b and new_b:
        if old_b["kind"] != "upper" or new_b["measured"] != old_b["measured"] - saved \
                or new_b["gap"] != old_b["gap"] + saved:
            problems.append(f".bound_checks.d_model: {old_b} -> {new_b}, expected a saving of {saved}")
        new_b["measured"], new_b["gap"] = old_b["measured"], old_b["gap"]
    for path in sorted(NARROWER):
        *parents, leaf = path.strip(".").split(".")
        a, b = old, new
        for k in parents:
            a, b = a[k], b[k]
        if leaf in a and leaf in b:
            if b[leaf] > a[leaf]:
                problems.append(f"{path}: {a[leaf]} -> {b[leaf]} (may only go down)")
            b[leaf] = a[leaf]
    return problems, new


def test_width_changes_sees_a_wrong_saving():
    old = {"structure": {"d_model": 535, "d_head": 105, "n_params": {"total": 10, "nonzero": 5}, "heads": 1}}
    ok = {"structure": {"d_model": 434, "d_head": 80, "n_params": {"total": 9, "nonzero": 4}, "heads": 1}}
    assert width_changes(old, ok, 101) == ([], old)
    assert width_changes(old, ok, 100)[0] == [".structure.d_model: 535 -> 434, expected a saving of 100"]
    wider = json.loads(json.dumps(ok))
    wider["structure"]["d_head"] = 106
    assert width_changes(old, wider, 101)[0] == [".structure.d_head: 105 -> 106 (may only go down)"]
    bounded = {**old, "bound_checks": {"d_model": {"measured": 535, "bound": 600, "kind": "upper", "gap": 65,
                                                  "ok": True}}}
    narrowed = {**ok, "bound_checks": {"d_model": {"measured": 434, "bound": 600, "kind": "upper", "gap": 166,
                                                    "ok": True}}}
    assert width_changes(bounded, narrowed, 101) == ([], bounded)
    assert width_changes(bounded, narrowed, 100)[0][1].startswith(".bound_checks.d_model: ")
    fewer_heads = json.loads(json.dumps(ok))
    fewer_heads["structure"]["heads"] = 0
    assert differences(old, width_changes(old, fewer_heads, 101)[1]) == [".structure.heads: 1 -> 0"]


def test_differences_sees_a_change():
    """The comparison itself can fail: a changed layer count, a dropped key, a moved margin."""
    old = {"a": {"attn_layers": 3, "margin": 0.5}, "rows": [1, 2]}
    assert differences(old, {"a": {"attn_layers": 4, "margin": 0.5}, "rows": [1, 2]}) == [".a.attn_layers: 3 -> 4"]
    assert differences(old, {"a": {"margin": 0.5}, "rows": [1, 2]}) == [".a.attn_layers: missing"]
    assert differences(old, {"a": {"attn_layers": 3, "margin": 0.5001}, "rows": [1, 2]}) == [".a.margin: 0.5 -> 0.5001"]
    assert differences(old, {"a": {"attn_layers": 3, "margin": 0.5, "new": 1}, "rows": [1, 2]}) == []


def added_exhaustive(name: str, old: dict, new: dict):
    """(problems, new with an added exhaustive check put back to 0.1.0's None) for a construction that
    ``verify --all`` now proves by the exhaustive check (module docstring, second change)."""
    from depthcraft.constructions.catalogue import get
    was, now = (old.get("checks") or {}).get("exhaustive"), (new.get("checks") or {}).get("exhaustive")
    if was is not None or now is None or not get(name).exhaustive_in_all:
        return [], new
    problems = [] if now.get("exact") and not now.get("failed") and now.get("inputs") else \
        [f".checks.exhaustive: added but not exact: {now}"]
    return problems, {**new, "checks": {**new["checks"], "exhaustive": None}}


def test_an_added_exhaustive_check_must_be_exact():
    old = {"checks": {"random": {"inputs": 5}, "exhaustive": None}}
    good = {"checks": {"random": {"inputs": 5}, "exhaustive": {"inputs": 6561, "exact": True, "failed": 0}}}
    bad = {"checks": {"random": {"inputs": 5}, "exhaustive": {"inputs": 6561, "exact": False, "failed": 3}}}
    assert added_exhaustive("khop_rasp", old, good) == ([], old)
    assert added_exhaustive("khop_rasp", old, bad)[0] != []
    assert added_exhaustive("khop_doubling", old, good) == ([], good)  # not marked: the change is reported


@pytest.mark.slow
def test_verify_all_reports_are_unchanged():
    from depthcraft.verify.verifier import verify_all

    old = json.loads(FIXTURE.read_text())["results"]
    saved = {(r["construction"], json.dumps(r["params"], sort_keys=True)): r["saved"]
             for r in json.loads(DEDUPE.read_text())["rows"]}
    new = {(r["construction"], json.dumps(r["params"], sort_keys=True)): strip(json.loads(json.dumps(r)))
           for r in verify_all(samples=500, hypothesis_examples=100)}
    problems = []
    for r in old:
        key = (r["construction"], json.dumps(r["params"], sort_keys=True))
        if key not in new:
            problems.append(f"{key}: no longer verified by --all")
            continue
        if key not in saved:
            problems.append(f"{key}: no d_model saving reported in {DEDUPE.name}")
            continue
        width_problems, row = width_changes(r, new[key], saved[key])
        exhaustive_problems, row = added_exhaustive(r["construction"], r, row)
        problems += [f"{key}{d}" for d in width_problems + exhaustive_problems + differences(r, row)]
    assert problems == []
