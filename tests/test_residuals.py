"""Per-sublayer residuals from the runtime (``forward(..., collect_residuals=True)``, ``residual_stream``).

Expected values come from the definitions: a numpy re-computation of a small dense
model sublayer by sublayer, the embeddings as token row + position row, and the
relations every transformer satisfies (the last stream is the final residual, a
sublayer changes only the rows it writes, an attention sublayer's write is the sum
of its heads' outputs, softmax weights are the softmax of the masked scores).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import depthcraft
from depthcraft.constructions.model import ResidualStream, sublayer_names
from depthcraft.constructions.runtime import forward
from depthcraft.verify.crosscheck.model import ModelConfig, init_params


@pytest.fixture(scope="module")
def k4():
    return depthcraft.build("khop_doubling", k=4, n=12, vocab=3)


@pytest.fixture(scope="module")
def dense():
    """A small random dense model (2 attention + 2 MLP sublayers, no LayerNorm, biases made non-zero)."""
    cfg = ModelConfig(depth=2, heads=2, width=8, layer_norm=False)
    params = init_params(cfg, jax.random.PRNGKey(3), n_inputs=5, n_outputs=4, seq_len=7)
    rng = np.random.default_rng(0)
    params = jax.tree_util.tree_map(lambda a: jnp.asarray(rng.normal(0, 0.5, a.shape), jnp.float32), params)
    return params, cfg.arch(pad_id=4)


def _numpy_forward(params, arch, ids):
    """Softmax transformer, one sublayer at a time, in float64 numpy: [S + 1, T, D] streams."""
    p = jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64), params)
    t = ids.shape[0]
    x = p["embed"]["token"][ids] + p["embed"]["pos"][:t]
    out = [x]
    allowed = np.tril(np.ones((t, t), bool)) & (ids != arch.pad_id)[None, :]
    for spec, lp in zip(arch.sublayers, p["layers"]):
        if spec.kind == "attn":
            write = np.zeros_like(x)
            for h in range(lp["w_q"].shape[0]):
                q = x @ lp["w_q"][h] + lp["b_q"][h]
                k = x @ lp["w_k"][h] + lp["b_k"][h]
                v = x @ lp["w_v"][h] + lp["b_v"][h]
                s = np.where(allowed, q @ k.T * spec.qk_scale, -np.inf)
                w = np.exp(s - s.max(1, keepdims=True))
                w /= w.sum(1, keepdims=True)
                write += w @ v @ lp["w_o"][h]
            x = x + write + lp["b_o"]
        else:
            x = x + np.maximum(x @ lp["w_1"] + lp["b_1"], 0) @ lp["w_2"] + lp["b_2"]
        out.append(x)
    return np.stack(out)


def test_residuals_equal_a_sublayer_by_sublayer_numpy_forward(dense):
    params, arch = dense
    ids = np.array([[0, 3, 1, 2, 2, 4, 4]], np.int32)  # two PAD keys at the end
    out = forward(params, jnp.asarray(ids), arch, collect_residuals=True)
    got = np.stack([np.asarray(r[0]) for r in out.residuals])
    want = _numpy_forward(params, arch, ids[0])
    assert got.shape == (len(arch.sublayers) + 1, 7, 8)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_last_residual_is_the_final_residual_and_first_is_the_embedding(dense, k4):
    params, arch = dense
    ids = jnp.asarray([[0, 1, 2, 3, 0, 1, 4]], jnp.int32)
    out = forward(params, ids, arch, collect_residuals=True)
    assert np.array_equal(np.asarray(out.residuals[-1]), np.asarray(out.residual))
    emb = np.asarray(params["embed"]["token"])[np.asarray(ids)] + np.asarray(params["embed"]["pos"])[:7][None]
    np.testing.assert_array_equal(np.asarray(out.residuals[0]), emb.astype(np.float32))
    rs = k4.residual_stream([0, 1, 2, 0, 1, 2, 2, 1])
    final = np.asarray(k4.forward_ids(k4.encode([[0, 1, 2, 0, 1, 2, 2, 1]])).residual[0])
    np.testing.assert_array_equal(rs.values[-1], final)


def test_attention_write_is_the_sum_of_its_heads_and_other_rows_do_not_change(k4):
    x = [2, 0, 1, 1, 0, 2, 0, 0, 1, 2, 1, 0]
    rs = k4.residual_stream(x)
    d = len(rs.labels)
    heads = iter(rs.head_outputs)
    assert len(rs.stages) == len(k4.arch.sublayers) + 1 == rs.values.shape[0]
    for i, spec in enumerate(k4.arch.sublayers):
        written = rs.written(i)
        untouched = np.setdiff1d(np.arange(d), spec.rows("out_rows", d))
        assert np.all(written[:, untouched] == 0.0), rs.stages[i + 1]
        if spec.kind == "attn":
            h = next(heads)
            assert h.shape == (k4.params["layers"][i]["w_q"].shape[0], len(x) + 1, d)
            assert np.all(h[..., untouched] == 0.0)
            np.testing.assert_allclose(h.sum(0), written, atol=1e-5)
    assert next(heads, None) is None


def test_dense_attention_write_is_heads_plus_output_bias(dense):
    params, arch = dense
    out = forward(params, jnp.asarray([[0, 2, 1, 3, 3, 1, 0]], jnp.int32), arch, collect_residuals=True)
    a = 0
    for i, spec in enumerate(arch.sublayers):
        if spec.kind == "attn":
            write = np.asarray(out.residuals[i + 1] - out.residuals[i])[0]
            heads = np.asarray(out.head_outputs[a])[0].sum(0) + np.asarray(params["layers"][i]["b_o"])
            np.testing.assert_allclose(heads, write, atol=1e-5)
            a += 1
    assert a == len(out.head_outputs) == len(out.scores) == 2


def test_softmax_weights_are_the_softmax_of_the_masked_scores(dense):
    params, arch = dense
    out = forward(params, jnp.asarray([[0, 2, 1, 3, 1, 4, 4]], jnp.int32), arch, collect_attention=True,
                  collect_residuals=True)
    allowed = np.tril(np.ones((7, 7), bool)) & (np.array([0, 2, 1, 3, 1, 4, 4]) != 4)[None]
    for s, w in zip(out.scores, out.attention):
        s, w = np.asarray(s, np.float64)[0], np.asarray(w)[0]
        e = np.where(allowed, np.exp(s - np.where(allowed, s, -np.inf).max(-1, keepdims=True)), 0.0)
        np.testing.assert_allclose(w, e / e.sum(-1, keepdims=True), atol=1e-6)
        assert np.all(w[:, ~allowed] == 0.0)


def test_off_by_default_and_the_same_outputs_when_on(k4):
    ids = k4.encode([[0, 1, 2, 2, 1, 0, 0, 1, 2, 1, 1, 0]])
    off = k4.forward_ids(ids, collect_attention=True)
    on = k4.forward_ids(ids, collect_attention=True, collect_residuals=True)
    assert off.residuals == () and off.head_outputs == () and off.scores == ()
    assert np.array_equal(np.asarray(off.logits), np.asarray(on.logits))
    assert np.array_equal(np.asarray(off.residual), np.asarray(on.residual))
    for a, b in zip(off.attention, on.attention):
        assert np.array_equal(np.asarray(a), np.asarray(b))


def test_off_adds_no_operation_to_the_traced_forward(k4):
    """Off, the jaxpr has exactly the on-jaxpr's projections less one per attention sublayer (head outputs).

    A projection is a matrix product, or a gather where the plan (``runtime.plan``) made one; both
    weight sets are checked.
    """
    ids = jnp.asarray(k4.encode([[0, 1, 2, 2]]))

    def products(collect, params):
        jaxpr = str(jax.make_jaxpr(lambda p, i: forward.__wrapped__(p, i, k4.arch, collect_residuals=collect))(
            params, ids))
        return jaxpr.count("dot_general") + jaxpr.count("gather[")

    n_attn = sum(s.kind == "attn" for s in k4.arch.sublayers)
    for params in (k4.jparams, k4.dense_jparams):
        assert products(True, params) - products(False, params) == n_attn


def test_residual_stream_object(k4):
    x = [1, 1, 0, 2, 0, 1]
    rs = depthcraft.residual_stream(k4, x)
    assert isinstance(rs, ResidualStream) and rs.tokens == x and rs.causal
    assert rs.stages == ["embeddings"] + sublayer_names(k4.arch)
    assert rs.stages[1] == "attn 1" and rs.values.shape == (len(rs.stages), 7, len(k4.residual_labels))
    assert len(rs.attention) == len(rs.scores) == sum(s.kind == "attn" for s in k4.arch.sublayers)
    assert all(a.shape[1:] == (7, 7) for a in rs.attention)
    assert np.all(np.triu(rs.attention[0][0], 1) == 0.0)  # causal: no weight on future keys
    assert k4.decode(rs.logits[None], None)[0, 1:].tolist() == k4.run([x])[0].tolist()
    with pytest.raises(IndexError):
        rs.written(len(rs.stages) - 1)


def test_sublayer_names_count_each_kind():
    cfg = ModelConfig(depth=2, heads=1, width=4)
    assert sublayer_names(cfg.arch(pad_id=None)) == ["attn 1", "MLP 1", "attn 2", "MLP 2"]


def test_bad_input_is_named(k4):
    with pytest.raises(depthcraft.InputError, match="not in the vocabulary"):
        k4.residual_stream([0, 7])


def test_public_api_names_are_pinned():
    """The top-level API: a change here is a change of the public interface (CHANGELOG it)."""
    assert depthcraft.__all__ == sorted([
        "ANY", "CompileError", "CompiledModel", "DepthcraftError", "InputError", "ParameterError",
        "ResidualStream", "__version__", "build", "check_program", "compile_program", "get_construction",
        "list_constructions", "load", "release_memory", "residual_stream", "resolve", "save", "strategies",
        "verify"])
    for name in depthcraft.__all__:
        assert getattr(depthcraft, name) is not None
