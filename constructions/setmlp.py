"""MLP weights of the set operations: the ``union`` head's threshold and the ``meet`` read-out.

A set-valued SOp (:func:`constructions.nodes.is_multi`) is a multi-hot vector over the
directions ``<label>:<element>``. Averaging such vectors by attention (the ``union``
head, :func:`constructions.primitives.union`) leaves fractions; the threshold MLP
here turns them back into exact 0/1. The ``meet`` MLP
(:func:`constructions.primitives.meet`) decides whether two multi-hot vectors share
a 1. Both are tracr CRAFT ``MLP`` blocks (ReLU hidden layer), so tracr's assembler
turns them into ordinary weights; every hidden unit is written out below.
"""

from __future__ import annotations

import math
from typing import List, Sequence, Tuple

import numpy as np
from tracr.craft import bases, transformers, vectorspace_fns

from depthcraft.constructions.directions import ONE
from depthcraft.constructions.errors import CompileError


def threshold_scale(attention: str, max_seq_len: int) -> float:
    """Slope s of the union threshold x -> clip(s x - 1/2, 0, 1).

    Softmax: an element held by a matching key has weight >= 1/(N+1), so s = 2(N+1)
    puts it at >= 3/2 (output 1); ReLU: the scratch holds counts (>= 1 for members),
    s = 2. Non-members must stay below 1/(2s) (output 0).
    """
    return 2.0 * (max_seq_len + 1) if attention == "softmax" else 2.0


def min_hardness(max_seq_len: int) -> float:
    """Smallest softmax hardness g for which a union head's non-members stay at output 0.

    A non-member's weight is at most N e^-g (every non-matching key scores <= g below
    BOS or a match); it must be <= 1/(4(N+1)), a quarter of the threshold's width:
    g >= ln(4 N (N + 1)).
    """
    n = max_seq_len
    return math.log(4.0 * n * (n + 1))


def threshold_mlp(pairs: Sequence[Tuple[bases.VectorSpaceWithBasis, bases.VectorSpaceWithBasis]],
                  scale: float, tag: str) -> transformers.MLP:
    """The union head's threshold: for each (scratch, output) pair of equal-valued spaces,
    out_e = ReLU(s x_e - 1/2) - ReLU(s x_e - 3/2) = clip(s x_e - 1/2, 0, 1).

    Args:
        pairs: (scratch space, output space) per read; directions correspond by value.
        scale: the slope s (:func:`threshold_scale`).
        tag: unique prefix of the hidden units' names (the head's label).
    Returns:
        A CRAFT MLP with 2 hidden units per element; reads ``one`` for the biases.
    """
    in_dirs: List[bases.BasisDirection] = [ONE]
    hidden: List[bases.BasisDirection] = []
    out_dirs: List[bases.BasisDirection] = []
    for scratch, out in pairs:
        in_dirs += list(scratch.basis)
        out_dirs += list(out.basis)
        for d in scratch.basis:
            hidden += [bases.BasisDirection(f"_{tag}_hidden", (d.name, d.value, 0)),
                       bases.BasisDirection(f"_{tag}_hidden", (d.name, d.value, 1))]
    in_space = bases.VectorSpaceWithBasis(in_dirs)
    hid_space = bases.VectorSpaceWithBasis(hidden)
    out_space = bases.VectorSpaceWithBasis(out_dirs)
    w1 = np.zeros((in_space.num_dims, hid_space.num_dims))
    w2 = np.zeros((hid_space.num_dims, out_space.num_dims))
    ii = {d: i for i, d in enumerate(in_space.basis)}
    hi = {d: i for i, d in enumerate(hid_space.basis)}
    oi = {d: i for i, d in enumerate(out_space.basis)}
    for scratch, out in pairs:
        target = {d.value: d for d in out.basis}
        for d in scratch.basis:
            if d.value not in target:
                raise CompileError(f"{tag}: scratch direction {d} has no output direction")
            for step, bias in ((0, -0.5), (1, -1.5)):
                h = hi[bases.BasisDirection(f"_{tag}_hidden", (d.name, d.value, step))]
                w1[ii[d], h] = scale
                w1[ii[ONE], h] = bias
                w2[h, oi[target[d.value]]] = 1.0 if step == 0 else -1.0
    return transformers.MLP(vectorspace_fns.Linear(in_space, hid_space, w1),
                            vectorspace_fns.Linear(hid_space, out_space, w2))


def meet_mlp(a: bases.VectorSpaceWithBasis, b: bases.VectorSpaceWithBasis, out: bases.VectorSpaceWithBasis,
             tag: str) -> transformers.MLP:
    """The meet read-out: out:1 = 2 sum_e ReLU(a_e + b_e - 1), out:0 = ReLU(one) = 1.

    Args:
        a, b: the two set-valued SOps' spaces (elements are the directions' values).
        out: the output space, values {0, 1}.
        tag: unique prefix of the hidden units' names.
    Returns:
        A CRAFT MLP with one hidden unit per common element and one constant unit.
    """
    by_value = {d.value: d for d in b.basis}
    common = [d for d in a.basis if d.value in by_value]
    in_space = bases.join_vector_spaces(bases.VectorSpaceWithBasis([ONE]), a, b)
    hidden = [bases.BasisDirection(f"_{tag}_hidden", ("const",))] + \
        [bases.BasisDirection(f"_{tag}_hidden", ("meet", d.value)) for d in common]
    hid_space = bases.VectorSpaceWithBasis(hidden)
    w1 = np.zeros((in_space.num_dims, hid_space.num_dims))
    w2 = np.zeros((hid_space.num_dims, out.num_dims))
    ii = {d: i for i, d in enumerate(in_space.basis)}
    oi = {d.value: i for i, d in enumerate(out.basis)}
    w1[ii[ONE], 0] = 1.0
    w2[0, oi[0]] = 1.0
    for h, d in enumerate(common, start=1):
        w1[ii[d], h] = 1.0
        w1[ii[by_value[d.value]], h] = 1.0
        w1[ii[ONE], h] = -1.0
        w2[h, oi[1]] = 2.0
    return transformers.MLP(vectorspace_fns.Linear(in_space, hid_space, w1),
                            vectorspace_fns.Linear(hid_space, out, w2))
