"""Attended-position links: what a certified head read, related to the tokens of two positions.

The abstract state (:mod:`.state`) holds one set of ideal vectors per block and kind of
position, with no relation between blocks, positions or tokens. A level of a later head whose
keys stand at several positions is then unclean even where, on every domain input, at most one
of them is present (``retrieval_tripling``'s fetch heads: docs/tripling_certification.md).
This module keeps, for heads already proved, *which key they attended*, and uses it to clear
such levels. Everything here is about the exact hardmax evaluation of the weights on a domain
input (:mod:`.domain`).

Soundness argument.

* **Attended entries** (:func:`collect`). Take a categorical head certified with a precondition
  (its candidate levels are clean: the top level of every domain input holds one present key),
  whose query side reads a position block and an unwritten token block (so every query row
  stands at one position i and holds a token group X), and whose key side reads them too (every
  key combination at one position a, BOS, with a token group Y). On a domain input, the query at
  i holds a token x in X of its row; the attended key is in the top level, a candidate level of
  that row, at its position a with a token y of its group. So (x, a, y), with x = tok(i) and
  y = tok(a), is among the entries recorded for position i over every row at i and every key of
  every candidate level of it. Where a side reads no such block, a row or key names no single
  position or a token group holds an unknown token, nothing is recorded for the head.
* **Linked blocks** (:func:`register_head`, :func:`register_mlp`). While every program check so
  far holds, every ideal vector of a block decodes to the RASP value (:mod:`.program`), and the
  value of a head read at i is its read of the attended position a: ``tokens`` (through its
  ``fn``) gives the value of y, ``POSITION`` gives fn(a). A block written by one sublayer only,
  whose node is such a read of a head with entries, is *linked*: at i its decoded value is
  f(a, y) for an entry (x, a, y) of i. A Map or SequenceMap (one MLP, its check passing) of
  linked blocks of one head is linked with the composed function: the same entry serves every
  block of one head at i (one attended key). Attending BOS gives no value here (any value).
* **Realisations** (:meth:`_Side.realise`). A combination of a later side at position p (named
  by a position block, else every p) whose decoded values of linked blocks are V: on a domain
  input where the combination stands at p, for every head H with linked blocks read, some entry
  (x, a, y) of p under H has f(a, y) in V for all of H's blocks (equality is tested permissively:
  an ambiguous decoded value or an unknown f(a, y) matches anything), and tok(p) = x (in the
  combination's token group when it reads the token block). So the input's tokens satisfy the
  *facts* tok(p) = x, tok(a) = y for one choice of entries per head (a realisation).
* **Consistency** (:func:`consistent`). The tokens of one domain input assign one token to each
  position, distinct positions of one class hold distinct tokens (``classes``, without
  ``prefix``) and a position holds only its ``slots`` tokens. A union of facts that breaks one of
  these is realised by no domain input.
* **Levels** (:func:`discharge`). For a query row and one of its realisations R: BOS, the
  query's position p and every position R names exist on every input realising R, and each
  holds one key combination whose realisation is consistent with R (the input's own). So where
  such a position has keys with a finite score, the top score is at least the lowest score of a
  key there consistent with R, and the largest of these is the realisation's floor (a position
  with no consistent key: R occurs on no domain input). A candidate level whose best score is
  below the floor by more than 2 eps is not the top on an input realising R. A level at or above
  it holds at most one present key when no two of its members at distinct positions have
  realisations consistent with R and with each other (BOS is in every input: a BOS member and
  any consistent regular member make two). Every input that puts the row at its position
  realises one of its realisations, so a row whose levels pass for every realisation (none: the
  row occurs on no domain input) is clean. Leak, floor and outputs of the head are unchanged
  (computed over every combination). The work is bounded (:data:`MAX_WORK` per head); a row not
  finished stays unclean.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

import numpy as np

#: A linked value that is not known (the head attended BOS, or a decoded value is ambiguous).
WILD = object()
#: Most (row, candidate key) pairs :func:`collect` visits for one head; beyond it nothing is recorded.
MAX_COLLECT = 4_000_000
#: Most realisations of one combination; beyond it :func:`discharge` gives up on the row (unclean).
MAX_REALISATIONS = 20_000


@dataclasses.dataclass
class Links:
    """Attended entries of certified heads and the blocks linked to them (module docstring).

    Attributes:
        attended: head key -> {query position i: {(x, a, y)}}: token ids x = tok(i), y = tok(a)
            (indices into the model's input values; -2 for BOS), a the attended position.
        linked: block name -> (head key, f(a, y) -> the block's value at the query, or WILD).
        decode: block name, [m, rows] vectors -> [m] decoded values (the program's decoder).
        valid: the entries may be used (every program check so far holds); set by the caller.
        work: work (consistency checks, entries scanned) :func:`discharge` may still do for the
            current head (the caller sets :data:`MAX_WORK` before each head); at 0 it keeps the
            remaining rows unclean.
    """

    attended: Dict[Any, Dict[int, Set[Tuple[int, int, int]]]] = dataclasses.field(default_factory=dict)
    linked: Dict[str, Tuple[Any, Callable[[int, int], Any]]] = dataclasses.field(default_factory=dict)
    decode: Optional[Callable[[str, np.ndarray], Sequence[Any]]] = None
    valid: bool = False
    work: int = 0
    keys: Any = None  # (key side, its _Side, positions, keys by position) of the last discharge call

    def collect(self, lv, t, start: int, token_of, acc) -> bool:
        """:func:`collect` (the score-table core calls the analysis through its :class:`Links`)."""
        return collect(lv, t, start, token_of, acc)

    def discharge(self, lv, t, start: int, bad, state, token_of, classes, slot_ids, reach, n: int, eps: float):
        """:func:`discharge` with these links."""
        return discharge(lv, t, start, bad, self, state, token_of, classes, slot_ids, reach, n, eps)


def _group_tokens(sd, j: int, name: str, token_of: np.ndarray) -> Optional[Set[int]]:
    """The token ids of combination ``j``'s group in token block ``name`` (None: one is unknown)."""
    rep = sd.parts[j, sd.names.index(name)]
    toks = token_of[np.flatnonzero(sd.member[name] == rep)]
    if not len(toks) or (toks < 0).any():
        return None
    return set(int(v) for v in toks)


def token_block(sd, token_of: Dict[str, np.ndarray]) -> Optional[str]:
    """The unwritten token block ``sd`` reads with known tokens (None when it reads none)."""
    for nm, tok in token_of.items():
        if nm in sd.names and nm in sd.member and (tok >= 0).any():
            return nm
    return None


def collect(lv, t, start: int, token_of: Dict[str, np.ndarray], acc: Dict[int, Set[Tuple[int, int, int]]]) -> bool:
    """Add the attended entries of a chunk of query rows to ``acc`` (module docstring).

    Returns False when they cannot be recorded (a side reads no position or token block, a row or
    a key names no single position, or a token is unknown, or too many pairs): the caller then
    drops the head's entries.
    """
    qs, ks = t.qs, t.ks
    qn, kn = token_block(qs, token_of), token_block(ks, token_of)
    if qn is None or kn is None or qn != kn:
        return False
    live = lv.cand & lv.valid
    if live.sum() > MAX_COLLECT:
        return False
    key_cache: Dict[int, Optional[Tuple[int, Set[int]]]] = {}
    for r in range(len(lv.ss)):
        row = start + r
        if qs.kind[row] == 0:
            continue  # a BOS query: no entry needed (BOS reads nothing linked here)
        if not qs.pinned[row] or qs.position[row] < 1:
            return False
        xs = _group_tokens(qs, row, qn, token_of[qn])
        if xs is None:
            return False
        entries = acc.setdefault(int(qs.position[row]), set())
        for j in lv.order[r][live[r]]:
            j = int(j)
            if j not in key_cache:
                if ks.kind[j] == 0:
                    key_cache[j] = (0, {-2})
                elif not ks.pinned[j] or ks.position[j] < 1:
                    key_cache[j] = None
                else:
                    ys = _group_tokens(ks, j, kn, token_of[kn])
                    key_cache[j] = None if ys is None else (int(ks.position[j]), ys)
            kv = key_cache[j]
            if kv is None:
                return False
            a, ys = kv
            entries.update((x, a, y) for x in xs for y in ys)
    return True


def register_head(links: Links, head_key: Any, entries: Dict[int, Set[Tuple[int, int, int]]], link,
                  written: Sequence[str], single_writer: Callable[[str], bool], input_values: Sequence[Any]) -> None:
    """Link the blocks ``written`` by a certified head whose program check holds (module docstring).

    ``link``: the program link (``link.nodes``: block name -> its RASP node); only reads of the one
    head the weights implement (:func:`.program.head_node`) are linked; ``single_writer(name)``:
    only one sublayer writes the block.
    """
    from depthcraft.constructions.nodes import POSITION, HeadRead
    from depthcraft.verify.certify.program import NoSemantics, head_node
    from tracr.rasp import rasp
    try:
        impl = head_node(link, written)
    except NoSemantics:
        return
    nodes = link.nodes
    added = False
    for nm in written:
        node = nodes.get(nm)
        if not isinstance(node, HeadRead) or node.head is not impl or not single_writer(nm):
            continue
        src, fn = node.read.source, node.read.fn
        if src is rasp.tokens:
            def f(a, y, fn=fn):
                if a == 0 or y < 0:
                    return WILD
                try:
                    v = input_values[y]
                    return fn(v) if fn is not None else v
                except Exception:  # noqa: BLE001 - no value known: matches any
                    return WILD
        elif src is POSITION:
            def f(a, y, fn=fn):
                if a == 0:
                    return WILD
                try:
                    return fn(a) if fn is not None else a
                except Exception:  # noqa: BLE001 - no value known: matches any
                    return WILD
        else:
            continue
        links.linked[nm] = (head_key, f)
        added = True
    if added:
        links.attended[head_key] = entries


def register_mlp(links: Links, nodes: Dict[str, Any], written: Sequence[str], single_writer: Callable[[str], bool]
                 ) -> None:
    """Link the blocks an MLP (its program check holding) writes as a Map or SequenceMap of linked
    blocks of one head: the composed function of the same entry (module docstring)."""
    from tracr.rasp import rasp
    for nm in written:
        node = nodes.get(nm)
        if not single_writer(nm):
            continue
        if isinstance(node, rasp.SequenceMap):
            kids = [node.fst, node.snd]
        elif isinstance(node, rasp.Map):
            kids = [node.inner]
        else:
            continue
        got = [links.linked.get(k.label) for k in kids]
        if any(g is None for g in got) or len({g[0] for g in got}) != 1:
            continue
        fs = [g[1] for g in got]

        def f(a, y, fs=fs, node=node):
            vals = [g(a, y) for g in fs]
            if any(v is WILD for v in vals):
                return WILD
            try:
                return node.f(*vals)
            except Exception:  # noqa: BLE001 - a map that raises here: no value known
                return WILD
        links.linked[nm] = (got[0][0], f)


def _same(v: Any, allowed: Sequence[Any]) -> bool:
    """Whether a linked value ``v`` may be one of the decoded values ``allowed``. Permissive (a match
    keeps a realisation, which is the sound direction): WILD matches anything, and so does a
    comparison that raises or does not give False."""
    if v is WILD:
        return True
    for w in allowed:
        if w is WILD:
            return True
        try:
            eq = v == w
            if not (isinstance(eq, (bool, np.bool_)) and not eq):
                return True
        except Exception:  # noqa: BLE001 - incomparable: keep it
            return True
    return False


#: Value types whose ``==`` agrees with their hash (a set lookup finds every equal value).
_PLAIN = (int, str, bool, float, type(None))


class _Allowed:
    """The decoded values a combination's group can hold in one block; :meth:`has` is :func:`_same`,
    with a set lookup when every value is of a plain type (same answers)."""

    def __init__(self, vals):
        self.vals = list(vals)
        self.wild = any(v is WILD for v in self.vals)
        self.plain = not self.wild and all(type(v) in _PLAIN for v in self.vals)
        self.set = set(self.vals) if self.plain else None

    def has(self, v: Any) -> bool:
        if self.wild or v is WILD:
            return True
        if self.plain and type(v) in _PLAIN:
            return v in self.set
        return _same(v, self.vals)


def consistent(facts: Sequence[Tuple[int, int]], classes: Sequence[int], slot_ids) -> bool:
    """Whether some domain input has tok(p) = x for every fact (p, x) (module docstring).

    Facts at BOS (p = 0) say nothing. A position outside ``classes`` is not a regular position of
    any input (inconsistent)."""
    tok: Dict[int, int] = {}
    for p, x in facts:
        if p == 0:
            continue
        if p >= len(classes):
            return False
        if tok.setdefault(p, x) != x:
            return False
        if slot_ids is not None and p < len(slot_ids) and slot_ids[p] is not None and x not in slot_ids[p]:
            return False
    seen: Dict[Tuple[int, int], int] = {}
    for p, x in tok.items():
        c = classes[p]
        if c < 0:
            continue
        if seen.setdefault((c, x), p) != p:
            return False
    return True


class _Side:
    """The realisations of one side's combinations (cached per combination)."""

    def __init__(self, links: Links, sd, state, token_of: Dict[str, np.ndarray], n: int):
        self.links, self.sd, self.n = links, sd, n
        self.tok_name = token_block(sd, token_of)
        self.token_of = token_of
        self.heads: Dict[Any, List[Tuple[int, Callable]]] = {}
        self.values: Dict[str, np.ndarray] = {}
        from depthcraft.verify.certify.program import AMBIGUOUS, NoSemantics
        for k, nm in enumerate(sd.names):
            if nm in links.linked and nm in sd.member:
                try:
                    vals = list(links.decode(nm, state.sets[1][nm]))
                except NoSemantics:  # not decodable: the block constrains nothing here
                    continue
                hk, f = links.linked[nm]
                self.heads.setdefault(hk, []).append((k, f))
                arr = np.empty(len(vals), object)
                arr[:] = [WILD if v is AMBIGUOUS else v for v in vals]
                self.values[nm] = arr
        self.cache: Dict[Tuple[int, int], Optional[List[List[Tuple[int, int]]]]] = {}
        self.spent = 0  # entries scanned by :meth:`realise` (charged to the caller's work budget)
        self.entry_cache: Dict[Tuple[Any, int], Dict[int, List[Tuple[int, int, int, Tuple[Any, ...]]]]] = {}

    def _entry_values(self, hk, reads, p: int) -> Dict[int, List[Tuple[int, int, int, Tuple[Any, ...]]]]:
        """The entries of head ``hk`` at ``p`` by their query token x, each with its linked blocks'
        values (cached)."""
        key = (hk, p)
        if key not in self.entry_cache:
            by_x: Dict[int, List[Tuple[int, int, int, Tuple[Any, ...]]]] = {}
            for (x, a, y) in self.links.attended[hk].get(p, set()):
                by_x.setdefault(x, []).append((x, a, y, tuple(f(a, y) for _, f in reads)))
            self.entry_cache[key] = by_x
        return self.entry_cache[key]

    def positions(self, j: int) -> List[int]:
        sd = self.sd
        if sd.kind[j] == 0:
            return [0]
        if sd.pinned[j] and sd.position[j] >= 1:
            return [int(sd.position[j])]
        return list(range(1, self.n + 1))

    def realise(self, j: int, p: int) -> Optional[List[List[Tuple[int, int]]]]:
        """Realisations (lists of facts) of combination ``j`` at position ``p``; [] when it cannot stand
        there; None when there are too many to list (the caller gives up)."""
        key = (j, p)
        if key in self.cache:
            return self.cache[key]
        sd = self.sd
        out: Optional[List[List[Tuple[int, int]]]]
        if sd.kind[j] == 0:
            out = [[]]
        else:
            toks = None
            if self.tok_name is not None:
                toks = _group_tokens(sd, j, self.tok_name, self.token_of[self.tok_name])
            per_head = []
            for hk, reads in self.heads.items():
                by_x = self._entry_values(hk, reads, p)
                entries = [e for x in (toks if toks is not None else by_x) for e in by_x.get(x, ())]
                self.spent += len(entries)
                allowed = []
                for k, _ in reads:
                    nm = sd.names[k]
                    rep = sd.parts[j, k]
                    allowed.append(_Allowed(self.values[nm][np.flatnonzero(sd.member[nm] == rep)]))
                ok = [(x, a, y) for (x, a, y, vals) in entries if all(al.has(v) for al, v in zip(allowed, vals))]
                per_head.append(ok)
            base = [[(p, x)] for x in sorted(toks)] if toks is not None else [[]]
            count = len(base)
            for ok in per_head:
                count *= len(ok)
            if count > MAX_REALISATIONS:
                out = None
            else:
                out = []
                for b in base:
                    for choice in itertools.product(*per_head):
                        facts = list(b)
                        for (x, a, y) in choice:
                            facts += [(p, x), (a, y)]
                        out.append(facts)
        self.cache[key] = out
        return out


def discharge(lv, t, start: int, bad: np.ndarray, links: Links, state, token_of: Dict[str, np.ndarray],
              classes: Sequence[int], slot_ids, reach: np.ndarray, n: int, eps: float) -> np.ndarray:
    """``bad`` [r, nk] (sorted keys whose candidate level holds several positions) with the rows
    whose levels the attended links prove clean cleared (module docstring, "Levels"). Gives up
    (keeps the remaining rows bad) once ``links.work`` is spent."""
    if links.work <= 0:
        return bad
    qside = _Side(links, t.qs, state, token_of, n)
    ks = t.ks
    if links.keys is not None and links.keys[0] is ks:  # the same key side as the last call
        kside, kpos, at = links.keys[1:]
    else:
        kside = _Side(links, ks, state, token_of, n)
        kpos = [kside.positions(j) for j in range(len(ks.kind))]
        at: Dict[int, List[int]] = {}
        for j, us in enumerate(kpos):
            for u in us:
                at.setdefault(u, []).append(j)
        links.keys = (ks, kside, kpos, at)
    if not qside.heads and not kside.heads:
        return bad
    out = bad.copy()
    budget = [links.work]
    for r in np.flatnonzero(bad.any(1)):
        if budget[0] <= 0:
            break
        if _row_clean(lv, int(r), start + int(r), qside, kside, kpos, at, classes, slot_ids, reach, n, eps, budget):
            out[r] = False
    links.work = max(0, budget[0])
    return out


#: Most work (consistency checks plus attended entries scanned) :func:`discharge` does for one head
#: (a few seconds here) before it gives up; retrieval_tripling d = 2, c = 1 needs about 213,000.
MAX_WORK = 600_000


def _row_clean(lv, r, row, qside, kside, kpos, at, classes, slot_ids, reach, n, eps, budget) -> bool:
    """Whether every candidate level of query row ``row`` holds at most one present key on every
    domain input (module docstring, "Levels"). The realisation's floor is taken over BOS and the
    positions the realisation names (a subset of the positions that exist: a lower floor, sound).
    ``budget`` [1]: work left (consistency checks and entries scanned); False once it is spent."""
    s = lv.s[r]  # scores by key index
    cid = np.empty(len(s), int)
    cid[lv.order[r]] = lv.cid[r]
    cand = np.zeros(len(s), bool)
    cand[lv.order[r]] = lv.cand[r] & lv.valid[r]
    levels: Dict[int, List[int]] = {}
    for j in np.flatnonzero(cand):
        levels.setdefault(int(cid[j]), []).append(int(j))

    def ok(facts, j, u):
        """The realisations of key j at u consistent with ``facts`` (None: too many to list)."""
        spent = kside.spent
        kr = kside.realise(j, u)
        budget[0] -= kside.spent - spent
        if kr is None:
            return None
        budget[0] -= len(kr)
        return [f for f in kr if consistent(facts + f, classes, slot_ids)]

    for p in qside.positions(row):
        spent = qside.spent
        reals = qside.realise(row, p)
        budget[0] -= qside.spent - spent
        if reals is None:
            return False
        for facts in reals:
            budget[0] -= 1
            if budget[0] <= 0:
                return False
            if not consistent(facts, classes, slot_ids):
                continue
            floor, possible = -np.inf, True
            for u in sorted({0, p} | {q for q, _ in facts if q >= 1}):
                visible = [j for j in at.get(u, []) if np.isfinite(s[j])]
                if not visible:  # masked (causal) or not read: no floor from this position
                    continue
                best = np.inf
                for j in visible:
                    if s[j] >= best:
                        continue
                    g = ok(facts, j, u)
                    if g is None:
                        return False
                    if g:
                        best = float(s[j])
                if best == np.inf:  # a position of every such input holds no consistent key
                    possible = False
                    break
                floor = max(floor, best)
            if not possible:
                continue
            for c, members in levels.items():
                if max(float(s[j]) for j in members) < floor - 2 * eps:  # below the top on such inputs
                    continue
                by_pos: Dict[int, List[List[Tuple[int, int]]]] = {}
                for j in members:
                    for u in kpos[j]:
                        g = ok(facts, j, u)
                        if g is None:
                            return False
                        if g:
                            by_pos.setdefault(u, []).extend(g)
                us = sorted(by_pos)
                for i1 in range(len(us)):
                    for i2 in range(i1 + 1, len(us)):
                        budget[0] -= len(by_pos[us[i1]]) * len(by_pos[us[i2]])
                        if budget[0] <= 0:
                            return False
                        if any(consistent(facts + f1 + f2, classes, slot_ids)
                               for f1 in by_pos[us[i1]] for f2 in by_pos[us[i2]]):
                            return False
    return True
