"""The fused trainer: every group and seed of a sweep in one compiled training step (issue 32).

:func:`~verify.crosscheck.train.train_seeds` trains one group (one depth, width and set of
conditions) with its seeds vmapped; a sweep of 10 groups launches each group's kernels in turn,
and on a GPU the step is bound by the number of kernels, not by arithmetic. Here every run of a
sweep trains in **one** jitted call per chunk of steps:

* a *family* is the runs that share data and model; each family's models are stacked on a
  leading model axis [M, ...] and vmapped. Two layouts (:data:`LAYOUTS`, :func:`resolve_layout`):
* ``padded`` (the default on a GPU or TPU): a family is the runs that differ only in depth and
  seed; depths are padded to the family's deepest: a model of ``d`` layers has zero weights in
  layers ``d..L-1``; models are ordered deepest first, so layer ``j`` runs (``vmap``) on the prefix
  of models that have it and the others carry their residual stream past it unchanged. A padded
  layer is thus skipped, not computed: its weights get an exact zero gradient (the transpose of a
  slice), so AdamW leaves them at zero (zero moments, zero decay of a zero weight), and a forward
  pass through the padded stack (:func:`evaluate_all`: zero weights and biases write exactly
  0 to the residual stream) equals the model's own. The fewest kernels per step (k-hop paper
  preset, CPU back end's HLO: 13,781, against 122,525 for the per-group programs);
* ``split`` (the default on the CPU): a family is one depth's seeds, vmapped on their own: the
  per-group trainer's operations and shapes, still in one program (18,699 kernels per step on
  that preset);
* families of different width train side by side in the same jitted step (no width padding:
  it would quadruple the narrow models' matrix products);
* the learning rate of every step is an argument of the compiled chunk (:func:`learning_rates`:
  optax's schedule evaluated with the run's length as a constant, the per-group trainer's
  values bit for bit): calibration and a run of any length share one compilation;
* ``precision="bfloat16"``: the forward and backward pass in bfloat16 (weights cast inside the
  step, logits back to float32), with float32 master weights, optimiser state and loss
  (``"auto"``: bfloat16 on a GPU or TPU, float32 on the CPU);
* ``checkpoint_dir``: every family's state, the histories and curves are saved at every curve
  point (:mod:`verify.crosscheck.checkpoint`); a run started again with the same settings
  continues from the last one, and its steps after it are those of an uninterrupted run
  (tests/test_crosscheck_fused.py: bit for bit).

Each model's maths is that of :func:`~verify.crosscheck.train.train_seeds` with the JAX or numpy
sampler: the same initial weights, batches (``data_key(seed, step)``; one draw per seed and
family, shared by the depths, as the per-group trainer draws the same batches for every group),
optimiser and learning rates. In float32 on the CPU the ``split`` layout gives the per-group
trainer's losses and weights bit for bit (the k-hop cpu preset's rate 2e-3, 100 steps: relative
difference 0; tests/test_crosscheck_fused.py). The ``padded`` layout reduces over other shapes:
at the paper preset's rate 1e-4 its losses are the per-group trainer's to 9e-7 after 100 steps,
at 2e-3 to 5.2e-3, which is inside that trajectory's float32 noise floor: the per-group trainer
against itself, seeds vmapped together against one at a time, differs by 1.6e-2 there
(benchmarks/fused_noise.py, results/performance/fused_noise.json).

Evaluation (:func:`evaluate_all`) and attention maps (:func:`attention_all`) run every model of a
family in one vmapped call per slice of sequences.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from depthcraft.constructions import runtime
from depthcraft.constructions.errors import ParameterError
from depthcraft.constructions.runtime import Arch, as_jax, forward
from depthcraft.verify.crosscheck.checkpoint import load_checkpoint, read_meta, save_checkpoint
from depthcraft.verify.crosscheck.data import Batch, TaskData
from depthcraft.verify.crosscheck.model import ModelConfig, count_params, init_params
from depthcraft.verify.crosscheck.samplers import has_jax_sampler, jax_sampler
from depthcraft.verify.crosscheck.train import (DATA_STREAM, SAMPLERS, RunOutcome, TrainConfig,
                                                first_difference, training_settings, condition_counts,
                                                donate_args, optimiser_key, optimizer, schedule,
                                                score_predictions, step_rng)

#: Compute precisions of the fused trainer (``auto``: bfloat16 on GPU/TPU, float32 on CPU).
PRECISIONS = ("auto", "float32", "bfloat16")

#: Layouts of a fused program: ``padded`` (a family holds every depth, padded to its deepest:
#: one vmapped layer per depth index for all the models that have it, the fewest kernels) or
#: ``split`` (a family holds one depth: each depth's seeds are vmapped on their own, the
#: per-group trainer's operations and shapes, still in one program).
LAYOUTS = ("padded", "split")

#: Sequences x models per evaluation call (bounds the activations of a batched evaluation).
EVAL_ROWS = 8192


def resolve_layout(layout: str) -> str:
    """``"padded"`` or ``"split"`` for ``layout`` on this backend (``"auto"``: split on the CPU,
    where it gives the per-group trainer's float32 results bit for bit; padded on a GPU or TPU,
    where a step's cost is its number of kernels).

    Raises:
        ParameterError: not ``"auto"`` or one of :data:`LAYOUTS`.
    """
    if layout == "auto":
        return "split" if jax.default_backend() == "cpu" else "padded"
    if layout not in LAYOUTS:
        raise ParameterError(f"layout={layout!r}; expected auto or one of {', '.join(LAYOUTS)}")
    return layout


def resolve_precision(precision: str) -> str:
    """``"float32"`` or ``"bfloat16"`` for ``precision`` on this backend.

    Raises:
        ParameterError: not one of :data:`PRECISIONS`.
    """
    if precision not in PRECISIONS:
        raise ParameterError(f"precision={precision!r}; expected one of {', '.join(PRECISIONS)}")
    if precision == "auto":
        return "float32" if jax.default_backend() == "cpu" else "bfloat16"
    return precision


@dataclasses.dataclass
class Family:
    """Runs that differ only in depth and seed (``layout="split"``: only in seed), stacked on one
    model axis.

    Attributes:
        data: the task and conditions every model trains on.
        model: the deepest model's architecture (every model's, but for ``depth``).
        arch: the deepest model's runtime architecture.
        members: indices into the caller's run list, in family order (deepest first).
        depths: each member's depth; seeds: each member's seed.
        seed_list: the distinct seeds, in order of first use; seed_index: each member's index
            into it (the batch it trains on).
        active: per sublayer of ``arch``, how many members (a prefix) have it.
        sampler: ``"jax"`` or ``"numpy"``.
    """

    data: TaskData
    model: ModelConfig
    arch: Arch
    members: List[int]
    depths: List[int]
    seeds: List[int]
    seed_list: List[int]
    seed_index: List[int]
    active: Tuple[int, ...]
    sampler: str

    @property
    def size(self) -> int:
        return len(self.members)

    def signature(self) -> Tuple:
        """What the compiled step depends on (the cache key)."""
        d = self.data
        return (d.task.name, repr(d.conditions), self.arch, self.active, tuple(self.seed_index),
                len(self.seed_list), self.sampler, self.model.rules)


def make_families(runs: Sequence[Tuple[TaskData, ModelConfig, int]], sampler: str = "auto",
                  layout: str = "padded") -> List[Family]:
    """Group runs ``(data, model, seed)`` into families (same data and model but for the depth;
    with ``layout="split"`` also the same depth).

    Args:
        runs: the runs, in the caller's order.
        sampler: one of :data:`~verify.crosscheck.train.SAMPLERS` (``auto``: JAX where the task has one).
        layout: one of :data:`LAYOUTS`.
    Raises:
        ParameterError: a bad sampler or layout, ``sampler="jax"`` for a task without one, or a
            repeated (data, model, seed).
    """
    if sampler not in SAMPLERS:
        raise ParameterError(f"sampler={sampler!r}; expected one of {', '.join(SAMPLERS)}")
    if layout not in LAYOUTS:
        raise ParameterError(f"layout={layout!r}; expected one of {', '.join(LAYOUTS)}")
    keys: Dict[Any, List[int]] = {}
    for i, (data, model, seed) in enumerate(runs):
        k = (data.task.name, repr(data.conditions), repr(data.names),
             model if layout == "split" or model.looped else dataclasses.replace(model, depth=1))  # a looped model's blocks are tied: never padded
        keys.setdefault(k, []).append(i)
    out = []
    for idx in keys.values():
        data = runs[idx[0]][0]
        seen = set()
        for i in idx:
            tag = (runs[i][1].depth, int(runs[i][2]))
            if tag in seen:
                raise ParameterError(f"run {i} repeats depth {tag[0]} and seed {tag[1]} of its family")
            seen.add(tag)
        order = sorted(idx, key=lambda i: -runs[i][1].depth)  # stable: deepest first, then the caller's order
        deepest = runs[order[0]][1]
        arch = deepest.arch(data.pad_id)
        n_sub = [len(runs[i][1].arch(data.pad_id).sublayers) for i in order]
        active = tuple(sum(1 for n in n_sub if n > j) for j in range(len(arch.sublayers)))
        seeds = [int(runs[i][2]) for i in order]
        seed_list = list(dict.fromkeys(seeds))
        kind = sampler
        if kind == "auto":
            kind = "jax" if has_jax_sampler(data) else "numpy"
        if kind == "jax" and not has_jax_sampler(data):
            raise ParameterError(f"task {data.task.name} has no JAX sampler; use sampler='numpy'")
        out.append(Family(data=data, model=deepest, arch=arch, members=order, depths=[runs[i][1].depth for i in order],
                          seeds=seeds, seed_list=seed_list, seed_index=[seed_list.index(s) for s in seeds],
                          active=active, sampler=kind))
    return out


def _padded_init(fam: Family, runs) -> Dict[str, Any]:
    """Stacked [M, ...] float32 initial weights: each member's :func:`init_params` (its own seed and
    depth), layers beyond its depth zero."""
    d = fam.data
    trees = [init_params(runs[i][1], jax.random.PRNGKey(int(runs[i][2])), d.n_inputs, d.n_classes, d.seq_len)
             for i in fam.members]
    template = [jax.tree_util.tree_map(lambda a: np.zeros(a.shape, np.float32), layer) for layer in trees[0]["layers"]]
    stacked = {}
    for key in trees[0]:
        if key == "layers":
            stacked["layers"] = [jax.tree_util.tree_map(
                lambda *a: as_jax(np.stack([np.asarray(x) for x in a])),
                *[t["layers"][j] if j < len(t["layers"]) else template[j] for t in trees])
                for j in range(len(template))]
        else:
            stacked[key] = jax.tree_util.tree_map(lambda *a: as_jax(np.stack([np.asarray(x) for x in a])),
                                                  *[t[key] for t in trees])
    return stacked


def _unpad(host: Dict[str, Any], m: int, n_sub: int) -> Dict[str, Any]:
    """Member ``m``'s own weights (its first ``n_sub`` sublayers) from a family's stacked weights
    on the host (numpy), as device arrays."""
    own = jax.tree_util.tree_map(lambda a: a[m], host)
    own["layers"] = own["layers"][:n_sub]
    return as_jax(own)


def family_logits(params: Dict[str, Any], ids: jax.Array, arch: Arch, active: Tuple[int, ...],
                  dtype: Any = jnp.float32) -> jax.Array:
    """Logits of every member of a family, each on its own batch.

    Args:
        params: stacked padded weights [M, ...] (float32 masters).
        ids: [M, batch, T] int32.
        arch: the deepest member's architecture; active: members (a prefix) per sublayer.
        dtype: compute dtype (float32, or bfloat16: weights cast here, inside the traced step).
    Returns:
        [M, batch, T, O] float32 logits; the same operations as :func:`constructions.runtime.forward`
        per member (its own sublayers only: the others are skipped, not computed).
    """
    ident = lambda a: a  # noqa: E731
    if dtype != jnp.float32:
        params = jax.tree_util.tree_map(lambda a: a.astype(dtype) if jnp.issubdtype(a.dtype, jnp.floating) else a,
                                        params)
    m_all = ids.shape[0]
    x = jax.vmap(lambda e, i: runtime._embed({"embed": e}, i, ident))(params["embed"], ids)
    mask, query_ok = jax.vmap(lambda i: runtime._masks(i, arch))(ids)
    for j, spec in enumerate(arch.sublayers):
        m = active[j]
        p = params["layers"][j]
        if m < m_all:
            p = jax.tree_util.tree_map(lambda a: a[:m], p)
        y = jax.vmap(lambda x, p, mk, q, spec=spec: runtime._sublayer(x, p, spec, arch, mk, q))(
            x[:m], p, mask[:m], query_ok[:m])
        x = y if m == m_all else jnp.concatenate([y, x[m:]])
    head = {k: params[k] for k in ("unembed", "ln_final") if k in params}
    return jax.vmap(lambda h, x: runtime._readout(h, x, arch))(head, x).astype(jnp.float32)


def _family_losses(params, ids, targets, mask, arch, active, dtype):
    """[M] mean cross-entropy per member (float32), as :func:`~verify.crosscheck.train.loss_fn`."""
    logits = family_logits(params, ids, arch, active, dtype)
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
    return (ce * mask).sum((1, 2)) / jnp.maximum(mask.sum((1, 2)), 1.0)


_CACHE: Dict[Any, Callable] = {}


def fused_chunk_fn(families: List[Family], cfg: TrainConfig, n: int, precision: str) -> Callable:
    """The jitted ``n``-step function of :func:`train_fused`, every family in one program.

    ``(states, seed_keys, steps[n] int32, lrs[n] float32, feeds) -> (states, losses)``:
    ``states`` one ``(params, opt_state)`` per family (stacked [M, ...]); ``seed_keys`` per family
    [S] keys (JAX sampler; None for numpy-fed); ``lrs`` the learning rate of each step
    (:func:`learning_rates`: optax's schedule, the per-group trainer's values bit for bit);
    ``feeds`` per family ``(ids, targets, mask)`` of shape [n, S, B, T] (numpy-fed; None for
    JAX-sampled); ``losses`` per family [n, M] float32. Cached per (families' signatures,
    optimiser settings but the run length, n, precision): the run length and warm-up only enter
    through ``lrs``, so calibration and the run share one compilation.
    """
    opt_cfg = dataclasses.replace(optimiser_key(cfg), steps=1, warmup=0)  # the length is in lrs
    key = (tuple(f.signature() for f in families), opt_cfg, cfg.batch, n, precision)
    if key in _CACHE:
        return _CACHE[key]
    dtype = jnp.bfloat16 if precision == "bfloat16" else jnp.float32
    draws = [jax_sampler(f.data, cfg.batch) if f.sampler == "jax" else None for f in families]

    def chunk(states, seed_keys, steps, lrs, feeds):
        def body(states, xs):
            step, lr, feed = xs
            # the step's rate, whatever the optimiser's count (it equals ``step``)
            txs = [optimizer(opt_cfg, f.model.frozen, lambda _count, lr=lr: lr, tie=f.model.tie) for f in families]
            new, losses, drawn = [], [], {}
            for f, (params, opt), tx, draw, keys, fd in zip(families, states, txs, draws, seed_keys, feed):
                if draw is not None:
                    # one draw per (data, seeds), shared by every family that trains on it (the
                    # per-group trainer draws the same batches once per group)
                    dkey = (f.data.task.name, repr(f.data.conditions), tuple(f.seed_list))
                    if dkey not in drawn:
                        drawn[dkey] = jax.vmap(lambda k: draw(jax.random.fold_in(k, step)))(keys)
                    ids, targets, mask = drawn[dkey]
                else:
                    ids, targets, mask = fd
                pick = np.asarray(f.seed_index)
                if not np.array_equal(pick, np.arange(len(f.seed_list))):
                    ids, targets, mask = ids[pick], targets[pick], mask[pick]

                def total_loss(p, f=f):
                    per = _family_losses(p, ids, targets, mask, f.arch, f.active, dtype)
                    return per.sum(), per

                (_, per), grads = jax.value_and_grad(total_loss, has_aux=True)(params)
                updates, opt = jax.vmap(tx.update)(grads, opt, params)
                new.append((optax.apply_updates(params, updates), opt))
                losses.append(per)
            return new, losses

        return jax.lax.scan(body, states, (steps, lrs, feeds))

    fn = jax.jit(chunk, donate_argnums=(0,) if donate_args() else ())
    if len(_CACHE) > 16:
        _CACHE.clear()
    _CACHE[key] = fn
    return fn


_LR_CACHE: Dict[Any, Callable] = {}


def learning_rates(cfg: TrainConfig, start: int, stop: int) -> jax.Array:
    """[stop - start] float32: :func:`~verify.crosscheck.train.schedule`'s learning rate of steps
    ``start..stop-1`` for ``cfg`` (its ``steps`` and ``warmup``).

    Computed by the same jitted optax schedule, with the run length and warm-up as compile-time
    constants, that the per-group trainer evaluates inside its step: the same float32 values
    bit for bit (:func:`~verify.crosscheck.train.runtime_schedule`, the length as a traced
    argument, differs in the last bit at some steps, and at lr 2e-3 Adam carries such a
    difference to 1e-2 in the loss within 100 steps: benchmarks/fused_noise.py). A tiny
    program, compiled once per (lr, length, warm-up).
    """
    key = optimiser_key(cfg)
    if key not in _LR_CACHE:
        if len(_LR_CACHE) > 16:
            _LR_CACHE.clear()
        _LR_CACHE[key] = jax.jit(jax.vmap(schedule(key)))
    return _LR_CACHE[key](jnp.arange(start, stop, dtype=jnp.int32))


def init_states(families: List[Family], runs, cfg: TrainConfig) -> List[Tuple[Any, Any]]:
    """Each family's stacked ``(params, opt_state)`` at step 0."""
    out = []
    for f in families:
        params = _padded_init(f, runs)
        tx = optimizer(optimiser_key(cfg), f.model.frozen, tie=f.model.tie)
        out.append((params, jax.jit(jax.vmap(tx.init))(params)))
    return out


