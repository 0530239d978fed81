"""tracr's sort, count_less_freq and shuffle_dyck programs: MLP, mean-head and parallel-head bounds (issue 30).

* ``sort_1``, ``sort_2`` and ``sort_3`` of tracr's ``TEST_CASES`` are certified (their
  SelectorWidth read-out MLP once turned a radius of 1.5e-3 into 0.6: the interval bound
  summed the two units of each threshold pair, whose difference does not move), and the
  exhaustive check agrees;
* heads that write different blocks are summed block by block, and an MLP too large to
  enumerate is certified part by part, with the same certificate as the whole where both run;
* the mean-head bound tanh(x / 4) against random weighted means, and attained;
* soundness: on every input of every length (sort) or random and all-equal inputs
  (sort_freq, count_less_freq), every sublayer's measured float32 error against the float64
  hardmax run lies within its certified radius, including the sublayers certified before a
  program's first failure;
* must fail: ``make_sort`` at N = 11 (tracr's SelectorWidth cannot count to 10 at the default
  ``mlp_exactness``) is not certified, and the model is wrong on a concrete input against both
  tracr's evaluator and the definition of sorting.
"""

import itertools
import logging
import math

import numpy as np
import pytest
from tracr.compiler import lib
from tracr.compiler import test_cases as tracr_cases
from tracr.rasp import rasp

from certify_radii import sublayer_errors
from depthcraft import check_program, compile_program
from depthcraft.verify.certify import certify
from depthcraft.verify.certify.heads import weighted_mean_deviation

logging.getLogger("absl").setLevel(logging.ERROR)  # tracr's SequenceMap warnings

CASES = {c["testcase_name"]: c for c in tracr_cases.TEST_CASES}
SORTS = ["sort_1", "sort_2", "sort_3"]


def _model(name):
    case = CASES[name]
    return case, compile_program(case["program"], case["vocab"], case["max_seq_len"], causal=False)


@pytest.mark.parametrize("name", SORTS)
def test_tracr_sort_programs_are_certified_and_exact_on_every_input(name):
    case = CASES[name]
    program = case["program"]
    report = check_program(program, vocab=case["vocab"], max_seq_len=case["max_seq_len"], certify=True,
                           exhaustive=True, samples=20, hypothesis_examples=5, seed=0)
    cert = report["certificate"]
    assert cert["certified"], cert["uncertified"]
    assert report["passed"]
    ex = report["checks"]["exhaustive"]
    n, v = case["max_seq_len"], len(case["vocab"])
    assert ex["inputs"] == sum(v ** k for k in range(1, n + 1)) and ex["exact"] is True
    # the definition, on tracr's own example: sorted by the key (ties by position)
    got = compile_program(program, case["vocab"], n, causal=False).run([case["test_input"]])[0].tolist()
    assert got == case["expected_output"]


@pytest.mark.parametrize("x", [1e-4, 0.01, 0.3, 2.0])
def test_weighted_mean_deviation_bounds_and_reaches_tanh_quarter(x):
    rng = np.random.default_rng(2)
    r = math.exp(x)
    bound = weighted_mean_deviation(x)
    assert bound == pytest.approx(math.tanh(x / 4), rel=1e-9)
    for _ in range(200):
        m = int(rng.integers(1, 40))
        v = rng.uniform(0, 1, m)
        w = rng.uniform(1, r, m)
        assert abs(float(w @ v / w.sum()) - float(v.mean())) <= bound
    # the extreme: a fraction 1 / (sqrt R + 1) of many keys at 1 weighted R, the rest at 0 weighted 1
    m = 100_000
    k = round(m / (math.sqrt(r) + 1))
    dev = k * r / (k * r + m - k) - k / m
    assert dev >= 0.999 * bound


SOUNDNESS = ["sort_1", "sort_2", "sort_3", "sort_freq", "make_count_less_freq_categorical_1"]


