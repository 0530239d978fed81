"""Sweeps on Ray (``depthcraft train --ray``): the same runs as the sequential path, same numbers.

The Ray test starts a local Ray instance (2 CPUs, no dashboard); it is marked slow and skipped when
Ray is not installed (``pip install 'depthcraft[ray]'``); ``.ci/run`` installs the extra and runs it:
``pytest -m slow tests/test_crosscheck_ray.py``.
"""

import json
import sys

import pytest

from depthcraft.verify.cli import main
from depthcraft.verify.crosscheck import sweep
from depthcraft.verify.crosscheck.presets import get_preset


def _tiny():
    """Two runs (depths 1 and 2, one seed each, no control) of a small k-hop sweep."""
    return sweep.make_config(get_preset("khop", "cpu"), {"k": "1,2", "n": "6"}, depths=(1, 2), seeds=1,
                             control=False, steps=40, width=16, heads=2, batch=32, eval_size=64,
                             alignment_size=0, checkpoint_every=0)


def test_ray_without_ray_installed_is_one_line_exit_2(monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(SystemExit) as e:
        main(["train", "khop", "--steps", "2", "--ray", "--out", str(tmp_path / "x")])
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "pip install 'depthcraft[ray]'" in err, err
    assert not (tmp_path / "x").exists()


@pytest.mark.slow  # about 50 s on 2 busy cores (Ray's start, one JAX compile per worker); .ci/run runs it
@pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")  # Ray starts its processes by fork + exec
def test_ray_sweep_gives_the_sequential_numbers_and_resumes(tmp_path):
    ray = pytest.importorskip("ray")
    cfg = _tiny()
    seq = sweep.run_sweep(cfg, str(tmp_path / "seq"), plot=False)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        par = sweep.run_sweep(cfg, str(tmp_path / "ray"), plot=False, ray=True)
        again = sweep.run_sweep(cfg, str(tmp_path / "ray"), plot=False, ray=True)  # resumes every checkpoint
        with pytest.raises(SystemExit) as e:  # the command line, on the Ray instance already running
            main(["train", "khop", "-p", "k=1,2", "-p", "n=6", "--depths", "1-2", "--steps", "40", "--width", "16",
                  "--heads", "2", "--batch", "32", "--seeds", "1", "--no-control", "--eval-size", "64",
                  "--alignment-size", "0", "--checkpoint-every", "0", "--ray", "--out", str(tmp_path / "cli")])
        assert e.value.code == 0
    finally:
        ray.shutdown()
    assert len(seq["runs"]) == 2 and par["complete"]
    assert [r["run_id"] for r in par["runs"]] == [r["run_id"] for r in seq["runs"]]
    for a, b in zip(seq["runs"], par["runs"]):
        assert a["error"] == b["error"]  # identical, not close
        assert a["history"] == b["history"] and a["curve"] == b["curve"]
        assert b["resumed_from"] == 0
    assert [r["resumed_from"] for r in again["runs"]] == [40, 40]
    assert [r["error"] for r in again["runs"]] == [r["error"] for r in seq["runs"]]
    for out in ("ray", "cli"):
        on_disk = json.loads((tmp_path / out / "results.json").read_text())
        assert [r["error"] for r in on_disk["runs"]] == [r["error"] for r in seq["runs"]]