def _sequence_slices(total: int, models: int) -> int:
    """Sequences per evaluation call: at most :data:`EVAL_ROWS` sequence x model products."""
    return max(1, min(total, EVAL_ROWS // max(models, 1)))


_EVAL_CACHE: Dict[Any, Callable] = {}


def _eval_call(arch: Arch, collect: bool) -> Callable:
    key = (arch, collect)
    if key not in _EVAL_CACHE:
        def one(p, ids, targets):
            out = forward(p, ids, arch, collect_attention=collect)
            if collect:
                return out.attention
            ce = optax.softmax_cross_entropy_with_integer_labels(out.logits, targets)
            return out.logits.argmax(-1).astype(jnp.int32), ce

        _EVAL_CACHE[key] = jax.jit(jax.vmap(one, in_axes=(0, None, None)))
    return _EVAL_CACHE[key]


def evaluate_all(params: Dict[str, Any], arch: Arch, ids: np.ndarray, targets: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Every member's predictions on the same sequences, in vmapped calls over slices of them.

    Args:
        params: a family's stacked padded weights [M, ...]; arch: its deepest architecture
            (padded layers hold zero weights and write exactly 0: each member's own logits).
        ids, targets: [B, T] int32.
    Returns:
        ``(pred [M, B, T] int32, ce [M, B, T] float32)``: argmax class and cross-entropy (nats).
    """
    m = jax.tree_util.tree_leaves(params)[0].shape[0]
    b = len(ids)
    step = _sequence_slices(b, m)
    fn = _eval_call(arch, False)
    preds, ces = [], []
    for i in range(0, b, step):
        part_ids, part_t = ids[i:i + step], targets[i:i + step]
        short = step - len(part_ids)
        if short:  # pad the last slice: one compiled shape
            part_ids = np.concatenate([part_ids, np.repeat(part_ids[-1:], short, 0)])
            part_t = np.concatenate([part_t, np.repeat(part_t[-1:], short, 0)])
        p, c = fn(params, as_jax(part_ids), as_jax(part_t))
        preds.append(np.asarray(p)[:, :step - short])
        ces.append(np.asarray(c)[:, :step - short])
    return np.concatenate(preds, 1), np.concatenate(ces, 1)


def attention_all(params: Dict[str, Any], arch: Arch, ids: np.ndarray) -> List[np.ndarray]:
    """Every member's attention maps on the same sequences (one vmapped call).

    Args:
        params: stacked padded weights [M, ...]; arch: the deepest architecture.
        ids: [B, T] int32.
    Returns:
        Per attention sublayer of ``arch``: [M, B, H, T, T] float32 (a member's maps beyond its
        depth are those of its zero padding: callers keep its first ``depth`` maps).
    """
    maps = _eval_call(arch, True)(params, as_jax(ids), as_jax(np.zeros_like(ids)))
    return [np.asarray(a) for a in maps]


def eval_entries(pred: np.ndarray, ce: np.ndarray, sets: List[Batch], data: TaskData) -> List[Dict[str, Any]]:
    """:func:`~verify.crosscheck.train.evaluate`'s per-condition entries from one member's
    predictions on the concatenated ``sets`` (pred, ce: [B_total, T]; the loss from float32
    cross-entropy)."""
    out = []
    for c, (wrong, scored, total, loss) in enumerate(condition_counts(pred, ce.astype(np.float64), sets)):
        out.append({"condition": data.names[c], "params": data.conditions[c],
                    "error": float(wrong.sum() / total) if total else None, "scored": total, "loss": loss,
                    "error_per_position": [round(float(w / n), 5) if n else None
                                           for w, n in zip(wrong[1:], scored[1:])]})
    return out


@dataclasses.dataclass
class FusedResult:
    """What :func:`train_fused` returns.

    Attributes:
        outcomes: one :class:`~verify.crosscheck.train.RunOutcome` per run, in the caller's order.
        families: the families; params: each family's stacked padded weights [M, ...].
        stats: ``{"chunks": [{"step", "seconds"}], "compile_s", "evals": [seconds],
            "checkpoints": [seconds], "precision", "layout", "families", "models", "resumed_from"}``
            (wall seconds of this call; the first chunk includes compilation).
    """

    outcomes: List[RunOutcome]
    families: List[Family]
    params: List[Dict[str, Any]]
    stats: Dict[str, Any]


def checkpoint_description(runs: Sequence[Tuple[TaskData, ModelConfig, int]], train_cfg: TrainConfig,
                           families: List[Family], precision: str, layout: str,
                           eval_every: int) -> Dict[str, Any]:
    """What a fused checkpoint must match to be resumed: every run (task, conditions, model,
    seed, in order), the optimisation settings (the run length included: the schedule), the
    samplers, precision, layout and curve cadence (JSON; not the chunk, which changes no result:
    benchmarks/fused_noise.py)."""
    return {"trainer": "fused",
            "runs": [{"task": d.task.name, "conditions": [dict(c) for c in d.conditions], "model": m.to_json(),
                      "seed": int(seed)} for d, m, seed in runs],
            "train": dataclasses.replace(train_cfg, seed=0).to_json(),
            "samplers": [f.sampler for f in families], "precision": precision, "layout": layout,
            "eval_every": eval_every}


def check_resumable(checkpoint_dir: str, desc: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The checkpoint record of ``checkpoint_dir`` (None when there is none), made with ``desc``.

    Raises:
        ParameterError: it was made with other settings (names the first difference).
        InputError: it is not a depthcraft checkpoint.
    """
    record = read_meta(checkpoint_dir)
    if record is None:
        return None
    saved, now = training_settings(record.get("meta", {}).get("config")), training_settings(desc)
    if saved != now:
        raise ParameterError(f"checkpoint in {checkpoint_dir} was made with other settings "
                             f"({first_difference(saved, now)}); use another output directory "
                             f"or start afresh (--fresh)")
    return record


def train_fused(runs: Sequence[Tuple[TaskData, ModelConfig, int]], train_cfg: TrainConfig, *, chunk: int = 100,
                sampler: str = "auto", precision: str = "auto", layout: str = "auto",
                eval_sets: Optional[Sequence[List[Batch]]] = None,
                eval_every: int = 0, exit_error: Optional[float] = None, exit_patience: int = 2,
                stop_at: Optional[int] = None, deadline: Optional[float] = None,
                checkpoint_dir: Optional[str] = None,
                on_point: Optional[Callable[[int, List[list], List[list]], None]] = None,
                on_chunk: Optional[Callable[[int, np.ndarray], None]] = None) -> FusedResult:
    """Train every run ``(data, model, seed)`` at once, one jitted call per chunk of steps.

    Args:
        runs: the runs (any mix of depths, widths, conditions and seeds; a family per shared
            data and model-but-depth, :func:`make_families`).
        train_cfg: the optimisation settings every run shares (``seed`` ignored); ``steps`` and
            ``warmup`` enter the compiled step only through its learning rates
            (:func:`learning_rates`).
        chunk: optimiser steps per jitted call (evaluations split chunks).
        sampler: one of :data:`~verify.crosscheck.train.SAMPLERS`.
        precision: one of :data:`PRECISIONS`.
        layout: ``"auto"`` or one of :data:`LAYOUTS` (:func:`resolve_layout`).
        eval_sets: per run, its fixed curve evaluation batches (one per condition; the same for
            every run of a family); needed when ``eval_every`` > 0.
        eval_every: evaluate every this many steps and at the end (0 = never); a curve point is
            :func:`~verify.crosscheck.train.score_predictions`' dict with ``step``.
        exit_error, exit_patience: stop once every run's error on every condition has been
            <= ``exit_error`` at ``exit_patience`` consecutive evaluations.
        stop_at: stop after this step (the schedule still runs to ``train_cfg.steps``).
        deadline: a ``time.perf_counter()`` time: no chunk starts that would end after it (by the
            longest chunk so far, compilation excepted, plus the last curve point's evaluation
            and checkpoint when the chunk ends on one); the run then ends with ``exit_reason``
            "deadline" after an evaluation.
        checkpoint_dir: save every family's weights and optimiser state, the histories, curves
            and early-exit state there (:mod:`verify.crosscheck.checkpoint`, atomic) at every
            curve point, and at the end; when it holds a checkpoint of the same settings
            (:func:`checkpoint_description`), continue from it: the steps after it are those of
            an uninterrupted run (same batches, learning rates and compiled chunks), the
            outcomes' ``resumed_from`` its step. None = no checkpoints.
        on_point: ``on_point(step, curves, histories)`` after every evaluation, after its
            checkpoint (per run, in the caller's order): the hook that writes results as they come.
        on_chunk: ``on_chunk(step, last_losses[R])`` after every chunk.
    Returns:
        :class:`FusedResult`.
    Raises:
        ParameterError: no runs, a bad chunk/sampler/precision/layout/eval_every, or a
            checkpoint made with other settings.
        InputError: the checkpoint is corrupt.
    """
    if not runs:
        raise ParameterError("train_fused needs at least one run")
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise ParameterError(f"chunk must be an integer >= 1, got {chunk!r}")
    if eval_every < 0 or (eval_every and eval_sets is None):
        raise ParameterError(f"eval_every={eval_every} needs eval_every >= 0 and eval_sets")
    precision = resolve_precision(precision)
    layout = resolve_layout(layout)
    families = make_families(runs, sampler, layout)
    states = init_states(families, runs, train_cfg)
    n_runs = len(runs)
    seed_keys = [jnp.stack([jax.random.fold_in(jax.random.PRNGKey(s), DATA_STREAM) for s in f.seed_list])
                 if f.sampler == "jax" else None for f in families]
    sets = [None if eval_sets is None else eval_sets[f.members[0]] for f in families]
    eval_arrays = [None if s is None else (np.concatenate([b.ids for b in s]), np.concatenate([b.targets for b in s]))
                   for s in sets]
    end = train_cfg.steps if stop_at is None else min(stop_at, train_cfg.steps)
    history: List[List[Dict[str, float]]] = [[] for _ in runs]
    curves: List[List[Dict[str, Any]]] = [[] for _ in runs]
    stats: Dict[str, Any] = {"chunks": [], "evals": [], "checkpoints": [], "precision": precision, "layout": layout,
                             "families": len(families), "models": n_runs, "resumed_from": 0}
    exit_reason, calm, start, seconds_before = "", 0, 0, 0.0
    desc = None
    if checkpoint_dir is not None:
        desc = checkpoint_description(runs, train_cfg, families, precision, layout, eval_every)
        if check_resumable(checkpoint_dir, desc) is not None:
            start, state, meta = load_checkpoint(checkpoint_dir, {"states": states})
            states = list(state["states"])
            history = [list(h) for h in meta["history"]]
            curves = [list(c) for c in meta["curves"]]
            exit_reason, calm = meta.get("exit_reason", ""), int(meta.get("calm", 0))
            seconds_before = float(meta.get("seconds", 0.0))
            stats["resumed_from"] = start
            if exit_reason:  # an early exit is final
                end = start
    t0 = time.perf_counter()

    def next_stop(s):
        c = [end, (s // chunk + 1) * chunk]
        if eval_every:
            c.append((s // eval_every + 1) * eval_every)
        return min(c)

    def evaluate_now(s) -> bool:
        te = time.perf_counter()
        ok = True
        for f, (params, _), arrays, fs in zip(families, states, eval_arrays, sets):
            pred, ce = evaluate_all(params, f.arch, *arrays)
            for m, i in enumerate(f.members):
                point = {"step": s, **score_predictions(pred[m], ce[m], fs, f.data.names)}
                curves[i].append(point)
                ok &= exit_error is not None and all(e is not None and e <= exit_error
                                                     for e in point["error"].values())
        stats["evals"].append(round(time.perf_counter() - te, 4))
        return ok

    def save(s, final_reason=""):
        if checkpoint_dir is None:
            return
        tc = time.perf_counter()
        save_checkpoint(checkpoint_dir, s, {"states": states},
                        {"config": desc, "history": history, "curves": curves, "exit_reason": final_reason,
                         "calm": calm, "seconds": seconds_before + time.perf_counter() - t0})
        stats["checkpoints"].append(round(time.perf_counter() - tc, 4))

    def point_done(s):
        if on_point is not None:
            on_point(s, curves, history)

    s = start
    slowest, point_s = 0.0, 0.0
    while s < end:
        nxt = next_stop(s)
        after = point_s if eval_every and (nxt % eval_every == 0 or nxt == end) else 0.0
        if deadline is not None and stats["chunks"] and time.perf_counter() + slowest + after > deadline:
            exit_reason = f"deadline: stopped at step {s} of {train_cfg.steps} (the next chunk would end past it)"
            if eval_every and (not curves[0] or curves[0][-1]["step"] != s):
                evaluate_now(s)
                save(s)
                point_done(s)
            break
        n = nxt - s
        fn = fused_chunk_fn(families, train_cfg, n, precision)
        feeds = []
        for f in families:
            if f.sampler == "jax":
                feeds.append(None)
                continue
            batches = [[f.data.sample(step_rng(seed, t), train_cfg.batch) for t in range(s, nxt)] for seed in f.seed_list]
            feeds.append(tuple(as_jax(np.stack([np.stack([getattr(b, name) for b in per_seed]) for per_seed in batches],
                                               axis=1))
                               for name in ("ids", "targets", "loss_mask")))
        tc = time.perf_counter()
        states, losses = fn(states, seed_keys, jnp.arange(s, nxt, dtype=jnp.int32), learning_rates(train_cfg, s, nxt),
                            feeds)
        losses = [np.asarray(x) for x in losses]  # per family [n, M]: the one transfer of the chunk
        dt = time.perf_counter() - tc
        if stats["chunks"]:
            slowest = max(slowest, dt)
        else:
            stats["compile_s"] = round(dt, 3)
        stats["chunks"].append({"step": nxt, "seconds": round(dt, 4)})
        last = np.zeros(n_runs)
        for f, fl in zip(families, losses):
            for m, i in enumerate(f.members):
                last[i] = fl[-1, m]
                for t in range(s + 1, nxt + 1):
                    if t % train_cfg.log_every == 0 or t == end:
                        history[i].append({"step": t, "loss": round(float(fl[t - s - 1, m]), 6)})
        s = nxt
        if on_chunk is not None:
            on_chunk(s, last)
        if eval_every and (s % eval_every == 0 or s == end):
            tp = time.perf_counter()
            ok = evaluate_now(s)
            calm = calm + 1 if ok else 0
            if exit_error is not None and calm >= exit_patience and s < end:
                exit_reason = (f"early exit at step {s}: every run's error <= {exit_error} at "
                               f"{exit_patience} consecutive evaluations")
            save(s, exit_reason)
            point_s = time.perf_counter() - tp
            point_done(s)
            if exit_reason:
                break
    params = [p for p, _ in states]
    jax.block_until_ready(params)
    if checkpoint_dir is not None and s > start and not (eval_every and stats["checkpoints"]
                                                          and curves[0] and curves[0][-1]["step"] == s):
        save(s, exit_reason if exit_reason.startswith("early exit") else "")
    seconds = seconds_before + time.perf_counter() - t0
    outcomes: List[Optional[RunOutcome]] = [None] * n_runs
    for f, p in zip(families, params):
        p = jax.tree_util.tree_map(np.asarray, p)  # one transfer per family
        for m, i in enumerate(f.members):
            model = runs[i][1]
            arch = model.arch(f.data.pad_id)
            own = _unpad(p, m, len(arch.sublayers))
            outcomes[i] = RunOutcome(params=own, arch=arch, history=history[i], seconds=seconds, resumed_from=start,
                                     n_params=count_params(own, model), curve=curves[i] if eval_every else None,
                                     steps_done=s, exit_reason=exit_reason, seeds_together=n_runs,
                                     sampler=f.sampler)
    return FusedResult(outcomes=outcomes, families=families, params=params, stats=stats)
