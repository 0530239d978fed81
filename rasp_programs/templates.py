"""Template machinery shared by the TM and ICTM tasks and programs (Chen & Zou, ICML 2024; SPEC §4.2).

A *template* is an equality pattern over wildcards, e.g. αβα: two templates are the
same when their equality patterns agree (αβα and βαβ are one template). The project
represents a pattern by its canonical form, the *restricted growth string* (RGS):
wildcards are numbered 0, 1, 2, ... in order of first appearance, so αβα, βαβ and
the token sequence ``7 3 7`` all have the canonical pattern ``(0, 1, 0)``.

An *instance* of a template is an injective substitution of its wildcards by tokens:
``tokens[rgs]`` with pairwise distinct ``tokens``. Every function here is vectorised
over a leading batch axis.
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import Optional, Sequence

import numpy as np

from depthcraft.constructions.errors import InputError, ParameterError

__all__ = ["GREEK", "MAX_TEMPLATE_LEN", "canonical_pattern", "first_occurrence", "pattern_codes", "num_wildcards",
           "enumerate_patterns", "count_patterns", "substitute", "random_injective", "injective_maps",
           "distinct_rows", "pattern_str"]

#: Wildcard names used to display a pattern (αβγ...); patterns with more wildcards use #k.
GREEK = "αβγδεζηθικλμνξοπρστυφχψω"
#: Largest template length for which every pattern is enumerated (Bell(10) = 115975).
MAX_TEMPLATE_LEN = 10


def canonical_pattern(x: np.ndarray) -> np.ndarray:
    """Canonical pattern (restricted growth string) of each row.

    Args:
        x: [batch, n] int tokens (any values).
    Returns:
        [batch, n] int64: position i holds the number of distinct tokens that first
        appear before the first occurrence of x_i (so the first token is 0, a new token
        gets the next number, a repeated token repeats its number).
    """
    x = np.asarray(x)
    if x.ndim != 2:
        raise InputError(f"expected a [batch, n] array of tokens, got shape {x.shape}")
    b, n = x.shape
    if n == 0:
        return np.zeros((b, 0), np.int64)
    eq = x[:, :, None] == x[:, None, :]  # [b, i, j]
    first = eq.argmax(2)  # first j with x_j == x_i
    is_new = first == np.arange(n)[None, :]
    rank = np.cumsum(is_new, axis=1) - 1
    return np.take_along_axis(rank, first, axis=1).astype(np.int64)


def first_occurrence(x: np.ndarray) -> np.ndarray:
    """[batch, n] tokens -> [batch, n] int64: 0-based index of the first j with x_j == x_i."""
    x = np.asarray(x)
    return (x[:, :, None] == x[:, None, :]).argmax(2).astype(np.int64)


def pattern_codes(rgs: np.ndarray) -> np.ndarray:
    """One integer per canonical pattern (equal codes <=> equal patterns).

    Args:
        rgs: [batch, n] canonical patterns (values < n), n <= 16.
    Returns:
        [batch] int64, the RGS read as base-n digits (plus n^n, so patterns of different
        lengths never share a code).
    """
    rgs = np.asarray(rgs, np.int64)
    n = rgs.shape[1]
    base = max(n, 2)
    powers = base ** np.arange(n - 1, -1, -1, dtype=np.int64)
    return rgs @ powers + base ** n


def num_wildcards(rgs: np.ndarray) -> np.ndarray:
    """[batch, n] canonical patterns -> [batch] number of distinct wildcards (max + 1)."""
    rgs = np.asarray(rgs)
    return rgs.max(1) + 1 if rgs.shape[1] else np.zeros(len(rgs), np.int64)


@functools.lru_cache(maxsize=64)
def _enumerate(n: int, max_wildcards: int) -> np.ndarray:
    out = []

    def rec(prefix, used):
        if len(prefix) == n:
            out.append(prefix)
            return
        for v in range(min(used + 1, max_wildcards)):
            rec(prefix + (v,), max(used, v + 1))

    rec((), 0)
    arr = np.asarray(out, np.int64).reshape(len(out), n)
    arr.setflags(write=False)
    return arr


def enumerate_patterns(n: int, max_wildcards: Optional[int] = None) -> np.ndarray:
    """Every template of length n with at most ``max_wildcards`` wildcards, in lexicographic order.

    Args:
        n: template length, 1..MAX_TEMPLATE_LEN.
        max_wildcards: at most this many distinct wildcards (default n: every pattern).
    Returns:
        [P, n] int64 canonical patterns (read-only). P is the sum of Stirling numbers
        S(n, w) for w <= max_wildcards (the Bell number B_n when unrestricted).
    Raises:
        ParameterError: n out of range or max_wildcards < 1.
    """
    if not 1 <= n <= MAX_TEMPLATE_LEN:
        raise ParameterError(f"template length n={n} must be between 1 and {MAX_TEMPLATE_LEN}")
    w = n if max_wildcards is None else min(int(max_wildcards), n)
    if w < 1:
        raise ParameterError(f"max_wildcards={max_wildcards} must be >= 1")
    return _enumerate(int(n), w)


def count_patterns(n: int, max_wildcards: Optional[int] = None) -> int:
    """Number of templates of length n with at most ``max_wildcards`` wildcards (Stirling sums)."""
    w = n if max_wildcards is None else min(int(max_wildcards), n)
    # S(n, k) by the recurrence S(i, k) = k S(i-1, k) + S(i-1, k-1).
    s = [1] + [0] * w
    for _ in range(n):
        s = [0] + [k * s[k] + s[k - 1] for k in range(1, w + 1)]
    return int(sum(s))


def substitute(rgs: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """Instances of templates: position i gets ``tokens[rgs[i]]``.

    Args:
        rgs: [batch, n] canonical patterns.
        tokens: [batch, k] substitution (k >= number of wildcards; distinct for an injective one).
    Returns:
        [batch, n] int64 tokens.
    """
    return np.take_along_axis(np.asarray(tokens, np.int64), np.asarray(rgs, np.int64), axis=1)


def random_injective(rng: np.random.Generator, batch: int, k: int, pool: Sequence[int]) -> np.ndarray:
    """Uniformly random injective maps: [batch, k] pairwise distinct tokens drawn from ``pool``.

    Raises:
        ParameterError: k > len(pool).
    """
    pool = np.asarray(pool, np.int64)
    if k > len(pool):
        raise ParameterError(f"cannot draw {k} distinct tokens from a pool of {len(pool)}")
    if k == 0:
        return np.zeros((batch, 0), np.int64)
    if k * 4 >= len(pool):  # dense: a random permutation per row
        idx = rng.random((batch, len(pool))).argsort(1)[:, :k]
    else:  # sparse: draw with replacement, redraw rows with a repeat
        idx = rng.integers(0, len(pool), size=(batch, k))
        while True:
            s = np.sort(idx, 1)
            bad = (s[:, 1:] == s[:, :-1]).any(1)
            if not bad.any():
                break
            idx[bad] = rng.integers(0, len(pool), size=(int(bad.sum()), k))
    return pool[idx]


def injective_maps(k: int, pool: Sequence[int]) -> np.ndarray:
    """Every injective map of k wildcards into ``pool``: [P(len(pool), k), k] int64 (lexicographic)."""
    pool = list(pool)
    count = math.perm(len(pool), k)
    return np.fromiter(itertools.chain.from_iterable(itertools.permutations(pool, k)), np.int64,
                       count=count * k).reshape(count, k)


def distinct_rows(x: np.ndarray) -> np.ndarray:
    """[batch, m, n] groups of patterns -> [batch] bool: the m patterns of each row are pairwise distinct."""
    codes = pattern_codes(canonical_pattern(x.reshape(-1, x.shape[-1]))).reshape(x.shape[0], x.shape[1])
    s = np.sort(codes, 1)
    return ~(s[:, 1:] == s[:, :-1]).any(1)


def pattern_str(rgs: Sequence[int]) -> str:
    """Display a canonical pattern with Greek wildcards, e.g. (0, 1, 0) -> 'αβα'."""
    return "".join(GREEK[v] if v < len(GREEK) else f"#{v}" for v in rgs)


