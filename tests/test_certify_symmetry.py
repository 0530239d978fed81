"""The symmetry route (verify/certify/symmetry.py): orbits of renamings, one bounded forward per representative.

What is checked here, each from a definition rather than from the code under test:

* the premise the route does not check itself: the retrieval task's orbits cover its domain
  exactly (the closure of the representatives under the generators, computed here by brute force,
  equals the set of every in-domain token sequence of every length, enumerated here);
* soundness: every certified model (the tripling construction, and perturbed copies of it) is
  exact on every input of that enumerated domain, at every position, against the RASP program;
* must fail: weights that are wrong on the domain, weights that break the symmetry, programs whose
  nodes do not commute (a term on an absolute position, a Map that singles out a symbol), causal
  models with position generators: none is certified;
* the report: the route is tried first, its scope names the orbits and the proof, and where it
  fails the tables route runs as before.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
from tracr.rasp import rasp

from depthcraft.constructions.compiler import compile_program
from depthcraft.constructions.primitives import POSITION, Read, scored_lookup
from depthcraft.constructions.reference import Evaluator
from depthcraft.rasp_programs.retrieval import BOT, num_symbols, query_token
from depthcraft.verify import lookup
from depthcraft.verify.certify import certify
from depthcraft.verify.certify.symmetry import Generator, Orbit, Symmetry, certify_by_symmetry
from depthcraft.verify.tasks import get_task

TASK = get_task("retrieval")


def P(d, c, symbols=0):
    return {"d": d, "distractors": c, "symbols": symbols, "hops": 0}


def every_domain_input(p):
    """Every in-domain input of every length 2..N (tuples), by enumerating all token sequences."""
    s, q, n = num_symbols(p), query_token(p), TASK.max_seq_len(p)
    out = set()
    for length in range(2, n + 1, 2):
        body = np.array(list(itertools.product(range(s), repeat=length - 1)), np.int64).reshape(-1, length - 1)
        xs = np.concatenate([body[:, :-1], np.full((len(body), 1), q), body[:, -1:]], 1)
        out |= {tuple(r) for r in xs[TASK.in_domain(p, xs)].tolist()}
    return out


def act(g: Generator, x):
    y = [None] * len(x)
    for i, v in enumerate(x, start=1):
        y[g.positions[i] - 1] = g.sigma(v)
    return tuple(y)


def closure(sym: Symmetry):
    seen = set()
    for orbit in sym.orbits():
        todo = [tuple(orbit.tokens)]
        while todo:
            x = todo.pop()
            if x in seen:
                continue
            seen.add(x)
            todo += [act(sym.generators[i], x) for i in orbit.generators]
    return seen


SMALL = [P(1, 1), P(1, 2), P(2, 0), P(3, 0), P(1, 1, symbols=5)]


@pytest.mark.parametrize("p", SMALL, ids=str)
def test_the_orbits_are_the_domain(p):
    """The representatives' orbits under their generators are exactly the domain (brute force)."""
    dom = every_domain_input(p)
    assert len(dom) > 0
    assert closure(TASK.domain_precondition(p).symmetry) == dom


@pytest.fixture(scope="module")
def d1c2():
    p = P(1, 2)
    xs = sorted(every_domain_input(p), key=lambda x: (len(x), x))
    return p, xs


_WANT = {}


def exact_on(model, xs):
    """Whether the model's output equals the RASP program at every position of every input (grouped by
    length; the program's values are computed once per program and input)."""
    sink = model.program.nodes[model.program.sink]
    for length in sorted({len(x) for x in xs}):
        group = [x for x in xs if len(x) == length]
        out = model.run(np.array(group), none_value=None)
        for x, o in zip(group, out):
            key = (model.program.sink, x)
            if key not in _WANT:
                _WANT[key] = list(Evaluator().evaluate(sink, list(x)))
            if _WANT[key] != list(o):
                return False, x
    return True, None


