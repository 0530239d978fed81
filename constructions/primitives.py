"""Hand-built attention heads as RASP-level primitives.

RASP (Weiss et al. 2021) and tracr (Lindner et al. 2023) have no primitive for
"attend to the *latest* matching position" or "attend to the position stored in
a pointer". Those are exactly the heads that pointer-doubling constructions
need (Sanford, Hsu & Telgarsky 2024, proof of Thm 4.2). This module adds them
as RASP expressions so programs stay readable RASP; :mod:`constructions.compiler`
turns each one into a single tracr CRAFT ``AttentionHead`` (see
:mod:`constructions.heads`).

Position conventions (SPEC §3)
------------------------------
* **Model positions**: position 0 holds BOS, input tokens x_1..x_N sit at
  positions 1..N. A *pointer* is a model position; pointer 0 means "BOS", the
  ⊥ / no-match sentinel of the papers.
* **RASP indices** (``rasp.indices``) are 0-based over the input tokens only:
  RASP index ``t`` is model position ``t + 1``. BOS has no RASP index.
* :data:`POSITION` is the model position of a token; reading it through a head
  yields a pointer.

One head, several outputs
-------------------------
A head attends to one position per query and may copy several residual
subspaces from there (its OV circuit writes all of them). The head itself is a
non-SOp RASP expression (:class:`HeadSpec`, like a selector); each copied value
is an SOp (:class:`HeadRead`). All reads of one head cost one head in one
attention layer.

Values at BOS
-------------
When a head attends to BOS (no match, or pointer 0), each read returns the value
BOS holds for it: ``POSITION`` gives 0; ``rasp.tokens`` gives the read's
``bos_value`` (None = zero vector unless set, e.g. ⊥); reading another head's
output gives that output's own BOS value. Every hand-built head makes BOS attend
to itself, so these values are well defined by induction.
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from tracr.rasp import rasp

from depthcraft.constructions.errors import CompileError

#: Default logit gap (in nats) between the intended key and any other key of a
#: hand-built head. With gap g and at most T keys the softmax weight on the
#: intended key is at least 1 / (1 + T e^-g); 24 gives > 1 - 1e-7 for T <= 1000.
DEFAULT_HARDNESS = 24.0
#: Head kinds (see the factories below).
KINDS = ("prev_token", "last_occurrence", "pointer_lookup", "position_map", "match", "memory",
         "last_occurrence_upto", "fact_lookup")
#: Head kinds whose keys must not lie after the query (they search earlier positions): compiled into
#: causal heads and refused in a bidirectional model.
CAUSAL_KINDS = ("last_occurrence", "last_occurrence_upto", "match", "memory")
#: Attention kinds a hand-built head can be designed for.
HEAD_ATTENTION = ("softmax", "relu")


class _Position:
    """Marker for the model position of each token (BOS = 0). Use :data:`POSITION`."""

    def __repr__(self) -> str:
        return "POSITION"


#: Read the model position of the attended token (a pointer; BOS reads 0).
POSITION = _Position()


class _Label:
    """Marker for the output of a :func:`memorise` head (its label). Use :data:`LABEL`."""

    def __repr__(self) -> str:
        return "LABEL"


#: What a :func:`memorise` head writes: the memorised label (not a value copied from a key).
LABEL = _Label()


@dataclasses.dataclass(frozen=True)
class Read:
    """What a head copies from the attended position.

    Attributes:
        source: :data:`POSITION`, ``rasp.tokens`` or any categorical SOp.
        bos_value: value the read returns when the head attends to BOS. Only
            settable for ``rasp.tokens`` (other sources carry their own BOS
            value); None means "no value" (a zero vector in the residual stream).
        name: optional name of the output SOp.
        fn: optional value map applied to what is read (e.g. a model position -> its
            offset in a block); the OV circuit applies it for free (it is a table from
            source directions to output directions). Not applied to ``bos_value``.
    """

    source: Union[_Position, _Label, rasp.SOp]
    bos_value: Any = None
    name: Optional[str] = None
    fn: Optional[Callable[[Any], Any]] = None


ReadLike = Union[Read, _Position, rasp.SOp]


def _as_read(r: ReadLike) -> Read:
    if isinstance(r, Read):
        return r
    if r is POSITION or isinstance(r, rasp.SOp):
        return Read(r)
    raise CompileError(f"a head can read POSITION, rasp.tokens or a categorical SOp; got {r!r}")


class HeadSpec(rasp.RASPExpr):
    """One hand-built attention head (a non-SOp RASP expression, like a selector).

    Do not build directly: use :func:`prev_token`, :func:`last_occurrence`,
    :func:`pointer_lookup`, :func:`position_map`, :func:`match`, :func:`memorise`,
    :func:`last_occurrence_upto` or :func:`fact_lookup`, which return the head's
    :class:`HeadRead` outputs.

    Attributes:
        kind: one of :data:`KINDS`.
        query: query SOp (``last_occurrence``, ``last_occurrence_upto``,
            ``fact_lookup``: the value to match; ``pointer_lookup``: the pointer), or None.
        key: key SOp (the matching kinds only), or None.
        predicate: ``predicate(key_value, query_value) -> bool`` for the matching
            kinds (tracr's argument order).
        reads: what the head copies from the attended position.
        hardness: logit gap (nats) between the intended key and every other key
            (softmax heads; ReLU heads give the intended keys score exactly 1).
        attention: ``"softmax"`` or ``"relu"``: the attention kind the head's scores are
            designed for (a model compiles heads of one kind only).
        spec: kind-specific data (:class:`PositionMapSpec`, :class:`MatchSpec`,
            :class:`MemorySpec`), or None.
        pointer: ``last_occurrence_upto`` only: the stored pointer (model position)
            at or before which the head searches.
        key_positions: ``fact_lookup`` only: ``key_positions(model_position) -> bool``,
            the positions the head may attend (besides BOS).
    """

    def __init__(self, kind: str, *, query: Optional[rasp.SOp], key: Optional[rasp.SOp],
                 predicate: Optional[Callable[[Any, Any], bool]], reads: Sequence[Read],
                 hardness: float, name: Optional[str] = None, attention: str = "softmax",
                 spec: Any = None, pointer: Optional[rasp.SOp] = None,
                 key_positions: Optional[Callable[[int], bool]] = None):
        super().__init__()
        if kind not in KINDS:
            raise CompileError(f"unknown head kind {kind!r}")
        if attention not in HEAD_ATTENTION:
            raise CompileError(f"attention must be one of {HEAD_ATTENTION}, got {attention!r}")
        if attention == "relu" and kind in ("last_occurrence", "pointer_lookup", "last_occurrence_upto", "fact_lookup"):
            raise CompileError(f"{kind} selects one key by competition (softmax); it has no ReLU form")
        if not reads:
            raise CompileError(f"a {kind} head must read at least one value")
        if not hardness > 0:
            raise CompileError(f"hardness must be > 0 (got {hardness})")
        for r in reads:
            if isinstance(r.source, rasp.SOp) and not rasp.is_categorical(r.source):
                raise CompileError(f"a head can only read categorical SOps; {r.source.label} is numerical")
            if r.bos_value is not None and r.source is not rasp.tokens:
                raise CompileError("bos_value can only be set when reading rasp.tokens")
        for s in (query, key, pointer):
            if s is not None and not rasp.is_categorical(s):
                raise CompileError(f"{kind} needs categorical query/key SOps; {s.label} is numerical")
        used = [query, key, pointer] + [r.source for r in reads] + (list(spec.sops()) if spec is not None else [])
        for s in used:
            if isinstance(s, HeadRead) and s.head.kind == "memory":
                raise CompileError(f"{s.label} is a memorise read-out (its value at BOS is unspecified); "
                                   "no head can read it")
        if (kind == "last_occurrence_upto") != (pointer is not None):
            raise CompileError("a stored pointer is given exactly for last_occurrence_upto heads")
        if kind == "fact_lookup" and not callable(key_positions):
            raise CompileError(f"fact_lookup needs key_positions(model_position) -> bool, got {key_positions!r}")
        self.kind = kind
        self.query = query
        self.key = key
        self.predicate = predicate
        self.reads = list(reads)
        self.hardness = float(hardness)
        self.attention = attention
        self.spec = spec
        self.pointer = pointer
        self.key_positions = key_positions
        self._annotations = rasp._Annotations(self, name=name or kind)  # pylint: disable=protected-access

    def __call__(self, xs):  # pragma: no cover - a head is evaluated through its reads
        raise NotImplementedError("evaluate a head through its HeadRead outputs")

    @property
    def children(self) -> List[rasp.RASPExpr]:
        kids: List[rasp.RASPExpr] = [s for s in (self.query, self.key, self.pointer) if s is not None]
        if self.spec is not None:
            kids += list(self.spec.sops())
        # Every hand-built head scores keys by their one-hot position (indices) and
        # recognises BOS through the tokens subspace.
        kids += [rasp.indices, rasp.tokens]
        for r in self.reads:
            if isinstance(r.source, rasp.SOp):
                kids.append(r.source)
        unique: Dict[str, rasp.RASPExpr] = {}
        for k in kids:
            unique.setdefault(k.label, k)
        return list(unique.values())


class HeadRead(rasp.SOp):
    """The value one :class:`HeadSpec` copies from its attended position (a categorical SOp)."""

    def __init__(self, head: HeadSpec, index: int):
        super().__init__()
        self.head = head
        self.index = index
        read = head.reads[index]
        #: True when the SOp is set-valued: its value is a frozenset, encoded multi-hot
        #: (a ReLU head that adds up every selected key, or a copy of such an SOp).
        self.multi = head.kind == "match" and head.spec.select == "all" or is_multi(read.source)
        self.bos_value = bos_value_of(read)
        if self.multi and self.bos_value is None:
            self.bos_value = frozenset()
        default = f"{head.name}_{'position' if read.source is POSITION else 'label' if read.source is LABEL else getattr(read.source, 'name', 'value')}"
        self._annotations = rasp._Annotations(  # pylint: disable=protected-access
            self, name=read.name or default, encoding=rasp.Encoding.CATEGORICAL)

    @property
    def read(self) -> Read:
        return self.head.reads[self.index]

    @property
    def children(self) -> List[rasp.RASPExpr]:
        return [self.head]


def bos_value_of(read: Read) -> Any:
    """Value a read returns at BOS: 0 for POSITION, ``bos_value`` for tokens, else the source's own.

    ``fn`` (if any) is applied to POSITION's 0 and to a source's BOS value, not to an
    explicit ``bos_value``. Every hand-built head makes BOS attend to itself (softmax
    and ReLU alike), so an SOp's value *at* BOS is its read's BOS value.
    """
    if read.source is rasp.tokens:
        return read.bos_value
    if read.source is POSITION:
        v = 0
    elif isinstance(read.source, HeadRead):
        v = read.source.bos_value
    else:
        return None
    return apply_fn(read.fn, v)


def is_multi(sop: Any) -> bool:
    """True for a set-valued SOp (see :attr:`HeadRead.multi`)."""
    return isinstance(sop, HeadRead) and sop.multi


def apply_fn(fn: Optional[Callable[[Any], Any]], value: Any) -> Any:
    """Apply a read's value map to one value (None stays None; a set maps element-wise)."""
    if fn is None or value is None:
        return value
    if isinstance(value, frozenset):
        return frozenset(fn(v) for v in value)
    return fn(value)


def _make(kind: str, reads: Sequence[ReadLike], **kw) -> List[HeadRead]:
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
    outs = _make("prev_token", [reads] if single else reads, query=None, key=None, predicate=None,
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
    return _make("last_occurrence", reads, query=query, key=key, predicate=predicate,
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
    return _make("pointer_lookup", reads, query=pointer, key=None, predicate=None,
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
    return _make("last_occurrence_upto", reads, query=query, key=key, predicate=predicate,
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
    return _make("fact_lookup", reads, query=query, key=key, predicate=predicate, hardness=hardness,
                 name=name, key_positions=key_positions)


def is_pointer(sop: Any) -> bool:
    """True if ``sop`` holds model positions: a read of POSITION, or a read of a pointer."""
    if not isinstance(sop, HeadRead):
        return False
    src = sop.read.source
    return src is POSITION or is_pointer(src)


# --------------------------------------------------------------------------------------------
# Heads for the Chen & Zou constructions: fixed position maps, windowed matches, memorisation.
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class PositionMapSpec:
    """``position_map`` data: ``target(i)`` is the model position query i attends to (None: none)."""

    target: Callable[[int], Optional[int]]

    def sops(self) -> List[rasp.SOp]:
        return []


@dataclasses.dataclass(frozen=True)
class MatchSpec:
    """``match`` data.

    Attributes:
        pairs: (query SOp, key SOp) pairs; a key matches when every pair agrees.
        where: ``where(i, j)`` on model positions (1..N): j is a candidate for query i;
            None = every j <= i.
        select: ``"last"`` / ``"first"`` (softmax: the latest / earliest match) or
            ``"all"`` (ReLU: every match, reads are set-valued).
    """

    pairs: Tuple[Tuple[rasp.SOp, rasp.SOp], ...]
    where: Optional[Callable[[int, int], bool]]
    select: str

    def sops(self) -> List[rasp.SOp]:
        return [s for pair in self.pairs for s in pair]


@dataclasses.dataclass(frozen=True)
class MemorySpec:
    """``memory`` data: read-out heads that memorise a labelled set of inputs (see :func:`memorise`).

    Attributes:
        keys: categorical (or set-valued) SOps the heads read at every position.
        examples: the memorised inputs (token tuples, all of one length R).
        labels: the output value of each example.
        heads: number of heads, or None for the fewest that interpolate the examples.
        seed: seeds the random QK tables.
        scale: standard deviation of the random scores.
    """

    keys: Tuple[rasp.SOp, ...]
    examples: Tuple[Tuple[Any, ...], ...]
    labels: Tuple[Any, ...]
    heads: Optional[int]
    seed: int
    scale: float

    def sops(self) -> List[rasp.SOp]:
        return list(self.keys)

    @property
    def length(self) -> int:
        """R, the length of every example: the read-out is at model position R."""
        return len(self.examples[0])


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
    outs = _make("position_map", [reads] if single else reads, query=None, key=None, predicate=None,
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
    return _make("match", reads, query=None, key=None, predicate=None, hardness=hardness, name=name,
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
    ``heads=None`` takes the fewest heads that interpolate the examples.

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
    return _make("memory", [Read(LABEL, name=name and f"{name}_label")], query=None, key=None,
                 predicate=None, hardness=DEFAULT_HARDNESS, name=name or "memory", attention=attention,
                 spec=spec)[0]


# --------------------------------------------------------------------------------------------
# Reference semantics (hardmax): a RASP evaluator that knows the hand-built heads.
# --------------------------------------------------------------------------------------------


def attended_keys(head: HeadSpec, ev: "Evaluator", xs: Sequence[Any]) -> List[List[int]]:
    """Model positions each query position 1..n attends to under the head's reference semantics.

    One position per query for softmax heads (0 = BOS when nothing else is selected);
    for ReLU heads every selected key (weight 1 each), possibly none.
    """
    n = len(xs)
    if head.kind in ("prev_token", "position_map"):
        out = []
        for i in range(1, n + 1):
            t = head.spec.target(i)
            if t is None or not 0 <= t <= i:
                out.append([0] if head.attention == "softmax" else [])
            else:
                out.append([t])
        return out
    if head.kind == "pointer_lookup":
        ptr = ev.evaluate(head.query, xs)
        return [[p if isinstance(p, int) and 0 <= p <= n else 0] for p in ptr]
    if head.kind == "match":
        return _match_keys(head, ev, xs)
    if head.kind == "memory":
        raise CompileError("a memorise head has no attended position in its reference semantics")
    q = ev.evaluate(head.query, xs)
    k = ev.evaluate(head.key, xs)
    if head.kind == "last_occurrence_upto":
        ptr = ev.evaluate(head.pointer, xs)
        # RASP index i is model position i+1; search model positions 1..min(p, i+1).
        upto = [min(p, i + 1) if isinstance(p, int) and p > 0 else 0 for i, p in enumerate(ptr)]
    elif head.kind == "fact_lookup":
        allowed = [bool(head.key_positions(j + 1)) for j in range(n)]
        upto = [n] * n
    else:  # last_occurrence: causal, up to the query itself
        upto = [i + 1 for i in range(n)]
    out = []
    for i in range(n):
        best = 0
        if q[i] is not None:
            for j in range(upto[i] - 1, -1, -1):
                if head.kind == "fact_lookup" and not allowed[j]:
                    continue
                if k[j] is not None and head.predicate(k[j], q[i]):
                    best = j + 1
                    break
        out.append([best])
    return out


def _same(a: Any, b: Any) -> bool:
    """Equality of two SOp values; None never equals anything, sets compare as sets (None = empty)."""
    if isinstance(a, frozenset) or isinstance(b, frozenset):
        return (a or frozenset()) == (b or frozenset())
    return a is not None and b is not None and a == b


def _match_keys(head: HeadSpec, ev: "Evaluator", xs: Sequence[Any]) -> List[List[int]]:
    spec: MatchSpec = head.spec
    vals = [(ev.evaluate(q, xs), ev.evaluate(k, xs)) for q, k in spec.pairs]
    out = []
    for i in range(1, len(xs) + 1):
        hits = [j for j in range(1, i + 1)
                if (spec.where is None or spec.where(i, j))
                and all(_same(qv[i - 1], kv[j - 1]) for qv, kv in vals)]
        if spec.select == "all":
            out.append(hits)
        else:
            out.append([(hits[-1] if spec.select == "last" else hits[0]) if hits else 0])
    return out


class Evaluator(rasp.DefaultRASPEvaluator):
    """tracr's RASP evaluator, memoised, extended with the hand-built heads' semantics.

    ``evaluate(expr, xs)`` returns a list of length len(xs) (RASP positions, no BOS).
    """

    def __init__(self):
        super().__init__()
        self._eval_fn_by_expr_type[HeadRead] = self._eval_head_read
        self._cache: Dict[str, Any] = {}

    def evaluate(self, expr, xs):
        key = expr.label
        if key not in self._cache:
            self._cache[key] = super().evaluate(expr, xs)
        return self._cache[key]

    def _eval_head_read(self, sop: HeadRead, xs):
        head, read = sop.head, sop.read
        if head.kind == "memory":
            return self._eval_memory(head, xs)
        cache_key = "__attended__" + head.label
        if cache_key not in self._cache:
            self._cache[cache_key] = attended_keys(head, self, xs)
        att = self._cache[cache_key]
        if read.source is POSITION:
            src = list(range(1, len(xs) + 1))
        else:
            src = self.evaluate(read.source, xs)
        src = [apply_fn(read.fn, v) for v in src]
        at = lambda a: sop.bos_value if a == 0 else src[a - 1]  # noqa: E731
        if not sop.multi:
            return [at(a[0]) if a else None for a in att]
        out = []
        for a in att:  # set-valued: the union of what every attended key holds
            vals = set()
            for j in a:
                v = at(j)
                if isinstance(v, frozenset):
                    vals |= v
                elif v is not None:
                    vals.add(v)
            out.append(frozenset(vals))
        return out

    def _eval_memory(self, head: HeadSpec, xs):
        spec: MemorySpec = head.spec
        out = [None] * len(xs)
        if len(xs) == spec.length:
            table = _MEMORY_TABLES.get(head)
            if table is None:  # once per head, not once per evaluated input
                table = _MEMORY_TABLES[head] = memory_table(spec)
            key = tuple(tuple(self.evaluate(k, xs)) for k in spec.keys)
            out[-1] = table.get(key)
        return out


#: memory_table of each memorise head, kept as long as the head exists (a reference evaluates many inputs).
_MEMORY_TABLES: "weakref.WeakKeyDictionary[HeadSpec, Dict[Any, Any]]" = weakref.WeakKeyDictionary()


def memory_keys(spec: MemorySpec) -> List[Tuple[Tuple[Any, ...], ...]]:
    """The key values of each example of a memorise head: one tuple (over positions) per key SOp."""
    out = []
    for ex in spec.examples:
        ev = Evaluator()
        out.append(tuple(tuple(ev.evaluate(k, list(ex))) for k in spec.keys))
    return out


def memory_table(spec: MemorySpec, keys: Optional[Sequence[Any]] = None) -> Dict[Any, Any]:
    """Key values of each example of a memorise head (see :func:`memory_keys`) -> its label.

    Raises:
        CompileError: two examples with equal key values have different labels.
    """
    table: Dict[Any, Any] = {}
    for key, lab in zip(memory_keys(spec) if keys is None else keys, spec.labels):
        if table.setdefault(key, lab) != lab:
            raise CompileError(f"memorise: examples with the same key values have labels {table[key]!r} and {lab!r}")
    return table


def evaluate(program: rasp.RASPExpr, xs: Sequence[Any]) -> List[Any]:
    """Evaluate a RASP program (standard or hand-built primitives) on one input.

    Args:
        program: the RASP expression.
        xs: input tokens (no BOS), length n.
    Returns:
        A list of n values (None where the program has no value).
    """
    return Evaluator().evaluate(program, list(xs))
