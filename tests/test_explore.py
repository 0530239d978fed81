"""``depthcraft explore``: the page's data and the HTML file (no browser; see test_explore_browser.py)."""

import json
import re

import numpy as np
import pytest

from depthcraft.verify.cli import main
from depthcraft.verify.views import data as views_data
from depthcraft.verify.views.explore import explore_html, pack, read_page, unpack

K4 = dict(k="4", n="12", vocab="3")
K4_INPUT = "a b c a b c a a b c c a"


def run_cli(args, capsys):
    with pytest.raises(SystemExit) as e:
        main(args)
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


@pytest.fixture(scope="module")
def k4():
    return views_data.explore_construction("khop_doubling", K4, K4_INPUT)


def _figures(page):
    """{div id: (traces, layout)} of every plotly figure the page draws (its packed figures blob)."""
    _, _, figures = read_page(page)
    return {k: (f["data"], f["layout"]) for k, f in figures.items()}


def _arr(x):
    """A figure array from its JSON: a list, or plotly's typed array ``{"dtype", "bdata"[, "shape"]}``."""
    if isinstance(x, dict):
        import base64

        a = np.frombuffer(base64.b64decode(x["bdata"]), dtype=np.dtype(x["dtype"]))
        return a.reshape([int(n) for n in str(x["shape"]).split(",")]) if "shape" in x else a
    return np.array([[np.nan if v is None else v for v in row] for row in x], float)


def test_data_has_one_stage_per_sublayer_and_the_program_by_stage(k4):
    st = k4.stream
    assert st.stages[0] == "embeddings" and len(st.stages) == st.values.shape[0] == len(k4.stage_notes)
    assert st.values.shape[1] == 13  # BOS + 12 tokens
    # khop_doubling k=4: 1 + 1 + ceil(log2 4) attention layers of one head each (Thm 4.2), no MLP
    assert st.stages[1:] == ["attn 1", "attn 2", "attn 3", "attn 4"]
    assert [len(h) for h in k4.head_names] == [1, 1, 1, 1]
    assert k4.head_names[0][0].startswith("L1 H0: prev_token")
    lines = {s: [x.split(" = ")[0] for x in v] for s, v in k4.program_stages.items()}
    assert sorted(lines[0]) == ["indices", "tokens"] and lines[1] == ["prev_token_tokens"]
    assert set(lines[2]) == {"find1", "tok_find1"}
    assert sum(len(v) for v in k4.program_stages.values()) == len(k4.show.program)
    assert k4.show.exact and k4.kind == "construction"


def test_groups_cover_every_direction_once(k4):
    d = len(k4.stream.labels)
    covered = [r for _, a, b, _ in k4.groups for r in range(a, b + 1)]
    assert sorted(covered) == list(range(d))


def test_page_is_one_file_with_plotly_inlined_and_no_network_reference(k4):
    from plotly.offline import get_plotlyjs

    page = explore_html(k4)
    own, library, _ = read_page(page)
    assert library == get_plotlyjs()  # the library itself is in the page (compressed), once
    assert page.count(b'id="plotly-js"') == 1
    # outside the library's own code (whose strings hold attribution links for map tiles, never
    # loaded here), nothing refers to another server
    assert "<script src" not in own and "<link" not in own and "@import" not in own
    assert not re.search(r'(src|href)\s*=\s*["\']?(https?:)?//', own)
    assert not re.search(r"https?://", own)
    assert "Plotly.newPlot" in own and "DecompressionStream('gzip')" in own
    figs = _figures(page)
    heads = [k for k in figs if k.startswith("head-")]
    assert heads == ["head-0-0", "head-1-0", "head-2-0", "head-3-0"]
    assert "residual" in figs and "logits" in figs


