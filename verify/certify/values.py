"""Value analysis for categorical aggregates: when a level of several positions is still clean.

A categorical ``Aggregate(Select(keys, queries, predicate), sop)`` whose top score level can
hold keys at several positions is stopped by :mod:`.heads` (the hardmax average of several
different one-hot values is no value). Such a level is clean when every position the RASP
selector selects holds the same value of ``sop``, on every input. This module proves that
fact from the RASP graph (``model.program``), not from position blocks.

Soundness argument. Two relations over SOps, each a statement about EVERY input of length
1..N over the vocabulary (the value sets are tracr's, a superset of the values that occur):

* ``injective(s)``: distinct positions of one input hold distinct values of ``s``.
  ``indices`` is; ``Map(f, a)`` is when ``a`` is and ``f`` is injective on ``a``'s value
  set; ``SequenceMap(f, a, b)`` is when ``b`` is and ``f(x, i) != f(x', i')`` for all values
  with ``i != i'`` (or the same with ``a``); a SOp is when it determines an injective SOp.
* ``determines(s, t)``: within one input, ``s[i] == s[j]`` implies ``t[i] == t[j]``.
  ``s`` determines itself; an injective ``s`` determines everything; ``s`` determines
  ``Map(f, a)`` when it determines ``a`` and ``SequenceMap(f, a, b)`` when it determines both;
  ``Map(f, a)`` with ``f`` injective on ``a``'s values determines what ``a`` determines; and
  ``w = SelectorWidth(Select(x, x, c))`` with ``c`` one of <, <=, >, >= and ``x``'s values
  real numbers determines what ``x`` determines: ``w[i]`` counts the positions j with
  ``c(x[j], x[i])``, so ``x[i] == x[j]`` gives ``w[i] == w[j]`` and ``x[i] < x[j]`` gives
  ``w[i] != w[j]`` (for <: every key below ``x[i]`` is below ``x[j]``, and ``x[i]`` itself is
  too, so ``w[j] >= w[i] + 1``; the others alike). So ``w[i] == w[j]`` iff ``x[i] == x[j]``.

An Aggregate is *single-valued* when the predicate matches at most one key value for every
query value (``==`` when no two key values compare equal, as for ``1`` and ``True``; any
other predicate checked on the value sets) and ``keys``
determines ``sop``: then the selected positions of one query all hold one key value, hence
one value of ``sop``. This is a fact about the RASP program; the weights compute it only if
the head's table is the selector (:func:`program.check_head`) and the values the blocks hold
are the program's, so :mod:`.report` uses this analysis only while every earlier sublayer's
program check holds (the decoded ideal vectors are then, by induction, the RASP values) and
accepts a level through it only when the head's own check holds; otherwise it stops the
float32 part at the head. The hardmax top level is then a non-empty subset of the selected
positions (or BOS alone): every key in it holds ideal vectors of ``sop``'s block decoding to
one value, and :func:`single_valued` also requires that vectors decoding to one value give
the same OV output (exactly), so the average over the level is that output.
"""

from __future__ import annotations

import numbers
from typing import Any, Dict, List, Optional, Set

import numpy as np
from tracr.rasp import rasp

_ORDER = ("<", "<=", ">", ">=")


def value_sets(link) -> Dict[str, Set[Any]]:
    """SOp label -> the set of its categorical values (from the residual labels).

    A SOp two of whose residual values compare equal (``1``, ``1.0``, ``True``) is left out:
    the arguments below read ``==`` as "the same value", which such a set would not honour.
    """
    out: Dict[str, Set[Any]] = {}
    count: Dict[str, int] = {}
    for _, (label, v) in link.values.items():
        try:
            out.setdefault(label, set()).add(v)
        except TypeError:  # unhashable: no set
            out[label] = set()
        count[label] = count.get(label, 0) + 1
    return {k: v for k, v in out.items() if len(v) == count[k]}


