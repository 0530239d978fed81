"""The one place where the project patches tracr (and the Haiku it assembles with), for speed only.

Every patch here changes how long tracr takes, never a number it produces:
``tests/test_tracr_patches.py`` compiles several constructions with and without
the patches and compares every weight bit for bit.

The patches are active only inside :func:`applied` (the compiler enters it
around tracr's block building and assembly); outside it tracr and Haiku are
unmodified. :func:`disabled` switches named patches off inside it (benchmarks
use it to measure tracr as shipped).

Patches (``PATCHES``):

``zero_init``
    ``haiku.initializers.TruncatedNormal.__call__`` returns zeros. tracr's
    ``assemble_craft_model`` runs a Haiku ``init`` (random ``TruncatedNormal``
    weights, one XLA compile per shape) and then overwrites every transformer
    weight with zeros and the compiled values; embeddings use constant
    initialisers. Zeros there change no weight, only the time (~5x faster
    compile).
``fast_project``
    ``tracr.craft.vectorspace_fns.project`` builds its 0/1 matrix by index
    instead of through ``Linear.from_action``, which makes a
    ``np.eye(num_dims)`` row for every basis direction of the source space:
    O(D_from * D_to) time and memory per direction, O(D^3) over tracr's
    assembly of a D-wide residual stream. The patched version writes the
    same float64 matrix (1.0 where the directions are equal, 0.0 elsewhere)
    in O(D_from + D_to). Measured in docs/performance.md (section Build).
``fast_basis_vector``
    ``tracr.craft.bases.VectorSpaceWithBasis.vector_from_basis_direction``
    builds its one-hot vector as a row of ``np.eye(num_dims)``: O(D^2) time and
    memory per vector. tracr's blocks and the project's hand-built heads
    (``constructions.heads``: one call per entry of a head's OV table) call it
    once per direction of a space, O(D^3) in all. The patched version writes
    the same float64 vector (1.0 at the direction's index, 0.0 elsewhere) in
    O(D). Measured in docs/performance.md (section Build).
``jit_init``
    The Haiku ``init`` that tracr's ``assemble_craft_model`` runs (a forward pass on a dummy
    input, only to create the parameters) runs as one jitted program instead of eagerly, op by
    op, where every operation at a new shape is its own XLA compilation (dozens per model
    size). The parameters it returns are the same arrays: the initialisers' constants
    (embeddings) and, under ``zero_init``, zeros; tracr then overwrites every transformer
    weight. Models whose parameters have more than :data:`JIT_INIT_MAX_ELEMENTS` elements
    keep the eager init (the embeddings would be constants of the compiled program).
``put_params``
    tracr's ``assemble_craft_model`` ends with ``jax.tree_util.tree_map(jnp.array, params)``;
    ``jnp.array`` of a numpy array runs JAX's ``stage`` (and of a JAX array, ``copy``) as one
    XLA compilation per parameter shape. Under the patch the assemble module's ``jnp.array``
    puts a numpy array on the device with ``jax.device_put`` and returns a JAX array as it is:
    the same values, dtypes and shapes, without compiling. Every other call keeps ``jnp``'s own.
"""

from __future__ import annotations

import contextlib
import math
import threading
from typing import Any, Callable, Dict, Iterator

import numpy as np
from tracr.compiler import assemble as tracr_assemble
from tracr.craft import bases, vectorspace_fns

#: The patches, by name (see the module docstring).
PATCHES = ("zero_init", "fast_project", "fast_basis_vector", "jit_init", "put_params")
#: ``jit_init``: the most parameter elements (all arrays together) whose Haiku init is jitted.
JIT_INIT_MAX_ELEMENTS = 1 << 22

_ORIGINAL_PROJECT = vectorspace_fns.project
_ORIGINAL_BASIS_VECTOR = bases.VectorSpaceWithBasis.vector_from_basis_direction
_lock = threading.RLock()
_off: Dict[str, int] = {}


