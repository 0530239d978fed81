"""RASP programs for k-hop induction heads (Sanford, Hsu & Telgarsky, ICML 2024).

Task (Definition 4.1, SPEC §4.1): find(X, i) = max({0} ∪ {j : 2 <= j <= i,
x_{j-1} = x_i}); find^k = find iterated k times (find(0) = 0); the output at
position i is hop_k(X)_i = x_{find^k(i)}, or ⊥ when find^k(i) = 0. Pointers are
model positions (BOS = 0 = ⊥), see :mod:`constructions.primitives`.

Three programs compute the same function:

* :func:`khop_doubling`: the pointer-doubling construction of Theorem 4.2 with
  the project's hand-built heads. ceil(log2 k) + 2 attention layers, one head each.
  Compiled with one-hot positions it is ``khop_doubling``; compiled with angle
  positions (``positions="angle"``) it is ``khop_constant_width``.
* :func:`khop_floor`: a search head at a stored pointer per layer,
  floor(log2 k) + 2 attention layers, one head each (Thm 4.2 as stated).
* :func:`khop_rasp`: tracr's standard primitives only (SelectorWidth, pair-valued
  keys, categorical Aggregate): the baseline.
"""

from __future__ import annotations

import math

from tracr.rasp import rasp

from depthcraft.constructions.errors import ParameterError
from depthcraft.rasp_programs.doubling import odd_doubling_layers, odd_doubling_steps
from depthcraft.constructions.primitives import (POSITION, Read, last_occurrence, last_occurrence_upto, pointer_lookup,
                                      prev_token)

#: The ⊥ output value (no k-th hop). Integer so that it sorts with integer tokens.
BOT = -1


def check_k(k) -> int:
    """Validate the hop count of a construction.

    Raises:
        ParameterError: k is not an integer >= 1 (k = 0, hop_0, is the identity and
            needs no attention layer: no construction is registered for it).
    """
    if isinstance(k, bool) or not isinstance(k, int):
        raise ParameterError(f"k must be an integer >= 1, got {k!r}")
    if k < 1:
        raise ParameterError(f"k must be >= 1, got {k} (hop_0 is the identity: it needs no attention layer)")
    return k


def doubling_layers(k: int) -> int:
    """Attention layers of :func:`khop_doubling`: ceil(log2 k) + 2."""
    return math.ceil(math.log2(check_k(k))) + 2


def khop_doubling(k: int) -> rasp.SOp:
    """hop_k by pointer doubling, one head per layer: L = ceil(log2 k) + 2.

    Construction (Sanford et al. 2024, proof of Thm 4.2; SPEC §5 notes):

    * Layer 1, :func:`prev_token`: each position stores x_{i-1}.
    * Layer 2, :func:`last_occurrence` (query x_i, key x_{j-1}): attends to
      find(i) and stores the pointer P_0 = R_0 = find^1(i) and the token there.
    * Layers 3..M+2, M = ceil(log2 k), :func:`pointer_lookup` at P_{m-1}: reads
      the pointers stored at P_{m-1}(i) and composes them with P_{m-1}:
      P_m = P_{m-1}∘P_{m-1} = find^(2^m), and, when bit m-1 of k-1 is 1,
      R_m = R_{m-1}∘P_{m-1} (advancing the partial pointer by 2^(m-1)) with its token.
      Starting from R_0 = find^1, R_M = find^(1 + (k-1)) = find^k, because k-1 < 2^M.
      Since k-1 >= 2^(M-1), the last bit is always 1, so the last layer reads the
      token at R_M's position directly. ⊥ is pointer 0 (BOS), which reads ⊥ and
      pointer 0 again, so it propagates.

    Width: every pointer is one-hot over N+1 positions, so d_model = O(N log k).

    Args:
        k: number of hops, >= 1.
    Returns:
        Categorical SOp with values in Σ ∪ {BOT}.
    Raises:
        ParameterError: k < 1.
    """
    check_k(k)
    prev = prev_token(rasp.tokens, name="prev_token")
    ptr, tok = last_occurrence(rasp.tokens, prev, [Read(POSITION, name="find1"),
                                                   Read(rasp.tokens, bos_value=BOT, name="tok_find1")],
                               name="last_occurrence")
    p, r, t = ptr, ptr, tok
    m_total = doubling_layers(k) - 2
    for m in range(1, m_total + 1):
        bit = ((k - 1) >> (m - 1)) & 1
        last = m == m_total
        reads = []
        if not last:
            reads.append(Read(p, name=f"find{2 ** m}"))
        if bit:
            reads.append(Read(t, name=f"tok_R{m}"))
            if not last:
                reads.append(Read(r, name=f"R{m}"))
        outs = pointer_lookup(p, reads, name=f"lookup{m}")
        if not last:
            p = outs[0]
        if bit:
            t = outs[1 if not last else 0]
            if not last:
                r = outs[2]
    return t


