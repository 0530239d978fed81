"""Compiled models: tracr's assembled weights converted to the project's runtime layout.

:class:`CompiledModel` holds explicit weights (numpy), the static architecture,
the token/output vocabularies and the residual-stream labels, and runs batches
through :func:`constructions.runtime.forward`.

Conversion from tracr (:func:`from_tracr`) keeps every number tracr produced:
all-zero sublayers and all-zero heads are dropped (they add exactly 0), and
each projection keeps only the residual rows / head columns that are non-zero
(the rest multiply by exactly 0). tracr's 1/sqrt(key_size) score scaling becomes
``SublayerSpec.qk_scale``.

:func:`from_craft` builds the same weights (bit for bit) from the compiler's CRAFT
model without tracr's assembly: each sublayer is computed on the residual rows
its block reads and writes, so no d_model x d_model array is ever held (tracr's
``assemble_craft_model`` holds several per sublayer). The restriction to non-zero
rows and columns is one code path for both (``_attn_sublayer``, ``_mlp_sublayer``).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional, Sequence, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from depthcraft.constructions.devices import device_count, replicate, split_rows
from depthcraft.constructions.errors import InputError
from depthcraft.constructions.runtime import Arch, ForwardOutput, SublayerSpec, as_jax, forward, plan

BOS = "BOS"
PAD = "PAD"
#: Default batch size for :meth:`CompiledModel.run_batches`.
BATCH = 1024


@dataclasses.dataclass(frozen=True)
class ProgramLink:
    """The RASP program a model was compiled from, as the certifier reads it.

    Kept by the compilers (:func:`constructions.compiler.compile_program`,
    :func:`~constructions.compiler.compile_with_tracr`) so that the certificate can compare
    every head's and MLP's tables with the RASP expression it implements. A model loaded
    from a file has none (the certificate then says so).

    Attributes:
        nodes: label -> RASP expression of every node of the compiled program's graph
            (SOps, selectors, hand-built heads), after the dedupe.
        values: residual label (``name:value``) -> (SOp label, the value object) for every
            categorical direction of the program's SOps.
        sink: the output SOp's label.
    """

    nodes: Dict[str, Any]
    values: Dict[str, Tuple[str, Any]]
    sink: str


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
        program: the RASP program the weights were compiled from (:class:`ProgramLink`), or
            None (a loaded or hand-made model); not saved to files, not compared.
    """

    params: Dict[str, Any]
    arch: Arch
    input_values: List[Any]
    output_values: List[Any]
    categorical_output: bool
    max_seq_len: int
    residual_labels: List[str]
    meta: Dict[str, Any] = dataclasses.field(default_factory=dict)
    program: Optional[ProgramLink] = dataclasses.field(default=None, repr=False, compare=False)

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
        self._replicated: Dict[bool, Any] = {}  # planned -> weights on every local device (devices.replicate)

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
            self._jparams = as_jax(plan(self.params, self.arch))
        return self._jparams

    @property
    def dense_jparams(self):
        """The weights as they are (every projection a matmul), as JAX arrays (converted once)."""
        if self._dense_jparams is None:
            self._dense_jparams = as_jax(self.params)
        return self._dense_jparams

    def forward_ids(self, ids: np.ndarray, collect_attention: bool = False, dtype=jnp.float32,
                    mantissa_bits=None, collect_residuals: bool = False,
                    planned: Optional[bool] = None, split: bool = False) -> ForwardOutput:
        """Run the jitted forward on ids [batch, seq] (see :func:`constructions.runtime.forward`).

        ``planned``: use the planned weights (:attr:`jparams`: one-hot projections as gathers,
        exactly equal outputs) or the dense ones (:attr:`dense_jparams`). Default (None): planned
        in float32 without mantissa emulation, dense otherwise (precision studies round every
        matmul result as the dense forward computes it).

        ``split``: run the rows split over every local JAX device, the weights replicated
        (:mod:`constructions.devices`; the same outputs); the batch must then be a multiple of
        the device count (ValueError otherwise). With one device it changes nothing.
        """
        if planned is None:
            planned = mantissa_bits is None and jnp.dtype(dtype) == jnp.float32
        params = self.jparams if planned else self.dense_jparams
        if split and device_count() > 1:
            if planned not in self._replicated:
                self._replicated[planned] = replicate(params)
            params, ids = self._replicated[planned], split_rows(ids)
        if not isinstance(ids, jax.Array):
            ids = jax.device_put(np.asarray(ids))  # jnp.asarray would compile once per shape (runtime.as_jax)
        return forward(params, ids, self.arch, collect_attention=collect_attention, dtype=dtype,
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


def _nonzero(m: np.ndarray, axis: int) -> np.ndarray:
    """Mask of the rows (``axis=1``) or columns (``axis=0``) of ``m`` holding a non-zero (empty-safe)."""
    return (np.abs(m) > 0).any(axis=axis)


@dataclasses.dataclass
class _Rows:
    """A matrix given on some residual rows only: ``mat[i]`` is residual row ``rows[i]`` (others are 0)."""

    rows: np.ndarray  # [r] int, distinct residual indices
    mat: np.ndarray  # [r, width] float32


def _union_rows(parts: Sequence[_Rows]) -> np.ndarray:
    """Sorted residual indices where any of ``parts`` has a non-zero entry."""
    live = [p.rows[_nonzero(p.mat, 1)] for p in parts]
    return np.unique(np.concatenate(live)) if live else np.zeros(0, int)


def _scatter(dest: np.ndarray, rows: np.ndarray, part: _Rows, cols: np.ndarray) -> None:
    """dest[rows ∩ part.rows, :len(cols)] = part.mat[those rows][:, cols] (rows: sorted residual indices)."""
    pos = np.searchsorted(rows, part.rows)
    have = (pos < len(rows)) & (rows[np.minimum(pos, max(len(rows) - 1, 0))] == part.rows) if len(rows) else \
        np.zeros(len(part.rows), bool)
    dest[pos[have], :len(cols)] = part.mat[np.ix_(np.flatnonzero(have), cols)]


def _attn_sublayer(heads: Sequence[Tuple[_Rows, _Rows, _Rows, _Rows]], key_size: int):
    """One attention sublayer -> (spec, params) keeping non-zero heads/rows/columns, or None.

    Args:
        heads: per head (q, k, v, o), each given on its residual rows: q, k
            [rows, key_size_h] (the query / key maps), v [rows, value_size_h] and
            o the *transposed* output map [rows, value_size_h].
        key_size: tracr's key size (scores are scaled by 1/sqrt(key_size)).
    """
    kept = []
    for q, k, v, o in heads:
        qk_cols = np.flatnonzero(_nonzero(q.mat, 0) & _nonzero(k.mat, 0))
        ov_cols = np.flatnonzero(_nonzero(v.mat, 0) & _nonzero(o.mat, 0))
        if len(ov_cols):  # scores without values write nothing
            kept.append((q, k, v, o, qk_cols, ov_cols))
    if not kept:
        return None
    dk = max(max(len(h[4]) for h in kept), 1)
    dv = max(len(h[5]) for h in kept)
    rows = [_union_rows([h[j] for h in kept]) for j in range(4)]
    p = {name: np.zeros((len(kept), len(r), width), np.float32) for name, r, width in
         (("w_q", rows[0], dk), ("w_k", rows[1], dk), ("w_v", rows[2], dv), ("w_o", rows[3], dv))}
    for i, (q, k, v, o, qk_cols, ov_cols) in enumerate(kept):
        _scatter(p["w_q"][i], rows[0], q, qk_cols)
        _scatter(p["w_k"][i], rows[1], k, qk_cols)
        _scatter(p["w_v"][i], rows[2], v, ov_cols)
        _scatter(p["w_o"][i], rows[3], o, ov_cols)
    p["w_o"] = np.ascontiguousarray(p["w_o"].transpose(0, 2, 1))  # [heads, dv, out_rows]
    spec = SublayerSpec("attn", q_rows=tuple(map(int, rows[0])), k_rows=tuple(map(int, rows[1])),
                        v_rows=tuple(map(int, rows[2])), out_rows=tuple(map(int, rows[3])),
                        qk_scale=float(1.0 / np.sqrt(key_size)))
    return spec, p


def _mlp_sublayer(w1: _Rows, b1: np.ndarray, w2: _Rows, b2: np.ndarray):
    """One MLP sublayer -> (spec, params) keeping non-zero hidden units/rows/columns, or None.

    Args:
        w1: first layer on its residual input rows [rows, hidden]; b1: [hidden].
        w2: second layer *transposed*, on its residual output rows [rows, hidden];
            b2: [rows] (the bias of those outputs).
    """
    hidden = np.flatnonzero((_nonzero(w1.mat, 0) | (b1 != 0)) & _nonzero(w2.mat, 0))
    if not len(hidden) and not (b2 != 0).any():
        return None
    in_sel = _nonzero(w1.mat[:, hidden], 1) if len(hidden) else np.zeros(len(w1.rows), bool)
    out_sel = (_nonzero(w2.mat[:, hidden], 1) if len(hidden) else False) | (b2 != 0)
    in_order, out_order = np.argsort(w1.rows[in_sel], kind="stable"), np.argsort(w2.rows[out_sel], kind="stable")
    in_idx, out_idx = np.flatnonzero(in_sel)[in_order], np.flatnonzero(out_sel)[out_order]
    p = {"w_1": w1.mat[np.ix_(in_idx, hidden)], "b_1": b1[hidden],
         "w_2": np.ascontiguousarray(w2.mat[np.ix_(out_idx, hidden)].T), "b_2": b2[out_idx]}
    spec = SublayerSpec("mlp", in_rows=tuple(map(int, w1.rows[in_idx])), out_rows=tuple(map(int, w2.rows[out_idx])))
    return spec, p


def _live(space, index: Dict[Any, int], matrix: Optional[np.ndarray] = None, transpose: bool = False) -> _Rows:
    """The residual -> ``space`` projection (times ``matrix``) on the residual rows of ``space`` only.

    tracr's assembler multiplies the dense [D, dim] projection ``project(residual, space)``
    by the block's matrix; every other residual row of that product is exactly 0.
    This computes the same rows, with the same terms per entry (so the same float64
    numbers), without the D x D arrays. ``transpose``: ``matrix`` acts from the
    right on the projection's transpose (tracr's ``matrix @ project(...).T``); the
    result is given transposed, [rows, matrix rows].
    """
    present = [(j, index[d]) for j, d in enumerate(space.basis) if d in index]
    proj = np.zeros((len(present), space.num_dims))  # float64, as tracr's projection
    if present:
        cols, rows = map(np.asarray, zip(*present))
        proj[np.arange(len(present)), cols] = 1.0
    else:
        rows = np.zeros(0, int)
    if matrix is None:
        mat = proj
    elif transpose:
        mat = (matrix @ proj.T).T
    else:
        mat = proj @ matrix
    return _Rows(rows, np.asarray(mat, np.float32))


def _tracr_config(craft_model) -> Tuple[int, int, int, int]:
    """(num_layers, num_heads, key_size, mlp_hidden_size) as tracr's assembler sizes the model.

    (``tracr.compiler.assemble._get_model_config_and_module_names``: blocks fill the
    layers' attention / MLP slots in order, skipping a slot of the other kind.)
    """
    from tracr.craft import transformers

    slot, heads, mlps, sizes = -1, [], [], []
    for block in craft_model.blocks:
        kind = 1 if isinstance(block, transformers.MLP) else 0
        slot += 1
        while slot % 2 != kind:
            slot += 1
        if kind:
            mlps.append(block)
        else:
            sizes.append(len(list(block.as_multi().heads())))
            heads.extend(block.as_multi().heads())
    num_heads, key_size = (max(sizes), max(max(h.w_qk.matrix.shape) for h in heads)) if sizes else (1, 1)
    hidden = max(m.fst.output_space.num_dims for m in mlps) if mlps else 1
    return slot // 2 + 1, num_heads, key_size, hidden


def from_craft(craft_model, *, tokens_space, indices_space, output_space, output_labels: Sequence[str],
               categorical: bool, max_seq_len: int, causal: bool, attention: str = "softmax",
               meta: Optional[Dict[str, Any]] = None) -> CompiledModel:
    """Build a :class:`CompiledModel` from a CRAFT model directly, from each block's live rows.

    The weights are those of ``from_tracr(assemble_craft_model(...))`` bit for bit
    (``tests/test_build_paths.py`` compares every tensor's sha256), but no D x D
    array is ever held: tracr's assembler materialises every projection and every
    sublayer over the whole residual stream (D = d_model) before the conversion
    drops the zero rows; here each sublayer is computed on the residual rows its
    block reads and writes.

    Args:
        craft_model: ``tracr.craft.transformers.SeriesWithResiduals`` of
            ``MultiAttentionHead`` / ``MLP`` blocks (the compiler's schedule, head
            sizes already fixed for tracr's key size).
        tokens_space, indices_space, output_space: as for tracr's
            ``assemble_craft_model`` (``tokens_space`` includes BOS and PAD).
        output_labels: residual labels of the output SOp's directions, read-out order.
        categorical: whether the output is one-hot over ``output_space`` (else one number).
        max_seq_len: N used at compile time.
        causal: whether the model masks future keys.
        attention: attention kind the construction targets.
        meta: extra metadata; ``tracr_blocks``, ``dense_params`` (the parameter count
            of tracr's dense model), ``tracr_key_size``, ``tracr_num_heads`` are added.
    Returns:
        The model.
    """
    from tracr.craft import bases, transformers
    from tracr.transformer import encoder as tracr_encoder

    residual = bases.join_vector_spaces(craft_model.residual_space, tokens_space, indices_space, output_space)
    index = residual.index_by_direction
    d = residual.num_dims
    num_layers, num_heads, key_size, hidden_size = _tracr_config(craft_model)
    specs, layers = [], []
    for block in craft_model.blocks:
        if isinstance(block, transformers.MLP):
            w1 = _live(block.fst.input_space, index, block.fst.matrix)
            w2 = _live(block.snd.output_space, index, block.snd.matrix, transpose=True)
            sub = _mlp_sublayer(w1, np.zeros(w1.mat.shape[1], np.float32), w2, np.zeros(len(w2.rows), np.float32))
        else:
            sub = _attn_sublayer([(_live(h.w_qk.left_space, index, h.w_qk.matrix), _live(h.w_qk.right_space, index),
                                   _live(h.w_ov.input_space, index, h.w_ov.matrix), _live(h.w_ov.output_space, index))
                                  for h in block.as_multi().heads()], key_size)
        if sub is not None:
            specs.append(sub[0])
            layers.append(sub[1])
    token = np.zeros((tokens_space.num_dims, d), np.float32)
    one = bases.BasisDirection("one")
    for i, direction in enumerate(tokens_space.basis):
        token[i, index[direction]] = 1.0
        if one in index:
            token[i, index[one]] += 1.0
    pos = np.zeros((indices_space.num_dims + 1, d), np.float32)  # tracr: position 0 gets no embedding row
    for i, direction in enumerate(indices_space.basis):
        pos[i + 1, index[direction]] = 1.0
    input_encoder = tracr_encoder.CategoricalEncoder(basis=tokens_space.basis, enforce_bos=True, bos_token=BOS,
                                                     pad_token=PAD)
    input_values, output_values = _encoder_values(
        input_encoder, tracr_encoder.CategoricalEncoder(basis=output_space.basis) if categorical else None)
    unembed = _unembed(d, {str(b): i for i, b in enumerate(residual.basis)}, output_labels)
    qkv = num_heads * key_size
    dense = (token.size + pos.size + unembed.size + num_layers * (
        3 * (d * qkv + qkv) + qkv * d + d + d * hidden_size + hidden_size + hidden_size * d + d))
    return _model(specs, layers, token, pos, unembed, input_values, output_values, categorical, max_seq_len,
                  [str(b) for b in residual.basis], causal, attention, meta, num_layers, dense, key_size, num_heads)


def _encoder_values(input_encoder, output_encoder) -> Tuple[List[Any], List[Any]]:
    """Token value of each embedding row, and value of each read-out column (categorical outputs)."""
    input_values = [None] * len(input_encoder.encoding_map)
    for v, i in input_encoder.encoding_map.items():
        input_values[i] = BOS if v == input_encoder.bos_token else PAD if v == input_encoder.pad_token else v
    output_values: List[Any] = []
    if output_encoder is not None:
        output_values = [None] * len(output_encoder.encoding_map)
        for v, i in output_encoder.encoding_map.items():
            output_values[i] = v
    return input_values, output_values


def _unembed(d: int, index: Dict[str, int], output_labels: Sequence[str]) -> np.ndarray:
    """[d, O] float32: column j reads the residual direction labelled ``output_labels[j]``."""
    unembed = np.zeros((d, len(output_labels)), np.float32)
    for j, lab in enumerate(output_labels):
        unembed[index[lab], j] = 1.0
    return unembed


def _model(specs, layers, token, pos, unembed, input_values, output_values, categorical, max_seq_len,
           residual_labels, causal, attention, meta, num_layers, dense, key_size, num_heads) -> CompiledModel:
    params = {"embed": {"token": token, "pos": pos}, "layers": layers, "unembed": {"w": unembed}}
    arch = Arch(sublayers=tuple(specs), attention=attention, causal=causal, pad_id=input_values.index(PAD))
    m = dict(meta or {})
    m.update(tracr_blocks=int(num_layers), dense_params=int(dense), tracr_key_size=int(key_size),
             tracr_num_heads=int(num_heads))
    return CompiledModel(params=params, arch=arch, input_values=input_values, output_values=output_values,
                         categorical_output=categorical, max_seq_len=max_seq_len,
                         residual_labels=list(residual_labels), meta=m)


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
    d = raw["token_embed"]["embeddings"].shape[1]
    every = np.arange(d)
    specs, layers = [], []
    for l in range(cfg.num_layers):
        wq, wk, wv, wo = (np.asarray(raw[f"transformer/layer_{l}/attn/{n}"]["w"], np.float32)
                          for n in ("query", "key", "value", "linear"))
        wq, wk, wv = (w.reshape(d, cfg.num_heads, cfg.key_size).transpose(1, 0, 2) for w in (wq, wk, wv))
        wo = wo.reshape(cfg.num_heads, cfg.key_size, d)
        attn = _attn_sublayer([(_Rows(every, wq[h]), _Rows(every, wk[h]), _Rows(every, wv[h]), _Rows(every, wo[h].T))
                               for h in range(cfg.num_heads)], cfg.key_size)
        l1, l2 = raw[f"transformer/layer_{l}/mlp/linear_1"], raw[f"transformer/layer_{l}/mlp/linear_2"]
        mlp = _mlp_sublayer(_Rows(every, np.asarray(l1["w"], np.float32)), np.asarray(l1["b"], np.float32),
                            _Rows(every, np.asarray(l2["w"], np.float32).T), np.asarray(l2["b"], np.float32))
        for sub in (attn, mlp):
            if sub is not None:
                specs.append(sub[0])
                layers.append(sub[1])
    categorical = isinstance(assembled.output_encoder, tracr_encoder.CategoricalEncoder)
    input_values, output_values = _encoder_values(assembled.input_encoder,
                                                  assembled.output_encoder if categorical else None)
    unembed = _unembed(d, {lab: i for i, lab in enumerate(assembled.residual_labels)}, output_labels)
    dense = sum(int(np.size(a)) for group in raw.values() for a in group.values()) + unembed.size
    return _model(specs, layers, np.asarray(raw["token_embed"]["embeddings"], np.float32),
                  np.asarray(raw["pos_embed"]["embeddings"], np.float32), unembed, input_values, output_values,
                  categorical, max_seq_len, assembled.residual_labels, causal, attention, meta, cfg.num_layers,
                  dense, cfg.key_size, cfg.num_heads)
