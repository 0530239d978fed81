"""The fused trainer (issue 32): every group and seed of a sweep in one compiled step.

Same maths as the per-group trainer (train_seeds): the padded layers of a shallower model are
exact identities that stay zero, a family's batched forward is each model's own forward, the
learning rates are optax's bit for bit, and in float32 the losses of a sweep trained both ways
agree (the split layout at the cpu preset's rate; the padded one at the paper preset's). A run
stopped and resumed from its checkpoint is the uninterrupted run.
bfloat16 mode is checked against float32 on final errors, within the seeds' spread.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from depthcraft.constructions.errors import ParameterError
from depthcraft.constructions.runtime import forward
from depthcraft.verify.crosscheck import sweep
from depthcraft.verify.crosscheck.fused import (evaluate_all, family_logits, init_states, learning_rates,
                                                make_families, resolve_layout, resolve_precision, train_fused)
from depthcraft.verify.crosscheck.model import init_params
from depthcraft.verify.crosscheck.presets import get_preset
from depthcraft.verify.crosscheck.train import TrainConfig, runtime_schedule, schedule, train_seeds


def _sweep_cfg(params=None, **over):
    """The k-hop cpu preset at small sizes: N = 8, k in {1, 2, 4}, depths 1-2 and the controls."""
    base = dict(steps=100, seeds=2, width=16, depths=(1, 2), warmup=10, batch=8, chunk=20)
    base.update(over)
    return sweep.make_config(get_preset("khop", "cpu"), {"n": "8", **(params or {})}, **base)


def _groups(cfg):
    infos = [sweep.construction_info(cfg.construction, c, compile_model=False) for c in cfg.conditions]
    return sweep.seed_groups(sweep.plan(cfg, [i.bound for i in infos]))


def _losses(outcome):
    return np.array([h["loss"] for h in outcome.history])


def test_runtime_schedule_is_optax_schedule():
    for steps, warmup in [(100, 10), (1, 0), (5, 5), (40, 0), (100_000, 1000), (3, 7)]:
        cfg = TrainConfig(steps=steps, batch=2, lr=1e-3, warmup=warmup)
        counts = jnp.arange(steps + 3)
        ref = np.asarray(jax.vmap(schedule(cfg))(counts))
        got = np.asarray(jax.jit(lambda c, s, w: jax.vmap(runtime_schedule(cfg, s, w))(c))(counts, steps, warmup))
        assert np.allclose(got, ref, rtol=1e-6, atol=1e-12), (steps, warmup)


def test_precision_names():
    assert resolve_precision("float32") == "float32" and resolve_precision("bfloat16") == "bfloat16"
    assert resolve_precision("auto") == ("float32" if jax.default_backend() == "cpu" else "bfloat16")
    with pytest.raises(ParameterError, match="precision"):
        resolve_precision("float16")
    assert resolve_layout("auto") == ("split" if jax.default_backend() == "cpu" else "padded")
    with pytest.raises(ParameterError, match="layout"):
        resolve_layout("ragged")


def test_a_padded_family_computes_each_models_own_logits():
    """Depths 1-3 stacked and padded to 3: the family's forward (layers skipped) and the padded
    stack's plain forward (zero layers) both equal each model's own forward."""
    cfg = _sweep_cfg(depths=(1, 2, 3), control=False)
    groups = _groups(cfg)
    task = sweep.get_task(cfg.task)
    data = sweep._group_data(cfg, task, groups[0][0])
    runs = [(data, r.model, r.train.seed) for g in groups for r in g]
    (fam,) = make_families(runs)
    assert fam.depths == [3, 3, 2, 2, 1, 1] and fam.active == (6, 6, 4, 4, 2, 2)
    (params, _), = init_states([fam], runs, cfg.train)
    batch = data.sample(np.random.default_rng(0), 8)
    ids = jnp.asarray(np.broadcast_to(batch.ids, (fam.size,) + batch.ids.shape))
    fused = np.asarray(family_logits(params, ids, fam.arch, fam.active))
    pred, ce = evaluate_all(params, fam.arch, batch.ids, batch.targets)
    for m, i in enumerate(fam.members):
        d, model, seed = runs[i]
        own = init_params(model, jax.random.PRNGKey(seed), d.n_inputs, d.n_classes, d.seq_len)
        ref = np.asarray(forward(own, jnp.asarray(batch.ids), model.arch(d.pad_id)).logits)
        assert np.abs(fused[m] - ref).max() <= 1e-5 * np.abs(ref).max()
        assert np.array_equal(pred[m], ref.argmax(-1))


def _per_group(cfg, groups):
    task = sweep.get_task(cfg.task)
    out = []
    for g in groups:
        data = sweep._group_data(cfg, task, g[0])
        out += train_seeds(data, g[0].model, g[0].train, [r.train.seed for r in g], chunk=cfg.chunk, sampler="auto")
    return out


def _runs(cfg, groups):
    task = sweep.get_task(cfg.task)
    return [(sweep._group_data(cfg, task, g[0]), r.model, r.train.seed) for g in groups for r in g]


def _worst(per_group, outcomes):
    worst = 0.0
    for old, new in zip(per_group, outcomes):
        assert [h["step"] for h in new.history] == [h["step"] for h in old.history]
        assert new.steps_done == 100
        a, b = _losses(old), _losses(new)
        worst = max(worst, float((np.abs(a - b) / np.abs(a)).max()))
    return worst


@pytest.fixture(scope="module")
def both_ways():
    """The small cpu-preset sweep (5 groups: depths 1-2 and the controls at 1-3, 2 seeds, 100 steps)
    at the cpu preset's learning rate (2e-3), trained by train_seeds group by group and by
    train_fused at once, float32, ``layout="split"`` (each depth's seeds vmapped on their own,
    the learning rates from optax's schedule: the per-group trainer's operations)."""
    cfg = _sweep_cfg()
    assert cfg.train.lr == get_preset("khop", "cpu").lr == 2e-3
    groups = _groups(cfg)
    runs = _runs(cfg, groups)
    fused = train_fused(runs, cfg.train, chunk=cfg.chunk, sampler="auto", precision="float32", layout="split")
    return cfg, groups, runs, _per_group(cfg, groups), fused


def test_fused_float32_losses_equal_the_per_group_trainers(both_ways):
    """Issue 32's target, < 1e-5 relative after 100 steps at the cpu preset's rate. At this rate
    the trajectory has no float32 slack: the per-group trainer against itself (seeds vmapped
    together vs one at a time) differs by 1.6e-2 (benchmarks/fused_noise.py), so only the same
    operations reach it; the split layout gives them (measured: 0, bit for bit)."""
    cfg, groups, runs, per_group, fused = both_ways
    assert len(fused.families) == 5 and fused.stats["models"] == len(runs) == 10
    assert fused.stats["layout"] == "split"
    worst = _worst(per_group, fused.outcomes)
    print(f"float32 fused (split) vs per-group at lr 2e-3: max relative loss difference {worst:.2e}")
    assert worst < 1e-5, worst
    for old, new in zip(per_group, fused.outcomes):  # the weights too
        for a, b in zip(jax.tree_util.tree_leaves(old.params), jax.tree_util.tree_leaves(new.params)):
            assert np.abs(np.asarray(a) - np.asarray(b)).max() <= 1e-5 * max(np.abs(np.asarray(a)).max(), 1e-3)


def test_learning_rates_are_optax_schedule_bit_for_bit():
    cfg = TrainConfig(steps=100, batch=2, lr=2e-3, warmup=10)
    ref = np.asarray(jax.jit(jax.vmap(schedule(cfg)))(jnp.arange(100)))
    assert np.array_equal(np.asarray(learning_rates(cfg, 0, 100)), ref)
    assert np.array_equal(np.asarray(learning_rates(cfg, 40, 60)), ref[40:60])


@pytest.fixture(scope="module")
def padded_ways():
    """The same sweep at the paper preset's rate (1e-4), ``layout="padded"`` (every depth of a
    family in one padded stack): other reduction shapes than the per-group trainer's, which at
    2e-3 Adam carries to 5e-3 within 100 steps (benchmarks/fused_noise.py), at 1e-4 not."""
    cfg = _sweep_cfg(lr=1e-4)
    groups = _groups(cfg)
    runs = _runs(cfg, groups)
    fused = train_fused(runs, cfg.train, chunk=cfg.chunk, sampler="auto", precision="float32", layout="padded")
    return cfg, groups, runs, _per_group(cfg, groups), fused


@pytest.mark.slow  # 40 s of compilation; padding in the default run: test_one_entry_point_padded_bfloat16_...
def test_padded_float32_losses_equal_the_per_group_trainers_at_lr_1e4(padded_ways):
    cfg, groups, runs, per_group, fused = padded_ways
    assert len(fused.families) == 2 and fused.stats["layout"] == "padded"
    worst = _worst(per_group, fused.outcomes)
    print(f"float32 fused (padded) vs per-group at lr 1e-4: max relative loss difference {worst:.2e}")
    assert worst < 1e-5, worst


@pytest.mark.slow  # shares padded_ways; the default run checks each member's own sublayers come back
def test_padded_layers_stay_zero_and_unpadded_weights_are_each_runs(padded_ways):
    cfg, groups, runs, per_group, fused = padded_ways
    for fam, params in zip(fused.families, fused.params):
        n_sub = [len(runs[i][1].arch(fam.data.pad_id).sublayers) for i in fam.members]
        for j, layer in enumerate(params["layers"]):
            for m, n in enumerate(n_sub):
                if j >= n:
                    assert all(not np.asarray(a[m]).any() for a in jax.tree_util.tree_leaves(layer))
        for m, i in enumerate(fam.members):
            assert len(fused.outcomes[i].params["layers"]) == n_sub[m]


def test_a_resumed_run_is_the_uninterrupted_run(both_ways, tmp_path):
    """Stopped at step 60 (checkpoint at the end), then called again: it continues from 60 and
    ends with the uninterrupted run's losses and weights, bit for bit. A checkpoint of other
    settings is refused, not resumed."""
    cfg, groups, runs, per_group, fused = both_ways
    ckpt = str(tmp_path / "ckpt")
    first = train_fused(runs, cfg.train, chunk=cfg.chunk, precision="float32", layout="split", stop_at=60,
                        checkpoint_dir=ckpt)
    assert first.outcomes[0].steps_done == 60 and first.stats["checkpoints"]
    again = train_fused(runs, cfg.train, chunk=cfg.chunk, precision="float32", layout="split", checkpoint_dir=ckpt)
    assert again.stats["resumed_from"] == 60 and again.stats["chunks"][0]["step"] == 80
    for ref, new in zip(fused.outcomes, again.outcomes):
        assert new.resumed_from == 60 and new.steps_done == 100
        assert new.history == ref.history
        for a, b in zip(jax.tree_util.tree_leaves(ref.params), jax.tree_util.tree_leaves(new.params)):
            assert np.array_equal(np.asarray(a), np.asarray(b))
    with pytest.raises(ParameterError, match="other settings.*lr"):
        train_fused(runs, dataclasses.replace(cfg.train, lr=1e-3), chunk=cfg.chunk, precision="float32",
                    layout="split", checkpoint_dir=ckpt)
    with pytest.raises(ParameterError, match="other settings.*layout"):
        train_fused(runs, cfg.train, chunk=cfg.chunk, precision="float32", layout="padded", checkpoint_dir=ckpt)


@pytest.mark.slow  # bfloat16 tracking float32 stays in the default run (test_one_entry_point_padded_bfloat16_...)
def test_bfloat16_final_errors_are_within_the_seeds_spread():
    """bfloat16 products (float32 masters) against float32, on a tiny sweep that learns: the
    mean final curve error over seeds moves by no more than the float32 seeds' spread."""
    cfg = _sweep_cfg({"k": "0,1"}, steps=200, seeds=3, depths=(2,), control=False, batch=16, chunk=50)
    groups = _groups(cfg)
    task = sweep.get_task(cfg.task)
    data = sweep._group_data(cfg, task, groups[0][0])
    runs = [(data, r.model, r.train.seed) for g in groups for r in g]
    sets = [data.eval_sets(sweep.EVAL_SEED + 1, 64)] * len(runs)
    out = {}
    for precision in ("float32", "bfloat16"):
        res = train_fused(runs, cfg.train, chunk=cfg.chunk, precision=precision, eval_sets=sets, eval_every=200)
        assert res.stats["precision"] == precision
        out[precision] = np.array([np.mean(list(o.curve[-1]["error"].values())) for o in res.outcomes])
    f32, bf16 = out["float32"], out["bfloat16"]
    spread = max(f32.max() - f32.min(), 0.02)
    print(f"final errors: float32 {np.round(f32, 4)}, bfloat16 {np.round(bf16, 4)}, spread {spread:.4f}")
    assert abs(bf16.mean() - f32.mean()) <= spread, (f32, bf16)
    assert f32.mean() < 0.5  # it learned something: the comparison is not of two untrained models


