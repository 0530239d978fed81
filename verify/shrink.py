"""Shrink a failing input found by the random, edge-case or exhaustive check.

Hypothesis shrinks the failures it finds itself; the other checks find failures
in fixed batches. This module shrinks those greedily, the way delta debugging
does: each round builds every candidate one step "smaller" than the current
input (a chunk of tokens deleted, chunk sizes n/2, n/4, ..., 1; or one token
replaced by the smallest vocabulary value or by its left neighbour), runs all
candidates through the model in one batch per length, and keeps the smallest
candidate that still fails. "Smaller" is the order (length, vocabulary ranks),
so the search terminates. Only tasks whose inputs are free token sequences
(``Task.free_sequences``) are shrunk: elsewhere a deletion could leave the
task's input format.
"""

from __future__ import annotations

from typing import Any, Dict, List, Sequence, Tuple

import numpy as np

from depthcraft.constructions.model import CompiledModel
from depthcraft.verify.checks import Counterexample, predict
from depthcraft.verify.tasks.base import Task

#: Most rounds of shrinking (each round removes a chunk or lowers a token).
MAX_ROUNDS = 100


def _failing(model: CompiledModel, task: Task, p: Dict[str, Any], cands: List[List[Any]]):
    """Per candidate: (fails, expected, got, wrong positions) — grouped by length, one batch each."""
    from depthcraft.verify.tasks.program import token_array

    out: List[Any] = [None] * len(cands)
    by_len: Dict[int, List[int]] = {}
    for i, c in enumerate(cands):
        by_len.setdefault(len(c), []).append(i)
    for _, idx in by_len.items():
        x = token_array([cands[i] for i in idx])
        expected, scored = task.reference(p, x)
        got, _, _ = predict(model, x, task.none_value)
        wrong = task.mismatch(p, got, expected) & scored
        for row, i in enumerate(idx):
            out[i] = (bool(wrong[row].any()), expected[row].tolist(), got[row].tolist(),
                      (np.flatnonzero(wrong[row]) + 1).tolist())
    return out


def _candidates(seq: List[Any], vocab: List[Any]) -> List[List[Any]]:
    n = len(seq)
    cands: List[List[Any]] = []
    size = n // 2
    sizes = []
    while size >= 1:
        sizes.append(size)
        size //= 2
    for size in sizes or [1]:
        for start in range(0, n, size):
            c = seq[:start] + seq[start + size:]
            if c:
                cands.append(c)
    for t in range(n):
        replacements = [vocab[0]] + ([seq[t - 1]] if t and seq[t - 1] != vocab[0] else [])
        for v in replacements:
            if v != seq[t]:
                cands.append(seq[:t] + [v] + seq[t + 1:])
    return cands


def shrink(model: CompiledModel, task: Task, p: Dict[str, Any], cx: Counterexample,
           max_rounds: int = MAX_ROUNDS) -> Counterexample:
    """A smaller failing input than ``cx`` (or ``cx`` itself if none is found).

    Args:
        model, task, p: the model, its task and resolved parameters.
        cx: a failing input with its expected and decoded outputs.
        max_rounds: most shrinking steps.
    Returns:
        A Counterexample with ``shrunk=True``: the smallest failing input found,
        its expected and decoded outputs and wrong positions (1-based).
    """
    if not task.free_sequences:
        return cx
    vocab = list(task.vocab(p))
    rank = {repr(v): i for i, v in enumerate(vocab)}

    def key(s: Sequence[Any]) -> Tuple[int, Tuple[int, ...]]:
        return len(s), tuple(rank.get(repr(v), len(vocab)) for v in s)

    best = list(cx.tokens)
    best_info = (True, cx.expected, cx.got, cx.positions)
    for _ in range(max_rounds):
        cands = [c for c in _candidates(best, vocab) if key(c) < key(best)]
        if not cands:
            break
        results = _failing(model, task, p, cands)
        fails = [(key(c), c, r) for c, r in zip(cands, results) if r[0]]
        if not fails:
            break
        _, best, best_info = min(fails, key=lambda f: f[0])
    _, expected, got, positions = best_info
    return Counterexample(cx.check, list(best), list(expected), list(got), list(positions), shrunk=True)
