"""The k-hop reference against a direct transcription of Definition 4.1 (Sanford et al. 2024)."""

import numpy as np
import pytest
from hypothesis import given, strategies as st

from depthcraft.constructions.errors import ParameterError
from depthcraft.rasp_programs.khop import BOT
from depthcraft.verify.tasks import get_task
from depthcraft.verify.tasks.khop import WORKED_EXAMPLE, find_k, find_table, hop_k, sample_no_adjacent_repeat


def find_def(x, i):
    """find(X, i) = max({0} ∪ {j : 2 <= j <= i, x_{j-1} = x_i}), 1-based, written as in the paper."""
    if i == 0:
        return 0
    return max([0] + [j for j in range(2, i + 1) if x[j - 2] == x[i - 1]])


def hop_def(x, k):
    out = []
    for i in range(1, len(x) + 1):
        p = i
        for _ in range(k):
            p = find_def(x, p)
        out.append(x[p - 1] if p != 0 else BOT)
    return out


def letters(s):
    return np.asarray([[ord(c) - ord("a") for c in s]])


def test_worked_example_from_the_paper():
    x = letters(WORKED_EXAMPLE)
    assert hop_k(x, 1)[0, -1] == ord("b") - ord("a")
    assert hop_k(x, 2)[0, -1] == ord("c") - ord("a")


@given(st.lists(st.integers(0, 4), min_size=1, max_size=24), st.integers(0, 9))
def test_reference_matches_definition(seq, k):
    x = np.asarray([seq])
    assert hop_k(x, k)[0].tolist() == hop_def(seq, k)
    assert find_table(x)[0].tolist() == [find_def(seq, i) for i in range(len(seq) + 1)]


def test_batch_is_rowwise():
    rng = np.random.default_rng(1)
    x = rng.integers(0, 3, size=(50, 17))
    for k in (0, 1, 3, 7):
        out = hop_k(x, k)
        for r in range(len(x)):
            assert out[r].tolist() == hop_def(x[r].tolist(), k)


def test_edge_values():
    # all-equal: find(i) = i for i >= 2 (j = i allowed), position 1 has no match.
    x = np.zeros((1, 6), int)
    assert find_table(x)[0].tolist() == [0, 0, 2, 3, 4, 5, 6]
    assert hop_k(x, 5)[0].tolist() == [BOT, 0, 0, 0, 0, 0]
    # no repeats: everything is ⊥ for k >= 1; hop_0 is the identity.
    x = np.asarray([[0, 1, 2, 3]])
    assert hop_k(x, 1)[0].tolist() == [BOT] * 4
    assert hop_k(x, 0)[0].tolist() == [0, 1, 2, 3]
    # find(0) = 0 is absorbing
    assert find_k(np.asarray([[0, 1, 0, 1]]), 50)[0, 0] == 0


def test_negative_k_rejected():
    with pytest.raises(ParameterError, match="k must be >= 0"):
        hop_k(np.zeros((1, 3), int), -1)


def test_paper_sampler_has_no_equal_neighbours_and_is_seeded():
    a = sample_no_adjacent_repeat(np.random.default_rng(3), 500, 40, 4)
    b = sample_no_adjacent_repeat(np.random.default_rng(3), 500, 40, 4)
    assert (a == b).all()
    assert (a[:, 1:] != a[:, :-1]).all()
    assert a.min() == 0 and a.max() == 3
    # each next symbol is uniform over the other 3: frequencies near 1/3
    diffs = (a[:, 1:] - a[:, :-1]) % 4
    freq = np.bincount(diffs.ravel(), minlength=4)[1:] / diffs.size
    assert np.allclose(freq, 1 / 3, atol=0.02)


def test_task_samplers_and_edge_cases():
    task = get_task("khop")
    p = task.resolve({"k": 2, "n": 12, "vocab": 5})
    x = task.sample(p, np.random.default_rng(0), 10)
    assert x.shape == (10, 12)
    groups = task.edge_cases(p)
    seqs = [tuple(r) for g in groups for r in g.tolist()]
    assert tuple([0] * 12) in seqs  # all-equal at maximal length
    assert tuple(range(5)) in seqs  # no repeat: all ⊥
    assert tuple(letters(WORKED_EXAMPLE)[0]) in seqs
    assert all(1 <= len(s) <= 12 for s in seqs)
    u = task.resolve({"k": 1, "n": 8, "vocab": 2, "distribution": "uniform"})
    assert ((task.sample(u, np.random.default_rng(0), 200)[:, 1:] ==
             task.sample(u, np.random.default_rng(0), 200)[:, :-1]).any())
    with pytest.raises(ParameterError, match="vocab >= 2"):
        task.resolve({"vocab": 1, "n": 5})


def test_exhaustive_enumerates_every_input_once():
    task = get_task("khop")
    p = task.resolve({"n": 4, "vocab": 3})
    total, batches = task.exhaustive(p, batch=7)
    rows = np.concatenate(list(batches))
    assert total == 81 and len(rows) == 81
    assert len({tuple(r) for r in rows.tolist()}) == 81
    with pytest.raises(ParameterError, match="above the limit"):
        task.exhaustive(task.resolve({"n": 40, "vocab": 4}))
