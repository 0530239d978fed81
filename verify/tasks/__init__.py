"""Tasks: exact definitions, vectorised references, samplers, edge cases and strategies.

``TASKS`` maps a task name (the ``task`` field of a construction) to its
:class:`~verify.tasks.base.Task`.
"""

from __future__ import annotations

from typing import Dict

from depthcraft.constructions.errors import ParameterError
from depthcraft.verify.tasks.base import Task
from depthcraft.verify.tasks.chen_zou import CHEN_ZOU_TASKS
from depthcraft.verify.tasks.connectivity import ConnectivitySpanTask, ConnectivityTask
from depthcraft.verify.tasks.khop import KHopTask
from depthcraft.verify.tasks.retrieval import RetrievalSlotsTask, RetrievalTask

TASKS: Dict[str, Task] = {t.name: t for t in (KHopTask(), *CHEN_ZOU_TASKS, RetrievalTask(), RetrievalSlotsTask(),
                                                 ConnectivityTask(), ConnectivitySpanTask())}


def get_task(name: str) -> Task:
    """The task called ``name``; raises ParameterError listing the known tasks."""
    try:
        return TASKS[name]
    except KeyError:
        raise ParameterError(f"unknown task {name!r}; known tasks: {sorted(TASKS)}") from None
