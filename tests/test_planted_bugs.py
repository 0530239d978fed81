"""The planted-bug corpus (benchmarks/planted_bugs.py): every wrong model refused, every forgery rejected.

Each case is a compiled model that is wrong on a concrete input (found here, not assumed); the
certifier must not certify it, and the independent checker must not accept any forged certificate
for it (its own claims for the wrong weights, the correct model's certificate re-pointed at them,
a valid certificate checked against a changed program). The counts are compared with
``results/certify/planted_bugs.json``, which the same corpus wrote.
"""

from __future__ import annotations

import importlib.util
import json
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("planted_bugs", ROOT / "benchmarks" / "planted_bugs.py")
planted = importlib.util.module_from_spec(_spec)
sys.modules["planted_bugs"] = planted  # its dataclasses look their module up
_spec.loader.exec_module(planted)
CASES = planted.cases()


@pytest.fixture(scope="module")
def rows():
    return {c.name: planted.run_case(c) for c in CASES}


@pytest.mark.parametrize("name", [c.name for c in CASES])
def test_a_planted_bug_is_wrong_refused_and_unforgeable(rows, name):
    r = rows[name]
    assert r["witness"] is not None, f"{name}: no input found where the model is wrong (not a planted bug)"
    assert r["certifier_refused"], f"{name}: the certifier certified a wrong model ({r['witness']})"
    assert r["forgeries"], name
    for f in r["forgeries"]:
        assert not f["accepted"], f"{name}: the checker accepted a forged certificate ({f['forgery']})"


def test_the_committed_counts_are_the_corpus(rows):
    data = json.loads((ROOT / "results" / "certify" / "planted_bugs.json").read_text())
    summary = planted.summarise(list(rows.values()))
    assert data["summary"] == summary
    assert summary["refused_by_certifier"] == summary["models"] == summary["wrong_models_confirmed"]
    assert summary["forgeries_rejected_by_checker"] == summary["forgeries"]
    assert data["command"].startswith("python benchmarks/planted_bugs.py")
