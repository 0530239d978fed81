"""Node types of the hand-built heads, and the one table of head kinds.

RASP (Weiss et al. 2021) and tracr (Lindner et al. 2023) have no primitive for
"attend to the *latest* matching position" or "attend to the position stored in
a pointer". Those are exactly the heads that pointer-doubling constructions
need (Sanford, Hsu & Telgarsky 2024, proof of Thm 4.2). This module defines the
RASP expressions that carry them: a head is a :class:`HeadSpec` (a non-SOp node,
like a selector) and each value it copies is a :class:`HeadRead` SOp. Programs
build them with the factories of :mod:`constructions.primitives`; their
reference semantics is :mod:`constructions.reference`; their weights are built
by :mod:`constructions.heads` (and :mod:`constructions.memory`,
:mod:`constructions.angles`).

Head kinds
----------
:data:`HEAD_KINDS` is the one table of head kinds: a :class:`HeadKind` per kind,
named like the factory that makes it, with the properties every consumer reads
(what the head reads, how it selects its key, causal or bidirectional, the
attention kinds it can be designed for, whether it has an angle-mode QK, whether
it is soft by design, whether other heads may read it).

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
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from tracr.rasp import rasp

from depthcraft.constructions.errors import CompileError

#: Attention kinds a hand-built head can be designed for.
HEAD_ATTENTION = ("softmax", "relu")
#: How a head selects its key(s) (:attr:`HeadKind.selects`).
SELECTS = ("position", "pointer", "search", "match", "readout", "union", "score")


class _Position:
    """Marker for the model position of each token (BOS = 0). Use :data:`POSITION`."""

    def __repr__(self) -> str:
        return "POSITION"


#: Read the model position of the attended token (a pointer; BOS reads 0).
POSITION = _Position()


class _Label:
    """Marker for the output of a ``memorise`` head (its label). Use :data:`LABEL`."""

    def __repr__(self) -> str:
        return "LABEL"


#: What a ``memorise`` head writes: the memorised label (not a value copied from a key).
LABEL = _Label()


# --------------------------------------------------------------------------------------------
# Kind-specific data
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class PositionMapSpec:
    """``prev_token`` / ``position_map`` data: ``target(i)`` is the model position query i attends to.

    ``target`` maps model positions 1..N to 0..N, or None (no key).
    """

    target: Callable[[int], Optional[int]]

    #: Reads of this head are single values, not sets.
    set_valued = False

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

    @property
    def set_valued(self) -> bool:
        """True when the head adds every match up (``select="all"``): its reads are sets."""
        return self.select == "all"

    def sops(self) -> List[rasp.SOp]:
        return [s for pair in self.pairs for s in pair]


@dataclasses.dataclass(frozen=True)
class MemorySpec:
    """``memorise`` data: read-out heads that memorise a labelled set of inputs.

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

    #: The read-out is one label, not a set.
    set_valued = False

    def sops(self) -> List[rasp.SOp]:
        return list(self.keys)

    @property
    def length(self) -> int:
        """R, the length of every example: the read-out is at model position R."""
        return len(self.examples[0])


@dataclasses.dataclass(frozen=True)
class ScoreTerm:
    """One term of a ``scored_lookup`` head's score: ``score(query[i], key[j])`` in units of hardness.

    Attributes:
        query: what the query position i contributes: a categorical SOp, ``rasp.tokens``
            or :data:`POSITION` (its model position).
        key: what the key position j contributes (same choices).
        score: ``score(query_value, key_value) -> float``; called only when both values
            exist (a None value, BOS's token and BOS's position contribute nothing).
    """

    query: Any
    key: Any
    score: Callable[[Any, Any], float]


@dataclasses.dataclass(frozen=True)
class ScoreSpec:
    """``scored_lookup`` data: the score of key j for query i is the sum of the terms.

    Attributes:
        terms: the :class:`ScoreTerm` s.
        bos_score: the score of BOS (model position 0) for every query, in units of hardness.
    """

    terms: Tuple[ScoreTerm, ...]
    bos_score: float

    #: Reads of this head are single values, not sets.
    set_valued = False

    def sops(self) -> List[rasp.SOp]:
        return [s for t in self.terms for s in (t.query, t.key) if isinstance(s, rasp.SOp)]


