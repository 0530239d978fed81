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
  alternatives of positions up to L(i), not only up to i.
* ``classes``: a class id for every model position 1..N. On every domain input, two
  distinct regular positions of one class hold distinct tokens. So in one input, at most
  one position of a class holds a given token, and a candidate level whose keys all stand
  at regular positions of one class and all hold one and the same token (the key side reads
  the token block, and the key's token is determined by its vector) holds at most one
  present key: it is clean (:func:`heads._unclean_level`).

Nothing else is assumed: in particular no relation between *derived* SOps at different
positions (a construction's induction invariant) is a precondition here.

What is proved with a precondition holds for the domain's inputs only; the report's
``scope`` then says "every input in the domain ..." and ``domain.used_as_precondition`` is
true exactly when some head's analysis used a fact (:class:`Use` records it).
"""

from __future__ import annotations

import dataclasses
from typing import FrozenSet, List, Optional, Sequence, Tuple

import numpy as np


@dataclasses.dataclass(frozen=True)
class Precondition:
    """Facts implied by a task's input domain (module docstring).

    Attributes:
        predicate: the domain in words (the task's :meth:`~verify.tasks.base.Task.domain`).
        lengths: the input lengths (number of regular positions) of the domain's inputs.
        classes: [N + 1] int, the class of every model position (entry 0, BOS, unused), or
            None: no distinct-token fact.
    """

    predicate: str
    lengths: FrozenSet[int]
    classes: Optional[Tuple[int, ...]] = None

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
        if self.classes is None:
            return True
        if len(toks) >= len(self.classes):
            return False
        seen = set()
        for pos, t in enumerate(toks, start=1):
            key = (self.classes[pos], t)
            if key in seen:
                return False
            seen.add(key)
        return True


@dataclasses.dataclass
class Use:
    """Where a certificate used a precondition's facts: ``[(layer, head, fact)]``."""

    where: List[Tuple[str, int, str]] = dataclasses.field(default_factory=list)

    def add(self, layer: str, head: int, fact: str) -> None:
        """Record that ``layer``'s head ``head`` used ``fact`` (``"lengths"`` or ``"classes"``)."""
        if (layer, head, fact) not in self.where:
            self.where.append((layer, head, fact))
