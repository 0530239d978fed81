"""Python API: verify your own RASP program (or a registered construction) in one call.

>>> from tracr.rasp import rasp
>>> from depthcraft import check_program
>>> hist = rasp.SelectorWidth(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.EQ))
>>> report = check_program(hist, vocab=["a", "b"], max_seq_len=6, samples=50, hypothesis_examples=10,
...                        reference=lambda xs: [xs.count(x) for x in xs], bound={"attn_layers": 1})
>>> report["passed"], report["structure"]["attn_layers"], report["structure"]["mlp_layers"]
(True, 1, 1)

:func:`check_program` compiles (for a RASP program), measures the structure
(SPEC §3), checks it against ``bound``, and checks exactness against
``reference`` on random inputs, edge cases, hypothesis examples and, with
``exhaustive=True``, every input. It returns the same report as
``depthcraft verify --json`` writes for one construction (SPEC §6 keys),
made JSON-serialisable. A failing check carries a shrunk counterexample
(``input``/``tokens``, ``expected``, ``got``, wrong ``positions``).
"""

from __future__ import annotations

import gc
import time
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Union

import numpy as np
from tracr.rasp import rasp

from depthcraft.constructions.allocator import return_free_heap
from depthcraft.constructions.catalogue import BOUND_KEYS, Construction, clear_build_cache
from depthcraft.constructions.compiler import compile_program, compile_with_tracr, default_causal
from depthcraft.constructions.errors import CompileError, DepthcraftError, ParameterError
from depthcraft.constructions.files import to_json
from depthcraft.constructions.model import CompiledModel
from depthcraft.constructions.params import MAX_SAMPLES, MAX_SEED
from depthcraft.verify import lookup
from depthcraft.verify.strategies import vocab_list
from depthcraft.verify.tasks.program import ANY, ProgramTask, token_array

#: Longest max_seq_len the API compiles (compile time and width grow with it).
MAX_SEQ_LEN_LIMIT = 2048
COMPILERS = ("depthcraft", "tracr")

Reference = Callable[[List[Any]], Sequence[Any]]


def rasp_reference(program: rasp.SOp, causal: bool = False) -> Reference:
    """The program's own semantics as a reference: RASP evaluation (with the hand-built heads).

    Args:
        program: the RASP program.
        causal: if True, output i is the program evaluated on the prefix x_1..x_i
            (what a causally masked model computes); else on the whole input.
    Returns:
        ``reference(tokens) -> outputs`` (one per token; None = no value).
    """
    from depthcraft.constructions.reference import evaluate

    if not causal:
        return lambda xs: evaluate(program, xs)
    return lambda xs: [evaluate(program, xs[:i + 1])[i] for i in range(len(xs))]


def check_bound(bound: Optional[Mapping[str, Any]]) -> Dict[str, Optional[int]]:
    """Validate a bound dict: keys among attn_layers / heads / d_model, values int >= 0 or None.

    Raises:
        ParameterError: unknown key or a value that is not a non-negative integer.
    """
    if bound is None:
        return {k: None for k in BOUND_KEYS}
    if not isinstance(bound, Mapping):
        raise ParameterError(f"bound must be a dict with keys {list(BOUND_KEYS)}, got {bound!r}")
    unknown = [k for k in bound if k not in BOUND_KEYS]
    if unknown:
        raise ParameterError(f"unknown bound key {unknown[0]!r}; expected any of {list(BOUND_KEYS)}")
    out: Dict[str, Optional[int]] = {k: None for k in BOUND_KEYS}
    for k, v in bound.items():
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
            raise ParameterError(f"bound {k}={v!r} must be a non-negative integer or None")
        out[k] = int(v)
    return out


