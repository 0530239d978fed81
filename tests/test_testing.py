"""depthcraft.testing: the pytest/hypothesis helpers for users' own programs (issue 40, item 3)."""

import pytest
from hypothesis import given, settings
from tracr.rasp import rasp

from depthcraft import testing
from depthcraft.constructions.errors import ParameterError

VOCAB = ["a", "b", "c"]
# reverse: out_i = x_{n-1-i} (RASP indices 0-based)
LENGTH = rasp.SelectorWidth(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.TRUE))
OPP = rasp.SequenceMap(lambda n, i: n - i - 1, LENGTH, rasp.indices)
REVERSE = rasp.Aggregate(rasp.Select(rasp.indices, OPP, rasp.Comparison.EQ), rasp.tokens).named("reverse")


def test_a_passing_program_returns_its_report():
    report = testing.assert_program(REVERSE, vocab="abc", max_seq_len=5, reference=lambda xs: xs[::-1],
                                    bound={"attn_layers": 2, "heads": 1}, samples=50, hypothesis_examples=10)
    assert report["passed"] and report["structure"]["attn_layers"] == 2 and report["structure"]["heads"] == 1


def test_a_wrong_reference_raises_with_the_shrunk_counterexample():
    # identity instead of reverse: the shortest input where they differ is two distinct tokens, "a b"
    with pytest.raises(AssertionError) as e:
        testing.assert_program(REVERSE, vocab=VOCAB, max_seq_len=5, reference=lambda xs: list(xs), samples=50,
                               hypothesis_examples=20)
    lines = str(e.value).splitlines()
    assert lines[0].startswith("reverse") and "differs from the reference" in lines[0]
    assert "shrunk" in lines[1]
    assert [ln.split() for ln in lines[2:6]] == [["position", "1", "2"], ["input", "a", "b"],
                                                 ["expected", "a", "b"], ["got", "b", "a"]]


def test_a_bound_not_met_is_named():
    with pytest.raises(AssertionError, match=r"attn_layers = 2, above the bound 1"):
        testing.assert_program(REVERSE, vocab=VOCAB, max_seq_len=4, reference=lambda xs: xs[::-1],
                               bound={"attn_layers": 1}, samples=20, hypothesis_examples=5)


def test_assert_matches_names_the_input_and_the_outputs():
    testing.assert_matches(REVERSE, ["a", "b", "c"], lambda xs: xs[::-1], vocab=VOCAB, max_seq_len=5)
    testing.assert_matches(REVERSE, ["c", "a"], vocab=VOCAB, max_seq_len=5)  # default: the RASP semantics
    with pytest.raises(AssertionError) as e:
        testing.assert_matches(REVERSE, ["a", "b", "c"], lambda xs: ["a", "b", "c"], vocab=VOCAB, max_seq_len=5)
    rows = [ln.split() for ln in str(e.value).splitlines()[1:5]]
    assert rows == [["position", "1", "2", "3"], ["input", "a", "b", "c"], ["expected", "a", "b", "c"],
                    ["got", "c", "b", "a"]]


def test_the_model_is_compiled_once():
    assert testing.compiled(REVERSE, VOCAB, 5) is testing.compiled(REVERSE, VOCAB, 5)
    assert testing.compiled(REVERSE, VOCAB, 5) is not testing.compiled(REVERSE, VOCAB, 4)


@settings(max_examples=40, deadline=None)
@given(testing.inputs("abc", max_len=5, min_len=2))
def test_inputs_are_token_lists_within_the_lengths(xs):
    assert isinstance(xs, list) and 2 <= len(xs) <= 5 and set(xs) <= set(VOCAB)


def test_bad_arguments_are_parameter_errors():
    with pytest.raises(ParameterError, match="needs vocab= and max_seq_len="):
        testing.assert_matches(REVERSE, ["a"])
    with pytest.raises(ParameterError, match="max_len=1 is below min_len=2"):
        testing.inputs(VOCAB, max_len=1, min_len=2)
