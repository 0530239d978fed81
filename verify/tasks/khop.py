"""k-hop induction heads: Sanford, Hsu & Telgarsky (ICML 2024), Definition 4.1 (SPEC §4.1).

For X = (x_1..x_N) with 1-based positions:

* find(X, i) = max({0} ∪ {j : 2 <= j <= i, x_{j-1} = x_i}) (j = i allowed);
* find^1 = find, find^k(i) = find(find^{k-1}(i)), find(0) = 0;
* hop_k(X)_i = x_{find^k(i)} if find^k(i) != 0, else ⊥ (:data:`BOT`); hop_0 = identity.

Every position is scored (⊥ included). Positions here are the model positions
of SPEC §3: BOS = 0, tokens 1..N.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

import numpy as np
from hypothesis import strategies as st

from depthcraft.constructions.errors import ParameterError
from depthcraft.constructions.params import ParamSpec
from depthcraft.rasp_programs.khop import BOT
from depthcraft.verify.tasks.base import Task

#: The paper's worked example (SPEC §4.1) over a..e: hop_1 at the last position is b, hop_2 is c.
WORKED_EXAMPLE = "baebcabebdea"


def find_table(x: np.ndarray) -> np.ndarray:
    """find for every position.

    Args:
        x: [batch, N] int tokens (>= 0).
    Returns:
        [batch, N+1] int64: column i is find(X, i) for model position i (column 0 is 0).
    """
    x = np.asarray(x, np.int64)
    b, n = x.shape
    f = np.zeros((b, n + 1), np.int64)
    if n == 0:
        return f
    last = np.zeros((b, int(x.max()) + 1), np.int64)  # last[b, v] = latest j seen with x_{j-1} = v
    rows = np.arange(b)
    for i in range(1, n + 1):
        if i >= 2:
            last[rows, x[:, i - 2]] = i
        f[:, i] = last[rows, x[:, i - 1]]
    return f


def find_k(x: np.ndarray, k: int) -> np.ndarray:
    """find^k for every position: [batch, N] int tokens -> [batch, N+1] pointers (0 = ⊥)."""
    if k < 0:
        raise ParameterError(f"k must be >= 0, got {k}")
    f = find_table(x)
    p = np.broadcast_to(np.arange(f.shape[1]), f.shape).copy()
    step, e = f, k
    while e:  # exponentiation by squaring of the pointer map
        if e & 1:
            p = np.take_along_axis(step, p, axis=1)
        step = np.take_along_axis(step, step, axis=1)
        e >>= 1
    return p


def hop_k(x: np.ndarray, k: int) -> np.ndarray:
    """hop_k(X)_i for i = 1..N: [batch, N] int tokens -> [batch, N] int (BOT for ⊥)."""
    x = np.asarray(x, np.int64)
    p = find_k(x, k)
    padded = np.concatenate([np.full((x.shape[0], 1), BOT, np.int64), x], axis=1)
    return np.take_along_axis(padded, p, axis=1)[:, 1:]


def sample_no_adjacent_repeat(rng: np.random.Generator, batch: int, n: int, vocab: int) -> np.ndarray:
    """The paper's distribution: x_1 uniform, each next uniform over the other vocab-1 symbols."""
    if vocab < 2 and n > 1:
        raise ParameterError("the no-adjacent-repeat distribution needs vocab >= 2")
    first = rng.integers(0, vocab, size=(batch, 1))
    steps = rng.integers(1, max(vocab, 2), size=(batch, n - 1))
    return (np.cumsum(np.concatenate([first, steps], axis=1), axis=1) % vocab).astype(np.int64)


class KHopTask(Task):
    """hop_k at every position (causal)."""

    name = "khop"
    title = "k-hop induction heads (Sanford, Hsu & Telgarsky 2024, Def. 4.1)"
    params = (
        ParamSpec("k", int, 2, "number of hops", minimum=0, maximum=1024),
        ParamSpec("n", int, 100, "max_seq_len: longest input, tokens", minimum=1, maximum=2048),
        ParamSpec("vocab", int, 4, "alphabet size |Σ|", minimum=1, maximum=256),
        ParamSpec("distribution", str, "paper", "random-input distribution",
                  choices=("paper", "uniform")),
    )
    none_value = BOT
    causal = True
    free_sequences = True

    def check_sampling(self, p: Dict[str, Any]) -> None:
        """The paper's distribution needs two symbols once n > 1; running one input does not."""
        if p["distribution"] == "paper" and p["vocab"] < 2 and p["n"] > 1:
            raise ParameterError("distribution=paper (no two equal neighbours) needs vocab >= 2; "
                                 "use -p distribution=uniform")

    def vocab(self, p):
        return list(range(p["vocab"]))

    def max_seq_len(self, p):
        return p["n"]

    def reference(self, p, tokens) -> Tuple[np.ndarray, np.ndarray]:
        out = hop_k(tokens, p["k"])
        return out, np.ones_like(out, dtype=bool)

    def sample(self, p, rng, batch):
        if p["distribution"] == "paper":
            return sample_no_adjacent_repeat(rng, batch, p["n"], p["vocab"])
        return rng.integers(0, p["vocab"], size=(batch, p["n"]), dtype=np.int64)

    def edge_cases(self, p) -> List[np.ndarray]:
        n, v = p["n"], p["vocab"]
        full: List[List[int]] = []
        full += [[a] * n for a in range(v)]  # all-equal: find(i) = i
        for period in range(2, min(v, 5) + 1):  # periodic: longest pointer chains
            full.append([i % period for i in range(n)])
            full.append([(period - 1 - i) % period for i in range(n)])
        full.append([(i // 2) % v for i in range(n)])  # adjacent repeats aabbcc..
        full.append([(i // 3) % v for i in range(n)])
        full.append([0] * (n - 1) + [v - 1])  # long run, then one other symbol
        full.append([(i * 7 + 3) % v for i in range(n)])
        full.append([min(i, v - 1) for i in range(n)])  # distinct prefix, then a run of the last symbol
        groups = [np.asarray(full, np.int64)]
        distinct = list(range(min(n, v)))  # no repeat at all: every output is ⊥
        short = [distinct, [0], [0, 0], [0, 0, 0]]
        if v >= 2:
            short += [[0, 1], [1, 0, 1], [0, 1, 0, 1]]
        if v >= 5 and n >= len(WORKED_EXAMPLE):
            short.append([ord(c) - ord("a") for c in WORKED_EXAMPLE])
        for s in short:
            if 1 <= len(s) <= n:
                groups.append(np.asarray([s], np.int64))
        return groups

    def strategy(self, p):
        n, v = p["n"], p["vocab"]
        tok = st.integers(0, v - 1)
        uniform = st.lists(tok, min_size=1, max_size=n)
        const = st.tuples(tok, st.integers(1, n)).map(lambda t: [t[0]] * t[1])
        periodic = st.tuples(st.lists(tok, min_size=1, max_size=min(v, 5)), st.integers(1, n)).map(
            lambda t: [t[0][i % len(t[0])] for i in range(t[1])])
        longest = st.lists(tok, min_size=n, max_size=n)
        return st.one_of(uniform, const, periodic, longest)
