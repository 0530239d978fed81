"""The RASP program as the checker reads it: its graph, its value sets, and its meaning.

The program is a ``tracr.rasp`` expression. tracr's own primitives mean what tracr's evaluator
says (``rasp.DefaultRASPEvaluator``). The hand-built heads (depthcraft's ``HeadSpec`` nodes and
their ``HeadRead`` outputs, and ``SetMeet``) are recognised by their class names and attributes,
and their meaning is written HERE, not imported (SPEC §3 positions: model position 0 is BOS,
tokens at 1..n, pointer 0 = BOS = no match):

* ``prev_token`` / ``position_map`` (selects ``position``): query i attends target(i) when
  0 <= target(i) <= i, else BOS (ReLU: nothing);
* ``pointer_lookup`` (``pointer``): the model position p its query SOp holds (BOS when p is
  not an int in 0..n);
* ``last_occurrence``, ``last_occurrence_upto``, ``fact_lookup`` (``search``): the latest key j
  with predicate(key[j], query[i]) (neither None) among 1..i (a causal kind), 1..n (a
  bidirectional one), 1..min(p, i) (a stored pointer p; none when p is 0 or not an int),
  restricted to the allowed key positions where given; BOS when none;
* ``match``: keys j <= i with where(i, j) whose every (query, key) pair agrees (None never
  agrees; sets compare as sets); the last, the first, or (``all``) every one;
* ``union``: every key j in 1..n whose key value satisfies predicate with the query value (or
  with an element of a set-valued query); BOS (softmax) or nothing (ReLU) when none;
* ``scored_lookup`` (``score``): the key 0..n with the highest sum of its terms' scores
  (BOS scores ``bos_score``; a term adds score(q, k) where both values exist; POSITION is the
  model position), the latest on a tie;
* ``memorise`` (``readout``): at the last position of an input of the examples' length, the
  label of the example whose key SOps' values equal the input's; None elsewhere.

A read copies the attended key's value of its source (``fn`` applied), or its BOS value at
BOS: tokens -> the read's ``bos_value``; POSITION -> fn(0); another head's read -> fn of that
read's BOS value; anything else -> None. A set-valued read (a ``union`` or ``match(all)``
head, or a read of a set) is the union of what every attended key holds (None: empty).
``SetMeet(a, b)`` is 1 where the two sets meet, else 0.
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

from tracr.rasp import rasp


class ProgramError(Exception):
    """The program is not one the checker can read, or not the certificate's (the message says which)."""


def kind_of(expr: Any) -> str:
    """The node type's name: tracr's class name, or ``HeadRead`` / ``HeadSpec`` / ``SetMeet``."""
    return type(expr).__name__


def is_position(src: Any) -> bool:
    """Whether a read's source is the POSITION marker (the attended key's model position)."""
    return repr(src) == "POSITION" and not isinstance(src, rasp.RASPExpr)


def children(expr: Any) -> List[Any]:
    """Every expression ``expr`` refers to (a head read's head, a head's SOps and reads)."""
    if kind_of(expr) == "HeadRead":
        return [expr.head]
    if kind_of(expr) == "SetMeet":
        return [expr.a, expr.b]
    return list(expr.children)


def graph(sink: Any) -> Dict[str, Any]:
    """label -> expression of every node reachable from ``sink``.

    Raises:
        ProgramError: two different expressions share a label.
    """
    out: Dict[str, Any] = {}
    stack = [sink]
    while stack:
        e = stack.pop()
        old = out.get(e.label)
        if old is not None:
            if old is not e:
                raise ProgramError(f"two nodes of the program are labelled {e.label!r}")
            continue
        out[e.label] = e
        stack.extend(children(e))
    return out


