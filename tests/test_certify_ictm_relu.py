"""ICTM with ReLU attention, certified on the task's domain through the ``patterns`` fact (issue 30).

``ictm_parse_copy_match -p attention=relu``: layer 1 parses each block (at every content
position the set of same-block offsets holding its token), layer 2 copies the n parse entries
P_1..P_n of each block to its label position (and the last content position), layer 3 matches
the query's (P_1..P_n) against every label position's and adds up the labels of all matches
(ReLU: no competition). Without a precondition the match head is not certified: two examples
with the query's template give a set of two labels. On the task's domain (example templates
pairwise distinct) at most one example label position holds a given (P_1..P_n): the domain
implies the ``patterns`` fact (distinct equality patterns of the blocks before the label
positions), and P_1..P_n at a label position are proved copies of the parse, so the key's
vector determines its block's equality pattern. The tests check the fact on domain inputs by
the definition, the certificate's claim on domain inputs, and that a weakened match head is not
certified and is wrong on a domain input.
"""

import dataclasses
import itertools

import numpy as np
import pytest
from hypothesis import given, settings

from depthcraft.constructions.reference import Evaluator
from depthcraft.rasp_programs import templates as tpl
from depthcraft.verify import lookup
from depthcraft.verify.certify import certify
from depthcraft.verify.certify.domain import Precondition, equality_pattern
from depthcraft.verify.certify.positions import possible
from depthcraft.verify.tasks import get_task

ICTM = get_task("ictm")
P = {"n": 3, "m": 2, "vocab": 4, "labels": 2}  # content 0..3, labels 4..5, lengths 7 and 11


@pytest.fixture(scope="module")
def relu_model():
    return lookup.build("ictm_parse_copy_match", attention="relu", **P)


@pytest.fixture(scope="module")
def relu_cert(relu_model):
    return certify(relu_model, domain=ICTM.domain(P), precondition=ICTM.domain_precondition(P))


def test_equality_pattern_and_the_patterns_fact_by_definition():
    assert equality_pattern([7, 8, 7]) == {(0, 2)}
    assert equality_pattern([1, 1, 1]) == {(0, 1), (0, 2), (1, 2)}
    assert equality_pattern([1, 2, 3]) == frozenset()
    groups = (None, None, None, (1, 2), None, None, (4, 5))  # positions 3 and 6 have groups
    pre = Precondition("t", frozenset({6}), patterns=groups)
    assert pre.holds([0, 1, 9, 2, 2, 9])  # "ab" then "aa": distinct patterns
    assert not pre.holds([0, 1, 9, 2, 3, 9])  # "ab" twice (other tokens): one pattern
    assert not pre.holds([0, 0, 9, 1, 1, 9])
    bad = Precondition("t", frozenset({3}), patterns=(None, None, None, (2, 3)))  # a group not before j
    assert not bad.holds([0, 1, 2])


def test_the_domain_by_definition_and_its_precondition():
    """Every input of a tiny instance (n = 2, m = 2, V = 2, C = 1): the domain counted from the
    definition, every domain input satisfies the precondition, and one that repeats a template
    does not."""
    p = {"n": 2, "m": 2, "vocab": 2, "labels": 1}  # templates "aa", "ab"; label token 2
    pre = ICTM.domain_precondition(p)
    assert pre.lengths == frozenset({5, 8})
    assert pre.patterns == (None, None, None, (1, 2), None, None, (4, 5), None, None)
    assert pre.classes is None and pre.slots is None and pre.scored is None
    inside = 0
    for n in (5, 8):
        xs = np.array(list(itertools.product(range(3), repeat=n)))
        ok = ICTM.in_domain(p, xs)
        inside += int(ok.sum())
        for x in xs[ok]:
            assert pre.holds(list(x)), x
    # m' = 1: the example block (2 substitutions of each of the 2 templates) and a query block of
    # its template (2); m' = 2: two distinct templates in 2 orders, 2 x 2 blocks, the query's
    # template one of the 2, 2 query blocks
    assert inside == 2 * 2 * 2 + 2 * 4 * 2 * 2
    x = [0, 1, 2, 1, 0, 2, 1, 0]  # "ab" twice: the same template
    assert not ICTM.in_domain(p, np.array([x]))[0]
    assert not pre.holds(x)


def test_sampled_and_edge_inputs_are_in_the_domain():
    rng = np.random.default_rng(0)
    pre = ICTM.domain_precondition(P)
    for xs in [ICTM.sample(P, rng, 200)] + list(ICTM.edge_cases(P)):
        assert ICTM.in_domain(P, xs).all()
        assert all(pre.holds(list(x)) for x in xs)


@settings(max_examples=40, deadline=None)
@given(ICTM.strategy(P))
def test_hypothesis_inputs_are_in_the_domain(x):
    assert ICTM.in_domain(P, np.array([x]))[0]
    assert ICTM.domain_precondition(P).holds(x)


