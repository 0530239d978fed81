"""Reading a depthcraft model file, and the SHA-256 a certificate names it by.

A model file is one safetensors file: float32 tensors named ``embed.token`` [V, D], ``embed.pos``
[T, D], ``layers.<i>.<name>`` and ``unembed.w`` [D, O], and a header entry ``depthcraft`` holding
JSON: ``input_values``, ``output_values`` (values; a tuple is ``{"tuple": [...]}``),
``categorical_output``, ``max_seq_len``, ``residual_labels`` [D] and ``arch`` (attention kind,
causal, layer norm, pad id and, per sublayer, its kind, the residual rows each projection reads
and writes, ``qk_scale``). The checker reads it with safetensors and nothing else.

:func:`weights_sha256` is the certificate's name for a model: SHA-256 of the line
``depthcraft-weights-v1``, the canonical JSON (sorted keys, no spaces) of those six metadata
entries, and every tensor in name order as ``name|dtype|shape|`` followed by its bytes. Any
change to a weight, a row tuple, a label or a vocabulary changes it; package versions and
free-form metadata do not.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any, Dict, List, Optional

import numpy as np

#: Metadata entries the hash covers.
HASHED = ("input_values", "output_values", "categorical_output", "max_seq_len", "residual_labels", "arch")


class ModelFileError(Exception):
    """The file is not a readable depthcraft model (the message names the file and the problem)."""


def decode_value(v: Any) -> Any:
    """A JSON value of the model format back to Python (``{"tuple": [...]}`` -> tuple)."""
    if isinstance(v, dict):
        return tuple(decode_value(x) for x in v["tuple"])
    return v


def weights_sha256(meta: Dict[str, Any], tensors: Dict[str, np.ndarray]) -> str:
    """SHA-256 of a model's weights and structure (module docstring)."""
    h = hashlib.sha256(b"depthcraft-weights-v1\n")
    h.update(json.dumps({k: meta[k] for k in HASHED}, sort_keys=True, separators=(",", ":")).encode())
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name])
        h.update(f"{name}|{a.dtype.str}|{list(a.shape)}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()


@dataclasses.dataclass
class Model:
    """A model as the checker reads it (float32 weights, float64 copies made where needed).

    Attributes:
        token: [V, D] token embedding; pos: [T, D] position embedding (row p: model position p).
        layers: per sublayer its weights (``w_q`` [H, Dq, dk], ``w_k``, ``w_v`` [H, Dv, dv],
            ``w_o`` [H, dv, Do]; or ``w_1`` [Din, h], ``b_1``, ``w_2`` [h, Dout], ``b_2``).
        subs: per sublayer ``{"kind", "q_rows", "k_rows", "v_rows", "in_rows", "out_rows"}`` as
            int arrays (every row when the file says null) and ``"qk_scale"``.
        unembed: [D, O] read-out.
        attention, causal, pad_id: the forward's attention kind, causal mask, PAD token id.
        input_values, output_values: values of the embedding rows and of the read-out columns.
        categorical: the read-out is one-hot over ``output_values`` (else one number).
        n: N, the longest input; labels: [D] residual labels; sha256: :func:`weights_sha256`.
        meta: the file's whole metadata (construction, params, ...: informational).
    """

    token: np.ndarray
    pos: np.ndarray
    layers: List[Dict[str, np.ndarray]]
    subs: List[Dict[str, Any]]
    unembed: np.ndarray
    attention: str
    causal: bool
    pad_id: Optional[int]
    input_values: List[Any]
    output_values: List[Any]
    categorical: bool
    n: int
    labels: List[str]
    sha256: str
    meta: Dict[str, Any]
    #: a certificate bundled in the file's header (gzip + base64 JSON), or None
    embedded: Optional[str] = None

    @property
    def d(self) -> int:
        return self.token.shape[1]

    @property
    def bos_id(self) -> int:
        return self.input_values.index("BOS")

    @property
    def vocab_ids(self) -> List[int]:
        """Embedding rows of the input tokens (BOS and PAD excluded)."""
        return [i for i, v in enumerate(self.input_values) if v not in ("BOS", "PAD")]


def header(blob: bytes) -> Dict[str, str]:
    """The ``__metadata__`` of a safetensors file's bytes (8-byte little-endian length, then JSON)."""
    size = int.from_bytes(blob[:8], "little")
    return json.loads(blob[8:8 + size].decode("utf-8")).get("__metadata__") or {}


def load(source: Any) -> Model:
    """Read a model file (a path, or the file's bytes).

    Raises:
        ModelFileError: missing, unreadable, not safetensors, not a depthcraft model, or tensors
            that do not match the metadata.
    """
    from safetensors.numpy import load as st_load

    path = "<bytes>" if isinstance(source, (bytes, bytearray)) else str(source)
    try:
        if isinstance(source, (bytes, bytearray)):
            blob = bytes(source)
        else:
            with open(source, "rb") as f:
                blob = f.read()
    except OSError as e:
        raise ModelFileError(f"{path}: cannot read the model file ({e.strerror or e})") from None
    try:
        tensors = st_load(blob)
        meta = json.loads(header(blob)["depthcraft"])
        d = tensors["embed.token"].shape[1]
        layers: List[Dict[str, np.ndarray]] = []
        subs = []
        for i, s in enumerate(meta["arch"]["sublayers"]):
            prefix = f"layers.{i}."
            layers.append({k[len(prefix):]: tensors[k] for k in tensors if k.startswith(prefix)})
            rows = {k: np.arange(d) if s.get(k) is None else np.asarray(s[k], np.int64)
                    for k in ("q_rows", "k_rows", "v_rows", "in_rows", "out_rows")}
            subs.append({"kind": s["kind"], "qk_scale": float(s["qk_scale"]), **rows})
        arch = meta["arch"]
        model = Model(token=tensors["embed.token"], pos=tensors["embed.pos"], layers=layers, subs=subs,
                      unembed=tensors["unembed.w"], attention=arch["attention"], causal=bool(arch["causal"]),
                      pad_id=arch.get("pad_id"), input_values=[decode_value(v) for v in meta["input_values"]],
                      output_values=[decode_value(v) for v in meta["output_values"]],
                      categorical=bool(meta["categorical_output"]), n=int(meta["max_seq_len"]),
                      labels=list(meta["residual_labels"]), sha256=weights_sha256(meta, tensors), meta=meta)
        if arch.get("layer_norm"):
            raise ModelFileError(f"{path}: the model has layer norm (not a compiled model's layout)")
        _check_shapes(model)
        model.embedded = header(blob).get("depthcraft_certificate")
        _check_layout(model, meta, tensors)
    except ModelFileError:
        raise
    except Exception as e:  # noqa: BLE001 - any malformed file is one error
        raise ModelFileError(f"{path}: not a readable depthcraft model file ({type(e).__name__}: {e})") from None
    return model


def _check_layout(m: Model, meta: Dict[str, Any], tensors: Dict[str, np.ndarray]) -> None:
    """The file means to depthcraft's runtime exactly what the checker reads (else ModelFileError).

    The runtime builds its weights from the metadata's ``tree`` and adds every tensor it finds (a
    read-out bias ``unembed.b``); so the tree must name each tensor by its conventional name, and
    no other tensor may be in the file. The runtime masks the keys holding ``pad_id``: it must be
    PAD's row. Token values must be distinct for Python's ``==`` too (the runtime looks tokens up in
    a dict: ``1`` and ``True`` would be one token). Weights must be normal numbers or 0 (XLA on a CPU
    flushes subnormals to zero).
    """
    tree = {"embed": {"token": "embed.token", "pos": "embed.pos"}, "unembed": {"w": "unembed.w"},
            "layers": [{k: f"layers.{i}.{k}" for k in p} for i, p in enumerate(m.layers)]}
    names = {"embed.token", "embed.pos", "unembed.w"} | {f"layers.{i}.{k}" for i, p in enumerate(m.layers) for k in p}
    if meta.get("tree") != tree or set(tensors) != names:
        raise ModelFileError("the file's tensors or their tree are not the model layout's (extra tensors, such as a "
                             "read-out bias, or tensors the runtime would read under other names)")
    if "PAD" not in m.input_values or m.pad_id != m.input_values.index("PAD"):
        raise ModelFileError(f"pad_id {m.pad_id!r} is not the PAD token's row (the runtime masks the keys holding it)")
    vals = m.input_values
    for i in range(len(vals)):
        for j in range(i):
            if vals[i] == vals[j] or type(vals[i]) is type(vals[j]) and repr(vals[i]) == repr(vals[j]):
                raise ModelFileError(f"the token values {vals[j]!r} and {vals[i]!r} are one token to the runtime")
    every = [m.token, m.pos, m.unembed] + [a for p in m.layers for a in p.values()]
    if any(((a != 0) & (np.abs(a) < np.finfo(np.float32).tiny)).any() for a in every):
        raise ModelFileError("the model has subnormal weights (XLA on a CPU flushes them to zero)")


def _check_shapes(m: Model) -> None:
    d = m.d
    bad = []
    if m.pos.shape[1] != d or m.pos.shape[0] < m.n + 1 or len(m.labels) != d:
        bad.append("embedding / label sizes")
    if m.token.shape[0] != len(m.input_values) or "BOS" not in m.input_values:
        bad.append("token embedding rows")
    for i, (s, p) in enumerate(zip(m.subs, m.layers)):
        names = ("w_q", "w_k", "w_v", "w_o") if s["kind"] == "attn" else ("w_1", "b_1", "w_2", "b_2")
        if set(p) != set(names):
            bad.append(f"sublayer {i} holds {sorted(p)} (biases or layer norm are not a compiled layout)")
            continue
        if s["kind"] == "attn":
            h = p["w_q"].shape[0]
            ok = (p["w_q"].shape[1] == len(s["q_rows"]) and p["w_k"].shape[1] == len(s["k_rows"])
                  and p["w_v"].shape[1] == len(s["v_rows"]) and p["w_o"].shape[2] == len(s["out_rows"])
                  and all(p[k].shape[0] == h for k in names) and p["w_q"].shape[2] == p["w_k"].shape[2]
                  and p["w_v"].shape[2] == p["w_o"].shape[1])
        else:
            ok = (p["w_1"].shape[0] == len(s["in_rows"]) and p["w_2"].shape[1] == len(s["out_rows"])
                  and p["b_1"].shape == (p["w_1"].shape[1],) and p["b_2"].shape == (p["w_2"].shape[1],)
                  and p["w_2"].shape[0] == p["w_1"].shape[1])
        rows = np.concatenate([s[k] for k in ("q_rows", "k_rows", "v_rows", "in_rows", "out_rows")])
        if not ok or (len(rows) and (rows.min() < 0 or rows.max() >= d)):
            bad.append(f"sublayer {i} shapes")
    if m.unembed.shape != (d, len(m.output_values) if m.categorical else 1):
        bad.append("read-out shape")
    every = [m.token, m.pos, m.unembed] + [a for p in m.layers for a in p.values()]
    if any(a.dtype != np.float32 or not np.isfinite(a).all() for a in every):
        bad.append("weights that are not finite float32")
    if bad:
        raise ModelFileError(f"the model file's tensors do not match its metadata: {bad[0]}")
