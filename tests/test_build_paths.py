"""Weights built from the CRAFT blocks' live rows (``assembly="rows"``) equal tracr's assembly bit for bit."""

import hashlib
import re
import tracemalloc

import jax
import numpy as np
import pytest
from tracr.compiler import nodes
from tracr.craft import bases

from depthcraft.constructions import compiler, model as model_mod, tracr_patches
from depthcraft.constructions.errors import CompileError
from depthcraft.rasp_programs.khop import khop_doubling
from depthcraft.verify import lookup


def _digests(tree):
    """sha256 of every array (dtype, shape and bytes) in a pytree, by path."""
    out = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        a = np.asarray(leaf)
        out.append((jax.tree_util.keystr(path), a.dtype.str, a.shape, hashlib.sha256(a.tobytes()).hexdigest()))
    return out


def _small(construction):
    """The construction's first --all default, n capped at 24 (small, fast)."""
    p = dict(construction.defaults[0])
    if "n" in p:
        p["n"] = min(p["n"], 24)
    return lookup.resolve(construction, p)


# Every catalogue construction compiled by compile_program (khop_rasp is tracr's own compiler).
CASES = [c for c in lookup.all_constructions() if c.name != "khop_rasp"]


@pytest.mark.parametrize("construction", CASES, ids=[c.name for c in CASES])
def test_rows_and_tracr_assembly_give_identical_models(construction):
    r = _small(construction)
    # Each builder call makes a new program, whose SOps get new unique ids in their labels.
    with compiler.using_assembly("rows"):
        rows = r.construction.builder(r.params)
    with compiler.using_assembly("tracr"):
        dense = r.construction.builder(r.params)
    assert _digests(rows.params) == _digests(dense.params)
    assert rows.arch == dense.arch
    assert rows.input_values == dense.input_values and rows.output_values == dense.output_values
    assert rows.categorical_output == dense.categorical_output and rows.max_seq_len == dense.max_seq_len
    assert len(rows.residual_labels) == len(dense.residual_labels)
    strip = lambda labels: [re.sub(r"_\d+(?=:|$)", "", lab) for lab in labels]  # noqa: E731  (drop unique ids)
    assert strip(rows.residual_labels) == strip(dense.residual_labels)
    assert rows.meta == dense.meta  # dense_params, tracr_blocks, key size, heads: tracr's dense model's


@pytest.mark.parametrize("kw", [{}, {"positions": "angle"}])
def test_same_program_same_labels(kw):
    program = khop_doubling(6)
    rows = compiler.compile_program(program, range(3), 17, **kw)
    dense = compiler.compile_program(program, range(3), 17, assembly="tracr", **kw)
    assert rows.residual_labels == dense.residual_labels
    assert _digests(rows.params) == _digests(dense.params) and rows.meta == dense.meta


def test_rows_is_the_default_and_unknown_assembly_is_refused():
    assert compiler.ASSEMBLIES == ("rows", "tracr")
    with pytest.raises(CompileError, match="assembly must be one of 'rows', 'tracr', got 'dense'"):
        compiler.compile_program(khop_doubling(2), range(3), 5, assembly="dense")
    with pytest.raises(CompileError, match="got 'dense'"):
        with compiler.using_assembly("dense"):
            pass


def test_from_craft_holds_no_d_by_d_array():
    """Transient memory of the weight building, beyond the finished model, is under a quarter of
    one d_model x d_model float32 array (tracr's assembly holds several float64 ones)."""
    n = 200
    with tracr_patches.applied():
        craft, _, sink, _ = compiler._craft_program(khop_doubling(16), set(range(4)), n, True, 100, "softmax",
                                                    "onehot")
    tokens = bases.VectorSpaceWithBasis.from_values("tokens", set(range(4)) | {"BOS", "PAD"})
    indices = bases.VectorSpaceWithBasis.from_values("indices", range(n))
    out = bases.VectorSpaceWithBasis(sink[nodes.OUTPUT_BASIS])
    tracemalloc.start()
    try:
        m = model_mod.from_craft(craft, tokens_space=tokens, indices_space=indices, output_space=out,
                                 output_labels=[str(d) for d in out.basis], categorical=True, max_seq_len=n,
                                 causal=True)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    d = len(m.residual_labels)
    model_bytes = sum(a.nbytes for a in jax.tree_util.tree_leaves(m.params))
    assert d > 1000
    assert peak - model_bytes < d * d * 4 / 4, (peak, model_bytes, d)
