"""CRAFT weights for the hand-built heads (:mod:`constructions.nodes`, made by :mod:`constructions.primitives`).

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

from typing import Callable, Dict, List, Tuple

import numpy as np
from tracr.craft import bases, transformers, vectorspace_fns
from tracr.rasp import rasp

from depthcraft.constructions.errors import CompileError
from depthcraft.constructions import angles, setmlp
from depthcraft.constructions.directions import ONE, index_dir, model_position, position_space
from depthcraft.constructions.memory import build_memory
from depthcraft.constructions.nodes import POSITION, HeadRead, HeadSpec, Read, apply_fn, is_multi, is_pointer

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
        1/sqrt(d_head) scaling, which :mod:`constructions.compiler` compensates); a
        ``MultiAttentionHead`` for a ``memorise`` head (several heads, one output); a
        ``SeriesWithResiduals`` (head, threshold MLP) for a ``union`` head.
    Raises:
        CompileError: if a read's source is not in the residual stream, or the head
            kind does not exist in this position encoding.
    """
    if positions == "angle":
        angles.check_head(head)  # first: a memorise read-out has no angle form either
    if head.kind.selects == "readout":
        return build_memory(head, space_of, outputs, max_seq_len, bos_dir)
    qk = angles.angle_qk if positions == "angle" else _QK[head.kind.selects]
    w_qk = qk(head, space_of, max_seq_len, bos_dir)
    if head.kind.sets:
        return _union_block(head, w_qk, space_of, outputs, max_seq_len, bos_dir)
    w_ov = _ov(space_of, outputs, max_seq_len, bos_dir, positions)
    return transformers.AttentionHead(w_qk=w_qk, w_ov=w_ov,
                                      causal=head.kind.causal is True)


def _union_block(head: HeadSpec, w_qk, space_of, outputs, n: int, bos_dir) -> transformers.SeriesWithResiduals:
    """A ``union`` head: attention into scratch subspaces, then the threshold MLP into the reads' subspaces."""
    scratch = [(read, bases.VectorSpaceWithBasis([bases.BasisDirection(f"{d.name}_sum", d.value)
                                                  for d in out.basis])) for read, out in outputs]
    w_ov = _ov(space_of, scratch, n, bos_dir)
    attn = transformers.AttentionHead(w_qk=w_qk, w_ov=w_ov, causal=head.kind.causal is True)
    mlp = setmlp.threshold_mlp([(s, out) for (_, s), (_, out) in zip(scratch, outputs)],
                               setmlp.threshold_scale(head.attention, n), head.label)
    return transformers.SeriesWithResiduals([attn, mlp])


def _qk_union(head: HeadSpec, space_of, n: int, bos_dir) -> vectorspace_fns.ScalarBilinear:
    """``selects="union"``: 2g per (query element, key value) satisfying the predicate; BOS g (softmax).

    ReLU: 1 per satisfied pair, BOS 1 for the BOS query only. See
    :func:`constructions.primitives.union`.
    """
    g = head.hardness
    relu = head.attention == "relu"
    qspace, kspace = space_of(head.query), space_of(head.key)
    if set(kspace.basis) & {bos_dir} or set(qspace.basis) & {bos_dir, ONE}:
        raise CompileError(f"{head.label}: the union's query and key must not hold BOS or one")
    if not relu and g < setmlp.min_hardness(n):
        raise CompileError(f"{head.label}: hardness {g:g} is below ln(4N(N+1)) = {setmlp.min_hardness(n):.2f} "
                           f"for N = {n}: non-members would not stay below the threshold")
    if is_multi(head.query):
        for k in kspace.basis:
            hits = [q.value for q in qspace.basis if head.predicate(k.value, q.value)]
            if len(hits) > 1:
                raise CompileError(f"{head.label}: key value {k.value!r} satisfies the predicate for several "
                                   f"elements {hits[:4]} of the set-valued query; the matches would not tie")
    left = bases.join_vector_spaces(qspace, bases.VectorSpaceWithBasis([bos_dir if relu else ONE]))
    right = bases.join_vector_spaces(kspace, bases.VectorSpaceWithBasis([bos_dir]))

    def score(q, k):
        if k == bos_dir:
            return (1.0 if q == bos_dir else 0.0) if relu else (g if q == ONE else 0.0)
        if q in (ONE, bos_dir):
            return 0.0
        return (1.0 if relu else 2 * g) if head.predicate(k.value, q.value) else 0.0

    return vectorspace_fns.ScalarBilinear.from_action(left, right, score)


