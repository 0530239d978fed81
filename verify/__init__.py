"""The verifier: tasks, structure measurement, bound and exactness checks, reports, the CLI.

Public API for your own programs: :func:`verify.check_program` (see :mod:`verify.api`)
and the hypothesis strategies in :mod:`verify.strategies`.
"""


def __getattr__(name):  # lazy: importing verify does not import JAX/tracr
    if name in ("check_program", "ANY"):
        from verify import api

        return getattr(api, name)
    raise AttributeError(f"module 'verify' has no attribute {name!r}")
