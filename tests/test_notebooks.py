"""The lecture notebooks (docs/notebooks/*.py, jupytext percent scripts) execute as notebooks and show
the right numbers.

Each script is read by jupytext into a notebook and run cell by cell by nbclient in a fresh
Python kernel (the venv's ipykernel), from docs/notebooks/; a cell that raises fails the test.
The printed numbers are then compared with values from the definitions (find^m from the task's
reference, the theorems' layer counts).
"""

import pathlib

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "docs" / "notebooks"


def execute(name):
    """Run ``docs/notebooks/<name>.py`` as a notebook; returns the text of every cell's outputs, in order."""
    jupytext = pytest.importorskip("jupytext")
    nbclient = pytest.importorskip("nbclient")
    nb = jupytext.read(NOTEBOOKS / f"{name}.py")
    client = nbclient.NotebookClient(nb, timeout=300, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOKS)}})
    client.execute()
    texts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            texts.append(out.get("text", "") + "".join(str(v) for k, v in out.get("data", {}).items()
                                                       if k == "text/plain"))
    return "\n".join(texts), nb


def test_every_notebook_is_tested():
    assert sorted(p.stem for p in NOTEBOOKS.glob("*.py")) == ["chen_zou", "khop_log_depth"]


def test_khop_log_depth_runs_and_shows_the_doubling():
    from depthcraft.verify.tasks.khop import find_k

    text, nb = execute("khop_log_depth")
    x = np.array([["abc".index(c) for c in "a b c a b a c b a b c a c b a b a c a b c b a b".split()]])
    f1, f2, f4 = (int(find_k(x, m)[0, 24]) for m in (1, 2, 4))
    assert "attention layers L = 5 (bound ceil(log2 8) + 2 = 5), heads per layer H = 1" in text
    # The pointers appear one layer at a time: find1 after layer 2, find2 after 3, find4 after 4.
    assert "after attn 1: find1 = None, find2 = None, find4 = None" in text
    assert f"after attn 2: find1 = {f1}, find2 = None, find4 = None" in text
    assert f"after attn 3: find1 = {f1}, find2 = {f2}, find4 = None" in text
    assert f"after attn 4: find1 = {f1}, find2 = {f2}, find4 = {f4}" in text
    assert "attn 3 wrote at position 24: find2, tok_R1" in text  # R1 has no directions: stored as find2
    assert "stored once by the compile-time dedupe: [['R1', 'find2']]" in text
    import re

    # every non-⊥ answer of hop_8 needs all five layers: without any one, exactly the all-⊥ inputs stay exact
    all_bot = re.search(r"inputs whose every answer is ⊥: ([\d.]+)%", text).group(1)
    rows = re.findall(r"without layer (\d): exact on ([\d.]+)% of the inputs; right at ([\d.]+)% of the ⊥ "
                      r"positions and ([\d.]+)% of the others", text)
    assert [int(r[0]) for r in rows] == [1, 2, 3, 4, 5]
    assert all(r[1] == all_bot and float(r[1]) < 100 for r in rows)  # no layer is redundant
    assert all(r[2] == "100.0" and r[3] == "0.0" for r in rows)
    # The trained sweep and the precision study are read from results/ and their figure is shown.
    assert "k=4: construction depth 4" in text and "float32   (23 mantissa bits)" in text
    # Two figures: the attention maps (a matplotlib Figure) and the committed depth-sweep PNG.
    images = [o for c in nb.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert len(images) == 2


def test_chen_zou_runs_every_task_at_the_papers_depth():
    text, _ = execute("chen_zou")
    for name, layers in (("sc_memorize", 1), ("icqa_copy_match", 2), ("tm_parse_map", 2),
                         ("ictm_parse_copy_match", 3)):
        assert f"{name}: L = {layers} (bound {layers})" in text
    assert text.count(" wrong") == 4 and text.count(", 0 wrong") == 4
    # ICQA's mechanism: layer 2 attends from the query to the answer of the matching question, weight 1.
    assert "layer 2 head 0 writes answer; from position 17 it attends" in text