def fingerprint(sink: Any) -> Dict[str, Any]:
    """The program's structure: its sink and, per node, its type and its children's labels.

    Functions are not part of it: a Map whose function changed has the same fingerprint (the
    tables then disagree with it, an obligation), another program does not.
    """
    nodes = graph(sink)
    return {"sink": sink.label, "nodes": {k: [kind_of(e), [c.label for c in children(e)]]
                                          for k, e in sorted(nodes.items())}}


def adopt_labels(sink: Any, fp: Dict[str, Any]) -> List[Tuple[Any, Any]]:
    """Give every node of the program the label the certificate's fingerprint names it by.

    tracr labels a node ``name_id`` with a process-wide counter, so the same program built in
    another process has other ids. The two graphs are walked together from the sink (children
    in order); each pair of nodes must have the same type, the same name and as many children;
    then the node's id is set to the certificate's (tracr caches it per instance).

    Returns:
        [(node, its previous cached id or None)], for :func:`restore_labels`.
    Raises:
        ProgramError: the graphs differ in shape (another program).
    """
    cert = fp.get("nodes") or {}
    seen: Dict[int, str] = {}
    stack = [(sink, fp.get("sink"))]
    plan = []
    while stack:
        e, lab = stack.pop()
        if id(e) in seen:
            if seen[id(e)] != lab:
                raise ProgramError(f"node {e.label!r} stands for two nodes of the certificate's program")
            continue
        entry = cert.get(lab)
        if not isinstance(entry, list) or len(entry) != 2:
            raise ProgramError(f"the certificate's program has no node {lab!r}")
        kids = children(e)
        name, _, num = str(lab).rpartition("_")
        fixed = e.label in ("tokens", "indices", "length")
        if entry[0] != kind_of(e) or len(entry[1]) != len(kids) or (
                fixed and e.label != lab) or (not fixed and (name != e.name or not num.isdigit())):
            raise ProgramError(f"node {e.label!r} ({kind_of(e)}) is not the certificate's {lab!r} ({entry[0]})")
        seen[id(e)] = lab
        if not fixed:
            plan.append((e, int(num)))
        stack.extend(zip(kids, entry[1]))
    saved = [(e, e.__dict__.get("unique_id")) for e, _ in plan]
    for e, num in plan:
        e.__dict__["unique_id"] = num
    return saved


def restore_labels(saved: List[Tuple[Any, Any]]) -> None:
    """Give the nodes :func:`adopt_labels` renamed their own labels back."""
    for e, old in saved:
        if old is None:
            e.__dict__.pop("unique_id", None)
        else:
            e.__dict__["unique_id"] = old


def categorical(expr: Any) -> bool:
    """Whether an SOp is categorical (hand-built reads always are)."""
    return kind_of(expr) in ("HeadRead", "SetMeet") or rasp.is_categorical(expr)


def is_multi(expr: Any) -> bool:
    """A set-valued read (see the module docstring)."""
    if kind_of(expr) != "HeadRead":
        return False
    head, src = expr.head, expr.head.reads[expr.index].source
    spec_sets = head.spec is not None and getattr(head.spec, "select", None) == "all"
    return head.kind.selects == "union" or spec_sets or is_multi(src)


def bos_value(read: Any) -> Any:
    """What a read holds at BOS (module docstring)."""
    src, fn = read.source, read.fn
    if src is rasp.tokens or (isinstance(src, rasp.RASPExpr) and src.label == "tokens"):
        return read.bos_value
    if is_position(src):
        v = 0
    elif kind_of(src) == "HeadRead":
        v = bos_value(src.head.reads[src.index])
        if v is None and is_multi(src):
            v = frozenset()
    else:
        return None
    return apply(fn, v)


def read_bos(sop: Any) -> Any:
    """The BOS value of a HeadRead SOp (empty set for a set-valued one without one)."""
    v = bos_value(sop.head.reads[sop.index])
    return frozenset() if v is None and is_multi(sop) else v


def apply(fn: Optional[Callable], v: Any) -> Any:
    """A read's value map (None stays None; sets element-wise)."""
    if fn is None or v is None:
        return v
    if isinstance(v, frozenset):
        return frozenset(fn(x) for x in v)
    return fn(v)


