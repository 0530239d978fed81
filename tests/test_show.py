"""Teaching views: ``depthcraft show`` (text summary, attention figure, residual layout, RASP listing)."""

import os
import re

import numpy as np
import pytest
from tracr.rasp import rasp

from depthcraft.constructions.errors import InputError
from depthcraft.verify import cli, views
from depthcraft.verify.tasks.khop import find_table, hop_k

INPUT = "a b a c b a"
TOKENS = [0, 1, 0, 2, 1, 0]


def run_cli(capsys, *args):
    with pytest.raises(SystemExit) as e:
        cli.main(list(args))
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


@pytest.fixture(scope="module")
def doubling():
    data, model = views.for_construction("khop_doubling", {"k": 2, "n": 12, "vocab": 4}, INPUT)
    return data, model


def test_show_cli_writes_figure_and_summary(tmp_path, capsys):
    png = tmp_path / "out.png"
    code, out, err = run_cli(capsys, "show", "khop_doubling", "-p", "k=2", "-p", "n=12", "-p", "vocab=4",
                             "--input", INPUT, "--png", str(png))
    assert code == 0 and err == ""
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image

    img = matplotlib.image.imread(str(png))
    assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 300
    # One block per attention layer: L = ceil(log2 2) + 2 = 3 for k = 2, one head each.
    assert [m for m in re.findall(r"^layer (\d+) head (\d+)", out, re.M)] == [("1", "0"), ("2", "0"), ("3", "0")]
    assert f"attention maps written to {png}" in out
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".depthcraft-")]


def test_where_each_head_attends_follows_the_definition(doubling):
    data, _ = doubling
    names = ["BOS"] + ["abcd"[t] for t in TOKENS]
    heads = [v for v in data.sublayers if isinstance(v, views.HeadView)]
    assert len(heads) == 3
    find = find_table(np.asarray([TOKENS]))[0]  # find(i) for model positions 0..6
    want = {
        1: [i - 1 for i in range(1, 7)],  # previous-token head
        2: [int(find[i]) for i in range(1, 7)],  # last occurrence: find(i) (0 = BOS when there is none)
        3: [int(find[i]) for i in range(1, 7)],  # look-up at the stored pointer find(i)
    }
    for hv in heads:
        got = [int(np.argmax(hv.weights[q])) for q in range(1, 7)]
        assert got == want[hv.layer], hv.title
        assert all(hv.weights[q, k] > 0.99 for q, k in zip(range(1, 7), want[hv.layer]))
    lines = views.attention_summary(data)
    start = lines.index(next(ln for ln in lines if ln.startswith("layer 2")))
    assert lines[start + 1].startswith("  QK: query") and lines[start + 2].startswith("  OV: ")
    for q, k in zip(range(1, 7), want[2]):
        assert f"{q}:{names[q]}→{k}:{names[k]}" in lines[start + 3]


def test_output_and_reference_rows(doubling):
    data, _ = doubling
    expected = hop_k(np.asarray([TOKENS]), 2)[0]
    assert data.reference_text == ["⊥" if v < 0 else "abcd"[v] for v in expected]
    assert data.output_text == data.reference_text and data.exact is True


def test_residual_layout_covers_the_stream(doubling):
    data, model = doubling
    dims = [d for _, lo, hi, _, _ in data.layout for d in range(lo, hi + 1)]
    assert dims == list(range(len(model.residual_labels)))
    by_name = {name: (vals, who) for name, _, _, vals, who in data.layout}
    assert by_name["tokens"] == (["0", "1", "2", "3", "BOS", "PAD"], "token embedding")
    assert by_name["indices"] == ([str(i) for i in range(12)], "position embedding")
    assert by_name["prev_token_tokens"][1] == "L1 H0"
    assert by_name["find1"] == ([str(i) for i in range(13)], "L2 H0")  # a pointer: one-hot over positions 0..12
    assert by_name["tok_R1"][1] == "L3 H0"


def test_program_listing_names_match_the_residual_stream(doubling):
    data, _ = doubling
    listed = {line.split(" = ")[0] for line in data.program}
    layout = {name for name, *_ in data.layout} - {"one"}
    assert layout <= listed
    assert any("last_occurrence(query=tokens, key=prev_token_tokens).read(POSITION)" in ln for ln in data.program)


