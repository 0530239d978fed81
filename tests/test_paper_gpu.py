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
    # 720 s budget, 100 s gone, 40 s compile, reserve 0.1 * 720 + 30 = 102 s: 478 s left at 4 ms/step
    # -> 119500 steps, capped at 100000
    steps, why = pg.choose_steps(720, 100, {"step_s": 0.004, "compile_s": 40}, chunk=100, cap=100_000)
    assert steps == 100_000 and "cap 100000" in why
    # at 20 ms/step: 478 / 0.02 = 23900 -> a multiple of 20 * 100 = 2000: 22000
    steps, _ = pg.choose_steps(720, 100, {"step_s": 0.02, "compile_s": 40}, chunk=100, cap=100_000)
    assert steps == 22_000
    # less than 2000 fit (478 / 0.5 = 956): a multiple of the chunk, 900
    steps, _ = pg.choose_steps(720, 100, {"step_s": 0.5, "compile_s": 40}, chunk=100, cap=100_000)
    assert steps == 900
    with pytest.raises(ValueError, match="no time left"):
        pg.choose_steps(720, 700, {"step_s": 0.01, "compile_s": 40}, chunk=100, cap=100_000)


def test_smoke_run_writes_results_figures_and_the_table(tmp_path, capsys):
    pg = _script()
    out = tmp_path / "paper_gpu"
    # without the control: one group of runs, one compilation (~10 s on a quiet 2-core machine)
    assert pg.main(["--smoke", "--no-control", "--out", str(out)]) == 0
    r = json.loads((out / "results.json").read_text())
    assert r["complete"] and r["preset"] == "paper" and r["paper_gpu"]["smoke"] is True
    assert r["paper_gpu"]["steps"] == 40 and r["paper_gpu"]["calibration"]["step_s"] > 0
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