def same(a: Any, b: Any) -> bool:
    """Equality of two program values WITH their types: ``1``, ``1.0`` and ``True`` hash alike and are
    three values here (a program's functions tell them apart: ``str``); ``0.0`` and ``-0.0`` too; numpy
    scalars are their Python values; tuples and sets element by element; None equals only None."""
    a = a.item() if hasattr(a, "item") and not isinstance(a, (tuple, frozenset)) else a
    b = b.item() if hasattr(b, "item") and not isinstance(b, (tuple, frozenset)) else b
    if a is None or b is None:
        return a is None and b is None
    if type(a) is not type(b):
        return False
    if isinstance(a, tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, frozenset):
        return len(a) == len(b) and all(any(same(x, y) for y in b) for x in a)
    try:
        if isinstance(a, float):
            return (a == b and math.copysign(1.0, a) == math.copysign(1.0, b)) or (a != a and b != b)
        return bool(a == b)
    except Exception:  # noqa: BLE001 - values that cannot be compared are not equal
        return False


# ----------------------------------------------------------------------------------- value sets


def value_sets(nodes: Dict[str, Any], vocab: Sequence[Any], n: int) -> Dict[str, List[Any]]:
    """label -> the values each categorical SOp can hold at a regular position, and at BOS.

    Computed from the program (tokens: the vocabulary; indices: 0..n-1; a Map / SequenceMap: its
    function on its inputs' values; an Aggregate: its SOp's values and its default; SelectorWidth
    0..n; a read: its source's values (fn applied) and its BOS value). Used to give each residual
    row (``name:value``) its value; a value whose function raises is left out.
    """
    memo: Dict[str, List[Any]] = {}

    def add(out: List[Any], v: Any) -> None:
        if not any(same(v, w) for w in out):
            out.append(v)

    def vals(e: Any) -> List[Any]:
        if e.label in memo:
            return memo[e.label]
        memo[e.label] = []
        out: List[Any] = []
        k = kind_of(e)
        if e.label == "tokens":
            for v in vocab:
                add(out, v)
        elif e.label == "indices":
            out = list(range(n))
        elif k == "SelectorWidth":
            out = list(range(n + 1))
        elif k in ("Map", "SequenceMap", "LinearSequenceMap"):
            ins = [vals(e.inner)] if k == "Map" else [vals(e.fst), vals(e.snd)]
            for args in ([(x,) for x in ins[0]] if k == "Map" else [(x, y) for x in ins[0] for y in ins[1]]):
                if any(a is None for a in args):
                    continue
                try:
                    add(out, e.f(*args))
                except Exception:  # noqa: BLE001 - tracr leaves such values out too
                    pass
        elif k == "Aggregate":
            out = list(vals(e.sop))
            if e.default is not None:
                add(out, e.default)
        elif k == "Full":
            out = [e.fill]
        elif k == "SetMeet":
            out = [0, 1]
        elif k == "HeadRead":
            read = e.head.reads[e.index]
            src = read.source
            if repr(src) == "LABEL":
                base = list(e.head.spec.labels)
            elif is_position(src):
                base = list(range(n + 1))
            else:
                base = vals(src)
            for v in base:
                try:
                    add(out, apply(read.fn, v) if repr(src) != "LABEL" else v)
                except Exception:  # noqa: BLE001
                    pass
            add(out, read_bos(e))
        memo[e.label] = out
        return out

    for e in nodes.values():
        if isinstance(e, rasp.SOp) or kind_of(e) in ("HeadRead", "SetMeet"):
            vals(e)
    return memo


#: Most program values one numerical SOp may have here (beyond: no claim).
MAX_NUMBERS = 200_000


