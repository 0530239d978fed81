"""The fast trainer (scan over steps, vmap over seeds) and the JAX samplers.

Same numbers for the same seed where the maths is unchanged: train_seeds with the
numpy-fed batches against the one-step loop (train), a vmapped seed against the
same seed alone, and a resumed run against an uninterrupted one. XLA compiles the
scanned / vmapped step as a different program from the single jitted step, so
float sums may be reassociated: the losses are compared to FLOAT_TOL nats (the
histories are rounded to 1e-6), not bit for bit.

The JAX samplers are checked against the task's numpy reference: every drawn
instance is decoded and its targets recomputed by the task's own reference
(exact), and the distribution's properties are compared with the numpy sampler's
within 5 standard errors.
"""

import json
import math

import jax
import numpy as np
import pytest

from depthcraft.constructions.errors import ParameterError
from depthcraft.verify.crosscheck.checkpoint import read_meta
from depthcraft.verify.crosscheck.data import Batch, TaskData
from depthcraft.verify.crosscheck.samplers import has_jax_sampler, jax_sampler
from depthcraft.verify.crosscheck.train import (TrainConfig, marginal_entropy, plateau_exit_step, train_loop,
                                                train_seeds)
from depthcraft.verify.tasks import get_task

KHOP, ICQA = get_task("khop"), get_task("icqa")
#: Largest loss difference (nats) accepted between two computations of the same maths.
FLOAT_TOL = 1e-5


#: The tests train the session's one small setup (``tiny_training`` in conftest.py: one config, one
#: chunk size of 4 steps), so they share compiled training programs with each other and with the other
#: training tests. Each scanned, vmapped training program takes 7-16 s to compile on a cold cache (1 core).


def _losses(outcome):
    return np.array([h["loss"] for h in outcome.history])


def test_one_seed_with_numpy_batches_matches_the_loop(tiny_training):
    data, mc, tc, chunk = tiny_training
    for seed in (0, 3):
        old = train_loop(data, mc, TrainConfig(**{**tc.to_json(), "seed": seed}))
        (new,) = train_seeds(data, mc, tc, [seed], chunk=chunk, sampler="numpy")
        assert [h["step"] for h in new.history] == [h["step"] for h in old.history] == list(range(1, 13))
        assert np.abs(_losses(new) - _losses(old)).max() <= FLOAT_TOL
        assert new.steps_done == 12 and new.exit_reason == "" and new.sampler == "numpy"


def test_a_vmapped_seed_equals_that_seed_alone(tiny_training):
    data, mc, tc, chunk = tiny_training
    together = train_seeds(data, mc, tc, [0, 1, 2], chunk=chunk, sampler="numpy")
    for i, seed in enumerate((0, 1, 2)):
        (alone,) = train_seeds(data, mc, tc, [seed], chunk=chunk, sampler="numpy")
        assert np.abs(_losses(together[i]) - _losses(alone)).max() <= FLOAT_TOL
    # and the seeds are different runs
    assert np.abs(_losses(together[0]) - _losses(together[1])).max() > 1e-3
    with_jax = train_seeds(data, mc, tc, [0, 1], chunk=chunk, sampler="jax")
    (alone,) = train_seeds(data, mc, tc, [1], chunk=chunk, sampler="jax")
    assert np.abs(_losses(with_jax[1]) - _losses(alone)).max() <= FLOAT_TOL


def test_resume_matches_an_uninterrupted_run(tmp_path, tiny_training):
    data, mc, tc, chunk = tiny_training
    full = train_seeds(data, mc, tc, [0, 1], chunk=chunk, sampler="jax")
    ckpt = str(tmp_path / "group")
    train_seeds(data, mc, tc, [0, 1], chunk=chunk, sampler="jax", checkpoint_dir=ckpt, stop_at=6)
    assert read_meta(ckpt)["step"] == 6
    rest = train_seeds(data, mc, tc, [0, 1], chunk=chunk, sampler="jax", checkpoint_dir=ckpt)
    assert rest[0].resumed_from == 6 and rest[0].steps_done == 12
    for a, b in zip(full, rest):
        assert [h["step"] for h in a.history] == [h["step"] for h in b.history]
        assert np.abs(_losses(a) - _losses(b)).max() <= FLOAT_TOL
    with pytest.raises(ParameterError, match="seeds"):
        train_seeds(data, mc, tc, [0, 2], chunk=chunk, sampler="jax", checkpoint_dir=ckpt)


