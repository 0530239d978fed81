"""Task and model options the training claims need (issue 11): fixed token embeddings,
retrieval with one answer slot per hop (implicit curriculum or not), ICTM with dense
supervision and distinct labels. Expected values are written from the definitions."""

import jax
import numpy as np
import pytest

from depthcraft.constructions.errors import InputError, ParameterError
from depthcraft.verify.crosscheck.data import TaskData
from depthcraft.verify.crosscheck.model import ModelConfig, init_params
from depthcraft.verify.crosscheck.train import TrainConfig, train_loop
from depthcraft.verify.tasks import get_task

TM = get_task("tm")
SLOTS = get_task("retrieval_slots")
DENSE = get_task("ictm_dense")


# ------------------------------------------------------------------ embeddings
def _tm_data():
    return TaskData(TM, [TM.resolve({"split": "train"})])


def test_onehot_embedding_is_the_identity_and_random_has_unit_scale():
    data = _tm_data()
    cfg = ModelConfig(depth=1, heads=2, width=32, mlp=False, embedding="onehot")
    tok = np.asarray(init_params(cfg, jax.random.PRNGKey(0), data.n_inputs, 5, data.seq_len)["embed"]["token"])
    assert tok.shape == (data.n_inputs, 32)
    assert np.array_equal(tok, np.eye(data.n_inputs, 32))
    cfg = ModelConfig(depth=1, heads=2, width=256, mlp=False, embedding="random")
    tok = np.asarray(init_params(cfg, jax.random.PRNGKey(0), 40, 5, 8)["embed"]["token"])
    norms = np.linalg.norm(tok, axis=1)
    assert abs(norms.mean() - 1.0) < 0.05  # rows ~ N(0, I/d): squared norm has mean 1


def test_fixed_embedding_leaves_the_other_weights_as_learned_draws_them():
    a = init_params(ModelConfig(depth=2, heads=2, width=32), jax.random.PRNGKey(3), 12, 5, 8)
    b = init_params(ModelConfig(depth=2, heads=2, width=32, embedding="random"), jax.random.PRNGKey(3), 12, 5, 8)
    assert np.array_equal(np.asarray(a["embed"]["pos"]), np.asarray(b["embed"]["pos"]))
    assert np.array_equal(np.asarray(a["layers"][0]["w_q"]), np.asarray(b["layers"][0]["w_q"]))
    assert not np.array_equal(np.asarray(a["embed"]["token"]), np.asarray(b["embed"]["token"]))


@pytest.mark.parametrize("embedding", ["onehot", "random"])
def test_fixed_embedding_is_never_updated_and_the_rest_is(embedding):
    data = _tm_data()
    cfg = ModelConfig(depth=1, heads=2, width=32, mlp=False, embedding=embedding)
    tc = TrainConfig(steps=5, batch=16, lr=1e-2, warmup=1, weight_decay=0.1)
    init = init_params(cfg, jax.random.PRNGKey(0), data.n_inputs, data.n_classes, data.seq_len)
    out = train_loop(data, cfg, tc)
    assert np.array_equal(np.asarray(out.params["embed"]["token"]), np.asarray(init["embed"]["token"]))
    assert not np.array_equal(np.asarray(out.params["embed"]["pos"]), np.asarray(init["embed"]["pos"]))


def test_learned_embedding_of_a_held_out_token_gets_no_gradient_only_decay():
    """A token that never occurs in training keeps its initial row up to weight decay (the TM caveat)."""
    data = _tm_data()
    held = [data.tokens.index(v) for v in (6, 7)]  # vocab 8, held_out 2: tokens 6 and 7 never in `train`
    seen = data.tokens.index(0)
    cfg = ModelConfig(depth=1, heads=2, width=32, mlp=False)
    tc = TrainConfig(steps=5, batch=16, lr=1e-2, warmup=1, weight_decay=0.0)
    init = np.asarray(init_params(cfg, jax.random.PRNGKey(0), data.n_inputs, data.n_classes,
                                  data.seq_len)["embed"]["token"])
    got = np.asarray(train_loop(data, cfg, tc).params["embed"]["token"])
    assert np.array_equal(got[held], init[held])
    assert not np.array_equal(got[seen], init[seen])


