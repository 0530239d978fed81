"""Training: the backends' shared parts, the loop and vmapped-seeds backends, exact resume.

The one entry point, :func:`verify.crosscheck.trainer.train` (issue 41: one trainer, a
:class:`~verify.crosscheck.trainer.TrainJob` and a backend), lives in
:mod:`verify.crosscheck.trainer`, above this module and :mod:`verify.crosscheck.fused` (which
imports this one). Its backends: ``loop`` (:func:`train_loop`), ``fast`` (:func:`train_seeds`,
the seeds vmapped) and ``fused`` (:func:`verify.crosscheck.fused.train_fused`, every job and seed
in one compiled step). The backends share the optimiser (:func:`optimizer`,
:func:`schedule`), the loss (:func:`loss_fn`), the data streams (:func:`step_rng`,
:func:`data_key`), the curve's scoring (:func:`score_predictions`), early exit and the checkpoint
format and resume check (:func:`training_settings`); each keeps its own stepping loop.

:func:`train_loop`: each step draws a fresh batch from the task's sampler with
``numpy.random.default_rng([seed, step])`` (so the data of a step does not depend
on what ran before it), takes one AdamW step on the mean cross-entropy over the
scored positions, and every ``checkpoint_every`` steps saves the parameters and
optimiser state (:mod:`verify.crosscheck.checkpoint`). A run that finds a
checkpoint made with the same settings continues from it; the result is
bit-identical to an uninterrupted run.

:func:`train_seeds`: the same maths for several seeds at once (``vmap`` over
stacked parameters and optimiser states), ``chunk`` optimiser steps per jitted
call (``lax.scan``), batches from the numpy sampler (fed a chunk at a time) or
drawn inside the step by :mod:`verify.crosscheck.samplers`; evaluation curves,
the plateau exit step (:func:`plateau_exit_step`) and early exit.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from depthcraft.constructions.errors import DepthcraftError, InputError, ParameterError
from depthcraft.constructions.runtime import Arch, as_jax, forward
from depthcraft.verify.crosscheck.checkpoint import load_checkpoint, read_meta, save_checkpoint
from depthcraft.verify.crosscheck.data import Batch, TaskData
from depthcraft.verify.crosscheck.model import ModelConfig, count_params, init_params
from depthcraft.verify.crosscheck.samplers import has_jax_sampler, jax_sampler


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Optimisation settings of one run.

    Attributes:
        steps: optimiser steps (one fresh batch each).
        batch: sequences per step.
        lr: peak learning rate (after linear warm-up).
        warmup: warm-up steps (linear from 0 to ``lr``).
        final_lr_ratio: the cosine decay ends at ``lr * final_lr_ratio`` at ``steps``.
        weight_decay: AdamW decoupled weight decay, applied to weight matrices and
            embeddings only (see :func:`optimizer`).
        grad_clip: global-norm gradient clipping (0 = none).
        b2: Adam's second-moment decay.
        seed: seeds the initial weights and the data stream.
        log_every: record the training loss every this many steps.
        eval_size: evaluation sequences per condition.
    Raises:
        ParameterError: a value out of range.
    """

    steps: int
    batch: int
    lr: float
    warmup: int
    final_lr_ratio: float = 0.1
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    b2: float = 0.99
    seed: int = 0
    log_every: int = 100
    eval_size: int = 1024

    def __post_init__(self):
        for name in ("steps", "batch", "log_every", "eval_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ParameterError(f"{name} must be an integer >= 1, got {v!r}")
        if not isinstance(self.warmup, int) or self.warmup < 0:
            raise ParameterError(f"warmup must be an integer >= 0, got {self.warmup!r}")
        if not self.lr > 0:
            raise ParameterError(f"lr must be > 0, got {self.lr!r}")

    def to_json(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


def schedule(cfg: TrainConfig) -> optax.Schedule:
    """Learning rate per step: linear warm-up to ``lr``, cosine decay to ``lr * final_lr_ratio``."""
    warmup = min(cfg.warmup, cfg.steps - 1)
    return optax.warmup_cosine_decay_schedule(0.0, cfg.lr, warmup, max(cfg.steps, warmup + 1),
                                              end_value=cfg.lr * cfg.final_lr_ratio)


def runtime_schedule(cfg: TrainConfig, steps: Any, warmup: Any) -> optax.Schedule:
    """:func:`schedule` with the run's length and warm-up as (possibly traced) int32 scalars.

    The same float32 formula as optax's ``warmup_cosine_decay_schedule`` built by
    :func:`schedule` for ``dataclasses.replace(cfg, steps=steps, warmup=warmup)``; equal up to
    float32 rounding (XLA rewrites a division by a constant as a product, which it cannot do for
    a traced length: relative differences ~1e-7, tests/test_crosscheck_fused.py). One compiled
    training step could thus serve every run length; the fused trainer does not use it: at lr
    2e-3 such last-bit differences grow to 1.6e-2 in the loss within 100 steps
    (benchmarks/fused_noise.py), so it feeds optax's own values instead
    (:func:`verify.crosscheck.fused.learning_rates`).

    Args:
        cfg: ``lr`` and ``final_lr_ratio`` are read (``steps`` and ``warmup`` are not).
        steps: total optimiser steps of the run (>= 1), int32 scalar.
        warmup: warm-up steps (>= 0), int32 scalar.
    Returns:
        ``count -> learning rate`` (float32 scalar).
    """
    steps = jnp.asarray(steps, jnp.int32)
    w = jnp.minimum(jnp.asarray(warmup, jnp.int32), steps - 1)
    decay = (jnp.maximum(steps, w + 1) - w).astype(jnp.float32)
    peak, end = cfg.lr, cfg.lr * cfg.final_lr_ratio
    alpha = 0.0 if peak == 0.0 else end / peak

    def fn(count):
        # warm-up: optax.linear_schedule(0, peak, w) (a constant 0 when w = 0)
        c = jnp.clip(count, 0, w)
        frac = 1 - c / jnp.maximum(w, 1)
        warm = jnp.where(w > 0, (0.0 - peak) * frac + peak, 0.0)
        # then optax.cosine_decay_schedule(peak, decay, alpha) from step w
        t = jnp.minimum((count - w).astype(jnp.float32), decay)
        cosine = 0.5 * (1 + jnp.cos(jnp.pi * t / decay))
        decayed = peak * ((1 - alpha) * cosine + alpha)
        return jnp.where(count < w, warm, decayed)

    return fn


def optimizer(cfg: TrainConfig, frozen: Tuple[Tuple[str, ...], ...] = (),
              lr_schedule: Optional[optax.Schedule] = None,
              tie: Optional[Tuple[int, int]] = None) -> optax.GradientTransformation:
    """Gradient clipping then AdamW; weight decay only on weight matrices (ndim >= 2,
    embeddings included), not on biases or LayerNorm parameters.

    Args:
        cfg: optimisation settings.
        frozen: parameter paths (dict keys from the root, e.g. ``("embed", "token")``) whose
            update is zero: no gradient step, no weight decay, left out of the clipping norm
            (:attr:`ModelConfig.frozen <verify.crosscheck.model.ModelConfig.frozen>`).
        lr_schedule: the learning rate per step (default :func:`schedule` of ``cfg``; the fused
            trainer passes a function that returns the step's rate, fed to its compiled chunk). The optimiser state's structure does not
            depend on it.
        tie: ``(sublayers per block, blocks)`` of a looped model (:attr:`ModelConfig.tie
            <verify.crosscheck.model.ModelConfig.tie>`): the blocks' weights are one shared set
            (:func:`~verify.crosscheck.model.tie_blocks`); None = no tying.
    """
    from depthcraft.verify.crosscheck.model import tie_blocks

    decay_mask = lambda params: jax.tree_util.tree_map(lambda a: a.ndim >= 2, params)  # noqa: E731
    gather, scatter = tie_blocks(*tie) if tie else (None, None)
    parts = [gather] if tie else []
    parts += [optax.clip_by_global_norm(cfg.grad_clip)] if cfg.grad_clip > 0 else []
    parts.append(optax.adamw(schedule(cfg) if lr_schedule is None else lr_schedule, b1=0.9, b2=cfg.b2,
                             weight_decay=cfg.weight_decay, mask=decay_mask))
    if tie:
        parts.append(scatter)
    tx = optax.chain(*parts)
    if not frozen:
        return tx
    frozen_set = {tuple(f) for f in frozen}

    def labels(params):
        def label(path, _):
            keys = tuple(getattr(k, "key", getattr(k, "idx", None)) for k in path)
            return "frozen" if any(keys[:len(f)] == f for f in frozen_set) else "trained"
        return jax.tree_util.tree_map_with_path(label, params)

    return optax.multi_transform({"trained": tx, "frozen": optax.set_to_zero()}, labels)


def loss_fn(params: Dict[str, Any], ids: jax.Array, targets: jax.Array, mask: jax.Array, arch: Arch) -> jax.Array:
    """Mean cross-entropy (nats) over the positions where ``mask`` is 1.

    Args:
        ids, targets: [batch, T] int32; mask: [batch, T] float32.
    """
    logits = forward(params, ids, arch).logits
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
    return (ce * mask).sum() / jnp.maximum(mask.sum(), 1.0)


def optimiser_key(cfg: TrainConfig) -> TrainConfig:
    """The fields the optimiser depends on (seed, logging and evaluation do not matter)."""
    return dataclasses.replace(cfg, seed=0, log_every=1, eval_size=1)


@functools.lru_cache(maxsize=16)
def make_step(arch: Arch, cfg: TrainConfig, rules: Tuple[Any, ...] = ((), None)) -> Callable:
    """The jitted train step ``(params, opt_state, ids, targets, mask) -> (params, opt_state, loss)``.

    Cached per (architecture, optimiser settings, parameter rules: :attr:`ModelConfig.rules
    <verify.crosscheck.model.ModelConfig.rules>`, frozen paths and tied blocks), so runs that
    differ only in the seed reuse one compiled step.
    """
    tx = optimizer(cfg, rules[0], tie=rules[1])

    @jax.jit
    def step(params, opt_state, ids, targets, mask):
        loss, grads = jax.value_and_grad(loss_fn)(params, ids, targets, mask, arch)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step


@functools.lru_cache(maxsize=16)
def optimiser_init(cfg: TrainConfig, rules: Tuple[Any, ...] = ((), None)) -> Callable:
    """The optimiser's ``init`` (zero moments, step counts), jitted: one XLA compilation per parameter
    structure instead of one per parameter shape run eagerly. Cached like :func:`make_step`."""
    return jax.jit(optimizer(cfg, rules[0], tie=rules[1]).init)


def step_rng(seed: int, step: int) -> np.random.Generator:
    """The data generator of training step ``step`` (a pure function of seed and step)."""
    return np.random.default_rng([seed, step])


@dataclasses.dataclass
class RunOutcome:
    """Result of :func:`train`.

    Attributes:
        params: trained weights (runtime layout).
        arch: runtime architecture.
        history: ``[{"step", "loss"}]`` every ``log_every`` steps (loss in nats).
        seconds: wall time spent training (summed over resumed parts), seconds.
        resumed_from: step of the checkpoint the run continued from (0 = fresh start).
        n_params: number of parameters.
        curve: evaluation points (:func:`train_seeds` with ``eval_every``), else None.
        steps_done: optimiser steps taken (< ``steps`` after an early exit or ``stop_at``;
            0 when not recorded).
        exit_reason: why training stopped before ``steps`` ("" = it did not).
        seeds_together: seeds trained in the same vmapped call (``seconds`` is their shared time).
        sampler: ``numpy`` or ``jax`` (:data:`SAMPLERS`).
        curriculum: with a curriculum (:func:`train_seeds`), ``{"accuracy", "stages", "stage",
            "advances"}``: the accuracy that advances a stage, the condition names in stage order, the
            stage reached (0-based) and one ``{"step", "stage", "condition", "passed", "error"}`` per
            advance; None without one.
    """

    params: Dict[str, Any]
    arch: Arch
    history: List[Dict[str, float]]
    seconds: float
    resumed_from: int
    n_params: int
    curve: Optional[List[Dict[str, Any]]] = None
    steps_done: int = 0
    exit_reason: str = ""
    seeds_together: int = 1
    sampler: str = "numpy"
    curriculum: Optional[Dict[str, Any]] = None


def _describe(data: TaskData, model_cfg: ModelConfig, train_cfg: TrainConfig) -> Dict[str, Any]:
    return {"task": data.task.name, "conditions": [{k: v for k, v in c.items()} for c in data.conditions],
            "model": model_cfg.to_json(), "train": train_cfg.to_json()}


def _resumable(checkpoint_dir: str, desc: Dict[str, Any]):
    """The checkpoint record in ``checkpoint_dir`` (None when there is none), checked to be from
    the same training settings as ``desc``.

    Raises:
        ParameterError: the checkpoint was made with other settings (names the first difference).
    """
    record = read_meta(checkpoint_dir)
    if record is not None:
        saved = record.get("meta", {}).get("config")
        if training_settings(saved) != training_settings(desc):
            raise ParameterError(f"checkpoint in {checkpoint_dir} was made with other settings "
                                 f"({first_difference(training_settings(saved), training_settings(desc))}); "
                                 f"use another output directory or start afresh (depthcraft train --fresh)")
    return record


def train_loop(data: TaskData, model_cfg: ModelConfig, train_cfg: TrainConfig, *, checkpoint_dir: Optional[str] = None,
          checkpoint_every: int = 0, stop_at: Optional[int] = None,
          on_step: Optional[Callable[[int, Optional[float]], None]] = None) -> RunOutcome:
    """The ``loop`` backend of :func:`train`: one model on fresh batches from ``data``, one
    optimiser step per jitted call.

    Args:
        data: the task and its conditions.
        model_cfg, train_cfg: architecture and optimisation settings.
        checkpoint_dir: where to save and resume (None = no checkpoints).
        checkpoint_every: save every this many steps (0 = only at the end); a
            checkpoint is always saved at the end when ``checkpoint_dir`` is given.
        stop_at: stop after this step (for tests of resuming: the schedule still runs
            to ``train_cfg.steps``).
        on_step: called as ``on_step(step, loss_or_None)`` after every step.
    Returns:
        :class:`RunOutcome`.
    Raises:
        ParameterError: the checkpoint in ``checkpoint_dir`` was made with other settings.
        InputError: the checkpoint is corrupt.
    """
    arch = model_cfg.arch(data.pad_id)
    params = init_params(model_cfg, jax.random.PRNGKey(train_cfg.seed), data.n_inputs, data.n_classes, data.seq_len)
    state = {"params": params, "opt_state": optimiser_init(optimiser_key(train_cfg), model_cfg.rules)(params)}
    desc = _describe(data, model_cfg, train_cfg)
    start, history, seconds = 0, [], 0.0
    if checkpoint_dir is not None:
        record = _resumable(checkpoint_dir, desc)
        if record is not None:
            start, state, meta = load_checkpoint(checkpoint_dir, state)
            history, seconds = list(meta.get("history", [])), float(meta.get("seconds", 0.0))
    resumed_from = start
    end = train_cfg.steps if stop_at is None else min(stop_at, train_cfg.steps)
    step_fn = make_step(arch, optimiser_key(train_cfg), model_cfg.rules)
    params, opt_state = state["params"], state["opt_state"]
    t0 = time.perf_counter()

    def save(step):
        save_checkpoint(checkpoint_dir, step, {"params": params, "opt_state": opt_state},
                        {"config": desc, "history": history, "seconds": seconds + time.perf_counter() - t0})

    for s in range(start, end):
        b = data.sample(step_rng(train_cfg.seed, s), train_cfg.batch)
        params, opt_state, loss = step_fn(params, opt_state, b.ids, b.targets, b.loss_mask)
        logged = None
        if (s + 1) % train_cfg.log_every == 0 or s + 1 == end:
            logged = float(loss)
            if not history or history[-1]["step"] < s + 1:
                history.append({"step": s + 1, "loss": round(logged, 6)})
        if on_step is not None:
            on_step(s + 1, logged)
        if checkpoint_dir is not None and checkpoint_every and (s + 1) % checkpoint_every == 0 and s + 1 < end:
            save(s + 1)
    jax.block_until_ready(params)
    if checkpoint_dir is not None and end > start:
        save(end)
    seconds += time.perf_counter() - t0
    return RunOutcome(params=params, arch=arch, history=history, seconds=seconds, resumed_from=resumed_from,
                      n_params=count_params(params, model_cfg))


def training_settings(desc: Any) -> Any:
    """The settings a checkpoint must share to be resumed (the evaluation size does not matter)."""
    out = _canon(desc)
    if isinstance(out, dict) and isinstance(out.get("train"), dict):
        out["train"].pop("eval_size", None)
    return out


def _canon(x: Any) -> Any:
    import json

    return json.loads(json.dumps(x, sort_keys=True, default=str))


def first_difference(a: Any, b: Any, path: str = "") -> str:
    """The first key path where two settings trees differ, as ``"train.lr: saved 0.001, now 0.002"``.

    Used to name why a checkpoint is refused; ``a`` and ``b`` are JSON-like trees (the saved and
    the requested settings); ``path`` is the prefix so far."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if _canon(a.get(k)) != _canon(b.get(k)):
                return first_difference(a.get(k), b.get(k), f"{path}.{k}" if path else str(k))
    return f"{path or 'config'}: saved {a!r}, now {b!r}"


def evaluate(params: Dict[str, Any], arch: Arch, data: TaskData, sets: List[Batch], batch: int = 512) -> List[Dict]:
    """Token error of a model on fixed evaluation sets, one per condition.

    Args:
        params, arch: the model.
        data: its data (for names).
        sets: :meth:`TaskData.eval_sets` output.
        batch: sequences per forward call.
    Returns:
        Per condition: ``{"condition", "error", "scored", "loss", "error_per_position"}``:
        error = wrong / scored over error-mask positions (⊥ targets excluded),
        loss = mean cross-entropy (nats) over loss-mask positions, error_per_position =
        list over model positions 1..T-1 (None where nothing is scored).
    """
    out = []
    for c, s in enumerate(sets):
        wrong = np.zeros(data.seq_len, np.int64)
        scored = np.zeros(data.seq_len, np.int64)
        ce_sum, ce_n = 0.0, 0.0
        for i in range(0, len(s.ids), batch):
            logits = np.asarray(forward(params, as_jax(s.ids[i:i + batch]), arch).logits, np.float64)
            t = s.targets[i:i + batch]
            pred = logits.argmax(-1)
            em = s.error_mask[i:i + batch]
            wrong += ((pred != t) & em).sum(0)
            scored += em.sum(0)
            lm = s.loss_mask[i:i + batch]
            logz = np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1)) + logits.max(-1)
            ce = logz - np.take_along_axis(logits, t[..., None], -1)[..., 0]
            ce_sum += float((ce * lm).sum())
            ce_n += float(lm.sum())
        total = int(scored.sum())
        out.append({
            "condition": data.names[c],
            "params": data.conditions[c],
            "error": float(wrong.sum() / total) if total else None,
            "scored": total,
            "loss": ce_sum / ce_n if ce_n else None,
            "error_per_position": [round(float(w / n), 5) if n else None for w, n in zip(wrong[1:], scored[1:])],
        })
    return out


# ---------------------------------------------------------------------------------------------
# The fast trainer: many optimiser steps per jitted call (lax.scan), several seeds at once (vmap).
# ---------------------------------------------------------------------------------------------

#: Tag of the JAX data stream of :func:`train_seeds` with ``sampler="jax"`` (kept apart from the
#: weight initialisation, which uses ``PRNGKey(seed)`` itself).
DATA_STREAM = 0xDA7A

#: Samplers of :func:`train_seeds`: ``numpy`` (the task's numpy sampler with ``step_rng(seed, step)``,
#: the data of :func:`train`, fed one chunk at a time), ``jax`` (:mod:`verify.crosscheck.samplers`,
#: drawn inside the jitted step), ``auto`` (``jax`` where the task has one, else ``numpy``).
SAMPLERS = ("numpy", "jax", "auto")


def data_key(seed: int, step: int) -> jax.Array:
    """The JAX data key of training step ``step`` (a pure function of seed and step)."""
    return jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(seed), DATA_STREAM), step)


def stack_trees(trees: List[Any]) -> Any:
    """Stack pytrees of the same structure along a new leading axis (``[len(trees), ...]`` leaves)."""
    # stacked by numpy and put on the device: the same arrays as jnp.stack, without an XLA compilation per shape
    return jax.tree_util.tree_map(lambda *a: as_jax(np.stack([np.asarray(x) for x in a])), *trees)


def _unstack(tree: Any, i: int) -> Any:
    # one seed's arrays, sliced on the host (eager a[i] compiles a slice per shape)
    return jax.tree_util.tree_map(lambda a: as_jax(np.asarray(a)[i]), tree)


_CHUNK_CACHE: Dict[Any, Callable] = {}


def donate_args() -> Tuple[int, ...]:
    """Donate the parameter and optimiser buffers to the chunk call where the backend reuses them
    (GPU/TPU); the CPU backend would only warn."""
    return () if jax.default_backend() == "cpu" else (0, 1)


def seed_chunk_fn(arch: Arch, cfg: TrainConfig, rules, n: int, sampler, sampler_sig) -> Callable:
    """The jitted ``n``-step function of :func:`train_seeds`, vmapped over seeds.

    numpy-fed: ``(params[S], opt[S], ids[S, n, B, T], targets, mask) -> (params, opt, losses[S, n])``;
    jax-sampled: ``(params[S], opt[S], steps[n]) -> ...``, with each seed's keys derived inside.
    Cached per (architecture, optimiser settings, parameter rules, n, sampler).
    """
    key = (arch, cfg, rules, n, sampler_sig)
    if key in _CHUNK_CACHE:
        return _CHUNK_CACHE[key]
    tx = optimizer(cfg, rules[0], tie=rules[1])

    def train_step(p, o, ids, targets, mask):
        loss, grads = jax.value_and_grad(loss_fn)(p, ids, targets, mask, arch)
        updates, o = tx.update(grads, o, p)
        return optax.apply_updates(p, updates), o, loss

    if sampler is None:
        def one_seed(p, o, ids, targets, mask):
            def body(carry, batch):
                p, o, loss = train_step(*carry, *batch)
                return (p, o), loss
            (p, o), losses = jax.lax.scan(body, (p, o), (ids, targets, mask))
            return p, o, losses

        fn = jax.jit(jax.vmap(one_seed), donate_argnums=donate_args())
    else:
        def one_seed(p, o, seed_key, steps):
            def body(carry, step):
                ids, targets, mask = sampler(jax.random.fold_in(seed_key, step))
                p, o, loss = train_step(*carry, ids, targets, mask)
                return (p, o), loss
            (p, o), losses = jax.lax.scan(body, (p, o), steps)
            return p, o, losses

        fn = jax.jit(jax.vmap(one_seed, in_axes=(0, 0, 0, None)), donate_argnums=donate_args())
    if len(_CHUNK_CACHE) > 32:
        _CHUNK_CACHE.clear()
    _CHUNK_CACHE[key] = fn
    return fn


@functools.lru_cache(maxsize=16)
def _eval_fn(arch: Arch) -> Callable:
    """Jitted ``(params[S], ids[B, T], targets[B, T]) -> (pred[S, B, T] int32, ce[S, B, T] float32)``."""

    def one(p, ids, targets):
        logits = forward(p, ids, arch).logits
        ce = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
        return logits.argmax(-1).astype(jnp.int32), ce

    return jax.jit(jax.vmap(one, in_axes=(0, None, None)))


def marginal_entropy(batch: Batch) -> float:
    """Cross-entropy (nats) of the best input-independent predictor on ``batch``: the entropy of the
    empirical distribution of the targets at the loss-mask positions. The default plateau loss of
    :func:`plateau_exit_step`.

    Args:
        batch: an evaluation batch (:meth:`TaskData.eval_sets`).
    Returns:
        Entropy in nats (0.0 when nothing is scored).
    """
    t = batch.targets[batch.loss_mask > 0]
    if t.size == 0:
        return 0.0
    p = np.bincount(t).astype(np.float64) / t.size
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


#: Default margin (nats) below the plateau loss that counts as leaving the plateau.
PLATEAU_MARGIN = 0.1


def plateau_exit_step(curve: List[Dict[str, Any]], condition: str, plateau_loss: float,
                      margin: float = PLATEAU_MARGIN) -> Optional[int]:
    """The step at which a run leaves its plateau: the first evaluation step whose evaluation loss
    on ``condition`` is below ``plateau_loss - margin`` (None if it never is).

    Args:
        curve: a run's curve (``[{"step", "loss": {condition: nats}, ...}]``, steps ascending).
        condition: condition name.
        plateau_loss: the plateau's loss in nats (default in the sweep: :func:`marginal_entropy`
            of the condition's evaluation targets, the loss of predicting the target
            distribution without reading the input).
        margin: nats below the plateau (default :data:`PLATEAU_MARGIN`).
    """
    for point in curve:
        loss = (point.get("loss") or {}).get(condition)
        if loss is not None and loss < plateau_loss - margin:
            return int(point["step"])
    return None


def score_predictions(pred: np.ndarray, ce: np.ndarray, sets: List[Batch], names: List[str]) -> Dict[str, Any]:
    """One curve point's numbers from predictions on the concatenated evaluation sets.

    Args:
        pred: [B_total, T] predicted classes; ce: [B_total, T] cross-entropy (nats), in the order
            of ``sets`` concatenated.
        sets: the evaluation sets (one per condition); names: their condition names.
    Returns:
        ``{"error": {name: float|None}, "loss": {name: float|None}, "error_per_position":
        {name: [float|None per model position 1..T-1]}}``, as :func:`evaluate` defines them.
    """
    out = {"error": {}, "loss": {}, "error_per_position": {}}
    for name, (wrong_pos, scored_pos, total, loss) in zip(names, condition_counts(pred, ce, sets)):
        out["error"][name] = round(float(wrong_pos.sum() / total), 6) if total else None
        out["loss"][name] = round(loss, 6) if loss is not None else None
        out["error_per_position"][name] = [round(float(w / n), 5) if n else None
                                           for w, n in zip(wrong_pos[1:], scored_pos[1:])]
    return out


def condition_counts(pred: np.ndarray, ce: np.ndarray, sets: List[Batch]) -> List[Tuple[np.ndarray, np.ndarray,
                                                                                          int, Optional[float]]]:
    """Per evaluation set, from predictions on the concatenated ``sets`` (pred, ce: [B_total, T]):
    wrong [T] and scored [T] counts per model position (``error_mask``), the scored total, and the
    mean cross-entropy over ``loss_mask`` in nats (None where nothing is scored), in ``ce``'s dtype."""
    out, start = [], 0
    for s in sets:
        b = len(s.ids)
        p, c = pred[start:start + b], ce[start:start + b]
        start += b
        wrong_pos = ((p != s.targets) & s.error_mask).sum(0)
        scored_pos = s.error_mask.sum(0)
        lm = s.loss_mask
        out.append((wrong_pos, scored_pos, int(scored_pos.sum()),
                    float((c * lm).sum() / lm.sum()) if lm.sum() else None))
    return out


def train_seeds(data: TaskData, model_cfg: ModelConfig, train_cfg: TrainConfig, seeds: List[int], *,
                chunk: int = 100, sampler: str = "numpy", eval_sets: Optional[List[Batch]] = None,
                eval_every: int = 0, exit_error: Optional[float] = None, exit_patience: int = 2,
                checkpoint_dir: Optional[str] = None, checkpoint_every: int = 0, stop_at: Optional[int] = None,
                on_chunk: Optional[Callable[[int, np.ndarray], None]] = None,
                curriculum: Optional[float] = None) -> List[RunOutcome]:
    """Train one model per seed, all seeds at once: ``vmap`` over seeds of ``lax.scan`` over steps.

    Each seed's maths is that of :func:`train` with ``train_cfg.seed = seed``: the same initial
    weights (``PRNGKey(seed)``), optimiser and schedule; with ``sampler="numpy"`` also the same
    batches (``step_rng(seed, step)``), so its losses equal :func:`train`'s up to float
    reassociation inside XLA (tests/test_crosscheck_fast.py measures the difference). Losses stay
    on the device during a chunk; one transfer per chunk brings them back.

    Args:
        data: the task and its conditions.
        model_cfg, train_cfg: architecture and optimisation (``train_cfg.seed`` is ignored).
        seeds: the seeds, one model each (at least one, distinct).
        chunk: optimiser steps per jitted call (evaluations and checkpoints split chunks).
        sampler: one of :data:`SAMPLERS`.
        eval_sets: fixed evaluation batches (one per condition) for the curve; needed when
            ``eval_every`` > 0.
        eval_every: evaluate every this many steps and at the end (0 = never); each point is
            ``{"step", "error", "loss", "error_per_position"}`` per condition
            (:func:`score_predictions`).
        exit_error: early exit: stop once every seed's error on every condition has been <=
            this at ``exit_patience`` consecutive evaluations (None = train all steps).
        exit_patience: see ``exit_error``.
        checkpoint_dir: where to save and resume the stacked state (None = no checkpoints).
        checkpoint_every: save every this many steps (0 = only at the end).
        stop_at: stop after this step (the schedule still runs to ``train_cfg.steps``).
        on_chunk: called as ``on_chunk(step, losses[S])`` after every chunk (step = steps done).
        curriculum: accuracy in (0, 1] that advances a curriculum (None = none: every batch mixes
            all conditions). The conditions of ``data`` are the stages, easiest first; at stage s
            a seed's batches mix conditions 0..s (split evenly, :meth:`TaskData.sample`), and at
            every evaluation (``eval_every``, needed) a seed whose curve accuracy (1 - error on
            the ``eval_sets`` of condition s, sequences of the training distribution that are
            never trained on) is >= ``curriculum`` moves to stage s + 1 (one stage per
            evaluation). Each seed advances on its own; stages and advances are checkpointed.
            Needs the numpy sampler (``sampler`` numpy or auto).
    Returns:
        One :class:`RunOutcome` per seed, in the order of ``seeds``; ``curve``, ``steps_done``,
        ``exit_reason`` and (with a curriculum) ``curriculum`` are filled in.
    Raises:
        ParameterError: bad ``seeds``/``chunk``/``sampler``/``eval_every``/``curriculum``, a task
            without a JAX sampler with ``sampler="jax"``, a curriculum with the JAX sampler or
            without ``eval_every``, or a checkpoint made with other settings.
        InputError: the checkpoint is corrupt.
    """
    seeds = [int(s) for s in seeds]
    if not seeds or len(set(seeds)) != len(seeds):
        raise ParameterError(f"seeds must be a non-empty list of distinct integers, got {seeds!r}")
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise ParameterError(f"chunk must be an integer >= 1, got {chunk!r}")
    if sampler not in SAMPLERS:
        raise ParameterError(f"sampler={sampler!r}; expected one of {', '.join(SAMPLERS)}")
    if curriculum is not None:
        if isinstance(curriculum, bool) or not 0 < curriculum <= 1:
            raise ParameterError(f"curriculum accuracy must be in (0, 1], got {curriculum!r}")
        if sampler == "jax":
            raise ParameterError("a curriculum draws each seed's batches from its stage's conditions: it needs "
                                 "sampler='numpy' (or 'auto')")
        if not eval_every:
            raise ParameterError("a curriculum advances at evaluations: it needs eval_every > 0")
        sampler = "numpy"
    if sampler == "auto":
        sampler = "jax" if has_jax_sampler(data) else "numpy"
    if sampler == "jax" and not has_jax_sampler(data):
        raise ParameterError(f"task {data.task.name} has no JAX sampler; use sampler='numpy'")
    if eval_every < 0 or (eval_every and eval_sets is None):
        raise ParameterError(f"eval_every={eval_every} needs eval_every >= 0 and eval_sets")
    n_seeds = len(seeds)
    arch = model_cfg.arch(data.pad_id)
    opt_key = optimiser_key(train_cfg)
    init_state = optimiser_init(opt_key, model_cfg.rules)
    inits = [init_params(model_cfg, jax.random.PRNGKey(s), data.n_inputs, data.n_classes, data.seq_len)
             for s in seeds]
    state = {"params": stack_trees(inits), "opt_state": stack_trees([init_state(p) for p in inits])}
    desc = dict(_describe(data, model_cfg, dataclasses.replace(train_cfg, seed=seeds[0])),
                seeds=seeds, sampler=sampler)
    if curriculum is not None:  # only then: checkpoints made before the option keep resuming
        desc["curriculum"] = curriculum
    stages = [0] * n_seeds
    advances: List[List[Dict[str, Any]]] = [[] for _ in seeds]
    start, seconds = 0, 0.0
    history: List[List[Dict[str, float]]] = [[] for _ in seeds]
    curves: List[List[Dict[str, Any]]] = [[] for _ in seeds]
    exit_reason, calm = "", 0
    if checkpoint_dir is not None:
        record = _resumable(checkpoint_dir, desc)
        if record is not None:
            start, state, meta = load_checkpoint(checkpoint_dir, state)
            history = [list(h) for h in meta.get("history", history)]
            curves = [list(c) for c in meta.get("curves", curves)]
            seconds = float(meta.get("seconds", 0.0))
            exit_reason, calm = meta.get("exit_reason", ""), int(meta.get("calm", 0))
            stages = [int(x) for x in meta.get("stages", stages)]
            advances = [list(a) for a in meta.get("advances", advances)]
    resumed_from = start
    end = train_cfg.steps if stop_at is None else min(stop_at, train_cfg.steps)
    if exit_reason:
        end = start
    params, opt_state = state["params"], state["opt_state"]
    if sampler == "jax":
        draw = jax_sampler(data, train_cfg.batch)
        sig = ("jax", data.task.name, repr(data.conditions), train_cfg.batch, data.seq_len)
        seed_keys = jnp.stack([jax.random.fold_in(jax.random.PRNGKey(s), DATA_STREAM) for s in seeds])
    else:
        draw, sig, seed_keys = None, ("numpy",), None
    eval_ids = eval_targets = None
    if eval_every:
        eval_ids = as_jax(np.concatenate([s.ids for s in eval_sets]))
        eval_targets = as_jax(np.concatenate([s.targets for s in eval_sets]))
    t0 = time.perf_counter()

    def save(step):
        save_checkpoint(checkpoint_dir, step, {"params": params, "opt_state": opt_state},
                        {"config": desc, "history": history, "curves": curves, "exit_reason": exit_reason,
                         "calm": calm, "stages": stages, "advances": advances,
                         "seconds": seconds + time.perf_counter() - t0})

    def next_stop(s):
        cands = [end, (s // chunk + 1) * chunk]
        for every in (eval_every, checkpoint_every):
            if every:
                cands.append((s // every + 1) * every)
        return min(cands)

    s = start
    while s < end:
        nxt = next_stop(s)
        n = nxt - s
        fn = seed_chunk_fn(arch, opt_key, model_cfg.rules, n, draw, sig)
        if draw is None:
            batches = [[data.sample(step_rng(seed, t), train_cfg.batch,
                                    None if curriculum is None else range(stage + 1)) for t in range(s, nxt)]
                       for seed, stage in zip(seeds, stages)]
            arrays = [np.stack([np.stack([getattr(b, f) for b in per_seed]) for per_seed in batches])
                      for f in ("ids", "targets", "loss_mask")]
            params, opt_state, losses = fn(params, opt_state, *arrays)
        else:
            params, opt_state, losses = fn(params, opt_state, seed_keys, jnp.arange(s, nxt))
        losses = np.asarray(losses)  # [S, n]: the one transfer of the chunk
        for t in range(s + 1, nxt + 1):
            if t % train_cfg.log_every == 0 or t == end:
                for i in range(n_seeds):
                    history[i].append({"step": t, "loss": round(float(losses[i, t - s - 1]), 6)})
        s = nxt
        if eval_every and (s % eval_every == 0 or s == end):
            pred, ce = _eval_fn(arch)(params, eval_ids, eval_targets)
            pred, ce = np.asarray(pred), np.asarray(ce)
            ok = True
            for i in range(n_seeds):
                point = {"step": s, **score_predictions(pred[i], ce[i], eval_sets, data.names)}
                if curriculum is not None:
                    point["stage"] = stages[i]
                    stages[i] = curriculum_advance(stages[i], point, data.names, curriculum, advances[i], s)
                curves[i].append(point)
                ok &= exit_error is not None and all(e is not None and e <= exit_error
                                                     for e in point["error"].values())
            calm = calm + 1 if ok else 0
            if exit_error is not None and calm >= exit_patience and s < end:
                exit_reason = (f"early exit at step {s}: every seed's error <= {exit_error} at "
                               f"{exit_patience} consecutive evaluations")
                end = s
        if on_chunk is not None:
            on_chunk(s, losses[:, -1])
        if checkpoint_dir is not None and checkpoint_every and s % checkpoint_every == 0 and s < end:
            save(s)
    jax.block_until_ready(params)
    if checkpoint_dir is not None and s > start:
        save(s)
    seconds += time.perf_counter() - t0
    n_params = count_params(_unstack(params, 0), model_cfg)
    return [RunOutcome(params=_unstack(params, i), arch=arch, history=history[i], seconds=seconds,
                       resumed_from=resumed_from, n_params=n_params, curve=curves[i], steps_done=s,
                       exit_reason=exit_reason, seeds_together=n_seeds, sampler=sampler,
                       curriculum=None if curriculum is None else
                       {"accuracy": curriculum, "stages": list(data.names), "stage": stages[i],
                        "advances": advances[i]})
            for i in range(n_seeds)]


def curriculum_advance(stage: int, point: Dict[str, Any], names: List[str], accuracy: float,
                       advances: List[Dict[str, Any]], step: int) -> int:
    """The curriculum stage after an evaluation point: ``stage + 1`` when the stage's condition
    (``names[stage]``) has error <= 1 - ``accuracy`` at ``point`` and a later stage exists, else
    ``stage``; an advance is appended to ``advances`` as ``{"step", "stage", "condition", "passed",
    "error"}``.

    Args:
        stage: current stage (0-based index into ``names``).
        point: a curve point (:func:`score_predictions`: ``{"error": {name: float|None}, ...}``).
        names: condition names in stage order.
        accuracy: the accuracy that passes a stage, in (0, 1].
        advances: the seed's advances so far (appended to).
        step: the step of the evaluation.
    """
    if stage >= len(names) - 1:
        return stage
    err = point["error"].get(names[stage])
    if err is None or err > 1 - accuracy + 1e-12:
        return stage
    advances.append({"step": int(step), "stage": stage + 1, "condition": names[stage + 1],
                     "passed": names[stage], "error": err})
    return stage + 1


@dataclasses.dataclass
class TrainedModel:
    """A trained model read back from a checkpoint directory (:func:`load_trained`).

    Attributes:
        params: weights (runtime layout, JAX arrays).
        arch: runtime architecture.
        data: the task and its conditions (input ids, output classes, sequence length).
        model: architecture settings.
        step: training steps done.
        directory: the checkpoint directory.
    """

    params: Dict[str, Any]
    arch: Arch
    data: TaskData
    model: ModelConfig
    step: int
    directory: str


def load_trained(directory: str, seed: Optional[int] = None) -> TrainedModel:
    """Load the model of a training checkpoint (``depthcraft train``'s ``checkpoints/<run>``).

    The checkpoint's record names the task, its conditions and the model and training
    settings; the arrays are read through :func:`load_checkpoint` into a freshly
    initialised state of that structure (so a file that does not match is refused).
    A seed group's checkpoint (:func:`train_seeds`, ``checkpoints/<run>_seeds0-1-2``) holds
    the stacked models of its seeds: ``seed`` picks one (default: the group's first).

    Raises:
        InputError: no checkpoint in ``directory``, an unreadable or inconsistent one, or
            ``seed`` not in the group.
    """
    from depthcraft.verify.tasks import get_task

    record = read_meta(directory)
    if record is None:
        raise InputError(f"{directory} holds no training checkpoint ({os.path.join(directory, 'checkpoint.json')} "
                         f"is missing)")
    try:
        config = record["meta"]["config"]
        task = get_task(config["task"])
        data = TaskData(task, [dict(c) for c in config["conditions"]])
        model_cfg = ModelConfig(**config["model"])
        train_cfg = TrainConfig(**config["train"])
    except (KeyError, TypeError, DepthcraftError) as e:
        raise InputError(f"checkpoint {directory} does not describe its model: {e}") from None
    params = init_params(model_cfg, jax.random.PRNGKey(0), data.n_inputs, data.n_classes, data.seq_len)
    template = {"params": params, "opt_state": optimiser_init(optimiser_key(train_cfg), model_cfg.rules)(params)}
    seeds = config.get("seeds")
    if seeds is not None:
        pick = seeds[0] if seed is None else seed
        if pick not in seeds:
            raise InputError(f"checkpoint {directory} holds seeds {seeds}, not seed {pick}")
        template = stack_trees([template] * len(seeds))
    step, state, _ = load_checkpoint(directory, template)
    if seeds is not None:
        state = _unstack(state, seeds.index(pick))
    return TrainedModel(params=state["params"], arch=model_cfg.arch(data.pad_id), data=data, model=model_cfg,
                        step=step, directory=directory)
