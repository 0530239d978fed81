"""Measure a model's structure from its weights (SPEC §3 conventions).

* ``attn_layers`` (L): attention sublayers with at least one non-zero weight.
* ``mlp_layers``: MLP sublayers with at least one non-zero weight.
* ``heads`` (H): the largest number of non-empty heads in one attention sublayer.
* ``d_model``: residual width; ``d_head``: largest QK width of a head (columns where
  both W_Q and W_K are non-zero); ``d_mlp``: largest number of live MLP hidden units.
* ``n_params``: ``{"nonzero": ..., "total": ...}``; total counts the dense tracr
  architecture (every matrix tracr allocates) when known.
* ``tracr_blocks``: tracr's ``num_layers`` (attention+MLP blocks, empty ones included).
"""

from __future__ import annotations

from typing import Any, Dict

import jax
import numpy as np

from depthcraft.constructions.model import CompiledModel


def _nonzero(a) -> bool:
    return bool(np.any(np.asarray(a) != 0))


def live_mlp_units(w1: np.ndarray, w2: np.ndarray) -> int:
    """Hidden units of an MLP ([d_in, h] and [h, d_out] weights) that both read and write something."""
    if not (w1.size and w2.size):
        return 0
    return int(((np.abs(w1).max(0) > 0) & (np.abs(w2).max(1) > 0)).sum())


def measure(model: CompiledModel) -> Dict[str, Any]:
    """Structure of ``model`` measured from its weights.

    Args:
        model: a compiled or trained model.
    Returns:
        dict with keys attn_layers, mlp_layers, heads, d_model, d_head, d_mlp,
        n_params {nonzero, total}, tracr_blocks (None for non-tracr models), and
        per_layer: list of {"kind", "heads"} for the non-empty sublayers.
    """
    attn_layers = mlp_layers = heads = d_head = d_mlp = 0
    per_layer = []
    for spec, p in zip(model.arch.sublayers, model.params["layers"]):
        if spec.kind == "attn":
            live = 0
            for h in range(p["w_q"].shape[0]):
                qk = (np.abs(p["w_q"][h]).max(0) > 0) & (np.abs(p["w_k"][h]).max(0) > 0) \
                    if p["w_q"].shape[1] and p["w_k"].shape[1] else np.zeros(0, bool)
                ov = _nonzero(p["w_v"][h]) and _nonzero(p["w_o"][h])
                if ov:
                    live += 1
                    d_head = max(d_head, int(qk.sum()))
            if live:
                attn_layers += 1
                heads = max(heads, live)
                per_layer.append({"kind": "attn", "heads": live})
        else:
            w1, w2 = np.asarray(p["w_1"]), np.asarray(p["w_2"])
            units = live_mlp_units(w1, w2)
            if units or _nonzero(p["b_2"]):
                mlp_layers += 1
                d_mlp = max(d_mlp, units)
                per_layer.append({"kind": "mlp", "hidden": units})
    leaves = jax.tree_util.tree_leaves(model.params)
    nonzero = int(sum(np.count_nonzero(np.asarray(a)) for a in leaves))
    total = int(model.meta.get("dense_params") or sum(np.size(a) for a in leaves))
    return {
        "attn_layers": attn_layers,
        "mlp_layers": mlp_layers,
        "heads": heads,
        "d_model": int(model.params["embed"]["token"].shape[1]),
        "d_head": d_head,
        "d_mlp": d_mlp,
        "n_params": {"nonzero": nonzero, "total": total},
        "tracr_blocks": model.meta.get("tracr_blocks"),
        "per_layer": per_layer,
    }
