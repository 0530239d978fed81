"""A discretising MLP is checked at the PROGRAM's value of its numerical input (issue 30).

tracr's Map of a numerical SOp is a step function of the input; the weights' ideal input v'
may sit a little off the program's value v (float32 weights upstream). The certificate
compares the MLP's output at v' with ``f(v)``, never with ``f(v')``: here ``f`` is ``m == 1``,
so ``f(v')`` is False at v' = 0.99991 while the program (v = 1) says True.
"""

import dataclasses
import itertools

import numpy as np
import pytest
from tracr.rasp import rasp

from depthcraft.constructions.compiler import compile_with_tracr
from depthcraft.verify.certify import certify
from depthcraft.verify.certify import program
from depthcraft.verify.certify.program import mean_values

N = 3
SHRINK = 1 - 9e-5  # the upstream numerical Map writes 0.99991 for 1 (within NUM_TOL = 1e-4)


def all_ones():
    """Whether every token is 1: a numerical mean of a 0/1 Map, read by a discretising Map."""
    x = rasp.numerical(rasp.Map(lambda t: 1 if t == 1 else 0, rasp.tokens)).named("x")
    mean = rasp.numerical(rasp.Aggregate(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.TRUE), x,
                                         default=0)).named("m")
    return rasp.categorical(rasp.Map(lambda m: m == 1, mean)).named("ones")


def _mlps(model):
    return [i for i, s in enumerate(model.arch.sublayers) if s.kind == "mlp"]


def _with_layers(model, layers):
    return dataclasses.replace(model, params=dict(model.params, layers=layers))


def shrunk(model):
    """The upstream Map's output weight times SHRINK: the mean's ideal values are (j / k) SHRINK."""
    layers = [dict(p) for p in model.params["layers"]]
    i = _mlps(model)[0]
    layers[i]["w_2"] = np.array(layers[i]["w_2"]) * SHRINK
    return _with_layers(model, layers)


def threshold_moved(model, t):
    """The discretising MLP's step (tracr's 0.75, between 1/2 and 1) moved to ``t``, made steep
    (slope 2^17 instead of 100) so that it decides cleanly 4.5e-5 away."""
    layers = [dict(p) for p in model.params["layers"]]
    i = _mlps(model)[1]
    w1 = np.array(layers[i]["w_1"], np.float64)  # rows: m, one
    steep = 2.0 ** 17
    units = np.flatnonzero(w1[0] != 0)
    assert len(units) == 2
    for u in units:
        plus_one = w1[1, u] - (-100 * 0.75) > 0.5  # tracr's ReLU(L(x - t) + 1) of the pair
        w1[0, u] = steep
        w1[1, u] = -steep * t + (1.0 if plus_one else 0.0)
    layers[i]["w_1"] = w1.astype(np.float32)
    return _with_layers(model, layers)


@pytest.fixture(scope="module")
def model():
    return compile_with_tracr(all_ones(), vocab=[0, 1], max_seq_len=N, causal=False)


def _exactly_the_program(model):
    """The model against the RASP evaluator on every input of length 1..N."""
    for length in range(1, N + 1):
        xs = np.array(list(itertools.product([0, 1], repeat=length)))
        for x, got in zip(xs, model.run(xs)):
            if list(got) != rasp.evaluate(all_ones(), list(x)):
                return False
    return True


def test_a_mean_slightly_off_the_program_value_is_certified_at_the_program_value(model, monkeypatch):
    off = shrunk(model)
    # the ideal mean of 1s is 0.99991, where f(v') = (v' == 1) is False: only f(1) = True is right
    assert _exactly_the_program(off)
    seen, real = [], program.program_inputs

    def spy(dec, expr, src, nm, ideal, c, n):
        out = real(dec, expr, src, nm, ideal, c, n)
        seen.extend((dec.num_dev[src], float(a), b) for a, b, k in zip(ideal, out, c.kind) if k == 1)
        return out

    monkeypatch.setattr(program, "program_inputs", spy)
    cert = certify(off)
    assert cert["certified"] is True and cert["uncertified"] == []
    # the input's deviation is not 0, and the ideal 0.99991 stood for the program's 1
    assert all(9e-5 - 1e-7 < d < 1e-4 for d, _, _ in seen)
    assert {b for d, a, b in seen if abs(a - SHRINK) < 1e-6} == {1}
    assert {b for _, _, b in seen} == {0, 1 / 3, 1 / 2, 2 / 3, 1}


