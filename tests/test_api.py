"""The Python API (verify.api.check_program) on users' own RASP programs and on registered constructions."""

import json

import numpy as np
import pytest
from hypothesis import strategies as st
from tracr.rasp import rasp

from depthcraft.constructions.compiler import compile_program
from depthcraft.constructions.errors import CompileError, ParameterError
from depthcraft import ANY, check_program
from depthcraft.verify.tasks.khop import hop_k

FAST = dict(samples=64, hypothesis_examples=15)


def make_hist():
    return rasp.SelectorWidth(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.EQ)).named("hist")


def make_reverse():
    length = rasp.SelectorWidth(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.TRUE)).named("length")
    opp = rasp.SequenceMap(lambda n, i: n - i - 1, length, rasp.indices).named("opp")
    return rasp.Aggregate(rasp.Select(rasp.indices, opp, rasp.Comparison.EQ), rasp.tokens).named("reverse")


def hist_reference(xs):
    return [xs.count(x) for x in xs]


@pytest.fixture(scope="module")
def hist_model():
    """hist compiled once (vocab 0..2, N = 5); tests reuse it (and its XLA compilations)."""
    return compile_program(make_hist(), vocab=[0, 1, 2], max_seq_len=5, causal=False)


@pytest.fixture(scope="module")
def reverse_report():
    return check_program(make_reverse(), vocab={"a", "b", "c"}, max_seq_len=8, reference=lambda xs: xs[::-1],
                         bound={"attn_layers": 2, "heads": 1}, **FAST)


def test_reverse_within_bound_passes(reverse_report):
    r = reverse_report
    assert r["passed"] is True and r["bound_ok"] is True
    # length (SelectorWidth: attention + MLP), opp (MLP), reverse (attention): 2 attention layers, 1 head each.
    assert r["structure"]["attn_layers"] == 2 and r["structure"]["heads"] == 1
    assert r["bound_checks"]["attn_layers"] == {"measured": 2, "bound": 2, "kind": "upper", "gap": 0, "ok": True}
    assert r["checks"]["random"]["inputs"] == 64 and r["checks"]["random"]["exact"]
    assert r["checks"]["edge"]["inputs"] > 0 and r["checks"]["edge"]["exact"]
    assert r["checks"]["exhaustive"] is None
    assert r["task"] == "program" and r["params"]["max_seq_len"] == 8 and r["params"]["vocab"] == ["a", "b", "c"]
    json.dumps(r, allow_nan=False)  # the report is strict JSON


def test_bound_too_small_fails_with_gap(hist_model):
    r = check_program(hist_model, reference=hist_reference, bound={"attn_layers": 0}, **FAST)
    assert r["checks"]["random"]["exact"]  # exact, but the bound does not hold
    assert r["bound_ok"] is False and r["passed"] is False
    assert r["bound_checks"]["attn_layers"] == {"measured": 1, "bound": 0, "kind": "upper", "gap": -1, "ok": False}


def test_default_reference_is_the_rasp_semantics():
    r = check_program(make_hist(), vocab=[0, 1, 2], max_seq_len=5, **FAST)
    assert r["passed"] is True


def test_failure_carries_shrunk_counterexample():
    # reverse at max_seq_len 12: tracr's SelectorWidth (length) is wrong from length 10 on (SPEC §8).
    r = check_program(make_reverse(), vocab=["a", "b", "c"], max_seq_len=12, reference=lambda xs: xs[::-1],
                      samples=32, hypothesis_examples=30)
    assert r["passed"] is False
    cx = r["counterexample"]
    assert cx["shrunk"] is True
    assert len(cx["tokens"]) == 10  # the shortest failing length
    assert cx["expected"] == cx["tokens"][::-1]
    assert cx["got"] != cx["expected"]
    assert all(cx["got"][p - 1] != cx["expected"][p - 1] for p in cx["positions"])
    for name in ("random", "edge"):
        c = r["checks"][name]
        assert c["exact"] is False and c["counterexample"]["shrunk"] is True
        assert len(c["counterexample"]["tokens"]) == 10
    json.dumps(r, allow_nan=False)


