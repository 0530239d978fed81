"""The trainable model family of the cross-check (SPEC §7).

Token embedding + learned absolute position embedding, ``depth`` attention
sublayers of ``heads`` heads each (softmax or ReLU attention, causal or
bidirectional), each optionally followed by an MLP (ReLU, hidden width
``mlp_ratio * width``), optional pre-LayerNorm (before every sublayer and before
the read-out), a linear read-out with bias. This is GPT-2's block without
dropout, and with ReLU in place of GELU because the runtime's MLP is ReLU.

The model is a ``(params, arch)`` pair of :mod:`constructions.runtime`: the
same jitted :func:`~constructions.runtime.forward` runs compiled constructions
and trained models, so attention maps of both come from the same code.
Full-width projections use ``q_rows = k_rows = v_rows = out_rows = None``.

Token embeddings (``embedding``): ``learned`` (normal(0, 0.02), trained), or fixed
and never updated: ``onehot`` (row i = e_i, needs width >= input vocabulary) or
``random`` (normal(0, 1/width), unit expected row norm, drawn from the run's seed).
A learned embedding of a token that never occurs in training gets no gradient: it
stays at its initialisation (shrunk only by weight decay), which is why template
matching on held-out tokens is also run with fixed embeddings (issue 11).

Looped depth (``looped=True``, issue 41; Saunshi et al., "Reasoning with latent thoughts: on
the power of looped transformers", ICLR 2025): one block (an attention sublayer and its MLP)
whose weights are shared by all ``depth`` applications. The runtime layout is unchanged (the
block's arrays appear ``depth`` times in ``params["layers"]``, equal at initialisation); the
optimiser keeps them equal (:func:`tie_blocks`: the shared weight's gradient is the sum of the
copies' gradients, clipped, decayed and updated once, the update written to every copy), so the
model is exactly one block applied ``depth`` times, and every forward, evaluation and attention
map of the cross-check runs on it unchanged.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from depthcraft.constructions.errors import ParameterError
from depthcraft.constructions.runtime import ATTENTION_KINDS, Arch, SublayerSpec, as_jax

#: Standard deviation of the normal initialisation (GPT-2).
INIT_STD = 0.02

#: Token embedding kinds: trained, or fixed (one-hot rows / random rows, never updated).
EMBEDDINGS = ("learned", "onehot", "random")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Architecture of one trained model.

    Attributes:
        depth: attention sublayers L (>= 1).
        heads: heads per attention sublayer H (>= 1).
        width: residual width d_model; must be divisible by ``heads`` (d_head = width / heads).
        mlp: an MLP after every attention sublayer.
        mlp_ratio: MLP hidden width / d_model.
        layer_norm: pre-LayerNorm before every sublayer and the read-out.
        attention: ``"softmax"`` or ``"relu"`` (``"hardmax"`` has no gradient).
        causal: mask keys after the query position.
        embedding: token embedding, one of :data:`EMBEDDINGS` (``onehot`` and ``random`` are
            fixed: the optimiser never updates them, see :meth:`frozen`).
        looped: one block's weights shared by all ``depth`` applications (module docstring).
    Raises:
        ParameterError: on any value outside these ranges.
    """

    depth: int
    heads: int
    width: int
    mlp: bool = True
    mlp_ratio: int = 4
    layer_norm: bool = True
    attention: str = "softmax"
    causal: bool = True
    embedding: str = "learned"
    looped: bool = False

    def __post_init__(self):
        for name in ("depth", "heads", "width", "mlp_ratio"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ParameterError(f"{name} must be an integer >= 1, got {v!r}")
        if self.width % self.heads:
            raise ParameterError(f"width={self.width} must be divisible by heads={self.heads} "
                                 f"(d_head = width / heads)")
        if self.attention not in ATTENTION_KINDS or self.attention == "hardmax":
            raise ParameterError(f"attention={self.attention!r} cannot be trained; expected 'softmax' or 'relu'")
        if self.embedding not in EMBEDDINGS:
            raise ParameterError(f"embedding={self.embedding!r}; expected one of {', '.join(EMBEDDINGS)}")

    @property
    def frozen(self) -> Tuple[Tuple[str, ...], ...]:
        """Parameter paths the optimiser must leave unchanged: ``(("embed", "token"),)`` for a
        fixed token embedding, else none."""
        return () if self.embedding == "learned" else (("embed", "token"),)

    @property
    def tie(self) -> Optional[Tuple[int, int]]:
        """``(sublayers per block, blocks)`` whose weights the optimiser ties (:func:`tie_blocks`),
        or None for an unlooped model."""
        return (2 if self.mlp else 1, self.depth) if self.looped else None

    @property
    def rules(self) -> Tuple[Any, ...]:
        """What the optimiser needs to know of the parameters: ``(frozen, tie)`` (hashable)."""
        return (self.frozen, self.tie)

    @property
    def d_head(self) -> int:
        return self.width // self.heads

    def arch(self, pad_id: Optional[int]) -> Arch:
        """The runtime :class:`~constructions.runtime.Arch` (full-width sublayers).

        Args:
            pad_id: input id that is never attended to (None = no padding).
        """
        subs = []
        for _ in range(self.depth):
            subs.append(SublayerSpec("attn", qk_scale=1.0 / math.sqrt(self.d_head)))
            if self.mlp:
                subs.append(SublayerSpec("mlp"))
        return Arch(sublayers=tuple(subs), attention=self.attention, causal=self.causal,
                    layer_norm=self.layer_norm, pad_id=pad_id)

    def to_json(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


def _zeros(*shape: int) -> jax.Array:
    """float32 zeros on the device (made by numpy: ``jnp.zeros`` compiles once per shape)."""
    return as_jax(np.zeros(shape, np.float32))


def _ln(d: int) -> Dict[str, jax.Array]:
    return {"scale": as_jax(np.ones((d,), np.float32)), "offset": _zeros(d)}


def init_params(cfg: ModelConfig, key: jax.Array, n_inputs: int, n_outputs: int, seq_len: int) -> Dict[str, Any]:
    """Random initial weights in the runtime layout (:mod:`constructions.runtime`).

    Weights are normal(0, 0.02), the output projections of attention and MLP
    scaled by 1/sqrt(2 * depth) (GPT-2); biases 0; LayerNorm scale 1, offset 0.

    Args:
        cfg: architecture.
        key: JAX PRNG key.
        n_inputs: input vocabulary size (rows of the token embedding).
        n_outputs: read-out classes O.
        seq_len: T, positions of the position embedding (BOS included).
    Returns:
        params pytree of float32 arrays: embed token [n_inputs, d], pos [T, d];
        per attention sublayer w_q/w_k/w_v [H, d, d/H], w_o [H, d/H, d], biases
        b_q/b_k/b_v [H, d/H], b_o [d]; per MLP w_1 [d, r*d], b_1, w_2 [r*d, d], b_2;
        unembed w [d, O], b [O]; LayerNorm ``ln`` per sublayer and ``ln_final``.
        The token embedding follows ``cfg.embedding`` (module docstring); the random
        stream of every other weight does not depend on it. A looped model's blocks are
        ``depth`` copies of one block (the first block of the unlooped model of the same key),
        with the output scale 1/sqrt(2 * depth) of ``depth`` applications.
    Raises:
        ParameterError: ``embedding="onehot"`` with ``width < n_inputs``.
    """
    d, h, e = cfg.width, cfg.heads, cfg.d_head
    out_std = INIT_STD / math.sqrt(2 * cfg.depth)
    keys = iter(jax.random.split(key, 3 + 6 * cfg.depth))

    def normal(shape, std=INIT_STD):
        return std * jax.random.normal(next(keys), shape, jnp.float32)

    params: Dict[str, Any] = {
        "embed": {"token": normal((n_inputs, d)), "pos": normal((seq_len, d))},
        "layers": [],
        "unembed": {"w": normal((d, n_outputs)), "b": _zeros(n_outputs)},
    }
    for _ in range(1 if cfg.looped else cfg.depth):
        attn = {"w_q": normal((h, d, e)), "w_k": normal((h, d, e)), "w_v": normal((h, d, e)),
                "w_o": normal((h, e, d), out_std),
                "b_q": _zeros(h, e), "b_k": _zeros(h, e), "b_v": _zeros(h, e), "b_o": _zeros(d)}
        if cfg.layer_norm:
            attn["ln"] = _ln(d)
        params["layers"].append(attn)
        if cfg.mlp:
            hidden = cfg.mlp_ratio * d
            mlp = {"w_1": normal((d, hidden)), "b_1": _zeros(hidden),
                   "w_2": normal((hidden, d), out_std), "b_2": _zeros(d)}
            if cfg.layer_norm:
                mlp["ln"] = _ln(d)
            params["layers"].append(mlp)
        else:
            next(keys), next(keys)  # keep the key stream independent of ``mlp``
    if cfg.looped:  # one block, applied ``depth`` times: equal copies (kept equal by tie_blocks)
        params["layers"] = params["layers"] * cfg.depth
    if cfg.layer_norm:
        params["ln_final"] = _ln(d)
    if cfg.embedding == "onehot":
        if d < n_inputs:
            raise ParameterError(f"embedding='onehot' needs width >= the input vocabulary ({n_inputs}), "
                                 f"got width={d}")
        params["embed"]["token"] = as_jax(np.eye(n_inputs, d, dtype=np.float32))
    elif cfg.embedding == "random":
        sub = jax.random.fold_in(key, 0x7E)  # its own stream: the other weights stay those of "learned"
        params["embed"]["token"] = jax.random.normal(sub, (n_inputs, d), jnp.float32) / math.sqrt(d)
    return params


def count_params(params: Dict[str, Any], cfg: Optional[ModelConfig] = None) -> int:
    """Number of distinct parameters: every leaf's size; for a looped ``cfg``, the shared block
    counted once."""
    total = int(sum(np.size(a) for a in jax.tree_util.tree_leaves(params)))
    if cfg is not None and cfg.looped:
        block, n = cfg.tie
        copies = sum(np.size(a) for a in jax.tree_util.tree_leaves(params["layers"][block:]))
        total -= int(copies)
    return total


def tie_blocks(block: int, n: int) -> Tuple[Any, Any]:
    """The two optax transformations that make ``n`` copies of a block of ``block`` sublayers one
    shared set of weights: ``(gather, scatter)``. ``gather`` (first in the chain) puts the sum of the
    copies' gradients in the first copy and zeros in the others (so clipping sees the shared
    weight's gradient once); ``scatter`` (last) writes the first copy's update into every copy.
    With equal copies at initialisation, the copies stay equal bit for bit and follow the
    optimisation of one shared block.

    Args:
        block: sublayers per block (>= 1); n: copies (>= 1).
    Returns:
        ``(gather, scatter)``: stateless :class:`optax.GradientTransformation` s over the runtime
        params' ``"layers"`` list (length ``block * n``).
    Raises:
        ParameterError: block or n < 1.
    """
    import functools

    import optax

    if block < 1 or n < 1:
        raise ParameterError(f"tie_blocks needs block >= 1 and n >= 1, got {block}, {n}")

    def gather(updates, params=None):
        layers = list(updates["layers"])
        for j in range(block):
            copies = [layers[i * block + j] for i in range(n)]
            layers[j] = jax.tree_util.tree_map(lambda *a: functools.reduce(jnp.add, a), *copies)
            for i in range(1, n):
                layers[i * block + j] = jax.tree_util.tree_map(jnp.zeros_like, copies[i])
        return {**updates, "layers": layers}

    def scatter(updates, params=None):
        layers = list(updates["layers"])
        return {**updates, "layers": [layers[i % block] for i in range(block * n)]}

    return optax.stateless(gather), optax.stateless(scatter)
