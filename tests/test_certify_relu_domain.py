"""ReLU heads with a domain precondition (issue 30, items 4 and 5).

A ReLU head adds up every key that scores above zero, so the certifier stops where keys at
several positions may be on for one query (:mod:`verify.certify.relu`). Given the
``classes`` fact (:mod:`verify.certify.domain`: distinct positions of one class hold distinct
tokens), a query whose on keys all stand at positions of one class and hold one token has at
most one on key on a domain input: the head is clean there, and the certificate is scoped to
the domain.

The test model is a ReLU ``match`` of tokens against tokens reading the key's position
("where does this token occur"): exact on inputs with distinct tokens, wrong on a repeat.
ICQA declares its domain, but the domain implies no useful ``classes`` fact, and on it the
ReLU match head's program output is a set of several tokens at answer positions: the row
stays uncertified, with reasons shown on concrete inputs below.
"""

import dataclasses
import itertools

import numpy as np
import pytest
from tracr.rasp import rasp

from depthcraft.constructions.compiler import compile_program
from depthcraft.constructions.primitives import POSITION, Read, match
from depthcraft.constructions.reference import Evaluator
from depthcraft.verify import lookup
from depthcraft.verify.certify import certify
from depthcraft.verify.certify.domain import Precondition
from depthcraft.verify.tasks import get_task

V, N = 4, 4
DISTINCT = Precondition("tokens pairwise distinct", frozenset(range(1, N + 1)), (0,) * (N + 1))


def where_program():
    """At position i, the set of positions j <= i holding x_i (ReLU match, select all)."""
    return match([(rasp.tokens, rasp.tokens)], [Read(POSITION, name="where")], select="all",
                 attention="relu", name="m")[0]


@pytest.fixture(scope="module")
def where():
    prog = where_program()
    model = compile_program(prog, vocab=range(V), max_seq_len=N, causal=True, attention="relu")
    return prog, model


def test_without_the_precondition_the_relu_match_is_not_certified(where):
    prog, model = where
    cert = certify(model)
    assert cert["certified"] is False
    u = cert["uncertified"][0]
    assert (u["layer"], u["head"]) == ("attn 1", 0) and "several positions" in u["why"]
    assert len({k["position"] for k in u["witness"]["keys"]}) >= 2
    assert "every input of length" in cert["scope"]


def test_with_the_precondition_it_is_certified_on_the_domain(where):
    prog, model = where
    cert = certify(model, domain=DISTINCT.predicate, precondition=DISTINCT)
    assert cert["certified"] is True, cert["uncertified"]
    assert cert["domain"]["used_as_precondition"] is True
    assert cert["domain"]["uses"] == [{"layer": "attn 1", "head": 0, "fact": "classes"}]
    assert "every input in the domain (tokens pairwise distinct)" in cert["scope"]
    assert "inputs outside the domain are not covered" in cert["scope"]
    # what the certificate claims, checked on every domain input: position i holds {i}
    for n in range(1, N + 1):
        for x in itertools.permutations(range(V), n):
            assert DISTINCT.holds(list(x))
            got = model.run(np.array([x]))[0].tolist()
            assert got == list(range(1, n + 1)), x
            assert [set(s) for s in Evaluator().evaluate(prog, list(x))] == [{i} for i in range(1, n + 1)]


def test_an_input_outside_the_domain_really_decodes_differently(where):
    prog, model = where
    x = [2, 1, 2]  # token 2 twice: outside the domain
    assert not DISTINCT.holds(x)
    assert set(Evaluator().evaluate(prog, x)[2]) == {1, 3}  # the definition: a set of two positions
    assert model.run(np.array([x]))[0, 2] in (1, 3)  # the read-out: one of them


def _merge_key_tokens(model, src, dst):
    """The model with the key side's ``tokens:src`` row made equal to ``tokens:dst`` in W_K: a key
    holding src then matches a query holding dst."""
    labels = list(model.residual_labels)
    layers = [dict(p) for p in model.params["layers"]]
    k_rows = list(model.arch.sublayers[0].rows("k_rows", len(labels)))
    wk = np.array(layers[0]["w_k"])
    wk[:, k_rows.index(labels.index(f"tokens:{src}"))] = wk[:, k_rows.index(labels.index(f"tokens:{dst}"))]
    layers[0]["w_k"] = wk
    return dataclasses.replace(model, params=dict(model.params, layers=layers))


def test_a_weakened_relu_match_is_not_certified_even_with_the_precondition(where):
    prog, model = where
    bad = _merge_key_tokens(model, 1, 0)
    cert = certify(bad, domain=DISTINCT.predicate, precondition=DISTINCT)
    assert cert["certified"] is False
    u = cert["uncertified"][0]
    assert (u["layer"], u["head"]) == ("attn 1", 0)
    assert {k["tokens"] for k in u["witness"]["keys"]} >= {0, 1}  # two tokens on for one query
    # a domain input where the weakened weights are wrong: at position 2 (token 0) the key at 1
    # (token 1) now matches too
    x = [1, 0]
    assert DISTINCT.holds(x)
    assert [set(s) for s in Evaluator().evaluate(prog, x)] == [{1}, {2}]
    assert model.run(np.array([x]))[0].tolist() == [1, 2]
    assert bad.run(np.array([x]))[0, 1] != 2


