"""Issue 33: no false failures at the edges.

* layer necessity does not apply at n = 1 (or where every output is a function of its own
  token): the report says so and the verdict rests on the other checks;
* ``run`` checks what running needs only (the sampling distribution's constraint is not one);
* the compiler takes a numerical Aggregate of non-0/1 values (tracr compiles it), with the
  exact set of means as its value set.
"""

import json

import numpy as np
import pytest
from tracr.rasp import rasp

from depthcraft.constructions.compiler import compile_program, compile_with_tracr, numerical_means
from depthcraft.constructions.errors import CompileError, ParameterError
from depthcraft.verify import lookup
from depthcraft.verify.ablation import not_applicable
from depthcraft.verify.cli import main
from depthcraft.verify.tasks.base import Task
from depthcraft.verify.tasks.khop import KHopTask


def run_cli(args, capsys):
    with pytest.raises(SystemExit) as e:
        main(args)
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


# ------------------------------------------------------------------ layer necessity


def test_ablation_not_applicable_at_n1_only_for_khop():
    task = KHopTask()
    p1 = task.resolve({"n": 1, "k": 3})
    assert not_applicable(task, p1).startswith("n = 1:")
    # n = 2: hop_1 at position 2 is x_2 when x_1 = x_2, else ⊥: it reads position 1, so it applies
    assert not_applicable(task, task.resolve({"n": 2, "k": 3, "vocab": 2})) is None
    # too many inputs to enumerate (4 + 16 + ... + 4^8 > 1024): applies, sampled inputs decide
    assert not_applicable(task, task.resolve({"n": 8, "k": 1})) is None


class _Local(Task):
    """A free-sequence task whose output at i is 1 - x_i: no attention can be necessary."""
    name, free_sequences, none_value = "local", True, -1

    def vocab(self, p):
        return [0, 1]

    def max_seq_len(self, p):
        return 3

    def reference(self, p, tokens):
        return 1 - tokens, np.ones_like(tokens, bool)

    def sample(self, p, rng, batch):
        return rng.integers(0, 2, (batch, 3))

    def edge_cases(self, p):
        return []

    def strategy(self, p):
        raise NotImplementedError


class _Prev(_Local):
    """Output at i is x_{i-1} (x_0 = 0): reads another position."""

    def reference(self, p, tokens):
        prev = np.concatenate([np.zeros_like(tokens[:, :1]), tokens[:, :-1]], axis=1)
        return prev, np.ones_like(tokens, bool)


def test_ablation_not_applicable_when_every_output_is_local():
    # 2 + 4 + 8 = 14 inputs of length <= 3
    assert not_applicable(_Local(), {}) == ("every scored output is a function of its own token and position "
                                            "on all 14 inputs of length <= 3, so no attention layer can be "
                                            "necessary")
    assert not_applicable(_Prev(), {}) is None


@pytest.mark.parametrize("name", ["khop_doubling", "khop_floor"])
def test_verify_n1_passes_with_ablation_not_applicable(name, tmp_path, capsys):
    path = tmp_path / "r.json"
    code, out, _ = run_cli(["verify", name, "-p", "n=1", "-p", "k=1..4", "--samples", "20", "--hypothesis", "5",
                            "--json", str(path)], capsys)
    assert code == 0, out
    assert "layer ablation: not applicable: n = 1:" in out
    assert "4/4 passed" in out
    reports = json.loads(path.read_text())["results"]
    assert [r["params"]["k"] for r in reports] == [1, 2, 3, 4]
    for r in reports:
        assert r["ablation"] == [] and r["ablation_applicable"] is False and r["ablation_ok"] is True
        assert r["exact"] is True and r["bound_ok"] is True and r["passed"] is True


# ------------------------------------------------------------------ run needs no sampler


def test_run_vocab1_is_accepted(capsys):
    code, out, err = run_cli(["run", "khop_doubling", "-p", "k=2", "-p", "n=4", "-p", "vocab=1",
                              "--input", "aaaa"], capsys)
    assert code == 0, err
    # find(i) = i for i >= 2 (x_{i-1} = x_i), find(1) = 0: hop_2 = ⊥ a a a
    assert "output     ⊥ a a a" in out and "reference  ⊥ a a a" in out


def test_verify_vocab1_paper_distribution_still_refused(capsys):
    code, _, err = run_cli(["verify", "khop_doubling", "-p", "k=2", "-p", "n=4", "-p", "vocab=1"], capsys)
    assert code == 2
    assert err.strip().splitlines() == ["depthcraft: error: distribution=paper (no two equal neighbours) needs "
                                        "vocab >= 2; use -p distribution=uniform"]
    assert lookup.resolve("khop_doubling", {"n": 4, "vocab": 1}, sampling=False).params["vocab"] == 1
    with pytest.raises(ParameterError):
        lookup.resolve("khop_doubling", {"n": 4, "vocab": 1})


# ------------------------------------------------------------------ numerical aggregates

VALUES = {"a": 0.5, "b": 1.0, "c": 1.5}


def _mean_program(comparison, categorical_out=False):
    vals = rasp.numerical(rasp.Map(lambda t: VALUES[t], rasp.tokens))
    agg = rasp.numerical(rasp.Aggregate(rasp.Select(rasp.indices, rasp.indices, comparison), vals, default=0))
    return rasp.categorical(rasp.Map(lambda x: round(x * 8), agg)) if categorical_out else agg


@pytest.mark.parametrize("compile_fn", [compile_program, compile_with_tracr])
def test_numerical_aggregate_one_position_selector(compile_fn):
    model = compile_fn(_mean_program(rasp.Comparison.EQ), set(VALUES), 4, causal=False)
    assert model.run([list("acbc")]).tolist() == [[0.5, 1.5, 1.0, 1.5]]


def test_numerical_aggregate_prefix_mean_and_categorical_readout():
    # prefix means of 0.5, 1.5, 1.0, 1.5: 0.5, 1.0, 1.0, 1.125 (exact in float32)
    model = compile_program(_mean_program(rasp.Comparison.LEQ), set(VALUES), 4, causal=True)
    assert model.run([list("acbc")]).tolist() == [[0.5, 1.0, 1.0, 1.125]]
    # read out as round(8 x): 4, 8, 8, 9. (tracr's value set {x/length} lacks 1.125, so tracr's own
    # compiler decodes the last position as 8.)
    model = compile_program(_mean_program(rasp.Comparison.LEQ, categorical_out=True), set(VALUES), 4, causal=True)
    assert model.run([list("acbc")]).tolist() == [[4, 8, 8, 9]]


def test_numerical_means_exact_and_capped():
    # means of 1..2 values from {0.5, 1.5}: 0.5, 1.5 (one), 0.5, 1.0, 1.5 (two)
    assert numerical_means("m", [0.5, 1.5], 2) == {0.5, 1.0, 1.5}
    # {0.5, 1.0, 1.5}, n = 2: the values, and the pair means 0.75, 1.0, 1.25
    assert numerical_means("m", VALUES.values(), 2) == {0.5, 0.75, 1.0, 1.25, 1.5}
    with pytest.raises(CompileError, match=r"numerical Aggregate m: the means of up to n=6 of its 7 values are more "
                                           r"than 100 distinct values"):
        numerical_means("m", [0.1 * i for i in range(2, 9)], 6, limit=100)