def floor_layers(k: int) -> int:
    """Attention layers of :func:`khop_floor`: floor(log2 k) + 2 (Sanford et al. 2024, Thm 4.2 as stated)."""
    return odd_doubling_layers(check_k(k))


def khop_floor(k: int) -> rasp.SOp:
    """hop_k with a search at a stored pointer per layer: L = floor(log2 k) + 2, one head each.

    Construction (SPEC §5 notes). Write F = find. Every position computes the same
    pointers, so a pointer read *at* a position j is that pointer of j.

    * Layer 1, :func:`prev_token`: each position stores x_{i-1}.
    * Layer 2, :func:`last_occurrence`: attends to F(i); stores P_2 = F^1 and the
      token there, and R_2 = F^(k mod 2) (F^0 is the position itself) with its token.
    * Layer l = 3..L, :func:`last_occurrence_upto` at the stored pointer P_{l-1}
      with query x_{P_{l-1}(i)} and key x_{j-1}: it attends to the latest
      j <= P_{l-1}(i) with x_{j-1} = x_{P_{l-1}(i)}, i.e. to
      F(P_{l-1}(i)) = F^(2^(l-2))(i), and reads the pointers stored there:
      P_l = P_{l-1} at that position = F^(2^(l-2) + 2^(l-2) - 1) = F^(2^(l-1) - 1),
      and, when bit l-2 of k is 1, R_l = R_{l-1} there = F^(r_{l-1} + 2^(l-2)), with
      their tokens (else R_l = R_{l-1}). The last layer reads only R's token.

    Why every k <= 2^(L-1) - 1 is reached with one head per layer: by induction
    on l, P_l = F^(2^(l-1) - 1) (P_2 = F^1; one search step maps exponent m to
    m + 1 + m = 2m + 1, and 2(2^(l-2) - 1) + 1 = 2^(l-1) - 1) and
    R_l = F^(k mod 2^(l-1)) (R_2 = F^(bit 0 of k); layer l adds 2^(l-2), the
    hop count of the attended position F^(2^(l-2))(i), exactly when bit l-2 of k
    is 1; reading R_{l-1} at F^(2^(l-2))(i) composes F^(r) after F^(2^(l-2))).
    Each layer attends to one position (F^(2^(l-2))(i)) and reads several
    values there, so one head suffices. For k <= 2^(L-1) - 1, k mod 2^(L-1) = k,
    so R_L = F^k; with L = floor(log2 k) + 2 we have 2^(L-1) - 1 = 2^(floor(log2 k)+1) - 1 >= k.
    The top bit of k is bit L-2, so the last layer always reads R (only its token).
    ⊥ is pointer 0 (BOS): a search at pointer 0 attends to BOS, which stores
    pointer 0 and token ⊥, so ⊥ propagates; F^m(0) = 0 agrees with the definition.

    Compared with :func:`khop_doubling` (ceil(log2 k) + 2): the look-up at a
    stored pointer is replaced by a *search* at or before it, which adds one hop
    (F) for free in every layer; the two agree when k is a power of two.

    Width: each pointer is one-hot over N+1 positions and the search head's
    position table reads the key's one-hot position: d_model = O(N log k) here
    (tracr gives every SOp its own subspace); the theorem's O(N + |Σ|) would
    need residual reuse.

    Args:
        k: number of hops, >= 1.
    Returns:
        Categorical SOp with values in Σ ∪ {BOT}.
    Raises:
        ParameterError: k < 1.
    """
    layers = floor_layers(k)
    prev = prev_token(rasp.tokens, name="prev_token")
    reads = [Read(POSITION, name="P1"), Read(rasp.tokens, bos_value=BOT, name="tok_P1")]
    if layers == 2:
        return last_occurrence(rasp.tokens, prev, [reads[1]], name="last_occurrence")[0]
    p, tp = last_occurrence(rasp.tokens, prev, reads, name="last_occurrence")
    # R = None stands for F^0: the attended position itself (read POSITION / tokens there).
    r, tr = (p, tp) if k & 1 else (None, None)
    for step in odd_doubling_steps(k):
        last = step.last
        reads = [] if last else [Read(p, name=f"P{step.p_hops}"), Read(tp, name=f"tok_P{step.p_hops}")]
        if step.bit:
            reads.append(Read(tr if tr is not None else rasp.tokens, bos_value=None if tr is not None else BOT,
                              name=f"tok_R{step.r_hops}"))
            if not last:
                reads.append(Read(r if r is not None else POSITION, name=f"R{step.r_hops}"))
        outs = last_occurrence_upto(p, tp, prev, reads, name=f"search{step.layer}")
        if last:
            return outs[-1]
        p, tp = outs[0], outs[1]
        if step.bit:
            tr, r = outs[2], outs[3]
    raise AssertionError("unreachable: the last layer returns")