# ----------------------------------------------------------------------------------------- ICQA
ICQA = get_task("icqa")
SMALL = {"m": 2, "questions": 3, "answers": 2}  # questions 0..2, answers 3..4, n <= 5
QS, ANS = frozenset({0, 1, 2}), frozenset({3, 4})


def test_precondition_new_facts_by_definition():
    pre = Precondition("t", frozenset({3}), (-1, 1, -1, 1), prefix=True, scored=frozenset({0}),
                       slots=(None, QS, ANS, QS))
    assert pre.holds([0, 3, 0])  # the last position may repeat (prefix), class -1 states nothing
    assert not pre.holds([1, 3, 1])  # the last token is not scored
    assert not pre.holds([0, 0, 0])  # a question token in an answer slot
    pre2 = dataclasses.replace(pre, lengths=frozenset({5}), classes=(-1, 1, -1, 1, -1, 1),
                               slots=(None, QS, ANS, QS, ANS, QS))
    assert pre2.holds([1, 3, 0, 3, 0]) and not pre2.holds([0, 3, 0, 4, 0])  # q0 twice before the last


def test_icqa_domain_by_definition_and_its_precondition():
    """Exhaustive over every input of length 1..5: the domain is the ICQA format with distinct
    questions (counted from the definition), and every domain input satisfies the precondition."""
    pre = ICQA.domain_precondition(SMALL)
    assert pre.lengths == frozenset({3, 5}) and pre.classes == (-1, 1, -1, 1, -1, 1) and pre.prefix
    assert pre.scored == QS and pre.slots == (None, QS, ANS, QS, ANS, QS)
    vocab = ICQA.vocab(SMALL)
    inside = 0
    for n in range(1, 6):
        xs = np.array(list(itertools.product(vocab, repeat=n)))
        ok = ICQA.in_domain(SMALL, xs)
        inside += int(ok.sum())
        for x in xs[ok]:
            assert pre.holds(list(x))
    # m' = 1: 3 questions x 2 answers (query = the question); m' = 2: 3 * 2 ordered questions
    # x 2^2 answers x 2 queries
    assert inside == 3 * 2 + 6 * 4 * 2
    assert not ICQA.in_domain(SMALL, np.array([[2, 3, 2, 4, 2]]))[0]  # q2 twice
    assert ICQA.in_domain(SMALL, np.array([[2, 3, 1, 4, 2]]))[0]


def test_icqa_implies_no_plain_parity_class_fact():
    """Odd positions including the last are not pairwise distinct on the domain: the query repeats a
    question (hence ``prefix``)."""
    parity = Precondition("parity", frozenset({3, 5}), tuple(i % 2 for i in range(6)))
    x = [0, 3, 0]  # q0 a0 q0: in the domain
    assert ICQA.in_domain(SMALL, np.array([x]))[0]
    assert not parity.holds(x)


P3 = {"m": 3, "questions": 3, "answers": 2}


@pytest.fixture(scope="module")
def icqa_relu():
    return lookup.build("icqa_copy_match", attention="relu", **P3)


def _domain_inputs(p):
    """Every ICQA input of the instance, from the definition (ordered distinct questions, answers, query)."""
    q, a = p["questions"], p["answers"]
    for mm in range(1, p["m"] + 1):
        for qs in itertools.permutations(range(q), mm):
            for ans in itertools.product(range(q, q + a), repeat=mm):
                for j in range(mm):
                    x = [t for pair in zip(qs, ans) for t in pair] + [qs[j]]
                    yield x, ans[j]


def test_icqa_relu_is_certified_at_the_scored_position_of_the_domain(icqa_relu):
    model = icqa_relu
    cert = certify(model, domain=ICQA.domain(P3), precondition=ICQA.domain_precondition(P3))
    assert cert["certified"] is True, cert["uncertified"]
    facts = {u["fact"] for u in cert["domain"]["uses"]}
    assert facts == {"classes", "slots", "scored"}
    assert all(u["layer"] == "attn 2" for u in cert["domain"]["uses"])
    assert "every input in the domain (icqa inputs" in cert["scope"]
    assert "the last position n only" in cert["scope"] and "every position 1..n" not in cert["scope"]
    # the claim, checked on every domain input against the task's definition
    count = 0
    for x, want in _domain_inputs(P3):
        assert ICQA.in_domain(P3, np.array([x]))[0]
        assert model.run(np.array([x]))[0, -1] == want, x
        count += 1
    assert count == 3 * 2 + 6 * 4 * 2 + 6 * 8 * 3


