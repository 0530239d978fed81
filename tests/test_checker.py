"""The independent checker (depthcraft.checker): valid certificates, tampered ones, wrong weights and programs.

A certificate the checker accepts must be re-derivable from the weights and the program; every
tampering of its claims below what the weights support, of its premises or of the weights or the
program is refused, naming the obligation (issue 39, "It must be able to fail").
"""

from __future__ import annotations

import copy
import dataclasses
import json

import numpy as np
import pytest
from tracr.rasp import rasp

from depthcraft import checker
from depthcraft.constructions.compiler import compile_program
from depthcraft.verify.certify import prove
from depthcraft.verify.certify.certificate import checker_model
from depthcraft.verify.lookup import resolve


def _sink(m):
    return m.program.nodes[m.program.sink]


@pytest.fixture(scope="module")
def khop():
    """khop_doubling k = 2, n = 8: its model, the checker's view of it, its certificate (valid)."""
    m = resolve("khop_doubling", {"k": "2", "n": "8"}).build()
    cm = checker_model(m)
    cert, verdict = checker.build(cm, _sink(m), "tables", {}, {"tool": "test", "construction": "khop_doubling",
                                                              "params": {"k": 2, "n": 8}})
    assert verdict.valid, verdict.failure
    return m, cm, checker.certificate.parse(checker.write("c.json.gz", cert))


def _check(cert, cm, sink):
    return checker.check(copy.deepcopy(cert), cm, sink)


def test_a_valid_certificate_round_trips_and_is_valid(khop):
    m, cm, cert = khop
    v = _check(cert, cm, _sink(m))
    assert v.valid and v.status == "valid", v.failure
    assert v.proved.startswith("every input of length 1..8 over the 4-token vocabulary")
    heads = [p for s in cert["claims"]["sublayers"] for p in s["parts"]]
    assert [h["rule"] for h in heads] == ["position", "search", "pointer"]  # L = ceil(log2 2) + 2 = 3
    assert all(h["leak_bound"] < 1e-6 and h["min_gap"] > 20 for h in heads)


def _tamper(cert, fn):
    c = copy.deepcopy(cert)
    fn(c)
    return c


def _part(c, layer=1):
    return c["claims"]["sublayers"][layer]["parts"][0]


@pytest.mark.parametrize("what, fn, says", [
    ("leak lowered", lambda c: _part(c).update(leak_bound=_part(c)["leak_bound"] / 10), "leak_bound"),
    ("delta lowered", lambda c: _part(c).update(delta=_part(c)["delta"] / 2), "delta"),
    ("radius lowered", lambda c: _part(c).update(radius_out=_part(c)["radius_out"] / 2), "radius_out"),
    ("gap raised", lambda c: _part(c).update(min_gap=_part(c)["min_gap"] + 1), "min_gap"),
    ("top set changed", lambda c: _part(c)["tops"].update(sha256="0" * 64), "tops"),
    ("top count changed", lambda c: _part(c)["tops"].update(levels=_part(c)["tops"]["levels"] - 1), "levels"),
    ("read-out margin raised", lambda c: c["claims"]["readout"].update(margin=0.6), "margin"),
    ("read-out error lowered", lambda c: c["claims"]["readout"].update(error=0.0), "error"),
    ("state radius lowered", lambda c: next(iter(c["claims"]["sublayers"][0]["state_after"].values())).update(
        radius=0.0), "radius"),
    ("value set shrunk", lambda c: next(iter(c["claims"]["sublayers"][2]["state_after"].values()))["regular"].pop(),
     "value set"),
    ("N raised", lambda c: c.update(max_seq_len=9), "max_seq_len"),
    ("scope widened", lambda c: c.update(scope=c["scope"].replace("1..8", "1..100")), "scope"),
    ("route changed", lambda c: c.update(route="exhaustive", premises={"inputs": [[0]]}), "scope"),
    ("vocabulary changed", lambda c: c.update(vocab=[0, 1, 2, 3, 4]), "vocab"),
    ("causal flipped", lambda c: c.update(causal=False), "causal"),
])
def test_a_tampered_claim_is_refused_naming_it(khop, what, fn, says):
    m, cm, cert = khop
    v = _check(_tamper(cert, fn), cm, _sink(m))
    assert not v.valid and v.status == "rejected", what
    assert says in v.failure, (what, v.failure)


def test_a_weaker_claim_than_derived_is_still_true_and_accepted(khop):
    """An upper bound raised (or a lower bound lowered) stays a true statement: accepted."""
    m, cm, cert = khop
    c = _tamper(cert, lambda c: _part(c).update(leak_bound=0.5, min_gap=1.0))
    assert _check(c, cm, _sink(m)).valid


def test_one_weight_changed_is_a_hash_mismatch(khop):
    m, _, cert = khop
    params = copy.deepcopy(m.params)
    params["layers"][1]["w_q"][0, 0, 0] += 1e-3
    other = checker_model(dataclasses.replace(m, params=params))
    with pytest.raises(checker.NotACertificate, match="SHA-256"):
        _check(cert, other, _sink(m))


def test_another_program_is_not_the_certificates(khop):
    m, cm, cert = khop
    other = resolve("khop_doubling", {"k": "1", "n": "8"}).build()
    with pytest.raises(checker.NotACertificate, match="program"):
        _check(cert, cm, _sink(other))


