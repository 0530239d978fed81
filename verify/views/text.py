"""The text view of :class:`~depthcraft.verify.views.data.ShowData` (what ``depthcraft show`` prints).

Every function takes the line width (default 80 columns) and keeps each line within it:
token rows are cut into aligned blocks of positions (:func:`aligned_rows`), long
program lines and circuit descriptions wrap with a hanging indent, and the
residual-stream values are shortened to the columns left.
"""

from __future__ import annotations

import textwrap
from typing import Iterable, List, Sequence, Tuple

import numpy as np
from rich.cells import cell_len

from depthcraft.verify.views.data import UNSCORED, HeadView, ShowData

#: Default line width (columns).
WIDTH = 80
#: Attention weight below which a query's attention counts as split (the other keys are shown).
SPLIT = 0.99
#: Most "query→key" entries per line in the attention summary.
PER_LINE = 6
#: Width of the row labels of :func:`aligned_rows` ("reference" plus two spaces).
LABEL = 11


def wrap(text: str, width: int = WIDTH, indent: str = "", hanging: str = "    ") -> List[str]:
    """``text`` as lines of at most ``width`` columns, broken at spaces (a longer word keeps its line).

    The first line starts with ``indent``, the others with ``indent + hanging``.
    """
    return textwrap.wrap(text, width=max(width, len(indent + hanging) + 10), initial_indent=indent,
                         subsequent_indent=indent + hanging, break_long_words=False, break_on_hyphens=False) or [indent]


def aligned_rows(rows: Sequence[Tuple[str, Sequence[str]]], width: int = WIDTH, marks: Iterable[int] = (),
                 label_width: int = LABEL, indent: str = "") -> List[str]:
    """Rows of tokens aligned by position, cut into blocks that fit ``width`` columns.

    Args:
        rows: (label, cells) pairs, every ``cells`` of the same length n (one per position).
        width: line width in columns.
        marks: 0-based columns to mark with ``^`` on a line under the block (e.g. wrong outputs).
        label_width: columns given to the labels.
        indent: prefix of every line.
    Returns:
        The lines; blocks after the first are preceded by a blank line. Each column is as wide
        as its widest cell; cells are right-aligned.
    """
    n = len(rows[0][1]) if rows else 0
    cols = [max([cell_len(r[1][i]) for r in rows]) for i in range(n)]
    marked = set(marks)
    start, lines = 0, []
    room = width - len(indent) - label_width
    while start < n:
        end, used = start, 0
        while end < n and (end == start or used + 1 + cols[end] <= room):
            used += (end > start) + cols[end]
            end += 1
        if lines:
            lines.append("")
        for label, cells in rows:
            body = " ".join(" " * (cols[i] - cell_len(cells[i])) + cells[i] for i in range(start, end))
            lines.append(f"{indent}{label:<{label_width}}{body}".rstrip())
        if marked & set(range(start, end)):
            body = " ".join(" " * (cols[i] - 1) + ("^" if i in marked else " ") for i in range(start, end))
            lines.append(f"{indent}{'':<{label_width}}{body}".rstrip())
        start = end
    return lines


def outcome_lines(data: ShowData, width: int = WIDTH) -> List[str]:
    """Positions, input, output and reference rows, then the verdict (what ``depthcraft run`` prints).

    Positions the task does not score show :data:`UNSCORED` in the reference row; scored
    positions where the output differs are marked ``^``.
    """
    n = len(data.output_text)
    rows = [("position", [str(i) for i in range(1, n + 1)]), ("input", data.tokens_text[1:]),
            ("output", data.output_text)]
    if data.reference_text is None:
        return aligned_rows(rows, width)
    rows.append(("reference", data.reference_text))
    lines = aligned_rows(rows, width, marks=[p - 1 for p in data.wrong])
    verdict = "exact" if data.exact else \
        f"DIFFERS at position{'s' * (len(data.wrong) > 1)} {', '.join(map(str, data.wrong))}"
    if UNSCORED in data.reference_text:
        verdict += f" ({UNSCORED} = not scored)"
    return lines + wrap(verdict, width)


def _attends(hv: HeadView, toks: List[str]) -> List[str]:
    """``q:x→k:y`` per query; a split row lists the keys with weight >= 0.05 (at most 4) and their weights."""
    entries = []
    for q in range(1, hv.weights.shape[0]):
        row = hv.weights[q]
        order = np.argsort(-row, kind="stable")
        k1 = int(order[0])
        if row[k1] >= SPLIT:
            entries.append(f"{q}:{toks[q]}→{k1}:{toks[k1]}")
            continue
        keys = [int(k) for k in order if row[k] >= 0.05]
        shown = ", ".join(f"{k}:{toks[k]} {row[k]:.2f}" for k in keys[:4]) + (", ..." if len(keys) > 4 else "")
        entries.append(f"{q}:{toks[q]}→{{{shown}}}")
    return entries


