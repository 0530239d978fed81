"""Attention alignment (SPEC §7): sum(A*B) / (||A||_F ||B||_F), on hand-made maps."""

import math

import numpy as np
import pytest

from depthcraft.constructions.errors import ParameterError
from depthcraft.verify.crosscheck.alignment import alignment, best_heads, head_alignments, uniform_map


def test_identical_maps_align_to_one():
    a = np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.5, 0.0, 0.5]])
    assert alignment(a, a) == pytest.approx(1.0)


def test_scale_does_not_matter():
    a = np.array([[1.0, 0.0], [0.3, 0.7]])
    assert alignment(a, 3.0 * a) == pytest.approx(1.0)


def test_disjoint_maps_align_to_zero():
    a = np.array([[1.0, 0.0], [1.0, 0.0]])
    b = np.array([[0.0, 1.0], [0.0, 1.0]])
    assert alignment(a, b) == 0.0


def test_hand_computed_value():
    # sum(A*B) = 1 + 0.5 = 1.5; ||A|| = sqrt(1 + 0.25 + 0.25); ||B|| = sqrt(2)
    a = np.array([[1.0, 0.0], [0.5, 0.5]])
    b = np.array([[1.0, 0.0], [0.0, 1.0]])
    assert alignment(a, b) == pytest.approx(1.5 / (math.sqrt(1.5) * math.sqrt(2.0)))


def test_query_mask_drops_rows():
    a = np.array([[1.0, 0.0], [0.0, 1.0]])
    b = np.array([[1.0, 0.0], [1.0, 0.0]])
    # both rows: sum = 1, norms sqrt2 * sqrt2 -> 0.5; row 1 only: disjoint -> 0; row 0 only: 1
    assert alignment(a, b) == pytest.approx(0.5)
    assert alignment(a, b, np.array([False, True])) == 0.0
    assert alignment(a, b, np.array([True, False])) == pytest.approx(1.0)


def test_zero_map_gives_zero_not_nan():
    a = np.zeros((2, 2))
    assert alignment(a, np.eye(2)) == 0.0


def test_batched_shapes():
    a = np.stack([np.eye(3), np.ones((3, 3)) / 3])
    out = alignment(a, np.eye(3)[None])
    assert out.shape == (2,)
    assert out[0] == pytest.approx(1.0)
    assert out[1] == pytest.approx(1.0 / (1.0 * math.sqrt(3.0)))  # sum 1, ||ones/3|| = 1, ||I|| = sqrt3


def test_bad_shapes_raise():
    with pytest.raises(ParameterError, match=r"\[\.\.\., T, T\]"):
        alignment(np.ones((2, 3)), np.ones((2, 3)))


def test_uniform_map_rows_sum_to_one_and_respect_causality():
    u = uniform_map(4, causal=True)
    assert np.allclose(u.sum(-1), 1.0)
    assert np.all(np.triu(u, 1) == 0)
    assert u[3, 0] == pytest.approx(0.25)
    assert np.allclose(uniform_map(3, causal=False), 1 / 3)


def test_best_head_finds_the_matching_trained_head():
    t = 5
    prev = np.zeros((t, t))
    prev[0, 0] = 1.0
    for i in range(1, t):
        prev[i, i - 1] = 1.0  # previous-token head
    self_map = np.eye(t)
    batch = 2
    construction = [np.broadcast_to(prev, (batch, 1, t, t)), np.broadcast_to(self_map, (batch, 1, t, t))]
    # trained: layer 1 = [uniform, self], layer 2 = [prev, uniform]
    uni = uniform_map(t, True)
    trained = [np.broadcast_to(np.stack([uni, self_map]), (batch, 2, t, t)),
               np.broadcast_to(np.stack([prev, uni]), (batch, 2, t, t))]
    query = np.ones((batch, t), bool)
    query[:, 0] = False
    m = head_alignments(trained, construction, query)
    assert m.shape == (2, 2, 2, 1)
    assert m[1, 0, 0, 0] == pytest.approx(1.0)  # trained L2H1 == construction layer 1
    assert m[0, 1, 1, 0] == pytest.approx(1.0)  # trained L1H2 == construction layer 2
    assert m[0, 1, 0, 0] == 0.0  # self vs previous token: disjoint on rows 1..T-1
    best = best_heads(m, construction, query, causal=True)
    assert [(b["trained_layer"], b["trained_head"]) for b in best] == [(2, 1), (1, 2)]
    assert best[0]["alignment"] == pytest.approx(1.0)
    # chance: uniform causal vs previous-token: row i has 1/(i+1) at one key
    rows = range(1, t)
    num = sum(1 / (i + 1) for i in rows)
    den = math.sqrt(sum(1 / (i + 1) for i in rows)) * math.sqrt(t - 1)
    assert best[0]["chance"] == pytest.approx(num / den, abs=1e-4)
