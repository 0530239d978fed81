"""The training claims' verdict rules (verify/crosscheck/claims/) on hand-made sweep results,
the committed claims.json, the `depthcraft claims` command and training curves (eval_every)."""

import json
import pathlib

import numpy as np
import pytest

from depthcraft.verify.crosscheck import claims as C
from depthcraft.verify.crosscheck import sweep as S
from depthcraft.verify.crosscheck.presets import PRESET_NAMES, get_preset

ROOT = pathlib.Path(__file__).resolve().parents[1]


def run(cond, depth, seed, error, *, control=False, heads=2, width=32, learn_at=None, steps=1000, per_pos=None,
        curve=None):
    hist = [{"step": s, "loss": 0.05 if learn_at is not None and s >= learn_at else 1.0}
            for s in range(100, steps + 1, 100)]
    r = {"run_id": f"L{depth}_s{seed}", "depth": depth, "heads": heads, "width": width, "seed": seed,
         "control": control, "conditions": [cond] if isinstance(cond, str) else list(cond), "steps": steps,
         "error": {cond: error} if isinstance(cond, str) else dict(zip(cond, error)), "history": hist,
         "eval": [{"condition": cond, "error": error, "error_per_position": per_pos}]}
    if curve is not None:
        r["curve"] = curve
    return r


def doc(runs, names, complete=True):
    return {"complete": complete, "runs": runs, "planned_runs": [r["run_id"] for r in runs],
            "settings": {"condition_names": names, "seeds": 3, "model": {"width": 32, "heads": 2, "mlp": False},
                         "train": {"steps": 1000, "batch": 64, "lr": 0.001}}}


class Res:
    def __init__(self, docs):
        self.docs = docs

    def __getitem__(self, k):
        return self.docs[k]


def threshold_doc(e1, e2, ctrl=None, seeds=3):
    runs = [run("m=4", 1, s, e1[s]) for s in range(seeds)] + [run("m=4", 2, s, e2[s]) for s in range(seeds)]
    if ctrl is not None:
        runs += [run("m=4", 1, s, ctrl[s], control=True, heads=4, width=64) for s in range(seeds)]
    return doc(runs, ["m=4"])


def test_stat_mean_and_population_std():
    s = C.Stat([0.1, 0.2, 0.6])
    assert s.mean == pytest.approx(0.3) and s.std == pytest.approx(np.sqrt((0.04 + 0.01 + 0.09) / 3))
    assert s.fails and not s.learns and s.state == "fails"
    assert C.Stat([0.01, 0.02]).state.startswith("undecided")
    assert C.Stat([0.01, 0.02, 0.1]).state == "learns"  # mean 0.0433 < 0.05
    assert C.Stat([0.1, 0.1, 0.1]).state == "unclear"


def test_depth_threshold_verdicts():
    v, text, m = C.depth_threshold(threshold_doc([0.6, 0.5, 0.7], [0, 0.01, 0.02], [0.6, 0.6, 0.5]), "m=4", [1], 2)
    assert v == C.REPRODUCED and "L=1 0.600 ± 0.082 (n=3)" in text and "control" in text
    # the capacity control learns: one layer suffices -> not reproduced
    v, _, _ = C.depth_threshold(threshold_doc([0.6, 0.5, 0.7], [0, 0, 0], [0.0, 0.01, 0.0]), "m=4", [1], 2)
    assert v == C.NOT_REPRODUCED
    # depth 2 fails and nothing deeper was trained: a budget artefact is not excluded
    v, text, _ = C.depth_threshold(threshold_doc([0.6, 0.5, 0.7], [0.5, 0.6, 0.4]), "m=4", [1], 2)
    assert v == C.INCONCLUSIVE and "budget artefact" in text
    # depth 2 fails while depth 3 learns with the same recipe: not reproduced
    d = threshold_doc([0.6, 0.5, 0.7], [0.5, 0.6, 0.4])
    d["runs"] += [run("m=4", 3, s, 0.0) for s in range(3)]
    v, text, _ = C.depth_threshold(d, "m=4", [1], 2)
    assert v == C.NOT_REPRODUCED and "L=3 learns" in text
    # two seeds: undecided
    v, _, _ = C.depth_threshold(threshold_doc([0.6, 0.5], [0, 0], seeds=2), "m=4", [1], 2)
    assert v == C.INCONCLUSIVE
    # depth 1 in the unclear band
    v, _, _ = C.depth_threshold(threshold_doc([0.1, 0.1, 0.1], [0, 0, 0]), "m=4", [1], 2)
    assert v == C.INCONCLUSIVE