def _inputs(case, rng):
    """Every input of every length when there are at most ~1400, else random, all-equal and sorted ones."""
    vocab, n = sorted(case["vocab"]), case["max_seq_len"]
    by_len = {}
    for length in range(1, n + 1):
        if len(vocab) ** length <= 1024:
            rows = [list(t) for t in itertools.product(vocab, repeat=length)]
        else:
            rows = [[vocab[int(i)] for i in rng.integers(len(vocab), size=length)] for _ in range(300)]
            rows += [[v] * length for v in vocab] + [sorted(r) for r in rows[:20]]
        by_len[length] = rows
    return by_len


@pytest.mark.parametrize("name", SOUNDNESS)
def test_measured_float32_error_within_the_certified_radius(name):
    case, model = _model(name)
    cert = certify(model)
    radius = {}
    for e in cert["per_layer"]:
        radius[e["layer"]] = max(radius.get(e["layer"], 0.0), e["radius_out"])
    assert radius, cert["uncertified"]
    if name in SORTS:
        assert cert["certified"], cert["uncertified"]
    checked = set()
    for length, rows in _inputs(case, np.random.default_rng(3)).items():
        ids = model.encode(rows, length=length + 1)
        errors, _ = sublayer_errors(model, ids)
        for layer, err in errors:
            if layer in radius:  # every sublayer certified before the first failure
                assert err <= radius[layer], (name, length, layer, err, radius[layer])
                checked.add(layer)
    assert checked == set(radius)


def test_sort_at_n11_is_not_certified_and_the_model_is_wrong():
    n = 11
    program = lib.make_sort(rasp.tokens, rasp.tokens, max_seq_len=n, min_key=1)
    model = compile_program(program, {1, 2, 3, 4}, n, causal=False)
    cert = certify(model)
    assert not cert["certified"] and cert["uncertified"]
    xs = [3, 1, 4, 1, 2, 4, 2, 3, 1, 4, 2]
    want = sorted(xs)  # the definition: sorted by token, ties by position (keys x + i / n are unique)
    assert rasp.evaluate(program, xs) == want
    got = model.run([xs])[0].tolist()
    assert got != want


# ------------------------------------------------------------------ parallel heads and MLPs


def _shuffle_dyck2():
    program = lib.make_shuffle_dyck(["()", "[]"])
    return program, compile_program(program, set("()[]"), 4, causal=False)


def test_heads_sum_per_block_equals_the_projection_of_every_combination():
    """heads_sum gives, on each block, exactly the block's projection of the full cross product."""
    from depthcraft.verify.certify.report import heads_sum
    from depthcraft.verify.certify.state import Block

    rng = np.random.default_rng(4)
    out_rows = np.arange(5)
    blocks = {"a": Block("a", np.array([0, 1]), [None, None], "written"),
              "b": Block("b", np.array([2]), [None], "written"),
              "c": Block("c", np.array([3, 4]), [0, 1], "written")}
    cols_of = {0: [0, 1], 1: [2], 2: [0, 1, 3, 4]}  # head 2 writes blocks a and c
    writes = []
    for h in range(3):
        per_kind = []
        for kind in (0, 1):
            v = np.zeros((4, 5))
            v[:, cols_of[h]] = rng.integers(0, 3, (4, len(cols_of[h])))
            per_kind.append((v, rng.integers(0, 5, 4)))
        writes.append(per_kind)
    got = {tuple(cols): tot for cols, tot in heads_sum(writes, blocks, out_rows)}
    assert set(got) == {(0, 1), (2,), (3, 4)}
    for kind in (0, 1):
        full = {}
        for i, j, k in itertools.product(range(4), repeat=3):
            vec = writes[0][kind][0][i] + writes[1][kind][0][j] + writes[2][kind][0][k]
            g = max(writes[0][kind][1][i], writes[1][kind][1][j], writes[2][kind][1][k])
            for cols in got:
                key = (cols, tuple(vec[list(cols)]))
                full[key] = min(full.get(key, 10 ** 9), g)
        for cols, tot in got.items():
            vecs, guards = tot[kind]
            mine = {(cols, tuple(v)): int(g) for v, g in zip(vecs, guards)}
            want = {key: g for key, g in full.items() if key[0] == cols}
            assert set(mine) == set(want)
            # a guard may only be smaller (a head that does not write the block adds nothing to it)
            assert all(mine[key] <= want[key] for key in want)