def test_tripling_is_certified_and_exact_on_every_domain_input(d1c2):
    p, xs = d1c2
    model = lookup.resolve("retrieval_tripling", p).build()
    res = certify_by_symmetry(model, TASK.domain_precondition(p).symmetry, TASK.domain(p))
    assert res["certified"] is True, res["why"]
    assert res["orbits"] == 4  # F = 1, 2 (a 1-fact chain), 3 (1 + 1, or one 2-fact chain)
    ok, bad = exact_on(model, xs)
    assert ok, bad
    answers = model.run(np.array([x for x in xs if len(x) == 8]), none_value=BOT)[:, -1]
    assert (answers == TASK.reference(p, np.array([x for x in xs if len(x) == 8]))[0][:, -1]).all()


@pytest.mark.parametrize("d", [5, 7])
def test_the_verify_rows_are_certified_on_the_domain(d):
    """retrieval_tripling d = 5 and d = 7 (2 distractors): certified over the whole domain through certify()."""
    p = P(d, 2)
    model = lookup.resolve("retrieval_tripling", p).build()
    cert = certify(model, domain=TASK.domain(p), precondition=TASK.domain_precondition(p))
    assert cert["certified"] is True, cert.get("symmetry")
    assert cert["method"] == "symmetry"
    assert cert["domain"]["used_as_precondition"] is True
    assert cert["domain"]["uses"] == [{"layer": None, "head": None, "fact": "symmetry"}]
    assert "Proved by symmetry" in cert["scope"] and "inputs outside the domain are not covered" in cert["scope"]
    assert cert["without_domain"].startswith("not tried")
    assert certify(model, domain=TASK.domain(p))["certified"] is False  # the tables route alone does not
    assert cert["symmetry"]["orbits"] == {5: 76, 7: 230}[d]


def _copy(model):
    params = {**model.params, "layers": [dict(lp) for lp in model.params["layers"]],
              "embed": dict(model.params["embed"]), "unembed": dict(model.params["unembed"])}
    for lp in params["layers"]:
        for k in lp:
            lp[k] = np.array(lp[k])
    return dataclasses.replace(model, params=params)


def _row(model, label_prefix):
    return [i for i, lab in enumerate(model.residual_labels) if lab.startswith(label_prefix)]


def test_a_fetch_without_its_f_name_is_not_certified_and_is_wrong(d1c2):
    """attn 2's W_Q rows of FR1 zeroed (the fetch loses its F-link term): wrong on domain inputs, and
    the symmetry route names a representative where the bounded forward fails."""
    p, xs = d1c2
    model = _copy(lookup.resolve("retrieval_tripling", p).build())
    spec = model.arch.sublayers[2]
    rows = [spec.q_rows.index(r) for r in _row(model, "FR1") if r in spec.q_rows]
    assert rows
    model.params["layers"][2]["w_q"][:, rows, :] = 0.0
    res = certify_by_symmetry(model, TASK.domain_precondition(p).symmetry, TASK.domain(p))
    assert res["certified"] is False
    ok, _ = exact_on(model, xs)
    assert not ok
    wit = res["witness"]["input"]
    assert not exact_on(model, [tuple(wit)])[0]


def test_weights_that_break_the_symmetry_are_not_certified(d1c2):
    """One entry of the position embedding changed (position 3 reads a second index): not equivariant."""
    p, _ = d1c2
    model = _copy(lookup.resolve("retrieval_tripling", p).build())
    pos = np.array(model.params["embed"]["pos"])
    pos[3, _row(model, "indices:0")[0]] = 0.5
    model.params["embed"]["pos"] = pos
    res = certify_by_symmetry(model, TASK.domain_precondition(p).symmetry, TASK.domain(p))
    assert res["certified"] is False
    assert "position embedding does not commute" in res["why"]


