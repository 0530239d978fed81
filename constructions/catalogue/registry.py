"""The registry of named constructions: task, source, bound formulas, builder, defaults.

The family modules of :mod:`depthcraft.constructions.catalogue` call :func:`register`
at import time; importing the catalogue package imports every family, so
:func:`get` and :func:`all_constructions` see them all. Parameter resolution (a
construction's parameters plus its task's) lives one layer up, in
:mod:`depthcraft.verify.lookup`.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from tracr.rasp import rasp

from depthcraft.constructions.errors import ParameterError, unknown_name
from depthcraft.constructions.model import CompiledModel
from depthcraft.constructions.params import ParamSpec, freeze

BOUND_KEYS = ("attn_layers", "heads", "d_model")


@dataclasses.dataclass(frozen=True)
class Bound:
    """A bound formula: human-readable text and its value for given parameters.

    ``fn(params)`` returns an int (the bound) or None (the theorem gives none
    at these parameters). An ``upper`` bound (what a construction must reach)
    holds when measured <= bound; a ``lower`` bound (a theorem's impossibility
    result, e.g. Mușat's ceil(log_3 2D) layers) holds when measured >= bound.
    """

    text: str
    fn: Callable[[Mapping[str, Any]], Optional[int]]
    kind: str = "upper"

    def __post_init__(self):
        if self.kind not in ("upper", "lower"):
            raise ValueError(f"Bound.kind must be 'upper' or 'lower', got {self.kind!r}")


@dataclasses.dataclass(frozen=True)
class Construction:
    """A named construction.

    Attributes:
        name: registry key, e.g. ``khop_doubling``.
        task: task name (see :mod:`verify.tasks`).
        source: paper, theorem or lemma the construction follows.
        summary: one line on how it works.
        attention: attention kind it targets (softmax / relu / hardmax).
        causal: whether it masks future keys.
        params: parameter specs (task parameters plus construction-specific ones).
        bounds: bound formulas keyed by ``attn_layers``, ``heads``, ``d_model``.
        program: params -> RASP program (for display; None if not a single program).
        builder: params -> CompiledModel.
        defaults: parameter sets that ``depthcraft verify --all`` checks.
        notes: caveats shown by ``depthcraft list``.
        exhaustive_in_all: ``verify --all`` also runs the task's exhaustive check at every
            default (for tasks whose whole input set is small, e.g. a memorised dataset).
        positions: the position encoding the builder compiles with (``onehot`` or ``angle``), for
            estimating its width before building (:mod:`verify.cost`).
    """

    name: str
    task: str
    source: str
    summary: str
    attention: str
    causal: bool
    params: Tuple[ParamSpec, ...]
    bounds: Dict[str, Bound]
    program: Optional[Callable[[Mapping[str, Any]], rasp.SOp]]
    builder: Callable[[Mapping[str, Any]], CompiledModel]
    defaults: Tuple[Dict[str, Any], ...] = ()
    notes: str = ""
    check: Optional[Callable[[Mapping[str, Any]], None]] = None
    exhaustive_in_all: bool = False
    positions: str = "onehot"

    def bound_values(self, p: Mapping[str, Any]) -> Dict[str, Optional[int]]:
        """Each bound at these parameters (None where the theorem gives none)."""
        return {k: (self.bounds[k].fn(p) if k in self.bounds else None) for k in BOUND_KEYS}

    def bound_kinds(self) -> Dict[str, str]:
        """``upper`` or ``lower`` for each bound key that has a formula."""
        return {k: b.kind for k, b in self.bounds.items()}

    def build(self, p: Mapping[str, Any]) -> CompiledModel:
        """Compile at resolved parameters ``p`` (cached per parameter set).

        ``p`` must come from :func:`depthcraft.verify.lookup.resolve` (defaults filled
        in and checked, the task's parameters included); raw user input is not
        checked here. The model's ``meta`` records the construction, task, params,
        bound values and bound kinds (what :func:`depthcraft.constructions.io.save`
        writes).
        """
        return _build_cached(self.name, freeze(p))


_REGISTRY: Dict[str, Construction] = {}


def register(c: Construction) -> Construction:
    """Add a construction; raises ValueError on a duplicate name."""
    if c.name in _REGISTRY:
        raise ValueError(f"construction {c.name!r} is already registered")
    unknown = set(c.bounds) - set(BOUND_KEYS)
    if unknown:
        raise ValueError(f"{c.name}: unknown bound keys {sorted(unknown)}")
    _REGISTRY[c.name] = c
    return c


def all_constructions() -> List[Construction]:
    """Every registered construction, in registration order."""
    return list(_REGISTRY.values())


def get(name: str) -> Construction:
    """The construction called ``name``; raises ParameterError listing the known names."""
    if name not in _REGISTRY:
        raise ParameterError(unknown_name("construction", name, _REGISTRY))
    return _REGISTRY[name]


def clear_build_cache() -> int:
    """Forget every model :meth:`Construction.build` has cached; returns how many there were."""
    n = _build_cached.cache_info().currsize
    _build_cached.cache_clear()
    return n


@functools.lru_cache(maxsize=32)
def _build_cached(name: str, frozen: Tuple[Tuple[str, Any], ...]) -> CompiledModel:
    c = _REGISTRY[name]
    p = dict(frozen)
    model = c.builder(p)
    model.meta.update(construction=name, params=p, task=c.task, bound=c.bound_values(p), bound_kinds=c.bound_kinds())
    return model
