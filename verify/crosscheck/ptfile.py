"""Read (and write) PyTorch ``.pt`` state dicts without torch and without running pickled code.

A ``torch.save`` file (format of torch >= 1.6) is a zip archive::

    <name>/data.pkl        a pickle (protocol 2) of the saved object
    <name>/data/<key>      raw little-endian bytes of each storage
    <name>/version         the format version ("3")
    <name>/byteorder       optional ("little")

In ``data.pkl`` a tensor is ``torch._utils._rebuild_tensor_v2(storage, offset, size,
stride, requires_grad, backward_hooks)``, the storage a persistent id
``("storage", torch.<Type>Storage, key, location, numel)``, and a state dict a
``collections.OrderedDict``.

A pickle can call any importable function while it loads. :func:`load_state_dict`
reads ``data.pkl`` with an unpickler whose ``find_class`` answers only the names in
:data:`ALLOWED` (the tensor rebuild calls, the storage types and ``OrderedDict``) with
this module's own stand-ins; any other global (``os.system``, ``builtins.eval``, a
torch class outside the list, ...) raises :class:`~depthcraft.constructions.errors.InputError`
naming it, before anything is called. Nothing from the file is ever imported or run.

:func:`save_state_dict` writes the same format from numpy arrays (for tests and for
small fixtures; files it writes load in ``torch.load(..., weights_only=True)``).
"""

from __future__ import annotations

import collections
import io
import os
import pickle
import struct
import zipfile
from typing import Any, Dict, Mapping

import numpy as np

from depthcraft.constructions.errors import InputError

#: numpy dtype of each storage type a state dict may hold (little-endian).
STORAGE_DTYPES = {
    "FloatStorage": "<f4", "DoubleStorage": "<f8", "HalfStorage": "<f2",
    "LongStorage": "<i8", "IntStorage": "<i4", "ShortStorage": "<i2",
    "CharStorage": "i1", "ByteStorage": "u1", "BoolStorage": "?",
}

#: Largest data.pkl accepted (bytes): a state dict's pickle holds names and shapes, not weights.
MAX_PICKLE_BYTES = 16 * 2 ** 20


class _StorageType:
    """Stand-in for ``torch.<Type>Storage``: only its element dtype is used."""

    def __init__(self, name: str):
        self.name = name
        self.dtype = np.dtype(STORAGE_DTYPES[name])

    def __repr__(self) -> str:
        return f"torch.{self.name}"


class _Storage:
    """A storage read from the archive: a flat numpy array."""

    def __init__(self, data: np.ndarray):
        self.data = data


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad=False,
                       backward_hooks=None, metadata=None):
    """Stand-in for ``torch._utils._rebuild_tensor_v2``: a numpy copy of the strided view."""
    if not isinstance(storage, _Storage):
        raise InputError("a tensor's storage is not a storage record of the archive")
    try:
        size = tuple(int(s) for s in size)
        stride = tuple(int(s) for s in stride)
        offset = int(storage_offset)
    except (TypeError, ValueError):
        raise InputError("a tensor's size, stride or offset is not a tuple of integers") from None
    if len(size) != len(stride) or offset < 0 or any(s < 0 for s in size) or any(s < 0 for s in stride):
        raise InputError(f"a tensor has a bad layout: size {size}, stride {stride}, offset {offset}")
    data = storage.data
    if all(size):
        last = offset + sum((n - 1) * s for n, s in zip(size, stride))
        if last >= data.size:
            raise InputError(f"a tensor of size {size} reaches element {last} of a storage of {data.size}")
    else:
        return np.zeros(size, data.dtype)
    item = data.itemsize
    view = np.lib.stride_tricks.as_strided(data[offset:], shape=size, strides=[s * item for s in stride])
    return np.array(view)  # a copy: no view into the archive's buffer survives


def _rebuild_parameter(data, requires_grad=False, backward_hooks=None):
    """Stand-in for ``torch._utils._rebuild_parameter``: the tensor itself."""
    if not isinstance(data, np.ndarray):
        raise InputError("a parameter does not wrap a tensor")
    return data


def _ordered_dict(*args):
    if args:
        raise InputError("OrderedDict is called with arguments in the pickle; a state dict has none")
    return collections.OrderedDict()


#: (module, name) -> the stand-in the restricted unpickler gives for it; nothing else is answered.
ALLOWED = {
    ("collections", "OrderedDict"): _ordered_dict,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    **{("torch", name): _StorageType(name) for name in STORAGE_DTYPES},
}


class _Unpickler(pickle.Unpickler):
    def __init__(self, data: bytes, archive: zipfile.ZipFile, prefix: str, path: str):
        super().__init__(io.BytesIO(data))
        self._archive, self._prefix, self._path = archive, prefix, path
        self._storages: Dict[str, _Storage] = {}

    def find_class(self, module: str, name: str):
        try:
            return ALLOWED[(module, name)]
        except (KeyError, TypeError):
            raise InputError(f"{self._path}: refused: the pickle calls {module}.{name}, which is not one of "
                             f"the tensor-rebuild calls a state dict needs (nothing was run)") from None

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"
                and isinstance(pid[1], _StorageType) and isinstance(pid[2], str)):
            raise InputError(f"{self._path}: refused: unknown persistent record {str(pid)[:60]!r}")
        _, kind, key, _location, numel = pid
        if key not in self._storages:
            name = f"{self._prefix}data/{key}"
            try:
                raw = self._archive.read(name)
            except KeyError:
                raise InputError(f"{self._path}: storage {key!r} is missing from the archive") from None
            if len(raw) % kind.dtype.itemsize:
                raise InputError(f"{self._path}: storage {key!r} has {len(raw)} bytes, not a multiple of "
                                 f"{kind.dtype.itemsize}")
            arr = np.frombuffer(raw, kind.dtype)
            if isinstance(numel, int) and arr.size < numel:
                raise InputError(f"{self._path}: storage {key!r} holds {arr.size} elements, {numel} declared")
            self._storages[key] = _Storage(arr)
        return self._storages[key]


