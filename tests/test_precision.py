"""Precision study: dtypes, emulated mantissa widths, the CLI."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from depthcraft.verify import lookup
from depthcraft.constructions.runtime import forward
from depthcraft.verify.cli import main
from depthcraft.verify.precision import bits_needed, run_inputs, study
from depthcraft.verify.tasks import get_task

P16 = {"k": 2, "n": 16, "vocab": 4, "distribution": "paper"}


@pytest.fixture(scope="module")
def model16():
    return lookup.resolve("khop_constant_width", {"k": 2, "n": 16, "vocab": 4}).build()


def _inputs(p, n=64):
    task = get_task("khop")
    return [task.sample(p, np.random.default_rng(0), n)] + task.edge_cases(p)


def test_mantissa_rounding_of_every_operation(model16):
    ids = jnp.asarray(model16.encode(np.array([[0, 1, 2, 0, 1, 2, 3, 0]])))
    exact = forward(model16.jparams, ids, model16.arch)
    same = forward(model16.jparams, ids, model16.arch, mantissa_bits=23)
    np.testing.assert_array_equal(np.asarray(exact.logits), np.asarray(same.logits))
    coarse = forward(model16.jparams, ids, model16.arch, mantissa_bits=3)
    res = np.asarray(coarse.residual)
    nz = res[res != 0]  # every residual entry has at most 1 + 3 significant bits
    mant = nz / 2.0 ** np.floor(np.log2(np.abs(nz)))
    np.testing.assert_array_equal(mant * 8, np.round(mant * 8))
    # 7 mantissa bits round exactly like a cast to bfloat16 (round to nearest, ties to even)
    from depthcraft.constructions.runtime import mantissa_rounder

    x = jnp.asarray([1 + 2 ** -9 + 2 ** -12, 1 + 2 ** -8, 1 + 3 * 2 ** -8, -3.14159, 1e-3], jnp.float32)
    np.testing.assert_array_equal(np.asarray(mantissa_rounder(7)(x)), np.asarray(x.astype(jnp.bfloat16).astype(jnp.float32)))


def test_run_inputs_detects_failures(model16):
    task, inputs = get_task("khop"), _inputs(P16)
    ok = run_inputs(model16, task, P16, inputs, "float32")
    assert ok["exact"] and ok["failed"] == 0 and ok["min_attention"] > 0.999
    bad = run_inputs(model16, task, P16, inputs, "float32", mantissa_bits=1)
    assert not bad["exact"] and bad["failed"] > 0
    f64 = run_inputs(model16, task, P16, inputs, "float64")
    assert f64["exact"]
    assert not jax.config.jax_enable_x64  # the float64 run does not leak x64 into the process


def test_bits_needed_grows_with_n():
    task = get_task("khop")
    needed = {}
    for n in (8, 128):
        p = {**P16, "n": n}
        m = lookup.resolve("khop_constant_width", {"k": 2, "n": n, "vocab": 4}).build()
        needed[n] = bits_needed(m, task, p, _inputs(p, 32))
        assert needed[n] is not None
        # exact with the width found, not exact with one bit less
        assert run_inputs(m, task, p, _inputs(p, 32), mantissa_bits=needed[n])["exact"]
        if needed[n] > 1:
            assert not run_inputs(m, task, p, _inputs(p, 32), mantissa_bits=needed[n] - 1)["exact"]
    # the angle look-ups separate positions by ~2π²/n², so 16x longer needs several more bits
    assert needed[128] >= needed[8] + 4


def test_study_summary_and_cli(tmp_path, capsys):
    r = study("khop_constant_width", {"k": "2"}, over="n=8,16", dtypes=("float32", "bfloat16"), samples=16,
              bits=False)
    assert r["values"] == [8, 16] and r["over"] == "n"
    assert len(r["points"]) == 4
    assert r["summary"]["float32"]["largest_exact"] == 16 and r["summary"]["float32"]["all_exact"]
    with pytest.raises(SystemExit) as e:
        main(["precision", "khop_constant_width", "-p", "k=2", "--over", "n=8", "--dtypes", "float32",
              "--samples", "8", "--no-bits", "--out", str(tmp_path)])
    assert e.value.code == 0
    saved = json.loads((tmp_path / "precision_khop_constant_width.json").read_text())
    assert saved["points"][0]["exact"]
    assert (tmp_path / "precision_khop_constant_width.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("argv,message", [
    (["--dtypes", "float8"], "unknown dtype float8"),
    (["--over", "n"], "KEY=VALUES"),
    (["--over", "n=4-2"], "must go up"),
    (["--over", "n=0"], "n=0 is below the minimum"),
    (["-p", "n=8"], "both fixed"),
    (["--out", "/dev/null/dir"], "cannot create the directory"),
])
def test_cli_bad_input_exits_2(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        main(["precision", "khop_constant_width", *argv])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
