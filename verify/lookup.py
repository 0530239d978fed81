"""The one place that turns a construction name and raw parameters into something to check.

Every caller (the CLI commands, the verifier, the API, the teaching views, the
precision study, the cross-check sweep, the hypothesis strategies, save and
verify-saved) goes through :func:`resolve`::

    r = resolve("khop_doubling", {"k": "8", "n": "24"})
    r.params        # {"k": 8, "n": 24, "vocab": 4, ...}: defaults filled in, checked
    r.task          # the construction's Task (reference, samplers, edge cases)
    r.build()       # the CompiledModel (cached per parameter set)
    r.bound()       # {"attn_layers": 5, "heads": 1, "d_model": None}

A construction's parameters are its own followed by its task's (a construction's
spec wins on a shared name): :func:`param_specs`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

from depthcraft.constructions import catalogue
from depthcraft.constructions.catalogue import Construction
from depthcraft.constructions.model import CompiledModel
from depthcraft.constructions.params import ParamSpec, resolve as resolve_specs
from depthcraft.verify.tasks import get_task
from depthcraft.verify.tasks.base import Task


@dataclasses.dataclass(frozen=True)
class Resolved:
    """A construction at checked parameters.

    Attributes:
        construction: the catalogue entry.
        task: the construction's task.
        params: every parameter (the construction's and its task's), defaults filled in,
            parsed and checked.
    """

    construction: Construction
    task: Task
    params: Dict[str, Any]

    @property
    def name(self) -> str:
        """The construction's catalogue name."""
        return self.construction.name

    def build(self) -> CompiledModel:
        """The compiled model at these parameters (cached per parameter set)."""
        return self.construction.build(self.params)

    def bound(self) -> Dict[str, Optional[int]]:
        """The bound values ``{"attn_layers", "heads", "d_model"}`` (None where the theorem gives none)."""
        return self.construction.bound_values(self.params)


def get(name: str) -> Construction:
    """The catalogue entry called ``name``.

    Raises:
        ParameterError: unknown name (the message lists the known ones).
    """
    return catalogue.get(name)


def all_constructions() -> List[Construction]:
    """Every catalogue entry, in registration order (the order of ``depthcraft list``)."""
    return catalogue.all_constructions()


def param_specs(construction: Union[str, Construction]) -> Tuple[ParamSpec, ...]:
    """Every parameter of a construction: its own, then its task's (a construction's spec wins).

    Raises:
        ParameterError: unknown construction name.
    """
    c = get(construction) if isinstance(construction, str) else construction
    own = {s.name for s in c.params}
    return tuple(c.params) + tuple(s for s in get_task(c.task).params if s.name not in own)


def resolve(construction: Union[str, Construction], given: Optional[Mapping[str, Any]] = None,
            sampling: bool = True) -> Resolved:
    """Look a construction up and resolve its parameters (strings or values).

    Args:
        construction: a catalogue name or entry.
        given: parameter values by name (``"8"`` or ``8``); missing ones take their defaults.
        sampling: also check the random-input distribution's constraints
            (:meth:`Task.check_sampling`); False for callers that sample nothing (``run``, ``show``).
    Returns:
        The :class:`Resolved` construction.
    Raises:
        ParameterError: unknown construction, unknown parameter key, or an invalid value
            (the message names the key and the allowed range).
    """
    c = get(construction) if isinstance(construction, str) else construction
    task = get_task(c.task)
    p = resolve_specs(param_specs(c), given or {}, f"construction {c.name}")
    if c.check is not None:
        c.check(p)
    task.check(p)
    if sampling:
        task.check_sampling(p)
    return Resolved(c, task, p)


def build(construction: Union[str, Construction], **params: Any) -> CompiledModel:
    """Compile a construction at ``params`` (cached per parameter set).

    Example: ``build("khop_doubling", k=8, n=24)``.

    Raises:
        ParameterError: unknown construction, unknown parameter or invalid value.
    """
    return resolve(construction, params).build()


def resolve_model(model: CompiledModel) -> Optional[Resolved]:
    """The construction a model was built from (its ``meta``), or None for a user's own model.

    Raises:
        ParameterError: the model names a construction that is not in the catalogue, or
            parameters that no longer resolve.
    """
    name = model.meta.get("construction")
    if not name:
        return None
    return resolve(name, model.meta.get("params") or {})


__all__ = ["Resolved", "all_constructions", "build", "get", "param_specs", "resolve", "resolve_model"]