def numeric_values(nodes: Dict[str, Any], vocab: Sequence[Any], n: int) -> Dict[str, Optional[List[float]]]:
    """label -> every value a numerical SOp can hold at a regular position (floats, sorted), or None.

    By tracr's evaluator: a numerical Map f of its input's values (categorical: the value set; numerical:
    these); a LinearSequenceMap a x + b y; a numerical Aggregate the mean of 1..n values of its SOp
    (``sum(xs) / len(xs)``; one value: itself) or its default; a numerical SelectorWidth 0..n.
    None where a set has more than :data:`MAX_NUMBERS` values or a function raises.
    """
    cats = value_sets(nodes, vocab, n)
    memo: Dict[str, Optional[List[float]]] = {}

    def nums(e: Any) -> Optional[List[float]]:
        if e.label in memo:
            return memo[e.label]
        memo[e.label] = None
        k, out = kind_of(e), None
        try:
            if categorical(e):
                out = [float(v) for v in cats.get(e.label, []) if isinstance(v, numbers.Number)]
            elif k == "Map":
                ins = cats.get(e.inner.label) if categorical(e.inner) else nums(e.inner)
                out = None if ins is None else [float(e.f(x)) for x in ins if x is not None]
            elif k == "LinearSequenceMap":
                a, b = nums(e.fst), nums(e.snd)
                if a is not None and b is not None and len(a) * len(b) <= MAX_NUMBERS:
                    out = [e.fst_fac * x + e.snd_fac * y for x in a for y in b]
            elif k == "SelectorWidth":
                out = [float(w) for w in range(n + 1)]
            elif k == "Aggregate":
                base = nums(e.sop)
                if base is not None:
                    out = set(base) | ({float(e.default)} if e.default is not None else set())
                    sums = {0.0}
                    base_set = sorted(set(base))
                    for cnt in range(1, n + 1):
                        sums = {x + y for x in sums for y in base_set}
                        if len(sums) > MAX_NUMBERS:
                            out = None
                            break
                        if cnt > 1:
                            out |= {x / cnt for x in sums}
                    out = None if out is None else list(out)
        except Exception:  # noqa: BLE001 - a function that raises: no claim
            out = None
        if out is not None:
            out = sorted(set(out))
            if len(out) > MAX_NUMBERS:
                out = None
        memo[e.label] = out
        return out

    return {lab: nums(e) for lab, e in nodes.items() if isinstance(e, rasp.SOp) and not categorical(e)}


# ------------------------------------------------------------------------------------ evaluation


def _agree(a: Any, b: Any) -> bool:
    if isinstance(a, frozenset) or isinstance(b, frozenset):
        return (a or frozenset()) == (b or frozenset())
    return a is not None and b is not None and a == b


