"""Shared fixtures: hypothesis profile for the default (2-core CI) run; ``resolved`` per module ``CASES``."""

import os

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
