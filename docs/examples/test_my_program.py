"""Example: tests of your own RASP program with ``depthcraft.testing`` (pytest + hypothesis).

Copy this file into your project's tests and replace the program and its reference. Run it with
``pytest -q test_my_program.py``. It shows three levels:

1. the whole verifier in one assert (``testing.assert_program``): the structure against a bound,
   random + edge-case + hypothesis checks and, here, a certificate for every input up to N; a
   failure raises AssertionError with the shrunk counterexample;
2. a hypothesis property test (``testing.inputs`` + ``testing.assert_matches``): inputs that
   favour the edge cases where compiled RASP goes wrong (all-equal, no repeats, maximal length,
   ...), the model compiled once, a failing input shrunk by hypothesis;
3. what a failure looks like: a wrong reference makes ``assert_program`` raise, naming the input,
   the expected and the got outputs.

The program here is a histogram (how often each token occurs), as in tracr's ``make_hist``.
"""

import pytest
from hypothesis import given, settings
from tracr.rasp import rasp

from depthcraft import testing

VOCAB = ["a", "b", "c"]
MAX_LEN = 8  # at 10 or more tracr's SelectorWidth breaks on all-equal inputs (docs/pitfalls.md)

# Your program: hist_i = number of positions holding the same token as position i.
HIST = rasp.SelectorWidth(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.EQ)).named("hist")


def reference(xs):
    """What the program should compute, written plainly."""
    return [xs.count(x) for x in xs]


def test_hist_meets_its_bound_and_is_certified():
    report = testing.assert_program(HIST, vocab=VOCAB, max_seq_len=MAX_LEN, reference=reference,
                                    bound={"attn_layers": 1, "heads": 1}, certify=True)
    assert report["structure"]["attn_layers"] == 1  # one SelectorWidth: one head, then an MLP
    assert report["certificate"]["certified"]  # proved for every input of length 1..8, not sampled


@settings(max_examples=60, deadline=None)
@given(testing.inputs(VOCAB, max_len=MAX_LEN))
def test_hist_on_any_input(xs):
    testing.assert_matches(HIST, xs, reference, vocab=VOCAB, max_seq_len=MAX_LEN)


def test_a_wrong_reference_fails_with_its_counterexample():
    with pytest.raises(AssertionError) as failure:
        testing.assert_program(HIST, vocab=VOCAB, max_seq_len=MAX_LEN, reference=lambda xs: [1] * len(xs))
    message = str(failure.value)
    assert "counterexample" in message and "expected" in message and "got" in message
