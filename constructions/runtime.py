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
:func:`plan` may turn one-hot projections into ``<name>_gather`` entries and mark an attention
sublayer with ``sparse_keys`` (scores by gathers where the keys are 0 / +-1, bit-identical).

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

from depthcraft.constructions.cache import enable_jax_cache

enable_jax_cache()  # compilations persist across processes (constructions/cache.py)

ATTENTION_KINDS = ("softmax", "hardmax", "relu")
#: MLP hidden activations (:attr:`SublayerSpec.activation`).
MLP_ACTIVATIONS = ("relu", "gelu_tanh")
#: Relative tolerance for hardmax ties.
HARDMAX_TOL = 1e-4
#: For the attention margin, a head's intended keys are those scoring within this many nats of the
#: row's best key (a deliberate tie, as in tracr's averaging heads, is never exact in floating point).
TIE_NATS = 0.5
_NEG = -1e9
#: Key suffix of a planned (gather-and-scale) projection, see :func:`plan`.
GATHER = "_gather"
#: Marker key of an attention sublayer whose scores may be computed by gathers (:func:`plan`,
#: :func:`_sparse_scores`); its value is an empty int32 array (only its presence matters).
SPARSE_KEYS = "sparse_keys"
#: The plan marks a sublayer's scores for gathering only from this key size (query/key width) up:
#: below it the check and the gathers cost about as much as the dense product (measured on this
#: CPU with synthetic keys at batch 32, T = key size = 129; docs/performance.md, "Runtime").
SPARSE_MIN_KEY = 256
#: At most this many non-zero entries per key vector for the gathered scores (see :func:`_sparse_scores`).
SPARSE_MAX_NNZ = 2


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
        activation: an MLP's hidden activation, one of :data:`MLP_ACTIVATIONS`: ``"relu"``
            (compiled and trained models) or ``"gelu_tanh"`` (GPT-2's ``gelu_new``,
            0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), for published GPT-2 models).
    """

    kind: str
    q_rows: Optional[Tuple[int, ...]] = None
    k_rows: Optional[Tuple[int, ...]] = None
    v_rows: Optional[Tuple[int, ...]] = None
    in_rows: Optional[Tuple[int, ...]] = None
    out_rows: Optional[Tuple[int, ...]] = None
    qk_scale: float = 1.0
    activation: str = "relu"

    def __post_init__(self):
        if self.activation not in MLP_ACTIVATIONS:
            raise ValueError(f"activation must be one of {MLP_ACTIVATIONS}, got {self.activation!r}")

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


def _head_proj(h, p, name, rows):
    """[b, t, D] -> [b, heads, t, e]: a matmul on the read rows, or the plan's gather-and-scale."""
    if name in p:
        return jnp.einsum("btd,hde->bhte", _take(h, rows), p[name])
    g = p[name + GATHER]
    return jnp.swapaxes(h[..., g["index"]] * g["scale"], 1, 2)  # h[..., [H, e]] -> [b, t, H, e]


def _proj(a, p, name, rows=None):
    """[..., Din] -> [..., Dout]: ``a[..., rows] @ p[name]``, or the plan's gather-and-scale."""
    if name in p:
        return _take(a, rows) @ p[name]
    g = p[name + GATHER]
    return a[..., g["index"]] * g["scale"]


