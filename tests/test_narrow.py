"""Issue 33: every line fits 60 columns (wrapped, or cut with a marker), and witnesses print token names."""

import re

import pytest
from rich.cells import cell_len
from rich.text import Text

from depthcraft.verify import lookup
from depthcraft.verify.cli import main
from depthcraft.verify.cli.render import ReportLines, certificate_lines, named_tokens

COLUMNS = 60
K2 = ("-p", "k=2", "-p", "n=12", "-p", "vocab=5")
PAPER_INPUT = "b a e b c a b e b d e a"


def run_at(capsys, monkeypatch, *args):
    monkeypatch.setenv("COLUMNS", str(COLUMNS))
    with pytest.raises(SystemExit) as e:
        main(list(args))
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


def assert_fits(text):
    wide = [line for line in text.splitlines() if cell_len(line.rstrip()) > COLUMNS]
    assert not wide, f"{len(wide)} lines wider than {COLUMNS} columns, e.g. {wide[0]!r}"


def test_list_and_list_name_fit(capsys, monkeypatch):
    code, out, _ = run_at(capsys, monkeypatch, "list")
    assert code == 0
    assert_fits(out)
    assert "depthcraft list NAME: a construction's parameters, defaults and ranges" in " ".join(out.split())
    for c in lookup.all_constructions():
        code, out, _ = run_at(capsys, monkeypatch, "list", c.name)
        assert code == 0
        assert_fits(out)
        assert out.splitlines()[0].split()[0] == c.name  # the name in full, first


def test_run_and_show_fit(capsys, monkeypatch):
    code, out, _ = run_at(capsys, monkeypatch, "run", "khop_doubling", *K2, "--input", PAPER_INPUT)
    assert code == 0
    assert_fits(out)
    code, out, _ = run_at(capsys, monkeypatch, "show", "khop_doubling", *K2, "--input", PAPER_INPUT)
    assert code == 0
    assert_fits(out)
    # the residual layout's values moved under their rows: the token embedding's values in full
    assert "      values: 0,1,2,3,4,BOS,PAD" in out.splitlines()


def test_report_lines_fit_with_the_certificate_column():
    lines = ReportLines(["k=1 n=8 vocab=3", "k=2"], columns=COLUMNS, certify=True)
    assert lines.first == COLUMNS - 51  # 9: the fixed columns take 51 with cert
    assert lines.header().plain.startswith("construc… L/bound")
    report = {"structure": {"attn_layers": 3, "heads": 2, "d_model": 142}, "bound": {}, "bound_checks": {},
              "checks": {"random": {"inputs": 74, "failed": 0}}, "passed": True, "seconds": 32.3,
              "certificate": {"certified": False}}
    rows = lines.row(report, "k=1 n=8 vocab=3")
    assert [r.plain for r in rows] == ["  k=1 n=8 vocab=3",
                                       "                3       2     142      74 ✓  yes  32.3s   no"]
    short = lines.row(report, "k=2")
    assert len(short) == 1 and short[0].plain.startswith("  k=2     ")
    for r in [lines.header()] + rows + short:
        assert cell_len(r.plain) <= COLUMNS


def test_witness_tokens_print_as_names():
    names = {0: "a", 1: "b", 2: "c"}
    witness = {"query": {"position": "any", "tokens": 2}, "keys": [{"position": "BOS", "tokens": "BOS"},
                                                                     {"position": 3, "tokens": [0, 1]}]}
    assert named_tokens(witness, names) == {"query": {"position": "any", "tokens": "c"},
                                            "keys": [{"position": "BOS", "tokens": "BOS"},
                                                     {"position": 3, "tokens": ["a", "b"]}]}
    cert = {"certified": False, "uncertified": [{"layer": "attn 2", "head": 0, "why": "w", "witness": witness}]}
    lines = certificate_lines(cert, COLUMNS, names)
    assert lines[1] == "    witness: {query: {position: any, tokens: c}, keys:"


def test_verify_certify_fits_and_names_witness_tokens(capsys, monkeypatch):
    # ictm ReLU: the match head's witness holds a query label token (L0..) and a concrete input
    # (pattern tokens a.., labels L0..), not the tokens' integer codes. With its domain's facts the
    # row is certified (tests/test_certify_ictm_relu.py), so they are withheld here: the witness
    # is the one the certifier gives for every input of the layout
    from depthcraft.verify.tasks.chen_zou.ictm import ICTMTask
    monkeypatch.setattr(ICTMTask, "domain_precondition", lambda self, p: None)
    code, out, _ = run_at(capsys, monkeypatch, "verify", "ictm_parse_copy_match", "-p", "attention=relu",
                          "--certify", "--samples", "20", "--hypothesis", "5")
    assert code == 0
    assert_fits(out)
    flat = " ".join(out.split())
    assert "witness:" in flat and "tokens: L" in flat and "tokens: [L" in flat
    assert not re.search(r"tokens: \[?\d", flat)


def test_the_width_follows_columns_set_after_import(monkeypatch):
    # rich fixes a Console's width at construction when COLUMNS is set; the CLI's consoles are made at
    # import, so a COLUMNS set later (another test, a user's shell) must still be read at every print.
    from depthcraft.verify.cli import render
    for columns in (80, 60, 47):
        monkeypatch.setenv("COLUMNS", str(columns))
        assert render.width() == columns
