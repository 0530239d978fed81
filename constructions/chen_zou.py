"""Registered Chen & Zou constructions (SPEC §5): attention-only, softmax and ReLU.

``sc_memorize`` (1 layer), ``icqa_copy_match`` (2), ``tm_parse_map`` (2) and
``ictm_parse_copy_match`` (3). Each takes ``attention=softmax|relu``; ``--all`` verifies
both kinds. Task formats and token layouts: :mod:`verify.tasks.chen_zou`; the SC
dataset and TM templates the builders memorise: :mod:`rasp_programs.chen_zou_data`.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

import numpy as np

from constructions.compiler import compile_program
from constructions.params import ParamSpec
from constructions.registry import Bound, Construction, register
from rasp_programs import chen_zou as prog
from rasp_programs.chen_zou_data import cls_token, label_token, sc_dataset, tm_templates

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
    rows = np.concatenate([x, np.full((len(x), 1), cls_token(p["vocab"]))], 1)
    return rows.tolist(), label_token(p["vocab"], labels).tolist()


def tm_examples(p: Mapping[str, Any]):
    """One TM instance per template (wildcard k -> token k, then CLS) and the label tokens."""
    pats, labels = tm_templates(p["n"], p["templates"], p["classes"], p["vocab"], p["held_out"], p["seed"])
    rows = np.concatenate([pats, np.full((len(pats), 1), cls_token(p["vocab"]))], 1)
    return rows.tolist(), label_token(p["vocab"], labels).tolist()


def _sc_program(p):
    return prog.sc_memorize(*sc_examples(p), attention=p["attention"], heads=_heads(p), seed=p["qk_seed"])


def _tm_program(p):
    return prog.tm_parse_map(*tm_examples(p), attention=p["attention"], heads=_heads(p), seed=p["qk_seed"])


def _compile(program, vocab: int, max_seq_len: int, attention: str):
    return compile_program(program, vocab=range(vocab), max_seq_len=max_seq_len, causal=True, attention=attention)


def _both(**given):
    return tuple(dict(given, attention=a) for a in prog.ATTENTION)


register(Construction(
    name="sc_memorize",
    task="sc",
    source=SOURCE + "; memorisation heads after Mahdavi, Liao & Thrampoulidis (ICLR 2024)",
    summary="one layer of memorisation heads at CLS: random QK tables, OV solved by least squares so the "
            "read-out is each sequence's one-hot label; H = ceil((M-1)/(n+V-2)) softmax heads",
    attention="softmax|relu",
    causal=True,
    params=(_ATTENTION, _HEADS, _QK_SEED),
    bounds={"attn_layers": Bound("1", lambda p: 1),
            "heads": Bound("M", lambda p: p["sequences"])},
    program=_sc_program,
    builder=lambda p: _compile(_sc_program(p), p["vocab"] + 1, p["n"] + 1, p["attention"]),
    defaults=(dict(sequences=64, n=8, vocab=4, classes=4, seed=0, attention="softmax"),
              dict(sequences=16, n=8, vocab=4, classes=4, seed=0, attention="relu")),
    exhaustive_in_all=True,
    notes="softmax: H = ceil((M-1)/(n+V-2)) for generic QK tables and a dataset that uses every token at "
          "every position. ReLU: the one-layer read-out is additive over (position, token) pairs, so the "
          "build needs the sequences' one-hot encodings (plus a constant) independent, M <= 1 + n(V-1), and "
          "refuses otherwise; the ReLU default uses M = 16 <= 25.",
))

register(Construction(
    name="icqa_copy_match",
    task="icqa",
    source=SOURCE,
    summary="layer 1 copies each answer's question into the answer position (previous-token head); layer 2 "
            "attends from the query to the answer whose copied question equals it",
    attention="softmax|relu",
    causal=True,
    params=(_ATTENTION,),
    bounds={"attn_layers": Bound("2", lambda p: 2)},
    program=lambda p: prog.icqa_copy_match(attention=p["attention"]),
    builder=lambda p: _compile(prog.icqa_copy_match(attention=p["attention"]), p["questions"] + p["answers"],
                               2 * p["m"] + 1, p["attention"]),
    defaults=_both(m=8, questions=16, answers=16),
    notes="H = 1; exact for every m' <= m and every vocabulary (no weight depends on which token is used).",
))

register(Construction(
    name="tm_parse_map",
    task="tm",
    source=SOURCE,
    summary="layer 1 parses each position's equality pattern (first occurrence / set of equal positions); "
            "layer 2 maps the parsed pattern at CLS to the template's label with memorisation heads",
    attention="softmax|relu",
    causal=True,
    params=(_ATTENTION, _HEADS, _QK_SEED),
    bounds={"attn_layers": Bound("2", lambda p: 2)},
    program=_tm_program,
    builder=lambda p: _compile(_tm_program(p), p["vocab"] + 1, p["n"] + 1, p["attention"]),
    defaults=_both(n=5, templates=12, classes=4, vocab=8, held_out=2, seed=0),
    exhaustive_in_all=True,
    notes="H = max(1, H_map), H_map = ceil((K-1)/(r-1)) with r the rank of one head's features on the parsed "
          "templates; exact on every token (held-out ones included): weights see tokens only through equality.",
))

register(Construction(
    name="ictm_parse_copy_match",
    task="ictm",
    source=SOURCE,
    summary="layer 1 parses each block's pattern, layer 2 (n heads) copies it to the block's label position "
            "and to the query's last position, layer 3 matches the query's pattern and reads the label",
    attention="softmax|relu",
    causal=True,
    params=(_ATTENTION,),
    bounds={"attn_layers": Bound("3", lambda p: 3)},
    program=lambda p: prog.ictm_parse_copy_match(p["n"], attention=p["attention"]),
    builder=lambda p: _compile(prog.ictm_parse_copy_match(p["n"], attention=p["attention"]),
                               p["vocab"] + p["labels"], p["m"] * (p["n"] + 1) + p["n"], p["attention"]),
    defaults=_both(n=3, m=4, vocab=8, labels=4),
    notes="H = n (one copy head per offset); exact for every m' <= m and every substitution.",
))

__all__ = ["sc_examples", "tm_examples"]
