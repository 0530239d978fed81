"""constructions/allocator.py: freed megabyte buffers are reused (no page faults per call) once set."""

import subprocess
import sys

import numpy as np
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


TRIM_PROBE = """
import numpy as np
from depthcraft.constructions import allocator
def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20
assert allocator.keep_freed_memory()  # freed blocks below 256 MiB stay in the heap
a = np.ones(200 << 18, np.float32)  # 200 MiB, touched
del a
held = rss_mib()
trimmed = allocator.return_free_heap()
print(held, rss_mib(), trimmed)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc_trim only")
def test_return_free_heap_gives_a_freed_buffer_back():
    out = subprocess.run([sys.executable, "-c", TRIM_PROBE], capture_output=True, text=True, check=True)
    held, after, trimmed = out.stdout.split()
    # The freed 200 MiB block stays resident under keep_freed_memory; malloc_trim returns it.
    assert trimmed == "True"
    assert float(held) - float(after) > 150


def test_release_memory_drops_cached_builds_and_compiled_programs():
    import depthcraft
    from depthcraft.constructions import runtime

    model = depthcraft.build("khop_doubling", k=2, n=8)
    assert depthcraft.build("khop_doubling", k=2, n=8) is model  # cached
    model.forward_ids(np.zeros((1, 8), np.int32))
    assert runtime.forward._cache_size() >= 1
    out = depthcraft.release_memory()
    assert out["models"] >= 1
    assert depthcraft.build("khop_doubling", k=2, n=8) is not model  # built again
    assert runtime.forward._cache_size() == 0
