"""Training: a tiny run learns 1-hop with 2 layers; checkpoints resume exactly."""

import os

import jax
import numpy as np
import pytest

from depthcraft.constructions.errors import InputError, ParameterError
from depthcraft.verify.crosscheck.checkpoint import read_meta
from depthcraft.verify.crosscheck.data import TaskData
from depthcraft.verify.crosscheck.model import ModelConfig, init_params
from depthcraft.verify.crosscheck.train import TrainConfig, evaluate, train_loop
from depthcraft.verify.tasks import get_task

KHOP = get_task("khop")
#: Steps of the tiny 1-hop run (about 15 s of CPU time).
TINY_STEPS = 600


def _leaves(tree):
    return [np.asarray(a) for a in jax.tree_util.tree_leaves(tree)]


def test_resume_gives_the_parameters_of_an_uninterrupted_run(tmp_path, tiny_training):
    data, mc, tc, _ = tiny_training  # 12 steps
    full = train_loop(data, mc, tc)
    ckpt = str(tmp_path / "run")
    half = train_loop(data, mc, tc, checkpoint_dir=ckpt, stop_at=3)
    assert read_meta(ckpt)["step"] == 3
    rest = train_loop(data, mc, tc, checkpoint_dir=ckpt)
    assert rest.resumed_from == 3
    assert read_meta(ckpt)["step"] == 12
    assert [n for n in os.listdir(ckpt) if n.endswith(".safetensors")] == ["state-000000012.safetensors"]
    for a, b in zip(_leaves(full.params), _leaves(rest.params)):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    assert rest.history == full.history
    # the nine steps after the checkpoint did change the weights
    assert any(not np.array_equal(a, b) for a, b in zip(_leaves(half.params), _leaves(rest.params)))
    # a finished checkpoint is loaded, not retrained
    again = train_loop(data, mc, tc, checkpoint_dir=ckpt)
    assert again.resumed_from == 12
    for a, b in zip(_leaves(full.params), _leaves(again.params)):
        assert np.array_equal(a, b)


def test_checkpoint_with_other_settings_is_refused(tmp_path, tiny_training):
    data, mc, tc, _ = tiny_training
    ckpt = str(tmp_path / "run")
    train_loop(data, mc, tc, checkpoint_dir=ckpt, stop_at=1)
    other = TrainConfig(**{**tc.to_json(), "lr": 5e-3})
    with pytest.raises(ParameterError, match=r"train\.lr: saved 0\.01, now 0\.005"):
        train_loop(data, mc, other, checkpoint_dir=ckpt)


def test_corrupt_checkpoint_is_an_input_error(tmp_path, tiny_training):
    data, mc, tc, _ = tiny_training
    ckpt = str(tmp_path / "run")
    train_loop(data, mc, tc, checkpoint_dir=ckpt, stop_at=2)
    arrays = os.path.join(ckpt, read_meta(ckpt)["arrays"])
    with open(arrays, "wb") as f:
        f.write(b"not a safetensors file")
    with pytest.raises(InputError, match="unreadable"):
        train_loop(data, mc, tc, checkpoint_dir=ckpt)


def test_init_shapes(tiny_training):
    # the shared setup's model and data (so the initial weights' shapes are those the training tests draw)
    data, mc, _, _ = tiny_training
    assert (mc.depth, mc.heads, mc.width, mc.mlp) == (2, 2, 16, True)
    assert (data.n_inputs, data.n_classes, data.seq_len) == (6, 4, 7)  # 3 tokens, 2 BOS, PAD; 3 tokens and ⊥
    p = init_params(mc, jax.random.PRNGKey(0), n_inputs=6, n_outputs=4, seq_len=7)
    assert p["embed"]["token"].shape == (6, 16) and p["embed"]["pos"].shape == (7, 16)
    assert len(p["layers"]) == 4  # attention + MLP per layer
    assert p["layers"][0]["w_q"].shape == (2, 16, 8) and p["layers"][0]["w_o"].shape == (2, 8, 16)
    assert p["layers"][1]["w_1"].shape == (16, 64)
    assert p["unembed"]["w"].shape == (16, 4)
    arch = mc.arch(pad_id=5)
    assert [s.kind for s in arch.sublayers] == ["attn", "mlp"] * 2
    assert arch.sublayers[0].qk_scale == pytest.approx(1 / np.sqrt(8))


def test_bad_model_config_is_named():
    with pytest.raises(ParameterError, match="width=30 must be divisible by heads=4"):
        ModelConfig(depth=1, heads=4, width=30)
    with pytest.raises(ParameterError, match="depth must be an integer >= 1, got 0"):
        ModelConfig(depth=0, heads=1, width=8)
    with pytest.raises(ParameterError, match="hardmax"):
        ModelConfig(depth=1, heads=1, width=8, attention="hardmax")


def test_tiny_run_learns_one_hop_with_two_layers():
    """<= 60 s on 2 cores: 2 attention layers learn 1-hop (an induction head) to < 5% error."""
    data = TaskData(KHOP, [KHOP.resolve({"k": 1, "n": 16, "vocab": 4})])
    mc = ModelConfig(depth=2, heads=2, width=32)
    tc = TrainConfig(steps=TINY_STEPS, batch=32, lr=3e-3, warmup=50, eval_size=512)
    out = train_loop(data, mc, tc)
    (ev,) = evaluate(out.params, out.arch, data, data.eval_sets(1, 512))
    assert ev["scored"] > 1000
    assert ev["error"] < 0.05, ev["error"]



def test_evaluation_size_does_not_block_resuming(tmp_path, tiny_training):
    data, mc, tc, _ = tiny_training
    ckpt = str(tmp_path / "run")
    train_loop(data, mc, tc, checkpoint_dir=ckpt, stop_at=2)
    out = train_loop(data, mc, TrainConfig(**{**tc.to_json(), "eval_size": 99}), checkpoint_dir=ckpt)
    assert out.resumed_from == 2
