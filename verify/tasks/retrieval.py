"""D-step retrieval (Mușat, ICLR 2025), as this project formalises it (SPEC §4.3).

Facts are (key, value) token pairs meaning "key = value". A chain
x_D -> x_{D-1} -> ... -> x_0 gives the D facts (x_h, x_{h-1}), h = 1..D; c
distractor chains of the same length use disjoint symbols; the D (c+1) facts are
shuffled; then the query marker ``?`` and the symbol x_D. The target at the last
position is x_0 (D hops); no other position is scored. Attention is
bidirectional (the paper's bound is stated without causal masking).

The parameter ``hops`` = h in 1..D-1 asks instead for x_{D-h}, the value h
hops from the query, on the same inputs. The training cross-check uses it for
the paper's "implicit curriculum": one model trained on h = 1..D at once, each
sequence's h named by its BOS token (the harness has one output per position,
so each sequence asks for one intermediate value rather than all of them at
the query, as the paper does); its error at h = D is the task's error.

Token layout (integers): symbols 0..S-1, the query marker ``?`` = S. Model
positions (SPEC §3): BOS = 0; fact f (0-based) has its key at 2f+1 and its
value at 2f+2 (the *value slots* are the even positions); ``?`` at 2F+1 and
x_D at 2F+2 = n, with F = D (c+1) facts.

The paper's "implicit curriculum" variant asks at the query for every
intermediate value x_{D-1}, ..., x_0: the ``hops`` parameter h asks for the
value h hops from x_D (:func:`follow` gives all of them at once).
"""

from __future__ import annotations

import itertools
import math
import string
from typing import Any, Dict, Iterator, List, Optional, Tuple

import numpy as np
from hypothesis import strategies as st

from depthcraft.constructions.errors import InputError, ParameterError
from depthcraft.constructions.params import ParamSpec
from depthcraft.rasp_programs.retrieval import BOT, PARAMS, asked_hops, check_params, num_symbols, query_token, seq_len
from depthcraft.verify.certify.domain import Precondition
from depthcraft.verify.certify.locality import Locality, Piece
from depthcraft.verify.certify.symmetry import Generator, Orbit, Symmetry
from depthcraft.verify.tasks.base import EXHAUSTIVE_LIMIT, Task


def layout(chains: np.ndarray, order: np.ndarray, marker: int) -> np.ndarray:
    """Build inputs from chains and a fact order.

    Args:
        chains: [batch, c+1, D+1] int symbols; chains[b, j, h] = x_h of chain j
            (chain 0 is the queried one); facts are (x_h, x_{h-1}), h = 1..D.
        order: [batch, F] a permutation of the F = (c+1) D facts per row; fact
            f is chain f // D, hop f % D + 1.
        marker: the ``?`` token.
    Returns:
        [batch, 2F + 2] int64 tokens.
    """
    chains = np.asarray(chains, np.int64)
    b, c1, d1 = chains.shape
    d = d1 - 1
    f = np.asarray(order, np.int64)
    chain, hop = f // d, f % d + 1
    rows = np.arange(b)[:, None]
    keys = chains[rows, chain, hop]
    values = chains[rows, chain, hop - 1]
    out = np.empty((b, 2 * c1 * d + 2), np.int64)
    out[:, 0:-2:2] = keys
    out[:, 1:-2:2] = values
    out[:, -2] = marker
    out[:, -1] = chains[:, 0, d]
    return out


def _swap(m: int) -> Dict[int, int]:
    """The transposition (0 1) of m things (none when m < 2)."""
    return {0: 1, 1: 0} if m >= 2 else {}


def _cycle(m: int) -> Dict[int, int]:
    """The cycle (0 1 ... m-1) of m things."""
    return {i: (i + 1) % m for i in range(m)}


def _on_slots(perm: Dict[int, int], n: int) -> Tuple[int, ...]:
    """A permutation of fact slots as one of the model positions 0..n: slot k is positions (2k + 1, 2k + 2)."""
    pos = list(range(n + 1))
    for a, b in perm.items():
        pos[2 * a + 1], pos[2 * a + 2] = 2 * b + 1, 2 * b + 2
    return tuple(pos)


