"""Declared input domains as a precondition of the certificate (issue 30, item 5).

``retrieval``'s constructions are exact only on the task's inputs (facts with distinct symbols).
The task states facts its domain implies (:meth:`RetrievalTask.domain_precondition`: even
lengths; within each parity class distinct positions hold distinct tokens); the certifier uses
them where a head needs them, says so (``domain.uses``), and then scopes the certificate to
"every input in the domain ...", never every input.

The test model is retrieval_tripling's first-layer left head (its output FL1, a hand-built
``scored_lookup``): a key slot reads the value slot that holds its own symbol. It is exact on
the domain, certified with the precondition, not certified without it, and really wrong on an
input outside the domain (a symbol three times).
"""

import dataclasses
import itertools
import re

import numpy as np
import pytest

from depthcraft.constructions.compiler import compile_program
from depthcraft.constructions.reference import Evaluator
from depthcraft.rasp_programs.retrieval import BOT, tripling_first_layer
from depthcraft.verify import lookup
from depthcraft.verify.certify import certify
from depthcraft.verify.certify.domain import Precondition
from depthcraft.verify.tasks import get_task

TASK = get_task("retrieval")
SMALL = {"d": 1, "distractors": 1, "symbols": 0, "hops": 0}  # n = 6, symbols 0..3, ? = 4


def tables_pre(p):
    """The domain's precondition without its symmetry: these tests are about the tables route's use of
    the facts (the symmetry route is tested in test_certify_symmetry.py)."""
    return dataclasses.replace(TASK.domain_precondition(p), symmetry=None)
QUERY = 4


def left_head():
    """FL1 (retrieval_tripling, layer 1, left head): at a key slot whose symbol is a value, the value
    slot's position minus 1; at a value slot, the position of its key slot minus 1."""
    return tripling_first_layer()[3]


@pytest.fixture(scope="module")
def small():
    prog = left_head()
    model = compile_program(prog, vocab=TASK.vocab(SMALL), max_seq_len=TASK.max_seq_len(SMALL), causal=False)
    return prog, model


def all_inputs(n_max, vocab):
    for n in range(1, n_max + 1):
        for x in itertools.product(vocab, repeat=n):
            yield list(x)


def test_the_domain_implies_the_precondition_on_every_input():
    """Exhaustive at d = 1, c = 1: every input the domain accepts satisfies the precondition's facts."""
    pre = TASK.domain_precondition(SMALL)
    assert pre.lengths == frozenset({2, 4, 6}) and pre.classes == (0, 1, 0, 1, 0, 1, 0)
    inside = 0
    for n in (2, 4, 6):
        xs = np.array(list(itertools.product(TASK.vocab(SMALL), repeat=n)))
        ok = TASK.in_domain(SMALL, xs)
        inside += int(ok.sum())
        for x in xs[ok]:
            assert pre.holds(list(x)), x
    assert inside > 0
    # and on sampled inputs of a larger instance
    p = {"d": 4, "distractors": 2, "symbols": 0, "hops": 0}
    pre = TASK.domain_precondition(p)
    xs = TASK.sample(p, np.random.default_rng(0), 200)
    assert TASK.in_domain(p, xs).all()
    assert all(pre.holds(list(x)) for x in xs)


def test_precondition_facts_by_definition():
    pre = Precondition("test", frozenset({2, 4}), (0, 1, 0, 1, 0))
    assert pre.holds([0, 1]) and pre.holds([0, 1, 1, 0])
    assert not pre.holds([0, 1, 0])  # odd length
    assert not pre.holds([0, 1, 0, 2])  # token 0 twice at odd positions (1 and 3)
    assert list(pre.reach(4)) == [2, 2, 2, 4, 4]  # least domain length >= i
    assert list(Precondition("x", frozenset({3})).reach(4)) == [3, 3, 3, 3, 4]


def test_certified_on_the_domain_and_scoped_to_it(small):
    _, model = small
    cert = certify(model, domain=TASK.domain(SMALL), precondition=tables_pre(SMALL))
    assert cert["certified"] is True and cert["float32_matches_hardmax"] is True, cert["uncertified"]
    assert cert["domain"]["used_as_precondition"] is True
    assert {"layer": "attn 1", "head": 0, "fact": "classes"} in cert["domain"]["uses"]
    assert cert["scope"].startswith(f"every input in the domain ({TASK.domain(SMALL)}) of length 1..6")
    assert "inputs outside the domain are not covered" in cert["scope"]
    assert "every input of length" not in cert["scope"]