def test_attention_figure_values_and_masked_keys(k4):
    figs = _figures(explore_html(k4))
    traces, _ = figs["head-0-0"]
    weights = k4.stream.attention[0][0]
    z = _arr(traces[0]["z"])
    t = weights.shape[0]
    future = np.triu(np.ones((t, t), bool), 1)
    assert np.isnan(z[future]).all()  # causally masked keys are not drawn as weights...
    np.testing.assert_allclose(z[~future], weights[~future], atol=1e-6)
    grey = _arr(traces[1]["z"])
    assert (grey[future] == 1.0).all() and np.isnan(grey[~future]).all()  # ...but as the grey trace
    assert traces[1]["name"] == "masked"
    # prev_token: query q attends key q - 1 (q >= 1): the hover names that key
    custom = traces[0]["customdata"]
    assert custom[5][0][1] == "4:a" and custom[1][0][1] == "0:BOS"


def test_residual_figure_steps_and_written_rows(k4):
    page = explore_html(k4)
    traces, layout = _figures(page)["residual"]
    s = len(k4.stream.stages)
    assert len(traces) == 2 * s and [t["visible"] for t in traces[:2]] == [True, True]
    assert not any(t["visible"] for t in traces[2:])
    assert [step["label"] for step in layout["sliders"][0]["steps"]] == k4.stream.stages
    # stage 1 (prev_token head) wrote exactly the rows of prev_token_tokens: one outlined run per panel
    shapes = json.loads(re.search(r"var V = .*?, S = (\[.*?\]), T = ", read_page(page)[0], re.S).group(1))
    boxes = [b for b in shapes[1] if b["type"] == "rect"]
    (name, first, last, _), = [g for g in k4.groups if g[0] == "prev_token_tokens"]
    assert [(b["y0"], b["y1"]) for b in boxes] == [(first - 0.5, last + 0.5)] * 2
    after = _arr(traces[2]["z"])
    np.testing.assert_allclose(after, k4.stream.values[1].T, atol=1e-6)


def test_cli_writes_the_page(tmp_path, capsys):
    out = tmp_path / "k4.html"
    code, stdout, err = run_cli(["explore", "khop_doubling", "-p", "k=4", "-p", "n=12", "-p", "vocab=3",
                                 "--input", K4_INPUT, "-o", str(out)], capsys)
    assert code == 0 and err == "" and "explore page written to" in stdout
    assert out.read_bytes().startswith(b"<!DOCTYPE html>")
    assert out.stat().st_size < 2_000_000  # the library and the figures are compressed in the page
    assert [p.name for p in tmp_path.iterdir()] == ["k4.html"]  # one file, no temporary left


def test_cli_saved_model(tmp_path, capsys):
    model_path = tmp_path / "k2.safetensors"
    code, _, _ = run_cli(["save", "khop_doubling", "-p", "k=2", "-p", "n=8", "-p", "vocab=3", "-o",
                          str(model_path)], capsys)
    assert code == 0
    out = tmp_path / "k2.html"
    code, _, err = run_cli(["explore", str(model_path), "--input", "a b a c", "-o", str(out)], capsys)
    assert code == 0, err
    figs = _figures(out.read_bytes())
    assert sorted(k for k in figs if k.startswith("head-")) == ["head-0-0", "head-1-0", "head-2-0"]


