"""Attacks on the independent certificate checker (``depthcraft.checker``).

Every test builds a model (or a certificate) that a sound checker must REJECT, and asserts that it
does. Where the attack is about a wrong model, the test first shows, by running the model's float32
JAX forward (``CompiledModel.forward_ids``, as ``CompiledModel.run`` does) against the RASP program
(tracr's evaluator, or depthcraft's reference evaluator for the hand-built heads), a concrete input
where the model is wrong: so a FAILING test here is a successful attack (the checker certified a wrong
model), never a false alarm. Tests in the second half are attacks the checker is expected to refuse
(and, when these were written, did): regression tests.

Run: ``pytest -q -n 0 tests/test_checker_attacks.py``.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
import math
import os

import numpy as np
import pytest
from tracr.rasp import rasp

from depthcraft import checker
from depthcraft.checker import program as cprog
from depthcraft.constructions import io, reference
from depthcraft.constructions.compiler import compile_program
from depthcraft.verify.certify.certificate import checker_model
from depthcraft.verify.lookup import resolve

# ------------------------------------------------------------------------------------------ helpers


def sink_of(m):
    return m.program.nodes[m.program.sink]


def clone(m, **changes):
    """A copy of a CompiledModel with its own weight arrays (catalogue builds are cached: never mutate them)."""
    import jax
    params = jax.tree_util.tree_map(lambda a: np.array(a, copy=True), m.params)
    out = dataclasses.replace(m, params=params, **changes)
    out.program = m.program
    return out


def khop(k=2, n=6):
    return resolve("khop_doubling", {"k": str(k), "n": str(n)}).build()


def build(m, route="tables", premises=None, sink=None):
    """(certificate, verdict) the checker gives for ``m`` (as its file's bytes read it); a model file the
    checker refuses to read (ModelFileError, exit 2 in the CLI) is a refusal too: (None, an invalid verdict)."""
    try:
        cm = checker_model(m)
    except checker.ModelFileError as e:
        return None, checker.Verdict(False, "nothing", f"model file refused: {e}", status="rejected")
    return checker.build(cm, sink if sink is not None else sink_of(m), route, premises or {}, {"tool": "attack"})


def run_raw(m, batch):
    """Decoded float32 JAX outputs at positions 1..n (argmax; None below 0.5), without decode's int cast."""
    ids = m.encode(batch, length=m.max_seq_len + 1)
    lg = np.asarray(m.forward_ids(ids).logits, np.float64)[:, 1:]
    out = []
    for b, xs in enumerate(batch):
        row = []
        for i in range(len(xs)):
            k = int(lg[b, i].argmax())
            row.append(None if lg[b, i, k] < 0.5 else m.output_values[k])
        out.append(row)
    return out


def tracr_eval(prog):
    def ev(xs):
        try:
            return list(rasp.evaluate(prog, list(xs)))
        except Exception as e:  # noqa: BLE001 - the program has no value on this input
            return [f"error: {type(e).__name__}"] * len(xs)
    return ev


def ref_eval(m):
    sink = sink_of(m)

    def ev(xs):
        try:
            return list(reference.evaluate(sink, list(xs)))
        except Exception as e:  # noqa: BLE001
            return [f"error: {type(e).__name__}"] * len(xs)
    return ev


def counterexample(m, n, evaluate=None, vocab=None):
    """The first input of length 1..n (every one) where the float32 model's output differs from the
    program's (values compared with their kinds, :func:`depthcraft.checker.program.same`), or None."""
    evaluate = evaluate or ref_eval(m)
    vocab = vocab or list(m.vocab)
    for length in range(1, n + 1):
        batch = [list(x) for x in itertools.product(vocab, repeat=length)]
        for s in range(0, len(batch), 512):
            chunk = batch[s:s + 512]
            for xs, got in zip(chunk, run_raw(m, chunk)):
                want = evaluate(xs)
                if any(not cprog.same(g, w) for g, w in zip(got, want)):
                    return xs, want, got
    return None


def assert_wrong_and_refused(m, n, evaluate=None, route="tables", premises=None, sink=None, vocab=None):
    cx = counterexample(m, n, evaluate, vocab)
    assert cx is not None, "precondition: the attacked model should be wrong on some input"
    _, v = build(m, route, premises, sink)
    assert not v.valid, (f"UNSOUND: the checker certifies a model that is wrong on input {cx[0]!r} "
                         f"(program {cx[1]!r}, model {cx[2]!r}); scope: {v.proved}")


def one_map(vocab=("a", "b", "c"), n=3):
    f = rasp.categorical(rasp.Map(lambda t: "X" if t == "a" else "Y", rasp.tokens)).named("f")
    return f, compile_program(f, set(vocab), n, causal=False)


# ======================================================================= SUCCESSFUL ATTACKS (when written)
# --- A. the embedding is never checked against the program (state.initial trusts it)


def test_token_embedding_rows_swapped():
    """Swap the embedding rows of tokens 0 and 1: the model computes hop_k of the renamed input. The set of
    token vectors is unchanged, and nothing ties the row of token v to the value v."""
    m = clone(khop())
    t = m.params["embed"]["token"]
    t[[0, 1]] = t[[1, 0]]
    assert_wrong_and_refused(m, 3)


def test_position_embedding_rows_swapped_under_a_select_on_indices():
    """prev = Aggregate(Select(indices, indices, k == q - 1), tokens); swap pos rows 1 and 2. The decoded
    indices at position 1 is then 1, which Possible says cannot stand there, so the selection check skips
    exactly the combinations the swap broke."""
    prev = rasp.categorical(rasp.Aggregate(rasp.Select(rasp.indices, rasp.indices, lambda k, q: k == q - 1),
                                           rasp.tokens)).named("prev")
    m = clone(compile_program(prev, {"a", "b"}, 4, causal=False))
    p = m.params["embed"]["pos"]
    p[[1, 2]] = p[[2, 1]]
    assert_wrong_and_refused(m, 3, tracr_eval(prev))


def test_position_embedding_rows_swapped_under_a_map_of_indices():
    it = rasp.categorical(rasp.SequenceMap(lambda i, t: (i, t), rasp.indices, rasp.tokens)).named("it")
    m = clone(compile_program(it, {"a", "b"}, 3, causal=False))
    p = m.params["embed"]["pos"]
    p[[1, 2]] = p[[2, 1]]
    assert_wrong_and_refused(m, 2, tracr_eval(it))


def test_program_output_written_by_the_embedding():
    """A model with no sublayer at all whose token embedding sets the program's output block with a wrong
    table: a block the embedding sets is taken to hold the program's value."""
    f, m = one_map()
    m = clone(m, arch=dataclasses.replace(m.arch, sublayers=()))
    m.params["layers"] = []
    lab, tok = m.residual_labels, m.params["embed"]["token"]
    for v, out in (("a", "Y"), ("b", "X"), ("c", "X")):
        tok[m.input_values.index(v), lab.index(f"{sink_of(m).label}:{out}")] = 1
    assert_wrong_and_refused(m, 2, tracr_eval(f))


# --- B. an MLP's output bias is outside the program check


def test_mlp_output_bias_shifts_a_near_threshold_value():
    """The Map's MLP writes 0.4 X + 0.6 Y for token c (decodes Y: checked), and b_2 = (+0.2, -0.2) turns it
    into 0.6 X + 0.4 Y (decodes X). tables._mlp_program checks old + hid @ w_2 without b_2."""
    f, m = one_map()
    m = clone(m)
    L = m.params["layers"][0]
    L["w_1"] = np.eye(3, dtype=np.float32)
    L["b_1"] = np.zeros(3, np.float32)
    L["w_2"] = np.array([[1, 0], [0, 1], [0.4, 0.6]], np.float32)
    L["b_2"] = np.array([0.2, -0.2], np.float32)
    assert_wrong_and_refused(m, 2, tracr_eval(f))


# --- C. the model file means something else to depthcraft's runtime than to the checker


def test_unembed_bias_ignored_by_the_checker():
    """params["unembed"]["b"] (runtime._readout adds it) is saved in the file as ``unembed.b``; the checker
    loads only ``unembed.w``."""
    m = clone(khop())
    m.params["unembed"]["b"] = np.zeros(len(m.output_values), np.float32)
    m.params["unembed"]["b"][-1] = 5.0
    from safetensors.numpy import load as st_load
    assert "unembed.b" in st_load(io.to_bytes(m)[0])  # the file holds it; io.load gives it to the runtime
    assert_wrong_and_refused(m, 2)


def test_pad_id_pointing_at_a_vocabulary_token():
    """arch.pad_id = the id of token 0: the runtime masks every key that holds token 0 (runtime._masks);
    the checker reads pad_id and never uses it."""
    m = khop()
    m = clone(m, arch=dataclasses.replace(m.arch, pad_id=m.input_values.index(0)))
    assert_wrong_and_refused(m, 3)


def test_pad_id_pointing_at_bos():
    m = khop()
    m = clone(m, arch=dataclasses.replace(m.arch, pad_id=m.input_values.index("BOS")))
    assert_wrong_and_refused(m, 3)


def _two_faced_file(good, bad):
    """File bytes whose conventionally named tensors (what the checker reads) are ``good``'s, while the
    skeleton ``tree`` (what io.load builds the runtime's weights from) names a second copy, ``evil.*``,
    holding ``bad``'s; io's own SHA-256 is recomputed."""
    from safetensors.numpy import save as st_save
    tensors, evil = {}, {}
    io._flatten(good.params, "", tensors)
    skeleton = io._flatten(bad.params, "evil.", evil)
    tensors.update(evil)
    meta = io.metadata(good)
    meta["tree"] = skeleton
    meta["sha256"] = io._digest(tensors, meta)
    return st_save(tensors, metadata={"format": io.FORMAT, io._META_KEY: json.dumps(meta)})


def test_two_faced_model_file(tmp_path):
    good = khop()
    bad = clone(good)
    bad.params["unembed"]["w"][:] = 0
    blob = _two_faced_file(good, bad)
    path = os.path.join(tmp_path, "m.safetensors")
    with open(path, "wb") as f:
        f.write(blob)
    loaded = io.load(path)  # depthcraft's loader accepts it
    loaded.program = good.program
    cx = counterexample(loaded, 2)
    assert cx is not None
    with pytest.raises(checker.ModelFileError):  # the tree names tensors the checker would not read
        checker.load_model(path)


def test_vocabulary_values_that_hash_equal():
    """input_values [1, True]: the checker treats them as two tokens (program.same), the runtime's encoder
    dict maps both 1 and True to True's row. Program type(t).__name__: the model says 'bool' on [1]."""
    q = rasp.categorical(rasp.Map(lambda t: "int" if t == 1 else "bool", rasp.tokens)).named("ty")
    m = compile_program(q, {1, 2}, 2, causal=False)
    iv = [True if (v == 2 and not isinstance(v, bool)) else v for v in m.input_values]
    labels = ["tokens:True" if lab == "tokens:2" else lab for lab in m.residual_labels]
    mm = clone(m, input_values=iv, residual_labels=labels)
    p = rasp.categorical(rasp.Map(lambda t: type(t).__name__, rasp.tokens)).named("ty")
    cprog.adopt_labels(p, cprog.fingerprint(sink_of(m)))
    assert run_raw(mm, [[1]]) == [["bool"]] and list(rasp.evaluate(p, [1])) == ["int"]
    _, v = build(mm, sink=p)
    assert not v.valid, "UNSOUND: model outputs 'bool' on input [1], the program 'int'"


# --- D. the float32 model's unstated assumptions: no overflow, gradual underflow, masked keys at -1e9


def test_score_overflow():
    """W_Q and W_K of the first head times 1e19: the float32 scores overflow to inf (softmax: NaN); the
    checker's float64 scores are finite and its rounding model has no overflow case."""
    m = clone(khop())
    L = m.params["layers"][0]
    L["w_q"] *= np.float32(1e19)
    L["w_k"] *= np.float32(1e19)
    assert_wrong_and_refused(m, 3)


@pytest.mark.parametrize("layer", [0, 1, 2])
def test_subnormal_value_weights(layer):
    """W_V times 2^-127 (subnormal), W_O times 2^127: XLA on CPU flushes subnormals to zero (FTZ/DAZ), so the
    head writes nothing; float32.py assumes gradual underflow (ETA = 2^-150)."""
    m = clone(khop())
    L = m.params["layers"][layer]
    L["w_v"] *= np.float32(2.0 ** -127)
    L["w_o"] *= np.float32(2.0 ** 127)
    assert_wrong_and_refused(m, 3)


def _score_offset(m, layer, offset):
    """One more q/k column on attention sublayer ``layer`` adding ``offset`` to every score (the query reads
    ``one``; the key reads indices:* and tokens:BOS, one of which is 1 at every key). Softmax is
    shift-invariant."""
    spec, p, lab = m.arch.sublayers[layer], m.params["layers"][layer], m.residual_labels
    key_rows = [lab.index(f"indices:{i}") for i in range(m.max_seq_len)] + [lab.index("tokens:BOS")]
    a = math.sqrt(abs(offset) / spec.qk_scale)
    h = p["w_q"].shape[0]
    cq = np.zeros((h, p["w_q"].shape[1], 1), np.float32)
    cq[:, list(spec.q_rows).index(lab.index("one")), 0] = a
    ck = np.zeros((h, p["w_k"].shape[1], 1), np.float32)
    for r in key_rows:
        ck[:, list(spec.k_rows).index(r), 0] = a if offset > 0 else -a
    p["w_q"] = np.concatenate([p["w_q"], cq], 2)
    p["w_k"] = np.concatenate([p["w_k"], ck], 2)


def test_scores_below_the_mask_sentinel():
    """Every score of the pointer head shifted by about -8e9 (gaps scaled by 1000 to stay clear of the float32
    error): the runtime masks with jnp.where(mask, s, -1e9), so the masked keys (PAD, future) now win the
    softmax; the checker assumes a masked key's weight is exactly 0."""
    m = clone(khop())
    m.params["layers"][2]["w_q"] *= np.float32(1000)
    _score_offset(m, 2, -2e9 / m.arch.sublayers[2].qk_scale)
    assert_wrong_and_refused(m, 3)


def test_hardmax_model_on_the_exhaustive_route():
    """A model file with attention "hardmax": the exhaustive route's bounded and float32 forwards compute
    softmax (forward.py: any kind but relu is softmax). A score offset of 1e6 makes every key a hardmax tie
    (HARDMAX_TOL is relative) without changing softmax."""
    base = khop()
    m = clone(base, arch=dataclasses.replace(base.arch, attention="hardmax"))
    _score_offset(m, 2, 1e6)
    inputs = [list(x) for n in range(1, 4) for x in itertools.product(m.vocab, repeat=n)]
    cx = counterexample(m, 3)
    assert cx is not None and len(cx[0]) <= 3
    _, v = build(m, "exhaustive", {"inputs": inputs, "positions": "all"})
    assert not v.valid, f"UNSOUND: listed input {cx[0]!r} is wrong (program {cx[1]!r}, model {cx[2]!r})"


# --- E. the tables route's meaning of tracr primitives differs from tracr's evaluator


def test_aggregate_of_several_equal_ints_is_a_float_mean():
    """Aggregate(Select(tokens, tokens, EQ), tokens) then str: on [2, 2] tracr's evaluator averages [2, 2]
    to 2.0, so the program says '2.0'; the model says '2'. The tables route takes a top level of equal
    outputs as the value itself."""
    agg = rasp.categorical(rasp.Aggregate(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.EQ),
                                          rasp.tokens)).named("agg")
    out = rasp.categorical(rasp.Map(lambda v: str(v), agg)).named("s")
    m = compile_program(out, {2, 3}, 3, causal=False)
    assert_wrong_and_refused(m, 2, tracr_eval(out))


