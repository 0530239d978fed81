"""pytest plugin: count JAX's compilations in each test process and write the totals as JSON.

``benchmarks/suite_cost.py`` loads it to say how much of the suite's time is XLA compilation::

    PYTHONPATH=benchmarks COMPILE_LOG_DIR=DIR pytest -q -p compile_by_test

Each process that runs tests (each xdist worker, or the single process with ``-n 0``) writes
``DIR/<worker>.json``: ``{"compilations", "backend_compile_s", "trace_s", "lower_s", "cache_hits",
"cache_read_s"}`` from ``jax.monitoring``'s duration events (seconds of wall time in this process;
``compilations`` counts JAX's backend-compile events, each eager primitive of a new shape included;
JAX emits one also where the persistent compilation cache serves the program (a short one), so the
programs XLA really compiled are ``compilations - cache_hits``).
Compilations inside subprocesses that tests start (the CLI tests) are not counted.
"""

import collections
import json
import os

import jax.monitoring

#: jax.monitoring event -> key in the written JSON.
EVENTS = {
    "/jax/core/compile/backend_compile_duration": "backend_compile_s",
    "/jax/core/compile/jaxpr_trace_duration": "trace_s",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower_s",
    "/jax/compilation_cache/cache_retrieval_time_sec": "cache_read_s",
}
_totals = collections.Counter()


def _listener(event, duration, **kwargs):
    key = EVENTS.get(event)
    if key is None:
        return
    _totals[key] += duration
    if key == "backend_compile_s":
        _totals["compilations"] += 1
    elif key == "cache_read_s":
        _totals["cache_hits"] += 1


jax.monitoring.register_event_duration_secs_listener(_listener)


def pytest_sessionfinish(session):
    """Write this process's totals (only in processes that ran tests: not xdist's controller)."""
    if session.config.pluginmanager.hasplugin("dsession"):  # the xdist controller runs no tests
        return
    out = os.environ.get("COMPILE_LOG_DIR")
    if not out:
        return
    name = os.environ.get("PYTEST_XDIST_WORKER", "main")
    data = {k: round(float(_totals[k]), 2) for k in (*EVENTS.values(), "compilations", "cache_hits")}
    with open(os.path.join(out, f"{name}.json"), "w") as f:
        json.dump(data, f)