def test_curve_and_early_exit(tiny_training):
    data, mc, tc, chunk = tiny_training
    sets = data.eval_sets(1, 16)
    out = train_seeds(data, mc, tc, [0, 1], chunk=chunk, sampler="jax", eval_sets=sets, eval_every=4)
    assert [p["step"] for p in out[0].curve] == [4, 8, 12]
    point = out[0].curve[0]
    assert set(point["error"]) == set(data.names) and set(point["loss"]) == set(data.names)
    assert len(point["error_per_position"][data.names[0]]) == data.seq_len - 1
    # exit_error = 1.0 holds at every evaluation: the run stops at the second one
    stopped = train_seeds(data, mc, tc, [0, 1], chunk=chunk, sampler="jax", eval_sets=sets, eval_every=4,
                          exit_error=1.0, exit_patience=2)
    assert stopped[0].steps_done == 8 and stopped[1].steps_done == 8
    assert "early exit at step 8" in stopped[0].exit_reason
    assert [p["step"] for p in stopped[0].curve] == [4, 8]
    assert stopped[0].history[-1]["step"] == 8


def test_bad_arguments(tiny_training):
    data, mc, tc, chunk = tiny_training
    with pytest.raises(ParameterError, match="distinct"):
        train_seeds(data, mc, tc, [1, 1])
    with pytest.raises(ParameterError, match="chunk"):
        train_seeds(data, mc, tc, [0], chunk=0)
    with pytest.raises(ParameterError, match="sampler"):
        train_seeds(data, mc, tc, [0], sampler="torch")
    with pytest.raises(ParameterError, match="eval_sets"):
        train_seeds(data, mc, tc, [0], eval_every=5)
    tm = get_task("tm")
    tm_data = TaskData(tm, [tm.resolve({})])
    assert not has_jax_sampler(tm_data) and jax_sampler(tm_data, 4) is None
    with pytest.raises(ParameterError, match="no JAX sampler"):
        train_seeds(tm_data, mc, tc, [0], sampler="jax")


def test_plateau_exit_step_and_marginal_entropy():
    curve = [{"step": 10, "loss": {"a": 1.0}}, {"step": 20, "loss": {"a": 0.95}},
             {"step": 30, "loss": {"a": 0.89}}, {"step": 40, "loss": {"a": 0.2}}]
    assert plateau_exit_step(curve, "a", 1.0, margin=0.1) == 30
    assert plateau_exit_step(curve, "a", 1.0, margin=0.9) is None
    assert plateau_exit_step(curve, "b", 1.0) is None
    targets = np.array([[0, 1, 1, 7], [0, 2, 2, 2]], np.int32)
    mask = np.array([[0, 1, 1, 0], [0, 1, 1, 1]], np.float32)  # scored targets: 1, 1, 2, 2, 2
    b = Batch(targets, targets, mask, mask > 0, np.zeros(2, np.int32))
    p = np.array([2 / 5, 3 / 5])
    assert marginal_entropy(b) == pytest.approx(float(-(p * np.log(p)).sum()), abs=1e-12)
    assert marginal_entropy(Batch(targets, targets, 0 * mask, mask > 2, np.zeros(2, np.int32))) == 0.0


# ----------------------------------------------------------------------------- samplers
def _decode(data, ids, cond):
    """ids [b, T] of one condition -> [b, n] token values (the BOS and PAD checked)."""
    assert (ids[:, 0] == data.bos_ids[cond]).all()
    n = data.task.max_seq_len(data.conditions[cond])
    assert (ids[:, n + 1:] == data.pad_id).all()
    return np.asarray(data.tokens)[ids[:, 1:n + 1]]


