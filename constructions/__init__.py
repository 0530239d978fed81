"""Core layer: hand-built heads, the tracr compile glue, compiled models, the runtime, save / load.

Nothing here imports :mod:`depthcraft.rasp_programs` or :mod:`depthcraft.verify`. The catalogue of
named constructions, :mod:`depthcraft.constructions.catalogue`, is a subpackage one layer up (it
compiles the RASP programs); importing this package does not import it. Every module and its job:
docs/architecture.md.
"""
