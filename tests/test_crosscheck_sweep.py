"""Sweep planning, the summary's verdicts, and the ``depthcraft train`` command's errors."""

import json

import pytest

from depthcraft.constructions.errors import ParameterError
from depthcraft.verify.cli import main
from depthcraft.verify.crosscheck import sweep
from depthcraft.verify.crosscheck.presets import get_preset
from depthcraft.verify.crosscheck.report import depth_verdict, summarise


def test_parse_depths():
    assert sweep.parse_depths("1-4") == (1, 2, 3, 4)
    assert sweep.parse_depths("1,2,4") == (1, 2, 4)
    assert sweep.parse_depths("2-3,6") == (2, 3, 6)
    for bad in ("0-3", "4-1", "a", "1-", ""):
        with pytest.raises(ParameterError, match="depths"):
            sweep.parse_depths(bad)


def test_make_config_sweeps_comma_lists_and_checks_values():
    cfg = sweep.make_config(get_preset("khop", "cpu"), {"k": "1,3", "n": "16"}, depths=(1, 2), seeds=2)
    assert [c["k"] for c in cfg.conditions] == [1, 3]
    assert all(c["n"] == 16 and c["vocab"] == 4 for c in cfg.conditions)
    assert cfg.names == ["k=1", "k=3"]
    with pytest.raises(ParameterError, match="k=-1 is below the minimum"):
        sweep.make_config(get_preset("khop", "cpu"), {"k": "-1"})
    with pytest.raises(ParameterError, match="unknown parameter 'q'"):
        sweep.make_config(get_preset("khop", "cpu"), {"q": "1"})


def test_plan_mixed_separate_and_controls():
    p = get_preset("khop", "cpu")
    cfg = sweep.make_config(p, {"k": "1,2,4"}, depths=(1, 2, 3), seeds=2, mixed=True, control=True)
    runs = sweep.plan(cfg, [2, 3, 4])
    main_runs = [r for r in runs if not r.control]
    assert len(main_runs) == 3 * 2 and all(r.conditions == (0, 1, 2) for r in main_runs)
    controls = [r for r in runs if r.control]
    # bound - 1 for k = 1, 2, 4 is 1, 2, 3; twice the heads and width
    assert sorted({r.model.depth for r in controls}) == [1, 2, 3] and len(controls) == 3 * 2
    assert all(r.model.heads == 2 * p.heads and r.model.width == 2 * p.width for r in controls)
    assert len({r.run_id for r in runs}) == len(runs)
    sep = sweep.plan(sweep.make_config(p, {"k": "1,2"}, depths=(2,), mixed=False, seeds=1, control=False),
                     [2, 3])
    assert [r.conditions for r in sep] == [(0,), (1,)]
    assert sep[0].run_id == "L2_H4_d64_k=1_seed0"
    # control_depths keeps only those of the bound-1 depths; a bad one is refused
    some = sweep.plan(sweep.make_config(p, {"k": "1,2,4"}, depths=(2,), seeds=1, control_depths=(1, 3, 5)),
                      [2, 3, 4])
    assert [r.model.depth for r in some if r.control] == [1, 3]
    with pytest.raises(ParameterError, match="control_depths"):
        sweep.make_config(p, control_depths=(0,))


@pytest.mark.parametrize("smallest, bound, depths, verdict", [
    (2, 2, [1, 2, 3], "agree"),
    (1, 2, [1, 2, 3], "disagree"),  # training beat the bound
    (3, 2, [1, 2, 3], "disagree"),  # training needed more than the construction
    (None, 2, [1, 2, 3], "disagree"),  # the bound's depth was trained and failed
    (None, 4, [1, 2, 3], "inconclusive"),  # the sweep stops below the bound
    (2, 2, [2, 3], "inconclusive"),  # depth 1 was not trained
    (2, None, [1, 2], "inconclusive"),
])
def test_verdicts(smallest, bound, depths, verdict):
    assert depth_verdict(smallest, bound, depths)["verdict"] == verdict


@pytest.mark.parametrize("smallest, verdict", [
    (1, "disagree"),  # a depth below the impossibility result succeeded
    (2, "agree"),  # at the lower bound: consistent
    (3, "agree"),  # above it: consistent (a lower bound does not predict the threshold)
    (None, "inconclusive"),  # nothing learnt: says nothing about the lower bound
])
def test_verdicts_for_a_lower_bound(smallest, verdict):
    out = depth_verdict(smallest, 2, [1, 2, 3], kind="lower", construction_depth=3)
    assert out["verdict"] == verdict
    if smallest is None:
        assert "lower bound 2" in out["note"] and "construction uses 3" in out["note"]


def test_summary_uses_the_best_seed_and_reports_controls():
    cfg = sweep.make_config(get_preset("khop", "cpu"), {"k": [1]}, depths=(1, 2), seeds=2, threshold=0.05)
    info = sweep.ConstructionInfo("khop_doubling", depth=2, bound=2, bound_formula="ceil(log2 k)+2",
                                  bound_source="construction")

    def rec(depth, seed, err, control=False):
        return {"conditions": ["k=1"], "error": {"k=1": err}, "depth": depth, "seed": seed, "control": control,
                "heads": 8 if control else 4, "width": 128 if control else 64}

    records = [rec(1, 0, 0.40), rec(1, 1, 0.30), rec(2, 0, 0.20), rec(2, 1, 0.01), rec(1, 0, 0.25, control=True)]
    (s,) = summarise(cfg, [info], records)
    # std: sample standard deviation over seeds, sqrt(((0.4-0.35)^2 + (0.3-0.35)^2) / 1)
    assert s["errors"]["1"] == {"best": 0.3, "mean": 0.35, "std": round(0.05 * 2 ** 0.5, 5), "seeds": [0.4, 0.3]}
    assert s["errors"]["2"]["best"] == 0.01
    assert s["smallest_depth"] == 2 and s["verdict"] == "agree"
    assert s["control"] == [{"depth": 1, "heads": 8, "width": 128, "seed": 0, "error": 0.25}]
    assert "control at depth 1" in s["note"] and "error 0.250" in s["note"]


