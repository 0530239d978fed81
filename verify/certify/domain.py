"""Input-domain preconditions: facts every input of a task's declared domain satisfies.

A task whose constructions are exact only on its own inputs declares that set (its
*domain*, :meth:`verify.tasks.base.Task.domain`). The certificate can use the domain as a
*precondition* only through facts the abstract state can use soundly; this module states
them (:class:`Precondition`), and :mod:`.heads` uses them. Each fact must be IMPLIED by the
domain predicate (the task's docstring proves it, and :meth:`Precondition.holds` checks it
on a concrete input, so tests check the implication on in-domain inputs):

* ``lengths``: the input lengths n (regular positions 1..n) that occur in the domain. A
  query at position i sits in an input of length n >= i, so positions 0..L(i) exist, with
  L(i) the least domain length >= i (:meth:`Precondition.reach`). The head's *floor* (the
  score the top level reaches on every input) may then take the minimum over the
  alternatives of positions up to L(i), not only up to i (bidirectional models only: a
  causal mask hides positions after i from the query).
* ``classes``: a class id for every model position 1..N. On every domain input, two
  distinct regular positions of one class hold distinct tokens. So in one input, at most
  one position of a class holds a given token, and a candidate level whose keys all stand
  at regular positions of one class and all hold one and the same token (the key side reads
  the token block, and the key's token is determined by its vector) holds at most one
  present key: it is clean (:func:`heads.unclean_level`).

  A class id of -1 states no fact for that position. With ``prefix`` the fact covers the
  positions 1..n-1 of an input of length n only (the last position may repeat a token, as
  ICQA's query repeats a question); a key that reads the token block directly may then be
  the last position, so :mod:`.heads` does not use such a fact, and :mod:`.relu` uses it
  only through a proved copy of the token at an earlier position (below).
* ``slots``: per position, the tokens it can hold on a domain input (None: any). A key that
  would need another token there is absent from every domain input (:mod:`.relu`, through a
  proved copy of the token).
* ``scored``: the task scores only the last position of an input, and on every domain input
  that position holds one of these tokens. A head whose output only the unembedding reads
  may then leave out the query rows that hold another token (they never stand at a scored
  position of a domain input); the certificate then covers the last position of each
  domain input only, and its scope says so (:mod:`.relu`).

* ``patterns``: per position j a *group* G(j) = (g_1, .., g_k) of earlier positions
  (g_a < j), or None. On every domain input of length n, two distinct positions j1, j2 <= n
  with groups of one size k have different *equality patterns* of their groups: the sets
  {(a, b) : a < b, x_{g_a} = x_{g_b}} differ. (ICTM: the group of an example's label
  position is its block's n content positions; the equality pattern is the block's
  template, and example templates are pairwise distinct.) :mod:`.relu` uses it only
  through proved copies of a proved equality parse (below, ``pattern_copies``).

Derived SOps enter only through what the certificate has proved about them: a block that a
certified position head (``prev_token``, ``position_map``) with a passing program check
writes as the token at target(j) (:class:`~.heads.DomainView` ``copies``) holds, on every
input, at position j the token of position target(j); the facts above then speak of it.
Likewise a block that such a head writes as a copy of a certified ReLU ``match`` of
``tokens`` against ``tokens`` reading the key's position through ``fn`` (select all; the
*equality parse*, :class:`~.heads.DomainView` ``pattern_copies``) holds at j, on every
input, fn of the set of window positions j' <= t = target(j) with x_{j'} = x_t: where fn
is injective on the window, the decoded set names exactly which window positions hold
x_t's token, which is a statement about the input's equalities. Nothing else is assumed: in
particular no relation between derived SOps at different positions that is a construction's
induction invariant is a precondition here.

What is proved with a precondition holds for the domain's inputs only; the report's
``scope`` then says "every input in the domain ..." and ``domain.used_as_precondition`` is
true exactly when some head's analysis used a fact (:class:`Use` records it).
"""

from __future__ import annotations

import dataclasses
from typing import Any, FrozenSet, List, Optional, Sequence, Tuple

import numpy as np


