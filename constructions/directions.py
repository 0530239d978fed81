"""Residual-stream directions shared by the hand-built heads (``heads``, ``memory``, ``angles``).

tracr names a categorical direction ``(label, value)``: RASP ``indices`` value t is
model position t+1 (BOS, position 0, has its own ``tokens:BOS`` direction), and the
constant direction is ``one``.
"""

from __future__ import annotations

from tracr.craft import bases
from tracr.rasp import rasp

#: tracr's constant direction (value 1 at every position).
ONE = bases.BasisDirection("one")


def index_dir(t: int) -> bases.BasisDirection:
    """The one-hot direction of RASP index t (model position t+1)."""
    return bases.BasisDirection(rasp.indices.label, t)


def position_space(max_seq_len: int, bos_dir: bases.BasisDirection) -> bases.VectorSpaceWithBasis:
    """Key-side one-hot of the model position: ``indices:0..N-1`` plus the BOS direction."""
    return bases.VectorSpaceWithBasis([index_dir(t) for t in range(max_seq_len)] + [bos_dir])


def model_position(direction: bases.BasisDirection, bos_dir: bases.BasisDirection) -> int:
    """Model position encoded by a direction of :func:`position_space` (BOS = 0)."""
    return 0 if direction == bos_dir else int(direction.value) + 1
