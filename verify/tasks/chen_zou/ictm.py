"""ICTM, in-context template matching (Chen & Zou, ICML 2024; SPEC §4.2).

This is the project's formalisation of the paper's description (the paper's full text
was not available). Input: m example blocks, each n content tokens followed by a label
token, then a query block of n content tokens::

    e^1_1 .. e^1_n  l_1   e^2_1 .. e^2_n  l_2   ...   e^m_1 .. e^m_n  l_m   z_1 .. z_n

The m example templates are pairwise distinct (drawn uniformly among the patterns of
length n with at most V wildcards), the query's template is one of them (uniform),
every block (query included) uses its own fresh injective substitution, and the labels
l_i are drawn independently and uniformly from the label tokens for every sequence.
Target at the last position: the label of the example whose template equals the
query's. Inputs with fewer examples (m' = 1..m, length m'(n+1)+n) are valid too.

Token layout (integers): content 0..V-1, labels V..V+C-1.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

import numpy as np
from hypothesis import strategies as st

from depthcraft.constructions.errors import InputError, ParameterError
from depthcraft.constructions.params import ParamSpec
from depthcraft.rasp_programs import templates as tpl
from depthcraft.verify.certify.domain import Precondition
from depthcraft.verify.tasks.chen_zou.common import NONE, ReadoutTask, check_range, letters


class ICTMTask(ReadoutTask):
    """In-context template matching: the label of the example whose template the query shares."""

    name = "ictm"
    title = "ICTM, in-context template matching (Chen & Zou 2024; project formalisation)"
    params = (
        ParamSpec("n", int, 3, "template length (content tokens per block)", minimum=1,
                  maximum=tpl.MAX_TEMPLATE_LEN),
        ParamSpec("m", int, 4, "number of example blocks", minimum=1, maximum=256),
        ParamSpec("vocab", int, 8, "V, content tokens 0..V-1", minimum=1, maximum=256),
        ParamSpec("labels", int, 4, "C, label tokens V..V+C-1", minimum=1, maximum=256),
    )

    def check(self, p):
        pool = tpl.count_patterns(p["n"], p["vocab"])
        if p["m"] > pool:
            raise ParameterError(f"m={p['m']} examples need m distinct templates, but only {pool} templates of "
                                 f"length n={p['n']} exist over vocab={p['vocab']}")

    # layout
    def block(self, p) -> int:
        """Tokens per example block (n + 1)."""
        return p["n"] + 1

    def examples_in(self, p, length: int) -> int:
        """m' for an input of this length; raises InputError when the length is not m'(n+1)+n."""
        n = p["n"]
        mm, rest = divmod(length - n, n + 1)
        if length < 2 * n + 1 or rest or not 1 <= mm <= p["m"]:
            raise InputError(f"ictm: an input is m' blocks of n+1 = {n + 1} tokens then n = {n} query tokens "
                             f"(m' = 1..{p['m']}), so its length is one of "
                             f"{[k * (n + 1) + n for k in range(1, min(p['m'], 4) + 1)]}...; got {length}")
        return mm

    def domain(self, p: Dict[str, Any]) -> str:
        """The task's own inputs: m' example blocks with pairwise distinct templates, then a query block.

        In words (what :meth:`row_in_domain` checks with :meth:`answer`): length m'(n+1)+n for
        1 <= m' <= m, content tokens 0..V-1 at the content positions, label tokens V..V+C-1 at
        the label positions, the m' example templates (the equality patterns of their blocks)
        pairwise distinct, and the query's template one of them. Every sampled, edge-case and
        hypothesis input of this task is in it (they are built from distinct pool templates).
        ``ictm_parse_copy_match`` (softmax) is exact on every input of the layout; the ReLU
        match head adds up every example whose template equals the query's, so it is not exact
        outside it (two examples with the query's template: the program's answer is a set of
        two labels, the read-out one).
        """
        return (f"ictm inputs: m' = 1..{p['m']} example blocks of n = {p['n']} content tokens and a label, then "
                f"n query tokens; example templates pairwise distinct, the query's template one of them")

    def row_in_domain(self, p: Dict[str, Any], row: np.ndarray) -> bool:
        """Whether one input [length] is a well-formed ICTM input (:meth:`answer` accepts it)."""
        return self.answer_accepts(p, row)

    def domain_precondition(self, p: Dict[str, Any]) -> Precondition:
        """The domain's facts for the certifier: the lengths, and distinct patterns at the label positions.

        * ``lengths``: a domain input is m' blocks of n + 1 tokens then n query tokens,
          m'(n + 1) + n tokens, 1 <= m' <= m.
        * ``patterns``: the group of every label-slot position j = k(n + 1) (k = 1..m, j <= N)
          is its block's content positions (j - n, .., j - 1), all before j; other positions
          have none. Proof that the domain implies the fact: the layout is periodic, so in a
          domain input of length L = m'(n + 1) + n the positions j <= L with a group are exactly
          the m' example label positions (the query block's positions have offsets 1..n, never
          n + 1), and the group of the k-th is the k-th example's content block e^k. The
          equality pattern {(a, b) : a < b, e^k_a = e^k_b} determines the block's canonical
          pattern (its restricted growth string: position b repeats the number of the first
          a < b with e^k_a = e^k_b, else takes the next new number) and is determined by it, so
          two examples have one equality pattern exactly when they have one template; the
          domain makes the m' example templates pairwise distinct. All groups have size n.

        No ``classes``, ``slots`` or ``scored`` fact is given: the ReLU match head is clean at
        every query position on the domain (at most one example label position holds a
        pattern), so the certificate covers every position 1..n of a domain input.
        """
        n, b, big = p["n"], p["n"] + 1, self.max_seq_len(p)
        groups = tuple(tuple(range(j - n, j)) if j >= 1 and j % b == 0 else None for j in range(big + 1))
        return Precondition(predicate=self.domain(p),
                            lengths=frozenset(k * b + n for k in range(1, p["m"] + 1)), patterns=groups)

    def pool(self, p) -> np.ndarray:
        """Every template the task draws from: [P, n] canonical patterns with at most V wildcards."""
        return tpl.enumerate_patterns(p["n"], p["vocab"])

    def vocab(self, p):
        return list(range(p["vocab"] + p["labels"]))

    def max_seq_len(self, p):
        return p["m"] * (p["n"] + 1) + p["n"]

    def target_values(self, p) -> List[int]:
        return list(range(p["vocab"], p["vocab"] + p["labels"]))

    def token_names(self, p):
        names = letters(range(p["vocab"]))
        names.update({p["vocab"] + c: f"L{c}" for c in range(p["labels"])})
        return names

    def split(self, p, tokens: np.ndarray) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Input -> (example blocks [b, m', n], labels [b, m'], query [b, n])."""
        n = p["n"]
        mm = self.examples_in(p, tokens.shape[1])
        blocks = tokens[:, :mm * (n + 1)].reshape(len(tokens), mm, n + 1)
        return blocks[:, :, :n], blocks[:, :, n], tokens[:, mm * (n + 1):]

    def build(self, examples: np.ndarray, labels: np.ndarray, query: np.ndarray) -> np.ndarray:
        """Assemble inputs from example blocks [b, m', n], labels [b, m'] and query [b, n]."""
        b, mm, n = examples.shape
        blocks = np.concatenate([examples, labels[:, :, None]], 2).reshape(b, mm * (n + 1))
        return np.concatenate([blocks, query], 1).astype(np.int64)

    def answer(self, p, tokens):
        ex, labels, query = self.split(p, tokens)
        b, mm, n = ex.shape
        check_range("ictm", ex.reshape(b, -1), 0, p["vocab"], "content")
        check_range("ictm", query, 0, p["vocab"], "content")
        check_range("ictm", labels, p["vocab"], p["vocab"] + p["labels"], "label")
        codes = tpl.pattern_codes(tpl.canonical_pattern(ex.reshape(b * mm, n))).reshape(b, mm)
        s = np.sort(codes, 1)
        dup = (s[:, 1:] == s[:, :-1]).any(1)
        if dup.any():
            raise InputError(f"ictm: input {int(np.flatnonzero(dup)[0])} has two examples with the same template "
                             "(example templates must be distinct)")
        hit = codes == tpl.pattern_codes(tpl.canonical_pattern(query))[:, None]
        miss = ~hit.any(1)
        if miss.any():
            r = int(np.flatnonzero(miss)[0])
            raise InputError(f"ictm: input {r}: the query's template "
                             f"{tpl.pattern_str(tpl.canonical_pattern(query[r:r + 1])[0])} is not an example's")
        return labels[np.arange(b), hit.argmax(1)]

    def instances(self, p, rng: np.random.Generator, template_ids: np.ndarray, query_index: np.ndarray,
                  labels: np.ndarray) -> np.ndarray:
        """Inputs from pool indices [b, m'] (distinct per row), the queried example [b] and label tokens [b, m'].

        Every block gets its own uniformly random injective substitution.
        """
        pool = self.pool(p)
        b, mm = template_ids.shape
        n, k = p["n"], min(p["n"], p["vocab"])
        pats = pool[np.concatenate([template_ids, template_ids[np.arange(b), query_index][:, None]], 1)]
        subs = tpl.random_injective(rng, b * (mm + 1), k, range(p["vocab"]))
        blocks = tpl.substitute(pats.reshape(-1, n), subs).reshape(b, mm + 1, n)
        return self.build(blocks[:, :mm], labels, blocks[:, mm])

    def sample(self, p, rng, batch):
        m = p["m"]
        ids = tpl.random_injective(rng, batch, m, range(len(self.pool(p))))
        labels = rng.integers(p["vocab"], p["vocab"] + p["labels"], size=(batch, m))
        return self.instances(p, rng, ids, rng.integers(0, m, size=batch), labels)

    def edge_cases(self, p):
        """Queries at the first and last example, one shared token set for every block, a distractor
        whose tokens equal the query's but whose template differs, equal labels, and m' = 1."""
        rng = np.random.default_rng(1234)
        n, m, v, c = p["n"], p["m"], p["vocab"], p["labels"]
        pool = self.pool(p)
        ids = np.arange(m)[None].repeat(2, 0)  # the first m templates (ααα.. first, lexicographic)
        ids[1] = np.arange(len(pool) - m, len(pool))  # the last m (αβγ.. last)
        out = []
        for row in ids:
            for j in (0, m - 1):
                for lab in (np.full(m, v), v + np.arange(m) % c):
                    out.append(self.instances(p, rng, row[None], np.array([j]), lab[None]))
        # Every block uses the same tokens 0..k-1: only the patterns differ.
        k = min(n, v)
        same = np.stack([tpl.substitute(pool[ids[1]], np.tile(np.arange(k), (m, 1)))])
        q = tpl.substitute(pool[ids[1][-1:]], np.arange(k)[None])
        out.append(self.build(same, (v + np.arange(m) % c)[None], q))
        # Distractor first: same tokens as the query, another template; the true example last, other tokens.
        if m >= 2 and len(pool) >= 2:
            t_true, t_dis = len(pool) - 1, 0
            qtok = tpl.substitute(pool[[t_true]], np.arange(k)[None])
            dis = tpl.substitute(pool[[t_dis]], np.arange(k)[None])
            true = tpl.substitute(pool[[t_true]], (np.arange(k)[::-1] + v - k)[None])
            rest = [tpl.substitute(pool[[t]], np.arange(k)[None]) for t in range(1, m - 1)]
            ex = np.concatenate([dis] + rest + [true])[None]
            out.append(self.build(ex, (v + np.arange(m) % c)[None], qtok))
        # m' = 1: a single example.
        out.append(self.instances(p, rng, np.array([[len(pool) - 1]]), np.array([0]), np.array([[v + c - 1]])))
        return out

    def exhaustive(self, p, batch: int = 1 << 15):
        raise ParameterError("ictm has no exhaustive check: its inputs (template choices x one substitution per "
                             "block x labels) are too many even at small sizes; use --samples")

    def strategy(self, p):
        m, v, c = p["m"], p["vocab"], p["labels"]
        pool = self.pool(p)
        k = min(p["n"], p["vocab"])

        @st.composite
        def ictm(draw):
            mm = draw(st.integers(1, m))
            ids = draw(st.lists(st.integers(0, len(pool) - 1), min_size=mm, max_size=mm, unique=True))
            j = draw(st.integers(0, mm - 1))
            subs = [draw(st.permutations(range(v)))[:k] for _ in range(mm + 1)]
            labels = draw(st.lists(st.integers(v, v + c - 1), min_size=mm, max_size=mm))
            pats = pool[ids + [ids[j]]]
            blocks = tpl.substitute(pats, np.asarray(subs))
            x = self.build(blocks[None, :mm], np.asarray([labels]), blocks[None, mm])
            return list(map(int, x[0]))

        return ictm()