def test_icqa_relu_without_the_precondition_is_not_certified(icqa_relu):
    cert = certify(icqa_relu)
    assert cert["certified"] is False
    assert (cert["uncertified"][0]["layer"], cert["uncertified"][0]["head"]) == ("attn 2", 0)


def test_icqa_relu_every_position_is_not_certified_and_really_wrong_there(icqa_relu):
    """Without ``scored`` the claim is every position; on the domain the match head's program output
    is a set of several tokens at an answer position, which the read-out decodes as one token."""
    model = icqa_relu
    pre = dataclasses.replace(ICQA.domain_precondition(P3), scored=None)
    cert = certify(model, domain=ICQA.domain(P3), precondition=pre)
    assert cert["certified"] is False
    u = cert["uncertified"][0]
    assert (u["layer"], u["head"]) == ("attn 2", 0) and "several positions" in u["why"]
    assert u["witness"]["query"]["tokens"] in ANS  # an answer position's query
    prog = model.program.nodes[model.program.sink]
    x = [0, 3, 1, 3, 2, 3, 0]  # q0 a0 q1 a0 q2 a0 q0: distinct questions, a repeated answer
    assert ICQA.in_domain(P3, np.array([x]))[0]
    want = Evaluator().evaluate(prog, x)
    assert set(want[5]) == {1, 2}  # position 6 (a0) matches the keys after both earlier a0 slots
    assert model.run(np.array([x]))[0, 5] in (1, 2)  # one token, not the set
    assert set(want[6]) == {3} and model.run(np.array([x]))[0, 6] == 3  # the scored last position


def test_icqa_relu_without_distinct_questions_is_not_certified(icqa_relu):
    """Without the classes fact a question query may match the keys after several question slots."""
    pre = dataclasses.replace(ICQA.domain_precondition(P3), classes=None)
    cert = certify(icqa_relu, domain=ICQA.domain(P3), precondition=pre)
    assert cert["certified"] is False
    u = cert["uncertified"][0]
    assert (u["layer"], u["head"]) == ("attn 2", 0) and u["witness"]["query"]["tokens"] in QS


def test_icqa_relu_out_of_domain_input_decodes_differently(icqa_relu):
    """The witness the certifier finds without the precondition repeats a question: outside the
    domain (and outside the proof), and wrong there at the task's scored position."""
    model = icqa_relu
    x = [2, 3, 2, 4, 2]  # q2 a0 q2 a1 q2
    assert not ICQA.in_domain(P3, np.array([x]))[0]
    assert not ICQA.domain_precondition(P3).holds(x)
    prog = model.program.nodes[model.program.sink]
    assert set(Evaluator().evaluate(prog, x)[4]) == {3, 4}
    assert model.run(np.array([x]))[0, 4] in (3, 4)


def _merge_copy_keys(model, src, dst):
    """The ICQA model with the match head's key row ``copy_tokens_k:src`` made equal to ``...:dst``:
    a key after a slot holding src then matches a query holding dst."""
    labels = list(model.residual_labels)
    copy = next(lb.split(":")[0] for lb in labels if lb.startswith("copy_tokens"))  # the label counter varies
    layers = [dict(p) for p in model.params["layers"]]
    k_rows = list(model.arch.sublayers[1].rows("k_rows", len(labels)))
    wk = np.array(layers[1]["w_k"])
    wk[:, k_rows.index(labels.index(f"{copy}:{src}"))] = wk[:, k_rows.index(labels.index(f"{copy}:{dst}"))]
    layers[1]["w_k"] = wk
    return dataclasses.replace(model, params=dict(model.params, layers=layers))


def test_icqa_weakened_relu_match_is_not_certified_even_with_the_precondition(icqa_relu):
    model = icqa_relu
    bad = _merge_copy_keys(model, 1, 0)
    cert = certify(bad, domain=ICQA.domain(P3), precondition=ICQA.domain_precondition(P3))
    assert cert["certified"] is False
    u = cert["uncertified"][0]
    assert (u["layer"], u["head"]) == ("attn 2", 0) and u["witness"]["query"]["tokens"] == 0
    # q1 a0 q0 a1 q0 (in the domain): the answer is a1; the key after q1 now matches q0 too
    x = [1, 3, 0, 4, 0]
    assert ICQA.in_domain(P3, np.array([x]))[0]
    assert model.run(np.array([x]))[0, -1] == 4
    assert bad.run(np.array([x]))[0, -1] != 4


def test_the_cert_column_says_dom_for_a_domain_certificate(icqa_relu):
    from depthcraft.verify.cli.render import certificate_cell
    cert = certify(icqa_relu, domain=ICQA.domain(P3), precondition=ICQA.domain_precondition(P3))
    assert certificate_cell(cert).plain == "dom"
    softmax = lookup.build("icqa_copy_match", **P3)
    assert certificate_cell(certify(softmax, domain=ICQA.domain(P3),
                                     precondition=ICQA.domain_precondition(P3))).plain == "yes"
