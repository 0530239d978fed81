"""Training checkpoints: arrays in safetensors, metadata in JSON, both written atomically.

A checkpoint directory holds ``checkpoint.json`` (the step, the configs, the
wall time so far, the tree structure and the name of the arrays file) and the
arrays file ``state-<step>.safetensors`` it names. Saving writes the new
arrays file under a fresh name, then atomically replaces ``checkpoint.json``,
then deletes older arrays files: a crash at any moment leaves a consistent
pair (the previous or the new checkpoint), never a half-written one.

The state saved is everything a step depends on: the parameters and the
optimiser state (AdamW moments and the step count of the schedule). The data of
step s is drawn from ``default_rng([seed, s])``, so no generator state needs
saving, and a resumed run is bit-identical to an uninterrupted one.
"""

from __future__ import annotations

import glob
import json
import os
from typing import Any, Dict, List, Optional, Tuple

import jax
import numpy as np
from safetensors.numpy import load_file, save

from depthcraft.constructions.errors import InputError
from depthcraft.constructions.files import write_bytes_atomic, write_json_atomic
from depthcraft.constructions.runtime import as_jax

META_FILE = "checkpoint.json"
FORMAT = "depthcraft-checkpoint-1"


def _flatten(tree: Any) -> Tuple[List[str], List[np.ndarray], Any]:
    leaves, treedef = jax.tree_util.tree_flatten_with_path(tree)
    keys = [jax.tree_util.keystr(path) for path, _ in leaves]
    return keys, [np.asarray(v) for _, v in leaves], treedef


def save_checkpoint(directory: str, step: int, state: Dict[str, Any], meta: Dict[str, Any]) -> str:
    """Save ``state`` (a pytree of arrays, e.g. ``{"params": ..., "opt_state": ...}``) at ``step``.

    Args:
        directory: checkpoint directory (created if missing).
        step: number of training steps done.
        state: pytree of arrays; its structure is recorded and checked on load.
        meta: JSON-serialisable metadata (configs, wall time...), stored in ``checkpoint.json``.
    Returns:
        Path of the arrays file written.
    """
    os.makedirs(directory, exist_ok=True)
    keys, arrays, treedef = _flatten(state)
    name = f"state-{step:09d}.safetensors"
    tensors = {f"{i:05d}": np.ascontiguousarray(a) for i, a in enumerate(arrays)}
    write_bytes_atomic(os.path.join(directory, name), save(tensors, metadata={"step": str(step)}))
    record = {"format": FORMAT, "step": int(step), "arrays": name, "keys": keys, "treedef": str(treedef),
              "dtypes": [str(a.dtype) for a in arrays], "shapes": [list(a.shape) for a in arrays],
              "meta": meta}
    write_json_atomic(os.path.join(directory, META_FILE), record)
    for old in glob.glob(os.path.join(directory, "state-*.safetensors")):
        if os.path.basename(old) != name:
            os.unlink(old)
    return os.path.join(directory, name)


def read_meta(directory: str) -> Optional[Dict[str, Any]]:
    """The ``checkpoint.json`` record of ``directory``, or None when there is no checkpoint.

    Raises:
        InputError: the file exists but is not a depthcraft checkpoint record.
    """
    path = os.path.join(directory, META_FILE)
    if not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            record = json.load(f)
    except (OSError, ValueError) as e:
        raise InputError(f"checkpoint {path} is unreadable: {e}") from None
    if not isinstance(record, dict) or record.get("format") != FORMAT:
        raise InputError(f"{path} is not a depthcraft checkpoint (expected format {FORMAT!r})")
    return record


def load_checkpoint(directory: str, template: Any) -> Optional[Tuple[int, Any, Dict[str, Any]]]:
    """Load the checkpoint of ``directory`` into the structure of ``template``.

    Args:
        directory: checkpoint directory.
        template: a pytree with the expected structure, shapes and dtypes (e.g. a freshly
            initialised state); its values are not used.
    Returns:
        ``(step, state, meta)`` or None when the directory holds no checkpoint.
    Raises:
        InputError: the record or arrays file is missing, corrupt, or does not match the
            template (names the first differing entry).
    """
    record = read_meta(directory)
    if record is None:
        return None
    path = os.path.join(directory, record["arrays"])
    keys, arrays, treedef = _flatten(template)
    if record["keys"] != keys:
        diff = next((f"{a} != {b}" for a, b in zip(record["keys"], keys) if a != b),
                    f"{len(record['keys'])} entries saved, {len(keys)} expected")
        raise InputError(f"checkpoint {directory} has a different model structure: {diff}")
    try:
        tensors = load_file(path)
    except Exception as e:  # OSError, or safetensors' own SafetensorError
        raise InputError(f"checkpoint arrays {path} are unreadable: {e}") from None
    leaves = []
    for i, (key, ref) in enumerate(zip(keys, arrays)):
        a = tensors.get(f"{i:05d}")
        if a is not None and a.size == ref.size and list(ref.shape) == record["shapes"][i]:
            a = a.reshape(ref.shape)  # safetensors stores 0-d arrays as [1]
        if a is None or a.shape != ref.shape or a.dtype != ref.dtype:
            got = None if a is None else f"{a.dtype}{list(a.shape)}"
            raise InputError(f"checkpoint {directory}: entry {key} is {got}, expected {ref.dtype}{list(ref.shape)}")
        leaves.append(a)
    state = jax.tree_util.tree_unflatten(treedef, [as_jax(a) for a in leaves])
    return int(record["step"]), state, record.get("meta", {})
