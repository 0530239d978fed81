"""The planted-bug corpus: wrong models that neither the certifier nor the independent checker may pass.

    python benchmarks/planted_bugs.py [--json results/certify/planted_bugs.json]

Every case is a compiled model that is WRONG: a concrete input (the case's ``witness``, checked
here) on which the float32 model's output differs from the RASP program's at some position. They
are the must-fail models of the project's tests (SPEC §8's tracr pitfalls, weakened heads, swapped
OV columns, None queries, a causal read of a later key, a BOS default, SelectorWidth beyond its
exactness, a Map of the program changed, an equivariant perturbation of a retrieval model). Per case:

* the certifier (:func:`depthcraft.verify.certify.prove`) must not certify it;
* forged certificates must not be accepted by the checker (:func:`depthcraft.checker.check`):
  (a) the certificate the checker itself builds for the wrong model (its claims re-derived),
  (b) where the case has a correct model, that model's valid certificate re-pointed at the
  wrong weights (its ``weights_sha256`` replaced), (c) for a changed Map, the correct model's
  valid certificate checked against the changed program.

The summary counts models tried, refused by the certifier, forgeries tried and rejected by the
checker; ``tests/test_planted_bugs.py`` runs the whole corpus (every case is small) and requires
every count to be complete. Exit status 0 when everything is refused, 1 otherwise.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import sys
import time
from typing import Any, Callable, Dict, List, Optional

import numpy as np


@dataclasses.dataclass
class Case:
    """A planted bug: ``build() -> (wrong model, its RASP program, correct model or None, witness input)``."""

    name: str
    what: str
    build: Callable[[], Any]
    #: (construction, params) whose task's domain the certifier is given (its symmetry route), or None
    domain_of: Optional[tuple] = None


def _perturbed(model, layer: int, key: str, fn) -> Any:
    """A copy of ``model`` whose ``params["layers"][layer][key]`` is ``fn(array copy)`` (the program kept)."""
    params = copy.deepcopy(model.params)
    params["layers"][layer][key] = np.asarray(fn(np.array(params["layers"][layer][key])), np.float32)
    return dataclasses.replace(model, params=params)


def _compiled(sop, vocab, n, causal=False):
    from depthcraft.constructions.compiler import compile_program
    return compile_program(sop, vocab, n, causal=causal)


def _khop(k=2, n=8):
    from depthcraft.verify.lookup import resolve
    return resolve("khop_doubling", {"k": str(k), "n": str(n)}).build()


def _sink(model):
    return model.program.nodes[model.program.sink]


def cases() -> List[Case]:
    """The corpus (every model has at most a few hundred residual rows and N <= 12)."""
    from tracr.rasp import rasp
    from depthcraft.rasp_programs import pitfalls

    def pitfall(fn, vocab, n, causal=False):
        return lambda: (_compiled(fn(), vocab, n, causal), None, None)

    def weakened():  # the pointer look-up's scores scaled down: the hardmax top is no longer clear
        m = _khop()
        return _perturbed(m, 2, "w_q", lambda w: w * 0.02), m, None

    def swapped_ov():  # two OV output columns of the token copy swapped: tokens 1 and 2 read as each other
        m = _khop()
        return _perturbed(m, 1, "w_o", lambda w: w[..., [0, 2, 1] + list(range(3, w.shape[-1]))]), m, None

    def bos_default():  # BOS's value row of the last look-up writes a token where the program holds None
        m = _khop()
        labels, v_rows = m.residual_labels, list(m.arch.sublayers[1].v_rows)
        bos = next(i for i, r in enumerate(v_rows) if labels[r] == "tokens:BOS")
        one = next(i for i, r in enumerate(v_rows) if labels[r] == "tokens:1")

        def fn(w):
            w[:, bos, :] = w[:, one, :]
            return w
        return _perturbed(m, 1, "w_v", fn), m, None

    def causal_future():  # x_{i+1} compiled causally: the mask hides the key the selector picks
        sop = rasp.Aggregate(rasp.Select(rasp.indices, rasp.indices, lambda k, q: k == q + 1), rasp.tokens).named("next")
        return _compiled(sop, {0, 1, 2}, 5, causal=True), None, None

    def none_query():  # a selector whose query is None at position 1 (a shifted SOp), keyed on tokens
        prev = rasp.Aggregate(rasp.Select(rasp.indices, rasp.indices, lambda k, q: k == q - 1), rasp.tokens).named("p")
        sop = rasp.Aggregate(rasp.Select(rasp.tokens, prev, lambda k, q: k == q), rasp.indices).named("where")
        return _compiled(sop, {0, 1, 2}, 4), None, None

    def map_changed():  # the weights of one program, checked against a program whose Map differs
        good = rasp.categorical(rasp.Map(lambda t: (t + 1) % 3, rasp.tokens)).named("succ")
        m = _compiled(good, {0, 1, 2}, 3)
        other = rasp.categorical(rasp.Map(lambda t: (t + 2) % 3, rasp.tokens)).named("succ")
        return m, m, other

    def equivariant_retrieval():  # retrieval_tripling d = 5: every score of the first layer scaled alike
        from depthcraft.verify.lookup import resolve
        m = resolve("retrieval_tripling", {"d": "5"}).build()
        return _perturbed(m, 0, "w_q", lambda w: w * 0.05), m, None

    def noisy_wk():  # the previous-token head's keys perturbed until a wrong key wins
        m = _khop(1, 8)
        rng = np.random.default_rng(0)
        return _perturbed(m, 0, "w_k", lambda w: w + rng.normal(0, 3.0, w.shape)), m, None

    return [
        Case("first_token_non_unique", "categorical Aggregate selecting several positions (SPEC §8)",
             pitfall(pitfalls.first_token_non_unique, {0, 1, 2}, 4)),
        Case("none_read_downstream", "None read by a later selector (SPEC §8)",
             pitfall(pitfalls.none_read_downstream, {0, 1, 2}, 4)),
        Case("histogram_n12", "SelectorWidth beyond mlp_exactness, N = 12 (SPEC §8)",
             pitfall(pitfalls.histogram, {0, 1}, 12)),
        Case("length_n12", "length = SelectorWidth(TRUE), N = 12 (SPEC §8)", pitfall(pitfalls.length, {0, 1}, 12)),
        Case("comparison_on_none", "a Comparison predicate on None (SPEC §8)",
             pitfall(pitfalls.comparison_on_none, {0, 1, 2}, 4)),
        Case("causal_future_read", "a causal compile of a selector that picks a later key (SPEC §8)", causal_future),
        Case("none_query", "a selector whose query is None at position 1 (SPEC §8)", none_query),
        Case("weakened_lookup", "khop_doubling's pointer look-up with W_Q scaled by 0.02", weakened),
        Case("swapped_ov", "khop_doubling's token copy with two OV output columns swapped", swapped_ov),
        Case("bos_default", "khop_doubling's last occurrence writing token 1 at BOS (no match)", bos_default),
        Case("noisy_wk", "khop_doubling k = 1's previous-token keys with N(0, 3) noise", noisy_wk),
        Case("map_changed", "a Map's weights checked against a program whose Map differs", map_changed),
        Case("equivariant_retrieval", "retrieval_tripling d = 5 with its first layer's W_Q scaled by 0.05 (an "
             "equivariant perturbation: the symmetry route's weight check passes)", equivariant_retrieval,
             ("retrieval_tripling", {"d": "5"})),
    ]


def wrong_input(model, program) -> Optional[Dict[str, Any]]:
    """A concrete input where the float32 model differs from the program (all inputs up to 4 tokens, then
    all-equal and random ones), or None. The program's value: tracr's evaluator, hand-built heads
    by depthcraft's reference semantics."""
    import itertools

    from depthcraft.constructions.reference import evaluate

    vocab, n = model.vocab, model.max_seq_len
    rng = np.random.default_rng(0)
    cands = [list(x) for L in range(1, min(n, 4) + 1) for x in itertools.product(vocab, repeat=L)]
    cands += [[t] * L for t in vocab for L in range(1, n + 1)]
    cands += [[vocab[int(i)] for i in rng.integers(0, len(vocab), int(rng.integers(1, n + 1)))] for _ in range(300)]
    for xs in cands:
        try:
            want = evaluate(program, xs)
        except Exception:  # noqa: BLE001 - the program has no value (a Comparison on None): every output differs
            return {"tokens": xs, "expected": "the program raises", "got": model.run([xs])[0].tolist()}
        got = model.run([xs])[0].tolist()
        if any((g is None) != (w is None) or (g is not None and g != w) for g, w in zip(got, want)):
            return {"tokens": xs, "expected": want, "got": got}
    return None


