"""Verify a construction: compile, measure, check the bound, check exactness, report.

The report (one dict per construction and parameter set) has the keys of SPEC §6::

    {"construction", "task", "params", "structure": {...}, "bound": {...},
     "bound_ok", "checks": {"random", "edge", "exhaustive", "hypothesis"},
     "min_margin": {"attention", "output_gap"}, "ablation": [{"layer", "exact_fraction",
     "redundant"}, ...], "ablation_ok", "passed", "seconds", ...}

``passed`` needs the bound, exactness on every check, and no redundant attention layer
(:mod:`verify.ablation`). Where layer necessity cannot be tested (n = 1, or no input's output
depends on another position: :func:`verify.ablation.not_applicable`), the ablation does not run,
``ablation`` is ``[]``, ``ablation_applicable`` is False, ``ablation_not_applicable`` gives the
reason, and ``passed`` rests on the bound and exactness.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import numpy as np

from depthcraft.constructions.model import CompiledModel
from depthcraft.verify.ablation import ablate, ablation_inputs, not_applicable
from depthcraft.verify.checks import (MIN_ATTENTION, MIN_OUTPUT_GAP, CheckResult, causal_selector_failures,
                                      check_batches, hypothesis_check)
from depthcraft.verify.shrink import shrink as shrink_counterexample
from depthcraft.verify.structure import measure
from depthcraft.verify import lookup
from depthcraft.verify.tasks.base import Task

#: Default number of random inputs per verification.
DEFAULT_SAMPLES = 1000
#: Default number of hypothesis examples per verification.
DEFAULT_HYPOTHESIS = 100
#: Most random inputs the layer ablation runs (each attention layer once).
ABLATION_SAMPLES = 500
#: With a certificate that holds, models of this N and longer run at most these many sampled
#: inputs (random / hypothesis / ablation): the certificate, not the samples, is the evidence there.
CERTIFIED_FEWER_FROM = 256
CERTIFIED_SAMPLES = 8
#: Random inputs of the theorem's half (:func:`verify.theorem.theorem_check`) in a certifying verify.
THEOREM_SAMPLES = 10_000


def bound_check(structure: Mapping[str, Any], bound: Mapping[str, Optional[int]],
                kinds: Optional[Mapping[str, str]] = None) -> Dict[str, Any]:
    """Per bound key: measured, bound, kind, gap and ok.

    An ``upper`` bound (the default) holds when measured <= bound, gap = bound - measured;
    a ``lower`` bound holds when measured >= bound, gap = measured - bound. A
    holding bound has gap >= 0.
    """
    out = {}
    for key, b in bound.items():
        if b is None:
            continue
        m = structure[key]
        kind = (kinds or {}).get(key, "upper")
        gap = b - m if kind == "upper" else m - b
        out[key] = {"measured": m, "bound": b, "kind": kind, "gap": gap, "ok": gap >= 0}
    return out


def run_checks(model: CompiledModel, task: Task, p: Dict[str, Any], *, samples: int = DEFAULT_SAMPLES,
               exhaustive: bool = False, seed: int = 0, hypothesis_examples: int = DEFAULT_HYPOTHESIS,
               progress: Optional[Callable[[str, int, int], None]] = None) -> Dict[str, Optional[CheckResult]]:
    """Run the random, edge-case, hypothesis and (optionally) exhaustive checks.

    Args:
        model: compiled model for ``task`` at parameters ``p``.
        samples: random inputs from the task's distribution (0 skips the check).
        exhaustive: also check every input of length n (raises ParameterError if too many).
        seed: seeds the random inputs and hypothesis.
        hypothesis_examples: examples for the hypothesis check (0 skips it).
        progress: called as ``progress(check, inputs_done, inputs_total)`` while the random and
            exhaustive checks run (their batches are generated lazily, a chunk at a time).
    Returns:
        ``{"random", "edge", "exhaustive", "hypothesis"}`` -> CheckResult or None (not run).
    """
    rng = np.random.default_rng(seed)
    total, exhaustive_batches = task.exhaustive(p) if exhaustive else (0, None)  # refuse a too-large space up front

    def tick(name: str, of: int):
        return None if progress is None else (lambda done: progress(name, done, of))

    checks: Dict[str, Optional[CheckResult]] = {}
    checks["random"] = check_batches(model, task, p, _chunks(lambda b: task.sample(p, rng, b), samples), "random",
                                     progress=tick("random", samples)) if samples > 0 else None
    checks["edge"] = check_batches(model, task, p, task.edge_cases(p), "edge")
    checks["exhaustive"] = None if exhaustive_batches is None else \
        check_batches(model, task, p, exhaustive_batches, "exhaustive", progress=tick("exhaustive", total))
    checks["hypothesis"] = hypothesis_check(model, task, p, hypothesis_examples, seed) \
        if hypothesis_examples > 0 else None
    return checks


def _chunks(make, total: int, size: int = 8192):
    for start in range(0, total, size):
        yield make(min(size, total - start))


def margins(checks: Mapping[str, Optional[CheckResult]], soft_layers=()) -> Tuple[Dict[str, Any], List[str]]:
    """Minimum margins over every check that ran, plus warnings for tiny ones.

    ``soft_layers`` (0-based attention sublayers whose heads are soft by design, e.g.
    memorisation heads) keep their entry in ``attention_per_layer`` but do not count
    in the hardmax margin ``attention``.
    """
    att, gap = None, None
    for r in checks.values():
        if r is None or r.inputs == 0:
            continue
        if r.attention is not None:
            att = r.attention if att is None else [min(a, b) for a, b in zip(att, r.attention)]
        if r.output_gap is not None:
            gap = r.output_gap if gap is None else min(gap, r.output_gap)
    soft = set(soft_layers)
    hard = [a for i, a in enumerate(att or []) if i not in soft]
    out = {"attention": min(hard) if hard else None, "attention_per_layer": att, "output_gap": gap,
           "soft_layers": [i + 1 for i in soft_layers]}
    warnings = []
    if out["attention"] is not None and out["attention"] < MIN_ATTENTION:
        warnings.append(f"attention weight on the intended keys drops to {out['attention']:.4f} (< {MIN_ATTENTION})")
    if gap is not None and gap < MIN_OUTPUT_GAP:
        warnings.append(f"read-out gap drops to {gap:.4f} (< {MIN_OUTPUT_GAP})")
    return out, warnings


def verify_model(model: CompiledModel, task: Task, p: Dict[str, Any], bound: Mapping[str, Optional[int]], *,
                 name: str, samples: int = DEFAULT_SAMPLES, exhaustive: bool = False, seed: int = 0,
                 hypothesis_examples: int = DEFAULT_HYPOTHESIS, started: Optional[float] = None,
                 extra: Optional[Dict[str, Any]] = None, shrink: bool = True,
                 bound_kinds: Optional[Mapping[str, str]] = None,
                 progress: Optional[Callable[[str, int, int], None]] = None, certify: bool = False,
                 exhaustive_is_domain: bool = False, certificate_path: Optional[str] = None) -> Dict[str, Any]:
    """Measure, bound-check and exactness-check a compiled model; return the report dict.

    Each failing check's counterexample is shrunk by :func:`verify.shrink.shrink`
    when the task's inputs are free token sequences (hypothesis's own shrinking
    stays inside its strategy's families, e.g. fixed-length inputs);
    ``shrink=False`` keeps the inputs as found. ``bound_kinds`` marks bounds as
    ``upper`` (default) or ``lower`` (see :func:`bound_check`).

    Args:
        model: the compiled weights to check.
        task: reference, samplers, edge cases and strategy of the inputs.
        p: resolved task parameters.
        bound: ``{"attn_layers", "heads", "d_model"}`` -> int or None (not bounded).
        name: the report's ``construction`` field.
        samples: random inputs ([samples, n] int tokens from ``task.sample``); 0 skips.
        exhaustive: also check every input of length n.
        seed: seeds the random inputs and hypothesis.
        hypothesis_examples: hypothesis examples; 0 skips.
        started: ``time.perf_counter()`` at the start, so ``seconds`` includes compiling.
        extra: more report fields (source, attention, ...).
        progress: ``progress(check, inputs_done, inputs_total)`` during the random and exhaustive
            checks (:func:`run_checks`).
        certify: also prove exactness for every input up to N (:func:`verify.certify.certify`;
            the report's ``certificate``). When it holds and N >= :data:`CERTIFIED_FEWER_FROM`,
            the random, hypothesis and ablation checks run at most :data:`CERTIFIED_SAMPLES`
            inputs each and the ablation skips the edge cases (``sampling`` in the report says so;
            the edge-case check still runs every edge case).
        exhaustive_is_domain: the exhaustive check enumerates the task's whole input set (a
            memorised dataset, every template instance): where the tables prove nothing, the
            certificate is the exhaustive route over that set (``route: "exhaustive"``: the
            independent checker bounds every input's float32 forward, :mod:`verify.certify.certificate`).
        certificate_path: with ``certify``, write the certificate file there when the model is
            certified with one (report key ``certificate_file``: the path, or why none was written).
    Returns:
        The JSON-serialisable report (SPEC §6 keys, plus bound_checks, ablation, warnings,
        certificate and sampling when certifying).
    Raises:
        ParameterError: the exhaustive input set is too large for the task.
    """
    t0 = time.perf_counter() if started is None else started
    structure = measure(model)
    bounds = bound_check(structure, bound, bound_kinds)
    certificate, sampling, ablation_samples, ablation_edges = None, None, ABLATION_SAMPLES, True
    if certify:
        from depthcraft.verify.certify import prove

        certificate = prove(model, atol=float(getattr(task, "atol", 1e-3)), domain=task.domain(p),
                            precondition=task.domain_precondition(p))
        if certificate.certified and model.max_seq_len >= CERTIFIED_FEWER_FROM:
            sampling = {"reduced_by_certificate": True, "requested": {
                "samples": samples, "hypothesis_examples": hypothesis_examples, "ablation": ABLATION_SAMPLES}}
            samples, hypothesis_examples = min(samples, CERTIFIED_SAMPLES), min(hypothesis_examples, CERTIFIED_SAMPLES)
            ablation_samples, ablation_edges = CERTIFIED_SAMPLES, False
            sampling.update(samples=samples, hypothesis_examples=hypothesis_examples, ablation=ablation_samples,
                            ablation_edge_cases=False)
    checks = run_checks(model, task, p, samples=samples, exhaustive=exhaustive, seed=seed,
                        hypothesis_examples=hypothesis_examples, progress=progress)
    if shrink:
        for r in checks.values():
            if r is not None and r.counterexample is not None:
                r.counterexample = shrink_counterexample(model, task, p, r.counterexample)
    margin, warnings = margins(checks, model.meta.get("soft_attention_layers", ()))
    bound_ok = all(b["ok"] for b in bounds.values())
    exact = all(r.exact for r in checks.values() if r is not None)
    # a causal compile of a RASP selector that can pick a later key computes something else (SPEC §8),
    # whatever the reference says: a failure of its own, certificate or not
    selectors = causal_selector_failures(model, seed=seed)
    ablation_na = not_applicable(task, p)
    ablation = [] if ablation_na else \
        ablate(model, task, p, ablation_inputs(task, p, ablation_samples, seed, edges=ablation_edges))
    redundant = [a["layer"] for a in ablation if a["redundant"]]
    if redundant:
        warnings.append(f"attention layer(s) {redundant} are redundant: removing one leaves the model exact")
    cx = next((r.counterexample for k in ("hypothesis", "edge", "random", "exhaustive")
               if (r := checks.get(k)) is not None and r.counterexample is not None), None)
    report = {
        "construction": name,
        "task": task.name,
        "params": dict(p),
        "structure": {k: structure[k] for k in ("attn_layers", "mlp_layers", "heads", "d_model", "d_head",
                                                "d_mlp", "n_params", "tracr_blocks")},
        "layers": structure["per_layer"],
        "bound": dict(bound),
        "bound_checks": bounds,
        "bound_ok": bound_ok,
        "checks": {k: (r.to_json() if r is not None else None) for k, r in checks.items()},
        "exact": exact,
        "min_margin": margin,
        "warnings": warnings,
        "counterexample": cx.to_json() if cx else None,
        "ablation": ablation,
        "ablation_ok": not redundant,
        "causal_selectors": selectors,
        "ablation_applicable": ablation_na is None,
        "ablation_not_applicable": ablation_na,
        "passed": bool(bound_ok and exact and not redundant and not selectors),
        "seconds": None,
    }
    if certificate is not None:
        ex = checks.get("exhaustive")
        if not certificate.certified and exhaustive_is_domain and ex is not None and ex.exact and ex.inputs:
            certify_exhaustively(certificate, model, task, p)
        _never_certified_beside_a_failure(certificate, report)
        report["certificate"] = certificate.to_json()
        report["sampling"] = sampling or {"reduced_by_certificate": False}
        if certificate_path is not None:
            report["certificate_file"] = _write_certificate(certificate, model, certificate_path)
    if cx is not None:
        report["counterexample"].update(counterexample_texts(task, p, cx.tokens, cx.expected, cx.got, cx.positions))
    for f in selectors:
        f["input_text"] = task.format_tokens(p, f["input"])
    report.update(extra or {})
    report["headline"] = headline(report)
    report["seconds"] = round(time.perf_counter() - t0, 3)
    return report


def certify_exhaustively(certificate, model: CompiledModel, task: Task, p: Dict[str, Any]) -> None:
    """Give ``certificate`` (a :class:`~verify.certify.certificate.Certificate` its tables did not
    prove) the exhaustive route: every input of the task's finite input set, run by the checker
    (:meth:`~verify.certify.certificate.Certificate.exhaustive`) on the positions the task scores
    (the last one, or all).

    Args:
        certificate: the certificate, changed in place.
        model: the compiled model; task, p: the task and its resolved parameters (a finite input set).
    """
    batches = [np.asarray(batch) for batch in task.exhaustive(p)[1]]
    scored = np.concatenate([task.reference(p, b)[1] for b in batches])
    last_only = bool(scored[:, -1].all() and not scored[:, :-1].any())
    inputs = [row.tolist() for b in batches for row in b]
    certificate.exhaustive(model, inputs, f"the task's finite input set ({task.name})",
                           positions="last" if last_only else "all")


def _write_certificate(certificate, model: CompiledModel, path: str) -> Dict[str, Any]:
    """Write the certificate and the weights it is about (atomically): ``{"path", "model", "bytes"}``, or
    ``{"path": None, "why"}``. A ``*.safetensors`` path gets the model with the certificate bundled;
    any other path the certificate, and the model beside it (:func:`certificate.model_path_for`)."""
    from depthcraft.constructions import io
    from depthcraft.constructions.files import write_bytes_atomic
    from depthcraft.verify.certify.certificate import model_path_for

    if not certificate.certified:
        return {"path": None, "why": "not certified (the certificate entry says why)"}
    if certificate.file is None:
        return {"path": None, "why": f"no certificate file: {certificate.check.failure if certificate.check else ''}"}
    if path.endswith(".safetensors"):
        data = certificate.file_bytes(path + ".gz")
        io.save(model, path, certificate=data)
        return {"path": path, "model": path, "bytes": len(data)}
    data = certificate.file_bytes(path)
    write_bytes_atomic(path, data)
    io.save(model, model_path_for(path))
    return {"path": path, "model": model_path_for(path), "bytes": len(data)}


def counterexample_texts(task: Task, p: Dict[str, Any], tokens: List[Any], expected: List[Any], got: List[Any],
                         positions: List[int]) -> Dict[str, Any]:
    """How a counterexample prints: ``tokens_text``, ``expected_text``, ``got_text`` (the task's
    :meth:`~verify.tasks.base.Task.format_tokens`, one cell per position) and, where an expected and
    a got value print alike but differ (``"0"`` against ``0``), those cells with their types
    (``'0':str`` and ``0:int``) and ``type_note``, one sentence naming the types.

    Args:
        task, p: the task and its resolved parameters.
        tokens, expected, got: the input and the two outputs, one value per position.
        positions: the wrong positions (1-based).
    Returns:
        ``{"tokens_text", "expected_text", "got_text"}`` plus ``type_note`` where the texts agree.
    """
    out = {"tokens_text": task.format_tokens(p, tokens), "expected_text": task.format_tokens(p, expected),
           "got_text": task.format_tokens(p, got)}
    alike = [i for i in positions if 1 <= i <= min(len(expected), len(got))
             and task.format_tokens(p, [expected[i - 1]]) == task.format_tokens(p, [got[i - 1]])]
    if not alike:
        return out
    exp_cells, got_cells = out["expected_text"].split(" "), out["got_text"].split(" ")
    if len(exp_cells) == len(expected) and len(got_cells) == len(got):
        for i in alike:
            exp_cells[i - 1] = f"{expected[i - 1]!r}:{type(expected[i - 1]).__name__}"
            got_cells[i - 1] = f"{got[i - 1]!r}:{type(got[i - 1]).__name__}"
        out.update(expected_text=" ".join(exp_cells), got_text=" ".join(got_cells))
    i = alike[0]
    e, g = expected[i - 1], got[i - 1]
    out["type_note"] = (f"at position {i} the expected and the output values print alike but differ: expected "
                        f"{e!r} ({type(e).__name__}), got {g!r} ({type(g).__name__})")
    return out


def headline(report: Mapping[str, Any]) -> Optional[str]:
    """The one sentence that says why a report failed, the most basic reason first; None when it passed.

    In order: a causal selector that selects a later key (:func:`verify.checks.causal_selector_failures`:
    the compiled model computes something other than the RASP program, whatever the sampled checks
    say), a bound not met, a check that found a wrong output, a redundant attention layer.
    """
    if report["passed"]:
        return None
    sel = report.get("causal_selectors") or []
    if sel:
        f = sel[0]
        text = f.get("input_text") or " ".join(map(str, f["input"]))
        more = f" (and {len(sel) - 1} more)" if len(sel) > 1 else ""
        seen = (f"; the model's output there differs from RASP's at position(s) "
                f"{', '.join(map(str, f['differs_at']))}" if f.get("differs_at") else "")
        return (f"selector {f['selector']}{more} selects a key after its query, which the causal mask hides: on "
                f"input {text!r}, query position {f['query_position']} selects key position {f['key_position']}"
                f"{seen}; compile with causal=False (depthcraft check --bidirectional) for RASP's semantics")
    bad = [(k, b) for k, b in report.get("bound_checks", {}).items() if not b["ok"]]
    if bad:
        k, b = bad[0]
        side = "is below its lower" if b.get("kind") == "lower" else "exceeds its"
        return f"{k} = {b['measured']} {side} bound {b['bound']}"
    if not report.get("exact", True):
        failed = sum((c or {}).get("failed", 0) for c in report["checks"].values())
        inputs = sum((c or {}).get("inputs", 0) for c in report["checks"].values())
        return f"the output differs from the reference on {failed} of {inputs} checked inputs"
    if not report.get("ablation_ok", True):
        layers = [a["layer"] for a in report.get("ablation", []) if a.get("redundant")]
        return f"attention layer(s) {layers} are redundant: removing one leaves the model exact"
    return "the report did not pass"


def _never_certified_beside_a_failure(certificate, report: Dict[str, Any]) -> None:
    """Belt for the invariant "no ``certified: true`` beside ``passed: false``" (the program check
    in :mod:`verify.certify.program` is what makes it hold; this names any breach instead of
    printing both).

    A sampled check that finds an error where the certificate holds means the certificate's
    program is not the reference's (or a bug): the certificate is withdrawn with that reason.
    A report that fails only its bound or ablation keeps no certificate either, with that reason.
    """
    if not certificate.certified or report["passed"]:
        return
    if not report["exact"]:
        why = ("a check found an input where the output differs from the reference: the certificate "
               "cannot stand beside it (the RASP program is not the reference, or the certifier erred)")
    else:
        why = ("the report fails its bound, ablation or causal-selector checks: no certificate is given to "
               "a failing report (the tables themselves were proved)")
    certificate.withdraw(why, report["counterexample"])


def verify(name: str, params: Optional[Mapping[str, Any]] = None, *, samples: int = DEFAULT_SAMPLES,
           exhaustive: bool = False, seed: int = 0, hypothesis_examples: int = DEFAULT_HYPOTHESIS,
           task: Optional[Task] = None, bound: Optional[Mapping[str, Optional[int]]] = None,
           progress: Optional[Callable[[str, int, int], None]] = None, certify: bool = False,
           certificate_path: Optional[str] = None) -> Dict[str, Any]:
    """Verify the registered construction ``name`` at ``params`` (strings or values).

    ``task`` replaces the construction's task for the checks (e.g. a
    :class:`~verify.tasks.program.ProgramTask` with a user's reference) and
    ``bound`` its bound values (see :mod:`verify.api`). ``progress(check, inputs_done,
    inputs_total)`` is called while the random and exhaustive checks run. ``certify`` and
    ``certificate_path``: see :func:`verify_model`; it also adds ``theorem``, the theorem's half
    (:func:`verify.theorem.theorem_check`: the program's array semantics against the task on every
    input of length <= 6 and :data:`THEOREM_SAMPLES` random inputs; None where the construction
    has no array semantics).

    Returns:
        The report dict (SPEC §6 keys).
    Raises:
        ParameterError: unknown construction, bad parameters, exhaustive space too large.
    """
    t0 = time.perf_counter()
    r = lookup.resolve(name, params)
    c, p = r.construction, r.params
    task = r.task if task is None else task
    if exhaustive:
        task.exhaustive(p)  # refuse a too-large input space before compiling
    model = r.build()
    kinds = c.bound_kinds() if bound is None else None  # a user's bound values are upper bounds
    bound = r.bound() if bound is None else bound
    report = verify_model(model, task, p, bound, name=c.name, samples=samples, exhaustive=exhaustive,
                        seed=seed, hypothesis_examples=hypothesis_examples, started=t0,
                        bound_kinds=kinds, progress=progress, certify=certify,
                        certificate_path=certificate_path,
                        exhaustive_is_domain=c.exhaustive_in_all and exhaustive,
                        extra={"source": c.source, "attention": model.arch.attention, "causal": c.causal,
                               "bound_formulas": {k: b.text for k, b in c.bounds.items()}})
    if certify:  # the theorem's half, reported beside the certificate (None: no array semantics)
        from depthcraft.verify.theorem import theorem_check

        t1 = time.perf_counter()
        report["theorem"] = theorem_check(c.name, p, random_inputs=THEOREM_SAMPLES, exhaustive_n=6, seed=seed)
        report["seconds"] = round(report["seconds"] + time.perf_counter() - t1, 3)
    return report


def verify_all(*, samples: int = DEFAULT_SAMPLES, exhaustive: bool = False, seed: int = 0,
               hypothesis_examples: int = DEFAULT_HYPOTHESIS, progress=None, certify: bool = False):
    """Verify every registered construction at each of its default parameter sets (a generator of reports).

    Constructions marked ``exhaustive_in_all`` also run their task's exhaustive check.
    """
    for c in lookup.all_constructions():
        for given in c.defaults:
            if progress is not None:
                progress(c.name, given)
            yield verify(c.name, given, samples=samples, exhaustive=exhaustive or c.exhaustive_in_all, seed=seed,
                         hypothesis_examples=hypothesis_examples, certify=certify)


__all__ = ["verify", "verify_all", "verify_model", "run_checks", "bound_check", "certify_exhaustively",
           "counterexample_texts", "headline", "margins"]
