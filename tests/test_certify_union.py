"""The certificate's set analysis (verify/certify/sets.py): union heads, their threshold MLPs, set
copies and the meet, on ``graph_connectivity`` (Sanford, Hsu & Telgarsky 2024).

Expected values come from the construction's definition (threshold slope s = 2(N + 1), the meet's
[1, 2k] read-out) and from the program's reference semantics (constructions.reference.evaluate),
never from the certifier itself.
"""

import dataclasses

import numpy as np
import pytest

from depthcraft.constructions.catalogue.connectivity import build
from depthcraft.constructions.reference import evaluate
from depthcraft.rasp_programs.connectivity import edge_token, seq_len
from depthcraft.verify.certify import certify
from depthcraft.verify.tasks.connectivity import ConnectivityTask


def _model(n):
    return build({"n": n, "max_edges": 0, "sampler": "mix"})


def _with(model, layer, key, fn):
    """The model with sublayer ``layer``'s weight ``key`` replaced by ``fn(weight)`` (float32)."""
    layers = [dict(p) for p in model.params["layers"]]
    layers[layer][key] = np.asarray(fn(np.array(layers[layer][key])), np.float32)
    return dataclasses.replace(model, params=dict(model.params, layers=layers))


def _roles(cert):
    return [(e["layer"], e.get("set_analysis")) for e in cert["per_layer"]]


@pytest.mark.parametrize("n", [5, 9])
def test_graph_connectivity_is_certified(n):
    cert = certify(_model(n))
    assert cert["certified"] is True and cert["float32_matches_hardmax"] is True, cert["uncertified"]
    assert cert["uncertified"] == []
    j = 1 if n <= 3 else int(np.ceil(np.log2(n - 1)))  # squarings J (connectivity_layers - 1)
    want = []
    for i in range(j):
        want += [(f"attn {i + 1}", "union"), (f"MLP {i + 1}", "threshold")]
    want += [(f"attn {j + 1}", "copy"), (f"MLP {j + 1}", "meet")]
    assert _roles(cert) == want
    # every union head: leak far below the threshold's quarter-width 1/(4(N + 1)) (its design margin)
    big_n = seq_len({"n": n, "max_edges": 0})
    for e in cert["per_layer"]:
        if e["set_analysis"] == "union":
            assert e["leak_bound"] < 1 / (4 * (big_n + 1)) and e["min_gap"] == pytest.approx(24, abs=1e-5)
    # the meet writes [1, 2k]: the read-out margin is 1 (k = 0: 1 - 0; k >= 1: 2k - 1 >= 1)
    assert cert["readout"]["margin"] == pytest.approx(1.0)


def _sets_program(model):
    """{block name: the set-valued SOp} of the program (the reads of union and copy heads)."""
    return {nm: e for nm, e in model.program.nodes.items() if getattr(e, "multi", False)}