def _campaign(d1c2, prove, seed, trials=40):
    """``trials`` single-entry perturbations of the tripling weights (scaled by 0.5, 0.9, 1.1 or set to 1):
    every model ``prove`` certifies is exact on every domain input; the campaign makes wrong models and
    certifies some. The default run tries 40 per route; the ``slow`` run 120 more from other seeds."""
    p, xs = d1c2
    base = lookup.resolve("retrieval_tripling", p).build()
    rng = np.random.default_rng(seed)
    certified = wrong = 0
    for trial in range(trials):
        model = _copy(base)
        li = int(rng.integers(len(model.params["layers"])))
        key = sorted(k for k in model.params["layers"][li] if k.startswith("w_"))[int(rng.integers(2))]
        w = model.params["layers"][li][key]
        nz = np.argwhere(w != 0)
        idx = tuple(nz[int(rng.integers(len(nz)))]) if trial % 4 else tuple(int(rng.integers(s)) for s in w.shape)
        w[idx] = (w[idx] * (0.5, 0.9, 1.1)[trial % 3]) if trial % 4 else 1.0
        res = prove(model)
        ok, bad = exact_on(model, xs)
        certified += res["certified"]
        wrong += not ok
        assert not (res["certified"] and not ok), (trial, li, key, idx, bad)
    assert wrong > 0 and certified > 0


def test_perturbed_models_are_certified_only_where_exact(d1c2):
    """Soundness of the orbit route under perturbation (:func:`_campaign`)."""
    p, _ = d1c2
    sym = TASK.domain_precondition(p).symmetry
    _campaign(d1c2, lambda m: certify_by_symmetry(m, sym, TASK.domain(p)), 0)


@pytest.mark.slow
def test_perturbed_models_are_certified_only_where_exact_long_campaign(d1c2):
    """:func:`_campaign` of the orbit route, 120 more perturbations."""
    p, _ = d1c2
    sym = TASK.domain_precondition(p).symmetry
    _campaign(d1c2, lambda m: certify_by_symmetry(m, sym, TASK.domain(p)), 10, trials=120)


def test_a_term_on_an_absolute_position_is_refused():
    """A scored_lookup whose score singles out model position 3 is not invariant under the slot swaps."""
    p = P(1, 1)
    head = scored_lookup([(POSITION, POSITION, lambda i, j: 2.0 * (j == 3) + 1.0 * (i == j))],
                         [Read(rasp.tokens, name="got")], bos_score=0.0, name="abs")
    model = compile_program(head[0], vocab=TASK.vocab(p), max_seq_len=TASK.max_seq_len(p), causal=False)
    res = certify_by_symmetry(model, TASK.domain_precondition(p).symmetry, TASK.domain(p))
    assert res["certified"] is False
    assert "not invariant" in res["why"]


def test_a_map_that_singles_out_a_symbol_is_refused():
    """tokens -> (t if t < 2 else None) commutes with no action of Sym(symbols): refused, naming the Map."""
    p = P(1, 1)
    sop = rasp.categorical(rasp.Map(lambda t: t if t < 2 else None, rasp.tokens)).named("low")
    model = compile_program(sop, vocab=TASK.vocab(p), max_seq_len=TASK.max_seq_len(p), causal=False)
    res = certify_by_symmetry(model, TASK.domain_precondition(p).symmetry, TASK.domain(p))
    assert res["certified"] is False
    assert res["why"].startswith("low") and "commutes with the group under no action" in res["why"]


def test_a_causal_model_with_position_generators_is_refused():
    p = P(1, 1)
    sop = rasp.categorical(rasp.Map(lambda t: t, rasp.tokens)).named("same")
    model = compile_program(sop, vocab=TASK.vocab(p), max_seq_len=TASK.max_seq_len(p), causal=True)
    res = certify_by_symmetry(model, TASK.domain_precondition(p).symmetry, TASK.domain(p))
    assert res["certified"] is False
    assert "causal" in res["why"]