class ValueAnalysis:
    """Facts about the SOps of one compiled program (``model.program``), proved from its RASP graph.

    :meth:`injective`: distinct positions always hold distinct values; the module docstring gives
    the rules and why each is sound. Results are memoised per SOp label.
    """

    def __init__(self, link):
        self.vals = value_sets(link)
        self._inj: Dict[str, bool] = {}

    def _values(self, s) -> Optional[Set[Any]]:
        v = self.vals.get(s.label)
        return v if v else None

    def _map_injective(self, m) -> bool:
        xs = self._values(m.inner)
        if xs is None:
            return False
        try:
            ys = [m.f(x) for x in xs]
            return len(set(ys)) == len(ys)
        except Exception:  # noqa: BLE001 - an f that raises or returns unhashables proves nothing
            return False

    def injective(self, s, depth: int = 0) -> bool:
        if depth > 50:
            return False
        if s.label in self._inj:
            return self._inj[s.label]
        self._inj[s.label] = False  # cycles (none in a DAG) and failures: not proved
        ok = False
        if s is rasp.indices or (isinstance(s, rasp.SOp) and s.label == rasp.indices.label):
            ok = True
        elif isinstance(s, rasp.Map) and not isinstance(s, rasp.SequenceMap):
            ok = self.injective(s.inner, depth + 1) and self._map_injective(s)
        elif isinstance(s, rasp.SequenceMap):
            ok = (self.injective(s.fst, depth + 1) and self._pair_injective(s, 1)) or \
                 (self.injective(s.snd, depth + 1) and self._pair_injective(s, 0))
        elif isinstance(s, rasp.SelectorWidth):
            x = self._ordered_source(s)
            ok = x is not None and self.injective(x, depth + 1)
        self._inj[s.label] = ok
        return ok

    def _pair_injective(self, s, pos_arg: int) -> bool:
        """f(x, i) != f(x', i') whenever the argument ``pos_arg`` (0: fst, 1: snd) differs."""
        a, b = self._values(s.fst), self._values(s.snd)
        if a is None or b is None or len(a) * len(b) > 100_000:
            return False
        seen: Dict[Any, Any] = {}
        try:
            for x in a:
                for y in b:
                    z = s.f(x, y)
                    key = y if pos_arg == 1 else x
                    if z in seen and seen[z] != key:
                        return False
                    seen[z] = key
        except Exception:  # noqa: BLE001
            return False
        return True

    def _ordered_source(self, w) -> Optional[Any]:
        """x when ``w`` is SelectorWidth(Select(x, x, c)) with c an order and x's values real numbers."""
        sel = w.selector
        if not isinstance(sel, rasp.Select) or sel.keys.label != sel.queries.label:
            return None
        if not isinstance(sel.predicate, rasp.Comparison) or sel.predicate.value not in _ORDER:
            return None
        xs = self._values(sel.keys)
        if xs is None or not all(isinstance(v, numbers.Real) and v == v for v in xs):
            return None
        return sel.keys

    def determines(self, s, t, depth: int = 0) -> bool:
        if depth > 50:
            return False
        if s.label == t.label or self.injective(s):
            return True
        if isinstance(t, rasp.SequenceMap):
            if self.determines(s, t.fst, depth + 1) and self.determines(s, t.snd, depth + 1):
                return True
        elif isinstance(t, rasp.Map):
            if self.determines(s, t.inner, depth + 1):
                return True
        if isinstance(s, rasp.Map) and not isinstance(s, rasp.SequenceMap) and self._map_injective(s):
            return self.determines(s.inner, t, depth + 1)
        if isinstance(s, rasp.SelectorWidth):
            x = self._ordered_source(s)
            if x is not None:
                return self.determines(x, t, depth + 1)
        return False

    def injective_but_none(self, s) -> bool:
        """Distinct positions whose values of ``s`` are not None hold distinct values.

        :meth:`injective`, or the *rank within a group* rule: ``s = SequenceMap(f, g, w)`` (either
        order) with ``w = SelectorWidth(Select(x, x, P))``, ``x = SequenceMap(h, g, y)`` (either
        order) injective on its non-None values (:meth:`_pair_injective` over the value sets), so
        the group ``G(u)`` of an x value u is the ``g`` value it was built from (checked: one per
        u), and on x's value set: P never holds with a None side; P(u, v) implies G(u) == G(v);
        within a group P is a total order (reflexive, exactly one of P(u, v), P(v, u) for u != v,
        transitive); f is injective on the pairs. Then two positions j != j' with g[j] == g[j']
        not None have x[j] != x[j'] in one group, say P(x[j], x[j']): every i counted by w[j] is
        counted by w[j'] (transitivity), and j' is counted by w[j'] only, so w[j] < w[j'] and
        f(g, w) differs; with g[j] != g[j'] the pairs differ and f is injective on them. A
        position where g is None holds None (tracr's SequenceMap), which this fact leaves out.
        """
        if self.injective(s):
            return True
        if not isinstance(s, rasp.SequenceMap):
            return False
        for g, w, g_first in ((s.fst, s.snd, True), (s.snd, s.fst, False)):
            if isinstance(w, rasp.SelectorWidth) and self._group_rank(g, w) and self._pairs_injective(s):
                return True
        return False

    def _pairs_injective(self, s) -> bool:
        """f(a, b) takes distinct values on distinct pairs of the two arguments' value sets."""
        a, b = self._values(s.fst), self._values(s.snd)
        if a is None or b is None or len(a) * len(b) > 100_000:
            return False
        try:
            out = [s.f(x, y) for x in a for y in b]
            return len(set(out)) == len(out)
        except Exception:  # noqa: BLE001
            return False

    def _group_rank(self, g, w) -> bool:
        """``w = SelectorWidth(Select(x, x, P))`` ranks the positions within each group of ``g``
        (see :meth:`injective_but_none`)."""
        sel = w.selector
        if not isinstance(sel, rasp.Select) or sel.keys.label != sel.queries.label:
            return False
        x = sel.keys
        if not isinstance(x, rasp.SequenceMap):
            return False
        if x.fst.label == g.label:
            other, g_at = x.snd, 0
        elif x.snd.label == g.label:
            other, g_at = x.fst, 1
        else:
            return False
        if not self.injective(other) or not self._pair_injective(x, 1 - g_at):
            return False
        gs, ys = self._values(g), self._values(other)
        if gs is None or ys is None or len(gs) * len(ys) > 2_000:
            return False
        group: Dict[Any, Any] = {}
        try:
            for a in gs:
                for y in ys:
                    u = x.f(a, y) if g_at == 0 else x.f(y, a)
                    if u is None or group.setdefault(u, a) != a:
                        return False
            pred = sel.predicate
            us = list(group)
            for u in us + [None]:
                if bool(pred(None, u)) or (u is not None and bool(pred(u, None))):
                    return False
            by: Dict[Any, List[Any]] = {}
            for u in us:
                by.setdefault(group[u], []).append(u)
            for u in us:
                for v in us:
                    if bool(pred(u, v)) and group[u] != group[v]:
                        return False
            for members in by.values():
                le = {(u, v): bool(pred(u, v)) for u in members for v in members}
                for u in members:
                    if not le[(u, u)]:
                        return False
                    for v in members:
                        if u != v and le[(u, v)] == le[(v, u)]:
                            return False
                        if le[(u, v)] and not all(le[(u, z)] for z in members if le[(v, z)]):
                            return False
        except Exception:  # noqa: BLE001 - a predicate that raises proves nothing
            return False
        return True

    def functional(self, sel) -> bool:
        """Whether the predicate matches at most one key value for every query value."""
        if sel.predicate is rasp.Comparison.EQ and (self._values(sel.keys) is not None
                                                    or sel.keys.label == rasp.indices.label):
            return True  # the key values are pairwise != (value_sets), so == matches at most one
        ks, qs = self._values(sel.keys), self._values(sel.queries)
        if ks is None or qs is None or len(ks) * len(qs) > 1_000_000:
            return False
        try:
            return all(sum(bool(sel.predicate(k, q)) for k in ks) <= 1 for q in qs)
        except Exception:  # noqa: BLE001
            return False


