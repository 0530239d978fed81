"""The attention figure: every head's attention map on one input, as a PNG (matplotlib), sized for a 16:9 slide."""

from __future__ import annotations

import math
from typing import List, Tuple

import numpy as np

from depthcraft.verify.views.data import HeadView, ShowData

#: Figure size in inches: a 16:9 slide.
SLIDE = (16.0, 9.0)
#: Room (inches) the grid leaves for the title (top) and the colour bar and legend (right).
_TITLE_IN, _SIDE_IN = 1.1, 1.6
#: Masked cells (keys after the query in a causal model): grey fill with this hatch (not a zero weight).
MASK_COLOR = (0.80, 0.80, 0.80, 1.0)
MASK_HATCH = "////"
#: Colour map of the attention weights (0 = white).
CMAP = "Blues"


def slide_grid(panels: int, size: Tuple[float, float] = SLIDE) -> Tuple[int, int]:
    """(rows, cols) that gives ``panels`` square panels the largest side on a figure of ``size`` inches.

    Panels are laid out in reading order (layer by layer, heads in order). Ties go to fewer rows.

    Raises:
        ValueError: panels < 1.
    """
    if panels < 1:
        raise ValueError(f"panels must be >= 1, got {panels}")
    width, height = size[0] - _SIDE_IN, size[1] - _TITLE_IN
    best = None
    for rows in range(1, panels + 1):
        cols = math.ceil(panels / rows)
        if (rows - 1) * cols >= panels:  # an empty last row
            continue
        side = min(width / cols, height / rows)
        if best is None or side > best[0] + 1e-9:
            best = (side, rows, cols)
    return best[1], best[2]


def causal_mask(t: int) -> np.ndarray:
    """[T, T] bool: True where a causal model masks the key (key position > query position)."""
    return np.triu(np.ones((t, t), bool), k=1)


def build_figure(data: ShowData):
    """The attention figure as a matplotlib ``Figure`` (16 x 9 inches; see :func:`attention_figure`).

    Each head's [T, T] weights (query rows, key columns, BOS first, values 0..1) are one
    square panel; keys a causal model masks are drawn grey and hatched (:data:`MASK_COLOR`,
    :data:`MASK_HATCH`), so that they do not read as a zero weight.
    """
    from matplotlib.colors import ListedColormap
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch
    import matplotlib

    heads: List[HeadView] = [v for v in data.sublayers if isinstance(v, HeadView)]
    rows, cols = slide_grid(max(len(heads), 1))
    t = len(data.tokens_text)
    fig = Figure(figsize=SLIDE, constrained_layout=True)
    axes = fig.subplots(rows, cols, squeeze=False)
    # Masked cells are transparent ("bad" colour): the hatched grey patch behind them shows.
    cmap = ListedColormap(matplotlib.colormaps[CMAP](np.linspace(0, 1, 256)), name="attention").with_extremes(
        bad=(0, 0, 0, 0))
    mask = causal_mask(t) if data.causal else np.zeros((t, t), bool)
    side_in = min((SLIDE[0] - _SIDE_IN) / cols, (SLIDE[1] - _TITLE_IN) / rows)
    fontsize = max(4.0, min(8.0, side_in * 72 / (t * 1.6)))
    labels = [f"{i}:{s}" for i, s in enumerate(data.tokens_text)] if t <= 40 else None
    image = None
    for i, ax in enumerate(axes.ravel()):
        if i >= len(heads):
            ax.set_axis_off()
            continue
        hv = heads[i]
        ax.add_patch(matplotlib.patches.Rectangle((-0.5, -0.5), t, t, facecolor=MASK_COLOR, hatch=MASK_HATCH,
                                                  edgecolor=(0.55, 0.55, 0.55), linewidth=0, zorder=0))
        image = ax.imshow(np.ma.masked_array(np.asarray(hv.weights, float), mask=mask), vmin=0.0, vmax=1.0,
                          cmap=cmap, zorder=1, interpolation="nearest")
        ax.set_xlim(-0.5, t - 0.5)
        ax.set_ylim(t - 0.5, -0.5)
        ax.set_xticks(range(t) if labels else [])
        ax.set_yticks(range(t) if labels else [])
        if labels:
            ax.set_xticklabels(labels, rotation=90, fontsize=fontsize)
            ax.set_yticklabels(labels, fontsize=fontsize)
        if i // cols == rows - 1 or i + cols >= len(heads):
            ax.set_xlabel("key position", fontsize=9)
        if i % cols == 0:
            ax.set_ylabel("query position", fontsize=9)
        ax.set_title(hv.title, fontsize=10)
    if image is not None:
        fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.6, label="attention weight")
    if data.causal:
        fig.legend(handles=[Patch(facecolor=MASK_COLOR, hatch=MASK_HATCH, edgecolor=(0.55, 0.55, 0.55),
                                  label="masked (key after query)")], loc="lower right", fontsize=9)
    first = data.title.splitlines()[0]
    fig.suptitle(f"{first}\ninput: {' '.join(data.tokens_text[1:])}", fontsize=12)
    return fig


def attention_figure(data: ShowData, path: str, dpi: int = 110) -> None:
    """Write a PNG with every head's attention map on a 16:9 grid (:func:`slide_grid`), atomically.

    Args:
        data: the views of one input (:func:`~depthcraft.verify.views.data.build`).
        path: the PNG to write.
        dpi: pixels per inch (110: 1760 x 990 pixels).
    Raises:
        ParameterError: the path is not writable.
    """
    from depthcraft.constructions.files import check_writable, save_figure_atomic

    check_writable(path)
    save_figure_atomic(build_figure(data), path, dpi=dpi, tight=False)


__all__ = ["CMAP", "MASK_COLOR", "MASK_HATCH", "SLIDE", "attention_figure", "build_figure", "causal_mask",
           "slide_grid"]
