"""What the teaching views show, computed from one real forward pass of the compiled weights.

:func:`build` runs a model on one input (:meth:`CompiledModel.forward_ids` with
``collect_attention``) and collects a :class:`ShowData`: the decoded outputs beside
the task's reference (unscored positions marked), one :class:`HeadView` per head
(the SOps its QK circuit compares, what its OV circuit writes, its [T, T] attention
weights), one :class:`MLPView` per MLP sublayer, and the residual-stream layout
(:func:`residual_layout`). :func:`for_construction`, :func:`for_program` and
:func:`for_saved` build it for a registered construction, a user's RASP program
and a saved model.

Positions are model positions (SPEC §3): 0 is BOS, tokens sit at 1..N.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
from tracr.rasp import rasp

from depthcraft.constructions.errors import InputError
from depthcraft.constructions.model import CompiledModel
from depthcraft.verify.structure import live_mlp_units
from depthcraft.verify.views.listing import program_listing, sop_name

#: What the reference row shows at a position the task does not score.
UNSCORED = "·"


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
    """Everything the text view and the attention figure show for one input.

    Attributes:
        title: heading (may hold several lines).
        tokens_text: display names of BOS and the n input tokens ([n + 1]).
        output_text: the model's decoded output per token ([n]).
        reference_text: the reference output per token ([n]; :data:`UNSCORED` where the task
            scores nothing), or None without a reference.
        exact: whether the output equals the reference at every scored position (None without one).
        wrong: 1-based positions where a scored output differs from the reference.
        sublayers: :class:`HeadView` / :class:`MLPView` in order (empty when built without details).
        layout: residual stream groups (name, first dim, last dim, values, written by).
        program: the RASP program listing (see :func:`~depthcraft.verify.views.listing.program_listing`).
        causal: the model masks keys after the query (those cells of every map are masked).
    """

    title: str
    tokens_text: List[str]
    output_text: List[str]
    reference_text: Optional[List[str]]
    exact: Optional[bool]
    sublayers: List[Any]
    layout: List[Tuple[str, int, int, List[str], str]]
    program: List[str]
    wrong: List[int] = dataclasses.field(default_factory=list)
    causal: bool = False


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


def build(model: CompiledModel, tokens: Sequence[Any], *, title: str, program: Optional[rasp.SOp] = None,
          fmt: Optional[Callable[[Any], str]] = None, reference: Optional[Sequence[Any]] = None,
          scored: Optional[Sequence[bool]] = None, none_value: Any = None, mismatch=None,
          details: bool = True) -> ShowData:
    """Run ``model`` on one input and collect every view.

    Args:
        model: the compiled model.
        tokens: one input (token values, no BOS), length 1..max_seq_len.
        title: heading line(s).
        program: the RASP program (for the listing), or None.
        fmt: token value -> display string (default ``str``).
        reference: expected outputs (one per token) or None.
        scored: [n] bool, the positions the reference scores (default: all).
        none_value: decoded value of "no value".
        mismatch: ``mismatch(got [1, n], expected [1, n]) -> [1, n] bool`` (default ``!=``).
        details: also collect the attention maps, the head and MLP views, the residual
            layout and the program listing (False: outputs and reference only, as ``run`` prints).
    Raises:
        InputError: a token outside the vocabulary, an empty or too long input.
    """
    fmt = fmt or str
    views: List[Any] = []
    layout: List[Tuple[str, int, int, List[str], str]] = []
    if details:
        out = model.forward_ids(model.encode([list(tokens)]), collect_attention=True)
        got = model.decode(np.asarray(out.logits), none_value)[0, 1:]
        views, writer = describe_sublayers(model, [np.asarray(a)[0] for a in out.attention])
        layout = residual_layout(model, writer)
    else:
        got = model.run([list(tokens)], none_value)[0]
    exact, wrong, reference_text = None, [], None
    if reference is not None:
        exp = np.empty((1, len(reference)), dtype=object)
        exp[0, :] = list(reference)
        mask = np.ones(len(reference), bool) if scored is None else np.asarray(scored, bool)
        differs = mismatch(got[None], exp) if mismatch else np.asarray(got[None] != exp, bool)
        wrong = [int(i) + 1 for i in np.flatnonzero(np.asarray(differs, bool)[0] & mask)]
        exact = not wrong
        reference_text = [fmt(v) if s else UNSCORED for v, s in zip(reference, mask)]
    return ShowData(title=title, tokens_text=["BOS"] + [fmt(t) for t in tokens],
                    output_text=[fmt(v) for v in got.tolist()], reference_text=reference_text, exact=exact,
                    sublayers=views, layout=layout, wrong=wrong, causal=bool(model.arch.causal),
                    program=program_listing(program) if details and program is not None else [])


def for_construction(name: str, params: Dict[str, Any], text: str, details: bool = True,
                     max_memory: Optional[str] = None) -> Tuple[ShowData, CompiledModel]:
    """Views of the registered construction ``name`` at ``params`` on the input ``text`` (e.g. ``"b a e b"``).

    ``details=False`` collects the outputs and the reference only (see :func:`build`).
    ``max_memory``: the ``--max-memory`` budget (None: the default, :func:`verify.cost.budget`).

    Raises:
        ParameterError: unknown construction or bad parameters.
        InputError: bad input text (checked before compiling).
    """
    from depthcraft.verify import lookup
    from depthcraft.verify.cost import gate

    r = lookup.resolve(name, params, sampling=False)  # one given input: no sampling constraint applies
    c, p, task = r.construction, r.params, r.task
    tokens = task.parse_tokens(p, text)
    if len(tokens) > task.max_seq_len(p):  # refuse before compiling
        raise InputError(f"input of length {len(tokens)} is longer than max_seq_len={task.max_seq_len(p)}")
    gate(r, max_memory, samples=0, hypothesis_examples=0)  # refuse a build above the memory budget
    model = r.build()
    return _for_registered(c, p, task, model, tokens, details), model


def _for_registered(c, p, task, model, tokens, details: bool = True) -> ShowData:
    from depthcraft.verify.tasks.program import token_array

    expected, scored = task.reference(p, token_array([tokens]))
    shown = " ".join(f"{k}={v}" for k, v in p.items())
    names = task.token_names(p)
    fmt = lambda v: names.get(v, "⊥" if v == task.none_value else str(v))  # noqa: E731
    program = c.program(p) if c.program is not None else None
    return build(model, tokens, title=f"{c.name}  {shown}\n{c.attention}, "
                 f"{'causal' if c.causal else 'bidirectional'}; {c.source}", program=program, fmt=fmt,
                 reference=expected[0].tolist(), scored=scored[0].tolist(), none_value=task.none_value,
                 mismatch=lambda g, e: task.mismatch(p, g, e), details=details)


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
    expected, scored = ref.reference({}, np.asarray([list(tokens)], dtype=object))
    return build(model, tokens, title=f"{sop_name(program.label)} (your RASP program; "
                 f"{'causal' if causal else 'bidirectional'}, N = {max_seq_len})", program=program,
                 reference=expected[0].tolist(), scored=scored[0].tolist(),
                 mismatch=lambda g, e: ref.mismatch({}, g, e)), model


def for_saved(path: str, text: str) -> Tuple[ShowData, CompiledModel]:
    """Views of a model saved with :func:`constructions.io.save` on the input ``text``.

    Raises:
        ParameterError: an unreadable or invalid file; InputError: bad input text.
    """
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
# The explore page's data: everything above, plus the residual stream after every sublayer
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Alignment:
    """A trained model's heads against a construction's heads, on the explored input.

    Attributes:
        construction: the construction's name and parameters (one line).
        trained_heads: ``"L1 H0"``-style names of the trained heads ([L_t * H]).
        construction_heads: names of the construction's heads ([n_c]).
        matrix: [L_t * H, n_c] float64 alignment (:func:`~depthcraft.verify.crosscheck.alignment.alignment`)
            over the token query rows (BOS left out).
        construction_maps: the construction's [T, T] maps, one per construction head.
    """

    construction: str
    trained_heads: List[str]
    construction_heads: List[str]
    matrix: np.ndarray
    construction_maps: List[np.ndarray]


@dataclasses.dataclass
class ExploreData:
    """What the explore page (:mod:`~depthcraft.verify.views.explore`) shows for one input.

    Attributes:
        show: the views of :func:`build` (title, tokens, output beside the reference, the
            program listing, head and MLP views, the residual layout).
        stream: the residual stream after every sublayer (one forward pass of the runtime).
        head_names: per attention sublayer, the name of each head (``"L1 H0: find1"``).
        stage_notes: per stage (embeddings, then each sublayer), one line saying what it does.
        program_stages: per stage, the program lines whose SOp that stage writes, and under
            key -1 the lines whose SOp is not stored in the residual stream.
        groups: residual directions grouped by SOp or pointer: (name, first row, last row, writer).
        classes: display name of each read-out coordinate ([O]).
        kind: ``"construction"``, ``"saved"`` or ``"trained"``.
        alignment: for a trained model, its heads against the construction's (else None).
    """

    show: ShowData
    stream: Any
    head_names: List[List[str]]
    stage_notes: List[str]
    program_stages: Dict[int, List[str]]
    groups: List[Tuple[str, int, int, str]]
    classes: List[str]
    kind: str
    alignment: Optional[Alignment] = None


def _stage_of_writer(stages: Sequence[str]) -> Dict[str, int]:
    """``"L2 H0"`` / ``"MLP 1"`` (writer names of :func:`describe_sublayers`) -> stage index."""
    out: Dict[str, int] = {}
    for i, s in enumerate(stages):
        kind, _, num = s.partition(" ")
        if kind == "attn":
            out[f"L{num}"] = i
        elif kind == "MLP":
            out[f"MLP {num}"] = i
    return out


def explore_compiled(data: ShowData, model: CompiledModel, tokens: Sequence[Any], kind: str,
                     fmt: Optional[Callable[[Any], str]] = None) -> ExploreData:
    """The explore page's data for a compiled model (a construction, a user's program or a saved file).

    Args:
        data: :func:`build`'s views of the same input (with details).
        model: the compiled model.
        tokens: the input (token values, no BOS).
        kind: ``"construction"`` or ``"saved"``.
        fmt: output value -> display string for the read-out classes (default ``str``).
    """
    from depthcraft.constructions.model import residual_stream

    fmt = fmt or str
    stream = residual_stream(model, tokens)
    where = _stage_of_writer(stream.stages)
    names: List[List[str]] = []
    notes = ["embeddings: token + position embedding of each position"]
    mlps = iter(v for v in data.sublayers if isinstance(v, MLPView))
    for i, spec in enumerate(model.arch.sublayers):
        stage = stream.stages[i + 1]
        if spec.kind == "attn":
            layer = int(stage.split()[1])
            heads = {v.head: v for v in data.sublayers if isinstance(v, HeadView) and v.layer == layer}
            h_count = model.params["layers"][i]["w_q"].shape[0]
            names.append([heads[h].title if h in heads else f"L{layer} H{h}: (writes nothing)"
                          for h in range(h_count)])
            parts = [f"H{h} reads {', '.join(v.reads_query)} x {', '.join(v.reads_key)}, writes "
                     f"{', '.join(v.writes)}" for h, v in sorted(heads.items())]
            notes.append(f"{stage}: " + "; ".join(parts))
        else:
            v = next(mlps)
            notes.append(f"{stage}: reads {', '.join(v.reads) or '-'}, writes {', '.join(v.writes) or '-'} "
                         f"({v.hidden} hidden units)")
    written_by: Dict[str, int] = {}
    for name, _, _, _, who in data.layout:
        if who in ("token embedding", "position embedding"):
            written_by[name] = 0
        else:
            key = who.split(" H")[0] if who.startswith("L") else who
            if key in where:
                written_by[name] = where[key]
    program: Dict[int, List[str]] = {}
    for line in data.program:
        sop = line.split(" = ", 1)[0]
        program.setdefault(written_by.get(sop, -1), []).append(line)
    groups = [(name, first, last, who) for name, first, last, _, who in data.layout]
    classes = [fmt(v) for v in model.output_values] if model.categorical_output else ["value"]
    return ExploreData(show=data, stream=stream, head_names=names, stage_notes=notes, program_stages=program,
                       groups=groups, classes=classes, kind=kind)


def explore_construction(name: str, params: Dict[str, Any], text: str) -> ExploreData:
    """The explore page's data for the registered construction ``name`` at ``params`` on ``text``.

    Raises:
        ParameterError: unknown construction or bad parameters; InputError: bad input text.
    """
    from depthcraft.verify import lookup

    data, model = for_construction(name, params, text)
    r = lookup.resolve(name, params)
    tokens = r.task.parse_tokens(r.params, text)
    return explore_compiled(data, model, tokens, "construction", _formatter(r.task, r.params))


def _formatter(task, p) -> Callable[[Any], str]:
    names = task.token_names(p)
    return lambda v: names.get(v, "⊥" if v == task.none_value else str(v))  # noqa: E731


def explore_saved(path: str, text: str) -> ExploreData:
    """The explore page's data for a model saved with :func:`constructions.io.save`.

    Raises:
        ParameterError: an unreadable or invalid file; InputError: bad input text.
    """
    from depthcraft.verify import lookup
    from depthcraft.verify.tasks.program import ProgramTask

    data, model = for_saved(path, text)
    r = lookup.resolve_model(model)
    if r is not None:
        tokens, fmt = r.task.parse_tokens(r.params, text), _formatter(r.task, r.params)
    else:
        generic = ProgramTask(vocab=model.vocab, max_seq_len=model.max_seq_len, reference=lambda xs: xs)
        tokens, fmt = generic.parse_tokens({}, text), None
    return explore_compiled(data, model, tokens, "saved", fmt)


def explore_trained(directory: str, params: Dict[str, Any], text: str,
                    construction: Optional[str] = None) -> ExploreData:
    """The explore page's data for a trained model (a ``depthcraft train`` checkpoint directory).

    Args:
        directory: the checkpoint directory (``<out>/checkpoints/<run>``).
        params: task parameters picking one of the model's training conditions (may be empty
            when it was trained on one condition); ``-p k=2`` for a mixed k-hop model.
        text: the input.
        construction: the construction to align with (default: the one the task's sweep
            presets compare with, e.g. ``khop_doubling`` for ``khop``; None where there is none).
    Raises:
        InputError: no or a bad checkpoint, bad input text; ParameterError: ``params`` match
            no condition or several.
    """
    from depthcraft.constructions.errors import ParameterError
    from depthcraft.constructions.runtime import as_jax, forward
    from depthcraft.verify.crosscheck.alignment import alignment
    from depthcraft.verify.crosscheck.train import load_trained

    tm = load_trained(directory)
    data, task = tm.data, tm.data.task
    matches = [i for i, c in enumerate(data.conditions)
               if all(k in c and str(c[k]) == str(v) for k, v in params.items())]
    if len(matches) != 1:
        raise ParameterError(f"-p {' '.join(f'{k}={v}' for k, v in params.items()) or '(none)'} matches "
                             f"{len(matches)} of the model's training conditions ({', '.join(data.names)}); "
                             f"name one with -p")
    cond = matches[0]
    p = data.conditions[cond]
    tokens = task.parse_tokens(p, text)
    if len(tokens) > task.max_seq_len(p):
        raise InputError(f"input of length {len(tokens)} is longer than max_seq_len={task.max_seq_len(p)}")
    from depthcraft.verify.tasks.program import token_array

    ids = data.encode(cond, token_array([tokens]))[:, :len(tokens) + 1]
    out = forward(tm.params, as_jax(np.asarray(ids)), tm.arch, collect_attention=True, collect_residuals=True)
    fmt = _formatter(task, p)
    logits = np.asarray(out.logits[0])
    got = [data.classes[i] for i in logits.argmax(-1)[1:]]
    expected, scored = task.reference(p, token_array([tokens]))
    exp_row = np.empty((1, len(tokens)), dtype=object)
    exp_row[0, :] = list(expected[0])
    got_row = np.empty((1, len(tokens)), dtype=object)
    got_row[0, :] = got
    mask = np.asarray(scored[0], bool)
    wrong = [int(i) + 1 for i in np.flatnonzero(np.asarray(task.mismatch(p, got_row, exp_row), bool)[0] & mask)]
    d = tm.model.width
    stages, stream = trained_stream(tokens, out, logits, tm.arch, d)
    layer_names = [s for s in stages if s.startswith("attn")]
    head_names = [[f"L{l + 1} H{h}" for h in range(tm.model.heads)] for l in range(len(layer_names))]
    notes = ["embeddings: learned token + position embedding (BOS names the condition)"]
    for s in stages[1:]:
        notes.append(f"{s}: " + (f"{tm.model.heads} heads, full width" if s.startswith("attn") else
                                 f"ReLU MLP, {tm.model.mlp_ratio * d} hidden units"))
    conds = " ".join(f"{k}={v}" for k, v in p.items())
    show = ShowData(title=f"trained {task.name} model ({os.path.basename(os.path.normpath(directory))}, step "
                          f"{tm.step})\n{tm.model.depth} layers x {tm.model.heads} heads, width {d}, "
                          f"{tm.model.attention}; condition {conds}",
                    tokens_text=["BOS"] + [fmt(t) for t in tokens], output_text=[fmt(v) for v in got],
                    reference_text=[fmt(v) if s else UNSCORED for v, s in zip(expected[0], mask)],
                    exact=not wrong, sublayers=[], layout=[], program=[], wrong=wrong)
    al = _trained_alignment(task, p, tokens, stream, head_names, construction, tm.arch.causal, alignment)
    return ExploreData(show=show, stream=stream, head_names=head_names, stage_notes=notes, program_stages={},
                       groups=[("residual (learned basis)", 0, d - 1, "every sublayer")],
                       classes=[fmt(v) for v in data.classes], kind="trained", alignment=al)


def is_published_run(directory: str) -> bool:
    """Whether ``directory`` is one run of the k-hop paper's published models (``config.yaml`` beside
    ``model_100000.pt``, :mod:`verify.crosscheck.published`)."""
    from depthcraft.verify.crosscheck.published import CHECKPOINT

    return all(os.path.isfile(os.path.join(directory, f)) for f in ("config.yaml", CHECKPOINT))


def explore_published(directory: str, params: Dict[str, Any], text: str,
                      construction: Optional[str] = None) -> ExploreData:
    """The explore page's data for one of the k-hop paper's published models (issue 31): a folder of
    ``chsanford/hop-induction-heads`` with ``config.yaml`` and ``model_100000.pt``, loaded by
    :func:`verify.crosscheck.published.load_run` (no torch, no code from the pickle).

    The input is read in their format (:class:`~verify.crosscheck.published.AuthorsFormat`): the
    hop-count token ``k`` (``-p k=K``, required) first, then the symbols of ``text`` (|Σ| = 4); the
    output is the argmax of their logits (the last hidden state) over their ids, shown as our symbols.

    Args:
        directory: the run's folder.
        params: ``{"k": K}``.
        text: the symbols, e.g. ``"a b c a d b"``.
        construction: the construction to align with (default ``khop_doubling``).
    Raises:
        InputError: a bad checkpoint or input text; ParameterError: ``-p`` other than ``k``.
    """
    from depthcraft.constructions.errors import ParameterError
    from depthcraft.constructions.runtime import as_jax, forward
    from depthcraft.verify.crosscheck.alignment import alignment
    from depthcraft.verify.crosscheck.published import MAX_HOPS, AuthorsFormat, load_run
    from depthcraft.verify.tasks.khop import KHopTask
    from depthcraft.verify.tasks.program import token_array

    if set(params) != {"k"}:
        raise ParameterError(f"a published k-hop model needs exactly -p k=K (0..{MAX_HOPS}); got "
                             f"{' '.join(f'{k}={v}' for k, v in params.items()) or '(none)'}")
    k = int(params["k"])
    if not 0 <= k <= MAX_HOPS:
        raise ParameterError(f"k={k} is outside the published models' hop counts 0..{MAX_HOPS}")
    pm = load_run(directory)
    tokens = KHopTask().parse_tokens({"k": k, "n": pm.n_positions - 1, "vocab": 4, "distribution": "paper"}, text)
    if len(tokens) + 1 > pm.n_positions:
        raise InputError(f"input of length {len(tokens)} is longer than the model's {pm.n_positions - 1} symbols")
    fmt_ = AuthorsFormat(n=len(tokens))
    data, task = fmt_.data, fmt_.data.task
    p = data.conditions[k]
    ids = fmt_.id_map[data.encode(k, token_array([tokens]))[:, :len(tokens) + 1]].astype(np.int32)
    out = forward(as_jax(pm.params), as_jax(ids), pm.arch, collect_attention=True, collect_residuals=True)
    fmt = _formatter(task, p)
    logits = np.asarray(out.logits[0])
    ours = {int(t): data.classes[j] for j, t in enumerate(fmt_.class_map)}  # their id -> our class
    got = [ours.get(int(i), f"id {int(i)}") for i in logits.argmax(-1)[1:]]
    expected, scored = task.reference(p, token_array([tokens]))
    mask = np.asarray(scored[0], bool)
    wrong = [i + 1 for i, (g, e, m) in enumerate(zip(got, expected[0], mask)) if m and g != e]
    d = pm.width
    stages, stream = trained_stream(tokens, out, logits, pm.arch, d)
    layer_names = [s for s in stages if s.startswith("attn")]
    head_names = [[f"L{l + 1} H{h}" for h in range(pm.heads)] for l in range(len(layer_names))]
    notes = ["embeddings: GPT-2 token + position embedding (position 0: the hop-count token k)"]
    for s in stages[1:]:
        notes.append(f"{s}: " + (f"{pm.heads} heads, pre-LayerNorm" if s.startswith("attn") else
                                 "GELU MLP, pre-LayerNorm"))
    samples = "fresh samples" if pm.samples < 0 else f"{pm.samples} training sequences"
    show = ShowData(title=f"published k-hop model ({pm.name}, Sanford et al., step 100000)\n{pm.depth} layers x "
                          f"{pm.heads} heads, width {d}, {samples}; hop count k={k}",
                    tokens_text=[f"k={k}"] + [fmt(t) for t in tokens], output_text=[fmt(v) for v in got],
                    reference_text=[fmt(v) if m else UNSCORED for v, m in zip(expected[0], mask)],
                    exact=not wrong, sublayers=[], layout=[], program=[], wrong=wrong)
    al = _trained_alignment(task, p, tokens, stream, head_names, construction, pm.arch.causal, alignment)
    names = {int(t): fmt(data.classes[j]) for j, t in enumerate(fmt_.class_map)}
    return ExploreData(show=show, stream=stream, head_names=head_names, stage_notes=notes, program_stages={},
                       groups=[("residual (learned basis)", 0, d - 1, "every sublayer")],
                       classes=[names.get(i, f"#{i}") for i in range(logits.shape[-1])], kind="trained",
                       alignment=al)


def default_construction(task_name: str) -> Optional[str]:
    """The construction the task's sweep presets compare trained models with (None where none)."""
    from depthcraft.constructions.errors import ParameterError
    from depthcraft.verify.crosscheck.presets import get_preset

    try:
        return get_preset(task_name, "cpu").construction
    except ParameterError:
        return None