def test_bad_embedding_is_named():
    with pytest.raises(ParameterError, match="embedding='tied'"):
        ModelConfig(depth=1, heads=1, width=8, embedding="tied")
    with pytest.raises(ParameterError, match="width >= the input vocabulary"):
        init_params(ModelConfig(depth=1, heads=1, width=4, embedding="onehot"), jax.random.PRNGKey(0), 9, 3, 4)


# ------------------------------------------------------------ retrieval slots
def test_retrieval_slots_reads_hop_h_at_the_hth_position_from_the_query():
    p = SLOTS.resolve({"d": 3, "distractors": 1})
    s = SLOTS.slot_token(p)  # symbols 0..7, ? = 8, # = 9
    assert s == 9
    # chain 0 -> 1 -> 2 -> 3 (x_3 = 0 ... x_0 = 3), distractor 4 -> 5 -> 6 -> 7
    x = np.array([[4, 5, 0, 1, 5, 6, 2, 3, 1, 2, 6, 7, 8, 0, s, s]])
    targets, scored = SLOTS.reference(p, x)
    assert targets[0, 13:].tolist() == [1, 2, 3]
    assert scored[0].tolist() == [False] * 13 + [True] * 3
    final = SLOTS.resolve({"d": 3, "distractors": 1, "targets": "final"})
    t2, s2 = SLOTS.reference(final, x)
    assert s2[0].tolist() == [False] * 15 + [True] and t2[0, -1] == 3


def test_retrieval_slots_final_answer_equals_the_plain_task():
    plain = get_task("retrieval")
    p = SLOTS.resolve({"d": 4, "distractors": 2})
    x = SLOTS.sample(p, np.random.default_rng(0), 64)
    assert x.shape == (64, SLOTS.max_seq_len(p)) and (x[:, -3:] == SLOTS.slot_token(p)).all()
    base = x[:, :-3]
    expected, _ = plain.reference(plain.resolve({"d": 4, "distractors": 2}), base)
    assert np.array_equal(SLOTS.reference(p, x)[0][:, -1], expected[:, -1])


def test_retrieval_slots_broken_chain_gives_bottom_and_bad_inputs_are_named():
    p = SLOTS.resolve({"d": 2, "distractors": 0})  # symbols 0..2, ? = 3, # = 4
    x = np.array([[0, 1, 2, 0, 3, 2, 4]])  # 2 -> 0 -> 1
    assert SLOTS.reference(p, x)[0][0, -2:].tolist() == [0, 1]
    broken = np.array([[0, 1, 1, 2, 3, 2, 4]])  # 2 has no fact: both hops are ⊥
    assert SLOTS.reference(p, broken)[0][0, -2:].tolist() == [SLOTS.none_value] * 2
    with pytest.raises(InputError, match="answer slots"):
        SLOTS.reference(p, np.array([[0, 1, 2, 0, 3, 2, 2]]))
    with pytest.raises(InputError, match="# at position 1"):
        SLOTS.reference(p, np.array([[4, 1, 2, 0, 3, 2, 4]]))
    with pytest.raises(ParameterError, match="targets"):
        SLOTS.resolve({"d": 2, "targets": "some"})


def test_retrieval_slots_trains_through_the_harness():
    data = TaskData(SLOTS, [SLOTS.resolve({"d": 2, "distractors": 1})])
    b = data.sample(np.random.default_rng(0), 4)
    assert b.loss_mask[:, -2:].all() and b.loss_mask[:, :-2].sum() == 0


