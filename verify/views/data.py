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


def for_construction(name: str, params: Dict[str, Any], text: str, details: bool = True) -> Tuple[ShowData, CompiledModel]:
    """Views of the registered construction ``name`` at ``params`` on the input ``text`` (e.g. ``"b a e b"``).

    ``details=False`` collects the outputs and the reference only (see :func:`build`).

    Raises:
        ParameterError: unknown construction or bad parameters.
        InputError: bad input text (checked before compiling).
    """
    from depthcraft.verify import lookup

    r = lookup.resolve(name, params)
    c, p, task = r.construction, r.params, r.task
    tokens = task.parse_tokens(p, text)
    if len(tokens) > task.max_seq_len(p):  # refuse before compiling
        raise InputError(f"input of length {len(tokens)} is longer than max_seq_len={task.max_seq_len(p)}")
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
