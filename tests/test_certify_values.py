"""Value analysis for categorical aggregates (issue 30, item 3): a level of several positions.

sort_unique's last head, ``Aggregate(Select(target_pos, indices, ==), vals)``, can attend to
several keys (repeated tokens share a target position). It is clean when every selected key
holds one value of ``vals``: proved when the key determines ``vals`` (``target_pos`` is a
strict-order SelectorWidth of ``vals`` itself), never when ``vals`` varies among keys that
share a target position (then the compiled model really averages and is wrong).
"""

import itertools

import numpy as np
import pytest
from tracr.compiler.lib import make_sort_unique
from tracr.rasp import rasp

from depthcraft.constructions.compiler import compile_with_tracr
from depthcraft.verify.certify import certify
from depthcraft.verify.certify.values import ValueAnalysis, single_valued

VOCAB, N = [1, 2, 3], 4


def _wrong_inputs(model, program, vocab, n):
    """Every input of length 1..n where the model differs from tracr's RASP evaluator."""
    wrong = []
    for length in range(1, n + 1):
        xs = np.array(list(itertools.product(vocab, repeat=length)))
        for x, got in zip(xs, model.run(xs)):
            want = rasp.evaluate(program, [int(v) for v in x])
            if any(w != g for w, g in zip(want, got)):
                wrong.append([int(v) for v in x])
    return wrong


def _sort_unique_vals_tokens():
    return make_sort_unique(rasp.tokens, rasp.tokens)


def _sort_unique_vals_indices():
    # keys repeat, and the aggregated SOp (indices) differs between keys of one target position
    return make_sort_unique(rasp.indices, rasp.tokens)


@pytest.fixture(scope="module")
def sorted_models():
    out = {}
    for name, make in (("tokens", _sort_unique_vals_tokens), ("indices", _sort_unique_vals_indices)):
        program = make()
        out[name] = (program, compile_with_tracr(program, vocab=VOCAB, max_seq_len=N, causal=False))
    return out


def test_sort_unique_is_certified_and_exhaustively_right(sorted_models):
    program, model = sorted_models["tokens"]
    cert = certify(model)
    assert cert["certified"] is True, cert["uncertified"]
    assert any("level_clean_by" in e for e in cert["per_layer"])  # the value analysis was needed
    assert _wrong_inputs(model, program, VOCAB, N) == []


def test_sort_unique_of_values_the_key_does_not_determine_is_not_certified(sorted_models):
    program, model = sorted_models["indices"]
    cert = certify(model)
    assert cert["certified"] is False and cert["float32_matches_hardmax"] is False
    assert "several positions" in cert["uncertified"][0]["why"]
    wrong = _wrong_inputs(model, program, VOCAB, N)
    assert [1, 1] in wrong  # the model averages indices 0 and 1: really wrong


@pytest.mark.parametrize("name", ["tokens", "indices"])
def test_certification_and_the_exhaustive_check_agree(sorted_models, name):
    program, model = sorted_models[name]
    assert certify(model)["certified"] is (not _wrong_inputs(model, program, VOCAB, N))


def test_the_analysis_rules(sorted_models):
    program, model = sorted_models["tokens"]
    link = model.program
    an = ValueAnalysis(link)
    agg = link.nodes[link.sink]
    key = agg.selector.keys  # target_pos = SelectorWidth(Select(tokens, tokens, <))
    assert an.injective(rasp.indices) and not an.injective(rasp.tokens) and not an.injective(key)
    assert an.determines(key, rasp.tokens) and not an.determines(key, rasp.indices)
    assert single_valued(link, agg) is not None
    program, model = sorted_models["indices"]
    assert single_valued(model.program, model.program.nodes[model.program.sink]) is None


def test_a_selector_width_of_an_equality_does_not_determine_its_source():
    # w = #{j : x_j == x_i} is the same for x = 1 and x = 2 in [1, 2]: no order, no proof
    x = rasp.categorical(rasp.Map(lambda t: t, rasp.tokens))
    w = rasp.categorical(rasp.SelectorWidth(rasp.Select(x, x, rasp.Comparison.EQ)))
    agg = rasp.categorical(rasp.Aggregate(rasp.Select(w, rasp.indices, rasp.Comparison.EQ), rasp.tokens))
    model = compile_with_tracr(agg, vocab=VOCAB, max_seq_len=3, causal=False)
    assert single_valued(model.program, model.program.nodes[model.program.sink]) is None
    cert = certify(model)
    assert cert["certified"] is (not _wrong_inputs(model, agg, VOCAB, 3))
    assert cert["certified"] is False


def test_the_analysis_is_void_when_the_heads_table_is_not_the_selector():
    # swap the last head's query rows of indices 1 and 2: query 1 now attends to target position 2
    program = _sort_unique_vals_tokens()
    model = compile_with_tracr(program, vocab=VOCAB, max_seq_len=N, causal=False)
    i = max(j for j, s in enumerate(model.arch.sublayers) if s.kind == "attn")
    q_rows = list(model.arch.sublayers[i].rows("q_rows", len(model.residual_labels)))
    a, b = (q_rows.index(model.residual_labels.index(f"indices:{v}")) for v in (1, 2))
    wq = np.array(model.params["layers"][i]["w_q"])
    wq[:, [a, b]] = wq[:, [b, a]]
    model.params["layers"][i]["w_q"] = wq
    cert = certify(model)
    assert cert["certified"] is False and cert["float32_matches_hardmax"] is False
    assert any(u["check"] == "float32" and "value analysis" in u["why"] for u in cert["uncertified"])
    assert _wrong_inputs(model, program, VOCAB, N)
