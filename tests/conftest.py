"""Shared fixtures: hypothesis profile for the default (2-core CI) run."""

import os

from hypothesis import HealthCheck, settings

from depthcraft.constructions.cache import hypothesis_dir

hypothesis_dir()  # hypothesis's files go to the user's cache folder (DEPTHCRAFT_CACHE_DIR), not ./.hypothesis

settings.register_profile("ci", deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
settings.register_profile("dev", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