def test_aggregate_of_several_equal_bools_is_a_float_mean():
    """Same on vocabulary {False, True}: the program's value on [False, False] is 0.0, the model's False
    (program.same(False, 0.0) is False: a mismatch by the checker's own equality)."""
    agg = rasp.categorical(rasp.Aggregate(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.EQ),
                                          rasp.tokens)).named("agg")
    m = compile_program(agg, {True, False}, 3, causal=False)
    assert_wrong_and_refused(m, 2, tracr_eval(agg))


def test_aggregate_of_several_equal_strings_has_no_value():
    """On ['a', 'a'] tracr's evaluator raises (_mean of strings): the program has no output there (SPEC §8
    treats such programs as failures), yet every input up to N is certified."""
    agg = rasp.categorical(rasp.Aggregate(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.EQ),
                                          rasp.tokens)).named("agg")
    m = compile_program(agg, {"a", "b"}, 3, causal=False)
    with pytest.raises(ValueError):
        rasp.evaluate(agg, ["a", "a"])
    assert_wrong_and_refused(m, 2, tracr_eval(agg))


def _copy_program(first, then):
    m1 = rasp.categorical(rasp.Map(first, rasp.tokens)).named("m1")
    cp = rasp.categorical(rasp.Aggregate(rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.EQ), m1)).named("cp")
    return rasp.categorical(rasp.Map(then, cp)).named("out")


