"""TM, template matching (Chen & Zou, ICML 2024; SPEC §4.2).

This is the project's formalisation of the paper's description (the paper's full text
was not available). K distinct templates of length n (equality patterns over
wildcards, see :mod:`rasp_programs.templates`), each with a fixed label in
0..C-1, both drawn from ``seed`` (templates uniformly among the patterns with at most
V - held_out wildcards, labels balanced). Instance: an injective substitution of the
template's wildcards by content tokens, then ``CLS``; target at ``CLS``: the
template's label.

Generalisation: the last ``held_out`` content tokens never occur in the ``train``
split; the ``test`` split draws only substitutions that use at least one of them;
``all`` (the default, used by the verifier) draws from every token.

Token layout (integers): content 0..V-1, ``CLS`` = V, label c is token V+1+c.
"""

from __future__ import annotations

import math
from typing import Tuple

import numpy as np
from hypothesis import strategies as st

from depthcraft.constructions.errors import InputError, ParameterError
from depthcraft.constructions.params import ParamSpec
from depthcraft.rasp_programs import templates as tpl
from depthcraft.rasp_programs.chen_zou_data import tm_templates
from depthcraft.verify.tasks.chen_zou.common import ClsTask, batches_of, checked_count


class TMTask(ClsTask):
    """Template matching: the label of the input's template, read at CLS."""

    name = "tm"
    title = "TM, template matching / generalisation (Chen & Zou 2024; project formalisation)"
    params = (
        ParamSpec("n", int, 5, "template length (tokens before CLS)", minimum=1, maximum=tpl.MAX_TEMPLATE_LEN),
        ParamSpec("templates", int, 12, "K, number of distinct templates", minimum=1, maximum=1 << 14),
        ParamSpec("classes", int, 4, "C, number of labels", minimum=1, maximum=256),
        ParamSpec("vocab", int, 8, "V, content tokens 0..V-1", minimum=1, maximum=256),
        ParamSpec("held_out", int, 2, "content tokens V-h..V-1 never used by the train split", minimum=0),
        ParamSpec("split", str, "all", "random inputs: all tokens, train (no held-out token), "
                  "test (at least one held-out token)", choices=("all", "train", "test")),
        ParamSpec("seed", int, 0, "seed of the templates and their labels", minimum=0),
    )

    def check(self, p):
        if p["held_out"] >= p["vocab"]:
            raise ParameterError(f"held_out={p['held_out']} must leave at least one training token "
                                 f"(vocab={p['vocab']})")
        self.templates(p)

    def max_wildcards(self, p) -> int:
        """Templates have at most V - held_out wildcards, so that the train split can instantiate each."""
        return p["vocab"] - p["held_out"]

    def templates(self, p) -> Tuple[np.ndarray, np.ndarray]:
        """(patterns [K, n], labels [K]); see :func:`tm_templates`."""
        return tm_templates(p["n"], p["templates"], p["classes"], p["vocab"], p["held_out"], p["seed"])

    def instances(self, p, template_ids: np.ndarray, substitutions: np.ndarray) -> np.ndarray:
        """Inputs from template indices [b] and substitutions [b, >= wildcards]: [b, n+1] with CLS."""
        pats, _ = self.templates(p)
        return self.with_cls(p, tpl.substitute(pats[template_ids], substitutions))

    def answer(self, p, tokens):
        x = self.content(p, tokens)
        pats, labels = self.templates(p)
        codes = tpl.pattern_codes(tpl.canonical_pattern(x))
        known = tpl.pattern_codes(pats)
        order = np.argsort(known)
        pos = np.clip(np.searchsorted(known[order], codes), 0, len(known) - 1)
        idx = order[pos]
        miss = known[idx] != codes
        if miss.any():
            r = int(np.flatnonzero(miss)[0])
            pat = tpl.pattern_str(tpl.canonical_pattern(x[r:r + 1])[0])
            raise InputError(f"tm: input {r} has template {pat}, which is not one of the task's {len(pats)} templates")
        return self.label_token(p, labels[idx])

    def sample(self, p, rng, batch):
        pats, _ = self.templates(p)
        ids = rng.integers(0, len(pats), size=batch)
        k = min(p["n"], p["vocab"])
        if p["split"] == "train":
            subs = tpl.random_injective(rng, batch, min(k, self.max_wildcards(p)), range(self.max_wildcards(p)))
        else:
            subs = tpl.random_injective(rng, batch, k, range(p["vocab"]))
            if p["split"] == "test":
                held = p["vocab"] - p["held_out"]  # tokens held..V-1 are the held-out ones
                if p["held_out"] == 0:
                    raise ParameterError("split=test needs held_out >= 1")
                w = tpl.num_wildcards(pats[ids])
                while True:  # rejection: uniform over substitutions that use a held-out token
                    used = np.arange(k)[None, :] < w[:, None]
                    bad = ~((subs >= held) & used).any(1)
                    if not bad.any():
                        break
                    subs[bad] = tpl.random_injective(rng, int(bad.sum()), k, range(p["vocab"]))
        return self.instances(p, ids, subs)

    def edge_cases(self, p):
        """Per template: the smallest tokens, the largest (held-out first), and one shared token set for all."""
        pats, _ = self.templates(p)
        v, k = p["vocab"], min(p["n"], p["vocab"])
        ids = np.arange(len(pats))
        rows = [self.instances(p, ids, np.tile(np.arange(k), (len(ids), 1))),
                self.instances(p, ids, np.tile(np.arange(v - 1, v - 1 - k, -1), (len(ids), 1))),
                self.instances(p, ids, np.tile((np.arange(k) * 3 + 1) % v if math.gcd(3, v) == 1
                                               else np.arange(k)[::-1], (len(ids), 1)))]
        return [np.concatenate(rows)]

    def exhaustive(self, p, batch: int = 1 << 15):
        """Every template x every injective substitution over the whole vocabulary (held-out tokens included)."""
        pats, _ = self.templates(p)
        w = tpl.num_wildcards(pats)
        v = p["vocab"]
        total = checked_count(int(sum(math.perm(v, int(x)) for x in w)), "sum over templates of P(V, wildcards)")

        def gen():
            for t in range(len(pats)):
                subs = tpl.injective_maps(int(w[t]), range(v))
                for chunk in batches_of(subs, batch):
                    yield self.instances(p, np.full(len(chunk), t), chunk)

        return total, gen()

    def strategy(self, p):
        pats, _ = self.templates(p)
        v = p["vocab"]

        @st.composite
        def tm(draw):
            t = draw(st.integers(0, len(pats) - 1))
            subs = draw(st.permutations(range(v)))[:min(p["n"], v)]
            return list(map(int, self.instances(p, np.array([t]), np.asarray([subs]))[0]))

        return tm()