class Evaluator(rasp.DefaultRASPEvaluator):
    """tracr's evaluator on one input, memoised, with the hand-built heads' meaning (module docstring)."""

    def __init__(self, nodes: Dict[str, Any]):
        super().__init__()
        for e in nodes.values():
            if kind_of(e) == "HeadRead":
                self._eval_fn_by_expr_type[type(e)] = self._read
            elif kind_of(e) == "SetMeet":
                self._eval_fn_by_expr_type[type(e)] = self._meet
        self.nodes = nodes
        self.memo: Dict[str, Any] = {}
        self.tables: Dict[int, Dict[Any, Any]] = {}

    def evaluate(self, expr, xs):
        if expr.label not in self.memo:
            self.memo[expr.label] = super().evaluate(expr, xs)
        return self.memo[expr.label]

    def run(self, sink: Any, xs: Sequence[Any]) -> List[Any]:
        """The sink's values at positions 1..n of the input ``xs`` (no BOS)."""
        self.memo = {}
        return list(self.evaluate(sink, list(xs)))

    def attended(self, head: Any, xs: List[Any]) -> List[List[int]]:
        """For each query position 1..n, the model positions the head attends (module docstring)."""
        n, kind, ev = len(xs), head.kind, lambda s: self.evaluate(s, xs)
        out: List[List[int]] = []
        relu = head.attention != "softmax"
        if kind.selects == "position":
            for i in range(1, n + 1):
                t = head.spec.target(i)
                out.append([t] if isinstance(t, int) and 0 <= t <= i else ([] if relu else [0]))
        elif kind.selects == "pointer":
            out = [[p] if isinstance(p, int) and not isinstance(p, bool) and 0 <= p <= n else [0] for p in ev(head.query)]
        elif kind.selects == "search":
            q, k = ev(head.query), ev(head.key)
            ptr = ev(head.pointer) if kind.pointer else None
            for i in range(n):
                if ptr is not None:
                    p = ptr[i]
                    hi = min(p, i + 1) if isinstance(p, int) and not isinstance(p, bool) and p > 0 else 0
                else:
                    hi = n if kind.causal is False else i + 1
                best = 0
                for j in range(hi, 0, -1):
                    if kind.key_positions and not head.key_positions(j):
                        continue
                    if q[i] is not None and k[j - 1] is not None and head.predicate(k[j - 1], q[i]):
                        best = j
                        break
                out.append([best])
        elif kind.selects == "match":
            spec = head.spec
            pairs = [(ev(a), ev(b)) for a, b in spec.pairs]
            for i in range(1, n + 1):
                hits = [j for j in range(1, i + 1) if (spec.where is None or spec.where(i, j))
                        and all(_agree(qv[i - 1], kv[j - 1]) for qv, kv in pairs)]
                if spec.select == "all":
                    out.append(hits)
                else:
                    out.append([(hits[-1] if spec.select == "last" else hits[0]) if hits else 0])
        elif kind.selects == "union":
            q, k = ev(head.query), ev(head.key)
            for i in range(n):
                el = () if q[i] is None else (q[i] if isinstance(q[i], frozenset) else (q[i],))
                hits = [j + 1 for j in range(n) if k[j] is not None and any(head.predicate(k[j], x) for x in el)]
                out.append(hits or ([] if relu else [0]))
        elif kind.selects == "score":
            for row in self.score_rows(head, xs):
                best = max(row)
                out.append([max(j for j, v in enumerate(row) if v == best)])
        else:
            raise ProgramError(f"a {kind.name} head attends no key")
        return out

    def score_rows(self, head: Any, xs: List[Any]) -> List[List[float]]:
        """scored_lookup: per query 1..n, the score of every key 0..n (module docstring)."""
        n = len(xs)
        rows = [[float(head.spec.bos_score)] + [0.0] * n for _ in range(n)]
        for t in head.spec.terms:
            side = lambda s: (list(range(1, n + 1)), None) if is_position(s) else (  # noqa: E731
                list(self.evaluate(s, xs)), read_bos(s) if kind_of(s) == "HeadRead" else None)
            qv, _ = side(t.query)
            kv, kb = side(t.key)
            keys = [kb] + kv
            for i in range(n):
                for j in range(n + 1):
                    if qv[i] is not None and keys[j] is not None:
                        rows[i][j] += float(t.score(qv[i], keys[j]))
        return rows

    def _read(self, sop: Any, xs):
        head, read = sop.head, sop.head.reads[sop.index]
        if head.kind.selects == "readout":
            return self._memory(head, xs)
        att = self.memo.setdefault("__att__" + head.label, None) or self.attended(head, xs)
        self.memo["__att__" + head.label] = att
        src = list(range(1, len(xs) + 1)) if is_position(read.source) else self.evaluate(read.source, xs)
        src = [apply(read.fn, v) for v in src]
        at = lambda a: read_bos(sop) if a == 0 else src[a - 1]  # noqa: E731
        if not is_multi(sop):
            return [at(a[0]) if a else None for a in att]
        out = []
        for a in att:
            s: Set[Any] = set()
            for j in a:
                v = at(j)
                s |= v if isinstance(v, frozenset) else ({v} if v is not None else set())
            out.append(frozenset(s))
        return out

    def _meet(self, sop: Any, xs):
        a, b = self.evaluate(sop.a, xs), self.evaluate(sop.b, xs)
        return [int(bool((x or frozenset()) & (y or frozenset()))) for x, y in zip(a, b)]

    def _memory(self, head: Any, xs):
        spec = head.spec
        table = self.tables.get(id(head))
        if table is None:
            table = {}
            for ex, lab in zip(spec.examples, spec.labels):
                sub = Evaluator(self.nodes)
                key = tuple(tuple(sub.run(k, list(ex))) for k in spec.keys)
                table.setdefault(key, lab)
            self.tables[id(head)] = table
        out: List[Any] = [None] * len(xs)
        if len(xs) == len(spec.examples[0]):
            saved = dict(self.memo)
            out[-1] = table.get(tuple(tuple(self.evaluate(k, xs)) for k in spec.keys))
            self.memo = saved
        return out


