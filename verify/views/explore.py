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
    rows = [f"{i} {sop_name(lab)}" + (":" + lab.split(":", 1)[1] if ":" in lab else "")
            for i, lab in enumerate(st.labels)]
    group_of = [""] * d
    for name, first, last, who in data.groups:
        for r in range(first, last + 1):
            group_of[r] = f"{name} (written by {who})"
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
    height = max(420, min(11 * d, 2400) + 160)
    fig.update_layout(height=height, margin=dict(l=10, r=10, t=60, b=110), shapes=steps_shapes[0],
                      title=dict(text=html.escape(titles[0]), font=dict(size=13)), plot_bgcolor="white",
                      sliders=[dict(active=0, currentvalue=dict(prefix="stage: "), pad=dict(t=50),
                                    steps=[dict(label=name, method="skip", args=[]) for name in st.stages])])
    fig.update_yaxes(autorange="reversed", tickfont=dict(size=8 if d > 40 else 10))
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


def _div(fig, div_id: str) -> str:
    import plotly.io as pio

    return pio.to_html(fig, full_html=False, include_plotlyjs=False, div_id=div_id,
                       config={"displaylogo": False, "responsive": False})


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
.head-card { border: 2px solid transparent; border-radius: 4px; }
.current { border: 2px solid #e65100 !important; background: #fff8e1; }
.legend { font-size: 12px; color: #555; }
.swatch { display: inline-block; width: 12px; height: 12px; vertical-align: middle; border: 1px solid #777; }
"""

_JS = """
(function () {
  var V = %(visible)s, S = %(shapes)s, T = %(titles)s, N = %(notes)s, current = -1;
  function setStage(i) {
    if (i < 0 || i >= V.length || i === current) return;
    current = i;
    var div = document.getElementById('residual');
    Plotly.update(div, {visible: V[i]}, {shapes: S[i], 'title.text': T[i], 'sliders[0].active': i});
    document.querySelectorAll('[data-stage]').forEach(function (el) {
      el.classList.toggle('current', Number(el.dataset.stage) === i);
    });
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
  setStage(0);
})();
"""


def explore_html(data: ExploreData) -> str:
    """The explore page for ``data`` as one HTML document (plotly's JavaScript inlined; no network).

    Returns:
        The page (str, several MB: the plotly library is part of it).
    """
    from plotly.offline import get_plotlyjs

    show, st = data.show, data.stream
    labels = _labels(show.tokens_text)
    title_lines = show.title.splitlines()
    res_fig, visible, shapes, titles = _residual_figure(data)
    parts: List[str] = []
    parts.append(f"<h1>{html.escape(show.title)}</h1>")
    parts.append(f'<p>input: <code>{html.escape(" ".join(show.tokens_text[1:]))}</code> — positions are model '
                 f'positions: 0 is BOS, the tokens sit at 1..{len(show.tokens_text) - 1}.</p>')
    parts.append("<h2>Output beside the reference</h2>" + _outcome_table(data))
    parts.append('<div class="control"><button id="stage-prev" type="button">◀ previous</button>'
                 '<button id="stage-next" type="button">next ▶</button> stage <span id="stage-num"></span> '
                 '(arrow keys or the slider under the residual stream) — <span id="stage-note"></span></div>')
    parts.append("<h2>The RASP program, by the stage that writes each SOp</h2>"
                 f'<div class="progs">{_program_html(data)}</div>')
    parts.append(f'<h2>Attention maps, every head</h2><p class="legend">rows: query positions, columns: keys; '
                 f'blue: attention weight; <span class="swatch" style="background:{MASKED}"></span> grey: key '
                 f'hidden by the causal mask (after the query), not a zero weight. Hover a cell: the key the '
                 f'query attends, the weight and the score.</p><div class="heads">')
    a_stages = [i for i, s in enumerate(st.stages) if s.startswith("attn")]
    for a, (maps, scores) in enumerate(zip(st.attention, st.scores)):
        for h in range(maps.shape[0]):
            name = data.head_names[a][h]
            fig = _head_figure(maps[h], scores[h], labels, st.causal, name)
            parts.append(f'<div class="head-card head-map" data-stage="{a_stages[a]}" data-head="{a}-{h}">'
                         f'{_div(fig, f"head-{a}-{h}")}</div>')
    parts.append("</div>")
    parts.append('<h2>The residual stream after each stage</h2><p class="legend">rows: residual directions '
                 '(grouped by the SOp or pointer they hold: <code>name:value</code>), columns: positions; '
                 f'right: what the stage added; <span class="swatch" style="border:2px solid {WRITTEN}"></span> '
                 'outlined: the rows the stage wrote.</p>')
    parts.append(_div(res_fig, "residual"))
    parts.append("<h2>Read-out</h2>" + _div(_logits_figure(data), "logits"))
    if data.alignment is not None:
        al = data.alignment
        parts.append("<h2>Alignment with the construction</h2>" + _div(_alignment_figure(data), "alignment"))
        parts.append('<div class="heads">')
        for i, (name, m) in enumerate(zip(al.construction_heads, al.construction_maps)):
            fig = _head_figure(m, None, labels, st.causal, f"construction {name}")
            parts.append(f'<div class="head-card construction-map">{_div(fig, f"construction-{i}")}</div>')
        parts.append("</div>")
    js = _JS % {"visible": json.dumps(visible), "shapes": json.dumps(shapes), "titles": json.dumps(titles),
                "notes": json.dumps(data.stage_notes)}
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title_lines[0] if title_lines else 'depthcraft explore')}</title>"
            f"<style>{_CSS}</style><script>{get_plotlyjs()}</script></head><body>\n"
            + "\n".join(parts) + f"\n<script>{js}</script>\n</body></html>\n")


def write_explore(data: ExploreData, path: str) -> None:
    """Write :func:`explore_html` to ``path`` atomically.

    Raises:
        ParameterError: the path is not writable.
    """
    from depthcraft.constructions.files import check_writable, write_bytes_atomic

    check_writable(path)
    write_bytes_atomic(path, explore_html(data).encode("utf-8"))


__all__ = ["MASKED", "WRITTEN", "explore_html", "write_explore"]
