"""Parameter sweeps (depthcraft verify -p k=1..16), the Markdown table, and lower-bound checks."""

import json

import pytest

from depthcraft.constructions.errors import ParameterError
from depthcraft.constructions.catalogue import Bound
from depthcraft.verify.cli import main
from depthcraft.constructions.params import expand_sweeps, parse_assignments, parse_values
from depthcraft.verify.report import markdown_table
from depthcraft.verify.verifier import bound_check


def test_parse_values():
    assert parse_values("k", "1-4,8,16") == ["1", "2", "3", "4", "8", "16"]
    assert parse_values("k", "1..4,8") == ["1", "2", "3", "4", "8"]
    assert parse_values("k", "-1") == ["-1"]  # a negative value, not a range (the parameter check rejects it)
    assert parse_values("n", "16") == ["16"]
    assert parse_values("dist", "paper,uniform") == ["paper", "uniform"]
    with pytest.raises(ParameterError, match="must go up"):
        parse_values("k", "5-1")
    with pytest.raises(ParameterError, match="empty value"):
        parse_values("k", "1,,2")


def test_grid():
    varying, points = expand_sweeps(parse_assignments(["k=1-2", "n=8", "vocab=2,3"]))
    assert varying == ["k", "vocab"]
    assert points == [{"k": "1", "n": "8", "vocab": "2"}, {"k": "1", "n": "8", "vocab": "3"},
                      {"k": "2", "n": "8", "vocab": "2"}, {"k": "2", "n": "8", "vocab": "3"}]
    with pytest.raises(ParameterError, match="twice"):
        parse_assignments(["k=1", "k=2"])
    with pytest.raises(ParameterError, match="KEY=VALUE"):
        parse_assignments(["k"])
    with pytest.raises(ParameterError, match="limit"):
        expand_sweeps({"a": "1-100", "b": "1..100"})
    with pytest.raises(ParameterError, match="1..16"):
        parse_values("k", "1..x")


def test_bound_kinds():
    s = {"attn_layers": 4, "heads": 1}
    assert bound_check(s, {"attn_layers": 3}, {"attn_layers": "lower"})["attn_layers"] == \
        {"measured": 4, "bound": 3, "kind": "lower", "gap": 1, "ok": True}
    assert not bound_check(s, {"attn_layers": 5}, {"attn_layers": "lower"})["attn_layers"]["ok"]
    assert bound_check(s, {"attn_layers": 3})["attn_layers"] == \
        {"measured": 4, "bound": 3, "kind": "upper", "gap": -1, "ok": False}
    with pytest.raises(ValueError):
        Bound("x", lambda p: 1, kind="sideways")


def test_markdown_table():
    rep = {"params": {"d": 5}, "structure": {"attn_layers": 4, "heads": 1, "d_model": 10},
           "bound_checks": {"attn_layers": {"measured": 4, "bound": 3, "kind": "lower", "gap": 1, "ok": True}},
           "exact": True, "passed": True, "min_margin": {"attention": 1.0}}
    lines = markdown_table([rep], ["d"]).splitlines()
    assert lines[0] == "| d | attn_layers (measured / bound, gap) | heads | d_model | exact | min attention | passed |"
    assert lines[2] == "| 5 | 4 / ≥ 3, gap 1 | 1 | 10 | yes | 1.0000 | yes |"


def test_cli_verify_sweep(tmp_path):
    out, md = tmp_path / "s.json", tmp_path / "s.md"
    with pytest.raises(SystemExit) as e:
        main(["verify", "khop_floor", "-p", "k=2,3", "-p", "n=8", "--samples", "50", "--hypothesis", "5",
              "--json", str(out), "--markdown", str(md)])
    assert e.value.code == 0
    reports = json.loads(out.read_text())["results"]
    assert [r["structure"]["attn_layers"] for r in reports] == [3, 3]
    rows = md.read_text().splitlines()[2:]
    assert len(rows) == 2 and all(r.endswith("| yes | 1.0000 | yes |") for r in rows)


def test_cli_verify_sweep_unknown_name(capsys):
    with pytest.raises(SystemExit) as e:
        main(["verify", "nope", "-p", "k=1"])
    assert e.value.code == 2
    assert "unknown construction 'nope'" in capsys.readouterr().err