def _khop_doc(kstar_by_depth, ks=(1, 2, 3, 4, 6, 8)):
    names = [f"k={k}" for k in ks]
    runs = []
    for d, kstar in kstar_by_depth.items():
        for s in range(3):
            errs = [0.0 if k <= kstar else 0.4 for k in ks]
            r = run(names, d, s, errs)
            runs.append(r)
    return doc(runs, names)


DENSE = tuple(range(1, 17))


def test_c1_doubling_reproduced_and_flat_not():
    """Issue 41's rule on sweeps: a dense grid k = 1..16 lets doubling decide; on the CPU sweeps' grid
    {1, 2, 3, 4, 6, 8} doubling from k* = 1 saturates at L = 5, leaving three depths: inconclusive."""
    out = C.judge_c1(Res({"khop": _khop_doc({2: 1, 3: 2, 4: 4, 5: 8}, DENSE)}))
    assert out["verdict"] == C.REPRODUCED
    assert out["measured"]["k_star"] == {"2": [1, 1], "3": [2, 2], "4": [4, 4], "5": [8, 8]}
    assert out["measured"]["rule"]["geometric"]["b"] == pytest.approx(1.0, abs=1e-6)
    assert out["measured"]["rule"]["linear"]["chi2"] == pytest.approx(27.6)
    coarse = C.judge_c1(Res({"khop": _khop_doc({2: 1, 3: 2, 4: 4, 5: 8})}))
    assert coarse["verdict"] == C.INCONCLUSIVE and coarse["measured"]["rule"]["saturated"] == [5]
    assert C.judge_c1(Res({"khop": _khop_doc({2: 1, 3: 2, 4: 3, 5: 4}, DENSE)}))["verdict"] != C.REPRODUCED
    # the 5000-step sweep's 1, 3, 6, 6 on the coarse grid (k* in [1, 1], [3, 3], [6, 7], [6, 7]) does not double
    assert C.judge_c1(Res({"khop": _khop_doc({2: 1, 3: 3, 4: 6, 5: 6})}))["verdict"] != C.REPRODUCED
    assert C.judge_c1(Res({"khop": _khop_doc({2: 1, 3: 4, 4: 2, 5: 8}, DENSE)}))["verdict"] == C.NOT_REPRODUCED
    one_step = C.judge_c1(Res({"khop": _khop_doc({2: 4, 3: 8})}))
    assert one_step["verdict"] == C.INCONCLUSIVE  # the step from 4 reaches max k: nothing measured past it


