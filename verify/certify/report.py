"""The driver: runs the abstract state through every sublayer, checks the read-out, builds the report.

Soundness argument. By induction over the sublayers: before each one, every residual row of
every position of every input of length 1..N lies within its radius of one of the block's
ideal vectors (the embedding is exact: radius 0). Each sublayer is certified from that
state (:mod:`.heads`, :mod:`.relu` for a ReLU model's heads, :mod:`.mlps`); its ideal writes
and radii extend the state
(:func:`state.write`), so the invariant holds after it. Heads of one sublayer add their
writes: every combination of their ideal outputs is an ideal vector of the sum, and their
radii add. At the read-out every ideal output vector must decode (argmax, or "no value"
below 0.5) with a margin above twice the read-out error, so the float32 forward decodes to
what the exact hardmax evaluation decodes. The first sublayer that cannot be certified
stops the analysis (later inputs are not defined); it is named with a witness.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, Optional, Tuple

import numpy as np

from depthcraft.constructions.model import CompiledModel, sublayer_names
from depthcraft.constructions.nodes import is_multi
from depthcraft.constructions.reference import evaluate as reference_evaluate
from depthcraft.verify.certify import float32
from depthcraft.verify.certify.float32 import U32, gamma, terms
from depthcraft.verify.certify.heads import certify_head
from depthcraft.verify.certify.mlps import certify_mlp
from depthcraft.verify.certify.program import Decoder, NoSemantics, check_head, check_mlp, check_readout
from depthcraft.verify.certify import sets
from depthcraft.verify.certify.relu import certify_relu_head
from depthcraft.verify.certify.values import level_clean_reason
from depthcraft.verify.certify.state import (MAX_TUPLES, Block, State, TooLarge, Unclean, blocks_of, describe,
                                             initial_state, lin_err, side, unique_min, write)


def _num(x: Optional[float]) -> Optional[float]:
    """JSON-safe float: inf becomes None."""
    return None if x is None or not np.isfinite(x) else float(x)


def _readout(model: CompiledModel, state: State, blocks: Dict[str, Block]):
    """(decode margin, error bound, uncertified or None) for every ideal output."""
    u = np.asarray(model.params["unembed"]["w"], np.float64)
    rows = np.flatnonzero(np.abs(u).sum(1) > 0)
    sd = side(state, blocks, rows, u[rows], model.max_seq_len)
    reg = sd.kind == 1
    logits = sd.contrib[reg]
    err = (lin_err(state, list(blocks.values()), rows, u[rows])[None, :]
           + gamma(terms(u[rows]) + 1, U32) * sd.absval[reg])
    err = err.max(1)
    if not model.categorical_output:  # a number: its error bound, compared with atol by the caller
        return None, float(err.max()), None
    top = np.sort(logits, 1)
    best = top[:, -1]
    second = top[:, -2] if logits.shape[1] > 1 else np.full(len(logits), -np.inf)
    none = best < 0.5
    # a value: the top logit must beat the others and stay >= 0.5; no value: every logit must stay < 0.5
    margin = np.where(none, 0.5 - best, np.minimum(best - second, 2 * (best - 0.5)))
    ok = margin > 2 * err
    if not ok.all():
        i = int(np.flatnonzero(~ok)[0])
        return float(margin.min()), float(err.max()), {
            "why": f"read-out margin {margin[i]:.4g} is not above twice the error bound {err[i]:.4g}",
            "witness": {"output": describe(sd, int(np.flatnonzero(reg)[i]), blocks, state)}}
    return float(margin.min()), float(err.max()), None


#: A wrong input found by :func:`_wrong_input` matches a numerical output within this.
WITNESS_ATOL = 1e-3
#: The witness search tries the all-equal inputs of at most this many tokens, for at most this long.
WITNESS_TOKENS, WITNESS_SECONDS = 16, 30.0


class _NoEvaluator(Exception):
    """Neither tracr's evaluator nor the hand-built heads' reference semantics evaluates the program."""


def _first_wrong(model: CompiledModel, program: Any, batch) -> Optional[Dict[str, Any]]:
    """The first input of ``batch`` (same length) where the model's output differs from the program's.

    Raises:
        _NoEvaluator: the program has no evaluator semantics.
    """
    from tracr.rasp import rasp  # the program's own evaluator
    got = model.run(batch)
    for tokens, row in zip(batch, got):
        try:
            want = rasp.evaluate(program, list(tokens))
        except Exception:  # noqa: BLE001 - hand-built heads: their reference semantics (SPEC §6)
            try:
                want = reference_evaluate(program, list(tokens))
            except Exception as e:  # noqa: BLE001 - no evaluator semantics at all
                raise _NoEvaluator() from e
        wrong = []
        for i, (g, w) in enumerate(zip(row.tolist(), want)):
            if isinstance(w, frozenset):  # a set-valued output: the set of the one decoded token
                bad = w != (frozenset() if g is None else frozenset([g]))
            elif model.categorical_output:
                bad = g != w
            else:
                bad = g is None or w is None or not abs(float(g) - float(w)) <= WITNESS_ATOL
            if bad:
                wrong.append(i)
        if wrong:
            val = lambda v: v.item() if isinstance(v, np.generic) else v  # noqa: E731
            show = lambda v: sorted(map(val, v), key=repr) if isinstance(v, frozenset) else val(v)  # noqa: E731
            return {"tokens": [val(t) for t in tokens], "positions": [i + 1 for i in wrong],
                    "expected": [show(want[i]) for i in wrong], "got": [val(row[i]) for i in wrong]}
    return None


def _wrong_input(model: CompiledModel, seed: int = 0, candidates=(), hand_built: bool = False
                 ) -> Optional[Dict[str, Any]]:
    """A concrete input on which the float32 model's output differs from the RASP program's, or None.

    Run after the certificate fails, to turn an abstract witness into a reproducible one: the
    ``candidates`` first (inputs an analysis built from its witness, e.g. :func:`.sets.fan_in_inputs`),
    then the all-equal inputs of every length (where tracr's SelectorWidth and means break first),
    then a few random inputs per length (at most :data:`WITNESS_TOKENS` all-equal inputs per length,
    :data:`WITNESS_SECONDS` in all). The program's value is tracr's evaluator on the output
    SOp, or for hand-built heads their reference semantics (:func:`constructions.reference.evaluate`;
    None when neither evaluates). A search, not a proof: None says only that none of these
    inputs is wrong. A set-valued output is right when it is the set of the one decoded token
    (empty: no value).

    ``hand_built``: also try random inputs over the first three tokens (repeats, where a ReLU
    head adds several keys).
    """
    link = model.program
    if link is None or link.sink not in link.nodes:
        return None
    program = link.nodes[link.sink]
    vocab = list(model.vocab)
    n = int(model.max_seq_len)
    rng = np.random.default_rng(seed)
    lengths = list(range(1, n + 1)) if n <= 64 else sorted({1, 2, n} | set(int(x) for x in rng.integers(1, n, 13)))
    same = vocab[:WITNESS_TOKENS]
    by_length: Dict[int, list] = {}
    for c in candidates:
        if 1 <= len(c) <= n:
            by_length.setdefault(len(c), []).append(list(c))
    batches = [b for _, b in sorted(by_length.items())]
    batches += [[[t] * length for t in same] + [[vocab[int(i)] for i in rng.choice(len(vocab), length)]
                                                for _ in range(4)]
                + ([[vocab[int(i)] for i in rng.choice(min(3, len(vocab)), length)] for _ in range(8)]
                   if hand_built else []) for length in lengths]
    t0 = time.perf_counter()
    for batch in batches:
        if time.perf_counter() - t0 > WITNESS_SECONDS:
            return None
        try:
            found = _first_wrong(model, program, batch)
        except _NoEvaluator:
            return None
        except Exception:  # noqa: BLE001 - a witness is best effort
            return None
        if found is not None:
            return found
    return None


def _program_entry(layer: str, head: Optional[int], check: Callable[[], None],
                   model: Optional[CompiledModel] = None) -> Optional[Dict[str, Any]]:
    """Run one program check (:mod:`.program`); its ``uncertified`` entry, or None when it holds.

    Given ``model``, a table that differs from the program also gets ``witness["wrong_input"]``
    (:func:`_wrong_input`: a concrete input where the model errs, or None when none is found).
    """
    try:
        check()
    except Unclean as e:
        witness = e.witness
        if model is not None:
            witness = dict(witness) if isinstance(witness, dict) else {"detail": witness}
            witness["wrong_input"] = _wrong_input(model, hand_built=model.arch.attention == "relu")
        return {"layer": layer, "head": head, "check": "program", "why": e.why, "witness": witness}
    except NoSemantics as e:
        return {"layer": layer, "head": head, "check": "program", "why": f"not checked against the program: {e}",
                "witness": {"not_checked": str(e)}}
    except TooLarge as e:
        return {"layer": layer, "head": head, "check": "program", "why": f"program table too large: {e}",
                "witness": {"too_large": str(e)}}
    return None


def _relu_outputs(model: Optional[CompiledModel], state: State, blocks: Dict[str, Block], dec: Optional[Decoder],
                  spec, p, h: int):
    """(sums_ok, to_readout) of ReLU head ``h``: whether every block it writes is a set-valued SOp of the
    program (a union of several keys' reads; False without a program), and whether the unembedding
    reads a row it writes."""
    out_rows = spec.rows("out_rows", len(state.radius))
    wvo = np.asarray(p["w_v"][h], np.float64) @ np.asarray(p["w_o"][h], np.float64)
    live = out_rows[np.abs(wvo).sum(0) > 0]
    written = [nm for nm, b in blocks.items() if np.isin(live, b.rows).any()]
    sums_ok = dec is not None and bool(written) and all(is_multi(dec.link.nodes.get(nm)) for nm in written)
    to_readout = False
    if model is not None:
        u = np.asarray(model.params["unembed"]["w"], np.float64)
        to_readout = bool(np.isin(live, np.flatnonzero(np.abs(u).sum(1) > 0)).any())
    return sums_ok, to_readout


def _attention(cert: Dict[str, Any], state: State, blocks: Dict[str, Block], name: str, spec, p,
               n: int, causal: bool, dec: Optional[Decoder], relu: bool = False) -> Optional[Dict[str, Any]]:
    """Certify one attention sublayer, head by head, and write its heads' sum into the state.

    Returns the ``uncertified`` entry of the first head whose float32 part fails (None when all
    hold); appends one ``per_layer`` entry per certified head, and to ``cert["program_failures"]``
    the first program-check entry of each head (``dec`` None: no program linked, not checked).
    """
    d = len(state.radius)
    out_rows = spec.rows("out_rows", d)
    writes, radius, l1_sum = [], np.zeros(len(out_rows)), {}
    r_in = float(state.radius[np.unique(np.concatenate(
        [spec.rows(k, d) for k in ("q_rows", "k_rows", "v_rows")]))].max(initial=0))
    nh = np.asarray(p["w_q"]).shape[0]
    for h in range(nh):
        # the value analysis speaks of the RASP values: it holds for the ideal vectors only while every
        # sublayer so far is proved to be its expression (the decoded values are then the program's)
        if relu:  # weights relu(score), no normalisation: exact sums over the on keys (.relu)
            sums_ok, to_readout = _relu_outputs(cert.get("model"), state, blocks, dec, spec, p, h)
            hc = certify_relu_head(state, blocks, spec, p, h, n, causal, sums_ok, to_readout)
        else:
            clean_by = level_clean_reason(state, blocks, dec, spec, p, h) \
                if dec is not None and not cert["program_failures"] else None
            hc = certify_head(state, blocks, spec, p, h, n, causal, clean_by)
        if hc.failure is not None:
            if relu and cert.get("model") is not None:  # a concrete input, with the heads' reference semantics
                hc.failure["witness"] = {**hc.failure["witness"],
                                         "wrong_input": _wrong_input(cert["model"], hand_built=True)}
            return {"layer": name, "head": h, "check": "float32", **hc.failure}
        if dec is not None:
            eps = hc.tables[1]
            bad = _program_entry(name, h, lambda: check_head(state, blocks, dec, spec, p, h, n, causal, eps),
                                 cert.get("model") if not cert["program_failures"] else None)
            if bad is not None:
                cert["program_failures"].append(bad)
                if "level_clean_by" in hc.entry:  # the value analysis speaks of the program: void here
                    return {"layer": name, "head": h, "check": "float32",
                            "why": "categorical aggregate: a level that can be the top holds several positions; the "
                                   "value analysis that makes it clean needs the head's table to be its selector, "
                                   "and it is not", "witness": {"level": hc.entry["level_clean_witness"],
                                                                "program": bad["why"]}}
        writes.append(hc.outs)
        radius = radius + hc.r_out[0]
        for k, v in hc.r_out[1].items():
            l1_sum[k] = l1_sum.get(k, 0.0) + v
        e = hc.entry
        cert["per_layer"].append({"layer": name, "head": h, "min_gap": _num(e["min_gap"]),
                                  "delta": _num(e["delta"]), "leak_bound": _num(e["leak_bound"]),
                                  "radius_in": r_in, "radius_out": None,
                                  **({"level_clean_by": e["level_clean_by"]} if "level_clean_by" in e else {})})
    # heads add their writes: every combination of the heads' ideal outputs, per position kind
    totals = []
    for kind in (0, 1):
        total, tg = writes[0][kind]
        for w in writes[1:]:
            wv, wg = w[kind]
            if len(total) * len(wv) > MAX_TUPLES:
                raise TooLarge("combinations of the heads' outputs")
            total, tg = unique_min((total[:, None, :] + wv[None, :, :]).reshape(-1, total.shape[1]),
                                   np.maximum(tg[:, None], wg[None, :]).ravel())
        totals.append((total, tg))
    write(state, blocks, out_rows, totals, (radius, l1_sum))
    for e in cert["per_layer"][-nh:]:
        e["radius_out"] = float(state.radius[out_rows].max(initial=0))
    return None


def _set_role(state: State, blocks: Dict[str, Block], spec, p, dec: Optional[Decoder],
              roles: Dict[str, str]) -> Optional[Tuple[str, str]]:
    """(role, block) of a sublayer that the set analysis handles (:mod:`.sets`), else None.

    ``union``: a head writing a union's scratch block; ``copy``: a head whose value reads a set
    block; ``threshold``: an MLP writing a set block from its scratch; ``meet``: an MLP writing a
    :class:`~constructions.nodes.SetMeet`. Needs the program (which SOps are sets).
    """
    if dec is None or not roles:
        return None
    d = len(state.radius)
    out_rows = spec.rows("out_rows", d)
    written = [nm for nm, b in blocks.items() if np.isin(out_rows, b.rows).any()]
    if spec.kind == "attn":
        reads = spec.rows("v_rows", d)
        if len(written) == 1 and roles.get(written[0]) == "scratch":
            return "union", written[0]
        if len(written) == 1 and any(np.isin(reads, r).any() for r in state.setdom_rows.values()):
            return "copy", written[0]
        return None
    reads = spec.rows("in_rows", d)
    if len(written) == 1 and roles.get(written[0]) == "set" and roles.get(written[0] + sets.SCRATCH) == "scratch" \
            and written[0] + sets.SCRATCH in state.setdom:
        return "threshold", written[0]
    if len(written) == 1 and isinstance(dec.link.nodes.get(written[0]), sets.SetMeet):
        return "meet", written[0]
    return None


def _set_sublayer(cert: Dict[str, Any], state: State, blocks: Dict[str, Block], name: str, spec, p, n: int,
                  causal: bool, dec: Decoder, role: str, out: str) -> Optional[Dict[str, Any]]:
    """Certify one sublayer of the set analysis (:mod:`.sets`) and write it into the state.

    Returns the ``uncertified`` entry when its float32 part fails (None when it holds); a
    program-check failure goes to ``cert["program_failures"]``.
    """
    d = len(state.radius)
    out_rows = spec.rows("out_rows", d)
    model = cert.get("model") if not cert["program_failures"] else None
    head = 0 if spec.kind == "attn" else None
    if spec.kind == "attn" and np.asarray(p["w_q"]).shape[0] != 1:
        return {"layer": name, "head": None, "check": "float32", "why": "a set sublayer with several heads",
                "witness": None}
    r_in = float(state.radius[np.unique(np.concatenate(
        [spec.rows(k, d) for k in (("q_rows", "k_rows", "v_rows") if spec.kind == "attn" else ("in_rows",))]))]
        .max(initial=0))
    entry = {"min_gap": None, "delta": None, "leak_bound": None}
    try:
        if role == "union":
            e, dom, r_out, t = sets.certify_union_head(state, blocks, spec, p, 0, n, causal, out)
            bad = _program_entry(name, 0, lambda: sets.check_union_head(state, blocks, dec, spec, p, 0, n, t, out),
                                 model)
            sets.register_write(state, blocks, out, dom, out_rows, r_out, write)
            entry = e
        elif role == "copy":
            e, dom, r_out, (t, eps) = sets.certify_set_copy(state, blocks, spec, p, 0, n, causal, out)

            def check():
                check_head(state, blocks, dec, spec, p, 0, n, causal, eps, values=False)
                sets.check_set_copy(state, blocks, dec, spec, p, 0, out, dom)
            bad = _program_entry(name, 0, check, model)
            sets.register_write(state, blocks, out, dom, out_rows, r_out, write)
            entry = e
        elif role == "threshold":
            dom, r_out, table = sets.certify_threshold_mlp(state, blocks, spec, p, n, out)
            bad = _program_entry(name, None, lambda: sets.check_threshold_mlp(blocks, out, table), model)
            sets.register_write(state, blocks, out, dom, out_rows, r_out, write)
        else:
            outs, r_out, wrong = sets.certify_meet_mlp(state, blocks, spec, p, n, dec, dec.link.nodes[out])

            def check():
                if wrong is not None:
                    raise wrong
            bad = _program_entry(name, None, check, model)
            write(state, blocks, out_rows, outs, (r_out, {out: float(np.sum(r_out))}))
    except Unclean as e:
        witness = dict(e.witness) if isinstance(e.witness, dict) else {"detail": e.witness}
        candidates = sets.fan_in_inputs(dec, list(cert["model"].vocab), out, witness, n) \
            if role == "threshold" and "model" in cert else []
        witness["wrong_input"] = _wrong_input(cert["model"], candidates=candidates) if "model" in cert else None
        return {"layer": name, "head": head, "check": "float32", "why": e.why, "witness": witness}
    if bad is not None:
        cert["program_failures"].append(bad)
    cert["per_layer"].append({"layer": name, "head": head, "min_gap": _num(entry["min_gap"]),
                              "delta": _num(entry["delta"]), "leak_bound": _num(entry["leak_bound"]),
                              "radius_in": r_in, "radius_out": float(state.radius[out_rows].max(initial=0)),
                              "set_analysis": role})
    return None


def _mlp(cert: Dict[str, Any], state: State, blocks: Dict[str, Block], name: str, spec, p, n: int,
         dec: Optional[Decoder]) -> None:
    """Certify one MLP sublayer, check its tables against the program, and write its ideal outputs
    into the state (one ``per_layer`` entry)."""
    d = len(state.radius)
    out_rows = spec.rows("out_rows", d)
    r_in = float(state.radius[spec.rows("in_rows", d)].max(initial=0))
    ideal, sd, r_out = certify_mlp(state, blocks, spec, p, n)
    if dec is not None:
        bad = _program_entry(name, None, lambda: check_mlp(state, blocks, dec, spec, p, n),
                             cert.get("model") if not cert["program_failures"] else None)
        if bad is not None:
            cert["program_failures"].append(bad)
    write(state, blocks, out_rows, [(ideal[sd.kind == k], sd.guard[sd.kind == k]) for k in (0, 1)], r_out)
    cert["per_layer"].append({"layer": name, "head": None, "min_gap": None, "delta": None,
                              "leak_bound": None, "radius_in": r_in,
                              "radius_out": float(state.radius[out_rows].max(initial=0))})


def _scopes(model: CompiledModel) -> Dict[str, str]:
    """The ``scope`` sentence of each outcome: the program proved, only the weights' hardmax, nothing."""
    n = int(model.max_seq_len)
    inputs = (f"every input of length 1..{n} over the {len(model.vocab)}-token vocabulary (BOS first), every "
              f"position 1..n")
    hardmax = (f"the float32 {model.arch.attention} forward decodes to the output of the exact hardmax "
               f"evaluation of the same weights")
    return {
        "program": f"{inputs}: the float32 forward decodes to the RASP program's output (tracr's evaluator, "
                   f"with the hand-built heads' reference semantics): every head's selection and OV tables "
                   f"and every MLP's look-up table equal their RASP expressions over the value sets, and "
                   f"{hardmax}",
        "hardmax": f"{inputs}: only that {hardmax} (float32_matches_hardmax); NOT that the weights compute "
                   f"the RASP program (see uncertified)",
        "none": f"{inputs}: nothing proved (see uncertified)"}


def certify(model: CompiledModel, atol: float = 1e-3, domain: Optional[str] = None) -> Dict[str, Any]:
    """Prove (or fail to prove) that ``model`` computes its RASP program on every input of length 1..N.

    Two facts, both over every input: the float32 forward decodes like the exact hardmax
    evaluation of the same weights (``float32_matches_hardmax``: :mod:`.heads`, :mod:`.mlps`),
    and every head's and MLP's tables equal the RASP expression it was compiled from
    (:mod:`.program`, from ``model.program``). ``certified`` is their conjunction: the weights
    compute the RASP program (SPEC §6).

    Args:
        model: a compiled model (softmax or ReLU attention, :mod:`.relu`; tracr's one-hot SOp layout).
        atol: a numerical output is certified when its proved error (float32 radius plus the
            deviation of the weights' values from the program's) is within this.
        domain: the task's declared input domain in words (:meth:`Task.domain`), or None. It is
            reported (key ``domain``: ``{"predicate", "used_as_precondition"}``) and named in
            ``scope``; the tables do NOT yet use it as a precondition, so what is proved is proved
            for every input, a fortiori for the domain, and what fails over every input is not
            certified (it may still hold on the domain: say so, never "every input").
    Returns:
        ``{"certified": bool, "float32_matches_hardmax": bool, "scope": str, "per_layer":
        [{"layer", "head", "min_gap", "leak_bound", "radius_in", "radius_out"}], "uncertified":
        [{"layer", "head", "check", "why", "witness"}], "readout": {"margin", "error"},
        "float32": str, "seconds": float}``. ``layer`` is the sublayer's display name
        (``attn 2``, ``MLP 1``) and ``head`` the 0-based head (None for an MLP); ``check`` is
        ``"float32"`` (the weights' own hardmax: the first sublayer it cannot prove; later
        sublayers are not analysed, their inputs are not defined) or ``"program"`` (a table
        differs from its expression, or has no semantics here: one entry per head or MLP,
        in sublayer order, the float32 analysis goes on).
    Raises:
        ValueError: the model is not a compiled model's layout (biases, layer norm).
    """
    t0 = time.perf_counter()
    n = int(model.max_seq_len)
    scopes = _scopes(model)
    cert: Dict[str, Any] = {"certified": False, "float32_matches_hardmax": False, "scope": scopes["none"],
                            "per_layer": [], "uncertified": [], "readout": None, "seconds": None,
                            "float32": float32.DESCRIPTION, "program_failures": [], "model": model}

    def done():
        program = cert.pop("program_failures")
        cert.pop("model", None)
        float_fail = list(cert["uncertified"])
        cert["uncertified"] = sorted(program + float_fail, key=lambda e: _order.get((e["layer"], e["head"]), 1 << 30))
        cert["certified"] = cert["float32_matches_hardmax"] and not program
        cert["scope"] = scopes["program" if cert["certified"] else "hardmax" if cert["float32_matches_hardmax"]
                               else "none"]
        if domain is not None:
            cert["domain"] = {"predicate": domain, "used_as_precondition": False}
            cert["scope"] += (f". The task's inputs satisfy a declared domain ({domain}); the proof does not use "
                              f"it as a precondition" + (", so it covers every input, those outside the domain too"
                                                         if cert["certified"] else
                                                         ", and nothing is certified on the domain either"))
        cert["seconds"] = round(time.perf_counter() - t0, 3)
        return cert

    _order: Dict[Any, int] = {}

    if model.arch.layer_norm:
        raise ValueError("certify: the model has layer norm (a trained model, not a compiled one)")
    if model.arch.attention not in ("softmax", "relu"):
        cert["uncertified"].append({"layer": None, "head": None, "check": "float32", "witness": None,
                                    "why": f"{model.arch.attention} attention: the certifier proves softmax and "
                                           f"ReLU models"})
        return done()
    blocks = {b.name: b for b in blocks_of(model)}
    state = initial_state(model, list(blocks.values()))
    names = sublayer_names(model.arch)
    for i, name in enumerate(names):
        for h in range(np.asarray(model.params["layers"][i].get("w_q", np.zeros((1,)))).shape[0]):
            _order[(name, h)] = 2 * i
        _order[(name, None)] = 2 * i + 1
    _order[("read-out", None)] = 2 * len(names)
    dec = Decoder.of(model, blocks) if model.program is not None else None
    if dec is None:
        cert["program_failures"].append({"layer": None, "head": None, "check": "program", "witness": None,
                                         "why": "no RASP program is linked to these weights (a loaded or "
                                                "hand-made model): only float32_matches_hardmax can be proved"})
        _order[(None, None)] = -1
    roles = sets.set_blocks(dec, blocks) if dec is not None else {}
    soft = {i for i in model.meta.get("soft_attention_layers", ())}
    attn_no = -1
    for name, spec, p in zip(names, model.arch.sublayers, model.params["layers"]):
        if any(k.startswith("b_") for k in p if k not in ("b_1", "b_2")) or "ln" in p:
            raise ValueError(f"certify: sublayer {name} has biases or layer norm (not a compiled model)")
        try:
            role = _set_role(state, blocks, spec, p, dec, roles)
            if role is not None:
                attn_no += spec.kind == "attn"
                if spec.kind == "attn" and attn_no in soft:
                    raise Unclean("soft by design (a memorising head averages over several keys)", {"layer": name})
                fail = _set_sublayer(cert, state, blocks, name, spec, p, n, model.arch.causal, dec, *role)
                if fail is not None:
                    cert["uncertified"].append(fail)
                    return done()
                continue
            if spec.kind == "attn":
                attn_no += 1
                if attn_no in soft:
                    raise Unclean("soft by design (a memorising head averages over several keys)",
                                  {"layer": name})
                fail = _attention(cert, state, blocks, name, spec, p, n, model.arch.causal, dec,
                                  relu=model.arch.attention == "relu")
                if fail is not None:
                    cert["uncertified"].append(fail)
                    return done()
            else:
                _mlp(cert, state, blocks, name, spec, p, n, dec)
        except Unclean as e:
            witness = dict(e.witness) if isinstance(e.witness, dict) else {"detail": e.witness}
            witness["wrong_input"] = _wrong_input(model)  # a concrete input where the model errs, if found
            cert["uncertified"].append({"layer": name, "head": None, "check": "float32", "why": e.why,
                                        "witness": witness})
            return done()
        except TooLarge as e:
            cert["uncertified"].append({"layer": name, "head": None, "check": "float32",
                                        "why": f"table too large to enumerate: {e}", "witness": {"too_large": str(e)}})
            return done()
    margin, err, bad = _readout(model, state, blocks)
    cert["readout"] = {"margin": margin, "error": err}
    if bad is not None:
        cert["uncertified"].append({"layer": "read-out", "head": None, "check": "float32", **bad})
        return done()
    if dec is not None:
        dev = []
        bad = _program_entry("read-out", None, lambda: dev.append(check_readout(model, state, blocks, dec)))
        if bad is not None:
            cert["program_failures"].append(bad)
        elif not model.categorical_output:  # a number: within atol of the program's value, or not certified
            total = err + dev[0]
            cert["readout"].update(program_deviation=dev[0], atol=atol)
            if not total <= atol:
                cert["program_failures"].append({
                    "layer": "read-out", "head": None, "check": "program", "witness": {"error": total, "atol": atol},
                    "why": f"numerical output: error bound {total:.4g} (float32 {err:.4g} + program deviation "
                           f"{dev[0]:.4g}) is not within atol {atol:g}"})
    if not model.categorical_output and dec is None:
        cert["uncertified"].append({"layer": "read-out", "head": None, "check": "float32", "witness": None,
                                    "why": "numerical read-out with no program: no atol claim"})
        return done()
    cert["float32_matches_hardmax"] = True
    return done()
