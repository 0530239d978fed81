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

The l1 bound of a written block is the largest, over the combinations, of the sum of that
combination's column bounds (at a real input whose ideal is combination i, the block's error
is at most that sum), never more than the sum of the row radii.

**One perturbed row, exactly** (:func:`one_row_deviation`). The interval bound above sums
each hidden unit's own worst case through |W_2|; tracr's discretising MLPs put their
thresholds in pairs ReLU(a (x - t) + 1) - ReLU(a (x - t)) with a = mlp_exactness (100), and
past a threshold both units of a pair move by a r while their difference does not move at
all, so the interval bound is about 2 a r per pair where the real change is 0 (a
SelectorWidth read-out with r = 1.5e-3 got an output radius of 0.6). When every row the
MLP reads with a non-zero weight has radius 0 except one row k (the numerical input; ``one``
and the token rows are exact), the real input of combination i is x_i + t e_k with
|t| <= rho (rho: row k's radius, or its block's l1 bound, the smaller), and the output of
the exact arithmetic is f_i(t) = ReLU(pre_i + t W_1[k]) W_2 + b_2, a continuous piecewise
linear function of the one variable t whose kinks are the points t_j = -pre_ij / W_1[k, j].
The extreme values of each output coordinate of f_i(t) - f_i(0) over [-rho, rho] are taken
at the ends or at a kink inside: evaluating f_i there gives the exact largest deviation,
per combination and per output coordinate (evaluated in float64 from the float64 ``pre``: its
rounding joins delta_j below, and the evaluation adds its own gamma term). The float32 forward
differs from f_i(t) by
(a) the rounding of each pre-activation, |delta_j| <= gamma_{k_j} ((|x| + r) |W_1|
+ |b_1|)_j (k_j: unit j's non-zero weights, plus one for a non-zero bias,
:func:`float32.column_gammas`); ReLU is 1-Lipschitz, so unit j moves by at most |delta_j|, and not at all
where its pre-activation stays at or below -|delta_j| on the whole interval; through W_2
that adds sum_j |delta_j| |W_2[j]| over the units that may move; and (b) the rounding of
h W_2 + b_2, kept from the interval bound. Each entry of the radius is the smaller of this
bound and the interval bound (both hold); the float64 evaluation adds its own gamma term
relative to the hidden values' magnitudes. ReLU MLPs only; the sizes are bounded by
:data:`MAX_KINK_ENTRIES` (beyond it the interval bound alone is used).
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import numpy as np

from depthcraft.verify.certify.float32 import U32, U64, column_gammas, gamma, terms, up
from depthcraft.verify.certify.state import Block, Side, State, Unclean, describe, lin_err, side

#: Most float64 entries (combinations x evaluation points x hidden units) the exact one-row bound
#: evaluates at once; a larger MLP is split in chunks of combinations, and one whose single
#: combination exceeds it keeps the interval bound.
MAX_KINK_ENTRIES = 20_000_000


