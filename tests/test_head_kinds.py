"""The one table of head kinds: one name per kind (its factory's), and each property decides what it says."""

import numpy as np
import pytest
from tracr.rasp import rasp

from depthcraft.constructions import primitives
from depthcraft.constructions.compiler import compile_program
from depthcraft.constructions.errors import CompileError
from depthcraft.constructions.nodes import HEAD_KINDS, HeadSpec, head_kind
from depthcraft.constructions.primitives import (POSITION, Read, fact_lookup, last_occurrence, last_occurrence_upto,
                                                 match, memorise, pointer_lookup, position_map, prev_token,
                                                 scored_lookup, union)
from depthcraft.constructions.reference import evaluate

VOCAB, N = range(3), 4


def _prev(name):
    return prev_token(Read(rasp.tokens), name=name)


#: One small program per kind, built with the kind's factory (distinct names: tracr keys nodes by label).
#: None outputs a pointer, so that angle mode reaches the head itself.
PROGRAMS = {
    "prev_token": lambda: prev_token(rasp.tokens, name="h"),
    "position_map": lambda: position_map(lambda i: i - 2 if i > 2 else None, rasp.tokens, name="h"),
    "pointer_lookup": lambda: pointer_lookup(prev_token(POSITION, name="p"), [rasp.tokens], name="h")[0],
    "last_occurrence": lambda: last_occurrence(rasp.tokens, _prev("p"), [POSITION], name="h")[0],
    "last_occurrence_upto": lambda: last_occurrence_upto(prev_token(POSITION, name="ptr"), rasp.tokens, _prev("p"),
                                                         [rasp.tokens], name="h")[0],
    "fact_lookup": lambda: fact_lookup(rasp.tokens, _prev("p"), [rasp.tokens], key_positions=lambda j: j % 2 == 0,
                                       name="h")[0],
    "match": lambda: match([(rasp.tokens, rasp.tokens)], [rasp.tokens], name="h")[0],
    "memorise": lambda: memorise([rasp.tokens], [[0, 1, 2, 0], [1, 1, 1, 1]], [2, 0], name="h"),
    "scored_lookup": lambda: _other_with_my_token(rasp.tokens),
    "union": lambda: union(rasp.tokens, rasp.tokens, [rasp.tokens], name="h")[0],
}


def _other_with_my_token(read):
    """scored_lookup: another position with my token (2), not myself (-3); BOS scores 1."""
    return scored_lookup([(rasp.tokens, rasp.tokens, lambda q, k: 2.0 * (q == k)),
                          (POSITION, POSITION, lambda i, j: -3.0 * (i == j))], [read], name="h")[0]


def _compile(kind, **kw):
    k = head_kind(kind)
    kw.setdefault("causal", k.causal is not False)
    return compile_program(PROGRAMS[kind](), vocab=VOCAB, max_seq_len=N, **kw)


def test_every_kind_is_named_after_the_factory_that_makes_it():
    assert sorted(k.name for k in HEAD_KINDS) == sorted(PROGRAMS)
    for name, make in PROGRAMS.items():
        head = make().head
        assert head.kind is head_kind(name) and str(head.kind) == name
        assert getattr(primitives, name).__name__ == name
    assert memorise([rasp.tokens], [[0]], [1]).head.name == "memorise"  # the default head name is the kind's


def test_an_unknown_kind_names_the_known_ones():
    with pytest.raises(CompileError, match=r"unknown head kind 'memory'; expected one of \['prev_token'.*'memorise'"):
        head_kind("memory")
    with pytest.raises(CompileError, match="unknown head kind"):
        HeadSpec("memory", query=None, key=None, predicate=None, reads=[Read(POSITION)], hardness=1.0)


@pytest.mark.parametrize("kind", [k.name for k in HEAD_KINDS if k.causal is not None])
def test_causal_decides_which_model_the_head_compiles_into(kind):
    causal = head_kind(kind).causal
    msg = "needs a causal model" if causal else "is bidirectional: compile with causal=False"
    with pytest.raises(CompileError, match=f"{kind} {msg}"):
        _compile(kind, causal=not causal)


@pytest.mark.parametrize("kind", [k.name for k in HEAD_KINDS if k.causal is None])
def test_a_head_without_a_mask_compiles_into_either_model(kind):
    x = np.array([[0, 1, 2, 1], [2, 2, 0, 1]])
    for causal in (True, False):
        got = _compile(kind, causal=causal).run(x, none_value=None)
        expected = [evaluate(PROGRAMS[kind](), row) for row in x.tolist()]
        assert got.tolist() == expected


@pytest.mark.parametrize("kind", [k.name for k in HEAD_KINDS])
def test_attention_lists_the_forms_a_kind_has(kind):
    head = PROGRAMS[kind]().head
    again = dict(query=head.query, key=head.key, predicate=head.predicate, reads=head.reads, hardness=1.0,
                 spec=head.spec, pointer=head.pointer, key_positions=head.key_positions)
    if "relu" in head_kind(kind).attention:
        assert HeadSpec(kind, attention="relu", **again).attention == "relu"
    else:
        with pytest.raises(CompileError, match=f"{kind} selects one key by competition.*no ReLU form"):
            HeadSpec(kind, attention="relu", **again)


