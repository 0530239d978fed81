"""A cross-check sweep: one training run per (condition, depth, seed), evaluation, alignment.

:class:`SweepConfig` is a preset with the command line's overrides applied;
:func:`plan` lists the runs; :func:`run_sweep` trains them one after another
(resuming any that have a matching checkpoint), evaluates each, computes the
attention alignment with the construction, and writes ``results.json`` after
every run and the plot at the end (:mod:`verify.crosscheck.report`). With
``trainer="fused"`` every run trains at once in one compiled step
(:mod:`verify.crosscheck.fused`, :func:`_fused_sweep`), evaluation and alignment are
batched, and ``results.json`` and one checkpoint of every run
(``checkpoints/fused``, resumed the same way) are written after every curve point.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

import jax
import numpy as np

from depthcraft.constructions.errors import DepthcraftError, ParameterError
from depthcraft.constructions.params import MAX_DEPTH, parse_values
from depthcraft.constructions.runtime import as_jax, forward
from depthcraft.verify.crosscheck.alignment import best_heads, head_alignments
from depthcraft.verify.crosscheck.checkpoint import read_meta
from depthcraft.verify.crosscheck.data import TaskData, condition_names
from depthcraft.verify.crosscheck.fused import PRECISIONS
from depthcraft.verify.crosscheck.model import ModelConfig
from depthcraft.verify.crosscheck.presets import Preset
from depthcraft.verify.crosscheck.train import (PLATEAU_MARGIN, SAMPLERS, TrainConfig, evaluate, marginal_entropy,
                                                plateau_exit_step)
from depthcraft.verify.crosscheck.trainer import BACKENDS, TrainJob, check_backend, train
from depthcraft.verify.tasks import get_task

#: Seed of the evaluation and alignment inputs (independent of the training seeds).
EVAL_SEED = 1


@dataclasses.dataclass(frozen=True)
class SweepConfig:
    """Everything a sweep needs (a preset plus overrides).

    Attributes:
        task: task name.
        preset: preset name the settings came from.
        conditions: resolved task parameter dicts, one per condition.
        mixed: one model per depth and seed on all conditions (else one per condition).
        depths: attention depths.
        model: architecture template (its ``depth`` is replaced per run).
        train: optimisation template (its ``seed`` is replaced per run).
        seeds: number of seeds (0..seeds-1).
        control: add runs at bound-1 with twice the heads and width.
        control_depths: only these of the bound-1 depths get the control (None = every one).
        construction: construction name (None = no comparison).
        threshold: error below which a depth solves a condition.
        eval_size, alignment_size: sequences per condition.
        checkpoint_every: steps between checkpoints (0 = only at the end).
        eval_every: evaluate every this many steps too, recording each run's ``curve`` (0 = never).
        eval_conditions: the conditions evaluation samples from (None = the training ones).
        claim_text, claim: the paper's depth claim, the bound where no construction applies.
        swept: the task parameters that name the conditions: those given as lists, else those
            given on the command line (else every parameter).
        trainer, sampler, chunk, exit_error, plateau_margin, dense: the training protocol
            (:class:`~verify.crosscheck.presets.Preset`); ``task`` is the dense variant of the
            preset's task when ``dense`` selected one.
        mix_over: with ``mixed``, the swept parameters mixed inside one model (one model per value
            of the other swept parameters, e.g. mixed D, one model per ``targets``); () = mix all.
        curriculum: with ``mixed``, the accuracy at which a model's curriculum moves to the next
            condition of its group (:func:`~verify.crosscheck.train.train_seeds`); None = no
            curriculum (every batch mixes all of the group's conditions).
        layout: the fused trainer's layout (``auto``, ``padded``, ``split``:
            :func:`~verify.crosscheck.fused.resolve_layout`).
        precision: the fused trainer's compute precision (:data:`~verify.crosscheck.fused.PRECISIONS`;
            ``auto`` = bfloat16 on a GPU, float32 on the CPU); the other trainers are float32.
    """

    task: str
    preset: str
    conditions: tuple
    mixed: bool
    depths: tuple
    model: ModelConfig
    train: TrainConfig
    seeds: int
    control: bool
    construction: Optional[str]
    threshold: float
    eval_size: int
    alignment_size: int
    checkpoint_every: int
    eval_conditions: Optional[tuple] = None
    eval_every: int = 0
    claim_text: Optional[str] = None
    claim: Optional[Callable[[Dict[str, Any]], Optional[int]]] = None
    swept: tuple = ()
    trainer: str = "fast"
    sampler: str = "auto"
    chunk: int = 100
    exit_error: Optional[float] = None
    plateau_margin: float = PLATEAU_MARGIN
    dense: bool = False
    control_depths: Optional[tuple] = None
    mix_over: tuple = ()
    curriculum: Optional[float] = None
    precision: str = "auto"
    layout: str = "auto"

    @property
    def names(self) -> List[str]:
        return condition_names(list(self.conditions), self.swept or None)

    def to_json(self) -> Dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "claim"}
        d["model"], d["train"] = self.model.to_json(), self.train.to_json()
        d["conditions"] = [dict(c) for c in self.conditions]
        d["eval_conditions"] = None if self.eval_conditions is None else [dict(c) for c in self.eval_conditions]
        d["condition_names"] = self.names
        return d


def _expand(params: Dict[str, Any]) -> List[Dict[str, Any]]:
    conds: List[Dict[str, Any]] = [{}]
    for k, v in params.items():
        values = v if isinstance(v, (tuple, list)) else (v,)
        conds = [dict(c, **{k: x}) for c in conds for x in values]
    return conds


def parse_depths(text: str) -> tuple:
    """``"1-6"``, ``"1..6"`` or ``"1,2,4"`` (or a mix, ``"1-3,6"``) -> sorted depths (the ``-p`` sweep syntax).

    Raises:
        ParameterError: not of that form, a depth < 1, or a depth above MAX_DEPTH.
    """
    out = set()
    for item in parse_values("depths", text):
        if not item.isdigit() or int(item) < 1:
            raise ParameterError(f"depths {text!r} must look like 1-6 or 1,2,4 (depths >= 1)")
        if int(item) > MAX_DEPTH:
            raise ParameterError(f"depths {text!r}: depth {item} is above the limit {MAX_DEPTH}")
        out.add(int(item))
    return tuple(sorted(out))


def make_config(preset: Preset, params: Optional[Dict[str, Any]] = None, **overrides) -> SweepConfig:
    """A :class:`SweepConfig` from a preset, task parameter overrides and field overrides.

    Args:
        preset: the preset.
        params: task parameters; a list/tuple value (or a comma-separated string) is swept.
        overrides: any :class:`~verify.crosscheck.presets.Preset` field (None = keep the preset's).
    Raises:
        ParameterError: unknown field, bad parameter values.
    """
    fields = {f.name for f in dataclasses.fields(Preset)}
    unknown = set(overrides) - fields
    if unknown:
        raise ParameterError(f"unknown sweep setting(s) {sorted(unknown)}")
    p = dataclasses.replace(preset, **{k: v for k, v in overrides.items() if v is not None})
    task = get_task(p.task)
    if p.dense:
        task = _dense_task(task)
    merged = dict(p.params)
    for k, v in (params or {}).items():
        if isinstance(v, str):  # the -p sweep syntax of depthcraft verify: 1,2,4 or 1..4 or 1-4
            values = parse_values(k, v)
            v = tuple(values) if len(values) > 1 else values[0]
        merged[k] = v
    known = {s.name for s in task.params}
    unknown = sorted(set(merged) - known)
    if unknown:
        raise ParameterError(f"unknown parameter {unknown[0]!r} for task {task.name}; expected one of {sorted(known)}")
    conditions = tuple(task.resolve(c) for c in _expand(merged))
    swept = tuple(k for k, v in merged.items() if isinstance(v, (tuple, list))) or tuple(params or ())
    if len({repr(sorted(c.items())) for c in conditions}) != len(conditions):
        raise ParameterError("the swept task parameters repeat a condition")
    model = ModelConfig(depth=1, heads=p.heads, width=p.width, mlp=p.mlp, layer_norm=p.layer_norm,
                        attention=p.attention, causal=task.causal, embedding=p.embedding, looped=p.looped)
    tcfg = TrainConfig(steps=p.steps, batch=p.batch, lr=p.lr, warmup=min(p.warmup, p.steps),
                       weight_decay=p.weight_decay, eval_size=p.eval_size,
                       log_every=max(1, min(100, p.steps // 20)))
    if p.seeds < 1:
        raise ParameterError(f"seeds must be >= 1, got {p.seeds}")
    if not 0 < p.threshold < 1:
        raise ParameterError(f"threshold must be in (0, 1), got {p.threshold}")
    check_backend(p.trainer, exit_error=p.exit_error, curriculum=p.curriculum, precision=p.precision)
    if p.sampler not in SAMPLERS:
        raise ParameterError(f"sampler={p.sampler!r}; expected one of {', '.join(SAMPLERS)}")
    if isinstance(p.chunk, bool) or not isinstance(p.chunk, int) or p.chunk < 1:
        raise ParameterError(f"chunk must be an integer >= 1, got {p.chunk!r}")
    if p.exit_error is not None and not 0 <= p.exit_error < 1:
        raise ParameterError(f"exit_error must be in [0, 1), got {p.exit_error}")
    from depthcraft.verify.crosscheck.fused import resolve_layout

    resolve_layout(p.layout)  # an unknown layout: one line now, not at the first compiled step
    if p.precision not in PRECISIONS:
        raise ParameterError(f"precision={p.precision!r}; expected one of {', '.join(PRECISIONS)}")
    if not p.plateau_margin >= 0:
        raise ParameterError(f"plateau_margin must be >= 0 nats, got {p.plateau_margin}")
    eval_conditions = tuple(task.resolve({**c, **p.eval_params}) for c in conditions) if p.eval_params else None
    if p.dense:
        _check_dense(task, conditions)
    if p.mix_over and not p.mixed:
        raise ParameterError(f"mix_over={p.mix_over!r} needs mixed training (--mixed)")
    bad_mix = [k for k in p.mix_over if k not in swept]
    if bad_mix:
        raise ParameterError(f"mix_over names {bad_mix}, which are not swept parameters ({list(swept)})")
    if p.curriculum is not None and not p.mixed:
        raise ParameterError("a curriculum needs mixed training (--mixed): it orders a model's conditions")
    if p.curriculum is not None and (isinstance(p.curriculum, bool) or not 0 < p.curriculum <= 1):
        raise ParameterError(f"curriculum accuracy must be in (0, 1], got {p.curriculum!r}")
    if p.control_depths is not None and not all(isinstance(d, int) and not isinstance(d, bool) and d >= 1
                                                for d in p.control_depths):
        raise ParameterError(f"control_depths must be depths >= 1, got {p.control_depths!r}")
    return SweepConfig(task=task.name, preset=p.name, conditions=conditions, mixed=p.mixed,
                       depths=tuple(p.depths), model=model, train=tcfg, seeds=p.seeds, control=p.control,
                       construction=p.construction, threshold=p.threshold, eval_size=p.eval_size,
                       alignment_size=p.alignment_size, checkpoint_every=p.checkpoint_every,
                       eval_conditions=eval_conditions, claim_text=p.claim_text, claim=p.claim, swept=swept,
                       eval_every=p.eval_every, trainer=p.trainer, sampler=p.sampler, chunk=p.chunk,
                       exit_error=p.exit_error, plateau_margin=p.plateau_margin, dense=p.dense,
                       control_depths=None if p.control_depths is None else tuple(p.control_depths),
                       mix_over=tuple(p.mix_over), curriculum=p.curriculum, precision=p.precision, layout=p.layout)


#: Trainers of a sweep: the backends of :func:`~verify.crosscheck.trainer.train` (``fast``: seeds
#: vmapped, one group at a time; ``fused``: every group and seed in one compiled step; ``loop``).
TRAINERS = tuple(BACKENDS)


def _dense_task(task):
    """The dense-supervision variant of ``task`` (``<name>_dense`` where registered), else ``task``."""
    from depthcraft.verify.tasks import TASKS

    return TASKS.get(f"{task.name}_dense", task)


def scored_per_sequence(task, conditions, size: int = 64) -> List[float]:
    """Mean number of scored (loss) positions per sequence of each condition, on ``size`` samples."""
    out = []
    for c in conditions:
        tokens = task.sample(c, np.random.default_rng([EVAL_SEED, 31]), size)
        _, scored = task.reference(c, tokens)
        out.append(round(float(np.asarray(scored, bool).sum(1).mean()), 3))
    return out


def _check_dense(task, conditions) -> None:
    """Dense supervision needs a task that scores more than one position per sequence.

    Raises:
        ParameterError: every condition scores at most one position per sequence.
    """
    if max(scored_per_sequence(task, conditions)) <= 1:
        raise ParameterError(f"dense supervision: task {task.name} scores one position per sequence and has "
                             f"no dense variant ({task.name}_dense); k-hop, ictm_dense and retrieval with "
                             f"answer slots per hop score several")


# ------------------------------------------------------------------ construction
@dataclasses.dataclass
class ConstructionInfo:
    """The construction of one condition: measured depth, bound, and the compiled model (or why not)."""

    name: Optional[str]
    depth: Optional[int] = None
    bound: Optional[int] = None
    bound_formula: Optional[str] = None
    bound_source: Optional[str] = None
    bound_kind: str = "upper"  # "lower" for an impossibility result (e.g. Mușat's ceil(log_3 2D))
    model: Any = None
    params: Optional[Dict[str, Any]] = None
    note: str = ""

    def to_json(self) -> Dict[str, Any]:
        return {"construction": self.name, "depth": self.depth, "bound": self.bound,
                "bound_formula": self.bound_formula, "bound_source": self.bound_source,
                "bound_kind": self.bound_kind, "note": self.note or None}


def condition_info(cfg: "SweepConfig", condition: Dict[str, Any]) -> ConstructionInfo:
    """The construction's info at a condition; where no construction applies, the paper's
    claimed depth (``cfg.claim``) stands in as the bound."""
    info = construction_info(cfg.construction, condition)
    if info.bound is None and cfg.claim is not None:
        info.bound, info.bound_formula, info.bound_source = cfg.claim(condition), cfg.claim_text, "paper claim"
    return info


def construction_info(name: Optional[str], condition: Dict[str, Any], compile_model: bool = True) -> ConstructionInfo:
    """Build the construction ``name`` at a task condition and measure its attention depth.

    Never raises for a condition the construction does not cover (e.g. k = 0): the
    returned info carries the reason in ``note``.
    """
    from depthcraft.verify.structure import measure
    from depthcraft.verify import lookup

    if name is None:
        return ConstructionInfo(None, note="no construction given")
    try:
        c = lookup.get(name)
    except ParameterError as e:
        return ConstructionInfo(name, note=str(e))
    try:
        own = {s.name for s in lookup.param_specs(c)}
        r = lookup.resolve(c, {k: v for k, v in condition.items() if k in own})
        p = r.params
    except DepthcraftError as e:
        return ConstructionInfo(name, note=f"not defined here: {e}")
    info = ConstructionInfo(name, bound=c.bound_values(p).get("attn_layers"),
                            bound_formula=c.bounds["attn_layers"].text if "attn_layers" in c.bounds else None,
                            bound_source="construction", params=p,
                            bound_kind=c.bounds["attn_layers"].kind if "attn_layers" in c.bounds else "upper")
    if compile_model:
        info.model = r.build()
        info.depth = measure(info.model)["attn_layers"]
    return info


# -------------------------------------------------------------------- runs
@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One training run: which conditions, architecture, seed, and whether it is a capacity control."""

    run_id: str
    conditions: tuple  # indices into SweepConfig.conditions
    model: ModelConfig
    train: TrainConfig
    control: bool = False


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9=.-]+", "_", text).strip("_")


