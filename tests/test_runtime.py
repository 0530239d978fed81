"""The batched runtime equals tracr's own forward; attention kinds; padding and causality."""

import jax.numpy as jnp
import numpy as np
import pytest
from tracr.compiler import compiling

from depthcraft.constructions.compiler import compile_program, compile_with_tracr
from depthcraft.constructions.model import BOS, PAD
from depthcraft.constructions.runtime import attention_weights
from depthcraft.rasp_programs.khop import BOT, khop_doubling, khop_rasp



def test_runtime_equals_tracr_apply_on_tracr_compiled_program():
    program = khop_rasp(2)
    ours = compile_with_tracr(program, vocab=range(3), max_seq_len=8)
    tracr_model = compiling.compile_rasp_to_model(program, vocab={0, 1, 2}, max_seq_len=8, causal=True,
                                                  compiler_bos=BOS, compiler_pad=PAD)
    rng = np.random.default_rng(0)
    for _ in range(5):
        x = rng.integers(0, 3, size=8).tolist()
        ref = tracr_model.apply([BOS] + x)
        res = ours.forward_ids(ours.encode([x]))
        np.testing.assert_allclose(np.asarray(res.residual[0]), np.asarray(ref.transformer_output[0]),
                                   atol=1e-4, rtol=1e-4)
        decoded = ours.decode(np.asarray(res.logits), none_value=None)[0, 1:]
        tracr_decoded = ref.decoded[1:]
        for a, b in zip(decoded, tracr_decoded):
            if a is not None:  # tracr's argmax reads a zero vector as the first value; we read "no value"
                assert a == b


def test_runtime_equals_tracr_apply_on_hand_built_heads():
    """Our compile path assembles through tracr too: its AssembledTransformerModel.apply is the reference."""
    from depthcraft.constructions.compiler import assemble_program
    from depthcraft.constructions.model import from_tracr

    tracr_model, labels, _ = assemble_program(khop_doubling(5), vocab=range(4), max_seq_len=16)
    ours = from_tracr(tracr_model, output_labels=labels, max_seq_len=16, causal=True)
    rng = np.random.default_rng(1)
    xs = rng.integers(0, 4, size=(6, 16))
    res = ours.forward_ids(ours.encode(xs))
    for r, x in enumerate(xs):
        ref = tracr_model.apply([BOS] + x.tolist())
        np.testing.assert_allclose(np.asarray(res.residual[r]), np.asarray(ref.transformer_output[0]),
                                   atol=1e-3, rtol=1e-4)
        assert ours.decode(np.asarray(res.logits[r:r + 1]), BOT)[0, 1:].tolist() == ref.decoded[1:]


def test_padding_and_batching_do_not_change_outputs():
    model = compile_program(khop_doubling(3), vocab=range(3), max_seq_len=12)
    x = np.random.default_rng(2).integers(0, 3, size=(7, 9))
    a = model.decode(np.asarray(model.forward_ids(model.encode(x)).logits), BOT)
    b = model.decode(np.asarray(model.forward_ids(model.encode(x, length=13)).logits), BOT)[:, :10]
    c = np.concatenate([model.decode(np.asarray(model.forward_ids(model.encode(x[i:i + 1])).logits), BOT)
                        for i in range(7)])
    assert (a == b).all() and (a == c).all()


def test_hardmax_is_reference_semantics_and_matches_softmax_construction():
    model = compile_program(khop_doubling(4), vocab=range(3), max_seq_len=10)
    x = np.random.default_rng(3).integers(0, 3, size=(50, 10))
    soft = model.decode(np.asarray(model.forward_ids(model.encode(x)).logits), BOT)
    import dataclasses
    hard_model = dataclasses.replace(model, arch=dataclasses.replace(model.arch, attention="hardmax"))
    hard = hard_model.decode(np.asarray(hard_model.forward_ids(hard_model.encode(x)).logits), BOT)
    assert (soft == hard).all()


def test_attention_kinds_on_hand_made_scores():
    scores = jnp.asarray([[[[1.0, 3.0, 3.0, -2.0]]]])
    mask = jnp.asarray([[[[True, True, True, False]]]])
    hard = np.asarray(attention_weights(scores, mask, "hardmax"))[0, 0, 0]
    assert hard.tolist() == [0.0, 0.5, 0.5, 0.0]
    relu = np.asarray(attention_weights(scores, mask, "relu"))[0, 0, 0]
    assert relu.tolist() == [1.0, 3.0, 3.0, 0.0]
    soft = np.asarray(attention_weights(scores, mask, "softmax"))[0, 0, 0]
    e = np.exp([1.0, 3.0, 3.0])
    np.testing.assert_allclose(soft[:3], e / e.sum(), rtol=1e-6)
    assert soft[3] == 0.0
    with pytest.raises(ValueError, match="attention must be one of"):
        from depthcraft.constructions.runtime import Arch
        Arch(sublayers=(), attention="sigmoid")


def test_encode_errors_name_the_bad_value():
    from depthcraft.constructions.errors import InputError

    model = compile_program(khop_doubling(1), vocab=range(3), max_seq_len=5)
    with pytest.raises(InputError, match="token 7 at position 2"):
        model.encode(np.asarray([[0, 7, 1]]))
    with pytest.raises(InputError, match="longer than max_seq_len=5"):
        model.encode(np.zeros((1, 6), int))
    with pytest.raises(InputError, match="empty input"):
        model.encode([[]])
    with pytest.raises(InputError, match="'x'"):
        model.encode([["x"]])


_COMPILES = []


def _count_compiles(event, duration, **kwargs):
    if event == "/jax/core/compile/backend_compile_duration":
        _COMPILES.append(event)


def test_as_jax_gives_jnp_asarray_s_arrays_without_compiling():
    import jax
    import jax.monitoring

    from depthcraft.constructions.runtime import as_jax

    already = jnp.ones((2, 2))
    tree = {"w": np.linspace(-1, 1, 15).reshape(3, 5), "ids": np.arange(7), "mask": np.array([True, False, True]),
            "f32": np.full((2, 9), 0.1, np.float32), "scalar": 3.5, "jax": already, "layers": [np.eye(3)]}
    want = jax.tree_util.tree_map(jnp.asarray, tree)
    jax.monitoring.register_event_duration_secs_listener(_count_compiles)
    before = len(_COMPILES)
    got = as_jax({k: v for k, v in tree.items() if k != "scalar"})  # a Python scalar goes through jnp.asarray
    assert len(_COMPILES) == before  # device_put: no XLA compilation
    assert got["jax"] is already
    for k, g in got.items():
        for a, b in zip(jax.tree_util.tree_leaves(g), jax.tree_util.tree_leaves(want[k])):
            assert isinstance(a, jax.Array) and a.dtype == b.dtype and a.shape == b.shape
            assert a.weak_type == b.weak_type and np.array_equal(np.asarray(a), np.asarray(b))
    assert got["w"].dtype == jnp.float32 and got["ids"].dtype == jnp.int32  # canonicalised as jnp.asarray does
    assert as_jax(2.0).weak_type and float(as_jax(2.0)) == 2.0
