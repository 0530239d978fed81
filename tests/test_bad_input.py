"""Bad-input sweep (CLI and API): one-line errors, exit status 2, no traceback, no partial files."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from depthcraft.constructions import io
from depthcraft.verify import lookup
from depthcraft.constructions.errors import InputError, ParameterError
from depthcraft.verify import cli, views


def run_cli(capsys, *args):
    with pytest.raises(SystemExit) as e:
        cli.main(list(args))
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


def assert_one_line_error(code, err, *fragments):
    assert code == 2
    assert err.endswith("\n") and err.count("\n") == 1, err  # exactly one line
    assert err.startswith("depthcraft: error: ") and "Traceback" not in err
    for f in fragments:
        assert f in err, (f, err)


K2 = ("-p", "k=2", "-p", "n=8", "-p", "vocab=3")


@pytest.mark.parametrize("args, fragments", [
    (("show", "khop_doubling", *K2, "--input", "a z"), ["token 'z' at position 2 is not in the vocabulary"]),
    (("run", "khop_doubling", *K2, "--input", "a b 7"), ["token '7' at position 3"]),
    (("show", "khop_doubling", *K2, "--input", "a b a b a b a b a"), ["input of length 9 is longer than max_seq_len=8"]),
    (("show", "khop_doubling", *K2, "--input", "   "), ["empty input"]),
    (("verify", "khop_doubling", "-p", "k=two"), ["k='two' is not a valid int"]),
    (("verify", "khop_doubling", "-p", "k=2.5"), ["k='2.5' is not a valid int"]),
    (("verify", "khop_doubling", "-p", "k=-1"), ["k=-1 is below the minimum 1"]),
    (("verify", "khop_doubling", "-p", "n=-3"), ["n=-3 is below the minimum 1"]),
    (("verify", "khop_doubling", "-p", "k=100000"), ["k=100000 is above the maximum 1024"]),
    (("verify", "khop_doubling", "-p", "n=1000000"), ["n=1000000 is above the maximum"]),
    (("verify", "khop_doubling", "-p", "depth=3"), ["unknown parameter 'depth'"]),
    (("verify", "khop_doubling", "-p", "k"), ["parameter 'k' is not of the form KEY=VALUE"]),
    (("verify", "khop_doubling", "--samples", "-5"), ["--samples"]),
    (("verify", "khop_doubling", "--samples", "many"), ["--samples"]),
    (("verify", "nope"), ["unknown construction 'nope'"]),
    (("show", "nope", "--input", "a"), ["unknown construction 'nope'"]),
    (("save", "khop_doubling", "-p", "k=0", "-o", "x.safetensors"), ["k=0 is below the minimum 1"]),
    (("verify-saved", "/nonexistent/m.safetensors"), ["cannot read /nonexistent/m.safetensors: no such file"]),
    (("verify", "khop_doubling", "--seed", "-1"), ["--seed", "-1"]),
    (("verify", "khop_doubling", "--samples", "99999999999999999999"), ["--samples"]),
    (("precision", "khop_constant_width", "--seed", "-1"), ["--seed"]),
    (("verify", "khop_doubling", "--json", ""), ["empty path"]),
    (("save", "khop_doubling", "-o", ""), ["empty path"]),
    (("verify", "khop_doubling", "--markdown", "out.md/"), ["cannot write out.md/: it is a directory"]),
    (("train", "khop", "--steps", "5", "--construction", "nosuch"), ["unknown construction 'nosuch'"]),
    (("train", "khop", "--steps", "5", "--depths", "1-100000"), ["depths='1-100000': 100000 values"]),
    (("train", "khop", "--steps", "5", "--depths", "1-65"), ["depth 65 is above the limit 64"]),
    (("train", "khop", "--steps", "5", "--width", "100000000"), ["--width"]),
    (("train", "khop", "--steps", "5", "--alignment-size", "99999999999999"), ["--alignment-size"]),
    (("train", "khop", "--steps", "5", "--lr", "inf"), ["--lr"]),
    (("verify", "khop_doubling", "--hypothesis", "99999999999999999999"), ["--hypothesis"]),
])
def test_cli_bad_input(capsys, args, fragments):
    code, out, err = run_cli(capsys, *args)
    assert_one_line_error(code, err, *fragments)


@pytest.mark.parametrize("option", ["--png", "--json", "-o"])
def test_cli_unwritable_output_paths(capsys, tmp_path, option):
    cmd = {"--png": ["show", "khop_doubling", *K2, "--input", "a b"],
           "--json": ["verify", "khop_doubling", *K2, "--samples", "5"],
           "-o": ["save", "khop_doubling", *K2]}[option]
    for target, fragment in ((tmp_path / "missing" / "f", "does not exist"), (tmp_path, "is a directory"),
                             ("/proc/depthcraft-test.out", "cannot write /proc/depthcraft-test.out")):
        code, out, err = run_cli(capsys, *cmd, option, str(target))
        assert_one_line_error(code, err, fragment)
        assert out == ""  # refused before any work is done or printed
    assert os.listdir(tmp_path) == []


def test_outputs_that_are_inputs_or_twice_the_same_or_special_files(capsys, tmp_path):
    model = str(tmp_path / "m.safetensors")
    code, _, _ = run_cli(capsys, "save", "khop_doubling", *K2, "-o", model)
    assert code == 0
    before = open(model, "rb").read()
    code, out, err = run_cli(capsys, "verify-saved", model, "--json", model)
    assert_one_line_error(code, err, "it is an input of this command")
    assert open(model, "rb").read() == before  # the model is untouched
    same = str(tmp_path / "r.out")
    code, out, err = run_cli(capsys, "verify", "khop_doubling", *K2, "--json", same, "--markdown", same)
    assert_one_line_error(code, err, "names the same file")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    code, out, err = run_cli(capsys, "verify", "khop_doubling", *K2, "--json", str(fifo))
    assert_one_line_error(code, err, "not a regular file")
    assert sorted(os.listdir(tmp_path)) == ["m.safetensors", "pipe"]


def test_symlink_loops_are_refused(tmp_path):
    from depthcraft.constructions.files import write_text_atomic

    a, b = tmp_path / "a", tmp_path / "b"
    a.symlink_to(b)
    b.symlink_to(a)
    with pytest.raises(ParameterError, match="a symlink loop"):
        write_text_atomic(str(a), "x")
    assert a.is_symlink() and b.is_symlink()


def test_interrupted_train_says_what_is_on_disk(tmp_path):
    from depthcraft.verify.cli.train import interrupted_message

    assert "nothing was written" in interrupted_message(str(tmp_path))
    (tmp_path / "checkpoints" / "L1").mkdir(parents=True)
    assert interrupted_message(str(tmp_path)).startswith("interrupted; checkpoints are in")
    (tmp_path / "results.json").write_text("{}")
    assert "results.json of the finished runs (complete: false) and checkpoints" in interrupted_message(str(tmp_path))


def test_a_symlinked_output_is_written_through(tmp_path):
    from depthcraft.constructions.files import write_text_atomic

    target = tmp_path / "target.txt"
    target.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    write_text_atomic(str(link), "new")
    assert link.is_symlink() and target.read_text() == "new"


def test_show_prefers_a_construction_over_a_file_of_that_name(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "khop_doubling").write_text("not a model")
    code, out, _ = run_cli(capsys, "show", "khop_doubling", *K2, "--input", "a\tb\nc")  # tabs/newlines separate
    assert code == 0 and "layer 1" in out


def test_cli_bad_saved_files(capsys, tmp_path):
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"\x00" * 3)
    code, _, err = run_cli(capsys, "verify-saved", str(junk))
    assert_one_line_error(code, err, "not a readable safetensors file")
    code, _, err = run_cli(capsys, "show", str(junk), "--input", "a")
    assert_one_line_error(code, err, "not a readable safetensors file")


def _interrupt(*args, **kwargs):
    raise KeyboardInterrupt


def test_cli_interrupted_writes_leave_nothing(capsys, tmp_path, monkeypatch):
    # Interrupt each writer in the middle of writing its temporary file: exit 2 (as issue 5 asks),
    # one line, and neither the target nor a temporary file is left behind.
    import matplotlib.figure
    import safetensors.numpy

    from depthcraft.constructions import files

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", _interrupt)
    code, _, err = run_cli(capsys, "show", "khop_doubling", *K2, "--input", "a b", "--png", str(tmp_path / "a.png"))
    assert code == 2 and err == "depthcraft: error: interrupted; nothing was written\n"  # one line, no blank line
    monkeypatch.setattr(safetensors.numpy, "save", _interrupt)
    code, _, err = run_cli(capsys, "save", "khop_doubling", *K2, "-o", str(tmp_path / "m.safetensors"))
    assert code == 2 and err.splitlines() == ["compiling khop_doubling k=2 n=8 vocab=3 distribution=paper ...",
                                              "depthcraft: error: interrupted; nothing was written"]
    monkeypatch.setattr(files.os, "fsync", _interrupt)  # the JSON text is complete, its temporary file written
    code, _, err = run_cli(capsys, "verify", "khop_doubling", *K2, "--samples", "5", "--hypothesis", "0",
                           "--json", str(tmp_path / "r.json"))
    assert code == 2 and err == "depthcraft: error: interrupted; nothing was written\n"
    assert os.listdir(tmp_path) == []


def test_sigint_in_a_real_process(tmp_path):
    out = tmp_path / "big.safetensors"
    # k=64 n=1024 takes seconds to compile even with the live-row build, so the interrupt lands mid-compile.
    # SIGINT is reset to its default in the child: a pytest started in the background inherits it ignored.
    proc = subprocess.Popen([sys.executable, "-m", "depthcraft", "save", "khop_doubling", "-p", "k=64", "-p", "n=1024",
                             "-o", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    first = proc.stderr.readline()  # printed once the command runs (imports done)
    assert first.startswith("compiling khop_doubling"), first
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    if proc.returncode == 0:
        pytest.fail("the compile finished before the interrupt; use a larger n")
    # Exactly one line on stderr: no blank line before it (click's answer to ^C), no traceback.
    assert proc.returncode == 2 and err == "depthcraft: error: interrupted; nothing was written\n", repr(err)
    assert os.listdir(tmp_path) == []


def test_api_bad_inputs(tmp_path):
    model = lookup.resolve("khop_doubling", {"k": 2, "n": 8, "vocab": 3}).build()
    cases = [
        (lambda: model.run([[0, 5]]), InputError, "token 5 at position 2 is not in the vocabulary [0, 1, 2]"),
        (lambda: model.run(np.array([[0.0, 1.0]])), InputError, "tokens have dtype float64"),
        (lambda: model.run([[1.0, 2]]), InputError, "token 1.0 at position 1"),
        (lambda: model.run([[True]]), InputError, "token True at position 1"),
        (lambda: model.run([["BOS", 1]]), InputError, "token 'BOS' at position 1"),
        (lambda: model.run([[]]), InputError, "empty input"),
        (lambda: model.run([]), InputError, "no input sequences"),
        (lambda: model.run([[0] * 9]), InputError, "input of length 9 is longer than max_seq_len=8"),
        (lambda: lookup.resolve("khop_doubling", {"k": -2}), ParameterError, "k=-2 is below the minimum 1"),
        (lambda: io.save(model, str(tmp_path / "no" / "m.safetensors")), ParameterError, "does not exist"),
        (lambda: io.save(model, "/proc/m.safetensors"), ParameterError, "cannot write /proc/m.safetensors"),
        (lambda: views.for_construction("khop_doubling", {"k": 2, "n": 8, "vocab": 3}, "a q"), InputError,
         "token 'q' at position 2"),
    ]
    for call, error, message in cases:
        with pytest.raises(error) as e:
            call()
        assert message in str(e.value) and "\n" not in str(e.value)
    assert os.listdir(tmp_path) == []


def test_numerical_aggregate_of_non_binary_values_gets_every_mean():
    """tracr's value set for a numerical Aggregate ({x/length}) is right only for 0/1 values or one
    selected position; 0.5 averaged over a prefix is compiled with the exact set of means (issue 33),
    and refused only where that set is too large."""
    from tracr.rasp import rasp

    from depthcraft.constructions.compiler import compile_program
    from depthcraft.constructions.errors import CompileError

    half = rasp.numerical(rasp.Map(lambda t: 0.5 if t == 1 else 0, rasp.tokens))
    mean = rasp.numerical(rasp.Aggregate(rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.LEQ), half,
                                         default=0))
    model = compile_program(mean, vocab=range(3), max_seq_len=4, causal=True)
    # prefix means of 0, 0, 0, 0.5 and of 0.5 x 4
    assert model.run([[0, 2, 0, 1], [1, 1, 1, 1]]).tolist() == [[0.0, 0.0, 0.0, 0.125], [0.5] * 4]
    many = rasp.numerical(rasp.Map(lambda t: t / 7 + 0.01, rasp.tokens))
    spread = rasp.numerical(rasp.Aggregate(rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.LEQ), many,
                                           default=0))
    with pytest.raises(CompileError, match=r"tracr's value set \(x/length\) holds only for 0/1 values"):
        compile_program(spread, vocab=range(40), max_seq_len=12)
