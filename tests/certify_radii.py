"""Shared by the certificate's soundness tests: the measured float32 error of every sublayer.

Not a test module (pytest collects ``test_*.py`` only); the test files import it by name.
"""

import dataclasses
from typing import Iterator, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from depthcraft.constructions.model import sublayer_names
from depthcraft.constructions.runtime import forward


def _runs(model, ids: np.ndarray):
    """(float32 forward, float64 hardmax forward) of ``ids``, both with residuals and scores."""
    real = model.forward_ids(ids, collect_residuals=True, planned=False)
    with jax.enable_x64(True):
        params64 = jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float64), model.params)
        ideal = forward(params64, jnp.asarray(ids), dataclasses.replace(model.arch, attention="hardmax"),
                        dtype=jnp.float64, collect_residuals=True)
        ideal_scores = [np.asarray(s, np.float64) for s in ideal.scores]
        ideal_res = [np.asarray(x, np.float64) for x in ideal.residuals]
    return real, ideal_res, ideal_scores


def assert_scores_within_delta(model, cert, ids: np.ndarray) -> None:
    """Assert every head's float32 score of every visible (query, key) pair is within the head's
    certified ``delta`` of the float64 hardmax run's score (plus that run's own float64 rounding)."""
    real, _, ideal_scores = _runs(model, ids)
    t = ids.shape[1]
    visible = np.tril(np.ones((t, t), bool)) if model.arch.causal else np.ones((t, t), bool)
    for a, (s32, s64) in enumerate(zip(real.scores, ideal_scores)):
        s32 = np.asarray(s32, np.float64)
        for e in cert["per_layer"]:
            if e["layer"] != f"attn {a + 1}" or e["head"] is None or e["delta"] is None:
                continue
            h = e["head"]
            dev = np.abs(s32[:, h] - s64[:, h])[:, visible]
            slack = 1e-12 * np.abs(s64[:, h])[:, visible]
            assert (dev <= e["delta"] + slack).all(), (e["layer"], h, float(dev.max()), e["delta"])


def sublayer_errors(model, ids: np.ndarray) -> Tuple[Iterator[Tuple[str, float]], object]:
    """Run ``ids`` [batch, T] through the float32 forward and the float64 hardmax forward of the same
    weights (the certificate's ideal evaluation).

    Returns:
        (an iterator of (sublayer name, max |float32 - ideal| over the rows the sublayer writes, over
        every input and position), the float32 forward's output (``attn_mass`` and more)).
    """
    real, ideal_res, _ = _runs(model, ids)
    d = len(model.residual_labels)

    def errors():
        for i, (spec, name) in enumerate(zip(model.arch.sublayers, sublayer_names(model.arch))):
            rows = spec.rows("out_rows", d)
            real_rows = np.asarray(real.residuals[i + 1], np.float64)[..., rows]
            yield name, float(np.abs(real_rows - ideal_res[i + 1][..., rows]).max())

    return errors(), real


def assert_within_radii(model, cert, ids: np.ndarray) -> object:
    """Assert every sublayer's measured error is within its certified ``radius_out``; return the
    float32 forward's output."""
    errors, real = sublayer_errors(model, ids)
    for name, err in errors:
        radius = max(e["radius_out"] for e in cert["per_layer"] if e["layer"] == name)
        assert err <= radius, (name, err, radius)
    return real