def test_exhaustive_counts_every_length(hist_model):
    r = check_program(hist_model, reference=hist_reference, exhaustive=True, samples=0, hypothesis_examples=0)
    assert r["checks"]["exhaustive"]["inputs"] == 3 + 9 + 27 + 81 + 243
    assert r["checks"]["exhaustive"]["exact"] and r["checks"]["random"] is None and r["passed"]


def test_any_marks_unscored_positions(hist_model):
    # Only the last position is scored.
    r = check_program(hist_model, samples=32, hypothesis_examples=10,
                      reference=lambda xs: [ANY] * (len(xs) - 1) + [xs.count(xs[-1])])
    assert r["passed"] is True
    wrong = check_program(hist_model, samples=32, hypothesis_examples=10,
                          reference=lambda xs: [ANY] * (len(xs) - 1) + [-1])
    assert wrong["passed"] is False and wrong["counterexample"]["positions"] == [len(wrong["counterexample"]["tokens"])]


def test_reference_that_raises_is_a_failure(hist_model):
    def ref(xs):
        if len(xs) >= 3:
            raise ValueError("undefined here")
        return hist_reference(xs)

    r = check_program(hist_model, reference=ref, samples=16, hypothesis_examples=10)
    assert r["passed"] is False
    cx = r["counterexample"]
    assert len(cx["tokens"]) == 3 and cx["expected"][0] == "error: ValueError: undefined here"


def test_numerical_output_compared_with_tolerance():
    from tracr.compiler.lib import make_frac_prevs

    prog = make_frac_prevs(rasp.tokens == "x")

    def frac(xs):  # the fraction of "x" among x_1..x_i
        return [sum(t == "x" for t in xs[:i + 1]) / (i + 1) for i in range(len(xs))]

    r = check_program(prog, vocab=["x", "y"], max_seq_len=5, reference=frac, **FAST)
    assert r["passed"] is True
    model = compile_program(prog, vocab=["x", "y"], max_seq_len=5, causal=False)
    off = check_program(model, reference=lambda xs: [v + 0.01 for v in frac(xs)], **FAST)
    assert off["passed"] is False and off["counterexample"]["tokens"] == ["x"]


def test_construction_by_name_with_task_reference():
    r = check_program("khop_doubling", params={"k": 2, "n": 8, "vocab": 3}, **FAST)
    assert r["passed"] is True and r["construction"] == "khop_doubling"
    assert r["bound"] == {"attn_layers": 3, "heads": 1, "d_model": None}


def test_construction_with_wrong_user_reference_fails():
    # hop_1 is not what khop_doubling k=2 computes: the verifier must say so, with the right expected values.
    r = check_program("khop_doubling", params={"k": 2, "n": 8, "vocab": 3}, samples=32, hypothesis_examples=10,
                      reference=lambda xs: hop_k(np.asarray([xs]), 1)[0].tolist())
    assert r["passed"] is False
    cx = r["counterexample"]
    assert cx["expected"] == hop_k(np.asarray([cx["tokens"]]), 1)[0].tolist()
    assert cx["got"] == hop_k(np.asarray([cx["tokens"]]), 2)[0].tolist()


def test_construction_with_user_bound():
    r = check_program("khop_doubling", params={"k": 2, "n": 8, "vocab": 3}, bound={"attn_layers": 2},
                      samples=16, hypothesis_examples=0)
    assert r["bound_checks"]["attn_layers"] == {"measured": 3, "bound": 2, "kind": "upper", "gap": -1, "ok": False}
    assert r["passed"] is False


