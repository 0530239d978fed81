"""The program check's grouped tables (issue 30, "tables too large").

A ReLU head whose query side reads no position block has one score row per query value
combination, whatever the query's position; ``program._QueryGroups`` checks its selection on a
[values x keys] and a [position classes x keys] table instead of the full (query combination x
key combination) table. These tests force that path (``GROUP_ENTRIES = 0``, as
tests/test_certify_domains.py forces the grouped score path) and check that it gives the same
certificates as the full table, that a wrong head still fails through it with a witness that
reproduces the error, that the joins are exact against brute force, and that the memory cap
refuses with a size rather than allocating.
"""

import dataclasses
import os
import sys

import numpy as np
import pytest
from tracr.rasp import rasp

from depthcraft.constructions.compiler import compile_program
from depthcraft.verify import lookup
from depthcraft.verify.certify import certify, program
from depthcraft.verify.tasks import get_task

sys.path.insert(0, os.path.dirname(__file__))  # the must-fail models of test_certify_program

ICQA = get_task("icqa")
P3 = {"m": 3, "questions": 3, "answers": 2}  # questions 0..2, answers 3..4


@pytest.fixture(scope="module")
def icqa_relu():
    return lookup.build("icqa_copy_match", attention="relu", **P3)


def _copy_key_rows(model, edit):
    """The ICQA model with the match head's W_K columns of ``copy_tokens_k:*`` edited by ``edit(wk, col)``."""
    labels = list(model.residual_labels)
    copy = next(lb.split(":")[0] for lb in labels if lb.startswith("copy_tokens"))
    layers = [dict(p) for p in model.params["layers"]]
    k_rows = list(model.arch.sublayers[1].rows("k_rows", len(labels)))
    wk = np.array(layers[1]["w_k"])
    edit(wk, lambda t: k_rows.index(labels.index(f"{copy}:{t}")))
    layers[1]["w_k"] = wk
    return dataclasses.replace(model, params=dict(model.params, layers=layers))


def swapped(model, a=0, b=1):
    """Keys after a slot holding question a match queries holding b and vice versa."""
    def edit(wk, col):
        ia, ib = col(a), col(b)
        wk[..., [ia, ib]] = wk[..., [ib, ia]]
    return _copy_key_rows(model, edit)


def merged(model, src=1, dst=0):
    """The key after a slot holding src also matches a query holding dst."""
    def edit(wk, col):
        wk[..., col(src)] = wk[..., col(dst)]
    return _copy_key_rows(model, edit)


def _summary(cert):
    return cert["certified"], cert["float32_matches_hardmax"], \
        [(u["layer"], u["head"], u["check"], u["why"], u.get("witness")) for u in cert["uncertified"]]


def _both(model, pre, monkeypatch):
    """(plain, grouped) certificates; the grouped run counts its calls of the grouped check."""
    plain = certify(model, domain=ICQA.domain(P3), precondition=pre)
    calls = []
    real = program._check_relu_grouped
    monkeypatch.setattr(program, "GROUP_ENTRIES", 0)
    monkeypatch.setattr(program, "_check_relu_grouped", lambda *a, **k: (calls.append(1), real(*a, **k))[1])
    grouped = certify(model, domain=ICQA.domain(P3), precondition=pre)
    return plain, grouped, len(calls)


@pytest.mark.parametrize("case", ["good", "no precondition", "no classes", "swapped", "merged"])
def test_grouped_tables_give_the_same_certificate(case, icqa_relu, monkeypatch):
    pre = ICQA.domain_precondition(P3)
    model = {"swapped": swapped, "merged": merged}.get(case, lambda m: m)(icqa_relu)
    if case == "no precondition":
        pre = None
    elif case == "no classes":
        pre = dataclasses.replace(pre, classes=None)
    plain, grouped, calls = _both(model, pre, monkeypatch)
    assert _summary(grouped) == _summary(plain)
    assert plain["certified"] is (case == "good")
    if case in ("good", "swapped"):  # the float32 part passes: the program check ran, on the grouped path
        assert calls == 1


