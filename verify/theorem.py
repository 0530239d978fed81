"""The theorem's half of correctness: the RASP program computes the task.

:mod:`verify.certify` proves that the compiled weights compute their exact hardmax evaluation;
this module checks the other half, that the construction's RASP program computes the task,
on the cheap reference semantics: the program's dataflow written with numpy arrays (one array
of pointers or tokens per SOp, one gather per head), run on many inputs at once. Each
semantics follows its program's docstring line by line (the proof is there) and is tied to
the RASP program itself by :func:`program_agrees` (tracr's evaluator, with the hand-built heads'
reference semantics, on small inputs). Reported separately from the certificate.

Only the k-hop constructions have such a semantics here (``khop_doubling``, ``khop_floor``,
``khop_constant_width``: Sanford, Hsu & Telgarsky 2024, Thm 4.2); for the others
:func:`theorem_check` returns None.
"""

from __future__ import annotations

import itertools
import time
from typing import Any, Callable, Dict, Optional

import numpy as np

from depthcraft.rasp_programs.doubling import odd_doubling_layers, odd_doubling_steps
from depthcraft.rasp_programs.khop import BOT, doubling_layers
from depthcraft.verify.tasks.khop import hop_k

#: Most inputs one exhaustive theorem check enumerates.
MAX_EXHAUSTIVE = 1 << 20
#: Rows handled at once (memory: a few [rows, vocab, n + 1] int32 tables).
CHUNK = 2048


def _last_le(x: np.ndarray, vocab: int) -> np.ndarray:
    """[b, vocab, n + 1] int16 (int32 from n = 2^15): entry (v, p) = max({0} ∪ {j : 2 <= j <= p, x_{j-1} = v}) (model positions).

    The search a last-occurrence head does: the latest key j at or before p whose previous token is v.
    """
    b, n = x.shape
    dtype = np.int16 if n < 2 ** 15 else np.int32
    j = np.arange(n + 1, dtype=dtype)
    prev = np.full((b, n + 1), -1, np.int16 if vocab < 2 ** 15 else np.int64)
    prev[:, 2:] = x[:, :-1]  # x_{j-1} at model position j >= 2
    hits = (prev[:, None, :] == np.arange(vocab, dtype=prev.dtype)[None, :, None]) * j
    return np.maximum.accumulate(hits, axis=2)


def _at(table: np.ndarray, ptr: np.ndarray) -> np.ndarray:
    """``table`` [b, n + 1] read at pointers ``ptr`` [b, n + 1] (a pointer look-up head)."""
    return np.take_along_axis(table, ptr, axis=1)


def _tokens(x: np.ndarray) -> np.ndarray:
    """[b, n + 1]: the token at each model position, BOT at BOS (position 0)."""
    return np.concatenate([np.full((len(x), 1), BOT, np.int8 if x.max(initial=0) < 127 else x.dtype),
                           x.astype(np.int8) if x.max(initial=0) < 127 else x], 1)


def doubling_semantics(x: np.ndarray, k: int, vocab: int) -> np.ndarray:
    """``khop_doubling(k)`` on arrays: [b, n] tokens -> [b, n] outputs (BOT for ⊥).

    Layer 2: P = R = find^1 (the last-occurrence search at the query's own position) and
    t = x_R. Layer m + 2 (m = 1..M, M = ceil(log2 k)): every SOp is read at P: P <- P∘P,
    and when bit m-1 of k-1 is set, R <- R∘P and t <- t∘P. Output: t.
    """
    x = np.asarray(x, np.int64)
    last = _last_le(x, vocab)
    toks = _tokens(x)
    query = np.concatenate([np.zeros((len(x), 1), np.int64), x], 1)
    p = np.take_along_axis(last, query[:, None, :], 1)[:, 0].astype(np.intp)
    p[:, 0] = 0
    r, t = p, _at(toks, p)
    for m in range(1, doubling_layers(k) - 1):
        if ((k - 1) >> (m - 1)) & 1:
            r, t = _at(r, p), _at(t, p)
        p = _at(p, p)
    return t[:, 1:]


def floor_semantics(x: np.ndarray, k: int, vocab: int) -> np.ndarray:
    """``khop_floor(k)`` on arrays: [b, n] tokens -> [b, n] outputs (BOT for ⊥).

    Layer 2: P = find^1 with its token tP; R = P (k odd) or the position itself. Layer l >= 3:
    the search at the stored pointer attends to a = the latest j <= P with x_{j-1} = tP, and
    reads P, tP (and R, tR when bit l-2 of k is set) there. Output: tR.
    """
    x = np.asarray(x, np.int64)
    last = _last_le(x, vocab)
    toks = _tokens(x)
    n = x.shape[1]
    ident = np.broadcast_to(np.arange(n + 1), (len(x), n + 1))
    query = np.concatenate([np.zeros((len(x), 1), np.int64), x], 1)
    p = np.take_along_axis(last, query[:, None, :], 1)[:, 0].astype(np.intp)
    p[:, 0] = 0
    tp = _at(toks, p)
    if odd_doubling_layers(k) == 2:
        return tp[:, 1:]
    r, tr = (p, tp) if k & 1 else (ident, toks)
    for step in odd_doubling_steps(k):
        key = np.where(p > 0, tp, 0)
        a = last[np.arange(len(x))[:, None], key, p].astype(np.intp)  # search at the stored pointer
        a = np.where(p > 0, a, 0)
        if step.bit:
            r, tr = _at(r, a), _at(tr, a)
        p, tp = _at(p, a), _at(tp, a)
    return tr[:, 1:]


