"""README.md and docs/ are what `depthcraft docs` writes from results/ (no stale number can be committed)."""

from __future__ import annotations

import json
import pathlib
import shutil

import pytest

from tools import docgen

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_committed_pages_are_fresh():
    stale = docgen.run(ROOT, check=True)
    assert stale == [], f"run `depthcraft docs` and commit: {[str(p.relative_to(ROOT)) for p in stale]}"


def test_every_block_has_a_renderer_and_every_renderer_is_used():
    names = {m.group("name") for p in docgen.pages(ROOT) for m in docgen.BLOCK.finditer(p.read_text())}
    assert names == set(docgen.RENDERERS)


@pytest.fixture()
def copy(tmp_path):
    """A copy of the pages and results/ to tamper with."""
    for rel in ("README.md", "docs", "results"):
        src = ROOT / rel
        (shutil.copytree if src.is_dir() else shutil.copy)(src, tmp_path / rel)
    return tmp_path


def test_a_changed_number_in_results_makes_a_page_stale(copy):
    path = copy / docgen.VERIFY_ALL
    doc = json.loads(path.read_text())
    doc["results"][0]["structure"]["d_model"] += 1
    path.write_text(json.dumps(doc))
    stale = docgen.run(copy, check=True)
    assert copy / "README.md" in stale
    assert docgen.run(copy) == stale  # regenerating writes exactly those pages
    assert docgen.run(copy, check=True) == []
    assert str(doc["results"][0]["structure"]["d_model"]) in (copy / "README.md").read_text()


def test_a_hand_edited_block_is_stale(copy):
    page = copy / "docs" / "theorems_vs_measurements.md"
    page.write_text(page.read_text().replace("16/16 pass", "15/16 pass", 1))
    assert docgen.run(copy, check=True) == [page]


def test_missing_results_name_the_file(copy):
    (copy / docgen.VERIFY_ALL).unlink()
    with pytest.raises(docgen.DocgenError, match="verify_all.json is missing; regenerate it with"):
        docgen.run(copy, check=True)


def test_links_are_relative_to_the_page():
    text = (ROOT / "docs" / "theorems_vs_measurements.md").read_text()
    assert "](../results/" in text and "](results/" not in text
    assert "](results/verify_all/verify_all.json)" in (ROOT / "README.md").read_text()


def test_runs_and_tables():
    assert docgen.runs([1, 2, 3, 5, 7, 8]) == "1-3, 5, 7-8"
    assert docgen.runs([4]) == "4"
    assert docgen.table(["a", "b"], [[1, "x|y"], [None, 2]]) == "| a | b |\n|---|---|\n| 1 | x\\|y |\n| — | 2 |"


def test_claims_table_is_one_line_per_claim_linking_its_evidence():
    """The README's claims table: one row per claim of claims.json (verdict, the deciding numbers), each
    linking an anchor that docs/crosscheck.md's evidence block defines; the evidence itself is not in the
    table."""
    claims = json.loads((ROOT / docgen.CLAIMS).read_text())["claims"]
    rows = [r for r in docgen.render_claims(ROOT).splitlines() if r.startswith("| C")]
    evidence = docgen.render_claim_evidence(ROOT)
    assert [r.split(" | ")[0][2:] for r in rows] == [c["id"] for c in claims]
    for row, c in zip(rows, claims):
        anchor = docgen.claim_anchor(c["id"])
        assert f"#{anchor})" in row and f'<a id="{anchor}"></a>' in evidence
        assert f"**{c['verdict']}**" in row and c["evidence"] not in row and c["evidence"] in evidence
        if c.get("measured"):
            assert docgen.claim_numbers(c) not in ("—", "see the evidence"), c["id"]
    assert docgen.claim_numbers({"id": "C9", "measured": {"x": 1}}) == "see the evidence"
    assert docgen.claim_numbers({"id": "C1", "measured": {}}) == "—"