def test_split_mlp_parts_compute_the_whole_mlp():
    from depthcraft.verify.certify.report import split_mlp
    from depthcraft.verify.certify.state import blocks_of

    _, model = _shuffle_dyck2()
    d = len(model.residual_labels)
    blocks = {b.name: b for b in blocks_of(model)}
    rng = np.random.default_rng(5)
    seen_split = False
    for spec, p in zip(model.arch.sublayers, model.params["layers"]):
        if spec.kind != "mlp":
            continue
        in_rows, out_rows = spec.rows("in_rows", d), spec.rows("out_rows", d)
        w1, b1, w2, b2 = (np.asarray(p[k], np.float64) for k in ("w_1", "b_1", "w_2", "b_2"))
        x = np.zeros((64, d))
        x[:, in_rows] = rng.normal(0, 1, (64, len(in_rows)))
        whole = np.maximum(x[:, in_rows] @ w1 + b1, 0) @ w2 + b2
        parts = split_mlp(spec, p, d, blocks)
        seen_split |= len(parts) > 1
        covered = np.zeros(len(out_rows), bool)
        for sub, q in parts:
            rows = sub.rows("out_rows", d)
            cols = np.searchsorted(out_rows, rows)
            assert not covered[cols].any(), "two parts write one row"
            covered[cols] = True
            part = np.maximum(x[:, sub.rows("in_rows", d)] @ q["w_1"] + q["b_1"], 0) @ q["w_2"] + q["b_2"]
            np.testing.assert_allclose(part, whole[:, cols], rtol=1e-12, atol=1e-12)
            for b in blocks.values():  # a block is written by one part, whole
                hit = np.isin(b.rows, rows)
                assert hit.all() or not hit.any() or not np.isin(b.rows, out_rows).all()
        assert covered.all()
    assert seen_split


def test_parallel_heads_and_mlps_give_the_same_certificate_below_the_enumeration_limit(monkeypatch):
    """With MAX_TUPLES below the full cross products (4 heads' means, one MLP reading 5 blocks), the
    per-block sum and the split MLP give the same certificate as the unsplit run."""
    import depthcraft.verify.certify.report as report_mod
    import depthcraft.verify.certify.state as state_mod

    _, model = _shuffle_dyck2()
    full = certify(model)
    monkeypatch.setattr(state_mod, "MAX_TUPLES", 5000)
    monkeypatch.setattr(report_mod, "MAX_TUPLES", 5000)
    split = certify(model)
    assert [(e["layer"], e["head"]) for e in split["per_layer"]] == [(e["layer"], e["head"]) for e in full["per_layer"]]
    for a, b in zip(split["per_layer"], full["per_layer"]):  # equal up to the bounds' own float64 terms
        assert a["radius_out"] == pytest.approx(b["radius_out"], rel=1e-9)
        assert (a["delta"] is None) == (b["delta"] is None)
        assert a["delta"] is None or a["delta"] == pytest.approx(b["delta"], rel=1e-9)
    assert [u["why"] for u in split["uncertified"]] == [u["why"] for u in full["uncertified"]]
    assert not any("too large" in u["why"] for u in split["uncertified"])


def test_shuffle_dyck_measured_error_within_the_certified_radius():
    program, model = _shuffle_dyck2()
    cert = certify(model)
    assert cert["float32_matches_hardmax"], cert["uncertified"]
    radius = {}
    for e in cert["per_layer"]:
        radius[e["layer"]] = max(radius.get(e["layer"], 0.0), e["radius_out"])
    for length in (2, 4):  # every input of these lengths (the longest: the most keys per query)
        rows = [list(t) for t in itertools.product("()[]", repeat=length)]
        errors, _ = sublayer_errors(model, model.encode(rows, length=length + 1))
        for layer, err in errors:
            assert err <= radius[layer], (length, layer, err, radius[layer])
