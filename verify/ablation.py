"""Necessity of every attention layer: zero one attention sublayer at a time, measure exactness.

A construction claims a depth; if removing one of its attention layers leaves the
model exact on the checked inputs, that layer is redundant and the claimed depth is not
tight for this construction. :func:`ablate` zeroes each attention sublayer's output
projection (the layer then adds exactly 0 to the residual stream) and runs the same
inputs; ``exact_fraction`` is the fraction of inputs still exact at every scored
position. A layer with ``exact_fraction == 1`` is redundant.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Iterable, List

import numpy as np

from depthcraft.constructions.model import CompiledModel
from depthcraft.verify.checks import check_batches, pack
from depthcraft.verify.tasks.base import Task


def without_layer(model: CompiledModel, attn_index: int) -> CompiledModel:
    """A copy of ``model`` whose ``attn_index``-th attention sublayer (0-based) writes nothing.

    Raises:
        IndexError: the model has fewer attention sublayers.
    """
    attn = [i for i, s in enumerate(model.arch.sublayers) if s.kind == "attn"]
    target = attn[attn_index]
    layers = [dict(layer) for layer in model.params["layers"]]
    layers[target]["w_o"] = np.zeros_like(np.asarray(layers[target]["w_o"]))
    if "b_o" in layers[target]:
        layers[target]["b_o"] = np.zeros_like(np.asarray(layers[target]["b_o"]))
    params = dict(model.params, layers=layers)
    return dataclasses.replace(model, params=params, meta=dict(model.meta, ablated_attention_layer=attn_index))


def ablate(model: CompiledModel, task: Task, p: Dict[str, Any], inputs: List[np.ndarray]) -> List[Dict[str, Any]]:
    """Exactness with each attention layer removed in turn.

    Args:
        model: the compiled model.
        task, p: its task and resolved parameters.
        inputs: the checked inputs, a list of [b_i, n_i] arrays.
    Returns:
        One entry per attention layer, in order: ``{"layer": l (1-based), "exact_fraction": f,
        "redundant": f == 1.0}``.
    """
    n_attn = sum(s.kind == "attn" for s in model.arch.sublayers)
    packed = pack(model, task, p, inputs)  # one reference and one encoded batch for every ablated layer
    out = []
    for a in range(n_attn):
        res = check_batches(without_layer(model, a), task, p, packed, f"ablate layer {a + 1}")
        frac = 1.0 - res.failed / res.inputs if res.inputs else 0.0
        out.append({"layer": a + 1, "exact_fraction": round(frac, 6), "redundant": res.inputs > 0 and res.failed == 0})
    return out


def ablation_inputs(task: Task, p: Dict[str, Any], samples: int, seed: int) -> List[np.ndarray]:
    """Random inputs (the task's distribution, ``seed``) plus the task's edge cases."""
    rng = np.random.default_rng(seed)
    batches: Iterable[np.ndarray] = [task.sample(p, rng, samples)] if samples > 0 else []
    return list(batches) + list(task.edge_cases(p))
