"""The residual width the compile-time dedupe saves, per construction (``depthcraft dedupe``).

Each registered construction is compiled at each of its ``verify --all`` parameter sets twice:
with every SOp in its own subspace (tracr's layout, :func:`constructions.compiler.without_dedupe`)
and with identical SOps stored once (:mod:`constructions.dedupe`, the default). Both models are
measured (:func:`depthcraft.verify.structure.measure`); the dedupe may only lower ``d_model``,
never change the attention layers, the heads or the MLP layers, and that is checked here.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional

from depthcraft.constructions.compiler import without_dedupe
from depthcraft.constructions.errors import DepthcraftError
from depthcraft.verify import lookup
from depthcraft.verify.structure import measure

#: Structure fields the dedupe must leave unchanged.
UNCHANGED = ("attn_layers", "heads", "mlp_layers")


class DedupeChangedStructure(DepthcraftError):
    """The dedupe changed a construction's depth or heads, or widened it (a bug: it may only narrow)."""


def savings(name: str, params: Dict[str, Any]) -> Dict[str, Any]:
    """``d_model`` of one construction before and after the dedupe.

    Args:
        name: catalogue name.
        params: parameters (missing ones take their defaults).
    Returns:
        ``{"construction", "params", "d_model_before", "d_model_after", "saved", "merged",
        "attn_layers", "heads"}``; ``merged`` lists ``[dropped, kept]`` SOp names (empty for
        constructions compiled by tracr's own pipeline, which is not deduped).
    Raises:
        ParameterError: unknown construction or parameter.
        DedupeChangedStructure: the deduped model differs in depth, heads or MLP layers, or is wider.
    """
    r = lookup.resolve(name, params)
    with without_dedupe():
        before = r.construction.builder(r.params)
    after = r.construction.builder(r.params)
    sb, sa = measure(before), measure(after)
    changed = [k for k in UNCHANGED if sb[k] != sa[k]]
    if changed or sa["d_model"] > sb["d_model"]:
        raise DedupeChangedStructure(
            f"{name} {r.params}: the dedupe changed {changed or ['d_model upwards']} "
            f"({ {k: sb[k] for k in (*UNCHANGED, 'd_model')} } -> { {k: sa[k] for k in (*UNCHANGED, 'd_model')} })")
    return {"construction": name, "params": dict(r.params), "d_model_before": sb["d_model"],
            "d_model_after": sa["d_model"], "saved": sb["d_model"] - sa["d_model"],
            "merged": [list(m) for m in after.meta.get("deduped", [])],
            "attn_layers": sa["attn_layers"], "heads": sa["heads"]}


def savings_all(progress: Optional[Callable[[str, Dict[str, Any]], None]] = None) -> Dict[str, Any]:
    """:func:`savings` for every construction at each of its ``verify --all`` parameter sets.

    Returns:
        ``{"rows": [...], "total_saved": int}`` in ``depthcraft list`` order.
    """
    rows: List[Dict[str, Any]] = []
    for c in lookup.all_constructions():
        for given in c.defaults:
            if progress is not None:
                progress(c.name, given)
            rows.append(savings(c.name, given))
    return {"rows": rows, "total_saved": sum(r["saved"] for r in rows)}


__all__ = ["DedupeChangedStructure", "UNCHANGED", "savings", "savings_all"]
