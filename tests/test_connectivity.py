"""Graph connectivity: the task (layout, BFS reference, samplers, validation) and `graph_connectivity`."""

import json
import math
import re

import networkx as nx
import numpy as np
import pytest
from tracr.rasp import rasp

from depthcraft.constructions.compiler import compile_program
from depthcraft.constructions.errors import CompileError, InputError, ParameterError
from depthcraft.constructions.primitives import Read, meet, prev_token, union
from depthcraft.constructions.reference import evaluate
from depthcraft.rasp_programs.connectivity import (connectivity_layers, edge_index, edge_token, endpoints, filler_token,
                                                   graph_connectivity, incident, log_depth, marker_token, max_edges,
                                                   num_pairs, seq_len, vocab_size)
from depthcraft.verify.cli import main
from depthcraft.verify.tasks import get_task
from depthcraft.verify.tasks.connectivity import FAMILIES, bfs_distances, decode_edges, encode

TASK = get_task("connectivity")


def _p(**given):
    return TASK.resolve(given)


def _graph(x, n):
    """networkx graph of one checked input (an oracle independent of the task's BFS)."""
    g = nx.Graph()
    g.add_nodes_from(range(n))
    names = TASK.token_names({"n": n, "max_edges": 0, "sampler": "mix"})
    for tok in x[n:-3]:
        if tok != filler_token(n):
            a, b = names[int(tok)].split("-")
            g.add_edge(int(a), int(b))
    return g


# ------------------------------------------------------------------------------------------ layout


def test_token_ids():
    n = 4  # vertices 0..3, edges 0-1 0-2 0-3 1-2 1-3 2-3 = ids 4..9, ? = 10, _ = 11
    assert [edge_token(n, a, b) for a, b in [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]] == list(range(4, 10))
    assert edge_token(n, 3, 1) == edge_token(n, 1, 3) == 8
    assert (marker_token(n), filler_token(n), vocab_size(n)) == (10, 11, 12)
    for n in (2, 5, 9):
        assert sorted(edge_index(n, a, b) for a in range(n) for b in range(a + 1, n)) == list(range(num_pairs(n)))
    assert endpoints(4)(8) == frozenset({1, 3}) and endpoints(4)(2) == frozenset({2}) and endpoints(4)(10) == set()
    assert incident(4)(8, 3) and incident(4)(3, 3) and not incident(4)(8, 0) and not incident(4)(3, 8)


def test_edge_slots_default_and_limits():
    assert [max_edges(_p(n=n)) for n in (2, 5, 9, 10, 32)] == [1, 10, 36, 40, 128]
    assert seq_len(_p(n=32)) == 32 + 128 + 3
    assert max_edges(_p(n=6, max_edges=3)) == 3
    with pytest.raises(ParameterError, match="max_edges=11 is more than the C\\(n,2\\) = 10"):
        _p(n=5, max_edges=11)
    with pytest.raises(ParameterError, match="n=1 is below the minimum 2"):
        _p(n=1)


def test_example_of_the_docs():
    p = _p(n=4)
    x = TASK.parse_tokens(p, "2 0 3 1 0-1 _ 2-3 1-2 ? 0 3")
    assert x == [2, 0, 3, 1, 4, 11, 9, 7, 10, 0, 3]
    out, scored = TASK.reference(p, np.array([x]))
    assert out[0].tolist() == [-1] * 10 + [1] and scored[0].tolist() == [False] * 10 + [True]
    assert TASK.format_tokens(p, x) == "2 0 3 1 0-1 _ 2-3 1-2 ? 0 3"


# --------------------------------------------------------------------------------------- reference


def test_reference_by_hand():
    n = 5
    p = _p(n=n)
    v = list(range(n))
    cases = [
        (encode(n, v, [(0, 1), (1, 2), (2, 3), (3, 4)], 0, 4), 1),  # the path, end to end
        (encode(n, v, [(0, 1), (1, 2), (3, 4)], 0, 4), 0),  # cut between 2 and 3
        (encode(n, v, [(0, 1), (1, 2), (3, 4)], 4, 3), 1),
        (encode(n, v, [], 2, 2), 1),  # s = t is reachable, even without edges
        (encode(n, v, [], 2, 3), 0),
        (encode(n, v[::-1], [(4, 0)], 0, 4, slots=10), 1),  # fillers do not matter
        (encode(n, v, [(0, 1), (0, 2), (1, 2)], 0, 3), 0),  # a triangle without 3
    ]
    for x, want in cases:
        out, _ = TASK.reference(p, np.array([x]))
        assert out[0, -1] == want, x


