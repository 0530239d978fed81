"""The explore page: one self-contained HTML file showing a model on one input (plotly, inlined).

:func:`explore_html` turns an :class:`~depthcraft.verify.views.data.ExploreData` into one HTML
page that needs no server and no network: plotly's JavaScript is embedded in the page
(``plotly.offline.get_plotlyjs``), every figure's data is in the page. It shows

* the title, the input, the decoded output beside the reference (wrong outputs marked);
* the RASP program laid out by the stage (sublayer) that writes each SOp;
* every head's attention map (one plotly figure per head; hover a cell: query, key, weight,
  score and the key the query attends most; keys the causal mask hides are grey, not white);
* the residual stream after each stage as named directions x positions, with the directions
  grouped by SOp or pointer, beside what that stage wrote; the rows it wrote are outlined;
* the read-out scores (logits) per position;
* for a trained model, the alignment of its heads with the construction's heads and the
  construction's maps;
* a control (slider, previous / next buttons, arrow keys) stepping through the stages: it
  switches the residual figure and highlights the stage's program lines and heads.

Element ids the browser test relies on: ``residual`` (the residual figure), ``stage-prev``,
``stage-next``, ``stage-note``, and ``class="head-map"`` with ``data-stage`` on every head's figure.
"""

from __future__ import annotations

import html
import json
from typing import List, Sequence

import numpy as np

from depthcraft.verify.views.data import ExploreData
from depthcraft.verify.views.listing import sop_name

#: Colour of keys hidden by the causal mask in the attention maps.
MASKED = "#9e9e9e"
#: Outline colour of the residual rows the current stage wrote.
WRITTEN = "#e65100"


def _labels(tokens_text: Sequence[str]) -> List[str]:
    return [f"{i}:{t}" for i, t in enumerate(tokens_text)]


def _head_figure(weights: np.ndarray, scores, labels: List[str], causal: bool, title: str):
    """One head's [T, T] map: weights (masked keys NaN, drawn grey by a second trace), hover with scores."""
    import plotly.graph_objects as go

    t = weights.shape[0]
    masked = np.triu(np.ones((t, t), bool), 1) if causal else np.zeros((t, t), bool)
    z = np.where(masked, np.nan, weights.astype(np.float64))
    top = np.where(masked, -np.inf, weights).argmax(-1)
    custom = np.empty((t, t, 3), dtype=object)
    for q in range(t):
        custom[q, :, 0] = "-" if scores is None else np.round(scores[q].astype(np.float64), 3)
        custom[q, :, 1] = labels[top[q]]
        custom[q, :, 2] = round(float(weights[q, top[q]]), 3)
    fig = go.Figure()
    fig.add_trace(go.Heatmap(z=z, x=labels, y=labels, customdata=custom, zmin=0.0, zmax=1.0, colorscale="Blues",
                             colorbar=dict(title="weight", thickness=10, len=0.8), name="attention",
                             hovertemplate="query %{y} attends key %{customdata[1]} (weight %{customdata[2]})"
                                           "<br>this key %{x}: weight %{z:.3f}, score %{customdata[0]}"
                                           "<extra></extra>", hoverongaps=False))
    if masked.any():
        fig.add_trace(go.Heatmap(z=np.where(masked, 1.0, np.nan), x=labels, y=labels, showscale=False,
                                 colorscale=[[0, MASKED], [1, MASKED]], hoverongaps=False, name="masked",
                                 hovertemplate="query %{y}, key %{x}: masked (the key comes after the query)"
                                               "<extra></extra>"))
    side = min(max(240, 9 * t + 90), 520)
    fig.update_layout(title=dict(text=html.escape(title), font=dict(size=12)), width=side + 60, height=side,
                      margin=dict(l=60, r=10, t=40, b=60), plot_bgcolor="white",
                      xaxis=dict(title="key", tickfont=dict(size=8), constrain="domain"),
                      yaxis=dict(title="query", tickfont=dict(size=8), autorange="reversed", scaleanchor="x"))
    return fig


def _runs(rows: np.ndarray) -> List[tuple]:
    """Sorted row indices -> [(first, last)] runs of consecutive rows."""
    runs: List[tuple] = []
    for r in rows.tolist():
        if runs and runs[-1][1] == r - 1:
            runs[-1] = (runs[-1][0], r)
        else:
            runs.append((r, r))
    return runs