def definition(x: np.ndarray, k: int) -> np.ndarray:
    """hop_k by Definition 4.1, find applied k times (no doubling): [b, n] -> [b, n] (BOT for ⊥)."""
    x = np.asarray(x, np.int64)
    b, n = x.shape
    f = np.zeros((b, n + 1), np.int64)
    for i in range(1, n + 1):
        for j in range(i, 1, -1):  # the most recent j <= i with x_{j-1} = x_i
            hit = (x[:, j - 2] == x[:, i - 1]) & (f[:, i] == 0)
            f[:, i] = np.where(hit, j, f[:, i])
    p = np.broadcast_to(np.arange(n + 1), (b, n + 1)).copy()
    for _ in range(k):
        p = np.take_along_axis(f, p, 1)
    return _at(_tokens(x), p)[:, 1:]


def program_agrees(name: str, k: int, vocab: int, n: int, inputs: int = 50, seed: int = 0) -> bool:
    """Whether the array semantics of ``name`` equals its RASP program's own semantics.

    Runs the program through :func:`constructions.reference.evaluate` (tracr's evaluator with the
    hand-built heads' reference semantics; slow, one input at a time) on ``inputs`` random inputs
    of length ``n`` over ``vocab`` tokens, and compares with :data:`SEMANTICS` ``[name]``.

    Raises:
        KeyError: ``name`` has no array semantics.
    """
    from depthcraft.constructions.reference import evaluate
    from depthcraft.rasp_programs import khop

    program = {"khop_doubling": khop.khop_doubling, "khop_constant_width": khop.khop_doubling,
               "khop_floor": khop.khop_floor}[name](k)
    x = np.random.default_rng(seed).integers(0, vocab, size=(inputs, n))
    want = np.array([[BOT if v is None else int(v) for v in evaluate(program, list(row))] for row in x])
    return bool((SEMANTICS[name](x, k, vocab) == want).all())


SEMANTICS: Dict[str, Callable[[np.ndarray, int, int], np.ndarray]] = {
    "khop_doubling": doubling_semantics, "khop_constant_width": doubling_semantics, "khop_floor": floor_semantics}


def theorem_check(name: str, params: Dict[str, Any], *, random_inputs: int = 100_000, random_n: Optional[int] = None,
                  exhaustive_n: int = 8, seed: int = 0) -> Optional[Dict[str, Any]]:
    """Check that construction ``name``'s program computes its task, on the cheap reference semantics.

    Args:
        name: a construction with an array semantics (:data:`SEMANTICS`), else None is returned.
        params: its resolved parameters (``k``, ``n``, ``vocab``).
        random_inputs: uniform random inputs at length ``random_n`` (default the construction's n).
        random_n: their length.
        exhaustive_n: every input of length 1..exhaustive_n (capped so that vocab^n <= 2^20).
        seed: seeds the random inputs.
    Returns:
        ``{"claim", "exhaustive": {"n", "inputs", "exact"}, "random": {"n", "inputs", "exact"},
        "seconds"}``, or None. The exhaustive part compares with Definition 4.1 written literally
        (:func:`definition`: find by a backward scan, applied k times); the random part, at lengths
        where that is too slow, with the task's reference (:func:`verify.tasks.khop.hop_k`).
    """
    sem = SEMANTICS.get(name)
    if sem is None:
        return None
    t0 = time.perf_counter()
    k, vocab = int(params["k"]), int(params["vocab"])
    exact_all, inputs, top = True, 0, 0
    for n in range(1, exhaustive_n + 1):
        if vocab ** n > MAX_EXHAUSTIVE:
            break
        x = np.array(list(itertools.product(range(vocab), repeat=n)), np.int64)
        for s in range(0, len(x), CHUNK * 8):
            chunk = x[s:s + CHUNK * 8]
            exact_all &= bool((sem(chunk, k, vocab) == definition(chunk, k)).all())
        inputs, top = inputs + len(x), n
    n = int(random_n or params["n"])
    rng = np.random.default_rng(seed)
    exact_r, done = True, 0
    while done < random_inputs:
        b = min(CHUNK, random_inputs - done)
        x = rng.integers(0, vocab, size=(b, n))
        exact_r &= bool((sem(x, k, vocab) == hop_k(x, k)).all())
        done += b
    return {"claim": f"{name}'s program computes hop_{k} (Definition 4.1)",
            "exhaustive": {"n": top, "inputs": inputs, "exact": exact_all},
            "random": {"n": n, "inputs": done, "exact": exact_r}, "seconds": round(time.perf_counter() - t0, 3)}
