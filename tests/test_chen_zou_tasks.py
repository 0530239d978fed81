"""The four Chen & Zou tasks: references on hand-worked examples, samplers, edge cases, properties."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from depthcraft.constructions.errors import InputError, ParameterError
from depthcraft.verify.tasks import get_task
from depthcraft.rasp_programs import templates as tpl
from depthcraft.verify.tasks.chen_zou.common import NONE
from depthcraft.rasp_programs.chen_zou_data import sc_dataset

SC, ICQA, TM, ICTM = (get_task(n) for n in ("sc", "icqa", "tm", "ictm"))


def last(task, p, x):
    y, scored = task.reference(p, np.asarray(x))
    assert scored[:, -1].all() and not scored[:, :-1].any()
    assert (y[:, :-1] == NONE).all()
    return y[:, -1]


# ------------------------------------------------------------------ templates
def test_canonical_pattern_hand_examples():
    x = np.array([[7, 3, 7, 9, 3], [1, 1, 1, 1, 1], [4, 3, 2, 1, 0], [2, 2, 5, 2, 5]])
    assert tpl.canonical_pattern(x).tolist() == [[0, 1, 0, 2, 1], [0, 0, 0, 0, 0], [0, 1, 2, 3, 4], [0, 0, 1, 0, 1]]
    assert tpl.first_occurrence(x[:1]).tolist() == [[0, 1, 0, 3, 1]]
    assert tpl.pattern_str([0, 1, 0]) == "αβα"


def test_same_template_iff_same_pattern():
    aba, bab, abb = np.array([[0, 1, 0]]), np.array([[5, 2, 5]]), np.array([[0, 1, 1]])
    code = lambda x: int(tpl.pattern_codes(tpl.canonical_pattern(x))[0])  # noqa: E731
    assert code(aba) == code(bab) != code(abb)
    # Patterns of different lengths never share a code.
    assert code(np.array([[0]])) != code(np.array([[0, 0]]))


def test_enumerate_and_count_patterns():
    assert tpl.enumerate_patterns(3).tolist() == [[0, 0, 0], [0, 0, 1], [0, 1, 0], [0, 1, 1], [0, 1, 2]]
    assert [tpl.count_patterns(n) for n in range(1, 8)] == [1, 2, 5, 15, 52, 203, 877]  # Bell numbers
    assert tpl.count_patterns(4, 2) == 1 + 7  # S(4,1) + S(4,2)
    for n, w in ((4, 2), (6, 3), (5, 5)):
        pats = tpl.enumerate_patterns(n, w)
        assert len(pats) == tpl.count_patterns(n, w)
        assert (tpl.canonical_pattern(pats) == pats).all()  # already canonical
        assert len(np.unique(tpl.pattern_codes(pats))) == len(pats)  # pairwise distinct
        assert tpl.num_wildcards(pats).max() <= w
    with pytest.raises(ParameterError):
        tpl.enumerate_patterns(0)


def test_injective_substitutions():
    maps = tpl.injective_maps(2, range(4))
    assert len(maps) == 12 and (maps[:, 0] != maps[:, 1]).all()
    assert len({tuple(r) for r in maps}) == 12
    rng = np.random.default_rng(0)
    for k, pool in ((3, range(4)), (3, range(100))):
        subs = tpl.random_injective(rng, 500, k, pool)
        assert all(len(set(r)) == k for r in subs.tolist()) and subs.min() >= 0 and subs.max() < len(pool)
    assert tpl.substitute(np.array([[0, 1, 0]]), np.array([[7, 9]])).tolist() == [[7, 9, 7]]
    with pytest.raises(ParameterError):
        tpl.random_injective(rng, 1, 5, range(4))


# ------------------------------------------------------------------------- SC
def test_sc_dataset_is_m_distinct_sequences_deterministic_in_seed():
    x, y = sc_dataset(16, 2, 4, 3, 0)
    assert {tuple(r) for r in x.tolist()} == set(itertools.product(range(4), repeat=2))  # M = V^n: all of them
    x2, y2 = sc_dataset(16, 2, 4, 3, 0)
    assert (x == x2).all() and (y == y2).all() and y.min() >= 0 and y.max() < 3
    x3, _ = sc_dataset(10, 6, 3, 2, 1)
    assert len({tuple(r) for r in x3.tolist()}) == 10
    assert not (sc_dataset(10, 6, 3, 2, 2)[0] == x3).all()


def test_sc_reference_reads_the_dataset_label_at_cls():
    p = SC.resolve({"sequences": 5, "n": 3, "vocab": 3, "classes": 2, "seed": 4})
    x, labels = sc_dataset(5, 3, 3, 2, 4)
    cls = 3
    assert SC.vocab(p) == [0, 1, 2, 3] and SC.target_values(p) == [4, 5] and SC.max_seq_len(p) == 4
    inputs = np.concatenate([x, np.full((5, 1), cls)], 1)
    assert last(SC, p, inputs).tolist() == (labels + 4).tolist()
    total, batches = SC.exhaustive(p)
    assert total == 5 and sum(len(b) for b in batches) == 5


def test_sc_rejects_bad_inputs():
    p = SC.resolve({"sequences": 2, "n": 3, "vocab": 2, "classes": 2})
    x, _ = sc_dataset(2, 3, 2, 2, 0)
    absent = next(r for r in itertools.product(range(2), repeat=3) if list(r) not in x.tolist())
    with pytest.raises(InputError, match="not a sequence of the dataset"):
        SC.reference(p, np.array([list(absent) + [2]]))
    with pytest.raises(InputError, match="expected CLS"):
        SC.reference(p, np.array([list(x[0]) + [0]]))
    with pytest.raises(InputError, match="n\\+1"):
        SC.reference(p, np.array([list(x[0])]))
    with pytest.raises(ParameterError, match="distinct sequences"):
        SC.resolve({"sequences": 9, "n": 3, "vocab": 2})


# ----------------------------------------------------------------------- ICQA
def test_icqa_hand_worked_example():
    p = ICQA.resolve({"m": 3, "questions": 4, "answers": 3})
    # q2 a1 q0 a2 q3 a1 q0 -> a2; questions are 0..3, answers 4..6.
    x = [[2, 5, 0, 6, 3, 5, 0]]
    assert ICQA.format_tokens(p, x[0]) == "q2 a1 q0 a2 q3 a1 q0"
    assert last(ICQA, p, x).tolist() == [6]
    assert last(ICQA, p, [[3, 4, 3]]).tolist() == [4]  # m' = 1
    assert last(ICQA, p, [[2, 5, 0, 6, 3, 5, 3]]).tolist() == [5]  # the same answer twice is allowed
    assert ICQA.parse_tokens(p, "q2 a1 q0 a2 q3 a1 q0") == x[0]


@pytest.mark.parametrize("x, msg", [([[2, 5, 2, 6, 2]], "repeats a question"),
                                    ([[2, 5, 0, 6, 3]], "not among its questions"),
                                    ([[2, 5, 0, 6]], "odd length"),
                                    ([[4, 5, 0, 6, 0]], "question token"),
                                    ([[2, 1, 0, 6, 0]], "answer token"),
                                    ([[2, 5, 0, 6, 5]], "query token")])
def test_icqa_rejects_malformed_inputs(x, msg):
    p = ICQA.resolve({"m": 3, "questions": 4, "answers": 3})
    with pytest.raises(InputError, match=msg):
        ICQA.reference(p, np.array(x))


def test_icqa_samples_and_edge_cases_are_valid():
    p = ICQA.resolve({"m": 5, "questions": 6, "answers": 3})
    x = ICQA.sample(p, np.random.default_rng(0), 2000)
    qs = x[:, 0:-1:2]
    assert all(len(set(r)) == 5 for r in qs.tolist())
    y = last(ICQA, p, x)
    # The queried pair is uniform: each of the 5 slots is hit.
    slot = (qs == x[:, -1:]).argmax(1)
    assert set(slot.tolist()) == set(range(5)) and set(y.tolist()) <= set(ICQA.target_values(p))
    for e in ICQA.edge_cases(p):
        last(ICQA, p, e)
    with pytest.raises(ParameterError, match="distinct questions"):
        ICQA.resolve({"m": 5, "questions": 4})


def test_icqa_exhaustive_counts_every_input():
    p = ICQA.resolve({"m": 2, "questions": 3, "answers": 2})
    total, batches = ICQA.exhaustive(p, batch=7)
    rows = np.concatenate(list(batches))
    assert total == len(rows) == 6 * 4 * 2 and len({tuple(r) for r in rows.tolist()}) == total
    last(ICQA, p, rows)


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_icqa_answer_unchanged_by_renaming_questions(data):
    p = ICQA.resolve({"m": 4, "questions": 6, "answers": 3})
    x = np.asarray([data.draw(ICQA.strategy(p))])
    perm = np.asarray(data.draw(st.permutations(range(6))))
    renamed = x.copy()
    renamed[:, 0::2] = perm[x[:, 0::2]]  # questions and the query, consistently
    assert last(ICQA, p, renamed).tolist() == last(ICQA, p, x).tolist()


# ------------------------------------------------------------------------- TM
def test_tm_hand_worked_example():
    # n = 3 with templates = 5 takes every pattern of length 3; classes = 5 gives each its own label.
    p = TM.resolve({"n": 3, "templates": 5, "classes": 5, "vocab": 4, "held_out": 1})
    pats, labels = TM.templates(p)
    assert pats.tolist() == tpl.enumerate_patterns(3).tolist() and sorted(labels.tolist()) == [0, 1, 2, 3, 4]
    label_of = {tuple(t): 5 + int(c) for t, c in zip(pats.tolist(), labels)}  # CLS = 4, label c = 5 + c
    x = np.array([[0, 1, 0, 4], [2, 3, 2, 4], [3, 3, 3, 4], [1, 0, 2, 4]])  # aba, cdc, ddd, bac
    assert last(TM, p, x).tolist() == [label_of[(0, 1, 0)], label_of[(0, 1, 0)], label_of[(0, 0, 0)],
                                       label_of[(0, 1, 2)]]
    assert TM.format_tokens(p, x[0]) == "a b a CLS"


def test_tm_templates_distinct_and_seeded():
    p = TM.resolve({})
    pats, labels = TM.templates(p)
    assert len(np.unique(tpl.pattern_codes(pats))) == p["templates"]
    assert tpl.num_wildcards(pats).max() <= p["vocab"] - p["held_out"]
    assert np.bincount(labels, minlength=p["classes"]).max() - np.bincount(labels).min() <= 1  # balanced
    other = TM.templates(dict(p, seed=1))[0]
    assert not np.array_equal(pats, other)


def test_tm_splits_respect_held_out_tokens():
    p = TM.resolve({"vocab": 8, "held_out": 2})
    rng = np.random.default_rng(0)
    train = TM.sample(dict(p, split="train"), rng, 3000)
    test = TM.sample(dict(p, split="test"), rng, 3000)
    assert (train[:, :-1] < 6).all()
    assert ((test[:, :-1] >= 6).any(1)).all()
    for x in (train, test, TM.sample(p, rng, 100)):
        last(TM, p, x)  # every sample is a valid instance
    with pytest.raises(ParameterError, match="held_out"):
        TM.resolve({"vocab": 4, "held_out": 4})


def test_tm_exhaustive_is_every_template_times_every_injective_substitution():
    p = TM.resolve({"n": 3, "templates": 3, "vocab": 4, "held_out": 1})
    pats, _ = TM.templates(p)
    total, batches = TM.exhaustive(p, batch=5)
    rows = np.concatenate(list(batches))
    expected = sum({1: 4, 2: 12, 3: 24}[int(w)] for w in tpl.num_wildcards(pats))
    assert total == len(rows) == expected == len({tuple(r) for r in rows.tolist()})
    last(TM, p, rows)


def test_tm_rejects_unknown_template_and_bad_tokens():
    p = TM.resolve({"n": 3, "templates": 1, "vocab": 4, "held_out": 0})
    pats, _ = TM.templates(p)
    other = next(t for t in tpl.enumerate_patterns(3) if t.tolist() != pats[0].tolist())
    with pytest.raises(InputError, match="not one of"):
        TM.reference(p, np.array([list(other) + [4]]))
    with pytest.raises(InputError, match="content token"):
        TM.reference(p, np.array([[0, 9, 0, 4]]))


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_tm_label_unchanged_by_any_injective_resubstitution(data):
    p = TM.resolve({"n": 5, "templates": 10, "vocab": 7, "held_out": 2})
    x = np.asarray([data.draw(TM.strategy(p))])
    perm = np.asarray(data.draw(st.permutations(range(7))))  # an injective map of the content tokens
    y = x.copy()
    y[:, :-1] = perm[x[:, :-1]]
    assert last(TM, p, y).tolist() == last(TM, p, x).tolist()


# ----------------------------------------------------------------------- ICTM
def test_ictm_hand_worked_example():
    p = ICTM.resolve({"n": 2, "m": 2, "vocab": 4, "labels": 2})
    # Examples "a a L1" and "c d L0", query "b b": the query's template αα is the first example's.
    x = [[0, 0, 5, 2, 3, 4, 1, 1]]
    assert ICTM.format_tokens(p, x[0]) == "a a L1 c d L0 b b"
    assert last(ICTM, p, x).tolist() == [5]
    assert last(ICTM, p, [[0, 0, 5, 2, 3, 4, 1, 2]]).tolist() == [4]  # query αβ
    assert last(ICTM, p, [[2, 3, 5, 0, 1]]).tolist() == [5]  # m' = 1
    assert ICTM.max_seq_len(p) == 8 and ICTM.target_values(p) == [4, 5]


@pytest.mark.parametrize("x, msg", [([[0, 0, 5, 1, 1, 4, 2, 2]], "same template"),
                                    ([[0, 0, 5, 1, 1, 4, 2]], "length"),
                                    ([[0, 0, 5, 2, 3, 4, 1, 1, 0]], "length"),
                                    ([[0, 0, 5, 2, 3, 1, 1, 1]], "label token"),
                                    ([[0, 0, 5, 2, 3, 4, 1, 6]], "content token")])
def test_ictm_rejects_malformed_inputs(x, msg):
    p = ICTM.resolve({"n": 2, "m": 2, "vocab": 4, "labels": 2})
    with pytest.raises(InputError, match=msg):
        ICTM.reference(p, np.array(x))


def test_ictm_query_template_must_be_an_example():
    p = ICTM.resolve({"n": 3, "m": 2, "vocab": 4, "labels": 2})
    with pytest.raises(InputError, match="not an example's"):
        ICTM.reference(p, np.array([[0, 0, 0, 4, 0, 1, 2, 5, 1, 2, 1]]))


def test_ictm_samples_have_distinct_templates_fresh_tokens_and_valid_answers():
    p = ICTM.resolve({"n": 3, "m": 4, "vocab": 8, "labels": 4})
    x = ICTM.sample(p, np.random.default_rng(0), 2000)
    ex, labels, q = ICTM.split(p, x)
    assert tpl.distinct_rows(ex).all()
    y = last(ICTM, p, x)
    assert set(y.tolist()) <= set(ICTM.target_values(p))
    # Fresh substitution per block: the query's tokens usually differ from its example's tokens.
    hit = (tpl.pattern_codes(tpl.canonical_pattern(ex.reshape(-1, 3))).reshape(-1, 4)
           == tpl.pattern_codes(tpl.canonical_pattern(q))[:, None]).argmax(1)
    same_tokens = (ex[np.arange(len(x)), hit] == q).all(1)
    assert same_tokens.mean() < 0.2
    for e in ICTM.edge_cases(p):
        last(ICTM, p, e)


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_ictm_answer_unchanged_by_permuting_example_blocks(data):
    p = ICTM.resolve({"n": 3, "m": 4, "vocab": 6, "labels": 3})
    x = np.asarray([data.draw(ICTM.strategy(p))])
    ex, labels, q = ICTM.split(p, x)
    perm = np.asarray(data.draw(st.permutations(range(ex.shape[1]))))
    y = ICTM.build(ex[:, perm], labels[:, perm], q)
    assert last(ICTM, p, y).tolist() == last(ICTM, p, x).tolist()


# ---------------------------------------------------------------- all four
@pytest.mark.parametrize("task", [SC, ICQA, TM, ICTM], ids=lambda t: t.name)
def test_samplers_are_seeded_and_round_trip_through_token_names(task):
    p = task.resolve({})
    a = task.sample(p, np.random.default_rng(3), 50)
    b = task.sample(p, np.random.default_rng(3), 50)
    assert np.array_equal(a, b) and a.shape == (50, task.max_seq_len(p))
    assert set(np.unique(a).tolist()) <= set(task.vocab(p))
    assert task.parse_tokens(p, task.format_tokens(p, a[0])) == a[0].tolist()
    assert set(last(task, p, a).tolist()) <= set(task.target_values(p))


@pytest.mark.parametrize("task", [SC, ICQA, TM, ICTM], ids=lambda t: t.name)
def test_strategies_generate_valid_inputs(task):
    p = task.resolve({})

    @settings(max_examples=25, deadline=None)
    @given(task.strategy(p))
    def prop(seq):
        assert 1 <= len(seq) <= task.max_seq_len(p)
        assert last(task, p, [seq])[0] in task.target_values(p)

    prop()


def test_cached_datasets_are_read_only():
    """sc_dataset / tm_templates are cached and shared by the task and the construction: no caller may mutate them."""
    from depthcraft.rasp_programs.chen_zou_data import sc_dataset, tm_templates

    arrays = list(sc_dataset(5, 3, 3, 2, 0)) + [a for a in tm_templates(3, 4, 2, 4, 1, 0) if isinstance(a, np.ndarray)]
    assert arrays and all(not a.flags.writeable for a in arrays)
