"""Cross-check against trained transformers (SPEC §7).

The constructions show that a depth suffices; this package trains ordinary
transformers at depths around each bound and reports where training succeeds,
and how the trained attention maps align with the construction's.

Modules, one responsibility each:

* :mod:`~verify.crosscheck.model`: the trainable model family (config, init); it runs
  through the project's one runtime, :func:`constructions.runtime.forward`.
* :mod:`~verify.crosscheck.data`: batches from the task samplers (fresh every step),
  conditions named by the BOS token.
* :mod:`~verify.crosscheck.train`: optax AdamW, the jitted train step, evaluation.
* :mod:`~verify.crosscheck.trainer`: the one trainer, ``train`` of a ``TrainJob`` with a backend.
* :mod:`~verify.crosscheck.checkpoint`: safetensors + JSON checkpoints, atomic, exact resume.
* :mod:`~verify.crosscheck.alignment`: attention alignment with the construction's maps.
* :mod:`~verify.crosscheck.presets`: the ``cpu`` and ``paper`` sweeps per task.
* :mod:`~verify.crosscheck.sweep`: one run per (condition, depth, seed), the summary.
* :mod:`~verify.crosscheck.report`: ``results.json`` and the plot.
* the ``depthcraft train`` command is :mod:`depthcraft.verify.cli.train`.
"""
