"""CRAFT weights for the hand-built heads of :mod:`constructions.primitives`.

Each builder returns a tracr ``craft.transformers.AttentionHead`` whose QK circuit
is a ``ScalarBilinear`` and whose OV circuit is a ``Linear`` over named residual
subspaces, so tracr's assembler turns it into ordinary weight matrices. The
score tables are documented on the primitives; here they are written down.

Residual directions used (tracr's naming):
``tokens:<v>`` one-hot token (``tokens:<BOS>`` marks BOS), ``indices:<t>`` one-hot
RASP index t (model position t+1; BOS has none), ``one`` (1 everywhere), and
``<sop label>:<v>`` for every categorical SOp.
"""

from __future__ import annotations

from typing import Callable, List, Tuple

from tracr.craft import bases, transformers, vectorspace_fns
from tracr.rasp import rasp

from constructions.errors import CompileError
from constructions import angles
from constructions.primitives import POSITION, HeadSpec, Read, is_pointer

ONE = bases.BasisDirection("one")


def _index_dir(t: int) -> bases.BasisDirection:
    return bases.BasisDirection(rasp.indices.label, t)


def position_space(max_seq_len: int, bos_dir: bases.BasisDirection) -> bases.VectorSpaceWithBasis:
    """Key-side one-hot of the model position: ``indices:0..N-1`` plus the BOS direction."""
    return bases.VectorSpaceWithBasis([_index_dir(t) for t in range(max_seq_len)] + [bos_dir])


def model_position(direction: bases.BasisDirection, bos_dir: bases.BasisDirection) -> int:
    """Model position encoded by a direction of :func:`position_space` (BOS = 0)."""
    return 0 if direction == bos_dir else int(direction.value) + 1


def build_head(head: HeadSpec, space_of: Callable[[rasp.SOp], bases.VectorSpaceWithBasis],
               outputs: List[Tuple[Read, bases.VectorSpaceWithBasis]], max_seq_len: int,
               bos_dir: bases.BasisDirection, positions: str = "onehot") -> transformers.AttentionHead:
    """Build the CRAFT attention head for ``head``.

    Args:
        head: the RASP-level head.
        space_of: residual subspace (tracr ``VectorSpaceWithBasis``) of an SOp.
        outputs: (read, output subspace) for every output SOp of the head.
        max_seq_len: N, the number of token positions (BOS excluded).
        bos_dir: the ``tokens:<BOS>`` direction.
        positions: ``"onehot"`` (tracr's indices) or ``"angle"`` (see :mod:`constructions.angles`).
    Returns:
        A ``tracr.craft.transformers.AttentionHead`` (logits in nats, before tracr's
        1/sqrt(d_head) scaling, which :mod:`constructions.compiler` compensates).
    Raises:
        CompileError: if a read's source is not in the residual stream, or the head
            kind does not exist in this position encoding.
    """
    if positions == "angle":
        w_qk = angles.angle_qk(head, space_of, max_seq_len, bos_dir)
    else:
        w_qk = _qk(head, space_of, max_seq_len, bos_dir)
    w_ov = _ov(space_of, outputs, max_seq_len, bos_dir, positions)
    return transformers.AttentionHead(w_qk=w_qk, w_ov=w_ov,
                                      causal=head.kind in ("last_occurrence", "last_occurrence_upto"))


def _qk(head: HeadSpec, space_of, n: int, bos_dir) -> vectorspace_fns.ScalarBilinear:
    g = head.hardness
    pos = position_space(n, bos_dir)
    one = bases.VectorSpaceWithBasis([ONE])
    if head.kind == "prev_token":
        idx = bases.VectorSpaceWithBasis([_index_dir(t) for t in range(n)])
        left = bases.join_vector_spaces(idx, one)

        def score(q, k):
            if q == ONE:
                return g if k == bos_dir else 0.0
            return 2 * g if (k != bos_dir and k.value == q.value - 1) else 0.0

        return vectorspace_fns.ScalarBilinear.from_action(left, pos, score)

    if head.kind == "pointer_lookup":
        left = bases.join_vector_spaces(space_of(head.query), one)

        def score(q, k):
            if q == ONE:
                return g if k == bos_dir else 0.0
            return 2 * g if q.value == model_position(k, bos_dir) else 0.0

        return vectorspace_fns.ScalarBilinear.from_action(left, pos, score)

    # The matching kinds: last_occurrence, last_occurrence_upto, fact_lookup.
    # score = big * [match] + position table; BOS scores g(N+1) (see the primitives).
    qspace, kspace = space_of(head.query), space_of(head.key)
    if set(kspace.basis) & set(pos.basis):
        raise CompileError(f"{head.kind}: the key SOp must not be tokens or indices themselves")
    big = g * (n + 1)
    pspace = space_of(head.pointer) if head.kind == "last_occurrence_upto" else None
    if pspace is not None and set(pspace.basis) & set(qspace.basis):
        raise CompileError("last_occurrence_upto: the pointer and the query must be different SOps")
    left = bases.join_vector_spaces(*[s for s in (qspace, pspace, one) if s is not None])
    right = bases.join_vector_spaces(kspace, pos)

    def table(t: int, row) -> float:
        """Position-table entry of key model position t >= 1 for query direction ``row``."""
        if head.kind == "last_occurrence":
            return g * t if row == ONE else 0.0
        if head.kind == "fact_lookup":
            return (g * t if head.key_positions(t) else -big) if row == ONE else 0.0
        # last_occurrence_upto: the table sits on the pointer's one-hot (rows of value p).
        if row == ONE:
            return 0.0
        return g * t if t <= row.value else -big

    def score(q, k):
        if k == bos_dir:
            return g * (n + 1) if q == ONE else 0.0
        if k in pos:
            if q == ONE or (pspace is not None and q in pspace):
                return table(model_position(k, bos_dir), q)
            return 0.0
        if q in qspace:
            return big if head.predicate(k.value, q.value) else 0.0
        return 0.0

    return vectorspace_fns.ScalarBilinear.from_action(left, right, score)


def _ov(space_of, outputs, n: int, bos_dir, positions: str = "onehot") -> vectorspace_fns.Linear:
    # For each output: a map from source directions to the output's directions.
    tables = []
    in_spaces = []
    out_spaces = [out for _, out in outputs]
    for read, out in outputs:
        out_dirs = {d.value: d for d in out.basis}
        table = {}
        if positions == "angle" and (read.source is POSITION or is_pointer(read.source)):
            # Pointers are (cos, sin) pairs: copy both numbers.
            src = angles.POSITION_DIRECTIONS[:2] if read.source is POSITION else space_of(read.source).basis
            for d in src:
                table[d] = out_dirs[d.value]
        elif read.source is POSITION:
            for d in position_space(n, bos_dir).basis:
                table[d] = out_dirs[model_position(d, bos_dir)]
        else:
            src = space_of(read.source)
            for d in src.basis:
                if d == bos_dir or d.value not in out_dirs:
                    continue
                table[d] = out_dirs[d.value]
            if read.source is rasp.tokens and read.bos_value is not None:
                table[bos_dir] = out_dirs[read.bos_value]
        tables.append(table)
        in_spaces.append(bases.VectorSpaceWithBasis(list(table)))
    input_space = bases.join_vector_spaces(*in_spaces)
    output_space = bases.join_vector_spaces(*out_spaces)

    def action(d):
        vec = output_space.null_vector()
        for table in tables:
            if d in table:
                vec = vec + output_space.vector_from_basis_direction(table[d])
        return vec

    return vectorspace_fns.Linear.from_action(input_space, output_space, action)
