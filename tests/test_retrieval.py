"""D-step retrieval: task definition, sampler, the fact look-up head and retrieval_doubling."""

import json
import math
import re

import numpy as np
import pytest
from tracr.rasp import rasp

from depthcraft.verify import lookup
from depthcraft.constructions.compiler import compile_program
from depthcraft.constructions.errors import CompileError, InputError, ParameterError
from depthcraft.constructions.primitives import Read, fact_lookup, prev_token
from depthcraft.constructions.reference import evaluate
from depthcraft.rasp_programs.retrieval import lower_bound_layers, retrieval_doubling, retrieval_layers, value_slot
from depthcraft.verify.cli import main
from depthcraft.verify.structure import measure
from depthcraft.verify.tasks import get_task
from depthcraft.verify.tasks.retrieval import BOT, follow, layout, num_symbols
from depthcraft.verify.verifier import run_checks

TASK = get_task("retrieval")
# Symbols a..f = 0..5, '?' = 6 (d=2, distractors=1: S = (1+1)(2+1) = 6).
A, B, C, X, Y, Z, Q = range(7)
# Chain a -> b -> c (facts "a = b", "b = c"), distractor x -> y -> z; shuffled; then "? a".
EXAMPLE = [Y, Z, A, B, X, Y, B, C, Q, A]


def _p(**kw):
    return TASK.resolve({"d": 2, "distractors": 1, **kw})


def test_reference_by_hand():
    p = _p()
    assert TASK.vocab(p) == list(range(7)) and TASK.max_seq_len(p) == 10
    out, scored = TASK.reference(p, np.array([EXAMPLE]))
    assert out[0, -1] == C
    assert scored[0].tolist() == [False] * 9 + [True]
    assert follow(np.array([EXAMPLE]), p["d"], num_symbols(p)).tolist() == [[B, C]]
    # Query the distractor chain instead: x -> y -> z.
    other = EXAMPLE[:-1] + [X]
    assert TASK.reference(p, np.array([other]))[0][0, -1] == Z
    # A chain that breaks (query c: no fact has key c) gives ⊥.
    assert follow(np.array([EXAMPLE[:-1] + [C]]), p["d"], num_symbols(p)).tolist() == [[BOT, BOT]]
    assert TASK.format_tokens(p, EXAMPLE) == "e f a b d e b c ? a"


def test_lower_bound_values():
    assert [lower_bound_layers(d) for d in (1, 2, 4, 5, 13, 14, 32)] == [1, 2, 2, 3, 3, 4, 4]
    for d in range(1, 200):
        L = lower_bound_layers(d)
        assert 3 ** L >= 2 * d > 3 ** (L - 1)
        assert retrieval_layers(d) == math.floor(math.log2(d)) + 2 >= L


def test_layout_positions():
    chains = np.array([[[A, B, C], [X, Y, Z]]])
    x = layout(chains, np.array([[0, 1, 2, 3]]), Q)
    # Facts (chain 0 hop 1) = (b, a), (chain 0 hop 2) = (c, b), ...: key at odd, value at even positions.
    assert x.tolist() == [[B, A, C, B, Y, X, Z, Y, Q, C]]
    assert [value_slot(t) for t in (1, 2, 3, 4)] == [False, True, False, True]


@pytest.mark.parametrize("d,c", [(1, 0), (3, 2), (6, 1)])
def test_sampler_structure(d, c):
    p = TASK.resolve({"d": d, "distractors": c, "symbols": 40})
    x = TASK.sample(p, np.random.default_rng(0), 500)
    nf = d * (c + 1)
    assert x.shape == (500, 2 * nf + 2)
    keys, values = x[:, 0:2 * nf:2], x[:, 1:2 * nf:2]
    assert (x[:, -2] == 40).all() and (x[:, :-2] < 40).all()
    for row_k, row_v, q in zip(keys, values, x[:, -1]):
        assert len(set(row_k.tolist())) == nf  # distinct keys
        assert len(set(row_v.tolist())) == nf  # distinct values (disjoint chains)
        table = dict(zip(row_k.tolist(), row_v.tolist()))
        cur = int(q)
        for _ in range(d):  # exactly D hops from the query ...
            cur = table[cur]
        assert cur not in table  # ... and the chain ends there
    # Fact orders are shuffled: the query's first fact is not always in the same slot.
    first_slot = [int(np.flatnonzero(k == q)[0]) for k, q in zip(keys, x[:, -1])]
    assert len(set(first_slot)) == nf


def test_symbols_parameter_checked():
    with pytest.raises(ParameterError, match="symbols=5 is too few"):
        TASK.resolve({"d": 2, "distractors": 1, "symbols": 5})


def test_exhaustive_enumerates_every_input():
    p = TASK.resolve({"d": 1, "distractors": 1})
    total, batches = TASK.exhaustive(p)
    xs = np.concatenate(list(batches))
    assert total == 4 * 3 * 2 * 1 * 2 == len(xs)
    assert len({tuple(r) for r in xs.tolist()}) == total
    with pytest.raises(ParameterError, match="above the limit"):
        TASK.exhaustive(TASK.resolve({"d": 4, "distractors": 2}))


