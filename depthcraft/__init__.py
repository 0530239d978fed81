"""depthcraft: executable depth bounds for transformers.

RASP programs encode the constructions of depth-bound theorems, tracr compiles
them into explicit weights, and a verifier checks the measured depth and width
against the theorem's formula and exact correctness against the task's
reference. The public API::

    import depthcraft

    depthcraft.list_constructions()                    # the catalogue (SPEC §5)
    model = depthcraft.build("khop_doubling", k=8, n=24)
    report = depthcraft.verify("khop_doubling", k=8)   # the SPEC §6 report
    report = depthcraft.check_program(my_sop, vocab=..., max_seq_len=..., reference=...)
    depthcraft.save(model, "k8.safetensors"); depthcraft.load("k8.safetensors")
    rs = depthcraft.residual_stream(model, [0, 1, 2, 0])  # the stream after every sublayer

    depthcraft.strategies.token_sequences(["a", "b"], max_len=8)  # hypothesis strategies
    depthcraft.release_memory()  # drop cached models and compiled programs (long sessions)

The package is made of three layers, each importing only from those below it:
:mod:`depthcraft.constructions` (primitives, heads, compiler, model, runtime, io),
:mod:`depthcraft.rasp_programs`, the catalogue
:mod:`depthcraft.constructions.catalogue`, and :mod:`depthcraft.verify` (tasks,
checks, verifier, API, views, cross-check, CLI). Names are imported lazily:
``import depthcraft`` does not import JAX or tracr.
"""

from __future__ import annotations

import importlib
from typing import Any, Dict, List

from depthcraft.constructions.version import package_version

__version__: str = package_version()

#: Public name -> "module:attribute" (or "module" for a module), imported on first use.
_EXPORTS: Dict[str, str] = {
    "check_program": "depthcraft.verify.api:check_program",
    "ANY": "depthcraft.verify.api:ANY",
    "release_memory": "depthcraft.verify.api:release_memory",
    "verify": "depthcraft.verify.verifier:verify",
    "list_constructions": "depthcraft.verify.lookup:all_constructions",
    "get_construction": "depthcraft.verify.lookup:get",
    "resolve": "depthcraft.verify.lookup:resolve",
    "build": "depthcraft.verify.lookup:build",
    "save": "depthcraft.constructions.io:save",
    "load": "depthcraft.constructions.io:load",
    "compile_program": "depthcraft.constructions.compiler:compile_program",
    "CompiledModel": "depthcraft.constructions.model:CompiledModel",
    "residual_stream": "depthcraft.constructions.model:residual_stream",
    "ResidualStream": "depthcraft.constructions.model:ResidualStream",
    "DepthcraftError": "depthcraft.constructions.errors:DepthcraftError",
    "ParameterError": "depthcraft.constructions.errors:ParameterError",
    "InputError": "depthcraft.constructions.errors:InputError",
    "CompileError": "depthcraft.constructions.errors:CompileError",
    "strategies": "depthcraft.verify.strategies",
}

__all__: List[str] = sorted(["__version__", *_EXPORTS])


def __getattr__(name: str) -> Any:
    target = _EXPORTS.get(name)
    if target is None:
        raise AttributeError(f"module 'depthcraft' has no attribute {name!r}")
    module, _, attr = target.partition(":")
    value = importlib.import_module(module)
    if attr:
        value = getattr(value, attr)
    globals()[name] = value  # later look-ups skip __getattr__
    return value


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(_EXPORTS))
