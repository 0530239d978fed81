"""Training batches: the compiled models' layout (BOS_c at 0), targets from the task's definition."""

import numpy as np
import pytest

from depthcraft.constructions.errors import ParameterError
from depthcraft.verify.crosscheck.data import TaskData, condition_names
from depthcraft.verify.tasks import get_task

KHOP = get_task("khop")


def _data(*conds):
    return TaskData(KHOP, [KHOP.resolve(c) for c in conds])


def test_layout_and_targets_from_the_definition():
    # X = a b a b. find(3) = 2 (x_1 = a = x_3), find(4) = 3 (x_2 = b = x_4), find(1) = find(2) = 0.
    # hop_1 = [⊥, ⊥, x_2 = b, x_3 = a]; hop_2 = [⊥, ⊥, find(2) = 0 -> ⊥, find(3) = 2 -> x_2 = b].
    d = _data({"k": 1, "n": 4, "vocab": 2}, {"k": 2, "n": 4, "vocab": 2})
    assert d.tokens == [0, 1]
    assert d.bos_ids == [2, 3] and d.pad_id == 4 and d.n_inputs == 5
    assert d.classes == [0, 1, -1]  # tokens, then ⊥
    assert d.seq_len == 5
    bot = 2
    b1 = d.condition_batch(0, np.array([[0, 1, 0, 1]]))
    assert b1.ids.tolist() == [[2, 0, 1, 0, 1]]
    assert b1.targets.tolist() == [[0, bot, bot, 1, 0]]
    assert b1.loss_mask.tolist() == [[0, 1, 1, 1, 1]]  # ⊥ positions are trained on
    assert b1.error_mask.tolist() == [[False, False, False, True, True]]  # ... but not scored
    b2 = d.condition_batch(1, np.array([[0, 1, 0, 1]]))
    assert b2.ids[0, 0] == 3
    assert b2.targets.tolist() == [[0, bot, bot, bot, 1]]
    assert b2.error_mask.tolist() == [[False, False, False, False, True]]
    assert b2.cond.tolist() == [1]


def test_worked_example_of_the_paper():
    # SPEC §4.1: X = baebcabebdea; hop_1 at the last position is b, hop_2 is c.
    x = np.array([[ord(c) - ord("a") for c in "baebcabebdea"]])
    d = _data({"k": 1, "n": 12, "vocab": 5}, {"k": 2, "n": 12, "vocab": 5})
    assert d.classes[d.condition_batch(0, x).targets[0, -1]] == 1  # b
    assert d.classes[d.condition_batch(1, x).targets[0, -1]] == 2  # c


def test_sample_splits_batch_over_conditions_and_is_reproducible():
    d = _data({"k": 1, "n": 8}, {"k": 2, "n": 8}, {"k": 4, "n": 8})
    b = d.sample(np.random.default_rng([0, 5]), 7)
    assert b.ids.shape == (7, 9)
    assert b.cond.tolist() == [0, 0, 0, 1, 1, 2, 2]
    assert (b.ids[:, 0] == np.array(d.bos_ids)[b.cond]).all()
    again = d.sample(np.random.default_rng([0, 5]), 7)
    for f in b._fields:
        assert np.array_equal(getattr(b, f), getattr(again, f))
    # the paper's distribution: no two equal neighbours
    toks = b.ids[:, 1:]
    assert (toks[:, 1:] != toks[:, :-1]).all()


def test_shorter_conditions_are_padded_and_never_scored():
    d = _data({"k": 1, "n": 3}, {"k": 1, "n": 5})
    assert d.seq_len == 6
    b = d.condition_batch(0, np.array([[0, 1, 2]]))
    assert b.ids.tolist() == [[d.bos_ids[0], 0, 1, 2, d.pad_id, d.pad_id]]
    assert b.loss_mask[0, 4:].sum() == 0 and not b.error_mask[0, 4:].any()


def test_eval_sets_are_fixed_and_independent_of_training_stream():
    d = _data({"k": 1, "n": 8}, {"k": 2, "n": 8})
    s1, s2 = d.eval_sets(1, 16), d.eval_sets(1, 16)
    assert len(s1) == 2 and s1[0].ids.shape == (16, 9)
    assert np.array_equal(s1[1].ids, s2[1].ids)
    assert not np.array_equal(d.eval_sets(2, 16)[0].ids, s1[0].ids)


def test_bad_token_is_named():
    d = _data({"k": 1, "n": 4, "vocab": 2})
    with pytest.raises(ParameterError, match="input token 7 is not one of"):
        d.encode(0, np.array([[0, 7, 1, 0]]))


def test_no_conditions_is_an_error():
    with pytest.raises(ParameterError, match="at least one"):
        TaskData(KHOP, [])


def test_condition_names_show_the_differing_parameters():
    assert condition_names([{"k": 1, "n": 8}, {"k": 2, "n": 8}]) == ["k=1", "k=2"]
    assert condition_names([{"m": 4}]) == ["m=4"]
