"""Mixed difficulty and the curriculum (issue 25): TaskData.sample over a subset of conditions, the
mix_over grouping of a sweep, the curriculum's stage rule and its record, the connectivity_span
sampler, and the claims judged per recipe (hard-only / mixed / curriculum)."""

import numpy as np
import pytest

from depthcraft.constructions.errors import InputError, ParameterError
from depthcraft.verify.crosscheck import claims as C
from depthcraft.verify.crosscheck import sweep as S
from depthcraft.verify.crosscheck.data import TaskData
from depthcraft.verify.crosscheck.model import ModelConfig
from depthcraft.verify.crosscheck.presets import Preset, get_preset
from depthcraft.verify.crosscheck.train import TrainConfig, curriculum_advance, train_seeds
from depthcraft.verify.tasks import get_task
from depthcraft.verify.tasks.connectivity import decode_edges

from test_crosscheck_claims import Res, doc, run


def _retrieval_data(ds=(1, 2, 3)):
    task = get_task("retrieval_slots")
    return TaskData(task, [task.resolve({"d": d, "distractors": 1}) for d in ds])


def test_sample_draws_only_the_given_conditions_split_evenly():
    data = _retrieval_data()
    b = data.sample(np.random.default_rng(0), 5, conditions=[1, 2])
    assert b.cond.tolist() == [1, 1, 1, 2, 2]  # the first 5 % 2 conditions get one more
    assert b.ids[:, 0].tolist() == [data.bos_ids[1]] * 3 + [data.bos_ids[2]] * 2
    assert b.ids.shape == (5, data.seq_len)  # the layout does not depend on the stage
    assert data.sample(np.random.default_rng(0), 7, conditions=range(1)).cond.tolist() == [0] * 7
    everything = data.sample(np.random.default_rng(3), 6)
    same = data.sample(np.random.default_rng(3), 6, conditions=[0, 1, 2])
    assert np.array_equal(everything.ids, same.ids)  # None = every condition, the same draws
    for bad in ([], [3], [-1]):
        with pytest.raises(ParameterError, match="expected indices in 0..2"):
            data.sample(np.random.default_rng(0), 4, conditions=bad)


def test_advance_moves_one_stage_when_the_current_condition_reaches_the_accuracy():
    names = ["d=1", "d=2", "d=3"]
    log = []
    assert curriculum_advance(0, {"error": {"d=1": 0.011, "d=2": 0.0}}, names, 0.99, log, 250) == 0
    assert log == []
    assert curriculum_advance(0, {"error": {"d=1": 0.01, "d=2": 0.9}}, names, 0.99, log, 500) == 1
    assert log == [{"step": 500, "stage": 1, "condition": "d=2", "passed": "d=1", "error": 0.01}]
    assert curriculum_advance(1, {"error": {"d=1": 0.0, "d=2": None}}, names, 0.99, log, 750) == 1  # nothing scored
    assert curriculum_advance(2, {"error": {"d=3": 0.0}}, names, 0.99, log, 1000) == 2  # the last stage stays
    assert len(log) == 1


def test_mix_over_trains_one_model_per_value_of_the_other_swept_parameters():
    cfg = S.make_config(get_preset("retrieval_slots", "c5_mixed"))
    assert cfg.names == ["d=1 targets=every", "d=1 targets=final", "d=2 targets=every", "d=2 targets=final",
                         "d=3 targets=every", "d=3 targets=final"]
    assert S.mixed_groups(cfg) == [(0, 2, 4), (1, 3, 5)]
    runs = S.plan(cfg, [None] * 6)
    assert [S.group_id(g) for g in S.seed_groups(runs)] == ["L3_H2_d32_targets=every_seeds0-1-2",
                                                              "L3_H2_d32_targets=final_seeds0-1-2"]
    assert S.mixed_groups(S.make_config(get_preset("ictm_dense", "c3_mixed"))) == [(0, 1, 2, 3)]
    base = get_preset("retrieval_slots", "c5")
    with pytest.raises(ParameterError, match="needs mixed training"):
        S.make_config(base, mix_over=("d",))
    with pytest.raises(ParameterError, match="not swept parameters"):
        S.make_config(get_preset("retrieval_slots", "c5_mixed"), mix_over=("distractors",))
    with pytest.raises(ParameterError, match="a curriculum needs mixed training"):
        S.make_config(base, curriculum=0.99)


