"""Output a person can read (issue 10 §5): every line of ``list``, ``list NAME``, ``run``, ``show`` and
``verify`` fits the terminal (80 and 120 columns), names one must type are printed in full, ``verify``
prints one line per report and a summary line, and the console's width follows ``COLUMNS`` in a pipe."""

import os
import re
import subprocess
import sys

import pytest
from rich.cells import cell_len

from depthcraft.verify import lookup
from depthcraft.verify.cli import main
from depthcraft.verify.cli.render import ReportLines, duration

WIDTHS = (80, 120)
K2 = ("-p", "k=2", "-p", "n=12", "-p", "vocab=5")
PAPER_INPUT = "b a e b c a b e b d e a"  # Sanford et al.'s example: hop_2 = ⊥⊥⊥⊥⊥⊥⊥ab⊥ec


def run_at(columns, capsys, monkeypatch, *args):
    monkeypatch.setenv("COLUMNS", str(columns))
    with pytest.raises(SystemExit) as e:
        main(list(args))
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


def assert_fits(text, columns):
    wide = [line for line in text.splitlines() if cell_len(line.rstrip()) > columns]
    assert not wide, f"{len(wide)} lines wider than {columns} columns, e.g. {wide[0]!r}"


@pytest.mark.parametrize("columns", WIDTHS)
def test_list_fits_and_shows_every_name_in_full(columns, capsys, monkeypatch):
    code, out, err = run_at(columns, capsys, monkeypatch, "list")
    assert code == 0 and err == ""
    assert_fits(out, columns)
    firsts = [line.split()[0] for line in out.splitlines() if line and not line.startswith(" ")]
    for c in lookup.all_constructions():
        assert c.name in firsts, c.name  # the whole name, as the first word of its own line
        block = out[out.index(c.name + " "):]
        assert c.task in block.splitlines()[0].split()  # task on the name's line
    # The bound formulas and sources are all there, wrapped (compare without line breaks).
    flat = " ".join(out.split())
    assert "L ≤ ceil(log2 k)+2, H ≤ 1" in flat and "L ≥ ceil(log_3(2D)) (lower bound)" in flat
    assert "Sanford, Hsu & Telgarsky (ICML 2024), Thm 4.2 via pointer doubling" in flat


@pytest.mark.parametrize("columns", WIDTHS)
def test_list_name_fits_and_shows_every_parameter(columns, capsys, monkeypatch):
    for c in lookup.all_constructions():
        code, out, _ = run_at(columns, capsys, monkeypatch, "list", c.name)
        assert code == 0
        assert_fits(out, columns)
        rows = out[out.index("parameters (-p KEY=VALUE)"):].splitlines()
        firsts = [line.split()[0] for line in rows if line.strip()]
        for spec in lookup.param_specs(c):
            assert spec.name in firsts, (c.name, spec.name)


def test_list_khop_shows_the_range_the_check_enforces(capsys, monkeypatch):
    # k >= 1 is enforced (hop_0 needs no layer): the parameter table says 1..1024, not ..1024.
    _, out, _ = run_at(80, capsys, monkeypatch, "list", "khop_doubling")
    (k_row,) = [line for line in out.splitlines() if line.split()[:1] == ["k"]]
    assert k_row.split()[:4] == ["k", "int", "2", "1..1024"]
    for c in lookup.all_constructions():
        for spec in lookup.param_specs(c):
            if spec.name == "k" and c.task == "khop":
                assert spec.minimum == 1, c.name


@pytest.mark.parametrize("columns", WIDTHS)
def test_run_fits_and_aligns_positions(columns, capsys, monkeypatch):
    code, out, _ = run_at(columns, capsys, monkeypatch, "run", "khop_doubling", *K2, "--input", PAPER_INPUT)
    assert code == 0
    assert_fits(out, columns)
    lines = out.splitlines()
    assert lines[-1] == "exact"
    rows = {line.split()[0]: line for line in lines[:4]}
    # Every output sits under its position number (right-aligned columns).
    pos, outp = rows["position"], rows["output"]
    ends = [m.end() for m in re.finditer(r"\d+", pos)]
    assert [outp[e - 1] for e in ends] == list("⊥⊥⊥⊥⊥⊥⊥ab⊥ec")


def test_run_cuts_long_inputs_into_blocks_that_fit(capsys, monkeypatch):
    text = " ".join("abcdeabcdeeabc"[i % 14] for i in range(40))
    code, out, _ = run_at(80, capsys, monkeypatch, "run", "khop_doubling", "-p", "k=2", "-p", "n=40",
                          "-p", "vocab=5", "--input", text)
    assert code == 0
    assert_fits(out, 80)
    blocks = [b for b in out.split("\n\n")]
    assert len(blocks) >= 2
    positions = [int(t) for b in blocks for t in b.splitlines()[0].split()[1:]]
    assert positions == list(range(1, 41))
    tokens = [t for b in blocks for t in b.splitlines()[1].split()[1:]]
    assert " ".join(tokens) == text