def _qk_pointer(head: HeadSpec, space_of, n: int, bos_dir) -> vectorspace_fns.ScalarBilinear:
    """``selects="pointer"`` (pointer_lookup): pointer value v against key position v scores 2g, BOS g."""
    g = head.hardness
    pos = position_space(n, bos_dir)
    left = bases.join_vector_spaces(space_of(head.query), bases.VectorSpaceWithBasis([ONE]))

    def score(q, k):
        if q == ONE:
            return g if k == bos_dir else 0.0
        return 2 * g if q.value == model_position(k, bos_dir) else 0.0

    return vectorspace_fns.ScalarBilinear.from_action(left, pos, score)


def _qk_search(head: HeadSpec, space_of, n: int, bos_dir) -> vectorspace_fns.ScalarBilinear:
    """``selects="search"`` (last_occurrence, last_occurrence_upto, fact_lookup).

    score = big * [match] + position table; BOS scores g(N+1) (see the factories'
    docstrings in :mod:`constructions.primitives`).
    """
    g = head.hardness
    pos = position_space(n, bos_dir)
    one = bases.VectorSpaceWithBasis([ONE])
    qspace, kspace = space_of(head.query), space_of(head.key)
    if set(kspace.basis) & set(pos.basis):
        raise CompileError(f"{head.kind}: the key SOp must not be tokens or indices themselves")
    big = g * (n + 1)
    pspace = space_of(head.pointer) if head.kind.pointer else None
    if pspace is not None and set(pspace.basis) & set(qspace.basis):
        raise CompileError(f"{head.kind}: the pointer and the query must be different SOps")
    left = bases.join_vector_spaces(*[s for s in (qspace, pspace, one) if s is not None])
    right = bases.join_vector_spaces(kspace, pos)

    def table(t: int, row) -> float:
        """Position-table entry of key model position t >= 1 for query direction ``row``."""
        if head.kind.pointer:  # the table sits on the pointer's one-hot (rows of value p)
            if row == ONE:
                return 0.0
            return g * t if t <= row.value else -big
        if head.kind.key_positions:
            return (g * t if head.key_positions(t) else -big) if row == ONE else 0.0
        return g * t if row == ONE else 0.0

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
                table[d] = out_dirs[apply_fn(read.fn, model_position(d, bos_dir))]
        else:
            src = space_of(read.source)
            for d in src.basis:
                if d == bos_dir:
                    continue
                value = apply_fn(read.fn, d.value)
                # A value map may send one value to a set (a union head's read): write every element.
                targets = [out_dirs[v] for v in sorted(value, key=repr) if v in out_dirs] \
                    if isinstance(value, frozenset) else ([out_dirs[value]] if value in out_dirs else [])
                if targets:
                    table[d] = targets
            if read.source is rasp.tokens and read.bos_value is not None:
                table[bos_dir] = out_dirs[read.bos_value]
        tables.append({d: (t if isinstance(t, list) else [t]) for d, t in table.items()})
        in_spaces.append(bases.VectorSpaceWithBasis(list(table)))
    input_space = bases.join_vector_spaces(*in_spaces)
    output_space = bases.join_vector_spaces(*out_spaces)

    def action(d):
        vec = output_space.null_vector()
        for table in tables:
            for target in table.get(d, ()):
                vec = vec + output_space.vector_from_basis_direction(target)
        return vec

    return vectorspace_fns.Linear.from_action(input_space, output_space, action)


# ---------------------------------------------------------------------------------------------
# position_map and match (Chen & Zou constructions): score tables accumulated in a matrix.
# ---------------------------------------------------------------------------------------------