@pytest.mark.parametrize("case", ["int_float", "signed_zero"])
def test_values_that_compare_equal_but_differ(case):
    """program.same merges 1 and 1.0 (and 0.0 and -0.0): value sets and decoded values conflate values the
    program's functions tell apart. The model (compiled from Q, where m1 is always 1 / 0.0) is certified
    for P, where m1 is 1.0 / -0.0 on token b, although P's output on ['b'] differs."""
    if case == "int_float":
        p = _copy_program(lambda t: 1 if t == "a" else 1.0, lambda v: str(v))
        q = _copy_program(lambda t: 1, lambda v: str(v))
    else:
        p = _copy_program(lambda t: 0.0 if t == "a" else -0.0, lambda v: math.copysign(1, v) > 0)
        q = _copy_program(lambda t: 0.0, lambda v: math.copysign(1, v) > 0)
    m = compile_program(q, {"a", "b"}, 2, causal=False)
    cert, v = build(m)
    assert v.valid  # Q's own certificate
    cx = counterexample(m, 2, tracr_eval(p))
    assert cx is not None
    verdict = checker.check(json.loads(json.dumps(cert)), checker_model(m), p)
    assert not verdict.valid, f"UNSOUND: certified for P, wrong on {cx[0]!r} (P {cx[1]!r}, model {cx[2]!r})"


