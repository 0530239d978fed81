"""khop_doubling and khop_rasp: exact and at their bounds (or honestly failing, for the baseline)."""

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from depthcraft.verify import lookup
from depthcraft.constructions.errors import ParameterError
from depthcraft.rasp_programs.khop import BOT, check_k, doubling_layers
from depthcraft.verify.checks import predict
from depthcraft.verify.tasks.khop import hop_k
from depthcraft.verify.verifier import verify


def test_bound_formula_is_ceil_log2_plus_2():
    for k in range(1, 70):
        assert doubling_layers(k) == math.ceil(math.log2(k)) + 2 == (k - 1).bit_length() + 2


@pytest.mark.parametrize("k", [1, 2, 3, 5, 7, 8])
def test_khop_doubling_exact_at_bound_small(k):
    r = verify("khop_doubling", {"k": k, "n": 12, "vocab": 3}, samples=300, hypothesis_examples=30)
    assert r["structure"]["attn_layers"] == math.ceil(math.log2(k)) + 2
    assert r["structure"]["heads"] == 1 and r["structure"]["mlp_layers"] == 0
    assert r["bound_ok"] and r["passed"], r["counterexample"]
    assert r["checks"]["edge"]["exact"] and r["checks"]["random"]["inputs"] == 300
    assert r["min_margin"]["attention"] > 0.999


@pytest.mark.parametrize("k", [4, pytest.param(16, marks=pytest.mark.slow)])  # k = 4 keeps it in the default run
def test_khop_doubling_paper_size(k):
    r = verify("khop_doubling", {"k": k, "n": 100, "vocab": 4}, samples=300, hypothesis_examples=20)
    assert r["structure"]["attn_layers"] == math.ceil(math.log2(k)) + 2 and r["structure"]["heads"] == 1
    assert r["passed"], r["counterexample"]


def test_khop_doubling_exhaustive():
    r = verify("khop_doubling", {"k": 3, "n": 7, "vocab": 3}, samples=0, exhaustive=True, hypothesis_examples=0)
    assert r["checks"]["exhaustive"] == {"inputs": 3 ** 7, "exact": True, "failed": 0, "counterexample": None}
    assert r["passed"]


_models = {}


@settings(max_examples=12)
@given(k=st.integers(1, 6), n=st.integers(1, 10), vocab=st.integers(1, 4), data=st.data())
def test_khop_doubling_property(k, n, vocab, data):
    """For any (k, n, vocab) and any input of any length <= n, the compiled model computes hop_k."""
    c = lookup.get("khop_doubling")
    model = lookup.resolve(c, {"k": k, "n": n, "vocab": vocab, "distribution": "uniform"}).build()
    seqs = data.draw(st.lists(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=n), min_size=1, max_size=4))
    for s in seqs:
        x = np.asarray([s])
        got = predict(model, x, BOT)[0]
        assert got.tolist() == hop_k(x, k).tolist(), (k, n, vocab, s)


def test_khop_doubling_every_alphabet_size_and_length_prefix():
    # causal: the output on a prefix equals the prefix of the output (so exact at n covers every length)
    c = lookup.get("khop_doubling")
    model = lookup.resolve(c, {"k": 3, "n": 20, "vocab": 7}).build()
    x = np.random.default_rng(0).integers(0, 7, size=(64, 20))
    full = predict(model, x, BOT)[0]
    for length in (1, 5, 13):
        assert (predict(model, x[:, :length], BOT)[0] == full[:, :length]).all()
    assert (full == hop_k(x, 3)).all()


def test_khop_rasp_baseline_exact_small_and_fails_where_tracr_breaks():
    small = verify("khop_rasp", {"k": 1, "n": 8, "vocab": 3}, samples=300, hypothesis_examples=30)
    assert small["passed"]
    # SPEC §8: SelectorWidth goes wrong on all-equal inputs from length 10: the verifier must say so.
    big = verify("khop_rasp", {"k": 1, "n": 16, "vocab": 3}, samples=100, hypothesis_examples=50)
    assert not big["passed"] and not big["checks"]["edge"]["exact"]
    cx = big["counterexample"]
    x = np.asarray([cx["tokens"]])
    assert cx["expected"] == hop_k(x, 1)[0].tolist() and cx["got"] != cx["expected"]
    # the depth is measured from the weights: one more than khop_doubling's ceil(log2 1)+2 = 2, at every n
    assert big["structure"]["attn_layers"] == small["structure"]["attn_layers"] == 3


def test_k_zero_and_negative_are_rejected():
    c = lookup.get("khop_doubling")
    for k in (0, -1):
        with pytest.raises(ParameterError, match=f"k={k} is below the minimum 1"):
            lookup.resolve(c, {"k": k})
        with pytest.raises(ParameterError, match="k must be >= 1"):  # the program's own check, below the CLI
            check_k(k)
