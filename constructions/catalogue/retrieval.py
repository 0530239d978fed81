"""Registered retrieval constructions (SPEC §4.3, §5): ``retrieval_doubling``, ``retrieval_tripling``."""

from __future__ import annotations

from depthcraft.constructions.compiler import compile_program
from depthcraft.constructions.catalogue.registry import Bound, Construction, register
from depthcraft.constructions.errors import ParameterError
from depthcraft.rasp_programs.retrieval import (PARAMS, check_params, lower_bound_layers, num_symbols, retrieval_doubling,
                                                retrieval_tripling, seq_len, tripling_heads, tripling_layers)


def _full_chain_only(name: str):
    def check(p) -> None:
        check_params(p)
        if p.get("hops", 0) not in (0, p["d"]):
            raise ParameterError(f"{name} answers the full chain only (hops=0 or hops=d={p['d']}), "
                                 f"got hops={p['hops']}")
    return check


_check = _full_chain_only("retrieval_doubling")


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


register(Construction(
    name="retrieval_tripling",
    task="retrieval",
    source="Mușat (ICLR 2025): lower bound ceil(log_3 2D) layers; construction: segments of the chain triple per "
           "layer (this project), L = ceil(log_3(4D+1)), proof in rasp_programs.retrieval.retrieval_tripling",
    summary="every fact slot keeps the names of the links beyond the ends of its segment of the chain; per layer two "
            "scored look-ups fetch the segments that abut it on the right and on the left (else the neighbour slot, "
            "else itself), so segments triple; the query is the chain's end and reads x_0",
    attention="softmax",
    causal=False,
    params=PARAMS,
    bounds={"attn_layers": Bound("ceil(log_3(2D)) (lower bound); construction: ceil(log_3(4D+1)) = bound + c, "
                                 "c in {0, 1}", lambda p: lower_bound_layers(p["d"]), kind="lower"),
            "heads": Bound("2 (1 in the last layer)", lambda p: tripling_heads(p["d"]))},
    program=lambda p: retrieval_tripling(p["d"]),
    builder=lambda p: compile_program(retrieval_tripling(p["d"]), vocab=range(num_symbols(p) + 1),
                                      max_seq_len=seq_len(p["d"], p["distractors"]), causal=False),
    defaults=({"d": 5, "distractors": 2}, {"d": 7, "distractors": 2}),  # c = 0 (L = 3) and c = 1 (L = 4)
    check=_full_chain_only("retrieval_tripling"),
    notes="Measured L = ceil(log_3(4D+1)) against the paper's lower bound ceil(log_3(2D)): c = L - bound is 0 for "
          "D = 2, 5, 6, 14..20, 41..60 and 1 otherwise (D <= 64); the query sits at the chain's end, so its segment "
          "grows on one side only. One MLP layer (after layer 1) turns each end slot's symbol and position parity "
          "into a link name. Exact on disjoint chains whose queried chain has exactly D facts (the task's inputs).",
))