def _trained_alignment(task, p, tokens, stream, head_names, construction, causal, alignment) -> Optional[Alignment]:
    from depthcraft.constructions.model import residual_stream
    from depthcraft.verify import lookup

    name = construction or default_construction(task.name)
    if name is None:
        return None
    own = {s.name for s in lookup.param_specs(name)}
    r = lookup.resolve(name, {k: v for k, v in p.items() if k in own})
    model = r.build()
    c = residual_stream(model, tokens)
    rows = np.ones(len(tokens) + 1, bool)
    rows[0] = False
    trained = [(f"{n}", m) for names, maps in zip(head_names, stream.attention) for n, m in zip(names, maps)]
    cons = [(f"L{l + 1} H{h}", m) for l, maps in enumerate(c.attention) for h, m in enumerate(maps)]
    matrix = np.array([[float(alignment(a, b, rows)) for _, b in cons] for _, a in trained])
    shown = " ".join(f"{k}={v}" for k, v in r.params.items())
    return Alignment(construction=f"{name} {shown}", trained_heads=[n for n, _ in trained],
                     construction_heads=[n for n, _ in cons], matrix=matrix,
                     construction_maps=[m for _, m in cons])


def trained_stream(tokens: Sequence[Any], out: Any, logits: np.ndarray, arch: Any, width: int):
    """(stages, :class:`ResidualStream`) of a trained model's one-input forward ``out`` (batch of 1,
    run with residuals, attention, scores and head outputs collected): residual rows named
    ``d0..d{width-1}``, since a trained model's directions carry no labels."""
    from depthcraft.constructions.model import ResidualStream, sublayer_names

    stages = ["embeddings"] + sublayer_names(arch)
    stream = ResidualStream(tokens=list(tokens), labels=[f"d{i}" for i in range(width)], stages=stages,
                            values=np.stack([np.asarray(r[0]) for r in out.residuals]),
                            attention=[np.asarray(a[0]) for a in out.attention],
                            scores=[np.asarray(s[0]) for s in out.scores],
                            head_outputs=[np.asarray(h[0]) for h in out.head_outputs], logits=logits,
                            causal=arch.causal)
    return stages, stream