def khop_rasp(k: int) -> rasp.SOp:
    """hop_k with tracr's standard primitives only (the baseline).

    * prev = Aggregate(Select(indices, indices, key == query - 1), tokens): x_{i-1}.
    * count_i = SelectorWidth of "prev[j] == x_i and j <= i" (pair-valued keys and
      queries (value, index)): how many j <= i match.
    * rank_j = SelectorWidth of "prev[j'] == prev[j] and j' <= j": the occurrence
      number of key j among keys with the same prev value.
    * find: the unique j with (prev[j], rank_j) == (x_i, count_i), i.e. the latest
      match; a categorical Aggregate of indices (None when count_i = 0).
    * then pointer doubling with categorical Aggregates selecting indices == pointer,
      exactly as :func:`khop_doubling` but one head per value read.

    ⊥ is tracr's "no value" (a zero vector, decoded as None). Known to go wrong
    (SPEC §8): SelectorWidth's MLP at tracr's default ``mlp_exactness`` and soft
    categorical attention at larger n / vocab; the verifier reports where.

    Args:
        k: number of hops, >= 1.
    Returns:
        Categorical SOp with values in Σ (None for ⊥).
    """
    check_k(k)
    idx = rasp.indices
    prev = rasp.Aggregate(rasp.Select(idx, idx, lambda key, q: key == q - 1), rasp.tokens).named("prev")
    q_pair = rasp.SequenceMap(lambda t, i: (t, i), rasp.tokens, idx).named("tok_idx")
    k_pair = rasp.SequenceMap(lambda p, i: (p, i), prev, idx).named("prev_idx")

    def same_upto(key, q):
        return key is not None and q is not None and key[0] == q[0] and key[1] <= q[1]

    count = rasp.SelectorWidth(rasp.Select(k_pair, q_pair, same_upto)).named("count")
    rank = rasp.SelectorWidth(rasp.Select(k_pair, k_pair, same_upto)).named("rank")
    key2 = rasp.SequenceMap(lambda p, c: (p, c), prev, rank).named("prev_rank")
    query2 = rasp.SequenceMap(lambda t, c: (t, c), rasp.tokens, count).named("tok_count")
    find_sel = rasp.Select(key2, query2, lambda key, q: key is not None and q is not None and key == q)
    p = rasp.Aggregate(find_sel, idx).named("find1")
    t = rasp.Aggregate(find_sel, rasp.tokens).named("tok_find1")
    r = p
    m_total = doubling_layers(k) - 2
    for m in range(1, m_total + 1):
        bit = ((k - 1) >> (m - 1)) & 1
        last = m == m_total
        at = rasp.Select(idx, p, lambda key, q: q is not None and key == q)
        if bit:
            t = rasp.Aggregate(at, t).named(f"tok_R{m}")
            if not last:
                r = rasp.Aggregate(at, r).named(f"R{m}")
        if not last:
            p = rasp.Aggregate(at, p).named(f"find{2 ** m}")
    return t.named(f"hop{k}")
