"""ICQA, in-context question answering (Chen & Zou, ICML 2024; SPEC §4.2).

This is the project's formalisation of the paper's description (the paper's full text
was not available). Input: ``q_1 a_1 q_2 a_2 ... q_m a_m q*`` with pairwise distinct
questions q_i, answers a_i free (repeats allowed) and q* = q_j for one j; target at the
last position: a_j. The question-answer association is drawn afresh for every
sequence, so nothing can be memorised (reasoning). Inputs with fewer pairs
(m' = 1..m, length 2m'+1) are valid too.

Token layout (integers): questions 0..Q-1, answers Q..Q+A-1.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Dict, List

import numpy as np
from hypothesis import strategies as st

from depthcraft.constructions.errors import InputError, ParameterError
from depthcraft.constructions.params import ParamSpec
from depthcraft.verify.certify.domain import Precondition
from depthcraft.verify.tasks.chen_zou.common import ReadoutTask, checked_count, check_range
from depthcraft.rasp_programs.templates import random_injective


class ICQATask(ReadoutTask):
    """In-context question answering: answer the query from the pairs in context."""

    name = "icqa"
    title = "ICQA, in-context question answering (Chen & Zou 2024; project formalisation)"
    params = (
        ParamSpec("m", int, 8, "number of question-answer pairs (the longest input has 2m+1 tokens)",
                  minimum=1, maximum=512),
        ParamSpec("questions", int, 16, "Q, question tokens 0..Q-1", minimum=1, maximum=1024),
        ParamSpec("answers", int, 16, "A, answer tokens Q..Q+A-1", minimum=1, maximum=1024),
    )

    def check(self, p):
        if p["m"] > p["questions"]:
            raise ParameterError(f"m={p['m']} pairs need m distinct questions, but questions={p['questions']}")

    def vocab(self, p):
        return list(range(p["questions"] + p["answers"]))

    def max_seq_len(self, p):
        return 2 * p["m"] + 1

    def target_values(self, p) -> List[int]:
        return list(range(p["questions"], p["questions"] + p["answers"]))

    def token_names(self, p):
        q = p["questions"]
        names = {i: f"q{i}" for i in range(q)}
        names.update({q + i: f"a{i}" for i in range(p["answers"])})
        return names

    def answer(self, p, tokens):
        b, length = tokens.shape
        if length % 2 == 0 or not 3 <= length <= 2 * p["m"] + 1:
            raise InputError(f"icqa: an input is q1 a1 ... qm' am' q* (odd length 3..{2 * p['m'] + 1}), "
                             f"got length {length}")
        q_count = p["questions"]
        qs, ans, query = tokens[:, 0:-1:2], tokens[:, 1::2], tokens[:, -1]
        check_range("icqa", qs, 0, q_count, "question")
        check_range("icqa", ans, q_count, q_count + p["answers"], "answer")
        check_range("icqa", query[:, None], 0, q_count, "query")
        s = np.sort(qs, 1)
        dup = (s[:, 1:] == s[:, :-1]).any(1)
        if dup.any():
            raise InputError(f"icqa: input {int(np.flatnonzero(dup)[0])} repeats a question (questions must be distinct)")
        hit = qs == query[:, None]
        missing = ~hit.any(1)
        if missing.any():
            r = int(np.flatnonzero(missing)[0])
            raise InputError(f"icqa: input {r}: the query q{int(query[r])} is not among its questions")
        return ans[np.arange(b), hit.argmax(1)]

    def domain(self, p: Dict[str, Any]) -> str:
        """The task's own inputs: ``q_1 a_1 .. q_m' a_m' q*`` (1 <= m' <= m), questions pairwise distinct.

        In words (what :meth:`row_in_domain` checks with :meth:`answer`): odd length 3..2m+1,
        question tokens at the odd positions, answer tokens at the even ones, no question twice
        among q_1..q_m', and the query q* one of them. Every sampled, edge-case and exhaustive
        input of this task is in it. ``icqa_copy_match`` (softmax) is exact on every input;
        the ReLU match head is not exact outside it (``q2 q1 q2 q2``: two questions q2, the
        program's answer at the last position is a set of two tokens, the read-out one).
        """
        return (f"icqa inputs q1 a1 .. qm' am' q* (1 <= m' <= {p['m']}): questions pairwise distinct, "
                f"the query one of them")

    def row_in_domain(self, p: Dict[str, Any], row: np.ndarray) -> bool:
        """Whether one input [n] is a well-formed ICQA input (:meth:`answer` accepts it)."""
        return self.answer_accepts(p, row)

    def domain_precondition(self, p: Dict[str, Any]) -> Precondition:
        """The domain's facts for the certifier: odd lengths, question slots distinct, a question last.

        * ``lengths``: a domain input is m' pairs and the query, 2m' + 1 tokens, 1 <= m' <= m.
        * ``classes`` (odd positions class 1, even positions -1: no fact) with ``prefix``: in an
          input of length n = 2m' + 1 the odd positions 1..n-2 = 1..2m'-1 are the question slots
          q_1..q_m', pairwise distinct by the domain; the even positions hold answers (which may
          repeat: no fact); the last position n is left out (``prefix``), and it must be: the
          query q* there equals one of the questions, and position n is a question slot of longer
          inputs, so no fact by position alone can cover it.
        * ``slots``: odd positions hold question tokens (the question slots, and the query at
          the last position), even positions answer tokens (the answer slots).
        * ``scored``: the task scores only the last position (:class:`ReadoutTask`), which holds
          the query q*, one of the questions: a question token 0..Q-1.

        What the ReLU certificate then covers is the last position of each domain input (the
        scored one), not every position: at an answer position the match head's query is that
        answer a, and every earlier key right after an answer slot holding a matches it, so on
        the domain input ``q0 a0 q1 a0 q2 a0 q0`` position 6 the program's output is the set
        {q1, q2} and the read-out gives one token (tests/test_certify_relu_domain.py).
        """
        n = self.max_seq_len(p)
        qs = frozenset(range(p["questions"]))
        ans = frozenset(range(p["questions"], p["questions"] + p["answers"]))
        return Precondition(predicate=self.domain(p), lengths=frozenset(range(3, n + 1, 2)),
                            classes=tuple(1 if pos % 2 else -1 for pos in range(n + 1)), prefix=True,
                            scored=frozenset(range(p["questions"])),
                            slots=(None,) + tuple(qs if pos % 2 else ans for pos in range(1, n + 1)))

    def build(self, questions: np.ndarray, answers: np.ndarray, j: np.ndarray) -> np.ndarray:
        """Assemble inputs from parts.

        Args:
            questions: [b, m'] distinct question tokens per row.
            answers: [b, m'] answer tokens.
            j: [b] 0-based index of the queried pair.
        Returns:
            [b, 2m'+1] int64 inputs.
        """
        b, m = questions.shape
        x = np.empty((b, 2 * m + 1), np.int64)
        x[:, 0:-1:2], x[:, 1::2] = questions, answers
        x[:, -1] = questions[np.arange(b), j]
        return x

    def sample(self, p, rng, batch):
        m, q = p["m"], p["questions"]
        questions = random_injective(rng, batch, m, range(q))
        answers = rng.integers(q, q + p["answers"], size=(batch, m))
        return self.build(questions, answers, rng.integers(0, m, size=batch))

    def edge_cases(self, p):
        m, q, a = p["m"], p["questions"], p["answers"]
        qs = np.arange(m)
        rows = []
        for j in sorted({0, m // 2, m - 1}):
            rows.append((qs, np.full(m, q), j))  # every answer equal
            rows.append((qs[::-1].copy(), q + np.arange(m) % a, j))  # distinct answers, questions reversed
            rows.append((q - 1 - qs, q + a - 1 - np.arange(m) % a, j))  # the largest question / answer tokens
        rows.append((qs, q + (np.arange(m) * 7 + 3) % a, m - 1))
        out = [self.build(np.stack([r[0] for r in rows]), np.stack([r[1] for r in rows]),
                          np.array([r[2] for r in rows]))]
        # Shorter inputs: m' = 1 and m' = 2 pairs.
        for mm in sorted({1, min(2, m)}):
            out.append(self.build(np.arange(mm)[None] + q - mm, np.full((1, mm), q + a - 1), np.array([mm - 1])))
        return out

    def exhaustive(self, p, batch: int = 1 << 15):
        """Every input with m pairs: ordered distinct questions x answers x query index."""
        m, q, a = p["m"], p["questions"], p["answers"]
        total = checked_count(math.perm(q, m) * a ** m * m, f"P({q},{m}) * {a}^{m} * {m}")

        def gen():
            perms = np.asarray(list(itertools.permutations(range(q), m)), np.int64).reshape(-1, m)
            ans = np.asarray(list(itertools.product(range(q, q + a), repeat=m)), np.int64).reshape(-1, m)
            qi, ai, ji = (g.ravel() for g in np.meshgrid(np.arange(len(perms)), np.arange(len(ans)),
                                                           np.arange(m), indexing="ij"))
            for s in range(0, len(qi), batch):
                sl = slice(s, s + batch)
                yield self.build(perms[qi[sl]], ans[ai[sl]], ji[sl])

        return total, gen()

    def strategy(self, p):
        m, q, a = p["m"], p["questions"], p["answers"]

        @st.composite
        def icqa(draw):
            mm = draw(st.integers(1, m))
            qs = draw(st.permutations(range(q)))[:mm]
            ans = draw(st.lists(st.integers(q, q + a - 1), min_size=mm, max_size=mm))
            j = draw(st.integers(0, mm - 1))
            return list(map(int, self.build(np.asarray([qs]), np.asarray([ans]), np.asarray([j]))[0]))

        return icqa()