def test_fact_lookup_head_by_hand():
    key = prev_token(rasp.tokens)
    value, = fact_lookup(rasp.tokens, key, [Read(rasp.tokens, bos_value=BOT)], key_positions=value_slot)
    # Each position i attends to the value slot whose fact key is x_i. Position 4 queries b: the key
    # slot 5 also has previous token b but is not a value slot, so the answer is the fact "b = c" at 8.
    # Position 9 queries '?', which is the previous token of the (even) last position: it reads a.
    expected = [Z, BOT, B, C, Y, Z, C, BOT, A, B]
    assert evaluate(value, EXAMPLE) == expected
    model = compile_program(value, vocab=range(7), max_seq_len=10, causal=False)
    assert model.run(np.array([EXAMPLE])).tolist() == [expected]
    with pytest.raises(CompileError, match="causal=False"):
        compile_program(value, vocab=range(7), max_seq_len=10, causal=True)


def test_program_semantics_match_reference():
    rng = np.random.default_rng(0)
    for d in range(1, 20):
        p = TASK.resolve({"d": d, "distractors": 1})
        prog = retrieval_doubling(d)
        for x in TASK.sample(p, rng, 5):
            assert evaluate(prog, x.tolist())[-1] == TASK.reference(p, x[None])[0][0, -1]


@pytest.mark.parametrize("d", [1, 2, 5, 16])
def test_structure_against_lower_bound(d):
    model = lookup.resolve("retrieval_doubling", {"d": d, "distractors": 2, "symbols": 0}).build()
    s = measure(model)
    assert s["attn_layers"] == math.floor(math.log2(d)) + 2
    assert s["attn_layers"] >= lower_bound_layers(d)
    assert s["heads"] == 1 and s["mlp_layers"] == 0


def test_exhaustive_d2():
    c = lookup.get("retrieval_doubling")
    p = {"d": 2, "distractors": 1, "symbols": 0}
    checks = run_checks(c.build(p), TASK, p, samples=0, exhaustive=True, hypothesis_examples=30)
    assert checks["exhaustive"].inputs == math.perm(6, 6) * math.factorial(4)
    assert checks["exhaustive"].exact and checks["edge"].exact and checks["hypothesis"].exact


def test_cli_verify_json(tmp_path, capsys):
    out = tmp_path / "out.json"
    with pytest.raises(SystemExit) as e:
        main(["verify", "retrieval_doubling", "-p", "d=5", "--samples", "200", "--hypothesis", "20",
              "--json", str(out)])
    assert e.value.code == 0
    r = json.loads(out.read_text())["results"][0]
    assert r["passed"] and r["structure"]["attn_layers"] == 4
    assert r["bound"]["attn_layers"] == 3
    assert r["bound_checks"]["attn_layers"] == {"measured": 4, "bound": 3, "kind": "lower", "gap": 1, "ok": True}
    assert "4/≥3" in capsys.readouterr().out


D1 = ("-p", "d=1", "-p", "distractors=0")  # facts "k v", then "? x": length 4, symbols a b (S = 2), ? = 2
D1C1 = ("-p", "d=1", "-p", "distractors=1")  # up to two facts: length 6, symbols a..d, ? = 4


@pytest.mark.parametrize("params, text, fragment", [
    (D1, "? ? ? ?", "input 0 has ? at position 1; ? belongs only at position 3"),  # was scored as a model failure
    (D1, "a b", "input 0 has no ? at position 1 (it holds 'a')"),  # no marker: was scored "exact"
    (D1C1, "a b ? c ? a", "input 0 has ? at position 3; ? belongs only at position 5"),  # marker in the middle
    (D1C1, "a b a c ? a", "two facts with the key 'a' (positions 1 and 3); fact keys must be distinct"),
    (D1C1, "a b ? a c", "an even length 2..6, got length 5"),
    (D1C1, "a b c d a d ? a", "input of length 8 is longer than max_seq_len=6"),
])
@pytest.mark.parametrize("command", ["run", "show"])
def test_malformed_inputs_are_refused_with_one_line(command, params, text, fragment, capsys):
    with pytest.raises(SystemExit) as e:
        main([command, "retrieval_doubling", *params, "--input", text])
    out, err = capsys.readouterr()
    assert e.value.code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("depthcraft: error: ") and fragment in err, err
    assert "Traceback" not in err