def test_fused_sweep_validation():
    with pytest.raises(ParameterError, match="bfloat16"):
        sweep.make_config(get_preset("khop", "cpu"), precision="bfloat16")
    cfg = sweep.make_config(get_preset("khop", "cpu"), trainer="fused", precision="bfloat16")
    assert cfg.trainer == "fused" and cfg.precision == "bfloat16"
    with pytest.raises(ParameterError, match="chunk"):
        train_fused([(None, None, 0)], dataclasses.replace(cfg.train), chunk=0)


def test_the_run_length_is_not_part_of_the_compiled_step():
    """Calibration (a few steps of a schedule) and the run (another length and warm-up) share one
    compiled chunk function."""
    from depthcraft.verify.crosscheck.fused import fused_chunk_fn

    cfg = _sweep_cfg(control=False)
    groups = _groups(cfg)
    task = sweep.get_task(cfg.task)
    runs = [(sweep._group_data(cfg, task, g[0]), r.model, r.train.seed) for g in groups for r in g]
    fams = make_families(runs)
    a = fused_chunk_fn(fams, cfg.train, 20, "float32")
    b = fused_chunk_fn(fams, dataclasses.replace(cfg.train, steps=5000, warmup=300), 20, "float32")
    assert a is b
    assert fused_chunk_fn(fams, dataclasses.replace(cfg.train, lr=1e-4), 20, "float32") is not a


