"""SPEC §8: every known tracr pitfall is reported by the verifier as a failure or a compile error, never a pass.

Expected values come from the definitions (the function each program's author meant, or RASP's own
semantics), never from the compiled model.
"""

import numpy as np
import pytest

from depthcraft.constructions.compiler import compile_program, compile_with_tracr
from depthcraft.constructions.errors import CompileError
from depthcraft.rasp_programs import pitfalls
from depthcraft import check_program
from depthcraft.verify.tasks.khop import hop_k

FAST = dict(samples=200, hypothesis_examples=30)


def assert_fails_with(report):
    assert report["passed"] is False and report["exact"] is False
    cx = report["counterexample"]
    assert cx is not None and cx["positions"] and cx["shrunk"] is True
    return cx


def test_categorical_aggregate_over_several_positions():
    program = pitfalls.first_token_non_unique()
    r = check_program(program, vocab=[0, 1, 2], max_seq_len=6, reference=lambda xs: [xs[0]] * len(xs), **FAST)
    cx = assert_fails_with(r)
    assert cx["expected"] == [cx["tokens"][0]] * len(cx["tokens"])
    assert len(cx["tokens"]) == 2 and cx["tokens"][0] != cx["tokens"][1]  # two distinct tokens suffice
    # Against RASP's own semantics it fails too (the evaluator averages: 0.5 is no token).
    assert_fails_with(check_program(program, vocab=[0, 1, 2], max_seq_len=6, **FAST))


def test_none_from_aggregate_chain_read_as_a_value():
    r = check_program(pitfalls.none_read_downstream(), vocab=[0, 1, 2], max_seq_len=6, **FAST)
    cx = assert_fails_with(r)
    # RASP: at position 1, x_{i-2} is None and k != None holds for every key, so the count is n.
    n = len(cx["tokens"])
    assert n == 1 and cx["expected"] == [1] and cx["got"] == [0]
    assert r["checks"]["random"]["failed"] == r["checks"]["random"]["inputs"]  # every input


def test_selector_width_on_all_equal_inputs_from_length_10():
    r = check_program(pitfalls.histogram(), vocab=[0, 1, 2, 3], max_seq_len=12,
                      reference=lambda xs: [xs.count(x) for x in xs], seed=0, **FAST)
    cx = assert_fails_with(r)
    assert cx["tokens"] == [0] * 10 and cx["expected"] == [10] * 10
    assert r["checks"]["edge"]["exact"] is False
    # Uniform random inputs (12 tokens over 4) reach a count of 10 with probability ~1.4e-4 each:
    # with this seed the 200 random inputs miss the bug; the edge cases catch it.
    assert r["checks"]["random"]["exact"] is True
    # length (tracr's make_length) has the same MLP and fails on every input of length >= 10.
    cx = assert_fails_with(check_program(pitfalls.length(), vocab=[0, 1], max_seq_len=12,
                                         reference=lambda xs: [len(xs)] * len(xs), **FAST))
    assert len(cx["tokens"]) == 10


def test_khop_rasp_baseline_breaks_on_edge_cases_at_n16():
    r = check_program("khop_rasp", params={"k": 1, "n": 16, "vocab": 3}, samples=200, hypothesis_examples=30)
    cx = assert_fails_with(r)
    assert cx["expected"] == hop_k(np.asarray([cx["tokens"]]), 1)[0].tolist()
    assert len(set(cx["tokens"])) == 1  # all-equal (SelectorWidth counts up to n)
    assert r["checks"]["random"]["exact"] is True  # the paper's distribution (no equal neighbours) misses it
    assert r["checks"]["edge"]["exact"] is False


@pytest.mark.slow
def test_khop_rasp_baseline_wrong_on_most_inputs_at_vocab8_n64():
    r = check_program("khop_rasp", params={"k": 1, "n": 64, "vocab": 8}, samples=200, hypothesis_examples=20)
    assert_fails_with(r)
    assert r["checks"]["random"]["failed"] > 0.5 * r["checks"]["random"]["inputs"]


def test_khop_rasp_baseline_exact_at_small_sizes():
    # The same program is exact on every input at a small size: why small tests are not enough.
    r = check_program("khop_rasp", params={"k": 1, "n": 6, "vocab": 3}, exhaustive=True, samples=0,
                      hypothesis_examples=0)
    assert r["checks"]["exhaustive"]["inputs"] == 3 ** 6 and r["passed"] is True


def test_selector_and_is_a_clear_compile_error():
    for compile_fn in (compile_program, compile_with_tracr):
        with pytest.raises(CompileError, match="Compiling composite Selectors is not supported"):
            compile_fn(pitfalls.selector_and(), vocab=[0, 1], max_seq_len=4, causal=False)
    with pytest.raises(CompileError, match="composite Selectors"):
        check_program(pitfalls.selector_and(), vocab=[0, 1], max_seq_len=4)


def test_comparison_on_none_is_reported_not_passed():
    r = check_program(pitfalls.comparison_on_none(), vocab=[0, 1, 2], max_seq_len=5, **FAST)
    cx = assert_fails_with(r)
    assert len(cx["tokens"]) == 1 and cx["expected"] == ["error: ValueError: key is None!"]
    assert isinstance(cx["got"][0], int)  # the compiled model answers anyway


def test_causal_compile_of_a_bidirectional_program():
    # Not in tracr's issue list but a real trap here: compile_program defaults to causal=True, and a
    # causal model's "length" is the prefix length.
    r = check_program(pitfalls.length(), vocab=[0, 1], max_seq_len=6, causal=True,
                      reference=lambda xs: [len(xs)] * len(xs), **FAST)
    cx = assert_fails_with(r)
    assert cx["tokens"] == [0, 0] and cx["got"] == [1, 2]
