"""Compiled models: tracr's assembled weights converted to the project's runtime layout.

:class:`CompiledModel` holds explicit weights (numpy), the static architecture,
the token/output vocabularies and the residual-stream labels, and runs batches
through :func:`constructions.runtime.forward`.

Conversion from tracr (:func:`from_tracr`) keeps every number tracr produced:
all-zero sublayers and all-zero heads are dropped (they add exactly 0), and
each projection keeps only the residual rows / head columns that are non-zero
(the rest multiply by exactly 0). tracr's 1/sqrt(key_size) score scaling becomes
``SublayerSpec.qk_scale``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional, Sequence

import jax.numpy as jnp
import numpy as np

from depthcraft.constructions.errors import InputError
from depthcraft.constructions.runtime import Arch, ForwardOutput, SublayerSpec, forward, plan

BOS = "BOS"
PAD = "PAD"
#: Default batch size for :meth:`CompiledModel.run_batches`.
BATCH = 1024


@dataclasses.dataclass
class CompiledModel:
    """Explicit transformer weights plus everything needed to run and read them.

    Attributes:
        params: weight pytree (numpy float32 arrays), layout in :mod:`constructions.runtime`.
        arch: static architecture.
        input_values: token value of each embedding row (includes BOS and PAD).
        output_values: value of each read-out coordinate (categorical outputs).
        categorical_output: True if the read-out is one-hot over ``output_values``;
            False if it is one number (numerical SOp).
        max_seq_len: N, the longest input (BOS excluded).
        residual_labels: name of each residual direction (tracr's ``name:value``).
        meta: free-form metadata (construction, params, tracr_blocks, dense_params...).
    """

    params: Dict[str, Any]
    arch: Arch
    input_values: List[Any]
    output_values: List[Any]
    categorical_output: bool
    max_seq_len: int
    residual_labels: List[str]
    meta: Dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        self._token_id = {v: i for i, v in enumerate(self.input_values)}
        self._out_arr = np.asarray(self.output_values, dtype=object)
        self._int_lut = None
        vocab = [v for v in self.input_values if v not in (BOS, PAD)]
        if vocab and all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in vocab):
            lo, hi = min(vocab), max(vocab)
            if lo >= 0 and hi < 1 << 16:
                lut = np.full(hi + 1, -1, np.int32)
                for v in vocab:
                    lut[v] = self._token_id[v]
                self._int_lut = lut
        self._jparams = None
        self._dense_jparams = None

    # ------------------------------------------------------------------ vocab
    @property
    def vocab(self) -> List[Any]:
        """Input token values (BOS and PAD excluded)."""
        return [v for v in self.input_values if v not in (BOS, PAD)]

    @property
    def bos_id(self) -> int:
        return self._token_id[BOS]

    @property
    def pad_id(self) -> int:
        return self._token_id[PAD]

    def encode(self, tokens: Any, length: Optional[int] = None) -> np.ndarray:
        """Token values -> ids, with BOS prepended and PAD appended up to ``length``.

        Args:
            tokens: [batch, n] array-like of token values (one length per call), or a
                list of such sequences of different lengths.
            length: total sequence length after padding (default: longest input + 1).
        Returns:
            [batch, length] int32 ids.
        Raises:
            InputError: a token is not in the vocabulary, an input is empty or longer
                than ``max_seq_len``.
        """
        seqs = tokens if isinstance(tokens, np.ndarray) and tokens.ndim == 2 else None
        if isinstance(tokens, np.ndarray) and tokens.dtype.kind in "fcb" and not self._accepts(tokens.dtype.kind):
            raise InputError(f"tokens have dtype {tokens.dtype}; this model's tokens are "
                             f"{'/'.join(sorted({type(v).__name__ for v in self.vocab}))} values")
        if seqs is None:
            seqs = list(tokens)
            lens = [len(s) for s in seqs]
        else:
            lens = [seqs.shape[1]] * seqs.shape[0]
        if not lens:
            raise InputError("no input sequences given")
        longest = max(lens)
        if min(lens) == 0:
            raise InputError("empty input: a sequence needs at least one token")
        if longest > self.max_seq_len:
            raise InputError(f"input of length {longest} is longer than max_seq_len={self.max_seq_len}")
        length = longest + 1 if length is None else length
        out = np.full((len(lens), length), self.pad_id, np.int32)
        out[:, 0] = self.bos_id
        if isinstance(seqs, np.ndarray) and self._int_lut is not None and np.issubdtype(seqs.dtype, np.integer):
            bad = (seqs < 0) | (seqs >= len(self._int_lut))
            ids = np.where(bad, -1, self._int_lut[np.clip(seqs, 0, len(self._int_lut) - 1)])
            if (ids < 0).any():
                b, t = np.argwhere(ids < 0)[0]
                self._bad_token(seqs[b, t], t)
            out[:, 1:longest + 1] = ids
            return out
        for b, s in enumerate(seqs):
            for t, v in enumerate(s):
                v = v.item() if isinstance(v, np.generic) else v
                if v not in self._token_id or v in (BOS, PAD) or (
                        isinstance(v, (bool, float, complex)) and not self._accepts(type(v).__name__[0])):
                    self._bad_token(v, t)
                out[b, t + 1] = self._token_id[v]
        return out

    def _accepts(self, kind: str) -> bool:
        """Whether the vocabulary holds values of numpy kind ``kind`` ('f' float, 'c' complex, 'b' bool).

        Guards against 1.0 or True being taken for the token 1 (they hash equal).
        """
        types = {"f": (float, np.floating), "c": (complex, np.complexfloating), "b": (bool, np.bool_)}[kind]
        return any(isinstance(v, types) for v in self.vocab)

    def _bad_token(self, value, t):
        value = value.item() if isinstance(value, np.generic) else value
        vocab = self.vocab
        shown = vocab if len(vocab) <= 12 else vocab[:12] + ["..."]
        raise InputError(f"token {value!r} at position {t + 1} is not in the vocabulary {shown}")

    # ---------------------------------------------------------------- running
    @property
    def jparams(self):
        """The planned weights as JAX arrays (:func:`constructions.runtime.plan`; made once, at first use)."""
        if self._jparams is None:
            import jax

            self._jparams = jax.tree_util.tree_map(jnp.asarray, plan(self.params, self.arch))
        return self._jparams

    @property
    def dense_jparams(self):
        """The weights as they are (every projection a matmul), as JAX arrays (converted once)."""
        if self._dense_jparams is None:
            import jax

            self._dense_jparams = jax.tree_util.tree_map(jnp.asarray, self.params)
        return self._dense_jparams

    def forward_ids(self, ids: np.ndarray, collect_attention: bool = False, dtype=jnp.float32,
                    mantissa_bits=None, collect_residuals: bool = False,
                    planned: Optional[bool] = None) -> ForwardOutput:
        """Run the jitted forward on ids [batch, seq] (see :func:`constructions.runtime.forward`).

        ``planned``: use the planned weights (:attr:`jparams`: one-hot projections as gathers,
        exactly equal outputs) or the dense ones (:attr:`dense_jparams`). Default (None): planned
        in float32 without mantissa emulation, dense otherwise (precision studies round every
        matmul result as the dense forward computes it).
        """
        if planned is None:
            planned = mantissa_bits is None and jnp.dtype(dtype) == jnp.float32
        params = self.jparams if planned else self.dense_jparams
        return forward(params, jnp.asarray(ids), self.arch, collect_attention=collect_attention, dtype=dtype,
                       mantissa_bits=mantissa_bits, collect_residuals=collect_residuals)

    def residual_stream(self, tokens: Sequence[Any]) -> "ResidualStream":
        """The residual stream of one input after every sublayer (see :func:`residual_stream`)."""
        return residual_stream(self, tokens)

    def decode(self, logits: np.ndarray, none_value: Any = None) -> np.ndarray:
        """Read-out scores [batch, seq, O] -> output values [batch, seq].

        Categorical outputs take the argmax; a position whose largest score is
        below 0.5 holds no value (tracr's zero vector) and decodes to ``none_value``.
        Numerical outputs return the score itself.
        """
        logits = np.asarray(logits, dtype=np.float64)
        if not self.categorical_output:
            return logits[..., 0]
        arg = logits.argmax(-1)
        vals = self._out_arr[arg]
        none = logits.max(-1) < 0.5
        if none.any():
            vals = vals.copy()
            vals[none] = none_value
        if all(isinstance(v, (int, np.integer)) for v in self.output_values) and (
                not none.any() or isinstance(none_value, (int, np.integer))):
            return vals.astype(np.int64)
        return vals

    def run(self, tokens: Any, none_value: Any = None) -> np.ndarray:
        """Outputs for a batch of same-length inputs.

        Args:
            tokens: [batch, n] token values.
            none_value: value for positions where the model outputs no value.
        Returns:
            [batch, n] output values at positions 1..n (BOS dropped). Inputs are padded
            to max_seq_len + 1 (PAD keys are masked, so outputs do not change).
        Raises:
            InputError: see :meth:`encode`.
        """
        ids = self.encode(tokens, length=self.max_seq_len + 1)  # one shape per batch size: one XLA compile
        n = max(len(s) for s in tokens) if not isinstance(tokens, np.ndarray) else tokens.shape[1]
        out = self.forward_ids(ids)
        return self.decode(np.asarray(out.logits)[:, 1:n + 1], none_value)


def sublayer_names(arch: Arch) -> List[str]:
    """Display names of the sublayers in order: ``attn 1``, ``MLP 1``, ``attn 2``, ... (numbered per kind)."""
    names, count = [], {"attn": 0, "mlp": 0}
    for spec in arch.sublayers:
        count[spec.kind] += 1
        names.append(f"{'attn' if spec.kind == 'attn' else 'MLP'} {count[spec.kind]}")
    return names


@dataclasses.dataclass
class ResidualStream:
    """The residual stream of one input, before the first sublayer and after every sublayer.

    Positions are model positions (SPEC §3): 0 is BOS, the tokens sit at 1..n; T = n + 1.

    Attributes:
        tokens: the input token values ([n], BOS not included).
        labels: name of each residual direction ([D], tracr's ``name:value`` or ``name``).
        stages: ``"embeddings"`` then one name per sublayer (:func:`sublayer_names`); [S + 1].
        values: [S + 1, T, D] float32: ``values[0]`` the token + position embeddings,
            ``values[i + 1]`` the stream after sublayer i (``values[-1]`` is the final residual).
        attention: per attention sublayer, [H, T, T] weights (query rows, key columns).
        scores: per attention sublayer, [H, T, T] scores (times ``qk_scale``, before masking).
        head_outputs: per attention sublayer, [H, T, D] what each head writes (zero outside
            the sublayer's output rows); their sum is the sublayer's write (biases aside).
        logits: [T, O] read-out scores.
        causal: whether keys after the query are masked.
    """

    tokens: List[Any]
    labels: List[str]
    stages: List[str]
    values: np.ndarray
    attention: List[np.ndarray]
    scores: List[np.ndarray]
    head_outputs: List[np.ndarray]
    logits: np.ndarray
    causal: bool

    def written(self, i: int) -> np.ndarray:
        """[T, D]: what sublayer ``i`` (0-based) added to the stream, ``values[i + 1] - values[i]``."""
        if not 0 <= i < len(self.stages) - 1:
            raise IndexError(f"sublayer {i} out of range 0..{len(self.stages) - 2}")
        return self.values[i + 1] - self.values[i]


def residual_stream(model: "CompiledModel", tokens: Sequence[Any]) -> ResidualStream:
    """Run ``model`` on one input and keep the residual stream after every sublayer.

    One forward pass of :func:`constructions.runtime.forward` with ``collect_residuals``
    and ``collect_attention`` (the same jitted code as every other run, not a re-implementation).

    Args:
        model: a compiled model.
        tokens: one input (token values, no BOS), length 1..``max_seq_len``.
    Returns:
        :class:`ResidualStream` (shapes in its docstring).
    Raises:
        InputError: a token outside the vocabulary, an empty or too long input.
    """
    tokens = list(tokens)
    out = model.forward_ids(model.encode([tokens]), collect_attention=True, collect_residuals=True)
    d = len(model.residual_labels)
    heads = []
    attn = [s for s in model.arch.sublayers if s.kind == "attn"]
    for spec, h in zip(attn, out.head_outputs):
        full = np.zeros(h.shape[1:3] + (d,), np.float32)
        full[..., spec.rows("out_rows", d)] = np.asarray(h[0])
        heads.append(full)
    return ResidualStream(tokens=tokens, labels=list(model.residual_labels),
                          stages=["embeddings"] + sublayer_names(model.arch),
                          values=np.stack([np.asarray(r[0]) for r in out.residuals]),
                          attention=[np.asarray(a[0]) for a in out.attention],
                          scores=[np.asarray(a[0]) for a in out.scores], head_outputs=heads,
                          logits=np.asarray(out.logits[0]), causal=model.arch.causal)


def _nonzero_rows(*mats: np.ndarray) -> np.ndarray:
    mask = np.zeros(mats[0].shape[0], bool)
    for m in mats:
        mask |= np.abs(m).reshape(m.shape[0], -1).max(1) > 0
    return np.flatnonzero(mask)


def _attn_sublayer(layer: Dict[str, np.ndarray], num_heads: int, key_size: int):
    """tracr attention weights -> (spec, params) keeping non-zero heads/rows/columns, or None."""
    wq, wk, wv, wo = (np.asarray(layer[n]["w"], np.float32) for n in ("query", "key", "value", "linear"))
    d = wq.shape[0]
    wq, wk, wv = (w.reshape(d, num_heads, key_size).transpose(1, 0, 2) for w in (wq, wk, wv))
    wo = wo.reshape(num_heads, key_size, d)
    heads = []
    for h in range(num_heads):
        qk_cols = np.flatnonzero((np.abs(wq[h]).max(0) > 0) & (np.abs(wk[h]).max(0) > 0))
        ov_cols = np.flatnonzero((np.abs(wv[h]).max(0) > 0) & (np.abs(wo[h]).max(1) > 0))
        if len(qk_cols) or len(ov_cols):
            if not len(ov_cols):
                continue  # scores without values write nothing
            heads.append((h, qk_cols, ov_cols))
    if not heads:
        return None
    dk = max(max(len(c) for _, c, _ in heads), 1)
    dv = max(len(c) for _, _, c in heads)
    hs = [h for h, _, _ in heads]
    q_rows = _nonzero_rows(*(wq[h] for h in hs))
    k_rows = _nonzero_rows(*(wk[h] for h in hs))
    v_rows = _nonzero_rows(*(wv[h] for h in hs))
    out_rows = _nonzero_rows(*(wo[h].T for h in hs))
    p = {name: np.zeros((len(heads), rows, width), np.float32) for name, rows, width in
         (("w_q", len(q_rows), dk), ("w_k", len(k_rows), dk), ("w_v", len(v_rows), dv))}
    p["w_o"] = np.zeros((len(heads), dv, len(out_rows)), np.float32)
    for i, (h, qk_cols, ov_cols) in enumerate(heads):
        p["w_q"][i, :, :len(qk_cols)] = wq[h][np.ix_(q_rows, qk_cols)]
        p["w_k"][i, :, :len(qk_cols)] = wk[h][np.ix_(k_rows, qk_cols)]
        p["w_v"][i, :, :len(ov_cols)] = wv[h][np.ix_(v_rows, ov_cols)]
        p["w_o"][i, :len(ov_cols), :] = wo[h][np.ix_(ov_cols, out_rows)]
    spec = SublayerSpec("attn", q_rows=tuple(map(int, q_rows)), k_rows=tuple(map(int, k_rows)),
                        v_rows=tuple(map(int, v_rows)), out_rows=tuple(map(int, out_rows)),
                        qk_scale=float(1.0 / np.sqrt(key_size)))
    return spec, p


def _mlp_sublayer(layer1: Dict[str, np.ndarray], layer2: Dict[str, np.ndarray]):
    w1, b1 = np.asarray(layer1["w"], np.float32), np.asarray(layer1["b"], np.float32)
    w2, b2 = np.asarray(layer2["w"], np.float32), np.asarray(layer2["b"], np.float32)
    hidden = np.flatnonzero(((np.abs(w1).max(0) > 0) | (b1 != 0)) & (np.abs(w2).max(1) > 0))
    if not len(hidden) and not (b2 != 0).any():
        return None
    in_rows = _nonzero_rows(w1[:, hidden]) if len(hidden) else np.zeros(0, int)
    out_rows = np.flatnonzero((np.abs(w2[hidden]).max(0) > 0 if len(hidden) else False) | (b2 != 0))
    p = {"w_1": w1[np.ix_(in_rows, hidden)], "b_1": b1[hidden],
         "w_2": w2[np.ix_(hidden, out_rows)], "b_2": b2[out_rows]}
    spec = SublayerSpec("mlp", in_rows=tuple(map(int, in_rows)), out_rows=tuple(map(int, out_rows)))
    return spec, p


def from_tracr(assembled, *, output_labels: Sequence[str], max_seq_len: int, causal: bool,
               attention: str = "softmax", meta: Optional[Dict[str, Any]] = None) -> CompiledModel:
    """Convert a tracr ``AssembledTransformerModel`` to a :class:`CompiledModel`.

    Args:
        assembled: output of tracr's assembler (``compile_rasp_to_model`` or ours).
        output_labels: residual labels of the output SOp's directions, in tracr's
            (sorted) order: ``"<label>:<value>"`` (categorical) or ``"<label>"`` (numerical).
        max_seq_len: N used at compile time.
        causal: whether the model masks future keys.
        attention: attention kind the construction targets.
        meta: extra metadata; ``tracr_blocks`` and ``dense_params`` are added.
    Returns:
        The model, numerically identical to tracr's forward (up to float rounding).
    """
    from tracr.transformer import encoder as tracr_encoder

    cfg = assembled.model_config
    raw = {k: {n: np.asarray(v) for n, v in d.items()} for k, d in assembled.params.items()}
    specs, layers = [], []
    for l in range(cfg.num_layers):
        attn = _attn_sublayer({n: raw[f"transformer/layer_{l}/attn/{n}"] for n in ("query", "key", "value", "linear")},
                              cfg.num_heads, cfg.key_size)
        mlp = _mlp_sublayer(raw[f"transformer/layer_{l}/mlp/linear_1"], raw[f"transformer/layer_{l}/mlp/linear_2"])
        for sub in (attn, mlp):
            if sub is not None:
                specs.append(sub[0])
                layers.append(sub[1])
    enc = assembled.input_encoder
    input_values = [None] * len(enc.encoding_map)
    for v, i in enc.encoding_map.items():
        input_values[i] = BOS if v == enc.bos_token else PAD if v == enc.pad_token else v
    categorical = isinstance(assembled.output_encoder, tracr_encoder.CategoricalEncoder)
    output_values: List[Any] = []
    if categorical:
        output_values = [None] * len(assembled.output_encoder.encoding_map)
        for v, i in assembled.output_encoder.encoding_map.items():
            output_values[i] = v
    d = raw["token_embed"]["embeddings"].shape[1]
    index = {lab: i for i, lab in enumerate(assembled.residual_labels)}
    unembed = np.zeros((d, len(output_labels)), np.float32)
    for j, lab in enumerate(output_labels):
        unembed[index[lab], j] = 1.0
    params = {
        "embed": {"token": np.asarray(raw["token_embed"]["embeddings"], np.float32),
                  "pos": np.asarray(raw["pos_embed"]["embeddings"], np.float32)},
        "layers": layers,
        "unembed": {"w": unembed},
    }
    dense = sum(int(np.size(a)) for group in raw.values() for a in group.values()) + unembed.size
    arch = Arch(sublayers=tuple(specs), attention=attention, causal=causal, pad_id=input_values.index(PAD))
    m = dict(meta or {})
    m.update(tracr_blocks=int(cfg.num_layers), dense_params=int(dense), tracr_key_size=int(cfg.key_size),
             tracr_num_heads=int(cfg.num_heads))
    return CompiledModel(params=params, arch=arch, input_values=input_values, output_values=output_values,
                         categorical_output=categorical, max_seq_len=max_seq_len,
                         residual_labels=list(assembled.residual_labels), meta=m)
