"""Teaching views of a compiled model on one input: ``depthcraft show``.

For one input sequence this module reports, from a real forward pass of the
compiled weights (:meth:`CompiledModel.forward_ids` with ``collect_attention``):

* the RASP program, one SOp per line in evaluation order (:func:`program_listing`);
* per attention layer and head: which SOps its QK circuit compares (query side x
  key side), what its OV circuit copies into which SOp, and where every query
  position attends (the top key and its weight; two keys when the weight is
  split) (:func:`attention_summary`);
* every MLP sublayer and the SOps it writes;
* the residual-stream layout: which dimensions hold which SOp (or pointer) and
  its values, and which sublayer writes them (:func:`residual_layout`);
* optionally a PNG with every head's attention map (:func:`attention_figure`).

Positions are model positions (SPEC §3): 0 is BOS, tokens sit at 1..N.
"""

from __future__ import annotations

import dataclasses
import os
import re
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

import click
import numpy as np
from tracr.rasp import rasp

from depthcraft.constructions.errors import InputError
from depthcraft.constructions.model import CompiledModel
from depthcraft.verify.structure import live_mlp_units

#: Attention weight below which a query's attention counts as split (the second key is shown).
SPLIT = 0.99
#: Entries per line in the text attention summary.
PER_LINE = 6


# ---------------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class HeadView:
    """One head on one input.

    Attributes:
        layer: attention layer (1-based, counting non-empty attention sublayers).
        head: head index in its layer (0-based).
        writes: SOps its OV circuit writes (residual names).
        reads_query, reads_key, reads_value: SOps its W_Q / W_K / W_V read.
        weights: [T, T] float attention weights (T = n + 1 with BOS), query rows, key columns.
    """

    layer: int
    head: int
    writes: List[str]
    reads_query: List[str]
    reads_key: List[str]
    reads_value: List[str]
    weights: np.ndarray

    @property
    def title(self) -> str:
        return f"L{self.layer} H{self.head}: {', '.join(self.writes) or '(nothing)'}"


@dataclasses.dataclass
class MLPView:
    """One MLP sublayer: its number (1-based), the SOps it reads and writes, its live hidden units."""

    index: int
    after_layer: int
    reads: List[str]
    writes: List[str]
    hidden: int


@dataclasses.dataclass
class ShowData:
    """Everything :func:`render_text` and :func:`attention_figure` print for one input."""

    title: str
    tokens_text: List[str]
    output_text: List[str]
    reference_text: Optional[List[str]]
    exact: Optional[bool]
    sublayers: List[Any]
    layout: List[Tuple[str, int, int, List[str], str]]
    program: List[str]


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


def _names(labels: Sequence[str], rows: Sequence[int]) -> List[str]:
    out: List[str] = []
    for r in rows:
        n = sop_name(labels[r])
        if n not in out:
            out.append(n)
    return out


def _live(w: np.ndarray, axis: int) -> np.ndarray:
    """Indices along ``axis`` of w where any weight is non-zero."""
    other = tuple(i for i in range(w.ndim) if i != axis)
    return np.flatnonzero(np.abs(w).max(axis=other) > 0) if w.size else np.zeros(0, int)