def test_the_dense_training_variant_declares_no_domain():
    dense = get_task("ictm_dense")
    q = dict(P, queries=2, label_draw="iid")
    assert dense.domain(q) is None and dense.domain_precondition(q) is None
    assert dense.in_domain(q, dense.sample(q, np.random.default_rng(0), 5)).all()


def test_the_relu_parse_values_by_position():
    """positions.possible of the ReLU parse (select all): the sets of same-block offsets holding the
    token, the position's own offset always among them; of its copy P_3 at a label position: the
    parse at the block's third content position."""
    program = lookup.resolve("ictm_parse_copy_match", dict(P, attention="relu")).build().program
    parse = next(nm for nm in program.nodes if nm.startswith("parse"))
    p3 = next(nm for nm in program.nodes if nm.startswith("P3"))
    assert possible(program, parse, 7, 11) == {frozenset({3}), frozenset({1, 3}), frozenset({2, 3}),
                                              frozenset({1, 2, 3})}  # offset 3 of block 2
    assert possible(program, parse, 5, 11) == {frozenset({1})}
    assert possible(program, parse, 4, 11) == {frozenset()}  # a label position: no candidate
    assert possible(program, p3, 8, 11) == possible(program, parse, 7, 11)


def test_relu_is_certified_on_the_domain_at_every_position(relu_model, relu_cert):
    cert = relu_cert
    assert cert["certified"] is True, cert["uncertified"]
    assert cert["domain"]["used_as_precondition"] is True
    assert cert["domain"]["uses"] == [{"layer": "attn 3", "head": 0, "fact": "patterns"}]
    assert "every input in the domain (ictm inputs" in cert["scope"]
    assert "every position 1..n" in cert["scope"]
    assert "inputs outside the domain are not covered" in cert["scope"]


def _domain_inputs(p, label_rows):
    """Every domain input with m' = 1 and m' = 2 examples (all blocks of every template pair, every
    query block of a template in context), with the given label rows; as a list of arrays."""
    n, v = p["n"], p["vocab"]
    blocks = np.array(list(itertools.product(range(v), repeat=n)))
    codes = tpl.pattern_codes(tpl.canonical_pattern(blocks))
    out = []
    for a in range(len(blocks)):
        same = blocks[codes == codes[a]]
        for lab in {r[0] for r in label_rows}:
            ex = np.repeat(blocks[a][None, None], len(same), 0)
            out.append(ICTM.build(ex, np.full((len(same), 1), lab), same))
    for a, b in itertools.product(range(len(blocks)), repeat=2):
        if codes[a] == codes[b]:
            continue
        q = blocks[(codes == codes[a]) | (codes == codes[b])]
        for lab in label_rows:
            ex = np.repeat(np.stack([blocks[a], blocks[b]])[None], len(q), 0)
            out.append(ICTM.build(ex, np.tile(np.array(lab)[None], (len(q), 1)), q))
    return out


def test_the_claim_on_every_domain_input_of_the_instance(relu_model):
    """At the last position: the model's output is the task's answer on every domain input with
    m' = 1 and 2 and every content (labels 4 then 5); at every position, on a sample, it is the one value
    of the program's set (the program's set has at most one value on the domain)."""
    model = relu_model
    parts = _domain_inputs(P, [(4, 5)])
    xs = [np.concatenate([x for x in parts if x.shape[1] == length]) for length in (7, 11)]
    total = 0
    for x in xs:
        for a in range(0, len(x), 1 << 14):
            chunk = x[a:a + (1 << 14)]
            assert (model.run(chunk)[:, -1] == ICTM.answer(P, chunk)).all()
        total += len(x)
    # m' = 1: each of the 64 blocks, the s_t blocks of its template t as the query; m' = 2: each
    # ordered pair of blocks of distinct templates t, u, the s_t + s_u blocks of either as the
    # query. Blocks per template: aaa 4; aab, aba, abb 12 each; abc 24 (4^3 = 64).
    per = [4, 12, 12, 12, 24]
    ones = sum(s * s for s in per)
    twos = sum(s * t * (s + t) for i, s in enumerate(per) for j, t in enumerate(per) if i != j)
    assert total == ones + twos
    prog = model.program.nodes[model.program.sink]
    rng = np.random.default_rng(1)
    every = np.concatenate([x for x in xs if x.shape[1] == 11])
    for x in every[rng.choice(len(every), 300, replace=False)]:
        want = Evaluator().evaluate(prog, list(x))
        got = model.run(x[None])[0]
        for i, w in enumerate(want):
            assert w is None or len(w) <= 1
            assert (got[i] is None) if not w else got[i] == next(iter(w)), (x, i)


def test_without_the_precondition_it_is_not_certified(relu_model):
    cert = certify(relu_model)
    assert cert["certified"] is False
    u = cert["uncertified"][0]
    assert (u["layer"], u["head"]) == ("attn 3", 0) and "several positions" in u["why"]
    assert len({k["position"] for k in u["witness"]["keys"]}) >= 2