class _Scores:
    """A QK score table over named left (query) and right (key) directions, filled term by term."""

    def __init__(self, left: List[bases.BasisDirection], right: List[bases.BasisDirection]):
        self.left = bases.VectorSpaceWithBasis(_unique(left))
        self.right = bases.VectorSpaceWithBasis(_unique(right))
        self._li = {d: i for i, d in enumerate(self.left.basis)}
        self._ri = {d: i for i, d in enumerate(self.right.basis)}
        self.matrix = np.zeros((self.left.num_dims, self.right.num_dims))

    def add(self, q: bases.BasisDirection, k: bases.BasisDirection, value: float) -> None:
        self.matrix[self._li[q], self._ri[k]] += value

    def score(self, q_vec: Dict[bases.BasisDirection, float], k_vec: Dict[bases.BasisDirection, float]) -> float:
        """q^T M k for sparse vectors given as {direction: coefficient}."""
        return float(sum(cq * ck * self.matrix[self._li[dq], self._ri[dk]]
                         for dq, cq in q_vec.items() if dq in self._li
                         for dk, ck in k_vec.items() if dk in self._ri))

    def bilinear(self) -> vectorspace_fns.ScalarBilinear:
        return vectorspace_fns.ScalarBilinear(self.left, self.right, self.matrix)


def _unique(dirs):
    seen: Dict[bases.BasisDirection, None] = {}
    for d in dirs:
        seen.setdefault(d, None)
    return list(seen)


def _positions(n: int, bos_dir) -> List[bases.BasisDirection]:
    return list(position_space(n, bos_dir).basis)


def _pos_dir(j: int, bos_dir) -> bases.BasisDirection:
    """Key-side direction of model position j (0 = BOS)."""
    return bos_dir if j == 0 else index_dir(j - 1)


def _qk_position_map(head: HeadSpec, space_of, n: int, bos_dir) -> vectorspace_fns.ScalarBilinear:
    """Query i (index i-1) -> key target(i). Softmax: 2g on the target (BOS: g from ONE); ReLU: exactly 1."""
    g = head.hardness
    relu = head.attention == "relu"
    targets = {}
    for i in range(1, n + 1):
        t = head.spec.target(i)
        if t is not None and not 0 <= t <= i:
            raise CompileError(f"{head.label}: target({i}) = {t} is not a position 0..{i} (causal)")
        targets[i] = t
    sc = _Scores([index_dir(t) for t in range(n)] + ([bos_dir] if relu else [ONE]), _positions(n, bos_dir))
    if relu:
        sc.add(bos_dir, bos_dir, 1.0)  # BOS attends to itself (its reads keep their BOS values)
        for i, t in targets.items():
            if t is not None:
                sc.add(index_dir(i - 1), _pos_dir(t, bos_dir), 1.0)
    else:
        sc.add(ONE, bos_dir, g)  # every query: BOS at g (the fallback, and target 0)
        for i, t in targets.items():
            if t:
                sc.add(index_dir(i - 1), _pos_dir(t, bos_dir), 2 * g)
    return sc.bilinear()


def _qk_match(head: HeadSpec, space_of, n: int, bos_dir) -> vectorspace_fns.ScalarBilinear:
    """``selects="match"``: scores of :func:`constructions.primitives.match` (see its docstring for the table)."""
    spec = head.spec
    pos = _positions(n, bos_dir)
    qdirs = [d for q, _ in spec.pairs for d in space_of(q).basis]
    kdirs = [d for _, k in spec.pairs for d in space_of(k).basis]
    if set(kdirs) & set(pos) or set(qdirs) & ({bos_dir, ONE} | {index_dir(t) for t in range(n)}):
        raise CompileError(f"{head.label}: the matched SOps must not be tokens:BOS, one or indices")
    window = [index_dir(t) for t in range(n)] if spec.where is not None else []
    relu = head.attention == "relu"
    sc = _Scores(qdirs + [ONE] + window + ([bos_dir] if relu else []), kdirs + pos)

    def outside(i: int, j: int) -> bool:
        return spec.where is not None and not spec.where(i, j)

    if not relu:
        g = head.hardness
        big = g * (n + 1)
        for q, k in spec.pairs:
            for dq in space_of(q).basis:
                for dk in space_of(k).basis:
                    if dq.value == dk.value:
                        sc.add(dq, dk, big)
        sc.add(ONE, bos_dir, big * len(spec.pairs))
        for j in range(1, n + 1):
            sc.add(ONE, _pos_dir(j, bos_dir), g * (j if spec.select == "last" else n + 1 - j))
        for i in range(1, n + 1):
            for j in range(1, i + 1):
                if outside(i, j):
                    sc.add(index_dir(i - 1), _pos_dir(j, bos_dir), -big)
        return sc.bilinear()

    # ReLU, select="all": score = 1 - sum_s d_s - [outside], d_s = 1 - [agree] or |Q Δ K|.
    constant = 1.0
    for q, k in spec.pairs:
        if is_multi(q) or is_multi(k):
            for dq in space_of(q).basis:
                for d in pos:
                    sc.add(dq, d, -1.0)  # -|Q|: every key has exactly one position direction
                for dk in space_of(k).basis:
                    if dq.value == dk.value:
                        sc.add(dq, dk, 2.0)  # +2<Q, K>
            for dk in space_of(k).basis:
                sc.add(ONE, dk, -1.0)  # -|K|
        else:
            constant -= 1.0
            for dq in space_of(q).basis:
                for dk in space_of(k).basis:
                    if dq.value == dk.value:
                        sc.add(dq, dk, 1.0)
    for d in pos:
        sc.add(ONE, d, constant)
    sc.add(ONE, bos_dir, -1.0)  # BOS is never a match
    for i in range(1, n + 1):
        for j in range(1, i + 1):
            if outside(i, j):
                sc.add(index_dir(i - 1), _pos_dir(j, bos_dir), -1.0)
    # The BOS query attends to BOS only, with weight exactly 1 (so BOS keeps its reads' BOS values).
    for d in pos:
        sc.add(bos_dir, d, -1.0)
    q_bos = {ONE: 1.0, bos_dir: 1.0, **_bos_vector([q for q, _ in spec.pairs], space_of, head)}
    k_bos = {bos_dir: 1.0, **_bos_vector([k for _, k in spec.pairs], space_of, head)}
    sc.add(bos_dir, bos_dir, 1.0 - sc.score(q_bos, k_bos))
    return sc.bilinear()


