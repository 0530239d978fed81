"""Necessity of every attention layer: zero one attention sublayer at a time, measure exactness.

A construction claims a depth; if removing one of its attention layers leaves the
model exact on the checked inputs, that layer is redundant and the claimed depth is not
tight for this construction. :func:`ablate` removes each attention sublayer in turn
(the layer adds nothing to the residual stream, as with its output projection zeroed,
:func:`without_layer`) and runs the same inputs; ``exact_fraction`` is the fraction of inputs still exact at every scored
position. A layer with ``exact_fraction == 1`` is redundant.

Where no input can tell a necessary layer from a redundant one, the check does not apply
(:func:`not_applicable` gives the reason; the verifier reports it and bases the verdict on the
checks that apply): at n = 1 (the only token and BOS are all an attention layer could read, and the
embedding already holds both), and wherever the task's whole input set is small enough to enumerate
and every scored output is a function of its own position's token and the input length (what a model
with no attention layer computes).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Iterable, List, Optional

import numpy as np

from depthcraft.constructions.model import CompiledModel
from depthcraft.constructions.runtime import ablated_logits, as_jax
from depthcraft.verify.checks import batch_rows, bucket, check_batches, pack
from depthcraft.verify.tasks.base import Task


#: Most inputs :func:`not_applicable` enumerates (all lengths together; each runs the reference) to
#: decide whether any scored output depends on another position's token.
ENUMERATE_LIMIT = 1 << 10


def not_applicable(task: Task, p: Dict[str, Any]) -> Optional[str]:
    """Why layer necessity cannot be tested at these parameters, or None when it can.

    A layer is shown necessary by an input on which the model without it is wrong. If every
    scored output is a function of (input length, position, the token at that position), a
    model with no attention layer at all can compute it, so no input can show an attention
    layer necessary, whatever the construction does; a redundant layer then says nothing.

    Decided without running the model: from ``task.max_seq_len(p) == 1``, or, where the task's
    input set has at most :data:`ENUMERATE_LIMIT` inputs (every length 1..n; tasks with
    ``free_sequences`` only), from the reference on every input.

    Returns:
        A one-sentence reason (str), or None: the ablation applies (also when the input set
        is too large to enumerate; then sampled inputs decide, as before).
    """
    n = task.max_seq_len(p)
    if n == 1:
        return ("n = 1: an attention layer can only read BOS and the one token, which the embedding "
                "already holds, so no attention layer can be necessary")
    batches = _small_input_set(task, p, n)
    if batches is None or not any(len(b) for b in batches):
        return None
    for x in batches:
        if len(x) == 0:
            continue
        target, scored = task.reference(p, x)
        target, scored = np.asarray(target), np.asarray(scored, bool)
        for pos in range(x.shape[1]):
            seen: Dict[Any, Any] = {}
            for tok, out, sc in zip(x[:, pos].tolist(), target[:, pos].tolist(), scored[:, pos].tolist()):
                if not sc:
                    continue
                if seen.setdefault(tok, out) != out:
                    return None  # this output depends on another position's token
    return (f"every scored output is a function of its own token and position on all "
            f"{sum(len(b) for b in batches)} inputs of length <= {n}, so no attention layer can be necessary")


def _small_input_set(task: Task, p: Dict[str, Any], n: int) -> Optional[List[np.ndarray]]:
    """Every input of length 1..n as one [v^m, m] batch per length m, for tasks with ``free_sequences``;
    None for other tasks (their layouts) or when there are more than :data:`ENUMERATE_LIMIT`."""
    from depthcraft.verify.tasks.base import enumerate_sequences

    if not task.free_sequences:
        return None
    vocab = np.asarray(task.vocab(p))
    if sum(len(vocab) ** m for m in range(1, n + 1)) > ENUMERATE_LIMIT:
        return None
    return [np.concatenate(list(enumerate_sequences(vocab, m, ENUMERATE_LIMIT))) for m in range(1, n + 1)]


def without_layer(model: CompiledModel, attn_index: int) -> CompiledModel:
    """A copy of ``model`` whose ``attn_index``-th attention sublayer (0-based) writes nothing.

    Raises:
        IndexError: the model has fewer attention sublayers.
    """
    attn = [i for i, s in enumerate(model.arch.sublayers) if s.kind == "attn"]
    target = attn[attn_index]
    layers = [dict(layer) for layer in model.params["layers"]]
    layers[target]["w_o"] = np.zeros_like(np.asarray(layers[target]["w_o"]))
    if "b_o" in layers[target]:
        layers[target]["b_o"] = np.zeros_like(np.asarray(layers[target]["b_o"]))
    params = dict(model.params, layers=layers)
    return dataclasses.replace(model, params=params, meta=dict(model.meta, ablated_attention_layer=attn_index))


def ablate(model: CompiledModel, task: Task, p: Dict[str, Any], inputs: List[np.ndarray]) -> List[Dict[str, Any]]:
    """Exactness with each attention layer removed in turn.

    Every input is run once per call of :func:`constructions.runtime.ablated_logits`, which
    computes the residual stream before each attention layer once and runs only the rest of
    the model from there for that layer's ablation: the same logits as running
    :func:`without_layer` from the embeddings (tests/test_ablation.py), in about half the
    forward work for a deep model.

    Args:
        model: the compiled model.
        task, p: its task and resolved parameters.
        inputs: the checked inputs, a list of [b_i, n_i] arrays.
    Returns:
        One entry per attention layer, in order: ``{"layer": l (1-based), "exact_fraction": f,
        "redundant": f == 1.0}`` (``f`` over all the inputs).
    """
    n_attn = sum(s.kind == "attn" for s in model.arch.sublayers)
    if n_attn == 0:
        return []
    packed = pack(model, task, p, inputs)  # labelled and encoded once
    batch = batch_rows(model)
    total, failed = 0, np.zeros(n_attn, np.int64)
    for pk in packed:
        logits = np.concatenate([_ablated_rows(model, pk.ids[s:s + batch], batch)
                                 for s in range(0, len(pk.ids), batch)], axis=1)  # [n_attn, rows, T, O]
        start = 0
        for x, expected, scored in pk.items:
            rows = slice(start, start + len(x))
            start += len(x)
            total += len(x)
            for a in range(n_attn):
                got = model.decode(np.asarray(logits[a, rows, 1:x.shape[1] + 1], np.float64), task.none_value)
                failed[a] += int(((task.mismatch(p, got, expected) & scored).any(1)).sum())
    out = []
    for a in range(n_attn):
        frac = 1.0 - failed[a] / total if total else 0.0
        out.append({"layer": a + 1, "exact_fraction": round(float(frac), 6),
                    "redundant": total > 0 and int(failed[a]) == 0})
    return out


def ablate_from_embeddings(model: CompiledModel, task: Task, p: Dict[str, Any],
                           inputs: List[np.ndarray]) -> List[Dict[str, Any]]:
    """:func:`ablate` as it was computed before the shared prefixes: each :func:`without_layer` model
    checked from the embeddings (one whole forward per input and layer). The reference the tests and
    ``benchmarks/ablation_speed.py`` compare :func:`ablate` with; same arguments and result."""
    n_attn = sum(s.kind == "attn" for s in model.arch.sublayers)
    packed = pack(model, task, p, inputs)
    out = []
    for a in range(n_attn):
        res = check_batches(without_layer(model, a), task, p, packed, f"ablate layer {a + 1}")
        frac = 1.0 - res.failed / res.inputs if res.inputs else 0.0
        out.append({"layer": a + 1, "exact_fraction": round(frac, 6), "redundant": res.inputs > 0 and res.failed == 0})
    return out


def _ablated_rows(model: CompiledModel, ids: np.ndarray, batch: int) -> np.ndarray:
    """:func:`ablated_logits` of ids [rows <= batch, T], padded to :func:`bucket` rows -> [n_attn, rows, T, O]."""
    rows = len(ids)
    size = bucket(rows, batch)
    if rows < size:  # pad with copies of the first row (their outputs are dropped)
        ids = np.concatenate([ids, np.repeat(ids[:1], size - rows, axis=0)])
    return np.asarray(ablated_logits(model.jparams, as_jax(np.asarray(ids)), model.arch))[:, :rows]


def ablation_inputs(task: Task, p: Dict[str, Any], samples: int, seed: int, edges: bool = True) -> List[np.ndarray]:
    """Random inputs (the task's distribution, ``seed``) plus, with ``edges``, the task's edge cases."""
    rng = np.random.default_rng(seed)
    batches: Iterable[np.ndarray] = [task.sample(p, rng, samples)] if samples > 0 else []
    return list(batches) + (list(task.edge_cases(p)) if edges else [])
