"""The verifier layer: tasks, structure measurement, bound and exactness checks, reports,
the Python API, teaching views, the trained-model cross-check and the command line.

It sits on top of :mod:`depthcraft.constructions` (and its catalogue) and
:mod:`depthcraft.rasp_programs`; nothing below imports it. The public API is
re-exported from :mod:`depthcraft` itself (``depthcraft.check_program``,
``depthcraft.strategies``, ...).
"""
