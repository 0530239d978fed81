"""Typed, validated parameters for tasks and constructions (``-p KEY=VALUE`` on the CLI)."""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from constructions.errors import ParameterError


@dataclasses.dataclass(frozen=True)
class ParamSpec:
    """One parameter.

    Attributes:
        name: key used in ``-p name=value`` and in reports.
        type: ``int``, ``float``, ``str`` or ``bool``.
        default: value when not given.
        help: one-line description (units, meaning).
        minimum, maximum: inclusive bounds for numbers (None = unbounded).
        choices: allowed values for strings (None = any).
    """

    name: str
    type: type
    default: Any
    help: str
    minimum: Optional[float] = None
    maximum: Optional[float] = None
    choices: Optional[Tuple[Any, ...]] = None

    def parse(self, raw: Any) -> Any:
        """Convert and check one value; raises ParameterError naming the value and the rule."""
        value = raw
        if isinstance(raw, str) and self.type is not str:
            try:
                if self.type is bool:
                    if raw.lower() not in ("true", "false", "1", "0", "yes", "no"):
                        raise ValueError(raw)
                    value = raw.lower() in ("true", "1", "yes")
                else:
                    value = self.type(raw)
            except ValueError:
                raise ParameterError(f"{self.name}={raw!r} is not a valid {self.type.__name__}") from None
        elif self.type is int and (isinstance(raw, bool) or not isinstance(raw, int)):
            if isinstance(raw, float) and raw.is_integer():
                value = int(raw)
            else:
                raise ParameterError(f"{self.name}={raw!r} must be an integer")
        elif self.type is float and isinstance(raw, (int, float)) and not isinstance(raw, bool):
            value = float(raw)
        if self.minimum is not None and value < self.minimum:
            raise ParameterError(f"{self.name}={value} is below the minimum {self.minimum:g} ({self.help})")
        if self.maximum is not None and value > self.maximum:
            raise ParameterError(f"{self.name}={value} is above the maximum {self.maximum:g} ({self.help})")
        if self.choices is not None and value not in self.choices:
            raise ParameterError(f"{self.name}={value!r} must be one of {list(self.choices)}")
        return value


def resolve(specs: Sequence[ParamSpec], given: Mapping[str, Any], owner: str) -> Dict[str, Any]:
    """Defaults overlaid with ``given``, every value parsed and checked.

    Raises:
        ParameterError: an unknown key or an invalid value.
    """
    by_name = {s.name: s for s in specs}
    unknown = [k for k in given if k not in by_name]
    if unknown:
        raise ParameterError(f"unknown parameter {unknown[0]!r} for {owner}; expected one of {sorted(by_name)}")
    out = {s.name: s.default for s in specs}
    for k, v in given.items():
        out[k] = by_name[k].parse(v)
    return out


def parse_assignments(items: Iterable[str]) -> Dict[str, str]:
    """``["k=8", "n=32"]`` -> ``{"k": "8", "n": "32"}``; raises ParameterError on a malformed item."""
    out: Dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ParameterError(f"parameter {item!r} is not of the form KEY=VALUE")
        out[key.strip()] = value.strip()
    return out


def expand_sweeps(given: Mapping[str, str]) -> List[Dict[str, str]]:
    """Expand sweep values into parameter sets (cartesian product, in order).

    ``"1..4"`` is the inclusive integer range 1, 2, 3, 4; ``"1,2,8"`` a list. Other
    values are kept as they are.

    Raises:
        ParameterError: a malformed or empty range.
    """
    axes = []
    for key, raw in given.items():
        raw = str(raw)
        if ".." in raw:
            lo, _, hi = raw.partition("..")
            try:
                values = [str(v) for v in range(int(lo), int(hi) + 1)]
            except ValueError:
                raise ParameterError(f"{key}={raw!r}: a range must look like 1..16") from None
            if not values:
                raise ParameterError(f"{key}={raw!r} is an empty range")
        elif "," in raw:
            values = [v.strip() for v in raw.split(",") if v.strip()]
        else:
            values = [raw]
        axes.append([(key, v) for v in values])
    return [dict(combo) for combo in itertools.product(*axes)]


def freeze(params: Mapping[str, Any]) -> Tuple[Tuple[str, Any], ...]:
    """Hashable, order-independent form of a parameter dict (cache key)."""
    return tuple(sorted(params.items()))