def _packed(entries: List[str], width: int, indent: str = "  ", sep: str = "  ") -> List[str]:
    """Entries joined by ``sep``, at most :data:`PER_LINE` per line and within ``width`` columns."""
    lines: List[str] = []
    line: List[str] = []
    for e in entries:
        if line and (len(line) == PER_LINE or cell_len(indent + sep.join(line + [e])) > width):
            lines.append(indent + sep.join(line))
            line = []
        line.append(e)
    if line:
        lines.append(indent + sep.join(line))
    return lines


def attention_summary(data: ShowData, width: int = WIDTH) -> List[str]:
    """Text lines: per attention layer and head, its circuits and where each query position attends."""
    def sops(names: List[str]) -> str:
        return "{" + ", ".join(names) + "}"

    lines: List[str] = []
    for v in data.sublayers:
        if isinstance(v, HeadView):
            lines += wrap(f"layer {v.layer} head {v.head} -> {', '.join(v.writes)}", width)
            lines += wrap(f"QK: query {sops(v.reads_query)} x key {sops(v.reads_key)}", width, indent="  ")
            lines += wrap(f"OV: {sops(v.reads_value)} -> {sops(v.writes)}", width, indent="  ")
            lines += _packed(_attends(v, data.tokens_text), width)
        else:
            lines += wrap(f"MLP {v.index} (after layer {v.after_layer}, {v.hidden} hidden units) -> "
                          f"{', '.join(v.writes)}", width)
            lines += wrap(f"reads {sops(v.reads)}", width, indent="  ")
    return lines


def _shortened(vals: List[str], width: int) -> str:
    text = ",".join(vals) if vals else "-"
    return text if len(text) <= width else text[:max(width - 3, 0)] + "..."


def residual_lines(data: ShowData, width: int = WIDTH) -> List[str]:
    """The residual-stream layout: dims, SOp, the sublayer that writes it, its values (shortened to fit)."""
    d = sum(g[2] - g[1] + 1 for g in data.layout)
    nw = max([len(g[0]) for g in data.layout] + [3])
    ww = max([len(g[4]) for g in data.layout] + [10])
    room = width - (2 + 10 + nw + 2 + ww + 2)
    own_line = room < 12  # too narrow: each row's values go on a line of their own, under it
    lines = [f"Residual stream (d_model = {d})",
             f"  {'dims':<9} {'SOp':<{nw}}  {'written by':<{ww}}" + ("" if own_line else "  values")]
    for name, lo, hi, vals, who in data.layout:
        dims = f"{lo}" if lo == hi else f"{lo}-{hi}"
        if own_line:
            lines += [f"  {dims:<9} {name:<{nw}}  {who}", f"      values: {_shortened(vals, max(width - 14, 4))}"]
        else:
            lines.append(f"  {dims:<9} {name:<{nw}}  {who:<{ww}}  {_shortened(vals, room)}")
    return lines


def _program_line(line: str, width: int) -> List[str]:
    """One listing line, wrapped; a trailing ``[hand-built head ...]`` note moves to its own line first."""
    code, sep, note = line.partition("  [")
    if cell_len(line) + 2 <= width or not sep:
        return wrap(line, width, indent="  ")
    return wrap(code, width, indent="  ") + wrap("[" + note, width, indent="      ")


def render_text(data: ShowData, width: int = WIDTH) -> str:
    """The full text view (what ``depthcraft show`` prints), every line within ``width`` columns."""
    lines: List[str] = []
    for title_line in data.title.splitlines():
        lines += wrap(title_line, width)
    lines += [""] + outcome_lines(data, width)
    if data.program:
        lines += ["", "RASP program"]
        for ln in data.program:
            lines += _program_line(ln, width)
    n_attn = sum(isinstance(v, HeadView) for v in data.sublayers)
    n = len(data.tokens_text) - 1
    lines += [""] + wrap(f"Attention (0 = BOS, tokens 1..{n}; {n_attn} head{'s' * (n_attn != 1)}; "
                         f"q:x→k:y: query q attends key k)", width)
    lines += attention_summary(data, width)
    lines += [""] + residual_lines(data, width)
    return "\n".join(lines)


__all__ = ["WIDTH", "aligned_rows", "attention_summary", "outcome_lines", "render_text", "residual_lines", "wrap"]
