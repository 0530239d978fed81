"""Training and evaluation batches drawn from the task samplers (:mod:`verify.tasks`).

Layout (the compiled models' layout, SPEC §3): position 0 holds a BOS token,
the input tokens x_1..x_N sit at positions 1..N, shorter inputs are padded with
PAD (never attended to, never scored). Trained attention maps therefore line up
position by position with a construction's maps.

Conditions: one model may be trained on several parameter sets of a task at once
(the k-hop paper trains one model on mixed k, with a leading token that names
k). Here the leading token *is* the BOS token: condition c has its own
``BOS_c``, so the sequence layout stays that of the compiled models.

Input ids: the task's tokens in sorted order (0..V-1), then ``BOS_0..BOS_{C-1}``,
then PAD. Output classes: the task's tokens and its ``target_values`` (when the
task defines them) in sorted order, then the task's ``none_value`` (⊥) when it
has one.

Scoring: the loss is taken at every position the task scores (⊥ targets
included); the error counts only scored positions whose target is not ⊥
(SPEC §4.1: ⊥ positions are trained on but excluded from the error).
"""

from __future__ import annotations

from typing import Any, Dict, List, NamedTuple, Optional, Sequence

import numpy as np

from depthcraft.constructions.errors import ParameterError
from depthcraft.verify.tasks.base import Task


class Batch(NamedTuple):
    """One batch of model inputs and targets.

    ids: [batch, T] int32 input ids (BOS_c at position 0).
    targets: [batch, T] int32 class ids (0 where not scored).
    loss_mask: [batch, T] float32, 1.0 at positions the loss is taken at.
    error_mask: [batch, T] bool, True at positions the error counts (scored, target not ⊥).
    cond: [batch] int32 condition index of each sequence.
    """

    ids: np.ndarray
    targets: np.ndarray
    loss_mask: np.ndarray
    error_mask: np.ndarray
    cond: np.ndarray


def _sorted_values(values) -> List[Any]:
    vals = list(dict.fromkeys(values))
    try:
        return sorted(vals)
    except TypeError:
        return sorted(vals, key=repr)


class TaskData:
    """Batches for a task at one or more parameter sets (conditions).

    Args:
        task: the task (its ``sample`` and ``reference`` are the data source).
        conditions: resolved parameter dicts (see ``Task.resolve``), one per condition.
        names: display name of each condition (default: ``k=..`` style from the differing keys).
    Raises:
        ParameterError: no conditions, or a target outside the task's values.
    """

    def __init__(self, task: Task, conditions: Sequence[Dict[str, Any]], names: Sequence[str] = ()):
        if not conditions:
            raise ParameterError("at least one task parameter set is needed")
        self.task = task
        self.conditions = [dict(c) for c in conditions]
        self.names = list(names) or condition_names(self.conditions)
        vocab = _sorted_values(v for c in self.conditions for v in task.vocab(c))
        self.tokens = vocab
        self.n_tokens = len(vocab)
        self.bos_ids = [self.n_tokens + i for i in range(len(self.conditions))]
        self.pad_id = self.n_tokens + len(self.conditions)
        self.n_inputs = self.pad_id + 1
        outputs = list(vocab)
        extra = getattr(task, "target_values", None)  # read-out vocabulary beyond the input tokens
        for c in self.conditions:
            if extra is not None:
                outputs += list(extra(c))
        self.none_value = task.none_value
        self.classes = _sorted_values(v for v in outputs if v != self.none_value)
        if self.none_value is not None:
            self.classes.append(self.none_value)
        self.n_classes = len(self.classes)
        self.seq_len = 1 + max(task.max_seq_len(c) for c in self.conditions)
        self._token_lut = _Lookup(self.tokens, "input token")
        self._class_lut = _Lookup(self.classes, "target")

    # ------------------------------------------------------------- batches
    def encode(self, cond: int, tokens: np.ndarray) -> np.ndarray:
        """[b, n] token values of condition ``cond`` -> [b, T] ids (BOS_cond, tokens, PAD...).

        Raises:
            ParameterError: a token outside the task's vocabulary.
        """
        tokens = np.asarray(tokens)
        out = np.full((tokens.shape[0], self.seq_len), self.pad_id, np.int32)
        out[:, 0] = self.bos_ids[cond]
        out[:, 1:tokens.shape[1] + 1] = self._token_lut(tokens)
        return out

    def condition_batch(self, cond: int, tokens: np.ndarray) -> Batch:
        """The batch for given inputs [b, n] of one condition (targets from the task's reference)."""
        tokens = np.asarray(tokens)
        expected, scored = self.task.reference(self.conditions[cond], tokens)
        return self._batch(cond, tokens, expected, scored)

    def _batch(self, cond: int, tokens: np.ndarray, expected: np.ndarray, scored: np.ndarray) -> Batch:
        b, n = tokens.shape
        scored = np.asarray(scored, bool)
        targets = np.zeros((b, self.seq_len), np.int32)
        loss = np.zeros((b, self.seq_len), np.float32)
        err = np.zeros((b, self.seq_len), bool)
        exp = np.asarray(expected)
        targets[:, 1:n + 1] = np.where(scored, self._class_lut(exp, where=scored), 0)
        loss[:, 1:n + 1] = scored
        not_none = scored if self.none_value is None else scored & (exp != self.none_value)
        err[:, 1:n + 1] = not_none
        return Batch(self.encode(cond, tokens), targets, loss, err, np.full((b,), cond, np.int32))

    def sample(self, rng: np.random.Generator, batch: int, conditions: Optional[Sequence[int]] = None) -> Batch:
        """A fresh batch: ``batch`` sequences split evenly over the conditions (the first
        ``batch % C`` conditions get one more), each drawn by the task's sampler.

        Args:
            rng: the step's generator.
            batch: sequences in the batch.
            conditions: indices of the conditions to draw from (a curriculum stage: the
                easier conditions only); None = all. The layout (T, ids of BOS_c) is the
                same either way, so the batch shape does not depend on it.
        Returns:
            :class:`Batch` with [batch, T] arrays.
        Raises:
            ParameterError: an empty or out-of-range ``conditions``.
        """
        picked = list(range(len(self.conditions))) if conditions is None else [int(c) for c in conditions]
        if not picked or any(not 0 <= c < len(self.conditions) for c in picked):
            raise ParameterError(f"conditions {conditions!r}: expected indices in 0..{len(self.conditions) - 1}")
        parts = []
        c_count = len(picked)
        for i, c in enumerate(picked):
            size = batch // c_count + (1 if i < batch % c_count else 0)
            if size:
                parts.append(self.condition_batch(c, self.task.sample(self.conditions[c], rng, size)))
        return concat(parts)

    def eval_sets(self, seed: int, size: int, conditions: Optional[Sequence[Dict[str, Any]]] = None) -> List[Batch]:
        """Fixed evaluation batches, ``size`` sequences per condition, drawn from their own
        seeded stream (independent of the training stream).

        Args:
            seed: evaluation seed.
            size: sequences per condition.
            conditions: parameter sets to *sample* from, one per training condition (e.g. the
                held-out ``split=test`` of template matching); default: the training ones.
                Targets always come from the task's reference.
        """
        conditions = self.conditions if conditions is None else list(conditions)
        if len(conditions) != len(self.conditions):
            raise ParameterError(f"{len(conditions)} evaluation conditions for {len(self.conditions)} training ones")
        out = []
        for c, p in enumerate(conditions):
            tokens = self.task.sample(p, np.random.default_rng([seed, 7_919, c]), size)
            expected, scored = self.task.reference(p, tokens)
            out.append(self._batch(c, tokens, expected, scored))
        return out


