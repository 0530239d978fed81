"""Certificates of tracr's hist-based programs: the SelectorWidth read-out MLP's float32 bound.

tracr's SelectorWidth writes 1/(w+1) and reads it out with a discretising MLP whose hidden
units come in saturated pairs ReLU(L(x - t) + 1), ReLU(L(x - t)) of magnitude up to ~L. The
certifier bounds the float32 rounding of that MLP per input combination
(:func:`float32.dot_rounding`: half an ulp per rounding, exact products, partial sums bounded
by their positive or negative parts), not by one gamma_n over the layer. Tested here:

* :func:`float32.rounding` bounds every float32 rounding of a real number below the bound, and
  :func:`float32.dot_rounding` bounds a float32 dot product computed in many orders (sequential
  from either end, pairwise, random trees), on random intervals and on the saturated pairs of
  the hist MLP, where it is several times below gamma_k sum |t_i|;
* tracr's ``sort_freq`` and ``make_count_less_freq_categorical_{1,2}`` are certified and exact on
  every input (the exhaustive check);
* soundness: on every input up to N, every sublayer's measured float32 error (the float32
  forward against the float64 hardmax evaluation of the same weights) lies within its certified
  radius, MLP 1 (hist's read-out) included, and every score within its delta;
* must fail: a hist model whose read-out MLP has one hidden unit's output weight halved, and
  hist at N = 10 (where tracr's discretisation breaks), are not certified, and the witness's
  input really gives the wrong histogram (expected values from the definition).
"""

import dataclasses
import itertools
import logging

import numpy as np
import pytest
from tracr.compiler import lib
from tracr.compiler import test_cases as tracr_cases
from tracr.rasp import rasp

from certify_radii import assert_scores_within_delta, assert_within_radii, sublayer_errors
from depthcraft import check_program, compile_program
from depthcraft.verify.certify import certify
from depthcraft.verify.certify.float32 import U32, dot_rounding, gamma, rounding

logging.getLogger("absl").setLevel(logging.ERROR)  # tracr's SequenceMap warnings

CASES = {c["testcase_name"]: c for c in tracr_cases.TEST_CASES}
NEWLY_CERTIFIED = ["sort_freq", "make_count_less_freq_categorical_1", "make_count_less_freq_categorical_2"]


def hist_definition(xs):
    """The histogram: at every position, how many tokens equal the token there."""
    return [xs.count(x) for x in xs]


# ------------------------------------------------------------------------ the float32 facts


def test_rounding_bounds_every_float32_rounding_below_the_bound():
    rng = np.random.default_rng(0)
    s = rng.uniform(-1, 1, 20000) * 10.0 ** rng.uniform(-44, 30, 20000)
    s = np.concatenate([s, [2.0 ** 7, -2.0 ** 7, 2.0 ** 7 * (1 - 2.0 ** -30), 1e-45, 0.0]])
    err = np.abs(s.astype(np.float32).astype(np.float64) - s)
    bound = rounding(np.abs(s))
    assert (err <= bound).all()
    normal = np.abs(s) >= 2.0 ** -126
    assert (bound[normal] <= U32 * np.abs(s[normal])).all()  # never above the relative u |s|
    assert rounding(np.array([85.5]))[0] == 2.0 ** -18  # half an ulp of [64, 128)


def _sequential(t):
    acc = np.float32(0)
    for v in t:
        acc = np.float32(acc + v)
    return acc


def _pairwise(t):
    t = list(t) or [np.float32(0)]
    while len(t) > 1:
        t = [np.float32(t[i] + t[i + 1]) if i + 1 < len(t) else t[i] for i in range(0, len(t), 2)]
    return t[0]


def _tree(t, rng):
    t = list(t) or [np.float32(0)]
    while len(t) > 1:
        i = int(rng.integers(len(t) - 1))
        t[i:i + 2] = [np.float32(t[i] + t[i + 1])]
    return t[0]


