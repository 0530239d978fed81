"""Compile-time solver for :func:`constructions.primitives.memorise` heads (kind ``memorise``).

One attention layer memorises E labelled inputs at their read-out position R
(Mahdavi, Liao & Thrampoulidis, "Memorization capacity of multi-head attention in
transformers", ICLR 2024, specialised to one-hot token and position inputs):

1. Each key position t = 0..R (0 = BOS) has a residual vector r_t: the one-hot values
   of the head's key SOps plus the one-hot position.
2. Head h has a fixed random QK table u_h (seeded): score_h(t) = u_h . r_t, weights
   w_h(t) = softmax_t(score_h) (or ReLU(score_h)).
3. The read-out is sum_h W_h^T F_h with features F_h = sum_t w_h(t) r_t, linear in the
   OV matrices W_h: least squares puts exactly the one-hot label of every example on the
   output when the E feature vectors are linearly independent.

A softmax head contributes n + V - 1 independent feature dimensions (n positions, V key
values), the constant being shared, so E examples need H = ceil((E - 1) / (n + V - 2))
heads for generic scores: the fewest in exact arithmetic. The model runs in float32,
though, and at that count the E x H(n + V - 1) feature matrix F can be nearly square
(only H(n + V - 2) + 1 - E spare dimensions), so badly conditioned that the minimum-norm
OV weights are huge and float32 rounding swamps the read-out (sc_memorize, M = 4096:
H = 410 leaves 5 spare dimensions, cond(F) = 2.6e10, |W| up to 1.4e7, float32 read-out
error 4.1). A head count is therefore
accepted only when the read-out is also close to the labels evaluated in float32
(:data:`FLOAT32_TOL`); otherwise more heads are tried (M = 4096: 426 heads). ReLU heads are additive over positions: all heads together span
at most the (position, value) one-hot encodings of the examples plus a constant, so ReLU
interpolation needs those to be linearly independent (at most 1 + n (V - 1) examples).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Dict, List, Tuple

import numpy as np
from tracr.craft import bases, transformers, vectorspace_fns

from depthcraft.constructions.directions import ONE, index_dir
from depthcraft.constructions.errors import CompileError
from depthcraft.constructions.nodes import HeadRead, HeadSpec, MemorySpec
from depthcraft.constructions.reference import memory_keys, memory_table

#: Largest |F W - Y| accepted for the least-squares solution (float64, before float32 weights).
RESIDUAL_TOL = 1e-6
#: Largest |F W - Y| accepted when F and W are evaluated in float32 as the model runs them
#: (float32 QK tables, softmax and read-out, OV weights rounded to float32): a quarter of
#: the one-hot labels' gap of 1, so the right label reads >= 3/4 (a categorical output
#: needs > 1/2) and the others <= 1/4. An estimate in one evaluation order, not a bound on
#: the compiled model's (sc_memorize, M = 4096: accepted at 426 heads, measured gap 0.47).
FLOAT32_TOL = 0.25
#: Extra heads tried, one at a time, beyond the generic count when the float64 solve fails.
EXTRA_HEADS = 8


def key_space(spec: MemorySpec, space_of, n: int, bos_dir) -> bases.VectorSpaceWithBasis:
    """The residual directions every memory head reads: key SOp values, positions 1..n, BOS."""
    dirs: Dict[bases.BasisDirection, None] = {}
    for k in spec.keys:
        for d in space_of(k).basis:
            dirs.setdefault(d, None)
    for t in range(n):
        dirs.setdefault(index_dir(t), None)
    dirs.setdefault(bos_dir, None)
    return bases.VectorSpaceWithBasis(list(dirs))


def residuals(spec: MemorySpec, keys, space: bases.VectorSpaceWithBasis, bos_dir) -> np.ndarray:
    """r_t for every example: [E, R + 1, D] (t = 0 is BOS).

    Args:
        keys: per example, the key SOps' reference values (:func:`memory_keys`).
    """
    index = {d: i for i, d in enumerate(space.basis)}
    by_label: Dict[str, Dict] = {}
    for d in space.basis:
        by_label.setdefault(d.name, {})[d.value] = index[d]
    r_len = spec.length
    out = np.zeros((len(keys), r_len + 1, space.num_dims))
    out[:, 0, index[bos_dir]] = 1.0
    for t in range(r_len):
        out[:, t + 1, index[index_dir(t)]] = 1.0
    for e, key in enumerate(keys):
        for k, vals in zip(spec.keys, key):
            dirs = by_label.get(k.label, {})
            bos = k.bos_value if isinstance(k, HeadRead) else None
            for t, v in enumerate([bos] + list(vals)):
                for x in (v if isinstance(v, frozenset) else [v]):
                    if x is not None and x in dirs:
                        out[e, t, dirs[x]] = 1.0
    return out


def features(res: np.ndarray, u: np.ndarray, attention: str) -> np.ndarray:
    """Per-head features F_h = sum_t w_h(t) r_t: res [E, T, D], u [H, D] -> [E, H, D]."""
    scores = np.einsum("etd,hd->eht", res, u)
    if attention == "relu":
        w = np.maximum(scores, 0.0)
    else:
        w = np.exp(scores - scores.max(-1, keepdims=True))
        w /= w.sum(-1, keepdims=True)
    return np.einsum("eht,etd->ehd", w, res)


def readout_error32(res: np.ndarray, u: np.ndarray, w: np.ndarray, targets: np.ndarray, attention: str) -> float:
    """max |F W - Y| with everything in float32, as the compiled model computes it.

    Args:
        res: [E, T, D] key residuals; u: [H, D] QK tables; w: [H, D, C] OV matrices
            (float64, rounded to float32 here as the model stores them); targets: [E, C].
    """
    f32 = features(res.astype(np.float32), u.astype(np.float32), attention)
    out = np.einsum("ehd,hdc->ec", f32, w.astype(np.float32))
    return float(np.abs(out.astype(np.float64) - targets).max())


def solve(spec: MemorySpec, attention: str, res: np.ndarray, targets: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Pick the QK tables and solve the OV matrices.

    The least-squares solve is in float64; a head count is accepted when its residual is
    below :data:`RESIDUAL_TOL` there and below :data:`FLOAT32_TOL` with the features
    and weights in float32 (:func:`readout_error32`). Default counts: from the generic
    one, ceil((E - 1) / (r1 - 1)) with r1 the rank of one head's features, one more head
    after a float64 failure (up to :data:`EXTRA_HEADS` extra) and twice as many extra
    heads after a float32 failure (1, 2, 4, ..: conditioning improves with the spare
    dimensions), never more than E heads nor twice the generic count.

    Args:
        res: [E, T, D] key residuals of the distinct examples.
        targets: [E, C] one-hot labels.
    Returns:
        (u [H, D] score tables, W [H, D, C] OV matrices) with sum_h F_h W_h = targets.
    Raises:
        CompileError: no head count up to the limit interpolates the examples (in float64),
            or none that does keeps the float32 read-out within :data:`FLOAT32_TOL` (the
            message gives the counts tried and the float32 error of the last).
    """
    e, _, d = res.shape
    rng = np.random.default_rng(spec.seed)
    draw = lambda h: rng.normal(0.0, spec.scale, size=(h, d))  # noqa: E731
    u = draw(1)
    if spec.heads is not None:
        first, top = spec.heads, spec.heads
    else:
        r1 = np.linalg.matrix_rank(features(res, u, attention)[:, 0])
        first = min(e, 1 if r1 <= 1 else max(1, math.ceil((e - 1) / (r1 - 1))))
        top = min(e, first + max(EXTRA_HEADS, first))
    counts: List[int] = []
    last_rank, err32, h = None, None, first
    while h <= top:
        counts.append(h)
        if len(u) < h:
            u = np.concatenate([u, draw(h - len(u))])
        f = features(res, u[:h], attention).reshape(e, -1)
        w, *_ = np.linalg.lstsq(f, targets, rcond=None)
        err = np.abs(f @ w - targets).max()
        if err < RESIDUAL_TOL:
            w = w.reshape(h, d, -1)
            err32 = readout_error32(res, u[:h], w, targets, attention)
            if err32 <= FLOAT32_TOL:
                return u[:h], w
            if h == top:
                break
            h = min(top, first + max(1, 2 * (h - first)))  # interpolates; too ill-conditioned for float32
            continue
        err32 = None
        rank = np.linalg.matrix_rank(f)
        if attention == "relu" and rank == last_rank:
            break  # ReLU features are additive: more heads add nothing
        last_rank = rank
        if h >= first + EXTRA_HEADS:
            break
        h += 1
    tried = f"{counts[0]} heads" if len(counts) == 1 else f"tried {', '.join(map(str, counts))} heads"
    if err32 is not None:
        raise CompileError(f"memorise: {attention} heads interpolate {e} examples in float64 but the float32 "
                           f"read-out errs by {err32:.3g} > {FLOAT32_TOL} ({tried}; the least-squares system "
                           "is too ill-conditioned for float32 weights)")
    why = ("one-layer ReLU attention reads an additive function of (position, value) pairs, whose "
           f"features span only {last_rank} of the {e} needed dimensions here; use softmax attention"
           if attention == "relu" else tried)
    raise CompileError(f"memorise: cannot interpolate {e} examples with {attention} heads ({why})")