def test_without_the_precondition_it_is_not_certified(small):
    _, model = small
    for cert in (certify(model), certify(model, domain=TASK.domain(SMALL))):
        assert cert["certified"] is False and cert["float32_matches_hardmax"] is False
        u = cert["uncertified"][0]
        assert (u["layer"], u["head"], u["check"]) == ("attn 1", 0, "float32")
        assert "several positions" in u["why"]
        assert cert["scope"].startswith("every input of length 1..6")
    assert cert["domain"] == {"predicate": TASK.domain(SMALL), "used_as_precondition": False, "uses": []}
    assert "nothing is certified on the domain either" in cert["scope"]


def test_an_input_outside_the_domain_decodes_wrong(small):
    """Facts (0, 1), (2, 0), ``?``, query 0: the symbol 0 three times (a key, a value and the query).

    By the head's definition (highest score, the latest on a tie) the key slot at position 1
    (symbol 0) attends to the latest value slot holding 0: both position 4 and position 6
    score 3 (a value slot with its symbol), so position 6, and FL1 = 6 - 1 = 5. The weights
    average positions 4 and 6 and do not answer 5."""
    prog, model = small
    x = [0, 1, 2, 0, QUERY, 0]
    assert not TASK.in_domain(SMALL, np.array([x]))[0]
    assert not TASK.domain_precondition(SMALL).holds(x)
    assert Evaluator().evaluate(prog, x)[0] == 5
    assert model.run(np.array([x]))[0, 0] != 5


def test_the_certificate_agrees_with_every_domain_input(small):
    """On every input of the domain (d = 1, c = 1, length <= 6) the model equals the program.

    The domain has 12 inputs of length 4 (a fact (k, v), k != v, asked at k) and 48 of length 6
    (the asked fact's key, value and the other key distinct: 4 x 3 x 2, the other value the
    fourth symbol; the asked fact first or second)."""
    prog, model = small
    checked = 0
    for n in (2, 4, 6):
        xs = np.array(list(itertools.product(TASK.vocab(SMALL), repeat=n)))
        xs = xs[TASK.in_domain(SMALL, xs)]
        if not len(xs):  # length 2 is "? x": no fact, so no chain of d = 1 facts
            continue
        got = model.run(xs)
        for x, g in zip(xs, got):
            assert list(g) == Evaluator().evaluate(prog, list(x)), x  # one evaluator per input
            checked += 1
    assert checked == 12 + 48


def _scale_bos_key(model, factor):
    """The model with the key side's BOS row (``tokens:BOS``) scaled by ``factor`` in W_K."""
    labels = list(model.residual_labels)
    layers = [dict(p) for p in model.params["layers"]]
    k_rows = list(model.arch.sublayers[0].rows("k_rows", len(labels)))
    wk = np.array(layers[0]["w_k"])
    wk[:, k_rows.index(labels.index("tokens:BOS"))] *= np.float32(factor)
    layers[0]["w_k"] = wk
    return dataclasses.replace(model, params=dict(model.params, layers=layers))


def test_a_wrong_scored_head_is_not_certified_on_the_domain():
    """Must fail: the left head reading the attended slot's token (LT1), with BOS scoring 2.5 units
    instead of 1. Every level that can be the top still holds one key of a domain input (the
    float32 part holds), but BOS now outscores the key slot itself (2 units), which the terms'
    sum ranks above BOS: the program check names the head, and a domain input shows the error."""
    prog = tripling_first_layer()[2].fst  # LT1: the token of the slot the left head attends to
    model = compile_program(prog, vocab=TASK.vocab(SMALL), max_seq_len=TASK.max_seq_len(SMALL), causal=False)
    good = certify(model, domain=TASK.domain(SMALL), precondition=tables_pre(SMALL))
    assert good["certified"] is True, good["uncertified"]
    bad = _scale_bos_key(model, 2.5)
    cert = certify(bad, domain=TASK.domain(SMALL), precondition=tables_pre(SMALL))
    assert cert["certified"] is False and cert["float32_matches_hardmax"] is True
    u = cert["uncertified"][0]
    assert (u["layer"], u["head"], u["check"]) == ("attn 1", 0, "program") and "scored_lookup" in u["why"]
    assert "BOS" in (u["witness"]["key"]["position"], u["witness"]["other_key"]["position"])
    # facts (1, 2), (0, 3), ?, 1: the key slot 3 holds 0, which no value slot holds, so by the
    # definition it attends to itself (its own symbol: 2 units, BOS 1) and reads its token 0;
    # the wrong weights attend to BOS there, which holds no token
    x = [1, 2, 0, 3, QUERY, 1]
    assert TASK.in_domain(SMALL, np.array([x]))[0]
    assert Evaluator().evaluate(prog, x)[2] == 0
    assert model.run(np.array([x]))[0, 2] == 0
    assert bad.run(np.array([x]))[0, 2] != 0