def test_without_the_patterns_fact_it_is_not_certified(relu_model):
    pre = dataclasses.replace(ICTM.domain_precondition(P), patterns=None)
    cert = certify(relu_model, domain=ICTM.domain(P), precondition=pre)
    assert cert["certified"] is False
    assert (cert["uncertified"][0]["layer"], cert["uncertified"][0]["head"]) == ("attn 3", 0)


def test_groups_the_copies_do_not_cover_give_no_code(relu_model):
    """Groups shifted by one position (a label position's group then holds the previous label
    position and its block's first two content positions): the copies state no pair with the
    previous label position, so no key gets a pattern code and the head stays uncertified (a sound refusal; this
    shifted fact is not even implied by the domain)."""
    n = P["n"]
    base = ICTM.domain_precondition(P)
    shifted = tuple(None if g is None else tuple(a - 1 for a in g) for g in base.patterns)
    pre = dataclasses.replace(base, patterns=shifted)
    cert = certify(relu_model, domain=ICTM.domain(P), precondition=pre)
    assert cert["certified"] is False
    assert (cert["uncertified"][0]["layer"], cert["uncertified"][0]["head"]) == ("attn 3", 0)
    assert shifted[2 * (n + 1)] == (n + 1, n + 2, n + 3)


def test_an_input_outside_the_domain_really_decodes_differently(relu_model):
    """Two examples with one template ("aba"): outside the domain, the program's answer is the set of
    both labels and the read-out gives one token."""
    x = [0, 1, 0, 4, 2, 3, 2, 5, 1, 2, 1]
    assert not ICTM.in_domain(P, np.array([x]))[0]
    assert not ICTM.domain_precondition(P).holds(x)
    prog = relu_model.program.nodes[relu_model.program.sink]
    assert set(Evaluator().evaluate(prog, x)[-1]) == {4, 5}
    assert relu_model.run(np.array([x]))[0, -1] in (4, 5)


def _merge_key_rows(model, src, dst):
    """The model with the match head's (attn 3) W_K row of ``src`` made equal to that of ``dst``."""
    labels = list(model.residual_labels)
    layers = [dict(p) for p in model.params["layers"]]
    k_rows = list(model.arch.sublayers[2].rows("k_rows", len(labels)))
    wk = np.array(layers[2]["w_k"])
    wk[:, k_rows.index(labels.index(src))] = wk[:, k_rows.index(labels.index(dst))]
    layers[2]["w_k"] = wk
    return dataclasses.replace(model, params=dict(model.params, layers=layers))


def test_a_weakened_match_head_is_not_certified_even_with_the_precondition(relu_model):
    """The key's P_3 entry "offset 1" read as "offset 2": a key of template "aba" (P_3 = {1, 3})
    looks like "abb" (P_3 = {2, 3}) to the match head."""
    p3 = next(lb.split(":")[0] for lb in relu_model.residual_labels if lb.startswith("P3"))
    bad = _merge_key_rows(relu_model, f"{p3}:1", f"{p3}:2")
    cert = certify(bad, domain=ICTM.domain(P), precondition=ICTM.domain_precondition(P))
    assert cert["certified"] is False
    u = cert["uncertified"][0]
    assert (u["layer"], u["head"]) == ("attn 3", 0) and "several positions" in u["why"]
    assert len({k["position"] for k in u["witness"]["keys"]}) >= 2
    # its concrete input: the weakened model's read-out is not the program's set there
    wrong = u["witness"]["wrong_input"]
    assert wrong is not None
    prog = bad.program.nodes[bad.program.sink]
    x, pos = wrong["tokens"], wrong["positions"][0]
    want = Evaluator().evaluate(prog, x)[pos - 1]
    got = bad.run(np.array([x]))[0, pos - 1]
    assert (frozenset() if got is None else frozenset([got])) != (want or frozenset())
    # and domain inputs where it is wrong at the scored position: examples "aba" (L0 = 4) and "abb"
    # (L1 = 5); the query "cdc" (template aba) matches neither, "cdd" (abb) matches both
    for x, want in (([0, 1, 0, 4, 0, 1, 1, 5, 2, 3, 2], 4), ([0, 1, 0, 4, 0, 1, 1, 5, 2, 3, 3], 5)):
        assert ICTM.in_domain(P, np.array([x]))[0]
        assert ICTM.answer(P, np.array([x]))[0] == want
        assert relu_model.run(np.array([x]))[0, -1] == want
        assert bad.run(np.array([x]))[0, -1] != want


def test_the_softmax_construction_does_not_need_the_domain():
    model = lookup.build("ictm_parse_copy_match", **P)
    cert = certify(model, domain=ICTM.domain(P), precondition=ICTM.domain_precondition(P))
    assert cert["certified"] is True, cert["uncertified"]
    assert cert["domain"]["used_as_precondition"] is False
    assert "covers every input, those outside the domain too" in cert["scope"]
