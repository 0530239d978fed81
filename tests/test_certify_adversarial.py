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


def test_the_lengths_fact_does_not_reach_keys_a_causal_mask_hides():
    """Causal model, query side reading no position (tokens), key side reading indices, domain
    lengths {4}. A query at position i of a length-4 input sees only positions 0..i; the floor
    took the lowest alternative of positions up to L(i) = 4 as reached, although position 4 is
    hidden from it. Weights: key index 3 scores twice the selected key 0; BOS and key 1 score
    just below it. The analysis then saw the top at position 4 with a wide gap and claimed
    ``float32_matches_hardmax`` on the domain; at query position 2 the softmax splits 1/3 each
    over BOS, positions 1 and 2, so the float32 output decodes to no value, while the hardmax of
    the same weights attends to position 1 only and reads its token."""
    from depthcraft.verify.certify.domain import Precondition
    program = rasp.categorical(rasp.Aggregate(rasp.Select(rasp.indices, rasp.tokens, lambda k, q: k == 0),
                                              rasp.tokens))
    model = compile_program(program, vocab=[0, 1, 2], max_seq_len=4, causal=True)
    layers = [dict(p) for p in model.params["layers"]]
    wk = np.array(layers[0]["w_k"], copy=True)  # k rows: indices:0..3, tokens:BOS
    wk[0, 3] = wk[0, 0] * 2
    wk[0, 4] = wk[0, 0] * np.float32(0.9999)
    wk[0, 1] = wk[0, 0] * np.float32(0.9999)
    layers[0]["w_k"] = wk
    model = dataclasses.replace(model, params=dict(model.params, layers=layers))
    x = [1, 2, 0, 0]
    stream = model.residual_stream(x)
    scores = stream.scores[0][0][2, :3]  # query position 2: BOS, positions 1, 2 (3, 4 are masked)
    assert int(np.argmax(scores)) == 1 and scores[1] > max(scores[0], scores[2])  # hardmax: position 1
    assert rasp.evaluate(program, x)[1] == 1  # ... whose token the program reads too
    assert model.run(np.array([x]), none_value=-1)[0, 1] == -1  # float32: no value
    cert = certify(model, precondition=Precondition("length 4", frozenset({4})))
    assert cert["certified"] is False
    assert cert["float32_matches_hardmax"] is False


def _connectivity():
    from depthcraft.constructions.catalogue.connectivity import build
    return build({"n": 4, "max_edges": 0, "sampler": "mix"})


@pytest.mark.parametrize("key,index", [("w_v", (0, 1, 1)), ("w_o", (0, 0, 0))], ids=["w_v", "w_o"])
def test_a_union_head_that_drops_an_element_is_not_certified(key, index):
    """``graph_connectivity`` (n = 4): attn 2 is a union head whose value reads a set and
    writes each element to its scratch. With one diagonal entry of W_V (element 1) or of
    W_O (element 0) zeroed, the OV circuit no longer writes that element. The program check
    compared only the set rows the value reads with a non-zero weight, so the dropped element
    was never compared and the model was certified, although it is wrong: the program's output
    at position 2 of [1, 1] is 1 (reference semantics), the model's 0 (w_v); at position 6 of
    [7, 10, 11, 10, 0, 0] 1 and 0 (w_o)."""
    from depthcraft.constructions.reference import evaluate
    base = _connectivity()
    model = scaled(base, 2, key, index, 0.0)
    x = [1, 1] if key == "w_v" else [7, 10, 11, 10, 0, 0]
    want = evaluate(base.program.nodes[base.program.sink], x)
    assert want[-1] == 1 and base.run([x], -1)[0, -1] == 1
    assert model.run([x], -1)[0, -1] == 0
    cert = certify(model)
    assert cert["certified"] is False
    u = cert["uncertified"][0]
    assert (u["layer"], u["head"], u["check"]) == ("attn 2", 0, "program")


def _wrong_and_refused(base, model, x):
    """The base model is right on x and ``model`` wrong (against the RASP program); ``model`` is not
    certified. Returns its first uncertified entry."""
    from depthcraft.constructions.reference import evaluate
    want = evaluate(base.program.nodes[base.program.sink], x)
    assert list(base.run([x], -1)[0]) == list(want)
    assert list(model.run([x], -1)[0]) != list(want)
    cert = certify(model)
    assert cert["certified"] is False
    return cert["uncertified"][0]


def test_a_threshold_mlp_that_ignores_its_scratch_is_not_certified():
    """``graph_connectivity`` (n = 4): MLP 1 thresholds the union's scratch scratch (R1_k_sum) into the
    set R1_k, element by element. With the W_1 row of scratch element 0 zeroed, output element 0
    reads no set coordinate: it is a constant 0. The program check accepted a constant 0 for an
    output that reads no scratch ("off"), although the program writes element 0 whenever the
    scratch of 0 is on; the model was certified and is wrong on [0, 0]."""
    base = _connectivity()
    sp = base.arch.sublayers[1]
    assert base.residual_labels[sp.in_rows[0]].endswith("_sum:0")  # the scratch of element 0 (label ids vary)
    layers = [dict(p) for p in base.params["layers"]]
    w1 = np.array(layers[1]["w_1"], copy=True)
    w1[0] = 0
    layers[1]["w_1"] = w1
    model = dataclasses.replace(base, params=dict(base.params, layers=layers))
    u = _wrong_and_refused(base, model, [0, 0])
    assert (u["layer"], u["check"]) == ("MLP 1", "program")


def test_a_set_copy_that_drops_an_element_is_not_certified():
    """``graph_connectivity`` (n = 4): attn 3 copies a set from one position (a set copy). With the
    W_V entry of element 2 zeroed it never writes element 2. The program check compared only the
    set rows read with a non-zero weight; the model was certified and is wrong on [2, 2]."""
    base = _connectivity()
    wv = np.asarray(base.params["layers"][4]["w_v"])[0]
    assert wv[2, 2] != 0
    model = scaled(base, 4, "w_v", (0, 2, 2), 0.0)
    u = _wrong_and_refused(base, model, [2, 2])
    assert (u["layer"], u["check"]) == ("attn 3", "program") and "element 2" in u["why"]
