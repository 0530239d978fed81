"""Graph connectivity (Sanford, Hsu & Telgarsky 2024; Merrill & Sabharwal 2025), this project's format (SPEC §4.4).

An input is a graph on the vertices 0..n-1 and a query pair (s, t); the target, at
the last position, is 1 when t is reachable from s (s = t counts as reachable),
else 0. No other position is scored. Attention is bidirectional.

Token layout (see :mod:`depthcraft.rasp_programs.connectivity` and
``docs/tasks/connectivity.md``): the vertex block (each vertex token once, any
order), the edge block (at most M slots, each an edge token ``a-b`` or the filler
``_``, no edge twice, any order), then ``? s t``. Example (n = 4)::

    2 0 3 1  0-1 _ 2-3 1-2  ?  0 3      -> 1 (0-1-2-3)

Samplers (parameter ``sampler``; vertex labels, the vertex block and the edge order
are shuffled, fillers fill the M slots at random places, so every sampled input has
length n + M + 3):

* ``path``: a Hamiltonian path (diameter n - 1, the tight case);
* ``cycle``: a Hamiltonian cycle (a single edge for n = 2);
* ``two_components``: two disjoint parts, each a path or a uniform random tree;
* ``tree``: a uniform random labelled tree (Prüfer sequence);
* ``er``: Erdős–Rényi G(n, p) with p = c ln(n) / n, c uniform in [0.5, 1.5], around
  the connectivity threshold (redrawn if it has more than M edges);
* ``mix`` (default): each input from one of the five, uniformly;
* ``paths`` (for training, path-heavy; n >= 4, M >= n - 2): a Hamiltonian path cut at its
  middle edge, i.e. two disjoint paths of floor(n/2) and ceil(n/2) vertices (always n - 2
  edges). Half of the queries are the two ends of one path (positive, at distance
  floor(n/2) - 1 or ceil(n/2) - 1), half one end of each path (negative), in random order.
  So s and t are always leaves (degree 1), s != t, and the graph's distribution does not
  depend on the answer: no edge count, degree or other statistic of the graph or of s and
  t alone decides it. The cut is in the middle (not at a random edge) because the other two
  leaves also decide the answer (they are connected exactly when s and t are): with a short
  part, a model that sees only a few hops around the leaves would answer from it.

The query (all samplers but ``paths``) is, with probability 1/2, a far pair (a double
sweep: the vertex farthest from a random vertex, and the vertex farthest from that one;
for a path its two ends), else a uniform pair (s = t allowed).
The exhaustive check enumerates every graph with at most M edges (vertex block in
order, edges sorted, no fillers) times every query pair: 2^C(n,2) n^2 inputs
(25,600 for n = 5).
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
from hypothesis import strategies as st

from depthcraft.constructions.errors import InputError, ParameterError
from depthcraft.constructions.params import ParamSpec
from depthcraft.rasp_programs.connectivity import (NONE, PARAMS, SAMPLERS, check_params, edge_list, edge_token,
                                                   filler_token, marker_token, max_edges, num_pairs, seq_len,
                                                   vocab_size)
from depthcraft.verify.tasks.base import EXHAUSTIVE_LIMIT, Task

#: The graph families ``mix`` draws from.
FAMILIES = ("path", "cycle", "two_components", "tree", "er")

__all__ = ["ConnectivityTask", "ConnectivitySpanTask", "encode", "decode_edges", "bfs_distances", "FAMILIES"]


# ------------------------------------------------------------------------------------------------
# Layout
# ------------------------------------------------------------------------------------------------


def encode(n: int, order: Sequence[int], edges: Sequence[Tuple[int, int]], s: int, t: int,
           slots: Optional[int] = None, rng: Optional[np.random.Generator] = None) -> List[int]:
    """One input: vertex block ``order``, the edges (in the given order), fillers, ``? s t``.

    Args:
        n: number of vertices.
        order: the vertex block, a permutation of 0..n-1.
        edges: (a, b) pairs, a != b, each unordered pair at most once.
        s, t: the query.
        slots: edge-block length (>= len(edges)); the remaining slots are fillers,
            placed at random slots when ``rng`` is given, else at the end. None = len(edges).
        rng: places the fillers.
    Returns:
        The token ids, length n + slots + 3.
    """
    block = [edge_token(n, a, b) for a, b in edges]
    slots = len(block) if slots is None else slots
    fill = slots - len(block)
    if fill < 0:
        raise ValueError(f"{len(block)} edges do not fit in {slots} slots")
    if fill:
        block = block + [filler_token(n)] * fill
        if rng is not None:
            block = [block[i] for i in rng.permutation(len(block))]
    return list(order) + block + [marker_token(n), s, t]


def decode_edges(n: int, tokens: np.ndarray) -> np.ndarray:
    """[b, n, n] bool adjacency of checked inputs (:meth:`ConnectivityTask.check_inputs`)."""
    x = np.asarray(tokens, np.int64)
    b, length = x.shape
    pairs = np.asarray(edge_list(n), np.int64).reshape(-1, 2)
    block = x[:, n:length - 3]
    is_edge = (block >= n) & (block < n + len(pairs))
    idx = np.where(is_edge, block - n, 0)
    adj = np.zeros((b, n, n), bool)
    rows = np.broadcast_to(np.arange(b)[:, None], block.shape)[is_edge]
    a, c = pairs[idx[is_edge], 0], pairs[idx[is_edge], 1]
    adj[rows, a, c] = True
    adj[rows, c, a] = True
    return adj


def bfs_distances(adj: np.ndarray, source: np.ndarray) -> np.ndarray:
    """Breadth-first search from one source per graph, level by level over the whole batch.

    Args:
        adj: [b, n, n] bool symmetric adjacency.
        source: [b] int source vertices.
    Returns:
        [b, n] int64: the number of edges on a shortest path from the source, -1 when unreachable.
    """
    b, n, _ = adj.shape
    dist = np.full((b, n), -1, np.int64)
    frontier = np.zeros((b, n), bool)
    frontier[np.arange(b), source] = True
    dist[frontier] = 0
    a = adj.astype(np.float32)
    for level in range(1, n):
        nxt = (np.einsum("bu,buv->bv", frontier.astype(np.float32), a) > 0) & (dist < 0)
        if not nxt.any():
            break
        dist[nxt] = level
        frontier = nxt
    return dist


# ------------------------------------------------------------------------------------------------
# Graph families (edge lists on vertices 0..n-1, labels random)
# ------------------------------------------------------------------------------------------------


def _path(perm: Sequence[int]) -> List[Tuple[int, int]]:
    return [(int(perm[i]), int(perm[i + 1])) for i in range(len(perm) - 1)]


def _tree(perm: Sequence[int], rng: np.random.Generator) -> List[Tuple[int, int]]:
    """A uniform random labelled tree on the vertices ``perm`` (Prüfer sequence)."""
    k = len(perm)
    if k <= 2:
        return _path(perm)
    seq = rng.integers(0, k, size=k - 2)
    degree = np.ones(k, np.int64)
    np.add.at(degree, seq, 1)
    edges = []
    for v in seq:
        leaf = int(np.flatnonzero(degree == 1)[0])
        edges.append((int(perm[leaf]), int(perm[v])))
        degree[leaf] -= 1
        degree[v] -= 1
    u, w = np.flatnonzero(degree == 1)
    edges.append((int(perm[u]), int(perm[w])))
    return edges


def family_edges(family: str, n: int, limit: int, rng: np.random.Generator) -> List[Tuple[int, int]]:
    """Edges of one random graph of ``family`` (:data:`FAMILIES`) with at most ``limit`` edges.

    Raises:
        ParameterError: the family needs more than ``limit`` edges (M too small for it).
    """
    perm = rng.permutation(n)
    if family == "path":
        edges = _path(perm)
    elif family == "cycle":
        edges = _path(perm) + ([(int(perm[-1]), int(perm[0]))] if n >= 3 else [])
    elif family == "tree":
        edges = _tree(perm, rng)
    elif family == "two_components":
        k = int(rng.integers(1, n))
        edges = []
        for part in (perm[:k], perm[k:]):
            edges += _path(part) if rng.random() < 0.5 else _tree(part, rng)
    elif family == "er":
        for _ in range(1000):
            p = rng.uniform(0.5, 1.5) * math.log(n) / n
            pick = rng.random(num_pairs(n)) < p
            if pick.sum() <= limit:
                break
        else:  # pragma: no cover - M >= n makes this vanishingly rare
            raise ParameterError(f"Erdős–Rényi graphs at n={n} keep exceeding max_edges={limit}")
        edges = [edge_list(n)[i] for i in np.flatnonzero(pick)]
    else:
        raise ParameterError(f"unknown graph family {family!r}; expected one of {list(FAMILIES)}")
    if len(edges) > limit:
        raise ParameterError(f"a {family} graph on n={n} vertices has {len(edges)} edges, more than "
                             f"max_edges={limit}")
    return edges


# ------------------------------------------------------------------------------------------------
# The task
# ------------------------------------------------------------------------------------------------


class ConnectivityTask(Task):
    """Is t reachable from s? Answer at the last position; bidirectional."""

    name = "connectivity"
    title = "graph connectivity (Sanford, Hsu & Telgarsky 2024; Merrill & Sabharwal 2025), this project's format"
    params = PARAMS
    none_value = NONE
    causal = False

    def check(self, p: Dict[str, Any]) -> None:
        check_params(p)

    def vocab(self, p):
        return list(range(vocab_size(p["n"])))

    def max_seq_len(self, p):
        return seq_len(p)

    def token_names(self, p: Dict[str, Any]) -> Dict[int, str]:
        n = p["n"]
        names = {v: str(v) for v in range(n)}
        for a, b in edge_list(n):
            names[edge_token(n, a, b)] = f"{a}-{b}"
        names[marker_token(n)] = "?"
        names[filler_token(n)] = "_"
        return names

    # ------------------------------------------------------------------ validation
    def check_inputs(self, p: Dict[str, Any], tokens: np.ndarray) -> np.ndarray:
        """Check [batch, length] inputs against the layout (module docstring); return them as int64.

        Raises:
            InputError: the first malformed input, naming the position and what was expected.
        """
        n, m = p["n"], max_edges(p)
        x = np.asarray(tokens)
        if x.ndim != 2 or not np.issubdtype(x.dtype, np.integer):
            raise InputError(f"connectivity: expected a [batch, length] integer array, got shape {x.shape}, "
                             f"dtype {x.dtype}")
        x = x.astype(np.int64)
        b, length = x.shape
        if not n + 3 <= length <= n + m + 3:
            raise InputError(f"connectivity: an input is {n} vertex tokens, at most {m} edge slots and ? s t: "
                             f"length {n + 3}..{n + m + 3}, got length {length}")
        names = self.token_names(p)
        bad = (x < 0) | (x >= vocab_size(n))
        if bad.any():
            r, c = (int(i) for i in np.argwhere(bad)[0])
            raise InputError(f"connectivity: input {r} holds token id {int(x[r, c])} at position {c + 1}, "
                             f"not in the vocabulary 0..{vocab_size(n) - 1}")
        block = x[:, :n]
        not_vertex = block >= n
        if not_vertex.any():
            r, c = (int(i) for i in np.argwhere(not_vertex)[0])
            raise InputError(f"connectivity: input {r} has {names[int(x[r, c])]!r} at position {c + 1}; the first "
                             f"{n} positions are the vertex block (each vertex 0..{n - 1} once)")
        srt = np.sort(block, axis=1)
        dup = srt[:, 1:] == srt[:, :-1]
        if dup.any():
            r, c = (int(i) for i in np.argwhere(dup)[0])
            missing = sorted(set(range(n)) - set(block[r].tolist()))
            raise InputError(f"connectivity: input {r} lists vertex {int(srt[r, c])} twice in the vertex block "
                             f"(positions 1..{n}) and misses {missing[0]}; each vertex must appear once")
        edges = x[:, n:length - 3]
        wrong = (edges < n) | (edges == marker_token(n))
        if wrong.any():
            r, c = (int(i) for i in np.argwhere(wrong)[0])
            raise InputError(f"connectivity: input {r} has {names[int(edges[r, c])]!r} at position {n + c + 1}, "
                             f"in the edge block (positions {n + 1}..{length - 3}: edge tokens a-b or _)")
        real = np.where(edges == filler_token(n), -1 - np.arange(edges.shape[1])[None, :], edges)
        order = np.argsort(real, axis=1, kind="stable")
        srt = np.take_along_axis(real, order, axis=1)
        dup = (srt[:, 1:] == srt[:, :-1]) & (srt[:, 1:] >= 0)
        if dup.any():
            r, c = (int(i) for i in np.argwhere(dup)[0])
            first, second = sorted((int(order[r, c]), int(order[r, c + 1])))
            raise InputError(f"connectivity: input {r} lists the edge {names[int(srt[r, c])]} twice (positions "
                             f"{n + first + 1} and {n + second + 1}); a simple graph has each edge once")
        if (x[:, -3] != marker_token(n)).any():
            r = int(np.flatnonzero(x[:, -3] != marker_token(n))[0])
            raise InputError(f"connectivity: input {r} has {names[int(x[r, -3])]!r} at position {length - 2}, "
                             f"where ? belongs (an input ends with ? s t)")
        ends = x[:, -2:] >= n
        if ends.any():
            r, c = (int(i) for i in np.argwhere(ends)[0])
            raise InputError(f"connectivity: input {r} has {names[int(x[r, length - 2 + c])]!r} at position "
                             f"{length - 1 + c}; the query ? s t needs two vertices 0..{n - 1}")
        return x

    def domain(self, p: Dict[str, Any]) -> str:
        """The inputs the constructions are meant for: the task's format (:meth:`check_inputs`).

        In words: the vertex block lists each vertex 0..n-1 once, the edge block holds at most
        M slots of edge tokens or fillers with no edge twice, and the input ends with ``? s t``
        (s, t vertices). A free token sequence over the vocabulary (a vertex twice, an edge
        twice, ``?`` elsewhere) is outside it: the union heads over the edge list assume the
        format, so a certificate must never claim such inputs.
        """
        return (f"the task's format: vertex block with each of the {p['n']} vertices once, at most "
                f"{max_edges(p)} edge slots (edge tokens or fillers, no edge twice), then ? s t")

    # ------------------------------------------------------------------ reference
    def reference(self, p, tokens) -> Tuple[np.ndarray, np.ndarray]:
        """1 at the last position when t is reachable from s (breadth-first search), else 0; nothing else scored.

        Raises:
            InputError: a malformed input (see :meth:`check_inputs`).
        """
        x = self.check_inputs(p, tokens)
        n = p["n"]
        dist = bfs_distances(decode_edges(n, x), x[:, -2])
        out = np.full(x.shape, NONE, np.int64)
        out[:, -1] = (dist[np.arange(len(x)), x[:, -1]] >= 0).astype(np.int64)
        scored = np.zeros(x.shape, bool)
        scored[:, -1] = True
        return out, scored

    # ------------------------------------------------------------------ samplers
    def sample_graphs(self, p: Dict[str, Any], rng: np.random.Generator, batch: int,
                      families: Optional[Sequence[str]] = None) -> np.ndarray:
        """[batch, n + M + 3] inputs from the given families (default: the ``sampler`` parameter).

        Args:
            p: resolved parameters.
            rng: the random source.
            batch: number of inputs.
            families: draw each input's family uniformly from these (None: ``p["sampler"]``,
                ``mix`` = all of :data:`FAMILIES`).
        """
        n, m = p["n"], max_edges(p)
        if families is None:
            families = FAMILIES if p["sampler"] == "mix" else (p["sampler"],)
        if list(families) == ["paths"]:
            return self._sample_paths(p, rng, batch)
        graphs = [family_edges(families[int(rng.integers(len(families)))], n, m, rng) for _ in range(batch)]
        adj = np.zeros((batch, n, n), bool)
        for r, edges in enumerate(graphs):
            for a, c in edges:
                adj[r, a, c] = adj[r, c, a] = True
        # Query: half the rows a far pair (a double sweep: the vertex farthest from a random one, and the
        # vertex farthest from that: a path's two ends, a tree's diameter), half a uniform pair.
        noise = rng.random((batch, n)) * 0.5  # breaks ties among the farthest at random

        def farthest(src):
            d = bfs_distances(adj, src)
            return np.argmax(np.where(d >= 0, d + noise, -1.0), axis=1)

        start = rng.integers(0, n, size=batch)
        a = farthest(start)
        b = farthest(a)
        flip = rng.random(batch) < 0.5
        uniform = rng.random(batch) < 0.5
        s = np.where(uniform, start, np.where(flip, b, a))
        t = np.where(uniform, rng.integers(0, n, size=batch), np.where(flip, a, b))
        out = np.empty((batch, n + m + 3), np.int64)
        for r, edges in enumerate(graphs):
            order = [edges[i] for i in rng.permutation(len(edges))]
            out[r] = encode(n, rng.permutation(n).tolist(), order, int(s[r]), int(t[r]), slots=m, rng=rng)
        return out

    def _sample_paths(self, p: Dict[str, Any], rng: np.random.Generator, batch: int) -> np.ndarray:
        """The ``paths`` sampler (module docstring): two paths of floor(n/2) and ceil(n/2) vertices.

        A random Hamiltonian path ``perm`` cut at its middle edge: the parts ``perm[:n // 2]`` and
        ``perm[n // 2:]``. With probability 1/2 the query is the two ends of one part (chosen
        uniformly; answer 1), else one end of each part (answer 0); s and t are swapped with
        probability 1/2. The vertex block, the edge order and the filler slots are shuffled.

        Returns:
            [batch, n + M + 3] int64 inputs.
        Raises:
            ParameterError: n < 4 (each part needs two ends) or M < n - 2.
        """
        n, m = p["n"], max_edges(p)
        if n < 4:
            raise ParameterError(f"the paths sampler needs n >= 4 (two paths of at least 2 vertices), got n={n}")
        if m < n - 2:
            raise ParameterError(f"the paths sampler needs max_edges >= n - 2 = {n - 2}, got {m}")
        h = n // 2
        out = np.empty((batch, n + m + 3), np.int64)
        for r in range(batch):
            perm = rng.permutation(n)
            edges = _path(perm[:h]) + _path(perm[h:])
            ends = ((int(perm[0]), int(perm[h - 1])), (int(perm[h]), int(perm[-1])))
            if rng.random() < 0.5:  # positive: both ends of one part
                s, t = ends[int(rng.integers(2))]
            else:  # negative: one end of each part
                s, t = ends[0][int(rng.integers(2))], ends[1][int(rng.integers(2))]
            if rng.random() < 0.5:
                s, t = t, s
            order = [edges[i] for i in rng.permutation(len(edges))]
            out[r] = encode(n, rng.permutation(n).tolist(), order, s, t, slots=m, rng=rng)
        return out

    def sample(self, p, rng, batch):
        return self.sample_graphs(p, rng, batch)

    def edge_cases(self, p) -> List[np.ndarray]:
        """Adversarial inputs, grouped by length: empty and complete graphs, paths written backwards,
        two paths queried across, stars, a full edge block of fillers, s = t."""
        n, m = p["n"], max_edges(p)
        order = list(range(n))
        rev = order[::-1]
        pairs = [(s, t) for s in range(n) for t in range(n)]
        rows: List[List[int]] = []
        rows += [encode(n, order, [], s, t) for s, t in pairs]  # no edges: only s = t is reachable
        rows += [encode(n, rev, [], s, t, slots=m) for s, t in pairs[:: max(1, n // 2)]]  # fillers only
        full = list(edge_list(n))[:m]
        rows += [encode(n, order, full, s, t) for s, t in pairs[:: max(1, n // 3)]]
        rows += [encode(n, rev, full[::-1], 0, n - 1, slots=m), encode(n, order, full, n - 1, 0, slots=m)]
        path = _path(order)
        for edges in (path, path[::-1], [(b, a) for a, b in path[::-1]]):
            for vb in (order, rev):
                rows += [encode(n, vb, edges, 0, n - 1), encode(n, vb, edges, n - 1, 0),
                         encode(n, vb, edges, 0, n - 1, slots=m), encode(n, vb, edges, n // 2, n // 2)]
        # Two paths 0..k-1 and k..n-1 (k = n // 2): across is unreachable, the ends of each are far.
        k = max(1, n // 2)
        two = _path(order[:k]) + _path(order[k:])
        for s, t in ((0, n - 1), (n - 1, 0), (0, k - 1), (k, n - 1), (k - 1, k)):
            rows += [encode(n, order, two, s, t), encode(n, rev, two[::-1], s, t, slots=m)]
        # The path minus one edge at each place: the two ends are no longer connected.
        for cut in range(len(path)):
            rows.append(encode(n, order, path[:cut] + path[cut + 1:], 0, n - 1, slots=m))
        star = [(0, v) for v in range(1, n)]
        rows += [encode(n, order, star, 1, n - 1), encode(n, rev, star, n - 1, 1, slots=m)]
        groups: Dict[int, List[List[int]]] = {}
        for r in rows:
            groups.setdefault(len(r), []).append(r)
        return [np.asarray(g, np.int64) for _, g in sorted(groups.items())]

    def exhaustive(self, p: Dict[str, Any], batch: int = 1 << 15) -> Tuple[int, Iterator[np.ndarray]]:
        """Every graph with at most M edges (vertex block in order, edges sorted) times every pair (s, t).

        Raises:
            ParameterError: more than EXHAUSTIVE_LIMIT inputs.
        """
        n, m = p["n"], max_edges(p)
        c = num_pairs(n)
        graphs = sum(math.comb(c, k) for k in range(m + 1))
        total = graphs * n * n
        if total > EXHAUSTIVE_LIMIT:
            raise ParameterError(f"exhaustive connectivity check: {graphs} graphs x {n * n} query pairs = {total} "
                                 f"inputs is above the limit of {EXHAUSTIVE_LIMIT}; use n <= 6")
        pairs = np.asarray([(s, t) for s in range(n) for t in range(n)], np.int64)

        def gen():
            for k in range(m + 1):
                combos = itertools.combinations(range(c), k)
                chunk = max(1, batch // len(pairs))
                while True:
                    block = list(itertools.islice(combos, chunk))
                    if not block:
                        break
                    head = np.asarray([list(range(n)) + [n + i for i in combo] + [marker_token(n)]
                                       for combo in block], np.int64)
                    rows = np.repeat(head, len(pairs), axis=0)
                    yield np.concatenate([rows, np.tile(pairs, (len(block), 1))], axis=1)

        return total, gen()

    def strategy(self, p):
        n, m = p["n"], max_edges(p)
        all_edges = list(edge_list(n))

        @st.composite
        def inputs(draw):
            chosen = draw(st.lists(st.sampled_from(all_edges), unique=True, max_size=m))
            fillers = draw(st.integers(0, m - len(chosen)))
            order = draw(st.permutations(list(range(n))))
            slots = [edge_token(n, a, b) for a, b in chosen] + [filler_token(n)] * fillers
            slots = draw(st.permutations(slots)) if slots else []
            s = draw(st.integers(0, n - 1))
            t = draw(st.integers(0, n - 1))
            return list(order) + list(slots) + [marker_token(n), s, t]

        return inputs()


class ConnectivitySpanTask(ConnectivityTask):
    """Connectivity on path-heavy graphs that use only ``span`` of the n vertices (training variant, issue 25).

    The ``paths`` sampler's graphs (two paths of floor(span/2) and ceil(span/2) vertices, the
    query two ends of one path or one end of each, half and half) on a random ``span``-subset
    of the n vertices; the other n - span vertices are isolated (they still sit in the vertex
    block). The token layout, the vocabulary and the reference are :class:`ConnectivityTask`'s
    at n, so conditions with the same n and different ``span`` share every token's meaning and
    can be mixed in one model: a small span is an easy instance (short paths), span = n is the
    ``paths`` sampler itself (the same distribution, drawn by the same code path).

    Parameters: ``n``, ``max_edges`` (as :class:`ConnectivityTask`) and ``span`` (4..n; 0 = n).
    """

    name = "connectivity_span"
    title = "graph connectivity on two paths over span of the n vertices (training variant, issue 25)"
    params = tuple(s for s in PARAMS if s.name != "sampler") + (
        ParamSpec("span", int, 0, "vertices on the two paths (4..n; 0 = n); the others are isolated",
                  minimum=0, maximum=64),
    )

    def check(self, p: Dict[str, Any]) -> None:
        check_params({**p, "sampler": "paths"})
        span = self.span(p)
        if not 4 <= span <= p["n"]:
            raise ParameterError(f"span={p['span']} must be 0 (= n) or in 4..n = 4..{p['n']}")
        if max_edges(p) < span - 2:
            raise ParameterError(f"span={span} needs max_edges >= span - 2 = {span - 2}, got {max_edges(p)}")

    @staticmethod
    def span(p: Dict[str, Any]) -> int:
        """Vertices on the two paths: ``p["span"]``, or n when it is 0."""
        return p["span"] or p["n"]

    def sample(self, p, rng, batch):
        """[batch, n + M + 3] int64 inputs: :meth:`ConnectivityTask._sample_paths` at n = span, each
        input's vertices relabelled by a random injection of 0..span-1 into 0..n-1 and the vertex
        block extended by the n - span unused vertices, shuffled (span = n: the ``paths`` sampler)."""
        n, span, m = p["n"], self.span(p), max_edges(p)
        full = {**p, "sampler": "paths"}
        if span == n:
            return self._sample_paths(full, rng, batch)
        small = self._sample_paths({**full, "n": span}, rng, batch)  # layout at span: vertices, M slots, ? s t
        out = np.empty((batch, n + m + 3), np.int64)
        filler_small = filler_token(span)
        for r in range(batch):
            label = rng.permutation(n)  # vertex v of the small graph is label[v]; label[span:] are isolated
            row = small[r]
            edges = []
            for tok in row[span:span + m]:
                if tok != filler_small:
                    a, b = edge_list(span)[int(tok) - span]
                    edges.append((int(label[a]), int(label[b])))
            order = rng.permutation(n).tolist()
            s, t = int(label[row[-2]]), int(label[row[-1]])
            out[r] = encode(n, order, edges, s, t, slots=m, rng=rng)
        return out

    def edge_cases(self, p) -> List[np.ndarray]:
        return ConnectivityTask.edge_cases(self, {**p, "sampler": "paths"})
