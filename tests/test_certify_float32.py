"""The float32 model of the certifier (verify/certify/float32.py) must bound the real rounding.

* the dominated-sum fact: a float32 sum of one large term and small terms, in any order
  (sequential from either end, pairwise, numpy's own, a random tree), is within
  (1 + 2 gamma_n) L + u (|d| + L) of its exact value;
* a one-key softmax head run in float32 (jax, as the runtime runs it) is within
  pointer_output_rel x M |W_O| of the float64 result, on adversarial scores (a leak at the bound,
  many keys, values of both signs), and that bound is far below the order-independent n u one;
* on the pointer models at lengths where the relative bound matters (one-hot: khop_doubling and
  khop_floor; angle: khop_constant_width), every sublayer's measured float32 error against the
  float64 hardmax run lies within the certified radius;
* a float32 dot product with k dominant terms, in any order, is within rho D + sigma L
  (float32.dominant_sum), far below gamma_n (D + L); a copying projection is exact;
* every head's measured float32 score is within its certified delta of the hardmax run's score,
  and with the per-pair leak forced on (heads.PAIR_LEAK_ABOVE = 0) the radii and the measured
  leaks still lie within their bounds;
* must fail: a pointer head weakened so far that its neighbours' weights add up (khop_floor's
  search, khop_constant_width's angle look-up) is not certified, with the per-pair bound too,
  and on a concrete input it really leaks.
"""


import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from certify_radii import assert_scores_within_delta, assert_within_radii
from depthcraft.verify import lookup
from depthcraft.verify.certify import certify, heads
from depthcraft.verify.certify.float32 import (U32, copies, dominant_sum, gamma, pointer_output_rel,
                                               softmax_output_rel)


def _tree_sum(x, rng):
    """Sum float32 values along a random binary tree (every addition rounded to float32)."""
    items = [np.float32(v) for v in x]
    while len(items) > 1:
        i = int(rng.integers(len(items) - 1))
        items[i:i + 2] = [np.float32(items[i] + items[i + 1])]
    return items[0]


def _pairwise(x):
    x = list(np.asarray(x, np.float32))
    while len(x) > 1:
        x = [np.float32(x[i] + x[i + 1]) if i + 1 < len(x) else x[i] for i in range(0, len(x), 2)]
    return x[0]


def _sequential(x):
    s = np.float32(0)
    for v in x:
        s = np.float32(s + v)
    return s


@pytest.mark.parametrize("n", [3, 64, 1025])
def test_a_sum_dominated_by_one_term_errs_by_the_small_terms_only(n):
    rng = np.random.default_rng(n)
    g = gamma(n, U32)
    for trial in range(20):
        small = rng.uniform(-1, 1, n - 1) * 10.0 ** rng.uniform(-12, -3)
        d = rng.uniform(0.5, 2.0) * (1 if trial % 2 else -1)
        x = np.concatenate([[d], small]).astype(np.float32)
        pos = int(rng.integers(n))
        x[[0, pos]] = x[[pos, 0]]
        exact = float(np.sum(x.astype(np.float64)))
        big = float(np.abs(x.astype(np.float64)).max())
        light = float(np.abs(x.astype(np.float64)).sum()) - big
        bound = (1 + 2 * g) * light + U32 * (big + light)
        for s in (_sequential(x), _sequential(x[::-1]), _pairwise(x), np.sum(x), _tree_sum(x, rng)):
            assert abs(float(s) - exact) <= bound, (trial, float(s) - exact, bound)


def _softmax_head(scores, v, w_o, dtype):
    a = jax.nn.softmax(jnp.asarray(scores, dtype), axis=-1)
    return (a @ jnp.asarray(v, dtype)) @ jnp.asarray(w_o, dtype)


