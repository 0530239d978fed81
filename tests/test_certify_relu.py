"""The certificate for ReLU attention (verify/certify/relu.py and the ReLU program check).

A ReLU head writes sum_j relu(s_j) v_j: no normalisation. The certificate proves that the
float32 forward stays within a radius of an exact sum over the keys scoring > 0, and that
each head's table is its kind's semantics (attended keys score 1, the others <= 0). Every
expected value below comes from the definition (the previous token; the set of matched
answers), not from the certifier.
"""

import dataclasses
import itertools

import jax
import jax.numpy as jnp
import numpy as np

from depthcraft.constructions.compiler import compile_program
from depthcraft.constructions.model import sublayer_names
from depthcraft.constructions.primitives import prev_token
from depthcraft.constructions.reference import Evaluator
from depthcraft.constructions.runtime import forward
from depthcraft.rasp_programs.chen_zou import ictm_parse_copy_match, icqa_copy_match
from depthcraft.verify.certify import certify
from tracr.rasp import rasp

VOCAB = [0, 1, 2]


def _prev_model(n=6):
    """prev_token(tokens) with ReLU attention: position i holds x_{i-1}, position 1 no value."""
    return compile_program(prev_token(rasp.tokens, name="prev", attention="relu"), vocab=VOCAB, max_seq_len=n,
                           causal=True, attention="relu")


def _prev_definition(tokens):
    return [None] + list(tokens[:-1])


def _all_inputs(n):
    for length in range(1, n + 1):
        yield from itertools.product(VOCAB, repeat=length)


def _relu_errors(model, ids):
    """max |float32 - float64| per sublayer over the rows it writes (float64: the same ReLU weights)."""
    real = model.forward_ids(ids, collect_residuals=True, planned=False)
    with jax.enable_x64(True):
        p64 = jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float64), model.params)
        ideal = forward(p64, jnp.asarray(ids), model.arch, dtype=jnp.float64, collect_residuals=True)
        ideal_res = [np.asarray(x, np.float64) for x in ideal.residuals]
    d = len(model.residual_labels)
    for i, (spec, name) in enumerate(zip(model.arch.sublayers, sublayer_names(model.arch))):
        rows = spec.rows("out_rows", d)
        yield name, float(np.abs(np.asarray(real.residuals[i + 1], np.float64)[..., rows]
                                 - ideal_res[i + 1][..., rows]).max())


def test_relu_prev_token_certified_and_exact_on_every_input():
    model = _prev_model(n=5)
    cert = certify(model)
    assert cert["certified"], cert["uncertified"]
    assert cert["float32_matches_hardmax"]
    # the certificate's claim, checked on every input of length 1..5 against the definition
    inputs = [list(x) for x in _all_inputs(5)]
    for length in range(1, 6):
        batch = [x for x in inputs if len(x) == length]
        got = model.run(batch)
        for x, row in zip(batch, got):
            assert list(row) == _prev_definition(x), (x, row)


def test_relu_radius_covers_the_measured_float32_error():
    model = _prev_model(n=6)
    cert = certify(model)
    assert cert["certified"]
    rng = np.random.default_rng(0)
    ids = model.encode([[int(t) for t in rng.integers(0, 3, 6)] for _ in range(64)])
    for name, err in _relu_errors(model, ids):
        radius = max(e["radius_out"] for e in cert["per_layer"] if e["layer"] == name)
        assert err <= radius, (name, err, radius)


def test_relu_radius_covers_the_measured_error_where_several_keys_add_up():
    # ictm's parse head adds every same-block position holding the token (a set of offsets)
    program = ictm_parse_copy_match(2, attention="relu")
    model = compile_program(program, vocab=range(6 + 3), max_seq_len=8, causal=True, attention="relu")
    cert = certify(model)
    rng = np.random.default_rng(1)
    ids = model.encode([[int(t) for t in rng.integers(0, 3, 8)] for _ in range(64)]
                       + [[int(t) for t in rng.integers(0, 9, 8)] for _ in range(64)])
    proved = {e["layer"] for e in cert["per_layer"]}
    assert {"attn 1", "attn 2"} <= proved
    for name, err in _relu_errors(model, ids):
        if name in proved:
            radius = max(e["radius_out"] for e in cert["per_layer"] if e["layer"] == name)
            assert err <= radius, (name, err, radius)


def _weaken(model, factor):
    """The model with its ReLU head's W_Q scaled by ``factor`` (W_QK weakened)."""
    layers = list(model.params["layers"])
    i = next(k for k, spec in enumerate(model.arch.sublayers) if spec.kind == "attn")
    layers[i] = {**layers[i], "w_q": np.asarray(layers[i]["w_q"]) * np.float32(factor)}
    return dataclasses.replace(model, params={**model.params, "layers": layers})