# --------------------------------------------------------------------------------------------
# The table of head kinds
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class HeadKind:
    """Properties of one kind of hand-built head (a row of :data:`HEAD_KINDS`).

    Attributes:
        name: the kind's one name, that of the factory in :mod:`constructions.primitives`.
        selects: how the head picks its key(s), one of :data:`SELECTS`:
            ``"position"`` a fixed map of the query's position (:class:`PositionMapSpec`);
            ``"pointer"`` the model position a pointer SOp holds (``query``);
            ``"search"`` the latest key whose ``key`` value matches the query's ``query``
            value under ``predicate`` (up to the query, up to a stored ``pointer``, or over
            the allowed ``key_positions``);
            ``"match"`` the keys agreeing on several SOp pairs in a window (:class:`MatchSpec`);
            ``"readout"`` no attended key: a read-out fitted to labelled inputs (:class:`MemorySpec`);
            ``"union"`` every key whose ``key`` value satisfies ``predicate`` with the query's
            ``query`` value (or with one element of a set-valued query), all alike.
            ``"score"`` the key with the highest sum of score terms (:class:`ScoreSpec`).
        causal: True: keys after the query are masked (the head compiles as a causal head,
            and only into a causal model); False: bidirectional, it sees keys after the
            query (only in a model compiled with ``causal=False``); None: either model, its
            scores never pick a key after the query by themselves.
        attention: the attention kinds (:data:`HEAD_ATTENTION`) the head can be designed for.
        query: reads a query SOp (:attr:`HeadSpec.query`).
        key: reads a key SOp (:attr:`HeadSpec.key`), compared with the query by ``predicate``.
        pointer: reads a stored pointer (:attr:`HeadSpec.pointer`) and searches at or before it.
        key_positions: takes ``key_positions(model_position) -> bool``: attends those
            positions only (besides BOS).
        spec: type of the kind-specific data (:attr:`HeadSpec.spec`), or None.
        angle: has a QK circuit in angle position mode (:mod:`constructions.angles`).
        soft: soft by design: its attention weights are no hardmax (no margin to check).
        readable: other heads may read its outputs (False when its value at BOS is unspecified).
        sets: its reads are sets, the union of what every attended key holds (the head
            brings its own MLP that turns the attention average back into a 0/1 multi-hot).
    """

    name: str
    selects: str
    causal: Optional[bool]
    attention: Tuple[str, ...]
    query: bool = False
    key: bool = False
    pointer: bool = False
    key_positions: bool = False
    spec: Optional[type] = None
    angle: bool = False
    soft: bool = False
    readable: bool = True
    sets: bool = False

    def __post_init__(self) -> None:
        if self.selects not in SELECTS:
            raise ValueError(f"HeadKind {self.name}: selects must be one of {SELECTS}, got {self.selects!r}")
        if not set(self.attention) <= set(HEAD_ATTENTION):
            raise ValueError(f"HeadKind {self.name}: attention kinds {self.attention} not in {HEAD_ATTENTION}")

    def __str__(self) -> str:
        return self.name


PREV_TOKEN = HeadKind("prev_token", "position", causal=None, attention=("softmax", "relu"),
                      spec=PositionMapSpec, angle=True)
POSITION_MAP = HeadKind("position_map", "position", causal=None, attention=("softmax", "relu"),
                        spec=PositionMapSpec)
POINTER_LOOKUP = HeadKind("pointer_lookup", "pointer", causal=None, attention=("softmax",), query=True,
                          angle=True)
LAST_OCCURRENCE = HeadKind("last_occurrence", "search", causal=True, attention=("softmax",), query=True,
                           key=True, angle=True)
LAST_OCCURRENCE_UPTO = HeadKind("last_occurrence_upto", "search", causal=True, attention=("softmax",),
                                query=True, key=True, pointer=True)
FACT_LOOKUP = HeadKind("fact_lookup", "search", causal=False, attention=("softmax",), query=True, key=True,
                       key_positions=True)
MATCH = HeadKind("match", "match", causal=True, attention=("softmax", "relu"), spec=MatchSpec)
MEMORISE = HeadKind("memorise", "readout", causal=True, attention=("softmax", "relu"), spec=MemorySpec,
                    soft=True, readable=False)
UNION = HeadKind("union", "union", causal=False, attention=("softmax", "relu"), query=True, key=True, sets=True)
SCORED_LOOKUP = HeadKind("scored_lookup", "score", causal=False, attention=("softmax",), spec=ScoreSpec)

#: The one table of head kinds (see :class:`HeadKind`).
HEAD_KINDS: Tuple[HeadKind, ...] = (PREV_TOKEN, LAST_OCCURRENCE, POINTER_LOOKUP, POSITION_MAP, MATCH, MEMORISE,
                                    LAST_OCCURRENCE_UPTO, FACT_LOOKUP, UNION, SCORED_LOOKUP)
_BY_NAME: Dict[str, HeadKind] = {k.name: k for k in HEAD_KINDS}


def head_kind(kind: Union[str, HeadKind]) -> HeadKind:
    """The :class:`HeadKind` of a kind name (or the kind itself).

    Raises:
        CompileError: an unknown kind, naming the known ones.
    """
    if isinstance(kind, HeadKind) and _BY_NAME.get(kind.name) is kind:
        return kind
    found = _BY_NAME.get(kind) if isinstance(kind, str) else None
    if found is None:
        raise CompileError(f"unknown head kind {kind!r}; expected one of {[k.name for k in HEAD_KINDS]}")
    return found


# --------------------------------------------------------------------------------------------
# Heads and their reads
# --------------------------------------------------------------------------------------------


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