@pytest.mark.parametrize("n", [16, 1024, 4096])
def test_one_key_softmax_output_within_the_relative_bound(n):
    rng = np.random.default_rng(7)
    d_head, d_out = 4, 3
    w_o = rng.uniform(-2, 2, (d_head, d_out)).astype(np.float32)
    w_v = np.ones((1, d_head), np.float32)  # one term per value coordinate: gamma_1
    for leak_target in (1e-9, 1e-5, 1e-2):
        # scores: the top key at 0, the others low enough that sum exp(s_j - s_t) = leak_target
        shifted = np.full((8, n + 1), np.log(leak_target / n)) + rng.uniform(-3, 0, (8, n + 1))
        top = rng.integers(n + 1, size=8)
        shifted[np.arange(8), top] = 0.0
        scores = (shifted + rng.uniform(-50, 50, (8, 1))).astype(np.float32)
        # the leak of the float32 scores, with the shift's rounding u |s_j - max| on every exponent
        gap = scores.astype(np.float64) - scores.astype(np.float64).max(1, keepdims=True)
        leak = float((np.exp(gap) * np.exp(U32 * np.abs(gap))).sum(1).max() - 1.0)
        v = rng.uniform(-1, 1, (n + 1, d_head)).astype(np.float32)
        out32 = np.asarray(_softmax_head(scores, v, w_o, jnp.float32), np.float64)
        with jax.enable_x64(True):
            out64 = np.asarray(_softmax_head(np.asarray(scores, np.float64), np.asarray(v, np.float64),
                                             np.asarray(w_o, np.float64), jnp.float64))
        m_v = np.abs(v.astype(np.float64)).max(0)
        rel = pointer_output_rel(n, leak, w_v, w_o)
        bound = rel * (m_v @ np.abs(w_o.astype(np.float64)))
        err = np.abs(out32 - out64).max(0)
        assert (err <= bound).all(), (leak_target, err, bound)
        if leak_target <= 1e-5:  # far below the order-independent bound at large n
            assert rel < 0.2 * softmax_output_rel(n, w_v, w_o) or n < 64


SOUND_LARGER = [("khop_doubling", dict(k=8, n=64, vocab=3)), ("khop_floor", dict(k=4, n=48, vocab=3)),
                ("khop_floor", dict(k=16, n=128, vocab=4)), ("khop_constant_width", dict(k=8, n=64, vocab=3)),
                ("khop_constant_width", dict(k=4, n=256, vocab=4))]
# (the float64 hardmax reference ties keys within HARDMAX_TOL = 1e-4 of the top score, relative: an angle
# head's scores ~ 24 (n + 1)^2 / (2 pi^2) keep that below its gap of ~22.6 up to n ~ 300 only)


@pytest.mark.parametrize("name,params", SOUND_LARGER, ids=[f"{s[0]}-{s[1]['n']}" for s in SOUND_LARGER])
def test_pointer_models_measured_error_within_the_relative_radii(name, params):
    r = lookup.resolve(name, params)
    model = r.build()
    cert = certify(model)
    assert cert["float32_matches_hardmax"], cert["uncertified"]
    rng = np.random.default_rng(1)
    p = r.params
    n = r.task.max_seq_len(p)
    inputs = np.concatenate([r.task.sample(p, rng, 48)] + [np.asarray(e)[:, :n] for e in r.task.edge_cases(p)
                                                             if np.asarray(e).shape[1] == n])
    ids = model.encode(inputs, length=n + 1)
    assert_within_radii(model, cert, ids)
    assert_scores_within_delta(model, cert, ids)


def _exact_sum(a, b):
    return math.fsum((a.astype(np.float64) * b.astype(np.float64)).tolist())  # float32 products are exact


def _dot_orders(a, b, rng):
    """float32 dot products of a and b in several orders (every product and addition rounded)."""
    p = (a * b).astype(np.float32)
    return [_sequential(p), _sequential(p[::-1]), _pairwise(p), _tree_sum(p, rng), np.dot(a, b),
            np.float32(np.sum(p))]


@pytest.mark.parametrize("n,k", [(2, 2), (6, 2), (261, 3), (1031, 3), (1031, 1)])
def test_a_dot_product_with_few_dominant_terms_errs_by_rho_d_plus_sigma_l(n, k):
    rng = np.random.default_rng(n + k)
    rho, sig = dominant_sum(k, n)
    g = gamma(n, U32)
    assert rho <= (k + 1e-6) * U32 * 1.01 and sig < 1.01 + 2 * g
    for trial in range(30):
        tiny = trial % 2 == 1  # odd trials: small terms far below the dominant ones; even: up to ~10 each
        a = (rng.uniform(-1, 1, n) * 10.0 ** rng.uniform(-1, 3 if tiny else 5, n)).astype(np.float32)
        b = (rng.uniform(-1, 1, n) * 10.0 ** (rng.uniform(-14, -8, n) if tiny else rng.uniform(-9, -4, n))
             ).astype(np.float32)  # small terms
        dom = rng.choice(n, size=k, replace=False)
        b[dom] = rng.uniform(0.5, 2.0, k) * rng.choice([-1, 1], k)
        a[dom] = (rng.uniform(1e3, 3e4, k) * rng.choice([-1, 1], k)).astype(np.float32)
        terms = np.abs(a.astype(np.float64) * b.astype(np.float64))
        big = float(terms[dom].sum())
        light = float(terms.sum()) - big
        exact = _exact_sum(a, b)
        bound = rho * big + sig * light
        for s in _dot_orders(a, b, rng):
            assert abs(float(s) - exact) <= bound, (trial, float(s) - exact, bound)
        if n > 200 and tiny:  # far below the order-independent gamma_n (D + L)
            assert bound < 0.05 * g * (big + light)


