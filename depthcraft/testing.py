"""pytest and hypothesis helpers for your own RASP programs: assert a bound and a reference in a test.

Two levels, both raising :class:`AssertionError` with the (shrunk) counterexample as aligned
rows of input, expected and got, so that pytest prints what is wrong::

    from hypothesis import given
    from depthcraft import testing

    def test_reverse_meets_its_bound():           # the whole verifier in one assert
        testing.assert_program(REVERSE, vocab="abc", max_seq_len=8, reference=lambda xs: xs[::-1],
                               bound={"attn_layers": 2, "heads": 1})

    @given(testing.inputs("abc", max_len=8))       # a property test: hypothesis shrinks a failure
    def test_reverse_on_any_input(xs):
        testing.assert_matches(REVERSE, xs, reference=lambda xs: xs[::-1], vocab="abc", max_seq_len=8)

* :func:`assert_program`: :func:`depthcraft.check_program` (structure against ``bound``, the
  random, edge-case, hypothesis and optionally exhaustive checks, optionally the certificate),
  then AssertionError naming the first reason it failed (the report's ``headline``), the bounds
  not met and the shrunk counterexample. Returns the report when it passed.
* :func:`inputs`: a hypothesis strategy of token lists for a program's inputs, favouring the
  inputs compiled RASP gets wrong (:func:`depthcraft.verify.strategies.token_sequences`).
* :func:`assert_matches`: one input through the compiled model (compiled once per program,
  vocabulary, length and masking: :func:`compiled`) against the reference or the program's own
  RASP semantics.

A worked test file to copy: ``docs/examples/test_my_program.py`` (the project's suite runs it).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence

__all__ = ["assert_matches", "assert_program", "compiled", "failure_message", "inputs"]


def inputs(vocab: Iterable[Any], max_len: int, min_len: int = 1):
    """A hypothesis strategy of one input of a program: a list of ``min_len..max_len`` tokens over ``vocab``.

    Six families, equally likely: uniform, all tokens equal, no token repeated, maximal length,
    periodic, sorted (:func:`depthcraft.verify.strategies.token_sequences`); shrinks towards short
    inputs of the smallest token.

    Args:
        vocab: the token values (a string counts as its characters: ``"abc"``).
        max_len: the longest input (the program's ``max_seq_len``).
        min_len: the shortest input, >= 1.
    Returns:
        ``hypothesis.strategies.SearchStrategy[list]``.
    Raises:
        ParameterError: an empty vocabulary, or lengths that are not 1 <= min_len <= max_len.
    """
    from depthcraft.verify.strategies import token_sequences

    return token_sequences(_vocab(vocab), max_len, min_len)


def _vocab(vocab: Iterable[Any]) -> List[Any]:
    from depthcraft.verify.strategies import vocab_list

    return vocab_list(list(vocab) if isinstance(vocab, str) else vocab)


def failure_message(report: Mapping[str, Any], columns: int = 100) -> str:
    """Why a :func:`depthcraft.check_program` report failed, as the lines :func:`assert_program` raises with.

    The report's ``headline``, each bound not met, and the counterexample (input, expected, got,
    the wrong positions marked, the types where the texts agree), at ``columns`` columns.
    """
    from depthcraft.verify.cli.render import counterexample_lines

    name = report.get("construction", "program")
    lines = [f"{name} failed: {report.get('headline') or 'the report did not pass'}"]
    for key, b in report.get("bound_checks", {}).items():
        if not b["ok"]:
            side = "below the lower" if b.get("kind") == "lower" else "above the"
            lines.append(f"  {key} = {b['measured']}, {side} bound {b['bound']}")
    cx = report.get("counterexample")
    if cx:
        lines += counterexample_lines(cx, columns)
    for f in report.get("causal_selectors") or []:
        lines.append(f"  selector {f['selector']}: on input {f.get('input_text', f['input'])!r} query position "
                     f"{f['query_position']} selects key position {f['key_position']} (masked)")
    return "\n".join(lines)


def assert_program(program: Any, *, vocab: Optional[Iterable[Any]] = None, max_seq_len: Optional[int] = None,
                   reference: Optional[Callable[[List[Any]], Sequence[Any]]] = None,
                   bound: Optional[Mapping[str, Optional[int]]] = None, samples: int = 200,
                   hypothesis_examples: int = 50, **kwargs: Any) -> Dict[str, Any]:
    """Assert that ``program`` meets ``bound`` and matches ``reference`` (the whole verifier in one call).

    Args:
        program: a RASP program (its output ``rasp.SOp``), a registered construction's name or a
            :class:`~depthcraft.constructions.model.CompiledModel`, as for :func:`depthcraft.check_program`.
        vocab: the token values (a string counts as its characters).
        max_seq_len: N, the longest input.
        reference: ``reference(tokens: list) -> list``, one expected output per token (None: no value;
            :data:`depthcraft.ANY`: not scored). Default: the program's own RASP semantics.
        bound: upper bounds ``{"attn_layers", "heads", "d_model"}`` (missing: not bounded).
        samples, hypothesis_examples: random inputs and hypothesis examples (fewer than
            ``check_program``'s defaults, for a test suite).
        kwargs: every other argument of :func:`depthcraft.check_program` (``causal``, ``exhaustive``,
            ``certify``, ``seed``, ...).
    Returns:
        The report (JSON-serialisable dict, SPEC §6 keys) when it passed.
    Raises:
        AssertionError: the report did not pass; the message is :func:`failure_message`.
        ParameterError, CompileError: bad arguments, or a program tracr cannot compile (not a
            test failure: the test is wrong).
    """
    from depthcraft.verify.api import check_program

    report = check_program(program, vocab=None if vocab is None else _vocab(vocab), max_seq_len=max_seq_len,
                           reference=reference, bound=bound, samples=samples, hypothesis_examples=hypothesis_examples,
                           **kwargs)
    if not report["passed"]:
        raise AssertionError(failure_message(report))
    return report


#: Models compiled by :func:`compiled`, keyed by the program's identity (RASP SOps overload ``==``,
#: so they cannot be dictionary keys themselves), its vocabulary, length and masking; the program is
#: kept beside its model so that its identity is not reused.
_COMPILED: Dict[tuple, tuple] = {}
_KEEP = 16


def compiled(program: Any, vocab: Iterable[Any], max_seq_len: int, causal: Optional[bool] = None):
    """``program`` compiled by :func:`depthcraft.compile_program`, once per (program, vocab, length, masking).

    Returns:
        The :class:`~depthcraft.constructions.model.CompiledModel` (the same object on a repeated call).
    Raises:
        CompileError: tracr cannot compile it.
    """
    from depthcraft.constructions.compiler import compile_program

    key = (id(program), tuple(_vocab(vocab)), int(max_seq_len), causal)
    hit = _COMPILED.get(key)
    if hit is not None and hit[0] is program:
        return hit[1]
    model = compile_program(program, vocab=list(key[1]), max_seq_len=key[2], causal=causal)
    if len(_COMPILED) >= _KEEP:
        _COMPILED.pop(next(iter(_COMPILED)))
    _COMPILED[key] = (program, model)
    return model


def assert_matches(program: Any, xs: Sequence[Any], reference: Optional[Callable[[List[Any]], Sequence[Any]]] = None,
                   *, vocab: Optional[Iterable[Any]] = None, max_seq_len: Optional[int] = None,
                   causal: Optional[bool] = None, atol: float = 1e-3) -> None:
    """Assert that the compiled model's output on one input ``xs`` equals the reference's.

    For hypothesis property tests (``@given(inputs(...))``): hypothesis shrinks a failing ``xs``.

    Args:
        program: a RASP program (compiled once: :func:`compiled`; give ``vocab`` and ``max_seq_len``)
            or a :class:`~depthcraft.constructions.model.CompiledModel`.
        xs: the input, a list of tokens (no BOS).
        reference: ``reference(tokens) -> list``; default: the program's RASP semantics (for a
            causal model, each prefix's).
        vocab, max_seq_len, causal: how to compile a RASP program (see :func:`compiled`).
        atol: tolerance of numerical outputs.
    Raises:
        AssertionError: an output differs (the message: input, expected, got, the wrong positions).
        InputError: a token outside the vocabulary or an input longer than max_seq_len.
        ParameterError: a RASP program without vocab and max_seq_len, or a model without a reference.
    """
    import numpy as np
    from tracr.rasp import rasp

    from depthcraft.constructions.errors import ParameterError
    from depthcraft.constructions.model import CompiledModel
    from depthcraft.verify.api import rasp_reference
    from depthcraft.verify.tasks.program import ProgramTask, token_array
    from depthcraft.verify.verifier import counterexample_texts
    from depthcraft.verify.cli.render import counterexample_lines

    if isinstance(program, CompiledModel):
        model = program
        if reference is None:
            raise ParameterError("a compiled model has no RASP semantics of its own here: give reference=")
        numerical = not model.categorical_output
    elif isinstance(program, rasp.SOp):
        if vocab is None or max_seq_len is None:
            raise ParameterError("assert_matches on a RASP program needs vocab= and max_seq_len= (to compile it)")
        model = compiled(program, vocab, max_seq_len, causal)
        if reference is None:
            reference = rasp_reference(program, causal=model.arch.causal)
        numerical = rasp.is_numerical(program)
    else:
        raise ParameterError(f"program must be a RASP SOp or a CompiledModel, got {type(program).__name__}")
    xs = list(xs)
    task = ProgramTask(vocab=model.vocab, max_seq_len=model.max_seq_len, reference=reference, numerical=numerical,
                       atol=atol, causal=model.arch.causal)
    x = token_array([xs])
    expected, scored = task.reference({}, x)
    got = model.run(x)
    wrong = task.mismatch({}, got, expected) & scored
    if not wrong.any():
        return
    positions = (np.flatnonzero(wrong[0]) + 1).tolist()
    cx = {"check": "assert_matches", "tokens": xs, "expected": expected[0].tolist(), "got": got[0].tolist(),
          "positions": positions,
          **counterexample_texts(task, {}, xs, expected[0].tolist(), got[0].tolist(), positions)}
    raise AssertionError("\n".join(counterexample_lines(cx, 100)))
