"""The cross-check figures' convention (verify/crosscheck/report.py): which depth is called the
paper's and which the construction's, the setting line, and both figures written from a
committed results.json without training."""

import json
import pathlib
import shutil

from depthcraft.verify.crosscheck import report

ROOT = pathlib.Path(__file__).resolve().parents[1]
PNG = b"\x89PNG\r\n\x1a\n"


def test_a_lower_bound_is_the_papers_lower_bound_never_the_constructions():
    entry = {"bound": 2, "bound_kind": "lower", "bound_formula": "ceil(log_3(2D)) (lower bound)",
             "bound_source": "construction", "construction_depth": 3, "claim_depth": None, "claim_text": None}
    got = report.paper_depth({"task": "retrieval", "preset": "cpu"}, entry)
    assert got["depth"] == 2 and got["kind"] == "lower"
    assert got["label"].startswith("paper's lower bound L=2") and "construction" not in got["label"]


def test_the_presets_claim_comes_first_and_is_recomputed_for_older_results():
    claimed = {"bound": 2, "bound_kind": "upper", "claim_depth": 2, "claim_text": "2 (copy, then match)"}
    got = report.paper_depth({}, claimed)
    assert got == {"depth": 2, "kind": "claim", "label": "paper's claim L=2: 2 (copy, then match)"}
    # written before claim_depth was recorded: the c2 preset of icqa claims 2 layers
    older = {"bound": 2, "bound_kind": "upper", "params": {"m": 4, "questions": 8, "answers": 8}}
    got = report.paper_depth({"task": "icqa", "preset": "c2", "settings": {"preset": "c2"}}, older)
    assert got["depth"] == 2 and got["kind"] == "claim"
    # a preset without a claim: the theorem's bound the construction cites
    khop = {"bound": 3, "bound_kind": "upper", "bound_formula": "ceil(log2 k)+2", "params": {"k": 2}}
    got = report.paper_depth({"task": "khop", "preset": "cpu", "settings": {"preset": "cpu"}}, khop)
    assert got == {"depth": 3, "kind": "upper", "label": "paper's bound (depth that suffices) L=3: ceil(log2 k)+2"}


def test_figures_are_redrawn_from_a_committed_results_json(tmp_path):
    src = ROOT / "results" / "crosscheck" / "khop_cpu" / "results.json"
    shutil.copy(src, tmp_path / "results.json")
    results = json.loads(src.read_text())
    text = report.setting_text(results)
    assert text.startswith("khop (cpu) · N=32, |Σ|=4 · steps 4000 · batch 32")
    assert f"seeds {results['settings']['seeds']}" in text
    paths = report.write_figures(str(tmp_path), results)
    assert [pathlib.Path(p).name for p in paths] == ["error_by_depth.png", "loss_curves.png"]
    assert all(pathlib.Path(p).read_bytes()[:8] == PNG for p in paths)
