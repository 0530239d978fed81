"""Hypothesis strategies for property tests of RASP programs and compiled constructions.

Use these in your own pytest suite (see ``docs/examples/test_my_program.py``)::

    from hypothesis import given
    from depthcraft.verify.strategies import token_sequences

    @given(token_sequences(["a", "b", "c"], max_len=8))
    def test_my_program(xs): ...

* :func:`token_sequences`: generic token sequences that favour the inputs on
  which compiled RASP programs go wrong (SPEC §8): all tokens equal, no token
  repeated, maximal length, periodic and sorted sequences. Plain uniform lists
  are one branch of six, so most examples are edge cases.
* :func:`edge_sequences`: the same families as a fixed, deterministic list (the
  verifier's "edge" check for user programs).
* :func:`task_inputs` / :func:`construction_inputs`: the strategy of a registered
  task (each :class:`~verify.tasks.base.Task` defines its own, e.g. k-hop's
  periodic and constant sequences), with parameters resolved and checked.

Sequences are Python lists of token values (no BOS); lengths are in tokens.
"""

from __future__ import annotations

import collections.abc
from typing import Any, Iterable, List, Sequence

from hypothesis import strategies as st

from depthcraft.constructions.errors import ParameterError


def vocab_list(vocab: Iterable[Any]) -> List[Any]:
    """The distinct token values of ``vocab``, sorted when they are comparable (else in the given order).

    Raises:
        ParameterError: ``vocab`` is not iterable, is empty, or holds an unhashable value.
    """
    try:
        values = list(vocab)
    except TypeError:
        raise ParameterError(f"vocab must be an iterable of token values, got {vocab!r}") from None
    if not values:
        raise ParameterError("vocab is empty: give at least one token value")
    try:
        unique = list(dict.fromkeys(values))
    except TypeError:
        bad = next(v for v in values if not isinstance(v, collections.abc.Hashable))
        raise ParameterError(f"vocab values must be hashable (ints, strings, ...), got {bad!r}") from None
    try:
        return sorted(unique)
    except TypeError:  # mixed types: keep the given order
        return unique


def _check_lengths(min_len: Any, max_len: Any) -> None:
    for name, v in (("min_len", min_len), ("max_len", max_len)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise ParameterError(f"{name} must be an integer, got {v!r}")
    if min_len < 1:
        raise ParameterError(f"min_len must be >= 1 (a sequence needs at least one token), got {min_len}")
    if max_len < min_len:
        raise ParameterError(f"max_len={max_len} is below min_len={min_len}")


def token_sequences(vocab: Iterable[Any], max_len: int, min_len: int = 1) -> st.SearchStrategy:
    """Token sequences over ``vocab`` that favour edge cases.

    Six equally likely families: uniform (any length), all tokens equal, no token
    repeated (length <= |vocab|), maximal length ``max_len``, periodic (period
    1..4) and sorted. Shrinks towards short sequences of the smallest token.

    Args:
        vocab: token values (sorted when they are comparable; the first one is the
            "smallest" that hypothesis shrinks towards).
        max_len: longest sequence, in tokens (the model's ``max_seq_len``).
        min_len: shortest sequence, >= 1.
    Returns:
        A hypothesis strategy of ``list`` of token values.
    Raises:
        ParameterError: empty vocab, or lengths that are not integers with
            1 <= min_len <= max_len.
    """
    values = vocab_list(vocab)
    _check_lengths(min_len, max_len)
    tok = st.sampled_from(values)
    lengths = st.integers(min_len, max_len)
    rank = {v: i for i, v in enumerate(values)}
    families = [
        st.lists(tok, min_size=min_len, max_size=max_len),
        st.builds(lambda t, n: [t] * n, tok, lengths),
        st.lists(tok, min_size=max_len, max_size=max_len),
        st.builds(lambda pat, n: [pat[i % len(pat)] for i in range(n)],
                  st.lists(tok, min_size=1, max_size=min(len(values), 4)), lengths),
        st.lists(tok, min_size=min_len, max_size=max_len).map(lambda xs: sorted(xs, key=rank.__getitem__)),
    ]
    if min_len <= len(values):
        families.insert(2, st.lists(tok, min_size=min_len, max_size=min(max_len, len(values)), unique=True))
    return st.one_of(*families)


def edge_sequences(vocab: Iterable[Any], max_len: int, min_len: int = 1) -> List[List[Any]]:
    """Deterministic edge-case inputs over ``vocab`` (duplicates removed, lengths in range).

    All-equal sequences of every token at ``max_len`` (SelectorWidth's failure
    mode), the vocabulary in order and reversed (no repeats), alternating,
    sorted-with-runs, periodic, one odd token at either end, and the shortest
    sequences.

    Args:
        vocab: token values.
        max_len: longest sequence (tokens).
        min_len: shortest sequence (>= 1).
    Returns:
        A list of token lists.
    Raises:
        ParameterError: as :func:`token_sequences`.
    """
    values = vocab_list(vocab)
    _check_lengths(min_len, max_len)
    v, n = len(values), max_len
    first, last = values[0], values[-1]
    seqs: List[List[Any]] = [[t] * n for t in values]
    distinct = values[:n]
    seqs += [distinct, distinct[::-1]]
    seqs += [[values[i % v] for i in range(n)], [values[(v - 1 - i) % v] for i in range(n)]]
    seqs += [[values[i % min(v, 2)] for i in range(n)]]
    seqs += [[values[i * v // n] for i in range(n)], [values[(n - 1 - i) * v // n] for i in range(n)]]
    seqs += [[first] * (n - 1) + [last], [last] + [first] * (n - 1)]
    seqs += [[first], [first, first], [first, last], [last, first, last]]
    seen, out = set(), []
    for s in seqs:
        key = tuple(map(repr, s))
        if min_len <= len(s) <= max_len and key not in seen:
            seen.add(key)
            out.append(s)
    return out


def task_inputs(task: str, **params: Any) -> st.SearchStrategy:
    """The hypothesis strategy of the registered task ``task`` (e.g. ``"khop"``) at ``params``.

    Example: ``task_inputs("khop", k=2, n=12, vocab=4)``.

    Raises:
        ParameterError: unknown task, unknown parameter or invalid value.
    """
    from depthcraft.verify.tasks import get_task

    t = get_task(task)
    return t.strategy(t.resolve(params))


def construction_inputs(name: str, **params: Any) -> st.SearchStrategy:
    """The input strategy of the registered construction ``name`` (its task's strategy) at ``params``.

    Example: ``construction_inputs("khop_doubling", k=4, n=16)``.

    Raises:
        ParameterError: unknown construction, unknown parameter or invalid value.
    """
    from depthcraft.verify import lookup

    r = lookup.resolve(name, params)
    return r.task.strategy(r.params)


__all__: Sequence[str] = ("vocab_list", "token_sequences", "edge_sequences", "task_inputs", "construction_inputs")
