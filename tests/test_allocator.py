"""constructions/allocator.py: freed megabyte buffers are reused (no page faults per call) once set."""

import subprocess
import sys

import pytest

# Allocates, touches and frees a 64 MiB buffer 20 times (numpy uses malloc; 64 MiB is above the 32 MiB
# ceiling of glibc's own mmap threshold); prints the minor page faults of the last 19 rounds (the first
# round may fault the heap in).
PROBE = """
import resource, sys
import numpy as np
from depthcraft.constructions import allocator
applied = allocator.keep_freed_memory() if sys.argv[1] == "on" else False
def faults():
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt
a = np.ones(1 << 24, np.float32); del a
start = faults()
for _ in range(19):
    a = np.ones(1 << 24, np.float32)
    del a
print(applied, faults() - start)
"""


def _run(mode, env_extra=None):
    import os

    env = {**os.environ, **(env_extra or {})}
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, env=env, check=True)
    applied, faults = out.stdout.split()
    return applied == "True", int(faults)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc mallopt only")
def test_freed_buffers_are_reused_without_page_faults():
    applied, with_settings = _run("on")
    _, without = _run("off")
    assert applied
    # Without the settings every round maps fresh pages: at least one fault per round (16384 with 4 KiB
    # pages, about 500 here with transparent huge pages); with them the heap keeps the block.
    assert without >= 19
    assert with_settings * 10 < without


def test_default_leaves_malloc_alone():
    applied, _ = _run("on", {"DEPTHCRAFT_MALLOC": "default"})
    assert not applied


def test_only_the_command_sets_malloc_not_main():
    """``verify.cli.main`` run in-process (tests, notebooks) leaves malloc alone; ``entry`` (the
    console script and ``python -m depthcraft``) sets it."""
    code = ("import sys\nfrom depthcraft.constructions import allocator\nfrom depthcraft.verify import cli\n"
            "try:\n    getattr(cli, sys.argv[1])() if sys.argv[1] == 'entry' else cli.main(['list'])\n"
            "except SystemExit:\n    pass\nprint(allocator._state['applied'])\n")
    import subprocess

    got = {}
    for how in ("main", "entry"):
        out = subprocess.run([sys.executable, "-c", code, how, "list"], capture_output=True, text=True, check=True)
        got[how] = out.stdout.strip().splitlines()[-1]
    assert got["main"] == "False"
    assert got["entry"] == ("True" if sys.platform.startswith("linux") else "False")
