"""MLP sublayers: every input combination run exactly, interval bounds through the ReLU.

Soundness argument. An MLP reads a few blocks; every combination of their ideal vectors
(:func:`state.side` with the identity projection) is run in float64, giving the ideal
output of every input the model can present. Around each ideal input the real input lies
within the row radii (or the blocks' l1 bounds, :func:`state.lin_err`); the pre-activation
then lies in an interval (plus the float32 rounding of x W_1 + b_1), ReLU is monotone, so
the hidden layer lies in [relu(lo), relu(hi)], and the output moves at most
|h - [lo, hi]| |W_2| (plus the float32 rounding of h W_2 + b_2). A categorical output must
within a quarter of a one-hot (or zero) is snapped to it and the difference is added to
the radius, so the next sublayer reads exact one-hot ideals; any other output (tracr's
discretisation half-way between two values, or BOS, where tracr's SelectorWidth leaves -1
in a causal model) is its own ideal vector, exactly: the program check decodes it (an entry
at or above 1/2) and fails where it names no value or the wrong one, so the next sublayer reads exact one-hot ideals.

A numerical input (tracr's discretising MLPs: SelectorWidth's read-out, numerical Maps)
is no different: its ideal values are a finite set (the means a head can write,
:mod:`.heads`), and around each the real input lies in [x - r, x + r]; the interval through
each hidden ReLU is exact for one input row (a monotone function of one variable), so the
bound covers every real input of the interval. Where tracr's discretisation puts a
threshold inside an interval (SelectorWidth beyond its exact length) the output is not a
clean one-hot and the MLP is not certified, with that input as witness.
"""

from __future__ import annotations

from typing import Any, Dict, Tuple

import numpy as np

from depthcraft.verify.certify.float32 import U32, U64, gamma, terms, up
from depthcraft.verify.certify.state import Block, Side, State, Unclean, describe, lin_err, side


def certify_mlp(state: State, blocks: Dict[str, Block], spec, p: Dict[str, Any], n: int
                ) -> Tuple[np.ndarray, Side, Tuple[np.ndarray, Dict[str, float]]]:
    """Certify one MLP sublayer.

    Args:
        state: the abstract state before the sublayer.
        blocks: the residual blocks by name.
        spec: the sublayer's :class:`~constructions.runtime.SublayerSpec` (``in_rows``, ``out_rows``).
        p: the weights ``w_1`` [Din, hidden], ``b_1``, ``w_2`` [hidden, Dout], ``b_2``.
        n: N, the longest input.
    Returns:
        (ideal outputs [m, Dout] float64 of every input combination, the input side (its
        ``kind`` [m] and ``guard`` [m] go with each output), ([Dout] row radius, {block: l1})).
    Raises:
        TooLarge: too many input combinations.
    """
    d = len(state.radius)
    in_rows, out_rows = spec.rows("in_rows", d), spec.rows("out_rows", d)
    w1, b1 = np.asarray(p["w_1"], np.float64), np.asarray(p["b_1"], np.float64)
    w2, b2 = np.asarray(p["w_2"], np.float64), np.asarray(p["b_2"], np.float64)
    sd = side(state, blocks, in_rows, np.eye(len(in_rows)), n)
    x = sd.contrib  # [m, Din] ideal inputs
    r_in = state.radius[in_rows]
    pre = x @ w1 + b1
    hw = lin_err(state, list(blocks.values()), in_rows, w1)
    pre_err = gamma(terms(w1) + 1, U32) * ((np.abs(x) + r_in) @ np.abs(w1) + np.abs(b1))
    hw = hw + pre_err
    h = np.maximum(pre, 0)
    lo, hi = np.maximum(pre - hw, 0), np.maximum(pre + hw, 0)
    y = h @ w2 + b2
    dev = np.maximum(hi - h, h - lo)  # [m, hidden]
    out_err = dev @ np.abs(w2) + gamma(terms(w2) + 1, U32) * (hi @ np.abs(w2) + np.abs(b2))
    ideal = y.copy()
    for b in blocks.values():
        sel = np.isin(out_rows, b.rows)
        if not sel.any() or not b.categorical:
            continue
        cols = np.flatnonzero(sel)
        blk = y[:, cols]
        snapped = np.zeros_like(blk)
        top = blk.argmax(1)
        on = blk.max(1) > 0.5
        snapped[np.flatnonzero(on), top[on]] = 1.0
        snapped[sd.kind == 0] = blk[sd.kind == 0]  # BOS is never read out: its exact vector is its ideal
        off = np.abs(blk - snapped).max(1)
        rough = off >= 0.25  # not near a one-hot: the exact output is its own ideal (the program check decodes it)
        snapped[rough] = blk[rough]
        ideal[:, cols] = snapped
    r_out = out_err.max(0) + np.abs(y - ideal).max(0) + gamma(len(in_rows) + w2.shape[0] + 4, U64) * np.abs(y).max(0)
    r_out = np.array([up(v) for v in r_out])
    l1_out = {b.name: float(r_out[np.isin(out_rows, b.rows)].sum()) for b in blocks.values()
              if np.isin(out_rows, b.rows).any()}
    return ideal, sd, (r_out, l1_out)