def index_project(from_space: bases.VectorSpaceWithBasis,
                  to_space: bases.VectorSpaceWithBasis) -> vectorspace_fns.Linear:
    """tracr's ``vectorspace_fns.project`` computed by index: the same ``Linear``, bit for bit.

    Args:
        from_space: source space (D_from directions, sorted as tracr keeps them).
        to_space: target space (D_to directions).
    Returns:
        ``Linear(from_space, to_space, matrix)`` with ``matrix`` float64
        [D_from, D_to]: ``matrix[i, j] = 1.0`` where ``from_space.basis[i] ==
        to_space.basis[j]`` (a direction of the source that the target lacks
        maps to 0), as ``tracr.craft.vectorspace_fns.project`` returns it.
    """
    matrix = np.zeros((from_space.num_dims, to_space.num_dims))
    index = to_space.index_by_direction  # a dict: same hash/eq lookup as tracr's `direction in to_space`
    rows, cols = [], []
    for i, direction in enumerate(from_space.basis):
        j = index.get(direction)
        if j is not None:
            rows.append(i)
            cols.append(j)
    matrix[rows, cols] = 1.0
    return vectorspace_fns.Linear(from_space, to_space, matrix)


def index_basis_vector(space: bases.VectorSpaceWithBasis,
                       basis_direction: bases.BasisDirection) -> bases.VectorInBasis:
    """tracr's ``VectorSpaceWithBasis.vector_from_basis_direction`` without ``np.eye``: the same vector, bit for bit.

    Args:
        space: the space (D directions).
        basis_direction: one of its directions.
    Returns:
        ``space.make_vector(m)`` with ``m`` float64 [D]: 1.0 at the direction's index, 0.0 elsewhere.
    Raises:
        KeyError: ``basis_direction`` is not a direction of ``space`` (as tracr raises).
    """
    i = space.index_by_direction[basis_direction]
    magnitudes = np.zeros(space.num_dims)
    magnitudes[i] = 1.0
    return space.make_vector(magnitudes)


def _zeros(self, shape, dtype=np.float32):
    # A read-only broadcast of one zero: under ``jit_init`` it is a broadcast in the compiled
    # program, not a constant of the weight's size (tracr replaces every such weight by a new array).
    return np.broadcast_to(np.zeros((), dtype), shape)


def jitted_init(init: Callable[..., Any]) -> Callable[..., Any]:
    """A Haiku ``init`` that runs as one jitted program (the ``jit_init`` patch).

    Args:
        init: the ``init`` of a Haiku transform.
    Returns:
        ``init`` with the same arguments and result; it runs eagerly, as given, when the
        parameters have more than :data:`JIT_INIT_MAX_ELEMENTS` elements in all.
    """
    import jax

    def run(*args, **kwargs):
        traced = jax.jit(init).trace(*args, **kwargs)
        if sum(math.prod(leaf.shape) for leaf in jax.tree_util.tree_leaves(traced.out_info)) > JIT_INIT_MAX_ELEMENTS:
            return init(*args, **kwargs)
        return traced.lower().compile()(*args, **kwargs)

    return run


class _JitInitHaiku:
    """Haiku as tracr's ``assemble`` module sees it under ``jit_init``: ``without_apply_rng`` returns a
    transform whose ``init`` is :func:`jitted_init`; every other name is Haiku's own."""

    def __getattr__(self, name: str) -> Any:
        import haiku as hk

        return getattr(hk, name)

    @staticmethod
    def without_apply_rng(f):
        import haiku as hk

        transformed = hk.without_apply_rng(f)
        return transformed._replace(init=jitted_init(transformed.init))


_JIT_HAIKU = _JitInitHaiku()