@pytest.mark.parametrize("kind", [k.name for k in HEAD_KINDS if not k.angle])
def test_kinds_without_an_angle_form_are_refused_in_angle_mode(kind):
    # memorise too: it used to compile there and read the one-hot positions angle mode does not have.
    with pytest.raises(CompileError, match=f"{kind} needs one-hot positions"):
        _compile(kind, positions="angle")


def test_only_a_soft_kind_marks_its_layer_soft_and_only_an_unreadable_kind_is_refused_as_input():
    assert [k.name for k in HEAD_KINDS if k.soft] == ["memorise"]
    assert _compile("memorise").meta["soft_attention_layers"] == [0]
    assert _compile("match").meta["soft_attention_layers"] == []
    assert [k.name for k in HEAD_KINDS if not k.readable] == ["memorise"]
    with pytest.raises(CompileError, match=r"h_label\S* is a memorise read-out"):
        prev_token(PROGRAMS["memorise"]())
    prev_token(PROGRAMS["match"]())  # a readable kind's output can be read


def test_the_search_range_follows_pointer_key_positions_and_causal():
    """The reference semantics of the three search kinds, from the definition, on one input."""
    x = [0, 0, 1, 1, 0, 0]  # model positions 1..6; prev[j] = x[j-1]: None (BOS), 0, 0, 1, 1, 0
    # last_occurrence: the latest j <= i with prev[j] == x[i] (0 = BOS: none).
    assert evaluate(last_occurrence(rasp.tokens, _prev("p"), [POSITION], name="h")[0], x) == [0, 2, 0, 4, 3, 6]
    # last_occurrence_upto with the pointer p(i) = i-1: the latest j <= i-1 with prev[j] == x[i].
    got = evaluate(last_occurrence_upto(prev_token(POSITION, name="ptr"), rasp.tokens, _prev("p"), [POSITION],
                                        name="h")[0], x)
    assert got == [0, 0, 0, 0, 3, 3]
    # fact_lookup over the even positions (prev 0, 1, 0) of the whole input, keys after the query included.
    assert evaluate(fact_lookup(rasp.tokens, _prev("p"), [POSITION], key_positions=lambda j: j % 2 == 0,
                                name="h")[0], x) == [6, 6, 4, 4, 6, 6]


def test_scored_lookup_semantics_by_hand():
    """The highest sum of terms wins, keys after the query included; BOS by bos_score; ties go to the latest."""
    x = [0, 1, 0, 2]  # model positions 1..4
    # Another position with my token (2), not myself (-3); BOS scores 1: tokens 1 and 2 have no partner.
    assert evaluate(_other_with_my_token(POSITION), x) == [3, 0, 1, 0]
    # Ties: every key scores 0 and BOS 0 -> the latest key, N.
    flat = scored_lookup([(rasp.tokens, rasp.tokens, lambda q, k: 0.0)], [POSITION], bos_score=0.0, name="t")[0]
    assert evaluate(flat, x) == [4, 4, 4, 4]
    # A term on a head's read: None values (no read) add nothing; a read's BOS value scores BOS.
    prev = prev_token(Read(rasp.tokens, bos_value=2), name="p")  # BOS's token read as 2
    h = scored_lookup([(rasp.tokens, prev, lambda q, k: 5.0 * (q == k))], [POSITION], bos_score=1.0, name="s")[0]
    # key j scores 5 when x[j-1] == x[i]; BOS scores 1 + 5 * (x[i] == 2).
    assert evaluate(h, x) == [4, 3, 4, 0]


def test_scored_lookup_compiles_to_its_semantics_and_bos_attends_itself():
    prev = prev_token(Read(rasp.tokens, bos_value=2), name="p")
    # Unique best keys: a match (5) plus the key's position (1 per step); BOS 0.5 (+5 when x_i = 2).
    h = scored_lookup([(rasp.tokens, prev, lambda q, k: 5.0 * (q == k)),
                       (POSITION, POSITION, lambda i, j: 1.0 * j)], [rasp.tokens], bos_score=0.5, name="s")[0]
    model = compile_program(h, vocab=VOCAB, max_seq_len=N, causal=False)
    rng = np.random.default_rng(0)
    x = rng.integers(0, 3, size=(200, N))
    got = model.run(x, none_value=None)
    expected = np.array([evaluate(h, row) for row in x.tolist()], dtype=object)
    assert (got == expected).all()


def test_scored_lookup_refuses_bad_terms():
    with pytest.raises(CompileError, match="needs at least one term"):
        scored_lookup([], [POSITION])
    with pytest.raises(CompileError, match="score model positions with POSITION, not rasp.indices"):
        scored_lookup([(rasp.indices, rasp.tokens, lambda a, b: 1.0)], [POSITION])
    with pytest.raises(CompileError, match="a term side is a categorical SOp, rasp.tokens or POSITION; got 3"):
        scored_lookup([(3, rasp.tokens, lambda a, b: 1.0)], [POSITION])
    with pytest.raises(CompileError, match="must be callable, got 1.0"):
        scored_lookup([(rasp.tokens, rasp.tokens, 1.0)], [POSITION])
    with pytest.raises(CompileError, match=r"a term is \(query, key, score\)"):
        scored_lookup([(rasp.tokens, rasp.tokens)], [POSITION])