def _residual_figure(data: ExploreData):
    """The residual stream [D, T] after each stage and what the stage wrote; one pair of traces per stage."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    st = data.stream
    s_count, t, d = st.values.shape
    labels = _labels(data.show.tokens_text)
    group_of, group_name = [""] * d, [""] * d
    for name, first, last, who in data.groups:
        for r in range(first, last + 1):
            group_of[r] = f"{name} (written by {who})"
            group_name[r] = name
    # two-level row labels: the SOp or pointer (drawn once per group), then the value the row stands for
    values = [lab.split(":", 1)[1] if ":" in lab else sop_name(lab) for lab in st.labels]
    rows = [group_name, [f"{v} ({i})" for i, v in enumerate(values)]]
    fig = make_subplots(rows=1, cols=2, shared_yaxes=True, horizontal_spacing=0.03,
                        subplot_titles=("residual stream after the stage", "what the stage wrote"))
    bound = float(np.abs(st.values).max()) or 1.0
    hover_group = np.array([[g] * t for g in group_of], dtype=object)
    steps_visible, steps_shapes, titles = [], [], []
    seps = [dict(type="line", xref="paper", x0=0, x1=1, yref="y", y0=first - 0.5, y1=first - 0.5,
                 line=dict(color="#555", width=0.6)) for _, first, _, _ in data.groups[1:]]
    for s in range(s_count):
        after = st.values[s].T  # [D, T]
        wrote = (st.values[s] - st.values[s - 1]).T if s else st.values[0].T
        fig.add_trace(go.Heatmap(z=after, x=labels, y=rows, zmid=0.0, zmin=-bound, zmax=bound, colorscale="RdBu_r",
                                 customdata=hover_group, visible=s == 0, showscale=True,
                                 colorbar=dict(title="value", thickness=10, len=0.5),
                                 hovertemplate="%{y} at %{x}: %{z:.3f}<br>%{customdata}<extra></extra>"),
                      row=1, col=1)
        fig.add_trace(go.Heatmap(z=wrote, x=labels, y=rows, zmid=0.0, zmin=-bound, zmax=bound, colorscale="RdBu_r",
                                 customdata=hover_group, visible=s == 0, showscale=False,
                                 hovertemplate="%{y} at %{x}: wrote %{z:.3f}<br>%{customdata}<extra></extra>"),
                      row=1, col=2)
        changed = np.flatnonzero(np.abs(wrote).max(1) > 0)
        boxes = [dict(type="rect", xref="x domain", x0=0, x1=1, yref="y", y0=a - 0.5, y1=b + 0.5,
                      line=dict(color=WRITTEN, width=2)) for a, b in _runs(changed)]
        boxes += [dict(b, xref="x2 domain") for b in boxes]
        steps_shapes.append(seps + boxes)
        vis = [False] * (2 * s_count)
        vis[2 * s], vis[2 * s + 1] = True, True
        steps_visible.append(vis)
        titles.append(f"stage {s}: {st.stages[s]}")
    height = max(420, 13 * d + 170)
    fig.update_layout(height=height, margin=dict(l=10, r=10, t=60, b=110), shapes=steps_shapes[0],
                      title=dict(text=html.escape(titles[0]), font=dict(size=13)), plot_bgcolor="white",
                      sliders=[dict(active=0, currentvalue=dict(prefix="stage: "), pad=dict(t=50),
                                    steps=[dict(label=name, method="skip", args=[]) for name in st.stages])])
    fig.update_yaxes(autorange="reversed", tickfont=dict(size=10), type="multicategory", dividercolor="#555")
    fig.update_xaxes(tickfont=dict(size=8), side="bottom")
    return fig, steps_visible, steps_shapes, titles


def _logits_figure(data: ExploreData):
    import plotly.graph_objects as go

    logits = np.asarray(data.stream.logits, np.float64)
    labels = _labels(data.show.tokens_text)
    fig = go.Figure(go.Heatmap(z=logits.T, x=labels, y=data.classes, colorscale="Viridis",
                               hovertemplate="position %{x}, class %{y}: %{z:.3f}<extra></extra>",
                               colorbar=dict(title="score", thickness=10)))
    fig.update_layout(title=dict(text="read-out scores (logits) per position", font=dict(size=12)),
                      height=max(220, 22 * len(data.classes) + 140), margin=dict(l=60, r=10, t=40, b=60),
                      xaxis=dict(tickfont=dict(size=8)))
    return fig


def _alignment_figure(data: ExploreData):
    import plotly.graph_objects as go

    a = data.alignment
    fig = go.Figure(go.Heatmap(z=a.matrix, x=a.construction_heads, y=a.trained_heads, zmin=0.0, zmax=1.0,
                               colorscale="Greens", texttemplate="%{z:.2f}",
                               hovertemplate="trained %{y} vs construction %{x}: %{z:.3f}<extra></extra>",
                               colorbar=dict(title="alignment", thickness=10)))
    fig.update_layout(title=dict(text=html.escape(f"alignment with {a.construction} on this input "
                                                  "(cosine of the maps, BOS row left out)"), font=dict(size=12)),
                      height=max(260, 26 * len(a.trained_heads) + 140), margin=dict(l=70, r=10, t=50, b=60),
                      yaxis=dict(autorange="reversed"))
    return fig


def _div(fig, div_id: str, figures: dict) -> str:
    """The empty ``<div>`` a figure is drawn into; its JSON goes into ``figures`` (drawn by the page's loader)."""
    import plotly.io as pio

    figures[div_id] = json.loads(pio.to_json(fig, validate=False))
    return f'<div id="{div_id}" class="plotly-graph-div"></div>'


#: Bytes the packed blobs escape (NUL, the escape byte, CR and ``<``: the HTML parser would change or act on
#: them inside a script element), as the escape byte 0x01 followed by the byte + 0x40.
_ESCAPED = (0x00, 0x01, 0x0D, 0x3C)
#: windows-1252's code points for the bytes 0x80-0x9F that it does not map to themselves (WHATWG encoding).
_CP1252 = {0x80: 0x20AC, 0x82: 0x201A, 0x83: 0x0192, 0x84: 0x201E, 0x85: 0x2026, 0x86: 0x2020, 0x87: 0x2021,
           0x88: 0x02C6, 0x89: 0x2030, 0x8A: 0x0160, 0x8B: 0x2039, 0x8C: 0x0152, 0x8E: 0x017D, 0x91: 0x2018,
           0x92: 0x2019, 0x93: 0x201C, 0x94: 0x201D, 0x95: 0x2022, 0x96: 0x2013, 0x97: 0x2014, 0x98: 0x02DC,
           0x99: 0x2122, 0x9A: 0x0161, 0x9B: 0x203A, 0x9C: 0x0153, 0x9E: 0x017E, 0x9F: 0x0178}


def pack(data: bytes) -> bytes:
    """``data`` gzip-compressed and escaped to sit, byte for byte, in a windows-1252 page's script element.

    The page's loader (:data:`_LOADER`) reads the element's text, maps each character back to its
    byte (windows-1252's table), undoes the escapes and decompresses with the browser's own
    ``DecompressionStream("gzip")``. 1.5 % larger than the compressed bytes, where base64 adds 33 %.
    """
    import gzip

    out = bytearray()
    for b in gzip.compress(data, 9, mtime=0):
        if b in _ESCAPED:
            out += bytes((0x01, b + 0x40))
        else:
            out.append(b)
    return bytes(out)


def unpack(blob: bytes) -> bytes:
    """The inverse of :func:`pack`: the original bytes."""
    import gzip

    out, i = bytearray(), 0
    while i < len(blob):
        if blob[i] == 0x01:
            out.append(blob[i + 1] - 0x40)
            i += 2
        else:
            out.append(blob[i])
            i += 1
    return gzip.decompress(bytes(out))


def read_page(page: bytes):
    """A page written by :func:`explore_html`, taken apart: ``(html, library, figures)``.

    ``html`` is the page's markup (windows-1252 decoded) with the two blobs left out, ``library`` the
    plotly JavaScript it carries, ``figures`` {div id: plotly figure JSON}.
    """
    import re

    blobs = {}
    for m in re.finditer(rb'<script type="application/x-depthcraft-gzip" id="([a-z-]+)">(.*?)</script>', page, re.S):
        blobs[m.group(1).decode()] = unpack(m.group(2))
    rest = re.sub(rb'(<script type="application/x-depthcraft-gzip" id="[a-z-]+">).*?(</script>)', rb"\1\2", page,
                  flags=re.S)
    return rest.decode("cp1252"), blobs["plotly-js"].decode("utf-8"), json.loads(blobs["figures"])


_LOADER = """
(async function () {
  var W = {};
  %(cp1252)s.forEach(function (p) { W[p[1]] = p[0]; });
  async function unpack(id) {
    var text = document.getElementById(id).textContent, bytes = new Uint8Array(text.length), n = 0;
    for (var i = 0; i < text.length; i++) {
      var c = text.charCodeAt(i);
      if (c > 255) c = W[c];
      if (c === 1) { c = text.charCodeAt(++i) - 64; }
      bytes[n++] = c;
    }
    var stream = new Blob([bytes.subarray(0, n)]).stream().pipeThrough(new DecompressionStream('gzip'));
    return await new Response(stream).text();
  }
  var library = document.createElement('script');
  library.textContent = await unpack('plotly-js');
  document.head.appendChild(library);
  var figures = JSON.parse(await unpack('figures'));
  for (var id in figures) {
    await Plotly.newPlot(id, figures[id].data, figures[id].layout, {displaylogo: false, responsive: false});
  }
  document.getElementById('loading').remove();
  depthcraftControls();
})();
"""


def _outcome_table(data: ExploreData) -> str:
    show = data.show
    wrong = set(show.wrong)
    rows = [("position", [str(i) for i in range(1, len(show.tokens_text))]), ("input", show.tokens_text[1:]),
            ("output", show.output_text)]
    if show.reference_text is not None:
        rows.append(("reference", show.reference_text))
    out = ['<table class="outcome">']
    for name, cells in rows:
        tds = "".join(f'<td class="{"wrong" if name == "output" and i + 1 in wrong else ""}">{html.escape(c)}</td>'
                      for i, c in enumerate(cells))
        out.append(f"<tr><th>{name}</th>{tds}</tr>")
    out.append("</table>")
    if show.exact is not None:
        verdict = "exact: the output equals the reference at every scored position" if show.exact else \
            f"DIFFERS at positions {', '.join(map(str, show.wrong))}"
        out.append(f'<p class="{"ok" if show.exact else "bad"}">{verdict} (· = position not scored)</p>')
    return "\n".join(out)


def _program_html(data: ExploreData) -> str:
    if not data.program_stages:
        return "<p>(no RASP program: a trained model)</p>"
    out = []
    stages = data.stream.stages
    for s in sorted(k for k in data.program_stages if k >= 0):
        lines = "\n".join(html.escape(x) for x in data.program_stages[s])
        out.append(f'<div class="prog" data-stage="{s}"><div class="prog-head">stage {s}: '
                   f'{html.escape(stages[s])}</div><pre>{lines}</pre></div>')
    if -1 in data.program_stages:
        lines = "\n".join(html.escape(x) for x in data.program_stages[-1])
        out.append(f'<div class="prog"><div class="prog-head">not stored in the residual stream</div>'
                   f'<pre>{lines}</pre></div>')
    return "\n".join(out)


_CSS = """
body { font-family: system-ui, sans-serif; margin: 16px; color: #222; }
h1 { font-size: 18px; white-space: pre-line; } h2 { font-size: 15px; margin-top: 22px; }
table.outcome { border-collapse: collapse; font-family: monospace; font-size: 13px; }
table.outcome td, table.outcome th { border: 1px solid #ddd; padding: 2px 5px; text-align: center; }
table.outcome th { text-align: left; background: #f4f4f4; } td.wrong { background: #ffcdd2; }
p.ok { color: #1b5e20; } p.bad { color: #b71c1c; font-weight: bold; }
.control { position: sticky; top: 0; background: #fff; padding: 6px 0; z-index: 10; border-bottom: 1px solid #ddd; }
.control button { font-size: 14px; margin-right: 6px; } #stage-note { font-family: monospace; font-size: 13px; }
.progs { display: flex; flex-wrap: wrap; gap: 8px; }
.prog { border: 1px solid #ccc; border-radius: 4px; padding: 4px 8px; font-size: 12px; }
.prog pre { margin: 2px 0; white-space: pre-wrap; } .prog-head { font-weight: bold; }
.heads { display: flex; flex-wrap: wrap; gap: 10px; }
#heads-strip { flex-wrap: nowrap; overflow-x: auto; scroll-behavior: smooth; }
.shown { border: 2px solid #90a4ae; } #loading { color: #555; }
.top { display: flex; gap: 18px; align-items: baseline; flex-wrap: wrap; }
h1 { margin: 4px 0; } p.input { margin: 2px 0; font-size: 13px; }
.head-card { border: 2px solid transparent; border-radius: 4px; }
.current { border: 2px solid #e65100 !important; background: #fff8e1; }
.legend { font-size: 12px; color: #555; }
.swatch { display: inline-block; width: 12px; height: 12px; vertical-align: middle; border: 1px solid #777; }
"""

_JS = """
function depthcraftControls() {
  var V = %(visible)s, S = %(shapes)s, T = %(titles)s, N = %(notes)s, FIRST = %(first)s, current = -1;
  function setStage(i) {
    if (i < 0 || i >= V.length || i === current) return;
    current = i;
    var div = document.getElementById('residual');
    Plotly.update(div, {visible: V[i]}, {shapes: S[i], 'title.text': T[i], 'sliders[0].active': i});
    document.querySelectorAll('[data-stage]').forEach(function (el) {
      el.classList.toggle('current', Number(el.dataset.stage) === i);
    });
    // the attention maps: this stage's heads (or, at an MLP stage, the last attention stage's) scrolled into view
    var cards = Array.from(document.querySelectorAll('.head-map')), shown = -1;
    cards.forEach(function (el) { var s = Number(el.dataset.stage); if (s <= i && s > shown) shown = s; });
    var strip = document.getElementById('heads-strip'), card = cards.find(function (el) {
      return Number(el.dataset.stage) === shown; });
    cards.forEach(function (el) { el.classList.toggle('shown', Number(el.dataset.stage) === shown); });
    if (card && strip) strip.scrollLeft = card.offsetLeft - strip.offsetLeft - 8;
    document.getElementById('stage-note').textContent = N[i];
    document.getElementById('stage-num').textContent = i + ' / ' + (V.length - 1);
  }
  window.depthcraftStage = setStage;
  document.getElementById('stage-prev').onclick = function () { setStage(current - 1); };
  document.getElementById('stage-next').onclick = function () { setStage(current + 1); };
  document.addEventListener('keydown', function (e) {
    if (e.key === 'ArrowRight') setStage(current + 1);
    if (e.key === 'ArrowLeft') setStage(current - 1);
  });
  document.getElementById('residual').on('plotly_sliderchange', function (e) { setStage(e.slider.active); });
  setStage(FIRST);
}
"""


def explore_html(data: ExploreData) -> bytes:
    """The explore page for ``data``: one HTML document that needs no server and no network.

    Plotly's own JavaScript (:func:`plotly.offline.get_plotlyjs`) and every figure's JSON are in the
    page, gzip-compressed (:func:`pack`), and the page's loader decompresses them with the browser's
    ``DecompressionStream`` (Chrome 80, Firefox 113, Safari 16.4 and later), then draws the figures:
    about 1.6 MB for the README's example, where the library alone is 4.8 MB uncompressed. The page
    is encoded as windows-1252 (text outside it as character references). :func:`read_page` takes
    a page apart again.

    The first screen shows, under the title, the input and the stage control, the attention maps in
    one row scrolled to the current stage's head(s); the page opens at the first attention stage.

    Returns:
        The page's bytes.
    """
    from plotly.offline import get_plotlyjs

    show, st = data.show, data.stream
    labels = _labels(show.tokens_text)
    title_lines = show.title.splitlines()
    res_fig, visible, shapes, titles = _residual_figure(data)
    figures: dict = {}
    parts: List[str] = []
    out_text = " ".join(show.output_text)
    verdict = "" if show.exact is None else (" — exact" if show.exact else
                                           f" — DIFFERS at {', '.join(map(str, show.wrong))}")
    parts.append(f"<h1>{html.escape(show.title)}</h1>")
    parts.append(f'<p class="input">input: <code>{html.escape(" ".join(show.tokens_text[1:]))}</code>; output: '
                 f'<code>{html.escape(out_text)}</code>{html.escape(verdict)} (model positions: 0 is BOS, the '
                 f'tokens sit at 1..{len(show.tokens_text) - 1}; the table is further down)</p>')
    parts.append('<div class="control"><button id="stage-prev" type="button">◀ previous</button>'
                 '<button id="stage-next" type="button">next ▶</button> stage <span id="stage-num"></span> '
                 '(arrow keys or the slider under the residual stream) — <span id="stage-note"></span>'
                 ' <span id="loading">(drawing the figures...)</span></div>')
    parts.append(f'<h2>Attention maps, this stage\'s head outlined</h2><p class="legend">rows: query positions, '
                 f'columns: keys; blue: attention weight; <span class="swatch" style="background:{MASKED}"></span> '
                 f'grey: key hidden by the causal mask (after the query), not a zero weight. Hover a cell: the key '
                 f'the query attends, the weight and the score. Scroll sideways for every head.</p>'
                 f'<div class="heads" id="heads-strip">')
    a_stages = [i for i, s in enumerate(st.stages) if s.startswith("attn")]
    for a, (maps, scores) in enumerate(zip(st.attention, st.scores)):
        for h in range(maps.shape[0]):
            name = data.head_names[a][h]
            fig = _head_figure(maps[h], scores[h], labels, st.causal, name)
            parts.append(f'<div class="head-card head-map" data-stage="{a_stages[a]}" data-head="{a}-{h}">'
                         f'{_div(fig, f"head-{a}-{h}", figures)}</div>')
    parts.append("</div>")
    parts.append("<h2>Output beside the reference</h2>" + _outcome_table(data))
    parts.append("<h2>The RASP program, by the stage that writes each SOp</h2>"
                 f'<div class="progs">{_program_html(data)}</div>')
    parts.append('<h2>The residual stream after each stage</h2><p class="legend">rows: residual directions, '
                 'grouped by the SOp or pointer they hold (its name once, then each row\'s value and its index), '
                 'columns: positions; right: what the stage added; '
                 f'<span class="swatch" style="border:2px solid {WRITTEN}"></span> outlined: the rows the stage '
                 'wrote.</p>')
    parts.append(_div(res_fig, "residual", figures))
    parts.append("<h2>Read-out</h2>" + _div(_logits_figure(data), "logits", figures))
    if data.alignment is not None:
        al = data.alignment
        parts.append("<h2>Alignment with the construction</h2>" + _div(_alignment_figure(data), "alignment", figures))
        parts.append('<div class="heads">')
        for i, (name, m) in enumerate(zip(al.construction_heads, al.construction_maps)):
            fig = _head_figure(m, None, labels, st.causal, f"construction {name}")
            parts.append(f'<div class="head-card construction-map">{_div(fig, f"construction-{i}", figures)}</div>')
        parts.append("</div>")
    first = a_stages[0] if a_stages else 0
    js = _JS % {"visible": json.dumps(visible), "shapes": json.dumps(shapes), "titles": json.dumps(titles),
                "notes": json.dumps(data.stage_notes), "first": first}
    loader = _LOADER % {"cp1252": json.dumps(sorted(_CP1252.items()))}
    head = ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"windows-1252\">"
            f"<title>{html.escape(title_lines[0] if title_lines else 'depthcraft explore')}</title>"
            f"<style>{_CSS}</style></head><body>\n" + "\n".join(parts))

    def text(t: str) -> bytes:  # markup: characters outside windows-1252 as references
        return t.encode("cp1252", "xmlcharrefreplace")

    def script(t: str) -> bytes:  # a script's text: ASCII, with \\uXXXX escapes for the rest
        return t.encode("ascii", "backslashreplace")

    blob = lambda name, payload: (f'<script type="application/x-depthcraft-gzip" id="{name}">'.encode()  # noqa: E731
                                  + pack(payload) + b"</script>\n")
    return (text(head) + b"\n" + blob("plotly-js", get_plotlyjs().encode("utf-8"))
            + blob("figures", json.dumps(figures, ensure_ascii=True, separators=(",", ":")).encode("ascii"))
            + b"<script>" + script(js) + b"</script>\n<script>" + script(loader) + b"</script>\n</body></html>\n")


def write_explore(data: ExploreData, path: str) -> None:
    """Write :func:`explore_html` to ``path`` atomically.

    Raises:
        ParameterError: the path is not writable.
    """
    from depthcraft.constructions.files import check_writable, write_bytes_atomic

    check_writable(path)
    write_bytes_atomic(path, explore_html(data))


__all__ = ["MASKED", "WRITTEN", "explore_html", "pack", "read_page", "unpack", "write_explore"]