def test_curriculum_records_its_advances_and_resumes_to_the_same_state(tmp_path):
    data = _retrieval_data((1, 2))
    sets = data.eval_sets(5, 16)
    model = ModelConfig(depth=1, heads=1, width=8, mlp=False, causal=False)
    tcfg = TrainConfig(steps=6, batch=8, lr=1e-2, warmup=1)
    # accuracy 1e-6: any evaluation that gets a sequence right passes its stage
    one = train_seeds(data, model, tcfg, [0, 1], chunk=2, eval_sets=sets, eval_every=2, curriculum=1e-6)
    for o in one:
        assert o.curriculum["stages"] == ["d=1", "d=2"]
        assert o.curriculum["accuracy"] == 1e-6
        assert o.curriculum["stage"] == 1
        assert [a["step"] for a in o.curriculum["advances"]] == [2]
        assert [p["stage"] for p in o.curve] == [0, 1, 1]  # the stage each evaluation was made in
    never = train_seeds(data, model, tcfg, [0], chunk=2, eval_sets=sets, eval_every=2, curriculum=1.0)
    assert never[0].curriculum["advances"] == [] and never[0].curriculum["stage"] == 0
    ckpt = str(tmp_path / "ck")
    train_seeds(data, model, tcfg, [0, 1], chunk=2, eval_sets=sets, eval_every=2, curriculum=1e-6,
                checkpoint_dir=ckpt, stop_at=2)
    resumed = train_seeds(data, model, tcfg, [0, 1], chunk=2, eval_sets=sets, eval_every=2, curriculum=1e-6,
                          checkpoint_dir=ckpt)
    assert resumed[0].resumed_from == 2
    assert [r.curriculum for r in resumed] == [o.curriculum for o in one]
    assert [r.history[-1] for r in resumed] == [o.history[-1] for o in one]  # the same final loss
    with pytest.raises(ParameterError, match="needs eval_every"):
        train_seeds(data, model, tcfg, [0], eval_sets=sets, curriculum=0.99)
    with pytest.raises(ParameterError, match="needs sampler='numpy'"):
        train_seeds(data, model, tcfg, [0], sampler="jax", eval_sets=sets, eval_every=2, curriculum=0.99)


def test_connectivity_span_uses_span_vertices_and_equals_the_paths_sampler_at_span_n():
    task = get_task("connectivity_span")
    p = task.resolve({"n": 8, "max_edges": 16, "span": 4})
    x = task.sample(p, np.random.default_rng(0), 200)
    assert x.shape == (200, 8 + 16 + 3)
    assert sorted(x[0, :8].tolist()) == list(range(8))  # every vertex in the vertex block
    adj = decode_edges(8, task.check_inputs(p, x))
    assert (adj.sum((1, 2)) == 2 * 2).all()  # two paths of 2 vertices: 2 edges
    assert ((adj.sum(2) > 0).sum(1) == 4).all()  # on exactly 4 vertices
    out, scored = task.reference(p, x)
    assert scored[:, -1].all() and scored[:, :-1].sum() == 0
    assert set(out[:, -1].tolist()) == {0, 1}
    full = task.sample(task.resolve({"n": 8, "max_edges": 16, "span": 0}), np.random.default_rng(1), 5)
    paths = get_task("connectivity")
    ref = paths.sample(paths.resolve({"n": 8, "max_edges": 16, "sampler": "paths"}), np.random.default_rng(1), 5)
    assert np.array_equal(full, ref)
    with pytest.raises(ParameterError, match="span=3"):
        task.resolve({"n": 8, "max_edges": 16, "span": 3})
    with pytest.raises(ParameterError, match="span=9"):
        task.resolve({"n": 8, "max_edges": 16, "span": 9})