def plan(cfg: SweepConfig, bounds: Sequence[Optional[int]]) -> List[RunSpec]:
    """Every run of the sweep, in order (depth-major, then conditions, then seeds; controls last).

    Args:
        cfg: the sweep.
        bounds: the depth bound of each condition (None = unknown), for the control runs.
    """
    groups = mixed_groups(cfg)
    names = cfg.names
    runs = []
    kept = [k for k in cfg.swept if k not in cfg.mix_over]

    def add(group, depth, heads, width, seed, control):
        m = dataclasses.replace(cfg.model, depth=depth, heads=heads, width=width)
        t = dataclasses.replace(cfg.train, seed=seed)
        if not cfg.mixed:
            tag = "_" + _slug(names[group[0]])
        elif cfg.mix_over and kept:
            tag = "_" + _slug(" ".join(f"{k}={cfg.conditions[group[0]][k]}" for k in kept))
        else:
            tag = ""
        rid = f"L{depth}_H{heads}_d{width}{tag}_seed{seed}" + ("_control" if control else "")
        runs.append(RunSpec(rid, group, m, t, control))

    for depth in cfg.depths:
        for group in groups:
            for seed in range(cfg.seeds):
                add(group, depth, cfg.model.heads, cfg.model.width, seed, False)
    if cfg.control:
        for group in groups:
            depths = sorted({b - 1 for b in (bounds[i] for i in group) if b is not None and b - 1 >= 1})
            if cfg.control_depths is not None:
                depths = [d for d in depths if d in cfg.control_depths]
            for depth in depths:
                for seed in range(cfg.seeds):
                    add(group, depth, 2 * cfg.model.heads, 2 * cfg.model.width, seed, True)
    return runs


