"""The model file format: save and load compiled models (safetensors weights + JSON metadata, one file).

File layout (one ``.safetensors`` file, readable by any safetensors tool):

* tensors: the weight pytree of :mod:`constructions.runtime`, flattened with
  dotted names (``embed.token`` [V, D], ``embed.pos`` [T, D], ``layers.3.w_q``
  [H, Dq, dk], ``unembed.w`` [D, O], ...), float32, exactly as in memory;
* header metadata ``"depthcraft"``: a JSON document with the format version,
  the package version, construction / task / params / bound (when the model
  came from the registry), vocabularies (input and output values), residual
  labels, the static architecture (attention kind, causal, every sublayer's
  residual row tuples and score scale), the pytree skeleton, and a SHA-256 of
  the tensor bytes.

Writes go through :func:`constructions.files.atomic_write` (temporary file in
the same directory, then rename; symlinks written through, devices refused): an
interrupted save leaves the old file or nothing, never half a file. Loading a
missing, truncated, corrupt, foreign or mismatched file raises
:class:`~constructions.errors.InputError` (or ParameterError for a mismatch
with what the caller expected), naming the file and the problem.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np

from depthcraft.constructions.errors import InputError, ParameterError
from depthcraft.constructions.files import to_json, write_bytes_atomic
from depthcraft.constructions.model import CompiledModel
from depthcraft.constructions.runtime import Arch, SublayerSpec
from depthcraft.constructions.version import package_version

FORMAT = "depthcraft-model"
FORMAT_VERSION = 2  # 2: the SHA-256 covers the metadata too (1: the weights only)
_META_KEY = "depthcraft"


# ---------------------------------------------------------------------------------------------
# Values and pytrees
# ---------------------------------------------------------------------------------------------


def _encode_value(v: Any) -> Any:
    if isinstance(v, np.generic):
        v = v.item()
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, tuple):
        return {"tuple": [_encode_value(x) for x in v]}
    raise ParameterError(f"cannot save a token/output value of type {type(v).__name__} ({v!r}); "
                         f"supported: int, float, str, bool, None and tuples of these")


def _decode_value(v: Any) -> Any:
    if isinstance(v, dict):
        return tuple(_decode_value(x) for x in v["tuple"])
    return v


def _flatten(tree: Any, prefix: str, out: Dict[str, np.ndarray]) -> Any:
    """Nested dicts/lists of arrays -> {dotted name: array}; returns the skeleton (names at the leaves)."""
    if isinstance(tree, Mapping):
        return {k: _flatten(v, f"{prefix}{k}.", out) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return [_flatten(v, f"{prefix}{i}.", out) for i, v in enumerate(tree)]
    name = prefix[:-1]
    out[name] = np.ascontiguousarray(np.asarray(tree))
    return name


def _unflatten(skeleton: Any, tensors: Mapping[str, np.ndarray], path: str) -> Any:
    if isinstance(skeleton, dict):
        return {k: _unflatten(v, tensors, path) for k, v in skeleton.items()}
    if isinstance(skeleton, list):
        return [_unflatten(v, tensors, path) for v in skeleton]
    if skeleton not in tensors:
        raise InputError(f"{path}: tensor {skeleton!r} named in the metadata is missing from the file")
    return tensors[skeleton]


def _digest(tensors: Mapping[str, np.ndarray], meta: Optional[Mapping[str, Any]] = None) -> str:
    """SHA-256 of the tensors and (format 2) of the metadata except its ``sha256`` entry."""
    h = hashlib.sha256()
    if meta is not None:
        h.update(json.dumps({k: v for k, v in meta.items() if k != "sha256"}, sort_keys=True).encode())
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name])
        h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _arch_to_json(arch: Arch) -> Dict[str, Any]:
    def rows(r):
        return None if r is None else [int(x) for x in r]

    return {"attention": arch.attention, "causal": bool(arch.causal), "layer_norm": bool(arch.layer_norm),
            "pad_id": arch.pad_id,
            "sublayers": [{"kind": s.kind, "q_rows": rows(s.q_rows), "k_rows": rows(s.k_rows),
                           "v_rows": rows(s.v_rows), "in_rows": rows(s.in_rows), "out_rows": rows(s.out_rows),
                           "qk_scale": float(s.qk_scale)} for s in arch.sublayers]}


def _arch_from_json(d: Mapping[str, Any]) -> Arch:
    def rows(r):
        return None if r is None else tuple(int(x) for x in r)

    subs = tuple(SublayerSpec(s["kind"], q_rows=rows(s["q_rows"]), k_rows=rows(s["k_rows"]), v_rows=rows(s["v_rows"]),
                              in_rows=rows(s["in_rows"]), out_rows=rows(s["out_rows"]), qk_scale=float(s["qk_scale"]))
                 for s in d["sublayers"])
    return Arch(sublayers=subs, attention=d["attention"], causal=bool(d["causal"]),
                layer_norm=bool(d["layer_norm"]), pad_id=d["pad_id"])


# ---------------------------------------------------------------------------------------------
# Save / load
# ---------------------------------------------------------------------------------------------


def metadata(model: CompiledModel, bound: Optional[Mapping[str, Optional[int]]] = None) -> Dict[str, Any]:
    """The JSON metadata that :func:`save` writes for ``model`` (without the skeleton and checksum).

    ``bound`` defaults to the bound recorded in ``model.meta`` (a model built from the
    catalogue records its construction's bound values and kinds there; None
    otherwise); ``bound_kinds`` records which of those are lower bounds (a given
    ``bound`` is read as upper bounds: measured <= bound).
    """
    meta = model.meta
    kinds: Dict[str, str] = {}
    if bound is None and meta.get("bound") is not None:
        bound = meta["bound"]
        kinds = dict(meta.get("bound_kinds") or {})
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "depthcraft_version": package_version(),
        "construction": meta.get("construction"),
        "task": meta.get("task"),
        "params": meta.get("params"),
        "bound": dict(bound) if bound is not None else None,
        "bound_kinds": ({k: kinds.get(k, "upper") for k, v in bound.items() if v is not None}
                        if bound is not None else None),
        "attention": model.arch.attention,
        "causal": bool(model.arch.causal),
        "vocab": [_encode_value(v) for v in model.vocab],
        "input_values": [_encode_value(v) for v in model.input_values],
        "output_values": [_encode_value(v) for v in model.output_values],
        "categorical_output": bool(model.categorical_output),
        "max_seq_len": int(model.max_seq_len),
        "residual_labels": list(model.residual_labels),
        "arch": _arch_to_json(model.arch),
        "meta": to_json(dict(meta)),
    }


def to_bytes(model: CompiledModel, *, bound: Optional[Mapping[str, Optional[int]]] = None,
             certificate: Optional[bytes] = None) -> Tuple[bytes, Dict[str, Any]]:
    """The bytes of ``model``'s file (see :func:`save`) and the metadata they hold.

    ``certificate``: a certificate file's bytes (:mod:`depthcraft.checker.certificate`) to bundle in
    the header (key ``depthcraft_certificate``, base64); it is not part of the checksum.
    Raises:
        ParameterError: a token/output value JSON cannot hold.
    """
    import base64

    from safetensors.numpy import save as st_save

    tensors: Dict[str, np.ndarray] = {}
    skeleton = _flatten(model.params, "", tensors)
    meta = metadata(model, bound)
    meta["tree"] = skeleton
    meta["sha256"] = _digest(tensors, meta)
    header = {"format": FORMAT, _META_KEY: json.dumps(meta)}
    if certificate is not None:
        header["depthcraft_certificate"] = base64.b64encode(certificate).decode("ascii")
    return st_save(tensors, metadata=header), meta


def save(model: CompiledModel, path: str, *, bound: Optional[Mapping[str, Optional[int]]] = None,
         certificate: Optional[bytes] = None) -> Dict[str, Any]:
    """Write ``model`` to ``path`` (safetensors + JSON metadata), atomically.

    Args:
        model: the compiled model.
        path: output file (conventionally ``*.safetensors``); replaced if it exists.
        bound: bound values to record (default: the registered construction's).
        certificate: a certificate file's bytes to bundle with the weights (see :func:`to_bytes`).
    Returns:
        The metadata written (JSON dict).
    Raises:
        ParameterError: unwritable path, or a token/output value JSON cannot hold.
    """
    blob, meta = to_bytes(model, bound=bound, certificate=certificate)
    write_bytes_atomic(path, blob, suffix=".safetensors")
    return meta


def read_metadata(path: str) -> Dict[str, Any]:
    """The depthcraft metadata of a saved model (tensors not loaded, checksum not verified).

    Raises:
        InputError: missing, unreadable, non-safetensors or non-depthcraft file.
    """
    return _open(path)[0]


def _open(path: str, with_tensors: bool = False) -> Tuple[Dict[str, Any], Dict[str, np.ndarray]]:
    from safetensors import safe_open

    if not os.path.exists(path):
        raise InputError(f"cannot read {path}: no such file")
    if os.path.isdir(path):
        raise InputError(f"cannot read {path}: it is a directory")
    try:
        with safe_open(path, framework="numpy") as f:
            header = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()} if with_tensors else {}
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror or e}") from None
    except Exception as e:  # safetensors raises its own SafetensorError (header, truncation)
        raise InputError(f"{path} is not a readable safetensors file (truncated or corrupt?): "
                         f"{type(e).__name__}: {e}") from None
    if _META_KEY not in header or header.get("format") != FORMAT:
        raise InputError(f"{path} is a safetensors file but not a depthcraft model (no {_META_KEY!r} metadata)")
    try:
        meta = json.loads(header[_META_KEY])
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: the depthcraft metadata is not valid JSON (corrupt file?): {e}") from None
    if not isinstance(meta, dict):
        raise InputError(f"{path}: the depthcraft metadata is a JSON {type(meta).__name__}, not an object "
                         f"(corrupt or edited file)")
    version = meta.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION or version < 1:
        raise InputError(f"{path}: model format version {version!r} is not supported "
                         f"(this depthcraft reads versions 1..{FORMAT_VERSION}; upgrade depthcraft)")
    return meta, tensors


def _check_shapes(path: str, model_meta: Mapping[str, Any], params: Mapping[str, Any], arch: Arch) -> None:
    tok = params["embed"]["token"]
    d = tok.shape[1]
    n_in = len(model_meta["input_values"])

    def bad(what: str) -> InputError:
        return InputError(f"{path}: tensors do not match the metadata ({what}); the file is corrupt or was edited")

    if tok.shape[0] != n_in:
        raise bad(f"embed.token has {tok.shape[0]} rows for {n_in} input values")
    if params["embed"]["pos"].shape[1] != d or params["embed"]["pos"].shape[0] < model_meta["max_seq_len"] + 1:
        raise bad(f"embed.pos shape {params['embed']['pos'].shape}")
    if len(params["layers"]) != len(arch.sublayers):
        raise bad(f"{len(params['layers'])} layers of weights for {len(arch.sublayers)} sublayers")
    for i, (spec, p) in enumerate(zip(arch.sublayers, params["layers"])):
        checks = ([("w_q", 1, spec.q_rows), ("w_k", 1, spec.k_rows), ("w_v", 1, spec.v_rows), ("w_o", 2, spec.out_rows)]
                  if spec.kind == "attn" else [("w_1", 0, spec.in_rows), ("w_2", 1, spec.out_rows)])
        for name, axis, rows in checks:
            if name not in p:
                raise bad(f"layers.{i}.{name} missing")
            want = d if rows is None else len(rows)
            if p[name].shape[axis] != want:
                raise bad(f"layers.{i}.{name} has {p[name].shape[axis]} residual rows, expected {want}")
            if rows is not None and len(rows) and max(rows) >= d:
                raise bad(f"layers.{i} reads residual row {max(rows)} of a {d}-dimensional stream")
    out_w = params["unembed"]["w"]
    n_out = len(model_meta["output_values"]) if model_meta["categorical_output"] else 1
    if out_w.shape != (d, n_out):
        raise bad(f"unembed.w shape {out_w.shape}, expected {(d, n_out)}")
    if len(model_meta["residual_labels"]) != d:
        raise bad(f"{len(model_meta['residual_labels'])} residual labels for d_model={d}")


def load(path: str, *, construction: Optional[str] = None,
         params: Optional[Mapping[str, Any]] = None) -> CompiledModel:
    """Load a model written by :func:`save`; outputs are bit-for-bit those of the saved model.

    Args:
        path: the ``.safetensors`` file.
        construction: if given, the construction the file must hold.
        params: if given, parameter values the file must hold (only the keys given are compared).
    Returns:
        The :class:`CompiledModel` (float32 weights, architecture, vocabularies, metadata).
    Raises:
        InputError: missing/unreadable file, not safetensors, truncated, corrupt (checksum or
            shapes), not a depthcraft model, or an unsupported format version.
        ParameterError: the file holds another construction or other parameter values than expected.
    """
    meta, tensors = _open(path, with_tensors=True)
    try:
        if _digest(tensors, meta if meta["format_version"] >= 2 else None) != meta["sha256"]:
            raise InputError(f"{path}: the weights and metadata do not match their SHA-256 checksum; "
                             f"the file is corrupt or was edited")
        params_tree = _unflatten(meta["tree"], tensors, path)
        arch = _arch_from_json(meta["arch"])
        _check_shapes(path, meta, params_tree, arch)
        input_values = [_decode_value(v) for v in meta["input_values"]]
        output_values = [_decode_value(v) for v in meta["output_values"]]
        model_meta = dict(meta.get("meta") or {})
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
        if isinstance(e, InputError):
            raise
        raise InputError(f"{path}: incomplete or malformed depthcraft metadata ({type(e).__name__}: {e})") from None
    _check_bound_meta(path, meta)
    _expect(path, meta, construction, params)
    model = CompiledModel(params=params_tree, arch=arch, input_values=input_values, output_values=output_values,
                          categorical_output=bool(meta["categorical_output"]), max_seq_len=int(meta["max_seq_len"]),
                          residual_labels=list(meta["residual_labels"]), meta=model_meta)
    model.meta.update(loaded_from=os.path.abspath(path), saved_bound=meta.get("bound"),
                      saved_bound_kinds=meta.get("bound_kinds"),
                      saved_version=meta.get("depthcraft_version"))
    return model


def _check_bound_meta(path: str, meta: Mapping[str, Any]) -> None:
    """The recorded bound: None or {attn_layers / heads / d_model: int or None}; kinds upper / lower."""
    bound, kinds = meta.get("bound"), meta.get("bound_kinds")
    ok = bound is None or (isinstance(bound, dict) and all(
        k in ("attn_layers", "heads", "d_model") and (v is None or (isinstance(v, int) and not isinstance(v, bool)))
        for k, v in bound.items()))
    ok = ok and (kinds is None or (isinstance(kinds, dict) and all(v in ("upper", "lower") for v in kinds.values())))
    if not ok:
        raise InputError(f"{path}: incomplete or malformed depthcraft metadata (bound {bound!r}, kinds {kinds!r})")


def _expect(path: str, meta: Mapping[str, Any], construction: Optional[str],
            params: Optional[Mapping[str, Any]]) -> None:
    if construction is not None and meta.get("construction") != construction:
        raise ParameterError(f"{path} holds construction {meta.get('construction')!r}, expected {construction!r}")
    if params:
        held = meta.get("params") or {}
        for k, v in params.items():
            if k not in held:
                raise ParameterError(f"{path} has no parameter {k!r} (it holds {sorted(held)})")
            if str(held[k]) != str(v):
                raise ParameterError(f"{path} holds {k}={held[k]!r}, expected {k}={v!r}")


__all__: List[str] = ["save", "to_bytes", "load", "read_metadata", "metadata", "FORMAT", "FORMAT_VERSION"]