def test_a_wrong_match_head_fails_the_grouped_program_check(icqa_relu, monkeypatch):
    """Must fail: the match head's keys for questions 0 and 1 exchanged. Every query still has at most
    one on key (the float32 part holds), but it is the wrong one; the grouped check names a query
    holding 1 whose selected key (after a slot holding 1) scores 0, not 1."""
    bad = swapped(icqa_relu)
    monkeypatch.setattr(program, "GROUP_ENTRIES", 0)
    cert = certify(bad, domain=ICQA.domain(P3), precondition=ICQA.domain_precondition(P3))
    assert cert["certified"] is False and cert["float32_matches_hardmax"] is True
    u = cert["uncertified"][0]
    assert (u["layer"], u["head"], u["check"]) == ("attn 2", 0, "program")
    assert "an attended key does not score 1" in u["why"]
    w = u["witness"]
    assert w["selects"] is True and w["query"]["tokens"] == 1
    assert list(w["key"].values())[-1] == 1  # the key holds a copy of question 1, as the query
    # the witness input reproduces the error
    wi = w["wrong_input"]
    got = bad.run(np.array([wi["tokens"]]))[0]
    assert [got[p - 1] for p in wi["positions"]] != [e[0] for e in wi["expected"]]
    # and on a domain input: q1 a0 q0 a1 q0 asks for q0, whose answer is a1 = 4 (task definition)
    x = [1, 3, 0, 4, 0]
    assert ICQA.in_domain(P3, np.array([x]))[0]
    assert icqa_relu.run(np.array([x]))[0, -1] == 4
    assert bad.run(np.array([x]))[0, -1] != 4


def test_the_memory_cap_refuses_with_the_size(icqa_relu, monkeypatch):
    monkeypatch.setattr(program, "GROUP_ENTRIES", 0)
    monkeypatch.setattr(program, "MAX_PROGRAM_TABLE", 10)
    cert = certify(icqa_relu, domain=ICQA.domain(P3), precondition=ICQA.domain_precondition(P3))
    assert cert["certified"] is False
    u = cert["uncertified"][0]
    assert (u["layer"], u["head"], u["check"]) == ("attn 1", 0, "program")  # the first head's full table
    assert "too large" in u["why"] and " x " in u["why"]


def test_the_grouped_tables_are_capped(icqa_relu, monkeypatch):
    """The grouped tables are as large as the definition says (the query's tokens; positions 1..7;
    keys: BOS-free positions 1..7 x the copy's 5 tokens and None), and a cap below the position table
    refuses with a size instead of checking."""
    monkeypatch.setattr(program, "GROUP_ENTRIES", 0)
    sizes = []
    real = program._check_relu_grouped

    def spy(state, blocks, dec, expr, ref, qg, ck, *rest):
        sizes.append((len(qg.vi), len(qg.pc_pos), int((ck.kind == 1).sum())))
        return real(state, blocks, dec, expr, ref, qg, ck, *rest)
    monkeypatch.setattr(program, "_check_relu_grouped", spy)
    pre = ICQA.domain_precondition(P3)
    assert certify(icqa_relu, domain=ICQA.domain(P3), precondition=pre)["certified"]
    (nv, npc, nk), = sizes
    assert (nv, npc, nk) == (5, 7, 7 * 6)

    def capped(*a):  # the cap below the grouped position table, for this head only
        monkeypatch.setattr(program, "MAX_PROGRAM_TABLE", npc * nk - 1)
        return real(*a)
    monkeypatch.setattr(program, "_check_relu_grouped", capped)
    cert = certify(icqa_relu, domain=ICQA.domain(P3), precondition=pre)
    u = cert["uncertified"][0]
    assert cert["certified"] is False and (u["check"], u["layer"]) == ("program", "attn 2")
    assert u["why"].endswith(f"program table (grouped) of {npc} query position classes x {nk} keys")