def _c3(errors, mixed):  # errors[depth] -> error of every seed at the hard condition m=4
    names = ["m=1", "m=4"] if mixed else ["m=4"]
    runs = []
    for depth, e in errors.items():
        for s in range(3):
            r = run(names, depth, s, [0.0, e] if mixed else [e])
            r["eval"] = [{"condition": "m=4", "error": e, "error_per_position": None}]
            r["curve"] = [{"step": 500, "loss": {"m=4": 0.05 if e < 0.05 and depth == 4 else 1.0}},
                          {"step": 1000, "loss": {"m=4": 0.05 if e < 0.05 else 1.0}}]
            runs.append(r)
    runs += [run(names, 2, s, [0.0, 0.7] if mixed else [0.7], control=True, heads=4, width=64) for s in range(3)]
    d = doc(runs, names)
    d["settings"]["mixed"] = mixed
    return d


def test_claims_are_judged_per_recipe_and_the_mixed_recipe_gives_the_verdict():
    hard = _c3({1: 0.7, 2: 0.7, 3: 0.7, 4: 0.7}, mixed=False)
    mixed = _c3({1: 0.7, 2: 0.7, 3: 0.0, 4: 0.0}, mixed=True)
    only_hard = C.judge_c3(Res({"ictm": hard}))
    assert only_hard["verdict"] == C.INCONCLUSIVE and "by_recipe" not in only_hard["measured"]
    both = C.judge_c3(Res({"ictm": hard, "ictm_mixed": mixed}))
    # mixed: depths 1, 2 and the control fail on m = 4, depth 3 learns; depth 4's m = 4 evaluation loss
    # reaches 0.1 nats at step 500, depth 3's at 1000 (the curve, not the training loss)
    assert both["verdict"] == C.REPRODUCED, both["evidence"]
    assert both["evidence"].startswith("verdict from the mixed recipe.")
    assert {k: v["verdict"] for k, v in both["measured"]["by_recipe"].items()} == \
        {C.HARD_ONLY: C.INCONCLUSIVE, C.MIXED: C.REPRODUCED}
    assert both["measured"]["L3"]["median_learning_step"] == 1000.0
    assert both["measured"]["L4"]["median_learning_step"] == 500.0


def test_c7_reads_the_span_n_condition_of_each_mixed_sweep():
    def sweep_doc(n, spans, errs):  # errs[depth] -> error of every seed at span = n
        names = [f"span={s}" for s in spans]
        runs = [run(names, L, s, [0.0] * (len(spans) - 1) + [e]) for L, e in errs.items() for s in range(3)]
        d = doc(runs, names)
        d["settings"]["conditions"] = [{"n": n, "max_edges": 16, "span": s} for s in spans]
        d["settings"]["mixed"] = True
        return d

    n8 = sweep_doc(8, (4, 6, 8), {2: 0.5, 3: 0.01, 4: 0.0})
    n16 = sweep_doc(16, (4, 8, 12, 16), {3: 0.5, 4: 0.02, 5: 0.0})
    items = C.c7_items([n8, n16])
    assert [(n, c) for n, _, c in items] == [(8, "span=8"), (16, "span=16")]
    v = C.judge_c7(Res({"connectivity_mixed_n8": n8, "connectivity_mixed_n16": n16}))
    assert v["verdict"] == C.REPRODUCED, v["evidence"]
    assert v["measured"]["n=8"]["smallest_depth"] == 3 and v["measured"]["n=16"]["smallest_depth"] == 4
    with pytest.raises(InputError, match="no recipe has all its sweeps"):  # the mixed recipe needs both
        C.judge_c7(Res({"connectivity_mixed_n8": n8}))


def test_hard_curves_average_the_seeds_curves_of_the_claims_instance():
    from test_crosscheck_claims import _c5_doc

    d = _c5_doc([0.5, 0.6, 0.5], [0.0, 0.01, 0.0], [250, 500, 750])
    # every seed's curve: the last hop (the final answer) is right from step 750; the final-only runs
    # of this hand-made sweep keep no curve, so they draw nothing
    assert C.hard_curves("C5", d) == {"L=2 targets=every hop 1": [(250, 0.0), (500, 0.0), (750, 0.0)],
                                      "L=2 targets=every hop 2": [(250, 0.5), (500, 0.0), (750, 0.0)],
                                      "L=2 targets=every hop 3 (final answer)": [(250, 0.5), (500, 0.5), (750, 0.0)]}
