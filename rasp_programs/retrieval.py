"""RASP program for D-step retrieval (Mușat, ICLR 2025; SPEC §4.3), bidirectional.

Input layout (see :mod:`verify.tasks.retrieval`): facts as (key, value) token
pairs at model positions (2f+1, 2f+2), then ``?`` and the queried symbol x_D;
the answer x_0 is read at the last position. Facts have distinct keys.
"""

from __future__ import annotations

from tracr.rasp import rasp

from depthcraft.constructions.errors import ParameterError
from depthcraft.constructions.params import ParamSpec
from depthcraft.constructions.primitives import POSITION, Read, fact_lookup, prev_token, scored_lookup
from depthcraft.rasp_programs.doubling import odd_doubling_layers, odd_doubling_steps

#: The "no value" output (no fact with that key).
BOT = -1

#: Largest symbol pool S, given (``symbols``) or implied ((c+1)(D+1) when ``symbols`` is 0): one cap for both.
MAX_SYMBOLS = 512

#: Parameters shared by the retrieval task and its constructions.
PARAMS = (
    ParamSpec("d", int, 4, "chain length D (hops from the query to the answer)", minimum=1, maximum=64),
    ParamSpec("distractors", int, 2, "distractor chains c (disjoint symbols)", minimum=0, maximum=16),
    ParamSpec("symbols", int, 0, "symbol pool size S (0 = the minimum (c+1)(D+1))", minimum=0,
              maximum=MAX_SYMBOLS),
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
    if not p["symbols"] and need > MAX_SYMBOLS:
        raise ParameterError(f"d={p['d']} and distractors={p['distractors']} imply a symbol pool of (c+1)(D+1) = "
                             f"{need}, above the cap of {MAX_SYMBOLS} on symbols; use (c+1)(D+1) <= {MAX_SYMBOLS}")
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


def tripling_radius(layers: int) -> int:
    """r_l = (3^l - 1) / 2: the radius, in slots, of what a fact slot knows after l layers of :func:`retrieval_tripling`."""
    return (3 ** layers - 1) // 2


def tripling_layers(d: int) -> int:
    """Attention layers of :func:`retrieval_tripling`: the least L with (3^L - 1)/2 >= 2D, i.e. ceil(log_3(4D + 1))."""
    check_d(d)
    layers = 1
    while tripling_radius(layers) < 2 * d:
        layers += 1
    return layers


def tripling_heads(d: int) -> int:
    """Heads per layer of :func:`retrieval_tripling`: 2 (the last layer has 1)."""
    check_d(d)
    return 2


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




# --------------------------------------------------------------------------------------------
# retrieval_tripling
# --------------------------------------------------------------------------------------------

#: "No F-label" (F-labels are model positions of key slots, all >= 1).
NO_LINK = 0


def _odd(p: int) -> bool:
    return p % 2 == 1


def tripling_first_layer():
    """Layer 1 of :func:`retrieval_tripling` (Mușat 2025, the tripling construction): every slot reads
    its two neighbours on the chain.

    Returns:
        (CR1, FR1, CL1, FL1): categorical SOps per position: the right and left neighbours'
        content labels (the end slot's symbol, None where the link is not a content link) and
        their link positions (``NO_LINK`` where there is none).
    """
    right = scored_lookup(
        [(POSITION, POSITION, lambda i, j: 3.0 * (_odd(i) and j == i + 1) + 1.0 * (not _odd(i) and _odd(j))),
         (rasp.tokens, rasp.tokens, lambda a, b: 2.0 * (a == b))],
        [Read(rasp.tokens, name="RT1"), Read(POSITION, fn=lambda p: p % 2, name="RPpar1"),
         Read(POSITION, fn=lambda p: p if _odd(p) else NO_LINK, name="FR1")],
        bos_score=1.0, name="right1")
    left = scored_lookup(
        [(POSITION, POSITION, lambda i, j: 3.0 * (not _odd(i) and j == i - 1) + 1.0 * (_odd(i) and not _odd(j))),
         (rasp.tokens, rasp.tokens, lambda a, b: 2.0 * (a == b))],
        [Read(rasp.tokens, name="LT1"), Read(POSITION, fn=lambda p: p % 2, name="LPpar1"),
         Read(POSITION, fn=lambda p: p - 1 if p >= 2 and not _odd(p) else NO_LINK, name="FL1")],
        bos_score=1.0, name="left1")
    rt, rpar, fr = right
    lt, lpar, fl = left
    # C-labels: the end slot's symbol when the link there is a content link (right: the end is a
    # value slot; left: a key slot), else None. One MLP (tracr SequenceMap, 2 (S+1) hidden units each).
    cr = rasp.categorical(rasp.SequenceMap(lambda t, par: t if par == 0 else None, rt, rpar)).named("CR1")
    cl = rasp.categorical(rasp.SequenceMap(lambda t, par: t if par == 1 else None, lt, lpar)).named("CL1")
    return cr, fr, cl, fl


def _tripling_fetch(direction: str, labels, layer: int, last: bool):
    """Layer >= 2: fetch the segment beyond one end (exact abutment 4, neighbour slot 3, end slot 2)."""
    cr, fr, cl, fl = labels
    if direction == "right":
        mine_c, mine_f, theirs_c, theirs_f, near = cr, fr, cl, fl, (lambda f, j: j == f + 1)
        end_bonus = lambda c, j: 1.0 * _odd(j)  # noqa: E731  a key slot: the one after a value slot
    else:
        mine_c, mine_f, theirs_c, theirs_f, near = cl, fl, cr, fr, (lambda f, j: j == f)
        end_bonus = lambda c, j: 1.0 * (not _odd(j))  # noqa: E731  a value slot: the one before a key slot
    terms = [(mine_c, theirs_c, lambda a, b: 4.0 * (a == b)),
             (mine_f, theirs_f, lambda a, b: 4.0 * (a == b != NO_LINK)),
             (mine_c, rasp.tokens, lambda a, b: 2.0 * (a == b)),
             (mine_c, POSITION, end_bonus),
             (mine_f, POSITION, lambda f, j: 3.0 * (f != NO_LINK and near(f, j)))]
    tag = "R" if direction == "right" else "L"
    reads = [Read(mine_c, name=f"C{tag}{layer}")] + ([] if last else [Read(mine_f, name=f"F{tag}{layer}")])
    return scored_lookup(terms, reads, bos_score=1.0, name=f"{direction}{layer}")


def retrieval_tripling(d: int) -> rasp.SOp:
    """x_0 at the query with L = ceil(log_3(4D + 1)) attention layers: segments of the chain triple per layer.

    The chain as a path of slots. A fact (k, v) occupies a *key slot* (odd model
    position) and a *value slot* (the next, even one); read ``? x_D`` as one more
    fact whose value slot is the query position. The slots of the queried chain
    form the path P_-1 = ``?``, P_0 = the query (x_D), P_1 = key slot of (x_D,
    x_{D-1}), P_2 = its value slot, P_3 = key slot of (x_{D-1}, x_{D-2}), ...,
    P_2D = value slot of (x_1, x_0), whose token is the answer. Consecutive slots
    are linked in two ways: a key slot and its value slot by position (an
    *F-link*, named by the key slot's model position m: the value slot is at
    m + 1), a value slot and the next key slot by content (a *C-link*, named by
    their common symbol). Every distractor chain is such a path too (P_1..P_2D).
    Each symbol is the key of at most one fact and the value of at most one, so
    every link name names one link. Write s and e for a path's first and last slot.

    What a slot t stores after layer l: the names of the links just beyond the
    ends of its segment [lo_l(t), hi_l(t)] of its path, as four SOps: CR = the
    symbol at hi if hi is a value slot (else None), FR = the model position of hi
    if hi is a key slot (else 0), and CL / FL likewise for lo (CL: the symbol if lo
    is a key slot; FL: the model position of lo minus 1 if lo is a value slot).
    Claim: lo_l(t) = max(s, t - r_l) and hi_l(t) = min(e, t + r_l), with
    r_l = (3^l - 1)/2 (:func:`tripling_radius`).

    * Layer 1 (two :func:`scored_lookup` heads; scores in units of the hardness):
      the right head gives the key slot at m the slot at m + 1 (position table 3),
      a value slot the key slot with its own symbol (symbol match 2 + key slot 1
      = 3); the slot itself scores 2 (own symbol), every other slot at most 1
      (and BOS 1): so it attends the next slot on the path, or itself at the
      path's end. The left head is the mirror image. Each reads the attended
      slot's symbol, the parity of its position and (as a table on the position)
      the F-name; one MLP (two tracr SequenceMaps) turns symbol and parity into
      the C-name. So lo_1 = max(s, t - 1), hi_1 = min(e, t + 1).
    * Layer l >= 2, right head of slot t (segment [a, b] at level l-1, r' = r_{l-1}):
      score 4 for the slot whose *left* name equals t's right name (CL = CR or
      FL = FR != 0): its segment starts at b + 1, the slot right after b (for a
      C-link the key slot with b's symbol, for an F-link the value slot at b's
      position + 1); 3 for that slot b + 1 itself (its symbol equals CR and it is
      a key slot: 2 + 1; or its position is FR + 1); 2 for b itself (CR is its
      symbol); at most 1 for every other position. It reads the attended slot's
      CR and FR. The left head is the mirror image (CR/FR against CL/FL, a value
      slot bonus, position FL).

    Proof of the claim, by induction on l (l = 1 above). Take a slot t of a path
    and l >= 2; by the hypothesis a = max(s, t - r'), b = min(e, t + r').
    Uniqueness: the names at level l-1 are those of distinct links for distinct
    segment ends, and a segment that starts at b + 1 > s starts there unclipped,
    so its slot is t + 2r' + 1; so at most one slot scores 4. Its other terms add
    at most 1 (it is not b or b + 1, as r' >= 1), so it wins by >= 1 over the
    slot b + 1 (3) when it exists. Cases for the right end:
    (i) t + 2r' + 1 <= e: the slot u = t + 2r' + 1 exists, scores >= 4 and is
    attended; hi_l(t) = hi_{l-1}(u) = min(e, t + 3r' + 1) = min(e, t + r_l).
    (ii) b < e < t + 2r' + 1: no slot scores 4; b + 1 exists and scores 3, b
    scores 2, every other position at most 1: t attends b + 1, whose segment ends
    at min(e, b + 1 + r') = e = min(e, t + r_l).
    (iii) b = e: the right name of e is a C-name whose symbol is no key (e is a
    chain's last value), so nothing scores 4 or 3; e itself scores 2 and is
    attended, and t keeps its names: hi_l(t) = e.
    The left end is the mirror image (the chain's first slot s is a key slot whose
    symbol is no value; for the queried chain s is ``?``). Distinct chains share
    no symbol and no position, so no score term links them. In every case the
    attended key beats all others by >= 1 unit (>= 4 against <= 3, 3 against
    <= 2, 2 against <= 1; BOS scores 1), so a softmax head with hardness g puts
    weight >= 1 / (1 + n e^-g) on it.

    The answer: the query is P_0, so hi_L(P_0) = min(2D, r_L) = 2D when
    r_L >= 2D, i.e. 3^L >= 4D + 1 (:func:`tripling_layers`), and P_2D is a value
    slot: its CR is x_0. The last layer computes only the query's right head.
    Heads: 2 per layer, 1 in the last. BOS's names are None / 0 and BOS attends
    itself (the head's BOS-to-BOS score), so it matches nothing.

    Depth against the bound. Mușat (ICLR 2025) proves >= ceil(log_3(2D)) layers
    (:func:`lower_bound_layers`); here L = ceil(log_3(4D + 1)), so
    c = L - ceil(log_3 2D) is 0 or 1 (0 for D = 2, 5, 6, 14..20, 41..60, 122..182,
    i.e. when 2D <= 3^m < 4D + 1 fails for m = ceil(log_3 2D)). Why the extra layer:
    the query is the *end* of its chain. In one layer a position can only address
    segments that touch what it already knows, so an interior segment grows from
    3^(l-1) to at most 3^l slots (both sides), but the query's grows only on one
    side, by at most 3^(l-1): after L layers it reaches (3^L - 1)/2 slots, and
    the answer is 2D slots away. The lower bound's count (3^L >= 2D) lets the
    position that answers grow like an interior one. Within this segment model
    (what a position knows is a segment of its chain, and it can fetch only
    segments that touch its own) ceil(log_3(4D + 1)) is therefore optimal; whether
    a construction outside that model reaches ceil(log_3 2D) for every D is open.

    Inputs: exact when the facts form disjoint chains (no symbol is the value of
    two facts) and the queried chain has exactly D facts -- what the task's
    samplers, edge cases and exhaustive enumeration produce. On other inputs
    (a broken or longer chain) it answers the last symbol of x_D's chain within
    reach, not ⊥ / x_0 (unlike :func:`retrieval_doubling`).

    Width: every level stores two symbol names (S + 1 values each) and two
    position names (about n/2 + 1 each); the layer-1 heads and the score tables
    on POSITION read the one-hot position: d_model = O(L (S + n)).

    Args:
        d: the chain length D, >= 1.
    Returns:
        Categorical SOp: x_0 at the last (query) position (None elsewhere is not scored).
    Raises:
        ParameterError: d < 1.
    """
    layers = tripling_layers(d)
    labels = tripling_first_layer()
    for layer in range(2, layers + 1):
        last = layer == layers
        right = _tripling_fetch("right", labels, layer, last)
        if last:
            return right[0]
        left = _tripling_fetch("left", labels, layer, last)
        labels = (right[0], right[1], left[0], left[1])
    raise AssertionError("unreachable: tripling_layers >= 2")
