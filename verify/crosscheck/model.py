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
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, Optional

import jax
import jax.numpy as jnp
import numpy as np

from depthcraft.constructions.errors import ParameterError
from depthcraft.constructions.runtime import ATTENTION_KINDS, Arch, SublayerSpec

#: Standard deviation of the normal initialisation (GPT-2).
INIT_STD = 0.02


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


def _ln(d: int) -> Dict[str, jax.Array]:
    return {"scale": jnp.ones((d,), jnp.float32), "offset": jnp.zeros((d,), jnp.float32)}


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
    """
    d, h, e = cfg.width, cfg.heads, cfg.d_head
    out_std = INIT_STD / math.sqrt(2 * cfg.depth)
    keys = iter(jax.random.split(key, 3 + 6 * cfg.depth))

    def normal(shape, std=INIT_STD):
        return std * jax.random.normal(next(keys), shape, jnp.float32)

    params: Dict[str, Any] = {
        "embed": {"token": normal((n_inputs, d)), "pos": normal((seq_len, d))},
        "layers": [],
        "unembed": {"w": normal((d, n_outputs)), "b": jnp.zeros((n_outputs,), jnp.float32)},
    }
    for _ in range(cfg.depth):
        attn = {"w_q": normal((h, d, e)), "w_k": normal((h, d, e)), "w_v": normal((h, d, e)),
                "w_o": normal((h, e, d), out_std),
                "b_q": jnp.zeros((h, e), jnp.float32), "b_k": jnp.zeros((h, e), jnp.float32),
                "b_v": jnp.zeros((h, e), jnp.float32), "b_o": jnp.zeros((d,), jnp.float32)}
        if cfg.layer_norm:
            attn["ln"] = _ln(d)
        params["layers"].append(attn)
        if cfg.mlp:
            hidden = cfg.mlp_ratio * d
            mlp = {"w_1": normal((d, hidden)), "b_1": jnp.zeros((hidden,), jnp.float32),
                   "w_2": normal((hidden, d), out_std), "b_2": jnp.zeros((d,), jnp.float32)}
            if cfg.layer_norm:
                mlp["ln"] = _ln(d)
            params["layers"].append(mlp)
        else:
            next(keys), next(keys)  # keep the key stream independent of ``mlp``
    if cfg.layer_norm:
        params["ln_final"] = _ln(d)
    return params


def count_params(params: Dict[str, Any]) -> int:
    """Total number of parameters (every leaf's size)."""
    return int(sum(np.size(a) for a in jax.tree_util.tree_leaves(params)))
