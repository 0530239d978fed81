"""Registered retrieval construction (SPEC §4.3, §5): ``retrieval_doubling``."""

from __future__ import annotations

from depthcraft.constructions.compiler import compile_program
from depthcraft.constructions.catalogue.registry import Bound, Construction, register
from depthcraft.constructions.errors import ParameterError
from depthcraft.rasp_programs.retrieval import (PARAMS, check_params, lower_bound_layers, num_symbols, retrieval_doubling,
                                     seq_len)


def _check(p) -> None:
    check_params(p)
    if p.get("hops", 0) not in (0, p["d"]):
        raise ParameterError(f"retrieval_doubling answers the full chain only (hops=0 or hops=d={p['d']}), "
                             f"got hops={p['hops']}")


register(Construction(
    name="retrieval_doubling",
    task="retrieval",
    source="Mușat (ICLR 2025): lower bound ceil(log_3 2D) layers; construction: pointer doubling over facts",
    summary="prev-token head stores each fact's key at its value slot, then one bidirectional fact look-up head "
            "per layer: the hop count m of the stored symbol goes to 2m+1, a partial symbol follows the bits of D",
    attention="softmax",
    causal=False,
    params=PARAMS,
    bounds={"attn_layers": Bound("ceil(log_3(2D)) (lower bound)", lambda p: lower_bound_layers(p["d"]),
                                 kind="lower")},
    program=lambda p: retrieval_doubling(p["d"]),
    builder=lambda p: compile_program(retrieval_doubling(p["d"]), vocab=range(num_symbols(p) + 1),
                                      max_seq_len=seq_len(p["d"], p["distractors"]), causal=False),
    defaults=({"d": 4, "distractors": 2}, {"d": 14, "distractors": 2}),
    check=_check,
    notes="Measured L = floor(log2 D)+2 against the paper's lower bound ceil(log_3(2D)): the report's gap is "
          "L - bound. Width: one-hot symbols (O(S log D)) plus the one-hot position block (O(n)) that the "
          "value-slot table reads.",
))