class Possible:
    """Values an SOp can hold at model position p on EVERY input of length >= p (None: no claim).

    By RASP semantics: indices hold p - 1; a Map / SequenceMap f of its inputs' possible values
    (None in, None out); a ``position`` head's read the source's value at target(p) when
    1 <= target(p) <= p (POSITION: fn(target(p))), else its BOS value (ReLU: None or the empty
    set); a ``match`` (last / first) read of POSITION fn(j) for a candidate j (1 <= j <= p,
    where(p, j)) or its BOS value, the latter left out when p is its own candidate and every pair
    compares one SOp that is never None (tokens) with itself. Anything else: no claim. The tables
    use it to leave out query or key combinations that no input reaches.
    """

    def __init__(self, nodes: Dict[str, Any], n: int):
        self.nodes, self.n, self.memo = nodes, n, {}

    def at(self, label: str, p: int) -> Optional[List[Any]]:
        key = (label, p)
        if key not in self.memo:
            self.memo[key] = None
            try:
                self.memo[key] = self._at(self.nodes[label], p)
            except Exception:  # noqa: BLE001 - a function that raises gives no claim
                self.memo[key] = None
        return self.memo[key]

    def _at(self, e: Any, p: int) -> Optional[List[Any]]:
        k = kind_of(e)
        if e.label == "indices":
            return [p - 1]
        if k == "Map":
            a = self.at(e.inner.label, p)
            return None if a is None else _dedup([None if x is None else e.f(x) for x in a])
        if k == "SequenceMap":
            a, b = self.at(e.fst.label, p), self.at(e.snd.label, p)
            if a is None or b is None:
                return None
            return _dedup([None if x is None or y is None else e.f(x, y) for x in a for y in b])
        if k != "HeadRead":
            return None
        head, read = e.head, e.head.reads[e.index]
        if head.kind.selects == "position":
            t = head.spec.target(p)
            if not (isinstance(t, int) and 1 <= t <= p):
                return [read_bos(e) if head.attention == "softmax" else (frozenset() if is_multi(e) else None)]
            if is_position(read.source):
                return [apply(read.fn, t)]
            if not isinstance(read.source, rasp.RASPExpr) or read.source.label == "tokens":
                return None
            src = self.at(read.source.label, t)
            return None if src is None else _dedup([apply(read.fn, v) for v in src])
        if head.kind.selects == "match" and head.spec.select in ("first", "last") and is_position(read.source):
            spec = head.spec
            cands = [j for j in range(1, p + 1) if spec.where is None or spec.where(p, j)]
            certain = p in cands and all(a.label == b.label == "tokens" for a, b in spec.pairs)
            return _dedup([apply(read.fn, j) for j in cands] + ([] if certain else [read_bos(e)]))
        return None


def _dedup(vals: List[Any]) -> List[Any]:
    out: List[Any] = []
    for v in vals:
        if not any(same(v, w) for w in out):
            out.append(v)
    return out


