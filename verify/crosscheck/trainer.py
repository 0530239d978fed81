"""The one trainer (issue 41): :func:`train` of a :class:`TrainJob` (or several) with a backend.

:func:`train` takes one configuration object, :class:`TrainJob` (data, model, optimisation,
seeds, chunking, sampler, curve, early exit, checkpoints, curriculum, precision, layout), or a
list of them, and a backend of :data:`BACKENDS`: ``loop``
(:func:`verify.crosscheck.train.train_loop`, one step per call), ``fast``
(:func:`verify.crosscheck.train.train_seeds`, the seeds vmapped) or ``fused``
(:func:`verify.crosscheck.fused.train_fused`, every job and seed in one compiled step). What a
backend supports is stated once (:class:`Backend`); :func:`check_backend` refuses a job that asks
for more, naming the feature. The backends' shared parts (optimiser, loss, data streams, curve
scoring, checkpoint format) are in :mod:`verify.crosscheck.train`; this module sits above it and
above :mod:`verify.crosscheck.fused`, so that neither imports the other back.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from depthcraft.constructions.errors import ParameterError
from depthcraft.verify.crosscheck.data import Batch, TaskData
from depthcraft.verify.crosscheck.fused import train_fused
from depthcraft.verify.crosscheck.model import ModelConfig
from depthcraft.verify.crosscheck.train import RunOutcome, TrainConfig, train_loop, train_seeds


@dataclasses.dataclass(frozen=True)
class Backend:
    """What one training backend supports.

    Attributes:
        name: ``loop``, ``fast`` or ``fused``.
        seeds_together: trains a job's seeds in one call (one checkpoint per job).
        jobs_together: trains every job of a call at once (one checkpoint for all of them).
        early_exit: supports ``exit_error``.
        curriculum: supports ``curriculum``.
        bfloat16: supports ``precision="bfloat16"``.
        curve: records the evaluation curve itself (the loop backend's curve is made by the sweep,
            training in pieces).
    """

    name: str
    seeds_together: bool
    jobs_together: bool
    early_exit: bool
    curriculum: bool
    bfloat16: bool
    curve: bool


#: The backends of :func:`train`.
BACKENDS: Dict[str, Backend] = {
    "loop": Backend("loop", seeds_together=False, jobs_together=False, early_exit=False, curriculum=False,
                    bfloat16=False, curve=False),
    "fast": Backend("fast", seeds_together=True, jobs_together=False, early_exit=True, curriculum=True,
                    bfloat16=False, curve=True),
    "fused": Backend("fused", seeds_together=True, jobs_together=True, early_exit=True, curriculum=False,
                     bfloat16=True, curve=True),
}


def check_backend(name: str, *, exit_error: Optional[float] = None, curriculum: Optional[float] = None,
                  precision: str = "auto") -> Backend:
    """The backend ``name``, checked to support the requested features.

    Raises:
        ParameterError: an unknown backend, or a feature it does not support (named, with the
            backends that do).
    """
    if name not in BACKENDS:
        raise ParameterError(f"trainer={name!r}; expected one of {', '.join(BACKENDS)}")
    b = BACKENDS[name]
    for asked, attr, what in ((exit_error is not None, "early_exit", "exit_error (early exit)"),
                              (curriculum is not None, "curriculum", "a curriculum"),
                              (precision == "bfloat16", "bfloat16", "precision='bfloat16'")):
        if asked and not getattr(b, attr):
            able = [n for n, x in BACKENDS.items() if getattr(x, attr)]
            raise ParameterError(f"{what} needs trainer={' or '.join(repr(n) for n in able)}, not {name!r}")
    return b


@dataclasses.dataclass(frozen=True)
class TrainJob:
    """One training configuration: what :func:`train` trains, whatever the backend.

    Attributes:
        data: the task and its conditions.
        model, train: architecture and optimisation (``train.seed`` is ignored: ``seeds``).
        seeds: one model per seed (distinct).
        chunk: optimiser steps per jitted call (fast, fused).
        sampler: one of :data:`verify.crosscheck.train.SAMPLERS`.
        eval_sets: fixed curve evaluation batches, one per condition (needed with ``eval_every``).
        eval_every: curve evaluation every this many steps (0 = none).
        exit_error, exit_patience: early exit (fast, fused).
        checkpoint_dir: save and resume there (None = none); checkpoint_every: steps between saves.
        stop_at: stop after this step (the schedule still runs to ``train.steps``).
        curriculum: the accuracy that advances a curriculum (fast).
        precision, layout: the fused backend's compute precision and layout.
    """

    data: TaskData
    model: ModelConfig
    train: TrainConfig
    seeds: Tuple[int, ...] = (0,)
    chunk: int = 100
    sampler: str = "numpy"
    eval_sets: Optional[Tuple[Batch, ...]] = dataclasses.field(default=None, compare=False)
    eval_every: int = 0
    exit_error: Optional[float] = None
    exit_patience: int = 2
    checkpoint_dir: Optional[str] = None
    checkpoint_every: int = 0
    stop_at: Optional[int] = None
    curriculum: Optional[float] = None
    precision: str = "auto"
    layout: str = "auto"


@dataclasses.dataclass
class TrainResult:
    """What :func:`train` returns.

    Attributes:
        outcomes: per job, one :class:`RunOutcome` per seed (in the job's order).
        fused: the fused backend's :class:`~verify.crosscheck.fused.FusedResult` (its stacked
            weights and timings), else None.
    """

    outcomes: List[List[RunOutcome]]
    fused: Any = None


def train(config: Any, backend: str = "fast", *, on_chunk: Optional[Callable[[int, np.ndarray], None]] = None,
          on_step: Optional[Callable[[int, Optional[float]], None]] = None,
          on_point: Optional[Callable[..., None]] = None, deadline: Optional[float] = None) -> TrainResult:
    """Train a :class:`TrainJob` (or a list of them) with one backend of :data:`BACKENDS`.

    Args:
        config: a :class:`TrainJob` or a sequence of them (the fused backend trains them all in
            one compiled step; the others one after another; every job of a fused call shares the
            first job's optimisation, chunk, sampler, curve cadence, early exit, checkpoint
            directory, precision and layout).
        backend: ``loop``, ``fast`` or ``fused``.
        on_chunk: ``(step, last losses)`` after every chunk (fast: per job's seeds; fused: every model).
        on_step: ``(step, loss or None)`` after every step (loop).
        on_point: fused: ``(step, curves, histories)`` after every curve point.
        deadline: fused: a ``time.perf_counter()`` time its training stops before.
    Returns:
        :class:`TrainResult`.
    Raises:
        ParameterError: an unsupported feature for the backend (:func:`check_backend`), a loop job
            with several seeds and one checkpoint directory, or any backend's own refusal.
    """
    jobs = [config] if isinstance(config, TrainJob) else list(config)
    if not jobs:
        raise ParameterError("train needs at least one TrainJob")
    for j in jobs:
        check_backend(backend, exit_error=j.exit_error, curriculum=j.curriculum, precision=j.precision)
    b = BACKENDS[backend]
    if b.jobs_together:
        j0 = jobs[0]
        runs = [(j.data, j.model, s) for j in jobs for s in j.seeds]
        sets = [j.eval_sets for j in jobs for _ in j.seeds] if j0.eval_sets is not None else None
        res = train_fused(runs, j0.train, chunk=j0.chunk, sampler=j0.sampler, precision=j0.precision,
                          layout=j0.layout, eval_sets=sets, eval_every=j0.eval_every, exit_error=j0.exit_error,
                          exit_patience=j0.exit_patience, stop_at=j0.stop_at, deadline=deadline,
                          checkpoint_dir=j0.checkpoint_dir, on_point=on_point, on_chunk=on_chunk)
        out, i = [], 0
        for j in jobs:
            out.append(res.outcomes[i:i + len(j.seeds)])
            i += len(j.seeds)
        return TrainResult(out, res)
    out = []
    for j in jobs:
        if b.seeds_together:
            out.append(train_seeds(j.data, j.model, j.train, list(j.seeds), chunk=j.chunk, sampler=j.sampler,
                                   eval_sets=None if j.eval_sets is None else list(j.eval_sets),
                                   eval_every=j.eval_every, exit_error=j.exit_error, exit_patience=j.exit_patience,
                                   checkpoint_dir=j.checkpoint_dir, checkpoint_every=j.checkpoint_every,
                                   stop_at=j.stop_at, on_chunk=on_chunk, curriculum=j.curriculum))
            continue
        if j.checkpoint_dir is not None and len(j.seeds) > 1:
            raise ParameterError("the loop backend keeps one checkpoint per seed: give one seed per job")
        out.append([train_loop(j.data, j.model, dataclasses.replace(j.train, seed=int(s)),
                               checkpoint_dir=j.checkpoint_dir, checkpoint_every=j.checkpoint_every,
                               stop_at=j.stop_at, on_step=on_step) for s in j.seeds])
    return TrainResult(out)
