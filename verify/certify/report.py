"""The driver: runs the abstract state through every sublayer, checks the read-out, builds the report.

Soundness argument. By induction over the sublayers: before each one, every residual row of
every position of every input of length 1..N lies within its radius of one of the block's
ideal vectors (the embedding is exact: radius 0). Each sublayer is certified from that
state (:mod:`.heads`, :mod:`.relu` for a ReLU model's heads, :mod:`.mlps`); its ideal writes
and radii extend the state
(:func:`state.write`), so the invariant holds after it. Heads of one sublayer add their
writes: on each block, every combination of the ideal outputs of the heads that write it is
an ideal vector of the sum (:func:`heads_sum`; the state keeps no relation between blocks),
and their radii add. An MLP too large to enumerate is certified in independent parts
(:func:`split_mlp`). At the read-out every ideal output vector must decode (argmax, or "no value"
below 0.5) with a margin above twice the read-out error, so the float32 forward decodes to
what the exact hardmax evaluation decodes. The first sublayer that cannot be certified
stops the analysis (later inputs are not defined); it is named with a witness.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

import numpy as np

from depthcraft.constructions.model import CompiledModel, sublayer_names
from depthcraft.constructions.nodes import is_multi
from depthcraft.constructions.reference import evaluate as reference_evaluate
from depthcraft.verify.certify import float32
from depthcraft.verify.certify.float32 import U32, gamma, terms
from depthcraft.verify.certify.domain import Precondition
from depthcraft.verify.certify.heads import DomainView, certify_head
from depthcraft.verify.certify.mlps import certify_mlp
from depthcraft.verify.certify.program import Decoder, NoSemantics, check_head, check_mlp, check_readout
from depthcraft.verify.certify import links, locality, rules, sets, symmetry
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


def heads_sum(writes, blocks: Dict[str, Block], out_rows: np.ndarray):
    """The ideal vectors of the heads' summed write, one residual block at a time.

    Args:
        writes: per head, ((BOS ideal outputs [m, Do], guards [m]), (regular ...)) over ``out_rows``.
        blocks: the residual blocks by name.
        out_rows: [Do] the rows the sublayer writes.
    Returns:
        [(cols, ((BOS vectors [k, len(cols)], guards [k]), (regular ...)))]: one entry per block the
        sublayer writes, ``cols`` its columns within ``out_rows``.
    Raises:
        TooLarge: one block's combinations exceed :data:`MAX_TUPLES`.

    Soundness: the state keeps one set of ideal vectors per block (no relation between blocks),
    so only each block's own rows of the sum matter. On a block's rows the sum is the sum of the
    heads whose ideal outputs are non-zero there (the others add exact zeros: their ideal output
    is 0 on these rows, and their real deviation from it is in their radii, summed by the
    caller), so every combination of those heads' outputs, restricted to the block, is a
    superset of what the block receives; a combination's guard is the largest of its parts'
    (each part's position exists). Heads that write different blocks (tracr's parallel means,
    shuffle_dyck's six ``opens``/``closes`` heads) no longer multiply their sets.
    """
    out = []
    for b in blocks.values():
        cols = np.flatnonzero(np.isin(out_rows, b.rows))
        if not len(cols):
            continue
        totals = []
        for kind in (0, 1):
            parts = [(w[kind][0][:, cols], w[kind][1]) for w in writes]
            live = [pt for pt in parts if np.any(pt[0] != 0)] or parts[:1]
            total, tg = live[0]
            total, tg = unique_min(total, tg)
            for wv, wg in live[1:]:
                wv, wg = unique_min(wv, wg)
                if len(total) * len(wv) > MAX_TUPLES:
                    raise TooLarge("combinations of the heads' outputs")
                total, tg = unique_min((total[:, None, :] + wv[None, :, :]).reshape(-1, total.shape[1]),
                                       np.maximum(tg[:, None], wg[None, :]).ravel())
            totals.append((total, tg))
        out.append((cols, totals))
    return out


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
               n: int, causal: bool, dec: Optional[Decoder], relu: bool = False,
               dom: Optional[DomainView] = None) -> Optional[Dict[str, Any]]:
    """Certify one attention sublayer, head by head, and write its heads' sum into the state.

    Returns the ``uncertified`` entry of the first head whose float32 part fails (None when all
    hold); appends one ``per_layer`` entry per certified head, and to ``cert["program_failures"]``
    the first program-check entry of each head (``dec`` None: no program linked, not checked).
    ``dom``: the domain precondition (:class:`heads.DomainView`); each head's uses of its facts
    are appended to ``cert["domain_uses"]``.
    """
    d = len(state.radius)
    out_rows = spec.rows("out_rows", d)
    writes, radius, l1_sum = [], np.zeros(len(out_rows)), {}
    r_in = float(state.radius[np.unique(np.concatenate(
        [spec.rows(k, d) for k in ("q_rows", "k_rows", "v_rows")]))].max(initial=0))
    nh = np.asarray(p["w_q"]).shape[0]
    pending = []  # heads whose written blocks get linked after the sublayer's write (.links)
    for h in range(nh):
        # the value analysis speaks of the RASP values: it holds for the ideal vectors only while every
        # sublayer so far is proved to be its expression (the decoded values are then the program's)
        rule = rules.classify(state, blocks, spec, p, h, "relu" if relu else "softmax", dec, {})
        if rule.name == "ReLU head":  # weights relu(score), no normalisation: exact sums over the on keys (.relu)
            sums_ok, to_readout = _relu_outputs(cert.get("model"), state, blocks, dec, spec, p, h)
            final = False
            if dom is not None:  # facts about proved copies of the token: only while every check holds
                model = cert.get("model")
                proved = model is not None and dec is not None and not cert["program_failures"]
                dom.copies = copy_blocks(model, state, blocks, dec) if proved else {}
                dom.pattern_copies = pattern_copy_blocks(model, state, blocks, dec) \
                    if proved and dom.pre.patterns is not None else {}
                final = model is not None and _read_later(model, name, spec) is False
            hc = certify_relu_head(state, blocks, spec, p, h, n, causal, sums_ok, to_readout, dom, final)
        else:
            if dom is not None and dom.links is not None:  # links speak of the program's values (.links)
                dom.links.valid = dec is not None and not cert["program_failures"]
                dom.links.work, dom.links.keys = links.MAX_WORK, None
            clean_by = level_clean_reason(state, blocks, dec, spec, p, h) \
                if dec is not None and not cert["program_failures"] else None
            hc = certify_head(state, blocks, spec, p, h, n, causal, clean_by, dom)
        if dom is not None and dom.links is not None and hc.failure is None and hc.attended is not None \
                and dec is not None and not relu:
            attended_by = (name, h, hc.attended)
        else:
            attended_by = None
        if dom is not None:
            for fact in sorted(dom.used):
                cert["domain_uses"].append({"layer": name, "head": h, "fact": fact})
            dom.used.clear()
        if hc.failure is not None:
            if relu and cert.get("model") is not None:  # a concrete input, with the heads' reference semantics
                hc.failure["witness"] = {**hc.failure["witness"],
                                         "wrong_input": _wrong_input(cert["model"], hand_built=True)}
            return {"layer": name, "head": h, "check": "float32", **hc.failure}
        if dec is not None:
            eps = hc.tables[1]
            kind = "relu" if relu else "softmax"
            bad = _program_entry(name, h, lambda: check_head(
                state, blocks, dec, spec, p, h, n, causal, eps,
                rules.classify(state, blocks, spec, p, h, kind, dec, {}).name, attention=kind),
                                 cert.get("model") if not cert["program_failures"] else None)
            if bad is not None:
                cert["program_failures"].append(bad)
                if "level_clean_by" in hc.entry:  # the value analysis speaks of the program: void here
                    return {"layer": name, "head": h, "check": "float32",
                            "why": "categorical aggregate: a level that can be the top holds several positions; the "
                                   "value analysis that makes it clean needs the head's table to be its selector, "
                                   "and it is not", "witness": {"level": hc.entry["level_clean_witness"],
                                                                "program": bad["why"]}}
        if attended_by is not None and not cert["program_failures"] and cert.get("model") is not None:
            # the head is certified and is its program's expression: link the blocks it writes (.links),
            # once the sublayer's writes are in the state (a sibling head reads them as zero)
            pending.append((h, attended_by))
        writes.append(hc.outs)
        radius = radius + hc.r_out[0]
        for k, v in hc.r_out[1].items():
            l1_sum[k] = l1_sum.get(k, 0.0) + v
        e = hc.entry
        cert["per_layer"].append({"layer": name, "head": h, "rule": rule.name, "min_gap": _num(e["min_gap"]),
                                  "delta": _num(e["delta"]), "leak_bound": _num(e["leak_bound"]),
                                  "radius_in": r_in, "radius_out": None,
                                  **({"level_clean_by": e["level_clean_by"]} if "level_clean_by" in e else {})})
    # heads add their writes, block by block (:func:`heads_sum`)
    for cols, totals in heads_sum(writes, blocks, out_rows):
        write(state, blocks, out_rows[cols], totals,
              (radius[cols], {k: v for k, v in l1_sum.items() if np.isin(out_rows[cols], blocks[k].rows).any()}))
    for e in cert["per_layer"][-nh:]:
        e["radius_out"] = float(state.radius[out_rows].max(initial=0))
    for h, attended_by in pending:
        if not cert["program_failures"]:
            _register_links(cert["model"], dom, dec, blocks, spec, p, h, attended_by)
    return None


def _single_writer(model: CompiledModel, blocks: Dict[str, Block], nm: str) -> bool:
    """Whether exactly one sublayer writes block ``nm``'s rows."""
    d = len(model.residual_labels)
    return sum(bool(np.isin(sp.rows("out_rows", d), blocks[nm].rows).any()) for sp in model.arch.sublayers) == 1


def _register_links(model: CompiledModel, dom: DomainView, dec: Decoder, blocks: Dict[str, Block], spec, p, h: int,
                    attended_by) -> None:
    """Link the blocks head ``h`` writes to its attended entries (:func:`.links.register_head`); the
    caller has checked that the head is certified and every program check so far holds."""
    name, _, entries = attended_by
    d = len(model.residual_labels)
    out_rows = spec.rows("out_rows", d)
    wvo = np.asarray(p["w_v"][h], np.float64) @ np.asarray(p["w_o"][h], np.float64)
    live = out_rows[np.abs(wvo).sum(0) > 0]
    written = [nm for nm, b in blocks.items() if np.isin(live, b.rows).any()]
    links.register_head(dom.links, (name, h), entries, dec.link, written,
                        lambda nm: _single_writer(model, blocks, nm), list(model.input_values))


def _read_later(model: CompiledModel, name: str, spec) -> bool:
    """Whether a sublayer after ``name`` reads a residual row that ``spec`` writes."""
    d = len(model.residual_labels)
    out = spec.rows("out_rows", d)
    names = sublayer_names(model.arch)
    for later in model.arch.sublayers[names.index(name) + 1:]:
        keys = ("q_rows", "k_rows", "v_rows") if later.kind == "attn" else ("in_rows",)
        if any(np.isin(later.rows(k, d), out).any() for k in keys):
            return True
    return False


def _single_writer_position_reads(model: CompiledModel, blocks: Dict[str, Block], dec: Decoder):
    """Yield ``(name, node)`` for each block the decoder reads whose RASP node is the read of a
    hand-built position head (:class:`~constructions.nodes.PositionMapSpec`: ``prev_token``,
    ``position_map``) and whose rows exactly one sublayer writes (the candidates of
    :func:`copy_blocks` and :func:`pattern_copy_blocks`, which add their own conditions)."""
    from depthcraft.constructions.nodes import HeadRead, PositionMapSpec
    for nm in blocks:
        node = dec.link.nodes.get(nm)
        if isinstance(node, HeadRead) and isinstance(node.head.spec, PositionMapSpec) and dec.decodable(nm) \
                and _single_writer(model, blocks, nm):
            yield nm, node


def copy_blocks(model: CompiledModel, state: State, blocks: Dict[str, Block], dec: Decoder
                ) -> Dict[str, Tuple[np.ndarray, np.ndarray]]:
    """Blocks that hold, on every input, the token of another position (:class:`heads.DomainView`).

    A block qualifies when its RASP node is the read of a position head (``prev_token``,
    ``position_map``: :class:`~constructions.nodes.PositionMapSpec`) that copies ``tokens``
    (no ``fn``), exactly one sublayer writes its rows, and target is injective on the positions
    1..N that have a regular target. The caller uses this only after that head is certified
    (float32 and program check: its hardmax evaluation attends to target(j) and writes a vector
    that decodes to the token there, :func:`program._check_relu_head`) and while every program
    check so far holds, so that each ideal vector of the block decodes to the RASP value, which
    is the token at target(j). Returns name -> ([N + 1] target(j), -1 where none or BOS; [m] the
    token id each regular ideal vector decodes to, -1 where none).
    """
    from tracr.rasp import rasp
    n = int(model.max_seq_len)
    out = {}
    for nm, node in _single_writer_position_reads(model, blocks, dec):
        if node.read.source is not rasp.tokens or node.read.fn is not None:
            continue
        src = np.full(n + 1, -1, np.int64)
        for j in range(1, n + 1):
            t = node.head.spec.target(j)
            src[j] = t if t is not None and 1 <= t <= n else -1
        regular = src[src >= 1]
        if len(np.unique(regular)) != len(regular):
            continue
        vals = dec.decode_rows(nm, state.sets[1][nm])
        ids = {v: i for i, v in enumerate(model.input_values)}
        tok = np.array([ids.get(v, -1) if v is not None and not isinstance(v, frozenset) and _hashable(v) else -1
                        for v in vals], np.int64)
        out[nm] = (src, tok)
    return out


def pattern_copy_blocks(model: CompiledModel, state: State, blocks: Dict[str, Block], dec: Decoder
                        ) -> Dict[str, Tuple[np.ndarray, Dict[int, Tuple[Tuple[int, Any], ...]], List[Any]]]:
    """Blocks that hold, on every input, a copy of an *equality parse* (:class:`heads.DomainView`).

    An equality parse X is the read of a ReLU ``match`` head with ``select="all"``, the one pair
    (``tokens``, ``tokens``) and a read of POSITION through ``fn``: by its reference semantics
    (:func:`constructions.reference._match_keys`, ``Evaluator._eval_head_read``) its value at a
    regular position t is the set {fn(j') : j' in W(t), x_{j'} = x_t}, W(t) = {1 <= j' <= t :
    where(t, j')} (every j' <= t exists when t does; tokens are never None). A block qualifies
    when its RASP node is the read of a ReLU position head (``prev_token``, ``position_map``) of X
    with no ``fn`` (a set-valued read: the union over the attended key, i.e. X's value at
    target(j) when 1 <= target(j) <= j), it is a set-valued block the decoder reads, and exactly
    one sublayer writes its rows. As for :func:`copy_blocks`, the caller uses this only after
    the position head is certified and while every program check so far holds (the parse's
    and the copy's included), so that each ideal vector of the block decodes to the RASP value.

    Returns name -> ([N + 1] target(j): -1 where the ReLU position head attends to nothing (None,
    or outside 0..j: the block holds the empty set), -3 where it attends to BOS; per target t, W(t) as the
    pairs (j', fn(j')) in position order; [m] the set each regular ideal vector decodes to, None
    where it holds no set).
    """
    from depthcraft.constructions.nodes import POSITION, HeadRead, apply_fn
    from tracr.rasp import rasp
    n = int(model.max_seq_len)
    out = {}
    for nm, node in _single_writer_position_reads(model, blocks, dec):
        x = node.read.source
        if node.read.fn is not None or node.head.attention != "relu" or not isinstance(x, HeadRead) or nm not in dec.sets:
            continue
        spec = x.head.spec
        if (x.head.kind.selects != "match" or x.head.attention != "relu" or spec.select != "all"
                or len(spec.pairs) != 1 or spec.pairs[0][0] is not rasp.tokens or spec.pairs[0][1] is not rasp.tokens
                or x.read.source is not POSITION):
            continue
        src = np.full(n + 1, -1, np.int64)
        windows: Dict[int, Tuple[Tuple[int, Any], ...]] = {}
        for j in range(1, n + 1):
            t = node.head.spec.target(j)
            if t == 0:  # the head attends to BOS: the block holds the read's BOS value (no statement)
                src[j] = -3
                continue
            if t is None or not 1 <= t <= j:  # nothing attended: the empty set
                continue
            src[j] = t
            if t not in windows:
                windows[t] = tuple((jj, apply_fn(x.read.fn, jj)) for jj in range(1, t + 1)
                                   if spec.where is None or spec.where(t, jj))
        vals = dec.decode_rows(nm, state.sets[1][nm])
        sets = [v if isinstance(v, frozenset) else None for v in vals]
        out[nm] = (src, windows, sets)
    return out


def _hashable(v: Any) -> bool:
    try:
        hash(v)
    except TypeError:
        return False
    return True


def split_mlp(spec, p, d: int, blocks: Dict[str, Block]):
    """The independent parts of one MLP sublayer: [(sub-spec, sub-weights)].

    Hidden units are joined when they write one residual block (union-find over the non-zero
    entries of W_2 in each block's columns), so every output block is written by the units of
    one part (the program check decodes a block from all its rows). Soundness: a part's output rows are h_G W_2[G, rows] + b_2[rows] with
    h_G = ReLU(x W_1[:, G] + b_1[G]); every other unit has a zero weight on these rows, and in the
    float32 forward a zero weight gives an exact zero product and adding it is exact, so the part
    computes exactly (in float32 too) what the whole MLP writes on its rows, from the input rows
    its units read with a non-zero weight. A unit that writes no row is left out (its output is
    multiplied by zeros); rows no unit writes (a bias only) join the first part. Each part is
    then certified and checked on its own, against the same state (the parts are written only
    after all are certified), by :func:`_mlp`.
    """
    in_rows, out_rows = spec.rows("in_rows", d), spec.rows("out_rows", d)
    w1, b1 = np.asarray(p["w_1"]), np.asarray(p["b_1"])
    w2, b2 = np.asarray(p["w_2"]), np.asarray(p["b_2"])
    parent = list(range(w1.shape[1]))

    def find(a):
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    for b in blocks.values():
        units = np.flatnonzero((w2[:, np.isin(out_rows, b.rows)] != 0).any(1))
        for u in units[1:]:
            parent[find(int(u))] = find(int(units[0]))
    writers = np.flatnonzero((w2 != 0).any(1))
    roots = sorted({find(int(u)) for u in writers})
    if len(roots) < 2:
        return [(spec, p)]  # nothing to split
    parts = []
    for i, root in enumerate(roots):
        units = np.array([u for u in writers if find(int(u)) == root])
        cols = np.flatnonzero(np.isin(out_rows, np.concatenate(
            [b.rows for b in blocks.values() if (w2[np.ix_(units, np.isin(out_rows, b.rows))] != 0).any()])))
        if i == 0:
            cols = np.union1d(cols, np.flatnonzero(~(w2 != 0).any(0)))
        ins = np.flatnonzero((w1[:, units] != 0).any(1))
        sub = dataclasses.replace(spec, in_rows=tuple(int(r) for r in in_rows[ins]),
                                  out_rows=tuple(int(r) for r in out_rows[cols]))
        parts.append((sub, {"w_1": w1[np.ix_(ins, units)], "b_1": b1[units],
                            "w_2": w2[np.ix_(units, cols)], "b_2": b2[cols]}))
    return parts


def _set_role(state: State, blocks: Dict[str, Block], spec, p, dec: Optional[Decoder],
              roles: Dict[str, str], attention: str = "softmax") -> Optional[Tuple[str, str]]:
    """(role, block) of a sublayer that the set analysis handles (:mod:`.sets`), else None: the set
    rules of :func:`.rules.classify` (``union``, ``copy``, ``threshold``, ``meet``) and the one
    block the sublayer writes."""
    if dec is None or not roles:
        return None
    role = rules.set_role(rules.classify(state, blocks, spec, p, 0 if spec.kind == "attn" else None, attention,
                                         dec, roles))
    if role is None:
        return None
    out_rows = spec.rows("out_rows", len(state.radius))
    return role, next(nm for nm, b in blocks.items() if np.isin(out_rows, b.rows).any())


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
                check_head(state, blocks, dec, spec, p, 0, n, causal, eps,
                           rules.classify(state, blocks, spec, p, 0, "softmax", dec, {}).name, values=False)
                sets.check_set_copy(state, blocks, dec, spec, p, 0, out, dom)
            bad = _program_entry(name, 0, check, model)
            sets.register_write(state, blocks, out, dom, out_rows, r_out, write)
            entry = e
        elif role == "threshold":
            dom, r_out, table = sets.certify_threshold_mlp(state, blocks, spec, p, n, out)
            bad = _program_entry(name, None, lambda: sets.check_threshold_mlp(
                blocks, out, table, state.setdom.get(out + sets.SCRATCH)), model)
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
         dec: Optional[Decoder], dom: Optional[DomainView] = None) -> None:
    """Certify one MLP sublayer, check its tables against the program, and write its ideal outputs
    into the state (one ``per_layer`` entry).

    An MLP whose input combinations are too many to enumerate at once (tracr's parallel Maps
    of one layer, each reading its own blocks) is certified part by part (:func:`split_mlp`).
    With a precondition's attended links (``dom.links``) and every program check holding, the
    blocks it writes as Maps of one head's linked reads are linked too (:func:`.links.register_mlp`).

    Raises:
        TooLarge: one part alone is too large.
    """
    d = len(state.radius)
    out_rows = spec.rows("out_rows", d)
    r_in = float(state.radius[spec.rows("in_rows", d)].max(initial=0))
    try:
        parts = [(spec, p, certify_mlp(state, blocks, spec, p, n))]
    except TooLarge:
        parts = [(sub, q, certify_mlp(state, blocks, sub, q, n)) for sub, q in split_mlp(spec, p, d, blocks)]
    if dec is not None:
        for sub, q, _ in parts:
            bad = _program_entry(name, None, lambda: check_mlp(state, blocks, dec, sub, q, n),
                                 cert.get("model") if not cert["program_failures"] else None)
            if bad is not None:
                cert["program_failures"].append(bad)
                break
    for sub, _, (ideal, sd, r_out) in parts:
        write(state, blocks, sub.rows("out_rows", d), [(ideal[sd.kind == k], sd.guard[sd.kind == k]) for k in (0, 1)],
              r_out)
    if dom is not None and dom.links is not None and dec is not None and not cert["program_failures"] \
            and cert.get("model") is not None:  # its tables are its program's Maps: link them (.links)
        written = [nm for nm, b in blocks.items() if np.isin(out_rows, b.rows).any()]
        links.register_mlp(dom.links, dec.link.nodes, written, lambda nm: _single_writer(cert["model"], blocks, nm))
    cert["per_layer"].append({"layer": name, "head": None, "min_gap": None, "delta": None,
                              "leak_bound": None, "radius_in": r_in,
                              "radius_out": float(state.radius[out_rows].max(initial=0))})


