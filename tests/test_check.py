"""``depthcraft check FILE.py[:NAME]`` end to end on program files written here, not taken from the repository
(issue 40, item 1): certified in one command, a wrong reference exits 1 with a counterexample, a broken
program or file exits 2 with one line; a causal selector that reads a later key is the headline."""

import json
import textwrap

import pytest

from depthcraft.verify import cli

PROGRAM = textwrap.dedent('''
    from tracr.rasp import rasp

    length = rasp.SelectorWidth(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.TRUE)).named("length")
    opp = rasp.SequenceMap(lambda n, i: n - i - 1, length, rasp.indices).named("opp")
    program = rasp.Aggregate(rasp.Select(rasp.indices, opp, rasp.Comparison.EQ), rasp.tokens).named("reverse")
    shifted = rasp.Aggregate(rasp.Select(rasp.indices, rasp.indices, lambda k, q: k == q + 1),
                             rasp.tokens).named("next_token")
    halves = rasp.numerical(rasp.Map(lambda x: 1 / x, rasp.tokens)).named("halves")
    selector = rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.EQ)
    ident = rasp.Map(lambda x: x, rasp.tokens).named("ident")

    def expected(xs):
        return xs[::-1]

    def same(xs):
        return list(xs)

    def two_args(xs, ys):
        return xs

    def as_text(xs):
        return [str(x) for x in xs]
''')


@pytest.fixture
def prog(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.py").write_text(PROGRAM)
    (tmp_path / "raises.py").write_text("x = 1\ny = x / 0\n")
    return tmp_path


def run(capsys, *args):
    with pytest.raises(SystemExit) as e:
        cli.main(list(args))
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


ABC = ("--vocab", "a b c")


def test_a_program_file_is_checked_and_certified_in_one_command(prog, capsys):
    code, out, err = run(capsys, "check", "mine.py", *ABC, "--max-seq-len", "6", "--reference", "mine.py:expected",
                         "--max-layers", "2", "--max-heads", "1", "--certify", "--mlp-exactness", "1000",
                         "--samples", "100", "--hypothesis", "20", "--json", "r.json", "--save", "m.safetensors")
    assert code == 0, out + err
    report = json.loads((prog / "r.json").read_text())["results"][0]
    assert report["passed"] and report["certificate"]["certified"]
    assert report["bound_checks"]["attn_layers"] == {"measured": 2, "bound": 2, "kind": "upper", "gap": 0, "ok": True}
    assert report["construction"] == "program" and report["causal"] is False  # RASP's bidirectional default
    assert (prog / "m.safetensors").is_file() and "model written to m.safetensors" in out
    assert "cert: yes = proved for every input up to n" in out  # the table's legend


def test_a_wrong_reference_exits_1_with_a_counterexample(prog, capsys):
    code, out, _ = run(capsys, "check", "mine.py:program", *ABC, "--max-seq-len", "4", "--reference", "mine.py:same",
                       "--samples", "50", "--hypothesis", "20")
    assert code == 1
    assert "why: the output differs from the reference" in out
    rows = [ln.split() for ln in out.splitlines() if ln.split()[:1] in (["input"], ["expected"], ["got"])]
    assert rows == [["input", "a", "b"], ["expected", "a", "b"], ["got", "b", "a"]]  # shrunk to two tokens


def test_a_causal_selector_reading_a_later_key_is_the_headline(prog, capsys):
    code, out, _ = run(capsys, "check", "mine.py:shifted", *ABC, "--max-seq-len", "4", "--causal",
                       "--samples", "20", "--hypothesis", "5")
    assert code == 1
    why = " ".join(out.split("why: ", 1)[1].split("\n\n")[0].split())
    assert why.startswith("selector select_") and "selects a key after its query" in why
    assert "on input 'a a', query position 1 selects key position 2" in why
    # bidirectional (the default for tracr's primitives) it passes
    code, out, _ = run(capsys, "check", "mine.py:shifted", *ABC, "--max-seq-len", "4", "--samples", "20",
                       "--hypothesis", "5")
    assert code == 0, out


def test_a_counterexample_names_the_types_where_the_texts_agree(prog, capsys):
    """A reference of strings against a model of integers: "0" and 0 print alike, so the cells carry
    their types and a note says which (issue 40, item 5)."""
    code, out, _ = run(capsys, "check", "mine.py:ident", "--vocab", "0 1", "--max-seq-len", "3",
                       "--reference", "mine.py:as_text", "--samples", "20", "--hypothesis", "10", "--json", "r.json")
    assert code == 1
    lines = out.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.strip().startswith("counterexample ("))
    assert lines[start].split() == ["counterexample", "(found", "by", "the", "hypothesis", "check,", "shrunk),",
                                    "wrong", "at", "position", "1:"]
    table = [ln.split() for ln in lines[start + 1:start + 6]]  # shrunk to the one-token input 0
    assert table == [["position", "1"], ["input", "0"], ["expected", "'0':str"], ["got", "0:int"], ["^"]]
    note = " ".join(" ".join(lines[start + 6:]).split()).split(" layer ablation:")[0]
    assert note == ("at position 1 the expected and the output values print alike but differ: "
                    "expected '0' (str), got 0 (int)")
    cx = json.loads((prog / "r.json").read_text())["results"][0]["counterexample"]
    assert {k: cx[k] for k in ("tokens", "expected", "got", "positions", "expected_text", "got_text")} == {
        "tokens": [0], "expected": ["0"], "got": [0], "positions": [1], "expected_text": "'0':str", "got_text": "0:int"}
    assert cx["type_note"] == note


