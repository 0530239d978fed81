"""The theorem's half (verify/theorem.py): the k-hop programs' array semantics against Definition 4.1."""

import numpy as np
import pytest

from depthcraft.verify.theorem import definition, doubling_semantics, floor_semantics, program_agrees, theorem_check


def test_definition_on_the_worked_example():
    # SPEC §4.1: X = baebcabebdea; hop_1 at the last position is b, hop_2 is c
    x = np.array([[ord(c) - ord("a") for c in "baebcabebdea"]])
    assert definition(x, 1)[0, -1] == ord("b") - ord("a")
    assert definition(x, 2)[0, -1] == ord("c") - ord("a")
    assert definition(x, 0).tolist() == x.tolist()  # hop_0 is the identity


def test_definition_edge_cases():
    assert definition(np.zeros((1, 5), int), 3).tolist() == [[-1, 0, 0, 0, 0]]  # all equal: find(i) = i, find(1) = 0
    assert definition(np.array([[0, 1, 2, 3]]), 1).tolist() == [[-1, -1, -1, -1]]  # no repeat: every output is ⊥


@pytest.mark.parametrize("k", [1, 2, 3, 5, 7, 8, 16])
def test_semantics_equal_the_definition(k):
    x = np.random.default_rng(k).integers(0, 3, size=(400, 11))
    want = definition(x, k)
    assert (doubling_semantics(x, k, 3) == want).all()
    assert (floor_semantics(x, k, 3) == want).all()


def test_a_wrong_hop_count_is_caught():
    x = np.random.default_rng(0).integers(0, 3, size=(400, 11))
    assert not (doubling_semantics(x, 3, 3) == definition(x, 4)).all()


@pytest.mark.parametrize("name,k", [("khop_doubling", 3), ("khop_floor", 5)])
def test_array_semantics_is_the_rasp_programs(name, k):
    assert program_agrees(name, k, vocab=3, n=9, inputs=30)


def test_theorem_check_report():
    r = theorem_check("khop_floor", {"k": 3, "n": 64, "vocab": 3}, random_inputs=500, exhaustive_n=5)
    assert r["exhaustive"] == {"n": 5, "inputs": 3 + 9 + 27 + 81 + 243, "exact": True}
    assert r["random"] == {"n": 64, "inputs": 500, "exact": True}
    assert theorem_check("graph_connectivity", {"n": 5}) is None