def test_the_same_program_built_again_adopts_the_certificates_labels(khop):
    """tracr labels nodes with a process-wide counter: a program built again has other labels, and the
    checker renames them after matching the two graphs (types, names, children)."""
    from depthcraft.constructions.catalogue import clear_build_cache
    m, cm, cert = khop
    clear_build_cache()
    again = resolve("khop_doubling", {"k": "2", "n": "8"}).build()
    assert _sink(again).label != _sink(m).label
    assert _check(cert, cm, _sink(again)).valid


def test_a_changed_map_is_refused_naming_the_mlp():
    good = rasp.categorical(rasp.Map(lambda t: (t + 1) % 3, rasp.tokens)).named("succ")
    m = compile_program(good, {0, 1, 2}, 3, causal=False)
    cm = checker_model(m)
    cert, v = checker.build(cm, _sink(m), "tables", {}, {})
    assert v.valid, v.failure
    changed = rasp.categorical(rasp.Map(lambda t: (t + 2) % 3, rasp.tokens)).named("succ")
    v2 = checker.check(cert, cm, changed)
    assert v2.status == "rejected" and "MLP 1" in v2.failure and "succ" in v2.failure, v2.failure


def test_not_a_certificate(tmp_path):
    p = tmp_path / "x.json"
    p.write_text(json.dumps({"format": "something else"}))
    with pytest.raises(checker.NotACertificate):
        checker.read(str(p))
    p.write_text("{not json")
    with pytest.raises(checker.NotACertificate):
        checker.read(str(p))


@pytest.mark.parametrize("name, sop, vocab, n", [
    ("frac_prevs", None, {"a", "b", "c"}, 5),
    ("length", None, {"a", "b"}, 4),
])
def test_numerical_means_and_selector_width_are_checked(name, sop, vocab, n):
    from tracr.compiler import lib
    sop = lib.make_frac_prevs(rasp.tokens == "a") if name == "frac_prevs" else lib.make_length()
    m = compile_program(sop, vocab, n, causal=False)
    cm = checker_model(m)
    premises = {} if cm.categorical else {"atol": 1e-3}
    cert, v = checker.build(cm, _sink(m), "tables", premises, {})
    assert v.valid, v.failure
    rules = [p["rule"] for s in cert["claims"]["sublayers"] for p in s["parts"]]
    assert ("select" if name == "frac_prevs" else "width") in rules
    assert checker.check(cert, cm, _sink(m)).valid


def test_the_certifier_and_the_checker_agree_on_a_correct_and_a_wrong_model(khop):
    m, cm, _ = khop
    c = prove(m)
    assert c.certified and c.check.valid
    params = copy.deepcopy(m.params)
    params["layers"][2]["w_q"] *= 0.02  # the pointer look-up's scores collapse
    bad = dataclasses.replace(m, params=params)
    c2 = prove(bad)
    assert not c2.certified
    forged = dict(copy.deepcopy(c.file), weights_sha256=checker_model(bad).sha256)
    assert not checker.check(forged, checker_model(bad), _sink(bad)).valid


def test_an_exhaustive_certificate_lists_its_inputs_and_a_tampered_list_is_refused():
    sop = rasp.categorical(rasp.Map(lambda t: t, rasp.tokens)).named("copy")
    m = compile_program(sop, {0, 1}, 2, causal=False)
    cm = checker_model(m)
    inputs = [[0], [1], [0, 1], [1, 1]]
    cert, v = checker.build(cm, _sink(m), "exhaustive", {"inputs": inputs, "positions": "all"}, {})
    assert v.valid and cert["claims"]["inputs"] == 4 and cert["claims"]["bounded"] == 4
    bad = copy.deepcopy(cert)
    bad["premises"]["inputs"].append([2])
    v2 = checker.check(bad, cm, _sink(m))
    assert not v2.valid  # the scope names 5 inputs but one is no token; or the claims' count differs
    longer = copy.deepcopy(cert)
    longer["premises"]["inputs"] = inputs + [[0, 0, 0]]
    longer["scope"] = checker.certificate.scope("exhaustive", 2, [0, 1], longer["premises"])
    v3 = checker.check(longer, cm, _sink(m))
    assert not v3.valid and "length 3" in v3.failure


def test_check_certificate_cli(tmp_path, khop):
    from depthcraft.verify.cli import main
    m, cm, cert = khop
    from depthcraft.constructions import io
    model_path = tmp_path / "m.safetensors"
    io.save(m, str(model_path))
    cpath = tmp_path / "m.json.gz"
    cpath.write_bytes(checker.write(str(cpath), cert))
    with pytest.raises(SystemExit) as e:
        main(["check-certificate", str(cpath)])
    assert e.value.code == 0
    bad = _tamper(cert, lambda c: _part(c).update(leak_bound=0.0))
    cpath.write_bytes(checker.write(str(cpath), bad))
    with pytest.raises(SystemExit) as e:
        main(["check-certificate", str(cpath)])
    assert e.value.code == 1
    (tmp_path / "junk.json").write_text("[]")
    with pytest.raises(SystemExit) as e:
        main(["check-certificate", str(tmp_path / "junk.json"), "--model", str(model_path)])
    assert e.value.code == 2