@pytest.mark.parametrize("columns", WIDTHS)
def test_show_fits(columns, capsys, monkeypatch):
    for name, params, text in (("khop_doubling", K2, PAPER_INPUT),
                               ("retrieval_doubling", ("-p", "d=2", "-p", "distractors=1"), "e f a b d e b c ? a"),
                               ("icqa_copy_match", ("-p", "m=3"), "q0 a1 q5 a2 q2 a0 q5")):
        code, out, _ = run_at(columns, capsys, monkeypatch, "show", name, *params, "--input", text)
        assert code == 0
        assert_fits(out, columns)
        assert "RASP program" in out and "Residual stream" in out


@pytest.mark.parametrize("columns", WIDTHS)
def test_verify_prints_one_line_per_report_and_a_summary(columns, capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_at(columns, capsys, monkeypatch, "verify", "khop_doubling", "-p", "k=1..3", "-p", "n=8",
                            "--samples", "20", "--hypothesis", "3", "--markdown", "t.md", "--json", "t.json")
    assert code == 0 and err == ""
    assert_fits(out, columns)
    lines = out.splitlines()
    assert lines[0].split() == ["construction", "L/bound", "H/bound", "d_model", "checks", "pass", "time"]
    assert lines[1] == "khop_doubling"
    rows = lines[2:5]
    # k -> (L, bound) from the theorem, ceil(log2 k) + 2; one head.
    for row, (k, layers) in zip(rows, [(1, 2), (2, 3), (3, 4)]):
        cells = row.split()
        assert cells[:2] == [f"k={k}", "n=8"] and cells[2:4] == [f"{layers}/{layers}", "1/1"], row
        assert cells[-3:-1] == ["✓", "yes"] and re.fullmatch(r"\d+\.\ds", cells[-1])
    assert "table written to t.md" in out and "report written to t.json" in out
    assert re.fullmatch(r"3/3 passed in \d+\.\ds", lines[-1])
    assert (tmp_path / "t.md").read_text().startswith("| k | attn_layers (measured / bound, gap) |")


def test_verify_failure_prints_a_readable_counterexample(capsys, monkeypatch):
    code, out, _ = run_at(80, capsys, monkeypatch, "verify", "khop_rasp", "-p", "k=1", "-p", "n=16",
                          "--samples", "50", "--hypothesis", "30")
    assert code == 1
    assert_fits(out, 80)
    lines = out.splitlines()
    (row,) = [line for line in lines if line.startswith("  k=1 n=16")]
    assert row.split()[-2] == "NO" and "✗" in row
    assert lines[-1].startswith("0/1 passed in ")
    rows = {line.split()[0]: line for line in lines if line.startswith("  ") and line.split()
            and line.split()[0] in ("position", "input", "expected", "got")}
    assert set(rows) == {"position", "input", "expected", "got"}
    expected, got = rows["expected"].split()[1:], rows["got"].split()[1:]
    assert len(expected) == len(got) == len(rows["input"].split()) - 1 and expected != got
    marks = lines[lines.index(rows["got"]) + 1]
    for col, ch in enumerate(marks):  # every ^ sits under a wrong output
        if ch == "^":
            assert rows["expected"][col] != rows["got"][col]


def test_report_line_fits_even_with_long_parameters():
    report = {"construction": "tm_parse_map", "params": {}, "passed": True, "seconds": 151.2,
              "structure": {"attn_layers": 2, "heads": 3, "d_model": 29},
              "bound": {"attn_layers": 2, "heads": None, "d_model": None},
              "bound_checks": {"attn_layers": {"measured": 2, "bound": 2, "kind": "upper", "gap": 0, "ok": True}},
              "checks": {"random": {"inputs": 500, "failed": 0}, "edge": {"inputs": 36, "failed": 0},
                         "exhaustive": None, "hypothesis": {"inputs": 100, "failed": 0}}}
    label = "attention=softmax heads=0 qk_seed=0 n=5 templates=12 classes=4 vocab=8 held_out=2 split=all seed=0"
    lines = ReportLines([label], columns=80).row(report, label)
    assert len(lines) > 1 and all(cell_len(t.plain) <= 80 for t in lines)
    assert " ".join(" ".join(t.plain.split()) for t in lines).count("seed=0") == 2
    assert lines[0].plain.split()[-7:] == ["2/2", "3", "29", "636", "✓", "yes", "2m31s"]


def test_duration():
    assert [duration(s) for s in (0.04, 4.53, 59.9, 60.2, 151.2, 3725)] == \
        ["0.0s", "4.5s", "59.9s", "1m00s", "2m31s", "1h02m"]


@pytest.mark.parametrize("columns", [None, "120"])
def test_width_in_a_pipe_follows_columns(columns):
    """In a pipe (no terminal on stdin, stdout or stderr) rich prints at 80 columns, or at COLUMNS."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "FORCE_COLOR", "TERM")}
    if columns:
        env["COLUMNS"] = columns
    proc = subprocess.run([sys.executable, "-m", "depthcraft", "list"], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0 and proc.stderr == ""
    longest = max(cell_len(line.rstrip()) for line in proc.stdout.splitlines())
    want = int(columns or 80)
    assert want - 10 <= longest <= want, longest
    assert "\x1b[" not in proc.stdout  # no colour codes in a pipe


@pytest.mark.slow
def test_verify_all_at_80_columns(capsys, monkeypatch):
    """`COLUMNS=80 depthcraft verify --all`: every line fits, one line per report, a summary line last."""
    code, out, err = run_at(80, capsys, monkeypatch, "verify", "--all")
    assert code == 0 and err == ""
    assert_fits(out, 80)
    lines = out.splitlines()
    total = sum(len(c.defaults) for c in lookup.all_constructions())
    rows = [line for line in lines if line.startswith("  ") and line.split()[-2:-1] in (["yes"], ["NO"])]
    assert len(rows) == total
    table = lines[1:lines.index("")] if "" in lines else lines[1:-1]
    headings = [line for line in table if not line.startswith(" ")]
    assert headings == [c.name for c in lookup.all_constructions()]
    assert re.fullmatch(rf"{total}/{total} passed in (\d+\.\ds|\d+m\d\ds)", lines[-1])


def test_progress_bar_on_a_terminal_fits_and_counts(monkeypatch):
    """On a terminal, reports stream under a progress bar with count, elapsed time and time left."""
    import io

    from rich.console import Console
    from rich.text import Text

    from depthcraft.verify.cli import render

    buf = io.StringIO()
    monkeypatch.setattr(render, "console", Console(file=buf, force_terminal=True, width=80, color_system=None))

    def report(k):
        return {"construction": "khop_constant_width", "params": {"k": k, "n": 256}, "passed": True, "seconds": 2.0,
                "structure": {"attn_layers": 4, "heads": 1, "d_model": 33},
                "bound": {"attn_layers": 4, "heads": 1, "d_model": 39}, "bound_checks": {},
                "checks": {"random": {"inputs": 10, "failed": 0}}}

    labels = ["k=4 n=256", "k=16 n=256"]
    done = render.stream_reports((report(k) for k in (4, 16)), labels,
                                 [f"khop_constant_width {label} and a long tail of words" for label in labels])
    assert [r["params"]["k"] for r in done] == [4, 16]
    frames = [re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", f) for f in re.split(r"[\r\n]", buf.getvalue())]
    frames = [f for f in frames if f.strip()]
    bars = [f for f in frames if " eta " in f]
    assert bars and all(cell_len(f.rstrip()) <= 80 for f in frames)
    assert any("0/2" in f for f in bars) and any("1/2" in f for f in bars)
    assert any(f.startswith("  k=16 n=256") and f.rstrip().endswith("yes   2.0s") for f in frames)
    assert isinstance(render.ReportLines(labels, 80).header(), Text)


def test_inputs_progress_line_on_a_terminal(monkeypatch):
    """A check's inputs (16,777,216 of them) count on a second progress line that fits 80 columns and goes."""
    import io

    from rich.console import Console

    from depthcraft.verify.cli import render

    buf = io.StringIO()
    monkeypatch.setattr(render, "console", Console(file=buf, force_terminal=True, width=80, color_system=None))
    bar = render.progress_bar()
    tick = render.inputs_progress(bar)
    total = 4 ** 12

    def reports():
        for done in (0, 1 << 15, total // 2, total):
            tick("exhaustive", done, total)
            bar.refresh()
        yield {"construction": "khop_doubling", "params": {"k": 4, "n": 12}, "passed": True, "seconds": 2.0,
               "structure": {"attn_layers": 4, "heads": 1, "d_model": 64},
               "bound": {"attn_layers": 4, "heads": 1}, "bound_checks": {},
               "checks": {"exhaustive": {"inputs": total, "failed": 0}}}

    done = render.stream_reports(reports(), ["k=4 n=12"], ["khop_doubling k=4 n=12 vocab=4"], bar)
    assert len(done) == 1 and not bar.tasks[1:]  # the inputs line went when the check ended
    frames = [re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", f) for f in re.split(r"[\r\n]", buf.getvalue())]
    frames = [f for f in frames if f.strip()]
    inputs = [f for f in frames if f.startswith("  exhaustive")]
    assert inputs and all(re.match(r"  exhaustive [0-9.]+[kM]?/16\.8M ", f) for f in inputs)
    assert any(re.match(r"  exhaustive 8\.4M/16\.8M +━", f) for f in inputs)
    assert any(f.startswith("khop_doubling k=4 n=12 vocab=4 ━") and "1/1" in f for f in frames)
    assert all(cell_len(f.rstrip()) <= 80 for f in frames)


def test_short_count():
    from depthcraft.verify.cli.render import short_count

    assert [short_count(n) for n in (0, 950, 9999, 32768, 4 ** 12, 3 * 10 ** 9)] == \
        ["0", "950", "9999", "32.8k", "16.8M", "3.0G"]
