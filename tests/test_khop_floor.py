"""khop_floor: the search head at a stored pointer and the floor(log2 k)+2 construction."""

import math

import numpy as np
import pytest
from tracr.rasp import rasp

from depthcraft.verify import lookup
from depthcraft.constructions.compiler import compile_program
from depthcraft.constructions.errors import CompileError
from depthcraft.constructions.primitives import POSITION, Read, last_occurrence, last_occurrence_upto, prev_token
from depthcraft.constructions.reference import evaluate
from depthcraft.rasp_programs.khop import floor_layers, khop_floor
from depthcraft.verify.structure import measure
from depthcraft.verify.tasks import get_task
from depthcraft.verify.tasks.khop import find_k, hop_k
from depthcraft.verify.verifier import run_checks, verify


def _find2_program():
    prev = prev_token(rasp.tokens)
    p, tp = last_occurrence(rasp.tokens, prev, [POSITION, Read(rasp.tokens, bos_value=-1)])
    return last_occurrence_upto(p, tp, prev, [POSITION])[0]


def test_search_head_by_hand():
    # x = a b a b a (positions 1..5): find = 0 0 2 3 4 and find^2 = 0 0 0 2 3.
    # At position 4 the pointer is 3 (x_3 = a); j = 4 also has x_{j-1} = a but lies after
    # the pointer, so the search must return j = 2.
    prog = _find2_program()
    assert evaluate(prog, [0, 1, 0, 1, 0]) == [0, 0, 0, 2, 3]
    model = compile_program(prog, vocab=range(2), max_seq_len=8)
    assert model.run(np.array([[0, 1, 0, 1, 0]])).tolist() == [[0, 0, 0, 2, 3]]


def test_search_head_matches_definition_on_random_inputs():
    model = compile_program(_find2_program(), vocab=range(3), max_seq_len=12)
    x = np.random.default_rng(1).integers(0, 3, size=(300, 12))
    assert (model.run(x) == find_k(x, 2)[:, 1:]).all()


def test_search_head_needs_causal_model():
    with pytest.raises(CompileError, match="causal"):
        compile_program(_find2_program(), vocab=range(2), max_seq_len=4, causal=False)


def test_floor_layers_formula():
    for k in range(1, 1025):
        L = floor_layers(k)
        assert L == math.floor(math.log2(k)) + 2
        assert k <= 2 ** (L - 1) - 1  # reached with L layers
        assert L == 2 or k > 2 ** (L - 2) - 1  # and not with one layer fewer


def test_floor_program_semantics_match_reference():
    rng = np.random.default_rng(0)
    for k in range(1, 21):
        prog = khop_floor(k)
        for _ in range(15):
            n = int(rng.integers(1, 24))
            x = rng.integers(0, int(rng.integers(1, 4)), size=n)
            assert evaluate(prog, x.tolist()) == hop_k(x[None], k)[0].tolist(), (k, x.tolist())


@pytest.mark.parametrize("k", [1, 2, 3, 4, 7, 8, 15, 16])
def test_floor_structure_at_n64(k):
    model = lookup.resolve("khop_floor", {"k": k, "n": 64, "vocab": 4}).build()
    s = measure(model)
    assert s["attn_layers"] == math.floor(math.log2(k)) + 2
    assert s["heads"] == 1
    assert s["mlp_layers"] == 0


@pytest.mark.slow
@pytest.mark.parametrize("k", range(1, 17))
def test_floor_verified_k1_to_16_n64(k):
    r = verify("khop_floor", {"k": k, "n": 64}, samples=500, hypothesis_examples=50)
    assert r["structure"]["attn_layers"] == math.floor(math.log2(k)) + 2
    assert r["structure"]["heads"] == 1
    assert r["passed"]


@pytest.mark.parametrize("k", [3, 6, 7])
def test_floor_exhaustive_small(k):
    c = lookup.get("khop_floor")
    p = {"k": k, "n": 7, "vocab": 3, "distribution": "uniform"}
    checks = run_checks(c.build(p), get_task("khop"), p, samples=0, exhaustive=True, hypothesis_examples=0)
    assert checks["exhaustive"].inputs == 3 ** 7
    assert checks["exhaustive"].exact
    assert checks["edge"].exact


def test_floor_random_at_n100():
    r = verify("khop_floor", {"k": 13, "n": 100}, samples=300, hypothesis_examples=20)
    assert r["structure"]["attn_layers"] == 5 and r["structure"]["heads"] == 1
    assert r["checks"]["random"]["inputs"] == 300 and r["checks"]["random"]["exact"]
    assert r["passed"]


def test_search_head_arguments_checked():
    from depthcraft.constructions.nodes import HeadSpec
    from depthcraft.constructions.primitives import fact_lookup

    prev = prev_token(rasp.tokens)
    with pytest.raises(CompileError, match="key_positions"):
        fact_lookup(rasp.tokens, prev, [POSITION], key_positions=None)
    with pytest.raises(CompileError, match="stored pointer"):
        HeadSpec("last_occurrence", query=rasp.tokens, key=prev, predicate=lambda k, q: k == q,
                 reads=[Read(POSITION)], hardness=1.0, pointer=prev)
    with pytest.raises(CompileError, match="numerical"):
        last_occurrence_upto(rasp.numerical(rasp.Map(lambda t: t, rasp.tokens)), rasp.tokens, prev, [POSITION])


def test_odd_doubling_schedule_reaches_every_hop_count():
    """Layer l searches from R with the stored P = F^p: R -> F^(r+p+1), P -> F^(2p+1); m is reached exactly."""
    import math

    from depthcraft.rasp_programs.doubling import odd_doubling_layers, odd_doubling_steps

    for m in range(1, 300):
        assert odd_doubling_layers(m) == math.floor(math.log2(m)) + 2
        p, r = 1, m & 1  # after layers 1-2: P = F^1, R = F^1 or F^0
        steps = list(odd_doubling_steps(m))
        assert len(steps) == odd_doubling_layers(m) - 2
        for s in steps:
            if s.bit:
                r = r + p + 1
                assert s.r_hops == r
            p = 2 * p + 1
            assert s.p_hops == p
        assert r == m and (not steps or steps[-1].bit and steps[-1].last)
