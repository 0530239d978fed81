"""Certification (the package verify/certify) must be able to fail, be sound, and agree with exhaustive checks.

The four failing-side checks of the certification issue:
* a weakened model (one head's W_QK scaled down) is rejected once N is large enough, and at that N a
  concrete input shows the bound is real (decoding fails, or the measured leak reaches the bound);
* soundness: on random inputs, the measured error of every sublayer is within its certified radius
  and every head's measured leak within its certified leak bound;
* every SPEC §8 pitfall program is refused at compile time or reported not certified;
* wherever both run, certification and the exhaustive check agree.
"""

import dataclasses
import itertools

import numpy as np
import pytest

from certify_radii import assert_within_radii
from depthcraft.constructions.compiler import compile_program, compile_with_tracr
from depthcraft.constructions.errors import CompileError
from depthcraft.rasp_programs import pitfalls
from depthcraft.verify import lookup
from depthcraft.verify.certify import certify
from depthcraft.verify.tasks.khop import hop_k


def build(name, **params):
    return lookup.resolve(name, params).build()


def weakened(model, sublayer, factor):
    """The model with W_Q of one attention sublayer scaled by ``factor`` (its scores shrink by it)."""
    layers = [dict(p) for p in model.params["layers"]]
    layers[sublayer]["w_q"] = np.asarray(layers[sublayer]["w_q"]) * np.float32(factor)
    return dataclasses.replace(model, params=dict(model.params, layers=layers))


def test_certifies_khop_doubling_with_one_entry_per_head():
    cert = certify(build("khop_doubling", k=4, n=12, vocab=3))
    assert cert["certified"] is True and cert["uncertified"] == []
    assert [e["layer"] for e in cert["per_layer"]] == ["attn 1", "attn 2", "attn 3", "attn 4"]
    for e in cert["per_layer"]:
        assert e["head"] == 0 and 0 <= e["leak_bound"] < 1e-6 and e["radius_out"] >= e["radius_in"] >= 0
    assert cert["readout"]["margin"] == 1.0 and 0 < cert["readout"]["error"] < 0.01


