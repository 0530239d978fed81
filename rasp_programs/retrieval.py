"""RASP program for D-step retrieval (Mușat, ICLR 2025; SPEC §4.3), bidirectional.

Input layout (see :mod:`verify.tasks.retrieval`): facts as (key, value) token
pairs at model positions (2f+1, 2f+2), then ``?`` and the queried symbol x_D;
the answer x_0 is read at the last position. Facts have distinct keys.
"""

from __future__ import annotations

from tracr.rasp import rasp

from depthcraft.constructions.errors import ParameterError
from depthcraft.constructions.params import ParamSpec
from depthcraft.constructions.primitives import Read, fact_lookup, prev_token
from depthcraft.rasp_programs.doubling import odd_doubling_layers, odd_doubling_steps

#: The "no value" output (no fact with that key).
BOT = -1

#: Parameters shared by the retrieval task and its constructions.
PARAMS = (
    ParamSpec("d", int, 4, "chain length D (hops from the query to the answer)", minimum=1, maximum=64),
    ParamSpec("distractors", int, 2, "distractor chains c (disjoint symbols)", minimum=0, maximum=16),
    ParamSpec("symbols", int, 0, "symbol pool size S (0 = the minimum (c+1)(D+1))", minimum=0, maximum=512),
    ParamSpec("hops", int, 0, "hops asked for at the query (0 = D; 1..D-1: the implicit-curriculum targets)",
              minimum=0, maximum=64),
)


def asked_hops(p) -> int:
    """h: the number of hops the target asks for (the ``hops`` parameter, D when it is 0)."""
    return p.get("hops", 0) or p["d"]


def num_symbols(p) -> int:
    """S: the ``symbols`` parameter, or the minimum (c+1)(D+1) when it is 0. Symbols are 0..S-1."""
    return p["symbols"] or (p["distractors"] + 1) * (p["d"] + 1)


def query_token(p) -> int:
    """The token of the query marker ``?`` (= S)."""
    return num_symbols(p)


def seq_len(d: int, distractors: int) -> int:
    """n = 2 D (c+1) + 2: the facts, the marker and the queried symbol."""
    return 2 * d * (distractors + 1) + 2


def check_d(d) -> int:
    """Validate the chain length D (an integer >= 1); raises ParameterError."""
    if isinstance(d, bool) or not isinstance(d, int) or d < 1:
        raise ParameterError(f"d (the chain length D) must be an integer >= 1, got {d!r}")
    return d


def check_params(p) -> None:
    """Cross-parameter checks of the retrieval task; raises ParameterError."""
    check_d(p["d"])
    if p.get("hops", 0) > p["d"]:
        raise ParameterError(f"hops={p['hops']} is more than the chain length d={p['d']}")
    need = (p["distractors"] + 1) * (p["d"] + 1)
    if p["symbols"] and p["symbols"] < need:
        raise ParameterError(f"symbols={p['symbols']} is too few: {p['distractors'] + 1} disjoint chains of "
                             f"length d={p['d']} need (c+1)(D+1) = {need} symbols")


def retrieval_layers(d: int) -> int:
    """Attention layers of :func:`retrieval_doubling`: floor(log2 D) + 2."""
    return odd_doubling_layers(check_d(d))


def lower_bound_layers(d: int) -> int:
    """ceil(log_3(2D)): Mușat's lower bound on the layers for D-step retrieval (integer arithmetic)."""
    check_d(d)
    layers, reach = 0, 1
    while reach < 2 * d:
        layers, reach = layers + 1, reach * 3
    return layers


def value_slot(position: int) -> bool:
    """True at the model positions that hold a fact's value (the even ones)."""
    return position % 2 == 0


def retrieval_doubling(d: int) -> rasp.SOp:
    """The symbol D hops from the last token: L = floor(log2 D) + 2 attention layers, one head each.

    Write S_m(i) for the symbol m hops after x_i (S_0 = x_i; S_1(i) = the value
    of the fact whose key is x_i; ⊥ once no fact has that key). Every position
    computes the same S_m, so a value read at a fact's value slot v is S_m(v),
    and x_v = S_1 of that fact's key.

    * Layer 1, :func:`prev_token`: each value slot stores its fact's key.
    * Layer 2, :func:`fact_lookup` with query x_i, key = the stored fact key,
      value slots only: attends to the fact keyed by x_i and reads its value,
      P_2 = S_1; R_2 = S_(D mod 2) (S_0 is the token itself).
    * Layer l = 3..L, :func:`fact_lookup` with query P_{l-1} = S_(2^(l-2) - 1):
      attends to the fact keyed by it (its value is S_(2^(l-2))) and reads there
      P_l = S_(2^(l-2) + 2^(l-2) - 1) = S_(2^(l-1) - 1) and, when bit l-2 of D is
      1, R_l = S_(r + 2^(l-2)); else R_l = R_{l-1}. The last layer reads only R.

    The hop count of P follows m -> 2m + 1 per layer (pointer doubling over
    facts, one extra hop from the look-up itself), so as for
    :func:`rasp_programs.khop.khop_floor`, R_L = S_(D mod 2^(L-1)) = S_D for
    L = floor(log2 D) + 2. At the query position, x_D's chain has exactly D
    facts, so every look-up on the way finds its fact. BOS stores ⊥ for every
    S_m, and ⊥ matches no key, so a broken chain gives ⊥.

    Depth against the paper: Mușat (ICLR 2025) shows that at least
    ceil(log_3(2D)) layers are needed (:func:`lower_bound_layers`); this
    construction uses floor(log2 D) + 2: the gap grows like
    (1 - 1/log2 3) log2 D ≈ 0.37 log2 D, plus a constant.

    Width: symbols are one-hot (O(S log D)); the value-slot table reads the
    key's one-hot position (O(n)).

    Args:
        d: the chain length D, >= 1.
    Returns:
        Categorical SOp: the symbol D hops from x_i (BOT for ⊥); read at the last position.
    Raises:
        ParameterError: d < 1.
    """
    layers = retrieval_layers(d)
    key = prev_token(rasp.tokens, name="fact_key")

    def lookup(query, reads, layer):
        return fact_lookup(query, key, reads, key_positions=value_slot, name=f"lookup{layer}")

    first = Read(rasp.tokens, bos_value=BOT, name="S1")
    if layers == 2:
        return lookup(rasp.tokens, [first], 2)[0]
    p = lookup(rasp.tokens, [first], 2)[0]
    r = p if d & 1 else None  # None: S_0, the token itself
    for step in odd_doubling_steps(d):
        reads = [] if step.last else [Read(p, name=f"S{step.p_hops}")]
        if step.bit:
            reads.append(Read(r, name=f"S{step.r_hops}") if r is not None
                         else Read(rasp.tokens, bos_value=BOT, name=f"S{1 << (step.layer - 2)}"))
        outs = lookup(p, reads, step.layer)
        if step.last:
            return outs[-1]
        p = outs[0]
        if step.bit:
            r = outs[1]
    raise AssertionError("unreachable: the last layer returns")


