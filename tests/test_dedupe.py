"""Compile-time dedupe (constructions/dedupe.py): identical SOps are stored once, distinct ones kept,
the computed function, the depth and the heads unchanged."""

import itertools

import numpy as np
import pytest
from tracr.rasp import rasp

from depthcraft.constructions.compiler import compile_program, without_dedupe
from depthcraft.constructions.dedupe import dedupe_program
from depthcraft.constructions.reference import evaluate
from depthcraft.rasp_programs.khop import BOT, khop_doubling
from depthcraft.verify.structure import measure
from depthcraft.verify.tasks.khop import hop_k


def names(model, sop_name):
    """Residual directions of the SOp called ``sop_name`` (labels are ``name_id:value``)."""
    return [lab for lab in model.residual_labels if lab.rsplit("_", 1)[0] == sop_name and ":" in lab]


def exhaustive_outputs(model, vocab, n):
    xs = np.array(list(itertools.product(vocab, repeat=n)))
    return model.run(xs)


def test_two_identical_maps_share_one_subspace():
    f = lambda x: (x + 1) % 3  # noqa: E731
    a = rasp.Map(f, rasp.tokens).named("a")
    b = rasp.Map(f, rasp.tokens).named("b")  # the same expression, stored twice without the dedupe
    out = rasp.SequenceMap(lambda x, y: 3 * x + y, a, b).named("out")
    assert dedupe_program(out).merged == (("b", "a"),)
    plain = compile_program(out, vocab=range(3), max_seq_len=4, causal=False, dedupe=False)
    deduped = compile_program(out, vocab=range(3), max_seq_len=4, causal=False)
    assert len(names(plain, "a")) == len(names(plain, "b")) == 3
    assert len(names(deduped, "a")) == 3 and names(deduped, "b") == []
    assert deduped.meta["deduped"] == [["b", "a"]]
    assert len(deduped.residual_labels) < len(plain.residual_labels)
    # Outputs unchanged, on every input of length 4, and equal to the RASP definition.
    got = exhaustive_outputs(deduped, range(3), 4)
    assert np.array_equal(got, exhaustive_outputs(plain, range(3), 4))
    for x, row in zip(itertools.product(range(3), repeat=4), got):
        assert row.tolist() == [3 * ((t + 1) % 3) + (t + 1) % 3 for t in x]


def test_distinct_expressions_are_kept():
    def shifted(c):
        return rasp.Map(lambda x: (x + c) % 3, rasp.tokens)  # same code, different captured value

    one, two, one_again = shifted(1).named("one"), shifted(2).named("two"), shifted(1).named("one_again")
    assert dedupe_program(rasp.SequenceMap(lambda x, y: (x, y), one, two)).merged == ()
    # Same code, same captured value: identical.
    assert dedupe_program(rasp.SequenceMap(lambda x, y: (x, y), one, one_again)).merged == (("one_again", "one"),)
    # Different functions, different children, different encodings: all kept.
    f, g = (lambda x: x + 1), (lambda x: x + 1)
    assert dedupe_program(rasp.SequenceMap(lambda x, y: (x, y), rasp.Map(f, rasp.tokens),
                                           rasp.Map(g, rasp.tokens))).merged == ()
    assert dedupe_program(rasp.SequenceMap(lambda x, y: (x, y), rasp.Map(f, rasp.tokens),
                                           rasp.Map(f, rasp.indices))).merged == ()
    num = rasp.numerical(rasp.Map(f, rasp.tokens))
    cat = rasp.categorical(rasp.Map(f, rasp.tokens))
    assert dedupe_program(rasp.SequenceMap(lambda x, y: (x, y), num, cat)).merged == ()


