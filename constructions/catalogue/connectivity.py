"""Registered graph-connectivity construction (SPEC §4.4, §5): ``graph_connectivity``."""

from __future__ import annotations

import dataclasses
import functools

from depthcraft.constructions.catalogue.registry import Bound, Construction, register
from depthcraft.constructions.compiler import compile_program
from depthcraft.constructions.model import CompiledModel
from depthcraft.rasp_programs.connectivity import (PARAMS, check_params, connectivity_layers, graph_connectivity,
                                                   max_edges, seq_len, vocab_size)


@functools.lru_cache(maxsize=4)
def _compiled(n: int, slots: int) -> CompiledModel:
    return compile_program(graph_connectivity(n), vocab=range(vocab_size(n)),
                           max_seq_len=seq_len({"n": n, "max_edges": slots}), causal=False)


def build(p) -> CompiledModel:
    """The compiled model for ``p``: the weights depend on n and M only, so one compile serves every sampler
    (each call returns its own copy of the metadata; the weight arrays are shared and never written)."""
    model = _compiled(p["n"], max_edges(p))
    return dataclasses.replace(model, meta=dict(model.meta))


register(Construction(
    name="graph_connectivity",
    task="connectivity",
    source="Sanford, Hsu & Telgarsky (2024), log-depth connectivity; Merrill & Sabharwal (2025), Θ(log n) depth: "
           "repeated squaring of reachability",
    summary="layer 1 collects each vertex's edges into R_1(v) = {v} ∪ N(v) (union head + threshold MLP); each "
            "next layer squares R (union over u ∈ R(v) of R(u)); the last copies R(s) to t and an MLP tests "
            "R(s) ∩ R(t) ≠ ∅",
    attention="softmax",
    causal=False,
    params=PARAMS,
    bounds={"attn_layers": Bound("ceil(log2(n-1)) + c, c = 1 (2 at n = 2)", lambda p: connectivity_layers(p["n"])),
            "heads": Bound("1", lambda p: 1)},
    program=lambda p: graph_connectivity(p["n"]),
    builder=build,
    defaults=({"n": 5}, {"n": 9}),
    check=check_params,
    exhaustive_in_all=False,
    notes="L = max(2, ceil(log2(n-1)) + 1): c = 1 over ceil(log2(n-1)) (edge collection, then the meet at the "
          "query replaces one squaring). d_model is O(n^2 + M) from the one-hot edge vocabulary and positions; "
          "the construction's own subspaces are (2J+1)n + 2, J = max(1, ceil(log2(n-1))).",
))
