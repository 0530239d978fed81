"""The layer schedule shared by the floor-depth constructions (``khop_floor``, ``retrieval_doubling``).

Both reach the m-fold composition F^m of a one-step map F (find, or a fact look-up)
with floor(log2 m) + 2 attention layers: layers 1-2 build P = F^1; every later layer
searches once from the stored pointer P = F^(2^(l-2)-1) and turns it into
F^(2^(l-1)-1) (P -> F^(2|P|+1)), while a partial pointer R advances on the bits of m
(Sanford, Hsu & Telgarsky 2024, Thm 4.2 as stated; SPEC §5 notes). This module
holds the arithmetic; each program supplies its own heads.
"""

from __future__ import annotations

import dataclasses
from typing import Iterator


@dataclasses.dataclass(frozen=True)
class SearchStep:
    """One layer l >= 3 of the schedule for m hops.

    Attributes:
        layer: 1-based attention layer.
        bit: bit l-2 of m: R advances in this layer.
        last: the final layer (its read is the answer F^m).
        p_hops: P = F^(p_hops) after this layer (2^(l-1) - 1).
        r_hops: R = F^(r_hops) after this layer when ``bit`` (m mod 2^(l-1)).
    """

    layer: int
    bit: bool
    last: bool
    p_hops: int
    r_hops: int


def odd_doubling_layers(m: int) -> int:
    """Attention layers the schedule needs for m >= 1 hops: floor(log2 m) + 2."""
    return m.bit_length() + 1


def odd_doubling_steps(m: int) -> Iterator[SearchStep]:
    """The layers 3 .. floor(log2 m) + 2 of the schedule for m >= 1 hops (none when m = 1)."""
    layers = odd_doubling_layers(m)
    for layer in range(3, layers + 1):
        yield SearchStep(layer=layer, bit=bool((m >> (layer - 2)) & 1), last=layer == layers,
                         p_hops=2 ** (layer - 1) - 1, r_hops=m & ((1 << (layer - 1)) - 1))
