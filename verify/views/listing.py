"""The RASP program as text: one line ``name = operation(arguments)`` per SOp, in evaluation order.

Names are the SOps' names without tracr's numeric id (:func:`sop_name`), so they match the
residual-stream labels of the compiled model.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional

from tracr.rasp import rasp

_UNNUMBERED = ("tokens", "indices", "one", "length")


def sop_name(label: str) -> str:
    """Residual direction label -> the SOp's name.

    tracr labels an SOp ``<name>_<unique id>`` and a direction ``<label>:<value>``;
    this drops the value and the id (``"find1_3:7"`` -> ``"find1"``), so names
    match the RASP program's whichever instance was compiled. ``tokens``,
    ``indices`` and ``one`` carry no id.
    """
    label = label.split(":", 1)[0]
    if label in _UNNUMBERED:
        return label
    return re.sub(r"_\d+(_selector_width_attn_output)?$", r"\1", label)


def _fn_name(f: Any) -> str:
    name = getattr(f, "__name__", None) or type(f).__name__
    return "λ" if name == "<lambda>" else name


def _pred(sel: rasp.Select) -> str:
    pred = sel.predicate
    return pred.name if isinstance(pred, rasp.Comparison) else _fn_name(pred)


def _selector(sel: Any) -> str:
    if isinstance(sel, rasp.Select):
        return f"Select({_n(sel.keys)}, {_n(sel.queries)}, {_pred(sel)})"
    if isinstance(sel, (rasp.SelectorAnd, rasp.SelectorOr)):
        op = "And" if isinstance(sel, rasp.SelectorAnd) else "Or"
        return f"Selector{op}({_selector(sel.fst)}, {_selector(sel.snd)})"
    if isinstance(sel, rasp.SelectorNot):
        return f"SelectorNot({_selector(sel.inner)})"
    return getattr(sel, "label", repr(sel))


def _n(expr: Any) -> str:
    return sop_name(expr.label)


def describe_expr(expr: rasp.RASPExpr) -> Optional[str]:
    """One line ``name = operation(arguments)`` for an SOp (None for selectors and heads)."""
    from depthcraft.constructions.nodes import LABEL, POSITION, HeadRead, SetMeet

    enc = "" if isinstance(expr, HeadRead) or not isinstance(expr, rasp.SOp) else \
        (" [numerical]" if rasp.is_numerical(expr) else "")
    if isinstance(expr, rasp.TokensType):
        return "tokens = input tokens"
    if isinstance(expr, rasp.IndicesType):
        return "indices = input positions 0..N-1 (RASP index t is model position t+1)"
    if isinstance(expr, HeadRead):
        head = expr.head
        args = ", ".join(f"{k}={_n(getattr(head, k))}" for k in ("query", "key") if getattr(head, k) is not None)
        marker = expr.read.source is POSITION or expr.read.source is LABEL  # not SOps: no label
        src = repr(expr.read.source) if marker else _n(expr.read.source)
        return f"{_n(expr)} = {head.kind}({args}).read({src})  [hand-built head {_n(head)}]"
    if isinstance(expr, SetMeet):
        return f"{_n(expr)} = meet({_n(expr.a)}, {_n(expr.b)})  [MLP: 1 when the sets share an element]"
    if isinstance(expr, rasp.Map):
        return f"{_n(expr)} = Map({_fn_name(expr.f)}, {_n(expr.inner)}){enc}"
    if isinstance(expr, rasp.SequenceMap):
        return f"{_n(expr)} = SequenceMap({_fn_name(expr.f)}, {_n(expr.fst)}, {_n(expr.snd)}){enc}"
    if isinstance(expr, rasp.Aggregate):
        default = "" if expr.default is None else f", default={expr.default!r}"
        return f"{_n(expr)} = Aggregate({_selector(expr.selector)}, {_n(expr.sop)}{default}){enc}"
    if isinstance(expr, rasp.SelectorWidth):
        return f"{_n(expr)} = SelectorWidth({_selector(expr.selector)})"
    if isinstance(expr, rasp.Full):
        return f"{_n(expr)} = Full({expr.fill!r})"
    if isinstance(expr, rasp.SOp):
        return f"{_n(expr)} = {type(expr).__name__}(...)"
    return None


def program_listing(program: rasp.SOp) -> List[str]:
    """The RASP program as lines ``name = operation(args)``, inputs first, output last.

    Names are the SOps' names without tracr's numeric id (see :func:`sop_name`);
    SOps are ordered by their depth in the expression graph, then by name.
    """
    import networkx as nx
    from tracr.compiler import nodes, rasp_to_graph

    graph = rasp_to_graph.extract_rasp_graph(program).graph
    depth: Dict[str, int] = {}
    for node_id in nx.topological_sort(graph):
        depth[node_id] = 1 + max((depth[p] for p in graph.predecessors(node_id)), default=-1)
    lines = []
    for node_id in nx.lexicographical_topological_sort(graph, key=lambda i: (depth[i], sop_name(i), i)):
        line = describe_expr(graph.nodes[node_id][nodes.EXPR])
        if line is not None:
            lines.append(line)
    return lines