def _scored_program(n):
    from depthcraft.constructions.primitives import POSITION, Read, scored_lookup
    return scored_lookup([(rasp.tokens, rasp.tokens, lambda q, k: 2.0 * (q == k)),
                          (POSITION, POSITION, lambda i, j: j / (n + 1))],
                         [Read(POSITION, name="where")], bos_score=0.5, name="lastany")[0]


def test_bidirectional_scored_lookup_in_a_causal_model():
    """scored_lookup attends the best key among 0..n, later keys included (a bidirectional kind; the
    compiler refuses causal=True). The same weights in a model file that says causal: tables._selection's
    score branch compares the score order only among the keys the mask shows and returns before the
    'the causal mask may hide' check, so the model, which finds the latest match at or before i, is
    certified for the program, which finds the latest match anywhere."""
    r = _scored_program(4)
    m = compile_program(r, {"a", "b"}, 4, causal=False)
    m = clone(m, arch=dataclasses.replace(m.arch, causal=True))
    assert_wrong_and_refused(m, 3)


# --- F. crashes: exceptions instead of a verdict


def test_exhaustive_route_on_a_program_that_raises_gives_a_verdict():
    agg = rasp.categorical(rasp.Aggregate(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.EQ),
                                          rasp.tokens)).named("agg")
    m = compile_program(agg, {"a", "b"}, 3, causal=False)
    _, v = build(m, "exhaustive", {"inputs": [["a", "a"]], "positions": "all"})  # raises ValueError today
    assert not v.valid


