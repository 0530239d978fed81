"""RASP programs for the four tasks of Chen & Zou (ICML 2024), attention-only.

The paper's claims (SPEC §4.2): one attention layer memorises (SC); two layers,
copy then match, answer in-context questions (ICQA); two layers, parse then map,
match templates on unseen tokens (TM); three layers, parse, copy, match, match
templates in context (ICTM). Every program below uses only attention heads (no MLP,
no tracr Map): the project's hand-built heads of :mod:`constructions.primitives`.
Task formats and token layouts: :mod:`verify.tasks.chen_zou` (the paper's full text
was not available; the formats are this project's formalisation).

Each program takes ``attention`` = ``"softmax"`` or ``"relu"`` (the paper's theory uses
ReLU attention: scores through ReLU, no normalisation). A softmax head picks one key by
competition (gap ``hardness`` nats); a ReLU head gives every intended key weight exactly 1
and every other key 0, so where softmax picks the first match ReLU adds up all matches
(set-valued SOps).

Costs are in the task parameters; N = max_seq_len. Widths are reported by the
verifier (d_model counts every residual direction tracr allocates).
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

from tracr.rasp import rasp

from depthcraft.constructions.errors import ParameterError
from depthcraft.constructions.primitives import POSITION, Read, last_occurrence, match, memorise, position_map, prev_token

ATTENTION = ("softmax", "relu")


def _check_attention(attention: str) -> str:
    if attention not in ATTENTION:
        raise ParameterError(f"attention must be one of {list(ATTENTION)}, got {attention!r}")
    return attention


def sc_memorize(examples: Sequence[Sequence[int]], labels: Sequence[Any], *, attention: str = "softmax",
                heads: Optional[int] = None, seed: int = 0) -> rasp.SOp:
    """SC in one attention layer: memorisation heads read at CLS.

    Layer 1 (memorise, :func:`~constructions.primitives.memorise`): at CLS (position
    n+1) H heads with fixed random QK tables attend over BOS and positions 1..n+1 (token
    and position one-hot); their OV matrices are solved so that the summed read-out is
    exactly the one-hot label of each of the M dataset sequences.

    Cost: L = 1, MLP = 0. Heads (softmax): one head's features span n + V - 1
    dimensions with the constant shared, so H = ceil((M - 1) / (n + V - 2)) for generic
    scores (<= M), or a few more where that count's least-squares system is too
    ill-conditioned for the float32 model (M = 4096, n = 8, V = 4: 426, not 410;
    :func:`constructions.memory.solve`). ReLU: the read-out is additive over (position, token) pairs, whatever
    H, so this construction needs the M sequences' one-hot (position, token) encodings
    plus a constant to be linearly independent (M <= 1 + n(V - 1); the build refuses
    otherwise), and no one-layer ReLU read-out fits a dataset labelled like XOR
    ({aa, bb} vs {ab, ba}).

    Args:
        examples: the M inputs (sequence then CLS), all of length n+1.
        labels: the target token of each.
        attention: ``"softmax"`` or ``"relu"``.
        heads: force H (default: the fewest that interpolate).
        seed: seeds the QK tables.
    Returns:
        Categorical SOp, the label at CLS (None elsewhere).
    Raises:
        ParameterError: unknown attention kind.
        CompileError: (at compile time) conflicting labels, or no head count
            interpolates the dataset (ReLU: M > 1 + n(V - 1) or dependent encodings).
    """
    return memorise([rasp.tokens], examples, labels, attention=_check_attention(attention), heads=heads,
                    seed=seed, name="memorise")


def icqa_copy_match(*, attention: str = "softmax") -> rasp.SOp:
    """ICQA in two attention layers: copy, then match (a 1-hop induction head).

    * Layer 1 (copy, :func:`prev_token`): every position takes the previous token, so the
      answer position of pair k holds its question q_k.
    * Layer 2 (match): the query position (token q*) attends to the position whose copied
      question equals q*, i.e. the answer a_j, and reads its token. Questions are
      distinct and disjoint from answers, so exactly one key matches. Softmax: the
      existing :func:`last_occurrence` head; ReLU: :func:`match` with ``select="all"``
      (the single match gets weight 1).

    Exact for every m' <= m and every vocabulary: nothing depends on positions or on
    which tokens are used. Cost: L = 2, H = 1, MLP = 0; d_model = (Q + A) (tokens)
    + (Q + A) (copied token) + (Q + A) (answer read) + N + O(1).

    Args:
        attention: ``"softmax"`` or ``"relu"``.
    Returns:
        Categorical SOp (set-valued for ReLU), the answer at the query position.
    Raises:
        ParameterError: unknown attention kind.
    """
    _check_attention(attention)
    copied = prev_token(rasp.tokens, name="copy", attention=attention)
    if attention == "softmax":
        return last_occurrence(rasp.tokens, copied, [Read(rasp.tokens, name="answer")], name="match")[0]
    return match([(rasp.tokens, copied)], [Read(rasp.tokens, name="answer")], select="all", attention="relu",
                 name="match")[0]


def parse(*, where: Optional[Callable[[int, int], bool]] = None, fn: Optional[Callable[[int], int]] = None,
          attention: str = "softmax", name: str = "parse") -> rasp.SOp:
    """Parse the equality pattern: each position learns where its token occurred before.

    Softmax: the position of the first j <= i (in the window ``where``) with x_j = x_i
    (a :func:`match` with ``select="first"``), so (f(1), .., f(n)) is the canonical
    pattern up to renaming. ReLU: the set {j <= i in the window : x_j = x_i} (``select=
    "all"``), the row of the equality relation. ``fn`` maps the position read (e.g. to
    an offset in a block). One head, one layer.

    Args:
        where: candidate window ``where(i, j)`` on model positions (None: every j <= i).
        fn: maps the position read (None: the model position itself).
        attention: ``"softmax"`` or ``"relu"``.
        name: name of the head and of its read.
    Returns:
        Categorical SOp (softmax: a position) or set-valued SOp (ReLU: a set of positions).
    """
    select = "first" if attention == "softmax" else "all"
    return match([(rasp.tokens, rasp.tokens)], [Read(POSITION, fn=fn, name=name)], where=where, select=select,
                 attention=attention, name=name)[0]


def tm_parse_map(examples: Sequence[Sequence[int]], labels: Sequence[Any], *, attention: str = "softmax",
                 heads: Optional[int] = None, seed: int = 0) -> rasp.SOp:
    """TM in two attention layers: parse, then map.

    * Layer 1 (parse, :func:`parse`): position i stores where x_i first occurred
      (softmax) or every earlier position holding x_i (ReLU). This depends only on the
      template, never on which tokens were substituted.
    * Layer 2 (map, :func:`~constructions.primitives.memorise`): at CLS, memorisation
      heads over the parsed pattern (not the tokens) emit the template's label: the SC
      construction applied to the K parsed templates.

    Exact on every token of the vocabulary, including tokens a trained model never saw:
    no weight reads a token's identity except through equality. Cost: L = 2, MLP = 0;
    H = max(1, H_map) with H_map = ceil((K - 1) / (r - 1)) for generic scores, r the
    rank of one head's features on the parsed templates (reported by the verifier).

    Args:
        examples: one instance (tokens then CLS) of each of the K templates.
        labels: the label token of each template.
        attention: ``"softmax"`` or ``"relu"``.
        heads: force H_map (default: the fewest that interpolate).
        seed: seeds the map's QK tables.
    Returns:
        Categorical SOp, the template's label at CLS.
    Raises:
        ParameterError: unknown attention kind.
        CompileError: (at compile time) two templates with one parsed pattern but
            different labels, or no head count interpolates them.
    """
    pattern = parse(attention=_check_attention(attention))
    return memorise([pattern], examples, labels, attention=attention, heads=heads, seed=seed, name="map")


def ictm_parse_copy_match(n: int, *, attention: str = "softmax") -> rasp.SOp:
    """ICTM in three attention layers: parse, copy, match.

    Layout (model positions, block size b = n + 1): block k = 0, 1, .. holds content at
    kb+1 .. kb+n and, for examples, the label at kb+b; the query block is the last one.
    offset(i) = (i - 1) mod b + 1.

    * Layer 1 (parse, 1 head): every content position learns the offset of the first
      same-block position with its token (softmax) or the set of such offsets (ReLU):
      the block's pattern, one entry per position.
    * Layer 2 (copy, n heads): head s copies the entry at offset s of the block to the
      block's last content position and to its label position (:func:`position_map`).
      Afterwards the label position of every example and the query's last position hold
      the whole pattern P = (P_1, .., P_n), one subspace per offset.
    * Layer 3 (match, 1 head): the query's last position attends to the label position
      whose P equals its own (n pairs must agree; example templates are distinct, so
      exactly one does) and reads the label token.

    Exact for every m' <= m (the layout is periodic) and every substitution.
    Cost: L = 3, H = n (the copy layer), MLP = 0; d_model = O(n^2 + V + C + N).

    Args:
        n: template length.
        attention: ``"softmax"`` or ``"relu"``.
    Returns:
        Categorical SOp (set-valued for ReLU), the query's label at its last position.
    Raises:
        ParameterError: unknown attention kind, or n < 1.
    """
    _check_attention(attention)
    if n < 1:
        raise ParameterError(f"template length n must be >= 1, got {n}")
    b = n + 1

    def offset(i: int) -> int:
        return 0 if i == 0 else (i - 1) % b + 1

    def block(i: int) -> int:
        return (i - 1) // b

    def same_block(i: int, j: int) -> bool:
        return block(i) == block(j) and offset(i) <= n and offset(j) <= n

    pattern = parse(where=same_block, fn=offset, attention=attention)
    copies = []
    for s in range(1, n + 1):
        def target(i: int, s=s) -> Optional[int]:
            return block(i) * b + s if offset(i) >= n else None  # last content and label positions collect

        copies.append(position_map(target, Read(pattern, name=f"P{s}"), attention=attention, name=f"copy{s}"))
    select = "last" if attention == "softmax" else "all"
    return match([(c, c) for c in copies], [Read(rasp.tokens, name="label")],
                 where=lambda i, j: offset(i) == n and offset(j) == b, select=select, attention=attention,
                 name="match")[0]