def test_a_tie_the_program_breaks_by_position_is_refused():
    """scored_lookup breaks ties by position (the latest key), which renaming positions does not
    preserve: a head whose best score ties keys that read different tokens is refused."""
    p = P(1, 1)
    head = scored_lookup([(POSITION, POSITION, lambda i, j: 1.0 * (i != j))],
                         [Read(rasp.tokens, name="any")], bos_score=0.0, name="tie")
    model = compile_program(head[0], vocab=TASK.vocab(p), max_seq_len=TASK.max_seq_len(p), causal=False)
    sym = TASK.domain_precondition(p).symmetry
    res = certify_by_symmetry(model, sym, TASK.domain(p))
    assert res["certified"] is False
    assert "tied" in res["why"] or "different values" in res["why"]


def test_where_the_symmetry_route_fails_the_tables_route_runs():
    """A model the symmetry route refuses (a Map singling out a symbol) is still analysed by the tables
    route with the rest of the precondition; the report says why the symmetry route did not prove it."""
    p = P(1, 1)
    sop = rasp.categorical(rasp.Map(lambda t: t if t < 2 else None, rasp.tokens)).named("low")
    model = compile_program(sop, vocab=TASK.vocab(p), max_seq_len=TASK.max_seq_len(p), causal=False)
    cert = certify(model, domain=TASK.domain(p), precondition=TASK.domain_precondition(p))
    assert cert["symmetry"]["certified"] is False
    assert cert["certified"] is True  # one MLP: the tables route proves it for every input
    assert "method" not in cert


def test_a_declared_orbit_outside_the_program_semantics_fails_at_the_read_out():
    """A hand-made Symmetry whose representative the model decodes differently from the program (a
    model with its read-out columns of two symbols swapped) is refused with that representative."""
    p = P(1, 1)
    model = _copy(lookup.resolve("retrieval_tripling", p).build())
    u = np.array(model.params["unembed"]["w"])
    u[:, [0, 1]] = u[:, [1, 0]]
    model.params["unembed"]["w"] = u
    ident = Generator((), tuple(range(TASK.max_seq_len(p) + 1)))
    sym = Symmetry("trivial", (ident,), lambda: [Orbit((1, 0, 4, 1), (0,), "one input")], "this test", lambda: 1)
    res = certify_by_symmetry(model, sym, "one input")
    assert res["certified"] is False
    assert res["layer"] == "read-out" and "decodes to" in res["why"]
    assert res["witness"]["input"] == [1, 0, 4, 1]


@pytest.mark.parametrize("d,c", [(5, 2), (7, 2), (14, 2), (3, 4)])
def test_the_orbit_count_is_the_number_of_representatives(d, c):
    """The count (partitions, by a recurrence) equals the representatives the orbits enumerate, and each
    representative is a distinct, in-domain input."""
    p = P(d, c)
    sym = TASK.symmetry(p)
    reps = [o.tokens for o in sym.orbits()]
    assert sym.count() == len(reps) == len(set(reps))
    for length in {len(r) for r in reps}:
        xs = np.array([r for r in reps if len(r) == length])
        assert TASK.in_domain(p, xs).all()


def test_a_domain_with_too_many_orbits_is_refused_up_front():
    """d = 64 (2 distractors): 5.4e9 orbits, refused before any work, naming the count and the budget (without
    its locality declaration, which the route uses instead where it has one)."""
    from depthcraft.verify.certify.symmetry import MAX_ORBITS
    p = P(64, 2)
    sym = TASK.symmetry(p)
    assert sym.count() > 5 * 10 ** 9
    model = lookup.resolve("retrieval_tripling", P(1, 1)).build()  # never reached
    res = certify_by_symmetry(model, dataclasses.replace(sym, locality=None), TASK.domain(p))
    assert res["certified"] is False and res["orbits"] == 0
    assert f"above the budget of {MAX_ORBITS}" in res["why"]
    assert TASK.symmetry(p, sampled_only=True).count() == 1


# ------------------------------------------------------------------------------------------------
# Locality: pieces instead of orbits (certify_by_locality)
# ------------------------------------------------------------------------------------------------