# ------------------------------------------------------------------------ what one head selects


class Semantics:
    """One attention head's meaning as tables: what it selects, given values and positions.

    Attributes:
        how: ``select`` (a tracr Select: every key whose predicate holds, bidirectional),
            ``width`` (SelectorWidth's head: BOS and every selected key), ``position``,
            ``pointer``, ``search``, ``match``, ``score`` (module docstring).
        query, key: the SOps whose values the selection reads at the query / the key.
        numeric: the head averages (a numerical Aggregate, or ``width``).
        node: the program node; reads: per written SOp label, (source SOp or "POSITION", fn, BOS value).
    """

    def __init__(self, node: Any):
        self.node, self.reads = node, {}
        self.numeric, self.predicate, self.prefix = False, None, False
        k = kind_of(node)
        if k in ("Aggregate", "SelectorWidth"):
            sel = node.selector
            if kind_of(sel) != "Select":
                raise ProgramError(f"{node.label} uses a {kind_of(sel)} selector (only Select is checked)")
            self.how = "select" if k == "Aggregate" else "width"
            self.query, self.key, self.predicate = [sel.queries], [sel.keys], sel.predicate
            self.numeric = k == "SelectorWidth" or not rasp.is_categorical(node)
            if k == "Aggregate":
                self.reads[node.label] = (node.sop, None, node.default)
            return
        head, kind = node, node.kind
        if head.attention != "softmax":
            raise ProgramError(f"{head.label} is a {head.attention} head (the tables route checks softmax heads)")
        self.how = kind.selects
        self.query = [s for s in (head.query, head.pointer) if s is not None]
        self.key = [head.key] if head.key is not None else []
        self.predicate, self.prefix = head.predicate, kind.causal is True
        if self.how == "match":
            if head.spec.select == "all":
                raise ProgramError(f"{head.label} selects every match (a set-valued read)")
            self.query, self.key = [a for a, _ in head.spec.pairs], [b for _, b in head.spec.pairs]
        elif self.how == "score":
            self.query = [t.query for t in head.spec.terms if not is_position(t.query)]
            self.key = [t.key for t in head.spec.terms if not is_position(t.key)]
        elif self.how not in ("position", "pointer", "search"):
            raise ProgramError(f"{head.label}: a {kind.name} head has no table semantics here")

    def table(self, qv: Dict[str, Any], qpos: Any, kv: Dict[str, Any], kpos: Any, n: int) -> Any:
        """[nq, nk] what the meaning selects for regular queries (values by label: object arrays [nq];
        model positions ``qpos`` [nq], -1 unknown) and regular keys (``kv``, ``kpos`` [nk]): bool, or
        for ``score`` the key's score (float). Each function is called once per distinct value pair.
        Raises whatever the program's functions raise."""
        import numpy as np
        head, nq, nk = self.node, len(qpos), len(kpos)
        qpos, kpos = np.asarray(qpos), np.asarray(kpos)
        ones = np.ones((nq, nk), bool)
        if self.how in ("select", "width"):
            return pairs(lambda k, q: bool(self.predicate(k, q)), kv[self.key[0].label],
                         qv[self.query[0].label]).T.astype(bool)
        if self.how == "position":
            t = pairs(lambda q, _: _int(head.spec.target(int(q))), qpos, np.zeros(1)).ravel().astype(np.int64)
            return (kpos[None, :] == t[:, None]) & (t >= 1)[:, None] & (t <= qpos)[:, None]
        if self.how == "pointer":
            p = pairs(lambda q, _: _int(q), qv[head.query.label], np.zeros(1)).ravel().astype(np.int64)
            return (kpos[None, :] == p[:, None]) & (p >= 1)[:, None]
        if self.how == "search":
            w = pairs(lambda k, q: q is not None and k is not None and bool(head.predicate(k, q)),
                      kv[head.key.label], qv[head.query.label]).T.astype(bool) & (kpos >= 1)[None, :]
            if head.kind.pointer:
                p = pairs(lambda q, _: _int(q), qv[head.pointer.label], np.zeros(1)).ravel().astype(np.int64)
                w &= kpos[None, :] <= p[:, None]
            if head.kind.key_positions:
                w &= pairs(lambda j, _: bool(head.key_positions(int(j))), kpos, np.zeros(1)).ravel().astype(bool)[None, :]
            return w
        if self.how == "match":
            spec, w = head.spec, ones & (kpos >= 1)[None, :]
            for a, b in spec.pairs:
                w &= pairs(_agree, qv[a.label], kv[b.label]).astype(bool)
            if spec.where is not None:
                w &= (kpos[None, :] <= qpos[:, None]) & pairs(
                    lambda i, j: i >= 1 and j >= 1 and bool(spec.where(int(i), int(j))), qpos, kpos).astype(bool)
            return w
        total = np.zeros((nq, nk))
        for t in head.spec.terms:
            a = qpos if is_position(t.query) else qv[t.query.label]
            b = kpos if is_position(t.key) else kv[t.key.label]
            total += pairs(lambda x, y: 0.0 if x is None or y is None else float(t.score(x, y)), a, b).astype(float)
        return total

    def bos_score(self) -> float:
        return float(self.node.spec.bos_score)


