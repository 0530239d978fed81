"""The attention figure: every head's attention map on one input, as a PNG (matplotlib)."""

from __future__ import annotations

from depthcraft.verify.views.data import HeadView, ShowData


def attention_figure(data: ShowData, path: str) -> None:
    """Write a PNG with every head's attention map (columns: layers, rows: heads), atomically.

    Each panel is the [T, T] weight matrix of one head on the input (query rows,
    key columns, BOS first), values 0..1.

    Raises:
        ParameterError: the path is not writable.
    """
    from matplotlib.figure import Figure

    from depthcraft.constructions.files import check_writable, save_figure_atomic

    check_writable(path)
    heads = [v for v in data.sublayers if isinstance(v, HeadView)]
    layers = sorted({h.layer for h in heads}) or [1]
    rows = max([sum(h.layer == lay for h in heads) for lay in layers] + [1])
    t = len(data.tokens_text)
    side = min(max(2.6, 0.3 * t + 1.4), 8.0)
    fig = Figure(figsize=(max(side * len(layers) + 1.0, 6.0), side * rows + 0.9), constrained_layout=True)
    axes = fig.subplots(rows, len(layers), squeeze=False)
    image = None
    labels = [f"{i}:{s}" for i, s in enumerate(data.tokens_text)] if t <= 40 else None
    for c, lay in enumerate(layers):
        col_heads = [h for h in heads if h.layer == lay]
        for r in range(rows):
            ax = axes[r, c]
            if r >= len(col_heads):
                ax.set_axis_off()
                continue
            hv = col_heads[r]
            image = ax.imshow(hv.weights, vmin=0.0, vmax=1.0, cmap="Blues")
            ax.set_xticks(range(t) if labels else [])
            ax.set_yticks(range(t) if labels else [])
            if labels:
                ax.set_xticklabels(labels, rotation=90, fontsize=7)
                ax.set_yticklabels(labels, fontsize=7)
            ax.set_xlabel("key position")
            if c == 0:
                ax.set_ylabel("query position")
            ax.set_title(hv.title, fontsize=9)
    if image is not None:
        fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8, label="attention weight")
    first = data.title.splitlines()[0]
    fig.suptitle(f"{first}\ninput: {' '.join(data.tokens_text[1:])}", fontsize=10)
    save_figure_atomic(fig, path, dpi=110)


__all__ = ["attention_figure"]