def test_malformed_premises_are_not_a_crash():
    m = khop()
    cert, _ = build(m)
    cert = copy.deepcopy(cert)
    cert["route"], cert["premises"] = "exhaustive", {"inputs": 5}
    with pytest.raises(checker.NotACertificate):
        checker.check(cert, checker_model(m), sink_of(m))  # TypeError today


def test_a_certificate_without_a_program_is_not_a_crash():
    m = khop()
    cert, _ = build(m)
    cert["program"] = None
    with pytest.raises(checker.NotACertificate):
        checker.check(cert, checker_model(m), sink_of(m))  # AttributeError today


# ============================================================================== CORRECTLY REFUSED


@pytest.fixture(scope="module")
def khop_cert():
    m = khop()
    cert, v = build(m)
    assert v.valid
    return m, json.loads(checker.write("c.json", cert).decode())


def _sub(c):
    return c["claims"]["sublayers"]


TAMPER = {
    "delta lowered": lambda c: _sub(c)[0]["parts"][0].__setitem__("delta", _sub(c)[0]["parts"][0]["delta"] / 2),
    "eps zero": lambda c: _sub(c)[0]["parts"][0].__setitem__("eps", 0.0),
    "leak zero": lambda c: _sub(c)[1]["parts"][0].__setitem__("leak_bound", 0.0),
    "min_gap raised": lambda c: _sub(c)[1]["parts"][0].__setitem__("min_gap", 1e9),
    "radius_out zero": lambda c: _sub(c)[2]["parts"][0].__setitem__("radius_out", 0.0),
    "state radius zero": lambda c: list(_sub(c)[0]["state_after"].values())[0].__setitem__("radius", 0.0),
    "value set shrunk": lambda c: list(_sub(c)[1]["state_after"].values())[0].__setitem__("regular", ["0"]),
    "bos value set emptied": lambda c: list(_sub(c)[1]["state_after"].values())[0].__setitem__("bos", []),
    "margin raised": lambda c: c["claims"]["readout"].__setitem__("margin", 1.0),
    "margin NaN": lambda c: c["claims"]["readout"].__setitem__("margin", float("nan")),
    "error zero": lambda c: c["claims"]["readout"].__setitem__("error", 0.0),
    "delta a bool": lambda c: _sub(c)[0]["parts"][0].__setitem__("delta", True),
    "delta a string": lambda c: _sub(c)[0]["parts"][0].__setitem__("delta", "0"),
    "tops digest": lambda c: _sub(c)[0]["parts"][0]["tops"].__setitem__("sha256", "0" * 64),
    "tops count": lambda c: _sub(c)[0]["parts"][0]["tops"].__setitem__("levels", 1),
    "node renamed": lambda c: _sub(c)[0]["parts"][0].__setitem__("node", "x"),
    "rule changed": lambda c: _sub(c)[0]["parts"][0].__setitem__("rule", "select"),
    "sublayer dropped": lambda c: _sub(c).pop(),
    "part dropped": lambda c: _sub(c)[0]["parts"].pop(),
    "claims emptied": lambda c: c.__setitem__("claims", {}),
    "N raised": lambda c: c.__setitem__("max_seq_len", 12),
    "vocab shrunk": lambda c: c.__setitem__("vocab", [0, 1, 2]),
    "causal flipped": lambda c: c.__setitem__("causal", False),
    "attention changed": lambda c: c.__setitem__("attention", "hardmax"),
    "scope widened": lambda c: c.__setitem__("scope", c["scope"].replace("1..6", "1..60")),
    "route exhaustive": lambda c: c.__setitem__("route", "exhaustive"),
    "route symmetry": lambda c: c.__setitem__("route", "symmetry"),
}
NOT_A_CERT = {
    "route unknown": lambda c: c.__setitem__("route", "magic"),
    "weights hash": lambda c: c.__setitem__("weights_sha256", "0" * 64),
    "program sink": lambda c: c["program"].__setitem__("sink", "find1_1"),
    "program node type": lambda c: next(iter(c["program"]["nodes"].values())).__setitem__(0, "Map"),
}


