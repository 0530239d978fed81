"""Adversarial review of the locality route (certify_by_locality): models it must not certify.

Each test builds a model that is wrong on some input of the retrieval domain (checked by running it
against the RASP program) and asserts the route does not certify it.
"""

from __future__ import annotations

import numpy as np
from tracr.rasp import rasp

from depthcraft.constructions.compiler import compile_program
from depthcraft.constructions.primitives import POSITION, Read, scored_lookup
from depthcraft.constructions.reference import Evaluator
from depthcraft.rasp_programs.retrieval import query_token
from depthcraft.verify.certify.locality import certify_by_locality
from depthcraft.verify.tasks import get_task

from test_certify_symmetry import P, _copy, every_domain_input, exact_on

TASK = get_task("retrieval")


def _marker_program(p):
    """A local program: at the queried symbol (position n) attend to ``?`` (the key whose token is ``?``, in
    the query's own slot), never to another chain; read its position.

    Heads: ``L`` (at an even position, the odd position holding the same symbol: at n, the queried fact's
    key), then a head scoring ``c [key is ?, query is not]`` + a same-slot term (odd key +s, even key -20)
    + ``-20`` on the slot ``L`` names. Every chain's own best beats every other chain's keys in the
    program's tables (it is local)."""
    q = query_token(p)
    slot = lambda m: (m + 1) // 2  # noqa: E731
    lh = scored_lookup([(rasp.tokens, rasp.tokens, lambda a, b: 1.0 * (a == b and a != q)),
                        (POSITION, POSITION, lambda i, j: 1.0 * (i % 2 == 0 and j % 2 == 1))],
                       [Read(POSITION, name="L")], bos_score=1.5, name="lh")
    c, s = 2.0, 3.0
    main = scored_lookup([(rasp.tokens, rasp.tokens, lambda a, b: c * (b == q and a != q)),
                          (POSITION, POSITION, lambda i, j: 0.0 if slot(i) != slot(j) else (s if j % 2 else -20.0)),
                          (lh[0], POSITION, lambda l, j: -20.0 * (slot(l) == slot(j)))],
                         [Read(POSITION, name="out")], bos_score=0.0, name="mh")
    return compile_program(main[0], vocab=TASK.vocab(p), max_seq_len=TASK.max_seq_len(p), causal=False)


def test_a_token_embedding_that_is_not_one_hot_is_not_certified_by_locality():
    """The foreign-key bound takes a foreign key's tokens block to be one token's one-hot (the allowed
    directions only). A symbol embedding that also writes 3 into ``tokens:?`` (equivariant: sigma fixes
    ``?``) gives every other chain's key 3 x the ``?`` reward the bound leaves out (``?`` is owned by the
    queried chain): the query attends to another chain. The pieces compute their own keys exactly, so
    the only check that can catch it is the embedding's shape."""
    p = P(1, 1)
    base = _marker_program(p)
    xs = sorted(every_domain_input(p), key=lambda x: (len(x), x))
    loc = TASK.locality(p)
    assert certify_by_locality(base, loc, TASK.domain(p))["certified"] is True
    assert exact_on(base, xs)[0]
    model = _copy(base)
    q = query_token(p)
    tok = np.array(model.params["embed"]["token"], np.float32)
    col = model.residual_labels.index(f"tokens:{q}")
    syms = [i for i, v in enumerate(model.input_values) if v not in ("BOS", "PAD", q)]
    tok[syms, col] = 3.0
    model.params["embed"]["token"] = tok
    x = (0, 1, 2, 3, q, 0)  # the queried fact (0, 1), another chain (2, 3), ? 0
    assert TASK.in_domain(p, np.array([x])).all()
    out = list(model.run(np.array([x]), none_value=None)[0])
    want = Evaluator().evaluate(model.program.nodes[model.program.sink], list(x))
    assert out[-1] != want[-1]  # wrong at the query: it attends to the other chain
    res = certify_by_locality(model, loc, TASK.domain(p))
    assert res["certified"] is False, "certified a model that is wrong on a domain input"


def test_a_head_that_reads_only_the_owned_token_still_bounds_other_chains_keys():
    """The foreign-key bound's tokens block is the largest entry over the directions a foreign key may
    hold *among the rows the head reads*; a head whose W_K reads ``tokens:?`` and ``tokens:BOS`` only
    (the symbols' rows, all zero, left out: the same function, and the compiler itself leaves rows out)
    had no allowed direction there for the queried chain, so the bound was -inf and every other chain's
    key was ignored. Here the program's own best beats other chains by 0.01 only: the queried symbol
    splits its attention between ``?`` and the other chain's keys."""
    import dataclasses
    p = P(1, 1)
    q = query_token(p)
    slot = lambda m: (m + 1) // 2  # noqa: E731
    lh = scored_lookup([(rasp.tokens, rasp.tokens, lambda a, b: 1.0 * (a == b and a != q)),
                        (POSITION, POSITION, lambda i, j: 1.0 * (i % 2 == 0 and j % 2 == 1))],
                       [Read(POSITION, name="L")], bos_score=1.5, name="lh")
    main = scored_lookup([(POSITION, POSITION, lambda i, j: 0.0 if slot(i) != slot(j) else (1.0 if j % 2 else -20.0)),
                          (rasp.tokens, rasp.tokens, lambda a, b: -1.0 * (b == q and a != q)),
                          (lh[0], rasp.tokens, lambda l, b: 0.01 * (b == q)),
                          (lh[0], POSITION, lambda l, j: -20.0 * (slot(l) == slot(j)))],
                         [Read(POSITION, name="out")], bos_score=-1.0, name="mh")
    compiled = compile_program(main[0], vocab=TASK.vocab(p), max_seq_len=TASK.max_seq_len(p), causal=False)
    loc = TASK.locality(p)
    assert certify_by_locality(compiled, loc, TASK.domain(p))["certified"] is False
    spec = compiled.arch.sublayers[-1]
    wk = np.asarray(compiled.params["layers"][-1]["w_k"])
    keep = [j for j in range(wk.shape[1]) if np.abs(wk[:, j]).max() > 0]
    assert len(keep) < wk.shape[1]
    model = _copy(compiled)
    model.params["layers"][-1]["w_k"] = wk[:, keep]
    subs = list(compiled.arch.sublayers)
    subs[-1] = dataclasses.replace(spec, k_rows=tuple(spec.k_rows[j] for j in keep))
    model = dataclasses.replace(model, arch=dataclasses.replace(compiled.arch, sublayers=tuple(subs)))
    assert [compiled.residual_labels[r] for r in model.arch.sublayers[-1].k_rows if
            compiled.residual_labels[r].startswith("tokens:")] == [f"tokens:{q}", "tokens:BOS"]
    x = (0, 1, 2, 3, q, 0)
    assert TASK.in_domain(p, np.array([x])).all()
    same = compiled.run(np.array([x]), none_value=None)[0].tolist()
    assert model.run(np.array([x]), none_value=None)[0].tolist() == same
    want = Evaluator().evaluate(model.program.nodes[model.program.sink], list(x))
    assert same[-1] != want[-1]
    res = certify_by_locality(model, loc, TASK.domain(p))
    assert res["certified"] is False, "certified a model that is wrong on a domain input"
