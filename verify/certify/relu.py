"""ReLU attention heads (SPEC §3): exact sums over the keys that score above zero.

A ReLU head (:func:`constructions.runtime.attention_weights`, ``kind="relu"``) gives key j
the weight relu(s_j) (0 where the causal mask hides j) and writes sum_j relu(s_j) v_j W_O:
no normalisation, no competition. Its *ideal* evaluation is the same sum over the exact
scores of the ideal vectors; this module proves that the float32 forward stays within a
radius of one of the ideal sums, and enumerates the set of ideal sums.

Soundness argument. The score table is computed as in :mod:`.heads` (every combination of
the query side's and the key side's ideal vectors, exact up to ``eps``, the table's float64
rounding); a real score is within ``delta`` of its table entry (input radii through W_QK
plus the float32 rounding of q . k, :func:`heads.score_perturbation`, :func:`float32.score_rel`).

* **On and off.** A key whose table score is above ``2 eps`` is *on*: its ideal weight
  ``sigma`` is the table score rounded to float32 (so that near-equal scores are one
  value), within ``eps + u |s|`` of the exact score, so its real weight is within
  ``dw = delta + eps + u max|s|`` of ``sigma``. Every other key is *off*: its ideal weight
  is 0 (an exact score <= ``3 eps``, which the ideal evaluation counts as 0 and the error
  term below covers), and its real weight relu(s) is at most max(0, s_table + eps +
  delta): exactly 0 when that is <= 0. A key the causal mask hides has weight exactly 0.
* **Positions.** Each key position of the input holds exactly one of its alternatives
  (the key side's combinations at that position; a combination that reads no position
  may stand at any position). For a query row, a position contributes one of its
  *options*: sigma v for an on alternative and every value vector v the value side can
  hold there (BOS's values at BOS; a value side that reads a position block: that
  position's), or 0 (an off alternative, or the position is absent from a shorter
  input). The ideal output is the sum over positions of one option each; the state gets
  every such sum (:func:`_minkowski`, refused beyond :data:`MAX_SUMS`), with the largest guard
  of its terms (every term's position exists).
* **Clean.** A head whose output is not set-valued (``sums_ok`` False) must have, for
  every query row, on keys at one position at most (or write 0 from every value: a sum
  of k equal values is k times the value, not the value), else the sum of several values
  is no value of the output SOp: not certified, with the query and keys as witness. A
  set-valued output (a ReLU ``match`` reading the union of the matched keys) may add
  several positions; but when it feeds the read-out (``to_readout``), keys at several
  positions may hold different values, a set of several values, which the read-out
  (argmax, one token) cannot decode as the program's set: not certified either (the
  check does not look at the values: a sound refusal where they could not differ).
* **Domain precondition** (``dom``, :mod:`.domain`, as :func:`heads.unclean_level` uses it).
  Given the ``classes`` fact (on every domain input, distinct positions of one class hold
  distinct tokens), a query row whose on keys all stand at regular positions of one class
  and all hold one and the same token (the key side reads a token block that no sublayer
  writes, and the key's group of vectors is that one token: :func:`heads.token_codes`) has
  at most one on key in any domain input. Such a row is clean: its ideal outputs are the
  union over its on positions of that position's options (sigma v, and 0 where the position
  may be off or absent), not their sums, and it counts one on key (K, Sigma below take the
  largest single key). Recorded as a use of ``classes``; what is proved then holds on the
  domain only. A row with a BOS key, a key that names no position, a key whose token the
  vector does not determine, or keys of two classes or two tokens is not helped.
  A key may also get its code through a proved copy of the token (``dom.copies``,
  :func:`report.copy_blocks`): a key at position j reading a block that holds, on every
  input, the token of position target(j) (target injective), decoding to token t, gets the
  code (class of target(j), t); with ``prefix`` only where target(j) < j, so target(j) <= n - 1,
  where the fact holds (:func:`_key_codes`).
* **Absent keys** (``slots``, through a proved copy). A key at j whose copy vector decodes to a
  token t that no domain input holds at target(j) (or target(j) is BOS or none, where the block
  holds no token) is on no domain input: it is neither on nor weighted (:func:`_absent_keys`).
  Recorded as a use of ``slots``. A key whose vector no input at all holds at its position, by
  a proved copy of an equality parse (below), is left out alike, with no fact used
  (:func:`_unreachable_keys`).
* **Equality patterns** (``patterns``, through proved copies of an equality parse,
  ``dom.pattern_copies``, :func:`report.pattern_copy_blocks`). A key at j that reads copies of
  a ReLU ``match`` of tokens against tokens (select all, a read of the position through an
  injective ``fn``) at targets t in 1..j learns, from each copy's decoded set, which positions
  of t's parse window hold x_t's token; where these cover every pair of j's group G(j), its
  vector determines the equality pattern of G(j), and that is its code (:func:`_pattern_codes`).
  Distinct positions with one code would break the fact, so a row whose on keys all share one
  code has at most one on key on a domain input, as with ``classes``. Recorded as a use of
  ``patterns``.
  Recorded as a use of ``slots``.
* **Scored positions** (``scored``). When no later sublayer reads the rows the head writes
  (``final``: only the unembedding may), a query row whose token the task's last position
  never holds on a domain input (the query side reads the token block, its group one token)
  never stands at a scored position; if such rows would otherwise stop the head, they are
  left out: no keys, no weight, no sums (their real writes reach only the read-out of
  positions the claim does not cover). Recorded as a use of ``scored``; the certificate's
  scope is then the last position of each domain input.
* **Error.** Per output row c, with ``Vmax[c]`` the largest |ideal value| and ``Rv[c]``
  the value side's input error through W_OV (:func:`state.lin_err`): the real output is
  within ``K dw (Vmax + Rv) + Sigma Rv + Lk (Vmax + Rv)`` of the ideal sum,
  K the most on positions of a query row, Sigma the largest sum of their sigma, Lk the
  largest sum over positions of the off alternatives' max(0, s + eps + delta) (a
  combination that names no position counts at every one of the n positions). The
  float32 sum z = sum_j w_j v_j of at most n + 1 products errs by at most
  gamma_{n+1} W (1 + gV) M + W gV M per head dimension (M[e] the largest
  ((|x| + r)|W_V|)[e], W = K dw + Sigma + Lk the largest total weight); W_O
  adds gamma_{terms(W_O)} of |z||W_O| and the residual addition one u (the same bound
  relative to ``M |W_O|`` as the softmax heads' float32 terms).

What is not done: ReLU heads of a model whose output decodes several keys' sum as a
number, and value sides that read a position block at a key that reads none (refused).
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from depthcraft.verify.certify.float32 import U32, gamma, score_rel, terms, up
from depthcraft.verify.certify.heads import (ROW_CHUNK_ENTRIES, DomainView, HeadCert, token_codes, causal_mask,
                                             head_sides, score_perturbation, table_rounding)
from depthcraft.verify.certify.state import Block, Side, State, TooLarge, describe, lin_err, side, unique_min

#: Most ideal sums a ReLU head may write (per kind of query position).
MAX_SUMS = 200_000


def _copied_tokens(ks: Side, nm: str, tok_of: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """For every key combination of ``ks`` [m]: the token its proved copy block ``nm`` names (-1 where
    its group there is not one vector; BOS combinations read representative 0) and its position,
    both int64 [m]; ``tok_of`` maps each representative of the copy to its token
    (``DomainView.copies``)."""
    rep = np.where(ks.kind == 1, ks.parts[:, ks.names.index(nm)], 0)
    size = np.bincount(ks.member[nm], minlength=len(tok_of))
    return np.where(size[rep] == 1, tok_of[rep], -1), ks.position.astype(np.int64)


def _minkowski(acc: Tuple[np.ndarray, np.ndarray], opt: Tuple[np.ndarray, np.ndarray]
               ) -> Tuple[np.ndarray, np.ndarray]:
    """Every sum a + b (a from ``acc``, b from ``opt``; each (vectors [m, d], guards [m])), deduplicated
    with the largest guard of the two terms kept per pair and the smallest over equal sums.

    Raises:
        TooLarge: more than :data:`MAX_SUMS` sums.
    """
    (a, ga), (b, gb) = acc, opt
    if len(a) * len(b) > 50 * MAX_SUMS:
        raise TooLarge(f"{len(a) * len(b)} sums of a ReLU head's values")
    s = (a[:, None, :] + b[None, :, :]).reshape(-1, a.shape[1])
    g = np.maximum(ga[:, None], gb[None, :]).ravel()
    s, g = unique_min(s, g)
    if len(s) > MAX_SUMS:
        raise TooLarge(f"more than {MAX_SUMS} sums of a ReLU head's values")
    return s, g


def _side_tokens(sd, dom: DomainView) -> np.ndarray:
    """[rows] the token id (index into the model's input values) of each combination of a side that
    reads a token block no sublayer writes, where its group under the side's matrix is one vector of
    one token; -1 elsewhere (BOS, several tokens in the group, no such block)."""
    for nm, tok_of in dom.token_of.items():
        if nm not in sd.names or nm not in sd.member or not (tok_of >= 0).any():  # e.g. ``one``: no token
            continue
        rep = np.where(sd.kind == 1, sd.parts[:, sd.names.index(nm)], 0)
        size = np.bincount(sd.member[nm], minlength=len(tok_of))
        return np.where((sd.kind == 1) & (size[rep] == 1), tok_of[rep], -1)
    return np.full(len(sd.kind), -1)


def _absent_keys(ks, dom: Optional[DomainView]) -> np.ndarray:
    """[nk] key combinations that no domain input holds: a key at a regular position j reading a copy
    block (``dom.copies``, group under W_K one vector) whose vector decodes to a token t, where
    either target(j) is no regular position (the block then holds the BOS value or nothing, which
    decodes to no token) or the ``slots`` fact excludes t at target(j). (Keys that no input at all
    holds, by a proved copy of an equality parse, are :func:`_unreachable_keys`.)"""
    out = np.zeros(len(ks.kind), bool)
    if dom is None:
        return out
    for nm, (src, tok_of) in dom.copies.items():
        if nm not in ks.names or nm not in ks.member:
            continue
        tok, pos = _copied_tokens(ks, nm, tok_of)
        inside = (ks.kind == 1) & (pos >= 1) & (pos < len(src)) & (tok >= 0)
        at = np.where(inside, src[np.clip(pos, 0, len(src) - 1)], -1)
        out |= inside & (at < 1)
        if dom.slot_ids is not None:  # allowed[position, token]: the slots fact as a table
            width = max([int(tok_of.max(initial=0))] + [max(a, default=0) for a in dom.slot_ids if a]) + 1
            allowed = np.ones((len(dom.slot_ids), width), bool)
            for q, a in enumerate(dom.slot_ids):
                if a is not None:
                    allowed[q] = False
                    allowed[q, sorted(a)] = True
            at_ok = inside & (at >= 1) & (at < len(dom.slot_ids))
            out |= at_ok & ~allowed[np.where(at_ok, at, 0), np.where(at_ok, tok, 0)]
    return out


def _unreachable_keys(ks, dom: Optional[DomainView]) -> np.ndarray:
    """[nk] key combinations that no input (in the domain or not) holds: a key reading a proved copy
    of an equality parse whose vector the copy never holds at the key's position
    (:func:`_pattern_codes`, code -2). No domain fact is used: only the program's semantics, which
    the program checks so far prove (``dom.pattern_copies`` is empty otherwise)."""
    pat = _pattern_codes(ks, dom) if dom is not None else None
    return np.zeros(len(ks.kind), bool) if pat is None else pat == -2


def _key_codes(ks, dom: Optional[DomainView]) -> Tuple[Optional[np.ndarray], str]:
    """([nk] per key combination a code such that, on a domain input, at most one present key
    holds each code >= 0, -1 for no code, or None when there is no such fact; the fact used).

    The code is (class, token) from the ``classes`` fact, or else an equality pattern from the
    ``patterns`` fact (:func:`_pattern_codes`).

    A key that reads a token block directly: :func:`heads.token_codes`. Otherwise a key at a
    regular position j (pinned) reading a copy block (``dom.copies``: on every input the block at
    j holds the token of position target(j), target injective): its group under W_K must be one
    vector, decoding to token t; the code is (class of target(j), t), for target(j) >= 1 of a class
    >= 0 and, with ``prefix``, target(j) < j (so target(j) <= n - 1, where the fact holds). Two
    present keys with one code stand at distinct positions j1, j2, so at distinct sources of one
    class that hold one token: the fact excludes it.
    """
    direct = token_codes(ks, dom)
    if direct is not None:
        return direct, "classes"
    if dom is None:
        return None, "classes"
    if dom.pre.classes is None:
        return _pattern_codes(ks, dom), "patterns"
    classes = np.asarray(dom.pre.classes, np.int64)
    for nm, (src, tok_of) in dom.copies.items():
        if nm not in ks.names or nm not in ks.member:
            continue
        tok, pos = _copied_tokens(ks, nm, tok_of)
        at = np.where((pos >= 1) & (pos < len(src)), src[np.clip(pos, 0, len(src) - 1)], -1)
        cls = np.where((at >= 1) & (at < len(classes)), classes[np.clip(at, 0, len(classes) - 1)], -1)
        ok = (ks.kind == 1) & (at >= 1) & (tok >= 0) & (cls >= 0)
        if dom.pre.prefix:
            ok &= at < pos
        width = int(tok_of.max(initial=0)) + 2
        return np.where(ok, cls * width + tok, -1), "classes"
    return _pattern_codes(ks, dom), "patterns"


def _pattern_codes(ks, dom: DomainView) -> Optional[np.ndarray]:
    """[nk] per key combination the equality pattern of its position's group (the ``patterns``
    fact) as a code, where its vector determines it; -1 elsewhere; None without the fact or
    without proved copies of an equality parse (``dom.pattern_copies``).

    A key at a regular position j (pinned) whose position has a group G(j) = (g_1, .., g_k)
    (every g_a < j) reads copy blocks c (:func:`report.pattern_copy_blocks`): on every input
    the block at j holds S_c = {fn(j') : j' in W(t), x_{j'} = x_t}, t = target_c(j) in 1..j.
    Where the key's group under W_K is one vector there, decoding to a set S, and fn is
    injective on W(t), the window positions holding x_t's token are exactly those j' with
    fn(j') in S. A vector whose S does not contain fn(t) for t in W(t), or holds a value that no
    window position gives, is at j on no input at all (no fact needed): code -2, and
    :func:`_unreachable_keys` leaves such keys out; so is a vector decoding to a non-empty set at a
    position j where the position head attends to nothing (target None or outside 0..j: the
    block holds the empty set; at target 0, BOS, no statement is made). Each such j' in G with t in
    G states whether x_{g_a} = x_{g_b} for one pair a < b of G's indices. When the key's copies
    state every pair of G, consistently, its vector determines the equality pattern of G(j),
    and the code is (k, that pattern). Two present keys with one code stand at distinct
    positions (the combinations at one position are alternatives) whose groups have one size
    and one pattern, which the fact excludes on a domain input: at most one present key holds
    each code.
    """
    pats = dom.pre.patterns if dom is not None else None
    if pats is None or not dom.pattern_copies:
        return None
    used = [(nm, cp) for nm, cp in dom.pattern_copies.items() if nm in ks.names and nm in ks.member]
    if not used:
        return None
    sizes = {nm: np.bincount(ks.member[nm], minlength=len(cp[2])) for nm, cp in used}
    ids: Dict[Any, int] = {}
    out = np.full(len(ks.kind), -1, np.int64)
    for r in range(len(ks.kind)):
        j = int(ks.position[r])
        if ks.kind[r] != 1 or not ks.pinned[r] or j < 1:
            continue
        g = tuple(pats[j]) if j < len(pats) and pats[j] is not None else ()
        if any(not 1 <= a < j for a in g):
            g = ()
        where = {pos: a for a, pos in enumerate(g)}
        bits: Dict[Tuple[int, int], bool] = {}
        ok = True
        for nm, (src, windows, sets) in used:
            t = int(src[j]) if j < len(src) else -2
            rep = int(ks.parts[r, ks.names.index(nm)])
            if t in (-2, -3) or sizes[nm][rep] != 1 or sets[rep] is None:  # -3: BOS, no statement
                continue
            got = sets[rep]
            if t == -1:  # the block holds the empty set at j on every input
                ok = bool(ok and not got)
                continue
            win = windows[t]
            vals = [v for _, v in win]
            if len(set(vals)) != len(vals):  # fn not injective on the window: no statement
                continue
            if not got <= set(vals) or any(jj == t and v not in got for jj, v in win):
                ok = False  # no input holds this vector here
                break
            if t not in where:
                continue
            for jj, v in win:
                if jj in where and jj != t:
                    pair = tuple(sorted((where[jj], where[t])))
                    if bits.setdefault(pair, v in got) != (v in got):
                        ok = False
            if not ok:
                break
        if not ok:
            out[r] = -2
            continue
        k = len(g)
        if not g or any((a, b) not in bits for b in range(k) for a in range(b)):
            continue
        key = (k, frozenset(pr for pr, eq in bits.items() if eq))
        out[r] = ids.setdefault(key, len(ids))
    return out


def certify_relu_head(state: State, blocks: Dict[str, Block], spec, p: Dict[str, Any], h: int, n: int,
                      causal: bool, sums_ok: bool = False, to_readout: bool = False,
                      dom: Optional[DomainView] = None, final: bool = False) -> HeadCert:
    """Certify ReLU head ``h`` of one attention sublayer (see the module docstring).

    Args:
        state: the abstract state before the sublayer.
        blocks: the residual blocks by name.
        spec: the sublayer's :class:`~constructions.runtime.SublayerSpec` (rows, ``qk_scale``).
        p: the sublayer's weights (``w_q``, ``w_k``: [heads, rows, d_head]; ``w_v``, ``w_o``).
        h: the head; n: N, the longest input; causal: the model masks later keys.
        sums_ok: the head's output SOp is set-valued (the union of the on keys' reads), so a
            query may add the values of several positions.
        to_readout: the head writes a block the unembedding reads.
        dom: a domain precondition (:class:`~.heads.DomainView`), or None: every input. Its
            ``classes`` fact makes a row of one class and one token clean (module docstring);
            the use is added to ``dom.used``; its ``scored`` fact lets a ``final`` head leave out
            the query rows that never stand at a scored position.
        final: no later sublayer reads the rows this head writes (only the unembedding may).
    Returns:
        :class:`~.heads.HeadCert` (``entry``: ``min_gap`` None, ``delta``, ``leak_bound`` = Lk,
        ``on_positions`` = K, ``weight`` = the largest total weight W).
    Raises:
        TooLarge: the score table, one side, or the set of sums is too large.
    """
    t = head_sides(state, blocks, spec, p, h, n)
    qs, ks, vs = t.qs, t.ks, t.vs
    if ks is None:  # the key side is kept as factors (:mod:`.heads`): ReLU heads need every combination
        raise TooLarge(f"a ReLU head's key side of {t.kf.count(1)} combinations per query kind (or its score "
                       f"table with {len(qs.contrib)} queries) is too large to enumerate; ReLU heads are not "
                       f"grouped by score")
    eps = table_rounding(t)
    d_inputs = score_perturbation(state, blocks, t, n)
    g32 = score_rel(p["w_q"][h], p["w_k"][h], t.wq.shape[1])
    chunk = max(1, ROW_CHUNK_ENTRIES // max(len(ks.contrib), 1))
    abs_max = max((float((qs.absval[a:a + chunk] @ ks.absval.T).max(initial=0.0))
                   for a in range(0, len(qs.contrib), chunk)), default=0.0)
    delta = up(d_inputs + g32 * abs_max)
    kpos = np.where(ks.kind == 0, 0, ks.position)  # -1: names no position
    outs = vs.contrib
    zero = not np.abs(outs).any()  # every value writes 0: any sum is 0
    do = outs.shape[1]
    order = np.argsort(kpos, kind="stable")
    gpos, starts = np.unique(kpos[order], return_index=True)  # groups of keys by position (-1 first)
    nq = len(qs.contrib)

    def row_tables(a: int, b: int):
        """Query rows a..b-1: (scores, masked, on, sigma, off weights) [r, nk] (module docstring)."""
        s = qs.contrib[a:b] @ ks.contrib.T
        masked = causal_mask(qs, ks, a, b) if causal else np.zeros(s.shape, bool)
        on = (s > 2 * eps) & ~masked & ~gone[None, :]  # a key no (domain) input holds: never on
        off = ~on & ~masked
        # an on key's ideal weight: its score rounded to float32 (few distinct values)
        sig = np.where(on, s.astype(np.float32).astype(np.float64), 0.0)
        off_w = np.where(off & ~gone[None, :], np.maximum(s + eps + delta, 0.0), 0.0)  # an off key's largest
        return s, masked, on, off, sig, off_w

    qkind, qpos = qs.kind.astype(int), qs.position.astype(int)
    # positions a query may see: BOS, and 1..qpos (or 1..n when its position is not read)
    n_seen = np.where((qkind == 0) & causal, 0, np.where(qpos >= 1, qpos, n))
    free = gpos == -1
    copies = np.where(free[None, :], n_seen[:, None], 1)  # a free key may stand at every seen position
    single_only = not zero and (not sums_ok or to_readout)  # a query may not add several positions
    codes, code_fact = _key_codes(ks, dom) if single_only else (None, "classes")  # a key's code, -1: none
    one_rows: List[np.ndarray] = []  # per chunk: rows with at most one on key on a domain input
    # rows that never stand at a scored position of a domain input (only when nothing but the
    # unembedding reads the output): left out if needed (module docstring, "Scored positions")
    skip = np.zeros(nq, bool)
    if single_only and final and dom is not None and dom.scored_ids is not None:
        qtok = _side_tokens(qs, dom)
        skip = (qkind == 1) & (qtok >= 0) & ~np.isin(qtok, np.asarray(sorted(dom.scored_ids), np.int64))
    skip_needed = False
    absent = _absent_keys(ks, dom) if single_only else np.zeros(len(ks.kind), bool)  # by the slots fact
    never = _unreachable_keys(ks, dom) if single_only else np.zeros(len(ks.kind), bool)  # on no input
    gone = absent | never
    absent_used = False

    def one_key(on: np.ndarray) -> np.ndarray:
        """[r] rows whose on keys all share one code >= 0 (one class, one token)."""
        if codes is None:
            return np.zeros(len(on), bool)
        big = np.iinfo(np.int64).max
        lo = np.where(on, codes[None, :], big).min(1)
        hi = np.where(on, codes[None, :], -2).max(1)
        return on.any(1) & (lo >= 0) & (lo == hi)

    def several_at(r: int) -> HeadCert:
        on_r = row_tables(r, r + 1)[2][0]
        js = [int(j) for j in np.flatnonzero(on_r)][:6]
        witness = {"query": describe(qs, r, blocks, state), "keys": [describe(ks, j, blocks, state) for j in js]}
        why = ("ReLU head: keys at several positions may score > 0 for one query, and the head writes the sum of "
               "their values, which is no single value of its output") if not sums_ok else (
               "ReLU head: keys at several positions may score > 0 for one query: the output is the set of their "
               "values, and the read-out (argmax) decodes a set of several values as one of them")
        return HeadCert(None, {"why": why, "witness": witness})

    g_on, g_off, g_offw, g_hi, g_lo = [], [], [], [], []
    s_max = 0.0
    for a in range(0, nq, chunk):
        b = min(a + chunk, nq)
        s, masked, on, off, sig, off_w = row_tables(a, b)
        red = lambda f, x: f.reduceat(x[:, order], starts, axis=1)  # noqa: E731  [r, groups]
        g_on.append(red(np.logical_or, on))
        if single_only:  # stop at the first query that adds several positions
            several = (g_on[-1] * copies[a:b]).sum(1) >= 2
            absent_used |= bool(((s > 2 * eps) & ~masked & (absent & ~never)[None, :]).any())
            one = several & one_key(on)
            one_rows.append(one)
            skip_needed |= bool((several & ~one & skip[a:b]).any())
            hit = np.flatnonzero(several & ~one & ~skip[a:b])
            if len(hit):
                return several_at(a + int(hit[0]))
        else:
            one_rows.append(np.zeros(b - a, bool))
        g_off.append(red(np.logical_or, off))
        g_offw.append(red(np.maximum, off_w))
        g_hi.append(red(np.maximum, sig))
        g_lo.append(red(np.minimum, np.where(on, sig, np.inf)))
        s_max = max(s_max, float(np.abs(np.where(on, s, 0.0)).max(initial=0.0)))
    on_g, off_g, offw_g, sig_hi, sig_lo = (np.concatenate(x) for x in (g_on, g_off, g_offw, g_hi, g_lo))
    if absent_used:
        dom.used.add("slots")
    if not skip_needed:
        skip[:] = False
    else:  # the left-out rows write nothing the claim covers: no keys, no weight, no sums
        dom.used.add("scored")
        on_g, offw_g = on_g & ~skip[:, None], np.where(skip[:, None], 0.0, offw_g)
    dw = delta + eps + U32 * s_max  # an on key's real weight is within dw of its sigma
    exists = (gpos[None, :] == 0) | ((qpos[:, None] >= 1) & (gpos[None, :] >= 1) & (gpos[None, :] <= qpos[:, None]))
    maybe_zero = off_g | ~exists | free[None, :]
    one_row = (np.concatenate(one_rows) if one_rows else np.zeros(nq, bool)) & ~skip
    if one_row.any():
        dom.used.add(code_fact)
    n_on = np.where(one_row, 1, (on_g * copies).sum(1))  # a clean row: one on key on a domain input
    k_on = int(n_on.max(initial=0))
    sig_on = np.where(on_g, sig_hi, 0.0) * copies
    sigma_max = float(np.where(one_row, sig_on.max(1, initial=0.0), sig_on.sum(1)).max(initial=0.0))
    leak_max = float((offw_g * copies).sum(1).max(initial=0.0))

    # the values a key at a position can give: BOS's at BOS, a pinned value side's at its position
    def values_at(pos: int) -> Tuple[np.ndarray, np.ndarray]:
        if pos == 0:
            sel = vs.kind == 0
        elif (vs.position >= 0).any():
            if pos < 0:
                raise TooLarge("a ReLU head whose value side reads positions but whose key side does not")
            sel = (vs.kind == 1) & (vs.position == pos)
        else:
            sel = vs.kind == 1
        return outs[sel], vs.guard[sel]

    # rows with the same options at every position give the same sums: each signature once (a row
    # with several weights at one position has a signature of its own: its weights are not all listed)
    sigs = np.concatenate([qkind[:, None], n_seen[:, None], one_row[:, None], on_g, on_g & maybe_zero,
                           np.where(on_g, sig_hi, 0.0), np.where(on_g, sig_lo, 0.0)], 1)
    _, first = np.unique(sigs, axis=0, return_index=True)
    own = np.flatnonzero((on_g & (sig_lo != sig_hi)).any(1))
    first = np.union1d(first, own)
    first = first[~skip[first]] if skip.any() else first
    if skip.any():  # a left-out row's signature may be the first of kept rows: take each kept signature
        kept = np.flatnonzero(~skip)
        _, f2 = np.unique(sigs[kept], axis=0, return_index=True)
        first = np.union1d(first, kept[f2])
    vcache: Dict[int, Tuple[np.ndarray, np.ndarray]] = {}
    totals: List[List[Tuple[np.ndarray, np.ndarray]]] = [[], []]
    for r in first:
        r = int(r)
        _, _, on_r, _, sig_r, _ = row_tables(r, r + 1)
        on_r, sig_r = on_r[0], sig_r[0]
        acc = (np.zeros((1, do)), np.array([qkind[r]]))
        union: List[Tuple[np.ndarray, np.ndarray]] = []  # a clean row's options, position by position
        for gi in np.flatnonzero(on_g[r]):
            pp = int(gpos[gi])
            js = order[starts[gi]:(starts[gi + 1] if gi + 1 < len(starts) else len(order))]
            sig_on = sorted(set(float(x) for x in sig_r[js][on_r[js]]))
            if pp not in vcache:
                vcache[pp] = values_at(pp)
            vals, vg = vcache[pp]
            ov = np.concatenate([sg_ * vals for sg_ in sig_on])
            og = np.concatenate([vg for _ in sig_on])
            if maybe_zero[r, gi]:
                ov, og = np.concatenate([np.zeros((1, do)), ov]), np.concatenate([[qkind[r]], og])
            opt = unique_min(ov, og)
            if one_row[r]:  # at most one on key in a domain input: one position's option, not a sum
                union.append(opt)
                continue
            for _ in range(int(copies[r, gi])):
                acc = _minkowski(acc, opt)
        if one_row[r]:
            acc = unique_min(np.concatenate([o for o, _ in union]), np.concatenate([g for _, g in union]))
        totals[qkind[r]].append(acc)
    outs_by_kind = []
    for kind in (0, 1):
        if not totals[kind]:
            outs_by_kind.append((np.zeros((1, do)), np.array([kind])))
            continue
        outs_by_kind.append(unique_min(np.concatenate([a for a, _ in totals[kind]]),
                                       np.concatenate([g for _, g in totals[kind]])))
    # the error of the write (module docstring)
    blist = list(blocks.values())
    vmax = np.abs(outs).max(0)
    rv = lin_err(state, blist, t.v_rows, t.wvo)
    w_tot = k_on * dw + sigma_max + leak_max
    if not math.isfinite(w_tot):
        return HeadCert(None, {"why": "ReLU head: the total attention weight is not bounded",
                               "witness": {"delta": delta, "n": n}})
    w_v = np.asarray(p["w_v"][h], np.float64)
    m_v = side(state, blocks, t.v_rows, w_v, n).absval.max(0)
    vabs = m_v @ np.abs(np.asarray(p["w_o"][h], np.float64))
    g, gv, go = gamma(n + 1, U32), gamma(terms(p["w_v"][h]), U32), gamma(terms(p["w_o"][h]), U32)
    rel_z = w_tot * (g * (1 + gv) + gv)
    f32 = (rel_z * (1 + go) + go * w_tot * (1 + gv) + U32 * w_tot * (1 + gv) * (1 + go)) * vabs
    r_row = k_on * dw * (vmax + rv) + sigma_max * rv + leak_max * (vmax + rv) + f32
    r_row = np.array([up(float(x)) for x in r_row])
    out_rows = spec.rows("out_rows", len(state.radius))
    l1 = {}
    for b in blist:
        cols = np.flatnonzero(np.isin(out_rows, b.rows))
        if len(cols):
            l1[b.name] = up(float(r_row[cols].sum()))
    entry = {"min_gap": None, "delta": delta, "leak_bound": up(leak_max), "on_positions": int(k_on),
             "weight": up(w_tot)}
    return HeadCert(entry, None, tuple(outs_by_kind), (r_row, l1), (t, eps))
