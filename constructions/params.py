"""Typed, validated parameters for tasks and constructions (``-p KEY=VALUE`` on the CLI)."""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from depthcraft.constructions.errors import ParameterError, unknown_name


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
        if isinstance(raw, np.generic):  # numpy scalars (np.int64(3), np.float32(0.5)) are plain values
            raw = raw.item()
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
        raise ParameterError(f"{unknown_name('parameter', unknown[0], sorted(by_name))} ({owner})")
    out = {s.name: s.default for s in specs}
    for k, v in given.items():
        out[k] = by_name[k].parse(v)
    return out


def parse_assignments(items: Iterable[str]) -> Dict[str, str]:
    """``["k=8", "n=32"]`` -> ``{"k": "8", "n": "32"}``.

    Raises:
        ParameterError: a malformed item or a key given twice.
    """
    out: Dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ParameterError(f"parameter {item!r} is not of the form KEY=VALUE")
        if key.strip() in out:
            raise ParameterError(f"parameter {key.strip()!r} is given twice")
        out[key.strip()] = value.strip()
    return out


#: Largest parameter grid a sweep accepts.
MAX_POINTS = 1000

# Limits of the command-line options, so that an absurd value is a one-line error, not an hour-long
# run or an out-of-memory kill.
MAX_SEED = 2**32 - 1  #: numpy seeds are 32-bit here
MAX_SAMPLES = 10_000_000  #: random inputs per check
MAX_DEPTH = 64  #: attention layers of a trained model
MAX_HEADS = 64
MAX_WIDTH = 4096
MAX_STEPS = 10_000_000
MAX_BATCH = 65_536
MAX_SEEDS = 100
MAX_EVAL = 1_000_000
MAX_ALIGNMENT = 65_536  #: sequences for the attention alignment (maps are [T, T] each)


def parse_values(key: str, text: str) -> List[str]:
    """One parameter's sweep values: ``"1-4,8"`` or ``"1..4,8"`` -> ``["1", "2", "3", "4", "8"]``.

    Items are separated by commas; ``a-b`` and ``a..b`` (non-negative integers) are
    inclusive ranges; anything else is kept as given (so ``-1`` stays ``-1``).

    Raises:
        ParameterError: an empty item or a descending range.
    """
    out: List[str] = []
    for item in str(text).split(","):
        item = item.strip()
        if not item:
            raise ParameterError(f"{key}={text!r}: empty value in the list")
        lo, sep, hi = item.partition("..") if ".." in item else item.partition("-")
        if sep and lo.strip().isdigit() and hi.strip().isdigit():
            a, b = int(lo), int(hi)
            if a > b:
                raise ParameterError(f"{key}={item!r}: the range must go up (a..b with a <= b)")
            if b - a + 1 > MAX_POINTS:  # refuse before expanding (1..10**12 would never finish)
                raise ParameterError(f"{key}={item!r}: {b - a + 1} values, more than {MAX_POINTS} in one range")
            out += [str(v) for v in range(a, b + 1)]
        elif sep == ".." :
            raise ParameterError(f"{key}={item!r}: a range must look like 1..16")
        else:
            out.append(item)
    return out


def expand_sweeps(given: Mapping[str, str]) -> Tuple[List[str], List[Dict[str, str]]]:
    """Expand sweep values into parameter sets: (the keys that vary, the sets, first key slowest).

    Raises:
        ParameterError: a malformed value, or more than MAX_POINTS sets.
    """
    keys = list(given)
    values = [parse_values(k, given[k]) for k in keys]
    size = 1
    for v in values:
        size *= len(v)
    if size > MAX_POINTS:
        raise ParameterError(f"the parameter grid has {size} points, above the limit of {MAX_POINTS}")
    varying = [k for k, v in zip(keys, values) if len(v) > 1]
    return varying, [dict(zip(keys, combo)) for combo in itertools.product(*values)]


def freeze(params: Mapping[str, Any]) -> Tuple[Tuple[str, Any], ...]:
    """Hashable, order-independent form of a parameter dict (cache key)."""
    return tuple(sorted(params.items()))
