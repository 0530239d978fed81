"""The layer ablation from shared prefixes (``runtime.ablated_logits``) gives what whole ablated models give."""

import dataclasses

import numpy as np

from depthcraft.constructions.runtime import ablated_logits
from depthcraft.verify import lookup
from depthcraft.verify.ablation import ablate, ablate_from_embeddings, ablation_inputs, without_layer

CASES = [
    ("khop_doubling", {"k": 4, "n": 32}),
    ("khop_constant_width", {"k": 4, "n": 64}),
    ("retrieval_doubling", {"d": 4}),
    ("tm_parse_map", {"attention": "relu"}),
    ("icqa_copy_match", {"attention": "softmax"}),
]


def test_ablated_logits_equal_the_whole_ablated_models(resolved):
    """Bit for bit: the suffix from the shared residual stream is the model with zero output weights."""
    r, model = resolved
    task = r.task
    x = task.sample(r.params, np.random.default_rng(1), 8)
    ids = model.encode(x, length=model.max_seq_len + 1)
    got = np.asarray(ablated_logits(model.jparams, ids, model.arch))
    n_attn = sum(s.kind == "attn" for s in model.arch.sublayers)
    assert got.shape[0] == n_attn >= 1
    for a in range(n_attn):
        want = np.asarray(without_layer(model, a).forward_ids(ids).logits)
        np.testing.assert_array_equal(got[a], want)


def test_ablation_outcomes_unchanged(resolved):
    r, model = resolved
    task = r.task
    inputs = ablation_inputs(task, r.params, 60, seed=0)
    new = ablate(model, task, r.params, inputs)
    assert new == ablate_from_embeddings(model, task, r.params, inputs)
    assert all(a["exact_fraction"] < 1 for a in new)  # the catalogue's layers are all needed


def test_ablation_outcomes_unchanged_with_a_redundant_layer():
    """A duplicated attention layer: both copies redundant, in the new ablation as in the old one."""
    r = lookup.resolve(lookup.get("icqa_copy_match"), {"attention": "softmax"})
    model = r.build()
    specs, layers = model.arch.sublayers, model.params["layers"]
    doubled = dataclasses.replace(model, arch=dataclasses.replace(model.arch, sublayers=(specs[0],) + specs),
                                  params=dict(model.params, layers=[layers[0]] + list(layers)))
    task = r.task
    inputs = [task.sample(r.params, np.random.default_rng(0), 100)] + list(task.edge_cases(r.params))
    new = ablate(doubled, task, r.params, inputs)
    assert new == ablate_from_embeddings(doubled, task, r.params, inputs)
    assert [a["redundant"] for a in new] == [True, True, False]