def _partitions(m: int, most: Optional[int] = None) -> Iterator[Tuple[int, ...]]:
    """Every partition of m into parts >= 1, each a non-increasing tuple (m = 0: the empty one)."""
    most = m if most is None else most
    if m == 0:
        yield ()
        return
    for first in range(min(m, most), 0, -1):
        for rest in _partitions(m - first, first):
            yield (first,) + rest


def _partition_count(m: int, most_parts: int) -> int:
    """The number of partitions of m into parts >= 1 with at most ``most_parts`` parts (0 when negative)."""
    if m < 0 or most_parts < 0:
        return 0
    # table[k][j]: partitions of j into at most k parts = partitions of j into parts of size <= k
    ways = [1] + [0] * m
    for size in range(1, min(most_parts, m) + 1):
        for j in range(size, m + 1):
            ways[j] += ways[j - size]
    return ways[m] if m == 0 or most_parts > 0 else 0


def _representative(d: int, parts: Tuple[int, ...], s: int) -> List[int]:
    """One input of a shape (:meth:`RetrievalTask.symmetry`): the queried chain of d facts and one chain per part,
    consecutive symbols from 0, the facts in chain order, then ``?`` (= s) and the queried symbol."""
    facts, nxt = [], 0
    for length in (d,) + tuple(parts):
        chain = list(range(nxt, nxt + length + 1))  # chain[h] = x_h
        nxt += length + 1
        facts += [(chain[h], chain[h - 1]) for h in range(length, 0, -1)]
    return [t for fact in facts for t in fact] + [s, d]


def follow(tokens: np.ndarray, hops: int, num_syms: int) -> np.ndarray:
    """Symbols reached from the last token after 1..hops fact look-ups.

    Args:
        tokens: [batch, n] inputs in the task's layout (facts, ``?``, query symbol).
        hops: D.
        num_syms: S (symbols are 0..S-1).
    Returns:
        [batch, hops] int64: column h-1 is the symbol h hops from the query
        (BOT once a look-up finds no fact).
    """
    x = np.asarray(tokens, np.int64)
    b, n = x.shape
    nf = (n - 2) // 2
    table = np.full((b, num_syms + 2), BOT, np.int64)  # table[b, key] = value; column -1 is BOT's row
    rows = np.arange(b)[:, None]
    keys, values = x[:, 0:2 * nf:2], x[:, 1:2 * nf:2]
    table[rows, np.clip(keys, 0, num_syms)] = values  # the marker never is a key; clipped for safety
    table[:, num_syms] = BOT
    cur = x[:, -1]
    out = np.empty((b, hops), np.int64)
    for h in range(hops):
        cur = table[np.arange(b), np.where(cur < 0, num_syms + 1, np.minimum(cur, num_syms))]
        out[:, h] = cur
    return out


__all__ = ["RetrievalTask", "RetrievalSlotsTask", "layout", "follow", "num_symbols", "query_token", "seq_len", "BOT"]