def test_c1_verdict_is_the_longest_sweeps_and_both_step_counts_are_reported(tmp_path):
    from tools import docgen

    short = _khop_doc({2: 2, 3: 2, 4: 2, 5: 3}, DENSE)  # flat: not reproduced at 2500 steps
    long = _khop_doc({2: 1, 3: 2, 4: 4, 5: 8}, DENSE)  # doubling at 5000 steps
    out = C.judge_c1(Res({"khop": short, "khop_long": long}))
    assert out["verdict"] == C.REPRODUCED and out["measured"]["train_steps"] == 5000
    assert out["measured"]["k_star"] == {"2": [1, 1], "3": [2, 2], "4": [4, 4], "5": [8, 8]}
    assert {s: v["verdict"] for s, v in out["measured"]["by_steps"].items()} == {
        "2500": C.NOT_REPRODUCED, "5000": C.REPRODUCED}
    assert out["evidence"].startswith("verdict from the 5000-step sweep. 2500 STEPS (khop): not reproduced")
    # the 2500-step sweep alone gives its own verdict; a long sweep that does not double gives "not reproduced"
    assert C.judge_c1(Res({"khop": long}))["measured"]["train_steps"] == 2500
    assert C.judge_c1(Res({"khop": long, "khop_long": short}))["verdict"] == C.NOT_REPRODUCED
    with pytest.raises(C.InputError, match="no C1 sweep"):
        C.judge_c1(Res({}))
    path = tmp_path / docgen.CLAIMS
    path.parent.mkdir(parents=True)
    short, long = _khop_doc({2: 2, 3: 2, 4: 2, 5: 3}), _khop_doc({2: 1, 3: 2, 4: 4, 5: 8})
    out = C.judge_c1(Res({"khop": short, "khop_long": long}))
    path.write_text(json.dumps({"claims": [dict(out, id="C1")]}), encoding="utf-8")
    lines = docgen.render_c1_table(tmp_path).splitlines()
    assert lines[0].startswith("| L | steps | k=1 (ours)")
    rows4 = [line for line in lines if line.startswith("| 4 |")]
    assert [r.split(" | ")[1] for r in rows4] == ["2500", "5000"]
    assert "0.015" in rows4[0] and "0.015" not in rows4[1]  # the paper's L=4, k=4 cell once per depth
    assert rows4[0].count("0.400 ± 0.000") == 4 and rows4[1].count("0.400 ± 0.000") == 2  # k=3, 4 learned at 5000


def test_c1_reports_every_control_and_a_control_that_learns_more_is_inconclusive():
    d = _khop_doc({2: 1, 3: 2, 4: 4, 5: 8}, DENSE)
    names = d["settings"]["condition_names"]
    for depth, kstar in ((2, 1), (3, 4)):  # L=2's control matches L=2; L=3's learns k=4 where L=3 has 2
        d["runs"] += [run(names, depth, s, [0.0 if k <= kstar else 0.4 for k in DENSE],
                          control=True, heads=4, width=64) for s in range(3)]
    out = C.judge_c1(Res({"khop": d}))
    assert out["measured"]["control_k_star"] == {"2": [1, 1], "3": [4, 4]}
    assert "k*: L=2: 1, L=3: 4" in out["evidence"] and "control k*_lo = 4 > k*_hi = 2" in out["evidence"]
    assert out["verdict"] == C.INCONCLUSIVE  # L=3's limit may be capacity


def test_c4_heads_speed_rule():
    def heads_doc(learn_steps):
        runs = [run("x", 1, s, 0.0, heads=h, learn_at=learn_steps[h]) for h in (1, 2, 4) for s in range(3)]
        return doc(runs, ["x"])

    stats, clear = C.heads_speed(heads_doc({1: 800, 2: 500, 4: 300}), (1, 2, 4))
    assert clear == "yes" and stats[4].median_step == 300
    assert C.heads_speed(heads_doc({1: 500, 2: 500, 4: 400}), (1, 2, 4))[1] == "no"  # 400 > 0.67 * 500
    assert C.heads_speed(heads_doc({1: 300, 2: 500, 4: 200}), (1, 2, 4))[1] == "no"  # not monotone
    runs = [run("x", 1, s, 0.3 if h == 1 else 0.0, heads=h, learn_at=300) for h in (1, 2, 4) for s in range(3)]
    assert C.heads_speed(doc(runs, ["x"]), (1, 2, 4))[1] is None  # one head count does not learn


