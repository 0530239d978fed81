"""Training one model: optax AdamW with warm-up and cosine decay, a jitted step, exact resume.

Each step draws a fresh batch from the task's sampler with
``numpy.random.default_rng([seed, step])`` (so the data of a step does not depend
on what ran before it), takes one AdamW step on the mean cross-entropy over the
scored positions, and every ``checkpoint_every`` steps saves the parameters and
optimiser state (:mod:`verify.crosscheck.checkpoint`). A run that finds a
checkpoint made with the same settings continues from it; the result is
bit-identical to an uninterrupted run.
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
from depthcraft.constructions.runtime import Arch, forward
from depthcraft.verify.crosscheck.checkpoint import load_checkpoint, read_meta, save_checkpoint
from depthcraft.verify.crosscheck.data import Batch, TaskData
from depthcraft.verify.crosscheck.model import ModelConfig, count_params, init_params


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


def optimizer(cfg: TrainConfig, frozen: Tuple[Tuple[str, ...], ...] = ()) -> optax.GradientTransformation:
    """Gradient clipping then AdamW; weight decay only on weight matrices (ndim >= 2,
    embeddings included), not on biases or LayerNorm parameters.

    Args:
        cfg: optimisation settings.
        frozen: parameter paths (dict keys from the root, e.g. ``("embed", "token")``) whose
            update is zero: no gradient step, no weight decay, left out of the clipping norm
            (:attr:`ModelConfig.frozen <verify.crosscheck.model.ModelConfig.frozen>`).
    """
    decay_mask = lambda params: jax.tree_util.tree_map(lambda a: a.ndim >= 2, params)  # noqa: E731
    parts = [optax.clip_by_global_norm(cfg.grad_clip)] if cfg.grad_clip > 0 else []
    parts.append(optax.adamw(schedule(cfg), b1=0.9, b2=cfg.b2, weight_decay=cfg.weight_decay, mask=decay_mask))
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


def _optimiser_key(cfg: TrainConfig) -> TrainConfig:
    """The fields the optimiser depends on (seed, logging and evaluation do not matter)."""
    return dataclasses.replace(cfg, seed=0, log_every=1, eval_size=1)


@functools.lru_cache(maxsize=16)
def make_step(arch: Arch, cfg: TrainConfig, frozen: Tuple[Tuple[str, ...], ...] = ()) -> Callable:
    """The jitted train step ``(params, opt_state, ids, targets, mask) -> (params, opt_state, loss)``.

    Cached per (architecture, optimiser settings, frozen parameters), so runs that differ
    only in the seed reuse one compiled step.
    """
    tx = optimizer(cfg, frozen)

    @jax.jit
    def step(params, opt_state, ids, targets, mask):
        loss, grads = jax.value_and_grad(loss_fn)(params, ids, targets, mask, arch)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return step


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
    """

    params: Dict[str, Any]
    arch: Arch
    history: List[Dict[str, float]]
    seconds: float
    resumed_from: int
    n_params: int


def _describe(data: TaskData, model_cfg: ModelConfig, train_cfg: TrainConfig) -> Dict[str, Any]:
    return {"task": data.task.name, "conditions": [{k: v for k, v in c.items()} for c in data.conditions],
            "model": model_cfg.to_json(), "train": train_cfg.to_json()}


def train(data: TaskData, model_cfg: ModelConfig, train_cfg: TrainConfig, *, checkpoint_dir: Optional[str] = None,
          checkpoint_every: int = 0, stop_at: Optional[int] = None,
          on_step: Optional[Callable[[int, Optional[float]], None]] = None) -> RunOutcome:
    """Train one model on fresh batches from ``data``.

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
    tx = optimizer(train_cfg, model_cfg.frozen)
    params = init_params(model_cfg, jax.random.PRNGKey(train_cfg.seed), data.n_inputs, data.n_classes, data.seq_len)
    state = {"params": params, "opt_state": tx.init(params)}
    desc = _describe(data, model_cfg, train_cfg)
    start, history, seconds = 0, [], 0.0
    if checkpoint_dir is not None:
        record = read_meta(checkpoint_dir)
        if record is not None:
            saved = record.get("meta", {}).get("config")
            if _training_settings(saved) != _training_settings(desc):
                raise ParameterError(f"checkpoint in {checkpoint_dir} was made with other settings "
                                     f"({_first_difference(_training_settings(saved), _training_settings(desc))}); "
                                     f"use another output directory "
                                     f"or start afresh (depthcraft train --fresh)")
            start, state, meta = load_checkpoint(checkpoint_dir, state)
            history, seconds = list(meta.get("history", [])), float(meta.get("seconds", 0.0))
    resumed_from = start
    end = train_cfg.steps if stop_at is None else min(stop_at, train_cfg.steps)
    step_fn = make_step(arch, _optimiser_key(train_cfg), model_cfg.frozen)
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
                      n_params=count_params(params))


def _training_settings(desc: Any) -> Any:
    """The settings a checkpoint must share to be resumed (the evaluation size does not matter)."""
    out = _canon(desc)
    if isinstance(out, dict) and isinstance(out.get("train"), dict):
        out["train"].pop("eval_size", None)
    return out


def _canon(x: Any) -> Any:
    import json

    return json.loads(json.dumps(x, sort_keys=True, default=str))


def _first_difference(a: Any, b: Any, path: str = "") -> str:
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if _canon(a.get(k)) != _canon(b.get(k)):
                return _first_difference(a.get(k), b.get(k), f"{path}.{k}" if path else str(k))
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
            logits = np.asarray(forward(params, jnp.asarray(s.ids[i:i + batch]), arch).logits, np.float64)
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


def load_trained(directory: str) -> TrainedModel:
    """Load the model of a training checkpoint (``depthcraft train``'s ``checkpoints/<run>``).

    The checkpoint's record names the task, its conditions and the model and training
    settings; the arrays are read through :func:`load_checkpoint` into a freshly
    initialised state of that structure (so a file that does not match is refused).

    Raises:
        InputError: no checkpoint in ``directory``, an unreadable or inconsistent one.
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
    template = {"params": params, "opt_state": optimizer(train_cfg, model_cfg.frozen).init(params)}
    step, state, _ = load_checkpoint(directory, template)
    return TrainedModel(params=state["params"], arch=model_cfg.arch(data.pad_id), data=data, model=model_cfg,
                        step=step, directory=directory)