@pytest.mark.parametrize("what", sorted(TAMPER))
def test_tampered_claims_are_refused(khop_cert, what):
    m, cert = khop_cert
    c = copy.deepcopy(cert)
    TAMPER[what](c)
    v = checker.check(c, checker_model(m), sink_of(m))
    assert not v.valid


@pytest.mark.parametrize("what", sorted(NOT_A_CERT))
def test_tampered_identity_is_not_a_certificate(khop_cert, what):
    m, cert = khop_cert
    c = copy.deepcopy(cert)
    NOT_A_CERT[what](c)
    with pytest.raises(checker.NotACertificate):
        checker.check(c, checker_model(m), sink_of(m))


def test_a_newer_version_is_not_a_certificate(khop_cert):
    _, cert = khop_cert
    c = dict(cert, version=2)
    with pytest.raises(checker.NotACertificate):
        checker.certificate.parse(json.dumps(c).encode())


def test_a_changed_program_function_is_refused():
    """The certificate binds the program by structure; the check re-derives with the program it is given."""
    p = _copy_program(lambda t: t, lambda v: v + "!")
    q = _copy_program(lambda t: t, lambda v: v + "?")
    m = compile_program(q, {"a", "b"}, 2, causal=False)
    cert, v = build(m)
    assert v.valid
    assert not checker.check(json.loads(json.dumps(cert)), checker_model(m), p).valid


def _pitfalls():
    from depthcraft.rasp_programs import pitfalls
    nxt = rasp.categorical(rasp.Aggregate(rasp.Select(rasp.indices, rasp.indices, lambda k, q: k == q + 1),
                                          rasp.tokens)).named("nxt")
    gt = rasp.categorical(rasp.Aggregate(rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.GT),
                                         rasp.tokens)).named("gt")
    prev = rasp.categorical(rasp.Aggregate(rasp.Select(rasp.indices, rasp.indices, lambda k, q: k == q - 1),
                                           rasp.tokens)).named("prev")
    eqp = rasp.categorical(rasp.Aggregate(rasp.Select(rasp.tokens, prev, lambda k, q: k == q),
                                          rasp.indices)).named("eqprev")
    neq = rasp.categorical(rasp.Aggregate(rasp.Select(rasp.tokens, prev, lambda k, q: k != q),
                                          rasp.tokens)).named("neqprev")
    return {
        "first_token_non_unique": (pitfalls.first_token_non_unique(), {0, 1, 2}, 4, False),
        "first_token_non_unique causal": (pitfalls.first_token_non_unique(), {0, 1, 2}, 4, True),
        "none_read_downstream": (pitfalls.none_read_downstream(), {0, 1, 2}, 4, False),
        "histogram n10": (pitfalls.histogram(), {0, 1}, 10, False),
        "length causal": (pitfalls.length(), {0, 1}, 4, True),
        "comparison_on_none": (pitfalls.comparison_on_none(), {0, 1, 2}, 4, False),
        "key == query + 1, causal": (nxt, {"a", "b"}, 4, True),
        "GT, causal": (gt, {"a"}, 4, True),
        "query None at the first position": (eqp, {"a", "b"}, 4, False),
        "query None, k != q": (neq, {"a"}, 4, False),
    }


@pytest.mark.parametrize("name", sorted(_pitfalls()))
def test_tracr_pitfalls_are_not_certified(name):
    prog, vocab, n, causal = _pitfalls()[name]
    m = compile_program(prog, vocab, n, causal=causal)
    _, v = build(m)
    assert not v.valid