def concat(parts: Sequence[Batch]) -> Batch:
    """Concatenate batches along the batch axis."""
    return Batch(*(np.concatenate([getattr(p, f) for p in parts]) for f in Batch._fields))


def condition_names(conditions: Sequence[Dict[str, Any]], keys: Optional[Sequence[str]] = None) -> List[str]:
    """``["k=1", "k=2"]``: each condition named by ``keys`` (default: the parameters that
    differ between the conditions; for a single condition, all of them)."""
    if keys is None:
        if len(conditions) == 1:
            keys = list(conditions[0])
        else:
            keys = [k for k in conditions[0] if len({repr(c.get(k)) for c in conditions}) > 1]
    return [" ".join(f"{k}={c[k]}" for k in keys) for c in conditions]


class _Lookup:
    """Vectorised value -> index map (integer values via searchsorted, others via a dict)."""

    def __init__(self, values: List[Any], what: str):
        self.values, self.what = values, what
        self.ints = all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in values)
        if self.ints:
            self.arr = np.asarray(values, np.int64)
            self.order = np.argsort(self.arr)
            self.sorted = self.arr[self.order]
        self.index = {v: i for i, v in enumerate(values)}

    def __call__(self, x: np.ndarray, where=None) -> np.ndarray:
        x = np.asarray(x)
        check = np.ones(x.shape, bool) if where is None else np.asarray(where, bool)
        if self.ints and np.issubdtype(x.dtype, np.integer):
            pos = np.clip(np.searchsorted(self.sorted, x), 0, len(self.sorted) - 1)
            bad = (self.sorted[pos] != x) & check
            out = self.order[pos].astype(np.int32)
        else:
            flat = x.reshape(-1)
            out = np.asarray([self.index.get(v.item() if isinstance(v, np.generic) else v, -1) for v in flat],
                             np.int32).reshape(x.shape)
            bad = (out < 0) & check
            out = np.maximum(out, 0)
        if bad.any():
            value = x[tuple(np.argwhere(bad)[0])]
            value = value.item() if isinstance(value, np.generic) else value
            shown = self.values if len(self.values) <= 12 else self.values[:12] + ["..."]
            raise ParameterError(f"{self.what} {value!r} is not one of the task's values {shown}")
        return np.where(check, out, 0).astype(np.int32)