class RetrievalTask(Task):
    """D-step retrieval over shuffled facts, answer at the last position (bidirectional)."""

    name = "retrieval"
    title = "D-step retrieval (Mușat, ICLR 2025), this project's formalisation"
    params = PARAMS
    none_value = BOT
    causal = False

    def check(self, p: Dict[str, Any]) -> None:
        check_params(p)

    def vocab(self, p):
        return list(range(num_symbols(p) + 1))

    def max_seq_len(self, p):
        return seq_len(p["d"], p["distractors"])

    def check_inputs(self, p: Dict[str, Any], tokens: np.ndarray) -> np.ndarray:
        """Check [batch, n] inputs against the layout (module docstring); return them as int64.

        An input is F facts ``k_1 v_1 ... k_F v_F`` (symbols; keys distinct), the marker
        ``?`` and the queried symbol: an even length 2F + 2 <= max_seq_len, with ``?``
        at position n - 1 (1-based) and nowhere else. Chains may be short or broken (the
        answer is then ⊥); the construction is exact on every such input.

        Raises:
            InputError: the first malformed input, naming the position and what was expected.
        """
        x = np.asarray(tokens)
        if x.ndim != 2 or not np.issubdtype(x.dtype, np.integer):
            raise InputError(f"retrieval: expected a [batch, n] integer array, got shape {x.shape}, dtype {x.dtype}")
        x = x.astype(np.int64)
        b, n = x.shape
        limit = self.max_seq_len(p)
        if n > limit:
            raise InputError(f"input of length {n} is longer than max_seq_len={limit}")
        if n % 2 or n < 2:
            raise InputError(f"retrieval: an input is facts (key value pairs), then ? and the queried symbol: "
                             f"an even length 2..{limit}, got length {n}")
        names = self.token_names(p)
        marker = query_token(p)  # symbols are 0..S-1, the marker is S
        bad = (x < 0) | (x > marker)
        if bad.any():
            r, c = (int(i) for i in np.argwhere(bad)[0])
            raise InputError(f"retrieval: input {r} holds token {int(x[r, c])} at position {c + 1}, "
                             f"not in the vocabulary 0..{marker}")
        if (x[:, -2] != marker).any():
            r = int(np.flatnonzero(x[:, -2] != marker)[0])
            raise InputError(f"retrieval: input {r} has no ? at position {n - 1} (it holds {names[int(x[r, -2])]!r}); "
                             f"an input is facts (key value pairs), then ? and the queried symbol")
        stray = x == marker
        stray[:, -2] = False
        if stray.any():
            r, c = (int(i) for i in np.argwhere(stray)[0])
            raise InputError(f"retrieval: input {r} has ? at position {c + 1}; ? belongs only at position {n - 1}, "
                             f"just before the queried symbol (facts and the query are symbols)")
        keys = x[:, 0:-2:2]
        order = np.argsort(keys, axis=1, kind="stable")
        ordered = np.take_along_axis(keys, order, axis=1)
        dup = ordered[:, 1:] == ordered[:, :-1]
        if dup.any():
            r, j = (int(i) for i in np.argwhere(dup)[0])
            first, second = sorted((int(order[r, j]), int(order[r, j + 1])))
            raise InputError(f"retrieval: input {r} has two facts with the key {names[int(keys[r, first])]!r} "
                             f"(positions {2 * first + 1} and {2 * second + 1}); fact keys must be distinct")
        return x

    def domain(self, p: Dict[str, Any]) -> str:
        """The inputs the constructions are exact on: the facts and the query form disjoint chains.

        In words (what :meth:`in_domain` checks): a well-formed input (:meth:`check_inputs`:
        facts, ``?``, the queried symbol; fact keys distinct) in which no symbol is the value of
        two facts, nor both a fact's value and the queried symbol (so every symbol occurs at
        most twice: once as a key, once as a value or the query), the facts have no cycle, and
        the queried chain has exactly D facts. ``retrieval_tripling``'s proof
        (:func:`depthcraft.rasp_programs.retrieval.retrieval_tripling`, "Inputs") needs exactly
        this: every link name names one link, and the query's segment ends at x_0. Every
        sampled, edge-case and exhaustive input of this task is in it.
        """
        return (f"facts and query form disjoint chains: fact keys distinct, no symbol the value of two facts "
                f"or of a fact and the query, no cycle, and the queried chain has exactly d = {p['d']} facts")

    def domain_precondition(self, p: Dict[str, Any]) -> Precondition:
        """The domain's facts for the certifier: even lengths, and tokens distinct within each parity class.

        Proof that :meth:`domain` implies them. A domain input is well-formed (:meth:`check_inputs`):
        F facts, ``?`` and the queried symbol, so its length 2F + 2 is even (2..N). Its odd model
        positions hold the F fact keys (distinct) and ``?`` (at n - 1 only, and never a symbol);
        its even positions hold the F fact values and the queried symbol, which the domain makes
        pairwise distinct ("no symbol the value of two facts or of a fact and the query"). So two
        distinct regular positions of one parity hold distinct tokens.
        """
        n = self.max_seq_len(p)
        return Precondition(predicate=self.domain(p), lengths=frozenset(range(2, n + 1, 2)),
                            classes=tuple(pos % 2 for pos in range(n + 1)), symmetry=self.symmetry(p))

    def symmetry(self, p: Dict[str, Any], sampled_only: bool = False) -> Optional[Symmetry]:
        """The domain as orbits of renamings: any permutation of the symbols and of the fact slots.

        ``sampled_only``: only the orbit of the sampler's shape (c distractor chains of exactly D
        facts, all (c + 1) D facts present: what :meth:`sample` and :meth:`exhaustive` produce), a
        *sub-domain*; a certificate over it must say so. None when ``hops`` asks for fewer than D hops.

        The group G_F, for inputs with F facts, is Sym(S) x Sym(F): sigma permutes the symbols
        0..S-1 (``?``, BOS and PAD fixed); pi permutes the F fact slots, slot f being the model
        positions (2f + 1, 2f + 2) (key, value), and fixes ``?`` and the queried symbol at 2F + 1 and
        2F + 2. It acts by (g . x)_{pi(i)} = sigma(x_i). Generators: the transposition (0 1) and the
        cycle (0 1 ... S-1) of the symbols, and the same two on the slots (F >= 2).

        Proof that the orbits cover the domain. In a domain input (:meth:`domain`) every symbol is
        the key of at most one fact and the value of at most one, and there is no cycle, so the
        facts form disjoint paths; the queried symbol x_D starts one of them (it is no fact's
        value) and that path has exactly D facts. Call the *shape* of an input its fact count F
        and the multiset of the other paths' lengths (a partition of F - D into parts >= 1). Two
        domain inputs x, y with one shape are one orbit: map each path of x to a path of y of the
        same length (the queried ones to each other) node by node; this is a bijection between
        the symbols they use, which extends to a permutation sigma of 0..S-1; the fact (a, b) in
        slot f of x goes to the fact (sigma a, sigma b), which y holds in some slot pi(f), a
        bijection of the slots; then g . x = y (``?`` and the query position are fixed, and
        sigma(x_D) = y_D). Conversely every shape with 2F + 2 <= N and F + 1 + (number of
        other paths) <= S symbols occurs. So one representative per shape (:meth:`orbits`)
        covers the domain; ``tests/test_certify_symmetry.py`` checks this by brute force on small
        instances.
        """
        d, s, n = p["d"], num_symbols(p), self.max_seq_len(p)
        if asked_hops(p) != d:
            return None
        fmax = (n - 2) // 2
        swap, cycle = _swap, _cycle
        on_slots = lambda perm: _on_slots(perm, n)  # noqa: E731

        gens = [Generator(tuple(swap(s).items()), tuple(range(n + 1))),
                Generator(tuple(cycle(s).items()), tuple(range(n + 1))),
                Generator((), on_slots(swap(2)))]
        slot_cycles = {}  # F -> the index of the generator cycling F slots
        for f in ([fmax] if sampled_only else range(d, fmax + 1)):
            if f >= 3:
                slot_cycles[f] = len(gens)
                gens.append(Generator((), on_slots(cycle(f))))

        def shapes():
            if sampled_only:
                yield fmax, (d,) * p["distractors"]
                return
            for f in range(d, fmax + 1):
                for parts in _partitions(f - d):
                    if f + 1 + len(parts) <= s:
                        yield f, parts

        def count() -> int:
            return 1 if sampled_only else sum(_partition_count(f - d, s - f - 1) for f in range(d, fmax + 1))

        def orbits() -> List[Orbit]:
            return [Orbit(tuple(_representative(d, parts, s)),
                          (0, 1) + ((2,) if f >= 2 else ()) + ((slot_cycles[f],) if f >= 3 else ()),
                          f"F = {f} facts; other chains of {list(parts)} facts") for f, parts in shapes()]

        return Symmetry(group="Sym(symbols) x Sym(fact slots) (renaming symbols, reordering facts)",
                        generators=tuple(gens), orbits=orbits, count=count,
                        proof="depthcraft.verify.tasks.retrieval.RetrievalTask.symmetry",
                        locality=None if sampled_only else self.locality(p))

    def locality(self, p: Dict[str, Any]) -> Locality:
        """The domain as chains: every chain of a domain input computes as in a piece with that chain.

        Pieces: the queried chain alone (D facts, ``?``, x_D), and the queried chain with one other
        chain of l facts, for every l a domain input can hold (l <= F_max - D and l + 1 <= S - D - 1
        symbols); the queried chain's positions and ``?`` and x_D are component 0, the other chain's
        component 1. The group: Sym(symbols) x Sym(every slot), a slot being positions (2k + 1, 2k + 2)
        for k = 0 .. N/2 - 1 (the query's ``? x_D`` included).

        Proof of the decomposition. A domain input's facts are disjoint paths (:meth:`symmetry`); its
        components are the queried chain (with ``?`` and x_D) and each other chain. For the queried
        chain, a renaming g of symbols and slots maps the piece "queried chain alone" onto it (its
        facts' slots onto the input's, the query slot onto the input's query slot); for another chain
        of l facts, one maps the piece "queried chain + l" onto the queried chain and that chain. The
        objects (symbols, slot positions) of distinct components are disjoint, and ``?`` occurs once,
        in the queried chain (an owned token). :func:`~depthcraft.verify.certify.locality.certify_by_locality` checks the rest.
        """
        d, s, n = p["d"], num_symbols(p), self.max_seq_len(p)
        fmax = (n - 2) // 2
        slots = n // 2
        top = min(fmax - d, s - d - 2)
        swap, cycle = _swap, _cycle
        on_slots = lambda perm: _on_slots(perm, n)  # noqa: E731

        ident = tuple(range(n + 1))
        gens = (Generator(tuple(swap(s).items()), ident), Generator(tuple(cycle(s).items()), ident),
                Generator((), on_slots(swap(slots))), Generator((), on_slots(cycle(slots))))

        def pieces() -> List[Piece]:
            out = [Piece(tuple(_representative(d, (), s)), (0,) * (2 * d + 2), "the queried chain alone")]
            for l in range(1, top + 1):
                toks = _representative(d, (l,), s)
                comps = (0,) * (2 * d) + (1,) * (2 * l) + (0, 0)
                out.append(Piece(tuple(toks), comps, f"the queried chain and a chain of {l} facts"))
            return out

        return Locality(group="Sym(symbols) x Sym(slots) (renaming symbols, reordering facts and the query)",
                        generators=gens, pieces=pieces, count=lambda: 1 + max(top, 0), owned_tokens=(query_token(p),),
                        proof="depthcraft.verify.tasks.retrieval.RetrievalTask.locality")

    def row_in_domain(self, p: Dict[str, Any], row: np.ndarray) -> bool:
        """Whether one well-formed input [n] satisfies :meth:`domain` beyond its format."""
        keys, values, query = row[0:-2:2].tolist(), row[1:-2:2].tolist(), int(row[-1])
        if len(set(values + [query])) != len(values) + 1:  # a symbol is the value of two facts
            return False
        nxt = dict(zip(keys, values))
        for start in keys:  # no cycle: every chain leaves the keys within F steps
            cur, steps = start, 0
            while cur in nxt and steps <= len(keys):
                cur, steps = nxt[cur], steps + 1
            if steps > len(keys) or cur in nxt:
                return False
        cur, hops = query, 0
        while cur in nxt and hops <= len(keys):
            cur, hops = nxt[cur], hops + 1
        return hops == p["d"]

    def reference(self, p, tokens) -> Tuple[np.ndarray, np.ndarray]:
        """x_{D-h} at the last position (h = ``hops``, D by default), ⊥ when a chain breaks; nothing else scored.

        Raises:
            InputError: a malformed input (see :meth:`check_inputs`).
        """
        x = self.check_inputs(p, tokens)
        out = np.full(x.shape, BOT, np.int64)
        out[:, -1] = follow(x, asked_hops(p), num_symbols(p))[:, -1]
        scored = np.zeros(x.shape, bool)
        scored[:, -1] = True
        return out, scored

    def sample(self, p, rng, batch):
        d, c1, s = p["d"], p["distractors"] + 1, num_symbols(p)
        syms = np.argsort(rng.random((batch, s)), axis=1)[:, :c1 * (d + 1)]
        order = np.argsort(rng.random((batch, c1 * d)), axis=1)
        return layout(syms.reshape(batch, c1, d + 1), order, query_token(p))

    def edge_cases(self, p) -> List[np.ndarray]:
        d, c1, s = p["d"], p["distractors"] + 1, num_symbols(p)
        m = c1 * (d + 1)
        nf = c1 * d
        ascending = np.arange(m).reshape(c1, d + 1)
        symbol_sets = [ascending, (s - 1 - np.arange(m)).reshape(c1, d + 1),  # lowest / highest symbols
                       ascending[:, ::-1].copy()]  # the chain runs downwards
        in_chain_order = np.arange(nf)  # chain 0 hop 1..D, then each distractor
        hop_desc = np.concatenate([j * d + np.arange(d)[::-1] for j in range(c1)])  # x_D's fact first
        interleaved = np.arange(nf).reshape(c1, d).T.reshape(-1)  # hop-major across chains
        orders = [in_chain_order, in_chain_order[::-1].copy(), hop_desc, interleaved, interleaved[::-1].copy()]
        chains = np.stack([cs for cs in symbol_sets for _ in orders])
        order = np.stack([o for _ in symbol_sets for o in orders])
        groups = [layout(chains, order, query_token(p))]
        if c1 > 1:  # no distractors: a shorter input over the same positions
            groups.append(layout(ascending[None, :1], np.arange(d)[None], query_token(p)))
        return groups

    def exhaustive(self, p: Dict[str, Any], batch: int = 1 << 15) -> Tuple[int, Iterator[np.ndarray]]:
        """Every injective assignment of symbols to the chains times every order of the facts.

        Raises:
            ParameterError: more than EXHAUSTIVE_LIMIT inputs.
        """
        d, c1, s = p["d"], p["distractors"] + 1, num_symbols(p)
        m, nf = c1 * (d + 1), c1 * d
        total = math.perm(s, m) * math.factorial(nf)
        if total > EXHAUSTIVE_LIMIT:
            raise ParameterError(f"exhaustive retrieval check: {math.perm(s, m)} symbol assignments x "
                                 f"{math.factorial(nf)} fact orders = {total} inputs is above the limit of "
                                 f"{EXHAUSTIVE_LIMIT}; use smaller d, distractors or symbols")
        def gen():  # lazy: calling exhaustive() only to check the size costs nothing
            orders = np.asarray(list(itertools.permutations(range(nf))), np.int64)
            chunk = max(1, batch // len(orders))
            assignments = itertools.permutations(range(s), m)
            while True:
                block = list(itertools.islice(assignments, chunk))
                if not block:
                    return
                syms = np.asarray(block, np.int64).reshape(len(block), c1, d + 1)
                yield layout(np.repeat(syms, len(orders), axis=0), np.tile(orders, (len(block), 1)),
                             query_token(p))

        return total, gen()

    def strategy(self, p):
        d, c, s = p["d"], p["distractors"], num_symbols(p)
        marker = query_token(p)

        @st.composite
        def inputs(draw):
            c1 = draw(st.integers(1, c + 1))
            syms = draw(st.permutations(range(s)))[:c1 * (d + 1)]
            order = draw(st.permutations(range(c1 * d)))
            x = layout(np.asarray(syms).reshape(1, c1, d + 1), np.asarray(order)[None], marker)
            return x[0].tolist()

        return inputs()

    def token_names(self, p: Dict[str, Any]) -> Dict[int, str]:
        s = num_symbols(p)
        names = {v: (string.ascii_lowercase[v] if s <= 26 else str(v)) for v in range(s)}
        names[s] = "?"
        return names


class RetrievalSlotsTask(RetrievalTask):
    """D-step retrieval with one answer slot per hop: the paper's implicit curriculum (training variant).

    Mușat's "implicit curriculum" asks at the query for every intermediate value
    x_{D-1}, ..., x_0. The trained model has one output per position, so this variant
    appends D - 1 *answer slots* (the token ``#`` = S + 1) after the query symbol and
    reads hop h at the h-th output position from the query on::

        facts ... ? x_D # # ... #      (D - 1 slots)
        position of x_D -> x_{D-1} (hop 1), slot j -> x_{D-1-j} (hop j + 1), last slot -> x_0

    ``targets`` decides what is scored on the *same* inputs: ``every`` (every hop: the
    curriculum) or ``final`` (only x_0 at the last position: no curriculum). The final
    answer is always at the last position, so the task's error at the last position
    is D-step retrieval's error in both. This is a training-only task (no construction
    reads answer slots); the facts, the fact order and ⊥ for broken chains follow
    :class:`RetrievalTask`.

    Token layout: symbols 0..S-1, ``?`` = S, ``#`` = S + 1.
    """

    name = "retrieval_slots"
    title = "D-step retrieval with one answer slot per hop (Mușat's implicit curriculum; training variant)"
    params = tuple(s for s in PARAMS if s.name != "hops") + (
        ParamSpec("targets", str, "every", "scored answer slots: every hop (implicit curriculum) or only the "
                  "final one", choices=("every", "final")),
    )

    def check(self, p):
        check_params({**p, "hops": 0})

    def symmetry(self, p):
        """None: the answer slots are not a renaming-closed layout the symmetry route knows (training only)."""
        return None

    def slot_token(self, p) -> int:
        """The answer-slot token ``#`` (= S + 1)."""
        return num_symbols(p) + 1

    def vocab(self, p):
        return list(range(num_symbols(p) + 2))

    def max_seq_len(self, p):
        return seq_len(p["d"], p["distractors"]) + p["d"] - 1

    def with_slots(self, p, base: np.ndarray) -> np.ndarray:
        """[b, 2F+2] retrieval inputs -> [b, 2F+2 + D-1] with the answer slots appended."""
        base = np.asarray(base, np.int64)
        return np.concatenate([base, np.full((len(base), p["d"] - 1), self.slot_token(p), np.int64)], 1)

    def base(self, p, tokens) -> np.ndarray:
        """Strip and check the D - 1 answer slots; return the [b, 2F+2] retrieval part, checked.

        Raises:
            InputError: the input does not end with exactly D - 1 slots, or its retrieval part is malformed.
        """
        x = np.asarray(tokens)
        if x.ndim != 2 or not np.issubdtype(x.dtype, np.integer):
            raise InputError(f"retrieval_slots: expected a [batch, n] integer array, got shape {x.shape}, "
                             f"dtype {x.dtype}")
        k = p["d"] - 1
        slot = self.slot_token(p)
        if x.shape[1] < k + 2 or (k and (x[:, x.shape[1] - k:] != slot).any()):
            raise InputError(f"retrieval_slots: an input ends with d - 1 = {k} answer slots # after the query "
                             f"symbol; got {x.shape[1]} tokens without them")
        core = x[:, :x.shape[1] - k].astype(np.int64)
        if (core == slot).any():
            r, c = (int(i) for i in np.argwhere(core == slot)[0])
            raise InputError(f"retrieval_slots: input {r} has # at position {c + 1}; # belongs only after the query")
        return RetrievalTask.check_inputs(self, p, core)

    def check_inputs(self, p, tokens):
        self.base(p, tokens)
        return np.asarray(tokens, np.int64)

    def reference(self, p, tokens):
        """Hop h (x_{D-h}) at the h-th position from the query symbol on (⊥ where a chain breaks);
        scored: every hop (``targets=every``) or only the last position (``final``).

        Raises:
            InputError: a malformed input.
        """
        core = self.base(p, tokens)
        d = p["d"]
        b, n = core.shape
        out = np.full((b, n + d - 1), BOT, np.int64)
        out[:, n - 1:] = follow(core, d, num_symbols(p))
        scored = np.zeros(out.shape, bool)
        scored[:, (n - 1 if p["targets"] == "every" else n + d - 2):] = True
        return out, scored

    def sample(self, p, rng, batch):
        return self.with_slots(p, RetrievalTask.sample(self, p, rng, batch))

    def edge_cases(self, p):
        return [self.with_slots(p, g) for g in RetrievalTask.edge_cases(self, p)]

    def exhaustive(self, p, batch: int = 1 << 15):
        total, gen = RetrievalTask.exhaustive(self, p, batch)
        return total, (self.with_slots(p, g) for g in gen)

    def strategy(self, p):
        return RetrievalTask.strategy(self, p).map(lambda x: x + [self.slot_token(p)] * (p["d"] - 1))

    def token_names(self, p):
        names = RetrievalTask.token_names(self, p)
        names[self.slot_token(p)] = "#"
        return names