# --------------------------------------------------------------- ICTM dense
def test_ictm_dense_scores_every_query_with_its_examples_label():
    p = DENSE.resolve({"n": 2, "m": 2, "vocab": 3, "labels": 2, "queries": 2})  # content 0..2, labels 3, 4
    # examples: "0 0" (αα) -> 3, "1 2" (αβ) -> 4; query "2 1" (αβ) then its label 4; query "1 1" (αα)
    x = np.array([[0, 0, 3, 1, 2, 4, 2, 1, 4, 1, 1]])
    targets, scored = DENSE.reference(p, x)
    assert np.flatnonzero(scored[0]).tolist() == [7, 10] == DENSE.query_positions(p).tolist()
    assert targets[0, [7, 10]].tolist() == [4, 3]
    with pytest.raises(InputError, match="followed by label 3"):
        DENSE.reference(p, np.array([[0, 0, 3, 1, 2, 4, 2, 1, 3, 1, 1]]))
    with pytest.raises(InputError, match="same template"):
        DENSE.reference(p, np.array([[0, 0, 3, 1, 1, 4, 2, 1, 4, 1, 1]]))


def test_ictm_dense_distinct_labels_and_samples_are_valid():
    p = DENSE.resolve({"n": 3, "m": 4, "vocab": 8, "labels": 4, "queries": 3})
    x = DENSE.sample(p, np.random.default_rng(1), 256)
    assert x.shape == (256, DENSE.max_seq_len(p)) == (256, 6 * 4 + 3)
    labels = x[:, 3:16:4]  # the 4 example labels
    assert all(len(set(r)) == 4 for r in labels.tolist())
    targets, scored = DENSE.reference(p, x)
    assert scored.sum(1).tolist() == [3] * 256
    for g in DENSE.edge_cases(p):
        DENSE.reference(p, g)
    with pytest.raises(ParameterError, match="labels >= m"):
        DENSE.resolve({"m": 4, "labels": 3})
    iid = DENSE.resolve({"n": 3, "m": 4, "vocab": 8, "labels": 4, "label_draw": "iid"})
    lab = DENSE.sample(iid, np.random.default_rng(1), 512)[:, 3:16:4]
    assert any(len(set(r)) < 4 for r in lab.tolist())


def test_ictm_dense_with_one_query_and_iid_labels_is_ictm():
    ictm = get_task("ictm")
    p = DENSE.resolve({"n": 3, "m": 4, "queries": 1, "label_draw": "iid"})
    x = DENSE.sample(p, np.random.default_rng(2), 128)
    assert x.shape[1] == ictm.max_seq_len(ictm.resolve({"n": 3, "m": 4}))
    assert np.array_equal(DENSE.reference(p, x)[0], ictm.reference(ictm.resolve({"n": 3, "m": 4}), x)[0])


def test_a_preset_file_is_read_and_the_command_line_overrides_it(tmp_path, capsys):
    """depthcraft train TASK --config FILE (issue 41: one config object, a preset file the CLI reads)."""
    import json

    from depthcraft.verify.cli import main
    from depthcraft.verify.crosscheck import sweep
    from depthcraft.verify.crosscheck.presets import get_preset, load_preset_file

    f = tmp_path / "mine.json"
    f.write_text(json.dumps({"preset": "c1", "steps": 300, "depths": [2, 3], "looped": True,
                             "params": {"k": [1, 2]}}))
    p = load_preset_file(str(f), "khop")
    assert p.name == "mine" and p.steps == 300 and p.depths == (2, 3) and p.looped
    assert p.params["k"] == (1, 2) and p.params["n"] == get_preset("khop", "c1").params["n"]
    cfg = sweep.make_config(p, steps=50)
    assert cfg.train.steps == 50 and cfg.model.looped and [c["k"] for c in cfg.conditions] == [1, 2]
    f.write_text(json.dumps({"stepz": 3}))
    with pytest.raises(ParameterError, match="unknown field 'stepz'"):
        load_preset_file(str(f), "khop")
    with pytest.raises(SystemExit) as e:
        main(["train", "khop", "--config", str(f)])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown field 'stepz'" in err[0]