def test_reference_checks_the_layout():
    p = _p()  # d=2, distractors=1: symbols a..f = 0..5, ? = 6, n <= 10
    ok = [EXAMPLE, EXAMPLE[4:],  # fewer facts (one chain only)
          [A, B, Q, C],  # a broken chain: no fact has key b; the answer is ⊥
          [A, B, B, A, Q, A],  # a cycle: a -> b -> a
          [Q, A]]  # no facts at all: ⊥
    for x in ok:
        out, scored = TASK.reference(p, np.array([x]))
        assert scored[0].tolist() == [False] * (len(x) - 1) + [True]
        assert out[0, -1] == follow(np.array([x]), 2, num_symbols(p))[0, -1]
    assert [TASK.reference(p, np.array([x]))[0][0, -1] for x in ok[2:]] == [BOT, A, BOT]
    bad = [([Q, Q, Q, Q], "has ? at position 1"), ([A, B], "no ? at position 1"),
           ([A, B, A, C, Q, A], "two facts with the key 'a'"), ([A, B, Q], "even length"),
           ([A, 9, Q, A], "holds token 9 at position 2"), ([A, B, Q, Q], "has ? at position 4")]
    for x, fragment in bad:
        with pytest.raises(InputError, match=re.escape(fragment)):
            TASK.reference(p, np.array([x]))
    # A batch: the first malformed row is named.
    with pytest.raises(InputError, match="input 1 has two facts with the key 'b'"):
        TASK.reference(p, np.array([EXAMPLE, [B, A, B, C, Y, X, Z, Y, Q, B]]))


@pytest.mark.parametrize("command", ["run", "show"])
def test_unscored_positions_are_marked(command, capsys):
    with pytest.raises(SystemExit) as e:
        main([command, "retrieval_doubling", *D1C1, "--input", "c d a b ? a"])
    out = capsys.readouterr().out.splitlines()
    assert e.value.code == 0
    (ref,) = [line for line in out if line.startswith("reference")]
    assert ref.split() == ["reference", "·", "·", "·", "·", "·", "b"]  # only the last is scored: d = 1 hop, a = b
    assert "exact (· = not scored)" in out


@pytest.mark.slow
@pytest.mark.parametrize("d", range(1, 17))
def test_verified_d1_to_16(d):
    from depthcraft.verify.verifier import verify

    r = verify("retrieval_doubling", {"d": d}, samples=500, hypothesis_examples=50)
    assert r["passed"] and r["structure"]["attn_layers"] >= lower_bound_layers(d)


def test_hops_parameter_asks_for_intermediate_values():
    x = np.array([EXAMPLE])
    assert TASK.reference(_p(hops=1), x)[0][0, -1] == B
    assert TASK.reference(_p(hops=2), x)[0][0, -1] == C == TASK.reference(_p(hops=0), x)[0][0, -1]
    with pytest.raises(ParameterError, match="hops=3 is more than"):
        _p(hops=3)
    from depthcraft.verify.verifier import verify

    with pytest.raises(ParameterError, match="full chain only"):
        verify("retrieval_doubling", {"d": 3, "hops": 2})


def test_curriculum_sweep_config():
    from depthcraft.verify.crosscheck.presets import get_preset
    from depthcraft.verify.crosscheck.sweep import construction_info, make_config

    cfg = make_config(get_preset("retrieval", "cpu"), {"d": 3, "hops": "1,2,3"}, mixed=True)
    assert [c["hops"] for c in cfg.conditions] == [1, 2, 3] and cfg.mixed and not cfg.model.causal
    infos = [construction_info(cfg.construction, c, compile_model=False) for c in cfg.conditions]
    assert "full chain only" in infos[0].note
    assert infos[2].bound == 2 and infos[2].bound_formula.startswith("ceil(log_3(2D))")


def test_parse_tokens_checks_the_layout_of_each_formatted_task():
    """The base class's parse_tokens calls the task's check_inputs hook (retrieval, retrieval_slots,
    connectivity): a display string that names only known tokens but breaks the layout is refused."""
    p = _p()  # symbols a..f, then ?
    assert TASK.parse_tokens(p, "e f a b d e b c ? a") == EXAMPLE
    with pytest.raises(InputError, match=re.escape("two facts with the key 'a'")):
        TASK.parse_tokens(p, "a b a c ? a")
    slots = get_task("retrieval_slots")
    ps = slots.resolve({"d": 2, "distractors": 1})
    names = slots.token_names(ps)
    good = " ".join(names[v] for v in EXAMPLE + [slots.slot_token(ps)])
    assert slots.parse_tokens(ps, good) == EXAMPLE + [slots.slot_token(ps)]
    with pytest.raises(InputError, match="answer slots"):
        slots.parse_tokens(ps, " ".join(names[v] for v in EXAMPLE))
    conn = get_task("connectivity")
    pc = conn.resolve({"n": 4})
    with pytest.raises(InputError, match=re.escape("lists the edge 0-1 twice")):
        conn.parse_tokens(pc, "0 1 2 3 0-1 0-1 ? 0 3")
    # Tasks without a layout (k-hop: every sequence over the vocabulary) keep the default hook.
    khop = get_task("khop")
    pk = khop.resolve({})
    x = np.array([[0, 1, 0]])
    assert khop.check_inputs(pk, x) is x