def test_join_is_exact_against_brute_force():
    """_join finds a failing (value, position class, key) exactly when one of the occurring pairs has one."""
    rng = np.random.default_rng(0)
    for trial in range(200):
        nv, npc, nk = rng.integers(1, 6), rng.integers(1, 5), rng.integers(1, 7)
        fv, fp = rng.random((nv, nk)) < 0.2, rng.random((npc, nk)) < 0.3
        # random classes: disjoint value rows, each with a random set of position classes
        perm = rng.permutation(nv)
        cuts = np.sort(rng.choice(np.arange(1, nv), size=min(nv - 1, rng.integers(0, 3)), replace=False)) \
            if nv > 1 else []
        classes = [(vs, np.flatnonzero(rng.random(npc) < 0.5)) for vs in np.split(perm, cuts)]
        classes = [(vs, pcs) for vs, pcs in classes if len(pcs)]
        qg = program._QueryGroups(None, np.arange(nv), {}, np.arange(npc), np.arange(npc), classes)
        brute = [(int(v), int(pc), k) for vs, pcs in classes for v in vs for pc in pcs for k in range(nk)
                 if fv[v, k] and fp[pc, k]]
        hit = program._join(qg, fv, fp)
        assert (hit is not None) == bool(brute), trial
        if hit is not None:
            v, pc, k = hit
            assert fv[v, k] and fp[pc, k]
            assert any(v in vs and pc in pcs for vs, pcs in classes)


# ----------------------------------------------------------- check_head: query rows in chunks

def _future_token_reader():
    """Every position reads the token at index (its own token): a key after the query is selected
    whenever the query's token is larger than its index (a causal compile cannot see it)."""
    return rasp.categorical(rasp.Aggregate(rasp.Select(rasp.indices, rasp.tokens, lambda k, q: k == q),
                                           rasp.tokens))


def _chunked_cases():
    from test_certify_program import future_reader, none_query, wo_scaled, wo_swapped
    khop = lookup.resolve("khop_doubling", dict(k=4, n=12, vocab=3)).build()
    return {
        "future reader": lambda: compile_program(future_reader(), vocab=[0, 1, 2], max_seq_len=6, causal=True),
        "future token reader": lambda: compile_program(_future_token_reader(), vocab=[0, 1, 2, 3], max_seq_len=6,
                                                       causal=True),
        "none query": lambda: compile_program(none_query(), vocab=[0, 1, 2], max_seq_len=6),
        "W_O x0.45": lambda: wo_scaled(khop, 0.45),
        "columns swapped": lambda: wo_swapped(khop),
        "khop_doubling": lambda: khop,
        "icqa softmax": lambda: lookup.build("icqa_copy_match", **P3),
    }


CHUNKED = ["future reader", "future token reader", "none query", "W_O x0.45", "columns swapped", "khop_doubling",
           "icqa softmax"]


@pytest.mark.parametrize("case", CHUNKED)
def test_query_rows_in_chunks_give_the_same_certificate(case, monkeypatch):
    """check_head's checks are per query row: with every table split into one-row chunks
    (MAX_PROGRAM_TABLE = 0, CHUNK_ENTRIES = 1) the certificates are the same, and the must-fail
    models (a causal future-reading selector, over indices or over tokens; tracr's None query;
    W_O x 0.45; two output columns swapped) still fail the program check."""
    model = _chunked_cases()[case]()
    plain = certify(model)
    monkeypatch.setattr(program, "MAX_PROGRAM_TABLE", 0)
    monkeypatch.setattr(program, "CHUNK_ENTRIES", 1)
    chunked = certify(model)
    assert _summary(chunked) == _summary(plain)
    must_fail = case not in ("khop_doubling", "icqa softmax")
    assert plain["certified"] is (not must_fail)
    if must_fail:
        assert plain["float32_matches_hardmax"] is True
        assert plain["uncertified"][0]["check"] == "program"


def test_the_future_token_reader_is_really_wrong():
    """The chunked must-fail case from the definition: at position 1 (index 0) holding token 2 the
    program reads the token at index 2, which the causal model cannot see."""
    model = compile_program(_future_token_reader(), vocab=[0, 1, 2, 3], max_seq_len=6, causal=True)
    x = [2, 0, 3]
    assert model.run(np.array([x]))[0, 0] != 3  # the program's value at index 0 is x[2] = 3