def test_retrieval_tripling_layer_one_is_proved_on_the_domain_only():
    """retrieval_tripling d = 2 (c = 2): with the precondition both first-layer heads and the MLP are
    proved (their program tables included); the analysis stops at attn 2 (the attended links of
    :mod:`depthcraft.verify.certify.links` spend their work budget before every level is cleared;
    with no budget all clear and the leak bound, taken over every key combination the block-wise
    state allows, stops it: docs/tripling_certification.md). Without the precondition, attn 1 is
    not certified."""
    p = {"d": 2, "distractors": 2, "symbols": 0, "hops": 0}
    model = lookup.resolve("retrieval_tripling", p).build()
    cert = certify(model, domain=TASK.domain(p), precondition=tables_pre(p))
    assert cert["certified"] is False
    proved = [(e["layer"], e["head"]) for e in cert["per_layer"]]
    assert proved == [("attn 1", 0), ("attn 1", 1), ("MLP 1", None)]
    assert [(u["layer"], u["head"], u["check"]) for u in cert["uncertified"]] == [("attn 2", 0, "float32")]
    uses = {(e["layer"], e["head"], e["fact"]) for e in cert["domain"]["uses"]}
    assert {("attn 1", 0, "lengths"), ("attn 1", 0, "classes"), ("attn 1", 1, "classes")} <= uses
    assert cert["scope"].startswith("every input in the domain (")
    plain = certify(model, domain=TASK.domain(p))
    assert (plain["uncertified"][0]["layer"], plain["uncertified"][0]["head"]) == ("attn 1", 0)
    assert plain["per_layer"] == []
    # outside the domain the weights are wrong: 3 is the value of two facts; ? 1 asks for 1 -> 3 -> ⊥
    facts = [4, 0, 2, 3, 5, 4, 1, 3]
    x = facts + [TASK.vocab(p)[-1], 1]
    assert not TASK.in_domain(p, np.array([x]))[0]
    assert TASK.reference(p, np.array([x]))[0][0, -1] == BOT
    assert model.run(np.array([x]), none_value=BOT)[0, -1] == 3


@pytest.mark.parametrize("case", ["khop_doubling", "fl1", "tripling"])
def test_keys_grouped_by_score_give_the_same_certificate(case, monkeypatch, small):
    """Item 7: with every head forced onto the grouped-key path (MAX_TABLE = 0: keys grouped per batch
    of query rows by the scores those rows give them), the certificate is the same: certified or
    not, the same failing head, the same smallest gaps, and leak bounds within a factor of two."""
    from depthcraft.verify.certify import heads
    if case == "khop_doubling":
        model, pre = lookup.resolve("khop_doubling", dict(k=4, n=16, vocab=4)).build(), None
    elif case == "fl1":
        model, pre = small[1], tables_pre(SMALL)
    else:
        p = {"d": 2, "distractors": 2, "symbols": 0, "hops": 0}
        model, pre = lookup.resolve("retrieval_tripling", p).build(), tables_pre(p)
    plain = certify(model, precondition=pre)
    monkeypatch.setattr(heads, "MAX_TABLE", 0)
    grouped = certify(model, precondition=pre)
    assert grouped["certified"] == plain["certified"]
    assert grouped["float32_matches_hardmax"] == plain["float32_matches_hardmax"]
    # the same failure; a leak failure's sentence carries delta, which grouping rounds differently
    def why(u):
        return re.sub(r"[0-9][0-9.e+-]*", "#", u["why"])
    assert [(u["layer"], u["head"], u["check"], why(u)) for u in grouped["uncertified"]] == \
        [(u["layer"], u["head"], u["check"], why(u)) for u in plain["uncertified"]]
    assert len(grouped["per_layer"]) == len(plain["per_layer"]) > 0
    for a, b in zip(plain["per_layer"], grouped["per_layer"]):
        assert a["min_gap"] == b["min_gap"]
        if a["leak_bound"]:
            assert a["leak_bound"] / 2 <= b["leak_bound"] <= 2 * a["leak_bound"]
    assert plain["certified"] is (case != "tripling")