def _c5_doc(final_errs, every_errs, hop_steps):
    every, final = "d=3 targets=every", "d=3 targets=final"
    runs = []
    for s in range(3):
        runs.append(run(final, 2, s, final_errs[s], per_pos=[None] * 13 + [None, None, final_errs[s]]))
        curve = [{"step": st, "error_per_position": {every: [None] * 13 + [0.0 if st >= h else 0.5
                                                                          for h in hop_steps]}}
                 for st in (250, 500, 750)]
        runs.append(run(every, 2, s, every_errs[s], per_pos=[None] * 13 + [0.0, 0.0, every_errs[s]], curve=curve))
    return doc(runs, [every, final])


def test_c5_rule():
    ok = C.judge_c5(Res({"retrieval": _c5_doc([0.5, 0.6, 0.5], [0.0, 0.01, 0.0], [250, 500, 750])}))
    assert ok["verdict"] == C.REPRODUCED, ok["evidence"]
    assert ok["measured"]["order"]["median_steps"] == [250.0, 500.0, 750.0]
    out_of_order = C.judge_c5(Res({"retrieval": _c5_doc([0.5, 0.6, 0.5], [0.0, 0.0, 0.0], [500, 250, 750])}))
    assert out_of_order["verdict"] == C.NOT_REPRODUCED
    plain_learns = C.judge_c5(Res({"retrieval": _c5_doc([0.0, 0.0, 0.01], [0.0, 0.0, 0.0], [250, 500, 750])}))
    assert plain_learns["verdict"] == C.NOT_REPRODUCED


def test_c6_rule_reads_the_lower_bound():
    def c6(errs):  # errs[(d, depth)] -> error of every seed
        names = [f"d={d} targets=every" for d in (2, 5)]
        runs = []
        for (d, L), e in errs.items():
            n = f"d={d} targets=every"
            runs += [run(n, L, s, e, per_pos=[e]) for s in range(3)]
        return doc(runs, names)

    good = {(2, 1): 0.5, (2, 2): 0.0, (2, 3): 0.0, (5, 1): 0.6, (5, 2): 0.5, (5, 3): 0.0}
    assert C.judge_c6(Res({"retrieval": c6(good)}))["verdict"] == C.REPRODUCED
    below = {**good, (5, 2): 0.0}  # D = 5 (bound 3) learned at depth 2
    assert C.judge_c6(Res({"retrieval": c6(below)}))["verdict"] == C.NOT_REPRODUCED
    none = {k: 0.5 for k in good}
    assert C.judge_c6(Res({"retrieval": c6(none)}))["verdict"] == C.INCONCLUSIVE


def test_missing_or_incomplete_sweeps_are_not_run(tmp_path):
    claim = C.get_claim("c3")
    entry = C.evaluate_claim(tmp_path, claim)
    assert entry["verdict"] == C.NOT_RUN and "missing" in entry["evidence"]
    out = tmp_path / claim.sweeps[0].out_dir("C3")
    out.mkdir(parents=True)
    (out / "results.json").write_text(json.dumps(doc([run("x", 1, 0, 0.5)], ["x"], complete=False)))
    entry = C.evaluate_claim(tmp_path, claim)
    assert entry["verdict"] == C.NOT_RUN and "not complete" in entry["evidence"]
    with pytest.raises(Exception, match="no claim 'C9'"):
        C.get_claim("C9")


def test_every_claim_preset_exists_and_runs_three_seeds():
    for claim in C.CLAIMS:
        for s in claim.sweeps:
            assert s.preset in PRESET_NAMES
            p = get_preset(s.task, s.preset)
            assert p.seeds >= 3, (claim.id, s.label)
            cfg = S.make_config(p)
            assert cfg.seeds >= 3


def test_committed_claims_json_is_what_the_results_give():
    path = ROOT / C.CLAIMS_FILE
    committed = json.loads(path.read_text(encoding="utf-8"))
    fresh = json.loads(json.dumps(C.build_claims(ROOT)))
    assert committed == fresh, "results/crosscheck/claims.json is stale: run `depthcraft claims`"


