"""Certification by symmetry: a domain that is a few orbits of a group, proved one representative each.

The abstract route (:mod:`.state`, :mod:`.heads`) keeps one set of values per residual block
and kind of position, so it cannot express what a construction like
:func:`~depthcraft.rasp_programs.retrieval.retrieval_tripling` relies on (docs/
tripling_certification.md: relations between positions along a chain). Many task domains are
instead closed under renaming: the retrieval domain under any permutation of the symbols and of
the fact slots. Then every domain input is g . x for one of a few *representatives* x and a
group element g, and it suffices to prove x and that the model and the program commute with g.

**The group.** A :class:`Symmetry` gives, per representative, generators g = (sigma, pi): sigma
a permutation of the token values (BOS and PAD fixed), pi one of the model positions 0..N (BOS,
position 0, fixed). g acts on an input by (g . x)_{pi(i)} = sigma(x_i). The task's docstring
proves that its domain is the union of the orbits of the representatives under the group each
one's generators generate (and a test checks it by brute force on small instances); that is the
one premise this module does not check.

**What is checked, and why it suffices.** Every SOp gets an *action* on its values, one of
``fixed`` (g does nothing), ``token`` (sigma), ``position`` (pi on model positions) or ``index`` (a
RASP index i is model position i + 1: i -> pi(i + 1) - 1), found per SOp (:func:`kinds`):

1. *The program commutes with G* (:func:`kinds`): for every generator, every node maps g-acted
   inputs to g-acted outputs on every value of its value set: a Map f(g a) = g f(a), a
   SequenceMap alike on every pair, a ``scored_lookup`` term score(g q, g k) = score(q, k) on
   every pair, a head read fn(g v) = g fn(v) and its BOS value fixed; equality is with the type (1,
   1.0 and True differ), and every value a node takes is one of its residual values (the values its
   readers are checked on), with its type. By induction over the
   program, if at input x every scored head's best key is unique (or its tied keys read equal
   values, so the tie-break by position does not matter; checked at each representative), the
   program's value at g . x and position pi(i) is g applied to its value at x and i.
2. *The weights commute with G* (:func:`weight_check`): g induces a permutation P of the residual
   directions (``name:value`` -> ``name:g value``; ``tokens:`` by sigma, ``indices:`` by the index action). Then
   the embeddings satisfy token[sigma v][P] = token[v] and pos[pi p][P] = pos[p]; every head's
   W_Q and W_K, with rows permuted by P, equal the originals up to one common permutation of the
   head's columns (so every score x W_Q (y W_K)^T is unchanged), W_V and W_O likewise (columns
   of W_V with rows of W_O); every MLP's hidden units (W_1 column, b_1 entry, W_2 row) likewise;
   b_2 and the read-out (its columns by the sink's action) commute with P. All comparisons are
   exact (float32 bit equality). The ``indices:`` directions are RASP indices (model position
   minus one). So the exact forward (real arithmetic, softmax or hardmax)
   commutes with g: the residual of g . x at pi(i) is P applied to that of x at i.
3. *The representative* (:func:`forward_bound`): one float32 forward of x, bounded in exact
   terms. For each sublayer the ideal residual E (the weights' hardmax evaluation, computed in
   float64) and a radius per position and direction bounding both |float32 residual - E| and
   float64's own error: projections within gamma_k of their absolute terms (any summation order,
   :mod:`.float32`), scores within the propagated radii, the softmax within the leak of the
   keys that score below the top by more than their perturbations (every weight within psi of
   its value: exp within 4 ulp, the normalising sum within gamma_{N+1}), MLPs through ReLU (1-
   Lipschitz), residual additions one u. Every score row's top must be one key, or keys whose
   value vectors are equal. The read-out then decodes every position 1..n of x with a margin
   above twice its error bound, to the RASP program's value there.

Each bound is a sum or maximum over positions of the same expressions of residual vectors and
weights, so the proof for x, with every position renamed by pi and every direction by P, is a
proof for g . x (steps 1 and 2 make the renamed quantities those of g . x; float32 rounding
bounds do not depend on the order of a sum). Hence on every domain input the float32 forward
decodes, at every position, to the RASP program's value: ``certified`` over the domain.

**Locality (:func:`.locality.certify_by_locality`, its own module), where the orbits are too many.** Retrieval at d = 64 has
5.4e9 orbits (the ways the distractor facts split into chains). A :class:`Locality` declares the
domain's inputs as disjoint unions of *components* (the queried chain with ``?`` and the query,
each other chain), each of which occurs, up to a renaming in the group, in one of a few
*pieces* (the queried chain alone, and the queried chain with one chain of l facts, for every l).
A component's *objects* are its symbols and positions (values some generator moves) and its
owned tokens (``?``); distinct components' objects are disjoint (the task's proof). Checked, on
top of steps 1 and 2 for the group:

4. *The program is local* (:func:`_program_local`): at each piece, every SOp value at a position is
   an object of its component or a value no generator moves, and every scored head's best score
   over the query's *own* keys (its component and BOS) is strictly above the most a key of any
   other component can score: per score term, the largest entry of the term's table over the key
   values that are not the query's component's objects (0 where the key value may be None).
5. *The weights are local* (:func:`forward_bound` with a :class:`.locality.Local`): the bounded forward of
   each piece takes every query's top among its own keys only; every other key is *foreign*: its
   score is at most, per residual block, the largest entry of the query's row of W_Q W_K^T over
   the directions a foreign key may hold (not the query's component's objects; 0 where an SOp may
   be None), plus the float32 error of a residual within R of that one-hot; up to N + 1 - (own
   keys) of them add to the leak, with value vectors bounded block by block. After every sublayer
   every position must be within R (per sublayer) of a one-hot of its own objects' values. R is
   first measured (foreign keys as exact, at two pieces) and multiplied by a slack; the proof is
   the pass that assumes it and checks it at every position of every piece.

By induction over the sublayers, in every domain input every component's positions hold the
renamed residuals of its piece (own keys are the renamed own keys; foreign keys are positions of
other components, which by the induction hold their own objects within R, so the foreign bound
covers them, and the own top wins), and the program's values are the renamed values of the piece
(step 4 with step 1). So every position decodes to the program's value.

What is NOT covered: causal models with position generators (pi would not preserve the mask:
refused), numerical SOps and read-outs, set-valued SOps, SelectorWidth and tracr's own
Aggregate (refused, with the reason), inputs outside the declared orbits.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
from tracr.rasp import rasp

from depthcraft.constructions.model import BOS, PAD, CompiledModel, sublayer_names
from depthcraft.constructions.nodes import POSITION, HeadRead, HeadSpec, apply_fn, bos_value_of
from depthcraft.constructions.reference import Evaluator, score_table
from depthcraft.verify.certify.float32 import U32, U64, gamma, up


#: Most orbits the route enumerates (each costs one bounded forward of its representative); a domain
#: with more is refused up front, naming the count.
MAX_ORBITS = 5000

#: The actions an SOp's values can carry, tried in this order (the first that commutes is used).
ACTIONS = ("fixed", "token", "position", "index")


@dataclasses.dataclass(frozen=True)
class Generator:
    """One group element g = (sigma, pi) acting on inputs by (g . x)_{pi(i)} = sigma(x_i).

    Attributes:
        tokens: sigma as a dict token value -> token value (a permutation of the values it
            names; identity elsewhere; BOS and PAD never moved).
        positions: pi as a tuple of length N + 1, pi[i] the image of model position i
            (pi[0] = 0: BOS is fixed).
    """

    tokens: Tuple[Tuple[Any, Any], ...]
    positions: Tuple[int, ...]

    @functools.cached_property
    def _sigma(self) -> Dict[Any, Any]:
        return dict(self.tokens)

    def sigma(self, v: Any) -> Any:
        """sigma(v): the image of a token value (v itself where sigma does not name it)."""
        return self._sigma.get(v, v) if self.tokens else v


@dataclasses.dataclass(frozen=True)
class Orbit:
    """One representative input and the generators of the group whose orbit of it is part of the domain.

    Attributes:
        tokens: the representative, token values at positions 1..n (no BOS).
        generators: indices into :attr:`Symmetry.generators`.
        label: what the orbit is, in words (e.g. the chain lengths).
    """

    tokens: Tuple[Any, ...]
    generators: Tuple[int, ...]
    label: str


@dataclasses.dataclass(frozen=True)
class Symmetry:
    """A task's domain as a union of orbits (module docstring).

    Attributes:
        group: the group in words (named in the certificate's scope).
        generators: every generator used by some orbit (each checked once).
        orbits: a callable giving the :class:`Orbit` s (one representative per orbit; may be
            many: it is called when the symmetry route runs, not when the task is built).
        proof: where the proof that the orbits cover the domain is (a docstring's qualified name).
        count: the number of orbits, computed without enumerating them (checked against
            :data:`MAX_ORBITS` before any work).
        locality: where the orbits are too many, the same domain as pieces (:class:`Locality`,
            :func:`certify_by_locality`), or None.
    """

    group: str
    generators: Tuple[Generator, ...]
    orbits: Callable[[], Sequence[Orbit]]
    proof: str
    count: Callable[[], int]
    locality: Optional[Any] = None  # a locality.Locality (that module imports this one)


class NotProved(Exception):
    """The symmetry route cannot prove the model (``why``; ``where``: (layer, head) or None; ``witness``)."""

    def __init__(self, why: str, where: Tuple[Optional[str], Optional[int]] = (None, None),
                 witness: Optional[Dict[str, Any]] = None):
        super().__init__(why)
        self.why, self.where, self.witness = why, where, witness


# ------------------------------------------------------------------------------------------------
# 1. Actions on values, and the program's equivariance
# ------------------------------------------------------------------------------------------------

def act(kind: str, g: Generator, v: Any) -> Any:
    """g applied to one value carrying ``kind`` (:data:`ACTIONS`); None, bools and foreign values are fixed."""
    if kind == "fixed" or v is None or isinstance(v, bool):
        return v
    if kind == "token":
        return g.sigma(v)
    if not isinstance(v, (int, np.integer)):
        return v
    if kind == "index":  # a RASP index: model position v + 1
        return g.positions[int(v) + 1] - 1 if 0 <= int(v) < len(g.positions) - 1 else v
    return g.positions[int(v)] if 0 <= int(v) < len(g.positions) else v


def strict_key(v: Any) -> Tuple[type, Any]:
    """A value with its type (numpy scalars as Python ones): 1, 1.0 and True are three values here.

    Python's == (and so a set, or a dict key) takes them for one, but a program's functions can tell
    them apart (``type``, ``isinstance``); the compiler's value sets are Python sets, so they may keep
    only one of them.
    """
    v = v.item() if isinstance(v, np.generic) else v
    return type(v), v


def strictly_equal(a: Any, b: Any) -> bool:
    """Equal values of the same type (:func:`strict_key`; None equals only None)."""
    return strict_key(a) == strict_key(b)


class _ValueSets(dict):
    """SOp label -> its values (the residual directions the compiler gave it). An SOp with none (computed
    inside a sublayer, never written) is refused: its checks would hold vacuously."""

    def __missing__(self, label: str) -> List[Any]:
        raise NotProved(f"{label} has no values in the residual stream (computed inside a sublayer): its "
                        f"equivariance cannot be checked on its value set")

    def get(self, label, default=None):  # noqa: D102  every look-up goes through __missing__
        return self[label]


def node_value_sets(model: CompiledModel) -> Dict[str, List[Any]]:
    """SOp label -> its categorical values, from ``model.program.values``; looking up an SOp with none
    raises :class:`NotProved` (its checks would hold vacuously)."""
    out: Dict[str, List[Any]] = _ValueSets()
    for _, (sop, v) in model.program.values.items():
        out.setdefault(sop, []).append(v)
    return out


def side_values(side: Any, kinds: Dict[str, str], values: Dict[str, List[Any]], n: int):
    """(kind, values) of one side of a score term or a read's source."""
    if side is POSITION:
        return "position", list(range(1, n + 1))
    if side is rasp.tokens:
        return "token", None
    return _action_of(side, kinds), values.get(side.label, [])


def kinds(model: CompiledModel, generators: Sequence[Generator]) -> Dict[str, str]:
    """The action of every SOp of the program under which every node commutes with every generator.

    Returns:
        SOp label -> one of :data:`ACTIONS`.
    Raises:
        NotProved: a node of a kind this route does not handle, or one that commutes under no action
            (the message names the node, the generator and the value where it fails).
    """
    prog = model.program
    values = node_value_sets(model)
    vocab = [v for v in model.input_values if v not in (BOS, PAD)]
    n = int(model.max_seq_len)
    out: Dict[str, str] = {"tokens": "token"}
    order = _topological(prog)
    for expr in order:
        lab = expr.label
        if lab in out or isinstance(expr, HeadSpec) or isinstance(expr, rasp.Selector):
            continue
        if expr is rasp.tokens or lab == "tokens":
            continue
        if expr is rasp.indices or lab == "indices":
            out["indices"] = "index"
            continue
        if not rasp.is_categorical(expr):
            raise NotProved(f"{lab} is numerical: the symmetry route proves categorical programs only")
        if isinstance(expr, rasp.Map):
            src = expr.inner
            vals = vocab if src is rasp.tokens else values.get(src.label, [])
            out[lab] = _first_action(lab, [(_action_of(src, out), vals)],
                                     lambda a: expr.f(*a), generators, own=values.get(lab, []))
        elif isinstance(expr, rasp.SequenceMap):
            sides = [(_action_of(s, out), vocab if s is rasp.tokens else values.get(s.label, []))
                     for s in (expr.fst, expr.snd)]
            out[lab] = _first_action(lab, sides, lambda a: expr.f(*a), generators, own=values.get(lab, []))
        elif isinstance(expr, HeadRead):
            head = expr.head
            if head.kind.selects != "score" or expr.multi:
                raise NotProved(f"{lab}: a {head.kind.name} head (the symmetry route handles scored_lookup heads)")
            _terms_commute(head, out, values, vocab, n, generators)
            read = expr.read
            kind, vals = side_values(read.source, out, values, n)
            if vals is None:
                vals = vocab
            out[lab] = _first_action(lab, [(kind, vals)], lambda a: apply_fn(read.fn, a[0]), generators,
                                     fixed=(expr.bos_value,), own=values.get(lab, []))
        else:
            raise NotProved(f"{lab}: a {type(expr).__name__} (the symmetry route handles Map, SequenceMap and "
                            f"scored_lookup reads)")
    return out


def _action_of(sop: Any, kinds_: Dict[str, str]) -> str:
    """The action of an SOp already visited (``rasp.tokens``: token, ``rasp.indices``: index)."""
    if sop is rasp.indices:
        return "index"
    return kinds_[sop.label]


def _topological(prog) -> List[Any]:
    """The program's nodes, every node after its children."""
    seen, order = set(), []

    def visit(e):
        if e.label in seen:
            return
        seen.add(e.label)
        for c in e.children:
            visit(c)
        if isinstance(e, HeadSpec) and e.spec is not None and hasattr(e.spec, "terms"):
            for t in e.spec.terms:
                for s in (t.query, t.key):
                    if isinstance(s, rasp.SOp):
                        visit(s)
        for r in getattr(e, "reads", ()) or ():
            if isinstance(r.source, rasp.SOp):
                visit(r.source)
        order.append(e)
    visit(prog.nodes[prog.sink])
    return order


def _first_action(label: str, sides, f: Callable, generators: Sequence[Generator], fixed=(), own=()) -> str:
    """The first action under which f(g a_1, ..., g a_k) = g f(a_1, ..., a_k) on every combination.

    Every value f takes (and the BOS value) must be one of ``own``, the SOp's residual values, with its
    type (:func:`strict_key`): the nodes that read this SOp are checked on ``own`` only.
    """
    combos = list(itertools.product(*[vals for _, vals in sides]))
    key = lambda c: tuple(strict_key(a) for a in c)  # noqa: E731
    results = {key(c): f(c) for c in combos}
    have = {strict_key(v) for v in own}
    for c, r in itertools.chain(zip(combos, results.values()), (((), v) for v in fixed)):
        if r is not None and strict_key(r) not in have:
            raise NotProved(f"{label}: the value {r!r} (of {c!r}) is not one of its residual values {list(own)!r} "
                            f"(with its type): the nodes that read it are checked on those only")
    last = None
    for kind in ACTIONS:
        ok = True
        for gi, g in enumerate(generators):
            if any(not strictly_equal(act(kind, g, v), v) for v in fixed):
                ok, last = False, f"its BOS value {fixed} moves under generator {gi}"
                break
            for c in combos:
                gc = tuple(act(k, g, a) for (k, _), a in zip(sides, c))
                if key(gc) == key(c) and kind == "fixed":
                    continue
                want = act(kind, g, results[key(c)])
                got = results[key(gc)] if key(gc) in results else f(gc)
                if not strictly_equal(got, want):
                    ok, last = False, f"at {c!r} under generator {gi}: f(g a) = {got!r}, g f(a) = {want!r}"
                    break
            if not ok:
                break
        if ok:
            return kind
    raise NotProved(f"{label} commutes with the group under no action ({', '.join(ACTIONS)}); last: {last}")


def _terms_commute(head: HeadSpec, kinds_: Dict[str, str], values, vocab, n: int,
                   generators: Sequence[Generator]) -> None:
    """Every score term of a scored_lookup head is invariant: score(g q, g k) = score(q, k) on every pair.

    The term's table over its query and key value sets is computed once; each generator then
    permutes its rows and columns (a value whose image is not in its set is refused).
    """
    for t in head.spec.terms:
        qk, qv = side_values(t.query, kinds_, values, n)
        kk, kv = side_values(t.key, kinds_, values, n)
        qv = [v for v in (vocab if qv is None else qv) if v is not None]
        kv = [v for v in (vocab if kv is None else kv) if v is not None]
        table = np.array([[float(t.score(q, k)) for k in kv] for q in qv], np.float64).reshape(len(qv), len(kv))
        for gi, g in enumerate(generators):
            gq, gk = _images(qk, g, qv, head.label), _images(kk, g, kv, head.label)
            bad = np.argwhere(table[np.ix_(gq, gk)] != table)
            if len(bad):
                i, j = (int(x) for x in bad[0])
                raise NotProved(f"head {head.label}: a score term is not invariant under generator {gi}: "
                                f"score({qv[i]!r}, {kv[j]!r}) = {table[i, j]:g} but "
                                f"{table[gq[i], gk[j]]:g} on the moved values")


def _images(kind: str, g: Generator, vals: Sequence[Any], where: str) -> np.ndarray:
    """[len(vals)] int: the index in ``vals`` of g applied to each value (NotProved: not closed)."""
    at = {_key(v): i for i, v in enumerate(vals)}
    out = []
    for v in vals:
        j = at.get(_key(act(kind, g, v)))
        if j is None:
            raise NotProved(f"{where}: the value {v!r} goes to {act(kind, g, v)!r} under the group, which is not "
                            f"one of its values")
        out.append(j)
    return np.asarray(out, np.int64)


# ------------------------------------------------------------------------------------------------
# 2. The weights' equivariance
# ------------------------------------------------------------------------------------------------

def residual_permutation(model: CompiledModel, kinds_: Dict[str, str], g: Generator) -> np.ndarray:
    """[D] int: P, the residual direction each direction goes to under g.

    Raises:
        NotProved: a direction's image is not a direction of the model (a value set not closed
            under g), or a direction of unknown meaning.
    """
    labels = model.residual_labels
    index = {lab: i for i, lab in enumerate(labels)}
    by_value: Dict[Tuple[str, Any], int] = {}
    for lab, (sop, v) in model.program.values.items():
        by_value[(sop, _key(v))] = index[lab]
    tokens = {f"tokens:{v}": v for v in model.input_values}
    perm = np.empty(len(labels), np.int64)
    for i, lab in enumerate(labels):
        if lab == "one":
            perm[i] = i
        elif lab in tokens:
            img = f"tokens:{g.sigma(tokens[lab])}"
            if img not in index:
                raise NotProved(f"residual direction {lab}: its image {img} is not a direction of the model")
            perm[i] = index[img]
        elif lab.startswith("indices:"):  # RASP index i: model position i + 1 (BOS has none)
            img = f"indices:{act('index', g, int(lab.split(':', 1)[1]))}"
            if img not in index:
                raise NotProved(f"residual direction {lab}: its image {img} is not a direction of the model")
            perm[i] = index[img]
        elif lab in model.program.values:
            sop, v = model.program.values[lab]
            kind = kinds_.get(sop)
            if kind is None:
                raise NotProved(f"residual direction {lab}: SOp {sop} is not a node of the program")
            key = (sop, _key(act(kind, g, v)))
            if key not in by_value:
                raise NotProved(f"the values of {sop} are not closed under the group: {v!r} goes to "
                                f"{act(kind, g, v)!r}, which is not one of its values")
            perm[i] = by_value[key]
        else:
            raise NotProved(f"residual direction {lab} is neither an SOp value, a token, a position nor 'one'")
    if len(set(perm.tolist())) != len(perm):
        raise NotProved("the residual permutation induced by a generator is not one-to-one")
    return perm


def _key(v: Any) -> Any:
    return (type(v) is bool, v)


def _local(rows: Optional[Sequence[int]], perm: np.ndarray, what: str) -> np.ndarray:
    """Within the rows a projection reads (None: all), the position each row goes to under P."""
    if rows is None:
        return perm
    rows = list(rows)
    at = {r: i for i, r in enumerate(rows)}
    try:
        return np.array([at[int(perm[r])] for r in rows], np.int64)
    except KeyError:
        raise NotProved(f"{what}: the rows it reads are not closed under the group") from None


def _moved_rows(m: np.ndarray, loc: np.ndarray) -> np.ndarray:
    """m with row i moved to row loc[i] (P applied to the rows)."""
    out = np.empty_like(m)
    out[loc] = m
    return out


def _same_columns(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether the columns of a [r, c] are a permutation of those of b (exact multiset equality)."""
    if a.shape != b.shape:
        return False
    if a.size == 0:
        return True
    sa = a[:, np.lexsort(a[::-1])]
    sb = b[:, np.lexsort(b[::-1])]
    return bool(np.array_equal(sa, sb))


def weight_check(model: CompiledModel, perm: np.ndarray, g: Generator, out_kind: str) -> None:
    """Step 2 of the module docstring for one generator: the weights commute with P.

    Raises:
        NotProved: the first matrix that does not (named by sublayer and head).
    """
    names = sublayer_names(model.arch)
    emb = model.params["embed"]
    tok = np.asarray(emb["token"])
    ids = {v: i for i, v in enumerate(model.input_values)}
    for v, i in ids.items():
        j = ids.get(g.sigma(v))
        if j is None or not np.array_equal(tok[j][perm], tok[i]):
            raise NotProved(f"the token embedding does not commute with the group at token {v!r}", ("embed", None))
    pos = np.asarray(emb["pos"])
    for p in range(pos.shape[0]):
        q = g.positions[p] if p < len(g.positions) else p
        if not np.array_equal(pos[q][perm], pos[p]):
            raise NotProved(f"the position embedding does not commute with the group at position {p}",
                            ("embed", None))
    for name, spec, p in zip(names, model.arch.sublayers, model.params["layers"]):
        if spec.kind == "attn":
            lq, lk = _local(spec.q_rows, perm, name), _local(spec.k_rows, perm, name)
            lv, lo = _local(spec.v_rows, perm, name), _local(spec.out_rows, perm, name)
            for h in range(np.asarray(p["w_q"]).shape[0]):
                wq, wk = np.asarray(p["w_q"][h]), np.asarray(p["w_k"][h])
                qk = np.vstack([wq, wk])
                if not _same_columns(np.vstack([_moved_rows(wq, lq), _moved_rows(wk, lk)]), qk):
                    raise NotProved("W_Q and W_K do not commute with the group (no common permutation of the "
                                    "head's columns)", (name, h))
                wv, wo = np.asarray(p["w_v"][h]), np.asarray(p["w_o"][h])
                ov = np.vstack([wv, wo.T])
                if not _same_columns(np.vstack([_moved_rows(wv, lv), _moved_rows(wo.T, lo)]), ov):
                    raise NotProved("W_V and W_O do not commute with the group", (name, h))
        else:
            li, lo = _local(spec.in_rows, perm, name), _local(spec.out_rows, perm, name)
            w1, b1, w2, b2 = (np.asarray(p[k]) for k in ("w_1", "b_1", "w_2", "b_2"))
            unit = np.vstack([w1, b1[None], w2.T])
            if not _same_columns(np.vstack([_moved_rows(w1, li), b1[None], _moved_rows(w2.T, lo)]), unit):
                raise NotProved("the MLP's hidden units do not commute with the group", (name, None))
            if not np.array_equal(_moved_rows(b2, lo), b2):
                raise NotProved("the MLP's output bias does not commute with the group", (name, None))
    u = np.asarray(model.params["unembed"]["w"])
    outs = {_key(v): i for i, v in enumerate(model.output_values)}
    cols = []
    for v in model.output_values:
        j = outs.get(_key(act(out_kind, g, v)))
        if j is None:
            raise NotProved(f"the read-out's values are not closed under the group ({v!r})", ("read-out", None))
        cols.append(j)
    moved = np.empty_like(u)
    moved[np.ix_(perm, cols)] = u
    if not np.array_equal(moved, u) or ("b" in model.params["unembed"] and not np.array_equal(
            np.asarray(model.params["unembed"]["b"])[cols], np.asarray(model.params["unembed"]["b"]))):
        raise NotProved("the read-out does not commute with the group", ("read-out", None))


# ------------------------------------------------------------------------------------------------
# 3. The representative: one float32 forward, bounded
# ------------------------------------------------------------------------------------------------

def _proj(e: np.ndarray, rad: np.ndarray, w: np.ndarray, bias: Optional[np.ndarray] = None,
          cache: Optional[Dict[int, Any]] = None):
    """(ideal, error bound) of x @ w (+ bias) for |x - e| <= rad, float32 in any order (gamma_k per column).

    ``cache``: |w| and the column gammas per weight matrix (keyed by id; the cache holds the matrix,
    so the id is not reused while it is there), for one certification's own float64 copies."""
    got = None if cache is None else cache.get(id(w))
    if got is None:
        k = (w != 0).sum(0) + (0 if bias is None else (bias != 0))
        got = (w, np.abs(w), np.array([gamma(int(v), U32) for v in k]), gamma(int(k.max(initial=0)) + 1, U64))
        if cache is not None:
            cache[id(w)] = got
    _, aw, g32, g64 = got
    ideal = e @ w + (0 if bias is None else bias)
    mag = (np.abs(e) + rad) @ aw + (0 if bias is None else np.abs(bias))
    return ideal, rad @ aw + (g32 + g64) * mag


def forward_bound(model: CompiledModel, xs: Sequence[Any], want: Sequence[Any],
                  local: Optional[Any] = None, w64: Optional[Dict[str, Any]] = None) -> List[Dict[str, Any]]:
    """Step 3 of the module docstring at one input: the float32 forward decodes to ``want`` everywhere.

    Args:
        model: a compiled softmax model (no biases in attention, ReLU MLPs).
        xs: the input's token values at positions 1..n (no BOS).
        want: [n] the RASP program's values there (None: no value).
        local: the locality route (:func:`.locality.certify_by_locality`): each query row's own keys are BOS and
            its component's positions; every other key is *foreign*, bounded from the weights over
            the values it may hold (not the query's component's objects) and a residual within the
            assumed radius of their one-hot (:class:`.locality.Local`), up to N + 1 of them.
        w64: the weights in float64 (:func:`weights64`), made once per certification; None: made here.
    Returns:
        One entry per sublayer (and head): ``{"layer", "head", "min_gap", "leak_bound", "radius_out"}``
        (the smallest top gap in units of nats, the largest leak, the largest radius after it).
    Raises:
        NotProved: a score row whose top holds keys with different values within the perturbation,
            a radius that leaves no decoding margin, or a position that decodes to another value.
    """
    n_max = int(model.max_seq_len)
    w64 = weights64(model) if w64 is None else w64
    pc = w64["_proj"]
    ids = model.encode([list(xs)])[0]
    t = len(ids)
    emb = model.params["embed"]
    e = np.asarray(emb["token"], np.float64)[ids] + np.asarray(emb["pos"], np.float64)[:t]
    rad = np.zeros_like(e)
    rad += gamma(2, U32) * np.abs(e)  # the embedding sum (one rounding)
    g_keys = gamma(n_max + 1, U32)
    psi = up((1 + 4 * U32) * (1 + U32) / ((1 - g_keys) * (1 - 4 * U32)) - 1)
    stats: List[Dict[str, Any]] = []
    names = sublayer_names(model.arch)
    for name, spec, p in zip(names, model.arch.sublayers, model.params["layers"]):
        if spec.kind == "attn":
            rows = lambda r: slice(None) if r is None else list(r)  # noqa: E731
            zs, ezs = [], []
            for h in range(np.asarray(p["w_q"]).shape[0]):
                wq, wk, wv = (w64[name][k][h] for k in ("w_q", "w_k", "w_v"))
                q, eq = _proj(e[:, rows(spec.q_rows)], rad[:, rows(spec.q_rows)], wq, cache=pc)
                k, ek = _proj(e[:, rows(spec.k_rows)], rad[:, rows(spec.k_rows)], wk, cache=pc)
                v, ev = _proj(e[:, rows(spec.v_rows)], rad[:, rows(spec.v_rows)], wv, cache=pc)
                sc = float(spec.qk_scale)
                dot = q @ k.T
                s_hat = sc * dot
                a_err = np.abs(q) @ ek.T + eq @ np.abs(k).T + eq @ ek.T
                mag = (np.abs(q) + eq) @ (np.abs(k) + ek).T
                gd = gamma(q.shape[1], U32) + gamma(q.shape[1] + 1, U64)
                # the product q . k, then x qk_scale: the scale is rounded to float32 first (a Python float times
                # a float32 array), then the product: 2u (+ u^2) of the scaled score
                delta = up(1.0) * (sc * (a_err + gd * mag) * (1 + 2 * U32 + U32 ** 2)
                                   + (2 * U32 + U32 ** 2) * sc * (np.abs(dot) + a_err + gd * mag))
                own = np.ones((t, t), bool) if local is None else local.own
                best = np.where(own, s_hat, -np.inf).argmax(1)
                rr = np.arange(t)
                top_lo = s_hat[rr, best] - delta[rr, best]
                in_top = (s_hat + delta >= top_lo[:, None]) & own
                gap = (s_hat[rr, best][:, None] - s_hat) - delta - delta[rr, best][:, None]  # G_j, > 0 off the top
                dmax = np.where(own, delta, 0.0).max(1)
                expo = np.where(in_top | ~own, -np.inf, -(1 - U32) * gap + 4 * U32 * dmax[:, None])
                leak = up(1.0) * (1 + psi) * np.exp(expo).sum(1)
                if local is not None:
                    f_gap, f_leak, f_far = local.foreign(name, h, spec, q, eq, wk, wv, s_hat[rr, best] - delta[rr, best],
                                                         dmax, psi, sc, gd)
                    if not (f_gap > 0).all():
                        i = int(np.flatnonzero(~(f_gap > 0))[0])
                        raise NotProved(f"query position {i}: a foreign key (another chain's) may score within "
                                        f"{-f_gap[i]:.3g} of the top", (name, h), {"input": list(xs), "query_position": i})
                    leak = leak + f_leak
                vstar = v[best]
                dv = np.zeros_like(v)
                far = np.zeros_like(v)
                single = in_top.sum(1) == 1
                dv[single] = ev[best[single]]  # the top is the best key alone
                for i in np.flatnonzero(~single):
                    tops = np.flatnonzero(in_top[i])
                    dev = np.abs(v[tops] - vstar[i]) + ev[tops]
                    dv[i] = dev.max(0)
                    if len(tops) > 1 and (np.abs(v[tops] - vstar[i]).max() > 0):
                        j = int(tops[tops != best[i]][0])
                        raise NotProved(f"query position {i}: keys {int(best[i])} and {j} score within the float32 "
                                        f"perturbation ({s_hat[i, best[i]]:.6g} and {s_hat[i, j]:.6g}, bound "
                                        f"{delta[i, best[i]] + delta[i, j]:.3g}) and hold different values",
                                        (name, h), {"input": list(xs), "query_position": i, "keys": [int(best[i]), j]})
                # far[i]: the largest |v_j - v*_i| + ev_j over own keys off the top, by value class of the keys
                vals_u, inv = np.unique(v, axis=0, return_inverse=True)
                inv = inv.reshape(-1)
                for g_ in range(len(vals_u)):
                    members = inv == g_
                    reach = (~in_top & own)[:, members].any(1)  # rows where this class has an own key off the top
                    if reach.any():
                        evm = ev[members].max(0)
                        far[reach] = np.maximum(far[reach], np.abs(vals_u[g_][None] - vstar[reach]) + evm[None])
                vmax = (np.abs(v) + ev).max(0)
                if local is not None:  # foreign keys: their value vectors within f_far of zero
                    far = np.maximum(far, f_far[None] + np.abs(vstar))
                    vmax = np.maximum(vmax, f_far)
                ez = (1 + psi) * dv + leak[:, None] * far + psi * np.abs(vstar) + g_keys * (1 + psi) * vmax[None]
                zs.append(vstar)
                ezs.append(ez)
                finite_gap = np.where(in_top | ~own, np.inf, gap)
                if local is not None:
                    finite_gap = np.minimum(finite_gap, f_gap[:, None])
                stats.append({"layer": name, "head": h, "min_gap": float(finite_gap.min()) if t > 1 else None,
                              "leak_bound": float(leak.max())})
            wo = w64[name]["w_o_all"]
            out, eout = _proj(np.concatenate(zs, 1), np.concatenate(ezs, 1), wo, cache=pc)
        else:
            w1, b1, w2, b2 = (w64[name][k] for k in ("w_1", "b_1", "w_2", "b_2"))
            rows_in = slice(None) if spec.in_rows is None else list(spec.in_rows)
            pre, epre = _proj(e[:, rows_in], rad[:, rows_in], w1, b1, cache=pc)
            out, eout = _proj(np.maximum(pre, 0.0), epre, w2, b2, cache=pc)
            stats.append({"layer": name, "head": None, "min_gap": None, "leak_bound": None})
        cols = slice(None) if spec.out_rows is None else list(spec.out_rows)
        new = e[:, cols] + out
        rad[:, cols] = up(1.0) * (rad[:, cols] + eout + U32 * (np.abs(new) + rad[:, cols] + eout))
        e[:, cols] = new
        for st in stats:
            if st["layer"] == name:
                st["radius_out"] = float(rad.max())
        if not np.isfinite(rad).all():
            raise NotProved("the error bound is not finite", (name, None))
        if local is not None:
            local.check_positions(e, rad, name, list(xs))
    logits, err = _proj(e, rad, w64["unembed"], cache=pc)
    vals = list(model.output_values)
    margins: Dict[str, float] = {}
    for i in range(1, t):
        order = np.argsort(logits[i])
        b, s = order[-1], (order[-2] if len(order) > 1 else None)
        best = logits[i, b]
        none = best < 0.5
        if none:
            margin, eb = 0.5 - best, float(err[i].max())
            got = None
        else:
            margin = best - 0.5 if s is None else min(best - logits[i, s], 2 * (best - 0.5))
            eb = float(err[i].max())
            got = vals[b]
        if not margin > 2 * eb:
            raise NotProved(f"read-out at position {i}: margin {margin:.4g} is not above twice the error bound "
                            f"{eb:.4g}", ("read-out", None), {"input": list(xs), "position": i})
        rec = margins.setdefault("margin", margin)
        margins["margin"], margins["error"] = min(rec, margin), max(margins.get("error", 0.0), eb)
        if not strictly_equal(got, want[i - 1]):
            raise NotProved(f"read-out at position {i} decodes to {got!r}, the program gives {want[i - 1]!r}",
                            ("read-out", None), {"input": list(xs), "position": i})
    stats.append({"layer": "read-out", "head": None, "min_gap": margins.get("margin"), "leak_bound": None,
                  "radius_out": margins.get("error")})
    return stats


def weights64(model: CompiledModel) -> Dict[str, Any]:
    """The model's weights in float64, per sublayer name, and a projection cache (``_proj``): one certification's
    private copies (made per call, so a model whose weights change between calls is read afresh)."""
    got: Dict[str, Any] = {"unembed": np.asarray(model.params["unembed"]["w"], np.float64), "_proj": {}}
    for name, spec, p in zip(sublayer_names(model.arch), model.arch.sublayers, model.params["layers"]):
        d = {k: np.array(v, np.float64) for k, v in p.items() if k in ("w_q", "w_k", "w_v", "w_o", "w_1", "b_1",
                                                                        "w_2", "b_2")}
        if spec.kind == "attn":
            d = {k: list(v) for k, v in d.items()}
            d["w_o_all"] = np.concatenate(d["w_o"], 0)
        got[name] = d
    return got


def ties_resolved(model: CompiledModel, xs: Sequence[Any], ev: Evaluator) -> Dict[str, List[List[float]]]:
    """Step 1's premise at x: every scored head's best key is unique, or its tied keys read equal values.

    Returns:
        head label -> its score table at x (:func:`constructions.reference.score_table`), for reuse.
    """
    tables: Dict[str, List[List[float]]] = {}
    for node in model.program.nodes.values():
        if not (isinstance(node, HeadSpec) and node.kind.selects == "score"):
            continue
        table = tables[node.label] = score_table(node, ev, list(xs))
        reads = []
        for r in node.reads:
            src = list(range(1, len(xs) + 1)) if r.source is POSITION else list(ev.evaluate(r.source, list(xs)))
            reads.append([bos_value_of(r)] + [apply_fn(r.fn, v) for v in src])
        for i, row in enumerate(table):
            best = max(row)
            tied = [j for j, s in enumerate(row) if s == best]
            if len(tied) > 1 and any(not strictly_equal(rd[j], rd[tied[0]]) for rd in reads for j in tied):
                raise NotProved(f"head {node.label}: at position {i + 1} of a representative the program's best "
                                f"score is tied between positions {tied} that read different values (the "
                                f"tie-break by position does not commute with the group)",
                                (None, None), {"input": list(xs), "position": i + 1})
    return tables


def certify_by_symmetry(model: CompiledModel, symmetry: Symmetry, predicate: str) -> Dict[str, Any]:
    """Prove that ``model`` computes its RASP program on every input of ``symmetry``'s orbits (module docstring).

    Args:
        model: a compiled categorical softmax model with its RASP program.
        symmetry: the domain as orbits (a task's :meth:`~verify.tasks.base.Task.symmetry`).
        predicate: the domain in words (named in the scope).
    Returns:
        ``{"certified": bool, "why": str or None, "layer", "head", "witness", "orbits": int,
        "generators": int, "per_layer": [...], "seconds": float}``; ``per_layer`` has the worst
        gap, leak and radius over the representatives.
    """
    t0 = time.perf_counter()
    res: Dict[str, Any] = {"certified": False, "why": None, "layer": None, "head": None, "witness": None,
                           "orbits": 0, "generators": len(symmetry.generators), "per_layer": [],
                           "group": symmetry.group, "proof": symmetry.proof, "method": "symmetry"}
    count = symmetry.count()
    try:
        if count > MAX_ORBITS:
            raise NotProved(f"the domain is {count:.3g} orbits of {symmetry.group}, above the budget of "
                            f"{MAX_ORBITS} representatives (each needs its own bounded forward)")
        check_applicable(model, symmetry)
        kinds_ = kinds(model, symmetry.generators)
        out_kind = kinds_[model.program.sink]
        for g in symmetry.generators:
            weight_check(model, residual_permutation(model, kinds_, g), g, out_kind)
        worst: Dict[Tuple[str, Optional[int]], Dict[str, Any]] = {}
        sink = model.program.nodes[model.program.sink]
        w64 = weights64(model)
        for orbit in symmetry.orbits():
            ev = Evaluator()
            xs = list(orbit.tokens)
            for gi in orbit.generators:
                if sorted(symmetry.generators[gi].positions[1:len(xs) + 1]) != list(range(1, len(xs) + 1)):
                    raise NotProved(f"generator {gi} does not map the positions 1..{len(xs)} of the representative "
                                    f"{xs} onto themselves", (None, None), {"input": xs})
            ties_resolved(model, xs, ev)
            want = ev.evaluate(sink, xs)
            for s in forward_bound(model, xs, want, w64=w64):
                key = (s["layer"], s["head"])
                w = worst.setdefault(key, dict(s))
                for f, pick in (("min_gap", min), ("leak_bound", max), ("radius_out", max)):
                    if s.get(f) is not None:
                        w[f] = s[f] if w.get(f) is None else pick(w[f], s[f])
            res["orbits"] += 1
        res["per_layer"] = list(worst.values())
        res["certified"] = True
    except NotProved as e:
        res.update(why=e.why, layer=e.where[0], head=e.where[1], witness=e.witness)
    res["seconds"] = round(time.perf_counter() - t0, 3)
    return res


def check_applicable(model: CompiledModel, symmetry: Symmetry) -> None:
    """Refuse (:class:`NotProved`) a model the symmetry route cannot analyse: no RASP program, or
    weights or generators outside the route's reach (each reason named)."""
    if model.program is None:
        raise NotProved("no RASP program is linked to these weights")
    if not model.categorical_output:
        raise NotProved("a numerical read-out: the symmetry route proves categorical outputs only")
    if model.arch.attention != "softmax" or model.arch.layer_norm:
        raise NotProved(f"{model.arch.attention} attention{' with layer norm' if model.arch.layer_norm else ''}: "
                        f"the symmetry route proves compiled softmax models")
    moves = any(any(q != p for p, q in enumerate(g.positions)) for g in symmetry.generators)
    if model.arch.causal and moves:
        raise NotProved("a causal model with position generators: the mask does not commute with them")
    for g in symmetry.generators:
        if g.positions and g.positions[0] != 0:
            raise NotProved("a generator moves BOS (position 0)")
        if len(g.positions) != model.max_seq_len + 1 or sorted(g.positions) != list(range(len(g.positions))):
            raise NotProved(f"a generator's positions are not a permutation of 0..{model.max_seq_len}")
        for v in model.input_values:  # the embedding is checked against sigma, the program against act
            if not strictly_equal(g.sigma(v), act("token", g, v)):
                raise NotProved(f"a generator moves the token {v!r} to {g.sigma(v)!r}, which the token action "
                                f"does not (bools and foreign values are fixed)")
        img = [b for _, b in g.tokens]
        if sorted(map(repr, img)) != sorted(map(repr, (a for a, _ in g.tokens))) or any(
                a in (BOS, PAD) for a, _ in g.tokens):
            raise NotProved("a generator's token map is not a permutation of the symbols (or moves BOS / PAD)")
    for spec, p in zip(model.arch.sublayers, model.params["layers"]):
        if spec.kind == "mlp" and spec.activation != "relu":
            raise NotProved(f"a {spec.activation} MLP: the symmetry route bounds ReLU MLPs")
        if any(k.startswith("b_") and k not in ("b_1", "b_2") for k in p):
            raise NotProved("attention biases: not a compiled model")
    if "b" in model.params["unembed"] and np.any(np.asarray(model.params["unembed"]["b"]) != 0):
        raise NotProved("a read-out bias: not a compiled model")