def _scopes(model: CompiledModel, domain: Optional[str] = None, scored: bool = False) -> Dict[str, str]:
    """The ``scope`` sentence of each outcome: the program proved, only the weights' hardmax, nothing.

    ``domain``: the proof used a domain precondition: the inputs are then "every input in the
    domain (the predicate) of length 1..N", never every input. ``scored``: it used the
    ``scored`` fact: only the last position of each input is covered.
    """
    n = int(model.max_seq_len)
    where = ("the last position n only (the task's scored position; the other positions are not covered)"
             if scored else "every position 1..n")
    inputs = (f"every input of length 1..{n} over the {len(model.vocab)}-token vocabulary (BOS first), every "
              f"position 1..n") if domain is None else (
        f"every input in the domain ({domain}) of length 1..{n} over the {len(model.vocab)}-token vocabulary "
        f"(BOS first), {where}; inputs outside the domain are not covered")
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


def _token_of(model: CompiledModel, state: State, blocks: Dict[str, Block]) -> Dict[str, np.ndarray]:
    """For every token block that no sublayer writes: [m] the token of each regular ideal vector (an index
    into ``model.input_values``), -1 where several tokens share the vector (:class:`heads.DomainView`)."""
    from depthcraft.constructions.model import BOS, PAD
    d = len(state.radius)
    written = np.zeros(d, bool)
    for spec in model.arch.sublayers:
        written[spec.rows("out_rows", d)] = True
    token = np.asarray(model.params["embed"]["token"], np.float64)
    ids = [i for i, v in enumerate(model.input_values) if v not in (BOS, PAD)]
    out = {}
    for nm, b in blocks.items():
        if b.kind != "token" or written[b.rows].any():
            continue
        rows = token[ids][:, b.rows] + 0.0  # + 0.0: -0.0 and 0.0 are one number, and one key below
        vecs = state.sets[1][nm] + 0.0
        by_row: Dict[bytes, list] = {}  # exact equality by the rows' bytes: no [m, tokens, rows] array
        for t, r in zip(ids, rows):
            by_row.setdefault(np.ascontiguousarray(r).tobytes(), []).append(t)
        hits = [by_row.get(np.ascontiguousarray(v).tobytes(), []) for v in vecs]
        out[nm] = np.array([ts[0] if len(ts) == 1 else -1 for ts in hits], int)
    return out