def test_bfs_distances_are_shortest_path_lengths():
    adj = np.zeros((2, 5, 5), bool)
    for a, b in [(0, 1), (1, 2), (2, 3), (3, 4)]:
        adj[0, a, b] = adj[0, b, a] = True
    for a, b in [(0, 1), (1, 2), (2, 0)]:
        adj[1, a, b] = adj[1, b, a] = True
    assert bfs_distances(adj, np.array([0, 2])).tolist() == [[0, 1, 2, 3, 4], [1, 1, 0, -1, -1]]


def test_reference_agrees_with_networkx_on_samples():
    for n in (2, 3, 7, 12):
        p = _p(n=n)
        x = TASK.sample(p, np.random.default_rng(n), 300)
        out, _ = TASK.reference(p, x)
        want = [int(nx.has_path(_graph(row, n), int(row[-2]), int(row[-1]))) for row in x.tolist()]
        assert out[:, -1].tolist() == want


# ---------------------------------------------------------------------------------------- samplers


@pytest.mark.parametrize("n", [2, 3, 6, 16, 32])
@pytest.mark.parametrize("family", FAMILIES)
def test_sampler_families(family, n):
    p = _p(n=n, sampler=family)
    x = TASK.sample(p, np.random.default_rng(7), 200)
    assert x.shape == (200, seq_len(p))
    TASK.check_inputs(p, x)  # every sample follows the layout
    graphs = [_graph(row, n) for row in x.tolist()]
    comps = [nx.number_connected_components(g) for g in graphs]
    edges = [g.number_of_edges() for g in graphs]
    if family == "path":
        assert all(e == n - 1 and c == 1 and max(d for _, d in g.degree()) <= 2 for g, e, c in zip(graphs, edges, comps))
        # Half the queries are a far pair: the two ends of the path (distance n - 1, the tight case).
        far = [nx.shortest_path_length(g, int(r[-2]), int(r[-1])) == n - 1 for g, r in zip(graphs, x.tolist())]
        assert 0.3 < np.mean(far) < 0.8
    elif family == "cycle":
        assert all(c == 1 and e == (n if n >= 3 else 1) for e, c in zip(edges, comps))
        if n >= 3:
            assert all(all(d == 2 for _, d in g.degree()) for g in graphs)
    elif family == "tree":
        assert all(e == n - 1 and c == 1 for e, c in zip(edges, comps))
    elif family == "two_components":
        assert all(c == 2 and e == n - 2 for e, c in zip(edges, comps))
        out, _ = TASK.reference(p, x)
        assert 0.2 < out[:, -1].mean() < 0.95  # both answers occur
    else:  # er, around p = ln n / n
        assert max(edges) <= max_edges(p)
        if n >= 16:
            expected = (n - 1) / 2 * math.log(n)  # c = 1 on average
            assert 0.7 * expected < np.mean(edges) < 1.3 * expected


def test_mix_draws_every_family():
    n = 8
    x = TASK.sample(_p(n=n), np.random.default_rng(0), 400)
    kinds = set()
    for row in x.tolist():
        g = _graph(row, n)
        c, e = nx.number_connected_components(g), g.number_of_edges()
        degrees = sorted(d for _, d in g.degree())
        if c == 1 and e == n - 1 and degrees.count(1) == 2 and degrees.count(2) == n - 2:
            kinds.add("path")
        elif c == 1 and e == n and all(d == 2 for d in degrees):
            kinds.add("cycle")
        elif c == 2 and e == n - 2:
            kinds.add("two")
        elif c == 1 and e == n - 1:
            kinds.add("tree")
    assert kinds == {"path", "cycle", "two", "tree"}