def _bos_vector(sops, space_of, head) -> Dict[bases.BasisDirection, float]:
    """Residual coefficients of ``sops`` at BOS (tokens: none in their value subspace)."""
    vec: Dict[bases.BasisDirection, float] = {}
    for s in sops:
        if s is rasp.tokens:
            continue
        if not isinstance(s, HeadRead):
            raise CompileError(f"{head.label}: a ReLU match needs SOps whose value at BOS is known "
                               f"(tokens or hand-built head outputs); {s.label} is neither")
        v = s.bos_value
        values = v if isinstance(v, frozenset) else ({v} if v is not None else set())
        for d in space_of(s).basis:
            if d.value in values:
                vec[d] = 1.0
    return vec


def _term_dirs(side, space_of, n: int, bos_dir) -> List[Tuple[bases.BasisDirection, object]]:
    """(direction, value) pairs of one side of a score term: model positions for POSITION, else SOp values."""
    if side is POSITION:
        return [(index_dir(t), t + 1) for t in range(n)]
    return [(d, d.value) for d in space_of(side).basis if d != bos_dir]


def _qk_score(head: HeadSpec, space_of, n: int, bos_dir) -> vectorspace_fns.ScalarBilinear:
    """``selects="score"`` (scored_lookup): g * sum of the term tables; g * bos_score to BOS; BOS -> BOS above all."""
    g = head.hardness
    spec = head.spec
    sides = [(_term_dirs(t.query, space_of, n, bos_dir), _term_dirs(t.key, space_of, n, bos_dir), t.score)
             for t in spec.terms]
    sc = _Scores([d for q, _, _ in sides for d, _ in q] + [ONE, bos_dir], [d for _, k, _ in sides for d, _ in k]
                 + [bos_dir])
    reach = abs(spec.bos_score)
    for qdirs, kdirs, f in sides:
        top = 0.0
        for dq, vq in qdirs:
            for dk, vk in kdirs:
                v = float(f(vq, vk))
                if v:
                    sc.add(dq, dk, g * v)
                    top = max(top, abs(v))
        reach += top
    sc.add(ONE, bos_dir, g * spec.bos_score)
    sc.add(bos_dir, bos_dir, g * (2 * reach + 1))  # BOS attends to itself, whatever its query values
    return sc.bilinear()


#: QK builder of each way of selecting (:attr:`HeadKind.selects`); "readout" heads are built by
#: :func:`constructions.memory.build_memory`.
_QK = {"position": _qk_position_map, "pointer": _qk_pointer, "search": _qk_search, "match": _qk_match,
       "union": _qk_union, "score": _qk_score}