def test_set_blocks_stay_within_the_certified_radius_of_the_programs_sets():
    """Soundness, measured: on task inputs and on arbitrary token strings (every input is the claim),
    each set block's float32 value is within its certified radius of the 0/1 vector of the program's
    set (reference semantics), and the decoded output is the program's at every position."""
    n = 9
    model = _model(n)
    cert = certify(model)
    assert cert["certified"]
    task, p = ConnectivityTask(), {"n": n, "max_edges": 0, "sampler": "mix"}
    rng = np.random.default_rng(1)
    task_inputs = [list(map(int, row)) for row in task.sample(p, rng, 24)]
    vocab = list(model.vocab)
    strings = [[vocab[int(i)] for i in rng.integers(0, len(vocab), int(rng.integers(1, model.max_seq_len + 1)))]
               for _ in range(24)]
    # large fan-in: one edge among many copies of its endpoints (an element held by 1 of up to N keys)
    strings += [[edge_token(n, 0, 1)] + [0] * k + [1] * (model.max_seq_len - 2 - k) + [2]
                for k in (0, 5, model.max_seq_len // 2, model.max_seq_len - 3)]
    radius = {e["layer"]: e["radius_out"] for e in cert["per_layer"]}
    sets = _sets_program(model)
    out_of = {}
    for spec, name in zip(model.arch.sublayers, _sublayer_names(model)):
        for nm in sets:
            rows = [i for i, lab in enumerate(model.residual_labels) if lab.split(":", 1)[0] == nm]
            if spec.out_rows is not None and set(rows) == set(spec.out_rows):
                out_of[nm] = (name, rows)
    assert len(out_of) == len(sets)
    sink = model.program.nodes[model.program.sink]
    for tokens in task_inputs + strings:
        ids = model.encode([tokens], length=model.max_seq_len + 1)
        res = model.forward_ids(ids, collect_residuals=True, planned=False).residuals[-1]
        res = np.asarray(res, np.float64)[0]
        for nm, (layer, rows) in out_of.items():
            want = evaluate(sets[nm], tokens)
            for i, s in enumerate(want):
                bits = np.array([1.0 if model.residual_labels[r].split(":", 1)[1] in {str(v) for v in s} else 0.0
                                 for r in rows])
                err = np.abs(res[i + 1, rows] - bits).max()
                assert err <= radius[layer], (nm, tokens, i, err, radius[layer])
        got = model.run([tokens])[0].tolist()
        assert got == evaluate(sink, tokens), tokens


def _sublayer_names(model):
    from depthcraft.constructions.model import sublayer_names
    return sublayer_names(model.arch)


# ------------------------------------------------------------------------------------- must fail


def test_union_head_weakened_for_large_fan_in_is_not_certified_and_really_drops_the_element():
    """The first union head's W_O times 1/8: an element held by one of m selected keys reaches the
    threshold clip(s x - 1/2, 0, 1), s = 2(N + 1) = 38 at n = 5, as x = 1/(8m): it decodes (>= 1/2)
    only while 38 / (8 m) >= 1 (m <= 4), and is gone (output 0) once 38 / (8 m) <= 1/2 (m >= 10).
    The certificate refuses at the threshold MLP; its witness names both fan-ins and carries an input
    with fan-in 10 on which the model is really wrong; the same shape with fan-in 4 is right."""
    n = 5
    model = _model(n)
    weak = _with(model, 0, "w_o", lambda w: w / 8)
    cert = certify(weak)
    assert cert["certified"] is False and cert["float32_matches_hardmax"] is False
    u = cert["uncertified"][0]
    assert (u["layer"], u["check"]) == ("MLP 1", "float32") and "not within 1/4" in u["why"]
    big_n = seq_len({"n": n, "max_edges": 0})
    s = 2 * (big_n + 1)
    m_half = min(m for m in range(1, big_n + 1) if s / (8 * m) - 0.5 < 0.5)
    m_zero = min(m for m in range(1, big_n + 1) if s / (8 * m) - 0.5 <= 0)
    w = u["witness"]
    assert (m_half, m_zero) == (5, 10) and (w["fan_in"], w["fan_in_zero"]) == (m_half, m_zero)
    assert w["on"] is True and w["scratch"] == pytest.approx(1 / (8 * m_half))
    assert w["output"] == pytest.approx(s / (8 * m_half) - 0.5)
    # the witness's concrete input (built from the fan-in): wrong on the model, the program's value expected
    wrong = w["wrong_input"]
    assert wrong is not None and wrong["tokens"].count(1) == m_zero - 1
    tokens = wrong["tokens"]
    want, got = evaluate(model.program.nodes[model.program.sink], tokens), weak.run([tokens])[0].tolist()
    assert [want[i - 1] for i in wrong["positions"]] == wrong["expected"]
    assert [got[i - 1] for i in wrong["positions"]] == wrong["got"] != wrong["expected"]
    assert model.run([tokens])[0].tolist() == want

    def witness_input(m):
        # the query at "1" has m keys (m - 1 copies of "1" and the edge 0-1), one of them holds 0; the
        # "3" after them has the keys "0-3" and "3": R(1) and R(3) meet at 0 (program), or not
        return [edge_token(n, 0, 1), edge_token(n, 0, 3)] + [1] * (m - 1) + [3]

    sink = model.program.nodes[model.program.sink]
    for m, wrong in ((m_zero, True), (4, False)):
        tokens = witness_input(m)
        want = evaluate(sink, tokens)
        assert want[-1] == 1 and model.run([tokens])[0].tolist() == want
        got = weak.run([tokens])[0].tolist()
        assert (got[-1] == 0) is wrong and (got != want) is wrong, (m, got, want)


def test_union_head_writing_another_element_fails_the_program_check():
    """Two scratch columns of the first union head's W_O swapped: every key writes the elements 0 and 1
    under each other's name. The float32 part still holds (the same multi-hot values), the program
    check does not, with the value and both sets as witness."""
    model = _model(5)

    def swap(w):
        w[..., [0, 1]] = w[..., [1, 0]]
        return w
    cert = certify(_with(model, 0, "w_o", swap))
    assert cert["certified"] is False and cert["float32_matches_hardmax"] is True
    u = cert["uncertified"][0]
    assert (u["layer"], u["head"], u["check"]) == ("attn 1", 0, "program")
    assert "OV circuit writes the elements" in u["why"]
    w = u["witness"]
    assert set(w["expected"]) != set(w["got"]) and {0, 1} & (set(w["expected"]) ^ set(w["got"]))


def test_union_head_selecting_non_incident_keys_fails_the_program_check():
    """The first union head's W_K with the column of edge 0-1 moved onto edge 2-3's row: the query at
    vertex 0 no longer selects 0-1 (and vertex 2 selects it). Not certified: the program check names
    a (query, key) pair the predicate classifies otherwise."""
    n = 5
    model = _model(n)
    rows = model.arch.sublayers[0].k_rows
    labels = [model.residual_labels[r] for r in rows]
    a, b = labels.index(f"tokens:{edge_token(n, 0, 1)}"), labels.index(f"tokens:{edge_token(n, 2, 3)}")

    def move(w):
        w[0, [a, b]] = w[0, [b, a]]
        return w
    cert = certify(_with(model, 0, "w_k", move))
    assert cert["certified"] is False
    u = [e for e in cert["uncertified"] if e["check"] == "program"][0]
    assert (u["layer"], u["head"]) == ("attn 1", 0) and "predicate" in u["why"]
    assert u["witness"]["key"]["tokens"] in (edge_token(n, 0, 1), edge_token(n, 2, 3))


def test_meet_scaled_below_its_constant_fails_the_program_check():
    """The meet's out:1 weights times 0.2: one shared element gives [1, 0.4], which decodes to 0 where
    the sets share an element. Not certified, at the meet, with that output as witness."""
    model = _model(5)
    last = len(model.arch.sublayers) - 1
    col = model.residual_labels[model.arch.sublayers[last].out_rows[1]]
    assert col.endswith(":1")
    cert = certify(_with(model, last, "w_2", lambda w: w * np.array([1.0, 0.2])))
    assert cert["certified"] is False and cert["float32_matches_hardmax"] is True
    u = cert["uncertified"][0]
    assert (u["layer"], u["check"]) == (f"MLP {last // 2 + 1}", "program")
    assert u["witness"]["expected"] == 1 and u["witness"]["got"] == 0
    assert u["witness"]["output"] == pytest.approx([1.0, 0.4])


def test_softened_union_head_leaks_and_its_witness_input_is_really_wrong():
    """The first union head's W_Q times 0.2: the gap between the tiers is 0.2 x 24 = 4.8 nats, so the
    N = 18 keys off the top may carry 18 e^-4.8 = 0.148 of the mass (the leak bound, from the
    definition), which the threshold (slope 38) turns into a member. Not certified at the threshold,
    off interval; the witness input is wrong on the float32 model and right on the program."""
    n = 5
    model = _model(n)
    weak = _with(model, 0, "w_q", lambda w: w * 0.2)
    cert = certify(weak)
    assert cert["certified"] is False and cert["float32_matches_hardmax"] is False
    head = cert["per_layer"][0]
    big_n = seq_len({"n": n, "max_edges": 0})
    assert head["min_gap"] == pytest.approx(0.2 * 24, rel=1e-6)
    assert head["leak_bound"] == pytest.approx(big_n * np.exp(-0.2 * 24), rel=1e-3)
    u = cert["uncertified"][0]
    assert (u["layer"], u["check"], u["witness"]["on"]) == ("MLP 1", "float32", False)
    wrong = u["witness"]["wrong_input"]
    assert wrong is not None
    tokens = wrong["tokens"]
    want = evaluate(model.program.nodes[model.program.sink], tokens)
    got = weak.run([tokens])[0].tolist()
    assert [want[i - 1] for i in wrong["positions"]] == wrong["expected"]
    assert [got[i - 1] for i in wrong["positions"]] == wrong["got"] != wrong["expected"]
    assert model.run([tokens])[0].tolist() == want


def test_without_the_program_no_set_analysis_and_no_certificate():
    """A model with no program linked: which blocks are sets is unknown, the generic analysis sees a
    union head's level of several positions and stops there (as before the set analysis)."""
    cert = certify(dataclasses.replace(_model(5), program=None))
    assert cert["certified"] is False and cert["float32_matches_hardmax"] is False
    u = [e for e in cert["uncertified"] if e["check"] == "float32"][0]
    assert (u["layer"], u["head"]) == ("attn 1", 0) and "several positions may match" in u["why"]
