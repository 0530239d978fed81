"""The hand-built heads added for the Chen & Zou constructions: semantics, weights, refusals."""

import math

import numpy as np
import pytest
from tracr.rasp import rasp

from depthcraft.constructions.compiler import compile_program
from depthcraft.constructions.errors import CompileError
from depthcraft.constructions.nodes import HeadSpec
from depthcraft.constructions.primitives import POSITION, Read, match, memorise, position_map, prev_token
from depthcraft.constructions.reference import evaluate
from depthcraft.rasp_programs.chen_zou_data import sc_dataset

NONE = -1
RNG = np.random.default_rng(7)


def run(program, x, attention, vocab=4, n=None):
    m = compile_program(program, vocab=range(vocab), max_seq_len=n or x.shape[1], attention=attention)
    return m, m.run(x, none_value=NONE)


@pytest.mark.parametrize("attention", ["softmax", "relu"])
def test_prev_token_and_position_map_read_the_target_position(attention):
    x = RNG.integers(0, 4, (64, 7))
    two_back = position_map(lambda i: i - 2 if i >= 3 else None, Read(rasp.tokens), attention=attention)
    _, got = run(two_back, x, attention)
    expected = np.full_like(x, NONE)
    expected[:, 2:] = x[:, :-2]
    assert (got == expected).all()
    _, prev = run(prev_token(Read(rasp.tokens, bos_value=9), attention=attention), x, attention)
    assert (prev[:, 1:] == x[:, :-1]).all() and (prev[:, 0] == 9).all()  # position 1 reads BOS's value


def _first_last(x, window, select):
    """The definition: the first / last j <= i in the window with x_j == x_i (1-based), 0 if none."""
    out = np.zeros_like(x)
    for b in range(len(x)):
        for i in range(1, x.shape[1] + 1):
            hits = [j for j in range(1, i + 1) if window(i, j) and x[b, j - 1] == x[b, i - 1]]
            out[b, i - 1] = (hits[0] if select == "first" else hits[-1]) if hits else 0
    return out


@pytest.mark.parametrize("select", ["first", "last"])
def test_softmax_match_selects_the_first_or_last_match_in_the_window(select):
    x = RNG.integers(0, 3, (128, 8))
    window = lambda i, j: i - j <= 2 or j == 1  # noqa: E731  the last three positions and position 1
    prog = match([(rasp.tokens, rasp.tokens)], [POSITION], where=window, select=select)[0]
    _, got = run(prog, x, "softmax", vocab=3)
    assert (got == _first_last(x, window, select)).all()
    assert list(evaluate(prog, x[0])) == _first_last(x[:1], window, select)[0].tolist()


def test_relu_match_adds_every_match_with_weight_one():
    x = RNG.integers(0, 3, (64, 6))
    window = lambda i, j: j >= i - 3  # noqa: E731
    prog = match([(rasp.tokens, rasp.tokens)], [POSITION], where=window, select="all", attention="relu")[0]
    m = compile_program(prog, vocab=range(3), max_seq_len=6, attention="relu")
    logits = np.asarray(m.forward_ids(m.encode(x)).logits)[:, 1:]  # multi-hot over positions 0..6
    values = m.output_values
    for b in range(8):
        for i in range(1, 7):
            expected = {j for j in range(max(1, i - 3), i + 1) if x[b, j - 1] == x[b, i - 1]}
            got = {v for v, s in zip(values, logits[b, i - 1]) if s > 0.5}
            assert got == expected
            assert np.allclose(sorted(logits[b, i - 1])[-len(expected):], 1.0, atol=1e-5)
            assert evaluate(prog, x[b])[i - 1] == frozenset(expected)


def test_relu_match_on_set_valued_sops_is_set_equality():
    # S(i) = the positions among {1, 2} that hold x_i (set-valued: {}, {1}, {2} or {1, 2});
    # then every earlier position j with S(j) == S(i) as sets (a subset is not a match).
    S = match([(rasp.tokens, rasp.tokens)], [POSITION], where=lambda i, j: j <= 2, select="all",
              attention="relu", name="S")[0]
    prog = match([(S, S)], [POSITION], where=lambda i, j: j < i, select="all", attention="relu")[0]
    m = compile_program(prog, vocab=range(3), max_seq_len=8, attention="relu")

    def model_sets(inp):
        logits = np.asarray(m.forward_ids(m.encode(inp)).logits)[:, 1:]
        return [[{v for v, s in zip(m.output_values, row) if s > 0.5} for row in seq] for seq in logits]

    # S = {1}, {1,2}, {}, {1,2}, {}, {}, {}, {1,2}: 2 does not match 1 ({1} is a subset of {1,2});
    # 4 matches 2; 5 matches 3; 6 matches 3, 5; 7 matches 3, 5, 6; 8 matches 2, 4.
    x = np.array([[0, 0, 1, 0, 2, 1, 2, 0]])
    expected = [set(), set(), set(), {2}, {3}, {3, 5}, {3, 5, 6}, {2, 4}]
    assert [set(v) for v in evaluate(prog, x[0])] == expected
    assert model_sets(x)[0] == expected
    r = RNG.integers(0, 3, (100, 8))
    assert model_sets(r) == [[set(v) for v in evaluate(prog, row)] for row in r]


