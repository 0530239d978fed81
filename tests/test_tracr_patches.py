"""The tracr patches (``constructions.tracr_patches``) change no number, and are on only where documented."""

import hashlib

import haiku as hk
import jax
import numpy as np
import pytest
from tracr.craft import bases, vectorspace_fns
from tracr.rasp import rasp

from depthcraft.constructions import compiler, tracr_patches
from depthcraft.rasp_programs.khop import khop_doubling, khop_floor, khop_rasp
from depthcraft.rasp_programs.retrieval import retrieval_doubling


def _digests(tree):
    """sha256 of every array (dtype, shape and bytes) in a pytree, in leaf order."""
    out = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        a = np.asarray(leaf)
        out.append((jax.tree_util.keystr(path), a.dtype.str, a.shape, hashlib.sha256(a.tobytes()).hexdigest()))
    return out


# Small sizes of several constructions: (name, program, vocab, max_seq_len, compile keywords).
CASES = [
    ("khop_doubling", lambda: khop_doubling(3), range(4), 8, {}),
    ("khop_constant_width", lambda: khop_doubling(4), range(3), 8, {"positions": "angle"}),
    ("khop_floor", lambda: khop_floor(3), range(3), 8, {}),
    ("retrieval_doubling", lambda: retrieval_doubling(4), range(11), 18, {"causal": False}),
    ("hist (tracr blocks)", lambda: rasp.SelectorWidth(
        rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.EQ)).named("hist"), [0, 1], 3, {"causal": False}),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_assembled_weights_bit_identical_with_and_without_patches(case):
    _, make, vocab, n, kw = case
    program = make()  # one program object: its SOps' labels (unique ids) are the same in both compiles
    patched, labels, info = compiler.assemble_program(program, vocab, n, **kw)
    with tracr_patches.disabled(*tracr_patches.PATCHES):
        plain, labels0, info0 = compiler.assemble_program(program, vocab, n, **kw)
    assert _digests(patched.params) == _digests(plain.params)
    assert patched.residual_labels == plain.residual_labels and labels == labels0 and info == info0
    assert patched.model_config == plain.model_config


def test_jit_init_keeps_the_eager_init_for_large_models(monkeypatch):
    """Above JIT_INIT_MAX_ELEMENTS the Haiku init runs eagerly; the weights are the same either way."""
    _, make, vocab, n, kw = CASES[0]
    program = make()
    jitted, _, _ = compiler.assemble_program(program, vocab, n, **kw)
    calls = []
    monkeypatch.setattr(tracr_patches, "JIT_INIT_MAX_ELEMENTS", 0)
    monkeypatch.setattr(jax.stages.Lowered, "compile", lambda self, *a, **k: calls.append(1))
    eager, _, _ = compiler.assemble_program(program, vocab, n, **kw)
    assert calls == []  # nothing compiled as one program: the init ran op by op
    assert _digests(jitted.params) == _digests(eager.params)


def test_tracr_compile_bit_identical_with_and_without_patches():
    program = khop_rasp(2)
    fast = compiler.compile_with_tracr(program, vocab=range(3), max_seq_len=6)
    with tracr_patches.disabled(*tracr_patches.PATCHES):
        slow = compiler.compile_with_tracr(program, vocab=range(3), max_seq_len=6)
    assert _digests(fast.params) == _digests(slow.params)
    assert fast.arch == slow.arch and fast.residual_labels == slow.residual_labels


def _space(*dirs):
    return bases.VectorSpaceWithBasis([bases.BasisDirection(*d) for d in dirs])


