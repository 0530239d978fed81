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
:mod:`.heads`), and around each the real input lies in [x - r, x + r]. When every hidden
unit reads at most one input row whose radius is not 0 (:func:`noisy_rows`), the output's
range over those intervals is computed exactly, at the ends and the kinks
(:func:`line_error`); otherwise each hidden unit gets its own interval (sound, but it loses
the cancellation inside tracr's ReLU pairs). Where tracr's discretisation puts a
threshold inside an interval (SelectorWidth beyond its exact length) the output is not a
clean one-hot and the MLP is not certified, with that input as witness.

The float32 terms are bounded per combination, per hidden unit and per output, whatever the
summation order (:func:`float32.dot_rounding`): only the terms non-zero at that combination
count (a zero weight, an input or a hidden unit that is exactly 0: adding an exact zero is
exact), a product with a weight +-1 or with an exact input 0 or +-1 (:func:`exact_inputs`) does
not round, and every other rounding is within half an ulp of its largest possible magnitude
(the whole sum for the last addition, the sum of the positive or of the negative parts for the
others); never more than gamma_k times the terms' magnitudes. The hidden values the second
layer reads lie in [relu(pre - e), relu(pre + e)] (e: input error and first-layer rounding),
so those intervals are its terms. The l1 bound of a written block is the largest, over the combinations, of
the sum of that combination's column bounds (at a real input whose ideal is combination i,
the block's error is at most that sum), never more than the sum of the row radii.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from depthcraft.verify.certify.float32 import U64, dot_rounding, gamma, up
from depthcraft.verify.certify.state import Block, Side, State, lin_err, side


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
    # float32 rounding of x W_1 + b_1, per hidden unit and combination (float32.dot_rounding)
    pre_err = dot_rounding(x - r_in, x + r_in, lambda: exact_inputs(x, r_in), w1, b1)
    hw = hw + pre_err
    h = np.maximum(pre, 0)
    lo, hi = np.maximum(pre - hw, 0), np.maximum(pre + hw, 0)
    y = h @ w2 + b2
    groups = noisy_rows(state, blocks, in_rows, w1)
    if groups is not None:  # every hidden unit reads at most one input row that errs: exact along each
        out_err = line_error(x, groups, w1, b1, w2, b2, pre_err)
    else:
        dev = np.maximum(hi - h, h - lo)  # [m, hidden]
        out_err = dev @ np.abs(w2) + dot_rounding(lo, hi, lambda: exact_inputs(lo, hi - lo), w2, b2)
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


def exact_inputs(x: np.ndarray, r) -> np.ndarray:
    """[m, n] bool: the input is exactly its ideal value ``x`` [m, n] (radius ``r`` 0, broadcast
    against x) and that value is 0, 1 or -1, so its product with any float32 weight is exact
    (:func:`float32.dot_rounding`). A hidden unit qualifies when its interval is the point 0
    or 1 (tracr's ``start`` unit, ReLU(one) = 1 exactly)."""
    x = np.asarray(x, np.float64)
    r = np.broadcast_to(np.asarray(r, np.float64), x.shape)
    return (r == 0) & ((x == 0) | (np.abs(x) == 1))


def noisy_rows(state: State, blocks: Dict[str, Block], in_rows: np.ndarray, w1: np.ndarray
               ) -> Optional[List[Tuple[int, float]]]:
    """[(j, r)]: the input rows the MLP reads (non-zero rows of ``w1`` [Din, hidden]) whose radius r
    is not 0 (within the block's l1 bound), when no hidden unit reads two of them; else None.

    The rows with radius 0 (``one``, the tokens: the exact embedding) hold their ideal values
    exactly, so the real input is x + sum_j t_j e_j, |t_j| <= r_j, and each hidden unit is a
    function of one t_j (or of none): tracr's discretising MLPs, one or several in parallel.
    """
    live = np.flatnonzero(np.abs(w1).sum(1) > 0)
    noisy = [int(j) for j in live if state.radius[in_rows[j]] > 0]
    if not noisy or (np.abs(w1[noisy]) > 0).sum(0).max(initial=0) > 1:
        return None
    row_name = {int(r): nm for nm, b in blocks.items() for r in b.rows}
    return [(j, float(min(state.radius[in_rows[j]], state.l1.get(row_name[int(in_rows[j])], np.inf))))
            for j in noisy]


def line_error(x: np.ndarray, groups: List[Tuple[int, float]], w1: np.ndarray, b1: np.ndarray,
               w2: np.ndarray, b2: np.ndarray, pre_err: np.ndarray) -> np.ndarray:
    """[m, Dout] bound on |real output - y(x)| when only the rows j of ``groups`` err, each by at most
    its r, and no hidden unit reads two of them (:func:`noisy_rows`).

    Soundness argument. The exact output is y = b_2 + sum_j y_j(t_j), y_j(t) = relu(pre_{G_j} + t
    W_1[j, G_j]) W_2[G_j] over the units G_j that read row j (the other units do not move), so
    |y - y(0)| <= sum_j max_{|t| <= r_j} |y_j(t) - y_j(0)|. Each y_j is piecewise linear in t, with
    kinks only where a unit's pre-activation crosses 0 (t_k = -pre_k / W_1[j, k]); on each piece
    |y_j(t) - y_j(0)| is convex, so its maximum over [-r_j, r_j] is at -r_j, r_j or a kink inside
    (a kink computed in float64 is within 2 u64 |t| of the true one: y_j moves by at most that
    times |W_1[j]| |W_2|). Evaluating y_j there gives its exact range, not the per-unit interval
    sum, which loses the cancellation of tracr's ReLU pairs ReLU(L(x - t) + 1) - ReLU(L(x - t)),
    each off by L r where their difference moves by at most L r, and is flat away from the ramp.
    Each evaluation is float64: within g64 = gamma(Din + hidden + 4, u64) of ((|x| + r)|W_1| +
    |b_1|)|W_2| + |b_2| (relu is 1-Lipschitz), counted twice (y(t) and y(0)). The float32 forward
    adds, per hidden unit, the rounding e_k of its pre-activation (|e_k| <= ``pre_err`` [m,
    hidden]): relu moves by at most |e_k|, and not at all for a unit whose pre-activation stays
    <= 0 (pre_k + |W_1[j, k]| r + |e_k| <= 0); and the rounding of h W_2 + b_2 per output
    column, :func:`float32.dot_rounding` over the real hidden values' intervals
    [lo, hi] = [relu(pre - |W_1[j, k]| r - |e_k|), relu(pre + |W_1[j, k]| r + |e_k|)].

    Args:
        x: [m, Din] ideal inputs; groups: [(j, r)]; w1 [Din, hidden], b1 [hidden], w2 [hidden,
        Dout], b2 [Dout]: the weights (float64); pre_err: [m, hidden].
    Returns:
        [m, Dout] float64 (not yet rounded outward: the caller rounds).
    """
    pre = x @ w1 + b1
    worst = np.zeros((len(x), w2.shape[1]))
    reach = np.zeros(w1.shape[1])  # |W_1[j, k]| r_j: how far unit k's pre-activation moves
    lip = np.zeros(w2.shape[1])
    for j, r in groups:
        g = np.flatnonzero(w1[j] != 0)
        slope, pg, wg = w1[j, g], pre[:, g], w2[g]
        reach[g] = np.abs(slope) * r
        y0 = np.maximum(pg, 0) @ wg
        dev = np.zeros_like(worst)
        for t in (-r, r):
            dev = np.maximum(dev, np.abs(np.maximum(pg + t * slope, 0) @ wg - y0))
        kink = -pg / slope  # [m, |g|]
        inside = np.abs(kink) < r
        for k in np.flatnonzero(inside.any(0)):
            rows = np.flatnonzero(inside[:, k])
            yk = np.maximum(pg[rows] + kink[rows, k][:, None] * slope, 0) @ wg
            dev[rows] = np.maximum(dev[rows], np.abs(yk - y0[rows]))
        worst += dev
        lip += 4 * U64 * r * (np.abs(slope) @ np.abs(wg))
    g64 = gamma(w1.shape[0] + w1.shape[1] + 4, U64)
    rad = np.zeros(x.shape[1])
    for j, r in groups:
        rad[j] = r
    mag = ((np.abs(x) + rad) @ np.abs(w1) + np.abs(b1)) @ np.abs(w2) + np.abs(b2)
    hi = np.maximum(pre + reach + pre_err, 0)
    lo = np.maximum(pre - reach - pre_err, 0)
    f32 = (np.where(hi > 0, pre_err, 0.0) @ np.abs(w2)
           + dot_rounding(lo, hi, lambda: exact_inputs(lo, hi - lo), w2, b2))
    return worst + lip[None, :] + 2 * g64 * mag + f32
