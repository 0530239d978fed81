"""Attention alignment between trained heads and a construction's heads (SPEC §7).

For two attention maps A and B of one input ([T, T], rows = queries, columns = keys)

    alignment(A, B) = sum(A * B) / (||A||_F ||B||_F)

the cosine similarity of the maps as vectors: 1 when B is a positive multiple of A,
0 when they attend to disjoint positions. Rows of BOS and PAD queries are left
out (in a causal model the BOS row is the same for every head, which would
inflate every alignment). The alignment of two heads is the mean over inputs.

The sweep reports it twice: over every token row, and over the *scored* rows
only (where the task has a target). The two coincide for k-hop (every position
is scored); for read-out tasks (ICQA, TM, ICTM: one scored position) a trained
head is free to attend anywhere at unscored rows, so the scored-row number is
the one to read for the construction's last layer.

Chance level: the alignment of the construction's head with uniform causal
attention (each query spreading weight evenly over the keys it may see) is
reported beside it, so that a number like 0.4 can be read against what a head
that ignores its input already gets.
"""

from __future__ import annotations

from typing import Any, Dict, List, Sequence

import numpy as np

from depthcraft.constructions.errors import ParameterError


def alignment(a: np.ndarray, b: np.ndarray, query_mask: np.ndarray = None) -> np.ndarray:
    """sum(A*B) / (||A||_F ||B||_F) over the last two axes.

    Args:
        a, b: [..., T, T] attention maps (same shape, or broadcastable).
        query_mask: [..., T] bool, the query rows to include (None = all rows).
    Returns:
        [...] float64 alignments in [-1, 1] (in [0, 1] for non-negative maps); 0.0
        where either map is all zero on the included rows.
    Raises:
        ParameterError: the last two axes are not equal square shapes.
    """
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    if a.shape[-2:] != b.shape[-2:] or a.shape[-1] != a.shape[-2]:
        raise ParameterError(f"attention maps must both be [..., T, T], got {a.shape} and {b.shape}")
    if query_mask is not None:
        rows = np.asarray(query_mask, bool)[..., :, None]
        a = np.where(rows, a, 0.0)
        b = np.where(rows, b, 0.0)
    num = (a * b).sum((-2, -1))
    den = np.sqrt((a * a).sum((-2, -1))) * np.sqrt((b * b).sum((-2, -1)))
    return np.where(den > 0, num / np.where(den > 0, den, 1.0), 0.0)


def uniform_map(t: int, causal: bool) -> np.ndarray:
    """[T, T] attention spreading each query row evenly over the keys it may attend to."""
    m = np.tril(np.ones((t, t))) if causal else np.ones((t, t))
    return m / m.sum(-1, keepdims=True)


def head_alignments(trained: Sequence[np.ndarray], construction: Sequence[np.ndarray],
                    query_mask: np.ndarray) -> np.ndarray:
    """Mean alignment of every trained head with every construction head.

    Args:
        trained: per trained attention sublayer, [batch, H, T, T] maps.
        construction: per construction attention sublayer, [batch, H_c, T, T] maps on the
            same inputs (same positions).
        query_mask: [batch, T] bool, query rows to include.
    Returns:
        [L_trained, H, L_c, H_c_max] float64 (NaN where a construction layer has fewer heads).
    """
    if not trained or not construction:
        raise ParameterError("alignment needs at least one trained and one construction attention layer")
    hc = max(c.shape[1] for c in construction)
    out = np.full((len(trained), trained[0].shape[1], len(construction), hc), np.nan)
    for lt, a in enumerate(trained):
        a = np.asarray(a)
        for lc, b in enumerate(construction):
            b = np.asarray(b)
            if a.shape[0] != b.shape[0] or a.shape[-1] != b.shape[-1]:
                raise ParameterError(f"trained maps {a.shape} and construction maps {b.shape} are not on the "
                                     f"same inputs")
            # [batch, H, 1, T, T] x [batch, 1, H_c, T, T] -> [batch, H, H_c]
            al = alignment(a[:, :, None], b[:, None, :], query_mask[:, None, None, :])
            out[lt, :, lc, :b.shape[1]] = al.mean(0)
    return out


def best_heads(matrix: np.ndarray, construction: Sequence[np.ndarray], query_mask: np.ndarray,
               causal: bool) -> List[Dict[str, Any]]:
    """For each construction head, the best-aligned trained head.

    Args:
        matrix: :func:`head_alignments` output.
        construction: the construction's maps (for the chance level).
        query_mask: [batch, T] bool.
        causal: whether the chance map is causal.
    Returns:
        One dict per construction head: ``{"construction_layer", "construction_head",
        "trained_layer", "trained_head", "alignment", "chance"}`` (layers and heads 1-based).
    """
    out = []
    t = query_mask.shape[-1]
    uni = uniform_map(t, causal)[None, None]
    for lc, b in enumerate(construction):
        chance = alignment(uni, np.asarray(b), query_mask[:, None, :]).mean(0)  # [H_c]
        for hc in range(b.shape[1]):
            col = matrix[:, :, lc, hc]
            lt, ht = np.unravel_index(int(np.nanargmax(col)), col.shape)
            out.append({"construction_layer": lc + 1, "construction_head": hc + 1,
                        "trained_layer": int(lt) + 1, "trained_head": int(ht) + 1,
                        "alignment": round(float(col[lt, ht]), 4), "chance": round(float(chance[hc]), 4)})
    return out
