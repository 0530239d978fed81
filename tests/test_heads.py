"""Each hand-built head, compiled through tracr, against its definition (including the BOS path)."""

import numpy as np
import pytest
from tracr.rasp import rasp

from depthcraft.constructions.compiler import compile_program
from depthcraft.constructions.errors import CompileError
from depthcraft.constructions.primitives import POSITION, Read, last_occurrence, pointer_lookup, prev_token
from depthcraft.constructions.reference import evaluate

BOT = -1
N, V = 9, 3


def all_inputs(rng, count=300):
    x = rng.integers(0, V, size=(count, N))
    x[0] = 0  # all-equal
    x[1] = np.arange(N) % V  # periodic
    return x


def run(program, x, causal=True):
    model = compile_program(program, vocab=range(V), max_seq_len=N, causal=causal)
    assert [s.kind for s in model.arch.sublayers].count("attn") >= 1
    return model, model.run(x, none_value=BOT)


def last_occurrence_def(q, k, i):
    """Latest model position j <= i with k[j] == q[i] (1-based), 0 (BOS) when none."""
    for j in range(i, 0, -1):
        if k[j - 1] is not None and k[j - 1] == q[i - 1]:
            return j
    return 0


def test_prev_token_head():
    x = all_inputs(np.random.default_rng(0))
    model, out = run(prev_token(Read(rasp.tokens, bos_value=BOT)), x)
    assert len(model.arch.sublayers) == 1 and model.params["layers"][0]["w_q"].shape[0] == 1
    expected = np.concatenate([np.full((len(x), 1), BOT), x[:, :-1]], axis=1)
    assert (out == expected).all()


def test_prev_token_without_bos_value_reads_no_value_at_position_1():
    x = all_inputs(np.random.default_rng(1))
    _, out = run(prev_token(rasp.tokens), x)
    assert (out[:, 0] == BOT).all()  # zero vector -> decoded as "no value"
    assert (out[:, 1:] == x[:, :-1]).all()


def test_prev_token_position_read_is_a_pointer():
    x = all_inputs(np.random.default_rng(2))
    _, out = run(prev_token(POSITION), x)
    assert (out == np.arange(N)[None, :]).all()  # position i points to i-1; position 1 to BOS = 0


def test_last_occurrence_head_matches_definition_and_bos_path():
    prev = prev_token(rasp.tokens)
    ptr, tok = last_occurrence(rasp.tokens, prev, [POSITION, Read(rasp.tokens, bos_value=BOT)])
    x = all_inputs(np.random.default_rng(3))
    for sop in (ptr, tok):
        _, out = run(sop, x)
        for r in range(len(x)):
            prev_vals = [None] + x[r, :-1].tolist()
            js = [last_occurrence_def(x[r].tolist(), prev_vals, i) for i in range(1, N + 1)]
            want = js if sop is ptr else [x[r, j - 1] if j else BOT for j in js]
            assert out[r].tolist() == want
    # a sequence with no repeat: every query attends to BOS
    _, out = run(ptr, np.asarray([[0, 1, 2]]))
    assert out.tolist() == [[0, 0, 0]]


def test_last_occurrence_with_custom_predicate():
    # match a key token *different* from the query: latest j <= i with x_j != x_i
    ptr = last_occurrence(rasp.tokens, rasp.Map(lambda v: v, rasp.tokens), [POSITION],
                          predicate=lambda k, q: k != q)[0]
    x = all_inputs(np.random.default_rng(4))
    _, out = run(ptr, x)
    for r in range(len(x)):
        row = x[r].tolist()
        want = [max([0] + [j for j in range(1, i + 1) if row[j - 1] != row[i - 1]]) for i in range(1, N + 1)]
        assert out[r].tolist() == want


def test_pointer_lookup_head_reads_pointed_position_and_bos():
    # pointer = position of the previous token (0 at position 1): lookup must read x_{i-1}, BOT at BOS
    ptr = prev_token(POSITION)
    tok = pointer_lookup(ptr, [Read(rasp.tokens, bos_value=BOT)])[0]
    x = all_inputs(np.random.default_rng(5))
    model, out = run(tok, x)
    assert sum(s.kind == "attn" for s in model.arch.sublayers) == 2
    assert (out[:, 0] == BOT).all() and (out[:, 1:] == x[:, :-1]).all()
    # composing: two look-ups at the same pointer chain -> x_{i-2}
    ptr2 = pointer_lookup(ptr, [ptr])[0]
    tok2 = pointer_lookup(ptr2, [Read(rasp.tokens, bos_value=BOT)])[0]
    _, out = run(tok2, x)
    assert (out[:, :2] == BOT).all() and (out[:, 2:] == x[:, :-2]).all()


def test_rasp_evaluator_agrees_with_compiled_heads():
    prev = prev_token(rasp.tokens)
    ptr, tok = last_occurrence(rasp.tokens, prev, [POSITION, Read(rasp.tokens, bos_value=BOT)])
    nxt = pointer_lookup(ptr, [Read(tok)])[0]
    x = all_inputs(np.random.default_rng(6), 40)
    _, out = run(nxt, x)
    for r in range(len(x)):
        assert [BOT if v is None else v for v in evaluate(nxt, x[r].tolist())] == out[r].tolist()


def test_heads_are_sharp_softmax():
    prev = prev_token(rasp.tokens)
    ptr = last_occurrence(rasp.tokens, prev, [POSITION])[0]
    model = compile_program(ptr, vocab=range(V), max_seq_len=N)
    ids = model.encode(all_inputs(np.random.default_rng(7)))
    res = model.forward_ids(ids)
    for mass in res.attn_mass:
        assert float(np.asarray(mass).min()) > 1 - 1e-6


def test_misuse_is_a_clear_error():
    with pytest.raises(CompileError, match="causal"):
        compile_program(last_occurrence(rasp.tokens, prev_token(rasp.tokens), [POSITION])[0],
                        vocab=range(V), max_seq_len=N, causal=False)
    with pytest.raises(CompileError, match="hardness"):
        prev_token(rasp.tokens, hardness=0)
    with pytest.raises(CompileError, match="bos_value"):
        prev_token(Read(POSITION, bos_value=3))
    with pytest.raises(CompileError, match="numerical"):
        prev_token(rasp.numerical(rasp.Map(lambda v: v, rasp.tokens)))