def build_memory(head: HeadSpec, space_of, outputs, max_seq_len: int, bos_dir) -> transformers.MultiAttentionHead:
    """The CRAFT heads of a memorise head: random QK tables, least-squares OV into the label space.

    Args:
        head: the ``memorise`` HeadSpec (examples, labels, attention kind, heads, seed).
        space_of: maps an SOp to its residual subspace (tracr bases).
        outputs: the HeadRead SOps of the head (its label read).
        max_seq_len: N, longest input.
        bos_dir: the residual direction of the BOS token.
    Returns:
        A tracr ``MultiAttentionHead`` with H heads (the fewest that interpolate, see :func:`solve`, or forced).
    Raises:
        CompileError: examples longer than N, conflicting labels, no head count up to
            the limit interpolates the examples, or the label read is unused.
    """
    spec: MemorySpec = head.spec
    if spec.length > max_seq_len:
        raise CompileError(f"{head.label}: examples of length {spec.length} exceed max_seq_len={max_seq_len}")
    space = key_space(spec, space_of, max_seq_len, bos_dir)
    keys = memory_keys(spec)
    table = memory_table(spec, keys)  # raises on conflicting labels
    first = {key: i for i, key in reversed(list(enumerate(keys)))}  # one example per distinct key tuple
    keep = sorted(first[k] for k in table)
    distinct = dataclasses.replace(spec, examples=tuple(spec.examples[i] for i in keep),
                                   labels=tuple(spec.labels[i] for i in keep))
    res = residuals(distinct, [keys[i] for i in keep], space, bos_dir)
    out_spaces = [out for _, out in outputs]
    if not out_spaces:
        raise CompileError(f"{head.label}: its label is not used")
    out_space = bases.join_vector_spaces(*out_spaces)
    col = {}
    for j, dvec in enumerate(out_space.basis):
        col.setdefault(dvec.value, []).append(j)
    targets = np.zeros((len(keep), out_space.num_dims))
    for e, lab in enumerate(distinct.labels):
        targets[e, col[lab]] = 1.0
    u, w = solve(distinct, head.attention, res, targets)
    one_space = bases.VectorSpaceWithBasis([ONE])
    heads: List[transformers.AttentionHead] = []
    for h in range(len(u)):
        qk = vectorspace_fns.ScalarBilinear(one_space, space, u[h][None, :])
        ov = vectorspace_fns.Linear(space, out_space, w[h])
        heads.append(transformers.AttentionHead(w_qk=qk, w_ov=ov, causal=head.kind.causal is True))
    return transformers.MultiAttentionHead(heads)
