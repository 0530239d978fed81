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
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

from tracr.rasp import rasp

from constructions.errors import CompileError

#: Default logit gap (in nats) between the intended key and any other key of a
#: hand-built head. With gap g and at most T keys the softmax weight on the
#: intended key is at least 1 / (1 + T e^-g); 24 gives > 1 - 1e-7 for T <= 1000.
DEFAULT_HARDNESS = 24.0


#: The hand-built head kinds (see the factory function of each).
HEAD_KINDS = ("prev_token", "last_occurrence", "pointer_lookup", "last_occurrence_upto", "fact_lookup")


class _Position:
    """Marker for the model position of each token (BOS = 0). Use :data:`POSITION`."""

    def __repr__(self) -> str:
        return "POSITION"


#: Read the model position of the attended token (a pointer; BOS reads 0).
POSITION = _Position()


@dataclasses.dataclass(frozen=True)
class Read:
    """What a head copies from the attended position.

    Attributes:
        source: :data:`POSITION`, ``rasp.tokens`` or any categorical SOp.
        bos_value: value the read returns when the head attends to BOS. Only
            settable for ``rasp.tokens`` (other sources carry their own BOS
            value); None means "no value" (a zero vector in the residual stream).
        name: optional name of the output SOp.
    """

    source: Union[_Position, rasp.SOp]
    bos_value: Any = None
    name: Optional[str] = None


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
    :func:`pointer_lookup`, :func:`last_occurrence_upto` or :func:`fact_lookup`,
    which return the head's :class:`HeadRead` outputs.

    Attributes:
        kind: one of :data:`HEAD_KINDS`.
        query: query SOp (``last_occurrence``, ``last_occurrence_upto``,
            ``fact_lookup``: the value to match; ``pointer_lookup``: the pointer), or None.
        key: key SOp (the matching kinds only), or None.
        predicate: ``predicate(key_value, query_value) -> bool`` for the matching
            kinds (tracr's argument order).
        reads: what the head copies from the attended position.
        hardness: logit gap (nats) between the intended key and every other key.
        pointer: ``last_occurrence_upto`` only: the stored pointer (model position)
            at or before which the head searches.
        key_positions: ``fact_lookup`` only: ``key_positions(model_position) -> bool``,
            the positions the head may attend (besides BOS).
    """

    def __init__(self, kind: str, *, query: Optional[rasp.SOp], key: Optional[rasp.SOp],
                 predicate: Optional[Callable[[Any, Any], bool]], reads: Sequence[Read],
                 hardness: float, name: Optional[str] = None, pointer: Optional[rasp.SOp] = None,
                 key_positions: Optional[Callable[[int], bool]] = None):
        super().__init__()
        if kind not in HEAD_KINDS:
            raise CompileError(f"unknown head kind {kind!r}")
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
        self.pointer = pointer
        self.key_positions = key_positions
        self._annotations = rasp._Annotations(self, name=name or kind)  # pylint: disable=protected-access

    def __call__(self, xs):  # pragma: no cover - a head is evaluated through its reads
        raise NotImplementedError("evaluate a head through its HeadRead outputs")

    @property
    def children(self) -> List[rasp.RASPExpr]:
        kids: List[rasp.RASPExpr] = [s for s in (self.query, self.key, self.pointer) if s is not None]
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
        self.bos_value = bos_value_of(read)
        default = f"{head.name}_{'position' if read.source is POSITION else getattr(read.source, 'name', 'value')}"
        self._annotations = rasp._Annotations(  # pylint: disable=protected-access
            self, name=read.name or default, encoding=rasp.Encoding.CATEGORICAL)

    @property
    def read(self) -> Read:
        return self.head.reads[self.index]

    @property
    def children(self) -> List[rasp.RASPExpr]:
        return [self.head]


def bos_value_of(read: Read) -> Any:
    """Value a read returns at BOS: 0 for POSITION, ``bos_value`` for tokens, else the source's own."""
    if read.source is POSITION:
        return 0
    if read.source is rasp.tokens:
        return read.bos_value
    if isinstance(read.source, HeadRead):
        return read.source.bos_value
    return None


def _make(kind: str, reads: Sequence[ReadLike], **kw) -> List[HeadRead]:
    head = HeadSpec(kind, reads=[_as_read(r) for r in reads], **kw)
    return [HeadRead(head, i) for i in range(len(head.reads))]


def prev_token(reads: Union[ReadLike, Sequence[ReadLike]], *, hardness: float = DEFAULT_HARDNESS,
               name: Optional[str] = None) -> Union[HeadRead, List[HeadRead]]:
    """Previous-token head: position i attends to position i-1 (position 1 attends to BOS).

    QK: one-hot RASP index a (query) against index a-1 (key) scores 2*hardness;
    every query scores BOS at hardness; everything else 0. So positions >= 2
    pick i-1 and position 1 (and BOS) pick BOS, each by a gap of ``hardness``.
    OV: copies ``reads``. Cost: 1 head, QK width = max_seq_len + 1.

    Args:
        reads: one read (returns one SOp) or a list (returns a list).
        hardness: logit gap in nats.
        name: head name shown in residual labels.
    Returns:
        HeadRead SOp(s): value at i is the read at i-1; at position 1 the BOS value.
    """
    single = not isinstance(reads, (list, tuple))
    outs = _make("prev_token", [reads] if single else reads, query=None, key=None, predicate=None,
                 hardness=hardness, name=name)
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
# Reference semantics (hardmax): a RASP evaluator that knows the hand-built heads.
# --------------------------------------------------------------------------------------------


def attended_positions(head: HeadSpec, ev: "Evaluator", xs: Sequence[Any]) -> List[int]:
    """Model position each query position 1..n attends to under hardmax semantics."""
    n = len(xs)
    if head.kind == "prev_token":
        return [i for i in range(n)]  # query at model position i+1 attends to i
    if head.kind == "pointer_lookup":
        ptr = ev.evaluate(head.query, xs)
        return [p if isinstance(p, int) and 0 <= p <= n else 0 for p in ptr]
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
        out.append(best)
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
        cache_key = "__attended__" + head.label
        if cache_key not in self._cache:
            self._cache[cache_key] = attended_positions(head, self, xs)
        att = self._cache[cache_key]
        if read.source is POSITION:
            src = list(range(1, len(xs) + 1))
        else:
            src = self.evaluate(read.source, xs)
        return [sop.bos_value if a == 0 else src[a - 1] for a in att]


def evaluate(program: rasp.RASPExpr, xs: Sequence[Any]) -> List[Any]:
    """Evaluate a RASP program (standard or hand-built primitives) on one input.

    Args:
        program: the RASP expression.
        xs: input tokens (no BOS), length n.
    Returns:
        A list of n values (None where the program has no value).
    """
    return Evaluator().evaluate(program, list(xs))
