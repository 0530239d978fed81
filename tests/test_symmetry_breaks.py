"""Soundness breaks of the symmetry route (verify/certify/symmetry.py) found by adversarial review.

Each test builds a model that ``certify_by_symmetry`` must not certify: the model is wrong, against the
RASP program (the reference evaluator), on an input of the declared orbits. The tests check the
soundness statement itself: certified implies exact on every input of the orbit.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from tracr.rasp import rasp

from depthcraft.constructions.compiler import compile_program
from depthcraft.constructions.reference import Evaluator
from depthcraft.verify.certify.symmetry import Generator, Orbit, Symmetry, certify_by_symmetry


def _orbit_of_one(rep, g):
    return Symmetry("one generator", (g,), lambda: [Orbit(tuple(rep), (0,), "one input")], "this test", lambda: 1)


def _wrong_inputs(model, sop, xs):
    out = []
    for x in xs:
        got, want = list(model.run([list(x)])[0]), list(Evaluator().evaluate(sop, list(x)))
        if got != want:
            out.append((x, got, want))
    return out


@pytest.mark.parametrize("first", [True, 1.0], ids=["bool", "float"])
def test_a_value_set_that_merges_equal_values_of_different_types_is_not_certified(first):
    """U maps token 0 to ``first`` (True or 1.0) and token 1 to the int 1: the compiler's value set of U
    holds one of them (a Python set: 1 == True == 1.0), so both tokens write the same direction, while
    D distinguishes them by type. Swapping the tokens 0 and 1: the route took U(1) = 1 for act(U(0)) =
    ``first`` (== compares equal) and checked D only on the stored value. The compiled model (not even
    perturbed) outputs 5 on the input (1,), the program 6; (1,) is the orbit of (0,)."""
    u = rasp.categorical(rasp.Map(lambda t: first if t == 0 else (1 if t == 1 else 2), rasp.tokens)).named("U")
    d = rasp.categorical(rasp.SequenceMap(lambda a, t: 5 if type(a) is type(first) else 6, u, rasp.tokens)).named("D")
    model = compile_program(d, vocab={0, 1, 2}, max_seq_len=1, causal=False)
    res = certify_by_symmetry(model, _orbit_of_one((0,), Generator(((0, 1), (1, 0)), (0, 1))), "(0,) and (1,)")
    wrong = _wrong_inputs(model, d, [(0,), (1,)])
    assert wrong == [((1,), [5], [6])]  # the model is wrong on the orbit
    assert res["certified"] is False, f"certified, but wrong on {wrong}"


def test_bool_tokens_moved_by_sigma_are_not_taken_for_fixed():
    """Vocabulary {False, True}, sigma swapping them. ``act`` fixes bools under the token action while the
    token embedding is checked against sigma, so the Map bit = int(token) was taken for *fixed* (f(a) =
    f(a)) and a model writing bit = 1 for both tokens (equivariant under the swap) passed: certified on
    (True, True), wrong on (False, False)."""
    sop = rasp.categorical(rasp.Map(lambda b: 1 if b else 0, rasp.tokens)).named("bit")
    base = compile_program(sop, vocab={True, False}, max_seq_len=2, causal=False)
    params = {**base.params, "layers": [dict(lp) for lp in base.params["layers"]]}
    params["layers"][0]["w_2"] = np.array([[0.0, 1.0], [0.0, 1.0]], np.float32)  # both units write bit:1
    model = dataclasses.replace(base, params=params)
    g = Generator(((True, False), (False, True)), (0, 1, 2))
    res = certify_by_symmetry(model, _orbit_of_one((True, True), g), "(True, True) and (False, False)")
    wrong = _wrong_inputs(model, sop, [(True, True), (False, False)])
    assert wrong == [((False, False), [1, 1], [0, 0])]
    assert res["certified"] is False, f"certified, but wrong on {wrong}"


def test_an_orbit_whose_generator_leaves_its_length_is_refused():
    """A generator of an orbit must map the representative's positions 1..n onto themselves (else g . x is
    not an input of length n): refused rather than proved."""
    sop = rasp.categorical(rasp.Map(lambda t: t, rasp.tokens)).named("same")
    model = compile_program(sop, vocab={0, 1}, max_seq_len=3, causal=False)
    g = Generator((), (0, 3, 2, 1))  # swaps positions 1 and 3; the representative has length 2
    res = certify_by_symmetry(model, _orbit_of_one((0, 1), g), "x")
    assert res["certified"] is False