def _count(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value <= MAX_SAMPLES:
        raise ParameterError(f"{name} must be an integer in 0..{MAX_SAMPLES}, got {value!r}")
    return int(value)


def _check_strategy(strategy: Any) -> None:
    from hypothesis.strategies import SearchStrategy

    if strategy is not None and not isinstance(strategy, SearchStrategy):
        raise ParameterError(f"strategy must be a hypothesis strategy of token lists, got {strategy!r}")


def check_program(program: Union[rasp.SOp, str, CompiledModel], *, vocab: Optional[Iterable[Any]] = None,
                  max_seq_len: Optional[int] = None, reference: Optional[Reference] = None,
                  bound: Optional[Mapping[str, Optional[int]]] = None, strategy=None, exhaustive: bool = False,
                  samples: int = 1000, hypothesis_examples: int = 100, seed: int = 0,
                  params: Optional[Mapping[str, Any]] = None, causal: Optional[bool] = None,
                  compiler: str = "depthcraft",
                  mlp_exactness: int = 100, numerical: Optional[bool] = None, atol: float = 1e-3,
                  name: Optional[str] = None, attention: str = "softmax", certify: bool = False,
                  max_memory: Union[int, str, None] = None, certificate_path: Optional[str] = None,
                  save: Optional[str] = None) -> Dict[str, Any]:
    """Verify a RASP program, a registered construction or a compiled model; return the report.

    Args:
        program: a RASP program (its output ``rasp.SOp``; may use the hand-built
            heads of :mod:`constructions.primitives`), the name of a registered
            construction (``"khop_doubling"``), or a :class:`CompiledModel`
            (e.g. from :func:`constructions.io.load`).
        vocab: input token values (RASP program only; a construction's comes from
            its task, a model's from its embedding).
        max_seq_len: N, the longest input in tokens (RASP program only).
        reference: ``reference(tokens: list) -> list``, one expected output per
            token (None = no value, :data:`ANY` = not scored). Default: for a RASP
            program, its own RASP semantics (so the check finds miscompilations);
            for a construction, its task's reference.
        bound: ``{"attn_layers", "heads", "d_model"}`` upper bounds (missing or
            None = not bounded). Default: none for a program, the theorem's for a
            construction (with its kinds: a lower bound such as Mușat's holds when
            measured >= bound), the recorded one for a loaded file. A bound given
            here holds when measured <= bound.
        strategy: hypothesis strategy of one input (list of tokens). Default:
            :func:`verify.strategies.token_sequences` (program) or the task's.
        exhaustive: also check every input (every length 1..N for a program; length
            N for a construction). Raises ParameterError above 2^24 inputs.
        samples: random inputs (uniform over vocab at length N for a program; the
            task's distribution for a construction); 0 skips the check.
        hypothesis_examples: hypothesis examples (0 skips the check).
        seed: seeds random inputs and hypothesis.
        params: construction parameters (``{"k": 2, "n": 12}``); for a program,
            free-form values recorded in the report.
        causal: compile with causal masking (program only). None (the default): the one
            default of :func:`constructions.compiler.default_causal`, the same as
            :func:`~constructions.compiler.compile_program`'s: bidirectional for a program of
            tracr's primitives (RASP's semantics), causal where a hand-built head needs or
            allows it. With True the default reference evaluates each prefix. A causal model
            whose selector selects a later key fails, whatever the reference, with that selector
            and an input as the report's ``headline`` (:func:`verify.checks.causal_selector_failures`).
        compiler: ``"depthcraft"`` (:func:`constructions.compiler.compile_program`,
            ASAP schedule, hand-built heads) or ``"tracr"`` (tracr's own pipeline).
        mlp_exactness: tracr's MLP discretisation parameter (default 100, tracr's).
        attention: attention kind of the hand-built heads when compiling a program
            (``"softmax"`` or ``"relu"``; depthcraft compiler only).
        numerical: compare outputs as numbers within ``atol`` (default: when the
            program's output SOp is numerical).
        atol: absolute tolerance for numerical outputs.
        name: name shown in the report (default: the program's label).
        certify: also prove exactness for every input of length 1..N from the compiled heads'
            finite tables (:func:`verify.certify.certify`; report key ``certificate``: certified,
            or the head that cannot be proved with a witness). A certificate that holds at
            N >= 256 lets the sampled checks run fewer inputs (``sampling`` says so).
        certificate_path: with ``certify``, write the certificate file (:mod:`depthcraft.checker`
            format; gzip when it ends in ``.gz``) there when the model is certified; report key
            ``certificate_file``. Re-check it with ``depthcraft check-certificate``.
        max_memory: refuse (ParameterError) a program or construction whose estimated peak memory
            (:mod:`verify.cost`, from the value sets, before compiling) is above this budget: bytes
            (int; 0: no limit) or a size such as ``"8G"``; None: 60% of the available memory. The
            estimate is the report's ``cost_estimate``.
        save: also write the compiled model of a RASP program to this file
            (:func:`constructions.io.save`: safetensors, atomic; the report's ``saved_to``), with
            ``bound`` recorded in it. Checked writable before compiling.
    Returns:
        The report dict of :func:`verify.verifier.verify_model` (keys of SPEC §6:
        construction, task, params, structure, bound, bound_ok, checks,
        min_margin, passed, seconds, counterexample ...), JSON-serialisable.
    Raises:
        ParameterError: bad arguments (names the value and what was expected).
        CompileError: the program cannot be compiled (tracr's reason included).
    """
    t0 = time.perf_counter()
    samples = _count("samples", samples)
    hypothesis_examples = _count("hypothesis_examples", hypothesis_examples)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed <= MAX_SEED:
        raise ParameterError(f"seed must be an integer in 0..{MAX_SEED}, got {seed!r}")
    if isinstance(mlp_exactness, bool) or not isinstance(mlp_exactness, (int, np.integer)) or mlp_exactness < 1:
        raise ParameterError(f"mlp_exactness must be an integer >= 1, got {mlp_exactness!r}")
    if isinstance(atol, bool) or not isinstance(atol, (int, float, np.floating)) or not atol >= 0:
        raise ParameterError(f"atol must be a number >= 0, got {atol!r}")
    if attention not in ("softmax", "relu"):
        raise ParameterError(f"attention must be 'softmax' or 'relu', got {attention!r}")
    _check_strategy(strategy)
    if reference is not None and not callable(reference):
        raise ParameterError(f"reference must be a function (list of tokens -> list of outputs) or None, "
                             f"got {reference!r}")
    user_bound = None if bound is None else check_bound(bound)
    if certificate_path is not None and not certify:
        raise ParameterError("certificate_path needs certify=True (a certificate file holds a proof)")
    if certificate_path is not None:
        from depthcraft.constructions.files import check_writable
        check_writable(str(certificate_path))
    if save is not None:
        from depthcraft.constructions.files import check_writable

        if not isinstance(program, rasp.SOp):
            raise ParameterError("save= writes the model compiled from a RASP program; a construction is saved "
                                 "with depthcraft save NAME, a loaded model is already a file")
        check_writable(save)
    run = dict(samples=samples, exhaustive=bool(exhaustive), seed=int(seed), hypothesis_examples=hypothesis_examples,
               certify=bool(certify), certificate_path=None if certificate_path is None else str(certificate_path))
    from depthcraft.verify import cost

    limit = cost.budget(max_memory)
    check_kw = dict(samples=samples, hypothesis_examples=hypothesis_examples, certify=bool(certify))
    estimate = None

    if isinstance(program, str):
        if vocab is not None or max_seq_len is not None:
            raise ParameterError("vocab and max_seq_len come from the construction's parameters; "
                                 "pass them in params (e.g. params={'vocab': 4, 'n': 12})")
        estimate = cost.estimate(program, params or {}, **check_kw)
        cost.admit(estimate, limit)
        report = _check_construction(program, params or {}, reference, strategy, user_bound, run)
    elif isinstance(program, CompiledModel):
        report = _check_model(program, reference, strategy, user_bound, run, params or {}, name, numerical, atol, t0)
    elif isinstance(program, rasp.SOp):
        if vocab is not None and isinstance(max_seq_len, (int, np.integer)) and not isinstance(max_seq_len, bool) \
                and 1 <= max_seq_len <= MAX_SEQ_LEN_LIMIT and compiler == "depthcraft":
            try:
                estimate = cost.estimate_program(program, vocab_list(vocab), int(max_seq_len),
                                                 name=name or program.label, **check_kw)
            except Exception:  # noqa: BLE001 - the compile below names what is wrong (bad vocab, a failing Map)
                estimate = None
            if estimate is not None:
                cost.admit(estimate, limit)
        report = _check_rasp(program, vocab, max_seq_len, reference, strategy, user_bound, run, params or {},
                             causal, compiler, mlp_exactness, numerical, atol, name, t0, attention, save)
    else:
        raise ParameterError(f"program must be a RASP SOp, a construction name or a CompiledModel, "
                             f"got {type(program).__name__}")
    if estimate is not None:
        report["cost_estimate"] = estimate.to_json()
    return to_json(report)


def _construction_task(c: Construction, p: Dict[str, Any], reference, strategy):
    """The construction's task, or a ProgramTask wrapping it when the user overrides reference/strategy."""
    from depthcraft.verify.tasks import get_task

    base = get_task(c.task)
    if reference is None and strategy is None:
        return base
    ref = reference if reference is not None else \
        (lambda xs: base.reference(p, token_array([xs]))[0][0].tolist())
    return ProgramTask(vocab=base.vocab(p), max_seq_len=base.max_seq_len(p), reference=ref,
                       strategy=strategy if strategy is not None else base.strategy(p),
                       sampler=lambda rng, b: base.sample(p, rng, b), edges=_flatten(base.edge_cases(p)),
                       none_value=base.none_value, causal=base.causal, name=base.name,
                       free_sequences=base.free_sequences)


def _check_construction(name, params, reference, strategy, bound, run) -> Dict[str, Any]:
    from depthcraft.verify.verifier import verify

    r = lookup.resolve(name, params)
    return verify(name, r.params, task=_construction_task(r.construction, r.params, reference, strategy),
                  bound=bound, **run)


def _flatten(groups: Sequence[np.ndarray]) -> List[List[Any]]:
    return [row for g in groups for row in np.asarray(g).tolist()]


def _check_rasp(program, vocab, max_seq_len, reference, strategy, bound, run, params, causal, compiler,
                mlp_exactness, numerical, atol, name, t0, attention, save=None) -> Dict[str, Any]:
    if vocab is None or max_seq_len is None:
        raise ParameterError("a RASP program needs vocab (token values) and max_seq_len (longest input)")
    if isinstance(max_seq_len, bool) or not isinstance(max_seq_len, (int, np.integer)) or max_seq_len < 1:
        raise ParameterError(f"max_seq_len must be an integer >= 1, got {max_seq_len!r}")
    if max_seq_len > MAX_SEQ_LEN_LIMIT:
        raise ParameterError(f"max_seq_len={max_seq_len} is above the limit {MAX_SEQ_LEN_LIMIT} "
                             f"(compile time and d_model grow with it)")
    if compiler not in COMPILERS:
        raise ParameterError(f"compiler={compiler!r} must be one of {list(COMPILERS)}")
    vocab = vocab_list(vocab)
    if causal is None:
        causal = default_causal(program)
    if compiler != "depthcraft" and attention != "softmax":
        raise ParameterError(f"attention={attention!r} needs compiler='depthcraft' (tracr's own pipeline is softmax)")
    try:
        if compiler == "depthcraft":
            model = compile_program(program, vocab=vocab, max_seq_len=int(max_seq_len), causal=bool(causal),
                                    mlp_exactness=mlp_exactness, attention=attention)
        else:
            model = compile_with_tracr(program, vocab=vocab, max_seq_len=int(max_seq_len), causal=bool(causal),
                                       mlp_exactness=mlp_exactness)
    except DepthcraftError:
        raise
    except Exception as e:  # tracr evaluates the program's functions on every value of their inputs
        found = failing_function(program, vocab, int(max_seq_len))
        if found is not None:
            raise CompileError(f"cannot compile {program.label}: {found}") from None
        raise CompileError(f"tracr could not compile {program.label}: {type(e).__name__}: {e} (does a Map or "
                           f"SequenceMap function fail on some value its input can take?)") from None
    if save is not None:
        from depthcraft.constructions.io import save as save_model

        save_model(model, save, bound=bound)
    if reference is None:
        reference = rasp_reference(program, causal=bool(causal))
    if numerical is None:
        numerical = rasp.is_numerical(program)
    label = name or program.label
    extra = {"compiler": compiler, "mlp_exactness": mlp_exactness, **({"saved_to": save} if save else {})}
    return _verify(model, label, vocab, int(max_seq_len), reference, strategy, bound, run, params, bool(causal),
                   numerical, atol, t0, extra=extra)


def failing_function(program: rasp.SOp, vocab: Sequence[Any], max_seq_len: int) -> Optional[str]:
    """Why tracr cannot compile ``program``, where it is a function that fails on a value its input takes.

    tracr evaluates every Map / SequenceMap function on every value of its inputs' value sets. This
    propagates the value sets as tracr does (tokens: the vocabulary; indices: 0..N-1; a categorical
    Aggregate: its values' set; SelectorWidth: 0..N) and names the first node whose function raises,
    with the value(s) and the exception: ``Map 'halve' raises ZeroDivisionError on 0``.

    Args:
        program: the RASP program; vocab: its token values; max_seq_len: N.
    Returns:
        The sentence, or None when no function fails (the failure is elsewhere) or a value set
        cannot be followed (a numerical Aggregate, a hand-built head).
    """
    import itertools

    from depthcraft.constructions.dedupe import postorder

    values: Dict[str, set] = {}
    for expr in postorder(program):
        if isinstance(expr, rasp.TokensType):
            values[expr.label] = set(vocab)
        elif isinstance(expr, rasp.IndicesType):
            values[expr.label] = set(range(max_seq_len))
        elif isinstance(expr, rasp.Map):
            inner = values.get(expr.inner.label)
            if inner is None:
                continue
            out = set()
            for v in sorted(inner, key=repr):
                try:
                    out.add(expr.f(v))
                except Exception as e:  # noqa: BLE001 - this is what we look for
                    return f"Map {expr.label!r} raises {type(e).__name__}: {e} on the value {v!r} of {expr.inner.label}"
            values[expr.label] = out
        elif isinstance(expr, rasp.SequenceMap):
            a, b = values.get(expr.fst.label), values.get(expr.snd.label)
            if a is None or b is None:
                continue
            out = set()
            for x, y in itertools.product(sorted(a, key=repr), sorted(b, key=repr)):
                try:
                    out.add(expr.f(x, y))
                except Exception as e:  # noqa: BLE001
                    return (f"SequenceMap {expr.label!r} raises {type(e).__name__}: {e} on the values {x!r} of "
                            f"{expr.fst.label} and {y!r} of {expr.snd.label}")
            values[expr.label] = out
        elif isinstance(expr, rasp.Aggregate) and rasp.is_categorical(expr):
            if expr.sop.label in values:
                values[expr.label] = set(values[expr.sop.label])
        elif isinstance(expr, rasp.SelectorWidth):
            values[expr.label] = set(range(max_seq_len + 1))
    return None


def _check_model(model, reference, strategy, bound, run, params, name, numerical, atol, t0) -> Dict[str, Any]:
    from depthcraft.verify.verifier import verify_model

    cname = model.meta.get("construction")
    if cname and (reference is None or model.meta.get("params")):
        r = lookup.resolve_model(model)
        c, p = r.construction, r.params
        kinds = None  # a user's bound values are upper bounds
        if bound is None and model.meta.get("saved_bound") is not None:  # a loaded file: the bound it records
            bound, kinds = model.meta["saved_bound"], model.meta.get("saved_bound_kinds") or c.bound_kinds()
        elif bound is None:
            bound, kinds = c.bound_values(p), c.bound_kinds()
        return verify_model(model, _construction_task(c, p, reference, strategy), p, bound, name=name or c.name,
                            started=t0, bound_kinds=kinds, extra={"source": c.source, "attention": model.arch.attention,
                                   "causal": model.arch.causal}, **run)
    if reference is None:
        raise ParameterError("this model names no registered construction in its metadata: give a reference function")
    if numerical is None:
        numerical = not model.categorical_output
    return _verify(model, name or "model", model.vocab, model.max_seq_len, reference, strategy, bound, run, params,
                   model.arch.causal, numerical, atol, t0, extra={})


def _verify(model, label, vocab, n, reference, strategy, bound, run, params, causal, numerical, atol, t0, extra):
    from depthcraft.verify.verifier import verify_model

    task = ProgramTask(vocab=vocab, max_seq_len=n, reference=reference, strategy=strategy, causal=causal,
                       numerical=numerical, atol=atol)
    p = {"max_seq_len": n, "vocab": list(vocab), **dict(params)}
    return verify_model(model, task, p, bound or {k: None for k in BOUND_KEYS}, name=label, started=t0,
                        extra={"attention": model.arch.attention, "causal": causal, **extra}, **run)


def release_memory() -> Dict[str, Any]:
    """Drop what this process keeps between calls and give the freed heap back to the OS.

    Clears the registry's cache of built models (:meth:`Construction.build`, up to 32
    models) and JAX's caches of traced and compiled programs (``jax.clear_caches``;
    later calls recompile, or read JAX's persistent compilation cache), collects
    garbage, and returns free heap pages to the OS (glibc ``malloc_trim``). For long
    sessions that verify or build many sizes: measured on the default test suite,
    which calls it after every test module, peak RSS 6.7 GB without and 1.3 GB with
    (docs/performance.md, "Test suite"). Models and arrays the caller still holds are
    not freed.

    Returns:
        ``{"models": int, "heap_trimmed": bool}``: how many cached models were
        dropped, and whether any heap pages went back to the OS. Never raises.
    """
    import jax

    models = clear_build_cache()
    jax.clear_caches()
    gc.collect()
    return {"models": models, "heap_trimmed": return_free_heap()}


__all__ = ["check_program", "release_memory", "check_bound", "failing_function", "rasp_reference", "ANY",
           "MAX_SEQ_LEN_LIMIT"]