class HeadSpec(rasp.RASPExpr):
    """One hand-built attention head (a non-SOp RASP expression, like a selector).

    Do not build directly: use the factories of :mod:`constructions.primitives`
    (``prev_token``, ``last_occurrence``, ``pointer_lookup``, ``position_map``,
    ``match``, ``memorise``, ``last_occurrence_upto``, ``fact_lookup``, ``union``,
    ``scored_lookup``), which return the head's :class:`HeadRead` outputs.

    Attributes:
        kind: the :class:`HeadKind` (a row of :data:`HEAD_KINDS`; the constructor
            also takes its name).
        query: query SOp (``search`` kinds: the value to match; ``pointer_lookup``:
            the pointer; ``union``: a value or a set), or None.
        key: key SOp (the ``search`` and ``union`` kinds), or None.
        predicate: ``predicate(key_value, query_value) -> bool`` for the ``search``
            and ``union`` kinds (tracr's argument order).
        reads: what the head copies from the attended position.
        hardness: logit gap (nats) between the intended key and every other key
            (softmax heads; ReLU heads give the intended keys score exactly 1).
        attention: ``"softmax"`` or ``"relu"``: the attention kind the head's scores are
            designed for (a model compiles heads of one kind only).
        spec: kind-specific data (:class:`PositionMapSpec`, :class:`MatchSpec`,
            :class:`MemorySpec`, :class:`ScoreSpec`), or None.
        pointer: ``last_occurrence_upto`` only: the stored pointer (model position)
            at or before which the head searches.
        key_positions: ``fact_lookup`` only: ``key_positions(model_position) -> bool``,
            the positions the head may attend (besides BOS).

    Raises:
        CompileError: an unknown kind or attention kind, an attention kind the head
            kind has no form for, no read, a numerical SOp, hardness <= 0, a read of a
            head that cannot be read, or arguments the kind does not take.
    """

    def __init__(self, kind: Union[str, HeadKind], *, query: Optional[rasp.SOp], key: Optional[rasp.SOp],
                 predicate: Optional[Callable[[Any, Any], bool]], reads: Sequence[Read],
                 hardness: float, name: Optional[str] = None, attention: str = "softmax",
                 spec: Any = None, pointer: Optional[rasp.SOp] = None,
                 key_positions: Optional[Callable[[int], bool]] = None):
        super().__init__()
        kind = head_kind(kind)
        if attention not in HEAD_ATTENTION:
            raise CompileError(f"attention must be one of {HEAD_ATTENTION}, got {attention!r}")
        if attention not in kind.attention:
            if attention == "relu":
                raise CompileError(f"{kind} selects one key by competition (softmax); it has no ReLU form")
            raise CompileError(f"{kind} has no {attention} form (it is designed for {list(kind.attention)})")
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
        if kind.spec is not None and not isinstance(spec, kind.spec):
            raise CompileError(f"a {kind} head needs a {kind.spec.__name__}, got {spec!r}")
        used = [query, key, pointer] + [r.source for r in reads] + (list(spec.sops()) if spec is not None else [])
        for s in used:
            if isinstance(s, HeadRead) and not s.head.kind.readable:
                raise CompileError(f"{s.label} is a {s.head.kind} read-out (its value at BOS is unspecified); "
                                   "no head can read it")
        if kind.pointer != (pointer is not None):
            raise CompileError("a stored pointer is given exactly for "
                               f"{', '.join(k.name for k in HEAD_KINDS if k.pointer)} heads")
        if kind.key_positions and not callable(key_positions):
            raise CompileError(f"{kind} needs key_positions(model_position) -> bool, got {key_positions!r}")
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
        self._annotations = rasp._Annotations(self, name=name or kind.name)  # pylint: disable=protected-access

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
        self.multi = head.kind.sets or (head.spec is not None and head.spec.set_valued) or is_multi(read.source)
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


class SetMeet(rasp.SOp):
    """Whether two set-valued SOps meet: 1 where ``a[i] & b[i]`` is non-empty, else 0 (an MLP).

    Made by :func:`constructions.primitives.meet`; compiled to one MLP sublayer by
    :mod:`constructions.setmlp` (no attention). Categorical, values {0, 1}.

    Attributes:
        a, b: set-valued SOps (:func:`is_multi`) at the same position.
    """

    def __init__(self, a: rasp.SOp, b: rasp.SOp, name: Optional[str] = None):
        super().__init__()
        for s in (a, b):
            if not is_multi(s):
                raise CompileError(f"meet compares two set-valued SOps; {getattr(s, 'label', s)!r} is not one")
        if a.label == b.label:
            raise CompileError("meet needs two different SOps (a set always meets itself unless it is empty)")
        self.a = a
        self.b = b
        self._annotations = rasp._Annotations(  # pylint: disable=protected-access
            self, name=name or "meet", encoding=rasp.Encoding.CATEGORICAL)

    @property
    def children(self) -> List[rasp.RASPExpr]:
        return [self.a, self.b]


def apply_fn(fn: Optional[Callable[[Any], Any]], value: Any) -> Any:
    """Apply a read's value map to one value (None stays None; a set maps element-wise)."""
    if fn is None or value is None:
        return value
    if isinstance(value, frozenset):
        return frozenset(fn(v) for v in value)
    return fn(value)


def is_pointer(sop: Any) -> bool:
    """True if ``sop`` holds model positions: a read of POSITION, or a read of a pointer."""
    if not isinstance(sop, HeadRead):
        return False
    src = sop.read.source
    return src is POSITION or is_pointer(src)