def test_exhaustive_enumerates_every_graph_and_pair():
    total, batches = TASK.exhaustive(_p(n=3))
    rows = [r.tolist() for b in batches for r in b]
    assert total == len(rows) == 8 * 9
    assert len({tuple(r) for r in rows}) == total
    assert TASK.exhaustive(_p(n=5))[0] == 1024 * 25
    assert TASK.exhaustive(_p(n=5, max_edges=2))[0] == (1 + 10 + 45) * 25
    with pytest.raises(ParameterError, match="2097152 graphs x 49 query pairs"):
        TASK.exhaustive(_p(n=7))


def test_edge_cases_follow_the_layout_and_include_the_tight_ones():
    for n in (2, 5, 11):
        p = _p(n=n)
        groups = TASK.edge_cases(p)
        rows = [r for g in groups for r in TASK.check_inputs(p, g).tolist()]
        answers = [int(a) for g in groups for a in TASK.reference(p, g)[0][:, -1]]
        assert 0 in answers and 1 in answers
        path = encode(n, list(range(n)), [(i, i + 1) for i in range(n - 1)], 0, n - 1)
        assert path in rows


# -------------------------------------------------------------------------------------- validation


@pytest.mark.parametrize("text, fragment", [
    ("0 1 2 ? 0", "length 6..9, got length 5"),
    ("0 1 2 0-1 1-2 0-2 _ ? 0 2", "length 6..9, got length 10"),
    ("0 0 2 0-1 ? 0 2", "lists vertex 0 twice in the vertex block (positions 1..3) and misses 1"),
    ("0 1 0-1 0-1 ? 0 2", "has '0-1' at position 3; the first 3 positions are the vertex block"),
    ("0 1 2 0-1 0-1 ? 0 2", "lists the edge 0-1 twice (positions 4 and 5)"),
    ("0 1 2 1 ? 0 2", "has '1' at position 4, in the edge block"),
    ("0 1 2 ? ? 0 2", "has '?' at position 4, in the edge block"),
    ("0 1 2 0-1 _ 0 2", "has '_' at position 5, where ? belongs"),
    ("0 1 2 0-1 ? _ 2", "has '_' at position 6; the query ? s t needs two vertices 0..2"),
    ("0 1 2 0-1 ? 0 3", "token '3' at position 7 is not in the vocabulary"),
])
@pytest.mark.parametrize("command", ["run", "show"])
def test_malformed_inputs_are_refused_with_one_line(command, text, fragment, capsys):
    with pytest.raises(SystemExit) as e:
        main([command, "graph_connectivity", "-p", "n=3", "--input", text])
    out, err = capsys.readouterr()
    assert e.value.code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("depthcraft: error: ") and fragment in err, err


def test_reference_names_the_first_bad_row():
    p = _p(n=3)
    good = encode(3, [0, 1, 2], [(0, 1), (1, 2)], 0, 2)
    with pytest.raises(InputError, match=re.escape("input 1 lists the edge 0-1 twice")):
        TASK.reference(p, np.array([good, encode(3, [0, 1, 2], [(0, 1), (1, 0)], 0, 2)]))
    with pytest.raises(InputError, match="token id 99 at position 2"):
        TASK.reference(p, np.array([[0, 99, 2, 6, 0, 1]]))


