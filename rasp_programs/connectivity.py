"""RASP program for graph connectivity (Sanford, Hsu & Telgarsky 2024; Merrill & Sabharwal 2025; SPEC §4.4).

Token layout (the project's choice; :mod:`depthcraft.verify.tasks.connectivity` checks it
and ``docs/tasks/connectivity.md`` documents it). For a graph on the vertices
0..n-1 with at most M edge slots:

* vertex tokens ``0 .. n-1`` (token id = the vertex),
* one edge token per unordered pair ``a-b`` (a < b): id n + index(a, b), the pairs in
  lexicographic order (C(n, 2) of them),
* the query marker ``?`` = n + C(n, 2) and the filler ``_`` = n + C(n, 2) + 1.

An input is the *vertex block* (the n vertex tokens, each once, in any order: every
vertex has a position), then the *edge block* (m' <= M slots, each an edge token or
``_``; no edge twice; any order), then ``? s t``. Model positions (SPEC §3): BOS = 0,
the vertex block at 1..n, the edge slots at n+1..n+m', ``?`` at n+m'+1, s and t last.
The answer, read at the last position (t), is 1 when t is reachable from s (s = t
included), else 0.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any, Dict, FrozenSet, List, Mapping, Tuple

from tracr.rasp import rasp

from depthcraft.constructions.errors import ParameterError
from depthcraft.constructions.params import ParamSpec
from depthcraft.constructions.primitives import Read, meet, prev_token, union

#: The samplers of the task (``mix`` draws each input from one of the five families before ``paths``;
#: ``paths`` is the path-heavy training distribution, see :mod:`depthcraft.verify.tasks.connectivity`).
SAMPLERS = ("mix", "path", "cycle", "two_components", "tree", "er", "paths")

#: Parameters shared by the connectivity task and its construction.
PARAMS = (
    ParamSpec("n", int, 5, "number of vertices n", minimum=2, maximum=64),
    ParamSpec("max_edges", int, 0, "edge slots M, the longest edge block (0 = min(C(n,2), 4n))",
              minimum=0, maximum=2016),
    ParamSpec("sampler", str, "mix", "graph family of the random inputs", choices=SAMPLERS),
)

#: Output at unscored positions (only the last position is scored).
NONE = -1


def num_pairs(n: int) -> int:
    """C(n, 2): the number of possible edges (edge tokens)."""
    return n * (n - 1) // 2


def max_edges(p: Mapping[str, Any]) -> int:
    """M: the ``max_edges`` parameter, or min(C(n, 2), 4n) when it is 0."""
    return p["max_edges"] or min(num_pairs(p["n"]), 4 * p["n"])


def check_params(p: Mapping[str, Any]) -> None:
    """Cross-parameter checks; raises ParameterError."""
    if p["max_edges"] > num_pairs(p["n"]):
        raise ParameterError(f"max_edges={p['max_edges']} is more than the C(n,2) = {num_pairs(p['n'])} "
                             f"possible edges of a simple graph on n={p['n']} vertices")


def edge_index(n: int, a: int, b: int) -> int:
    """Index of the unordered pair {a, b} (a != b) among the C(n, 2) pairs in lexicographic order."""
    a, b = min(a, b), max(a, b)
    return a * n - a * (a + 1) // 2 + (b - a - 1)


def edge_token(n: int, a: int, b: int) -> int:
    """The token id of the edge a-b."""
    return n + edge_index(n, a, b)


def marker_token(n: int) -> int:
    """The token id of ``?``."""
    return n + num_pairs(n)


def filler_token(n: int) -> int:
    """The token id of ``_`` (an empty edge slot)."""
    return n + num_pairs(n) + 1


def vocab_size(n: int) -> int:
    """Number of token ids: n vertices, C(n, 2) edges, ``?`` and ``_``."""
    return n + num_pairs(n) + 2


def seq_len(p: Mapping[str, Any]) -> int:
    """Longest input: n + M + 3."""
    return p["n"] + max_edges(p) + 3


@lru_cache(maxsize=None)
def edge_list(n: int) -> Tuple[Tuple[int, int], ...]:
    """The C(n, 2) pairs (a, b), a < b, in token order."""
    return tuple((a, b) for a in range(n) for b in range(a + 1, n))


def endpoints(n: int):
    """Token -> the frozenset of vertices it names: {v} for a vertex, {a, b} for an edge, {} else."""
    pairs = edge_list(n)

    def ends(token: Any) -> FrozenSet[int]:
        if isinstance(token, int) and 0 <= token < n:
            return frozenset((token,))
        if isinstance(token, int) and n <= token < n + len(pairs):
            return frozenset(pairs[token - n])
        return frozenset()

    ends.__name__ = "endpoints"
    return ends


def incident(n: int):
    """predicate(key token, query token): the query is a vertex v and the key is v's token or an edge at v."""
    ends = endpoints(n)

    def pred(key: Any, query: Any) -> bool:
        return isinstance(query, int) and 0 <= query < n and query in ends(key)

    pred.__name__ = "incident"
    return pred


def is_vertex(key: Any, element: Any) -> bool:
    """predicate(key token, set element): the key is the vertex token of that element."""
    return key == element