def _attention(x, h, p, spec: SublayerSpec, mask, query_ok, kind, collect, rnd=lambda a: a, trace=None):
    q = rnd(_head_proj(h, p, "w_q", spec.q_rows))
    k = rnd(_head_proj(h, p, "w_k", spec.k_rows))
    v = rnd(_head_proj(h, p, "w_v", spec.v_rows))
    if "b_q" in p:
        q = rnd(q + p["b_q"][None, :, None, :])
        k = rnd(k + p["b_k"][None, :, None, :])
        v = rnd(v + p["b_v"][None, :, None, :])
    scores = rnd(_scores(q, k, p) * spec.qk_scale)
    w = rnd(attention_weights(scores, mask, kind))
    z = rnd(jnp.einsum("bhts,bhse->bhte", w, v))
    if "w_o" in p:
        out = rnd(jnp.einsum("bhte,hed->btd", z, p["w_o"]))
    else:  # the plan: every written direction reads one (head, column) of z
        b, nh, t, e = z.shape
        out = rnd(_proj(jnp.swapaxes(z, 1, 2).reshape(b, t, nh * e), p, "w_o"))
    if "b_o" in p:
        out = rnd(out + p["b_o"])
    mass = _top_mass(scores, w, mask, query_ok, kind)
    if trace is not None:  # per-head writes and scores, only when residuals are collected
        trace["head_outputs"].append(rnd(_head_outputs(z, p)))
        trace["scores"].append(scores)
    return rnd(_write(x, spec.out_rows, out)), (w if collect else None), mass


def _scores(q, k, p):
    """[b, heads, t, e] queries and keys -> [b, heads, t, t] scores ``q @ k^T`` (before ``qk_scale``).

    A dense product, or, where the plan marked the sublayer (:data:`SPARSE_KEYS`) and the
    values allow it (:func:`_sparse_scores`), the same numbers by gathers.
    """
    dense = lambda q, k: jnp.einsum("bhte,bhse->bhts", q, k)
    if SPARSE_KEYS not in p or q.dtype != jnp.float32:
        return dense(q, k)
    ok, gathered = _sparse_scores_ok(q, k), functools.partial(_sparse_scores, nnz=SPARSE_MAX_NNZ)
    return jax.lax.cond(ok, gathered, dense, q, k)


def _sparse_scores_ok(q, k, nnz: int = SPARSE_MAX_NNZ):
    """Whether :func:`_sparse_scores` equals the dense product exactly on these values (a traced bool).

    True when every key entry is 0, 1 or -1, every key vector has at most ``nnz`` (<= 2) non-zero
    entries and every query entry is finite: then each product ``q * k`` is exact (a sign change or
    an exact zero), each score is a sum of at most two non-zero exact terms and zeros, and such a sum
    has one correctly rounded value whatever the order of the terms and whether the products are
    fused (FMA) or not, which is all a dense float32 product may vary.

    Written with plain sums and maxima (XLA's CPU backend vectorises them; ``all`` and ``argmax``
    are much slower there): ``k * k == |k|`` holds in floating point exactly for 0 and +-1 (NaN and
    inf fail it), so the sum of ``|k|`` over a key is then its count of non-zeros, and ``q * 0``
    sums to 0 exactly when every query entry is finite.
    """
    a = jnp.abs(k)
    unit = jnp.max(jnp.abs(k * k - a), initial=0.0) == 0
    few = jnp.max(a.sum(-1), initial=0.0) <= nnz
    return unit & few & (jnp.sum(q * 0) == 0)


def _sparse_scores(q, k, nnz: int = SPARSE_MAX_NNZ):
    """[b, heads, t, e] queries and keys -> [b, heads, t, t] scores ``q @ k^T`` by gathers (exact, see below).

    For each key vector, its first and (``nnz`` = 2) last non-zero column ``c1``, ``c2`` and their
    values; score[.., i, j] = q[.., i, c1[j]] * k1[j] + q[.., i, c2[j]] * k2[j] (k2 = 0 when the key
    has one non-zero, both 0 when none). Equal to the dense product when :func:`_sparse_scores_ok`
    holds (``jax.lax.cond`` in :func:`_scores` falls back to the product otherwise), including the
    sign of zero (a product's sum starts from +0, so a zero score is +0 there and is made +0 here);
    the work is O(t^2) per head instead of O(t^2 e). Float32 only (the caller checks).
    """
    e = k.shape[-1]
    nz = k != 0
    col = jnp.arange(e, dtype=jnp.int32)
    c1 = jnp.min(jnp.where(nz, col, e), axis=-1) % e  # [b, h, s]: first non-zero column (0 when none)
    k1 = jnp.take_along_axis(k, c1[..., None], -1)[..., 0]
    pick = jax.vmap(jax.vmap(lambda qm, idx: qm[:, idx]))  # [t, e], [s] -> [t, s], over b and h
    out = pick(q, c1) * k1[:, :, None, :]
    if nnz >= 2:
        c2 = jnp.max(jnp.where(nz, col, 0), axis=-1)  # last non-zero column (0 when none)
        k2 = jnp.where(c2 != c1, jnp.take_along_axis(k, c2[..., None], -1)[..., 0], jnp.zeros((), k.dtype))
        out = out + pick(q, c2) * k2[:, :, None, :]
    return jnp.where(out == 0, jnp.zeros((), out.dtype), out)  # -0 -> +0: a dense sum starts from +0