def _orders(x, w, b, rng):
    """float32 x @ w + b for one output, in many summation orders (products rounded first)."""
    terms = [np.float32(np.float32(xi) * np.float32(wi)) for xi, wi in zip(x, w) if wi != 0] \
        + ([np.float32(b)] if b != 0 else [])
    outs = [_sequential(terms), _sequential(terms[::-1]), _pairwise(terms), _pairwise(terms[::-1])]
    for _ in range(6):
        perm = rng.permutation(len(terms))
        outs += [_tree([terms[i] for i in perm], rng), _sequential([terms[i] for i in perm])]
    return outs


def _exact(x, w, b):
    """The exact sum in float64 (float32 products are exact in float64; math.fsum sums exactly)."""
    import math
    return math.fsum([float(np.float32(xi)) * float(np.float32(wi)) for xi, wi in zip(x, w)] + [float(b)])


def test_dot_rounding_bounds_every_summation_order_on_random_intervals():
    rng = np.random.default_rng(1)
    for trial in range(300):
        n = int(rng.integers(1, 7))
        w = rng.choice([1.0, -1.0, 0.0, 0.37, -12.5, 100.0], n).astype(np.float32).astype(np.float64)
        b = float(np.float32(rng.choice([0.0, -14.476, 0.5])))
        centre = (rng.uniform(-3, 3, n) * 10.0 ** rng.uniform(-2, 2, n)).astype(np.float32).astype(np.float64)
        r = np.where(rng.random(n) < 0.3, 0.0, 10.0 ** rng.uniform(-7, -2, n))
        exact = (rng.random(n) < 0.3) & (r == 0)  # inputs exactly 0, 1 or -1 (like tracr's `one`)
        centre[exact] = rng.choice([0.0, 1.0, -1.0], int(exact.sum()))
        bound = dot_rounding((centre - r)[None], (centre + r)[None], exact[None],
                             w[:, None], np.array([b]))[0, 0]
        k = int(((w != 0) & ~((centre == 0) & (r == 0))).sum() + (b != 0))
        magnitude = float((np.abs(centre) + r) @ np.abs(w) + abs(b))
        assert bound <= gamma(k, U32) * magnitude + k * 2.0 ** -149  # never above Higham's gamma_k
        for _ in range(5):
            x = (centre + rng.uniform(-1, 1, n) * r).astype(np.float32)
            outside = np.abs(x.astype(np.float64) - centre) > r  # the float32 input lies in the interval
            x[outside] = centre[outside]
            want = _exact(x, w, b)
            for s in _orders(x, w, b, rng):
                assert abs(float(s) - want) <= bound, (trial, float(s) - want, bound)


def test_dot_rounding_of_the_hist_pairs_is_half_ulps_of_the_partial_sums():
    # one output column of tracr's discretising MLP at x ~ 1: +h(k,0) - h(k,1) - h(k+1,0) + h(k+1,1),
    # saturated pairs L(x - t) + 1, L(x - t) with L = 100, weights +-1 (exact products)
    h = np.array([85.524, 84.524, 82.667, 81.667])
    w = np.array([[1.0], [-1.0], [-1.0], [1.0]])
    r = 2e-5
    bound = dot_rounding((h - r)[None], (h + r)[None], np.zeros((1, 4), bool), w, np.zeros(1))[0, 0]
    # the partial sums are below 256 in magnitude (two non-root additions, half an ulp 2^-17 each);
    # the root's sum is ~0
    assert bound <= 2 * 2.0 ** -17 + 1e-9
    assert bound < 0.25 * gamma(4, U32) * h.sum()
    rng = np.random.default_rng(2)
    for _ in range(200):
        x = (h + rng.uniform(-r, r, 4)).astype(np.float32)
        exact = _exact(x, w[:, 0], 0.0)
        for s in _orders(x, w[:, 0], 0.0, rng):
            assert abs(float(s) - exact) <= bound


