"""Adversarial review of the certifier (issue 30): models it must refuse, inputs it must not crash on.

Each case is a compiled model whose weights were perturbed (one entry scaled) or a program
near a limit. The certificate must never say ``certified: true`` where the exhaustive check
(every input up to N against tracr's ``rasp.evaluate``) finds a wrong output, and it must
refuse with an ``uncertified`` entry, never a traceback.
"""

import dataclasses
import itertools

import numpy as np
import pytest
from tracr.rasp import rasp

from depthcraft.constructions.compiler import compile_program
from depthcraft.verify.certify import certify


def scaled(model, layer, key, index, factor):
    """The model with one weight entry ``params["layers"][layer][key][index]`` scaled by ``factor``."""
    layers = [dict(p) for p in model.params["layers"]]
    a = np.array(layers[layer][key], copy=True)
    a[index] = a[index] * np.float32(factor)
    layers[layer][key] = a
    return dataclasses.replace(model, params=dict(model.params, layers=layers))


def first_wrong(model, program, vocab, n, atol=1e-3):
    """The first input (length 1..n) and position where the model's output differs from the program's."""
    for length in range(1, n + 1):
        xs = np.array(list(itertools.product(vocab, repeat=length)))
        for x, got in zip(xs, model.run(xs)):
            for i, (w, g) in enumerate(zip(rasp.evaluate(program, list(x)), got)):
                if (w is None) != (g is None):
                    return list(x), i
                if w is None:
                    continue
                if model.categorical_output and w != g or not model.categorical_output and abs(w - g) > atol:
                    return list(x), i
    return None


def width_leq():
    """Categorical SelectorWidth: how many tokens are <= this one."""
    return rasp.categorical(rasp.SelectorWidth(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.LEQ)))


def test_an_output_mlp_writing_two_values_is_refused_not_a_traceback():
    """The SelectorWidth MLP with one hidden weight zeroed writes a vector with two entries >= 1/2
    for width 1 (hidden unit 5 no longer switches off value 2): the read-out check met a vector
    with no single value and raised ``_Ambiguous`` out of :func:`certify`."""
    program = width_leq()
    model = scaled(compile_program(program, vocab=[0, 1, 2], max_seq_len=4, causal=False), 1, "w_1", (1, 5), 0.0)
    # the definition: [0] has width 1 (one token <= 0); the model reads out 2
    assert rasp.evaluate(program, [0]) == [1]
    assert model.run(np.array([[0]]))[0, 0] == 2
    cert = certify(model)
    assert cert["certified"] is False
    assert any(u["layer"] == "read-out" or u["check"] == "program" for u in cert["uncertified"])