@dataclasses.dataclass(frozen=True)
class Precondition:
    """Facts implied by a task's input domain (module docstring).

    Attributes:
        predicate: the domain in words (the task's :meth:`~verify.tasks.base.Task.domain`).
        lengths: the input lengths (number of regular positions) of the domain's inputs.
        classes: [N + 1] int, the class of every model position (entry 0, BOS, unused; -1: no
            fact for that position), or None: no distinct-token fact.
        prefix: the distinct-token fact covers positions 1..n-1 of an input of length n only.
        scored: the tokens the last (the only scored) position of a domain input can hold, or
            None: every position is scored.
        slots: [N + 1] per model position the tokens it can hold (entry 0 unused; None: any), or
            None: no such fact.
        patterns: [N + 1] per model position its group (a tuple of earlier positions; entry 0
            unused; None: no group), or None: no such fact. Distinct positions with groups of
            one size have different equality patterns (module docstring).
        symmetry: the domain as a union of orbits of a group of token and position renamings
            (:class:`.symmetry.Symmetry`), or None. The certifier then tries the symmetry route
            (:mod:`.symmetry`) first.
    """

    predicate: str
    lengths: FrozenSet[int]
    classes: Optional[Tuple[int, ...]] = None
    prefix: bool = False
    scored: Optional[FrozenSet[int]] = None
    slots: Optional[Tuple[Optional[FrozenSet[int]], ...]] = None
    patterns: Optional[Tuple[Optional[Tuple[int, ...]], ...]] = None
    symmetry: Optional[Any] = None

    def reach(self, n: int) -> np.ndarray:
        """[n + 1] int: for a query at position i (0..n), the last position that exists on every
        domain input with a position i: the least domain length >= i (i itself when none is)."""
        out = np.arange(n + 1)
        ls = sorted(x for x in self.lengths if 1 <= x <= n)
        for i in range(n + 1):
            nxt = [x for x in ls if x >= i]
            if nxt:
                out[i] = max(i, nxt[0])
        return out

    def holds(self, tokens: Sequence[int]) -> bool:
        """Whether one concrete input (tokens at positions 1..n, no BOS) satisfies every fact.

        Used by the tests to check that the domain implies the facts (every in-domain input
        must satisfy them)."""
        toks = list(tokens)
        if len(toks) not in self.lengths:
            return False
        if self.scored is not None and toks[-1] not in self.scored:
            return False
        if self.slots is not None:
            if len(toks) >= len(self.slots):
                return False
            if any(self.slots[pos] is not None and t not in self.slots[pos] for pos, t in enumerate(toks, start=1)):
                return False
        if self.patterns is not None and not self._patterns_hold(toks):
            return False
        if self.classes is None:
            return True
        if len(toks) >= len(self.classes):
            return False
        seen = set()
        for pos, t in enumerate(toks[:-1] if self.prefix else toks, start=1):
            if self.classes[pos] < 0:
                continue
            key = (self.classes[pos], t)
            if key in seen:
                return False
            seen.add(key)
        return True

    def _patterns_hold(self, toks: List[int]) -> bool:
        """The ``patterns`` fact on one input (tokens at positions 1..n): every group of a position
        j <= n lies before j, and no two such positions have one group size and one pattern."""
        if len(toks) >= len(self.patterns):
            return False
        seen = set()
        for j in range(1, len(toks) + 1):
            g = self.patterns[j]
            if g is None:
                continue
            if any(not 1 <= a < j for a in g):
                return False
            key = (len(g), equality_pattern([toks[a - 1] for a in g]))
            if key in seen:
                return False
            seen.add(key)
        return True


def equality_pattern(values: Sequence[Any]) -> FrozenSet[Tuple[int, int]]:
    """The pairs (a, b), 0 <= a < b < len(values), with values[a] == values[b] (0-based indices)."""
    return frozenset((a, b) for b in range(len(values)) for a in range(b) if values[a] == values[b])


@dataclasses.dataclass
class Use:
    """Where a certificate used a precondition's facts: ``[(layer, head, fact)]``."""

    where: List[Tuple[str, int, str]] = dataclasses.field(default_factory=list)

    def add(self, layer: str, head: int, fact: str) -> None:
        """Record that ``layer``'s head ``head`` used ``fact`` (``"lengths"``, ``"classes"``, ``"slots"``,
        ``"scored"``, ``"patterns"``)."""
        if (layer, head, fact) not in self.where:
            self.where.append((layer, head, fact))