def test_one_entry_point_padded_bfloat16_keeps_padding_and_tracks_float32(tiny_training):
    """train(jobs, "fused") with the GPU's settings on the CPU (issue 41): depths 1 and 2 in one padded
    family; the depth-1 member comes back with its own sublayers only, and bfloat16's losses stay within
    0.05 nats of float32's over the 12 steps."""
    import dataclasses

    from depthcraft.verify.crosscheck.trainer import TrainJob, train

    data, mc, tc, chunk = tiny_training
    jobs = [TrainJob(data=data, model=dataclasses.replace(mc, depth=d), train=tc, seeds=(0,), chunk=chunk,
                     sampler="numpy", layout="padded", precision=p) for d in (1, 2) for p in ("bfloat16",)]
    res = train(jobs, "fused")
    assert res.fused.stats["layout"] == "padded" and res.fused.stats["precision"] == "bfloat16"
    assert res.fused.stats["families"] == 1
    (shallow,), (deep,) = res.outcomes
    assert len(shallow.params["layers"]) == len(mc.arch(data.pad_id).sublayers) // mc.depth
    ref = train([dataclasses.replace(j, precision="float32") for j in jobs], "fused")
    for got, want in zip((shallow, deep), (ref.outcomes[0][0], ref.outcomes[1][0])):
        diff = np.abs(np.array([h["loss"] for h in got.history]) - np.array([h["loss"] for h in want.history]))
        assert diff.max() < 0.05


def test_backends_state_what_they_support(tiny_training):
    from depthcraft.verify.crosscheck.trainer import BACKENDS, TrainJob, check_backend, train

    data, mc, tc, chunk = tiny_training
    with pytest.raises(ParameterError, match="needs trainer='fast' or 'fused', not 'loop'"):
        check_backend("loop", exit_error=0.1)
    with pytest.raises(ParameterError, match="needs trainer='fast'"):
        check_backend("fused", curriculum=0.9)
    with pytest.raises(ParameterError, match="expected one of loop, fast, fused"):
        check_backend("gpu")
    assert BACKENDS["fused"].jobs_together and not BACKENDS["fast"].jobs_together
    with pytest.raises(ParameterError, match="one checkpoint per seed"):
        train(TrainJob(data=data, model=mc, train=tc, seeds=(0, 1), checkpoint_dir="x"), "loop")
