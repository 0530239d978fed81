"""khop_constant_width: angle positions, width independent of n."""

import math

import numpy as np
import pytest
from tracr.rasp import rasp

from depthcraft.verify import lookup
from depthcraft.constructions.angles import angle_step, position_features
from depthcraft.constructions.compiler import compile_program
from depthcraft.constructions.errors import CompileError
from depthcraft.constructions.primitives import (POSITION, Read, fact_lookup, last_occurrence, last_occurrence_upto,
                                      pointer_lookup, prev_token)
from depthcraft.rasp_programs.khop import khop_doubling
from depthcraft.verify.structure import measure
from depthcraft.verify.tasks import get_task
from depthcraft.verify.tasks.khop import find_k
from depthcraft.verify.verifier import run_checks, verify


def _build(k, n):
    return lookup.resolve("khop_constant_width", {"k": k, "n": n, "vocab": 4}).build()


def test_same_width_at_every_length():
    widths = {n: measure(_build(4, n))["d_model"] for n in (16, 128, 1024)}
    assert len(set(widths.values())) == 1, widths
    c = lookup.get("khop_constant_width")
    bound = c.bound_values({"k": 4, "n": 1024, "vocab": 4})["d_model"]
    assert bound == 3 * 4 + 9 + 2 * (4 + 5) == c.bound_values({"k": 4, "n": 16, "vocab": 4})["d_model"]
    assert widths[16] <= bound
    model = _build(4, 1024)
    assert not any(lab.startswith("indices:") for lab in model.residual_labels)
    assert model.params["embed"]["pos"].shape == (1025, widths[16])


def test_position_embedding_is_the_angle_table():
    n = 16
    model = _build(2, n)
    pos = model.params["embed"]["pos"]
    col = {lab: i for i, lab in enumerate(model.residual_labels)}
    t = np.arange(n + 1)
    np.testing.assert_allclose(pos[:, col["position:cos"]], np.cos(2 * math.pi * t / (n + 1)), atol=1e-6)
    np.testing.assert_allclose(pos[:, col["position:sin"]], np.sin(2 * math.pi * t / (n + 1)), atol=1e-6)
    np.testing.assert_allclose(pos[:, col["position:lin"]], t / (n + 1), atol=1e-7)
    feats = position_features(n)
    assert feats["cos"][0] == 1.0 and feats["sin"][0] == 0.0  # BOS = angle 0 = pointer ⊥
    assert angle_step(n) == pytest.approx(2 * math.pi / 17)


def test_pointers_are_two_numbers():
    model = _build(4, 64)
    labels = [lab for lab in model.residual_labels if lab.startswith("find")]
    assert labels and all(lab.endswith((":cos", ":sin")) for lab in labels)


def test_angle_prev_token_and_lookup_by_hand():
    prev = prev_token(Read(rasp.tokens, bos_value=9))
    model = compile_program(prev, vocab=range(3), max_seq_len=6, positions="angle")
    assert model.run(np.array([[2, 0, 1, 1, 2, 0]])).tolist() == [[9, 2, 0, 1, 1, 2]]
    # hop_2 by two look-ups at angle pointers: find^2 = find at find, then the token there.
    prev = prev_token(rasp.tokens)
    p, = last_occurrence(rasp.tokens, prev, [POSITION])
    p2, = pointer_lookup(p, [p])
    tok2, = pointer_lookup(p2, [Read(rasp.tokens, bos_value=-1)])
    model = compile_program(tok2, vocab=range(3), max_seq_len=40, positions="angle")
    x = np.random.default_rng(3).integers(0, 3, size=(200, 40))
    expected = np.take_along_axis(np.concatenate([np.full((200, 1), -1), x], 1), find_k(x, 2), 1)[:, 1:]
    assert (model.run(x) == expected).all()


@pytest.mark.parametrize("n", [16, 128])
def test_exact_in_float32(n):
    r = verify("khop_constant_width", {"k": 4, "n": n}, samples=300, hypothesis_examples=20)
    assert r["passed"] and r["exact"]
    assert r["structure"]["attn_layers"] == 4 and r["structure"]["heads"] == 1


def test_exact_at_n1024_float32():
    model = _build(4, 1024)
    p = {"k": 4, "n": 1024, "vocab": 4, "distribution": "paper"}
    checks = run_checks(model, get_task("khop"), p, samples=32, hypothesis_examples=0)
    assert checks["random"].exact and checks["edge"].exact
    assert min(checks["random"].attention) > 0.999


@pytest.mark.slow
@pytest.mark.parametrize("n", [16, 128, 1024])
def test_verified_at_16_128_1024(n):
    r = verify("khop_constant_width", {"k": 4, "n": n}, samples=1000, hypothesis_examples=100)
    assert r["passed"]


def test_angle_mode_refuses_what_it_cannot_compile():
    prev = prev_token(rasp.tokens)
    p, tp = last_occurrence(rasp.tokens, prev, [POSITION, Read(rasp.tokens, bos_value=-1)])
    search = last_occurrence_upto(p, tp, prev, [Read(rasp.tokens, bos_value=-1)])[0]
    with pytest.raises(CompileError, match="one-hot positions"):
        compile_program(search, vocab=range(2), max_seq_len=4, positions="angle")
    look = fact_lookup(rasp.tokens, prev, [Read(rasp.tokens, bos_value=-1)], key_positions=lambda t: True)[0]
    with pytest.raises(CompileError, match="one-hot positions"):
        compile_program(look, vocab=range(2), max_seq_len=4, causal=False, positions="angle")
    shifted = rasp.SequenceMap(lambda t, i: t + i, rasp.tokens, rasp.indices)
    with pytest.raises(CompileError, match="angle"):
        compile_program(shifted, vocab=range(2), max_seq_len=4, positions="angle")
    with pytest.raises(CompileError, match="pointer"):
        compile_program(p, vocab=range(2), max_seq_len=4, positions="angle")
    with pytest.raises(CompileError, match="positions"):
        compile_program(khop_doubling(2), vocab=range(2), max_seq_len=4, positions="sinusoid")
