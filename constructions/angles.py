"""Angle (cos, sin) position encoding: hand-built heads whose width does not depend on N.

With ``compile_program(..., positions="angle")`` the one-hot ``indices`` block of
tracr's position embedding is replaced by three fixed numbers per model position
t = 0..N (BOS is t = 0):

* ``position:cos``, ``position:sin``: cos θ_t, sin θ_t with θ_t = 2π t / (N+1),
  so the N+1 positions are distinct points on the unit circle;
* ``position:lin``: t / (N+1), used only as a linear recency score.

Every pointer (a read of ``POSITION``, or a read of another pointer) is stored as
two residual numbers ``<label>:cos``, ``<label>:sin`` (the angle of the position
it points to) instead of a one-hot over N+1 positions. Tokens stay one-hot, so the
residual width is O(|Σ| log k) for k-hop, independent of N: the regime of
Sanford, Hsu & Telgarsky (2024), Thm 4.2 with m = O(1) width.

Heads (QK as a bilinear form on these directions, in nats; "hardmax by
scaling": each score is multiplied so that the intended key wins by ``hardness``):

* ``prev_token``: score(i, j) = β cos(θ_i - δ - θ_j), δ = 2π/(N+1): the query's
  angle rotated back by one step, so the maximum is at j = i-1 and every other key
  is at least β(1 - cos δ) = ``hardness`` lower.
* ``pointer_lookup``: score(i, j) = β cos(θ_p(i) - θ_j), maximal at j = p(i);
  pointer 0 is BOS's angle, so ⊥ propagates without a special case.
* ``last_occurrence``: score = B [token match] + g (N+1) · position:lin_j, BOS
  g(N+1): the same table as the one-hot head with a linear recency score.

Precision: β = g / (1 - cos δ) ≈ g (N+1)² / (2π²), so the scores are of size
~N² while the gap stays g: resolving them needs about 2 log2 N + O(1) mantissa
bits (the theorem assumes Θ(log N) bits). ``depthcraft precision`` measures it.

``last_occurrence_upto`` (the floor construction) and ``fact_lookup`` need a
position *table* (a step function of the key position), which is not bilinear
in (cos, sin); they are refused in angle mode, as are ``position_map``,
``match`` and ``memorise`` (their scores read one-hot positions too).
"""

from __future__ import annotations

import math
from typing import Callable, Dict

import numpy as np
from tracr.craft import bases, vectorspace_fns
from tracr.rasp import rasp

from depthcraft.constructions.directions import ONE
from depthcraft.constructions.errors import CompileError
from depthcraft.constructions.nodes import HeadSpec, is_pointer

POS_COS = bases.BasisDirection("position", "cos")
POS_SIN = bases.BasisDirection("position", "sin")
POS_LIN = bases.BasisDirection("position", "lin")
#: The residual directions the angle position embedding writes.
POSITION_DIRECTIONS = (POS_COS, POS_SIN, POS_LIN)


def angle_step(max_seq_len: int) -> float:
    """δ = 2π / (N+1): the angle between consecutive model positions (radians)."""
    return 2.0 * math.pi / (max_seq_len + 1)


def position_features(max_seq_len: int) -> Dict[str, np.ndarray]:
    """The angle position embedding: ``{"cos", "sin", "lin"}`` -> [N+1] float64 arrays (t = 0..N)."""
    t = np.arange(max_seq_len + 1, dtype=np.float64)
    theta = t * angle_step(max_seq_len)
    return {"cos": np.cos(theta), "sin": np.sin(theta), "lin": t / (max_seq_len + 1)}


def angle_space(label: str) -> bases.VectorSpaceWithBasis:
    """Residual subspace of a pointer SOp in angle mode: ``<label>:cos``, ``<label>:sin``."""
    return bases.VectorSpaceWithBasis([bases.BasisDirection(label, "cos"), bases.BasisDirection(label, "sin")])


def _lookup_scale(hardness: float, max_seq_len: int) -> float:
    """β with β (1 - cos δ) = hardness: the nearest wrong angle scores ``hardness`` lower."""
    return hardness / (1.0 - math.cos(angle_step(max_seq_len)))


def check_head(head: HeadSpec) -> None:
    """Refuse a head whose kind has no angle form (:attr:`~constructions.nodes.HeadKind.angle`).

    Raises:
        CompileError: the head kind needs one-hot positions.
    """
    if not head.kind.angle:
        raise CompileError(f"{head.kind} needs one-hot positions (its position table is not bilinear in "
                           f"(cos, sin)); compile with positions='onehot'")


def angle_qk(head: HeadSpec, space_of: Callable[[rasp.SOp], bases.VectorSpaceWithBasis], n: int,
             bos_dir: bases.BasisDirection) -> vectorspace_fns.ScalarBilinear:
    """QK circuit of ``head`` in angle mode (scores in nats, see the module docstring).

    Args:
        head: the RASP-level head.
        space_of: residual subspace of an SOp (pointers: :func:`angle_space`).
        n: N, max_seq_len.
        bos_dir: the ``tokens:<BOS>`` direction.
    Raises:
        CompileError: the head kind needs one-hot positions, or a pointer_lookup
            query is not a pointer.
    """
    check_head(head)
    g = head.hardness
    circle = bases.VectorSpaceWithBasis([POS_COS, POS_SIN])
    # The kinds with an angle QK (HeadKind.angle): prev_token ("position": the map i -> i-1 is a
    # rotation), pointer_lookup ("pointer") and last_occurrence ("search" up to the query).
    if head.kind.selects == "position":
        beta, d = _lookup_scale(g, n), angle_step(n)
        # q·M·k = cos(θ_i - δ - θ_j) for q = (cos θ_i, sin θ_i), k = (cos θ_j, sin θ_j).
        rot = {(POS_COS, POS_COS): math.cos(d), (POS_SIN, POS_COS): math.sin(d),
               (POS_COS, POS_SIN): -math.sin(d), (POS_SIN, POS_SIN): math.cos(d)}
        return vectorspace_fns.ScalarBilinear.from_action(circle, circle, lambda q, k: beta * rot[(q, k)])
    if head.kind.selects == "pointer":
        if not is_pointer(head.query):
            raise CompileError(f"angle mode: {head.kind} needs a pointer SOp (a read of POSITION), "
                               f"got {head.query.label}")
        beta = _lookup_scale(g, n)
        left = space_of(head.query)
        return vectorspace_fns.ScalarBilinear.from_action(
            left, circle, lambda q, k: beta if q.value == k.value else 0.0)
    if head.kind.selects == "search" and not (head.kind.pointer or head.kind.key_positions):
        qspace, kspace = space_of(head.query), space_of(head.key)
        left = bases.join_vector_spaces(qspace, bases.VectorSpaceWithBasis([ONE]))
        right = bases.join_vector_spaces(kspace, bases.VectorSpaceWithBasis([POS_LIN, bos_dir]))
        big = g * (n + 1)

        def score(q, k):
            if q == ONE:
                return big if k in (POS_LIN, bos_dir) else 0.0  # lin = t/(N+1): g*t; BOS: g(N+1)
            if k in (POS_LIN, bos_dir):
                return 0.0
            return big if head.predicate(k.value, q.value) else 0.0

        return vectorspace_fns.ScalarBilinear.from_action(left, right, score)
    raise CompileError(f"{head.kind} is marked angle=True but has no angle QK here")  # a table/code mismatch
