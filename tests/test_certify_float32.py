"""The float32 model of the certifier (verify/certify/float32.py) must bound the real rounding.

* the dominated-sum fact: a float32 sum of one large term and small terms, in any order
  (sequential from either end, pairwise, numpy's own, a random tree), is within
  (1 + 2 gamma_n) L + u (|d| + L) of its exact value;
* a one-key softmax head run in float32 (jax, as the runtime runs it) is within
  pointer_output_rel x M |W_O| of the float64 result, on adversarial scores (a leak at the bound,
  many keys, values of both signs), and that bound is far below the order-independent n u one;
* on the pointer models at lengths where the relative bound matters (one-hot: khop_doubling and
  khop_floor; angle: khop_constant_width), every sublayer's measured float32 error against the
  float64 hardmax run lies within the certified radius.
"""


import jax
import jax.numpy as jnp
import numpy as np
import pytest

from certify_radii import assert_within_radii
from depthcraft.verify import lookup
from depthcraft.verify.certify import certify
from depthcraft.verify.certify.float32 import U32, gamma, pointer_output_rel, softmax_output_rel


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
                ("khop_constant_width", dict(k=8, n=64, vocab=3))]


@pytest.mark.parametrize("name,params", SOUND_LARGER, ids=[s[0] for s in SOUND_LARGER])
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
    assert_within_radii(model, cert, model.encode(inputs, length=n + 1))