def squarings(n: int) -> int:
    """J = max(1, ceil(log2(n - 1))): reachable sets R_1..R_J before the meet."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:
        raise ParameterError(f"n (the number of vertices) must be an integer >= 2, got {n!r}")
    return max(1, math.ceil(math.log2(n - 1)))


def log_depth(n: int) -> int:
    """ceil(log2(n - 1)) (0 at n = 2): the Θ(log n) term of the depth, without its constant."""
    squarings(n)
    return math.ceil(math.log2(n - 1)) if n > 2 else 0


def connectivity_layers(n: int) -> int:
    """Attention layers of :func:`graph_connectivity`: J + 1 = max(2, ceil(log2(n - 1)) + 1)."""
    return squarings(n) + 1


def graph_connectivity(n: int) -> rasp.SOp:
    """Reachability by repeated squaring, one head per layer: L = max(2, ceil(log2(n-1)) + 1).

    Construction (Sanford, Hsu & Telgarsky 2024; Merrill & Sabharwal 2025: log-depth
    connectivity by squaring the reachability relation). Write dist(u, v) for the
    length of a shortest path (inf when none) and B_r(v) = {u : dist(u, v) <= r}, the
    ball of radius r; t is reachable from s iff dist(s, t) <= n - 1. Every position
    holding the vertex token v (in the vertex block, or the s / t of the query)
    computes the same sets, so "R_l(v)" below is well defined.

    * Layer 1, :func:`union` with query = the token v and key = every token,
      ``predicate`` = :func:`incident`: position v attends to every position whose
      token names v (its own vertex token(s) and every edge token at v) and reads the
      vertices each names (:func:`endpoints`). Union: R_1(v) = {v} ∪ N(v) = B_1(v).
      Positions holding no vertex (edges, ``?``, ``_``) match nothing: R = ∅.
    * Layer l = 2..J, :func:`union` with query = R_{l-1}(v) (set-valued) and key = the
      token, ``predicate`` = :func:`is_vertex`: v attends to every position whose token
      is a vertex u ∈ R_{l-1}(v) and reads R_{l-1}(u). Union:
      R_l(v) = ∪_{u ∈ B_r(v)} B_r(u) = B_2r(v) for r = 2^(l-2) (a path of length
      <= 2r splits at its middle vertex into two of length <= r; conversely the
      triangle inequality). So R_l = B_(2^(l-1)).
    * Layer J + 1, :func:`prev_token` reading R_J: the last position (t) receives
      R_J(s) from position n-1 (s), and :func:`meet` (an MLP) outputs
      [R_J(s) ∩ R_J(t) ≠ ∅] = [dist(s, t) <= 2 * 2^(J-1) = 2^J] (u in both balls
      gives a path s..u..t; conversely the middle vertex of a shortest path).

    Since 2^J >= n - 1 >= any finite distance, the output is 1 exactly when t is
    reachable from s. L = J + 1 = max(2, ceil(log2(n-1)) + 1): c = 1 layer over
    ceil(log2(n-1)) (c = 2 at n = 2), one head per layer.

    Margins. Each union head is softmax with gap g = 24 nats: a matching key scores
    2g, BOS g, any other key 0; with at most N = n + M + 3 keys every match gets weight
    >= 1/(N+1) and every other key <= e^-g, so an element of the union has weight
    >= 1/(N+1) in the head's scratch and any other element <= N e^-g <= 1/(4(N+1))
    (g >= ln(4N(N+1)), checked when compiling: ln(4N(N+1)) < 17 for N <= 2100). The
    union's MLP clips 2(N+1)x - 1/2 to [0, 1], which gives exactly 1 for x >= 3/(4(N+1))
    and exactly 0 for x <= 1/(4(N+1)): R_l is an exact 0/1 vector, so the argument above
    holds layer by layer. The prev-token copy has weight >= 1 - 2e^-g on s; the meet MLP
    then scores value 1 with 2 Σ_e ReLU(a_e + b_e - 1) >= 2(1 - 2e^-g) when the balls
    meet (against value 0's constant 1) and 0 when they do not: output gap >= 0.5
    against the decoder's 0.5 threshold. Every union head ties its matches exactly
    (scores 2g), so its weight on the intended keys is 1 - O(N e^-g).

    Width: tokens are one-hot (n + C(n,2) + 2 ids: O(n^2) from the edge vocabulary) and
    positions are one-hot (n + M + 3); the construction's own subspaces are n per set
    (R_1..R_J, their J scratch copies and the copy of R_J(s)) plus 2 for the answer:
    (2J + 1) n + 2 = O(n log n) directions. MLPs: 2n hidden units per union head and
    n + 1 for the meet.

    Args:
        n: number of vertices, >= 2.
    Returns:
        Categorical SOp with values {0, 1}; read at the last position.
    Raises:
        ParameterError: n < 2.
    """
    j = squarings(n)
    r = union(rasp.tokens, rasp.tokens, [Read(rasp.tokens, fn=endpoints(n), name="R1")],
              predicate=incident(n), name="edges")[0]
    for layer in range(2, j + 1):
        r = union(r, rasp.tokens, [Read(r, name=f"R{layer}")], predicate=is_vertex, name=f"square{layer}")[0]
    r_s = prev_token(Read(r, name=f"R{j}_of_s"), name="copy_s")
    return meet(r, r_s, name="reachable")


def reachable(n: int, edges: List[Tuple[int, int]]) -> List[List[bool]]:
    """[s][t] reachability of a graph by breadth-first search (a plain reference for docs and tests)."""
    adj: Dict[int, List[int]] = {v: [] for v in range(n)}
    for a, b in edges:
        adj[a].append(b)
        adj[b].append(a)
    out = []
    for s in range(n):
        seen = {s}
        frontier = [s]
        while frontier:
            nxt = []
            for u in frontier:
                for w in adj[u]:
                    if w not in seen:
                        seen.add(w)
                        nxt.append(w)
            frontier = nxt
        out.append([t in seen for t in range(n)])
    return out
