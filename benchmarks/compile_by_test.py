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

With ``COMPILE_LOG_TESTS=FILE`` set as well, each process also appends one line per test to
``FILE`` (tab-separated: test id, compilations, cache hits, backend-compile seconds), the
compilations made from the test's setup to its teardown (module-scoped fixtures count in the
first test that uses them)::

    PYTHONPATH=benchmarks COMPILE_LOG_DIR=DIR COMPILE_LOG_TESTS=DIR/tests.tsv \\
        pytest -q -n 0 -p compile_by_test tests/test_x.py
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

_at_start = {}


def pytest_runtest_logstart(nodeid, location):
    """Remember the totals as a test starts (its setup included)."""
    _at_start[nodeid] = dict(_totals)


def pytest_runtest_logfinish(nodeid, location):
    """Append the test's own compilations to ``$COMPILE_LOG_TESTS`` when it is set."""
    out = os.environ.get("COMPILE_LOG_TESTS")
    before = _at_start.pop(nodeid, {})
    if not out:
        return
    delta = {k: _totals[k] - before.get(k, 0) for k in ("compilations", "cache_hits", "backend_compile_s")}
    with open(out, "a") as f:
        f.write(f"{nodeid}\t{int(delta['compilations'])}\t{int(delta['cache_hits'])}\t"
                f"{delta['backend_compile_s']:.2f}\n")


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