@pytest.mark.parametrize("args, message", [
    (["train", "nosuchtask"], "no preset 'cpu' for task 'nosuchtask'"),
    (["train", "khop", "--depths", "3-1"], "depths='3-1': the range must go up"),
    (["train", "khop", "-p", "k=zero"], "k='zero' is not a valid int"),
    (["train", "khop", "--width", "30", "--heads", "4"], "width=30 must be divisible by heads=4"),
    (["train", "khop", "--preset", "gpu"], "'gpu' is not one of"),
])
def test_cli_bad_input_exits_2_with_one_line(capsys, args, message):
    with pytest.raises(SystemExit) as e:
        main(args)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err


def test_cli_tiny_sweep_writes_results_and_plot(tmp_path, capsys):
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as e:
        main(["train", "khop", "-p", "k=1,2", "-p", "n=6", "--depths", "1-2", "--steps", "3", "--width", "16",
              "--heads", "2", "--seeds", "1", "--no-control", "--eval-size", "64", "--alignment-size", "16",
              "--out", str(out)])
    assert e.value.code == 0
    r = json.loads((out / "results.json").read_text())
    assert (out / "error_by_depth.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert r["complete"] and r["task"] == "khop" and r["device"]["backend"] in ("cpu", "gpu", "cuda", "tpu")
    assert r["command"] == ("depthcraft train khop -p k=1,2 -p n=6 --depths 1-2 --heads 2 --width 16 --steps 3 "
                            "--seeds 1 --no-control --eval-size 64 --alignment-size 16 --out " + str(out))
    assert [run["depth"] for run in r["runs"]] == [1, 2]
    for run in r["runs"]:
        assert set(run["error"]) == {"k=1", "k=2"} and run["steps"] == 3
        assert len(run["eval"][0]["error_per_position"]) == 6
        assert run["train_seconds"] > 0 and run["config"]["model"]["depth"] == run["depth"]
        best = run["alignment"][1]["best"]  # k=2: the construction has ceil(log2 2)+2 = 3 layers
        assert [b["construction_layer"] for b in best] == [1, 2, 3]
        # k-hop scores every token position, so both row selections agree
        assert run["alignment"][1]["best_scored_rows"] == best
    s = {x["condition"]: x for x in r["summary"]}
    assert s["k=1"]["bound"] == 2 and s["k=2"]["bound"] == 3
    assert s["k=1"]["construction_depth"] == 2 and s["k=2"]["construction_depth"] == 3
    assert set(s["k=1"]["errors"]) == {"1", "2"}
    # 3 steps learn nothing: no depth is under the threshold, and depth 2 = the bound was trained
    assert s["k=1"]["smallest_depth"] is None and s["k=1"]["verdict"] == "disagree"


def test_summary_reports_the_training_distribution_when_evaluation_differs():
    cfg = sweep.make_config(get_preset("tm", "cpu"), depths=(1, 2), seeds=1)
    assert cfg.eval_conditions is not None and cfg.eval_conditions[0]["split"] == "test"
    assert cfg.conditions[0]["split"] == "train"
    (name,) = cfg.names
    info = sweep.ConstructionInfo("tm_parse_map", depth=2, bound=2, bound_formula="2", bound_source="construction")
    records = [{"conditions": [name], "error": {name: e}, "error_training_distribution": {name: t}, "depth": d,
                "seed": 0, "control": False, "heads": 2, "width": 32} for d, e, t in ((1, 0.4, 0.3), (2, 0.45, 0.0))]
    (s,) = summarise(cfg, [info], records)
    assert s["smallest_depth"] is None and s["verdict"] == "disagree"  # held-out tokens: never below 0.05
    assert s["errors_training_distribution"]["2"]["best"] == 0.0
    assert s["smallest_depth_training_distribution"] == 2


@pytest.mark.parametrize("task", ["khop", "icqa", "tm", "ictm", "retrieval"])
def test_paper_presets_build_their_sweep(task):
    """The GPU presets were not run here; at least their configuration and run plan must be valid."""
    from depthcraft.verify.crosscheck.presets import get_preset

    cfg = sweep.make_config(get_preset(task, "paper"))
    infos = [sweep.construction_info(cfg.construction, c, compile_model=False) for c in cfg.conditions]
    runs = sweep.plan(cfg, [i.bound for i in infos])
    assert runs and all(r.train.steps == cfg.train.steps for r in runs)
    if task == "khop":  # SPEC §7: N = 100, |Σ| = 4, k in 0..16 in one model, depths 2-6, 4 heads, width 128, 1e5 steps
        assert [c["k"] for c in cfg.conditions] == list(range(17)) and cfg.conditions[0]["n"] == 100
        assert (cfg.depths, cfg.model.heads, cfg.model.width, cfg.train.steps) == ((2, 3, 4, 5, 6), 4, 128, 100_000)


def test_train_takes_the_verify_sweep_syntax():
    cfg = sweep.make_config(get_preset("khop", "cpu"), {"k": "1..3"}, depths=sweep.parse_depths("1..2,4"), seeds=1)
    assert [c["k"] for c in cfg.conditions] == [1, 2, 3] and cfg.depths == (1, 2, 4)
