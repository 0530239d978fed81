"""scripts/paper_gpu.py: the k-hop paper preset on one GPU in a wall-time budget.

The smoke path (tiny sizes, CPU) runs the whole script: calibration, the concurrent sweep,
results.json, figures and the table beside SPEC §7a. The step choice is checked on numbers
worked out by hand.
"""

import importlib.util
import json
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("paper_gpu", ROOT / "scripts" / "paper_gpu.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_choose_steps_fits_the_budget_and_rounds_to_whole_curve_intervals():
    pg = _script()
    # 720 s budget, 100 s gone, final evaluation 20 s: reserve 1.5 * 20 + 0.05 * 720 + 10 = 76 s, 20 curve
    # evaluations of 1 s: 524 s left at 4 ms/step -> 131000 steps, capped at 100000
    cal = {"step_s": 0.004, "compile_s": 40, "curve_eval_s": 1.0, "final_eval_s": 20.0}
    steps, why = pg.choose_steps(720, 100, cal, chunk=100, cap=100_000)
    assert steps == 100_000 and "cap 100000" in why
    # at 20 ms/step: 524 / 0.02 = 26200 -> a multiple of 20 * 100 = 2000: 26000
    steps, _ = pg.choose_steps(720, 100, dict(cal, step_s=0.02), chunk=100, cap=100_000)
    assert steps == 26_000
    # less than 2000 fit (524 / 0.5 = 1048): a multiple of the chunk, 1000
    steps, _ = pg.choose_steps(720, 100, dict(cal, step_s=0.5), chunk=100, cap=100_000)
    assert steps == 1000
    with pytest.raises(ValueError, match="cannot hold"):
        pg.choose_steps(720, 700, dict(cal, step_s=0.01), chunk=100, cap=100_000)


def test_smoke_run_writes_results_figures_and_the_table(tmp_path, capsys):
    pg = _script()
    out = tmp_path / "paper_gpu"
    # without the control: one group of runs, one compilation (~10 s on a quiet 2-core machine)
    assert pg.main(["--smoke", "--no-control", "--out", str(out), "--budget-s", "600"]) == 0
    r = json.loads((out / "results.json").read_text())
    assert r["complete"] and r["preset"] == "paper" and r["paper_gpu"]["smoke"] is True
    assert r["paper_gpu"]["steps"] == 40 and r["paper_gpu"]["calibration"]["step_s"] > 0
    assert r["paper_gpu"]["wall_s"] <= 600 and r["settings"]["trainer"] == "fused"
    assert r["paper_gpu"]["calibration"]["final_eval_s"] > 0 and r["paper_gpu"]["precision"] == "float32"
    runs = [(x["depth"], x["control"]) for x in r["runs"]]
    assert runs == [(2, False), (2, False)]  # depth 2, 2 seeds
    assert all(x["steps_done"] == 40 for x in r["runs"])
    for name in ("error_by_depth.png", "loss_curves.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = (out / "table.md").read_text()
    assert "| 6 |" in table and "0.062" in table  # SPEC §7a's L=6, k=16 beside ours
    assert (out / "COMMAND").read_text().startswith("python scripts/paper_gpu.py --smoke --no-control")
    assert r["summary"][1]["control"] == []


def test_smoke_plans_the_capacity_control():
    """With the control (the default): depth bound - 1 = 1 for k = 1, twice the heads and width."""
    pg = _script()
    cfg = pg.build_config(pg.argparse.Namespace(smoke=True, control=True, seeds=3))
    infos = [pg.sweep.condition_info(cfg, c) for c in cfg.conditions]
    runs = pg.sweep.plan(cfg, [i.bound for i in infos])
    assert [(r.model.depth, r.model.heads, r.model.width, r.control) for r in runs] == \
        [(2, 4, 16, False)] * 2 + [(1, 8, 32, True)] * 2


def test_smoke_run_killed_half_way_leaves_its_results(tmp_path):
    """results.json is written after every curve point: killed (SIGKILL) as soon as it appears, the
    run leaves a readable file with the steps trained so far."""
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "killed"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "paper_gpu.py"), "--smoke", "--no-control",
                             "--out", str(out), "--budget-s", "600"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env=env, cwd=str(tmp_path))
    path = out / "results.json"
    try:
        t = time.monotonic()
        while not path.exists() and proc.poll() is None and time.monotonic() - t < 600:
            time.sleep(0.05)
        running = proc.poll() is None
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    assert running, proc.stderr.read().decode()[-2000:]
    r = json.loads(path.read_text())
    assert r["complete"] is False and 0 < r["partial_step"] < 40
    assert len(r["runs"]) == 2 and all(x["partial"] and x["steps_done"] == r["partial_step"] for x in r["runs"])
    assert all(x["curve"] and set(x["error"]) == {"k=0", "k=1"} for x in r["runs"])


def test_preset_option_scales_another_claims_preset():
    """--preset TASK:NAME: that sweep on the fused trainer, its steps times --scale as the cap; a
    curriculum preset (per-group trainer only) is refused before any work."""
    pg = _script()
    ns = pg.argparse.Namespace(smoke=False, control=None, seeds=None, preset="ictm_dense:c3", scale=20,
                               precision="auto")
    cfg = pg.build_config(ns)
    base = pg.get_preset("ictm_dense", "c3")
    assert cfg.trainer == "fused" and cfg.train.steps == 20 * base.steps and cfg.seeds == base.seeds
    assert pg.main(["--preset", "retrieval_slots:c5_curriculum", "--out", "/nonexistent/x"]) == 2
