"""Registered Chen & Zou constructions (SPEC §5): attention-only, softmax and ReLU.

``sc_memorize`` (1 layer), ``icqa_copy_match`` (2), ``tm_parse_map`` (2) and
``ictm_parse_copy_match`` (3). Each takes ``attention=softmax|relu``; ``--all`` verifies
both kinds. Task formats and token layouts: :mod:`verify.tasks.chen_zou`; the SC
dataset and TM templates the builders memorise: :mod:`rasp_programs.chen_zou_data`.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Mapping, Optional

from depthcraft.constructions.compiler import compile_program
from depthcraft.constructions.params import ParamSpec
from depthcraft.constructions.catalogue.registry import Bound, Construction, register
from depthcraft.rasp_programs import chen_zou as prog
from depthcraft.rasp_programs.chen_zou_data import label_token, sc_dataset, tm_templates, with_cls

SOURCE = "Chen & Zou (ICML 2024), SPEC §4.2 (project formalisation)"
_ATTENTION = ParamSpec("attention", str, "softmax", "attention kind the construction is built for",
                       choices=prog.ATTENTION)
_HEADS = ParamSpec("heads", int, 0, "memorisation heads (0: the fewest that interpolate)", minimum=0,
                   maximum=4096)
_QK_SEED = ParamSpec("qk_seed", int, 0, "seed of the memorisation heads' random QK tables", minimum=0)


def _heads(p: Mapping[str, Any]) -> Optional[int]:
    return p["heads"] or None


def sc_examples(p: Mapping[str, Any]):
    """SC inputs (the M sequences then CLS) and their label tokens."""
    x, labels = sc_dataset(p["sequences"], p["n"], p["vocab"], p["classes"], p["seed"])
    return with_cls(x, p["vocab"]).tolist(), label_token(p["vocab"], labels).tolist()


def tm_examples(p: Mapping[str, Any]):
    """One TM instance per template (wildcard k -> token k, then CLS) and the label tokens."""
    pats, labels = tm_templates(p["n"], p["templates"], p["classes"], p["vocab"], p["held_out"], p["seed"])
    return with_cls(pats, p["vocab"]).tolist(), label_token(p["vocab"], labels).tolist()


def _sc_program(p):
    return prog.sc_memorize(*sc_examples(p), attention=p["attention"], heads=_heads(p), seed=p["qk_seed"])


def _tm_program(p):
    return prog.tm_parse_map(*tm_examples(p), attention=p["attention"], heads=_heads(p), seed=p["qk_seed"])


def _both(**given):
    return tuple(dict(given, attention=a) for a in prog.ATTENTION)


def _register_cz(name: str, task: str, program: Callable[[Mapping[str, Any]], Any], *, layers: int,
                 vocab: Callable[[Mapping[str, Any]], int], max_seq_len: Callable[[Mapping[str, Any]], int],
                 params=(_ATTENTION,), bounds: Optional[Dict[str, Bound]] = None, source: str = SOURCE,
                 **fields: Any) -> None:
    """Register an attention-only, causal Chen & Zou construction built for ``p["attention"]``:
    ``program(p)`` compiled at token values ``range(vocab(p))`` and ``max_seq_len(p)``; bound
    ``layers`` attention layers (plus ``bounds``)."""
    register(Construction(
        name=name, task=task, source=source, attention="softmax|relu", causal=True, params=params,
        bounds={"attn_layers": Bound(str(layers), lambda p: layers), **(bounds or {})},
        program=program,
        builder=lambda p: compile_program(program(p), vocab=range(vocab(p)), max_seq_len=max_seq_len(p),
                                          causal=True, attention=p["attention"]),
        **fields))


_register_cz(
    "sc_memorize", "sc", _sc_program, layers=1,
    vocab=lambda p: p["vocab"] + 1, max_seq_len=lambda p: p["n"] + 1,
    source=SOURCE + "; memorisation heads after Mahdavi, Liao & Thrampoulidis (ICLR 2024)",
    summary="one layer of memorisation heads at CLS: random QK tables, OV solved by least squares so the "
            "read-out is each sequence's one-hot label; H = ceil((M-1)/(n+V-2)) softmax heads",
    params=(_ATTENTION, _HEADS, _QK_SEED),
    bounds={"heads": Bound("M", lambda p: p["sequences"])},
    defaults=(dict(sequences=64, n=8, vocab=4, classes=4, seed=0, attention="softmax"),
              dict(sequences=16, n=8, vocab=4, classes=4, seed=0, attention="relu")),
    exhaustive_in_all=True,
    notes="softmax: H = ceil((M-1)/(n+V-2)) for generic QK tables and a dataset that uses every token at "
          "every position, or a few more where that count is too ill-conditioned for float32 weights (the "
          "float32 read-out must be within 1/4 of every label; M = 4096: 426 heads, not 410). ReLU: the "
          "one-layer read-out is additive over (position, token) pairs, so the build needs the sequences' "
          "one-hot encodings (plus a constant) independent, M <= 1 + n(V-1), and refuses otherwise; "
          "the ReLU default uses M = 16 <= 25.",
)

_register_cz(
    "icqa_copy_match", "icqa", lambda p: prog.icqa_copy_match(attention=p["attention"]), layers=2,
    vocab=lambda p: p["questions"] + p["answers"], max_seq_len=lambda p: 2 * p["m"] + 1,
    summary="layer 1 copies each answer's question into the answer position (previous-token head); layer 2 "
            "attends from the query to the answer whose copied question equals it",
    defaults=_both(m=8, questions=16, answers=16),
    notes="H = 1; exact for every m' <= m and every vocabulary (no weight depends on which token is used).",
)

_register_cz(
    "tm_parse_map", "tm", _tm_program, layers=2,
    vocab=lambda p: p["vocab"] + 1, max_seq_len=lambda p: p["n"] + 1,
    summary="layer 1 parses each position's equality pattern (first occurrence / set of equal positions); "
            "layer 2 maps the parsed pattern at CLS to the template's label with memorisation heads",
    params=(_ATTENTION, _HEADS, _QK_SEED),
    defaults=_both(n=5, templates=12, classes=4, vocab=8, held_out=2, seed=0),
    exhaustive_in_all=True,
    notes="H = max(1, H_map), H_map = ceil((K-1)/(r-1)) with r the rank of one head's features on the parsed "
          "templates; exact on every token (held-out ones included): weights see tokens only through equality.",
)

_register_cz(
    "ictm_parse_copy_match", "ictm", lambda p: prog.ictm_parse_copy_match(p["n"], attention=p["attention"]),
    layers=3, vocab=lambda p: p["vocab"] + p["labels"], max_seq_len=lambda p: p["m"] * (p["n"] + 1) + p["n"],
    summary="layer 1 parses each block's pattern, layer 2 (n heads) copies it to the block's label position "
            "and to the query's last position, layer 3 matches the query's pattern and reads the label",
    defaults=_both(n=3, m=4, vocab=8, labels=4),
    notes="H = n (one copy head per offset); exact for every m' <= m and every substitution.",
)