def test_a_threshold_between_the_ideal_and_the_program_value_is_not_certified(model):
    # v = 1 (program), v' = 0.99991 (weights): a step at 0.999955 decides f(v') where the
    # program decides f(v); comparing with f(v') (False) would wrongly certify this model
    bad = threshold_moved(shrunk(model), 1 - 4.5e-5)
    cert = certify(bad)
    assert cert["certified"] is False and cert["float32_matches_hardmax"] is True
    u = cert["uncertified"][0]
    assert (u["layer"], u["check"]) == ("MLP 2", "program")
    w = u["witness"]
    assert list(w["input"].values()) == [1.0] and w["expected"] is True and w["got"] is False
    # the witness reproduces: all-1 inputs have mean 1, the program says True, the model False
    for length in range(1, N + 1):
        ones = [1] * length
        assert rasp.evaluate(all_ones(), ones) == [True] * length
        assert list(bad.run(np.array([ones]))[0]) == [False] * length
    # the same step on the exact model (v' = v = 1 is above it) is right, and certified
    same = threshold_moved(model, 1 - 4.5e-5)
    assert _exactly_the_program(same) and certify(same)["certified"] is True


def test_the_program_values_of_a_mean_are_the_evaluators():
    # tracr's _mean: default for no key, the value itself for one, sum / len otherwise
    vals = mean_values({0.0: [0, False], 1.0: [1]}, 0, 3)
    assert sorted(vals) == [0.0, 1 / 3, 0.5, 2 / 3, 1.0]
    assert vals[1 / 3] == [1 / 3] and vals[2 / 3] == [sum([1, 1, 0]) / 3]
    assert sorted(map(repr, vals[0.0])) == ["0", "0.0", "False"] and sorted(map(repr, vals[1.0])) == ["1", "1.0"]
    assert mean_values({0.0: [0.0], 1 / 3: [1 / 3]}, 0, 3) is None  # off a dyadic grid: sums round
    assert mean_values({0.0: [0], 1.0: [1]}, None, 3) is None  # no numerical default


def _resolve(dev, ideal):
    from depthcraft.verify.certify.program import Combos, Decoder, program_inputs
    dec = Decoder(link=None, labels={}, num_dev={"s": dev}, num_vals={"s": {0.0: [0], 0.5: [0.5], 1.0: [1, 1.0]}})
    m = len(ideal)
    c = Combos(x=np.zeros((m, 1)), kind=np.ones(m, int), position=-np.ones(m, int), guard=np.ones(m, bool),
               index={})
    f = rasp.Map(lambda v: v > 0.7, rasp.numerical(rasp.Map(float, rasp.tokens)))
    return program_inputs(dec, f, "s", "out", np.array(ideal, np.float64), c, 4)


def test_an_ideal_value_near_two_program_values_is_not_claimed():
    from depthcraft.verify.certify.program import NoSemantics
    # within 0.3 of exactly one program value: that value (the first object the evaluator holds)
    assert list(_resolve(0.3, [0.9, 0.1, 0.5])) == [1, 0, 0.5]
    # within 0.3 of both 0.5 and 1 (f differs there): which one the weights stand for is unknown
    with pytest.raises(NoSemantics, match="within 0.3 of 2 program values"):
        _resolve(0.3, [0.75])
    with pytest.raises(NoSemantics, match="of 0 program values"):  # the bound is violated: none is near
        _resolve(0.01, [0.25])
