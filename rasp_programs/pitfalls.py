"""Small RASP programs that tracr compiles wrongly (or refuses), one per pitfall of SPEC §8.

Each program compiles without complaint (except :func:`selector_and`, which
tracr refuses) and gives a model that disagrees with the program's RASP
semantics or with the function its author meant, on some inputs. They are the
regression tests of ``tests/test_pitfalls.py`` and the examples of
``docs/pitfalls.md``: the verifier must report each as a failure (with a
counterexample) or a compile error, never a pass.

Sources: public reports against tracr (google-deepmind/tracr issues #7, #25 and
PR #14; SPEC §8).
"""

from __future__ import annotations

from tracr.rasp import rasp


def _shift(sop: rasp.SOp, name: str) -> rasp.SOp:
    """sop at position i-1 (RASP indices); None at the first position (categorical Aggregate, default None)."""
    return rasp.Aggregate(rasp.Select(rasp.indices, rasp.indices, lambda k, q: k == q - 1), sop).named(name)


def first_token_non_unique() -> rasp.SOp:
    """Meant: x_1 at every position. Written with a selector that picks *every* earlier position.

    A categorical Aggregate averages the one-hot values of all selected keys; with
    several distinct values selected the average is no one-hot, so the read-out
    is garbage (or "no value" below 0.5). RASP's own evaluator returns the numeric
    mean (e.g. 0.5), which is no token either. tracr compiles it silently.
    """
    return rasp.Aggregate(rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.LEQ), rasp.tokens).named("first")


def none_read_downstream() -> rasp.SOp:
    """A chain of categorical Aggregates with default None, whose None is read by a later selector.

    ``prev2`` (x_{i-2}) is None at the first two positions; in the compiled model
    None is a zero vector. ``differs`` counts the tokens different from x_{i-2}
    with the predicate ``k != q``: RASP evaluates ``k != None`` as True for every
    key (count = n), while the zero query vector of the compiled head matches no
    key (count 0). Wrong at positions 1 and 2 of every input.
    """
    prev = _shift(rasp.tokens, "prev")
    prev2 = _shift(prev, "prev2")
    return rasp.SelectorWidth(rasp.Select(rasp.tokens, prev2, lambda k, q: k != q)).named("differs")


def histogram() -> rasp.SOp:
    """hist_i = #{j : x_j = x_i} (tracr's ``make_hist``): SelectorWidth.

    tracr's SelectorWidth decodes 1/(w+1) with an MLP whose resolution, at the
    default ``mlp_exactness=100``, breaks from width 10 on: all-equal inputs of
    length >= 10 come out wrong, while random inputs over a few tokens rarely
    reach a count of 10 (tracr issue #7, PR #14).
    """
    return rasp.SelectorWidth(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.EQ)).named("hist")


def length() -> rasp.SOp:
    """length = SelectorWidth(Select(tokens, tokens, TRUE)) (tracr's ``make_length``): same MLP, same failure."""
    return rasp.SelectorWidth(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.TRUE)).named("length")


def selector_and() -> rasp.SOp:
    """Tokens equal to x_i at or before i, averaged: uses ``SelectorAnd``, which tracr cannot compile.

    Compiling raises :class:`~constructions.errors.CompileError` (tracr: "Compiling
    composite Selectors is not supported").
    """
    same = rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.EQ)
    upto = rasp.Select(rasp.indices, rasp.indices, rasp.Comparison.LEQ)
    ones = rasp.numerical(rasp.Map(lambda t: 1, rasp.tokens).named("ones"))
    return rasp.numerical(rasp.Aggregate(rasp.SelectorAnd(same, upto), ones, default=0)).named("same_upto")


def comparison_on_none() -> rasp.SOp:
    """#{j : x_{j-1} < x_i}: a ``Comparison`` (LT) whose key SOp can be None.

    ``prev`` is None at the first position; tracr's ``Comparison`` predicates raise
    ``ValueError("key is None!")`` on None, so the program has no RASP value on any
    input, yet it compiles and the model outputs numbers.
    """
    prev = _shift(rasp.tokens, "prev")
    return rasp.SelectorWidth(rasp.Select(prev, rasp.tokens, rasp.Comparison.LT)).named("below_prev")


__all__ = ["first_token_non_unique", "none_read_downstream", "histogram", "length", "selector_and",
           "comparison_on_none"]
