"""Re-export of :mod:`rasp_programs.templates` (the template machinery), kept at this path for importers."""

from rasp_programs.templates import *  # noqa: F401,F403
from rasp_programs.templates import __all__  # noqa: F401