def test_bidirectional_fact_lookup_in_a_causal_model_is_refused():
    from depthcraft.constructions.primitives import POSITION, Read, fact_lookup
    r = fact_lookup(rasp.tokens, rasp.tokens, [Read(POSITION, name="where")], key_positions=lambda j: True,
                    name="fl")[0]
    m = compile_program(r, {"a", "b"}, 4, causal=False)
    assert build(m)[1].valid and counterexample(m, 4) is None
    m = clone(m, arch=dataclasses.replace(m.arch, causal=True))
    assert counterexample(m, 3) is not None
    assert not build(m)[1].valid


def test_scored_lookup_in_its_bidirectional_model_is_certified_and_right():
    r = _scored_program(4)
    m = compile_program(r, {"a", "b"}, 4, causal=False)
    assert build(m)[1].valid and counterexample(m, 4) is None


@pytest.mark.parametrize("scale", [float("nan"), float("inf"), 1e39, -1.0, 0.0, 1e-46])
def test_extreme_qk_scale_is_refused(scale):
    m = khop()
    subs = list(m.arch.sublayers)
    subs[0] = dataclasses.replace(subs[0], qk_scale=scale)
    m = clone(m, arch=dataclasses.replace(m.arch, sublayers=tuple(subs)))
    _, v = build(m)
    assert not v.valid


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_non_finite_weights_are_not_a_model(bad):
    m = clone(khop())
    m.params["layers"][1]["w_k"][0, 0, 0] = bad
    with pytest.raises(checker.ModelFileError):
        checker_model(m)


@pytest.mark.parametrize("premises", [
    {"inputs": [[]], "positions": "all"}, {"inputs": [[0] * 7]}, {"inputs": [["0"]]}, {"inputs": [[True]]},
    {"inputs": [[None]]}, {"inputs": [["BOS"]]}, {"inputs": [[0]], "positions": None},
    {"inputs": [[0]], "positions": "first"}])
def test_bad_exhaustive_premises_are_refused(premises):
    _, v = build(khop(), "exhaustive", premises)
    assert not v.valid


def test_weight_perturbations_certified_only_when_right():
    """A small perturbation campaign (:func:`test_the_long_perturbation_campaign_certifies_only_right_models`
    runs a larger one, ``slow``): whenever the checker certifies a perturbed k-hop model, the model is
    right on every input up to N."""
    base = khop(2, 4)
    rng = np.random.default_rng(0)
    for li, (spec, L) in enumerate(zip(base.arch.sublayers, base.params["layers"])):
        for name in ("w_q", "w_k", "w_v", "w_o"):
            for f in (0.0, 0.5, 2.0, -1.0):
                m = clone(base)
                col = int(rng.integers(L[name].shape[2]))
                m.params["layers"][li][name][:, :, col] *= np.float32(f)
                _, v = build(m)
                if v.valid:
                    assert counterexample(m, 4) is None, f"UNSOUND: layer {li} {name} col {col} x {f}"


@pytest.mark.parametrize("categorical_sink", [False, True])
def test_a_numerical_mean_with_default_none_is_not_certified(categorical_sink):
    """tracr compiles a numerical mean with BOS writing 0 where no key is selected, so the weights give 0
    where a program with ``default=None`` gives None (at position 1 of [1, 2, 3] under LT: nothing is
    selected). Checked against that program (the fingerprint does not hold the default), neither the
    checker nor the certifier may prove it: found by an adversarial review of issue 39's checker."""
    from depthcraft.verify.certify import prove

    def program(default):
        v = rasp.numerical(rasp.Map(lambda t: t - 1, rasp.tokens)).named("v")  # values {0, 1, 2}
        mean = rasp.numerical(rasp.Aggregate(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.LT), v,
                                             default=default)).named("mean")
        return (rasp.categorical(rasp.Map(lambda x: "zero" if x == 0 else "nonzero", mean)).named("z")
                if categorical_sink else mean)

    m = compile_program(program(0), [1, 2, 3], 4, causal=False)
    premises = {} if categorical_sink else {"atol": 1e-3}
    assert build(m, premises=premises)[1].valid  # the default-0 program: valid
    wrong = program(None)
    want = rasp.evaluate(wrong, [1, 2, 3])
    if categorical_sink:
        got = run_raw(m, [[1, 2, 3]])[0]
    else:  # a number at every position
        lg = np.asarray(m.forward_ids(m.encode([[1, 2, 3]], length=m.max_seq_len + 1)).logits, np.float64)
        got = [float(x) for x in np.asarray(m.decode(lg[:, 1:4])[0], np.float64)]
        assert abs(got[0]) < 1e-6  # 0, where the program gives None
    assert want[0] is None and got[0] is not None  # the weights differ from the default-None program
    assert not build(m, premises=premises, sink=wrong)[1].valid
    cert, _ = build(m, premises=premises)
    v = checker.check(checker.certificate.parse(checker.write("c.json.gz", cert)), checker_model(m), wrong)
    assert not v.valid, v.proved
    sink = sink_of(m)
    (sink if not categorical_sink else sink.inner).default = None  # the model's own program, changed
    assert not prove(m, **premises).certified


