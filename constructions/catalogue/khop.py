"""Registered k-hop constructions (SPEC §5): ``khop_doubling``, ``khop_floor``, ``khop_constant_width``
and the baseline ``khop_rasp``."""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Tuple

from tracr.rasp import rasp

from depthcraft.constructions.compiler import compile_program, compile_with_tracr
from depthcraft.constructions.params import ParamSpec
from depthcraft.constructions.catalogue.registry import Bound, Construction, register
from depthcraft.rasp_programs.khop import check_k, doubling_layers, floor_layers, khop_doubling, khop_floor, khop_rasp

_K = ParamSpec("k", int, 2, "number of hops", minimum=1, maximum=1024)  # check_k's minimum: hop_0 needs no layer
_VOCAB = ParamSpec("vocab", int, 4, "alphabet size |Σ|", minimum=1, maximum=256)
_ONE_HEAD = Bound("1", lambda p: 1)
_DOUBLING_LAYERS = Bound("ceil(log2 k)+2", lambda p: doubling_layers(p["k"]))

_DEFAULT_KS = (1, 2, 3, 4, 8, 16)


def _n(default: int, minimum: int, maximum: int) -> ParamSpec:
    return ParamSpec("n", int, default, "max_seq_len: longest input, tokens", minimum=minimum, maximum=maximum)


def _register_khop(name: str, program: Callable[[int], rasp.SOp], *, params: Tuple[ParamSpec, ...],
                   bounds: Dict[str, Bound], compiler: Callable[..., Any] = compile_program,
                   compile_kw: Optional[Dict[str, Any]] = None, **fields: Any) -> None:
    """Register a causal softmax k-hop construction: ``program(k)`` compiled at vocab ``range(vocab)``
    and max_seq_len ``n`` (``compile_kw`` passed on, e.g. ``positions="angle"``)."""
    kw = compile_kw or {}
    register(Construction(
        name=name, task="khop", attention="softmax", causal=True, params=params, bounds=bounds,
        program=lambda p: program(p["k"]),
        builder=lambda p: compiler(program(p["k"]), vocab=range(p["vocab"]), max_seq_len=p["n"], causal=True, **kw),
        check=lambda p: check_k(p["k"]), positions=kw.get("positions", "onehot"), **fields))


_register_khop(
    "khop_doubling", khop_doubling,
    source="Sanford, Hsu & Telgarsky (ICML 2024), Thm 4.2 via pointer doubling",
    summary="prev-token head, last-occurrence head (find^1), then one pointer look-up head per layer "
            "doubling find^(2^m) and advancing a partial pointer on the bits of k-1",
    params=(_K, _n(100, 1, 1024), _VOCAB),
    bounds={"attn_layers": _DOUBLING_LAYERS, "heads": _ONE_HEAD},
    defaults=tuple({"k": k, "n": 100, "vocab": 4} for k in _DEFAULT_KS),
    notes="d_model grows with n: every pointer is one-hot over the n+1 positions (O(n log k)).",
)

_register_khop(
    "khop_rasp", khop_rasp, compiler=compile_with_tracr,
    source="baseline: tracr's standard RASP primitives (SelectorWidth, pair-valued keys, categorical Aggregate)",
    summary="find via SelectorWidth counts and pair-valued keys, then pointer doubling with categorical "
            "Aggregates; compiled by tracr's own compile_rasp_to_model",
    params=(_K, _n(8, 1, 128), ParamSpec("vocab", int, 3, "alphabet size |Σ|", minimum=1, maximum=16)),
    bounds={},
    defaults=({"k": 1, "n": 8, "vocab": 3}, {"k": 2, "n": 8, "vocab": 3}),
    # The defaults' whole input set is 3^8 = 6561 sequences (every shorter input is a prefix, and the
    # model is causal), so `verify --all` proves these rows by the exhaustive check where the tables
    # cannot (the SelectorWidth heads' float32 radius swamps the find head's gap; docs/certification.md).
    exhaustive_in_all=True,
    notes="Exact only at small sizes: tracr's SelectorWidth MLP breaks on all-equal inputs from n = 10 "
          "at the default mlp_exactness, and soft categorical attention fails most inputs at vocab 8, n 64.",
)

_register_khop(
    "khop_floor", khop_floor,
    source="Sanford, Hsu & Telgarsky (ICML 2024), Thm 4.2 as stated (floor depth); SPEC §5 notes",
    summary="prev-token head, last-occurrence head (find^1), then one search head per layer that attends to "
            "the last match at or before a stored pointer: find^m -> find^(2m+1), partial pointer on the bits of k",
    params=(_K, _n(100, 1, 1024), _VOCAB),
    bounds={"attn_layers": Bound("floor(log2 k)+2", lambda p: floor_layers(p["k"])), "heads": _ONE_HEAD},
    defaults=tuple({"k": k, "n": 100, "vocab": 4} for k in (3, 7, 16)),
    notes="d_model grows with n: pointers are one-hot and the search head's position table reads the key's "
          "one-hot position (O(n log k) here; the paper's O(n + |Σ|) would need residual reuse). Whether constant "
          "width reaches the floor depth is open.",
)

_register_khop(
    "khop_constant_width", khop_doubling, compile_kw={"positions": "angle"},
    source="Sanford, Hsu & Telgarsky (ICML 2024), Thm 4.2 with width m = O(1) (constant in n)",
    summary="khop_doubling's program compiled with angle positions: positions and pointers as (cos, sin), "
            "token match on one-hot tokens, linear recency score, hardmax by scaling",
    params=(_K, _n(100, 2, 4096), _VOCAB),
    bounds={"attn_layers": _DOUBLING_LAYERS, "heads": _ONE_HEAD,
            # The layout's count: tokens |Σ|+2, one, 3 position numbers, prev |Σ|, find^1 (2) and its token
            # (|Σ|+1), then per look-up layer at most two pointers (2 each) and a token (|Σ|+1). No n in it.
            "d_model": Bound("3|Σ|+9 + (ceil(log2 k))(|Σ|+5), independent of n",
                             lambda p: 3 * p["vocab"] + 9 + (doubling_layers(p["k"]) - 2) * (p["vocab"] + 5))},
    defaults=({"k": 4, "n": 100, "vocab": 4}, {"k": 16, "n": 256, "vocab": 4}),
    notes="d_model is independent of n; the weights are not: the look-up scale grows like n^2, so exactness "
          "needs about 2 log2 n mantissa bits (see depthcraft precision).",
)