def _head_outputs(z, p):
    """[b, heads, t, dv] -> [b, heads, t, Do]: what each head writes (dense ``w_o`` or the plan's gather)."""
    if "w_o" in p:
        return jnp.einsum("bhte,hed->bhtd", z, p["w_o"])
    g = p["w_o" + GATHER]
    b, nh, t, e = z.shape
    flat = jnp.swapaxes(z, 1, 2).reshape(b, t, nh * e)[..., g["index"]] * g["scale"]  # [b, t, Do]
    own = (g["index"] // e)[None, :] == jnp.arange(nh)[:, None]  # [heads, Do]: the head each column reads
    return jnp.where(own[None, :, None, :], flat[:, None], jnp.zeros((), z.dtype))


def _mlp(x, h, p, spec: SublayerSpec, rnd=lambda a: a):
    act = jax.nn.relu if spec.activation == "relu" else functools.partial(jax.nn.gelu, approximate=True)
    hidden = rnd(act(rnd(_proj(h, p, "w_1", spec.in_rows) + p["b_1"])))
    return rnd(_write(x, spec.out_rows, rnd(_proj(hidden, p, "w_2") + p["b_2"])))


def _gather(w: np.ndarray, rows: Optional[Tuple[int, ...]]):
    """``{"index", "scale"}`` for a matrix [Din, Dout] with at most one non-zero per column, else None.

    ``index`` [Dout] int32 is the residual row (through ``rows``) each column reads; ``scale``
    [Dout] its weight (an all-zero column reads row 0 with weight 0).
    """
    if w.shape[0] == 0:  # reads nothing: every column is zero
        return {"index": np.zeros(w.shape[1], np.int32), "scale": np.zeros(w.shape[1], w.dtype)}
    nz = w != 0
    if nz.sum(0).max(initial=0) > 1:
        return None
    idx = nz.argmax(0)
    scale = np.take_along_axis(w, idx[None], 0)[0]
    full = idx if rows is None else np.asarray(rows, np.int64)[idx]
    return {"index": full.astype(np.int32), "scale": scale.astype(w.dtype)}


def as_jax(tree: Any) -> Any:
    """``tree`` with every numpy array put on the default device: ``jax.tree_util.tree_map(jnp.asarray, tree)``,
    the same arrays (values, dtypes, shapes), without compiling.

    ``jnp.asarray`` of a numpy array runs JAX's ``stage`` operation, one XLA compilation per shape
    and dtype; ``jax.device_put`` copies the array without one. JAX arrays are returned as they
    are, other leaves (Python scalars) go through ``jnp.asarray``.
    """
    return jax.tree_util.tree_map(_as_jax, tree)


def _as_jax(a: Any) -> Any:
    if isinstance(a, jax.Array):
        return a
    if type(a) is np.ndarray:
        return jax.device_put(a)
    return jnp.asarray(a)


def plan(params: Dict[str, Any], arch: Arch, sparse_min_key: int = SPARSE_MIN_KEY) -> Dict[str, Any]:
    """The weights of a planned forward: one-hot projections become gathers, dense ones stay matmuls.

    Decided once per weight (at load, :attr:`constructions.model.CompiledModel.jparams`). A
    projection whose matrix has at most one non-zero in every output column (for attention
    ``w_q``/``w_k``/``w_v`` per head; for ``w_o`` over all heads' columns together; MLP ``w_1``,
    ``w_2``; the read-out) is stored as ``<name>_gather = {"index": int32, "scale": float}``
    and computed as ``x[..., index] * scale``; the residual rows it reads are folded into
    ``index``. Exact: a product of a one-hot column adds one term to zeros, which
    is the term itself (for finite inputs; an inf input gives inf, not NaN, in the other
    columns). Other weights are kept as they are.

    Attention scores: where every head's key projection is such a gather with weights 0, 1 or -1
    (each key entry is a residual entry, up to sign) and the key size is at least
    ``sparse_min_key``, the sublayer is marked (:data:`SPARSE_KEYS`): its scores are computed by
    gathers (O(T^2) per head instead of O(T^2 x key size)) whenever, on the values of the call,
    every key entry is 0 or +-1 with at most two non-zeros per key and every query entry is
    finite, and by the dense product otherwise (:func:`_sparse_scores_ok`; decided per call with
    ``jax.lax.cond``, so the scores are the dense product's, bit for bit, either way). In the k-hop
    constructions the keys are the position one-hots (plus tracr's BOS direction at position 0),
    so the check holds on every input the tasks give.

    Args:
        params: the weights (numpy arrays), layout in the module docstring.
        arch: the static architecture (the rows each projection reads).
        sparse_min_key: the smallest key size whose scores the plan marks for gathering
            (tests pass 1 to exercise the path on small models).
    Returns:
        A new weight pytree for :func:`forward` (the input is not modified).
    """
    def gather_or(layer, name, new_name, w, rows):
        g = _gather(w, rows)
        if g is None:
            layer[name] = w
        else:
            layer[new_name] = g

    layers = []
    for spec, p in zip(arch.sublayers, params["layers"]):
        q = dict(p)
        if spec.kind == "attn":
            for name, rows in (("w_q", spec.q_rows), ("w_k", spec.k_rows), ("w_v", spec.v_rows)):
                w = np.asarray(q.pop(name))  # [H, Din, e]
                gs = [_gather(w[i], rows) for i in range(w.shape[0])]
                if all(g is not None for g in gs):
                    q[name + GATHER] = {"index": np.stack([g["index"] for g in gs]),
                                        "scale": np.stack([g["scale"] for g in gs])}
                else:
                    q[name] = w
            kg = q.get("w_k" + GATHER)
            if (kg is not None and kg["scale"].shape[-1] >= sparse_min_key
                    and np.isin(kg["scale"], (0.0, 1.0, -1.0)).all()):
                q[SPARSE_KEYS] = np.zeros(0, np.int32)  # keys are residual entries (up to sign): try gathers
            w_o = np.asarray(q.pop("w_o"))  # [H, dv, Do]
            gather_or(q, "w_o", "w_o" + GATHER, w_o.reshape(-1, w_o.shape[-1]), None)
            if "w_o" in q:
                q["w_o"] = w_o
        else:
            gather_or(q, "w_1", "w_1" + GATHER, np.asarray(q.pop("w_1")), spec.in_rows)
            gather_or(q, "w_2", "w_2" + GATHER, np.asarray(q.pop("w_2")), None)
        layers.append(q)
    unembed = dict(params["unembed"])
    gather_or(unembed, "w", "w" + GATHER, np.asarray(unembed.pop("w")), None)
    return dict(params, layers=layers, unembed=unembed)


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
    params = _cast(params, dtype, rnd)
    x = _embed(params, ids, rnd)
    mask, query_ok = _masks(ids, arch)
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
    logits = _readout(params, x, arch)
    if trace is None:
        return ForwardOutput(logits=logits, attention=tuple(maps), attn_mass=tuple(masses), residual=x)
    return ForwardOutput(logits=logits, attention=tuple(maps), attn_mass=tuple(masses), residual=x,
                         residuals=tuple(trace["residuals"]), head_outputs=tuple(trace["head_outputs"]),
                         scores=tuple(trace["scores"]))


def _cast(params, dtype, rnd):
    """Weights to the compute dtype (rounded by ``rnd``); a plan's gather indices stay integers."""
    return jax.tree_util.tree_map(
        lambda a: a if jnp.issubdtype(a.dtype, jnp.integer) else rnd(a.astype(dtype)), params)


def _embed(params, ids, rnd):
    """[batch, seq] ids -> [batch, seq, D] token plus position embeddings."""
    _, t = ids.shape
    return rnd(params["embed"]["token"][ids] + params["embed"]["pos"][:t][None])


def _masks(ids, arch: Arch):
    """(mask [batch, 1, seq, seq] bool: keys each query may attend, query_ok [batch, 1, seq] bool: non-PAD)."""
    _, t = ids.shape
    mask = jnp.ones((t, t), bool)
    if arch.causal:
        mask = jnp.tril(mask)
    mask = jnp.broadcast_to(mask, (ids.shape[0], 1, t, t))
    query_ok = jnp.ones((ids.shape[0], 1, t), bool)
    if arch.pad_id is not None:
        mask = mask & (ids != arch.pad_id)[:, None, None, :]
        query_ok = (ids != arch.pad_id)[:, None, :]
    return mask, query_ok


def _readout(params, x, arch: Arch):
    """[batch, seq, D] final residual stream -> [batch, seq, O] logits."""
    out = _layer_norm(x, params["ln_final"]) if arch.layer_norm else x
    logits = _proj(out, params["unembed"], "w")
    if "b" in params["unembed"]:
        logits = logits + params["unembed"]["b"]
    return logits


def _sublayer(x, p, spec: SublayerSpec, arch: Arch, mask, query_ok):
    """The residual stream after one sublayer (float32, no trace, no margins)."""
    h = _layer_norm(x, p["ln"]) if arch.layer_norm else x
    if spec.kind == "attn":
        return _attention(x, h, p, spec, mask, query_ok, arch.attention, False)[0]
    return _mlp(x, h, p, spec)


@functools.partial(jax.jit, static_argnames=("arch",))
def ablated_logits(params: Dict[str, Any], ids: jax.Array, arch: Arch) -> jax.Array:
    """Logits of the model with each attention sublayer removed in turn, from one shared prefix.

    Removing attention sublayer ``a`` (``arch.sublayers[i]``) leaves the residual stream before
    it as the full model computes it; the ablated model then runs only sublayers ``i + 1 ...``
    from there. Every prefix is computed once per call (the residual stream is carried forward
    through each attention sublayer after its ablated suffix branches off), so a call costs the
    forward up to the last attention sublayer plus one suffix per attention sublayer, instead of
    one whole forward per ablated layer. The removed sublayer is skipped, not run with zero output
    weights: the same residual stream as adding its zero output (for finite activations).

    Used by :func:`verify.ablation.ablate`; float32, no mantissa emulation, no margins.

    Args:
        params: weights (planned or dense), layout in the module docstring.
        ids: [batch, seq] int32 token ids.
        arch: static architecture.
    Returns:
        [n_attn, batch, seq, O] float32 logits, entry ``a`` with the ``a``-th attention sublayer
        (0-based) removed.
    Raises:
        ValueError: the architecture has no attention sublayer.
    """
    attn = [i for i, s in enumerate(arch.sublayers) if s.kind == "attn"]
    if not attn:
        raise ValueError("ablated_logits: the architecture has no attention sublayer to remove")
    params = _cast(params, jnp.float32, lambda a: a)
    mask, query_ok = _masks(ids, arch)
    x = _embed(params, ids, lambda a: a)
    layers = params["layers"]
    out = []
    for i in range(attn[-1] + 1):
        if i in attn:  # the model without sublayer i: the suffix from the residual stream before it
            y = x
            for j in range(i + 1, len(arch.sublayers)):
                y = _sublayer(y, layers[j], arch.sublayers[j], arch, mask, query_ok)
            out.append(_readout(params, y, arch))
        if i < attn[-1]:
            x = _sublayer(x, layers[i], arch.sublayers[i], arch, mask, query_ok)
    return jnp.stack(out)