def test_khop_doubling_k8_stores_r1_once_with_the_same_outputs():
    """k = 8: the partial pointer R1 is find2 (bit 0 of k-1 is 1); N + 1 one-hot directions are saved."""
    n, vocab = 12, 3
    program = khop_doubling(8)
    plain = compile_program(program, vocab=range(vocab), max_seq_len=n, dedupe=False)
    deduped = compile_program(program, vocab=range(vocab), max_seq_len=n)
    assert deduped.meta["deduped"] == [["R1", "find2"]]
    assert len(names(plain, "R1")) == n + 1 and names(deduped, "R1") == []
    assert len(names(deduped, "find2")) == n + 1
    sp, sd = measure(plain), measure(deduped)
    assert sd["d_model"] == sp["d_model"] - (n + 1)
    assert (sd["attn_layers"], sd["heads"], sd["mlp_layers"]) == (sp["attn_layers"], sp["heads"], sp["mlp_layers"]) \
        == (5, 1, 0)
    rng = np.random.default_rng(0)
    x = rng.integers(0, vocab, size=(300, n))
    out = deduped.run(x, none_value=BOT)
    assert np.array_equal(out, plain.run(x, none_value=BOT))
    assert np.array_equal(out, hop_k(x, 8))


def test_dedupe_leaves_the_input_program_unchanged_and_labels_kept():
    program = khop_doubling(16)
    before = [(e.label, [c.label for c in e.children]) for e in _walk(program)]
    d = dedupe_program(program)
    assert d.merged == (("R1", "find2"), ("R2", "find4"))
    assert [(e.label, [c.label for c in e.children]) for e in _walk(program)] == before
    assert d.program.label == program.label
    labels = {e.label for e in _walk(d.program)}
    assert not any(lab.startswith(("R1_", "R2_")) for lab in labels)
    # The reference semantics of the deduped program is the original's.
    x = [0, 1, 0, 1, 1, 0, 1, 0, 0, 1]
    assert evaluate(d.program, x) == evaluate(program, x)


def test_nothing_to_merge_returns_the_program_itself():
    program = khop_doubling(5)
    d = dedupe_program(program)
    assert d.merged == () and d.program is program


def test_without_dedupe_applies_to_builders_that_leave_it_unset():
    program = khop_doubling(8)
    with without_dedupe():
        wide = compile_program(program, vocab=range(3), max_seq_len=6)
    narrow = compile_program(program, vocab=range(3), max_seq_len=6)
    assert wide.meta["deduped"] == [] and narrow.meta["deduped"] == [["R1", "find2"]]
    assert len(wide.residual_labels) - len(narrow.residual_labels) == 7


def test_savings_report_for_khop_doubling_k8():
    from depthcraft.verify.widths import savings

    r = savings("khop_doubling", {"k": 8, "n": 24, "vocab": 3})
    assert (r["d_model_before"] - r["d_model_after"], r["saved"]) == (25, 25)
    assert r["merged"] == [["R1", "find2"]] and (r["attn_layers"], r["heads"]) == (5, 1)


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 7])
def test_no_merge_for_these_k(k):
    """R_m equals find^(2^m) while the bits of k-1 below m are all 1, and it is stored only when a later
    look-up reads it (not in the last layer): k = 8 and 16 merge; for these k no SOp is duplicated."""
    assert dedupe_program(khop_doubling(k)).merged == ()


def _walk(sink):
    seen, out, stack = set(), [], [sink]
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        out.append(e)
        stack.extend(e.children)
        if hasattr(e, "head"):
            stack.append(e.head)
    return out


def test_dedupe_cli(tmp_path, capsys):
    import json

    from depthcraft.verify import cli

    def run(*args):
        with pytest.raises(SystemExit) as e:
            cli.main(list(args))
        out = capsys.readouterr()
        return e.value.code, out.out, out.err

    path = tmp_path / "d.json"
    code, out, err = run("dedupe", "khop_doubling", "-p", "k=8", "-p", "n=12", "-p", "vocab=3", "--json", str(path))
    assert code == 0 and err == ""
    assert "d_model 89 -> 76 (saved 13); merged: R1=find2" in out
    row = json.loads(path.read_text())["rows"][0]
    assert (row["d_model_before"], row["d_model_after"], row["saved"]) == (89, 76, 13)
    code, out, err = run("dedupe")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "NAME or --all" in err