def one_row_deviation(pre: np.ndarray, wk: np.ndarray, rho: float, w2: np.ndarray, delta: np.ndarray
                      ) -> Optional[np.ndarray]:
    """[m, Dout] bound on |out(x_i + t e_k) - out(x_i)| over |t| <= rho, float32 pre-activation
    rounding included (module docstring, "One perturbed row, exactly").

    Args:
        pre: [m, H] exact pre-activations x_i W_1 + b_1 of the ideal inputs (float64).
        wk: [H] the perturbed row k of W_1.
        rho: bound on |t|, the error of row k.
        w2: [H, Dout] the output weights.
        delta: [m, H] bound on each pre-activation's float32 rounding.
    Returns:
        The bound, without the rounding of h W_2 + b_2 (the caller adds it), or None when one
        combination alone needs more than :data:`MAX_KINK_ENTRIES` entries.
    """
    m, hdim = pre.shape
    with np.errstate(divide="ignore", invalid="ignore"):
        kinks = np.where(wk != 0, -pre / np.where(wk != 0, wk, 1.0), np.nan)  # [m, H]
    kinks = np.where(np.abs(kinks) < rho, kinks, np.nan)
    ts = np.concatenate([np.full((m, 1), -rho), np.full((m, 1), rho), kinks], 1)  # [m, H + 2]
    per = ts.shape[1] * hdim
    if per > MAX_KINK_ENTRIES:
        return None
    base = np.maximum(pre, 0.0) @ w2  # [m, Dout]
    out = np.zeros((m, w2.shape[1]))
    step = max(1, MAX_KINK_ENTRIES // per)
    for a in range(0, m, step):
        b = min(m, a + step)
        t = ts[a:b]
        valid = np.isfinite(t)
        t0 = np.where(valid, t, 0.0)
        h = np.maximum(pre[a:b, None, :] + t0[:, :, None] * wk[None, None, :], 0.0)  # [c, P, H]
        dev = np.abs(h @ w2 - base[a:b, None, :])  # [c, P, Dout]
        out[a:b] = np.where(valid[:, :, None], dev, 0.0).max(1)
    # a unit moves under its rounding only where its pre-activation can exceed -delta_j
    top = pre + rho * np.abs(wk)[None, :]
    moves = top > -2 * delta  # (twice: the float64 rounding of ``top`` itself)
    out += (np.where(moves, delta, 0.0)) @ np.abs(w2)
    # the float64 evaluation itself: every h W_2 above is within gamma_{H+2} (u = 2^-53) of its
    # terms' magnitudes, h <= max(pre, 0) + rho |W_1[k]| on the interval (and two such sums differ)
    hmax = np.maximum(pre, 0.0) + rho * np.abs(wk)[None, :]
    out += 2 * gamma(hdim + 2, U64) * (hmax @ np.abs(w2))
    return out


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
    # float32 rounding of x W_1 + b_1, per hidden unit (float32.column_gammas: its own terms)
    mags = (np.abs(x) + r_in) @ np.abs(w1) + np.abs(b1)  # [m, hidden] magnitudes of each unit's terms
    pre_err = column_gammas(w1, b1) * mags
    hw = hw + pre_err
    h = np.maximum(pre, 0)
    lo, hi = np.maximum(pre - hw, 0), np.maximum(pre + hw, 0)
    y = h @ w2 + b2
    dev = np.maximum(hi - h, h - lo)  # [m, hidden]
    round2 = column_gammas(w2, b2) * (hi @ np.abs(w2) + np.abs(b2))
    out_err = dev @ np.abs(w2) + round2
    moving = (state.radius[in_rows] > 0) & (np.abs(w1).sum(1) > 0)  # rows read with a non-zero error
    if getattr(spec, "activation", "relu") == "relu" and moving.sum() == 1 and len(x):
        k = int(np.flatnonzero(moving)[0])
        unit = np.zeros((1, 1))
        unit[0, 0] = 1.0
        rho = float(lin_err(state, list(blocks.values()), in_rows[[k]], unit)[0])
        # each unit's pre-activation is off by its float32 rounding, and ``pre`` itself by its float64 one
        exact = one_row_deviation(pre, w1[k], rho, w2, pre_err + gamma(len(in_rows) + 1, U64) * mags)
        if exact is not None:
            out_err = np.minimum(out_err, exact + round2)
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
    own = gamma(len(in_rows) + w2.shape[0] + 4, U64) * np.abs(y).max(0)  # float64 rounding of y itself
    per = out_err + np.abs(y - ideal)  # [m, Dout] error bound of each combination's output
    r_out = per.max(0) + own
    r_out = np.array([up(v) for v in r_out])
    # l1 per block: at a real input whose ideal is combination i the block's error is at most
    # sum over its columns of per[i] + own, so the largest such sum bounds it (no larger than the
    # sum of the row radii, the maxima over i taken column by column)
    l1_out = {}
    for b in blocks.values():
        sel = np.isin(out_rows, b.rows)
        if sel.any():
            by_comb = float(per[:, sel].sum(1).max(initial=0.0) + own[sel].sum()) if len(per) else 0.0
            l1_out[b.name] = min(float(r_out[sel].sum()), up(by_comb))
    return ideal, sd, (r_out, l1_out)
