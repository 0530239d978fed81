"""Example: property tests for your own RASP program with depthcraft's hypothesis kit.

Copy this file into your project's tests and replace the program and its reference. Run it with
``pytest -q test_my_program.py``. It shows three levels:

1. a hypothesis property test of the compiled model against your reference, on inputs that favour
   the edge cases where compiled RASP goes wrong (all-equal, no repeats, maximal length, ...);
2. the whole verifier in one call (``check_program``): structure vs. a bound, random + edge +
   hypothesis checks, a shrunk counterexample on failure;
3. a registered construction checked with its task's own input strategy.

The program here is a histogram (how often each token occurs), as in tracr's ``make_hist``.
"""

import numpy as np
from hypothesis import given, settings
from tracr.rasp import rasp

from depthcraft.verify import lookup
from depthcraft.constructions.compiler import compile_program
from depthcraft import check_program
from depthcraft.verify.strategies import construction_inputs, token_sequences
from depthcraft.verify.tasks.khop import hop_k

VOCAB = ["a", "b", "c"]
MAX_LEN = 8  # at 10 or more tracr's SelectorWidth breaks on all-equal inputs (docs/pitfalls.md)

# Your program: hist_i = number of positions holding the same token as position i.
HIST = rasp.SelectorWidth(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.EQ)).named("hist")
MODEL = compile_program(HIST, vocab=VOCAB, max_seq_len=MAX_LEN, causal=False)  # bidirectional, like RASP


def reference(xs):
    """What the program should compute, written plainly."""
    return [xs.count(x) for x in xs]


@settings(max_examples=60, deadline=None)
@given(token_sequences(VOCAB, max_len=MAX_LEN))
def test_compiled_hist_matches_reference(xs):
    got = MODEL.run([xs])[0].tolist()  # one input: [1, n] -> outputs at positions 1..n
    assert got == reference(xs)


def test_hist_report_within_bound():
    report = check_program(HIST, vocab=VOCAB, max_seq_len=MAX_LEN, reference=reference,
                           bound={"attn_layers": 1, "heads": 1}, samples=200, hypothesis_examples=30)
    assert report["passed"], report["counterexample"]
    assert report["structure"]["attn_layers"] == 1  # one SelectorWidth: one head, then an MLP


@settings(max_examples=30, deadline=None)
@given(construction_inputs("khop_doubling", k=3, n=10, vocab=3))
def test_registered_construction_with_its_task_strategy(xs):
    model = lookup.resolve("khop_doubling", {"k": 3, "n": 10, "vocab": 3}).build()
    got = model.run([xs], none_value=-1)[0]
    assert got.tolist() == hop_k(np.asarray([xs]), 3)[0].tolist()  # the definition (Sanford et al., Def. 4.1)
