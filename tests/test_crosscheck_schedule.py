"""Hop schedules (verify/crosscheck/schedule.py, issue 41): synthetic heads built from the pointers."""

import numpy as np
import pytest

from depthcraft.constructions.errors import ParameterError
from depthcraft.verify.crosscheck import schedule as S
from depthcraft.verify.tasks.khop import find_k, sample_no_adjacent_repeat


def _onehot(ptr, t):
    a = np.zeros(ptr.shape + (t,))
    np.put_along_axis(a, ptr[..., None], 1.0, -1)
    return a


def test_heads_built_as_pointers_are_found():
    x = sample_no_adjacent_repeat(np.random.default_rng(0), 16, 40, 4)
    t = x.shape[1] + 1
    f3 = find_k(x, 3)
    prev = np.maximum(np.arange(t) - 1, 0)[None].repeat(16, 0)
    uniform = np.tril(np.ones((t, t))) / np.arange(1, t + 1)[:, None]
    # layer 1: head 1 previous token, head 2 uniform causal; layer 2: head 1 find^3, head 2 half find^3 half BOS
    l1 = np.stack([_onehot(prev, t), np.broadcast_to(uniform, (16, t, t))], 1)
    half = 0.5 * _onehot(f3, t) + 0.5 * _onehot(np.zeros_like(f3), t)
    l2 = np.stack([_onehot(f3, t), half], 1)
    sc = S.head_scores([l1, l2], S.reference_pointers(x))
    j3, jp, jb = S.REFERENCES.index("find3"), S.REFERENCES.index("prev"), S.REFERENCES.index("bos")
    assert sc["mass"][0, 0, jp] == pytest.approx(1.0) and sc["agree"][0, 0, jp] == pytest.approx(1.0)
    assert sc["mass"][1, 0, j3] == pytest.approx(1.0)
    # where find^3 exists the half head puts 0.5 on it; BOS gets 0.5 there and 1.0 where it does not
    valid = f3[:, 1:] != 0
    assert sc["mass"][1, 1, j3] == pytest.approx(0.5)
    assert sc["mass"][1, 1, jb] == pytest.approx((0.5 * valid.sum() + (~valid).sum()) / valid.size)
    layers = S.layer_schedule(sc["mass"], sc["agree"])
    assert layers[0]["schedule"] == ["prev"] and layers[1]["schedule"][0] == "find3"
    assert layers[1]["find"] == {"m": 3, "head": 1, "mass": 1.0, "agree": 1.0, "matched": True}
    assert S.schedule_text(layers).startswith("prev | f3")


def test_construction_schedule_and_reference_k():
    assert S.construction_schedule(5) == ["prev", "find1", "find1", "find2", "find4"]
    assert S.reference_k(5, (1, 2, 4, 8, 16)) == 8 and S.reference_k(5, (1, 2, 3, 4, 6)) == 6
    assert S.reference_k(2, (1, 2, 3)) == 1


def test_bad_shapes_are_refused():
    x = np.zeros((2, 5), int)
    with pytest.raises(ParameterError):
        S.head_scores([np.zeros((2, 1, 4, 4))], S.reference_pointers(x))
    with pytest.raises(ParameterError):
        S.reference_pointers(np.zeros(5, int))


def test_a_layers_find_entry_is_its_strongest_head_at_the_furthest_m():
    """Two heads matched to find^3 (masses 0.6 and 0.9) and one to find^1 (1.0): the layer reads
    find^3, reported with the 0.9 head (a tie in m no longer goes to the later head)."""
    names = S.REFERENCES
    mass = np.zeros((1, 3, len(names)))
    agree = np.zeros_like(mass)
    j1, j3 = names.index("find1"), names.index("find3")
    mass[0, 0, j3], mass[0, 1, j3], mass[0, 2, j1] = 0.9, 0.6, 1.0
    agree[0, 0, j3], agree[0, 1, j3], agree[0, 2, j1] = 0.99, 0.7, 1.0
    (layer,) = S.layer_schedule(mass, agree)
    assert layer["schedule"] == ["find1", "find3"]
    assert layer["find"] == {"m": 3, "head": 1, "mass": 0.9, "agree": 0.99, "matched": True}
