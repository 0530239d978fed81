"""Compile RASP programs (with the hand-built heads) to explicit weights through tracr.

Pipeline (tracr's own steps, with two additions):

0. Identical SOps are stored once (:func:`constructions.dedupe.dedupe_program`).
1. ``tracr.compiler.rasp_to_graph`` extracts the expression graph.
2. Value sets and residual bases are inferred (:func:`_infer_bases`: tracr's rules
   for standard SOps, plus the hand-built heads' outputs).
3. Every standard SOp gets tracr's own CRAFT block (``expr_to_craft_graph``, run
   node by node); every :class:`~constructions.nodes.HeadSpec` gets its
   hand-built head (:mod:`constructions.heads`).
4. Blocks are scheduled as early as their inputs allow (:func:`_schedule`):
   attention sublayers at even, MLP sublayers at odd positions. This is the
   minimum depth for the graph; tracr's heuristic may leave empty sublayers.
5. The weights are built from each CRAFT block's live residual rows
   (:func:`constructions.model.from_craft`; no d_model x d_model array), or, with
   ``assembly="tracr"``, by tracr's ``craft_model_to_transformer`` and converted by
   :func:`constructions.model.from_tracr`: the same weights bit for bit.

tracr runs with the patches of :mod:`constructions.tracr_patches` (speed only).

:func:`compile_with_tracr` is the unmodified tracr pipeline, for baselines.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import math
from typing import Any, Dict, Iterable, Iterator, Optional

import networkx as nx
import numpy as np
from tracr.compiler import basis_inference, craft_model_to_transformer, expr_to_craft_graph, nodes, rasp_to_graph
from tracr.compiler import assemble as tracr_assemble
from tracr.compiler import compiling as tracr_compiling
from tracr.craft import bases, transformers, vectorspace_fns
from tracr.rasp import rasp
from tracr.transformer import encoder as tracr_encoder
from tracr.utils import errors as tracr_errors

from depthcraft.constructions import angles, setmlp, tracr_patches
from depthcraft.constructions.dedupe import dedupe_program
from depthcraft.constructions.errors import CompileError
from depthcraft.constructions.heads import build_head
from depthcraft.constructions.model import BOS, PAD, CompiledModel, ProgramLink, from_craft, from_tracr
from depthcraft.constructions.nodes import (LABEL, POSITION, HeadRead, HeadSpec, SetMeet, apply_fn, is_multi,
                                            is_pointer)


#: Whether compiles that leave ``dedupe`` unset store identical SOps once (see :func:`without_dedupe`).
_DEDUPE: contextvars.ContextVar = contextvars.ContextVar("depthcraft_dedupe", default=True)


@contextlib.contextmanager
def without_dedupe() -> Iterator[None]:
    """Inside this block, :func:`compile_program` calls that leave ``dedupe`` unset compile every SOp
    into its own subspace (tracr's layout): the width *before* the dedupe, for builders that do not
    pass ``dedupe`` themselves (the registered constructions)."""
    token = _DEDUPE.set(False)
    try:
        yield
    finally:
        _DEDUPE.reset(token)


def _check_vocab(vocab: Iterable[Any], max_seq_len: int) -> set:
    vocab = set(vocab)
    if not vocab:
        raise CompileError("vocab is empty")
    if BOS in vocab or PAD in vocab:
        raise CompileError(f"vocab must not contain the reserved tokens {BOS!r} and {PAD!r}")
    if not isinstance(max_seq_len, (int, np.integer)) or max_seq_len < 1:
        raise CompileError(f"max_seq_len must be an integer >= 1 (got {max_seq_len!r})")
    return vocab


def compile_with_tracr(program: rasp.SOp, vocab: Iterable[Any], max_seq_len: int, *, causal: bool = True,
                       mlp_exactness: int = 100, meta: Optional[Dict[str, Any]] = None) -> CompiledModel:
    """Compile with tracr's own ``compile_rasp_to_model`` (standard RASP primitives only).

    Args:
        program: RASP program (output SOp).
        vocab: input token values.
        max_seq_len: N, longest input (BOS excluded).
        causal: mask future keys in the assembled model.
        mlp_exactness: tracr's MLP discretisation parameter (default 100, tracr's).
        meta: metadata stored on the model.
    Returns:
        The compiled model (softmax attention).
    Raises:
        CompileError: tracr refused the program (message names the cause).
    """
    vocab = _check_vocab(vocab, max_seq_len)
    try:
        with tracr_patches.applied():
            assembled = tracr_compiling.compile_rasp_to_model(
                program, vocab=vocab, max_seq_len=int(max_seq_len), causal=causal,
                compiler_bos=BOS, compiler_pad=PAD, mlp_exactness=mlp_exactness)
    except (NotImplementedError, TypeError, ValueError, KeyError, AssertionError) as e:
        raise CompileError(f"tracr could not compile {program.label}: {type(e).__name__}: {e}") from e
    basis, link = _sink_basis(program, vocab, max_seq_len)
    model = from_tracr(assembled, output_labels=[str(d) for d in basis], max_seq_len=int(max_seq_len),
                       causal=causal, meta={"compiler": "tracr", **(meta or {})})
    model.program = link
    return model


def _sink_basis(program, vocab, max_seq_len):
    """(the output SOp's basis, the program link) as tracr's own compiler infers them."""
    extracted = rasp_to_graph.extract_rasp_graph(program)
    basis_inference.infer_bases(extracted.graph, extracted.sink, vocab, max_seq_len)
    return extracted.sink[nodes.OUTPUT_BASIS], program_link(extracted.graph, extracted.sink)


def program_link(graph: nx.DiGraph, sink: Dict[str, Any]) -> ProgramLink:
    """The :class:`~constructions.model.ProgramLink` of a compiled graph (bases inferred).

    Args:
        graph: the RASP graph after basis inference (nodes carry ``EXPR`` and ``OUTPUT_BASIS``).
        sink: the output node.
    Returns:
        Every node's expression by label, and (SOp label, value) of every categorical
        residual direction (``str(direction)`` is its residual label).
    """
    exprs, values = {}, {}
    for node_id in graph.nodes:
        node = graph.nodes[node_id]
        exprs[node_id] = node[nodes.EXPR]
        for d in node.get(nodes.OUTPUT_BASIS) or ():
            if d.value is not None:
                values[str(d)] = (d.name, d.value)
    return ProgramLink(nodes=exprs, values=values, sink=sink[nodes.ID])


# ---------------------------------------------------------------------------------------------
# Basis inference
# ---------------------------------------------------------------------------------------------


def _value_set(expr: rasp.SOp, graph: nx.DiGraph, vocab: set, n: int) -> set:
    vs = lambda e: graph.nodes[e.label][nodes.VALUE_SET]  # noqa: E731
    if isinstance(expr, HeadRead):
        # For a set-valued SOp this is the set of its possible *elements* (its basis).
        read = expr.read
        if read.source is LABEL:
            return set(expr.head.spec.labels)
        if read.source is POSITION:
            out = {apply_fn(read.fn, v) for v in range(n + 1)}
        else:
            out = set()
            for v in vs(read.source):  # a value map may send a value to a set: its elements
                mapped = apply_fn(read.fn, v)
                out |= mapped if isinstance(mapped, frozenset) and expr.multi else {mapped}
        bos = expr.bos_value
        if isinstance(bos, frozenset):
            out |= bos
        elif bos is not None:
            out.add(bos)
        return out
    if isinstance(expr, SetMeet):
        return {0, 1}
    if isinstance(expr, rasp.TokensType):
        return set(vocab)
    if isinstance(expr, rasp.IndicesType):
        return set(range(n))
    if isinstance(expr, rasp.SelectorWidth):
        return set(range(n + 1))
    if isinstance(expr, rasp.Full):
        return {expr.fill}
    if isinstance(expr, rasp.Map):
        f = tracr_errors.ignoring_arithmetic_errors(expr.f)
        return {y for y in (f(x) for x in vs(expr.inner)) if y is not None}
    if isinstance(expr, rasp.SequenceMap):
        f = tracr_errors.ignoring_arithmetic_errors(expr.f)
        return {y for y in itertools.starmap(f, itertools.product(vs(expr.fst), vs(expr.snd))) if y is not None}
    if isinstance(expr, rasp.Aggregate):
        inner = vs(expr.sop)
        if rasp.is_categorical(expr):
            return set(inner)
        if set(inner) <= {0, 1}:  # tracr's rule, kept as it is (the existing constructions' widths depend on it)
            return {x / length for x in inner for length in range(1, n + 1)}
        return numerical_means(expr.label, inner, n)
    raise CompileError(f"unsupported SOp {expr.label} ({type(expr).__name__})")


#: Most values :func:`numerical_means` enumerates before it refuses.
MAX_MEAN_VALUES = 1 << 14


def numerical_means(label: str, values: Iterable[Any], n: int, limit: int = MAX_MEAN_VALUES) -> set:
    """Every value a numerical Aggregate of ``values`` can output: the mean of any 1..n of them.

    tracr's basis inference accepts a numerical Aggregate whose values truncate to 0/1
    (``int(x)``: 0.5, 1.0, 1.5 pass) and gives it the value set ``{x / length}``: right for a
    selector that picks one position (the mean of one value is that value), wrong for a mean of
    several non-0/1 values (0.5 and 1.0 average to 0.75, not in the set), which a later
    numerical-to-categorical MLP would then decode wrongly. Here the value set is every such
    mean, computed exactly (``fractions.Fraction``, then ``float``): a superset of what any
    selector produces, so any selector compiles correctly; a one-position selector's outputs
    are the values themselves.

    Args:
        label: the Aggregate's label (for the error).
        values: the aggregated SOp's value set (numbers).
        n: max_seq_len: the most positions a selector can pick.
        limit: most means to enumerate.
    Returns:
        A set of floats.
    Raises:
        CompileError: a value is not a number, or the means are more than ``limit`` (the
            feature left out: averaging many distinct values over long inputs makes a value
            set too large for an exact numerical-to-categorical read-out).
    """
    from fractions import Fraction

    try:
        inner = sorted({Fraction(v) for v in values})
    except (TypeError, ValueError):
        raise CompileError(f"numerical Aggregate {label} averages non-numbers {sorted(map(repr, values))}") from None
    sums, out = {Fraction(0)}, set()
    for length in range(1, n + 1):
        sums = {s + v for s in sums for v in inner}
        out |= {s / length for s in sums}
        if len(out) > limit:
            raise CompileError(f"numerical Aggregate {label}: the means of up to n={n} of its {len(inner)} values "
                               f"are more than {limit} distinct values; tracr's value set (x/length) holds only "
                               f"for 0/1 values or one-position selectors, so this compiler leaves it out; "
                               f"use 0/1 values or a shorter max_seq_len")
    return {float(v) for v in out}


def plan_graph(program: rasp.SOp, vocab: Iterable[Any], max_seq_len: int, positions: str = "onehot",
               dedupe: bool = True) -> nx.DiGraph:
    """Steps 0-2 of the pipeline only: the expression graph with every SOp's value set and basis.

    No block and no weight is built, so this is cheap (value sets, and one call of each Map /
    SequenceMap function per value or pair of values): :mod:`verify.cost` sizes a build from it.

    Returns:
        tracr's graph (``nodes.VALUE_SET`` and ``nodes.OUTPUT_BASIS`` set on every SOp).
    Raises:
        CompileError: bad vocab or length, an unsupported SOp.
    """
    vocab = _check_vocab(vocab, max_seq_len)
    if dedupe:
        program = dedupe_program(program).program
    graph = rasp_to_graph.extract_rasp_graph(program).graph
    _infer_bases(graph, vocab, int(max_seq_len), positions)
    return graph


def _infer_bases(graph: nx.DiGraph, vocab: set, n: int, positions: str = "onehot") -> None:
    for node_id in nx.topological_sort(graph):
        expr = graph.nodes[node_id][nodes.EXPR]
        if not isinstance(expr, rasp.SOp):
            continue
        values = _value_set(expr, graph, vocab, n)
        graph.nodes[node_id][nodes.VALUE_SET] = values
        if positions == "angle" and is_pointer(expr):
            space = angles.angle_space(expr.label)
        elif rasp.is_categorical(expr):
            space = bases.VectorSpaceWithBasis.from_values(expr.label, values)
        else:
            space = bases.VectorSpaceWithBasis.from_names([expr.label])
        graph.nodes[node_id][nodes.OUTPUT_BASIS] = space.basis


# ---------------------------------------------------------------------------------------------
# Blocks
# ---------------------------------------------------------------------------------------------


class _Opaque:
    """Stand-in expression for neighbour nodes when tracr builds one node's block."""


def _tracr_block(graph: nx.DiGraph, node_id: str, bos_dir, mlp_exactness: float):
    """tracr's own CRAFT block for one standard SOp (expr_to_craft_graph on a one-node view)."""
    view = nx.DiGraph()
    view.add_node(node_id, **{k: v for k, v in graph.nodes[node_id].items() if k != nodes.MODEL_BLOCK})
    frontier = list(graph.predecessors(node_id))
    for pred in frontier:
        view.add_node(pred, **{**graph.nodes[pred], nodes.EXPR: _Opaque()})
        view.add_edge(pred, node_id)
        if not isinstance(graph.nodes[pred][nodes.EXPR], rasp.SOp):  # a selector: add its inputs too
            for pp in graph.predecessors(pred):
                view.add_node(pp, **{**graph.nodes[pp], nodes.EXPR: _Opaque()})
                view.add_edge(pp, pred)
    try:
        expr_to_craft_graph.add_craft_components_to_rasp_graph(view, bos_dir=bos_dir, mlp_exactness=mlp_exactness)
    except (NotImplementedError, TypeError, ValueError, AssertionError) as e:
        raise CompileError(f"tracr cannot compile {node_id}: {type(e).__name__}: {e}") from e
    return view.nodes[node_id][nodes.MODEL_BLOCK]


def _check_angle_program(graph: nx.DiGraph, sink) -> None:
    """In angle mode only hand-built heads may read positions or pointers (tracr's blocks need one-hot)."""
    if is_pointer(sink[nodes.EXPR]):
        raise CompileError("positions='angle': the program's output is a pointer (an angle); output a token "
                           "read at the pointer instead")
    for node_id in graph.nodes:
        expr = graph.nodes[node_id][nodes.EXPR]
        if isinstance(expr, (HeadSpec, HeadRead)):
            continue
        for pred in graph.predecessors(node_id):
            src = graph.nodes[pred][nodes.EXPR]
            if src is rasp.indices or isinstance(src, rasp.IndicesType) or is_pointer(src):
                raise CompileError(f"positions='angle': {node_id} reads {pred}, but positions and pointers are "
                                   f"angles there; only the hand-built heads can read them")


def _add_blocks(graph: nx.DiGraph, n: int, bos_dir, mlp_exactness: float, causal: bool,
                attention: str = "softmax", positions: str = "onehot") -> None:
    space_of = lambda e: bases.VectorSpaceWithBasis(graph.nodes[e.label][nodes.OUTPUT_BASIS])  # noqa: E731
    reads_of: Dict[str, list] = {}
    for node_id in graph.nodes:
        expr = graph.nodes[node_id][nodes.EXPR]
        if isinstance(expr, HeadRead):
            reads_of.setdefault(expr.head.label, []).append(expr)
    for node_id in graph.nodes:
        expr = graph.nodes[node_id][nodes.EXPR]
        block = None
        if isinstance(expr, HeadSpec):
            if expr.kind.causal is True and not causal:
                raise CompileError(f"{expr.kind} needs a causal model (keys after the query must be masked)")
            if expr.kind.causal is False and causal:
                raise CompileError(f"{expr.kind} is bidirectional: compile with causal=False")
            if expr.attention != attention:
                raise CompileError(f"head {expr.label} is designed for {expr.attention} attention, but the model "
                                   f"is compiled with attention={attention!r}")
            # Each output SOp in the graph (a renamed copy of a read counts separately) gets
            # its own subspace; reads nobody uses are not written.
            outputs = [(r.read, space_of(r)) for r in reads_of.get(expr.label, [])]
            block = build_head(expr, space_of, outputs, n, bos_dir, positions)
        elif isinstance(expr, SetMeet):
            block = setmlp.meet_mlp(space_of(expr.a), space_of(expr.b), space_of(expr), expr.label)
        elif isinstance(expr, rasp.SOp) and not isinstance(expr, (rasp.TokensType, rasp.IndicesType, HeadRead)):
            if any(is_multi(graph.nodes[pred][nodes.EXPR]) for pred in graph.predecessors(node_id)):
                raise CompileError(f"{node_id} reads a set-valued SOp: only hand-built heads can read those")
            if attention != "softmax" and isinstance(expr, rasp.Aggregate):
                raise CompileError(f"{node_id} is a tracr attention block, designed for softmax (BOS gets half a "
                                   f"score); it is not exact under attention={attention!r}")
            block = _tracr_block(graph, node_id, bos_dir, mlp_exactness)
        graph.nodes[node_id][nodes.MODEL_BLOCK] = block


# ---------------------------------------------------------------------------------------------
# Scheduling
# ---------------------------------------------------------------------------------------------


def _kind(block) -> Optional[str]:
    if isinstance(block, (transformers.AttentionHead, transformers.MultiAttentionHead)):
        return "attn"
    if isinstance(block, transformers.MLP):
        return "mlp"
    if isinstance(block, transformers.SeriesWithResiduals):
        return "attn+mlp"
    return None


def _schedule(graph: nx.DiGraph) -> transformers.SeriesWithResiduals:
    """Place each block in the earliest sublayer of its kind after all its inputs (ASAP).

    Sublayer 2l is layer l's attention, 2l+1 its MLP. Returns the CRAFT model with
    one MultiAttentionHead / MLP per non-empty sublayer, in order.
    """
    ready: Dict[str, int] = {}
    placed: Dict[int, list] = {}
    for node_id in nx.topological_sort(graph):
        node = graph.nodes[node_id]
        after = max((ready[p] for p in graph.predecessors(node_id)), default=-1)
        kind = _kind(node.get(nodes.MODEL_BLOCK))
        if kind is None:
            ready[node_id] = after
            continue
        want_even = kind in ("attn", "attn+mlp")
        slot = after + 1
        if (slot % 2 == 0) != want_even:
            slot += 1
        block = node[nodes.MODEL_BLOCK]
        if kind == "attn+mlp":
            attn, mlp = block.blocks
            placed.setdefault(slot, []).append(attn)
            placed.setdefault(slot + 1, []).append(mlp)
            ready[node_id] = slot + 1
        else:
            placed.setdefault(slot, []).append(block)
            ready[node_id] = slot
    if not placed:
        raise CompileError("the program has no attention or MLP operation to compile (it is tokens or indices)")
    blocks = [b for s in sorted(placed) for b in placed[s]]
    residual = bases.join_vector_spaces(*[b.residual_space for b in blocks])
    for b in blocks:
        b.residual_space = residual
    model_blocks = []
    for s in sorted(placed):
        if s % 2 == 0:
            model_blocks.append(transformers.MultiAttentionHead(placed[s]))
        else:
            model_blocks.append(transformers.MLP.combine_in_parallel(placed[s]))
    return transformers.SeriesWithResiduals(model_blocks)


def _fix_head_sizes(craft_model: transformers.SeriesWithResiduals, custom: set) -> None:
    """Prepare heads for tracr's assembler.

    * tracr sizes value projections by the QK size (``key_size`` = max QK dim over
      heads), so a head whose OV writes more directions than any QK reads would not
      fit. Pad that head's QK left space with its own output directions (zero rows:
      no new residual directions, no change in scores).
    * tracr divides scores by sqrt(key_size). Multiply the hand-built heads' QK by
      the same factor so their logit gaps are the documented ``hardness``.
    """
    heads = [h for blk in craft_model.blocks if not isinstance(blk, transformers.MLP) for h in blk.as_multi().heads()]
    widest_ov = max((h.w_ov.matrix.shape[1] for h in heads), default=0)
    key_size = max((max(h.w_qk.matrix.shape) for h in heads), default=1)
    if widest_ov > key_size:
        h = max(heads, key=lambda h: h.w_ov.matrix.shape[1])
        left = bases.join_vector_spaces(h.w_qk.left_space, h.w_ov.output_space)
        mat = np.zeros((left.num_dims, h.w_qk.right_space.num_dims))
        old = {d: i for i, d in enumerate(h.w_qk.left_space.basis)}
        for i, d in enumerate(left.basis):
            if d in old:
                mat[i] = h.w_qk.matrix[old[d]]
        h.w_qk = vectorspace_fns.ScalarBilinear(left, h.w_qk.right_space, mat)
        key_size = max(max(hh.w_qk.matrix.shape) for hh in heads)
    for h in heads:
        if id(h) in custom:
            h.w_qk = vectorspace_fns.ScalarBilinear(h.w_qk.left_space, h.w_qk.right_space,
                                                    h.w_qk.matrix * math.sqrt(key_size))


def _assemble(craft_model, graph: nx.DiGraph, sink, n: int, causal: bool, positions: str):
    """tracr's ``craft_model_to_transformer`` with the position block chosen by ``positions``.

    ``onehot``: tracr's own one-hot ``indices:0..N-1`` block. ``angle``: no indices
    block (the angle directions are written afterwards by :func:`_angle_embedding`).
    """
    if positions == "onehot":
        return craft_model_to_transformer.craft_model_to_transformer(
            craft_model=craft_model, graph=graph, sink=sink, max_seq_len=n, causal=causal,
            compiler_bos=BOS, compiler_pad=PAD)
    tokens_space = bases.VectorSpaceWithBasis.from_values(
        rasp.tokens.label, graph.nodes[rasp.tokens.label][nodes.VALUE_SET] | {BOS, PAD})
    categorical = rasp.is_categorical(sink[nodes.EXPR])
    assembled = tracr_assemble.assemble_craft_model(
        craft_model=craft_model, tokens_space=tokens_space, indices_space=bases.VectorSpaceWithBasis([]),
        output_space=bases.VectorSpaceWithBasis(sink[nodes.OUTPUT_BASIS]), categorical_output=categorical,
        causal=causal)
    assembled.input_encoder = tracr_encoder.CategoricalEncoder(
        basis=tokens_space.basis, enforce_bos=True, bos_token=BOS, pad_token=PAD, max_seq_len=n + 1)
    assembled.output_encoder = tracr_encoder.CategoricalEncoder(
        basis=sink[nodes.OUTPUT_BASIS], enforce_bos=False, bos_token=None, pad_token=None) \
        if categorical else tracr_encoder.NumericalEncoder()
    return assembled


def _angle_embedding(model: CompiledModel) -> None:
    """Write the angle position embedding (:func:`constructions.angles.position_features`) into ``model``."""
    feats = angles.position_features(model.max_seq_len)
    d = model.params["embed"]["token"].shape[1]
    pos = np.zeros((model.max_seq_len + 1, d), np.float32)
    index = {lab: i for i, lab in enumerate(model.residual_labels)}
    for direction in angles.POSITION_DIRECTIONS:
        if str(direction) in index:
            pos[:, index[str(direction)]] = feats[direction.value]
    model.params["embed"]["pos"] = pos


def _checked_craft(program, vocab, max_seq_len, causal, mlp_exactness, attention, positions, dedupe):
    """Check vocab, length and position encoding, then build the CRAFT program (both assemblies start here).

    Returns ``(vocab, n, (craft_model, graph, sink, info))``. Raises CompileError on a bad argument.
    """
    vocab = _check_vocab(vocab, max_seq_len)
    if positions not in ("onehot", "angle"):
        raise CompileError(f"positions must be 'onehot' or 'angle', got {positions!r}")
    n = int(max_seq_len)
    return vocab, n, _craft_program(program, vocab, n, causal, mlp_exactness, attention, positions, dedupe)


def assemble_program(program: rasp.SOp, vocab: Iterable[Any], max_seq_len: int, *, causal: bool = True,
                     mlp_exactness: int = 100, attention: str = "softmax", positions: str = "onehot",
                     dedupe: Optional[bool] = None):
    """RASP program (may use the hand-built heads) -> tracr ``AssembledTransformerModel``.

    This is tracr's own model object (``.apply`` runs tracr's Haiku forward); most
    users want :func:`compile_program`, which converts it for the batched runtime.

    Returns:
        (assembled, output_labels, info): the tracr model, the residual labels of the
        output SOp's directions in read-out order, and compile facts for the model's
        metadata (``soft_attention_layers``; ``deduped``: the ``[dropped, kept]`` names
        of the SOps stored once, see :mod:`constructions.dedupe`; ``dedupe`` as in
        :func:`compile_program`). With ``positions="angle"`` the tracr model has no
        position embedding (:func:`compile_program` writes it).
    Raises:
        CompileError: unsupported expression, empty program, bad vocab or length, a
            head kind or SOp that the position encoding cannot compile.
    """
    return _assemble_program(program, vocab, max_seq_len, causal, mlp_exactness, attention, positions, dedupe)[:3]


def _assemble_program(program, vocab, max_seq_len, causal, mlp_exactness, attention, positions, dedupe):
    """:func:`assemble_program`'s (assembled, output_labels, info), and the :class:`ProgramLink`."""
    with tracr_patches.applied():
        vocab, n, (craft_model, graph, sink, info) = _checked_craft(program, vocab, max_seq_len, causal,
                                                                    mlp_exactness, attention, positions, dedupe)
        try:
            assembled = _assemble(craft_model, graph, sink, n, causal, positions)
        except (NotImplementedError, TypeError, ValueError, AssertionError) as e:
            raise CompileError(f"tracr could not assemble {program.label}: {type(e).__name__}: {e}") from e
    return assembled, [str(d) for d in sink[nodes.OUTPUT_BASIS]], info, program_link(graph, sink)


def _craft_program(program: rasp.SOp, vocab: set, n: int, causal: bool, mlp_exactness: float, attention: str,
                   positions: str, dedupe: Optional[bool] = None):
    """Steps 0-4 of the pipeline: the scheduled CRAFT model, head sizes fixed for assembly.

    Returns:
        (craft_model, graph, sink, info); ``info`` holds the compile facts for the
        model's metadata (``soft_attention_layers``, ``positions``, ``deduped``).
    """
    merged = ()
    if _DEDUPE.get() if dedupe is None else dedupe:
        deduped = dedupe_program(program)  # identical SOps share one residual subspace
        program, merged = deduped.program, deduped.merged
    extracted = rasp_to_graph.extract_rasp_graph(program)
    graph, sink = extracted.graph, extracted.sink
    if rasp.tokens.label not in graph.nodes:
        raise CompileError("the program must use rasp.tokens")
    _infer_bases(graph, vocab, n, positions)
    if positions == "angle":
        _check_angle_program(graph, sink)
    bos_dir = bases.BasisDirection(rasp.tokens.label, BOS)
    _add_blocks(graph, n, bos_dir, mlp_exactness, causal, attention, positions)
    craft_model = _schedule(graph)
    custom, soft = set(), set()  # ids of the hand-built heads; of those soft by design (memorise)
    for i in graph.nodes:
        expr = graph.nodes[i][nodes.EXPR]
        if isinstance(expr, HeadSpec):
            block = graph.nodes[i][nodes.MODEL_BLOCK]
            if isinstance(block, transformers.SeriesWithResiduals):  # a head with its own MLP (union)
                block = block.blocks[0]
            ids = {id(h) for h in block.as_multi().heads()}
            custom |= ids
            if expr.kind.soft:
                soft |= ids
    attn_blocks = [b for b in craft_model.blocks if not isinstance(b, transformers.MLP)]
    soft_layers = [a for a, b in enumerate(attn_blocks) if any(id(h) in soft for h in b.as_multi().heads())]
    _fix_head_sizes(craft_model, custom)
    # soft_attention_layers: attention sublayers (0-based) whose heads are soft by design
    # (memorise), so their weight on the top key is no hardmax margin.
    return craft_model, graph, sink, {"soft_attention_layers": soft_layers, "positions": positions,
                                      "deduped": [list(m) for m in merged]}


#: Ways :func:`compile_program` turns the CRAFT model into weights: ``"rows"`` (default,
#: :func:`constructions.model.from_craft`, each block on its live residual rows) or
#: ``"tracr"`` (tracr's ``assemble_craft_model``, dense d_model x d_model, then
#: :func:`constructions.model.from_tracr`). Both give the same weights bit for bit.
ASSEMBLIES = ("rows", "tracr")
_ASSEMBLY: contextvars.ContextVar = contextvars.ContextVar("depthcraft_assembly", default="rows")


@contextlib.contextmanager
def using_assembly(mode: str) -> Iterator[None]:
    """Make ``mode`` (one of :data:`ASSEMBLIES`) the default assembly of :func:`compile_program` in the body.

    For benchmarks and tests that build registered constructions both ways (their
    builders call :func:`compile_program` without an ``assembly`` argument).

    Raises:
        CompileError: ``mode`` is not one of :data:`ASSEMBLIES`.
    """
    _check_assembly(mode)
    token = _ASSEMBLY.set(mode)
    try:
        yield
    finally:
        _ASSEMBLY.reset(token)


def _check_assembly(mode: str) -> None:
    if mode not in ASSEMBLIES:
        raise CompileError(f"assembly must be one of {', '.join(map(repr, ASSEMBLIES))}, got {mode!r}")


def default_causal(program: rasp.SOp) -> bool:
    """The causal masking a program compiles with when the caller does not say (``causal=None``).

    The one default of :func:`compile_program`, :func:`verify.api.check_program` and
    ``depthcraft check``: a program made of tracr's RASP primitives only compiles bidirectionally
    (False), as RASP evaluates it and as tracr compiles it; a program with a hand-built head
    (:mod:`constructions.nodes`) compiles as its heads require: causal when one needs a causal
    model (``last_occurrence``, ``match``, ...) or when every head allows both (the papers'
    constructions are causal, SPEC §3), bidirectional when one needs that (``fact_lookup``,
    ``union``, ...).

    Args:
        program: the RASP program (its output SOp).
    Returns:
        True (mask keys after the query) or False.
    Raises:
        CompileError: the program mixes heads that need a causal model with heads that need a
            bidirectional one (no model can hold both).
    """
    graph = rasp_to_graph.extract_rasp_graph(program).graph
    kinds = {}
    for node_id in graph.nodes:
        expr = graph.nodes[node_id][nodes.EXPR]
        head = expr if isinstance(expr, HeadSpec) else expr.head if isinstance(expr, HeadRead) else None
        if head is not None:
            kinds[head.kind.causal] = head
    if True in kinds and False in kinds:
        raise CompileError(f"{kinds[True].label} ({kinds[True].kind}) needs a causal model and "
                           f"{kinds[False].label} ({kinds[False].kind}) a bidirectional one: no model can hold both")
    if not kinds:
        return False
    return False not in kinds


def compile_program(program: rasp.SOp, vocab: Iterable[Any], max_seq_len: int, *, causal: Optional[bool] = None,
                    mlp_exactness: int = 100, attention: str = "softmax", positions: str = "onehot",
                    dedupe: Optional[bool] = None, meta: Optional[Dict[str, Any]] = None,
                    assembly: Optional[str] = None) -> CompiledModel:
    """Compile a RASP program that may use the hand-built heads.

    Args:
        program: RASP program (output SOp); must use ``rasp.tokens``.
        vocab: input token values (must not contain "BOS" or "PAD").
        max_seq_len: N, longest input (BOS excluded).
        causal: mask future keys (required by ``last_occurrence``; ``fact_lookup``
            requires False). None (the default): :func:`default_causal` (bidirectional for a
            program of tracr's primitives only, as RASP evaluates it; causal where a hand-built
            head needs or allows it).
        mlp_exactness: tracr's MLP discretisation parameter for standard Maps.
        attention: attention kind of every head (``softmax``, or ``relu`` for hand-built heads only).
        positions: ``"onehot"`` (tracr's one-hot indices; pointers one-hot over N+1
            positions) or ``"angle"`` (positions and pointers as (cos, sin) angles,
            width independent of N; see :mod:`constructions.angles`).
        dedupe: store identical SOps once (:mod:`constructions.dedupe`). False gives every
            SOp its own subspace, as tracr does (the width before the dedupe). None (the
            default): True, unless inside :func:`without_dedupe`.
        meta: metadata stored on the model.
        assembly: ``"rows"`` or ``"tracr"`` (see :data:`ASSEMBLIES`; same weights,
            ``"rows"`` holds no d_model x d_model array); default: ``"rows"``, or
            the mode of an enclosing :func:`using_assembly`.
    Returns:
        :class:`~constructions.model.CompiledModel`.
    Raises:
        CompileError: unsupported expression, empty program, bad vocab or length, mixed attention kinds,
            unknown ``assembly``.
    """
    mode = _ASSEMBLY.get() if assembly is None else assembly
    _check_assembly(mode)
    if not isinstance(program, rasp.SOp):
        raise CompileError(f"program must be a RASP SOp (the program's output), got {type(program).__name__}")
    causal = default_causal(program) if causal is None else bool(causal)
    meta_in = meta or {}
    if mode == "tracr":
        assembled, output_labels, info, link = _assemble_program(program, vocab, max_seq_len, causal, mlp_exactness,
                                                                  attention, positions, dedupe)
        model = from_tracr(assembled, output_labels=output_labels, max_seq_len=int(max_seq_len), causal=causal,
                           attention=attention, meta={"compiler": "depthcraft", **info, **meta_in})
    else:
        with tracr_patches.applied():
            vocab, n, (craft_model, graph, sink, info) = _checked_craft(program, vocab, max_seq_len, causal,
                                                                        mlp_exactness, attention, positions, dedupe)
        # The spaces tracr's craft_model_to_transformer (onehot) or our _assemble (angle) would use.
        tokens_space = bases.VectorSpaceWithBasis.from_values(
            rasp.tokens.label, graph.nodes[rasp.tokens.label][nodes.VALUE_SET] | {BOS, PAD})
        indices_space = bases.VectorSpaceWithBasis.from_values(rasp.indices.label, range(n)) \
            if positions == "onehot" else bases.VectorSpaceWithBasis([])
        try:
            model = from_craft(craft_model, tokens_space=tokens_space, indices_space=indices_space,
                               output_space=bases.VectorSpaceWithBasis(sink[nodes.OUTPUT_BASIS]),
                               output_labels=[str(d) for d in sink[nodes.OUTPUT_BASIS]],
                               categorical=rasp.is_categorical(sink[nodes.EXPR]), max_seq_len=n, causal=causal,
                               attention=attention, meta={"compiler": "depthcraft", **info, **meta_in})
        except (NotImplementedError, TypeError, ValueError, AssertionError) as e:
            raise CompileError(f"could not assemble {program.label}: {type(e).__name__}: {e}") from e
        link = program_link(graph, sink)
    if positions == "angle":
        _angle_embedding(model)
    model.program = link
    return model