def test_a_copying_projection_is_exact():
    rng = np.random.default_rng(3)
    w = np.zeros((5, 4), np.float32)
    w[[0, 2, 3, 4], [1, 0, 3, 2]] = [1, -1, 1, 1]
    x = rng.uniform(-1e4, 1e4, (50, 5)).astype(np.float32)
    assert copies(w)
    assert np.array_equal(np.asarray(jnp.asarray(x) @ jnp.asarray(w), np.float64),
                          x.astype(np.float64) @ w.astype(np.float64))
    w2 = w.copy()
    w2[1, 1] = 1.0  # two terms in one column: a rounded sum
    w3 = w.copy()
    w3[0, 1] = 3.0  # a product that rounds
    assert not copies(w2) and not copies(w3)


PAIR = [("khop_floor", dict(k=4, n=48, vocab=3)), ("khop_constant_width", dict(k=8, n=64, vocab=3))]


@pytest.mark.parametrize("name,params", PAIR, ids=[s[0] for s in PAIR])
def test_per_pair_leak_bounds_the_measured_leak(name, params, monkeypatch):
    monkeypatch.setattr(heads, "PAIR_LEAK_ABOVE", -1.0)  # every one-key head takes the per-pair path
    r = lookup.resolve(name, params)
    model = r.build()
    cert = certify(model)
    assert cert["float32_matches_hardmax"], cert["uncertified"]
    p = r.params
    n = r.task.max_seq_len(p)
    inputs = np.concatenate([r.task.sample(p, np.random.default_rng(2), 64)] +
                            [np.asarray(e)[:, :n] for e in r.task.edge_cases(p) if np.asarray(e).shape[1] == n])
    real = assert_within_radii(model, cert, model.encode(inputs, length=n + 1))
    for a, mass in enumerate(real.attn_mass):
        bound = max(e["leak_bound"] for e in cert["per_layer"] if e["layer"] == f"attn {a + 1}")
        assert 1.0 - float(np.asarray(mass).min()) <= bound + 1e-6


def _weaken(model, sublayer, factor):
    layers = list(model.params["layers"])
    layers[sublayer] = {**layers[sublayer], "w_q": layers[sublayer]["w_q"] * factor}
    return dataclasses.replace(model, params={**model.params, "layers": layers})


WEAK = [("khop_floor", dict(k=4, n=48, vocab=3), 2, 0.02), ("khop_constant_width", dict(k=4, n=64, vocab=3), 2, 0.03)]


@pytest.mark.parametrize("name,params,sublayer,factor", WEAK, ids=[w[0] for w in WEAK])
def test_a_weakened_pointer_head_is_not_certified_and_really_leaks(name, params, sublayer, factor, monkeypatch):
    monkeypatch.setattr(heads, "PAIR_LEAK_ABOVE", -1.0)
    r = lookup.resolve(name, params)
    model = _weaken(r.build(), sublayer, factor)
    cert = certify(model)
    assert not cert["certified"] and not cert["float32_matches_hardmax"]
    stop = cert["uncertified"][0]
    assert stop["layer"] == f"attn {sublayer + 1}" and "leak bound" in stop["why"], stop
    p = r.params
    n = r.task.max_seq_len(p)
    inputs = r.task.sample(p, np.random.default_rng(4), 64)
    out = model.forward_ids(model.encode(inputs, length=n + 1))
    assert 1.0 - float(np.asarray(out.attn_mass[sublayer]).min()) >= 0.3