def _int(v: Any) -> int:
    """v as a position: an int (not a bool), else -1."""
    return int(v) if isinstance(v, numbers.Integral) and not isinstance(v, bool) else -1


def pairs(f: Callable[[Any, Any], Any], a: Any, b: Any) -> Any:
    """[len(a), len(b)] object array of f(a_i, b_j), f called once per distinct pair (values with types)."""
    import numpy as np

    def codes(vals):
        arr = np.asarray(vals) if not isinstance(vals, np.ndarray) else vals
        if arr.dtype != object:
            u, inv = np.unique(arr, return_inverse=True)
            return [x.item() for x in u], inv.ravel()
        seen: Dict[int, int] = {}  # one program value object per decoded value: group by identity
        uniq, idx = [], np.empty(len(arr), np.int64)
        for t, v in enumerate(arr):
            j = seen.get(id(v))
            if j is None:
                j = seen[id(v)] = len(uniq)
                uniq.append(v)
            idx[t] = j
        return uniq, idx
    ua, ia = codes(a)
    ub, ib = codes(b)
    t = np.empty((len(ua), len(ub)), object)
    for i, x in enumerate(ua):
        for j, y in enumerate(ub):
            t[i, j] = f(x, y)
    return t[ia][:, ib]


def head_reads(nodes: Dict[str, Any], written: Sequence[str]) -> Tuple[Any, Dict[str, Tuple[Any, Any, Any]]]:
    """The node an attention head implements, from the SOp labels it writes, and what each write copies.

    Returns (node, {written label: (source SOp or the POSITION marker, fn, BOS value)}).
    Raises:
        ProgramError: the labels are not the outputs of one head.
    """
    exprs = [nodes.get(w) for w in written]
    if len(exprs) == 1 and exprs[0] is not None and kind_of(exprs[0]) == "Aggregate":
        e = exprs[0]
        return e, {e.label: (e.sop, None, e.default)}
    if len(written) == 1 and written[0].endswith("_selector_width_attn_output"):
        e = nodes.get(written[0][: -len("_selector_width_attn_output")])
        if e is not None and kind_of(e) == "SelectorWidth":
            return e, {}
    if exprs and all(e is not None and kind_of(e) == "HeadRead" for e in exprs):
        heads = {id(e.head): e.head for e in exprs}
        if len(heads) == 1:
            head = exprs[0].head
            return head, {e.label: (e.head.reads[e.index].source, e.head.reads[e.index].fn, read_bos(e))
                          for e in exprs}
    raise ProgramError(f"the head writes {list(written)}, which are not the outputs of one program node")
