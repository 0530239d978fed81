"""Load what a user names on the command line: ``FILE.py[:NAME]`` (a RASP program, a reference function).

``depthcraft check my_program.py:reverse --reference my_program.py:expected`` imports
``my_program.py`` once (its folder on ``sys.path`` while it imports, so it can import its
neighbours) and takes the module attribute NAME. Every way this can go wrong is one
:class:`~depthcraft.constructions.errors.ParameterError` naming the file and what was expected:
a missing file, a file that raises on import (the exception and the line), a NAME the file does
not define (with the closest names it does), a NAME that is not a RASP SOp, a reference whose
signature does not take one list of tokens.

>>> split_target("prog.py:reverse")
('prog.py', 'reverse')
>>> split_target("prog.py")
('prog.py', None)
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import os
import sys
import traceback
import types
from typing import Any, Callable, Dict, List, Optional, Tuple

from depthcraft.constructions.errors import ParameterError, closest

#: Module attribute names tried, in order, when ``FILE.py`` is given without ``:NAME``.
DEFAULT_PROGRAM_NAMES = ("program",)

_LOADED: Dict[str, types.ModuleType] = {}


def split_target(target: str) -> Tuple[str, Optional[str]]:
    """``"FILE.py:NAME"`` -> ``("FILE.py", "NAME")``; ``"FILE.py"`` -> ``("FILE.py", None)``.

    Only a final ``:NAME`` that is a Python identifier splits off (a Windows drive ``C:`` does not).
    """
    head, sep, tail = target.rpartition(":")
    if sep and tail.isidentifier() and head:
        return head, tail
    return target, None


def load_module(path: str) -> types.ModuleType:
    """Import the Python file ``path`` (once per absolute path in a process).

    Raises:
        ParameterError: the file does not exist, is not a ``.py`` file, or raises on import
            (the message names the exception, its text and the line of the file it came from).
    """
    full = os.path.abspath(path)
    if full in _LOADED:
        return _LOADED[full]
    if not os.path.isfile(full):
        raise ParameterError(f"cannot read {path}: no such file")
    if not full.endswith(".py"):
        raise ParameterError(f"{path} is not a Python file (.py): give FILE.py or FILE.py:NAME")
    name = "depthcraft_user_" + hashlib.sha256(full.encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(name, full)
    module = importlib.util.module_from_spec(spec)
    folder = os.path.dirname(full)
    sys.path.insert(0, folder)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except SyntaxError as e:
        sys.modules.pop(name, None)
        raise ParameterError(f"{path}:{e.lineno}: SyntaxError: {e.msg}") from None
    except (Exception, SystemExit) as e:  # noqa: BLE001 - whatever the user's file raises becomes one line
        sys.modules.pop(name, None)
        line = next((f.lineno for f in reversed(traceback.extract_tb(e.__traceback__))
                     if os.path.abspath(f.filename) == full), None)
        where = f" (line {line})" if line else ""
        raise ParameterError(f"importing {path} raised {type(e).__name__}: {e}{where}") from None
    finally:
        try:
            sys.path.remove(folder)
        except ValueError:
            pass
    _LOADED[full] = module
    return module


def _attribute(module: types.ModuleType, path: str, name: str, what: str) -> Any:
    if not hasattr(module, name):
        public = [k for k in vars(module) if not k.startswith("_")]
        near = closest(name, public)
        hint = f"; did you mean {' or '.join(near)}?" if near else ""
        raise ParameterError(f"{path} defines no {name!r} ({what}){hint}")
    return getattr(module, name)


def _sops(module: types.ModuleType) -> List[str]:
    from tracr.rasp import rasp

    return [k for k, v in vars(module).items() if not k.startswith("_") and isinstance(v, rasp.SOp)]


def load_program(target: str):
    """The RASP program named by ``FILE.py[:NAME]``: an ``rasp.SOp`` attribute, or a function of no
    arguments that returns one.

    Without ``:NAME``: the attribute ``program``, else the file's only module-level SOp.

    Returns:
        ``(program, name)``: the ``rasp.SOp`` and the attribute name it came from.
    Raises:
        ParameterError: as :func:`load_module`; no such NAME (with the closest names); NAME is
            not an SOp (names its type); no NAME given and the file has no ``program`` and not
            exactly one SOp (lists the SOps it has).
    """
    from tracr.rasp import rasp

    path, name = split_target(target)
    module = load_module(path)
    if name is None:
        name = next((n for n in DEFAULT_PROGRAM_NAMES if hasattr(module, n)), None)
        if name is None:
            sops = _sops(module)
            if len(sops) != 1:
                listed = ", ".join(sops) if sops else "none"
                raise ParameterError(f"{path} defines no 'program': give FILE.py:NAME, NAME one of its RASP SOps "
                                     f"({listed})")
            name = sops[0]
    value = _attribute(module, path, name, "a RASP SOp")
    if isinstance(value, rasp.SOp):
        return value, name
    if callable(value) and not isinstance(value, type) and _takes(value, 0):
        try:
            made = value()
        except Exception as e:  # noqa: BLE001 - the user's factory: one line
            raise ParameterError(f"{path}:{name}() raised {type(e).__name__}: {e}") from None
        if isinstance(made, rasp.SOp):
            return made, name
        raise ParameterError(f"{path}:{name}() returned {type(made).__name__}, not a RASP SOp "
                             f"(a program's output, e.g. rasp.Aggregate(...))")
    kind = "a selector (rasp.Select): a program ends in an SOp, e.g. rasp.Aggregate(select, values)" \
        if isinstance(value, rasp.Selector) else f"a {type(value).__name__}"
    sops = _sops(module)
    hint = f"; its SOps: {', '.join(sops)}" if sops else ""
    raise ParameterError(f"{path}:{name} is {kind}, not a RASP SOp{hint}")


def _takes(fn: Callable, count: int) -> bool:
    """Whether ``fn`` can be called with ``count`` positional arguments (True when it cannot be inspected)."""
    try:
        inspect.signature(fn).bind(*([None] * count))
    except TypeError:
        return False
    except ValueError:  # a builtin without a signature
        return True
    return True


def load_reference(target: str) -> Callable[[List[Any]], List[Any]]:
    """The reference function named by ``FILE.py:FN``: ``FN(tokens: list) -> list`` (one output per token).

    Raises:
        ParameterError: as :func:`load_module`; no ``:FN`` given; no such FN; FN is not a function
            or cannot be called with exactly one argument (its signature is named).
    """
    path, name = split_target(target)
    if name is None:
        raise ParameterError(f"--reference {target}: give FILE.py:FN, FN a function of one list of tokens")
    fn = _attribute(load_module(path), path, name, "a function tokens -> outputs")
    if not callable(fn):
        raise ParameterError(f"{path}:{name} is {type(fn).__name__}, not a function (list of tokens -> list of outputs)")
    if not _takes(fn, 1):
        try:
            sig = str(inspect.signature(fn))
        except (TypeError, ValueError):
            sig = "(...)"
        raise ParameterError(f"{path}:{name}{sig} must take one argument, the list of tokens, and return one output "
                             f"per token")
    return fn


__all__ = ["DEFAULT_PROGRAM_NAMES", "load_module", "load_program", "load_reference", "split_target"]