def _by_symmetry(model: CompiledModel, atol: float, domain: str, precondition: Precondition,
                 t0: float) -> Dict[str, Any]:
    """:func:`certify` where the domain declares a symmetry: the symmetry route first (:mod:`.symmetry`).

    If it proves the domain, that is the certificate (scoped to the domain; the tables route is
    not tried, though without the domain it might prove more: ``without_domain`` says so);
    otherwise the tables route runs with the rest of the precondition as usual. Either way the
    report's ``symmetry`` entry says what the symmetry route found (``certified``, ``why``,
    ``method``, ``orbits`` or ``pieces``, ``generators``, ``group``).
    """
    count = precondition.symmetry.count()
    if count > symmetry.MAX_ORBITS and precondition.symmetry.locality is not None:
        sym = locality.certify_by_locality(model, precondition.symmetry.locality, domain)  # too many orbits
        sym["domain_orbits"] = count
    else:
        sym = symmetry.certify_by_symmetry(model, precondition.symmetry, domain)
    summary = {k: sym[k] for k in ("certified", "why", "layer", "head", "orbits", "generators", "group", "proof",
                                   "seconds")}
    summary.update({k: sym[k] for k in ("method", "pieces", "domain_orbits", "radius") if k in sym})
    if not sym["certified"]:
        cert = certify(model, atol, domain=domain, precondition=dataclasses.replace(precondition, symmetry=None))
        cert["symmetry"] = summary
        return cert
    n = int(model.max_seq_len)
    readout = next((e for e in sym["per_layer"] if e["layer"] == "read-out"), {})
    scope = (f"every input in the domain ({domain}) of length 1..{n} over the {len(model.vocab)}-token "
             f"vocabulary (BOS first), every position 1..n; inputs outside the domain are not covered: the "
             f"float32 forward decodes to the RASP program's output (tracr's evaluator, with the hand-built "
             f"heads' reference semantics). " + (
                 f"Proved by symmetry: the domain is {sym['orbits']} orbits of "
                 f"{sym['group']} (proof: {sym['proof']}); the weights and every node of the program commute with "
                 f"the group's {sym['generators']} generators (exact comparisons), and each orbit's representative "
                 f"has a bounded float32 forward (any summation order) that decodes to the program's output"
                 if sym.get("method") != "locality" else
                 f"Proved by locality: every domain input is a union of components, each one as in one of "
                 f"{sym['pieces']} pieces up to a renaming in {sym['group']} (proof: {sym['proof']}; the domain "
                 f"has {sym.get('domain_orbits')} orbits, too many to enumerate); the weights and every node of "
                 f"the program commute with the group's {sym['generators']} generators (exact comparisons); at "
                 f"each piece every query's best own key beats every key another component can hold, in the "
                 f"program and in the bounded float32 forward (any summation order), every position holds only "
                 f"its component's symbols and positions, within a checked radius of its one-hot, and every "
                 f"position decodes to the program's output"))
    return {"certified": True, "float32_matches_hardmax": True, "scope": scope, "method": sym.get("method", "symmetry"),
            "per_layer": [{**{k: e.get(k) for k in ("layer", "head", "min_gap", "leak_bound")}, "radius_in": None,
                           "radius_out": e.get("radius_out")} for e in sym["per_layer"] if e["layer"] != "read-out"],
            "uncertified": [], "readout": {"margin": readout.get("min_gap"), "error": readout.get("radius_out")},
            "float32": float32.DESCRIPTION, "seconds": round(time.perf_counter() - t0, 3),
            "domain": {"predicate": domain, "used_as_precondition": True,
                       "uses": [{"layer": None, "head": None, "fact": sym.get("method", "symmetry")}]},
            "symmetry": summary,
            "without_domain": "not tried: the domain's symmetry proved it (the tables route without the domain "
                              "may prove more, for every input; run certify without the precondition to see)"}


