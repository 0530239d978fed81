"""The k-hop paper's published trained models in the cross-check (issue 31; SPEC §7, §7a).

Sanford, Hsu & Telgarsky (2024) published the GPT-2 models behind their k-hop table in
the repository ``chsanford/hop-induction-heads``: ``models/induction_hops_full_seq/<run>/``
holds ``config.yaml`` and ``model_100000.pt`` (a ``torch.save``'d state dict of a
Hugging Face ``GPT2Model`` under the prefix ``backbone.``), for the 25 runs of
:data:`RUNS`; ``local/errors.json`` holds the errors they measured. This module reads
them without torch (:mod:`verify.crosscheck.ptfile`: no code from the pickle runs),
maps them onto the cross-check's runtime (:mod:`constructions.runtime`, the same
forward that runs compiled constructions and our trained models) and evaluates them
on inputs drawn by this project's k-hop task code.

The model (read from the authors' ``src/models.py`` and the Hugging Face GPT-2 it
builds): token and learned position embeddings, L pre-LayerNorm blocks (4 heads,
softmax, causal, d_head = width / heads, scores scaled by 1/sqrt(d_head); MLP of
hidden width 4 x width with the tanh GELU), a final LayerNorm, and *no* read-out:
the final hidden state (width 128) is read as the logits, so the read-out here is the
identity and a prediction is the argmax over all 128 coordinates.

The input format (the authors' ``src/tasks.py``), the k-hop task of SPEC §4.1 at
N = 98 symbols, |Σ| = 4, no two equal neighbours, k = 0..16:

========  =====================================  ======================
position  input id                               target id
========  =====================================  ======================
0         the hop count k (ids 0..16)            22 (blank, not scored)
i=1..98   17 + x_i (symbols a..d = 17..20)       17 + hop_k(X)_i, or 21 (⊥)
========  =====================================  ======================

This is exactly the cross-check's own layout for a k-hop sweep over the conditions
k = 0..16 (:class:`verify.crosscheck.data.TaskData`: condition c's BOS_c at position 0,
the symbols at 1..N), so :class:`AuthorsFormat` draws the batches with
:class:`~verify.crosscheck.data.TaskData` and :class:`~verify.tasks.khop.KHopTask`
(``distribution=paper``) and renumbers the ids. The error is theirs and SPEC §4.1's:
token error over positions 1..98 whose target is not ⊥.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from depthcraft.constructions.errors import InputError, ParameterError
from depthcraft.constructions.runtime import Arch, SublayerSpec
from depthcraft.verify.crosscheck.claims.stats import MIN_DIFFERENCE
from depthcraft.verify.crosscheck.ptfile import load_state_dict

#: Folder of the runs inside the authors' repository.
MODELS_DIR = "models/induction_hops_full_seq"
#: The checkpoint file of a run (their table's models: step 100,000).
CHECKPOINT = "model_100000.pt"
#: Their measured errors, keyed ``"((depth, heads, samples), k)"`` (samples -1 = fresh samples).
ERRORS_FILE = "local/errors.json"

#: The 25 published runs: folder name -> (depth, heads, training sequences; -1 = fresh each step).
RUNS: Dict[str, Tuple[int, int, int]] = {
    **{f"width4-depth{d}{suffix}": (d, 4, n) for d in range(2, 7)
       for suffix, n in (("", -1), ("-samples1k", 1000), ("-samples3k", 3000), ("-samples10k", 10000))},
    **{f"width8-depth{d}": (d, 8, -1) for d in range(2, 7)},
}

#: The task of the published models (their config's task_kwargs: seq_len 100, 4 symbols, k 0..16).
SEQ_LEN = 100
N_SYMBOLS = SEQ_LEN - 2  # the input is the hop token and the first 98 of 100 drawn symbols
VOCAB = 4
MAX_HOPS = 16
#: Their token ids: hop counts 0..16, then symbols, then ⊥ ("~") and the blank ("_").
CHAR_BASE = MAX_HOPS + 1
NONE_ID = CHAR_BASE + VOCAB
BLANK_ID = NONE_ID + 1


# ----------------------------------------------------------------------------- config.yaml

_SCALAR_INT = re.compile(r"^[-+]?\d+$")
_SCALAR_FLOAT = re.compile(r"^[-+]?(\d+\.\d*|\.\d+|\d+)([eE][-+]?\d+)?$")


def _scalar(text: str) -> Any:
    t = text.strip()
    if len(t) >= 2 and t[0] == t[-1] and t[0] in "'\"":
        return t[1:-1]
    if t in ("", "null", "~"):
        return None
    if t in ("true", "True"):
        return True
    if t in ("false", "False"):
        return False
    if _SCALAR_INT.match(t):
        return int(t)
    if _SCALAR_FLOAT.match(t):
        return float(t)
    return t


def parse_config(text: str, where: str = "config.yaml") -> Dict[str, Any]:
    """The block-style YAML subset the runs' ``config.yaml`` files use, without a YAML library.

    Supported: nested mappings by indentation (``key: value`` / ``key:`` then an indented
    block), block lists (``- item``), plain or quoted scalars (ints, floats, true/false,
    null, strings), ``#`` comment lines. Nothing is evaluated.

    Args:
        text: the file's text.
        where: name used in error messages.
    Returns:
        nested dicts / lists / scalars.
    Raises:
        InputError: a line outside that subset (flow style, anchors, tabs, bad indentation).
    """
    lines = []
    for no, raw in enumerate(text.splitlines(), 1):
        if not raw.strip() or raw.lstrip().startswith("#"):
            continue
        if "\t" in raw[: len(raw) - len(raw.lstrip())]:
            raise InputError(f"{where}:{no}: tab indentation is not supported")
        s = raw.strip()
        if s[0] in "{[&*!|>" or s.startswith("---"):
            raise InputError(f"{where}:{no}: unsupported YAML ({s[:30]!r})")
        lines.append((no, len(raw) - len(raw.lstrip()), s))

    def block(i: int, indent: int):
        if i < len(lines) and lines[i][2].startswith("- "):
            out_list: List[Any] = []
            while i < len(lines) and lines[i][1] == indent and lines[i][2].startswith("- "):
                out_list.append(_scalar(lines[i][2][2:]))
                i += 1
            return out_list, i
        out: Dict[str, Any] = {}
        while i < len(lines) and lines[i][1] == indent:
            no, _, s = lines[i]
            if ":" not in s or s.startswith("- "):
                raise InputError(f"{where}:{no}: expected 'key: value', got {s[:40]!r}")
            key, _, rest = s.partition(":")
            i += 1
            if rest.strip():
                out[key.strip()] = _scalar(rest)
            elif i < len(lines) and (lines[i][1] > indent or (lines[i][1] == indent and lines[i][2].startswith("- "))):
                out[key.strip()], i = block(i, lines[i][1])
            else:
                out[key.strip()] = None
        return out, i

    if not lines:
        return {}
    doc, i = block(0, lines[0][1])
    if i != len(lines):
        raise InputError(f"{where}:{lines[i][0]}: bad indentation")
    return doc


# ----------------------------------------------------------------------------- the model

@dataclasses.dataclass
class PublishedModel:
    """One published run, mapped onto the runtime.

    Attributes:
        name: the run's folder name (e.g. ``width4-depth3-samples1k``).
        depth, heads, width: L, H, d_model.
        samples: training sequences (-1: fresh each step).
        vocab_size: rows of the token embedding (30 in every run).
        n_positions: rows of the position embedding (100).
        params: runtime weights (numpy float32; layout in :mod:`constructions.runtime`).
        arch: the runtime :class:`~constructions.runtime.Arch` (:func:`gpt2_arch`).
    """

    name: str
    depth: int
    heads: int
    width: int
    samples: int
    vocab_size: int
    n_positions: int
    params: Dict[str, Any]
    arch: Arch


def gpt2_arch(depth: int, heads: int, width: int) -> Arch:
    """GPT-2's block as a runtime architecture: pre-LayerNorm (eps 1e-5), causal softmax attention
    scaled by 1/sqrt(width / heads), tanh-GELU MLP, final LayerNorm."""
    scale = 1.0 / math.sqrt(width // heads)
    subs: List[SublayerSpec] = []
    for _ in range(depth):
        subs += [SublayerSpec("attn", qk_scale=scale), SublayerSpec("mlp", activation="gelu_tanh")]
    return Arch(sublayers=tuple(subs), attention="softmax", causal=True, layer_norm=True, pad_id=None)


def _gpt2_shapes(depth: int, width: int, vocab: int, n_pos: int, prefix: str) -> Dict[str, Tuple[int, ...]]:
    d = width
    shapes = {f"{prefix}wte.weight": (vocab, d), f"{prefix}wpe.weight": (n_pos, d),
              f"{prefix}ln_f.weight": (d,), f"{prefix}ln_f.bias": (d,)}
    for l in range(depth):
        h = f"{prefix}h.{l}."
        shapes.update({h + "ln_1.weight": (d,), h + "ln_1.bias": (d,),
                       h + "attn.c_attn.weight": (d, 3 * d), h + "attn.c_attn.bias": (3 * d,),
                       h + "attn.c_proj.weight": (d, d), h + "attn.c_proj.bias": (d,),
                       h + "ln_2.weight": (d,), h + "ln_2.bias": (d,),
                       h + "mlp.c_fc.weight": (d, 4 * d), h + "mlp.c_fc.bias": (4 * d,),
                       h + "mlp.c_proj.weight": (4 * d, d), h + "mlp.c_proj.bias": (d,)})
    return shapes


#: Buffers some transformers versions save beside the weights (causal masks); ignored.
_BUFFERS = re.compile(r"\.attn\.(bias|masked_bias)$")


def gpt2_params(state: Dict[str, np.ndarray], depth: int, heads: int, width: int, vocab: int, n_pos: int,
                prefix: str = "backbone.", where: str = "state dict") -> Dict[str, Any]:
    """A Hugging Face ``GPT2Model`` state dict -> runtime weights (identity read-out).

    Conv1D weights are [in, out]: ``c_attn.weight`` [d, 3d] holds q | k | v, each split into heads
    along its columns (head h = columns h*e..(h+1)*e, e = d / heads); ``c_proj.weight`` [d, d] reads
    the heads' outputs concatenated in the same order.

    Args:
        state: name -> numpy array.
        depth, heads, width, vocab, n_pos: from the run's config.
        prefix: the names' prefix (the authors' wrapper: ``backbone.``).
        where: name used in error messages.
    Returns:
        runtime params (float32): ``embed`` (token [vocab, d], pos [n_pos, d]), per block an
        attention sublayer (w_q/w_k/w_v [H, d, e], w_o [H, e, d], b_q/b_k/b_v [H, e], b_o [d], ln)
        and an MLP (w_1 [d, 4d], b_1, w_2 [4d, d], b_2, ln), ``ln_final``, ``unembed`` w = I [d, d].
    Raises:
        InputError: a missing or unexpected weight, a shape that disagrees with the config (named),
            or width not divisible by heads.
    """
    if heads < 1 or width % heads:
        raise InputError(f"{where}: width {width} is not divisible by heads {heads}")
    want = _gpt2_shapes(depth, width, vocab, n_pos, prefix)
    names = [k for k in state if not _BUFFERS.search(k)]
    missing = [k for k in want if k not in state]
    extra = [k for k in names if k not in want]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}")
        if extra:
            parts.append(f"unexpected {', '.join(extra[:3])}{' ...' if len(extra) > 3 else ''}")
        raise InputError(f"{where}: not a GPT-2 model of depth {depth} as its config says "
                         f"({'; '.join(parts)})")
    for k, shape in want.items():
        if tuple(state[k].shape) != shape:
            raise InputError(f"{where}: {k} has shape {tuple(state[k].shape)}, the config implies {shape}")
        if not np.issubdtype(state[k].dtype, np.floating):
            raise InputError(f"{where}: {k} has dtype {state[k].dtype}, not floating point")
    f = lambda k: np.asarray(state[prefix + k], np.float32)
    d, e = width, width // heads
    ln = lambda name: {"scale": f(name + ".weight"), "offset": f(name + ".bias")}
    layers: List[Dict[str, Any]] = []
    for l in range(depth):
        h = f"h.{l}."
        w, b = f(h + "attn.c_attn.weight"), f(h + "attn.c_attn.bias")
        split = lambda m: np.ascontiguousarray(m.reshape(d, heads, e).transpose(1, 0, 2))  # [d, d] -> [H, d, e]
        attn = {"w_q": split(w[:, :d]), "w_k": split(w[:, d:2 * d]), "w_v": split(w[:, 2 * d:]),
                "b_q": b[:d].reshape(heads, e), "b_k": b[d:2 * d].reshape(heads, e),
                "b_v": b[2 * d:].reshape(heads, e),
                "w_o": f(h + "attn.c_proj.weight").reshape(heads, e, d), "b_o": f(h + "attn.c_proj.bias"),
                "ln": ln(h + "ln_1")}
        mlp = {"w_1": f(h + "mlp.c_fc.weight"), "b_1": f(h + "mlp.c_fc.bias"),
               "w_2": f(h + "mlp.c_proj.weight"), "b_2": f(h + "mlp.c_proj.bias"), "ln": ln(h + "ln_2")}
        layers += [attn, mlp]
    return {"embed": {"token": f("wte.weight"), "pos": f("wpe.weight")}, "layers": layers,
            "ln_final": ln("ln_f"), "unembed": {"w": np.eye(d, dtype=np.float32)}}


def _int_field(section: Dict[str, Any], key: str, where: str) -> int:
    v = section.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise InputError(f"{where}: model.{key} must be a positive integer, got {v!r}")
    return v


def load_run(folder: str, checkpoint: str = CHECKPOINT) -> PublishedModel:
    """Load one published run (``config.yaml`` + ``checkpoint``) onto the runtime.

    Args:
        folder: the run's folder.
        checkpoint: the state dict's file name inside it.
    Returns:
        :class:`PublishedModel`.
    Raises:
        InputError: a missing file, a config of another model family (only ``gpt2_model`` maps),
            a refused or malformed checkpoint (:func:`~verify.crosscheck.ptfile.load_state_dict`),
            or weights whose names or shapes disagree with the config.
    """
    name = os.path.basename(os.path.normpath(folder))
    cfg_path = os.path.join(folder, "config.yaml")
    try:
        with open(cfg_path, encoding="utf-8") as fh:
            cfg = parse_config(fh.read(), cfg_path)
    except FileNotFoundError:
        raise InputError(f"{cfg_path}: no such file") from None
    except UnicodeDecodeError:
        raise InputError(f"{cfg_path}: not UTF-8 text") from None
    model = cfg.get("model")
    if not isinstance(model, dict):
        raise InputError(f"{cfg_path}: no 'model' section")
    family = model.get("family")
    if family != "gpt2_model":
        raise InputError(f"{cfg_path}: model family {family!r} cannot be mapped (only gpt2_model)")
    depth = _int_field(model, "depth", cfg_path)
    heads = _int_field(model, "headcount", cfg_path)
    width = _int_field(model, "dim_embedding", cfg_path)
    vocab = _int_field(model, "vocab_size", cfg_path)
    training = cfg.get("training") or {}
    kwargs = training.get("task_kwargs") or {}
    n_pos = kwargs.get("seq_len")
    if isinstance(n_pos, bool) or not isinstance(n_pos, int) or n_pos < 2:
        raise InputError(f"{cfg_path}: training.task_kwargs.seq_len must be an integer >= 2, got {n_pos!r}")
    samples = training.get("samples", -1)
    samples = samples if isinstance(samples, int) and not isinstance(samples, bool) else -1
    state = load_state_dict(os.path.join(folder, checkpoint))
    params = gpt2_params(state, depth, heads, width, vocab, n_pos, where=os.path.join(folder, checkpoint))
    return PublishedModel(name, depth, heads, width, samples, vocab, n_pos, params, gpt2_arch(depth, heads, width))


def present_runs(repo: str) -> Tuple[List[str], Dict[str, str]]:
    """Which of the 25 :data:`RUNS` have both files in a checkout of the authors' repository.

    Returns:
        (present run names in :data:`RUNS` order, {absent run: reason}).
    """
    present, absent = [], {}
    for run in RUNS:
        folder = os.path.join(repo, MODELS_DIR, run)
        if not os.path.isfile(os.path.join(folder, "config.yaml")):
            absent[run] = "no config.yaml"
        elif not os.path.isfile(os.path.join(folder, CHECKPOINT)):
            absent[run] = f"no {CHECKPOINT}"
        elif not _is_zip(os.path.join(folder, CHECKPOINT)):
            absent[run] = f"{CHECKPOINT} is not a zip (a Git LFS pointer or a partial file)"
        else:
            present.append(run)
    return present, absent


def _is_zip(path: str) -> bool:
    with open(path, "rb") as fh:
        return fh.read(4) == b"PK\x03\x04"


def authors_errors(repo: str) -> Dict[str, Dict[int, float]]:
    """Their ``local/errors.json`` by run name: {run: {k: error}}.

    Raises:
        InputError: the file is missing or a key is not ``((depth, heads, samples), k)``.
    """
    path = os.path.join(repo, ERRORS_FILE)
    try:
        with open(path, encoding="utf-8") as fh:
            raw = json.load(fh)
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: not JSON ({e.msg})") from None
    by_key = {v: k for k, v in RUNS.items()}
    out: Dict[str, Dict[int, float]] = {}
    pat = re.compile(r"^\(\((\d+), (\d+), (-?\d+)\), (\d+)\)$")
    for key, err in raw.items():
        m = pat.match(key)
        if not m:
            raise InputError(f"{path}: key {key!r} is not ((depth, heads, samples), k)")
        d, h, n, k = map(int, m.groups())
        run = by_key.get((d, h, n))
        if run is not None:
            out.setdefault(run, {})[k] = float(err)
    return out


# ----------------------------------------------------------------------------- the task variant

class AuthorsFormat:
    """The published models' input format as a variant of this project's k-hop task.

    Batches come from :class:`~verify.crosscheck.data.TaskData` over the conditions
    k = 0..``max_hops`` of :class:`~verify.tasks.khop.KHopTask` (n = ``n``, vocab 4,
    ``distribution=paper``: no two equal neighbours); condition k's BOS token becomes the
    hop-count token k and the ids are renumbered to theirs (module docstring).

    Args:
        n: symbols per input (98: their seq_len 100 minus 2).
        max_hops: largest k (16).
    """

    def __init__(self, n: int = N_SYMBOLS, max_hops: int = MAX_HOPS):
        from depthcraft.verify.crosscheck.data import TaskData
        from depthcraft.verify.tasks.khop import KHopTask

        self.n, self.max_hops = n, max_hops
        self.data = TaskData(KHopTask(), [{"k": k, "n": n, "vocab": VOCAB, "distribution": "paper"}
                                          for k in range(max_hops + 1)])
        d = self.data
        # our input id -> theirs: symbols 0..3 -> 17..20, BOS_k -> k (PAD never occurs)
        self.id_map = np.full(d.n_inputs, -1, np.int64)
        for i, tok in enumerate(d.tokens):
            self.id_map[i] = CHAR_BASE + int(tok)
        for k, b in enumerate(d.bos_ids):
            self.id_map[b] = k
        # our class -> theirs: symbols -> 17..20, ⊥ -> 21
        self.class_map = np.asarray([NONE_ID if c == d.none_value else CHAR_BASE + int(c) for c in d.classes],
                                    np.int64)

    def convert(self, batch) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A :class:`~verify.crosscheck.data.Batch` -> (ids [b, n+1] int32, targets [b, n+1] int32,
        scored [b, n+1] bool) in their numbering; position 0's target is the blank (22)."""
        ids = self.id_map[batch.ids].astype(np.int32)
        targets = self.class_map[batch.targets].astype(np.int32)
        targets[:, 0] = BLANK_ID
        return ids, targets, np.asarray(batch.error_mask, bool)

    def eval_set(self, k: int, size: int, seed: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``size`` fresh inputs at hop count k from the evaluation stream ``seed`` (the same inputs for
        every model), in their numbering (see :meth:`convert`)."""
        from depthcraft.verify.tasks.khop import sample_no_adjacent_repeat

        rng = np.random.default_rng([seed, 31, k])
        tokens = sample_no_adjacent_repeat(rng, size, self.n, VOCAB)
        return self.convert(self.data.condition_batch(k, tokens))


# ----------------------------------------------------------------------------- evaluation

def logits_fn(model: PublishedModel) -> Callable[[np.ndarray], np.ndarray]:
    """ids [b, T] int32 -> logits [b, T, width] float32 (the runtime's jitted forward)."""
    import jax

    from depthcraft.constructions.runtime import as_jax, forward

    params = as_jax(model.params)

    def run(ids: np.ndarray) -> np.ndarray:
        return np.asarray(forward(params, jax.numpy.asarray(ids, jax.numpy.int32), model.arch).logits)

    return run


def evaluate_model(model: PublishedModel, fmt: AuthorsFormat, ks: Sequence[int], size: int, seed: int,
                   chunk: int = 256, progress: Optional[Callable[[str], None]] = None) -> Dict[str, Any]:
    """Token error of one model at each k on ``size`` fresh inputs (their error: positions whose
    target is not ⊥).

    Returns:
        ``{"k": {str(k): {"error", "wrong", "scored", "se"}}, "seconds"}``: ``se`` is the standard
        error of the error as a ratio estimate over independent sequences (sequences are the
        independent units; positions of one sequence are not).
    """
    run = logits_fn(model)
    out: Dict[str, Any] = {}
    t0 = time.time()
    for k in ks:
        ids, targets, scored = fmt.eval_set(k, size, seed)
        wrong_seq = np.zeros(size)
        for a in range(0, size, chunk):
            pred = run(ids[a:a + chunk]).argmax(-1)
            wrong_seq[a:a + chunk] = ((pred != targets[a:a + chunk]) & scored[a:a + chunk]).sum(-1)
        n_seq = scored.sum(-1).astype(float)
        wrong, total = float(wrong_seq.sum()), float(n_seq.sum())
        err = wrong / total if total else float("nan")
        out[str(k)] = {"error": err, "wrong": int(wrong), "scored": int(total),
                       "se": ratio_se(wrong_seq, n_seq)}
        if progress:
            progress(f"{model.name} k={k}: {err:.4f} ({time.time() - t0:.0f} s)")
    return {"k": out, "seconds": round(time.time() - t0, 1)}


def ratio_se(num: np.ndarray, den: np.ndarray) -> float:
    """Standard error of sum(num) / sum(den) over independent units (delta method)."""
    num, den = np.asarray(num, float), np.asarray(den, float)
    n = len(num)
    if n < 2 or den.sum() == 0:
        return float("nan")
    r = num.sum() / den.sum()
    resid = num - r * den
    return float(math.sqrt((resid ** 2).sum() / (n - 1) / n) / den.mean())


# ----------------------------------------------------------------------------- the whole evaluation

#: Where ``depthcraft published`` writes (relative to the project root).
OUT_DIR = os.path.join("results", "crosscheck", "published")
#: Inputs per k (the issue asks for at least 2048; the authors used 100).
SIZE = 2048
#: The evaluation stream's seed.
SEED = 0


def model_file(out: str, run: str) -> str:
    """The per-model result file (written as each model finishes; a rerun skips it)."""
    return os.path.join(out, "models", f"{run}.json")


def evaluate_runs(repo: str, out: str, size: int = SIZE, seed: int = SEED, ks: Sequence[int] = range(MAX_HOPS + 1),
                  runs: Optional[Sequence[str]] = None, progress: Optional[Callable[[str], None]] = None
                  ) -> Dict[str, Dict[str, Any]]:
    """Evaluate every present run (or ``runs``), writing ``<out>/models/<run>.json`` as each finishes.

    A run whose file exists with the same size, seed and k's is read back, not evaluated again
    (so an interrupted evaluation resumes).

    Returns:
        {run: the per-model record}: run, depth, heads, width, samples, size, seed, k (per k: error,
        wrong, scored, se), seconds.
    Raises:
        InputError: an unknown run name, or a present run that cannot be loaded.
    """
    from depthcraft.constructions.files import write_json_atomic

    present, _ = present_runs(repo)
    todo = list(present if runs is None else runs)
    unknown = [r for r in todo if r not in RUNS]
    if unknown:
        raise InputError(f"unknown run {unknown[0]!r}; the runs are {', '.join(RUNS)}")
    ks = [int(k) for k in ks]
    fmt = AuthorsFormat()
    done: Dict[str, Dict[str, Any]] = {}
    for run in todo:
        path = model_file(out, run)
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as fh:
                rec = json.load(fh)
            if rec.get("size") == size and rec.get("seed") == seed and rec.get("ks") == ks:
                done[run] = rec
                if progress:
                    progress(f"{run}: already evaluated")
                continue
        model = load_run(os.path.join(repo, MODELS_DIR, run))
        res = evaluate_model(model, fmt, ks, size, seed, progress=progress)
        rec = {"run": run, "depth": model.depth, "heads": model.heads, "width": model.width,
               "samples": model.samples, "size": size, "seed": seed, "ks": ks, **res}
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_json_atomic(path, rec)
        done[run] = rec
    return done


# ----------------------------------------------------------------------------- the reference forward

def port_check(repo: str, runs: Sequence[str], size: int = 4, seed: int = SEED, dropout_size: int = 0,
               progress: Optional[Callable[[str], None]] = None,
               dropout_runs: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """Compare the runtime's logits with Hugging Face's ``GPT2Model`` on the same weights and inputs.

    Needs torch and transformers (not dependencies of depthcraft: ``pip install torch transformers``).
    The reference model is built as the authors' ``src/models.py`` builds it (``GPT2Config`` with
    vocab_size, n_positions, n_embd, n_layer, n_head from the config; ``use_cache=False``), its
    weights loaded from the same state dict (read by :func:`~verify.crosscheck.ptfile.load_state_dict`,
    never by ``torch.load``), in eval mode (no dropout).

    With ``dropout_size`` > 0 it also measures each run's error at every k on ``dropout_size`` inputs
    with the reference model in *training* mode (GPT-2's default dropout 0.1 on embeddings,
    attention weights and residual branches, torch seed ``seed``): the authors' evaluation loads
    the models with ``get_model_from_run`` and never calls ``.eval()``, so their errors.json was
    measured with dropout active.

    Args:
        repo: a checkout of the authors' repository.
        runs: run names to compare.
        size: inputs per k (k = 0..16) for the logit comparison.
        seed: evaluation stream (inputs) and torch seed.
        dropout_size: inputs per k for the dropout-mode error (0 = skip).
        dropout_runs: the runs whose dropout-mode error is measured (None = all of ``runs``).
    Returns:
        ``{"runs": {run: {"max_abs_logit_diff", "max_abs_logit", "argmax_agree", "dropout_error":
        {k: error}}}, "max_abs_logit_diff", "torch", "transformers", "inputs_per_k"}``.
    Raises:
        InputError: torch or transformers is missing.
    """
    try:
        import torch
        import transformers
        from transformers import GPT2Config, GPT2Model
    except ImportError as e:
        raise InputError(f"the port check needs torch and transformers ({e.name} is not installed); "
                         f"pip install torch transformers") from None
    torch.set_num_threads(1)
    fmt = AuthorsFormat()
    out: Dict[str, Any] = {}
    for run in runs:
        folder = os.path.join(repo, MODELS_DIR, run)
        m = load_run(folder)
        ref = GPT2Model(GPT2Config(vocab_size=m.vocab_size, n_positions=m.n_positions, n_embd=m.width,
                                   n_layer=m.depth, n_head=m.heads, use_cache=False, bos_token_id=None,
                                   eos_token_id=None))
        state = load_state_dict(os.path.join(folder, CHECKPOINT))
        ref.load_state_dict({k[len("backbone."):]: torch.from_numpy(v.copy()) for k, v in state.items()},
                            strict=True)
        ref.eval()
        ours = logits_fn(m)
        diff, top, agree, total = 0.0, 0.0, 0, 0
        for k in range(MAX_HOPS + 1):
            ids, _, _ = fmt.eval_set(k, size, seed)
            with torch.no_grad():
                r = ref(torch.from_numpy(ids.astype(np.int64))).last_hidden_state.numpy()
            o = ours(ids)
            diff = max(diff, float(np.abs(r - o).max()))
            top = max(top, float(np.abs(r).max()))
            agree += int((r.argmax(-1) == o.argmax(-1)).sum())
            total += r.shape[0] * r.shape[1]
        rec: Dict[str, Any] = {"max_abs_logit_diff": diff, "max_abs_logit": top,
                               "argmax_agree": agree / total}
        if dropout_size and (dropout_runs is None or run in dropout_runs):
            ref.train()
            torch.manual_seed(seed)
            rec["dropout_error"], rec["dropout_se"] = {}, {}
            for k in range(MAX_HOPS + 1):
                ids, targets, scored = fmt.eval_set(k, dropout_size, seed + 1)
                with torch.no_grad():
                    pred = ref(torch.from_numpy(ids.astype(np.int64))).last_hidden_state.numpy().argmax(-1)
                wrong = ((pred != targets) & scored).sum(-1)
                rec["dropout_error"][str(k)] = float(wrong.sum() / scored.sum())
                rec["dropout_se"][str(k)] = ratio_se(wrong, scored.sum(-1))
        out[run] = rec
        if progress:
            progress(f"{run}: max |logit diff| {diff:.2e} (max |logit| {top:.1f})")
    return {"runs": out, "max_abs_logit_diff": max([r["max_abs_logit_diff"] for r in out.values()] or [0.0]),
            "inputs_per_k": size, "dropout_inputs_per_k": dropout_size, "seed": seed,
            "torch": torch.__version__, "transformers": transformers.__version__}


# ----------------------------------------------------------------------------- the finite-sample claim

#: Sample sizes of the finite-sample runs (training sequences, reused for 100k steps).
SAMPLE_SIZES = (1000, 3000, 10000)


#: The smallest difference in mean error over k = 1..16 that counts as one depth generalising better than
#: another (issue 41: a comparison of two errors states the smallest difference that matters). 0.01 is the
#: unit this module already uses to call two errors different (:data:`EXPLAIN_ABOVE`, ours against theirs).
#: Defined once in :mod:`verify.crosscheck.claims.stats` (the looped rule reads it there too) and
#: imported above, so that the claims do not import this module back.
#: The finite-sample rule's date (written before it re-judged the finite-sample models' errors).
FINITE_SAMPLE_WRITTEN = "2026-12-07"


def judge_finite_sample(errors: Mapping[Tuple[int, int], Tuple[float, float]],
                        min_difference: float = MIN_DIFFERENCE) -> Dict[str, Any]:
    """The finite-sample claim's rule with an effect size (issue 41, written 2026-12-07; it replaces
    issue 31's rule of 2026-12-04, which had none).

    Claim (Sanford, Hsu & Telgarsky 2024, their appendix's finite-sample runs): from the same 1k, 3k or
    10k training sequences, a deeper model generalises better.

    The measure: a model's error e = its mean error over k = 1..16 (k = 0, copying the input, is
    left out), with its standard error s (the k's errors' standard errors combined as independent).
    For each sample size n and each pair of consecutive present depths (L, L+1), with
    d = e(L+1) - e(L) and the noise margin m = 2 sqrt(s(L)^2 + s(L+1)^2):

    * *better*: d < -max(``min_difference``, m) (deeper is lower by at least 0.01 and beyond noise);
    * *worse*: d > max(``min_difference``, m);
    * *no difference*: otherwise (|d| below the smallest difference that matters, 0.01, or
      within noise).

    Verdict:

    * reproduced: no step is worse, and at every sample size at least half of the steps are better;
    * not reproduced: some step is worse (a deeper model generalises worse by at least 0.01);
    * inconclusive: otherwise (no sample size with two depths, or mostly no difference).

    When it was written the errors it re-judges were known (issue 31's finite-sample verdict "not
    reproduced" rested on depth 3 worse than depth 2 at 1k sequences by 0.0013, 0.6750 vs 0.6737).
    One model per configuration (the authors trained one seed each), so the standard errors are
    over fresh test inputs only, not over training seeds.

    Args:
        errors: (samples, depth) -> (e, s), fractions.
        min_difference: the smallest difference that matters (fraction of tokens).
    Returns:
        ``{"verdict", "reason", "min_difference", "steps": [{"samples", "from", "to", "e_from", "e_to",
        "difference", "step"}]}``.
    Raises:
        ParameterError: ``min_difference`` < 0.
    """
    if not min_difference >= 0:
        raise ParameterError(f"min_difference must be >= 0, got {min_difference!r}")
    steps = []
    for n in sorted({n for n, _ in errors}):
        ds = sorted(d for m, d in errors if m == n)
        for a, b in zip(ds, ds[1:]):
            (ea, sa), (eb, sb) = errors[(n, a)], errors[(n, b)]
            margin = max(min_difference, 2 * math.sqrt(sa ** 2 + sb ** 2))
            kind = "better" if eb - ea < -margin else "worse" if eb - ea > margin else "no difference"
            steps.append({"samples": n, "from": a, "to": b, "e_from": round(ea, 4), "e_to": round(eb, 4),
                          "difference": round(eb - ea, 4), "step": kind})
    sizes = sorted({s["samples"] for s in steps})
    worse = [s for s in steps if s["step"] == "worse"]
    base = {"steps": steps, "min_difference": min_difference, "rule_written": FINITE_SAMPLE_WRITTEN}
    if worse:
        w = worse[0]
        return {"verdict": "not reproduced", **base,
                "reason": f"at n = {w['samples']} depth {w['to']} is worse than depth {w['from']} by "
                          f"{w['difference']:.4f} ({w['e_to']} vs {w['e_from']})"}
    if sizes and all(2 * sum(s["step"] == "better" for s in steps if s["samples"] == n)
                     >= sum(s["samples"] == n for s in steps) for n in sizes):
        return {"verdict": "reproduced", **base,
                "reason": f"no deeper model is worse; at every sample size at least half the depth steps are "
                          f"better by >= {min_difference}"}
    return {"verdict": "inconclusive", **base,
            "reason": "no sample size with two depths" if not sizes else
            f"more than half the depth steps differ by less than {min_difference} (or within noise) at some size"}


# ----------------------------------------------------------------------------- alignment with the construction

#: The distinct head maps of the pointer-doubling construction (:func:`rasp_programs.khop.khop_doubling`),
#: as hardmax maps on the same positions: ``prev`` (layer 1: i attends to i - 1), ``find1`` (layer 2, the
#: induction head, and layer 3: i attends to find(i)), ``find2``, ``find4``, ``find8`` (layers 4, 5, 6:
#: i attends to find^(2^(l-3))(i)). Where a pointer is ⊥ the construction attends to position 0.
REFERENCES = ("prev", "find1", "find2", "find4", "find8")
#: A layer "has" the construction's head when one of its heads aligns at least this much with the
#: construction's map for that layer (chance, uniform causal attention, is about 0.2 at N = 98).
CONSTRUCTION_HEAD_FOUND = 0.8


def construction_layer_ref(layer: int) -> str:
    """The reference map of the doubling construction's attention layer ``layer`` (1-based)."""
    if layer == 1:
        return "prev"
    return "find1" if layer <= 3 else f"find{2 ** (layer - 3)}"


def reference_maps(x: np.ndarray) -> Dict[str, np.ndarray]:
    """The construction's head maps on symbols x [b, n] (model positions 0..n, position 0 = the
    hop-count token): {name: [b, n+1, n+1] float32 one-hot rows} for :data:`REFERENCES`."""
    from depthcraft.verify.tasks.khop import find_k

    b, n = x.shape
    t = n + 1
    rows = np.arange(t)
    out = {}
    prev = np.zeros((b, t, t), np.float32)
    prev[:, rows[1:], rows[1:] - 1] = 1.0
    prev[:, 0, 0] = 1.0
    out["prev"] = prev
    for m in (1, 2, 4, 8):
        ptr = find_k(x, m)  # [b, n+1]: column i = find^m(i), 0 = ⊥ (attend to position 0)
        a = np.zeros((b, t, t), np.float32)
        a[np.arange(b)[:, None], rows[None, :], ptr] = 1.0
        out[f"find{m}"] = a
    return out


def align_model(model: PublishedModel, fmt: AuthorsFormat, ks: Sequence[int] = (1, 2, 4, 8, 16), size: int = 32,
                seed: int = SEED + 1) -> Dict[str, Any]:
    """Alignment (:func:`verify.crosscheck.alignment.alignment`, query rows 1..n) of every trained head
    with every construction map, per hop count k.

    Returns:
        ``{"k": {str(k): {"matrix": [L][H][len(REFERENCES)] mean alignments, "chance":
        [len(REFERENCES)] the uniform causal map's alignment}}, "layers": [per layer: {"expected",
        "best_head", "alignment", "best_ref", "best_ref_alignment"} at the model's reference k]}``;
        the reference k is 2^(L-2) (the largest k the depth-L construction computes), at most 16.
    """
    import jax

    from depthcraft.constructions.runtime import as_jax, forward
    from depthcraft.verify.crosscheck.alignment import alignment, uniform_map

    params = as_jax(model.params)
    out: Dict[str, Any] = {}
    for k in ks:
        ids, _, _ = fmt.eval_set(k, size, seed)
        maps = forward(params, jax.numpy.asarray(ids), model.arch, collect_attention=True).attention
        refs = reference_maps(ids[:, 1:] - CHAR_BASE)
        q = np.ones(ids.shape, bool)
        q[:, 0] = False
        mat = np.zeros((model.depth, model.heads, len(REFERENCES)))
        for l, a in enumerate(maps):
            a = np.asarray(a)  # [b, H, T, T]
            for j, name in enumerate(REFERENCES):
                mat[l, :, j] = alignment(a, refs[name][:, None], q[:, None, :]).mean(0)
        uni = uniform_map(ids.shape[1], True)[None]
        chance = [float(alignment(uni, refs[name], q).mean()) for name in REFERENCES]
        out[str(k)] = {"matrix": np.round(mat, 4).tolist(), "chance": [round(c, 4) for c in chance]}
    k_ref = min(2 ** max(model.depth - 2, 0), 16)
    if str(k_ref) not in out:
        k_ref = int(max(ks))
    mat = np.asarray(out[str(k_ref)]["matrix"])
    layers = []
    for l in range(model.depth):
        want = construction_layer_ref(l + 1)
        j = REFERENCES.index(want)
        h = int(mat[l, :, j].argmax())
        hb, jb = np.unravel_index(int(mat[l].argmax()), mat[l].shape)
        layers.append({"layer": l + 1, "expected": want, "best_head": h + 1, "alignment": round(float(mat[l, h, j]), 4),
                       "best_ref": REFERENCES[jb], "best_ref_head": int(hb) + 1,
                       "best_ref_alignment": round(float(mat[l, hb, jb]), 4)})
    found = all(l["alignment"] >= CONSTRUCTION_HEAD_FOUND for l in layers)
    return {"k": out, "reference_k": k_ref, "layers": layers, "construction_heads_found": found}


# ----------------------------------------------------------------------------- hop schedules

#: Hop counts the schedules are measured at (the reference k of depth L is 2^(L-2)).
SCHEDULE_KS = (1, 2, 4, 8, 16)
#: Sequences per k for the schedules, and their stream.
SCHEDULE_SIZE, SCHEDULE_SEED = 64, SEED + 2


def model_schedule(model: PublishedModel, fmt: AuthorsFormat, ks: Sequence[int] = SCHEDULE_KS,
                   size: int = SCHEDULE_SIZE, seed: int = SCHEDULE_SEED) -> Dict[str, Any]:
    """A published model's hop schedule (:func:`verify.crosscheck.schedule.measure`) on ``size``
    fresh inputs per k (their format; the same inputs for every model).

    Returns:
        :func:`~verify.crosscheck.schedule.measure`'s dict plus ``depth``, ``heads``, ``samples``,
        ``size``, ``seed``.
    """
    from depthcraft.verify.crosscheck import schedule

    run = schedule.model_maps_fn(model.params, model.arch)
    ids_by_k = {k: fmt.eval_set(k, size, seed)[0] for k in ks}
    rec = schedule.measure(lambda k, x: run(ids_by_k[k]), lambda k: ids_by_k[k][:, 1:] - CHAR_BASE, ks, model.depth)
    rec.update(depth=model.depth, heads=model.heads, samples=model.samples, size=size, seed=seed)
    return rec


# ----------------------------------------------------------------------------- results.json

#: Differences from their errors.json above this are explained in results.json (issue 31).
EXPLAIN_ABOVE = 0.01

def explanation(inputs_per_k: int, port: Optional[Mapping[str, Any]], within: int, checked: int) -> str:
    """results.json's ``explanation``: why ours and their errors.json differ, written from this run's
    settings and counts (issue 41: no fixed text)."""
    text = ("Their errors.json was measured with dropout on: their notebook loads each model with "
            "get_model_from_run (src/models.py), which never calls .eval(), and Hugging Face's GPT-2 has "
            "dropout 0.1 by default (embeddings, attention weights, residual branches); it also used "
            f"{THEIR_INPUTS_PER_K} inputs per k. Our errors are the models' deterministic function (eval mode, no "
            f"dropout) on {inputs_per_k} inputs per k.")
    if port and port.get("dropout_inputs_per_k"):
        text += (f" port.json re-measures the errors with the reference GPT-2 in training mode (dropout on, "
                 f"{port['dropout_inputs_per_k']} inputs per k, {sum(1 for r in port.get('runs', {}).values() if 'dropout_error' in r)} runs): "
                 f"{within} of the {checked} cells that differ from errors.json by more than {EXPLAIN_ABOVE} agree "
                 "with it within 3 sqrt(2) standard errors.")
    else:
        text += " No dropout-mode measurement (port.json) was used in this run."
    return text


#: Inputs per k behind the authors' errors.json (their notebook).
THEIR_INPUTS_PER_K = 100


def _mean_error(rec_k: Mapping[str, Mapping[str, float]], ks: Sequence[int]) -> Tuple[float, float]:
    es = [rec_k[str(k)]["error"] for k in ks]
    ss = [rec_k[str(k)]["se"] for k in ks]
    return float(np.mean(es)), float(math.sqrt(sum(s * s for s in ss)) / len(ss))


def build_results(repo: str, records: Mapping[str, Mapping[str, Any]], alignments: Mapping[str, Any],
                  port: Optional[Mapping[str, Any]] = None, command: str = "",
                  schedules: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
    """results.json of ``depthcraft published`` from the per-model records (:func:`evaluate_runs`),
    the alignments (:func:`align_model`) and the port check (``port.json``, optional).

    Layout: ``present``, ``absent`` (run -> reason), ``protocol``, ``runs`` (per run: depth, heads,
    samples, ``errors``/``se``/``theirs``/``diff`` by k, ``dropout_error`` by k when the port check
    measured it, seconds), ``max_abs_diff`` (+ where), ``over_threshold`` (every |diff| > 0.01 with
    the dropout-mode error beside it), ``explanation``, ``spec_7a``, ``c1`` (the rule of
    :mod:`verify.crosscheck.c1` on our errors and on theirs), ``finite_sample``, ``alignment``,
    ``port`` (max |logit diff|), ``seconds``.
    """
    from depthcraft.verify.crosscheck import c1
    from depthcraft.verify.crosscheck.claims import PAPER_KHOP

    present, absent = present_runs(repo)
    theirs = authors_errors(repo)
    inputs = next(iter(records.values()))["size"] if records else SIZE
    port_runs = (port or {}).get("runs", {})
    runs: Dict[str, Any] = {}
    over = []
    worst = (0.0, None, None)
    for run in RUNS:
        if run not in records:
            continue
        rec = records[run]
        errs = {k: v["error"] for k, v in rec["k"].items()}
        th = {str(k): v for k, v in theirs.get(run, {}).items()}
        diff = {k: errs[k] - th[k] for k in errs if k in th}
        drop = port_runs.get(run, {}).get("dropout_error")
        runs[run] = {"depth": rec["depth"], "heads": rec["heads"], "width": rec["width"], "samples": rec["samples"],
                     "errors": {k: round(v, 5) for k, v in errs.items()},
                     "se": {k: round(v["se"], 5) for k, v in rec["k"].items()},
                     "theirs": {k: round(v, 5) for k, v in th.items()},
                     "diff": {k: round(v, 5) for k, v in diff.items()}, "seconds": rec["seconds"]}
        if drop:
            runs[run]["dropout_error"] = {k: round(v, 5) for k, v in drop.items()}
        for k, d in diff.items():
            if abs(d) > worst[0]:
                worst = (abs(d), run, k)
            if abs(d) > EXPLAIN_ABOVE:
                item = {"run": run, "k": int(k), "ours": round(errs[k], 4), "theirs": round(th[k], 4),
                        "diff": round(d, 4)}
                if drop:
                    # the standard error of a dropout-on estimate from 100 inputs (theirs is one such estimate;
                    # the port check's is another, on other inputs and other dropout masks)
                    se = port_runs[run].get("dropout_se", {}).get(k)
                    n_drop = (port or {}).get("dropout_inputs_per_k") or 100
                    se100 = se * math.sqrt(n_drop / 100) if se is not None else float("nan")
                    item.update({"dropout": round(drop[k], 4), "dropout_minus_theirs": round(drop[k] - th[k], 4),
                                 "se_100_inputs": round(se100, 4)})
                over.append(item)
    checked = [o for o in over if "dropout" in o]
    within = [o for o in checked if abs(o["dropout_minus_theirs"]) <= 3 * math.sqrt(2) * o["se_100_inputs"]]
    fresh4 = {runs[r]["depth"]: r for r in runs if RUNS[r][1:] == (4, -1)}
    ours_by_depth = {d: {int(k): v for k, v in runs[r]["errors"].items()} for d, r in sorted(fresh4.items())}
    theirs_by_depth = {d: theirs[f"width4-depth{d}"] for d in range(2, 7) if f"width4-depth{d}" in theirs}
    ours_se = {d: {int(k): v for k, v in runs[r]["se"].items()} for d, r in sorted(fresh4.items())}
    c1_doc = {"rule_written": c1.WRITTEN, "rule": c1.RULE_TEXT,
              "ours": c1.judge_errors(ours_by_depth, ours_se, c1.PAPER_GRID) if ours_by_depth else None,
              "ours_inputs_per_k": inputs,
              "theirs": c1.judge_errors(theirs_by_depth, {d: c1.binomial_se(e, THEIR_INPUTS_PER_K)
                                                          for d, e in theirs_by_depth.items()}, c1.PAPER_GRID)
              if theirs_by_depth else None,
              "theirs_se": f"binomial bound sqrt(e (1 - e) / {THEIR_INPUTS_PER_K}) (errors.json gives none)"}
    fs_ks = range(1, MAX_HOPS + 1)
    fs_ours = {(RUNS[r][2], records[r]["depth"]): _mean_error(records[r]["k"], fs_ks)
               for r in records if RUNS[r][2] in SAMPLE_SIZES and RUNS[r][1] == 4}
    fs_theirs = {f"n={n} L={d}": round(float(np.mean([theirs[r][k] for k in fs_ks])), 4)
                 for r, (d, h, n) in RUNS.items() if n in SAMPLE_SIZES and r in theirs}
    finite = {"rule_written": FINITE_SAMPLE_WRITTEN, "min_difference": MIN_DIFFERENCE, "ours": judge_finite_sample(fs_ours) if fs_ours else None,
              "ours_mean_error": {f"n={n} L={d}": round(e, 4) for (n, d), (e, _) in sorted(fs_ours.items())},
              "theirs_mean_error": fs_theirs,
              "fresh_mean_error": {f"L={d}": round(float(np.mean([ours_by_depth[d][k] for k in fs_ks])), 4)
                                   for d in ours_by_depth}}
    return {
        "command": command,
        "source": "github.com/chsanford/hop-induction-heads, " + MODELS_DIR,
        "present": present, "absent": absent, "evaluated": [r for r in RUNS if r in records],
        "pending": [r for r in present if r not in records],
        "protocol": {"inputs_per_k": inputs,
                     "seed": next(iter(records.values()))["seed"] if records else SEED,
                     "ks": list(range(MAX_HOPS + 1)), "symbols": N_SYMBOLS, "vocab": VOCAB,
                     "distribution": "no two equal neighbours (KHopTask distribution=paper)",
                     "error": "token error over positions 1..98 whose target is not ⊥ (eval mode, no dropout)"},
        "runs": runs,
        "max_abs_diff": round(worst[0], 5), "max_abs_diff_at": {"run": worst[1], "k": worst[2]},
        "over_threshold": over, "threshold": EXPLAIN_ABOVE,
        "explained_by_dropout": {"checked": len(checked), "within_noise": len(within),
                                 "rule": "|dropout-mode error - theirs| <= 3 sqrt(2) x the standard error "
                                         "of a 100-input estimate"},
        "explanation": explanation(inputs, port, len(within), len(checked)),
        "spec_7a": {str(d): {str(k): v for k, v in row.items()} for d, row in PAPER_KHOP.items()},
        "c1": c1_doc, "finite_sample": finite,
        "alignment": dict(alignments),
        "port": None if not port else {"max_abs_logit_diff": port["max_abs_logit_diff"],
                                       "runs_checked": len(port["runs"]), "torch": port.get("torch"),
                                       "transformers": port.get("transformers")},
        "port_runs": {r: {"max_abs_logit_diff": v["max_abs_logit_diff"], "argmax_agree": v["argmax_agree"]}
                      for r, v in port_runs.items()},
        "port_dropout_inputs_per_k": (port or {}).get("dropout_inputs_per_k"),
        "seconds": round(sum(r["seconds"] for r in records.values()), 1),
        "schedules": None if not schedules else schedules_summary(schedules),
    }


# ----------------------------------------------------------------------------- figures and text

def write_figures(out: str, doc: Mapping[str, Any]) -> List[str]:
    """errors.png (error by k and depth, ours beside theirs), finite_sample.png, alignment_L<d>.png
    (one per depth of the fresh-sample 4-head runs) and port.png (when the port check ran)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from depthcraft.constructions.files import save_figure_atomic

    written = []
    runs = doc["runs"]
    fresh = sorted((r for r in runs if RUNS[r][1:] == (4, -1)), key=lambda r: runs[r]["depth"])
    cmap = plt.get_cmap("viridis")
    ks = list(range(MAX_HOPS + 1))
    fig, ax = plt.subplots(figsize=(8, 4.8))
    for i, r in enumerate(fresh):
        c = cmap(i / max(len(fresh) - 1, 1))
        d = runs[r]["depth"]
        ax.plot(ks, [runs[r]["errors"][str(k)] for k in ks], "o-", color=c, ms=3, label=f"L={d} ours (eval mode, {doc['protocol']['inputs_per_k']}/k)")
        ax.plot(ks, [runs[r]["theirs"].get(str(k), np.nan) for k in ks], "--", color=c, lw=1,
                label=f"L={d} their errors.json ({THEIR_INPUTS_PER_K}/k)")
        if "dropout_error" in runs[r]:
            ax.plot(ks, [runs[r]["dropout_error"][str(k)] for k in ks], "x", color=c, ms=5,
                    label=f"L={d} dropout on (ref. GPT-2, {doc.get('port_dropout_inputs_per_k')}/k)")
    ax.axhline(0.05, color="grey", ls=":", lw=1)
    ax.set_xlabel("k (hops)")
    ax.set_ylabel("token error (target not ⊥)")
    ax.set_title("Sanford et al.'s published models (4 heads, width 128, fresh samples)", fontsize=10)
    if fresh:
        ax.legend(fontsize=6, ncol=2)
    save_figure_atomic(fig, os.path.join(out, "errors.png"))
    plt.close(fig)
    written.append(os.path.join(out, "errors.png"))

    fs = doc["finite_sample"]
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    series = [(n, f"n={n}") for n in SAMPLE_SIZES]
    for j, (n, key) in enumerate(series):
        c = plt.get_cmap("plasma")(j / 3)
        ds = sorted(int(k.split("L=")[1]) for k in fs["ours_mean_error"] if k.startswith(key + " "))
        if ds:
            ax.plot(ds, [fs["ours_mean_error"][f"{key} L={d}"] for d in ds], "o-", color=c, label=f"{key} ours")
        dt = sorted(int(k.split("L=")[1]) for k in fs["theirs_mean_error"] if k.startswith(key + " "))
        ax.plot(dt, [fs["theirs_mean_error"][f"{key} L={d}"] for d in dt], "--", color=c, lw=1, label=f"{key} theirs")
    df = sorted(int(k[2:]) for k in fs["fresh_mean_error"])
    ax.plot(df, [fs["fresh_mean_error"][f"L={d}"] for d in df], "o-", color="black", label="fresh samples ours")
    ax.set_xlabel("depth L")
    ax.set_ylabel("mean error over k = 1..16")
    ax.set_title("Finite training sets: error by depth", fontsize=10)
    ax.legend(fontsize=7)
    save_figure_atomic(fig, os.path.join(out, "finite_sample.png"))
    plt.close(fig)
    written.append(os.path.join(out, "finite_sample.png"))

    for r in fresh:
        al = doc["alignment"].get(r)
        if not al:
            continue
        kref = str(al["reference_k"])
        mat = np.asarray(al["k"][kref]["matrix"])  # [L, H, refs]
        L, H, _ = mat.shape
        fig, ax = plt.subplots(figsize=(5.2, 0.45 * L * H + 1.4))
        im = ax.imshow(mat.reshape(L * H, -1), vmin=0, vmax=1, cmap="Blues", aspect="auto")
        for l in range(L):
            j = REFERENCES.index(construction_layer_ref(l + 1))
            h = al["layers"][l]["best_head"] - 1
            ax.add_patch(plt.Rectangle((j - 0.5, l * H + h - 0.5), 1, 1, fill=False, ec="red", lw=1.5))
            if l:
                ax.axhline(l * H - 0.5, color="black", lw=0.8)
        for (i, j), v in np.ndenumerate(mat.reshape(L * H, -1)):
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=6, color="white" if v > 0.6 else "black")
        ax.set_xticks(range(len(REFERENCES)), REFERENCES)
        ax.set_yticks(range(L * H), [f"L{l + 1}.h{h + 1}" for l in range(L) for h in range(H)], fontsize=6)
        ax.set_title(f"{r}: alignment with the doubling construction's maps\n(k = {kref}; red: the "
                     f"construction's head of that layer)", fontsize=8)
        fig.colorbar(im, ax=ax, fraction=0.05)
        path = os.path.join(out, f"alignment_L{runs[r]['depth']}.png")
        save_figure_atomic(fig, path)
        plt.close(fig)
        written.append(path)

    port = doc.get("port_runs")
    if port:
        names = [r for r in RUNS if r in port]
        fig, ax = plt.subplots(figsize=(8, 3.6))
        ax.bar(range(len(names)), [port[r]["max_abs_logit_diff"] for r in names], color="C0")
        ax.axhline(1e-4, color="red", ls="--", lw=1, label="1e-4")
        ax.set_yscale("log")
        ax.set_xticks(range(len(names)), names, rotation=70, fontsize=6)
        ax.set_ylabel("max |logit difference|")
        ax.set_title("Port vs Hugging Face GPT2Model (same weights and inputs)", fontsize=10)
        ax.legend(fontsize=7)
        path = os.path.join(out, "port.png")
        save_figure_atomic(fig, path)
        plt.close(fig)
        written.append(path)
    return written


def schedules_summary(schedules: Mapping[str, Any]) -> Dict[str, Any]:
    """results.json's ``schedules``: per model (schedules.json's ``models``) its reference k and, per
    layer, the matched references and the furthest find^m; the construction's per depth."""
    models = {r: {"k_ref": rec["k_ref"], "depth": rec["depth"], "source": rec.get("source", "authors"),
                  "layers": [{"layer": l["layer"], "schedule": l["schedule"], "find": l["find"]} for l in rec["layers"]]}
              for r, rec in schedules["models"].items()}
    return {"file": "schedules.json", "match": schedules["match"], "models": models,
            "construction": {str(d): c for d, c in sorted(schedules["construction"].items())}}


def _wrap(text: str, width: int) -> List[str]:
    import textwrap

    return textwrap.wrap(text, width, subsequent_indent="    ") or [""]


def summary_lines(doc: Mapping[str, Any]) -> List[str]:
    """The command's report, lines of at most 80 columns."""
    lines = [f"present: {len(doc['present'])} of {len(RUNS)} runs; evaluated {len(doc['evaluated'])}"
             + (f", pending {len(doc['pending'])}" if doc["pending"] else "")]
    line = ""
    for name in doc["absent"]:  # packed into lines of at most 80 columns
        if line and len(line) + len(name) + 2 > 80:
            lines.append(line + ",")
            line = ""
        line = f"{line}, {name}" if line else (f"  {name}" if len(lines) > 1 and lines[-1].endswith(",")
                                                else f"absent: {name}")
    if line:
        lines.append(line)
    show = (1, 2, 4, 8, 16)
    lines.append(f"{'error by k':<24}" + "".join(f"{'k=' + str(k):>10}" for k in show))
    for r, v in doc["runs"].items():
        lines.append(f"{r:<24}" + "".join(f"{v['errors'][str(k)]:>10.3f}" for k in show))
        lines.append(f"{'  theirs':<24}" + "".join(f"{v['theirs'].get(str(k), float('nan')):>10.3f}" for k in show))
        if "dropout_error" in v:
            lines.append(f"{'  ours, dropout on':<24}" + "".join(f"{v['dropout_error'][str(k)]:>10.3f}" for k in show))
    at = doc["max_abs_diff_at"]
    lines.append(f"max |ours - theirs| = {doc['max_abs_diff']:.3f} ({at['run']}, k={at['k']})")
    lines.append(f"  {len(doc['over_threshold'])} (run, k) cells differ by more than {doc['threshold']}")
    ex = doc["explained_by_dropout"]
    if ex["checked"]:
        lines.append(f"  with dropout on: {ex['within_noise']} of {ex['checked']} within their sampling noise")
    if doc.get("port"):
        lines.append(f"port: max |logit diff| vs HF GPT-2 = {doc['port']['max_abs_logit_diff']:.1e} "
                     f"({doc['port']['runs_checked']} runs)")
    from depthcraft.verify.crosscheck import c1 as c1_rule

    for who, label in (("ours", "eval mode"), ("theirs", "errors.json")):
        c = doc["c1"].get(who)
        if c:
            lines.append(f"C1 on {label}: {c['verdict']}")
            lines += ["  " + part for part in _wrap(c1_rule.describe(c), 76)]
    fs = doc["finite_sample"].get("ours")
    if fs:
        lines += _wrap(f"finite-sample: {fs['verdict']}: {fs['reason']}", 80)
    sch = doc.get("schedules") or {}
    if sch:
        from depthcraft.verify.crosscheck.schedule import schedule_text

        lines.append("hop schedule per layer (references matched by a head, mass >= "
                     f"{sch.get('match')}):")
        for r, rec in sch.get("models", {}).items():
            lines += _wrap(f"  {r} (k={rec['k_ref']}): {schedule_text(rec['layers'])}", 80)
        for d, cons in sorted(sch.get("construction", {}).items()):
            lines.append(f"  construction L={d}: {' | '.join(n.replace('find', 'f') for n in cons)}")
    return lines