def _never_selects_none(an: ValueAnalysis, sel) -> bool:
    """The predicate selects no None key, for every query value and None (tracr's evaluator calls it on None)."""
    qs = an._values(sel.queries)
    if qs is None:
        return False
    try:
        return not any(bool(sel.predicate(None, q)) for q in list(qs) + [None])
    except Exception:  # noqa: BLE001
        return False


def single_valued(link, expr) -> Optional[str]:
    """Why every position ``expr``'s selector selects holds one value of the aggregated SOp, or None.

    ``expr``: a categorical ``rasp.Aggregate`` (anything else: None). See the module docstring.
    """
    if not isinstance(expr, rasp.Aggregate) or not rasp.is_categorical(expr):
        return None
    sel = expr.selector
    if not isinstance(sel, rasp.Select):
        return None
    an = ValueAnalysis(link)
    if not an.functional(sel):
        return None
    if an.injective(sel.keys):
        return f"the key {sel.keys.label} is injective over positions: at most one key matches"
    if an.injective_but_none(sel.keys) and _never_selects_none(an, sel):
        return (f"the key {sel.keys.label} ranks positions within a group (distinct positions, distinct "
                f"values but None) and the selector never selects None: at most one key matches")
    if an.determines(sel.keys, expr.sop):
        return f"the key {sel.keys.label} determines {expr.sop.label}: every matching key holds one value"
    return None


