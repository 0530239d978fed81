"""SC, sequence classification by memorisation (Chen & Zou, ICML 2024; SPEC §4.2).

This is the project's formalisation of the paper's description (the paper's full text
was not available). A fixed dataset of M distinct sequences s^1..s^M in [V]^n, each
with a label drawn uniformly from C classes, both determined by ``seed``. Input:
``s_1 .. s_n CLS``; target at ``CLS``: the sequence's label. Only the M dataset
sequences are inputs; exact means all M right.

Token layout (integers): content 0..V-1, ``CLS`` = V, label c is token V+1+c
(labels never occur in inputs; they are the read-out vocabulary).
"""

from __future__ import annotations

import functools
from typing import Dict, Tuple

import numpy as np
from hypothesis import strategies as st

from depthcraft.constructions.errors import InputError, ParameterError
from depthcraft.constructions.params import ParamSpec
from depthcraft.rasp_programs.chen_zou_data import sc_dataset
from depthcraft.verify.tasks.chen_zou.common import ClsTask, batches_of

@functools.lru_cache(maxsize=16)
def _row_index(*key) -> Dict[bytes, int]:
    x, _ = sc_dataset(*key)
    return {row.tobytes(): i for i, row in enumerate(x)}


class SCTask(ClsTask):
    """Sequence classification of a fixed dataset (memorisation), read at CLS."""

    name = "sc"
    title = "SC, sequence classification / memorisation (Chen & Zou 2024; project formalisation)"
    params = (
        ParamSpec("sequences", int, 64, "M, number of distinct sequences in the dataset", minimum=1,
                  maximum=1 << 16),
        ParamSpec("n", int, 8, "length of each sequence (tokens before CLS)", minimum=1, maximum=256),
        ParamSpec("vocab", int, 4, "V, content tokens 0..V-1", minimum=1, maximum=256),
        ParamSpec("classes", int, 4, "C, number of labels", minimum=1, maximum=256),
        ParamSpec("seed", int, 0, "seed of the dataset (sequences and labels)", minimum=0),
    )

    def check(self, p):
        if p["sequences"] > p["vocab"] ** p["n"]:
            raise ParameterError(f"sequences={p['sequences']} is more than the {p['vocab'] ** p['n']} "
                                 f"distinct sequences of length n={p['n']} over vocab={p['vocab']}")

    def dataset(self, p) -> Tuple[np.ndarray, np.ndarray]:
        """(X [M, n], labels [M] in 0..C-1); see :func:`sc_dataset`."""
        return sc_dataset(p["sequences"], p["n"], p["vocab"], p["classes"], p["seed"])

    def inputs(self, p) -> np.ndarray:
        """Every input of the task: the M dataset sequences followed by CLS, [M, n+1]."""
        x, _ = self.dataset(p)
        return self.with_cls(p, x)

    def answer(self, p, tokens):
        x = self.content(p, tokens)
        _, labels = self.dataset(p)
        index = _row_index(p["sequences"], p["n"], p["vocab"], p["classes"], p["seed"])
        out = np.empty(len(tokens), np.int64)
        for r, row in enumerate(np.ascontiguousarray(x)):
            i = index.get(row.tobytes())
            if i is None:
                raise InputError(f"sc: input {r} ({' '.join(map(str, row))}) is not a sequence of the dataset")
            out[r] = labels[i]
        return self.label_token(p, out)

    def sample(self, p, rng, batch):
        rows = self.inputs(p)
        return rows[rng.integers(0, len(rows), size=batch)]

    def edge_cases(self, p):
        """The dataset sequences closest to another one (Hamming distance), and a labelled pair at that distance."""
        rows = self.inputs(p)
        x, labels = self.dataset(p)
        if len(x) < 2:
            return [rows]
        sub = x[:2048]
        dist = (sub[:, None, :] != sub[None, :, :]).sum(-1)
        np.fill_diagonal(dist, p["n"] + 1)
        closest = np.flatnonzero(dist.min(1) == dist.min())
        diff_label = np.argwhere((dist == dist.min()) & (labels[:2048, None] != labels[None, :2048]))
        pick = list(closest[:64]) + [int(i) for i in diff_label[:8].ravel()]
        return [rows[np.unique(pick)]]

    def exhaustive(self, p, batch: int = 1 << 15):
        """Every input of SC is a dataset sequence: (M, batches of the M inputs)."""
        rows = self.inputs(p)
        return len(rows), batches_of(rows, batch)

    def strategy(self, p):
        rows = [list(map(int, r)) for r in self.inputs(p)]
        return st.sampled_from(rows)