@pytest.mark.parametrize("kwargs, message", [
    (dict(bound={"layers": 2}), "unknown bound key 'layers'"),
    (dict(bound={"heads": -1}), "bound heads=-1"),
    (dict(bound={"heads": 1.5}), "bound heads=1.5"),
    (dict(max_seq_len=0), "max_seq_len must be an integer >= 1, got 0"),
    (dict(max_seq_len="8"), "max_seq_len must be an integer >= 1, got '8'"),
    (dict(max_seq_len=10 ** 6), "max_seq_len=1000000 is above the limit"),
    (dict(vocab=[]), "vocab is empty"),
    (dict(vocab=None), "needs vocab"),
    (dict(compiler="gcc"), "compiler='gcc'"),
    (dict(reference=42), "reference must be a function"),
    (dict(samples=-1), "samples must be an integer in 0..10000000, got -1"),
    (dict(samples=10**20), "samples must be an integer in 0..10000000"),
    (dict(hypothesis_examples=2.5), "hypothesis_examples must be an integer in 0..10000000, got 2.5"),
    (dict(strategy=[1, 2]), "strategy must be a hypothesis strategy"),
    (dict(seed="x"), "seed must be an integer"),
    (dict(seed=-1), "seed must be an integer in 0..4294967295, got -1"),
    (dict(mlp_exactness=0), "mlp_exactness must be an integer >= 1, got 0"),
    (dict(atol="x"), "atol must be a number >= 0"),
    (dict(vocab=[[0], [1]]), "vocab values must be hashable"),
    (dict(strategy=st.just(5), hypothesis_examples=3), "the strategy must generate lists of tokens, got 5"),
    (dict(strategy=st.just([]), hypothesis_examples=3), "the strategy generated an empty input"),
    (dict(strategy=st.just([0, 7]), hypothesis_examples=3), "the strategy generated token 7"),
    (dict(strategy=st.just([0] * 5), hypothesis_examples=3), "an input of length 5 > max_seq_len=4"),
    (dict(attention="x"), "attention must be 'softmax' or 'relu', got 'x'"),
])
def test_bad_arguments_raise_parameter_error(kwargs, message):
    args = dict(vocab=[0, 1], max_seq_len=4, samples=8, hypothesis_examples=0)
    args.update(kwargs)
    with pytest.raises(ParameterError, match=message.replace("(", r"\(").replace(".", r"\.")):
        check_program(make_hist(), **args)


def test_a_function_that_fails_inside_tracr_is_a_compile_error():
    partial = rasp.Map(lambda x: {0: 1}[x], rasp.tokens).named("partial")  # undefined on token 1
    # the message names the node, the exception and the value it fails on
    with pytest.raises(CompileError, match=r"cannot compile partial\S*: Map 'partial\S*' raises KeyError: 1 on the "
                                           r"value 1 of tokens"):
        check_program(partial, vocab={0, 1}, max_seq_len=3, samples=5, hypothesis_examples=0)
    pair = rasp.SequenceMap(lambda a, i: a // i, rasp.tokens, rasp.indices).named("ratio")
    with pytest.raises(CompileError, match="SequenceMap 'ratio\\S*' raises ZeroDivisionError: .* on the values 0 of "
                                           "tokens and 0 of indices"):
        check_program(pair, vocab={0, 1}, max_seq_len=3, samples=5, hypothesis_examples=0)


def test_bad_program_and_construction():
    with pytest.raises(ParameterError, match="program must be a RASP SOp"):
        check_program(3.14, vocab=[0], max_seq_len=2)
    with pytest.raises(ParameterError, match="unknown construction 'nope'"):
        check_program("nope")
    with pytest.raises(ParameterError, match="k=0 is below the minimum 1"):
        check_program("khop_doubling", params={"k": 0})
    with pytest.raises(ParameterError, match="unknown parameter 'depth'"):
        check_program("khop_doubling", params={"depth": 3})
    with pytest.raises(ParameterError, match="pass them in params"):
        check_program("khop_doubling", vocab=[0, 1])
    with pytest.raises(CompileError, match="BOS"):
        check_program(make_hist(), vocab=["BOS", "a"], max_seq_len=3)


def test_reference_returning_wrong_length_is_a_clear_error(hist_model):
    with pytest.raises(ParameterError, match="returned 1 outputs for an input of"):
        check_program(hist_model, reference=lambda xs: [0], samples=4, hypothesis_examples=0)


def test_model_without_construction_needs_a_reference(hist_model):
    with pytest.raises(ParameterError, match="give a reference function"):
        check_program(hist_model)