def same_output_per_value(vecs: np.ndarray, decoded: np.ndarray, out: np.ndarray) -> bool:
    """Whether ideal vectors ``vecs`` that decode to one value (``decoded`` [m]) write one output ``out`` [m, Do]."""
    first: Dict[Any, int] = {}
    for i, v in enumerate(decoded):
        j = first.setdefault(v, i)
        if not np.array_equal(out[i], out[j]):
            return False
    return True


def level_clean_reason(state, blocks, dec, spec, p, h: int) -> Optional[str]:
    """Why head ``h``'s levels of several positions are clean by the value analysis, or None.

    Holds when the head implements a single-valued categorical Aggregate (:func:`single_valued`)
    and its OV circuit reads only the aggregated SOp's block, where every ideal vector a regular
    key can hold decodes to one value and vectors of one value write the same output.
    """
    from depthcraft.verify.certify.program import NoSemantics, AMBIGUOUS, read_blocks, head_node

    d = len(state.radius)
    v_rows, out_rows = spec.rows("v_rows", d), spec.rows("out_rows", d)
    wvo = np.asarray(p["w_v"][h], np.float64) @ np.asarray(p["w_o"][h], np.float64)
    written = [nm for nm, b in blocks.items() if np.isin(out_rows[np.abs(wvo).sum(0) > 0], b.rows).any()]
    try:
        expr = head_node(dec.link, written)
    except NoSemantics:
        return None
    why = single_valued(dec.link, expr)
    if why is None:
        return None
    read = read_blocks(blocks, v_rows, wvo)
    name = expr.sop.label
    if read != [name] or name not in blocks or blocks[name].kind == "position" or not dec.decodable(name):
        return None
    b = blocks[name]
    vecs = state.sets[1][name]
    decoded = dec.decode_rows(name, vecs)
    if any(v is AMBIGUOUS for v in decoded):
        return None
    where = {int(r): i for i, r in enumerate(v_rows)}
    sub = np.zeros((len(b.rows), wvo.shape[1]))
    for j, r in enumerate(b.rows):
        if int(r) in where:
            sub[j] = wvo[where[int(r)]]
    if not same_output_per_value(vecs, decoded, vecs @ sub):
        return None
    return why
