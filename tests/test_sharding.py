"""Checks split over several devices (constructions/devices.py) give the same reports as one device.

JAX fixes its device count when it starts, so each device count runs in its own process:
two CPU devices come from ``XLA_FLAGS=--xla_force_host_platform_device_count=2``.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from depthcraft.constructions import devices
from depthcraft.constructions.errors import ParameterError

#: (construction, parameters, exhaustive): a compiled softmax model checked on every input, and a
#: ReLU-attention one on random, edge and hypothesis inputs.
CASES = [("khop_doubling", {"k": 2, "n": 6, "vocab": 3}, True),
         ("tm_parse_map", {"attention": "relu"}, False)]

#: Runs in the child process: the device count, whether a check's forward call was split, and per case
#: and check kind the counts, verdict, counterexample and margins (as verify's report holds them).
CHILD = r"""
import json, sys
import jax, numpy as np
from depthcraft.constructions import devices
from depthcraft.constructions.errors import ParameterError
from depthcraft.verify import lookup
from depthcraft.verify.checks import _forward_rows
from depthcraft.verify.verifier import margins, run_checks

out = {"devices": jax.device_count(), "cases": []}
model = lookup.build("khop_doubling", k=2, n=6, vocab=3)
ids = model.encode(np.zeros((3, 6), int), length=7)
res = model.forward_ids(np.concatenate([ids, ids[:1]]), split=True)  # 4 rows: a multiple of 1 and 2
out["shards"] = len(res.logits.sharding.device_set)
out["rows"] = [len(l) for _, l, _ in _forward_rows(model, ids, 3, None, None)]  # 3 rows, padded to 4 on 2 devices
for name, params, exhaustive in json.loads(sys.argv[1]):
    r = lookup.resolve(name, params)
    checks = run_checks(r.build(), r.task, r.params, samples=300, exhaustive=exhaustive, seed=3,
                        hypothesis_examples=30)
    out["cases"].append({"checks": {k: c and c.to_json() for k, c in checks.items()},
                         "margins": {k: c and [c.attention, c.output_gap] for k, c in checks.items()},
                         "min_margin": margins(checks)})
print(json.dumps(out))
"""


def _run(count: int, tmp_path) -> dict:
    env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={count}")
    env.pop(devices.ENV, None)
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(CASES)], env=env, capture_output=True,
                          text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_two_devices_give_the_same_reports_as_one(tmp_path):
    one, two = _run(1, tmp_path), _run(2, tmp_path)
    assert one["devices"] == 1 and two["devices"] == 2
    assert one["shards"] == 1 and two["shards"] == 2  # the check's forward ran on both devices
    assert one["rows"] == two["rows"] == [3]  # the padding row (to a multiple of 2) is dropped
    assert [c["checks"] for c in two["cases"]] == [c["checks"] for c in one["cases"]]
    assert two["cases"] == one["cases"]  # margins (floats, compared exactly), counterexamples, verdicts
    assert all(m[0] is not None for c in one["cases"] for m in c["margins"].values() if m)
    ex = one["cases"][0]["checks"]["exhaustive"]
    assert ex["inputs"] == 3 ** 6 and ex["exact"]
    assert all(c["checks"]["random"]["inputs"] == 300 for c in one["cases"])


def test_one_device_leaves_arrays_and_counts_alone():
    """In this (one-device) process splitting is the identity and no padding is added."""
    if devices.device_count() != 1:
        pytest.skip("this process has several devices")
    x = np.arange(6).reshape(3, 2)
    assert devices.split_rows(x) is x
    tree = {"w": x}
    assert devices.replicate(tree) is tree
    assert [devices.rows_multiple(r) for r in (1, 3, 1024)] == [1, 3, 1024]


def test_use_cpu_devices_rejects_bad_counts(monkeypatch):
    monkeypatch.setenv(devices.ENV, "two")
    with pytest.raises(ParameterError, match="DEPTHCRAFT_CPU_DEVICES must be a positive integer, got 'two'"):
        devices.use_cpu_devices()
    with pytest.raises(ParameterError, match="must be >= 1, got 0"):
        devices.use_cpu_devices(0)
    monkeypatch.delenv(devices.ENV)
    assert devices.use_cpu_devices() == 0