def describe_sublayers(model: CompiledModel, attention: Sequence[np.ndarray]) -> Tuple[List[Any], Dict[int, str]]:
    """Head and MLP views from the weights and the attention maps of one input.

    Args:
        model: the compiled model.
        attention: per attention sublayer, [heads, T, T] weights for the input.
    Returns:
        (views in order, {residual row: the sublayer that writes it}).
    """
    labels = model.residual_labels
    d = len(labels)
    views: List[Any] = []
    writer: Dict[int, str] = {}
    layer = mlp = 0
    maps = iter(attention)
    for spec, p in zip(model.arch.sublayers, model.params["layers"]):
        if spec.kind == "attn":
            layer += 1
            att = next(maps)
            q_rows, k_rows, v_rows, out_rows = (spec.rows(r, d) for r in ("q_rows", "k_rows", "v_rows", "out_rows"))
            for h in range(p["w_q"].shape[0]):
                wq, wk, wv, wo = (np.asarray(p[n][h]) for n in ("w_q", "w_k", "w_v", "w_o"))
                written = out_rows[_live(wo, 1)]
                if not len(written):
                    continue
                for r in written:
                    writer.setdefault(int(r), f"L{layer} H{h}")
                views.append(HeadView(layer, h, _names(labels, written), _names(labels, q_rows[_live(wq, 0)]),
                                      _names(labels, k_rows[_live(wk, 0)]), _names(labels, v_rows[_live(wv, 0)]),
                                      np.asarray(att[h])))
        else:
            mlp += 1
            w1, w2 = np.asarray(p["w_1"]), np.asarray(p["w_2"])
            in_rows, out_rows = spec.rows("in_rows", d), spec.rows("out_rows", d)
            written = out_rows[_live(w2, 1)] if w2.size else np.zeros(0, int)
            for r in written:
                writer.setdefault(int(r), f"MLP {mlp}")
            hidden = live_mlp_units(w1, w2)
            views.append(MLPView(mlp, layer, _names(labels, in_rows[_live(w1, 0)] if w1.size else []),
                                 _names(labels, written), hidden))
    return views, writer


def residual_layout(model: CompiledModel, writer: Dict[int, str]) -> List[Tuple[str, int, int, List[str], str]]:
    """Residual stream grouped by SOp: (name, first dim, last dim, values, written by).

    Directions are tracr's ``name:value`` (categorical: one direction per value)
    or ``name`` (numerical / the constant ``one``). Embedding rows are written by
    the token or position embedding.
    """
    labels = model.residual_labels
    tok = np.asarray(model.params["embed"]["token"])
    pos = np.asarray(model.params["embed"]["pos"])
    groups: List[Tuple[str, int, int, List[str], str]] = []
    keys: List[str] = []
    for i, lab in enumerate(labels):
        key, name = lab.split(":", 1)[0], sop_name(lab)
        value = lab.split(":", 1)[1] if ":" in lab else ""
        if groups and keys[-1] == key and groups[-1][2] == i - 1:
            g = groups[-1]
            groups[-1] = (name, g[1], i, g[3] + [value], g[4])
            continue
        keys.append(key)
        if i in writer:
            who = writer[i]
        elif np.abs(tok[:, i]).max() > 0:
            who = "token embedding"
        elif np.abs(pos[:, i]).max() > 0:
            who = "position embedding"
        else:
            who = "(unused)"
        groups.append((name, i, i, [value] if value else [], who))
    return groups


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
    from depthcraft.constructions.nodes import POSITION, HeadRead

    enc = "" if isinstance(expr, HeadRead) or not isinstance(expr, rasp.SOp) else \
        (" [numerical]" if rasp.is_numerical(expr) else "")
    if isinstance(expr, rasp.TokensType):
        return "tokens = input tokens"
    if isinstance(expr, rasp.IndicesType):
        return "indices = input positions 0..N-1 (RASP index t is model position t+1)"
    if isinstance(expr, HeadRead):
        head = expr.head
        args = ", ".join(f"{k}={_n(getattr(head, k))}" for k in ("query", "key") if getattr(head, k) is not None)
        src = "POSITION" if expr.read.source is POSITION else _n(expr.read.source)
        return f"{_n(expr)} = {head.kind}({args}).read({src})  [hand-built head {_n(head)}]"
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


# ---------------------------------------------------------------------------------------------
# Building the view
# ---------------------------------------------------------------------------------------------


