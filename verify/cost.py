"""What a parameter set will cost, estimated before anything is built, and the memory budget.

:func:`estimate` runs the compiler's cheap first steps only: the construction's RASP program,
its expression graph and the value set of every SOp (:func:`constructions.compiler.plan_graph`),
no block, no weight. From the value sets it counts, exactly:

* ``d_model``: the residual directions (every SOp's basis, the positions, plus ``one``, BOS and PAD;
  exact for every benchmarked construction but ``khop_rasp`` (2 short) and ``graph_connectivity``
  (its set heads' scratch rows are not in the value sets));
* score tables: per attention head, query rows x key columns of its score table
  (tracr's ``w_qk`` over the query and key SOps' directions; a hand-built head reads the
  one-hot positions too), summed in ``score_cells``; the largest is ``largest_score_table``;
* MLP tables: per MLP, input x hidden + hidden x output (tracr's categorical MLP has one
  hidden unit per input value, a SequenceMap one per pair of values), summed in ``mlp_cells``;
* ``evaluations``: the Python calls of Map / SequenceMap functions the compiler makes.

Then memory and time are linear in those counts (memory in the table cells, with a constant per
family of constructions; time in layers, cells, forward calls and evaluations), with constants
measured by ``benchmarks/cost_model.py`` (fitted on half its parameter sets, tested on the other
half: docs/cost.md). The estimate is of the whole ``depthcraft verify`` process (imports, build,
checks): peak RSS in bytes, and CPU seconds (the wall time on an idle core); ``--certify`` adds a
term per score-table cell and key position.

:func:`admit` refuses (ParameterError: exit 2, one line) what would exceed the memory budget:
``--max-memory`` on ``verify``, ``run``, ``show``, ``save`` and ``max_memory`` of
``verify.api.check_program``; default :data:`BUDGET_FRACTION` of the machine's available memory.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from typing import Any, Dict, Mapping, Optional

from depthcraft.constructions.errors import ParameterError

#: Fraction of the available memory (``MemAvailable``) a run may use when ``--max-memory`` is not given.
BUDGET_FRACTION = 0.6

#: Fitted constants (benchmarks/cost_model.py --fit; results/performance/cost_model.json), per unit of each
#: :func:`features` entry they name. Memory, bytes of peak RSS: the process before any build (Python, JAX,
#: tracr, depthcraft; XLA compiles), per table cell of each family (tracr's float64 blocks, their copies, the
#: weights, the checks' buffers: the retrieval constructions, with hundreds of symbols, hold several times
#: more per cell than k-hop over 4), per certifier cell.
MEM = {"one": 3.74e8, "cells_khop": 33.7, "cells_retrieval": 211.0, "cells_connectivity": 69.4, "cells_other": 0.0,
       "cert_cells": 65.7}
#: Seconds of CPU time (user + system; the wall time on an idle core): fixed (imports, XLA compiles), per
#: attention layer, per table cell, per forward call, per Python evaluation, per certifier cell.
TIME = {"one": 0.0, "layers": 0.877, "cells": 7.89e-6, "calls": 0.0833, "evals": 0.0286, "cert_cells": 7.17e-6}


@dataclasses.dataclass
class Estimate:
    """The estimated cost of one parameter set (before building).

    Attributes:
        construction, params: what is estimated.
        seq_len: T = max_seq_len + 1 positions (BOS included).
        d_model: residual width the build will have (exact up to the hand-built heads' scratch rows).
        attn_layers: attention sublayers the schedule will have (longest chain of attention blocks).
        heads: attention heads over all layers.
        score_cells: sum over heads of query x key score-table entries.
        largest_score_table: the largest of those.
        mlp_cells: sum over MLPs of in x hidden + hidden x out entries.
        evaluations: Python evaluations of Map / SequenceMap functions.
        forward_flops: multiply-adds of every forward the checks run (``inputs`` rows).
        inputs: rows the checks run (random, edge, hypothesis, and the ablation's per layer).
        build_bytes: the memory of the tables above the base (the build, and the checks on its weights).
        check_bytes: kept for the report's shape; 0 (the checks' share is in ``build_bytes``).
        certify_bytes: the certifier's memory above the base.
        peak_bytes: estimated peak RSS of the whole process (int, bytes).
        seconds: estimated wall time (float) of the whole command on one core.
    """

    construction: str
    params: Dict[str, Any]
    seq_len: int
    d_model: int
    attn_layers: int
    heads: int
    score_cells: int
    largest_score_table: int
    mlp_cells: int
    evaluations: int
    forward_flops: float
    inputs: int
    build_bytes: float
    check_bytes: float
    certify_bytes: float
    peak_bytes: float
    seconds: float

    def to_json(self) -> Dict[str, Any]:
        """The fields as a JSON-serialisable dict (numbers rounded)."""
        d = dataclasses.asdict(self)
        for k in ("build_bytes", "check_bytes", "certify_bytes", "peak_bytes", "forward_flops"):
            d[k] = int(d[k])
        d["seconds"] = round(d["seconds"], 2)
        return d

    def text(self) -> str:
        """``d_model 1,234, score tables 3.2M cells, ~2.1 GB, ~40 s``."""
        return (f"d_model {self.d_model:,}, score tables {count(self.score_cells)} cells, MLP tables "
                f"{count(self.mlp_cells)} cells, ~{size(self.peak_bytes)} peak, ~{seconds(self.seconds)}")


def count(n: float) -> str:
    """``950``, ``32.8k``, ``3.2M``, ``1.5G``."""
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= scale:
            return f"{n / scale:.1f}{suffix}"
    return str(int(n))


def size(b: float) -> str:
    """Bytes as ``512 MB`` or ``2.1 GB``."""
    return f"{b / 1e9:.1f} GB" if b >= 1e9 else f"{b / 1e6:.0f} MB"


def seconds(s: float) -> str:
    """``40 s``, ``12 min``, ``3.1 h``."""
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.0f} min" if s < 7200 else f"{s / 3600:.1f} h"


def parse_memory(text: str) -> Optional[int]:
    """``--max-memory`` -> bytes: ``8G``, ``500M``, ``2.5GB``, ``1000000`` (bytes); ``0`` or ``none``: no limit (None).

    Raises:
        ParameterError: not a size (the message names the value and the expected form).
    """
    t = str(text).strip().lower()
    if t in ("0", "none", "off", "inf"):
        return None
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?", t)
    if not m:
        raise ParameterError(f"--max-memory {text!r} is not a size; expected e.g. 8G, 500M, 2.5GB, or 0 for no limit")
    scale = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}[m.group(2)]
    return int(float(m.group(1)) * scale)


def available_memory() -> Optional[int]:
    """Bytes the machine can give now (``MemAvailable`` of /proc/meminfo; else physical memory; None unknown)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def default_budget() -> Optional[int]:
    """:data:`BUDGET_FRACTION` of :func:`available_memory` (None when unknown: no limit)."""
    avail = available_memory()
    return None if avail is None else int(avail * BUDGET_FRACTION)


def graph_counts(graph, n: int, positions: str = "onehot") -> Dict[str, int]:
    """Table sizes of a planned graph (value sets and bases inferred; no blocks).

    Args:
        graph: tracr's expression graph after :func:`constructions.compiler.plan_graph`.
        n: max_seq_len (positions 1..n plus BOS).
        positions: ``onehot`` (a hand-built head's score table spans the n + 1 positions) or
            ``angle`` (positions are 2-dimensional angles).
    Returns:
        ``{"d_model", "attn_layers", "heads", "score_cells", "largest_score_table", "mlp_cells",
        "evaluations"}`` (ints).
    """
    import networkx as nx
    from tracr.compiler import nodes
    from tracr.rasp import rasp

    from depthcraft.constructions.nodes import HeadSpec, SetMeet

    t = n + 1 if positions == "onehot" else 2
    size, values, dims = {}, {}, set()
    for i in graph.nodes:
        basis = graph.nodes[i].get(nodes.OUTPUT_BASIS)
        if basis is not None:
            size[i] = len(basis)
            dims |= {(d.name, d.value) for d in basis}
        vs = graph.nodes[i].get(nodes.VALUE_SET)
        values[i] = len(vs) if vs is not None else 0
    def label(e):
        return e.label

    score = mlp = evals = heads = largest = 0
    attn_depth: Dict[Any, int] = {}
    for i in nx.topological_sort(graph):
        expr = graph.nodes[i][nodes.EXPR]
        preds = list(graph.predecessors(i))
        depth = max([attn_depth.get(p, 0) for p in preds] + [0])
        out = size.get(i, 1)
        cells = 0
        if isinstance(expr, rasp.Aggregate) or isinstance(expr, rasp.SelectorWidth):
            sel = expr.selector
            q, k = size.get(label(sel.queries), 1) + 2, size.get(label(sel.keys), 1) + 1
            cells = q * k
            if isinstance(expr, rasp.SelectorWidth):
                mlp += (n + 1) * (out + 2)
            heads += 1
            depth += 1
        elif isinstance(expr, HeadSpec):
            reads = sum(size.get(p, 1) for p in preds)
            q = k = reads + t + 2
            cells = q * k
            heads += 1
            depth += 1
        elif isinstance(expr, rasp.SequenceMap):
            a, b = size.get(label(expr.fst), 1), size.get(label(expr.snd), 1)
            hidden = a * b if rasp.is_categorical(expr.fst) or rasp.is_categorical(expr.snd) else 2
            mlp += (a + b) * hidden + hidden * out
            evals += values.get(label(expr.fst), 1) * values.get(label(expr.snd), 1)
        elif isinstance(expr, rasp.Map):
            a = size.get(label(expr.inner), 1)
            hidden = a if rasp.is_categorical(expr.inner) else 2 * values.get(label(expr.inner), 1) + 2
            mlp += a * hidden + hidden * out
            evals += values.get(label(expr.inner), 1)
        elif isinstance(expr, SetMeet):  # a threshold MLP over its inputs' directions (a HeadRead costs nothing)
            mlp += sum(size.get(p, 1) for p in preds) * out
        score += cells
        largest = max(largest, cells)
        attn_depth[i] = depth
    if positions == "angle":  # the one-hot indices give way to the angle block (constructions.angles): 3 rows
        dims = {d for d in dims if d[0] != rasp.indices.label} | {("position", i) for i in range(3)}
    elif rasp.indices.label not in graph.nodes:  # the position embedding is always there
        dims |= {(rasp.indices.label, i) for i in range(n)}
    return {"d_model": len(dims) + 3, "attn_layers": max(attn_depth.values(), default=0), "heads": heads,
            "score_cells": score, "largest_score_table": largest, "mlp_cells": mlp, "evaluations": evals}


def estimate(name: str, params: Mapping[str, Any], *, samples: int = 1000, hypothesis_examples: int = 100,
             certify: bool = False, exhaustive_inputs: int = 0, resolved=None) -> Estimate:
    """The cost of ``depthcraft verify name`` at ``params`` (or of ``run`` / ``save``: ``samples=0``,
    ``hypothesis_examples=0``), from the value sets only.

    Args:
        name: a construction name.
        params: its parameters (resolved by :func:`verify.lookup.resolve` unless ``resolved`` is given).
        samples, hypothesis_examples: the checks' random inputs and hypothesis examples.
        certify: add the certifier's score-table work.
        exhaustive_inputs: inputs of ``--exhaustive`` (0: not run).
        resolved: an already resolved construction (skips resolving again).
    Returns:
        An :class:`Estimate`.
    Raises:
        ParameterError: bad name or parameters (from resolving).
    """
    from depthcraft.verify import lookup

    r = resolved if resolved is not None else lookup.resolve(name, params, sampling=False)
    c, p, task = r.construction, r.params, r.task
    return estimate_program(c.program(p), task.vocab(p), task.max_seq_len(p), name=c.name, params=p,
                            positions=c.positions, family=family_of(c.task), samples=samples, hypothesis_examples=hypothesis_examples, certify=certify,
                            exhaustive_inputs=exhaustive_inputs)


def estimate_program(program, vocab, max_seq_len: int, *, name: str = "program",
                     params: Optional[Mapping[str, Any]] = None, positions: str = "onehot",
                     family: Optional[str] = None, samples: int = 1000,
                     hypothesis_examples: int = 100, certify: bool = False, exhaustive_inputs: int = 0) -> Estimate:
    """:func:`estimate` for a RASP program (``verify.api.check_program``), from its value sets only.

    Args:
        program: the output ``rasp.SOp``.
        vocab: input token values; max_seq_len: N.
        name, params: what the estimate names (its message).
        positions: the position encoding (``onehot`` or ``angle``).
        family: one of :data:`FAMILIES` (None: the one with the most bytes per table cell, the safe side).
        samples, hypothesis_examples, certify, exhaustive_inputs: the checks, as in :func:`estimate`.
    Raises:
        CompileError: an unsupported SOp, bad vocab or length (from the compiler's first steps).
    """
    from depthcraft.constructions.compiler import plan_graph

    n = int(max_seq_len)
    g = graph_counts(plan_graph(program, vocab, n, positions), n, positions)
    vocab = list(vocab)
    if family not in FAMILIES:
        family = max(FAMILIES, key=lambda fam: MEM[f"cells_{fam}"])
    f = features(g, n, samples=samples, hypothesis_examples=hypothesis_examples, certify=certify,
                 exhaustive_inputs=exhaustive_inputs, vocab=len(vocab), family=family)
    build = sum(MEM[f"cells_{fam}"] * f[f"cells_{fam}"] for fam in FAMILIES)
    check = 0.0
    # the fitted certifier terms hold where they were measured (small n); at large n the certifier's buffers
    # are bounded by its row chunks and its work follows the score tables, not cells x key positions
    cert = min(MEM["cert_cells"] * f["cert_cells"], CERT_WORKING_SET_BYTES) if certify else 0.0
    secs = sum(TIME[k] * f[k] for k in TIME if k != "cert_cells")
    if certify:
        secs += min(TIME["cert_cells"] * f["cert_cells"], CERT_SECONDS_PER_SCORE_CELL * g["score_cells"])
    return Estimate(construction=name, params=dict(params or {}), seq_len=n + 1, d_model=g["d_model"],
                    attn_layers=g["attn_layers"], heads=g["heads"], score_cells=g["score_cells"],
                    largest_score_table=g["largest_score_table"], mlp_cells=g["mlp_cells"],
                    evaluations=g["evaluations"], forward_flops=f["flops"], inputs=int(f["rows"]), build_bytes=build,
                    check_bytes=check, certify_bytes=cert, peak_bytes=MEM["one"] + build + check + cert, seconds=secs)


#: Families of constructions whose memory per table cell is fitted separately (their task; ``other``: the
#: Chen & Zou tasks). A user's program (``check_program``) takes the family with the most bytes per cell.
FAMILIES = ("khop", "retrieval", "connectivity", "other")


def family_of(task: str) -> str:
    """The :data:`FAMILIES` entry of a task name (``retrieval_slots`` -> ``retrieval``, ``sc`` -> ``other``)."""
    return next((f for f in FAMILIES[:-1] if task.startswith(f)), "other")


def features(g: Mapping[str, int], n: int, *, samples: int, hypothesis_examples: int, certify: bool,
             exhaustive_inputs: int = 0, vocab: int = 1, family: str = "other") -> Dict[str, float]:
    """The quantities the estimate is linear in, from :func:`graph_counts` ``g`` and the checks asked for.

    Returns:
        ``{"one": 1, "layers", "cells" (score + MLP table cells), "evals", "rows" (inputs the
        checks run), "calls" (forward calls: rows in batches of :func:`verify.checks.batch_rows`'s
        size), "flops" (the forwards' multiply-adds), "width" (d_model x T x layers: one row's
        residual streams), "square" (d_model^2 x layers: dense per-layer maps), "vocab_width"
        (vocab x d_model x layers: per-token-value rows; ``vocab`` is the input vocabulary's size),
        "cells_<family>" for each of :data:`FAMILIES` (the table cells under ``family``, 0 under the
        others), "cert_cells" (score-table cells x key positions when certifying, else 0)}``, floats.
    """
    t = n + 1
    d = g["d_model"]
    layers = max(g["attn_layers"], 1)
    checking = samples > 0 or hypothesis_examples > 0
    # random + hypothesis + ~64 edge cases; the ablation reruns up to 500 + edges, about half a forward per layer
    ablation = (min(samples, 500) + 64) * layers // 2 if samples and n > 1 else 0
    rows = samples + hypothesis_examples + 64 + exhaustive_inputs + ablation if checking else 1
    fit_rows = min(CACHE_BUDGET_BYTES // (t * d * 4), MAX_ATTENTION_ELEMENTS // t ** 2)
    batch = BATCH if fit_rows >= BATCH else 1 << max(0, int(fit_rows).bit_length() - 1)
    # per forward call: one per batch, and hypothesis / shrinking run one input per call
    calls = math.ceil((rows - hypothesis_examples) / batch) + hypothesis_examples if checking else 1
    cells = g["score_cells"] + g["mlp_cells"]
    d_head = math.sqrt(max(g["largest_score_table"], 1))
    flops = rows * t * (cells + g["heads"] * t * d_head)  # projections on live rows + score rows
    return {"one": 1.0, "layers": float(layers), "cells": float(cells), "evals": float(g["evaluations"]),
            "rows": float(rows), "calls": float(calls), "flops": float(flops), "width": float(d * t * layers),
            "square": float(d * d * layers), "vocab_width": float(vocab * d * layers),
            **{f"cells_{f}": float(cells if f == family else 0) for f in FAMILIES},
            "cert_cells": float(g["score_cells"] * t if certify else 0)}


#: The certifier's working set above the build: it scores a head's table in row chunks of
#: ``verify.certify.heads.ROW_CHUNK_ENTRIES`` (4M) float64 entries and keeps about a dozen arrays of that
#: size (scores, their order, differences, level ids, masks), so 12 x 4M x 8 bytes, plus the sides' tables.
#: Measured (results/certify/certify.json, one process, peak so far): khop_doubling k=64 n=1024 at 1.05 GB
#: in all, retrieval_doubling d=64 at 2.4 GB; the estimates are 3.1 GB and 3.7 GB.
CERT_WORKING_SET_BYTES = 12 * 4_000_000 * 8 + 100e6
#: Certifier seconds per score-table cell at the scale targets (results/certify/certify.json: 27.7 s over
#: 65.6M cells, 4.2e-7, for khop_doubling k=64 n=1024; 54.4 s over 13.5M, 4.0e-6, for retrieval_doubling
#: d=64): the larger, so an upper bound there, not a 2x estimate.
CERT_SECONDS_PER_SCORE_CELL = 4.0e-6

#: checks.CACHE_BUDGET, checks.MAX_ATTENTION_ELEMENTS and model.BATCH (repeated: estimating imports no JAX).
CACHE_BUDGET_BYTES = 16 << 20
MAX_ATTENTION_ELEMENTS = 1 << 20
BATCH = 1024


def admit(est: Estimate, budget: Optional[int]) -> None:
    """Refuse an estimate above the memory budget.

    Args:
        est: the estimate.
        budget: bytes allowed (None: no limit).
    Raises:
        ParameterError: one line naming the construction, the estimate and ``--max-memory``.
    """
    if budget is None or est.peak_bytes <= budget:
        return
    shown = " ".join([est.construction] + [f"{k}={v}" for k, v in est.params.items()])
    raise ParameterError(f"{shown} is estimated at {size(est.peak_bytes)} "
                         f"({est.text().split(', ~')[0]}), above the memory budget of {size(budget)}; "
                         f"--max-memory raises the budget (0: no limit)")


def budget(option: Any) -> Optional[int]:
    """The memory budget in bytes for a ``--max-memory`` value: None given: :func:`default_budget`; an int:
    bytes (0: no limit); a str: :func:`parse_memory`.

    Raises:
        ParameterError: a value that is not a size (:func:`parse_memory`).
    """
    if option is None:
        return default_budget()
    if isinstance(option, int) and not isinstance(option, bool):
        if option < 0:
            raise ParameterError(f"max_memory must be >= 0 bytes (0: no limit), got {option}")
        return option or None
    return parse_memory(option)


def gate(resolved, max_memory: Optional[str], **kw: Any) -> Estimate:
    """Estimate a resolved construction (:func:`estimate` keywords ``kw``) and :func:`admit` it.

    Returns:
        The estimate, when it is within the budget.
    Raises:
        ParameterError: above the budget, or a bad ``--max-memory``.
    """
    limit = budget(max_memory)
    est = estimate(resolved.name, resolved.params, resolved=resolved, **kw)
    admit(est, limit)
    return est


__all__ = ["FAMILIES", "budget", "estimate_program", "family_of", "features", "gate", "Estimate", "admit", "available_memory", "default_budget", "estimate", "graph_counts", "parse_memory"]
