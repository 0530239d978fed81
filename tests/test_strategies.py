"""The hypothesis kit (verify.strategies) and the counterexample shrinker (verify.shrink)."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from tracr.rasp import rasp

from depthcraft.constructions.compiler import compile_program
from depthcraft.constructions.errors import ParameterError
from depthcraft.verify.checks import Counterexample
from depthcraft.verify.shrink import shrink
from depthcraft.verify.strategies import construction_inputs, edge_sequences, task_inputs, token_sequences
from depthcraft.verify.tasks.program import ProgramTask

VOCAB = ["a", "b", "c"]
SEEN = []


@settings(max_examples=300, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(token_sequences(VOCAB, max_len=7, min_len=2))
def _collect(xs):
    SEEN.append(xs)


def test_token_sequences_stay_in_range_and_favour_edge_cases():
    SEEN.clear()
    _collect()
    assert SEEN and all(2 <= len(xs) <= 7 and set(xs) <= set(VOCAB) for xs in SEEN)
    all_equal = sum(len(set(xs)) == 1 for xs in SEEN)
    maximal = sum(len(xs) == 7 for xs in SEEN)
    # Uniform lists over 3 tokens with lengths 2..7 are all-equal with probability < 0.07 and maximal
    # with probability 1/6; the edge-case families make both much more common.
    assert all_equal / len(SEEN) > 0.15
    assert maximal / len(SEEN) > 0.25
    assert any(sorted(xs) == VOCAB for xs in SEEN)  # no token repeated, every token used


def test_edge_sequences_cover_the_families():
    seqs = edge_sequences([2, 0, 1], max_len=5)
    assert [0] * 5 in seqs and [1] * 5 in seqs and [2] * 5 in seqs  # all equal, every token, maximal length
    assert [0, 1, 2] in seqs and [2, 1, 0] in seqs  # no repeats (vocab sorted)
    assert [0] in seqs  # shortest
    assert all(1 <= len(s) <= 5 for s in seqs)
    assert len({tuple(s) for s in seqs}) == len(seqs)
    assert edge_sequences(["x"], max_len=3, min_len=3) == [["x", "x", "x"]]


def test_task_and_construction_strategies():
    seen = []

    @settings(max_examples=40, derandomize=True, database=None, deadline=None)
    @given(task_inputs("khop", k=2, n=12, vocab=4), construction_inputs("khop_doubling", k=2, n=6, vocab=3))
    def collect(a, b):
        seen.append((a, b))

    collect()
    assert all(1 <= len(a) <= 12 and set(a) <= {0, 1, 2, 3} for a, _ in seen)
    assert all(1 <= len(b) <= 6 and set(b) <= {0, 1, 2} for _, b in seen)


@pytest.mark.parametrize("call, message", [
    (lambda: token_sequences([], 3), "vocab is empty"),
    (lambda: token_sequences(5, 3), "vocab must be an iterable"),
    (lambda: token_sequences([0], 3, min_len=0), "min_len must be >= 1"),
    (lambda: token_sequences([0], 2, min_len=3), "max_len=2 is below min_len=3"),
    (lambda: token_sequences([0], "4"), "max_len must be an integer, got '4'"),
    (lambda: task_inputs("nope"), "unknown task 'nope'"),
    (lambda: task_inputs("khop", n=-1), "n=-1 is below the minimum"),
    (lambda: construction_inputs("khop_doubling", k=0), "k=0 is below the minimum 1"),
])
def test_strategy_errors(call, message):
    with pytest.raises(ParameterError, match=message):
        call()


def test_shrink_finds_the_shortest_smallest_failing_input():
    # tracr's length (SelectorWidth of an all-true selector) is wrong from length 10 on at N = 12
    # (SPEC §8): the smallest failing input is ten copies of the smallest token, whatever we start from.
    length = rasp.SelectorWidth(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.TRUE)).named("length")
    model = compile_program(length, vocab=[0, 1, 2], max_seq_len=12, causal=False)
    task = ProgramTask(vocab=[0, 1, 2], max_seq_len=12, reference=lambda xs: [len(xs)] * len(xs))
    start = [2, 1, 0, 2, 2, 1, 0, 1, 2, 2, 1, 0]
    got = model.run(np.asarray([start]))[0].tolist()
    assert got != [12] * 12  # the start input fails
    cx = shrink(model, task, {}, Counterexample("random", start, [12] * 12, got, []))
    assert cx.shrunk and cx.tokens == [0] * 10
    assert cx.expected == [10] * 10 and cx.got != cx.expected
    assert cx.positions == [i + 1 for i in range(10) if cx.got[i] != 10]


def test_shrink_leaves_formatted_tasks_alone():
    class Formatted(ProgramTask):
        free_sequences = False

    task = Formatted(vocab=[0, 1], max_seq_len=3, reference=lambda xs: xs, free_sequences=False)
    cx = Counterexample("edge", [1, 1, 1], [1, 1, 1], [0, 0, 0], [1, 2, 3])
    assert shrink(None, task, {}, cx) is cx