def build(model: CompiledModel, tokens: Sequence[Any], *, title: str, program: Optional[rasp.SOp] = None,
          fmt=None, reference: Optional[Sequence[Any]] = None, none_value: Any = None, mismatch=None) -> ShowData:
    """Run ``model`` on one input and collect every view.

    Args:
        model: the compiled model.
        tokens: one input (token values, no BOS), length 1..max_seq_len.
        title: heading line.
        program: the RASP program (for the listing), or None.
        fmt: token value -> display string (default ``str``).
        reference: expected outputs (one per token) or None.
        none_value: decoded value of "no value".
        mismatch: ``mismatch(got [1, n], expected [1, n]) -> [1, n] bool`` (default ``!=``).
    Raises:
        InputError: a token outside the vocabulary, an empty or too long input.
    """
    fmt = fmt or str
    ids = model.encode([list(tokens)])
    out = model.forward_ids(ids, collect_attention=True)
    got = model.decode(np.asarray(out.logits), none_value)[0, 1:]
    attention = [np.asarray(a)[0] for a in out.attention]
    views, writer = describe_sublayers(model, attention)
    exact = None
    if reference is not None:
        exp = np.empty((1, len(reference)), dtype=object)
        exp[0, :] = list(reference)
        wrong = mismatch(got[None], exp) if mismatch else np.asarray(got[None] != exp, bool)
        exact = not bool(np.asarray(wrong).any())
    return ShowData(title=title, tokens_text=["BOS"] + [fmt(t) for t in tokens],
                    output_text=[fmt(v) for v in got.tolist()],
                    reference_text=None if reference is None else [fmt(v) for v in reference], exact=exact,
                    sublayers=views, layout=residual_layout(model, writer),
                    program=program_listing(program) if program is not None else [])


def for_construction(name: str, params: Dict[str, Any], text: str) -> Tuple[ShowData, CompiledModel]:
    """Views of the registered construction ``name`` at ``params`` on the input ``text`` (e.g. ``"b a e b"``).

    Raises:
        ParameterError: unknown construction or bad parameters.
        InputError: bad input text.
    """
    from depthcraft.verify import lookup

    r = lookup.resolve(name, params)
    c, p, task = r.construction, r.params, r.task
    tokens = task.parse_tokens(p, text)
    if len(tokens) > task.max_seq_len(p):  # refuse before compiling
        raise InputError(f"input of length {len(tokens)} is longer than max_seq_len={task.max_seq_len(p)}")
    model = r.build()
    return _for_registered(c, p, task, model, tokens), model


def _for_registered(c, p, task, model, tokens) -> ShowData:
    from depthcraft.verify.tasks.program import token_array

    x = token_array([tokens])
    expected, _ = task.reference(p, x)
    shown = " ".join(f"{k}={v}" for k, v in p.items())
    names = task.token_names(p)
    fmt = lambda v: names.get(v, "⊥" if v == task.none_value else str(v))  # noqa: E731
    program = c.program(p) if c.program is not None else None
    return build(model, tokens, title=f"{c.name}  {shown}\n{c.source}; {c.attention}, "
                 f"{'causal' if c.causal else 'bidirectional'}", program=program, fmt=fmt,
                 reference=expected[0].tolist(), none_value=task.none_value,
                 mismatch=lambda g, e: task.mismatch(p, g, e))


def for_program(program: rasp.SOp, tokens: Sequence[Any], *, vocab: Sequence[Any], max_seq_len: int,
                causal: bool = False, compiler: str = "depthcraft") -> Tuple[ShowData, CompiledModel]:
    """Views of a user's RASP program, compiled here, on one input (reference: its RASP semantics).

    Args:
        program: the RASP program (output SOp).
        tokens: one input (token values), length 1..max_seq_len.
        vocab, max_seq_len, causal, compiler: as in :func:`verify.api.check_program`.
    Raises:
        CompileError: the program cannot be compiled; InputError: bad tokens.
    """
    from depthcraft.constructions.compiler import compile_program, compile_with_tracr
    from depthcraft.verify.api import rasp_reference
    from depthcraft.verify.tasks.program import ProgramTask

    build_fn = compile_with_tracr if compiler == "tracr" else compile_program
    model = build_fn(program, vocab=vocab, max_seq_len=max_seq_len, causal=causal)
    model.encode([list(tokens)])  # InputError before evaluating the reference on bad tokens
    ref = ProgramTask(vocab=vocab, max_seq_len=max_seq_len, reference=rasp_reference(program, causal),
                      numerical=rasp.is_numerical(program))
    expected = ref.reference({}, np.asarray([list(tokens)], dtype=object))[0][0].tolist()
    return build(model, tokens, title=f"{sop_name(program.label)} (your RASP program; "
                 f"{'causal' if causal else 'bidirectional'}, N = {max_seq_len})", program=program,
                 reference=expected, mismatch=lambda g, e: ref.mismatch({}, g, e)), model


