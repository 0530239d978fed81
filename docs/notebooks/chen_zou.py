# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Chen & Zou (ICML 2024): four tasks, and the attention layers each one needs
#
# Chen & Zou study what one, two and three attention layers can do, with four tasks
# (SPEC §4.2; the paper's full text was not available, so the task formats are this project's
# formalisation of its description):
#
# | task | what the last position must output | construction | layers |
# |---|---|---|---|
# | **SC**, sequence classification | the label of one of `M` memorised sequences | memorisation heads | 1 |
# | **ICQA**, in-context question answering | the answer paired with the query's question in the context | copy, then match | 2 |
# | **TM**, template matching | the label of the input's equality pattern, on unseen tokens too | parse, then map | 2 |
# | **ICTM**, in-context template matching | the label of the context block whose pattern the query shares | parse, copy, match | 3 |
#
# For each task this notebook builds the construction (softmax attention, no MLP), prints its RASP
# program, checks it against the task's definition on random inputs and edge cases, and shows
# where every head attends from the read-out position on one input: the mechanism.

# %%
import numpy as np

from depthcraft.verify import lookup, views
from depthcraft.verify.checks import check_batches, label
from depthcraft.verify.structure import measure
from depthcraft.verify.views import program_listing
from depthcraft.verify.views.data import HeadView


def study(name, **given):
    """Build ``name`` at its first ``verify --all`` parameters (updated by ``given``), check it, show one input."""
    construction = lookup.get(name)
    r = lookup.resolve(name, {**construction.defaults[0], **given})
    model = r.build()
    s = measure(model)
    bound = r.bound()
    print(f"{name}: L = {s['attn_layers']} (bound {bound['attn_layers']}), H = {s['heads']}, "
          f"d_model = {s['d_model']}, MLP layers = {s['mlp_layers']}")
    print("\n".join(program_listing(construction.program(r.params))))
    rng = np.random.default_rng(0)
    batches = [r.task.sample(r.params, rng, 200)] + list(r.task.edge_cases(r.params))
    result = check_batches(model, r.task, r.params, label(r.task, r.params, batches), "notebook")
    print(f"checked {result.inputs} inputs, {result.failed} wrong")
    assert result.failed == 0
    x = r.task.sample(r.params, np.random.default_rng(1), 1)[0]
    text = r.task.format_tokens(r.params, x.tolist())
    data, _ = views.for_construction(name, r.params, text)
    last = len(data.tokens_text) - 1
    print(f"\ninput     {text}")
    print(f"output at the last position: {data.output_text[-1]} (reference {data.reference_text[-1]})")
    for h in (v for v in data.sublayers if isinstance(v, HeadView)):
        top = np.argsort(h.weights[last])[::-1][:3]
        keys = ", ".join(f"{int(k)}:{data.tokens_text[k]} ({h.weights[last, k]:.2f})" for k in top
                         if h.weights[last, k] > 0.01)
        print(f"  layer {h.layer} head {h.head} writes {', '.join(h.writes)}; from position {last} it attends {keys}")
    return data


# %% [markdown]
# ## SC: one layer memorises
#
# `s_1 .. s_n CLS`; the output at `CLS` is the sequence's label. At `CLS`, heads with fixed random
# QK tables attend over the sequence; their OV matrices are solved (least squares) so that the
# summed read-out is each of the `M` sequences' one-hot label. Heads needed:
# `ceil((M - 1) / (n + V - 2))` for softmax (`M` is the paper's bound).

# %%
sc = study("sc_memorize")

# %% [markdown]
# ## ICQA: copy, then match
#
# `q_1 a_1 q_2 a_2 ... q_m a_m q*`; the output is the answer paired with `q*`. Layer 1 (a
# previous-token head) copies each question into its answer's position; layer 2 attends from
# the query to the position whose copied question equals it, and reads the answer there.

# %%
icqa = study("icqa_copy_match")

# %% [markdown]
# ## TM: parse, then map
#
# An injective substitution of one of `K` templates (equality patterns such as `x y x z`), then
# `CLS`; the output is the template's label. Layer 1 parses each position's equality pattern
# (where the same token occurred first); layer 2 maps the parsed pattern at `CLS` to the label
# with memorisation heads. Weights see tokens only through equality, so tokens never seen in
# training work too.

# %%
tm = study("tm_parse_map")

# %% [markdown]
# ## ICTM: parse, copy, match
#
# `m` example blocks (`n` tokens and a label each), then a query block; the output is the label of
# the example whose template the query shares. Layer 1 parses each block's pattern, layer 2 (`n`
# heads, one per offset) copies it to the block's label position and to the query's last
# position, layer 3 matches the query's pattern and reads the label.

# %%
ictm = study("ictm_parse_copy_match")

# %% [markdown]
# ## Depth and width, side by side
#
# The four constructions meet the depths of the paper (1, 2, 2 and 3 attention layers, no MLP).
# The trained cross-check (`depthcraft train icqa|tm|ictm --preset cpu`,
# `results/crosscheck/*_cpu/`) asks whether gradient descent finds solutions at those depths;
# `docs/crosscheck.md` holds the claims and their verdicts.
