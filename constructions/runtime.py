"""The one batched transformer forward pass (JAX), for compiled and trained models alike.

A model is ``(params, arch)``: ``params`` is a pytree of arrays, ``arch`` a static,
hashable :class:`Arch`. :func:`forward` is jitted with ``arch`` static, so each
architecture compiles once per input shape.

Layout of ``params``::

    {"embed": {"token": [V, D], "pos": [T_max, D]},
     "layers": [sublayer params, one per arch.sublayers entry],
     "unembed": {"w": [D, O], "b": [O] (optional)},
     "ln_final": {"scale": [D], "offset": [D]}            # only if arch.layer_norm}

attention sublayer: ``{"w_q": [H, Dq, dk], "w_k": [H, Dk, dk], "w_v": [H, Dv, dv],
"w_o": [H, dv, Do]}`` plus optional biases ``b_q [H, dk]``, ``b_k``, ``b_v [H, dv]``,
``b_o [D]`` and ``ln`` (pre-LayerNorm). ``Dq``/``Dk``/``Dv`` are the residual rows
each projection reads (``SublayerSpec.q_rows`` etc., None = all D) and ``Do`` the
rows the output writes; compiled models read and write only the few
directions their heads use, which is exact and much faster than dense D x D.
MLP sublayer: ``{"w_1": [Din, h], "b_1": [h], "w_2": [h, Dout], "b_2": [Dout]}``.

Attention kinds (SPEC §3): ``softmax`` (inverse temperature carried by the
weights, times ``qk_scale``), ``hardmax`` (uniform over the keys whose score is
within ``HARDMAX_TOL`` of the row maximum: the reference semantics) and ``relu``
(weights = ReLU(score), no normalisation). Masked keys (causal future, PAD)
get weight 0 in every kind.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Dict, NamedTuple, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np

ATTENTION_KINDS = ("softmax", "hardmax", "relu")
#: Relative tolerance for hardmax ties.
HARDMAX_TOL = 1e-4
#: For the attention margin, a head's intended keys are those scoring within this many nats of the
#: row's best key (a deliberate tie, as in tracr's averaging heads, is never exact in floating point).
TIE_NATS = 0.5
_NEG = -1e9


@dataclasses.dataclass(frozen=True)
class SublayerSpec:
    """Static description of one sublayer.

    Attributes:
        kind: ``"attn"`` or ``"mlp"``.
        q_rows, k_rows, v_rows: residual directions each attention projection reads
            (tuples of ints; None = every direction).
        in_rows: residual directions an MLP reads (None = every direction).
        out_rows: residual directions the sublayer writes (None = every direction).
        qk_scale: factor applied to attention scores (tracr: 1/sqrt(key_size)).
    """

    kind: str
    q_rows: Optional[Tuple[int, ...]] = None
    k_rows: Optional[Tuple[int, ...]] = None
    v_rows: Optional[Tuple[int, ...]] = None
    in_rows: Optional[Tuple[int, ...]] = None
    out_rows: Optional[Tuple[int, ...]] = None
    qk_scale: float = 1.0

    def rows(self, name: str, d_model: int) -> np.ndarray:
        """The residual rows of ``name`` (``"q_rows"``, ..., ``"out_rows"``) as an int array; None = all d_model."""
        rows = getattr(self, name)
        return np.arange(d_model) if rows is None else np.asarray(rows, int)


@dataclasses.dataclass(frozen=True)
class Arch:
    """Static architecture of a model (hashable; a jit static argument).

    Attributes:
        sublayers: the sublayers in order.
        attention: ``"softmax"``, ``"hardmax"`` or ``"relu"``.
        causal: mask keys after the query position.
        layer_norm: pre-LayerNorm before each sublayer and before the read-out.
        pad_id: token id whose positions are never attended to (None = no padding).
    """

    sublayers: Tuple[SublayerSpec, ...]
    attention: str = "softmax"
    causal: bool = True
    layer_norm: bool = False
    pad_id: Optional[int] = None

    def __post_init__(self):
        if self.attention not in ATTENTION_KINDS:
            raise ValueError(f"attention must be one of {ATTENTION_KINDS}, got {self.attention!r}")


class ForwardOutput(NamedTuple):
    """Result of :func:`forward`.

    logits: [batch, seq, O] read-out scores (float).
    attention: per attention sublayer, [batch, heads, seq, seq] weights (only when
        ``collect_attention``), else an empty tuple.
    attn_mass: per attention sublayer, [batch, heads] the minimum over (non-PAD)
        query positions of 1 - the weight on keys below the row's best (softmax: keys
        more than ``TIE_NATS`` below, so this is the weight on the intended keys, 1.0 =
        hardmax; ReLU: 1.0 when no key below the top score gets weight).
    residual: [batch, seq, D] final residual stream.
    residuals: only when ``collect_residuals`` (else an empty tuple): the residual stream
        [batch, seq, D] before the first sublayer (the embeddings, entry 0) and after every
        sublayer (entry i + 1 after ``arch.sublayers[i]``), so ``residuals[-1]`` is ``residual``
        and ``residuals[i + 1] - residuals[i]`` is what sublayer i wrote.
    head_outputs: only when ``collect_residuals``: per attention sublayer, [batch, heads, seq, Do]
        what each head writes into the sublayer's ``out_rows`` (``Do`` of them; all D when None);
        the sublayer's write is their sum plus the output bias ``b_o`` when there is one.
    scores: only when ``collect_residuals``: per attention sublayer, [batch, heads, seq, seq]
        attention scores (query rows, key columns; times ``qk_scale``, before masking: masked
        keys hold the score they would have had).
    """

    logits: jax.Array
    attention: Tuple[jax.Array, ...]
    attn_mass: Tuple[jax.Array, ...]
    residual: jax.Array
    residuals: Tuple[jax.Array, ...] = ()
    head_outputs: Tuple[jax.Array, ...] = ()
    scores: Tuple[jax.Array, ...] = ()


def _take(x, rows):
    return x if rows is None else x[..., np.asarray(rows)]


def _write(x, rows, out):
    return x + out if rows is None else x.at[..., np.asarray(rows)].add(out)


def _layer_norm(x, p):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + 1e-5) * p["scale"] + p["offset"]


def attention_weights(scores, mask, kind: str):
    """Attention weights from scores.

    Args:
        scores: [batch, heads, q, k] float.
        mask: [batch, 1, q, k] bool, True where the key may be attended.
        kind: one of :data:`ATTENTION_KINDS`.
    Returns:
        [batch, heads, q, k] weights (rows with no allowed key are all zero).
    """
    if kind == "relu":
        return jnp.where(mask, jax.nn.relu(scores), 0.0)
    masked = jnp.where(mask, scores, _NEG)
    if kind == "softmax":
        w = jax.nn.softmax(masked, axis=-1)
    else:
        top = masked.max(-1, keepdims=True)
        near = (masked >= top - HARDMAX_TOL * (1.0 + jnp.abs(top))) & mask
        w = near / jnp.maximum(near.sum(-1, keepdims=True), 1)
    return jnp.where(mask, w, 0.0).astype(scores.dtype)


def _top_mass(scores, w, mask, query_ok, kind):
    # 1 - the weight on keys below the row's top score: for softmax and hardmax this is the
    # weight on the top keys; for ReLU it is 1 when only top keys get weight (an all-zero
    # row, where nothing is selected, counts as clean).
    masked = jnp.where(mask, scores, _NEG)
    top = masked.max(-1, keepdims=True)
    tol = TIE_NATS if kind == "softmax" else HARDMAX_TOL * (1.0 + jnp.abs(top))  # ReLU/hardmax: exact ties
    near = (masked >= top - tol) & mask
    mass = 1.0 - jnp.where(near | ~mask, 0.0, w).sum(-1)  # [b, h, q]
    counted = mask.any(-1) & query_ok  # [b, 1, q]: real queries with at least one key
    return jnp.where(counted, mass, 1.0).min(-1)  # [b, h]


def mantissa_rounder(mantissa_bits):
    """Round to ``mantissa_bits`` explicit mantissa bits (round half to even), or the identity for None.

    ``mantissa_bits`` may be a traced integer, so every width shares one compiled
    forward. The exponent range stays that of the compute dtype.
    """
    if mantissa_bits is None:
        return lambda a: a
    scale = jnp.exp2(jnp.asarray(mantissa_bits, jnp.float32) + 1.0)

    def rnd(a):
        m, e = jnp.frexp(a)  # a = m * 2^e, 0.5 <= |m| < 1: keep 1 + mantissa_bits significant bits
        return jnp.ldexp(jnp.round(m * scale.astype(m.dtype)) / scale.astype(m.dtype), e).astype(a.dtype)

    return rnd


def _attention(x, h, p, spec: SublayerSpec, mask, query_ok, kind, collect, rnd=lambda a: a, trace=None):
    q = rnd(jnp.einsum("btd,hde->bhte", _take(h, spec.q_rows), p["w_q"]))
    k = rnd(jnp.einsum("btd,hde->bhte", _take(h, spec.k_rows), p["w_k"]))
    v = rnd(jnp.einsum("btd,hde->bhte", _take(h, spec.v_rows), p["w_v"]))
    if "b_q" in p:
        q = rnd(q + p["b_q"][None, :, None, :])
        k = rnd(k + p["b_k"][None, :, None, :])
        v = rnd(v + p["b_v"][None, :, None, :])
    scores = rnd(jnp.einsum("bhte,bhse->bhts", q, k) * spec.qk_scale)
    w = rnd(attention_weights(scores, mask, kind))
    z = rnd(jnp.einsum("bhts,bhse->bhte", w, v))
    out = rnd(jnp.einsum("bhte,hed->btd", z, p["w_o"]))
    if "b_o" in p:
        out = rnd(out + p["b_o"])
    mass = _top_mass(scores, w, mask, query_ok, kind)
    if trace is not None:  # per-head writes and scores, only when residuals are collected
        trace["head_outputs"].append(rnd(jnp.einsum("bhte,hed->bhtd", z, p["w_o"])))
        trace["scores"].append(scores)
    return rnd(_write(x, spec.out_rows, out)), (w if collect else None), mass


def _mlp(x, h, p, spec: SublayerSpec, rnd=lambda a: a):
    hidden = rnd(jax.nn.relu(rnd(_take(h, spec.in_rows) @ p["w_1"] + p["b_1"])))
    return rnd(_write(x, spec.out_rows, rnd(hidden @ p["w_2"] + p["b_2"])))


@functools.partial(jax.jit, static_argnames=("arch", "collect_attention", "dtype", "collect_residuals"))
def forward(params: Dict[str, Any], ids: jax.Array, arch: Arch, collect_attention: bool = False,
            dtype: Any = jnp.float32, mantissa_bits: Optional[Any] = None,
            collect_residuals: bool = False) -> ForwardOutput:
    """Run a model on a batch of token ids.

    Args:
        params: weights, layout in the module docstring.
        ids: [batch, seq] int32 token ids (position 0 is BOS for compiled models).
        arch: static architecture.
        collect_attention: also return every attention map (memory: batch*heads*seq^2 per layer).
        dtype: compute dtype (float32 default; float64 needs ``jax_enable_x64``;
            bfloat16/float16 for precision studies).
        mantissa_bits: emulate a float format with this many explicit mantissa bits and
            ``dtype``'s exponent range (with float32: 7 is bfloat16, 23 is float32 itself):
            the weights and the result of every operation (projections, scores, softmax
            weights, sublayer outputs, residual sums) are rounded to nearest (ties to even);
            sums inside one matrix product accumulate in ``dtype``, as on mixed-precision
            hardware. A traced integer: all widths share one compilation. None = off.
        collect_residuals: also return the residual stream after every sublayer, each head's
            output and the attention scores (``ForwardOutput.residuals``, ``head_outputs``,
            ``scores``; memory: batch*seq*D per sublayer). Off (the default), the traced
            computation is the same as without the option.
    Returns:
        :class:`ForwardOutput`.
    """
    rnd = mantissa_rounder(mantissa_bits)
    params = jax.tree_util.tree_map(lambda a: rnd(a.astype(dtype)), params)
    _, t = ids.shape
    x = rnd(params["embed"]["token"][ids] + params["embed"]["pos"][:t][None])
    mask = jnp.ones((t, t), bool)
    if arch.causal:
        mask = jnp.tril(mask)
    mask = jnp.broadcast_to(mask, (ids.shape[0], 1, t, t))
    query_ok = jnp.ones((ids.shape[0], 1, t), bool)
    if arch.pad_id is not None:
        mask = mask & (ids != arch.pad_id)[:, None, None, :]
        query_ok = (ids != arch.pad_id)[:, None, :]
    maps, masses = [], []
    trace = {"residuals": [x], "head_outputs": [], "scores": []} if collect_residuals else None
    for spec, p in zip(arch.sublayers, params["layers"]):
        h = _layer_norm(x, p["ln"]) if arch.layer_norm else x
        if spec.kind == "attn":
            x, w, mass = _attention(x, h, p, spec, mask, query_ok, arch.attention, collect_attention, rnd, trace)
            masses.append(mass)
            if collect_attention:
                maps.append(w)
        else:
            x = _mlp(x, h, p, spec, rnd)
        if trace is not None:
            trace["residuals"].append(x)
    out = _layer_norm(x, params["ln_final"]) if arch.layer_norm else x
    logits = out @ params["unembed"]["w"]
    if "b" in params["unembed"]:
        logits = logits + params["unembed"]["b"]
    if trace is None:
        return ForwardOutput(logits=logits, attention=tuple(maps), attn_mass=tuple(masses), residual=x)
    return ForwardOutput(logits=logits, attention=tuple(maps), attn_mass=tuple(masses), residual=x,
                         residuals=tuple(trace["residuals"]), head_outputs=tuple(trace["head_outputs"]),
                         scores=tuple(trace["scores"]))
