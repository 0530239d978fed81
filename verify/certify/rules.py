"""The one table of block kinds the certifier proves, each with both halves and its soundness argument.

Every attention head, MLP and read-out of a model is one kind of block; :func:`classify` decides
which, once, and every consumer (the driver of :mod:`.report`, the program check
:func:`.program.check_head`) dispatches on that answer, so the float32 half and the program half
of a block can never be chosen by two rules that disagree. A row of :data:`RULES`:

==========================  =====================================  ======================================
kind                        float32 half (the weights' hardmax)    program half (= the RASP expression)
==========================  =====================================  ======================================
softmax head                :func:`.heads.certify_head`            :func:`.program.check_head` (selection
                                                                   and OV tables, ``_reference``)
numerical mean head         :func:`.heads.certify_head` (means)    :func:`.program.check_head` (one level,
                                                                   ``_check_numerical_values``)
scored head                 :func:`.heads.certify_head`            ``program._check_scored_head``
SelectorWidth head          :func:`.heads.certify_head` (means)    ``program._check_selector_width_head``
ReLU head                   :func:`.relu.certify_relu_head`        ``program._check_relu_head``
set union head              :func:`.sets.certify_union_head`       :func:`.sets.check_union_head`
set copy head               :func:`.sets.certify_set_copy`         :func:`.sets.check_set_copy`
MLP                         :func:`.mlps.certify_mlp`              :func:`.program.check_mlp`
threshold MLP (sets)        :func:`.sets.certify_threshold_mlp`    :func:`.sets.check_threshold_mlp`
meet MLP (sets)             :func:`.sets.certify_meet_mlp`         (its table is the meet, checked there)
read-out                    ``report._readout``                    :func:`.program.check_readout`
==========================  =====================================  ======================================

Each half's soundness argument is the docstring of the module (or function) named in the row's
``soundness``. The routes that prove whole inputs instead of tables (orbits :mod:`.symmetry`,
locality :mod:`.locality`, exhaustive :mod:`.certificate`) do not use this table.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, Optional

import numpy as np


@dataclasses.dataclass(frozen=True)
class Rule:
    """One kind of block: ``name``, the sublayer kind it occurs in, its two halves (qualified names)
    and where its soundness argument is."""

    name: str
    sublayer: str
    float32: str
    program: str
    soundness: str


RULES: Dict[str, Rule] = {r.name: r for r in (
    Rule("softmax head", "attn", "heads.certify_head", "program.check_head", "heads; program (Selection, Values)"),
    Rule("numerical mean head", "attn", "heads.certify_head", "program.check_head",
         "heads (Numerical heads); program (Numbers)"),
    Rule("scored head", "attn", "heads.certify_head", "program._check_scored_head", "program (Scored look-ups)"),
    Rule("SelectorWidth head", "attn", "heads.certify_head", "program._check_selector_width_head",
         "heads (Numerical heads); program (SelectorWidth)"),
    Rule("ReLU head", "attn", "relu.certify_relu_head", "program._check_relu_head", "relu"),
    Rule("set union head", "attn", "sets.certify_union_head", "sets.check_union_head", "sets"),
    Rule("set copy head", "attn", "sets.certify_set_copy", "sets.check_set_copy", "sets"),
    Rule("MLP", "mlp", "mlps.certify_mlp", "program.check_mlp", "mlps; program (MLPs)"),
    Rule("threshold MLP", "mlp", "sets.certify_threshold_mlp", "sets.check_threshold_mlp", "sets"),
    Rule("meet MLP", "mlp", "sets.certify_meet_mlp", "sets.certify_meet_mlp", "sets"),
    Rule("read-out", "readout", "report._readout", "program.check_readout", "report; program (Read-out)"),
)}


def _written(state, blocks, spec, m: np.ndarray):
    out_rows = spec.rows("out_rows", len(state.radius))
    live = out_rows[np.abs(m).sum(0) > 0]
    return [nm for nm, b in blocks.items() if np.isin(live, b.rows).any()]


def classify(state, blocks, spec, p, h: Optional[int], attention: str, dec, roles: Dict[str, str]) -> Rule:
    """The rule of head ``h`` of an attention sublayer, or of an MLP sublayer (``h`` None).

    Args:
        state, blocks: the abstract state before the sublayer and the residual blocks.
        spec, p: the sublayer's rows and weights.
        attention: the model's attention kind.
        dec: the program's decoder (:class:`.program.Decoder`), or None (no program linked).
        roles: the set analysis' block roles (:func:`.sets.set_blocks`).
    """
    from depthcraft.constructions.nodes import HeadSpec
    from depthcraft.verify.certify import sets
    from depthcraft.verify.certify.heads import numerical_written
    from depthcraft.verify.certify.program import NoSemantics, head_node, selector_width_of

    d = len(state.radius)
    out_rows = spec.rows("out_rows", d)
    if spec.kind == "attn":
        wvo = np.asarray(p["w_v"][h], np.float64) @ np.asarray(p["w_o"][h], np.float64)
        written = _written(state, blocks, spec, wvo)
        if dec is not None and roles:
            whole = [nm for nm, b in blocks.items() if np.isin(out_rows, b.rows).any()]
            if len(whole) == 1 and roles.get(whole[0]) == "scratch":
                return RULES["set union head"]
            if len(whole) == 1 and any(np.isin(spec.rows("v_rows", d), r).any() for r in state.setdom_rows.values()):
                return RULES["set copy head"]
        if attention == "relu":
            return RULES["ReLU head"]
        if dec is not None and selector_width_of(dec.link, written) is not None:
            return RULES["SelectorWidth head"]
        expr = None
        if dec is not None:
            try:
                expr = head_node(dec.link, written)
            except NoSemantics:
                expr = None
        if isinstance(expr, HeadSpec) and expr.kind.selects == "score":
            return RULES["scored head"]
        if numerical_written(blocks, out_rows, wvo):
            return RULES["numerical mean head"]
        return RULES["softmax head"]
    if dec is not None and roles:
        whole = [nm for nm, b in blocks.items() if np.isin(out_rows, b.rows).any()]
        if len(whole) == 1 and roles.get(whole[0]) == "set" and roles.get(whole[0] + sets.SCRATCH) == "scratch" \
                and whole[0] + sets.SCRATCH in state.setdom:
            return RULES["threshold MLP"]
        if len(whole) == 1 and isinstance(dec.link.nodes.get(whole[0]), sets.SetMeet):
            return RULES["meet MLP"]
    return RULES["MLP"]


def set_role(rule: Rule) -> Optional[str]:
    """The set analysis' role of a rule (``union``, ``copy``, ``threshold``, ``meet``), or None."""
    return {"set union head": "union", "set copy head": "copy", "threshold MLP": "threshold",
            "meet MLP": "meet"}.get(rule.name)


__all__ = ["Rule", "RULES", "classify", "set_role"]
