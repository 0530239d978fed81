"""Looped depth (issue 41; Saunshi et al., ICLR 2025): one block's weights shared by every layer.

The model keeps the runtime layout (the block's arrays ``depth`` times); the optimiser ties the
copies. Checked: the copies start and stay equal bit for bit; the shared gradient is the sum of
the copies' gradients (an update differs from the unlooped model's); the parameter count counts
the block once; the looped rule (verify/crosscheck/claims/looped.py) on synthetic sweeps.
"""

import dataclasses

import jax
import numpy as np
import optax
import pytest

from depthcraft.constructions.errors import ParameterError
from depthcraft.verify.crosscheck.model import count_params, init_params, tie_blocks
from depthcraft.verify.crosscheck.train import train_seeds


def _layers_equal(params, block):
    layers = params["layers"]
    for i in range(block, len(layers)):
        for a, b in zip(jax.tree_util.tree_leaves(layers[i]), jax.tree_util.tree_leaves(layers[i % block])):
            if not np.array_equal(np.asarray(a), np.asarray(b)):
                return False
    return True


def test_looped_init_repeats_one_block(tiny_training):
    data, mc, _, _ = tiny_training
    lm = dataclasses.replace(mc, looped=True, depth=3)
    p = init_params(lm, jax.random.PRNGKey(0), data.n_inputs, data.n_classes, data.seq_len)
    assert len(p["layers"]) == 6 and _layers_equal(p, 2)
    plain = init_params(dataclasses.replace(lm, looped=False), jax.random.PRNGKey(0), data.n_inputs,
                        data.n_classes, data.seq_len)
    assert not _layers_equal(plain, 2)
    block = sum(np.size(a) for a in jax.tree_util.tree_leaves(p["layers"][:2]))
    assert count_params(p, lm) == count_params(p) - 2 * block
    assert lm.tie == (2, 3) and dataclasses.replace(lm, mlp=False).tie == (1, 3) and mc.tie is None


def test_tie_blocks_sums_the_copies_gradients_and_writes_one_update():
    gather, scatter = tie_blocks(1, 3)
    g = {"embed": np.ones(2), "layers": [{"w": np.full(2, 1.0)}, {"w": np.full(2, 2.0)}, {"w": np.full(2, 4.0)}]}
    up, _ = gather.update(g, gather.init(g))
    assert np.array_equal(up["layers"][0]["w"], [7.0, 7.0]) and not np.any(up["layers"][2]["w"])
    # clipping after gather sees the shared gradient once: norm sqrt(2 + 2 x 49) = 10
    assert float(optax.tree.norm(up)) == pytest.approx(10.0)
    out, _ = scatter.update(up, scatter.init(up))
    assert all(np.array_equal(layer["w"], [7.0, 7.0]) for layer in out["layers"])
    with pytest.raises(ParameterError):
        tie_blocks(0, 2)


def test_a_looped_model_trains_with_its_copies_equal(tiny_training):
    data, mc, tc, chunk = tiny_training
    lm = dataclasses.replace(mc, looped=True)
    (out,) = train_seeds(data, lm, tc, [0], chunk=chunk, sampler="numpy")
    assert _layers_equal(out.params, 2)
    first = init_params(lm, jax.random.PRNGKey(0), data.n_inputs, data.n_classes, data.seq_len)
    moved = np.abs(np.asarray(out.params["layers"][0]["w_q"]) - np.asarray(first["layers"][0]["w_q"])).max()
    assert moved > 0
    (plain,) = train_seeds(data, dataclasses.replace(lm, looped=False), tc, [0], chunk=chunk, sampler="numpy")
    assert out.n_params < plain.n_params
    assert out.history[-1]["loss"] != plain.history[-1]["loss"]


def _sweep(errors_by_depth, seeds=3, jitter=0.002):
    """A results.json-like sweep: depth -> {k: mean error}, each seed off by -jitter, 0, +jitter."""
    names = [f"k={k}" for k in (1, 2, 3, 4, 6, 8)]
    runs = []
    for d, errs in errors_by_depth.items():
        for s in range(seeds):
            off = (s - 1) * jitter
            runs.append({"depth": d, "control": False, "seed": s, "conditions": names,
                         "error": {f"k={k}": max(0.0, e + off) for k, e in errs.items()}})
    return {"task": "khop", "complete": True, "runs": runs,
            "settings": {"condition_names": names, "model": {}, "train": {}, "seeds": seeds}}


def _errors(kstar):
    return {k: (0.0 if k <= kstar else 0.3) for k in (1, 2, 3, 4, 6, 8)}


def test_looped_rule_matches_reproduced_and_worse_not_reproduced():
    from depthcraft.verify.crosscheck.claims import looped

    plain = _sweep({d: _errors(k) for d, k in {2: 1, 3: 2, 4: 4, 5: 6}.items()})
    same = _sweep({d: _errors(k) for d, k in {2: 1, 3: 2, 4: 4, 5: 6}.items()})
    r = looped.judge_looped(same, plain)
    assert r["verdict"] == "reproduced", r["evidence"]
    assert r["measured"]["depths"]["5"]["difference"] == pytest.approx(0.0, abs=1e-9)
    fewer = _sweep({d: _errors(k) for d, k in {2: 1, 3: 2, 4: 2, 5: 3}.items()})
    r = looped.judge_looped(fewer, plain)
    assert r["verdict"] == "not reproduced" and "L=4" in r["evidence"] and "L=3" not in r["evidence"].split("worse at")[1]
    # two seeds only: inconclusive
    assert looped.judge_looped(_sweep({2: _errors(1), 3: _errors(2)}, seeds=2),
                               _sweep({2: _errors(1), 3: _errors(2)}))["verdict"] == "inconclusive"


def test_looped_rule_needs_a_difference_that_matters():
    """Mean error over k higher by 0.005 (< 0.01) with the same k*: no depth is worse."""
    from depthcraft.verify.crosscheck.claims import looped

    plain = _sweep({d: _errors(k) for d, k in {2: 1, 3: 2, 4: 4}.items()}, jitter=0.0)
    worse = _sweep({d: {k: e + 0.005 for k, e in _errors(k).items()} for d, k in {2: 1, 3: 2, 4: 4}.items()},
                   jitter=0.0)
    r = looped.judge_looped(worse, plain)
    assert r["verdict"] == "reproduced" and r["measured"]["depths"]["2"]["difference"] == pytest.approx(0.005)