def load_state_dict(path: str) -> "collections.OrderedDict[str, np.ndarray]":
    """A ``torch.save``'d state dict as numpy arrays, without torch and without running pickled code.

    Args:
        path: a ``.pt`` file (zip format).
    Returns:
        OrderedDict name -> numpy array (the storage's dtype: float32 for ``FloatStorage``, ...),
        in the file's order. Non-tensor values (a nested dict of metadata) are dropped.
    Raises:
        InputError: not a zip ``.pt`` file, big-endian data, a malformed archive, or a pickle that
            refers to any global outside :data:`ALLOWED` (the message names it; nothing is called).
    """
    try:
        archive = zipfile.ZipFile(path)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except (zipfile.BadZipFile, IsADirectoryError, OSError) as e:
        raise InputError(f"{path}: not a torch zip checkpoint ({e.__class__.__name__})") from None
    with archive:
        pkls = [n for n in archive.namelist() if n.endswith("/data.pkl") and n.count("/") == 1]
        if len(pkls) != 1:
            raise InputError(f"{path}: expected one <name>/data.pkl in the archive, found {len(pkls)}")
        prefix = pkls[0][: -len("data.pkl")]
        if f"{prefix}byteorder" in archive.namelist():
            order = archive.read(f"{prefix}byteorder").decode("ascii", "replace").strip()
            if order != "little":
                raise InputError(f"{path}: byte order {order!r} is not supported (little-endian only)")
        info = archive.getinfo(pkls[0])
        if info.file_size > MAX_PICKLE_BYTES:
            raise InputError(f"{path}: data.pkl is {info.file_size} bytes, more than a state dict's")
        data = archive.read(pkls[0])
        try:
            obj = _Unpickler(data, archive, prefix, path).load()
        except InputError:
            raise
        except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, IndexError,
                KeyError, struct.error) as e:
            raise InputError(f"{path}: malformed pickle ({e.__class__.__name__}: {str(e)[:80]})") from None
    if not isinstance(obj, Mapping):
        raise InputError(f"{path}: the pickle holds a {type(obj).__name__}, not a state dict")
    out = collections.OrderedDict()
    for k, v in obj.items():
        if isinstance(v, np.ndarray):
            out[str(k)] = v
    return out


# --- writer (protocol-2 opcodes written by hand: pickle's Pickler would import torch) ---

_DTYPE_STORAGE = {np.dtype(v): k for k, v in STORAGE_DTYPES.items()}


def _str(s: str) -> bytes:
    b = s.encode("utf-8")
    return pickle.BINUNICODE + struct.pack("<I", len(b)) + b


def _int(i: int) -> bytes:
    return pickle.BININT + struct.pack("<i", int(i))


def _tuple(items) -> bytes:
    return pickle.MARK + b"".join(items) + pickle.TUPLE


def _global(module: str, name: str) -> bytes:
    return pickle.GLOBAL + f"{module}\n{name}\n".encode("ascii")


def save_state_dict(path: str, state: Mapping[str, np.ndarray], name: str = "archive") -> None:
    """Write ``state`` (name -> numpy array) as a ``torch.save`` zip of an OrderedDict of tensors.

    Args:
        path: output file (written to a temporary name, then renamed).
        state: arrays of a dtype in :data:`STORAGE_DTYPES` (float32, int64, ...), C-contiguous copies
            are stored.
        name: the archive's top folder (torch uses the file's stem).
    Raises:
        InputError: an array of a dtype with no storage type.
    """
    body = [pickle.PROTO + b"\x02", _global("collections", "OrderedDict"), pickle.EMPTY_TUPLE,
            pickle.REDUCE, pickle.MARK]
    blobs = []
    for i, (key, arr) in enumerate(state.items()):
        arr = np.array(arr, order="C", copy=True)  # (ascontiguousarray would make a 0-d array 1-d)
        kind = _DTYPE_STORAGE.get(arr.dtype.newbyteorder("<"))
        if kind is None:
            raise InputError(f"{key}: dtype {arr.dtype} has no torch storage type")
        arr = arr.astype(STORAGE_DTYPES[kind], copy=False)
        strides = [s // arr.itemsize for s in arr.strides] if arr.ndim else []
        pid = _tuple([_str("storage"), _global("torch", kind), _str(str(i)), _str("cpu"), _int(arr.size)])
        tensor = (_global("torch._utils", "_rebuild_tensor_v2") + pickle.MARK + pid + pickle.BINPERSID
                  + _int(0) + _tuple(_int(s) for s in arr.shape) + _tuple(_int(s) for s in strides)
                  + pickle.NEWFALSE + _global("collections", "OrderedDict") + pickle.EMPTY_TUPLE
                  + pickle.REDUCE + pickle.TUPLE + pickle.REDUCE)
        body.append(_str(str(key)) + tensor)
        blobs.append((f"{name}/data/{i}", arr.tobytes()))
    body += [pickle.SETITEMS, pickle.STOP]
    tmp = f"{path}.tmp{os.getpid()}"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as z:
        z.writestr(f"{name}/data.pkl", b"".join(body))
        z.writestr(f"{name}/byteorder", b"little")
        for n, b in blobs:
            z.writestr(n, b)
        z.writestr(f"{name}/version", b"3\n")
    os.replace(tmp, path)