def _domain_witness(model, program, r) -> Optional[Dict[str, Any]]:
    """A wrong input from the task's own sampler (inside its domain), or None."""
    from depthcraft.constructions.reference import evaluate
    rng = np.random.default_rng(0)
    for xs in r.task.sample(r.params, rng, 64):
        xs = [v.item() if hasattr(v, "item") else v for v in xs]
        want, got = evaluate(program, xs), model.run([xs])[0].tolist()
        if any((g is None) != (w is None) or (g is not None and g != w) for g, w in zip(got, want)):
            return {"tokens": xs, "expected": want, "got": got, "in_domain": True}
    return None


def run_case(case: Case) -> Dict[str, Any]:
    """One case: its witness, the certifier's verdict, and the checker's on each forgery."""
    from depthcraft import checker
    from depthcraft.verify.certify import prove
    from depthcraft.verify.certify.certificate import checker_model

    t0 = time.perf_counter()
    wrong, good, other = case.build()
    program = other if other is not None else _sink(wrong)
    row: Dict[str, Any] = {"name": case.name, "what": case.what}
    row["witness"] = wrong_input(wrong, program)
    if other is None:
        kw = {}
        if case.domain_of is not None:
            from depthcraft.verify.lookup import resolve
            r = resolve(*case.domain_of)
            kw = {"domain": r.task.domain(r.params), "precondition": r.task.domain_precondition(r.params)}
            row["witness"] = _domain_witness(wrong, program, r) or row["witness"]
        cert = prove(wrong, **kw)
        row["certifier_refused"] = not cert.certified
        row["certifier_why"] = next((u["why"] for u in cert.to_json().get("uncertified", [])), None)
    else:  # the certifier certifies the weights for THEIR program; the forgery is the other program
        row["certifier_refused"] = True
        row["certifier_why"] = "the certificate names the weights' own program (another program is a forgery)"
    cm = checker_model(wrong)
    forged = []
    if other is None:
        file, verdict = checker.build(cm, _sink(wrong), "tables", {}, {"tool": "planted-bug forgery"})
        forged.append(("own claims", file))
    if good is not None and other is None:
        gfile, gverdict = checker.build(checker_model(good), _sink(good), "tables", {}, {"tool": "planted"})
        if gverdict.valid:
            gfile = dict(gfile, weights_sha256=cm.sha256)
            forged.append(("the correct model's certificate, re-pointed", gfile))
    if other is not None:
        gfile, gverdict = checker.build(cm, _sink(wrong), "tables", {}, {"tool": "planted"})
        forged.append(("the weights' valid certificate, checked against the changed program", gfile))
    results = []
    for what, file in forged:
        try:
            v = checker.check(checker.certificate.parse(checker.write("x.json", file)), cm,
                              program if other is not None else _sink(wrong))
            results.append({"forgery": what, "accepted": bool(v.valid), "status": v.status, "why": v.failure})
        except checker.NotACertificate as e:
            results.append({"forgery": what, "accepted": False, "status": "not a certificate", "why": str(e)})
    row["forgeries"] = results
    row["seconds"] = round(time.perf_counter() - t0, 2)
    return row