class ICTMDenseTask(ICTMTask):
    """ICTM with several scored queries per sequence and optionally distinct labels (training variant).

    The ICTM input (m example blocks with distinct templates, then a query block) is
    extended with ``queries`` = q query blocks; each but the last is followed by its
    correct label, so every query is an in-context answer with earlier examples::

        e^1 l_1 ... e^m l_m   z^1 y_1   z^2 y_2   ...   z^q      (y_j: the label of z^j's template)

    Scored: the last content token of every query block (q positions), target the label
    of the example whose template equals the query's: dense supervision, as k-hop scores
    every position. ``label_draw``: ``distinct`` gives the m examples m different labels
    (needs labels >= m), so that no label is more frequent in context and answering the
    most frequent label (the plateau of iid labels, error about 0.47 at m = 4, C = 4) is
    no better than guessing among the m; ``iid`` draws them independently as ICTM does.
    Every block uses its own fresh injective substitution; queries pick an example
    uniformly, independently of each other. With q = 1 and ``iid`` this is ICTM.
    Training-only: no construction reads more than one query.
    """

    name = "ictm_dense"
    title = "ICTM with q scored queries per sequence (dense supervision; training variant of Chen & Zou's ICTM)"
    params = ICTMTask.params + (
        ParamSpec("queries", int, 4, "q, query blocks per sequence (each scored)", minimum=1, maximum=64),
        ParamSpec("label_draw", str, "distinct", "example labels: distinct (a random injection into the "
                  "labels) or iid", choices=("distinct", "iid")),
    )

    def check(self, p):
        super().check(p)
        if p["label_draw"] == "distinct" and p["labels"] < p["m"]:
            raise ParameterError(f"label_draw=distinct needs labels >= m, got labels={p['labels']}, m={p['m']}")

    def max_seq_len(self, p):
        return (p["m"] + p["queries"] - 1) * (p["n"] + 1) + p["n"]

    def domain(self, p: Dict[str, Any]):
        """None: a training variant, no domain declared (ICTM's domain and its facts speak of ICTM's
        layout, one query block, which this one is not)."""
        return None

    def domain_precondition(self, p: Dict[str, Any]):
        """None (no domain declared, :meth:`domain`)."""
        return None

    def row_in_domain(self, p: Dict[str, Any], row: np.ndarray) -> bool:
        """Every well-formed input (no domain declared, :meth:`domain`)."""
        return True

    def query_positions(self, p) -> np.ndarray:
        """0-based input positions of the q scored tokens (the last content token of each query block)."""
        n, m = p["n"], p["m"]
        return np.asarray([(m + j) * (n + 1) + n - 1 for j in range(p["queries"])], np.int64)

    def answers(self, p, tokens) -> np.ndarray:
        """[b, q] label tokens of the queries, after checking the layout.

        Raises:
            InputError: wrong length, a token out of its range, repeated example templates,
                a query whose template is no example's, or a wrong label after a query.
        """
        x = np.asarray(tokens)
        if x.ndim != 2 or not np.issubdtype(x.dtype, np.integer):
            raise InputError(f"ictm_dense: expected a [batch, n] integer array, got shape {x.shape}")
        n, m, q, v, c = p["n"], p["m"], p["queries"], p["vocab"], p["labels"]
        if x.shape[1] != self.max_seq_len(p):
            raise InputError(f"ictm_dense: an input is m + q - 1 = {m + q - 1} blocks of n + 1 = {n + 1} tokens "
                             f"then n = {n} query tokens, length {self.max_seq_len(p)}; got {x.shape[1]}")
        x = x.astype(np.int64)
        b = len(x)
        full = np.concatenate([x, np.full((b, 1), v, np.int64)], 1).reshape(b, m + q, n + 1)
        content, labels = full[:, :, :n], full[:, :, n]
        check_range("ictm_dense", content.reshape(b, -1), 0, v, "content")
        check_range("ictm_dense", labels[:, :-1], v, v + c, "label")
        codes = tpl.pattern_codes(tpl.canonical_pattern(content.reshape(-1, n))).reshape(b, m + q)
        ex = codes[:, :m]
        s = np.sort(ex, 1)
        dup = (s[:, 1:] == s[:, :-1]).any(1)
        if dup.any():
            raise InputError(f"ictm_dense: input {int(np.flatnonzero(dup)[0])} has two examples with the same "
                             "template (example templates must be distinct)")
        hit = codes[:, m:, None] == ex[:, None, :]  # [b, q, m]
        miss = ~hit.any(2)
        if miss.any():
            r, j = (int(i) for i in np.argwhere(miss)[0])
            raise InputError(f"ictm_dense: input {r}: the template of query {j + 1} is not an example's")
        out = np.take_along_axis(labels[:, :m], hit.argmax(2), 1)
        wrong = out[:, :-1] != labels[:, m:-1]
        if wrong.any():
            r, j = (int(i) for i in np.argwhere(wrong)[0])
            raise InputError(f"ictm_dense: input {r}: query {j + 1} is followed by label "
                             f"{int(labels[r, m + j])}, but its example's label is {int(out[r, j])}")
        return out

    def reference(self, p, tokens):
        out = self.answers(p, tokens)
        x = np.asarray(tokens)
        targets = np.full(x.shape, NONE, np.int64)
        scored = np.zeros(x.shape, bool)
        pos = self.query_positions(p)
        targets[:, pos] = out
        scored[:, pos] = True
        return targets, scored

    def dense_instances(self, p, rng: np.random.Generator, template_ids: np.ndarray, query_index: np.ndarray,
                        labels: np.ndarray) -> np.ndarray:
        """Inputs from example pool indices [b, m] (distinct per row), queried examples [b, q] and label
        tokens [b, m]; every block gets its own random injective substitution."""
        pool = self.pool(p)
        b, m = template_ids.shape
        q = query_index.shape[1]
        n, k = p["n"], min(p["n"], p["vocab"])
        ids = np.concatenate([template_ids, np.take_along_axis(template_ids, query_index, 1)], 1)
        subs = tpl.random_injective(rng, b * (m + q), k, range(p["vocab"]))
        blocks = tpl.substitute(pool[ids].reshape(-1, n), subs).reshape(b, m + q, n)
        lab = np.concatenate([labels, np.take_along_axis(labels, query_index, 1)], 1)
        full = np.concatenate([blocks, lab[:, :, None]], 2).reshape(b, (m + q) * (n + 1))
        return full[:, :-1].astype(np.int64)

    def sample(self, p, rng, batch):
        m, q, v, c = p["m"], p["queries"], p["vocab"], p["labels"]
        ids = tpl.random_injective(rng, batch, m, range(len(self.pool(p))))
        if p["label_draw"] == "distinct":
            labels = tpl.random_injective(rng, batch, m, range(v, v + c))
        else:
            labels = rng.integers(v, v + c, size=(batch, m))
        return self.dense_instances(p, rng, ids, rng.integers(0, m, size=(batch, q)), labels)

    def edge_cases(self, p):
        """Every query on the first example, every query on the last, and queries in example order."""
        rng = np.random.default_rng(1234)
        m, q, v, c = p["m"], p["queries"], p["vocab"], p["labels"]
        pool = self.pool(p)
        ids = np.stack([np.arange(m), np.arange(len(pool) - m, len(pool))])
        labels = np.stack([v + np.arange(m) % c] * 2)
        out = [self.dense_instances(p, rng, ids, np.full((2, q), j), labels) for j in (0, m - 1)]
        out.append(self.dense_instances(p, rng, ids, np.tile(np.arange(q) % m, (2, 1)), labels))
        return [np.concatenate(out)]

    def exhaustive(self, p, batch: int = 1 << 15):
        raise ParameterError("ictm_dense has no exhaustive check (a training variant); use random inputs")

    def strategy(self, p):
        return st.integers(0, 2 ** 32 - 1).map(
            lambda s: list(map(int, self.sample(p, np.random.default_rng(s), 1)[0])))
