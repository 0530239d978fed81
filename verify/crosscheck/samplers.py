"""Training batches drawn with ``jax.random`` inside the jitted training step.

The numpy samplers of :mod:`verify.tasks` (through :class:`~verify.crosscheck.data.TaskData`)
stay the reference: these JAX samplers draw from the same distributions and
compute the targets by the same definitions, in array code that runs inside
:func:`~verify.crosscheck.train.train_seeds`'s ``lax.scan``, so no batch crosses
from the host to the device during training. They do not reproduce the numpy
samplers' random streams (a JAX key is not a numpy generator): runs that must
match the numpy-fed loop number for number use ``sampler="numpy"``.

Layout and encoding are :class:`TaskData`'s: ``BOS_c`` at position 0, tokens at
1..n, PAD after; input ids and target classes through the data's look-up tables;
the batch is split over the conditions as :meth:`TaskData.sample` splits it (the
first ``batch % C`` conditions get one more sequence).

Tasks with a JAX sampler: ``khop`` (Sanford et al. 2024, Def. 4.1: both input
distributions; targets hop_k by pointer chasing over the find table) and
``icqa`` (Chen & Zou 2024 as formalised in SPEC §4.2). Other tasks return None
from :func:`jax_sampler` and train on numpy-fed chunks.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from depthcraft.constructions.errors import ParameterError
from depthcraft.verify.crosscheck.data import TaskData

#: ``(key) -> (ids [B, T] int32, targets [B, T] int32, loss_mask [B, T] float32)``.
Sampler = Callable[[jax.Array], Tuple[jax.Array, jax.Array, jax.Array]]


def _lut(data: TaskData, values, kind: str) -> np.ndarray:
    """Dense int32 table value -> index for small non-negative integer values."""
    values = list(values)
    if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= 0 for v in values):
        raise ParameterError(f"the JAX sampler needs non-negative integer {kind}s, got {values[:8]}")
    table = np.zeros(max(values) + 1, np.int32)
    for i, v in enumerate(values):
        table[v] = i
    return table


def _hop_targets(x: jax.Array, k: int) -> Tuple[jax.Array, jax.Array]:
    """hop_k for every position (SPEC §4.1).

    Args:
        x: [b, n] int32 tokens.
        k: hops (>= 0, static).
    Returns:
        ``(value, defined)``: [b, n] int32 hop_k(X)_i (undefined where ``defined`` is False,
        i.e. the target is ⊥) and [b, n] bool.
    """
    b, n = x.shape
    pos = jnp.arange(1, n + 1)  # 1-based positions i (queries) and j (keys)
    prev = jnp.concatenate([jnp.full((b, 1), -1, x.dtype), x[:, :-1]], axis=1)  # x_{j-1}; none at j = 1
    eq = (prev[:, None, :] == x[:, :, None]) & (pos[None, :] <= pos[:, None])[None]  # [b, i, j]
    find = jnp.max(jnp.where(eq, pos[None, None, :], 0), axis=-1)  # [b, n]: find(X, i), 0 = none
    table = jnp.concatenate([jnp.zeros((b, 1), find.dtype), find], axis=1)  # [b, n+1], find(0) = 0
    ptr = jnp.broadcast_to(jnp.arange(n + 1), (b, n + 1))
    step, e = table, k
    while e:  # exponentiation by squaring of the pointer map, as verify.tasks.khop.find_k
        if e & 1:
            ptr = jnp.take_along_axis(step, ptr, axis=1)
        step = jnp.take_along_axis(step, step, axis=1)
        e >>= 1
    ptr = ptr[:, 1:]
    padded = jnp.concatenate([jnp.zeros((b, 1), x.dtype), x], axis=1)
    return jnp.take_along_axis(padded, ptr, axis=1), ptr != 0


def _khop_condition(data: TaskData, p: Dict[str, Any]) -> Callable[[jax.Array, int], Tuple[jax.Array, ...]]:
    k, n, v, dist = p["k"], p["n"], p["vocab"], p["distribution"]
    tok = jnp.asarray(_lut(data, data.tokens, "token"))
    cls = jnp.asarray(_lut(data, [c for c in data.classes if c != data.none_value], "class"))
    none_cls = data.classes.index(data.none_value)

    def draw(key, size):
        if dist == "paper":
            k1, k2 = jax.random.split(key)
            first = jax.random.randint(k1, (size, 1), 0, v)
            steps = jax.random.randint(k2, (size, n - 1), 1, max(v, 2))
            x = jnp.cumsum(jnp.concatenate([first, steps], axis=1), axis=1) % v
        else:
            x = jax.random.randint(key, (size, n), 0, v)
        x = x.astype(jnp.int32)
        value, defined = _hop_targets(x, k)
        targets = jnp.where(defined, cls[value], none_cls)
        return tok[x], targets, jnp.ones((size, n), jnp.float32)

    return draw


def _icqa_condition(data: TaskData, p: Dict[str, Any]) -> Callable[[jax.Array, int], Tuple[jax.Array, ...]]:
    m, q, a = p["m"], p["questions"], p["answers"]
    tok = jnp.asarray(_lut(data, data.tokens, "token"))
    cls = jnp.asarray(_lut(data, [c for c in data.classes if c != data.none_value], "class"))
    length = 2 * m + 1

    def draw(key, size):
        k1, k2, k3 = jax.random.split(key, 3)
        questions = jnp.argsort(jax.random.uniform(k1, (size, q)), axis=1)[:, :m]  # m distinct, uniform
        answers = jax.random.randint(k2, (size, m), q, q + a)
        j = jax.random.randint(k3, (size,), 0, m)
        rows = jnp.arange(size)
        x = jnp.zeros((size, length), jnp.int32)
        x = x.at[:, 0:-1:2].set(questions.astype(jnp.int32)).at[:, 1::2].set(answers.astype(jnp.int32))
        x = x.at[:, -1].set(questions[rows, j].astype(jnp.int32))
        targets = jnp.zeros((size, length), jnp.int32).at[:, -1].set(cls[answers[rows, j]])
        mask = jnp.zeros((size, length), jnp.float32).at[:, -1].set(1.0)
        return tok[x], targets, mask

    return draw


_CONDITION_SAMPLERS = {"khop": _khop_condition, "icqa": _icqa_condition}


def has_jax_sampler(data: TaskData) -> bool:
    """Whether :func:`jax_sampler` supports ``data``'s task."""
    return data.task.name in _CONDITION_SAMPLERS


