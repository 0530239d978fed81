"""Data that both a task and its construction need (Chen & Zou tasks, SPEC §4.2).

The SC dataset and the TM templates are fixed by the task parameters (and a seed);
the tasks (:mod:`verify.tasks.chen_zou`) read their targets from them and the
constructions (:mod:`constructions.chen_zou`) memorise them, so they live here, below
both.
"""

from __future__ import annotations

import functools
from typing import Dict, Tuple

import numpy as np

from depthcraft.constructions.errors import ParameterError
from depthcraft.rasp_programs import templates as tpl

def cls_token(vocab: int) -> int:
    """The CLS token of SC and TM: content tokens are 0..V-1, CLS is V."""
    return vocab


def with_cls(x, vocab: int):
    """[b, n] content tokens -> [b, n+1] int64 inputs ending with the CLS token of SC and TM."""
    x = np.asarray(x, np.int64)
    return np.concatenate([x, np.full((len(x), 1), cls_token(vocab), np.int64)], 1)


def label_token(vocab: int, c):
    """Token of label c in SC and TM (V + 1 + c, after CLS); vectorised over c."""
    return vocab + 1 + np.asarray(c)


#: Rows of the dataset built as a table of all V^n sequences when V^n is at most this.
_DENSE = 1 << 20


@functools.lru_cache(maxsize=16)
def sc_dataset(sequences: int, n: int, vocab: int, classes: int, seed: int) -> Tuple[np.ndarray, np.ndarray]:
    """The SC dataset: M distinct sequences and their labels (deterministic in the arguments).

    Args:
        sequences: M, number of sequences (<= vocab**n).
        n: sequence length.
        vocab: V, content tokens 0..V-1.
        classes: C, labels 0..C-1.
        seed: seeds the sequences and the labels.
    Returns:
        (X [M, n] int64, labels [M] int64 in 0..C-1), read-only, rows in sampling order.
    Raises:
        ParameterError: M > V^n.
    """
    total = vocab ** n
    if sequences > total:
        raise ParameterError(f"sequences={sequences} distinct sequences do not exist in [{vocab}]^{n} "
                             f"(only {total})")
    rng = np.random.default_rng(seed)
    if total <= _DENSE:
        codes = rng.choice(total, size=sequences, replace=False)
        powers = vocab ** np.arange(n - 1, -1, -1, dtype=np.int64)
        x = (codes[:, None] // powers[None, :]) % vocab
    else:
        rows: Dict[bytes, np.ndarray] = {}
        while len(rows) < sequences:
            for r in rng.integers(0, vocab, size=(sequences, n)):
                rows.setdefault(r.tobytes(), r)
                if len(rows) == sequences:
                    break
        x = np.stack(list(rows.values()))
    labels = rng.integers(0, classes, size=sequences).astype(np.int64)
    x = x.astype(np.int64)
    for a in (x, labels):
        a.setflags(write=False)  # cached: callers share these arrays
    return x, labels



@functools.lru_cache(maxsize=32)
def tm_templates(n: int, templates: int, classes: int, vocab: int, held_out: int,
                 seed: int) -> Tuple[np.ndarray, np.ndarray]:
    """The K templates of TM and their labels (deterministic in the arguments).

    Templates are drawn uniformly (without replacement) among the patterns of length n
    with at most V - held_out wildcards, so that the training tokens can instantiate
    each; labels are balanced over the C classes (a random permutation of 0..K-1 mod C).

    Returns:
        (patterns [K, n] canonical, labels [K] in 0..C-1), read-only.
    Raises:
        ParameterError: fewer than K templates of length n have <= V - held_out wildcards.
    """
    max_wildcards = vocab - held_out
    pool = tpl.enumerate_patterns(n, max_wildcards)
    if templates > len(pool):
        raise ParameterError(f"templates={templates}: only {len(pool)} distinct templates of length {n} "
                             f"have at most {max_wildcards} wildcards")
    rng = np.random.default_rng(seed)
    pats = pool[np.sort(rng.choice(len(pool), size=templates, replace=False))]
    labels = rng.permutation(np.arange(templates) % classes).astype(np.int64)
    pats = pats.copy()
    for a in (pats, labels):
        a.setflags(write=False)
    return pats, labels