def chains_of(x):
    """The chains of one retrieval input (tuple): the queried one's length, and the others' lengths (sorted)."""
    facts = [(x[i], x[i + 1]) for i in range(0, len(x) - 2, 2)]
    nxt = dict(facts)
    values = {b for _, b in facts}
    lengths = []
    for a, _ in facts:
        if a in values:
            continue  # not a chain's start
        n, cur = 0, a
        while cur in nxt:
            cur, n = nxt[cur], n + 1
        lengths.append((a == x[-1], n))
    queried = [n for q, n in lengths if q]
    return queried, sorted(n for q, n in lengths if not q)


@pytest.mark.parametrize("p", SMALL, ids=str)
def test_every_chain_of_every_domain_input_has_its_piece(p):
    """The decomposition the locality route relies on, by brute force: every domain input is the queried
    chain (D facts) plus other chains, each of a length some piece holds; every piece is in the domain."""
    loc = TASK.locality(p)
    pieces = loc.pieces()
    assert loc.count() == len(pieces)
    held = {tuple(chains_of(pc.tokens)[1]) for pc in pieces}
    assert () in held
    for x in every_domain_input(p):
        queried, others = chains_of(x)
        assert queried == [p["d"]]
        assert all((n,) in held for n in others), (x, others)
    for pc in pieces:
        assert TASK.in_domain(p, np.array([pc.tokens])).all()
        assert len(pc.components) == len(pc.tokens)


@pytest.mark.parametrize("p", SMALL, ids=str)
def test_locality_certifies_tripling_and_it_is_exact_on_every_domain_input(p):
    """Soundness on the whole domain: certified by locality, and exact at every position of every
    enumerated domain input (every shape, every length)."""
    from depthcraft.verify.certify.locality import certify_by_locality
    model = lookup.resolve("retrieval_tripling", p).build()
    res = certify_by_locality(model, TASK.locality(p), TASK.domain(p))
    assert res["certified"] is True, res["why"]
    ok, bad = exact_on(model, sorted(every_domain_input(p), key=lambda x: (len(x), x)))
    assert ok, bad


def test_locality_perturbed_models_are_certified_only_where_exact(d1c2):
    """Soundness of the locality route under perturbation (:func:`_campaign`)."""
    from depthcraft.verify.certify.locality import certify_by_locality
    p, _ = d1c2
    loc = TASK.locality(p)
    _campaign(d1c2, lambda m: certify_by_locality(m, loc, TASK.domain(p)), 1)


@pytest.mark.slow
def test_locality_perturbed_models_are_certified_only_where_exact_long_campaign(d1c2):
    """:func:`_campaign` of the locality route, 120 more perturbations."""
    from depthcraft.verify.certify.locality import certify_by_locality
    p, _ = d1c2
    loc = TASK.locality(p)
    _campaign(d1c2, lambda m: certify_by_locality(m, loc, TASK.domain(p)), 11, trials=120)


def test_locality_without_the_owned_marker_is_not_local():
    """``?`` is no renaming's object, but it occurs once, in the queried chain; without declaring it
    owned, a foreign key may hold it and the program's choice at ``?`` is not provably local."""
    from depthcraft.verify.certify.locality import certify_by_locality
    p = P(2, 1)
    model = lookup.resolve("retrieval_tripling", p).build()
    loc = dataclasses.replace(TASK.locality(p), owned_tokens=())
    res = certify_by_locality(model, loc, TASK.domain(p))
    assert res["certified"] is False
    assert "not local" in res["why"] or "a foreign key (another chain's) may score" in res["why"]


def test_locality_refuses_the_fetch_without_its_f_name(d1c2):
    from depthcraft.verify.certify.locality import certify_by_locality
    p, xs = d1c2
    model = _copy(lookup.resolve("retrieval_tripling", p).build())
    spec = model.arch.sublayers[2]
    rows = [spec.q_rows.index(r) for r in _row(model, "FR1") if r in spec.q_rows]
    model.params["layers"][2]["w_q"][:, rows, :] = 0.0
    assert certify_by_locality(model, TASK.locality(p), TASK.domain(p))["certified"] is False
    assert not exact_on(model, xs)[0]