def mixed_groups(cfg: SweepConfig) -> List[tuple]:
    """The condition indices each model trains on, in plan order.

    Not mixed: one condition per model. Mixed without ``mix_over``: every condition in one model.
    Mixed with ``mix_over``: one model per value of the swept parameters not in ``mix_over``, on
    the conditions that share it, in the order of ``cfg.conditions`` (the curriculum's order:
    the swept values as given, easiest first).

    Returns:
        List of tuples of indices into ``cfg.conditions``.
    """
    n = len(cfg.conditions)
    if not cfg.mixed:
        return [(i,) for i in range(n)]
    if not cfg.mix_over:
        return [tuple(range(n))]
    kept = [k for k in cfg.swept if k not in cfg.mix_over]
    groups: Dict[tuple, List[int]] = {}
    for i, c in enumerate(cfg.conditions):
        groups.setdefault(tuple(repr(c.get(k)) for k in kept), []).append(i)
    return [tuple(g) for g in groups.values()]


class Progress:
    """Callbacks of :func:`run_sweep` (the CLI shows them as progress bars). Default: silent."""

    def begin(self, runs: List[RunSpec]) -> None: ...

    def start_run(self, index: int, total: int, run: RunSpec, resumed_from: int) -> None: ...

    def step(self, run: RunSpec, step: int, loss: Optional[float]) -> None: ...

    def end_run(self, index: int, run: RunSpec, record: Dict[str, Any]) -> None: ...

    def message(self, text: str) -> None: ...


