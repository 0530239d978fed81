"""retrieval_tripling: segments of the chain triple per layer (SPEC §4.3, §5; issue 13 part 1).

Expected values come from the task's definition (its numpy reference, ``follow``) and from
the formulas written out here independently of the code under test.
"""

import math

import numpy as np
import pytest

from depthcraft.constructions.reference import Evaluator, evaluate, score_table
from depthcraft.constructions.nodes import HeadRead
from depthcraft.rasp_programs.retrieval import (lower_bound_layers, num_symbols, retrieval_layers, retrieval_tripling,
                                                tripling_layers)
from depthcraft.verify import lookup
from depthcraft.verify.structure import measure
from depthcraft.verify.tasks import get_task
from depthcraft.verify.tasks.retrieval import follow, layout, query_token
from depthcraft.verify.verifier import run_checks

TASK = get_task("retrieval")


def _p(d, c=2, symbols=0):
    return TASK.resolve({"d": d, "distractors": c, "symbols": symbols})


def _model(d, c=2, symbols=0):
    return lookup.resolve("retrieval_tripling", {"d": d, "distractors": c, "symbols": symbols}).build()


def _expected_layers(d):
    """The least L with (3^L - 1) / 2 >= 2D, by brute force over L."""
    return next(L for L in range(1, 20) if (3 ** L - 1) // 2 >= 2 * d)


def test_layer_formula_and_c():
    for d in range(1, 400):
        L = tripling_layers(d)
        assert L == _expected_layers(d) == math.ceil(math.log(4 * d + 1, 3) - 1e-12)
        assert 3 ** L >= 4 * d + 1 > 3 ** (L - 1)
        assert L >= lower_bound_layers(d)  # the lower bound must hold for any correct construction
        assert L - lower_bound_layers(d) in (0, 1)
        assert L <= retrieval_layers(d)  # never deeper than pointer doubling
    zero = [d for d in range(1, 65) if tripling_layers(d) == lower_bound_layers(d)]
    assert zero == [2, 5, 6] + list(range(14, 21)) + list(range(41, 61))
    assert [tripling_layers(d) for d in (1, 2, 3, 6, 7, 20, 21, 60, 61, 64)] == [2, 2, 3, 3, 4, 4, 5, 5, 6, 6]


def _heads(prog):
    seen, stack = {}, [prog]
    while stack:
        e = stack.pop()
        if isinstance(e, HeadRead):
            seen.setdefault(e.head.label, e.head)
        stack.extend(getattr(e, "children", []))
    return list(seen.values())


@pytest.mark.parametrize("d", [1, 2, 3, 4, 7, 14])
def test_program_semantics_exact_with_a_unit_gap(d):
    """The RASP program (hardmax semantics) answers x_0, and every head's best key wins by >= 1 unit."""
    rng = np.random.default_rng(d)
    p = _p(d, c=1)
    prog = retrieval_tripling(d)
    heads = _heads(prog)
    assert len(heads) == 2 * tripling_layers(d) - 1
    for x in np.concatenate([TASK.sample(p, rng, 3)] + [g for g in TASK.edge_cases(p) if g.shape[1] ==
                                                          TASK.max_seq_len(p)]):
        xs = x.tolist()
        ev = Evaluator()
        assert ev.evaluate(prog, xs)[-1] == TASK.reference(p, x[None])[0][0, -1]
        for h in heads:
            for row in score_table(h, ev, xs):
                top, second = sorted(row)[-2:][::-1]
                assert top - second >= 1.0


@pytest.mark.parametrize("d", [1, 3, 7])
def test_structure_heads_per_layer_and_the_one_mlp(d):
    s = measure(_model(d))
    assert s["attn_layers"] == tripling_layers(d) >= lower_bound_layers(d)
    assert s["heads"] == 2 and s["mlp_layers"] == 1
    attn = [layer["heads"] for layer in s["per_layer"] if layer["kind"] == "attn"]
    assert attn == [2] * (tripling_layers(d) - 1) + [1]
    assert [layer["kind"] for layer in s["per_layer"]][:2] == ["attn", "mlp"]  # the MLP sits after layer 1


def _run(model, x):
    return model.run(np.asarray(x), none_value=-1)[:, -1]


@pytest.mark.parametrize("d, c", [(1, 0), (1, 3), (2, 2), (4, 2), (6, 1)])
def test_compiled_exact_on_random_and_edge_inputs(d, c):
    model = _model(d, c)
    p = _p(d, c)
    rng = np.random.default_rng(100 * d + c)
    groups = [TASK.sample(p, rng, 64)] + TASK.edge_cases(p)
    for x in groups:
        assert (_run(model, x) == TASK.reference(p, x)[0][:, -1]).all()


def _inputs(d, c, order, marker):
    """Chains over symbols 0..: chain j holds the next D+1 symbols; ``order`` of the facts; ``marker`` = ``?``."""
    chains = np.arange((c + 1) * (d + 1)).reshape(1, c + 1, d + 1)
    return layout(chains, np.asarray(order)[None], marker)


@pytest.mark.parametrize("d", [3, 7])
def test_end_cases(d):
    """The queried chain's first / last fact first or last in the input, distractors around it, no distractors."""
    c = 2
    model = _model(d, c)
    p = _p(d, c)
    f = (c + 1) * d
    chain0 = list(range(d))  # fact h-1 is (x_h, x_{h-1}); fact d-1 is the query's
    others = list(range(d, f))
    orders = [chain0 + others, others + chain0, chain0[::-1] + others, others + chain0[::-1],
              [d - 1] + others + chain0[:-1],  # the query's fact first, the answer's fact last
              others[:d] + [0] + others[d:] + chain0[1:],  # the answer's fact inside the distractors
              list(range(f))[::-1]]
    for order in orders:
        x = _inputs(d, c, order, query_token(p))
        expected = TASK.reference(p, x)[0][0, -1]
        assert expected == 0  # x_0 is symbol 0 of chain 0
        assert _run(model, x)[0] == expected
    # No distractors, in a model built for two: a shorter input over the same positions.
    x = _inputs(d, 0, list(range(d))[::-1], query_token(p))
    assert _run(model, x)[0] == 0 == TASK.reference(p, x)[0][0, -1]


def test_distractor_chains_with_the_queried_chain_reversed_in_symbols():
    """Symbols run downwards along the chain and distractors hold the symbols around the answer."""
    d, c = 5, 3
    model = _model(d, c, symbols=40)
    p = _p(d, c, symbols=40)
    rng = np.random.default_rng(7)
    for _ in range(20):
        syms = rng.permutation(40)[:(c + 1) * (d + 1)].reshape(1, c + 1, d + 1)
        x = layout(syms, rng.permutation((c + 1) * d)[None], query_token(p))
        assert _run(model, x)[0] == syms[0, 0, 0] == TASK.reference(p, x)[0][0, -1]


@pytest.mark.parametrize("d, c, symbols", [(1, 1, 4), (2, 0, 4),
                                            pytest.param(2, 1, 6, marks=pytest.mark.slow)])
def test_exhaustive_small(d, c, symbols):
    p = {"d": d, "distractors": c, "symbols": symbols}
    model = lookup.resolve("retrieval_tripling", p).build()
    checks = run_checks(model, TASK, _p(d, c, symbols), samples=0, exhaustive=True, hypothesis_examples=20)
    m = (c + 1) * (d + 1)
    assert checks["exhaustive"].inputs == math.perm(symbols, m) * math.factorial((c + 1) * d)
    assert checks["exhaustive"].exact and checks["edge"].exact and checks["hypothesis"].exact


def test_hops_other_than_d_are_refused():
    from depthcraft.constructions.errors import ParameterError

    with pytest.raises(ParameterError, match="retrieval_tripling answers the full chain only"):
        lookup.resolve("retrieval_tripling", {"d": 3, "hops": 2})


def test_registered_bounds():
    r = lookup.resolve("retrieval_tripling", {"d": 7})
    assert r.bound()["attn_layers"] == lower_bound_layers(7) == 3
    assert r.bound()["heads"] == 2
    assert r.construction.bound_kinds() == {"attn_layers": "lower", "heads": "upper"}


def test_program_on_the_doubling_example():
    """The hand example of tests/test_retrieval.py: a -> b -> c with a distractor x -> y -> z."""
    A, B, C, X, Y, Z, Q = range(7)
    assert evaluate(retrieval_tripling(2), [Y, Z, A, B, X, Y, B, C, Q, A])[-1] == C
    assert evaluate(retrieval_tripling(2), [Y, Z, A, B, X, Y, B, C, Q, X])[-1] == Z


@pytest.mark.slow
@pytest.mark.parametrize("d", [13, 14, 20, 21])
def test_compiled_exact_at_layer_boundaries(d):
    model = _model(d, 2)
    p = _p(d, 2)
    rng = np.random.default_rng(d)
    for x in [TASK.sample(p, rng, 32)] + TASK.edge_cases(p):
        assert (_run(model, x) == TASK.reference(p, x)[0][:, -1]).all()


# ------------------------------------------------------------------ the declared input domain (issue 30 item 5)

def test_domain_holds_on_every_task_input_and_fails_off_it():
    """The predicate accepts everything the task generates and rejects each way out of the domain."""
    p = _p(1, c=1)
    total, gen = TASK.exhaustive(p)
    assert total == 48 and all(TASK.in_domain(p, g).all() for g in gen)
    for d, c in ((2, 1), (5, 2)):
        p = _p(d, c)
        assert TASK.in_domain(p, TASK.sample(p, np.random.default_rng(d), 50)).all()
        assert all(TASK.in_domain(p, g).all() for g in TASK.edge_cases(p))
    p = _p(2, c=1)
    m = query_token(p)
    outside = np.array([
        [4, 0, 2, 3, 5, 4, 1, 3, m, 1],  # 3 is the value of two facts
        [4, 0, 2, 3, 5, 4, 0, 1, m, 1],  # 1 is a fact's value and the queried symbol
        [4, 0, 0, 4, 1, 3, 3, 2, m, 1],  # 4 -> 0 -> 4: a cycle
        [0, 1, 2, 3, 3, 4, 4, 5, m, 0],  # the queried chain has 1 fact, not 2
        [4, 0, 4, 3, 5, 4, 1, 3, m, 1],  # two facts with the key 4 (malformed)
    ])
    assert not TASK.in_domain(p, outside).any()
    assert TASK.in_domain(p, np.array([[4, 0, 2, 3, 5, 4, 1, 2, m, 1]])).all()


def test_certificate_names_the_domain_and_claims_nothing_outside_it():
    """A symbol repeated (outside the domain): the model answers wrong there, and the certificate
    does not cover it (it names the domain, does not use it, and certifies nothing)."""
    from depthcraft.verify.certify import certify

    p = _p(2, c=1)
    model = _model(2, c=1)
    x = np.array([[4, 0, 2, 3, 5, 4, 1, 3, query_token(p), 1]])  # 1 -> 3, and 3 is the value of two facts
    assert not TASK.in_domain(p, x).any()
    expected = follow(x, 2, num_symbols(p))[0, -1]  # the task's definition: 1 -> 3 -> no fact
    assert expected == TASK.reference(p, x)[0][0, -1] == -1
    assert model.run(x, none_value=TASK.none_value)[0, -1] != expected  # the weights are wrong here
    cert = certify(model, domain=TASK.domain(p))
    assert cert["domain"] == {"predicate": TASK.domain(p), "used_as_precondition": False, "uses": []}
    assert not cert["certified"] and "nothing is certified on the domain either" in cert["scope"]
    assert "RASP program's output" not in cert["scope"]
    assert "domain" not in certify(model)  # no domain given: no domain key
