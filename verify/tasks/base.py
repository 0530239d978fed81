"""The task interface: exact definition, reference, samplers, edge cases, strategies."""

from __future__ import annotations

import abc
import string
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from depthcraft.constructions.errors import InputError, ParameterError
from depthcraft.constructions.params import ParamSpec, resolve

if TYPE_CHECKING:  # the certifier's type; imported lazily by the tasks that declare one
    from depthcraft.verify.certify.domain import Precondition

#: Largest input space ``exhaustive`` will enumerate.
EXHAUSTIVE_LIMIT = 1 << 24


class Task(abc.ABC):
    """A task: inputs are [batch, n] integer token arrays, outputs one value per position.

    Subclasses define the parameters, the reference (the definition, vectorised),
    the samplers and the edge cases. Scored positions are given by the mask the
    reference returns; "exact" means equal at every scored position.

    Attributes:
        name: registry key (``khop``...).
        title: human-readable name with its source.
        params: parameter specs (defaults, ranges).
        none_value: what a model output with no value decodes to (e.g. ⊥).
        causal: outputs at position i depend only on x_1..x_i.
        free_sequences: every token sequence over the vocabulary with length
            1..max_seq_len is a valid input, so a counterexample may be shrunk by
            deleting and replacing tokens (:mod:`verify.shrink`). Tasks with a
            format (markers, blocks) leave this False and rely on hypothesis's
            shrinking inside their own strategy.
    """

    name: str = ""
    title: str = ""
    params: Tuple[ParamSpec, ...] = ()
    none_value: Any = None
    causal: bool = True
    free_sequences: bool = False

    # ----------------------------------------------------------- parameters
    def resolve(self, given: Dict[str, Any]) -> Dict[str, Any]:
        """Defaults + given values, checked.

        Raises:
            ParameterError: an unknown key or a bad value (the message names both).
        """
        p = resolve(self.params, given, f"task {self.name}")
        self.check(p)
        self.check_sampling(p)  # the task's own callers (strategies, cross-check) sample
        return p

    def check(self, p: Dict[str, Any]) -> None:
        """Cross-parameter constraints of the task itself (what building and running need);
        raise ParameterError. Default: none."""

    def check_sampling(self, p: Dict[str, Any]) -> None:
        """Constraints of the random-input distribution only (:meth:`sample`): checked by
        :func:`verify.lookup.resolve` unless the caller samples nothing (``depthcraft run``,
        ``show``); raise ParameterError. Default: none."""

    @abc.abstractmethod
    def vocab(self, p: Dict[str, Any]) -> List[int]:
        """Input token values."""

    @abc.abstractmethod
    def max_seq_len(self, p: Dict[str, Any]) -> int:
        """Longest input (BOS excluded)."""

    # ------------------------------------------------------------ reference
    @abc.abstractmethod
    def reference(self, p: Dict[str, Any], tokens: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """Expected outputs.

        Args:
            p: resolved parameters.
            tokens: [batch, n] int array of input tokens.
        Returns:
            (targets [batch, n], scored [batch, n] bool).
        """

    def mismatch(self, p: Dict[str, Any], got: np.ndarray, expected: np.ndarray) -> np.ndarray:
        """[batch, n] bool, True where a decoded output differs from the reference (default ``!=``)."""
        return np.asarray(got != expected, dtype=bool)

    # ------------------------------------------------------------- samplers
    @abc.abstractmethod
    def sample(self, p: Dict[str, Any], rng: np.random.Generator, batch: int) -> np.ndarray:
        """[batch, n] inputs from the task's default (paper) distribution."""

    @abc.abstractmethod
    def edge_cases(self, p: Dict[str, Any]) -> List[np.ndarray]:
        """Adversarial inputs, a list of [batch_i, n_i] arrays (one length each)."""

    def exhaustive(self, p: Dict[str, Any], batch: int = 1 << 15) -> Tuple[int, Iterator[np.ndarray]]:
        """Every input of length n over the vocabulary: (count, iterator of [b, n] batches).

        Raises:
            ParameterError: more than EXHAUSTIVE_LIMIT inputs.
        """
        vocab = np.asarray(self.vocab(p))
        n = self.max_seq_len(p)
        total = len(vocab) ** n
        if total > EXHAUSTIVE_LIMIT:
            raise ParameterError(f"exhaustive check of {len(vocab)}^{n} = {total} inputs is above the "
                                 f"limit of {EXHAUSTIVE_LIMIT}; use smaller n or vocab")
        return total, enumerate_sequences(vocab, n, batch)

    @abc.abstractmethod
    def strategy(self, p: Dict[str, Any]):
        """Hypothesis strategy of one input (a list of tokens, length 1..n)."""

    # --------------------------------------------------------------- display
    def token_names(self, p: Dict[str, Any]) -> Dict[int, str]:
        """Display name of each token value (letters a..z when they fit)."""
        vocab = self.vocab(p)
        if len(vocab) <= 26 and min(vocab) >= 0 and max(vocab) < 26:
            return {v: string.ascii_lowercase[v] for v in vocab}
        return {v: str(v) for v in vocab}

    def format_tokens(self, p: Dict[str, Any], seq: Sequence[Any]) -> str:
        """Tokens -> display string (space separated)."""
        names = self.token_names(p)
        return " ".join(names.get(v, "⊥" if v == self.none_value else str(v)) for v in seq)

    def domain(self, p: Dict[str, Any]) -> Optional[str]:
        """The declared input domain in words, or None when the construction is meant for every input.

        A task whose constructions are correct only on the task's own inputs (a format with
        distinct symbols, edge lists) states that predicate here and as code in
        :meth:`in_domain`. A certificate names it in its ``domain`` key; it never reports
        "every input" for what holds only on the domain (docs/certification.md).
        """
        return None

    def domain_precondition(self, p: Dict[str, Any]) -> Optional["Precondition"]:
        """Facts the domain implies, in the form the certifier uses as a precondition, or None.

        A :class:`~depthcraft.verify.certify.domain.Precondition`: the input lengths of the
        domain and, optionally, position classes within which distinct positions hold distinct
        tokens. Every input :meth:`in_domain` accepts must satisfy it (``Precondition.holds``);
        the task's docstring proves that. None (the default): the certifier uses no domain fact.
        """
        return None

    def in_domain(self, p: Dict[str, Any], tokens: np.ndarray) -> np.ndarray:
        """[batch] bool: which inputs satisfy :meth:`domain` (every input when it is None).

        Row by row: an input :meth:`check_inputs` refuses is outside the domain; one it accepts
        is inside when :meth:`row_in_domain` says so.
        """
        x = np.asarray(tokens)
        if self.domain(p) is None:
            return np.ones(len(x), bool)
        out = np.zeros(len(x), bool)
        for r in range(len(x)):
            try:
                row = self.check_inputs(p, x[r:r + 1])[0]
            except InputError:
                continue
            out[r] = self.row_in_domain(p, row)
        return out

    def row_in_domain(self, p: Dict[str, Any], row: np.ndarray) -> bool:
        """Whether one well-formed input [n] (int64, :meth:`check_inputs` accepted it) is in the
        domain beyond its format; the default: every well-formed input is."""
        return True

    def check_inputs(self, p: Dict[str, Any], tokens: np.ndarray) -> np.ndarray:
        """Check [batch, n] integer inputs against the task's input layout; return them.

        The hook :meth:`parse_tokens` calls on every parsed input. Tasks with a format
        (blocks, markers, answer slots) override it to raise on the first malformed
        input and return the inputs as int64; the default accepts every sequence over
        the vocabulary and returns ``tokens`` unchanged.

        Raises:
            InputError: (in overrides) the first malformed input, naming the position
                and what was expected.
        """
        return tokens

    def parse_tokens(self, p: Dict[str, Any], text: str) -> List[int]:
        """Display string (whitespace separated, or one letter per token) -> token values.

        The parsed tokens are checked by :meth:`check_inputs` (the task's layout).

        Raises:
            InputError: an unknown token name, an empty input, or (from
                :meth:`check_inputs`) an input that does not follow the task's layout.
        """
        names = {name: v for v, name in self.token_names(p).items()}
        stripped = text.strip()
        spaced = any(ch.isspace() for ch in stripped)  # spaces, tabs or newlines separate tokens
        parts = text.split() if spaced or any(len(k) > 1 for k in names) else list(stripped)
        if not parts:
            raise InputError("empty input: give at least one token")
        out = []
        for i, part in enumerate(parts):
            if part not in names:
                shown = sorted(names, key=lambda s: names[s])
                raise InputError(f"token {part!r} at position {i + 1} is not in the vocabulary {shown}")
            out.append(names[part])
        self.check_inputs(p, np.asarray([out], np.int64))
        return out


def enumerate_sequences(vocab: np.ndarray, n: int, batch: int) -> Iterator[np.ndarray]:
    """Every sequence in vocab^n, in lexicographic order, as [<= batch, n] arrays of ``vocab``'s values."""
    v = len(vocab)
    total = v ** n
    powers = v ** np.arange(n - 1, -1, -1, dtype=np.int64)
    for start in range(0, total, batch):
        codes = np.arange(start, min(start + batch, total), dtype=np.int64)
        digits = (codes[:, None] // powers[None, :]) % v
        yield vocab[digits]
