"""What the four Chen & Zou tasks share: one scored read-out position, integer token layouts.

Every task reads its answer at the *last* position of the input (``CLS`` for SC and
TM, the query for ICQA, the query block's last token for ICTM); no other position is
scored. Targets are token ids: the label/answer tokens have their own integer range,
disjoint from the content tokens, so a trained model can use one vocabulary for
inputs and outputs (see each task's ``target_values``).
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Tuple

import numpy as np

from depthcraft.constructions.errors import InputError, ParameterError
from depthcraft.rasp_programs.chen_zou_data import cls_token, label_token, with_cls
from depthcraft.verify.tasks.base import EXHAUSTIVE_LIMIT, Task

#: Target value at unscored positions, and what a model output with no value decodes to.
NONE = -1


def letters(values, start: int = 0) -> Dict[int, str]:
    """Names a, b, c... for up to 26 content tokens, else t0, t1, ..."""
    values = list(values)
    if len(values) <= 26:
        return {v: chr(ord("a") + i) for i, v in enumerate(values)}
    return {v: f"t{i + start}" for i, v in enumerate(values)}


class ReadoutTask(Task):
    """A task whose only scored output is at the last position of the input.

    Subclasses implement :meth:`answer` (the definition, vectorised, with validation)
    and :meth:`target_values`.
    """

    none_value = NONE
    causal = True

    def answer(self, p: Dict[str, Any], tokens: np.ndarray) -> np.ndarray:
        """The target at the last position of each input: [batch, n] int -> [batch] int64.

        Raises:
            InputError: an input is not a well-formed instance of the task.
        """
        raise NotImplementedError

    def target_values(self, p: Dict[str, Any]) -> List[int]:
        """Every value a scored target can take (the read-out vocabulary), sorted."""
        raise NotImplementedError

    def answer_accepts(self, p: Dict[str, Any], row: np.ndarray) -> bool:
        """Whether :meth:`answer` accepts one input [n] (it raises no :class:`InputError`): the
        domain test of tasks whose domain is exactly their well-formed instances (ICQA, ICTM)."""
        try:
            self.answer(p, np.asarray(row, np.int64)[None, :])
        except InputError:
            return False
        return True

    def reference(self, p, tokens) -> Tuple[np.ndarray, np.ndarray]:
        tokens = np.asarray(tokens)
        if tokens.ndim != 2 or tokens.shape[1] == 0:
            raise InputError(f"expected a [batch, n] array with n >= 1, got shape {tokens.shape}")
        if not np.issubdtype(tokens.dtype, np.integer):
            raise InputError(f"tokens must be integers, got dtype {tokens.dtype}")
        targets = np.full(tokens.shape, NONE, np.int64)
        scored = np.zeros(tokens.shape, bool)
        if len(tokens):
            targets[:, -1] = self.answer(p, tokens.astype(np.int64))
            scored[:, -1] = True
        return targets, scored


class ClsTask(ReadoutTask):
    """A task whose input is n content tokens then ``CLS``, with labels read at ``CLS`` (SC, TM).

    Token layout (:mod:`rasp_programs.chen_zou_data`): content 0..V-1, ``CLS`` = V,
    label c = V + 1 + c. Parameters ``vocab`` (V), ``n`` and ``classes`` (C).
    """

    def cls(self, p) -> int:
        """The CLS token (= V)."""
        return cls_token(p["vocab"])

    def label_token(self, p, c):
        """Token of label c (V + 1 + c); vectorised."""
        return label_token(p["vocab"], c)

    def with_cls(self, p, x: np.ndarray) -> np.ndarray:
        """[b, n] content -> [b, n+1] inputs ending with CLS."""
        return with_cls(x, p["vocab"])

    def vocab(self, p):
        return list(range(p["vocab"] + 1))

    def max_seq_len(self, p):
        return p["n"] + 1

    def target_values(self, p) -> List[int]:
        return list(range(p["vocab"] + 1, p["vocab"] + 1 + p["classes"]))

    def token_names(self, p):
        names = letters(range(p["vocab"]))
        names[self.cls(p)] = "CLS"
        names.update({int(self.label_token(p, c)): f"L{c}" for c in range(p["classes"])})
        return names

    def content(self, p, tokens: np.ndarray) -> np.ndarray:
        """Check the layout of [b, n+1] inputs (content tokens, then CLS) and return the content [b, n].

        Raises:
            InputError: wrong length, a non-content token before CLS, or no CLS at the end.
        """
        n = p["n"]
        if tokens.shape[1] != n + 1:
            raise InputError(f"{self.name}: an input is n+1 = {n + 1} tokens (n content tokens then CLS), "
                             f"got {tokens.shape[1]}")
        check_range(self.name, tokens[:, :n], 0, p["vocab"], "content")
        bad = tokens[:, n] != self.cls(p)
        if bad.any():
            r = int(np.flatnonzero(bad)[0])
            raise InputError(f"{self.name}: input {r} ends with token {int(tokens[r, n])}, expected CLS = {self.cls(p)}")
        return tokens[:, :n]


def check_range(name: str, x: np.ndarray, lo: int, hi: int, what: str) -> None:
    """Raise InputError unless every entry of x is in [lo, hi) (names the first bad one)."""
    bad = (x < lo) | (x >= hi)
    if bad.any():
        r, c = np.argwhere(bad)[0] if x.ndim == 2 else (np.argwhere(bad)[0][0], None)
        where = f"input {r}" + (f", {what} {c + 1}" if c is not None else "")
        raise InputError(f"{name}: {where} holds token {int(x[bad][0])}, expected a {what} token in {lo}..{hi - 1}")


def checked_count(total: int, what: str) -> int:
    """Raise ParameterError when an exhaustive enumeration would exceed EXHAUSTIVE_LIMIT."""
    if total > EXHAUSTIVE_LIMIT:
        raise ParameterError(f"exhaustive check of {what} = {total} inputs is above the limit of "
                             f"{EXHAUSTIVE_LIMIT}; use smaller parameters")
    return total


def batches_of(rows: np.ndarray, batch: int) -> Iterator[np.ndarray]:
    for start in range(0, len(rows), batch):
        yield rows[start:start + batch]
