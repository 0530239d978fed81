"""Optional export of a compiled model to TransformerLens's ``HookedTransformer`` (PyTorch).

Install with ``pip install 'depthcraft[lens]'`` (TransformerLens 2.15-3.x and PyTorch: about
1.4 GB with a CPU-only torch, e.g. ``pip install torch --index-url
https://download.pytorch.org/whl/cpu`` first; TransformerLens 4 removed ``HookedTransformer``). The exported model computes the same
function with TransformerLens's hooks and caches, for interpretability tooling.

Mapping (:mod:`constructions.runtime` layout -> TransformerLens names):

* embeddings: ``embed.token`` [V, D] -> ``embed.W_E``; ``embed.pos`` [T, D] -> ``pos_embed.W_pos``;
  the read-out ``unembed.w`` [D, O] -> ``unembed.W_U``;
* the sublayers are grouped into TransformerLens blocks (attention, then MLP): an MLP without a
  preceding attention sublayer, or a second MLP in a row, gets a block whose attention is all zero
  (it adds exactly 0), so the computation is unchanged;
* every projection reads / writes only its residual rows (``SublayerSpec.q_rows`` ...); they are
  scattered into dense [n_heads, D, d_head] / [D, d_mlp] matrices, zero-padded to the widest head
  and MLP; the score scale ``qk_scale`` is folded into W_Q (``use_attn_scale=False``);
* no LayerNorm (``normalization_type=None``), ReLU MLPs, causal or bidirectional attention.

Only softmax attention exists in TransformerLens: hardmax / ReLU-attention models are refused, and
so are models with LayerNorm (trained models; not needed for compiled ones).

Inputs to the exported model are token ids [batch, seq] with BOS at position 0, as for
:meth:`CompiledModel.encode`; there is no padding mask, so run same-length inputs without PAD.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from depthcraft.constructions.errors import ParameterError
from depthcraft.constructions.model import CompiledModel


def _require():
    """(torch, HookedTransformer, HookedTransformerConfig), or ParameterError saying what to install."""
    try:
        import torch
        import transformer_lens  # noqa: F401
    except ImportError:
        raise ParameterError("the TransformerLens export needs the optional extra: pip install 'depthcraft[lens]' "
                             "(transformer_lens>=2.15,<4 and torch)") from None
    try:
        from transformer_lens import HookedTransformer, HookedTransformerConfig
    except ImportError:  # TransformerLens 4 removed HookedTransformer
        raise ParameterError("this TransformerLens has no HookedTransformer (removed in 4.0); "
                             "install transformer_lens>=2.15,<4") from None
    return torch, HookedTransformer, HookedTransformerConfig


def _blocks(model: CompiledModel) -> List[Tuple[Optional[int], Optional[int]]]:
    """Sublayer indices grouped as TransformerLens blocks: [(attention index or None, MLP index or None)]."""
    blocks: List[List[Optional[int]]] = []
    for i, spec in enumerate(model.arch.sublayers):
        if spec.kind == "attn":
            blocks.append([i, None])
        elif blocks and blocks[-1][1] is None:
            blocks[-1][1] = i
        else:
            blocks.append([None, i])
    return [(a, m) for a, m in blocks]


def hooked_transformer_weights(model: CompiledModel) -> Tuple[Dict[str, Any], Dict[str, np.ndarray]]:
    """The HookedTransformerConfig keyword arguments and the state dict (numpy float32) for ``model``.

    Raises:
        ParameterError: a model TransformerLens cannot express (hardmax / ReLU attention, LayerNorm).
    """
    arch = model.arch
    if arch.attention != "softmax":
        raise ParameterError(f"TransformerLens has softmax attention only; this model uses {arch.attention!r}")
    if arch.layer_norm:
        raise ParameterError("models with LayerNorm are not exported (compiled models have none)")
    p = model.params
    d = int(p["embed"]["token"].shape[1])
    layers = p["layers"]
    specs = arch.sublayers
    attn = [i for i, s in enumerate(specs) if s.kind == "attn"]
    mlps = [i for i, s in enumerate(specs) if s.kind == "mlp"]
    n_heads = max([layers[i]["w_q"].shape[0] for i in attn] + [1])
    d_head = max([max(layers[i]["w_q"].shape[2], layers[i]["w_v"].shape[2]) for i in attn] + [1])
    d_mlp = max([layers[i]["w_1"].shape[1] for i in mlps] + [1])
    blocks = _blocks(model)
    n_out = p["unembed"]["w"].shape[1]
    cfg = dict(n_layers=len(blocks), d_model=d, n_ctx=int(p["embed"]["pos"].shape[0]), d_head=d_head,
               n_heads=n_heads, d_mlp=None if not mlps else d_mlp, d_vocab=int(p["embed"]["token"].shape[0]),
               d_vocab_out=int(n_out), act_fn="relu", normalization_type=None, attn_only=not mlps,
               use_attn_scale=False, positional_embedding_type="standard",
               attention_dir="causal" if arch.causal else "bidirectional", default_prepend_bos=False,
               original_architecture="depthcraft")
    f32 = np.float32
    sd: Dict[str, np.ndarray] = {
        "embed.W_E": np.asarray(p["embed"]["token"], f32),
        "pos_embed.W_pos": np.asarray(p["embed"]["pos"], f32),
        "unembed.W_U": np.asarray(p["unembed"]["w"], f32),
        "unembed.b_U": np.asarray(p["unembed"].get("b", np.zeros(n_out)), f32),
    }
    for b, (ai, mi) in enumerate(blocks):
        pre = f"blocks.{b}."
        wq, wk, wv = (np.zeros((n_heads, d, d_head), f32) for _ in range(3))
        wo = np.zeros((n_heads, d_head, d), f32)
        bq, bk, bv = (np.zeros((n_heads, d_head), f32) for _ in range(3))
        bo = np.zeros(d, f32)
        if ai is not None:
            spec, lp = specs[ai], layers[ai]
            q_rows, k_rows, v_rows, o_rows = (spec.rows(r, d) for r in ("q_rows", "k_rows", "v_rows", "out_rows"))
            h, _, dk = lp["w_q"].shape
            dv = lp["w_v"].shape[2]
            wq[:h, q_rows, :dk] = np.asarray(lp["w_q"]) * spec.qk_scale
            wk[:h, k_rows, :dk] = np.asarray(lp["w_k"])
            wv[:h, v_rows, :dv] = np.asarray(lp["w_v"])
            wo[np.ix_(np.arange(h), np.arange(dv), o_rows)] = np.asarray(lp["w_o"])
            if "b_q" in lp:
                bq[:h, :dk] = np.asarray(lp["b_q"]) * spec.qk_scale
                bk[:h, :dk] = np.asarray(lp["b_k"])
                bv[:h, :dv] = np.asarray(lp["b_v"])
            if "b_o" in lp:
                bo[o_rows] = np.asarray(lp["b_o"])
        sd.update({pre + "attn.W_Q": wq, pre + "attn.W_K": wk, pre + "attn.W_V": wv, pre + "attn.W_O": wo,
                   pre + "attn.b_Q": bq, pre + "attn.b_K": bk, pre + "attn.b_V": bv, pre + "attn.b_O": bo})
        if mlps:
            w_in, b_in = np.zeros((d, d_mlp), f32), np.zeros(d_mlp, f32)
            w_out, b_out = np.zeros((d_mlp, d), f32), np.zeros(d, f32)
            if mi is not None:
                spec, lp = specs[mi], layers[mi]
                in_rows, out_rows = spec.rows("in_rows", d), spec.rows("out_rows", d)
                hid = lp["w_1"].shape[1]
                w_in[np.ix_(in_rows, np.arange(hid))] = np.asarray(lp["w_1"])
                b_in[:hid] = np.asarray(lp["b_1"])
                w_out[np.ix_(np.arange(hid), out_rows)] = np.asarray(lp["w_2"])
                b_out[out_rows] = np.asarray(lp["b_2"])
            sd.update({pre + "mlp.W_in": w_in, pre + "mlp.b_in": b_in, pre + "mlp.W_out": w_out,
                       pre + "mlp.b_out": b_out})
    return cfg, sd


def to_hooked_transformer(model: CompiledModel):
    """A TransformerLens ``HookedTransformer`` computing ``model`` (float32, CPU).

    Args:
        model: a compiled (or loaded) model with softmax attention and no LayerNorm.
    Returns:
        ``transformer_lens.HookedTransformer``; ``ht(ids)`` gives logits [batch, seq, O] for
        token ids [batch, seq] (a torch LongTensor with BOS at position 0, no PAD).
    Raises:
        ParameterError: TransformerLens is not installed (or is 4.x), or the model has an
            attention kind / LayerNorm it cannot express.
    """
    torch, hooked_transformer, hooked_config = _require()
    cfg_kwargs, sd = hooked_transformer_weights(model)
    cfg = hooked_config(device="cpu", init_weights=False, dtype=torch.float32, **cfg_kwargs)
    ht = hooked_transformer(cfg)
    state = ht.state_dict()
    for name, value in sd.items():
        if name not in state or tuple(state[name].shape) != value.shape:
            raise RuntimeError(f"TransformerLens layout changed: {name} {value.shape} vs "
                               f"{tuple(state[name].shape) if name in state else 'missing'}")
        state[name] = torch.from_numpy(np.array(value, dtype=np.float32, copy=True))
    ht.load_state_dict(state)
    ht.eval()
    return ht