def certify(model: CompiledModel, atol: float = 1e-3, domain: Optional[str] = None,
            precondition: Optional[Precondition] = None) -> Dict[str, Any]:
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
            reported (key ``domain``: ``{"predicate", "used_as_precondition", "uses"}``) and named
            in ``scope``.
        precondition: facts the domain implies (:class:`.domain.Precondition`,
            :meth:`Task.domain_precondition`), or None. The heads may use them; where one did
            (``domain.uses``: layer, head, fact), what is proved holds on the domain only and
            ``scope`` says "every input in the domain ...". Where none was used the proof covers
            every input. ``domain`` defaults to the precondition's predicate.
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
    if domain is None and precondition is not None:
        domain = precondition.predicate
    if precondition is not None and precondition.symmetry is not None:
        return _by_symmetry(model, atol, domain, precondition, t0)
    scopes = _scopes(model)
    cert: Dict[str, Any] = {"certified": False, "float32_matches_hardmax": False, "scope": scopes["none"],
                            "per_layer": [], "uncertified": [], "readout": None, "seconds": None,
                            "float32": float32.DESCRIPTION, "program_failures": [], "model": model,
                            "domain_uses": []}

    def done():
        program = cert.pop("program_failures")
        cert.pop("model", None)
        float_fail = list(cert["uncertified"])
        cert["uncertified"] = sorted(program + float_fail, key=lambda e: _order.get((e["layer"], e["head"]), 1 << 30))
        cert["certified"] = cert["float32_matches_hardmax"] and not program
        uses = cert.pop("domain_uses")
        outcome = "program" if cert["certified"] else "hardmax" if cert["float32_matches_hardmax"] else "none"
        scored = any(u["fact"] == "scored" for u in uses)
        cert["scope"] = (_scopes(model, domain, scored) if uses else scopes)[outcome]
        if domain is not None:
            cert["domain"] = {"predicate": domain, "used_as_precondition": bool(uses), "uses": uses}
            if not uses:
                cert["scope"] += (f". The task's inputs satisfy a declared domain ({domain}); the proof does not "
                                  f"use it as a precondition" + (
                                      ", so it covers every input, those outside the domain too"
                                      if cert["certified"] else ", and nothing is certified on the domain either"))
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
    dom = DomainView(precondition, n, _token_of(model, state, blocks)) if precondition is not None else None
    if dom is not None and precondition.scored is not None:
        dom.scored_ids = frozenset(i for i, v in enumerate(model.input_values) if v in precondition.scored)
    if dom is not None and dec is not None and precondition.classes is not None and not precondition.prefix:
        dom.links = links.Links(decode=dec.decode_rows)  # what certified heads attended (.links)
    if dom is not None and precondition.slots is not None:
        dom.slot_ids = tuple(None if sl is None else frozenset(i for i, v in enumerate(model.input_values) if v in sl)
                             for sl in precondition.slots)
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
            role = _set_role(state, blocks, spec, p, dec, roles, model.arch.attention)
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
                                  relu=model.arch.attention == "relu", dom=dom)
                if fail is not None:
                    cert["uncertified"].append(fail)
                    return done()
            else:
                _mlp(cert, state, blocks, name, spec, p, n, dec, dom)
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