def for_saved(path: str, text: str) -> Tuple[ShowData, CompiledModel]:
    """Views of a model saved with :func:`constructions.io.save` on the input ``text``."""
    from depthcraft.constructions import io
    from depthcraft.verify import lookup
    from depthcraft.verify.tasks.program import ProgramTask

    model = io.load(path)
    r = lookup.resolve_model(model)
    if r is not None:
        c, p, task = r.construction, r.params, r.task
        return _for_registered(c, p, task, model, task.parse_tokens(p, text)), model
    generic = ProgramTask(vocab=model.vocab, max_seq_len=model.max_seq_len, reference=lambda xs: xs)
    tokens = generic.parse_tokens({}, text)
    return build(model, tokens, title=f"{os.path.basename(path)} (saved model)"), model


# ---------------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------------


def _attends(hv: HeadView, toks: List[str]) -> List[str]:
    """``q:x→k:y`` per query; a split row lists the keys with weight >= 0.05 (at most 4) and their weights."""
    entries = []
    for q in range(1, hv.weights.shape[0]):
        row = hv.weights[q]
        order = np.argsort(-row, kind="stable")
        k1 = int(order[0])
        if row[k1] >= SPLIT:
            entries.append(f"{q}:{toks[q]}→{k1}:{toks[k1]}")
            continue
        keys = [int(k) for k in order if row[k] >= 0.05]
        shown = ", ".join(f"{k}:{toks[k]} {row[k]:.2f}" for k in keys[:4]) + (", ..." if len(keys) > 4 else "")
        entries.append(f"{q}:{toks[q]}→{{{shown}}}")
    return entries


def attention_summary(data: ShowData) -> List[str]:
    """Text lines: per attention layer and head, its circuits and where each query position attends."""
    lines: List[str] = []
    for v in data.sublayers:
        if isinstance(v, HeadView):
            lines.append(f"layer {v.layer} head {v.head} -> {', '.join(v.writes)}")
            lines.append(f"  QK: query {{{', '.join(v.reads_query)}}} x key {{{', '.join(v.reads_key)}}};"
                         f" OV: {{{', '.join(v.reads_value)}}} -> {{{', '.join(v.writes)}}}")
            entries = _attends(v, data.tokens_text)
            for i in range(0, len(entries), PER_LINE):
                lines.append("  " + "  ".join(entries[i:i + PER_LINE]))
        else:
            lines.append(f"MLP {v.index} (after layer {v.after_layer}, {v.hidden} hidden units) -> "
                         f"{', '.join(v.writes)}")
            lines.append(f"  reads {{{', '.join(v.reads)}}}")
    return lines


def _values(vals: List[str], width: int = 40) -> str:
    text = ",".join(vals) if vals else "-"
    return text if len(text) <= width else text[:width - 3] + "..."


def render_text(data: ShowData) -> str:
    """The full text view (what ``depthcraft show`` prints)."""
    toks = data.tokens_text[1:]
    w = max([len(t) for t in toks + data.output_text + (data.reference_text or [])] + [1])
    row = lambda xs: " ".join(x.rjust(w) for x in xs)  # noqa: E731
    lines = [data.title, "", f"position   {row([str(i) for i in range(1, len(toks) + 1)])}",
             f"input      {row(toks)}", f"output     {row(data.output_text)}"]
    if data.reference_text is not None:
        lines.append(f"reference  {row(data.reference_text)}   {'exact' if data.exact else 'DIFFERS'}")
    if data.program:
        lines += ["", "RASP program"] + [f"  {ln}" for ln in data.program]
    n_attn = sum(isinstance(v, HeadView) for v in data.sublayers)
    lines += ["", f"Attention (positions: 0 = BOS, tokens 1..{len(toks)}; {n_attn} head{'s' * (n_attn != 1)}; "
              f"q:x→k:y = query q attends key k)"]
    lines += attention_summary(data)
    d = sum(g[2] - g[1] + 1 for g in data.layout)
    nw = max([len(g[0]) for g in data.layout] + [3])
    lines += ["", f"Residual stream (d_model = {d})", f"  {'dims':<9} {'SOp':<{nw}}  {'values':<40} written by"]
    for name, lo, hi, vals, who in data.layout:
        dims = f"{lo}" if lo == hi else f"{lo}-{hi}"
        lines.append(f"  {dims:<9} {name:<{nw}}  {_values(vals):<40} {who}")
    return "\n".join(lines)


