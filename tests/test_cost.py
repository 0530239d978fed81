"""Issue 33: the cost model (verify/cost.py), the memory budget, and the caps on explicit and implied sizes.

The estimate's table counts follow from their definitions (tracr's score table of a categorical
Aggregate: (query directions + BOS + one) x (key directions + BOS); a categorical Map's MLP: one hidden
unit per input value); its d_model is the built model's. Memory and time constants are measured
(benchmarks/cost_model.py), so no test here times anything.
"""

import pytest
from tracr.rasp import rasp

from depthcraft.constructions.compiler import plan_graph
from depthcraft.constructions.errors import ParameterError
from depthcraft.verify import cost, lookup
from depthcraft.verify.cli import main
from depthcraft.verify.structure import measure


def run_cli(args, capsys):
    with pytest.raises(SystemExit) as e:
        main(args)
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


def test_graph_counts_follow_the_definitions():
    # tokens over {a, b, c}: 3 directions. Aggregate(Select(tokens, tokens, EQ), tokens): score table
    # (3 + BOS + one) x (3 + BOS) = 5 x 4 = 20. Map tokens -> {0, 1}: 3 inputs x 3 hidden + 3 hidden x 2 outputs.
    sel = rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.EQ)
    agg = rasp.categorical(rasp.Aggregate(sel, rasp.tokens))
    out = rasp.categorical(rasp.Map(lambda t: int(t == "a"), agg))
    g = cost.graph_counts(plan_graph(out, {"a", "b", "c"}, 4), 4)
    assert g["score_cells"] == 20 and g["largest_score_table"] == 20
    assert g["mlp_cells"] == 3 * 3 + 3 * 2
    assert g["evaluations"] == 3
    assert g["heads"] == 1 and g["attn_layers"] == 1
    # directions: tokens a, b, c; indices 0..3; agg a, b, c; map 0, 1; plus one, BOS and PAD
    assert g["d_model"] == 3 + 4 + 3 + 2 + 3


@pytest.mark.parametrize("name,params", [
    ("khop_doubling", {"k": 5, "n": 16, "vocab": 3}),
    ("khop_floor", {"k": 3, "n": 12}),
    ("retrieval_tripling", {"d": 4, "distractors": 2}),
    ("khop_constant_width", {"k": 4, "n": 32}),  # angle positions: 3 rows, not n
])
def test_estimated_d_model_and_depth_are_the_built_models(name, params):
    est = cost.estimate(name, params)
    structure = measure(lookup.build(name, **params))
    assert est.d_model == structure["d_model"]
    assert est.attn_layers == structure["attn_layers"]


def test_parse_memory():
    assert cost.parse_memory("8G") == 8_000_000_000
    assert cost.parse_memory("500M") == 500_000_000
    assert cost.parse_memory("2.5GB") == 2_500_000_000
    assert cost.parse_memory("1024") == 1024
    assert cost.parse_memory("0") is None and cost.parse_memory("none") is None
    with pytest.raises(ParameterError, match=r"^--max-memory '1x' is not a size; expected e.g. 8G, 500M, 2.5GB, "
                                             r"or 0 for no limit$"):
        cost.parse_memory("1x")


def test_budget_refusal_is_one_line_naming_estimate_and_option(capsys):
    code, out, err = run_cli(["verify", "khop_doubling", "-p", "k=3", "-p", "n=16", "--max-memory", "1M"], capsys)
    assert code == 2 and out == ""
    (line,) = err.strip().splitlines()
    est = cost.estimate("khop_doubling", {"k": 3, "n": 16})
    assert line == (f"depthcraft: error: khop_doubling k=3 n=16 vocab=4 distribution=paper is estimated at "
                    f"{cost.size(est.peak_bytes)} (d_model {est.d_model}, score tables {cost.count(est.score_cells)} "
                    f"cells, MLP tables 0 cells), above the memory budget of 1 MB; --max-memory raises the budget "
                    f"(0: no limit)")


@pytest.mark.parametrize("command", [["run", "--input", "abab"], ["save", "-o", "m.safetensors"]])
def test_run_and_save_refuse_above_the_budget(command, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli([command[0], "khop_doubling", "-p", "k=2", "-p", "n=8", *command[1:],
                            "--max-memory", "10M"], capsys)
    assert code == 2 and "above the memory budget of 10 MB; --max-memory" in err
    assert len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_implied_symbol_pool_has_the_explicit_cap():
    with pytest.raises(ParameterError, match=r"^d=41 and distractors=16 imply a symbol pool of \(c\+1\)\(D\+1\) = 714, "
                                             r"above the cap of 512 on symbols; use \(c\+1\)\(D\+1\) <= 512$"):
        lookup.resolve("retrieval_tripling", {"d": 41, "distractors": 16})
    assert lookup.resolve("retrieval_tripling", {"d": 29, "distractors": 16}).params["d"] == 29  # 17 x 30 = 510
    with pytest.raises(ParameterError, match="above the maximum 512"):
        lookup.resolve("retrieval_tripling", {"d": 4, "symbols": 513})


def test_estimate_grows_with_size():
    small = cost.estimate("retrieval_tripling", {"d": 4, "distractors": 2})
    big = cost.estimate("retrieval_tripling", {"d": 14, "distractors": 16})
    assert big.d_model > small.d_model and big.score_cells > small.score_cells
    assert big.peak_bytes > small.peak_bytes and big.seconds > small.seconds
    assert cost.estimate("khop_doubling", {"k": 2, "n": 8}, samples=0, hypothesis_examples=0).inputs == 1


def test_check_program_estimates_and_refuses_above_its_budget():
    from depthcraft.verify.api import check_program

    sel = rasp.Select(rasp.tokens, rasp.tokens, rasp.Comparison.EQ)
    prog = rasp.categorical(rasp.Aggregate(sel, rasp.tokens))
    with pytest.raises(ParameterError, match=r"^aggregate_\d+ is estimated at .* above the memory budget of 1 MB; "
                                             r"--max-memory raises the budget \(0: no limit\)$"):
        check_program(prog, vocab=["a", "b"], max_seq_len=3, max_memory="1M")
    with pytest.raises(ParameterError, match="above the memory budget of 0 MB"):
        check_program("khop_doubling", params={"k": 2, "n": 8}, max_memory=1)
    report = check_program(prog, vocab=["a", "b"], max_seq_len=3, samples=10, hypothesis_examples=0,
                           max_memory=0)
    # tokens a, b; indices 0..2; the aggregate's a, b; one, BOS, PAD
    assert report["cost_estimate"]["d_model"] == report["structure"]["d_model"] == 2 + 3 + 2 + 3


def test_certify_estimate_at_scale_is_an_upper_bound_within_the_default_budget():
    # results/certify/certify.json measured khop_doubling k=64 n=1024's certificate at 1,022 MiB peak RSS
    # (build included): the estimate must not be below that, nor refuse it on a 24 GB machine.
    est = cost.estimate("khop_doubling", {"k": 64, "n": 1024}, certify=True)
    assert 1022 * 2 ** 20 <= est.peak_bytes <= 8e9
    assert est.certify_bytes <= cost.CERT_WORKING_SET_BYTES