@pytest.mark.parametrize("src,dst", [
    (_space(("a", 0), ("a", 1), ("b", None), ("one",)), _space(("a", 1), ("one",), ("c", "x"))),
    (_space(("a", 0), ("a", 1)), _space(("b", 0))),  # disjoint: all zeros
    (_space(), _space(("a", 0))),  # empty source
    (_space(("a", 0)), _space()),  # empty target
    (_space(("t", 1), ("t", "BOS"), ("t", "PAD")), _space(("t", "BOS"), ("t", 1), ("u", 2))),  # mixed value types
])
def test_index_project_equals_tracr_project(src, dst):
    ours, theirs = tracr_patches.index_project(src, dst), tracr_patches.original_project(src, dst)
    assert ours.matrix.dtype == theirs.matrix.dtype == np.float64
    assert ours.matrix.shape == theirs.matrix.shape == (src.num_dims, dst.num_dims)
    assert ours.matrix.tobytes() == theirs.matrix.tobytes()
    assert ours.input_space == theirs.input_space and ours.output_space == theirs.output_space


def test_index_project_values_from_the_definition():
    src, dst = _space(("a", 0), ("a", 1), ("b", 0)), _space(("a", 1), ("b", 0), ("c", 0))
    expected = np.array([[0, 0, 0], [1, 0, 0], [0, 1, 0]], np.float64)  # a:0 absent; a:1 -> 0; b:0 -> 1
    np.testing.assert_array_equal(tracr_patches.index_project(src, dst).matrix, expected)


def test_patches_active_only_inside_applied():
    original_init = hk.initializers.TruncatedNormal.__call__
    assert vectorspace_fns.project is tracr_patches.original_project.__globals__["_ORIGINAL_PROJECT"]
    assert not any(tracr_patches.is_active(p) for p in tracr_patches.PATCHES)
    with tracr_patches.applied():
        assert all(tracr_patches.is_active(p) for p in tracr_patches.PATCHES)
        assert vectorspace_fns.project is tracr_patches.index_project
        with tracr_patches.applied():  # re-entrant
            assert tracr_patches.is_active("fast_project")
        assert tracr_patches.is_active("fast_project")
    assert not any(tracr_patches.is_active(p) for p in tracr_patches.PATCHES)
    assert hk.initializers.TruncatedNormal.__call__ is original_init
    with tracr_patches.disabled("fast_project"), tracr_patches.applied():
        assert not tracr_patches.is_active("fast_project") and tracr_patches.is_active("zero_init")
    with pytest.raises(RuntimeError), tracr_patches.applied():  # restored after an exception too
        raise RuntimeError("boom")
    assert not any(tracr_patches.is_active(p) for p in tracr_patches.PATCHES)


def test_unknown_patch_name_is_refused():
    with pytest.raises(ValueError, match="unknown tracr patch 'nope'; the patches are zero_init, fast_project, fast_basis_vector, "
                                         "jit_init, put_params"):
        with tracr_patches.disabled("nope"):
            pass
    with pytest.raises(ValueError, match="unknown tracr patch"):
        tracr_patches.is_active("nope")


@pytest.mark.parametrize("space", [
    _space(("a", 0), ("a", 1), ("b", None), ("one",)),
    _space(("t", 1), ("t", "BOS"), ("t", "PAD")),
    _space(("x", 0)),
])
def test_index_basis_vector_equals_tracr(space):
    for d in space.basis:
        ours = tracr_patches.index_basis_vector(space, d)
        theirs = tracr_patches.original_basis_vector(space, d)
        assert ours.magnitudes.dtype == theirs.magnitudes.dtype == np.float64
        assert ours.magnitudes.tobytes() == theirs.magnitudes.tobytes()
        assert ours.basis_directions == theirs.basis_directions
    with pytest.raises(KeyError):
        tracr_patches.index_basis_vector(space, bases.BasisDirection("absent"))


def test_basis_vector_patch_on_only_inside_applied():
    space = _space(("a", 0), ("a", 1))
    assert not tracr_patches.is_active("fast_basis_vector")
    with tracr_patches.applied():
        assert tracr_patches.is_active("fast_basis_vector")
        v = space.vector_from_basis_direction(bases.BasisDirection("a", 1))
        np.testing.assert_array_equal(v.magnitudes, [0.0, 1.0])  # from the definition
    assert not tracr_patches.is_active("fast_basis_vector")