def attention_figure(data: ShowData, path: str) -> None:
    """Write a PNG with every head's attention map (columns: layers, rows: heads), atomically.

    Each panel is the [T, T] weight matrix of one head on the input (query rows,
    key columns, BOS first), values 0..1.

    Raises:
        ParameterError: the path is not writable.
    """
    from matplotlib.figure import Figure

    from depthcraft.constructions.files import check_writable, save_figure_atomic

    check_writable(path)
    heads = [v for v in data.sublayers if isinstance(v, HeadView)]
    layers = sorted({h.layer for h in heads}) or [1]
    rows = max([sum(h.layer == lay for h in heads) for lay in layers] + [1])
    t = len(data.tokens_text)
    side = min(max(2.6, 0.3 * t + 1.4), 8.0)
    fig = Figure(figsize=(max(side * len(layers) + 1.0, 6.0), side * rows + 0.9), constrained_layout=True)
    axes = fig.subplots(rows, len(layers), squeeze=False)
    image = None
    labels = [f"{i}:{s}" for i, s in enumerate(data.tokens_text)] if t <= 40 else None
    for c, lay in enumerate(layers):
        col_heads = [h for h in heads if h.layer == lay]
        for r in range(rows):
            ax = axes[r, c]
            if r >= len(col_heads):
                ax.set_axis_off()
                continue
            hv = col_heads[r]
            image = ax.imshow(hv.weights, vmin=0.0, vmax=1.0, cmap="Blues")
            ax.set_xticks(range(t) if labels else [])
            ax.set_yticks(range(t) if labels else [])
            if labels:
                ax.set_xticklabels(labels, rotation=90, fontsize=7)
                ax.set_yticklabels(labels, fontsize=7)
            ax.set_xlabel("key position")
            if c == 0:
                ax.set_ylabel("query position")
            ax.set_title(hv.title, fontsize=9)
    if image is not None:
        fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8, label="attention weight")
    first = data.title.splitlines()[0]
    fig.suptitle(f"{first}\ninput: {' '.join(data.tokens_text[1:])}", fontsize=10)
    save_figure_atomic(fig, path, dpi=110)


# ---------------------------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------------------------


@click.command("show")
@click.argument("name")
@click.option("-p", "--param", "params", multiple=True, metavar="KEY=VALUE", help="Parameter, e.g. -p k=2.")
@click.option("--input", "text", required=True, help='Input tokens, e.g. "b a e b c" or "baebc".')
@click.option("--png", "png", type=click.Path(dir_okay=False), default=None,
              help="Also write every head's attention map to this PNG.")
def show_cmd(name, params, text, png) -> None:
    """Show a construction (or a saved .safetensors model) on one input, layer by layer.

    Prints the RASP program, where each head attends, every MLP, and the
    residual-stream layout; --png writes the attention maps.
    """
    from depthcraft.constructions.errors import ParameterError
    from depthcraft.constructions.params import parse_assignments
    from depthcraft.verify import lookup
    from depthcraft.constructions.files import check_outputs

    registered = name in {c.name for c in lookup.all_constructions()}  # a construction name wins over a file
    saved = not registered and (name.endswith(".safetensors") or os.path.isfile(name))
    check_outputs([png], inputs=[name] if saved else [])
    if saved:
        if params:
            raise ParameterError("-p cannot be combined with a saved model (its parameters are in the file)")
        data, _ = for_saved(name, text)
    else:
        data, _ = for_construction(name, parse_assignments(params), text)
    click.echo(render_text(data))
    if png:
        attention_figure(data, png)
        click.echo(f"\nattention maps written to {png}")
    sys.exit(0)