def test_relu_match_reading_repeated_values_is_caught_by_the_verifier():
    """A ReLU select="all" read adds the matched keys' one-hot reads: with repeated read values it is a
    count vector, not the set the RASP semantics describe, and a later set-equality match goes wrong.
    The verifier must report that (against the program's own semantics), never pass it."""
    from depthcraft import check_program

    prev = prev_token(rasp.tokens, attention="relu", name="prev")
    W = match([(rasp.tokens, rasp.tokens)], [prev], select="all", attention="relu", name="W")[0]
    prog = match([(W, W)], [POSITION], select="all", attention="relu")[0]
    # x = a b a b b: W(5) = {prev(2), prev(4), prev(5)} = {a, a, b} is the vector (2, 1), W(2) = {a} is (1, 0):
    # 1 - |Q| - |K| + 2<Q, K> = 1 - 3 - 1 + 4 = 1 > 0, so position 5 "matches" 2 although {a, b} != {a}.
    assert sorted(evaluate(prog, np.array([0, 1, 0, 1, 1]))[4]) == [5]
    report = check_program(prog, vocab={0, 1, 2}, max_seq_len=6, attention="relu", causal=True, samples=200,
                           hypothesis_examples=20)
    assert not report["passed"] and report["counterexample"] is not None


def test_memorise_is_exact_with_the_formula_head_count():
    # Random datasets use every token at every position, so one softmax head spans n + V - 1
    # feature dimensions and H = ceil((M - 1) / (n + V - 2)) heads interpolate M sequences.
    for m_seq, n, v in ((16, 4, 3), (40, 6, 4)):
        x, labels = sc_dataset(m_seq, n, v, 3, m_seq)
        x = np.concatenate([x, np.full((m_seq, 1), v)], 1)  # then CLS = v
        model, got = run(memorise([rasp.tokens], x.tolist(), labels.tolist()), x, "softmax", vocab=v + 1)
        assert (got[:, -1] == labels).all()
        assert model.params["layers"][0]["w_q"].shape[0] == math.ceil((m_seq - 1) / (n + v - 2))
        assert model.meta["soft_attention_layers"] == [0]


def test_relu_memorise_refuses_xor_softmax_memorises_it():
    # {aa, bb} -> 0, {ab, ba} -> 1: no function additive over (position, token) pairs separates them.
    x = [[0, 0, 2], [1, 1, 2], [0, 1, 2], [1, 0, 2]]
    labels = [0, 0, 1, 1]
    with pytest.raises(CompileError, match="additive"):
        compile_program(memorise([rasp.tokens], x, labels, attention="relu"), vocab=range(3), max_seq_len=3,
                        attention="relu")
    _, got = run(memorise([rasp.tokens], x, labels), np.asarray(x), "softmax", vocab=3)
    assert got[:, -1].tolist() == labels


def test_memorise_refuses_conflicting_labels():
    with pytest.raises(CompileError, match="same key values"):
        compile_program(memorise([rasp.tokens], [[0, 1], [0, 1]], [0, 1]), vocab=range(2), max_seq_len=2)


@pytest.mark.parametrize("make, msg", [
    (lambda: compile_program(prev_token(rasp.tokens, attention="relu"), vocab=range(2), max_seq_len=3),
     "designed for relu"),
    (lambda: compile_program(rasp.Aggregate(rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.EQ),
                                            rasp.tokens), vocab=range(2), max_seq_len=3, attention="relu"),
     "designed for softmax"),
    (lambda: match([(rasp.tokens, rasp.tokens)], [POSITION], select="all"), "select"),
    (lambda: match([(rasp.tokens, rasp.tokens)], [POSITION], select="last", attention="relu"), "select"),
    (lambda: HeadSpec("last_occurrence", query=rasp.tokens, key=prev_token(rasp.tokens), predicate=None,
                      reads=[Read(POSITION)], hardness=1.0, attention="relu"), "no ReLU"),
    (lambda: compile_program(rasp.Map(lambda v: 0, match([(rasp.tokens, rasp.tokens)], [POSITION], select="all",
                                                 attention="relu")[0]), vocab=range(2), max_seq_len=3,
                             attention="relu"), "set-valued"),
    (lambda: compile_program(position_map(lambda i: i + 1, rasp.tokens), vocab=range(2), max_seq_len=3),
     "causal"),
    (lambda: prev_token(memorise([rasp.tokens], [[0, 1]], [0])), "read-out"),
])
def test_refusals(make, msg):
    with pytest.raises(CompileError, match=msg):
        make()