# ------------------------------------------------------------------ the corpus programs


@pytest.mark.parametrize("name", NEWLY_CERTIFIED)
def test_hist_based_corpus_program_is_certified_and_exact(name):
    case = CASES[name]
    program = case["program"]
    report = check_program(program, vocab=case["vocab"], max_seq_len=case["max_seq_len"],
                           reference=lambda xs: rasp.evaluate(program, list(xs)), certify=True,
                           exhaustive=True, samples=20, hypothesis_examples=5, seed=0)
    exhaustive = report["checks"]["exhaustive"]
    assert exhaustive["inputs"] == sum(len(case["vocab"]) ** n for n in range(1, case["max_seq_len"] + 1))
    assert report["certificate"]["certified"] is True, report["certificate"]["uncertified"]
    assert exhaustive["exact"] is True and report["passed"] is True


def _all_inputs(vocab, n):
    return np.array(list(itertools.product(sorted(vocab), repeat=n)), dtype=object)


@pytest.mark.parametrize("name", ["make_count_less_freq_categorical_1", "sort_freq"])
def test_measured_float32_error_of_every_sublayer_is_within_its_radius(name):
    case = CASES[name]
    model = compile_program(case["program"], vocab=case["vocab"], max_seq_len=case["max_seq_len"], causal=False)
    cert = certify(model)
    assert cert["certified"], cert["uncertified"]
    radius = {e["layer"]: e["radius_out"] for e in cert["per_layer"] if e["head"] is None}
    worst = 0.0
    for n in range(1, case["max_seq_len"] + 1):  # every input, every length (no padding)
        ids = model.encode(_all_inputs(case["vocab"], n), length=n + 1)
        assert_within_radii(model, cert, ids)
        assert_scores_within_delta(model, cert, ids)
        errors, _ = sublayer_errors(model, ids)
        worst = max([worst] + [err for layer, err in errors if layer == "MLP 1"])
    assert 0 < worst <= radius["MLP 1"]  # hist's read-out really rounds, within its certified radius


# ------------------------------------------------------------------------------- must fail


def _hist_model(n, vocab):
    return compile_program(lib.make_hist(), vocab=vocab, max_seq_len=n, causal=False)


def _assert_witness_is_wrong(model, cert):
    entry = next(u for u in cert["uncertified"] if u["layer"] == "MLP 1")
    wrong = entry["witness"]["wrong_input"]
    assert wrong is not None, entry
    tokens = list(wrong["tokens"])
    want = hist_definition(tokens)
    assert list(rasp.evaluate(lib.make_hist(), tokens)) == want  # the definition is the RASP value
    got = model.run([tokens]).tolist()[0]
    assert got != want, (tokens, got)
    assert [got[p - 1] for p in wrong["positions"]] == wrong["got"]
    assert [want[p - 1] for p in wrong["positions"]] == wrong["expected"]


def test_hist_with_a_wrong_read_out_weight_is_not_certified_and_its_witness_is_wrong():
    model = _hist_model(5, {"a", "b", "c"})
    assert certify(model)["certified"]
    layers = list(model.params["layers"])
    mlp = dict(layers[1])
    w2 = np.array(mlp["w_2"])
    unit = int(np.flatnonzero(np.abs(w2).sum(1) > 0)[3])  # one ReLU-pair unit of the discretisation
    w2[unit] *= 0.5
    mlp["w_2"] = w2.astype(np.float32)
    layers[1] = mlp
    bad = dataclasses.replace(model, params={**model.params, "layers": layers})
    cert = certify(bad)
    assert cert["certified"] is False
    _assert_witness_is_wrong(bad, cert)


def test_hist_where_the_discretisation_breaks_is_not_certified_and_its_witness_is_wrong():
    model = _hist_model(10, {"a", "b"})
    cert = certify(model)
    assert cert["certified"] is False
    _assert_witness_is_wrong(model, cert)