def _perturbations(m, rng):
    """(what, fn) pairs, each changing one thing in a copy of ``m``'s weights: per attention sublayer,
    one column of W_Q / W_K / W_V / W_O scaled (by 0, 0.1, 0.5, 0.9, 1.1, 2, -1) or noised (N(0, s) on
    the non-zero entries, s = 1e-3, 0.1, 1) and W_O's first two output columns swapped; per MLP, one
    entry of each weight scaled; each position embedding row zeroed; unembedding entries changed."""
    for li, (spec, L) in enumerate(zip(m.arch.sublayers, m.params["layers"])):
        if spec.kind == "attn":
            for name in ("w_q", "w_k", "w_v", "w_o"):
                for f in (0.0, 0.1, 0.5, 0.9, 1.1, 2.0, -1.0):
                    col = int(rng.integers(L[name].shape[2]))

                    def scale(mm, li=li, name=name, col=col, f=f):
                        mm.params["layers"][li][name][:, :, col] *= np.float32(f)
                    yield f"L{li} {name}[:, :, {col}] *= {f}", scale
                for sd in (1e-3, 1e-1, 1.0):
                    seed = int(rng.integers(1 << 30))

                    def noise(mm, li=li, name=name, sd=sd, seed=seed):
                        a = mm.params["layers"][li][name]
                        a += np.random.default_rng(seed).normal(0, sd, a.shape).astype(np.float32) * (a != 0)
                    yield f"L{li} {name} += N(0, {sd}) on non-zeros", noise
            if L["w_o"].shape[2] >= 2:
                def swap(mm, li=li):
                    a = mm.params["layers"][li]["w_o"]
                    a[:, :, [0, 1]] = a[:, :, [1, 0]]
                yield f"L{li} swap W_O output columns 0, 1", swap
        else:
            for name in ("w_1", "b_1", "w_2", "b_2"):
                for f in (0.0, 0.5, 2.0):
                    idx = tuple(int(rng.integers(k)) for k in L[name].shape)

                    def one(mm, li=li, name=name, idx=idx, f=f):
                        mm.params["layers"][li][name][idx] *= np.float32(f)
                    yield f"L{li} {name}{list(idx)} *= {f}", one
    for r in range(1, m.max_seq_len + 1):
        def pos(mm, r=r):
            mm.params["embed"]["pos"][r] = 0
        yield f"pos[{r}] = 0", pos
    u = m.params["unembed"]["w"]
    for _ in range(6):
        idx = (int(rng.integers(u.shape[0])), int(rng.integers(u.shape[1])))
        for f in (0.0, 0.4, 3.0):
            def un(mm, idx=idx, f=f):
                w = mm.params["unembed"]["w"]
                w[idx] = w[idx] * np.float32(f) if w[idx] != 0 else np.float32(f)
            yield f"unembed{list(idx)} -> {f}", un


def _pair_program():
    prev = rasp.categorical(rasp.Aggregate(rasp.Select(rasp.indices, rasp.indices, lambda k, q: k == q - 1),
                                           rasp.tokens)).named("prev")
    return rasp.categorical(rasp.SequenceMap(lambda a, b: (a or "_") + b, prev, rasp.tokens)).named("pair")


@pytest.mark.slow
@pytest.mark.parametrize("case", ["khop_doubling k=2 n=5", "prev+pair causal n=4"])
def test_the_long_perturbation_campaign_certifies_only_right_models(case):
    """Every perturbation of :func:`_perturbations` that the checker certifies leaves the model right on
    every input up to N (exhaustively); the campaign also refuses some (so it can fail)."""
    if case.startswith("khop"):
        m, evaluate = khop(2, 5), None
    else:
        prog = _pair_program()
        m, evaluate = compile_program(prog, {"a", "b", "c"}, 4, causal=True), tracr_eval(prog)
    refused, wrong = 0, []
    for what, fn in _perturbations(m, np.random.default_rng(0)):
        mm = clone(m)
        fn(mm)
        _, v = build(mm)
        if not v.valid:
            refused += 1
        elif counterexample(mm, m.max_seq_len, evaluate) is not None:
            wrong.append(what)
    assert wrong == [], f"UNSOUND: certified but wrong after {wrong}"
    assert refused > 0