def jax_sampler(data: TaskData, batch: int) -> Optional[Sampler]:
    """The JAX sampler of ``data`` (None when its task has none).

    Args:
        data: task and conditions (for the layout, vocabularies and the batch split).
        batch: sequences per call (split over the conditions as :meth:`TaskData.sample` does).
    Returns:
        ``sample(key) -> (ids, targets, loss_mask)``: [batch, T] int32, int32, float32, pure in
        ``key`` (jit- and vmap-able), or None.
    Raises:
        ParameterError: ``batch < 1``.
    """
    if batch < 1:
        raise ParameterError(f"batch must be >= 1, got {batch}")
    make = _CONDITION_SAMPLERS.get(data.task.name)
    if make is None:
        return None
    conds = [make(data, p) for p in data.conditions]
    count = len(conds)
    sizes = [batch // count + (1 if c < batch % count else 0) for c in range(count)]
    t_len = data.seq_len

    def sample(key):
        ids, tgts, masks = [], [], []
        for c, (draw, size) in enumerate(zip(conds, sizes)):
            if not size:
                continue
            x, t, m = draw(jax.random.fold_in(key, c), size)
            pad = t_len - 1 - x.shape[1]
            ids.append(jnp.concatenate([jnp.full((size, 1), data.bos_ids[c], jnp.int32), x.astype(jnp.int32),
                                        jnp.full((size, pad), data.pad_id, jnp.int32)], axis=1))
            tgts.append(jnp.pad(t.astype(jnp.int32), ((0, 0), (1, pad))))
            masks.append(jnp.pad(m, ((0, 0), (1, pad))))
        return jnp.concatenate(ids), jnp.concatenate(tgts), jnp.concatenate(masks)

    return sample