def _check_against_reference(data, batch, seed):
    ids, targets, mask = (np.asarray(a) for a in jax.jit(jax_sampler(data, batch))(jax.random.PRNGKey(seed)))
    count = len(data.conditions)
    sizes = [batch // count + (1 if c < batch % count else 0) for c in range(count)]
    start, tokens = 0, []
    for c, size in enumerate(sizes):
        x = _decode(data, ids[start:start + size], c)
        ref = data.condition_batch(c, x)  # the task's numpy reference on the same inputs
        assert np.array_equal(ref.ids, ids[start:start + size])
        assert np.array_equal(ref.loss_mask, mask[start:start + size])
        assert np.array_equal(np.where(ref.loss_mask > 0, ref.targets, 0), targets[start:start + size])
        tokens.append(x)
        start += size
    return tokens


def test_khop_jax_sampler_draws_valid_instances_with_the_paper_distribution():
    conds = [KHOP.resolve({"k": k, "n": 12, "vocab": 4}) for k in (0, 1, 3)]
    conds.append(KHOP.resolve({"k": 2, "n": 9, "vocab": 3, "distribution": "uniform"}))
    data = TaskData(KHOP, conds)
    xs = [[] for _ in conds]
    for seed in range(4):
        for c, x in enumerate(_check_against_reference(data, 4 * 500 + 3, seed)):
            xs[c].append(x)
    xs = [np.concatenate(x) for x in xs]
    paper = np.concatenate(xs[:3])
    assert (paper[:, 1:] != paper[:, :-1]).all()  # no two equal neighbours
    steps = (paper[:, 1:] - paper[:, :-1]) % 4
    for values, arr, k in ((range(4), paper[:, 0], 4), (range(1, 4), steps.ravel(), 3),
                           (range(3), xs[3].ravel(), 3)):
        freq = np.array([(arr == v).mean() for v in values])
        se = math.sqrt((1 / k) * (1 - 1 / k) / arr.size)
        assert np.abs(freq - 1 / k).max() < 5 * se, freq
    assert (xs[3][:, 1:] == xs[3][:, :-1]).any()  # uniform: equal neighbours occur
    # the fraction of ⊥ targets per position agrees with the numpy sampler's (5 standard errors)
    c = 2  # k = 3
    ref = data.condition_batch(c, KHOP.sample(conds[c], np.random.default_rng(0), len(xs[c])))
    ours = data.condition_batch(c, xs[c])
    none_cls = data.classes.index(data.none_value)
    f_ref, f_ours = ((b.targets[:, 1:13] == none_cls).mean(0) for b in (ref, ours))
    se = np.sqrt(np.maximum(f_ref * (1 - f_ref), 1e-4) * 2 / len(xs[c]))
    assert (np.abs(f_ref - f_ours) < 5 * se).all()


def test_icqa_jax_sampler_draws_valid_instances():
    conds = [ICQA.resolve({"m": 3, "questions": 5, "answers": 4}), ICQA.resolve({"m": 2, "questions": 5, "answers": 4})]
    data = TaskData(ICQA, conds)
    x3, x2 = _check_against_reference(data, 2001, 7)
    for x, m in ((x3, 3), (x2, 2)):
        qs = x[:, 0:-1:2]
        assert (np.sort(qs, 1)[:, 1:] != np.sort(qs, 1)[:, :-1]).all()  # distinct questions
        assert ((qs >= 0) & (qs < 5)).all() and ((x[:, 1::2] >= 5) & (x[:, 1::2] < 9)).all()
        j = (qs == x[:, -1:]).argmax(1)
        assert (qs == x[:, -1:]).sum(1).tolist() == [1] * len(x)  # the query is one of the questions
        se = math.sqrt((1 / m) * (1 - 1 / m) / len(x))
        assert max(abs((j == i).mean() - 1 / m) for i in range(m)) < 5 * se
        q_freq = np.array([(qs == v).mean() * 5 for v in range(5)])  # each question equally likely
        assert np.abs(q_freq - 1).max() < 5 * math.sqrt(4 / (len(x) * m))


def test_jax_sampler_refuses_a_bad_batch():
    data = TaskData(KHOP, [KHOP.resolve({"k": 1, "n": 4, "vocab": 2})])
    with pytest.raises(ParameterError, match="batch must be >= 1"):
        jax_sampler(data, 0)


# ----------------------------------------------------------------------------- the sweep
def _tiny_sweep(**kw):
    from depthcraft.verify.crosscheck import sweep
    from depthcraft.verify.crosscheck.presets import get_preset

    return sweep.make_config(get_preset("khop", "cpu"), {"k": "1,2", "n": "6"}, depths=(1, 2), steps=12,
                             width=16, heads=2, eval_size=32, alignment_size=0, **kw)


@pytest.mark.slow  # about 40 s of CPU time: whole sweeps with evaluation
def test_fast_sweep_with_numpy_batches_gives_the_loop_sweep_numbers(tmp_path):
    from depthcraft.verify.crosscheck import sweep

    loop = sweep.run_sweep(_tiny_sweep(seeds=2, control=False, trainer="loop"), str(tmp_path / "loop"), plot=False)
    fast = sweep.run_sweep(_tiny_sweep(seeds=2, control=False, sampler="numpy", chunk=5), str(tmp_path / "fast"),
                           plot=False)
    assert [r["run_id"] for r in loop["runs"]] == [r["run_id"] for r in fast["runs"]]
    for a, b in zip(loop["runs"], fast["runs"]):
        assert np.abs(_losses_of(a) - _losses_of(b)).max() <= FLOAT_TOL
        for name in a["error"]:
            # 32 sequences x 6 positions: the final errors agree unless a logit tie flips within FLOAT_TOL
            assert abs(a["error"][name] - b["error"][name]) <= 2 / (32 * 6)
        assert b["trainer"] == "fast" and b["seeds_together"] == 2 and a["seeds_together"] == 1
    assert (tmp_path / "fast" / "checkpoints" / "L1_H2_d16_seeds0-1").is_dir()


def _losses_of(run):
    return np.array([h["loss"] for h in run["history"]])


@pytest.mark.slow  # about 40 s of CPU time: whole sweeps with evaluation
def test_fast_sweep_records_the_protocol(tmp_path):
    from depthcraft.verify.crosscheck import sweep

    r = sweep.run_sweep(_tiny_sweep(seeds=3), str(tmp_path / "out"), plot=False)
    assert r["complete"] and r["supervision"] == {"dense": False, "task": "khop",
                                                  "scored_positions_per_sequence": {"k=1": 6.0, "k=2": 6.0}}
    controls = [x for x in r["runs"] if x["control"]]
    # bound - 1 = 1 (k = 1, bound 2) and 2 (k = 2, bound 3), twice the heads and width, 3 seeds each
    assert sorted((x["depth"], x["heads"], x["width"]) for x in controls) == [(1, 4, 32)] * 3 + [(2, 4, 32)] * 3
    for run in r["runs"]:
        assert [p["step"] for p in run["curve"]] == list(range(1, 13))  # default: every max(1, 12 // 20) steps
        assert "error_per_position" not in run["curve"][0]
        for name, pl in run["plateau"].items():
            assert pl["margin"] == 0.1 and pl["plateau_loss"] > 0
            want = next((p["step"] for p in run["curve"] if p["loss"][name] < pl["plateau_loss"] - 0.1), None)
            assert pl["exit_step"] == want
    s = {x["condition"]: x for x in r["summary"]}
    errs = s["k=1"]["errors"]["1"]
    assert len(errs["seeds"]) == 3 and errs["std"] == pytest.approx(float(np.std(errs["seeds"], ddof=1)), abs=1e-5)
    # one mixed model covers k = 1 and k = 2: both controls (depths 1 and 2) report on k = 1 too
    assert set(s["k=1"]["plateau_exit_steps"]) == {"1", "2", "1c", "2c"}
    assert len(s["k=1"]["plateau_exit_steps"]["2"]) == 3
    assert len(json.dumps(r)) < 300_000


def test_dense_needs_a_task_that_scores_several_positions():
    from depthcraft.verify.crosscheck import sweep
    from depthcraft.verify.crosscheck.presets import get_preset

    with pytest.raises(ParameterError, match="dense supervision: task icqa scores one position"):
        sweep.make_config(get_preset("icqa", "cpu"), dense=True)
    assert sweep.make_config(get_preset("ictm", "cpu"), dense=True).task == "ictm_dense"
    assert sweep.make_config(get_preset("khop", "cpu"), dense=True).task == "khop"


def test_the_one_entry_point_gives_every_backend_the_same_losses(tiny_training):
    """train(TrainJob, backend): loop, fast and fused (float32, split layout on the CPU) agree to FLOAT_TOL."""
    from depthcraft.verify.crosscheck.trainer import TrainJob, train

    data, mc, tc, chunk = tiny_training
    job = TrainJob(data=data, model=mc, train=tc, seeds=(0, 1), chunk=chunk, sampler="numpy", precision="float32")
    by = {b: train(job, b).outcomes[0] for b in ("loop", "fast", "fused")}
    for i in range(2):
        ref = _losses(by["loop"][i])
        assert np.abs(_losses(by["fast"][i]) - ref).max() <= FLOAT_TOL
        assert np.abs(_losses(by["fused"][i]) - ref).max() <= FLOAT_TOL