def test_weakened_relu_head_is_not_certified_and_its_witness_reproduces():
    model = _weaken(_prev_model(n=5), 0.45)  # the attended key scores 0.45: the read is 0.45 x one-hot
    cert = certify(model)
    assert not cert["certified"]
    bad = [u for u in cert["uncertified"] if u["layer"] == "attn 1"]
    assert bad and "weight 1" in bad[0]["why"] or "does not score 1" in bad[0]["why"]
    wrong = bad[0]["witness"]["wrong_input"]
    assert wrong is not None
    # reproduce: the weakened model misses the previous token where the definition has one
    got = model.run([wrong["tokens"]])[0]
    want = _prev_definition(wrong["tokens"])
    for pos in wrong["positions"]:
        assert got[pos - 1] != want[pos - 1]
        assert want[pos - 1] == wrong["expected"][wrong["positions"].index(pos)]


def test_relu_head_leaking_to_other_keys_is_not_certified():
    # W_Q scaled by -1 makes every attended key score -1 (weight 0) and nothing is read
    model = _weaken(_prev_model(n=4), -1.0)
    cert = certify(model)
    assert not cert["certified"]
    assert any(u["layer"] == "attn 1" for u in cert["uncertified"])
    got = model.run([[1, 2]])[0]
    assert got[1] != 1  # the definition: position 2 holds x_1 = 1


def test_icqa_relu_not_certified_with_a_reproducing_witness():
    program = icqa_copy_match(attention="relu")
    model = compile_program(program, vocab=range(6), max_seq_len=7, causal=True, attention="relu")
    cert = certify(model)
    assert not cert["certified"]
    per = {(e["layer"], e["head"]) for e in cert["per_layer"]}
    assert ("attn 1", 0) in per  # the copy head is proved
    assert not [u for u in cert["uncertified"] if u["layer"] == "attn 1"]  # and is its program
    (fail,) = [u for u in cert["uncertified"] if u["layer"] == "attn 2"]
    assert "several positions" in fail["why"]
    wrong = fail["witness"]["wrong_input"]
    assert wrong is not None
    # the definition: the answer set at the query is every token after an earlier copy of it
    x = wrong["tokens"]
    pos = wrong["positions"][0]
    answers = {x[j] for j in range(1, pos) if x[j - 1] == x[pos - 1]}
    assert sorted(answers) == wrong["expected"][0] and len(answers) >= 2
    got = model.run([x])[0][pos - 1]
    assert frozenset([got]) != frozenset(answers)
    assert Evaluator().evaluate(program, x)[pos - 1] == frozenset(answers)


def test_ictm_relu_parse_and_copy_are_proved_match_has_a_witness():
    program = ictm_parse_copy_match(2, attention="relu")
    n, m = 2, 2
    model = compile_program(program, vocab=range(6 + 3), max_seq_len=m * (n + 1) + n, causal=True,
                            attention="relu")
    cert = certify(model)
    assert not cert["certified"]
    assert not [u for u in cert["uncertified"] if u["layer"] in ("attn 1", "attn 2")]
    assert {e["layer"] for e in cert["per_layer"]} >= {"attn 1", "attn 2"}
    (fail,) = [u for u in cert["uncertified"] if u["layer"] == "attn 3"]
    wrong = fail["witness"]["wrong_input"]
    assert wrong is not None
    x, pos = wrong["tokens"], wrong["positions"][0]
    want = Evaluator().evaluate(program, x)[pos - 1]
    assert len(want) >= 2  # two example blocks with the query's pattern: a set of two labels
    assert model.run([x])[0][pos - 1] in want


def test_weakened_relu_match_head_is_not_certified_and_its_witness_reproduces():
    # the parse head (a ReLU match over several positions) with W_Q x 0.45: every match scores 0.45,
    # so the pattern's entries fall below 1/2 and the copies and the final match read nothing
    program = ictm_parse_copy_match(2, attention="relu")
    model = compile_program(program, vocab=range(6 + 3), max_seq_len=8, causal=True, attention="relu")
    model = _weaken(model, 0.45)
    cert = certify(model)
    assert not cert["certified"]
    bad = [u for u in cert["uncertified"] if u["layer"] == "attn 1"]
    assert bad and bad[0]["check"] == "program"
    wrong = bad[0]["witness"]["wrong_input"]
    assert wrong is not None
    x, pos = wrong["tokens"], wrong["positions"][0]
    want = Evaluator().evaluate(program, x)[pos - 1]
    got = model.run([x])[0][pos - 1]
    assert want != (frozenset() if got is None else frozenset([got]))
