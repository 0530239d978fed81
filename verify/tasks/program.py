"""A task made from a user's reference function: verify any RASP program, not only registered ones.

:class:`ProgramTask` adapts a plain Python reference (``list of tokens -> list of
outputs``) to the :class:`~verify.tasks.base.Task` interface, so the one verifier
(:func:`verify.verifier.verify_model`) checks a user's program exactly as it
checks the registered constructions: random inputs, edge cases
(:func:`verify.strategies.edge_sequences`), hypothesis examples
(:func:`verify.strategies.token_sequences` unless the user gives a strategy) and,
on request, every input of every length 1..max_seq_len.

Reference conventions:

* one output per input token; :data:`ANY` at a position means "not scored";
* ``None`` means "no value" (RASP's None; a compiled model's zero vector);
* a reference that raises on an input makes that input a failure whose expected
  value is the error (:class:`RaisedError`); this is how a RASP program that is
  undefined on some input (e.g. a ``Comparison`` on None, SPEC §8) is reported.

Task instances are not registered in :data:`verify.tasks.TASKS`: they are built
per call by :mod:`verify.api`.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from depthcraft.constructions.errors import ParameterError
from depthcraft.verify.strategies import vocab_list, edge_sequences, token_sequences
from depthcraft.verify.tasks.base import EXHAUSTIVE_LIMIT, Task, enumerate_sequences


class _Any:
    """Sentinel: the reference does not score this position."""

    def __repr__(self) -> str:
        return "ANY"


#: Return this from a reference at positions that must not be scored.
ANY = _Any()


class RaisedError:
    """Expected value of an input on which the reference raised; equal to nothing.

    Attributes:
        text: ``"<ExceptionType>: <message>"``.
    """

    def __init__(self, exc: BaseException):
        self.text = f"{type(exc).__name__}: {exc}"

    def __eq__(self, other: Any) -> bool:
        return False

    def __ne__(self, other: Any) -> bool:
        return True

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return f"error({self.text})"

    def to_json(self) -> str:
        """``"error: <ExceptionType>: <message>"``, how reports show it (see :func:`constructions.files.to_json`)."""
        return f"error: {self.text}"


def _object_array(rows: Sequence[Sequence[Any]], n: int) -> np.ndarray:
    out = np.empty((len(rows), n), dtype=object)
    for b, row in enumerate(rows):
        for t, v in enumerate(row):
            out[b, t] = v
    return out


def token_array(seqs: Sequence[Sequence[Any]]) -> np.ndarray:
    """Same-length token lists -> [batch, n] array (int64 for integer tokens, else object)."""
    n = len(seqs[0])
    if all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for s in seqs for v in s):
        return np.asarray(seqs, dtype=np.int64).reshape(len(seqs), n)
    return _object_array(seqs, n)


class ProgramTask(Task):
    """A task defined by a reference function over a vocabulary and a maximum length.

    Args:
        vocab: input token values.
        max_seq_len: N, longest input in tokens.
        reference: ``reference(tokens: list) -> list`` with one output per token
            (:data:`ANY` = not scored, None = no value).
        strategy: hypothesis strategy of one input (a list of tokens); default
            :func:`verify.strategies.token_sequences`.
        sampler: ``sampler(rng, batch) -> [batch, n]`` random inputs; default
            uniform over ``vocab`` at length N.
        edges: edge-case inputs (lists); default :func:`verify.strategies.edge_sequences`.
        none_value: what a "no value" output decodes to (None).
        numerical: outputs are numbers compared with tolerance ``atol``.
        atol: absolute tolerance for numerical outputs.
        causal: the model masks future keys (informational).
        name: task name in the report.
    Raises:
        ParameterError: empty vocab, max_seq_len not an integer >= 1, reference not callable.
    """

    params = ()
    free_sequences = True

    def __init__(self, *, vocab: Sequence[Any], max_seq_len: int, reference: Callable[[List[Any]], Sequence[Any]],
                 strategy=None, sampler: Optional[Callable[[np.random.Generator, int], np.ndarray]] = None,
                 edges: Optional[Sequence[Sequence[Any]]] = None, none_value: Any = None, numerical: bool = False,
                 atol: float = 1e-3, causal: bool = False, name: str = "program", free_sequences: bool = True):
        self._vocab = vocab_list(vocab)
        if isinstance(max_seq_len, bool) or not isinstance(max_seq_len, (int, np.integer)) or max_seq_len < 1:
            raise ParameterError(f"max_seq_len must be an integer >= 1, got {max_seq_len!r}")
        if not callable(reference):
            raise ParameterError(f"reference must be a function (list of tokens -> list of outputs), got {reference!r}")
        self._n = int(max_seq_len)
        self._reference = reference
        self._strategy = strategy
        self._sampler = sampler
        self._edges = edges
        self.none_value = none_value
        self.numerical = numerical
        self.atol = float(atol)
        self.causal = causal
        self.name = name
        self.title = f"{name} (user reference)"
        self.free_sequences = free_sequences

    def resolve(self, given: Dict[str, Any]) -> Dict[str, Any]:
        return dict(given)

    def vocab(self, p: Dict[str, Any]) -> List[Any]:
        return list(self._vocab)

    def max_seq_len(self, p: Dict[str, Any]) -> int:
        return self._n

    # ------------------------------------------------------------ reference
    def reference(self, p: Dict[str, Any], tokens: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """Expected outputs: (targets [batch, n] object, scored [batch, n] bool).

        Raises:
            ParameterError: the reference returned a number of outputs other than n.
        """
        tokens = np.asarray(tokens)
        b, n = tokens.shape
        rows = []
        for row in tokens.tolist():
            try:
                out = list(self._reference(list(row)))
            except Exception as e:  # the program/reference is undefined here: a failing input
                out = [RaisedError(e)] * n
            if len(out) != n:
                raise ParameterError(f"the reference returned {len(out)} outputs for an input of {n} tokens "
                                     f"({row!r}); it must return one output per token")
            rows.append(out)
        targets = _object_array(rows, n)
        scored = np.frompyfunc(lambda v: v is not ANY, 1, 1)(targets).astype(bool) if b else np.zeros((0, n), bool)
        return targets, scored

    def mismatch(self, p: Dict[str, Any], got: np.ndarray, expected: np.ndarray) -> np.ndarray:
        """Element-wise comparison; numerical outputs compare within ``atol``; None equals only None."""
        atol = self.atol

        def differ(g, e):
            if isinstance(e, (RaisedError, _Any)):
                return not isinstance(e, _Any)
            if g is None or e is None:
                return not (g is None and e is None)
            if self.numerical:
                try:
                    return not abs(float(g) - float(e)) <= atol
                except (TypeError, ValueError):
                    return True
            return bool(g != e)

        got, expected = np.asarray(got, dtype=object), np.asarray(expected, dtype=object)
        if got.size == 0:
            return np.zeros(got.shape, bool)
        return np.frompyfunc(differ, 2, 1)(got, expected).astype(bool)

    # ------------------------------------------------------------- samplers
    def sample(self, p: Dict[str, Any], rng: np.random.Generator, batch: int) -> np.ndarray:
        if self._sampler is not None:
            return self._sampler(rng, batch)
        picks = rng.integers(0, len(self._vocab), size=(batch, self._n))
        values = np.asarray(self._vocab, dtype=object)[picks]
        return token_array(values.tolist()) if batch else np.zeros((0, self._n), np.int64)

    def edge_cases(self, p: Dict[str, Any]) -> List[np.ndarray]:
        seqs = self._edges if self._edges is not None else edge_sequences(self._vocab, self._n)
        by_len: Dict[int, List[Sequence[Any]]] = {}
        for s in seqs:
            s = list(s)
            if s:
                by_len.setdefault(len(s), []).append(s)
        return [token_array(group) for _, group in sorted(by_len.items())]

    def exhaustive(self, p: Dict[str, Any], batch: int = 1 << 15) -> Tuple[int, Iterator[np.ndarray]]:
        """Every input of every length 1..n: (count, iterator of [b, length] batches).

        Raises:
            ParameterError: more than EXHAUSTIVE_LIMIT inputs in total.
        """
        v = len(self._vocab)
        total = sum(v ** length for length in range(1, self._n + 1))
        if total > EXHAUSTIVE_LIMIT:
            raise ParameterError(f"exhaustive check of all {total} inputs of length 1..{self._n} over {v} tokens "
                                 f"is above the limit of {EXHAUSTIVE_LIMIT}; use a smaller max_seq_len or vocab")
        return total, self._enumerate(batch)

    def _enumerate(self, batch: int) -> Iterator[np.ndarray]:
        values = np.asarray(self._vocab, dtype=object)
        for length in range(1, self._n + 1):
            for rows in enumerate_sequences(values, length, batch):
                yield token_array(rows.tolist())

    def strategy(self, p: Dict[str, Any]):
        if self._strategy is None:
            return token_sequences(self._vocab, self._n)
        return self._strategy.map(self._check_example)  # a user's strategy: each example is checked

    def _check_example(self, example: Any) -> List[Any]:
        """A user strategy's example as a token list; raises ParameterError naming what is wrong."""
        if isinstance(example, (str, bytes)) or not isinstance(example, (list, tuple, np.ndarray)):
            raise ParameterError(f"the strategy must generate lists of tokens, got {example!r}")
        if len(example) == 0:
            raise ParameterError("the strategy generated an empty input; inputs need at least one token")
        if len(example) > self._n:
            raise ParameterError(f"the strategy generated an input of length {len(example)} > max_seq_len={self._n}")
        known = set(self._vocab)
        for i, tok in enumerate(example):
            try:
                ok = tok in known
            except TypeError:  # unhashable: certainly not a token
                ok = False
            if not ok:
                raise ParameterError(f"the strategy generated token {tok!r} (position {i + 1}), not in the "
                                     f"vocabulary {self._vocab}")
        return list(example)

    # --------------------------------------------------------------- display
    def token_names(self, p: Dict[str, Any]) -> Dict[Any, str]:
        return {v: str(v) for v in self._vocab}

    def format_tokens(self, p: Dict[str, Any], seq: Sequence[Any]) -> str:
        return " ".join(repr(v) if isinstance(v, RaisedError) else str(v) for v in seq)