def _alignment(cfg: SweepConfig, data: TaskData, run: RunSpec, params, arch, infos: List[ConstructionInfo],
               cache: Dict[Any, Any]):
    """Each condition's trained-vs-construction head alignment (SPEC §7). The construction's maps on a
    condition's fixed alignment inputs are the same for every run: ``cache`` keeps them across runs."""
    trained = lambda local, ids: [np.asarray(a) for a in forward(params, as_jax(np.asarray(ids)), arch,  # noqa: E731
                                                                 collect_attention=True).attention]
    return [_align_condition(cfg, data, local, c, trained, arch.causal, infos, cache)
            for local, c in enumerate(run.conditions)]


def alignment_inputs(cfg: SweepConfig, data: TaskData, local: int, c: int):
    """The fixed alignment tokens of condition ``c`` (``local`` in ``data``) and their batch."""
    tokens = data.task.sample(data.conditions[local], np.random.default_rng([EVAL_SEED, 104_729, c]),
                              cfg.alignment_size)
    return tokens, data.condition_batch(local, tokens)


def _align_condition(cfg: SweepConfig, data: TaskData, local: int, c: int, trained_maps: Callable, causal: bool,
                     infos: List[ConstructionInfo], cache: Dict[Any, Any]) -> Dict[str, Any]:
    """One condition's alignment entry; ``trained_maps(local, ids [B, T])`` gives the trained model's
    attention maps (one [B, H, T, T] array per attention sublayer)."""
    info = infos[c]
    if info.model is None or cfg.alignment_size == 0:
        why = "alignment skipped (alignment_size = 0)" if info.model is not None else \
            (info.note or "no construction model")
        return {"condition": data.names[local], "note": why}
    tokens, batch = alignment_inputs(cfg, data, local, c)
    ids = batch.ids
    trained = trained_maps(local, ids)
    key = (c, ids.shape[1])
    if key not in cache:
        c_ids = info.model.encode(tokens, length=ids.shape[1])
        cache[key] = c_ids, [np.asarray(a) for a in info.model.forward_ids(c_ids, collect_attention=True).attention]
    c_ids, cons = cache[key]
    rows = (c_ids != info.model.pad_id)
    rows[:, 0] = False
    scored = batch.loss_mask > 0
    matrix = head_alignments(trained, cons, rows)
    matrix_scored = head_alignments(trained, cons, scored)
    return {"condition": data.names[local],
            "best": best_heads(matrix, cons, rows, causal),
            "best_scored_rows": best_heads(matrix_scored, cons, scored, causal),
            "matrix": np.round(matrix, 4).tolist(),
            "matrix_scored_rows": np.round(matrix_scored, 4).tolist(),
            "matrix_axes": ["trained_layer", "trained_head", "construction_layer", "construction_head"]}


def device_info() -> Dict[str, Any]:
    """Backend and device JAX chose (GPU when one is present and jaxlib supports it)."""
    d = jax.devices()[0]
    return {"backend": jax.default_backend(), "device": str(d), "device_kind": getattr(d, "device_kind", None),
            "jax": jax.__version__, "cpu_count": os.cpu_count()}


#: Evaluation sequences per condition at each point of a training curve (``eval_every``).
CURVE_EVAL_SIZE = 256


def _train_curve(cfg: SweepConfig, data: TaskData, run: RunSpec, ckpt: str, eval_conds, progress: "Progress"):
    """Train ``run`` in pieces of ``cfg.eval_every`` steps (each piece resumes the checkpoint, so the
    result is that of one uninterrupted run) and evaluate after each on CURVE_EVAL_SIZE fixed
    sequences per condition. The curve is kept in ``ckpt/curve.json`` so that a resumed run keeps
    the points it already has.

    Returns:
        ``[{"step", "error": {condition: error}, "error_per_position": {condition: [...]}}]``.
    """
    import json

    from depthcraft.constructions.files import write_json_atomic

    path = os.path.join(ckpt, "curve.json")
    curve: List[Dict[str, Any]] = []
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            curve = json.load(f)
    sets = data.eval_sets(EVAL_SEED + 1, CURVE_EVAL_SIZE, eval_conds)
    done = {c["step"] for c in curve}
    for stop in range(cfg.eval_every, run.train.steps, cfg.eval_every):
        if stop in done:
            continue
        rec = read_meta(ckpt)
        if rec is not None and rec["step"] > stop:
            continue  # resumed past this point without its evaluation: leave the gap
        job = TrainJob(data=data, model=run.model, train=run.train, seeds=(run.train.seed,), checkpoint_dir=ckpt,
                       checkpoint_every=cfg.checkpoint_every, stop_at=stop)
        (out,) = train(job, "loop", on_step=lambda s, loss, run=run: progress.step(run, s, loss)).outcomes[0]
        ev = evaluate(out.params, out.arch, data, sets)
        curve.append({"step": stop, "error": {e["condition"]: e["error"] for e in ev},
                      "error_per_position": {e["condition"]: e["error_per_position"] for e in ev}})
        write_json_atomic(path, curve)
    return sorted(curve, key=lambda c: c["step"])