@pytest.mark.parametrize("args, fragment", [
    (("mine.py:halves", "--vocab", "0 1 2"), "cannot compile halves"),
    (("raises.py", *ABC), "importing raises.py raised ZeroDivisionError: division by zero (line 2)"),
    (("mine.py:expected", *ABC), "mine.py:expected is a function, not a RASP SOp"),
    (("mine.py:selector", *ABC), "mine.py:selector is a selector (rasp.Select)"),
    (("mine.py:progam", *ABC), "mine.py defines no 'progam' (a RASP SOp); did you mean program?"),
    (("mine.py", *ABC, "--reference", "mine.py:two_args"), "mine.py:two_args(xs, ys) must take one argument"),
    (("mine.py", *ABC, "--reference", "mine.py"), "give FILE.py:FN"),
    (("nothere.py", *ABC), "cannot read nothere.py: no such file"),
    (("mine.py", "--vocab", " , "), "holds no token"),
])
def test_bad_files_and_programs_exit_2_with_one_line(prog, capsys, args, fragment):
    code, out, err = run(capsys, "check", *args, "--max-seq-len", "3", "--samples", "5", "--hypothesis", "2")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("depthcraft: error: ") and fragment in err, err


def test_the_halves_error_names_the_node_and_the_value(prog, capsys):
    _, _, err = run(capsys, "check", "mine.py:halves", "--vocab", "0 1 2", "--max-seq-len", "3")
    assert "raises ZeroDivisionError: division by zero on the value 0 of tokens" in err


def test_verify_points_a_python_file_to_check(prog, capsys):
    code, _, err = run(capsys, "verify", "mine.py")
    assert code == 2 and "depthcraft check mine.py[:NAME]" in err


def test_a_saved_model_of_your_program_verifies_with_its_reference(prog, capsys):
    assert run(capsys, "check", "mine.py", *ABC, "--max-seq-len", "4", "--save", "m.safetensors", "--samples", "10",
               "--hypothesis", "2")[0] == 0
    code, _, err = run(capsys, "verify-saved", "m.safetensors")
    assert code == 2 and "give its reference, --reference FILE.py:FN" in err
    code, out, _ = run(capsys, "verify-saved", "m.safetensors", "--reference", "mine.py:expected", "--samples", "20",
                       "--hypothesis", "5")
    assert code == 0, out
    code, out, _ = run(capsys, "verify-saved", "m.safetensors", "--reference", "mine.py:same", "--samples", "20",
                       "--hypothesis", "5")
    assert code == 1 and "counterexample" in out


def test_check_writes_a_certificate_file_the_checker_accepts(prog, capsys):
    """--certify --certificate F.safetensors bundles the certificate with the weights; check-certificate with
    the program file re-checks it (exit 0), and against another program of the file rejects it (exit 1)."""
    code, out, err = run(capsys, "check", "mine.py", *ABC, "--max-seq-len", "5", "--certify", "--mlp-exactness",
                         "1000", "--samples", "20", "--hypothesis", "5", "--certificate", "c.safetensors")
    assert code == 0, out + err
    assert "certificate (" in out and "bundled with the model in c.safetensors" in out
    code, out, err = run(capsys, "check-certificate", "c.safetensors", "--program", "mine.py:program")
    assert code == 0 and out.startswith("valid (tables route"), out + err
    code, out, err = run(capsys, "check-certificate", "c.safetensors", "--program", "mine.py:shifted")
    assert code in (1, 2) and not out.startswith("valid"), out + err


def test_certificate_needs_certify_and_an_uncertified_run_writes_none(prog, capsys):
    code, _, err = run(capsys, "check", "mine.py", *ABC, "--max-seq-len", "4", "--certificate", "c.json")
    assert code == 2 and "--certificate needs --certify" in err and not (prog / "c.json").exists()
    # a .json path: the certificate there, the model beside it; the checker finds the model by that name
    code, out, err = run(capsys, "check", "mine.py", *ABC, "--max-seq-len", "4", "--certify", "--samples", "20",
                         "--hypothesis", "5", "--certificate", "c.json")
    assert code == 0 and "certificate written to c.json" in out and "model to c.safetensors" in out, out + err
    assert run(capsys, "check-certificate", "c.json", "--program", "mine.py:program")[0] == 0
    # tracr's default MLP discretisation leaves the reverse head uncertified at n = 8 (README): no file, and why
    code, out, err = run(capsys, "check", "mine.py", *ABC, "--max-seq-len", "8", "--certify", "--samples", "20",
                         "--hypothesis", "5", "--certificate", "d.json")
    assert code == 0, out + err
    assert "no certificate file written: not certified" in out
    assert not (prog / "d.json").exists() and not (prog / "d.safetensors").exists()
