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


def sublayer_errors(model, ids: np.ndarray) -> Tuple[Iterator[Tuple[str, float]], object]:
    """Run ``ids`` [batch, T] through the float32 forward and the float64 hardmax forward of the same
    weights (the certificate's ideal evaluation).

    Returns:
        (an iterator of (sublayer name, max |float32 - ideal| over the rows the sublayer writes, over
        every input and position), the float32 forward's output (``attn_mass`` and more)).
    """
    real = model.forward_ids(ids, collect_residuals=True, planned=False)
    with jax.enable_x64(True):
        params64 = jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float64), model.params)
        ideal = forward(params64, jnp.asarray(ids), dataclasses.replace(model.arch, attention="hardmax"),
                        dtype=jnp.float64, collect_residuals=True)
        ideal_res = [np.asarray(x, np.float64) for x in ideal.residuals]
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