@pytest.mark.parametrize("args, message", [
    (["explore", "nope", "--input", "a", "-o", "x.html"], "nope"),
    (["explore", "khop_doubling", "-p", "k=2", "--input", "a z", "-o", "x.html"], "'z'"),
    (["explore", "khop_doubling", "-p", "k=2", "--input", "a b", "-o", "x.html", "--construction", "khop_floor"],
     "--construction"),
    (["explore", "khop_doubling", "-p", "k=2", "--input", "a b", "-o", "/nonexistent-dir/x.html"], "nonexistent"),
    (["explore", "khop_doubling", "-p", "k=2", "--input", "a b"], "--output"),
])
def test_bad_input_one_line_exit_2(args, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(args, capsys)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and message in err, err
    assert not (tmp_path / "x.html").exists()


def test_trained_checkpoint(tmp_path, capsys, tiny_training):
    from depthcraft.verify.crosscheck.train import load_trained, train_loop

    data, mc, tc, _ = tiny_training  # k-hop k = 1, 2 at n = 6; 2 layers of 2 heads, width 16; 12 steps
    ckpt = str(tmp_path / "run")
    outcome = train_loop(data, mc, tc, checkpoint_dir=ckpt)
    back = load_trained(ckpt)
    assert back.step == 12
    for a, b in zip(*(np.asarray(x) for x in (outcome.params["embed"]["token"], back.params["embed"]["token"]))):
        assert np.array_equal(a, b)
    page = views_data.explore_trained(ckpt, {"k": "2"}, "a b a c b a", None)
    assert page.kind == "trained" and page.stream.stages == ["embeddings", "attn 1", "MLP 1", "attn 2", "MLP 2"]
    al = page.alignment
    assert al.construction.startswith("khop_doubling") and al.trained_heads == ["L1 H0", "L1 H1", "L2 H0", "L2 H1"]
    # khop_doubling at k=2: 1 + 1 + ceil(log2 2) = 3 one-head layers
    assert al.construction_heads == ["L1 H0", "L2 H0", "L3 H0"] and al.matrix.shape == (4, 3)
    assert np.all((al.matrix >= 0) & (al.matrix <= 1 + 1e-9))
    # each entry is the cosine of the two maps over the token query rows (BOS row left out)
    a = np.float64(page.stream.attention[0][1][1:])
    b = np.float64(al.construction_maps[2][1:])
    assert al.matrix[1, 2] == pytest.approx(float((a * b).sum() / np.linalg.norm(a) / np.linalg.norm(b)), abs=1e-9)
    assert len(page.show.output_text) == len(page.show.reference_text) == 6
    out = tmp_path / "trained.html"
    code, _, err = run_cli(["explore", ckpt, "-p", "k=2", "--input", "a b a c b a", "-o", str(out)], capsys)
    assert code == 0, err
    figs = _figures(out.read_bytes())
    assert {"alignment", "residual", "logits", "construction-0"} <= set(figs)
    assert sorted(k for k in figs if k.startswith("head-")) == ["head-0-0", "head-0-1", "head-1-0", "head-1-1"]
    code, _, err = run_cli(["explore", ckpt, "--input", "a b", "-o", str(out)], capsys)
    assert code == 2 and "matches 2 of the model's training conditions" in err


def test_committed_screenshot_is_a_small_png():
    """docs/img/explore_k8.png (made by test_explore_browser.py with DEPTHCRAFT_SCREENSHOT=1) is a small PNG."""
    import os
    import struct

    path = os.path.join(os.path.dirname(__file__), "..", "docs", "img", "explore_k8.png")
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", head[16:24])
    assert width >= 800 and height >= 600 and os.path.getsize(path) < 400_000


def test_packed_blobs_round_trip_and_hold_no_byte_the_html_parser_changes():
    data = bytes(range(256)) * 40 + b"</script><!-- \r\n \x00"
    blob = pack(data)
    assert unpack(blob) == data
    # no NUL, CR or "<" (the parser replaces NUL, folds CR and ends the script at "</script") stays raw
    assert b"\x00" not in blob and b"\r" not in blob and b"<" not in blob


def test_the_residual_rows_are_grouped_by_sop(k4):
    traces, layout = _figures(explore_html(k4))["residual"]
    groups, values = traces[0]["y"]
    d = len(k4.stream.labels)
    assert len(groups) == len(values) == d and layout["yaxis"]["type"] == "multicategory"
    for name, first, last, _ in k4.groups:  # every row of a group carries the group's name
        assert set(groups[first:last + 1]) == {name}
    label = k4.stream.labels[-1]
    assert values[-1] == f"{label.split(':', 1)[1] if ':' in label else label} ({d - 1})"
