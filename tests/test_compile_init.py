"""The compile speed-up (tracr's random initialisation skipped) changes no weight."""

import contextlib

import jax
import numpy as np
from tracr.rasp import rasp

from depthcraft.constructions import compiler


def test_zero_init_gives_identical_weights(monkeypatch):
    program = rasp.SelectorWidth(rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.EQ)).named("hist")
    fast = compiler.compile_program(program, vocab=[0, 1], max_seq_len=3, causal=False)
    monkeypatch.setattr(compiler, "_zero_init", contextlib.nullcontext)  # tracr's own random init
    slow = compiler.compile_program(program, vocab=[0, 1], max_seq_len=3, causal=False)
    a, b = jax.tree_util.tree_leaves(fast.params), jax.tree_util.tree_leaves(slow.params)
    assert len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))
    assert fast.arch == slow.arch and fast.residual_labels == slow.residual_labels