def test_claims_command_prints_commands(capsys):
    from depthcraft.verify.cli import main

    with pytest.raises(SystemExit) as e:
        main(["claims", "--commands"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "depthcraft train retrieval_slots --preset c5 --out results/crosscheck/c5/retrieval" in out


def test_eval_every_records_a_curve_and_keeps_the_final_weights(tmp_path):
    from depthcraft.verify.crosscheck.presets import Preset

    p = Preset(task="retrieval_slots", name="t", params={"d": 2, "distractors": 0}, mixed=False, depths=(1,),
               heads=1, width=8, steps=6, batch=4, lr=1e-2, warmup=1, eval_every=2, eval_size=8, alignment_size=0,
               seeds=1, control=False)
    cfg = S.make_config(p)
    res = S.run_sweep(cfg, str(tmp_path / "a"), plot=False)
    (r,) = res["runs"]
    assert [c["step"] for c in r["curve"]] == [2, 4, 6]  # every eval_every steps, the last step included
    assert len(r["curve"][0]["error_per_position"]["d=2 distractors=0 symbols=0 targets=every"]) == 7
    plain = S.run_sweep(S.make_config(p, eval_every=0), str(tmp_path / "b"), plot=False)
    # Without eval_every the fast trainer still keeps a light curve (steps/20), without per-position errors.
    assert all("error_per_position" not in c for c in plain["runs"][0].get("curve", []))
    assert plain["runs"][0]["final_loss"] == r["final_loss"]  # training in pieces changes nothing
    assert plain["runs"][0]["error"] == r["error"]


def test_c2_judges_tm_with_the_onehot_embedding_and_reports_the_training_distribution():
    def tm(e1, e2, seen2):
        d = threshold_doc(e1, e2, [0.6, 0.6, 0.6])
        for r in d["runs"]:
            r["error_training_distribution"] = {"m=4": seen2 if r["depth"] == 2 and not r["control"] else 0.4}
        return d

    icqa = threshold_doc([0.6, 0.5, 0.7], [0, 0, 0], [0.6, 0.6, 0.5])
    out = C.judge_c2(Res({"icqa": icqa, "tm_onehot": tm([0.6] * 3, [0.0] * 3, 0.0),
                          "tm_learned": tm([0.6] * 3, [0.5] * 3, 0.0)}))
    assert out["verdict"] == C.REPRODUCED  # the learned embedding's failure is reported, not judged
    assert "learned embedding (reported, not part of the verdict: not reproduced)" in out["evidence"]
    assert out["measured"]["tm_learned"]["training_distribution"]["L2"]["mean"] == 0.0
    bad = C.judge_c2(Res({"icqa": icqa, "tm_onehot": tm([0.6] * 3, [0.5] * 3, 0.0)}))
    assert bad["verdict"] == C.NOT_REPRODUCED  # L=2 fails on held-out tokens but learns the seen ones
    assert "on the training distribution: L=1 0.400 ± 0.000 (n=3); L=2 0.000 ± 0.000 (n=3)" in bad["evidence"]
    unclear = C.judge_c2(Res({"icqa": icqa, "tm_onehot": tm([0.6] * 3, [0.5] * 3, 0.5)}))
    assert unclear["verdict"] == C.INCONCLUSIVE  # nothing learns, even the seen tokens: maybe the budget


def test_claim_figures_are_written_for_judged_claims(tmp_path):
    def entry(cid, out):
        return {"id": cid, "source": "s", "statement": "x", "results": f"results/crosscheck/{cid.lower()}/", **out}

    icqa = threshold_doc([0.6, 0.5, 0.7], [0, 0, 0], [0.6, 0.6, 0.5])
    doc_ = {"claims": [
        entry("C1", C.judge_c1(Res({"khop": _khop_doc({2: 1, 3: 2, 4: 4, 5: 8})}))),
        entry("C2", C.judge_c2(Res({"icqa": icqa, "tm_onehot": icqa}))),
        entry("C5", C.judge_c5(Res({"retrieval": _c5_doc([0.5, 0.6, 0.5], [0.0, 0.01, 0.0], [250, 500, 750])}))),
        {"id": "C3", "verdict": C.NOT_RUN, "measured": {}, "results": "results/crosscheck/c3/"}]}
    written = C.write_figures(tmp_path, doc_)
    assert sorted(pathlib.Path(p).parent.name for p in written) == ["c1", "c2", "c5"]
    assert all(pathlib.Path(p).read_bytes()[:4] == b"\x89PNG" for p in written)


def test_c7_rule_reads_the_construction_depth_and_the_controls():
    # construction depth (graph_connectivity): 4 at n = 8, 5 at n = 16; controls at 3 and 4
    def c7(errs, ctrl=None):  # errs[(n, depth)] -> error of every seed; ctrl[(n, depth)] likewise
        runs = []
        for (n, L), e in errs.items():
            runs += [run(f"n={n}", L, s, e) for s in range(3)]
        for (n, L), e in (ctrl or {}).items():
            runs += [run(f"n={n}", L, s, e, control=True, heads=8, width=128) for s in range(3)]
        return doc(runs, ["n=8", "n=16"])

    good = {(8, 2): 0.4, (8, 3): 0.01, (8, 4): 0.0, (16, 2): 0.5, (16, 3): 0.4, (16, 4): 0.02}
    ctrl = {(8, 3): 0.0, (16, 4): 0.01}  # both at or above L*: not below the threshold
    v = C.judge_c7(Res({"connectivity": c7(good, ctrl)}))
    assert v["verdict"] == C.REPRODUCED
    assert v["measured"]["n=8"]["smallest_depth"] == 3 and v["measured"]["n=16"]["smallest_depth"] == 4
    assert v["measured"]["n=16"]["construction_depth"] == 5
    flat = {**good, (16, 3): 0.0}  # L* = 3 at both n
    assert C.judge_c7(Res({"connectivity": c7(flat, ctrl)}))["verdict"] == C.INCONCLUSIVE
    shrinking = {**good, (8, 3): 0.4, (8, 4): 0.3, (16, 3): 0.0}  # L*(8) = none... then L*(16) = 3
    assert C.judge_c7(Res({"connectivity": c7(shrinking)}))["verdict"] == C.INCONCLUSIVE  # n = 8 not learned
    shrinking[(8, 4)] = 0.0  # L*(8) = 4 > L*(16) = 3
    assert C.judge_c7(Res({"connectivity": c7(shrinking)}))["verdict"] == C.NOT_REPRODUCED
    wide = {(8, 3): 0.0, (16, 3): 0.0}  # n = 16: the depth-3 control learns below L*(16) = 4
    assert C.judge_c7(Res({"connectivity": c7(good, wide)}))["verdict"] == C.NOT_REPRODUCED
    assert C.judge_c7(Res({"connectivity": c7({k: 0.5 for k in good})}))["verdict"] == C.INCONCLUSIVE


def test_c1_table_lays_ours_and_the_controls_beside_the_paper(tmp_path):
    from tools import docgen

    d = _khop_doc({2: 1, 3: 2})
    names = d["settings"]["condition_names"]
    d["runs"] += [run(names, 2, s, [0.0, 0.0, 0.4, 0.4, 0.4, 0.4], control=True, heads=4, width=64)
                  for s in range(3)]
    c1 = dict(C.judge_c1(Res({"khop": d})), id="C1")
    path = tmp_path / docgen.CLAIMS
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"claims": [c1]}), encoding="utf-8")
    text = docgen.render_c1_table(tmp_path)
    lines = text.splitlines()
    assert "k=8 (ours)" in lines[0] and "k=16 (paper)" in lines[0]
    row2 = next(line for line in lines if line.startswith("| 2 |"))
    assert "0.000 ± 0.000" in row2 and "0.140" in row2  # ours at k=1, the paper's L=2, k=2
    control = next(line for line in lines if "control" in line)
    assert control.startswith("| 2 (control") and control.count("0.400 ± 0.000") == 4
