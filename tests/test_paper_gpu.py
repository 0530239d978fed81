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
    # a checkpoint of 0.5 s at each of the 20 curve points: 76 + 30 s -> 514 s left; at 20 ms/step
    # 25700 steps -> 24000
    steps, why = pg.choose_steps(720, 100, dict(cal, step_s=0.02, checkpoint_s=0.5), chunk=100, cap=100_000)
    assert steps == 24_000 and "checkpoints 30 s" in why


def test_step_flops_by_hand():
    """Smoke sizes: 2 runs of depth 2, width 16, MLP ratio 4: per layer 4 * 16^2 + 8 * 16^2 =
    3072 weights, read-out 16 x O; 3 x 2 FLOP per weight and token, batch 32 x T tokens."""
    pg = _script()
    cfg = pg.build_config(pg.argparse.Namespace(smoke=True, control=False, seeds=2))
    runs = pg.sweep.plan(cfg, [None, 1])
    assert [(r.model.depth, r.model.width) for r in runs] == [(2, 16)] * 2
    assert pg.step_flops(cfg, runs, seq_len=10, n_outputs=5) == 6 * 32 * 10 * 2 * (2 * 3072 + 16 * 5)


def test_an_impossible_budget_is_refused_up_front(tmp_path, capsys, monkeypatch):
    """Before any construction is compiled or step traced: the smoke run in 10 s (the reserve
    alone is 10.5 s), and the paper preset at a stated 1e12 FLOP/s (its 500 calibration and
    first-chunk steps of ~9e11 FLOP take >= 450 s) in 400 s: exit 2, one line on stderr."""
    import time

    pg = _script()
    t = time.perf_counter()
    assert pg.main(["--smoke", "--budget-s", "10", "--out", str(tmp_path / "a")]) == 2
    err = [x for x in capsys.readouterr().err.splitlines() if x.startswith("error")]
    assert len(err) == 1 and "cannot hold the preset" in err[0] and "reserve 10 s" in err[0], err
    monkeypatch.setattr(pg, "peak_flops", lambda backend: (1e12, "a stated 1e12 FLOP/s"))
    assert pg.main(["--budget-s", "400", "--out", str(tmp_path / "b")]) == 2
    err = [x for x in capsys.readouterr().err.splitlines() if x.startswith("error")]
    assert len(err) == 1 and "cannot hold the preset" in err[0] and "500 steps" in err[0], err
    flops = float(err[0].split(" x ")[1].split(" FLOP")[0])
    assert 8e11 < flops < 1e12  # 30 runs (depths 2-6 at width 128, controls at 256), batch 32 x 101 tokens
    assert time.perf_counter() - t < 60
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """The smoke run without the control: one group of runs, one compilation (~10 s on a quiet
    2-core machine)."""
    pg = _script()
    out = tmp_path_factory.mktemp("smoke") / "paper_gpu"
    assert pg.main(["--smoke", "--no-control", "--out", str(out), "--budget-s", "600"]) == 0
    return out, json.loads((out / "results.json").read_text())


def test_smoke_run_writes_results_figures_and_the_table(smoke):
    out, r = smoke
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


def test_smoke_run_killed_half_way_leaves_its_results_and_resumes(tmp_path, smoke, capsys):
    """results.json is written after every curve point, after its checkpoint: killed (SIGKILL) as
    soon as it appears, the run leaves a readable file with the steps trained so far (its
    checkpoint may be one curve point further, written before the kill landed); a command
    with other runs (the control added) is refused before calibrating; the same command run again
    continues from that step and ends with the uninterrupted run's losses and errors.

    Only the killed run is a process of its own (it must be killed); the refusal and the resume
    run in this process, reading what the killed one left on disk (and the smoke fixture's
    compiled programs: no second compilation)."""
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
    # the run may write the next curve point's checkpoint between our seeing results.json and the
    # kill landing: the resume starts from the checkpoint, never before the results' step
    step = json.loads((out / "checkpoints" / "fused" / "checkpoint.json").read_text())["step"]
    assert r["partial_step"] <= step < 40
    pg = _script()
    capsys.readouterr()
    assert pg.main(["--smoke", "--control", "--out", str(out), "--budget-s", "600"]) == 2
    other = capsys.readouterr()
    assert "other settings" in other.err and "calibration" not in other.out
    assert pg.main(["--smoke", "--no-control", "--out", str(out), "--budget-s", "600"]) == 0
    done = capsys.readouterr()
    assert f"resuming at step {step} of 40" in done.out, done.err[-2000:]
    again = json.loads(path.read_text())
    _, ref = smoke
    assert again["complete"] and again["paper_gpu"]["resumed_from"] == step
    for x, y in zip(again["runs"], ref["runs"]):
        assert x["steps_done"] == 40 and x["resumed_from"] == step
        assert x["history"] == y["history"] and x["curve"] == y["curve"] and x["error"] == y["error"]


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


def test_the_gpu_settings_run_on_the_cpu(tmp_path):
    """Issue 41: the GPU path (fused trainer, padded layout, bfloat16 matrix products) runs in the default
    suite on the CPU at the smoke size, so a first GPU run is not the path's first run."""
    pg = _script()
    out = tmp_path / "gpu_settings"
    assert pg.main(["--smoke", "--no-control", "--layout", "padded", "--precision", "bfloat16", "--out", str(out),
                    "--budget-s", "600"]) == 0
    r = json.loads((out / "results.json").read_text())
    assert r["complete"] and r["paper_gpu"]["precision"] == "bfloat16" and r["paper_gpu"]["layout"] == "padded"
    assert r["settings"]["layout"] == "padded" and all(x["steps_done"] == 40 for x in r["runs"])
    losses = [h["loss"] for x in r["runs"] for h in x["history"]]
    assert all(0 < v < 10 for v in losses) and losses[-1] < losses[0]