def test_run_prints_the_answer(capsys):
    with pytest.raises(SystemExit) as e:
        main(["run", "graph_connectivity", "-p", "n=4", "--input", "2 0 3 1 0-1 _ 2-3 1-2 ? 0 3"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and "exact" in out


# ----------------------------------------------------------------------------- union and meet heads


def _union_program(attention):
    # Tokens 0..2 are "vertices", 3 = {0, 1}, 4 = {1, 2}; query v attends to v's own token and every pair with v.
    ends = {0: {0}, 1: {1}, 2: {2}, 3: {0, 1}, 4: {1, 2}}
    fn = lambda t: frozenset(ends[t])  # noqa: E731
    pred = lambda k, q: q in (0, 1, 2) and q in ends[k]  # noqa: E731
    r1 = union(rasp.tokens, rasp.tokens, [Read(rasp.tokens, fn=fn, name="r1")], predicate=pred, name="u1",
               attention=attention)[0]
    r2 = union(r1, rasp.tokens, [Read(r1, name="r2")], name="u2", attention=attention)[0]
    return r1, r2


def test_union_head_reads_the_union_of_the_matching_keys_sets():
    x = [0, 1, 2, 3, 4, 0]  # path 0-1-2 as vertices and edges; the last 0 is a second copy of vertex 0
    want1 = [{0, 1}, {0, 1, 2}, {1, 2}, set(), set(), {0, 1}]
    want2 = [{0, 1, 2}] * 3 + [set(), set(), {0, 1, 2}]
    r1, r2 = _union_program("softmax")
    assert [set(v) for v in evaluate(r1, x)] == want1
    assert [set(v) for v in evaluate(r2, x)] == want2
    for attention in ("softmax", "relu"):
        for prog, want in zip(_union_program(attention), (want1, want2)):
            model = compile_program(prog, vocab=range(5), max_seq_len=6, causal=False, attention=attention)
            got = model.forward_ids(model.encode(np.array([x])))
            vec = np.asarray(got.logits)[0, 1:]  # one column per element (model.output_values)
            sets = [{v for v, val in zip(model.output_values, row) if abs(val - 1) < 1e-4} for row in vec]
            assert sets == want, attention
            assert np.all((np.abs(vec) < 1e-4) | (np.abs(vec - 1) < 1e-4))  # exactly 0/1 after the threshold


def test_meet_is_one_when_the_sets_share_an_element():
    fn = lambda t: frozenset({t, (t + 1) % 4})  # noqa: E731
    a = union(rasp.tokens, rasp.tokens, [Read(rasp.tokens, fn=fn, name="a")], name="ua")[0]  # {x_i, x_i + 1}
    b = prev_token(Read(a, name="b"), name="copy")  # the previous position's set
    out = meet(a, b, name="m")
    for x in ([0, 1, 3, 1, 2], [0, 2, 0, 2, 3]):
        want = [0] + [int(bool({x[i], (x[i] + 1) % 4} & {x[i - 1], (x[i - 1] + 1) % 4})) for i in range(1, len(x))]
        assert evaluate(out, x) == want
        model = compile_program(out, vocab=range(4), max_seq_len=5, causal=False)
        assert model.run(np.array([x]), none_value=None)[0].tolist() == want


def test_union_refuses_what_it_cannot_compile():
    r1 = union(rasp.tokens, rasp.tokens, [Read(rasp.tokens, fn=lambda t: frozenset({t}), name="r")], name="u")[0]
    two = union(r1, rasp.tokens, [rasp.tokens], predicate=lambda k, q: abs(k - q) <= 1, name="u2")[0]
    with pytest.raises(CompileError, match="satisfies the predicate for several elements"):
        compile_program(two, vocab=range(3), max_seq_len=4, causal=False)
    with pytest.raises(CompileError, match="hardness 5 is below ln\\(4N\\(N\\+1\\)\\)"):
        compile_program(union(rasp.tokens, rasp.tokens, [rasp.tokens], hardness=5.0, name="u3")[0],
                        vocab=range(3), max_seq_len=40, causal=False)
    with pytest.raises(CompileError, match="the key must be a single value per position"):
        union(rasp.tokens, r1, [rasp.tokens])
    with pytest.raises(CompileError, match="union is bidirectional"):
        compile_program(r1, vocab=range(3), max_seq_len=4, causal=True)
    with pytest.raises(CompileError, match="is not one"):
        meet(r1, rasp.tokens)


# ------------------------------------------------------------------------------------ construction


def test_layer_count_formula():
    for n in range(2, 65):
        assert connectivity_layers(n) == max(2, math.ceil(math.log2(n - 1)) + 1)
        assert log_depth(n) == (0 if n == 2 else math.ceil(math.log2(n - 1)))
    assert [connectivity_layers(n) for n in (2, 3, 4, 5, 6, 9, 10, 17, 32, 33)] == [2, 2, 3, 3, 4, 4, 5, 5, 6, 6]


def test_program_semantics_match_reference_exhaustively_n4():
    n = 4
    p = _p(n=n)
    prog = graph_connectivity(n)
    _, batches = TASK.exhaustive(p)
    for batch in batches:
        want = TASK.reference(p, batch)[0][:, -1]
        for row, w in list(zip(batch.tolist(), want))[::7]:
            assert evaluate(prog, row)[-1] == w


@pytest.mark.parametrize("n", [2, 3, 4, 5])
def test_exhaustive_exact(n):
    from depthcraft.verify.verifier import verify

    r = verify("graph_connectivity", {"n": n}, samples=200, exhaustive=True, hypothesis_examples=20)
    assert r["passed"], r["counterexample"]
    assert r["checks"]["exhaustive"]["inputs"] == 2 ** num_pairs(n) * n * n
    assert r["structure"]["attn_layers"] == connectivity_layers(n) and r["structure"]["heads"] == 1
    assert r["min_margin"]["attention"] > 0.999 and r["min_margin"]["output_gap"] >= 0.49


def test_cli_verify_json(tmp_path):
    out = tmp_path / "out.json"
    with pytest.raises(SystemExit) as e:
        main(["verify", "graph_connectivity", "-p", "n=6", "-p", "sampler=path", "--samples", "100",
              "--hypothesis", "10", "--json", str(out)])
    assert e.value.code == 0
    r = json.loads(out.read_text())["results"][0]
    assert r["passed"] and r["structure"]["attn_layers"] == 4 == r["bound"]["attn_layers"]
    assert r["params"] == {"n": 6, "max_edges": 0, "sampler": "path"}


@pytest.mark.slow
@pytest.mark.parametrize("n", [8, 16, 17, 32])
def test_verified_on_every_sampler(n):
    from depthcraft.verify.verifier import verify

    for sampler in ("path", "cycle", "two_components", "tree", "er"):
        r = verify("graph_connectivity", {"n": n, "sampler": sampler}, samples=100, hypothesis_examples=10)
        assert r["passed"], (sampler, r["counterexample"])
        assert r["structure"]["attn_layers"] == connectivity_layers(n)


# --------------------------------------------------------------------------------- training preset


@pytest.mark.parametrize("n", [8, 9, 16])
def test_paths_sampler_is_two_long_paths_queried_at_their_ends(n):
    p = _p(n=n, max_edges=16, sampler="paths")
    x = TASK.sample(p, np.random.default_rng(3), 300)
    assert x.shape == (300, n + 16 + 3)
    out, _ = TASK.reference(p, x)
    h = n // 2
    for row, y in zip(x.tolist(), out[:, -1]):
        g = _graph(row, n)  # networkx, not the task's BFS
        s, t = row[-2], row[-1]
        assert y == nx.has_path(g, s, t)
        parts = sorted(len(c) for c in nx.connected_components(g))
        assert parts == [h, n - h] and nx.is_forest(g) and max(d for _, d in g.degree()) <= 2
        assert g.degree(s) == g.degree(t) == 1 and s != t
        if y:
            assert nx.shortest_path_length(g, s, t) in (h - 1, n - h - 1)  # the whole part
    assert 0.4 < out[:, -1].mean() < 0.6
    with pytest.raises(ParameterError, match="needs max_edges >= n - 2 = 6"):
        TASK.sample(_p(n=8, max_edges=5, sampler="paths"), np.random.default_rng(0), 2)
    with pytest.raises(ParameterError, match="needs n >= 4"):
        TASK.sample(_p(n=3, sampler="paths"), np.random.default_rng(0), 2)


def _shortcut_rules(n, x):
    """Cheap rules a model could use instead of connectivity: name -> [b] 0/1 predictions of ``x``.

    Computed from the decoded graph with numpy only; none follows a path farther than n // 4 hops.
    """
    adj = decode_edges(n, x)
    b = len(x)
    rows = np.arange(b)
    s, t = x[:, -2], x[:, -1]
    deg = adj.sum(axis=2)
    edges = adj.sum(axis=(1, 2)) // 2
    ds, dt = bfs_distances(adj, s), bfs_distances(adj, t)
    leaf_s, leaf_t = deg[rows, s] == 1, deg[rows, t] == 1
    end_s, end_t = deg[rows, s] <= 1, deg[rows, t] <= 1
    r = n // 4
    near_s = (ds >= 0) & (ds <= r)
    near_t = (dt >= 0) & (dt <= r)
    leaves = deg == 1
    others = leaves.copy()
    others[rows, s] = others[rows, t] = False
    # A leaf within r hops of s or t, other than s and t: that component is seen whole, without the other.
    s_closed = (near_s & others).any(axis=1)
    t_closed = (near_t & others).any(axis=1)
    # The two other leaves within r hops of each other (each component of a forest of two paths has two leaves).
    first = np.argmax(others, axis=1)
    d_first = bfs_distances(adj, first)
    second = others.copy()
    second[rows, first] = False
    others_meet = (second & (d_first >= 0) & (d_first <= r)).any(axis=1)
    meet = near_s[rows, t]
    local = np.where(meet | others_meet, 1, np.where(s_closed | t_closed, 0, 1))
    return {
        "old shortcut: n-1 edges yes, else s != t both path ends (degree <= 1) no, else yes":
            np.where(edges == n - 1, 1, np.where(end_s & end_t & (s != t), 0, 1)),
        "n-1 edges yes, else s != t both leaves no, else yes":
            np.where(edges == n - 1, 1, np.where(leaf_s & leaf_t & (s != t), 0, 1)),
        "n-1 edges": (edges == n - 1).astype(int),
        "n-2 edges": (edges == n - 2).astype(int),
        "s and t leaves": (leaf_s & leaf_t).astype(int),
        "s or t isolated -> no": np.where((deg[rows, s] == 0) | (deg[rows, t] == 0), 0, 1),
        "deg s + deg t >= 3": (deg[rows, s] + deg[rows, t] >= 3).astype(int),
        "s = t": (s == t).astype(int),
        "s-t an edge": adj[rows, s, t].astype(int),
        "common neighbour": (adj[rows, s] & adj[rows, t]).any(axis=1).astype(int),
        "within n/4 hops": meet.astype(int),
        "leaves within n/4 hops": local,
    }


@pytest.mark.parametrize("n", [8, 16])
def test_paths_sampler_has_no_local_shortcut(n):
    """No cheap rule (edge count, degrees, s = t, a few hops) beats chance by more than 0.1 on `paths`.

    The old sampler (a path cut half of the time, its ends queried 3/4 of the time) failed this: its
    first rule erred on 3.9% (n = 8) and 4.4% (n = 16), below the 0.05 'learned' threshold of claim C7.
    """
    p = _p(n=n, max_edges=16, sampler="paths")
    x = TASK.sample(p, np.random.default_rng(11), 4000)
    y = TASK.reference(p, x)[0][:, -1]
    errors = {name: float(np.mean(pred != y)) for name, pred in _shortcut_rules(n, x).items()}
    informative = {name: e for name, e in errors.items() if min(e, 1 - e) < 0.4}
    assert not informative, informative


def test_cpu_training_preset_builds_its_sweep():
    from depthcraft.verify.crosscheck import sweep
    from depthcraft.verify.crosscheck.presets import get_preset

    cfg = sweep.make_config(get_preset("connectivity", "cpu"))
    assert [c["n"] for c in cfg.conditions] == [8, 16] and cfg.model.causal is False
    assert all(c["sampler"] == "paths" and c["max_edges"] == 16 for c in cfg.conditions)
    assert cfg.depths == (2, 3, 4, 5) and cfg.control and cfg.seeds == 3
    runs = sweep.plan(cfg, [connectivity_layers(8), connectivity_layers(16)])
    assert len(runs) == 4 * 2 * 3 + 2 * 3  # depths x conditions x seeds, then a control at bound-1 per condition
    controls = [r for r in runs if r.control]
    assert [r.model.depth for r in controls] == [3, 3, 3, 4, 4, 4] and {r.model.width for r in controls} == {128}


@pytest.mark.slow
def test_cli_tiny_training_run(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as e:
        main(["train", "connectivity", "-p", "n=4", "-p", "max_edges=4", "--depths", "1-2", "--steps", "3",
              "--width", "16", "--heads", "2", "--seeds", "1", "--eval-size", "64", "--alignment-size", "8",
              "--no-control", "--out", str(out)])
    assert e.value.code == 0
    r = json.loads((out / "results.json").read_text())
    assert r["complete"] and r["task"] == "connectivity" and [run["depth"] for run in r["runs"]] == [1, 2]
    s = r["summary"][0]
    assert s["construction_depth"] == connectivity_layers(4) == 3


# ------------------------------------------------------------------------------------------- docgen


def _report(n, sampler, layers, passed=True, exhaustive=None):
    bound = connectivity_layers(n)
    return {"construction": "graph_connectivity", "params": {"n": n, "max_edges": 0, "sampler": sampler},
            "structure": {"attn_layers": layers, "heads": 1, "mlp_layers": layers, "d_model": 10 * n},
            "bound_checks": {"attn_layers": {"measured": layers, "bound": bound, "kind": "upper",
                                             "gap": bound - layers, "ok": layers <= bound}},
            "checks": {"random": {"inputs": 100}, "edge": {"inputs": 10}, "hypothesis": {"inputs": 5},
                       "exhaustive": None if exhaustive is None else {"inputs": exhaustive}},
            "min_margin": {"attention": 0.9999, "output_gap": 0.5}, "passed": passed, "exact": passed}


def test_docgen_connectivity_tables(tmp_path):
    from tools import docgen

    folder = tmp_path / "results" / "graph_connectivity"
    folder.mkdir(parents=True)
    sweep = [_report(n, s, connectivity_layers(n)) for n in (2, 3, 5) for s in FAMILIES]
    sweep[-1] = _report(5, "er", 3, passed=False)
    (folder / "n2-16.json").write_text(json.dumps({"results": sweep}))
    (folder / "exhaustive_n2-5.json").write_text(json.dumps({"results": [_report(5, "mix", 3, exhaustive=25600)]}))
    text = docgen.render_connectivity(tmp_path)
    rows = [line for line in text.splitlines() if line.startswith("| 5 ")]
    # n = 5: L 3, log 2, c 1, bound 3, H 1, 3 MLP layers, d_model 50, one sampler failing, exhaustive, inputs
    assert rows == ["| 5 | 3 | 2 | 1 | 3 | 1 | 3 | 50 | 4/5 (fails: er) | 25,600 exact | 26,290 | 0.999900 | 0.500 |"]
    assert "| 2 | 2 | 0 | 2 | 2 | 1 | 2 | 20 | 5/5 | — | 575 |" in text
    claims = docgen.render_theorems_connectivity(tmp_path)
    assert claims.count("**differs**") == 2  # one failing report: neither the theorem nor the construction row
    line = docgen._connectivity_line(tmp_path)
    assert line.startswith("n = 2-3, 5: L = 2, 2, 3 (= ceil(log2(n-1)) + c, c = 1-2; within the registered bound")
    assert line.endswith("H = 1; d_model 20..50; 15/16 pass; exhaustive for n = 5")


def test_docgen_connectivity_reads_every_chunk_in_order_of_n(tmp_path):
    """Every results/graph_connectivity/nA-B.json chunk is read, ordered by its first n (n3 before n10)."""
    from tools import docgen

    folder = tmp_path / "results" / "graph_connectivity"
    folder.mkdir(parents=True)
    for name, ns in (("n10-11.json", (10, 11)), ("n2-3.json", (2, 3)), ("n6.json", (6,))):
        (folder / name).write_text(json.dumps({"results": [_report(n, "path", connectivity_layers(n)) for n in ns]}))
    (folder / "exhaustive_n2-5.json").write_text(json.dumps({"results": [_report(3, "mix", 2, exhaustive=64)]}))
    assert docgen._connectivity_files(tmp_path) == [f"results/graph_connectivity/{name}"
                                                    for name in ("n2-3.json", "n6.json", "n10-11.json")]
    assert docgen._connectivity_line(tmp_path).startswith("n = 2-3, 6, 10-11: ")


def test_declared_domain_is_the_format():
    """issue 30 item 5: the task's domain is its format; samples and edge cases are in it, a vertex
    listed twice or a repeated edge is not (what a certificate may never claim)."""
    task = TASK
    p = task.resolve({"n": 5})
    x = task.sample(p, np.random.default_rng(0), 30)
    assert task.in_domain(p, x).all() and all(task.in_domain(p, g).all() for g in task.edge_cases(p))
    y = x.copy()
    y[:, 0] = y[:, 1]  # a vertex twice in the vertex block
    assert not task.in_domain(p, y).any()
    assert "no edge twice" in task.domain(p)
