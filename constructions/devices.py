"""Data parallelism over the local JAX devices: one batch split by rows over every device.

The checks (:mod:`depthcraft.verify.checks`) run each forward call of ``B`` rows as one
SPMD program over a :class:`jax.sharding.Mesh` of every local device with one axis,
``"batch"``: the token ids are placed with ``NamedSharding(mesh, PartitionSpec("batch"))``
(device ``i`` holds rows ``i * B / n .. (i + 1) * B / n - 1``), the weights are replicated
(``PartitionSpec()``), and the jitted forward (:func:`depthcraft.constructions.runtime.forward`)
runs on every device at once; the rows of a transformer forward are independent, so the
outputs are those of one device. ``B`` must be a multiple of the device count
(:func:`rows_multiple`; the checks pad their calls to it).

With one device (the default on a CPU) nothing here changes the data or the code path:
:func:`split_rows` and :func:`replicate` return their input. On a CPU, JAX makes several
host devices (one per core, say) with ``XLA_FLAGS=--xla_force_host_platform_device_count=N``
or ``jax.config.update("jax_num_cpu_devices", N)``, set before JAX's first use; see
:func:`use_cpu_devices` and docs/performance.md, "Exhaustive checks".
"""

from __future__ import annotations

import functools
import os
from typing import Any, Optional

import numpy as np

from depthcraft.constructions.errors import ParameterError

#: Environment variable: number of CPU devices JAX should make (:func:`use_cpu_devices`).
ENV = "DEPTHCRAFT_CPU_DEVICES"
#: Name of the mesh axis the batch is split along.
AXIS = "batch"


@functools.lru_cache(maxsize=None)
def _mesh():
    import jax
    from jax.sharding import Mesh

    devices = jax.local_devices()
    return Mesh(np.asarray(devices), (AXIS,)) if len(devices) > 1 else None


def batch_mesh():
    """The mesh of every local device along the axis ``"batch"``, or None with one device.

    Made once per process (JAX's devices do not change after it starts).
    """
    return _mesh()


def device_count() -> int:
    """Number of local devices the batch is split over (1 = no splitting)."""
    mesh = batch_mesh()
    return 1 if mesh is None else mesh.size


def rows_multiple(rows: int) -> int:
    """``rows`` rounded up to a multiple of :func:`device_count` (every device gets the same number)."""
    n = device_count()
    return -(-rows // n) * n


def split_rows(ids: Any):
    """``ids`` [B, ...] placed with its rows split evenly over every local device (as it is with one device).

    Args:
        ids: a numpy or JAX array whose first axis is the batch.
    Returns:
        A JAX array sharded with ``NamedSharding(mesh, PartitionSpec("batch"))``, or ``ids``
        unchanged when there is one device.
    Raises:
        ValueError: B is not a multiple of the device count.
    """
    mesh = batch_mesh()
    if mesh is None:
        return ids
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    if ids.shape[0] % mesh.size:
        raise ValueError(f"a batch of {ids.shape[0]} rows cannot be split evenly over {mesh.size} devices; "
                         f"pad it to a multiple of {mesh.size} (rows_multiple)")
    return jax.device_put(ids, NamedSharding(mesh, PartitionSpec(AXIS)))


def replicate(tree: Any):
    """A pytree of arrays with a full copy on every local device (``PartitionSpec()``); as it is with one device."""
    mesh = batch_mesh()
    if mesh is None:
        return tree
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    return jax.device_put(tree, NamedSharding(mesh, PartitionSpec()))


def use_cpu_devices(count: Optional[int] = None) -> int:
    """Ask JAX for ``count`` CPU devices (default: ``$DEPTHCRAFT_CPU_DEVICES``), before JAX's backends start.

    Does nothing when neither is given, or when ``XLA_FLAGS`` already forces a host device
    count. Must run before JAX makes its first array (the CLI calls it at start).

    Args:
        count: devices to make (>= 1), or None to read :data:`ENV`.
    Returns:
        The count asked for (0 when nothing was asked).
    Raises:
        ParameterError: ``count`` (or the variable) is not a positive integer.
    """
    if count is None:
        value = os.environ.get(ENV, "").strip()
        if not value:
            return 0
        try:
            count = int(value)
        except ValueError:
            raise ParameterError(f"{ENV} must be a positive integer, got {value!r}") from None
    if count < 1:
        raise ParameterError(f"the number of CPU devices must be >= 1, got {count}")
    if "xla_force_host_platform_device_count" in os.environ.get("XLA_FLAGS", ""):
        return 0
    import jax

    jax.config.update("jax_num_cpu_devices", count)
    return count


__all__ = ["AXIS", "ENV", "batch_mesh", "device_count", "replicate", "rows_multiple", "split_rows",
           "use_cpu_devices"]