def test_weakened_head_fails_at_large_n_and_the_bound_is_real():
    # the pointer look-up head of k = 2 (attn 3): the pointed-at key scores 24 above the n - 1 others;
    # with W_Q scaled by 0.1 the gap is 2.4, so the leak bound grows like n * exp(-2.4)
    small, large = 8, 200
    certs = {}
    for n in (small, large):
        model = weakened(build("khop_doubling", k=2, n=n, vocab=4), 2, 0.1)
        certs[n] = (model, certify(model))
    assert certs[small][1]["certified"] is True
    model, cert = certs[large]
    assert cert["certified"] is False
    failed = cert["uncertified"][0]
    assert (failed["layer"], failed["head"]) == ("attn 3", 0) and failed["witness"]["leak_bound"] >= 1
    bound = min(failed["witness"]["leak_bound"], 1.0)  # a weight is at most 1
    # a concrete input at that n: periodic tokens point every late query at a real position
    tokens = np.tile(np.arange(4), large // 4)[None, :large]
    out = model.forward_ids(model.encode(tokens, length=large + 1))
    measured_leak = 1.0 - float(np.asarray(out.attn_mass[2])[0, 0])
    decoded_wrong = (model.decode(np.asarray(out.logits)[:, 1:], -1)[0] != hop_k(tokens, 2)[0]).any()
    assert decoded_wrong or measured_leak >= 0.5 * bound, (measured_leak, bound)
    # at n = 8 the certified bound holds on the same kind of input
    small_model, small_cert = certs[small]
    small_bound = next(e for e in small_cert["per_layer"] if e["layer"] == "attn 3")["leak_bound"]
    out = small_model.forward_ids(small_model.encode(tokens[:, :small], length=small + 1))
    assert 1.0 - float(np.asarray(out.attn_mass[2])[0, 0]) <= small_bound


SOUND = [("khop_doubling", dict(k=4, n=12, vocab=3)), ("khop_floor", dict(k=3, n=12, vocab=3)),
         ("khop_constant_width", dict(k=4, n=16, vocab=3)), ("icqa_copy_match", dict(m=3, questions=4, answers=4)),
         ("retrieval_doubling", dict(d=4, distractors=1)), ("ictm_parse_copy_match", dict(n=2, m=2, vocab=4, labels=2))]


@pytest.mark.parametrize("name,params", SOUND, ids=[s[0] for s in SOUND])
def test_measured_errors_stay_within_the_certified_radii(name, params):
    r = lookup.resolve(name, params)
    model = r.build()
    cert = certify(model)
    # the radii are the float32 half of the certificate (angle pointers and match heads are not checked
    # against the program: tests/test_certify_program.py)
    assert cert["float32_matches_hardmax"], cert["uncertified"]
    rng = np.random.default_rng(0)
    p = r.params
    n = r.task.max_seq_len(p)
    inputs = np.concatenate([r.task.sample(p, rng, 64)] + [np.asarray(e)[:, :n] for e in r.task.edge_cases(p)
                                                             if np.asarray(e).shape[1] == n])
    real = assert_within_radii(model, cert, model.encode(inputs, length=n + 1))
    for a, mass in enumerate(real.attn_mass):
        bound = max(e["leak_bound"] for e in cert["per_layer"] if e["layer"] == f"attn {a + 1}")
        assert 1.0 - float(np.asarray(mass).min()) <= bound + 1e-6  # + float32 rounding of the mass itself


PITFALL_PROGRAMS = [("first_token_non_unique", pitfalls.first_token_non_unique, [0, 1, 2], 6, "depthcraft"),
                    ("none_read_downstream", pitfalls.none_read_downstream, [0, 1, 2], 6, "depthcraft"),
                    ("histogram", pitfalls.histogram, [0, 1, 2], 12, "tracr"),
                    ("length", pitfalls.length, [0, 1, 2], 12, "tracr"),
                    ("comparison_on_none", pitfalls.comparison_on_none, [0, 1, 2], 6, "depthcraft")]


@pytest.mark.parametrize("label,make,vocab,n,compiler", PITFALL_PROGRAMS, ids=[p[0] for p in PITFALL_PROGRAMS])
def test_pitfall_programs_are_never_certified(label, make, vocab, n, compiler):
    compile_fn = compile_program if compiler == "depthcraft" else compile_with_tracr
    cert = certify(compile_fn(make(), vocab=vocab, max_seq_len=n))
    assert cert["certified"] is False
    assert cert["uncertified"] and cert["uncertified"][0]["why"]


def test_khop_rasp_baseline_is_not_certified_and_names_a_head():
    cert = certify(build("khop_rasp", k=1, n=8, vocab=3))
    assert cert["certified"] is False
    u = cert["uncertified"][0]
    assert u["layer"].startswith("attn") and u["head"] is not None
    # a table witness (query and keys), or the score perturbation that swamps the gap
    assert u["witness"].get("query") or u["witness"]["delta"] > u["witness"]["min_gap"] / 2


def test_selector_and_is_refused_at_compile_time():
    with pytest.raises(CompileError):
        compile_program(pitfalls.selector_and(), vocab=[0, 1, 2], max_seq_len=6)


AGREE = [("khop_doubling", dict(k=2, n=6, vocab=3), None), ("khop_floor", dict(k=3, n=6, vocab=3), None),
         ("khop_doubling", dict(k=2, n=6, vocab=3), (2, 0.02))]  # the last: a head too weak to be exact


@pytest.mark.parametrize("name,params,weaken", AGREE, ids=["doubling", "floor", "weakened"])
def test_certificate_and_exhaustive_check_agree(name, params, weaken):
    r = lookup.resolve(name, params)
    model = r.build()
    if weaken is not None:
        model = weakened(model, *weaken)
    n, vocab = r.params["n"], r.params["vocab"]
    inputs = np.array(list(itertools.product(range(vocab), repeat=n)))
    exact = bool((model.run(inputs, -1) == hop_k(inputs, r.params["k"])).all())
    certified = certify(model)["certified"]
    if certified:
        assert exact  # a certificate never holds where the exhaustive check finds an error
    if weaken is None:
        assert certified and exact
    else:
        assert not exact and not certified


def test_cli_certify_column_and_json(tmp_path, capsys, monkeypatch):
    from depthcraft.verify.cli import main
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.chdir(tmp_path)  # a short output path: the line naming it fits 80 columns
    out = tmp_path / "r.json"
    with pytest.raises(SystemExit) as e:
        main(["verify", "khop_doubling", "-p", "k=2", "-p", "n=8", "--certify", "--samples", "20",
              "--hypothesis", "5", "--json", "r.json"])
    assert e.value.code == 0
    import json
    report = json.loads(out.read_text())["results"][0]
    cert = report["certificate"]
    assert cert["certified"] is True and set(cert) >= {"certified", "scope", "per_layer", "uncertified", "seconds"}
    assert set(cert["per_layer"][0]) >= {"layer", "head", "min_gap", "leak_bound", "radius_in", "radius_out"}
    assert report["sampling"] == {"reduced_by_certificate": False}
    theorem = report["theorem"]  # the theorem's half, beside the certificate
    assert theorem["exhaustive"]["exact"] and theorem["random"] == {"n": 8, "inputs": 10_000, "exact": True}
    text = capsys.readouterr().out
    assert text.splitlines()[0].split()[-1] == "cert" and text.splitlines()[2].split()[-1] == "yes"
    from rich.cells import cell_len
    wide = [line for line in text.splitlines() if cell_len(line.rstrip()) > 80]
    assert not wide, wide
