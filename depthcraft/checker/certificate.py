"""The certificate file, its obligations, and the check.

A certificate (JSON; gzip-compressed when its name ends in ``.gz``) says what is proved about
which weights and which program, by which route, and records every number of the proof::

    {"format": "depthcraft-certificate", "version": 1,
     "weights_sha256": ..., "program": {"sink", "nodes": {label: [type, [children]]}},
     "max_seq_len": N, "vocab": [...], "causal": bool, "attention": "softmax",
     "route": "tables" | "exhaustive" | "symmetry", "premises": {...}, "scope": "...",
     "claims": {...}, "issued_by": {...}}

``claims`` per route: **tables**: ``sublayers`` (per head / MLP part: the program node and rule,
``min_gap``, ``delta``, ``eps``, ``leak_bound``, ``radius_out``, the candidate top levels'
count and digest; per sublayer the decoded value sets of the blocks it writes, at BOS and at
regular positions, and their row radii) and ``readout`` (``margin``, ``error``).
**exhaustive**: ``premises.inputs`` (every input, as token values) and ``claims``
``{"inputs", "min_margin", "max_error"}``. **symmetry** (:mod:`.symmetry`).

:func:`check` re-derives every number from the weights and the program and accepts only when
(1) the file is a certificate of this version, about these weights (SHA-256) and this program
(its structure), with the checker's own scope for this route and premises; (2) every obligation
holds with the checker's own numbers (gaps above twice the score error, leaks below 1, read-out
margins above their errors, every table equal to the program's); and (3) every claim agrees with
the re-derivation: an upper bound (delta, eps, leak, radius, error) is not below it, a lower bound
(gap, margin) not above it (relative tolerance 1e-9, for float64 summation order across machines:
soundness rests on (2), which uses only the checker's numbers), a value set contains the derived
one, counts and digests are equal. A hint it cannot verify makes the certificate invalid.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from depthcraft.checker import forward, program as prog, state as S, tables as T
from depthcraft.checker.modelfile import Model

FORMAT, VERSION = "depthcraft-certificate", 1
ROUTES = ("tables", "exhaustive", "symmetry")
TOL = 1e-9
UPPER = ("delta", "eps", "leak_bound", "radius_out", "error", "max_error", "hidden_error")
LOWER = ("min_gap", "margin", "min_margin")


class NotACertificate(Exception):
    """The file is not a certificate of this format, or not about these weights or this program (exit 2)."""


@dataclasses.dataclass
class Verdict:
    """The checker's answer: ``valid``; ``proved`` (one line: what is proved); ``failure`` (the first
    failing obligation, with its numbers) and ``witness`` when not valid; ``seconds``."""

    valid: bool
    proved: str
    failure: Optional[str] = None
    witness: Any = None
    seconds: float = 0.0
    #: the route or a block of it is one this checker version does not check (``failure`` says which)
    unsupported: bool = False
    #: ``valid``; ``rejected`` (a table differs from the program, or a claim is not supported); ``unproved``
    #: (the checker's float32 bounds or rules do not prove it); ``unsupported`` (not independently checked)
    status: str = "valid"


def scope(route: str, n: int, vocab: Sequence[Any], premises: Dict[str, Any]) -> str:
    """The one sentence the checker proves for a route (the certificate must carry exactly this)."""
    what = "the float32 forward (any summation order) decodes to the RASP program's output at every position"
    if route == "tables":
        if "atol" in premises:
            what = (f"the float32 forward (any summation order) is within {premises['atol']:g} of the RASP program's "
                    f"(numerical) output at every position")
        return f"every input of length 1..{n} over the {len(vocab)}-token vocabulary (BOS first): {what}"
    if route == "exhaustive":
        where = "at its last position" if premises.get("positions") == "last" else "at every position"
        return (f"each of the {len(premises.get('inputs', []))} inputs the certificate lists, {where}: the model "
                f"decodes to the RASP program's output (for any float32 summation order on the inputs the claims "
                f"count as bounded; on the others as the checker's own float32 forward and the exact forward "
                f"compute it)")
    return (f"every input in the domain \"{premises.get('domain')}\", given that it is the union of the orbits of "
            f"the {len(premises.get('representatives', []))} listed inputs under the listed renamings: {what}")


# --------------------------------------------------------------------------------------- derive


def _jv(v: Any) -> Any:
    if isinstance(v, np.generic):
        v = v.item()
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, tuple):
        return {"tuple": [_jv(x) for x in v]}
    if isinstance(v, frozenset):
        return {"set": sorted((_jv(x) for x in v), key=repr)}
    return {"repr": repr(v)}


def _state_claim(ctx: T.Context, written: List[str]) -> Dict[str, Any]:
    out = {}
    for nm in written:
        b = ctx.blocks[nm]
        entry = {}
        for kind, key in ((0, "bos"), (1, "regular")):
            vals = ctx.values(nm, ctx.st.sets[kind][nm])
            entry[key] = sorted({json.dumps(_jv(v) if v is not S.AMBIGUOUS else {"vector": [round(float(x), 9) for x in
                                                                                          vec]})
                                 for v, vec in zip(vals, ctx.st.sets[kind][nm])})
        entry["radius"] = float(ctx.st.radius[b.rows].max(initial=0.0))
        out[nm] = entry
    return out


def derive_tables(model: Model, sink: Any, premises: Optional[Dict[str, Any]] = None
                  ) -> Tuple[Dict[str, Any], Optional[S.Refused], Optional[str]]:
    """(claims, the first refusal or None, where it happened) of the tables route."""
    nodes = prog.graph(sink)
    vocab = [model.input_values[i] for i in model.vocab_ids]
    claims: Dict[str, Any] = {"sublayers": [], "readout": None}
    where = None
    try:
        blocks = S.blocks_of(model, prog.value_sets(nodes, vocab, model.n))
        ctx = T.Context(model, sink, blocks, S.initial(model, blocks))
        where = "embedding"
        T.embedding(ctx)
        if not model.categorical:
            ctx.atol = float((premises or {}).get("atol", 1e-3))
        count = {"attn": 0, "mlp": 0}
        for sub, p in zip(model.subs, model.layers):
            count[sub["kind"]] += 1
            where = f"{'attn' if sub['kind'] == 'attn' else 'MLP'} {count[sub['kind']]}"
            parts = T.attention(ctx, sub, p, where) if sub["kind"] == "attn" else T.mlp(ctx, sub, p, where)
            written = sorted(S.row_blocks(blocks, sub["out_rows"]))
            claims["sublayers"].append({"layer": where, "parts": parts, "state_after": _state_claim(ctx, written)})
        where = "read-out"
        claims["readout"] = T.readout(ctx)
    except S.Refused as e:
        return claims, e, where
    except prog.ProgramError as e:
        return claims, S.Unsupported(str(e)), where
    return claims, None, None


def derive_exhaustive(model: Model, sink: Any, inputs: Sequence[Sequence[Any]], positions: str = "all"
                      ) -> Tuple[Dict[str, Any], Optional[S.Refused], Optional[str]]:
    """(claims, refusal, where) of the exhaustive route: at every scored position (``positions``:
    ``all``, or ``last``) of every listed input the model decodes to the program's output.

    Per input: proved for any float32 summation order where the bounded forward's margin exceeds its
    error bound (claims ``bounded``); else the checker's own float32 forward (:func:`.forward.float32`)
    and the exact one (:func:`.forward.bounded`'s logits) must both decode to the program's output
    (claims ``computed``).
    """
    ids_of = {v: i for i, v in enumerate(model.input_values) if v not in ("BOS", "PAD")}
    ev = prog.Evaluator(prog.graph(sink))
    by_len: Dict[int, List[List[Any]]] = {}
    for xs in inputs:
        by_len.setdefault(len(xs), []).append(list(xs))
    claims = {"inputs": len(inputs), "bounded": 0, "computed": 0, "min_margin": math.inf, "max_error": 0.0}
    if not model.categorical:
        return claims, S.Unsupported("a numerical read-out (the exhaustive route checks categorical outputs)"), None
    if positions not in ("all", "last"):
        return claims, S.Mismatch(f"scored positions {positions!r}: expected 'all' or 'last'"), "premises"
    if model.attention not in ("softmax", "relu"):
        return claims, S.Unsupported(f"{model.attention} attention (the exhaustive route runs softmax and ReLU "
                                     f"models)"), None
    keys = [json.dumps([_jv(v) for v in xs]) for xs in inputs]
    if len(set(keys)) != len(keys):
        return claims, S.Mismatch("an input is listed twice"), "premises"

    def decoded(lg):
        best = lg.argmax(-1)
        return [None if lg[i, best[i]] < 0.5 else model.output_values[int(best[i])] for i in range(len(lg))]

    for n, group in sorted(by_len.items()):
        if not 1 <= n <= model.n:
            return claims, S.Mismatch(f"a listed input has length {n}, outside 1..{model.n}"), "inputs"
        for s in range(0, len(group), 256):
            batch = group[s:s + 256]
            try:
                ids = np.array([[model.bos_id] + [ids_of[_key(v, ids_of)] for v in xs] for xs in batch])
            except KeyError as e:
                return claims, S.Mismatch(f"a listed input holds {e.args[0]!r}, not a token of the vocabulary"), "inputs"
            logits, err = forward.bounded(model, ids)
            lg32 = forward.float32(model, ids)
            lg, er = logits[:, 1:], np.nan_to_num(err[:, 1:], nan=np.inf)
            best = lg.argmax(-1)
            top = np.take_along_axis(lg, best[..., None], -1)[..., 0]
            e_top = np.take_along_axis(er, best[..., None], -1)[..., 0]
            second = np.sort(lg, -1)[..., -2] if lg.shape[-1] > 1 else np.full(top.shape, -np.inf)
            e_max = er.max(-1)
            margin = np.where(top < 0.5, 0.5 - top - e_max, np.minimum(top - second - e_top - e_max, top - 0.5 - e_top))
            scored = list(range(n)) if positions == "all" else [n - 1]
            for b, xs in enumerate(batch):
                try:
                    want = ev.run(sink, xs)
                except Exception as e:  # noqa: BLE001 - the program has no value on this input
                    return claims, S.Mismatch(f"input {[T.prog_value(v) for v in xs]!r}: the program has no value "
                                              f"({type(e).__name__}: {e})"), "inputs"
                sure = bool((margin[b, scored] > 0).all())
                claims["bounded" if sure else "computed"] += 1
                claims["min_margin"] = min(claims["min_margin"], float(margin[b, scored].min()))
                claims["max_error"] = max(claims["max_error"], float(er[b, scored].max()))
                views = [decoded(lg[b])] + ([] if sure else [decoded(lg32[b, 1:].astype(np.float64))])
                for got_all in views:
                    for i in scored:
                        if not prog.same(got_all[i], want[i]):
                            return claims, S.Mismatch(
                                f"input {[T.prog_value(v) for v in xs]!r}, position {i + 1}: the model outputs "
                                f"{got_all[i]!r}, the program {want[i]!r}",
                                {"tokens": [T.prog_value(v) for v in xs], "position": i + 1,
                                 "expected": T.prog_value(want[i]), "got": T.prog_value(got_all[i])}), "inputs"
    return claims, None, None


def _key(v: Any, ids_of: Dict[Any, int]) -> Any:
    for k in ids_of:
        if prog.same(k, v):
            return k
    raise KeyError(v)


def derive(model: Model, sink: Any, route: str, premises: Dict[str, Any]):
    """(claims, refusal or None, where) of ``route`` (see the module docstring). The checker fails
    closed: an error inside it is a refusal naming the error, never a valid certificate."""
    if route not in ROUTES:
        raise NotACertificate(f"unknown route {route!r}; expected one of {ROUTES}")
    if not isinstance(premises, dict):
        return {}, S.Mismatch("the certificate's premises are not an object"), "premises"
    try:
        return _derive(model, sink, route, premises)
    except (MemoryError, KeyboardInterrupt):
        raise
    except Exception as e:  # noqa: BLE001 - fail closed
        return {}, S.Refused(f"the checker could not check this certificate ({type(e).__name__}: {e})"), None


def _derive(model: Model, sink: Any, route: str, premises: Dict[str, Any]):
    if route == "tables":
        return derive_tables(model, sink, premises)
    if route == "exhaustive":
        return derive_exhaustive(model, sink, [[prog_decode(v) for v in xs] for xs in premises.get("inputs", [])],
                                 premises.get("positions", "all"))
    if route == "symmetry":
        return {}, S.Unsupported("the symmetry route (not in this checker version)"), None
    raise NotACertificate(f"unknown route {route!r}; expected one of {ROUTES}")


def prog_decode(v: Any) -> Any:
    """A JSON value of the certificate back to a program value."""
    if isinstance(v, dict) and "tuple" in v:
        return tuple(prog_decode(x) for x in v["tuple"])
    if isinstance(v, dict) and "set" in v:
        return frozenset(prog_decode(x) for x in v["set"])
    return v


def build(model: Model, sink: Any, route: str, premises: Dict[str, Any], issued_by: Dict[str, Any]
          ) -> Tuple[Dict[str, Any], Verdict]:
    """A certificate for ``model`` and ``sink`` by ``route`` (with the checker's own numbers), and its verdict."""
    t0 = time.perf_counter()
    claims, bad, where = derive(model, sink, route, premises)
    vocab = [model.input_values[i] for i in model.vocab_ids]
    cert = {"format": FORMAT, "version": VERSION, "weights_sha256": model.sha256,
            "program": prog.fingerprint(sink), "max_seq_len": model.n, "vocab": [_jv(v) for v in vocab],
            "causal": model.causal, "attention": model.attention, "route": route, "premises": premises,
            "scope": scope(route, model.n, vocab, premises), "claims": clean(claims), "issued_by": issued_by}
    verdict = _verdict(cert, bad, where, time.perf_counter() - t0)
    return cert, verdict


def clean(x: Any) -> Any:
    """Claims as JSON holds them: non-finite floats as the strings "inf", "-inf", "nan"."""
    if isinstance(x, dict):
        return {k: clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [clean(v) for v in x]
    if isinstance(x, (float, np.floating)):
        x = float(x)
        return x if math.isfinite(x) else ("nan" if x != x else "inf" if x > 0 else "-inf")
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.bool_):
        return bool(x)
    return x


def _verdict(cert: Dict[str, Any], bad: Optional[S.Refused], where: Optional[str], seconds: float) -> Verdict:
    if bad is not None:
        status = "unsupported" if isinstance(bad, S.Unsupported) else "rejected" if isinstance(bad, S.Mismatch) \
            else "unproved"
        return Verdict(False, "nothing", f"{where + ': ' if where and not bad.why.startswith(where) else ''}{bad.why}",
                       bad.witness, seconds, unsupported=status == "unsupported", status=status)
    return Verdict(True, cert["scope"], seconds=seconds)


# ---------------------------------------------------------------------------------------- check


def read(path: str) -> Dict[str, Any]:
    """A certificate file (plain or gzip JSON); a model file with a bundled certificate works too.

    Raises:
        NotACertificate: unreadable, not JSON, another format or an unknown version.
    """
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise NotACertificate(f"{path}: cannot read it ({e.strerror or e})") from None
    if raw[:1] != b"{" and raw[:2] != b"\x1f\x8b":  # a safetensors model file with a bundled certificate?
        try:
            from depthcraft.checker.modelfile import header
            import base64
            raw = base64.b64decode(header(raw)["depthcraft_certificate"])
        except Exception:  # noqa: BLE001
            raise NotACertificate(f"{path}: neither a certificate nor a model file with one bundled") from None
    return parse(raw, path)


def parse(raw: bytes, path: str = "<bytes>") -> Dict[str, Any]:
    """A certificate from its file's bytes (see :func:`read`)."""
    try:
        if raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        cert = json.loads(raw.decode("utf-8"))
    except (OSError, ValueError, EOFError) as e:
        raise NotACertificate(f"{path}: not a readable certificate ({type(e).__name__}: {e})") from None
    if not isinstance(cert, dict) or cert.get("format") != FORMAT:
        raise NotACertificate(f"{path}: not a depthcraft certificate (no format {FORMAT!r})")
    if cert.get("version") != VERSION:
        raise NotACertificate(f"{path}: certificate version {cert.get('version')!r}; this checker reads {VERSION}")
    validate(cert, path)
    return cert


def validate(cert: Any, path: str = "the certificate") -> None:
    """Refuse (NotACertificate) what is not a certificate of this version: its entries and their types."""
    if not isinstance(cert, dict) or cert.get("format") != FORMAT:
        raise NotACertificate(f"{path}: not a depthcraft certificate (no format {FORMAT!r})")
    if cert.get("version") != VERSION:
        raise NotACertificate(f"{path}: certificate version {cert.get('version')!r}; this checker reads {VERSION}")
    types = {"weights_sha256": str, "program": dict, "max_seq_len": int, "vocab": list, "causal": bool,
             "route": str, "premises": dict, "scope": str, "claims": dict}
    for k, t in types.items():
        if not isinstance(cert.get(k), t):
            raise NotACertificate(f"{path}: its {k!r} is {type(cert.get(k)).__name__}, not {t.__name__}")
    fp = cert["program"]
    if not isinstance(fp.get("sink"), str) or not isinstance(fp.get("nodes"), dict) or not all(
            isinstance(e, list) and len(e) == 2 and isinstance(e[0], str) and isinstance(e[1], list)
            for e in fp["nodes"].values()):
        raise NotACertificate(f"{path}: its program is not a fingerprint (sink, nodes: type and children)")
    inputs = cert["premises"].get("inputs", [])
    if not isinstance(inputs, list) or not all(isinstance(x, list) for x in inputs):
        raise NotACertificate(f"{path}: its premises' inputs are not a list of token lists")


def write(path: str, cert: Dict[str, Any]) -> bytes:
    """The bytes of ``cert`` as the file ``path`` holds it (gzip for ``*.gz``); the caller writes them."""
    raw = json.dumps(cert, sort_keys=True, separators=(",", ":"), allow_nan=False, default=str).encode()
    return gzip.compress(raw, mtime=0) if path.endswith(".gz") else raw


def check(cert: Dict[str, Any], model: Model, sink: Any) -> Verdict:
    """Check a certificate against the weights and the program (module docstring).

    Raises:
        NotACertificate: the certificate is about other weights or another program, or malformed.
    """
    t0 = time.perf_counter()
    validate(cert)
    if cert["weights_sha256"] != model.sha256:
        raise NotACertificate(f"the certificate is about weights with SHA-256 {cert['weights_sha256'][:16]}..., "
                              f"the model file's are {model.sha256[:16]}...")
    try:
        saved = prog.adopt_labels(sink, cert["program"])
    except prog.ProgramError as e:
        raise NotACertificate(f"the program is not the certificate's: {e}") from None
    try:
        return _check(cert, model, sink, t0)
    finally:
        prog.restore_labels(saved)  # the caller's program keeps its labels


def _check(cert: Dict[str, Any], model: Model, sink: Any, t0: float) -> Verdict:
    try:
        fp = prog.fingerprint(sink)
    except prog.ProgramError as e:
        raise NotACertificate(f"the program is not the certificate's: {e}") from None
    if fp != cert["program"]:
        raise NotACertificate(f"the program is not the certificate's (its structure differs: sink {fp['sink']!r} vs "
                              f"{cert['program'].get('sink')!r}, {len(fp['nodes'])} vs "
                              f"{len(cert['program'].get('nodes', {}))} nodes)")
    route = cert["route"]
    if route not in ROUTES:
        raise NotACertificate(f"unknown route {route!r}")

    def fail(why: str, witness: Any = None) -> Verdict:
        return Verdict(False, "nothing", why, witness, time.perf_counter() - t0, status="rejected")

    vocab = [model.input_values[i] for i in model.vocab_ids]
    for key, ours in (("max_seq_len", model.n), ("causal", model.causal), ("attention", model.attention),
                      ("vocab", [_jv(v) for v in vocab])):
        if cert.get(key) != ours:
            return fail(f"the certificate's {key} {cert.get(key)!r} is not the model's {ours!r}")
    want_scope = scope(route, model.n, vocab, cert["premises"])
    if cert["scope"] != want_scope:
        return fail(f"the certificate's scope is not what its route proves: it says {cert['scope']!r}, the route "
                    f"proves {want_scope!r}")
    claims, bad, where = derive(model, sink, route, cert["premises"])
    if bad is not None:
        v = _verdict(cert, bad, where, time.perf_counter() - t0)
        return v
    why = compare(cert["claims"], clean(claims), "claims")
    if why is not None:
        return fail(why)
    return Verdict(True, want_scope, seconds=time.perf_counter() - t0)


def compare(claimed: Any, derived: Any, path: str) -> Optional[str]:
    """The first claim that the re-derivation does not support, in words, or None (module docstring)."""
    if isinstance(derived, dict):
        if not isinstance(claimed, dict):
            return f"{path}: expected an object"
        for k, dv in derived.items():
            if k not in claimed:
                return f"{path}.{k}: missing"
            sub = f"{path}.{k}"
            cv = claimed[k]
            if k in ("bos", "regular") and isinstance(dv, list):
                gone = sorted(set(dv) - set(cv if isinstance(cv, list) else []))
                if gone:
                    return f"{sub}: the claimed value set leaves out {gone[0]} (the weights can write it)"
                continue
            if isinstance(dv, (int, float)) and not isinstance(dv, bool) and (k in UPPER or k in LOWER or k == "radius"):
                if not isinstance(cv, (int, float)) or isinstance(cv, bool):
                    return f"{sub}: expected a number"
                if k in LOWER:
                    if not cv <= dv + TOL * abs(dv) + 1e-300:
                        return f"{sub}: the claimed {cv:.6g} is above the re-derived {dv:.6g}"
                elif not cv >= dv - TOL * abs(dv) - 1e-300:
                    return f"{sub}: the claimed bound {cv:.6g} is below the re-derived {dv:.6g}"
                continue
            why = compare(cv, dv, sub)
            if why is not None:
                return why
        return None
    if isinstance(derived, list):
        if not isinstance(claimed, list) or len(claimed) != len(derived):
            return f"{path}: expected {len(derived)} entries"
        for i, (c, d) in enumerate(zip(claimed, derived)):
            label = d.get("layer", i) if isinstance(d, dict) else i
            why = compare(c, d, f"{path}[{label}]")
            if why is not None:
                return why
        return None
    if claimed != derived and not (isinstance(derived, float) and isinstance(claimed, float)
                                   and math.isclose(claimed, derived, rel_tol=TOL)):
        return f"{path}: the certificate says {claimed!r}, the re-derivation {derived!r}"
    return None
