"""The hand-built heads' factories: the RASP vocabulary programs are written with.

RASP (Weiss et al. 2021) and tracr (Lindner et al. 2023) have no primitive for
"attend to the *latest* matching position" or "attend to the position stored in
a pointer". Those are exactly the heads that pointer-doubling constructions
need (Sanford, Hsu & Telgarsky 2024, proof of Thm 4.2). The factories below add
them as RASP expressions so programs stay readable RASP;
:mod:`constructions.compiler` turns each one into a single tracr CRAFT
``AttentionHead`` (see :mod:`constructions.heads`).

This module is where programs import from: the factories (:func:`prev_token`,
:func:`last_occurrence`, :func:`pointer_lookup`, :func:`last_occurrence_upto`,
:func:`fact_lookup`, :func:`scored_lookup`, :func:`position_map`, :func:`match`, :func:`memorise`,
:func:`union`; and the set read-out :func:`meet`), what
a head can read (:data:`POSITION`, :data:`LABEL`, :class:`Read`) and
:data:`DEFAULT_HARDNESS`. The node types themselves, the table of head kinds
and the position conventions (model position 0 = BOS, RASP index t = model
position t+1, pointer 0 = ⊥) are in :mod:`constructions.nodes`; the reference
(hardmax) semantics, ``evaluate``, in :mod:`constructions.reference`.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence, Tuple, Union

from tracr.rasp import rasp

from depthcraft.constructions.errors import CompileError
from depthcraft.constructions.nodes import (FACT_LOOKUP, LABEL, LAST_OCCURRENCE, LAST_OCCURRENCE_UPTO, MATCH,
                                            MEMORISE, POINTER_LOOKUP, POSITION, POSITION_MAP, PREV_TOKEN,
                                            SCORED_LOOKUP, UNION, HeadKind, HeadRead, HeadSpec, MatchSpec,
                                            MemorySpec, PositionMapSpec, Read, ScoreSpec, ScoreTerm, SetMeet,
                                            is_multi)

#: Default logit gap (in nats) between the intended key and any other key of a
#: hand-built head. With gap g and at most T keys the softmax weight on the
#: intended key is at least 1 / (1 + T e^-g); 24 gives > 1 - 1e-7 for T <= 1000.
DEFAULT_HARDNESS = 24.0

#: What a factory's ``reads`` may hold: a :class:`Read`, :data:`POSITION` or a categorical SOp.
ReadLike = Union[Read, type(POSITION), rasp.SOp]


def _as_read(r: ReadLike) -> Read:
    if isinstance(r, Read):
        return r
    if r is POSITION or isinstance(r, rasp.SOp):
        return Read(r)
    raise CompileError(f"a head can read POSITION, rasp.tokens or a categorical SOp; got {r!r}")


def _make(kind: HeadKind, reads: Sequence[ReadLike], **kw) -> List[HeadRead]:
    head = HeadSpec(kind, reads=[_as_read(r) for r in reads], **kw)
    return [HeadRead(head, i) for i in range(len(head.reads))]


def prev_token(reads: Union[ReadLike, Sequence[ReadLike]], *, hardness: float = DEFAULT_HARDNESS,
               name: Optional[str] = None, attention: str = "softmax") -> Union[HeadRead, List[HeadRead]]:
    """Previous-token head: position i attends to position i-1 (position 1 attends to BOS).

    The special case ``target(i) = i - 1`` of :func:`position_map`, whose QK it uses.
    Softmax: one-hot RASP index a (query) against index a-1 (key) scores 2*hardness;
    every query scores BOS at hardness; everything else 0. So positions >= 2
    pick i-1 and position 1 (and BOS) pick BOS, each by a gap of ``hardness``.
    ReLU: the intended key scores exactly 1, every other key 0.
    OV: copies ``reads``. Cost: 1 head, QK width = max_seq_len + 1.

    Args:
        reads: one read (returns one SOp) or a list (returns a list).
        hardness: logit gap in nats (softmax).
        name: head name shown in residual labels.
        attention: ``"softmax"`` or ``"relu"``.
    Returns:
        HeadRead SOp(s): value at i is the read at i-1; at position 1 the BOS value.
    Raises:
        CompileError: no read, a numerical read, hardness <= 0 or an unknown attention kind.
    """
    single = not isinstance(reads, (list, tuple))
    outs = _make(PREV_TOKEN, [reads] if single else reads, query=None, key=None, predicate=None,
                 hardness=hardness, name=name, attention=attention, spec=PositionMapSpec(lambda i: i - 1))
    return outs[0] if single else outs


def last_occurrence(query: rasp.SOp, key: rasp.SOp, reads: Sequence[ReadLike], *,
                    predicate: Callable[[Any, Any], bool] = lambda k, q: k == q,
                    hardness: float = DEFAULT_HARDNESS, name: Optional[str] = None) -> List[HeadRead]:
    """Last-occurrence head: attend to the latest j <= i with predicate(key[j], query[i]).

    The induction-head step of Sanford et al. (2024, Thm 4.2, layer 2): with
    ``query=tokens`` and ``key=prev_token(tokens)`` it attends to find(i), the
    position right after the most recent earlier occurrence of x_i, and to BOS
    when there is none. Requires causal attention (keys j > i are masked).

    QK (N = max_seq_len, g = hardness): score(i, j) = B * [match] + g * j for
    token positions j, and g * (N+1) for BOS, with B = g * (N+1). Matches score
    in [g(N+2), g(2N+1)], BOS g(N+1), non-matches at most gN: the latest match
    wins by >= g, BOS beats every non-match by >= g. Cost: 1 head, QK width
    |query values| + 1 on the query side, |key values| + N + 1 on the key side.

    Args:
        query: categorical SOp compared at the query position.
        key: categorical SOp compared at key positions (None never matches).
        reads: values copied from the attended position (e.g. POSITION, tokens).
        predicate: ``predicate(key_value, query_value)``; default equality.
        hardness: logit gap in nats.
        name: head name.
    Returns:
        One HeadRead SOp per read.
    Raises:
        CompileError: numerical query/key SOps, no read or a numerical read, hardness <= 0.
    """
    return _make(LAST_OCCURRENCE, reads, query=query, key=key, predicate=predicate,
                 hardness=hardness, name=name)


def pointer_lookup(pointer: rasp.SOp, reads: Sequence[ReadLike], *, hardness: float = DEFAULT_HARDNESS,
                   name: Optional[str] = None) -> List[HeadRead]:
    """Pointer look-up head: position i attends to the model position stored in ``pointer``.

    The doubling step of Sanford et al. (2024, proof of Thm 4.2): reading the
    pointers stored at p(i) composes them with p. Pointer 0 (and a missing
    pointer) selects BOS, so ⊥ propagates. Pointer values outside 0..N are
    ignored (BOS). A causal model can only look up p(i) <= i.

    QK: pointer value v (query) against model position v (key) scores
    2*hardness; every query scores BOS at hardness; pointer 0 scores BOS at
    2*hardness. Gap >= hardness. Cost: 1 head, QK width N + 1.

    Args:
        pointer: categorical SOp whose values are model positions (0 = BOS).
        reads: values copied from the pointed-to position.
        hardness: logit gap in nats.
        name: head name.
    Returns:
        One HeadRead SOp per read.
    Raises:
        CompileError: a numerical pointer, no read or a numerical read, hardness <= 0.
    """
    return _make(POINTER_LOOKUP, reads, query=pointer, key=None, predicate=None,
                 hardness=hardness, name=name)


def last_occurrence_upto(pointer: rasp.SOp, query: rasp.SOp, key: rasp.SOp, reads: Sequence[ReadLike], *,
                         predicate: Callable[[Any, Any], bool] = lambda k, q: k == q,
                         hardness: float = DEFAULT_HARDNESS, name: Optional[str] = None) -> List[HeadRead]:
    """Search head: attend to the latest j <= p(i) with predicate(key[j], query[i]), p a stored pointer.

    The step of the floor-depth k-hop construction (SPEC §5 notes): with
    ``pointer = find^m``, ``query`` = the token at that pointer and
    ``key = prev_token(tokens)``, position i attends to find(find^m(i)) =
    find^(m+1)(i) and reads the values stored there (e.g. find^m of that
    position, giving find^(2m+1)(i)). Pointer 0 (BOS, ⊥), or no match at or
    before the pointer, selects BOS, so ⊥ propagates. Causal.

    QK (N = max_seq_len, g = hardness, B = g(N+1)): score(i, j) = B * [match] +
    T(j; p(i)) with the position table T(j; p) = g*j for 1 <= j <= p and -B for
    j > p; BOS scores g(N+1). Matches at or before the pointer score in
    [g(N+2), g(2N+1)], BOS g(N+1), non-matches at or before the pointer at most
    gN, keys after the pointer at most 0: the latest match at or before p wins by
    >= g and BOS beats every other key by >= g. The table needs the key's
    one-hot position, so the QK width is O(N + |values|). Cost: 1 head.

    Args:
        pointer: categorical SOp of model positions (0 = BOS) to search at or before.
        query: categorical SOp compared at the query position.
        key: categorical SOp compared at key positions (None never matches).
        reads: values copied from the attended position.
        predicate: ``predicate(key_value, query_value)``; default equality.
        hardness: logit gap in nats.
        name: head name.
    Returns:
        One HeadRead SOp per read.
    Raises:
        CompileError: a numerical query, key or pointer; no reads.
    """
    return _make(LAST_OCCURRENCE_UPTO, reads, query=query, key=key, predicate=predicate,
                 hardness=hardness, name=name, pointer=pointer)


def fact_lookup(query: rasp.SOp, key: rasp.SOp, reads: Sequence[ReadLike], *,
                key_positions: Callable[[int], bool],
                predicate: Callable[[Any, Any], bool] = lambda k, q: k == q,
                hardness: float = DEFAULT_HARDNESS, name: Optional[str] = None) -> List[HeadRead]:
    """Bidirectional look-up head: attend to the allowed position whose key matches the query.

    Made for facts stored as (key, value) token pairs (D-step retrieval, SPEC
    §4.3): with ``key = prev_token(tokens)`` and ``key_positions`` = the value
    slots of the facts, position i attends to the fact whose key is ``query[i]``
    and reads its value (and what is stored there). Facts have distinct keys, so
    at most one position matches; if several do, the latest wins. No match
    selects BOS. Bidirectional: keys after the query are seen, so the model must
    be compiled with ``causal=False``.

    QK (N = max_seq_len, g = hardness, B = g(N+1)): score(i, j) = B * [match] +
    T(j) with T(j) = g*j on allowed positions and -B elsewhere; BOS scores
    g(N+1). Allowed matches score in [g(N+2), g(2N+1)], BOS g(N+1), allowed
    non-matches at most gN, other positions at most 0: gap >= g. Cost: 1 head,
    QK width |query values| + 1 and |key values| + N + 1.

    Args:
        query: categorical SOp compared at the query position.
        key: categorical SOp compared at key positions (None never matches).
        reads: values copied from the attended position.
        key_positions: ``key_positions(model_position) -> bool`` (positions 1..N).
        predicate: ``predicate(key_value, query_value)``; default equality.
        hardness: logit gap in nats.
        name: head name.
    Returns:
        One HeadRead SOp per read.
    Raises:
        CompileError: ``key_positions`` not callable, a numerical query or key, no reads.
    """
    return _make(FACT_LOOKUP, reads, query=query, key=key, predicate=predicate, hardness=hardness,
                 name=name, key_positions=key_positions)


def scored_lookup(terms: Sequence[Tuple[Any, Any, Callable[[Any, Any], float]]], reads: Sequence[ReadLike], *,
                  bos_score: float = 1.0, hardness: float = DEFAULT_HARDNESS,
                  name: Optional[str] = None) -> List[HeadRead]:
    """Bidirectional head that attends to the key with the highest *sum of scored terms*.

    Each term ``(query, key, score)`` adds ``score(query[i], key[j])`` to the score of
    key position j for query position i; ``query`` and ``key`` are categorical SOps,
    ``rasp.tokens`` or :data:`POSITION` (the model position, 1..N). A term whose query
    or key value is None adds nothing; BOS's token and position are no values, so the
    score of BOS is ``bos_score`` plus the terms of the key SOps' values at BOS (a
    head read's BOS value). Semantics (hardmax, :mod:`constructions.reference`): query i
    attends to the highest-scoring position among 0 (BOS) .. N, keys after the query
    included; on a tie the latest. Scores are in units of ``hardness``: a program that
    keeps the best score at least 1 above every other score on its inputs gets a
    compiled head that puts weight >= 1 / (1 + N e^-hardness) on the attended key. The
    head cannot check that gap for you: the verifier's attention margin does.

    Made for look-ups whose key is a *combination* of conditions, each one a term:
    exact match of a stored label (weight 4), else a fall-back neighbour (weight 3),
    else the position itself (:func:`rasp_programs.retrieval.retrieval_tripling`).

    QK: the sum of one table per term between the query's and the key's one-hot
    directions (``hardness * score``), plus ``hardness * bos_score`` from the constant
    direction to BOS and, so that BOS always attends to itself, a BOS-to-BOS score
    above any sum of the terms. Cost: 1 head; QK width: the terms' query and key
    values (+ N for a term on :data:`POSITION`) + 2.

    Args:
        terms: ``(query, key, score)`` triples, at least one.
        reads: values copied from the attended position.
        bos_score: score of BOS for every query (units of hardness).
        hardness: nats per unit of score.
        name: head name.
    Returns:
        One HeadRead SOp per read.
    Raises:
        CompileError: no terms, a term side that is not a categorical SOp, ``rasp.tokens``
            or POSITION (``rasp.indices``: use POSITION), a set-valued side, a score that
            is not callable, no reads.
    """
    checked = []
    for t in terms:
        if not (isinstance(t, tuple) and len(t) == 3):
            raise CompileError(f"scored_lookup: a term is (query, key, score), got {t!r}")
        q, k, f = t
        for side in (q, k):
            if side is rasp.indices:
                raise CompileError("scored_lookup: score model positions with POSITION, not rasp.indices")
            if side is not POSITION and not isinstance(side, rasp.SOp):
                raise CompileError(f"scored_lookup: a term side is a categorical SOp, rasp.tokens or POSITION; "
                                   f"got {side!r}")
            if is_multi(side):
                raise CompileError(f"scored_lookup: {side.label} is set-valued; terms score single values")
        if not callable(f):
            raise CompileError(f"scored_lookup: the score of a term must be callable, got {f!r}")
        checked.append(ScoreTerm(q, k, f))
    if not checked:
        raise CompileError("scored_lookup needs at least one term")
    return _make(SCORED_LOOKUP, reads, query=None, key=None, predicate=None, hardness=hardness, name=name,
                 spec=ScoreSpec(tuple(checked), float(bos_score)))


def position_map(target: Callable[[int], Optional[int]], reads: Union[ReadLike, Sequence[ReadLike]], *,
                 attention: str = "softmax", hardness: float = DEFAULT_HARDNESS,
                 name: Optional[str] = None) -> Union[HeadRead, List[HeadRead]]:
    """Fixed-pattern head: query position i attends to model position ``target(i)``.

    A copy from a position fixed by the layout (the previous token, the k-th token of
    the current block, ...): the query's one-hot position against the key's one-hot
    position, a table. ``target(i)`` may be 0 (BOS) or None (no key: softmax falls back
    to BOS, ReLU attends nothing and reads None).

    QK (softmax, g = hardness): (i, target(i)) scores 2g, every query scores BOS at g,
    all else 0: gap g. ReLU: (i, target(i)) scores exactly 1, all else 0. Cost: 1 head,
    QK width N + 1.

    Args:
        target: model position 1..N -> model position 0..N, or None.
        reads: one read (returns one SOp) or a list (returns a list).
        attention: ``"softmax"`` or ``"relu"``.
        hardness: logit gap in nats (softmax).
        name: head name.
    Returns:
        HeadRead SOp(s): the reads at target(i) (None / the BOS value when there is none).
    Raises:
        CompileError: no read, a numerical read, hardness <= 0 or an unknown attention kind.
    """
    single = not isinstance(reads, (list, tuple))
    outs = _make(POSITION_MAP, [reads] if single else reads, query=None, key=None, predicate=None,
                 hardness=hardness, name=name, attention=attention, spec=PositionMapSpec(target))
    return outs[0] if single else outs


def match(pairs: Sequence[Tuple[rasp.SOp, rasp.SOp]], reads: Sequence[ReadLike], *,
          where: Optional[Callable[[int, int], bool]] = None, select: str = "last",
          attention: str = "softmax", hardness: float = DEFAULT_HARDNESS,
          name: Optional[str] = None) -> List[HeadRead]:
    """Match head: attend to the keys j <= i in a window whose values equal the query's.

    Key j matches query i when j is a candidate (1 <= j <= i and ``where(i, j)``) and
    ``key_s[j] == query_s[i]`` for every pair s (a None value never matches; for a
    set-valued SOp equality is set equality). Generalises :func:`last_occurrence`
    (one pair, no window, ``select="last"``) to several pairs, a window and the other
    end. Semantics by ``select``:

    * ``"last"`` / ``"first"`` (softmax): the latest / earliest match, BOS if none.
      QK (S pairs, N = max_seq_len, g = hardness, B = g(N+1)): B per agreeing pair,
      plus g*j (last) or g*(N+1-j) (first), minus B outside the window; BOS scores B*S.
      A full match scores >= B*S + g, every other key <= B*S - g.
    * ``"all"`` (ReLU): every match, with weight exactly 1: the reads are set-valued
      (frozensets, encoded multi-hot). QK: score = 1 - sum_s d_s - [outside window]
      with d_s = 1 - [agree] for categorical pairs and d_s = |Q_s Δ K_s| (a bilinear
      form of the multi-hot codes: |Q| + |K| - 2<Q, K>) for set-valued ones, so a match
      scores exactly 1 and every other key <= 0. The compiled read is the *sum* of the
      matched keys' one-hot reads: the set of the semantics only when those values are
      distinct (e.g. POSITION). With repeated values it is a count vector, and a later
      set-valued match compares counts, not sets; the verifier reports such a program
      as failing against its RASP semantics (see tests/test_chen_zou_heads.py).

    Cost: 1 head; QK width: the pairs' values + N + 2 on the key side.

    Args:
        pairs: (query SOp, key SOp) pairs (categorical or set-valued; not indices).
        reads: values copied from the attended key(s).
        where: candidate window on model positions, or None (every j <= i).
        select: ``"last"``, ``"first"`` or ``"all"``.
        attention: ``"softmax"`` (last/first) or ``"relu"`` (all).
        hardness: logit gap in nats (softmax).
        name: head name.
    Returns:
        One HeadRead SOp per read.
    Raises:
        CompileError: no pairs, or select not available for the attention kind.
    """
    pairs = tuple((q, k) for q, k in pairs)
    if not pairs:
        raise CompileError("match needs at least one (query, key) pair")
    allowed = {"softmax": ("last", "first"), "relu": ("all",)}.get(attention, ())
    if select not in allowed:
        raise CompileError(f"match with {attention} attention selects {list(allowed)}, got select={select!r} "
                           "(ReLU cannot pick one key by competition; softmax cannot add keys up exactly)")
    for q, k in pairs:
        if q is rasp.indices or k is rasp.indices:
            raise CompileError("match compares values, not positions: use position_map for indices")
        if (is_multi(q) or is_multi(k)) and attention != "relu":
            raise CompileError("set-valued SOps can only be matched by ReLU heads")
    return _make(MATCH, reads, query=None, key=None, predicate=None, hardness=hardness, name=name,
                 attention=attention, spec=MatchSpec(pairs, where, select))


def memorise(keys: Sequence[rasp.SOp], examples: Sequence[Sequence[Any]], labels: Sequence[Any], *,
             attention: str = "softmax", heads: Optional[int] = None, seed: int = 0, scale: float = 1.0,
             name: Optional[str] = None) -> HeadRead:
    """One attention layer that memorises labelled inputs, read at their last position.

    Construction (the memorisation-capacity argument for one multi-head attention layer,
    Mahdavi, Liao & Thrampoulidis, ICLR 2024, here with one-hot inputs): H heads read,
    at the read-out position R (the examples' length), every key position t <= R, whose
    residual vector r_t holds the one-hot values of ``keys`` and of the position. Each
    head's QK is a fixed random table (``seed``): score_h(t) = u_h . r_t; its weights
    w_h(t) are softmax (or ReLU) of the scores. The read-out is then the linear map
    sum_h W_h^T sum_t w_h(t) r_t of the features F_h = sum_t w_h(t) r_t, so the OV
    matrices W_h are solved by least squares to put exactly the one-hot label of each
    example on the output (compile time, :mod:`constructions.memory`).

    Heads: a softmax head's features of one example span n + V - 1 dimensions (n key
    positions, V key values), of which the constant is shared by all heads, so E
    distinct examples need H = ceil((E - 1) / (n + V - 2)) heads, reached for generic
    random scores. ReLU heads have no normalisation: their read-out is an additive
    function of (position, value) pairs whatever H is, so ReLU interpolation needs the
    examples' one-hot (position, value) encodings plus a constant to be linearly
    independent (at most 1 + n(V - 1) examples), and some labelings are out of reach of
    any one-layer ReLU read-out (no additive function separates {aa, bb} from {ab, ba}).
    ``heads=None`` takes the fewest heads that interpolate the examples, in float64 and, within
    1/4 of every label, with the model's float32 weights and arithmetic (where the generic
    count leaves the least-squares system too ill-conditioned for float32, a few more:
    :func:`constructions.memory.solve`).

    Semantics: at position R of an input of length R, the label of the example whose
    key values at positions 1..R equal the input's; None elsewhere or if none does.

    Args:
        keys: categorical SOps the heads read (e.g. tokens, or a parse of them).
        examples: the memorised inputs, token sequences of one length R.
        labels: output value of each example (examples with equal keys must agree).
        attention: ``"softmax"`` or ``"relu"``.
        heads: number of heads (None: the fewest that interpolate, at most one per example).
        seed: seeds the QK tables.
        scale: standard deviation of the scores.
        name: head name.
    Returns:
        Categorical HeadRead SOp with values ``set(labels)``.
    Raises:
        CompileError: no examples, examples of different lengths, labels of the wrong length.
    """
    examples = tuple(tuple(e) for e in examples)
    labels = tuple(labels)
    if not examples:
        raise CompileError("memorise needs at least one example")
    if len({len(e) for e in examples}) != 1 or not examples[0]:
        raise CompileError("memorise: every example must have the same (non-zero) length")
    if len(labels) != len(examples):
        raise CompileError(f"memorise: {len(examples)} examples but {len(labels)} labels")
    if heads is not None and heads < 1:
        raise CompileError(f"memorise: heads must be >= 1 (got {heads})")
    spec = MemorySpec(tuple(keys), examples, labels, heads, int(seed), float(scale))
    return _make(MEMORISE, [Read(LABEL, name=name and f"{name}_label")], query=None, key=None,
                 predicate=None, hardness=DEFAULT_HARDNESS, name=name, attention=attention,
                 spec=spec)[0]


def union(query: rasp.SOp, key: rasp.SOp, reads: Sequence[ReadLike], *,
          predicate: Callable[[Any, Any], bool] = lambda k, q: k == q, attention: str = "softmax",
          hardness: float = DEFAULT_HARDNESS, name: Optional[str] = None) -> List[HeadRead]:
    """Union head: position i reads the union of the sets held by every key that matches its query.

    The squaring step of reachability (Sanford, Hsu & Telgarsky 2024, the
    connectivity construction; Merrill & Sabharwal 2025): with ``query`` = the
    reachable set R(v) and ``key`` = the vertex token of each position, vertex v
    attends to every vertex u in R(v) and reads R(u), so the union is R∘R.

    Semantics: key j (1 <= j <= N, keys after the query included: bidirectional)
    *matches* query i when ``predicate(key[j], q)`` holds for the query value q
    (a categorical ``query``) or for some element q of the set ``query[i]`` (a
    set-valued ``query``, :func:`constructions.nodes.is_multi`). Each read is the
    union over the matching keys of the value each holds (a set-valued source: its
    set; a value: the singleton; ``fn`` may map a value to a set); no match reads
    the empty set (the head attends to BOS).

    Weights (N = max_seq_len, g = hardness). Softmax: score(i, j) =
    2g * #{q in query[i] : predicate(key[j], q)} (0 or 1, see below), BOS scores g;
    so the matches share the weight evenly (each gets >= 1/(N+1)), BOS takes the
    rest when nothing matches, and every non-matching key gets <= e^-g. The OV
    writes the attended keys' sets as multi-hot vectors into a scratch subspace,
    where an element held by a matching key has weight >= 1/(N+1) and any other
    element <= N e^-g; the head's own MLP (:mod:`constructions.setmlp`) maps
    x -> clip(2(N+1) x - 1/2, 0, 1), which is exactly 1 above 3/(4(N+1)) and
    exactly 0 below 1/(4(N+1)): a 0/1 multi-hot again, provided N e^-g <= 1/(4(N+1)),
    i.e. g >= ln(4N(N+1)) (checked at compile time). ReLU: matches score exactly 1,
    every other key 0 (the BOS query attends to BOS only), the scratch holds the
    number of matching keys that hold each element, and the MLP maps
    x -> clip(2x - 1/2, 0, 1). Cost: 1 head and 1 MLP sublayer (2 hidden units per
    element of each read); QK width |query values| + 1 by |key values| + 1.

    Args:
        query: categorical or set-valued SOp at the query position.
        key: categorical SOp at key positions (None never matches).
        reads: values copied from the matching keys (categorical or set-valued SOps,
            ``rasp.tokens``; a :class:`Read` with ``fn`` may map a value to a frozenset).
        predicate: ``predicate(key_value, query_element) -> bool``; default equality.
            With a set-valued query, every key value may satisfy it for at most one
            element (so a key's score is 0 or 2g, and the matches tie).
        attention: ``"softmax"`` or ``"relu"``.
        hardness: logit gap in nats (softmax).
        name: head name.
    Returns:
        One set-valued HeadRead SOp per read (frozensets, encoded multi-hot).
    Raises:
        CompileError: no reads, a numerical SOp, a set-valued key, a predicate that a key
            value satisfies for two elements of a set-valued query (at compile time), or
            hardness below ln(4N(N+1)) (at compile time).
    """
    if is_multi(key):
        raise CompileError("union: the key must be a single value per position (categorical), not a set")
    return _make(UNION, reads, query=query, key=key, predicate=predicate, hardness=hardness, name=name,
                 attention=attention)


def meet(a: rasp.SOp, b: rasp.SOp, *, name: Optional[str] = None) -> SetMeet:
    """Set read-out: 1 where the sets ``a[i]`` and ``b[i]`` share an element, else 0.

    The last step of the connectivity construction: with a = R(t) and b = R(s), both
    covering paths of length <= r, they meet iff t is reachable from s by a path of
    length <= 2r (for undirected graphs).

    Weights: one MLP sublayer (:mod:`constructions.setmlp`), no attention. Hidden
    units h_e = ReLU(a_e + b_e - 1), one per element e present in both value sets,
    and a constant unit; the read-out writes 2 * sum_e h_e to the value 1 and the
    constant 1 to the value 0. On 0/1 multi-hot inputs: no common element gives
    (value 0: 1, value 1: 0); a common element gives value 1 a score >= 2 against 1.

    Args:
        a, b: set-valued SOps (:func:`constructions.nodes.is_multi`), e.g. reads of
            :func:`union` heads or copies of them.
        name: name of the output SOp.
    Returns:
        Categorical SOp with values {0, 1}.
    Raises:
        CompileError: an argument that is not set-valued, or a and b the same SOp.
    """
    return SetMeet(a, b, name=name)


__all__ = ["DEFAULT_HARDNESS", "POSITION", "LABEL", "Read", "ReadLike", "prev_token", "last_occurrence",
           "pointer_lookup", "last_occurrence_upto", "fact_lookup", "scored_lookup", "position_map", "match",
           "memorise", "union", "meet"]