def summarise(rows: List[Dict[str, Any]]) -> Dict[str, Any]:
    forg = [f for r in rows for f in r["forgeries"]]
    return {"models": len(rows), "wrong_models_confirmed": sum(r["witness"] is not None for r in rows),
            "refused_by_certifier": sum(bool(r["certifier_refused"]) for r in rows),
            "forgeries": len(forg), "forgeries_rejected_by_checker": sum(not f["accepted"] for f in forg)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", default="results/certify/planted_bugs.json")
    args = ap.parse_args(argv)
    import logging
    import warnings
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    from depthcraft.constructions.files import write_json_atomic

    rows = [run_case(c) for c in cases()]
    summary = summarise(rows)
    write_json_atomic(args.json, {"command": "python benchmarks/planted_bugs.py --json " + args.json,
                                  "summary": summary, "cases": rows})
    for r in rows:
        print(f"{r['name']:24s} wrong={'yes' if r['witness'] else 'NO'} certifier_refused={r['certifier_refused']} "
              f"forgeries_rejected={sum(not f['accepted'] for f in r['forgeries'])}/{len(r['forgeries'])}")
    print(json.dumps(summary))
    ok = summary["refused_by_certifier"] == summary["models"] and \
        summary["forgeries_rejected_by_checker"] == summary["forgeries"] and \
        summary["wrong_models_confirmed"] == summary["models"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
