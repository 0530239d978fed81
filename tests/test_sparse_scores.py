"""Attention scores by gathers (``runtime._sparse_scores``) equal the dense product bit for bit.

The plan marks a sublayer whose key projections are gathers with weights 0 / +-1
(``runtime.SPARSE_KEYS``); the forward then computes its scores by gathers when the call's keys
are 0 / +-1 with at most two non-zeros each (and the queries finite), by the dense product
otherwise. Compared here with the same weights planned without the mark (the runtime before).
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from depthcraft.constructions import runtime as R
from depthcraft.verify.ablation import ablation_inputs

CASES = [
    ("khop_doubling", {"k": 4, "n": 32}),
    ("khop_constant_width", {"k": 4, "n": 64}),
    ("ictm_parse_copy_match", {}),  # Chen & Zou
]
NEVER = 1 << 30  # a sparse_min_key no head reaches: the plan without the mark


def _weights(model, sparse_min_key):
    return jax.tree_util.tree_map(jnp.asarray, R.plan(model.params, model.arch, sparse_min_key=sparse_min_key))


def _inputs(r, model):
    """Random inputs and the task's edge cases (short inputs padded: BOS-only matches, PAD keys)."""
    x = list(r.task.sample(r.params, np.random.default_rng(3), 24))
    edges = [e for group in r.task.edge_cases(r.params) for e in np.asarray(group)]
    return model.encode(x + edges[:40], length=model.max_seq_len + 1)


def _bits(a):
    return np.asarray(a).view(np.uint32)


def _marked(weights):
    return [i for i, p in enumerate(weights["layers"]) if R.SPARSE_KEYS in p]


def test_gathered_scores_equal_the_dense_forward_bit_for_bit(resolved):
    r, model = resolved
    ids = jnp.asarray(_inputs(r, model))
    old, new = _weights(model, NEVER), _weights(model, 1)
    assert not _marked(old) and _marked(new)
    a = R.forward(old, ids, model.arch, collect_attention=True)
    b = R.forward(new, ids, model.arch, collect_attention=True)
    assert np.array_equal(_bits(a.logits), _bits(b.logits))
    assert np.array_equal(_bits(a.residual), _bits(b.residual))
    for u, v in zip(a.attn_mass + a.attention, b.attn_mass + b.attention):
        assert np.array_equal(_bits(u), _bits(v))
    a = R.forward(old, ids[:6], model.arch, collect_residuals=True)
    b = R.forward(new, ids[:6], model.arch, collect_residuals=True)
    for u, v in zip(a.residuals + a.head_outputs + a.scores, b.residuals + b.head_outputs + b.scores):
        assert np.array_equal(_bits(u), _bits(v))
    rows = [row for group in ablation_inputs(r.task, r.params, 16, seed=0) for row in np.asarray(group)]
    ablation_ids = jnp.asarray(model.encode(rows, length=model.max_seq_len + 1))
    assert np.array_equal(_bits(R.ablated_logits(old, ablation_ids, model.arch)),
                          _bits(R.ablated_logits(new, ablation_ids, model.arch)))


# The runtime's pieces run here as one jitted program per shape, as inside the forward (run eagerly,
# every primitive of them is its own XLA compilation).
@functools.partial(jax.jit, static_argnums=(2, 3))
def _qk(x, p, q_rows, k_rows):
    return R._head_proj(x, p, "w_q", q_rows), R._head_proj(x, p, "w_k", k_rows)


_ok = jax.jit(R._sparse_scores_ok)
_gathered = jax.jit(R._sparse_scores)
_dense = jax.jit(lambda q, k: jnp.einsum("bhte,bhse->bhts", q, k))
_scores = jax.jit(R._scores)


def _layer_qk(model, weights, ids):
    """Per marked sublayer: (index, queries, keys) on ``ids``, from the full model's residual stream."""
    out = R.forward(weights, ids, model.arch, collect_residuals=True)
    return [(i, *_qk(out.residuals[i], p, s.q_rows, s.k_rows))
            for i, (s, p) in enumerate(zip(model.arch.sublayers, weights["layers"])) if R.SPARSE_KEYS in p]


def test_the_gather_path_is_taken(resolved):
    """Not vacuous: on these models some marked layers' keys pass the check (the gathers run there)."""
    r, model = resolved
    if r.name not in ("khop_doubling", "ictm_parse_copy_match"):
        pytest.skip("keys of this construction are not 0 / +-1 (constant width: cos, sin)")
    ids = jnp.asarray(_inputs(r, model))
    taken = [i for i, q, k in _layer_qk(model, _weights(model, 1), ids) if bool(_ok(q, k))]
    assert taken
    for i, q, k in _layer_qk(model, _weights(model, 1), ids):
        if i in taken:  # the gathers themselves, not through lax.cond
            assert np.array_equal(_bits(_gathered(q, k)), _bits(_dense(q, k)))


def test_the_plan_marks_by_key_size(resolved):
    """khop_doubling: a threshold at the largest key size marks only the sublayers that reach it; the default
    (``SPARSE_MIN_KEY``) is what ``plan`` applies when not told."""
    r, model = resolved
    if r.name != "khop_doubling":
        pytest.skip("khop_doubling only")
    sizes = {i: p["w_k"].shape[-1] for i, p in enumerate(model.params["layers"]) if "w_k" in p}
    top = max(sizes.values())
    assert set(_marked(_weights(model, top))) == {i for i in _marked(_weights(model, 1)) if sizes[i] >= top} != set()
    default = jax.tree_util.tree_map(jnp.asarray, R.plan(model.params, model.arch))
    assert _marked(default) == _marked(_weights(model, R.SPARSE_MIN_KEY))


def test_sparse_scores_check_and_fallback():
    """The check admits only 0 / +-1 keys with <= 2 non-zeros and finite queries; otherwise the dense product."""
    rng = np.random.default_rng(0)
    q = jnp.asarray(rng.normal(size=(2, 1, 5, 7)).astype(np.float32) * 300)
    k = np.zeros((2, 1, 5, 7), np.float32)
    k[0, 0, 0, [0, 6]] = 1  # two non-zeros (tracr's BOS key)
    k[0, 0, 1, 3] = -1
    k[1, 0, 2, 4] = 1  # key 3, 4 of batch 1 and others: all zero
    dense = _dense(q, jnp.asarray(k))
    assert bool(_ok(q, jnp.asarray(k)))
    assert np.array_equal(_bits(_gathered(q, jnp.asarray(k))), _bits(dense))
    marked = {R.SPARSE_KEYS: np.zeros(0, np.int32)}
    assert np.array_equal(_bits(_scores(q, jnp.asarray(k), marked)), _bits(dense))
    for bad_k, bad_q in ((0.5, None), (1.0, None), (None, np.inf)):
        kk, qq = k.copy(), np.asarray(q).copy()
        if bad_k == 0.5:
            kk[1, 0, 0, 2] = 0.5  # not +-1
        elif bad_k == 1.0:
            kk[1, 0, 0, [1, 2, 3]] = 1  # three non-zeros
        else:
            qq[0, 0, 2, 1] = bad_q
        kk, qq = jnp.asarray(kk), jnp.asarray(qq)
        assert not bool(_ok(qq, kk))
        want = _dense(qq, kk)
        got = _scores(qq, kk, marked)
        assert np.array_equal(np.isnan(want), np.isnan(got))
        assert np.array_equal(np.nan_to_num(want), np.nan_to_num(got))