#: Curve points per run when the preset sets no ``eval_every`` (the fast trainer always keeps a curve).
DEFAULT_CURVE_POINTS = 20


def seed_groups(runs: List[RunSpec]) -> List[List[RunSpec]]:
    """The runs that differ only in the seed, in plan order: one vmapped training call each."""
    groups: Dict[Any, List[RunSpec]] = {}
    for r in runs:
        groups.setdefault((r.conditions, r.model, dataclasses.replace(r.train, seed=0), r.control), []).append(r)
    return list(groups.values())


def group_id(group: List[RunSpec]) -> str:
    """Checkpoint name of a seed group: the first run's id with its seed replaced by the seed list."""
    seeds = [r.train.seed for r in group]
    tag = f"seed{seeds[0]}" if len(seeds) == 1 else f"seeds{'-'.join(str(s) for s in seeds)}"
    return re.sub(r"seed\d+", tag, group[0].run_id, count=1)


def _record(cfg: SweepConfig, data: TaskData, run: RunSpec, outcome, eval_conds, infos, construction_maps,
            plateau: Optional[Dict[str, float]], done: Optional[tuple] = None) -> Dict[str, Any]:
    """One run's entry of ``results.json``: final evaluation, alignment, loss history, curve, plateau exit.

    ``done``: ``(ev, ev_train, align, eval_seconds)`` computed already (the fused trainer's batched
    evaluation), else computed here.
    """
    t_eval = time.perf_counter()
    if done is not None:
        ev, ev_train, align, eval_s = done
    else:
        ev = evaluate(outcome.params, outcome.arch, data, data.eval_sets(EVAL_SEED, cfg.eval_size, eval_conds))
        ev_train = None if eval_conds is None else \
            evaluate(outcome.params, outcome.arch, data, data.eval_sets(EVAL_SEED, cfg.eval_size))
        align = _alignment(cfg, data, run, outcome.params, outcome.arch, infos, construction_maps)
        eval_s = time.perf_counter() - t_eval
    record = {
        "run_id": run.run_id, "depth": run.model.depth, "heads": run.model.heads, "width": run.model.width,
        "seed": run.train.seed, "control": run.control, "conditions": [cfg.names[c] for c in run.conditions],
        "config": {"model": run.model.to_json(), "train": run.train.to_json()},
        "steps": run.train.steps, "steps_done": outcome.steps_done or run.train.steps,
        "exit_reason": outcome.exit_reason or None, "trainer": cfg.trainer, "sampler": outcome.sampler,
        "seeds_together": outcome.seeds_together,
        "resumed_from": outcome.resumed_from, "n_params": outcome.n_params,
        "final_loss": outcome.history[-1]["loss"] if outcome.history else None,
        "train_seconds": round(outcome.seconds / outcome.seeds_together, 2),
        "eval_seconds": round(eval_s, 2),
        "error": {e["condition"]: e["error"] for e in ev},
        "error_training_distribution": None if ev_train is None else
        {e["condition"]: e["error"] for e in ev_train},
        "eval": ev, "alignment": align, "history": outcome.history,
    }
    if outcome.curve is not None:
        curve = outcome.curve
        if not cfg.eval_every:  # a default-cadence curve: error and loss only (keeps results.json small)
            curve = [{k: v for k, v in p.items() if k != "error_per_position"} for p in curve]
        record["curve"] = curve
    if outcome.curriculum is not None:
        record["curriculum"] = outcome.curriculum
    if plateau is not None and outcome.curve:
        record["plateau"] = {name: {"plateau_loss": round(loss, 5), "margin": cfg.plateau_margin,
                                    "exit_step": plateau_exit_step(outcome.curve, name, loss, cfg.plateau_margin)}
                             for name, loss in plateau.items()}
    return record



def _group_data(cfg: SweepConfig, task, run0: RunSpec) -> TaskData:
    return TaskData(task, [cfg.conditions[c] for c in run0.conditions], [cfg.names[c] for c in run0.conditions])


def _eval_conditions(cfg: SweepConfig, run0: RunSpec):
    return None if cfg.eval_conditions is None else [cfg.eval_conditions[c] for c in run0.conditions]


