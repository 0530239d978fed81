"""CLI contract (SPEC §6): list, verify, run; exit codes 0 / 1 / 2; JSON keys; one-line errors."""

import json
import subprocess
import sys

import pytest

from depthcraft.verify.cli import main


def run_cli(args, capsys):
    with pytest.raises(SystemExit) as e:
        main(args)
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


def test_list_json(capsys):
    code, out, _ = run_cli(["list", "--json"], capsys)
    assert code == 0
    rows = {r["name"]: r for r in json.loads(out)}
    assert rows["khop_doubling"]["bounds"]["attn_layers"] == "ceil(log2 k)+2"
    assert rows["khop_doubling"]["task"] == "khop" and "Sanford" in rows["khop_doubling"]["source"]
    assert "khop_rasp" in rows


def test_list_name_shows_every_parameter(capsys):
    code, out, _ = run_cli(["list", "retrieval_doubling", "--json"], capsys)
    assert code == 0
    (row,) = json.loads(out)
    # the construction's own parameters and its task's (retrieval: d, distractors, symbols, hops)
    assert row["params"] == {"d": 4, "distractors": 2, "symbols": 0, "hops": 0}
    code, out, _ = run_cli(["list", "khop_doubling"], capsys)
    assert code == 0 and "distribution" in out and "1..1024" in out


def test_verify_json_report_keys(tmp_path, capsys):
    path = tmp_path / "out.json"
    code, out, _ = run_cli(["verify", "khop_doubling", "-p", "k=5", "-p", "n=16", "-p", "vocab=3",
                            "--samples", "200", "--hypothesis", "10", "--json", str(path)], capsys)
    assert code == 0
    report = json.loads(path.read_text())
    (r,) = report["results"]
    for key in ("construction", "task", "params", "structure", "bound", "bound_ok", "checks", "min_margin",
                "passed", "seconds"):
        assert key in r
    assert set(r["structure"]) >= {"attn_layers", "mlp_layers", "heads", "d_model", "d_head", "d_mlp",
                                   "n_params", "tracr_blocks"}
    assert r["structure"]["attn_layers"] == 5 and r["bound"] == {"attn_layers": 5, "heads": 1, "d_model": None}
    assert r["checks"]["random"] == {"inputs": 200, "exact": True, "failed": 0, "counterexample": None}
    assert r["checks"]["exhaustive"] is None
    assert r["passed"] is True and r["params"]["k"] == 5
    assert "khop_doubling" in out


def test_verify_failure_exits_1_with_counterexample(tmp_path, capsys):
    path = tmp_path / "out.json"
    code, out, _ = run_cli(["verify", "khop_rasp", "-p", "k=1", "-p", "n=16", "--samples", "50",
                            "--hypothesis", "30", "--json", str(path)], capsys)
    assert code == 1
    r = json.loads(path.read_text())["results"][0]
    assert r["passed"] is False and r["counterexample"]["got"] != r["counterexample"]["expected"]
    assert "counterexample" in out and "expected" in out


@pytest.mark.parametrize("args, message", [
    (["verify", "khop_doubling", "-p", "k=-1"], "k=-1 is below the minimum 1"),
    (["verify", "khop_doubling", "-p", "k=two"], "not a valid int"),
    (["verify", "khop_doubling", "-p", "n=100000"], "above the maximum"),
    (["verify", "khop_doubling", "-p", "q=1"], "unknown parameter 'q'"),
    (["verify", "khop_doubling", "-p", "k"], "KEY=VALUE"),
    (["verify", "no_such"], "unknown construction"),
    (["verify"], "NAME or --all"),
    (["verify", "--all", "--exhaustive"], "--exhaustive cannot be combined with --all"),
    (["verify", "khop_doubling", "--json", "/nonexistent-dir/x.json"], "does not exist"),
    (["verify", "khop_doubling", "-p", "n=13", "--exhaustive"], "above the limit"),
    (["run", "khop_doubling", "-p", "n=5", "--input", "a b e"], "token 'e' at position 3"),
    (["run", "khop_doubling", "-p", "n=3", "--input", "a b c a"], "longer than max_seq_len=3"),
    (["run", "khop_doubling", "--input", " "], "empty input"),
    (["verify", "--bogus"], "No such option"),
])
def test_bad_input_is_one_line_exit_2(args, message, capsys):
    code, _, err = run_cli(args, capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("depthcraft: error:") and message in lines[0], err
    assert "Traceback" not in err


def test_run_prints_worked_example(capsys):
    code, out, _ = run_cli(["run", "khop_doubling", "-p", "k=2", "-p", "n=12", "-p", "vocab=5",
                            "--input", "baebcabebdea"], capsys)
    assert code == 0
    # hop_2 of the paper's example (Sanford et al., Def. 4.1): ⊥⊥⊥⊥⊥⊥⊥ab⊥ec, every position scored
    assert out.splitlines() == ["position   1 2 3 4 5 6 7 8 9 10 11 12",
                                "input      b a e b c a b e b  d  e  a",
                                "output     ⊥ ⊥ ⊥ ⊥ ⊥ ⊥ ⊥ a b  ⊥  e  c",
                                "reference  ⊥ ⊥ ⊥ ⊥ ⊥ ⊥ ⊥ a b  ⊥  e  c",
                                "exact"]


def test_console_script_subprocess_exit_2_no_traceback():
    proc = subprocess.run([sys.executable, "-c", "from depthcraft.verify.cli import main; main()", "verify", "khop_doubling",
                           "-p", "k=-1"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0


def test_docs_command_checks_the_generated_pages(capsys, tmp_path):
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[1]
    code, out, err = run_cli(["docs", "--check", "--root", str(root)], capsys)
    assert code == 0 and out == "" and err == ""  # the committed pages are fresh
    code, _, err = run_cli(["docs", "--check", "--root", str(tmp_path)], capsys)  # not a checkout
    assert code == 2 and err.count("\n") == 1 and "has no tools/docgen.py" in err
    import shutil

    shutil.copytree(root / "tools", tmp_path / "tools", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "README.md").write_text("<!-- BEGIN generated:nosuch -->\n<!-- END generated:nosuch -->\n")
    code, _, err = run_cli(["docs", "--check", "--root", str(tmp_path)], capsys)
    assert code == 2 and err.count("\n") == 1 and "unknown generated block 'nosuch'" in err


def test_errors_wrap_at_the_terminal_width_and_stay_one_line_in_a_pipe(monkeypatch):
    from depthcraft.verify.cli import error_lines

    message = "depthcraft: error: " + " ".join(["word"] * 40)  # 219 characters
    assert error_lines(message) == [message]  # a pipe (pytest captures stderr)
    monkeypatch.setattr("sys.stderr.isatty", lambda: True, raising=False)
    monkeypatch.setenv("COLUMNS", "80")
    lines = error_lines(message)
    assert len(lines) == 3 and all(len(ln) <= 80 for ln in lines) and lines[1].startswith("  word")
    assert " ".join(ln.strip() for ln in lines) == message


def test_unknown_names_suggest_the_closest(capsys):
    code, _, err = run_cli(["verify", "khop_doubleing"], capsys)
    assert code == 2 and "unknown construction 'khop_doubleing'; did you mean khop_doubling?" in err
    code, _, err = run_cli(["verify", "khop_doubling", "-p", "vocb=3"], capsys)
    assert code == 2 and "unknown parameter 'vocb'; did you mean vocab?" in err
