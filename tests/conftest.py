"""Shared fixtures: hypothesis profile for the default (2-core CI) run; ``resolved`` per module ``CASES``;
``tiny_training``, the one small training setup of the training tests."""

import os
from typing import Any, NamedTuple

# XLA:CPU's LLVM back end at -O0 for the test run (issue 26): the suite's programs are tiny and compiled
# once each, so LLVM's optimisation passes cost far more than they save (tests/test_sparse_scores.py and
# test_crosscheck_fast.py from an empty cache: 92 -> 57 s of compilation). The HLO passes, and so the
# programs' arithmetic, are unchanged; LLVM does not reassociate floating point at any level.
# DEPTHCRAFT_TEST_XLA_OPT=default keeps XLA's default level; a level already in XLA_FLAGS is kept.
if os.environ.get("DEPTHCRAFT_TEST_XLA_OPT") != "default" and \
        "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0").strip()

# One BLAS thread per xdist worker (the default run is 2 workers on 2 cores): OpenBLAS's own threads on top
# of the workers oversubscribe the cores, and its spinning threads slow the least-squares solves several-fold
# on a loaded machine (test_chen_zou_constructions' SC solve: 12.4 -> 7.9 s beside one busy core). Set before
# numpy is imported; a value the user set is kept; ``-n 0`` (one process) keeps every thread.
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_var, "1")

import pytest

from hypothesis import HealthCheck, settings

from depthcraft.constructions.cache import hypothesis_dir

hypothesis_dir()  # hypothesis's files go to the user's cache folder (DEPTHCRAFT_CACHE_DIR), not ./.hypothesis

settings.register_profile("ci", deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_generate_tests(metafunc):
    """A test module with ``CASES = [(name, params), ...]`` gets ``resolved`` once per case (module scope)."""
    cases = getattr(metafunc.module, "CASES", None)
    if "resolved" in metafunc.fixturenames and cases is not None:
        metafunc.parametrize("resolved", cases, indirect=True, ids=[f"{c[0]}-{c[1]}" for c in cases], scope="module")


@pytest.fixture(scope="module")
def resolved(request):
    """(resolved construction, its built CompiledModel) for ``request.param = (name, params)``."""
    from depthcraft.verify import lookup

    name, params = request.param
    r = lookup.resolve(lookup.get(name), params)
    return r, r.build()


class TinyTraining(NamedTuple):
    """The training tests' shared setup (see :func:`tiny_training`)."""

    data: Any  # TaskData
    model: Any  # ModelConfig
    train: Any  # TrainConfig
    chunk: int  # optimiser steps per jitted call of train_seeds


@pytest.fixture(scope="session")
def tiny_training():
    """One small training setup for every test that trains only to check plumbing (resume,
    checkpoints, vmapped seeds, curves): k-hop at k = 1 and 2 (n = 6, 3 tokens), 2 layers of 2 heads,
    width 16, 12 AdamW steps of 8 sequences, 4 steps per jitted call of the fast trainer.

    One config and one chunk size mean one compiled training program per trainer (and sampler),
    shared by the tests of a module through JAX's in-memory caches and by later modules and
    the other xdist worker through the persistent compilation cache: each scanned, vmapped
    training program takes 7-16 s to compile on one core.
    """
    from depthcraft.verify.crosscheck.data import TaskData
    from depthcraft.verify.crosscheck.model import ModelConfig
    from depthcraft.verify.crosscheck.train import TrainConfig
    from depthcraft.verify.tasks import get_task

    khop = get_task("khop")
    data = TaskData(khop, [khop.resolve({"k": 1, "n": 6, "vocab": 3}), khop.resolve({"k": 2, "n": 6, "vocab": 3})])
    return TinyTraining(data, ModelConfig(depth=2, heads=2, width=16),
                        TrainConfig(steps=12, batch=8, lr=1e-2, warmup=2, log_every=1, eval_size=8), chunk=4)


@pytest.fixture(autouse=True, scope="module")
def _release_module_memory():
    """After each test module: drop cached builds and compiled programs, and trim the heap.

    Without it the suite's RSS grows module by module (6.7 GB peak; 1.3 GB with it).
    ``DEPTHCRAFT_TEST_KEEP_CACHES=1`` skips it (``benchmarks/suite_cost.py`` measures both).
    """
    yield
    if os.environ.get("DEPTHCRAFT_TEST_KEEP_CACHES") == "1":
        return
    import depthcraft

    depthcraft.release_memory()