def train_group(cfg: SweepConfig, out_dir: str, group: List[RunSpec], *, fresh: bool = False,
                progress: Optional[Progress] = None, first_index: int = 0, total: int = 0):
    """Train one group of runs (the seeds of one configuration for ``trainer="fast"``, one run for
    ``"loop"``), resuming or (``fresh``) discarding its checkpoint under ``out_dir/checkpoints``.
    The unit of work of a sweep, sequential or on Ray.

    Returns:
        ``(outcomes, plateau)``: one :class:`~verify.crosscheck.train.RunOutcome` per run of the
        group, and each condition's plateau loss in nats (None for the loop trainer).
    Raises:
        ParameterError: the checkpoint was made with other settings.
    """
    progress = progress or Progress()
    task = get_task(cfg.task)
    run0 = group[0]
    data = _group_data(cfg, task, run0)
    eval_conds = _eval_conditions(cfg, run0)
    backend = BACKENDS[cfg.trainer]
    ckpt = os.path.join(out_dir, "checkpoints", group_id(group) if backend.seeds_together else run0.run_id)
    if fresh and os.path.isdir(ckpt):
        shutil.rmtree(ckpt)
    rec = read_meta(ckpt)
    for j, run in enumerate(group):
        progress.start_run(first_index + j, total, run, rec["step"] if rec else 0)
    job = TrainJob(data=data, model=run0.model, train=run0.train, seeds=tuple(r.train.seed for r in group),
                   chunk=cfg.chunk, sampler=cfg.sampler, exit_error=cfg.exit_error, checkpoint_dir=ckpt,
                   checkpoint_every=cfg.checkpoint_every, curriculum=cfg.curriculum, precision=cfg.precision)
    if backend.curve:
        curve_sets = data.eval_sets(EVAL_SEED + 1, CURVE_EVAL_SIZE, eval_conds)
        every = cfg.eval_every or max(1, run0.train.steps // DEFAULT_CURVE_POINTS)

        def on_chunk(step, losses):
            for run, loss in zip(group, losses):
                progress.step(run, step, float(loss))

        job = dataclasses.replace(job, eval_sets=tuple(curve_sets), eval_every=every)
        outcomes = train(job, cfg.trainer, on_chunk=on_chunk).outcomes[0]
        return outcomes, {name: marginal_entropy(s) for name, s in zip(data.names, curve_sets)}
    curve = _train_curve(cfg, data, run0, ckpt, eval_conds, progress) if cfg.eval_every else None
    (outcome,) = train(job, cfg.trainer, on_step=lambda s, loss: progress.step(run0, s, loss)).outcomes[0]
    outcome.curve = curve
    return [outcome], None


def ray_module():
    """The ``ray`` module.

    Raises:
        ParameterError: Ray is not installed (names the extra that installs it).
    """
    try:
        import ray
    except ImportError:
        raise ParameterError("--ray needs Ray, which is not installed: pip install 'depthcraft[ray]'") from None
    return ray


def _train_group_remote(cfg: SweepConfig, out_dir: str, group: List[RunSpec], fresh: bool):
    """The body of one Ray task: :func:`train_group`, its weights brought to host numpy arrays."""
    outcomes, plateau = train_group(cfg, out_dir, group, fresh=fresh)
    for o in outcomes:
        o.params = jax.device_get(o.params)
    return outcomes, plateau


def _thread_groups(cfg: SweepConfig, out_dir: str, groups: List[List[RunSpec]], first: List[int], total: int,
                   fresh: bool, progress: Progress, finish: Callable, workers: int) -> None:
    """Train the groups in up to ``workers`` threads (JAX releases the GIL while the device
    computes) and call ``finish(i, outcomes, plateau)`` in this thread as each completes."""
    from concurrent.futures import ThreadPoolExecutor, as_completed

    with ThreadPoolExecutor(max_workers=workers) as pool:
        pending = {pool.submit(train_group, cfg, out_dir, g, fresh=fresh): i for i, g in enumerate(groups)}
        progress.message(f"{len(groups)} group(s) of runs in {min(workers, len(groups))} thread(s)")
        for fut in as_completed(pending):
            i = pending[fut]
            outcomes, plateau = fut.result()
            for j, (run, outcome) in enumerate(zip(groups[i], outcomes)):
                progress.start_run(first[i] + j, total, run, outcome.resumed_from)
                progress.step(run, outcome.steps_done or run.train.steps, None)
            finish(i, outcomes, plateau)


def _ray_groups(cfg: SweepConfig, out_dir: str, groups: List[List[RunSpec]], first: List[int], total: int,
                fresh: bool, progress: Progress, finish: Callable, address: Optional[str]) -> None:
    """Train every group as one Ray task (1 CPU each) and call ``finish(i, outcomes, plateau)`` as
    each completes. Joins the process's Ray instance if initialised, else ``address``, else starts
    a local one (without the dashboard) and shuts it down afterwards."""
    ray = ray_module()
    started = False
    if not ray.is_initialized():
        import warnings

        with warnings.catch_warnings():  # Ray starts its processes by fork + exec: JAX's fork warning does not apply
            warnings.filterwarnings("ignore", message="os.fork", category=RuntimeWarning)
            if address:  # a cluster: its own resources and dashboard (ray:// goes through Ray Client)
                ray.init(address=address)
            else:
                ray.init(num_cpus=os.cpu_count() or 1, include_dashboard=False, log_to_driver=False)
        started = True
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(_train_group_remote)
        where = os.path.abspath(out_dir)
        pending = {remote.remote(cfg, where, g, fresh): i for i, g in enumerate(groups)}
        cpus = ray.cluster_resources().get("CPU", 0)
        progress.message(f"ray: {len(groups)} task(s) for {total} run(s) on {cpus:g} CPU(s)")
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            i = pending.pop(ready[0])
            outcomes, plateau = ray.get(ready[0])
            for j, (run, outcome) in enumerate(zip(groups[i], outcomes)):
                progress.start_run(first[i] + j, total, run, outcome.resumed_from)
                progress.step(run, outcome.steps_done or run.train.steps, None)
            finish(i, outcomes, plateau)
    finally:
        if started:
            ray.shutdown()


def _partial_record(cfg: SweepConfig, run: RunSpec, curve: List[Dict[str, Any]], history: List[Dict[str, float]],
                    step: int, seconds: float, n_models: int) -> Dict[str, Any]:
    """A run's ``results.json`` entry while the fused trainer is still training: the latest curve
    point's errors (CURVE_EVAL_SIZE sequences per condition) stand for the final evaluation."""
    last = curve[-1] if curve else {"error": {}}
    points = curve if cfg.eval_every else [{k: v for k, v in p.items() if k != "error_per_position"} for p in curve]
    return {"run_id": run.run_id, "depth": run.model.depth, "heads": run.model.heads, "width": run.model.width,
            "seed": run.train.seed, "control": run.control, "conditions": [cfg.names[c] for c in run.conditions],
            "config": {"model": run.model.to_json(), "train": run.train.to_json()},
            "steps": run.train.steps, "steps_done": step, "partial": True, "exit_reason": None,
            "trainer": cfg.trainer, "seeds_together": n_models, "resumed_from": 0,
            "final_loss": history[-1]["loss"] if history else None,
            "train_seconds": round(seconds / n_models, 2), "eval_seconds": 0.0,
            "error": dict(last["error"]), "error_training_distribution": None, "eval": None, "alignment": None,
            "history": list(history), "curve": list(points)}


def fused_inputs(cfg: SweepConfig, groups: List[List[RunSpec]]):
    """The fused trainer's inputs for the sweep's groups.

    Returns:
        ``(runs, datas, sets, data_by_conditions, curve_sets_by_conditions)``: the runs in plan
        order, each run's :class:`TaskData` and curve evaluation sets (CURVE_EVAL_SIZE sequences
        per condition, one object per distinct condition tuple).
    """
    task = get_task(cfg.task)
    runs = [r for g in groups for r in g]
    datas, sets, curve_cache, data_cache = [], [], {}, {}
    for g in groups:
        run0 = g[0]
        if run0.conditions not in data_cache:
            data = _group_data(cfg, task, run0)
            data_cache[run0.conditions] = data
            curve_cache[run0.conditions] = data.eval_sets(EVAL_SEED + 1, CURVE_EVAL_SIZE, _eval_conditions(cfg, run0))
        datas += [data_cache[run0.conditions]] * len(g)
        sets += [curve_cache[run0.conditions]] * len(g)
    return runs, datas, sets, data_cache, curve_cache


def fused_final_eval(cfg: SweepConfig, res, runs: List[RunSpec], infos: List[ConstructionInfo],
                     construction_maps: Dict[Any, Any]) -> Dict[int, tuple]:
    """The final evaluation and alignment of every run of a :class:`~verify.crosscheck.fused.FusedResult`,
    batched: one vmapped call per family and slice of the evaluation sequences, one per family and
    condition for the attention maps.

    Args:
        cfg: the sweep; res: the fused trainer's result; runs: the runs, in ``res``'s order.
        infos, construction_maps: as :func:`_alignment`.
    Returns:
        ``{run index: (eval entries, training-distribution entries or None, alignment entries)}``
        (:func:`~verify.crosscheck.train.evaluate`'s and :func:`_alignment`'s formats).
    """
    from depthcraft.verify.crosscheck.fused import attention_all, eval_entries, evaluate_all

    done: Dict[int, tuple] = {}
    for fam, params in zip(res.families, res.params):
        data = fam.data
        eval_conds = _eval_conditions(cfg, runs[fam.members[0]])
        evs = []
        for conds in ([eval_conds] if eval_conds is None else [eval_conds, None]):
            es = data.eval_sets(EVAL_SEED, cfg.eval_size, conds)
            pred, ce = evaluate_all(params, fam.arch, np.concatenate([b.ids for b in es]),
                                    np.concatenate([b.targets for b in es]))
            evs.append([eval_entries(pred[m], ce[m], es, data) for m in range(fam.size)])
        aligns: List[List[Dict[str, Any]]] = [[] for _ in fam.members]
        for local, c in enumerate(runs[fam.members[0]].conditions):
            maps: Dict[str, Any] = {}

            def trained(local_, ids, maps=maps, params=params, fam=fam):
                if "all" not in maps:
                    maps["all"] = attention_all(params, fam.arch, np.asarray(ids))
                return [a[maps["m"]] for a in maps["all"][:maps["depth"]]]

            for m, depth in enumerate(fam.depths):
                maps["m"], maps["depth"] = m, depth
                aligns[m].append(_align_condition(cfg, data, local, c, trained, fam.arch.causal, infos,
                                                  construction_maps))
        for m, i in enumerate(fam.members):
            done[i] = (evs[0][m], evs[1][m] if len(evs) > 1 else None, aligns[m])
    return done


def fused_checkpoint_dir(out_dir: str) -> str:
    """Where ``trainer="fused"`` keeps its one checkpoint (every run of the sweep)."""
    return os.path.join(out_dir, "checkpoints", "fused")


def _fused_sweep(cfg: SweepConfig, groups: List[List[RunSpec]], infos: List[ConstructionInfo],
                 construction_maps: Dict[Any, Any], progress: "Progress", write: Callable,
                 deadline: Optional[float] = None, stats: Optional[Dict[str, Any]] = None,
                 checkpoint_dir: Optional[str] = None) -> List[Dict[str, Any]]:
    """Every group of the sweep trained at once (:func:`~verify.crosscheck.fused.train_fused`), then
    evaluated and aligned in batched calls (one per family and slice of sequences).

    ``write(records, partial_step)`` is called after every curve point (partial records, see
    :func:`_partial_record`) and once at the end (``partial_step`` None). ``deadline``: a
    ``time.perf_counter()`` time the training must stop before (the final evaluation follows).
    ``stats``: filled with the trainer's timings (``train_fused``'s ``stats``) and ``eval_s``.
    ``checkpoint_dir``: checkpoint every curve point there, and resume from it
    (:func:`~verify.crosscheck.fused.train_fused`). Returns the final records in plan order.
    """
    runs, datas, sets, data_cache, curve_cache = fused_inputs(cfg, groups)
    every = cfg.eval_every or max(1, cfg.train.steps // DEFAULT_CURVE_POINTS)
    t0 = time.perf_counter()
    rec = read_meta(checkpoint_dir) if checkpoint_dir else None
    resumed = rec["step"] if rec else 0
    for i, r in enumerate(runs):
        progress.start_run(i, len(runs), r, resumed)

    def on_point(step, curves, histories):
        seconds = time.perf_counter() - t0
        write([dict(_partial_record(cfg, r, c, h, step, seconds, len(runs)), resumed_from=resumed)
               for r, c, h in zip(runs, curves, histories)], step)

    def on_chunk(step, losses):
        for r, loss in zip(runs, losses):
            progress.step(r, step, float(loss))

    jobs = [TrainJob(data=d, model=r.model, train=cfg.train, seeds=(r.train.seed,), chunk=cfg.chunk,
                     sampler=cfg.sampler, eval_sets=tuple(st), eval_every=every, exit_error=cfg.exit_error,
                     checkpoint_dir=checkpoint_dir, precision=cfg.precision, layout=cfg.layout)
            for d, r, st in zip(datas, runs, sets)]
    res = train(jobs, cfg.trainer, on_point=on_point, on_chunk=on_chunk, deadline=deadline).fused
    t_eval = time.perf_counter()
    done = fused_final_eval(cfg, res, runs, infos, construction_maps)
    eval_s = time.perf_counter() - t_eval
    plateau_by = {k: {name: marginal_entropy(b) for name, b in zip(data_cache[k].names, v)}
                  for k, v in curve_cache.items()}
    records = []
    for i, (r, o) in enumerate(zip(runs, res.outcomes)):
        ev, ev_train, align = done[i]
        rec = _record(cfg, datas[i], r, o, None, infos, construction_maps, plateau_by[r.conditions],
                      done=(ev, ev_train, align, eval_s / len(runs)))
        rec["trainer"] = "fused"
        records.append(rec)
        progress.end_run(i, r, rec)
    if stats is not None:
        stats.update(res.stats, eval_s=round(eval_s, 3))
    write(records, None)
    return records


def run_sweep(cfg: SweepConfig, out_dir: str, *, fresh: bool = False, progress: Optional[Progress] = None,
              command: Optional[str] = None, plot: bool = True, ray: bool = False,
              ray_address: Optional[str] = None, workers: int = 1,
              infos: Optional[List[ConstructionInfo]] = None, deadline: Optional[float] = None,
              fused_stats: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """Train, evaluate and align every run of the sweep; write ``results.json`` and the plot.

    Args:
        cfg: the sweep.
        out_dir: output directory (created); checkpoints go to ``out_dir/checkpoints/<run_id>``
            (``trainer="loop"``) or ``out_dir/checkpoints/<group>`` (``trainer="fast"``: one per
            group of runs that differ only in the seed, trained together, e.g. ``L2_H4_d64_seeds0-1-2``).
        fresh: delete existing checkpoints of these runs first (default: resume them).
        progress: callbacks (None = silent).
        command: the command line, recorded in the results.
        plot: also write the figures (:func:`verify.crosscheck.report.write_figures`).
        ray: train the groups of runs as Ray tasks (:func:`_ray_groups`), each with the same seeds,
            checkpoints and code as the sequential path; evaluation and alignment stay in this
            process. Uses the Ray instance already initialised in this process if any, else joins
            ``ray_address`` (a cluster: ``out_dir`` must be on a filesystem every node shares,
            for the checkpoints), else starts a local instance (shut down at the end).
        ray_address: address of a running Ray cluster (implies ``ray``).
        workers: train up to this many groups at once in threads of this process (one GPU: every
            depth at once, as scripts/paper_gpu.py does; per-step progress is not reported then).
        infos: each condition's :func:`condition_info`, when the caller built them already.
        deadline: ``trainer="fused"`` only: a ``time.perf_counter()`` time its training stops
            before (the final evaluation and write-out follow; :func:`_fused_sweep`).
        fused_stats: ``trainer="fused"`` only: filled with the trainer's timings.
    With ``trainer="fused"`` every group trains in one compiled step, ``results.json`` is
    written after every curve point (``complete`` false, ``partial_step``; each run's errors
    those of its latest curve point), one checkpoint of every run is saved at every curve point
    in ``out_dir/checkpoints/fused`` (:func:`fused_checkpoint_dir`; a killed sweep restarted with
    the same settings continues from it), and Ray and ``workers`` are not used.
    Returns:
        The results dict (as written to ``results.json``); ``runs`` in plan order either way.
    Raises:
        ParameterError: the output directory cannot be written, a checkpoint was made with
            other settings, or ``ray`` is asked for and Ray is not installed.
    """
    from depthcraft.verify.crosscheck import report

    progress = progress or Progress()
    if ray or ray_address:
        ray = True
        ray_module()  # fail before any work when Ray is missing
    try:
        os.makedirs(out_dir, exist_ok=True)
    except OSError as e:
        raise ParameterError(f"cannot create the output directory {out_dir}: {e.strerror}") from None
    task = get_task(cfg.task)
    t_start = time.perf_counter()
    if infos is None:
        if cfg.construction:
            progress.message(f"building construction {cfg.construction} for {len(cfg.conditions)} condition(s)")
        infos = [condition_info(cfg, c) for c in cfg.conditions]
    elif len(infos) != len(cfg.conditions):
        raise ParameterError(f"infos: {len(infos)} given for {len(cfg.conditions)} conditions")
    runs = plan(cfg, [i.bound for i in infos])
    progress.begin(runs)
    records: List[Dict[str, Any]] = []
    construction_maps: Dict[Any, Any] = {}
    supervision = {"dense": cfg.dense, "task": cfg.task,
                   "scored_positions_per_sequence": dict(zip(cfg.names, scored_per_sequence(task, cfg.conditions)))}

    def results_now():
        out = report.build_results(cfg, infos, records, runs, command, time.perf_counter() - t_start, device_info())
        out["supervision"] = supervision
        return out

    groups = seed_groups(runs) if BACKENDS[cfg.trainer].seeds_together else [[r] for r in runs]
    first = [sum(len(g) for g in groups[:i]) for i in range(len(groups))]  # plan index of each group's run 0
    done: Dict[int, List[Dict[str, Any]]] = {}

    def finish(i: int, outcomes, plateau) -> None:
        group = groups[i]
        run0 = group[0]
        data = _group_data(cfg, task, run0)
        eval_conds = _eval_conditions(cfg, run0)
        done[i] = []
        for j, (run, outcome) in enumerate(zip(group, outcomes)):
            record = _record(cfg, data, run, outcome, eval_conds, infos, construction_maps, plateau)
            done[i].append(record)
            progress.end_run(first[i] + j, run, record)
        records[:] = [r for k in sorted(done) for r in done[k]]  # plan order, whatever finished first
        report.write_results(out_dir, results_now())

    if BACKENDS[cfg.trainer].jobs_together:
        def write(recs, partial_step):
            records[:] = recs
            out = results_now()
            if partial_step is not None:
                out["complete"], out["partial_step"] = False, partial_step
            report.write_results(out_dir, out)

        ckpt = fused_checkpoint_dir(out_dir)
        if fresh and os.path.isdir(ckpt):
            shutil.rmtree(ckpt)
        _fused_sweep(cfg, groups, infos, construction_maps, progress, write, deadline, fused_stats, ckpt)
    elif ray:
        _ray_groups(cfg, out_dir, groups, first, len(runs), fresh, progress, finish, ray_address)
    elif workers > 1:
        _thread_groups(cfg, out_dir, groups, first, len(runs), fresh, progress, finish, workers)
    else:
        for i, group in enumerate(groups):
            finish(i, *train_group(cfg, out_dir, group, fresh=fresh, progress=progress,
                                   first_index=first[i], total=len(runs)))
    results = results_now()
    report.write_results(out_dir, results)
    if plot:
        report.write_figures(out_dir, results)
    return results