class _PutParamsNumpy:
    """``jax.numpy`` as tracr's ``assemble`` module sees it under ``put_params``: ``array(x)`` of one
    array and no other argument is ``jax.device_put(x)`` (a JAX array: ``x`` itself); every other
    call and name is ``jax.numpy``'s own."""

    def __getattr__(self, name: str) -> Any:
        import jax.numpy as jnp

        return getattr(jnp, name)

    @staticmethod
    def array(obj, *args, **kwargs):
        import jax
        import jax.numpy as jnp

        if not args and not kwargs:
            if isinstance(obj, jax.Array):
                return obj
            if type(obj) is np.ndarray:
                return jax.device_put(obj)
        return jnp.array(obj, *args, **kwargs)


_PUT_NUMPY = _PutParamsNumpy()


def is_active(name: str) -> bool:
    """Whether patch ``name`` (one of :data:`PATCHES`) is in effect right now.

    Raises:
        ValueError: ``name`` is not a patch.
    """
    _check(name)
    if name == "fast_project":
        return vectorspace_fns.project is index_project
    if name == "fast_basis_vector":
        return bases.VectorSpaceWithBasis.vector_from_basis_direction is index_basis_vector
    if name == "jit_init":
        return tracr_assemble.hk is _JIT_HAIKU
    if name == "put_params":
        return tracr_assemble.jnp is _PUT_NUMPY
    import haiku as hk

    return hk.initializers.TruncatedNormal.__call__ is _zeros


def _check(name: str) -> None:
    if name not in PATCHES:
        raise ValueError(f"unknown tracr patch {name!r}; the patches are {', '.join(PATCHES)}")


@contextlib.contextmanager
def applied() -> Iterator[None]:
    """Apply every patch of :data:`PATCHES` (except those :func:`disabled`) for the ``with`` body.

    Re-entrant; restores tracr's and Haiku's own functions on exit (also on an
    exception). Not for use from several threads at once (the patches replace
    module attributes); a lock serialises entry and exit.
    """
    import haiku as hk

    with _lock:
        saved_project = vectorspace_fns.project
        saved_init = hk.initializers.TruncatedNormal.__call__
        saved_vector = bases.VectorSpaceWithBasis.vector_from_basis_direction
        saved_haiku, saved_jnp = tracr_assemble.hk, tracr_assemble.jnp
        if not _off.get("fast_project"):
            vectorspace_fns.project = index_project
        if not _off.get("fast_basis_vector"):
            bases.VectorSpaceWithBasis.vector_from_basis_direction = index_basis_vector
        if not _off.get("zero_init"):
            hk.initializers.TruncatedNormal.__call__ = _zeros
        if not _off.get("jit_init"):
            tracr_assemble.hk = _JIT_HAIKU
        if not _off.get("put_params"):
            tracr_assemble.jnp = _PUT_NUMPY
        try:
            yield
        finally:
            vectorspace_fns.project = saved_project
            bases.VectorSpaceWithBasis.vector_from_basis_direction = saved_vector
            hk.initializers.TruncatedNormal.__call__ = saved_init
            tracr_assemble.hk, tracr_assemble.jnp = saved_haiku, saved_jnp


@contextlib.contextmanager
def disabled(*names: str) -> Iterator[None]:
    """Keep the named patches off inside the ``with`` body, even where :func:`applied` is entered.

    Raises:
        ValueError: a name is not one of :data:`PATCHES`.
    """
    for name in names:
        _check(name)
    with _lock:
        for name in names:
            _off[name] = _off.get(name, 0) + 1
        try:
            yield
        finally:
            for name in names:
                _off[name] -= 1


def original_project(from_space: bases.VectorSpaceWithBasis,
                     to_space: bases.VectorSpaceWithBasis) -> vectorspace_fns.Linear:
    """tracr's own ``vectorspace_fns.project`` (unpatched), for comparisons."""
    return _ORIGINAL_PROJECT(from_space, to_space)


def original_basis_vector(space: bases.VectorSpaceWithBasis,
                          basis_direction: bases.BasisDirection) -> bases.VectorInBasis:
    """tracr's own ``VectorSpaceWithBasis.vector_from_basis_direction`` (unpatched), for comparisons."""
    return _ORIGINAL_BASIS_VECTOR(space, basis_direction)