def test_user_program_view():
    hist = rasp.SelectorWidth(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.EQ)).named("hist")
    data, _ = views.for_program(hist, list("abca"), vocab="abc", max_seq_len=6)
    assert data.output_text == ["2", "1", "1", "2"] and data.exact is True
    heads = [v for v in data.sublayers if isinstance(v, views.HeadView)]
    # SelectorWidth's head attends uniformly to BOS and every selected key: row 1 (a) -> BOS, 1, 4.
    np.testing.assert_allclose(heads[0].weights[1], [1 / 3, 1 / 3, 0, 0, 1 / 3], atol=1e-5)
    text = views.render_text(data)
    assert "hist = SelectorWidth(Select(tokens, tokens, EQ))" in text
    with pytest.raises(InputError, match="token 'z' at position 2"):
        views.for_program(hist, ["a", "z"], vocab="abc", max_seq_len=6)


# ---------------------------------------------------------------------------------------------
# The attention figure on a 16:9 slide, masked cells drawn distinctly
# ---------------------------------------------------------------------------------------------

K8_INPUT = "a b c a b a c b a b c a c b a b a c a b c b a b"


@pytest.fixture(scope="module")
def k8():
    data, _ = views.for_construction("khop_doubling", {"k": 8, "n": 24, "vocab": 3}, K8_INPUT)
    return data


def test_slide_grid_gives_the_largest_square_panels():
    from depthcraft.verify.views.figures import slide_grid

    # 16 x 9 in less the title and colour-bar room (14.4 x 7.9 in): the side is min(14.4 / cols, 7.9 / rows).
    assert [slide_grid(p) for p in (1, 2, 3, 4, 5, 6)] == [(1, 1), (1, 2), (1, 3), (2, 2), (2, 3), (2, 3)]
    with pytest.raises(ValueError, match="panels must be >= 1, got 0"):
        slide_grid(0)


def test_k8_figure_is_a_16_9_slide_with_every_head(k8, tmp_path):
    import matplotlib.image

    from depthcraft.verify.views.figures import attention_figure, build_figure

    fig = build_figure(k8)
    assert tuple(fig.get_size_inches()) == (16.0, 9.0)
    images = [ax.images[0] for ax in fig.axes if ax.images]
    assert len(images) == 5  # L = ceil(log2 8) + 2 layers, one head each
    assert [ax.get_title() for ax in fig.axes if ax.images][2] == "L3 H0: find2, tok_R1"
    png = tmp_path / "k8.png"
    attention_figure(k8, str(png))
    h, w = matplotlib.image.imread(str(png)).shape[:2]
    assert (w, h) == (1760, 990) and w * 9 == h * 16


def test_masked_cells_use_the_mask_style(k8):
    import dataclasses

    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from depthcraft.verify.views.figures import MASK_COLOR, MASK_HATCH, build_figure, causal_mask

    t = len(k8.tokens_text)
    assert k8.causal and t == 25
    fig = build_figure(k8)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    pixels = np.asarray(canvas.buffer_rgba())[..., :3] / 255.0
    height = pixels.shape[0]
    for ax in (a for a in fig.axes if a.images):
        image = ax.images[0]
        assert np.array_equal(np.ma.getmaskarray(image.get_array()), causal_mask(t))
        behind = [p for p in ax.patches if p.get_hatch() == MASK_HATCH]
        assert len(behind) == 1 and tuple(behind[0].get_facecolor()) == MASK_COLOR

        def pixel(q, k):
            x, y = ax.transData.transform((k, q))
            return pixels[int(round(height - y)), int(round(x))]

        weights = np.asarray(image.get_array().data)
        # A masked cell (query 1, key 20) is grey (fill or hatch line); an unmasked zero (query 24,
        # key 22) is the colour map's 0, a blue-tinted white.
        assert weights[24, 22] < 1e-6
        masked, zero = pixel(1, 20), pixel(24, 22)
        assert np.ptp(masked) < 0.03 and masked.max() < 0.85
        assert np.allclose(zero, image.cmap(0.0)[:3], atol=0.02) and zero[2] - zero[0] > 0.02
    # A bidirectional model masks nothing.
    fig = build_figure(dataclasses.replace(k8, causal=False))
    assert not any(np.ma.getmaskarray(a.images[0].get_array()).any() for a in fig.axes if a.images)
    assert not fig.legends
