"""Exactness and margin checks of a compiled model against a task's reference.

A check runs batches of inputs through the batched runtime and compares the
decoded outputs with the reference at every scored position. Alongside, it
records the numeric margins of SPEC §3:

* ``attention``: for every attention head, the weight it puts on its
  top-scoring key(s) (1.0 = hardmax), minimised over query positions and inputs;
* ``output_gap``: at every scored position, the winning read-out score minus the
  runner-up, where the "no value" threshold 0.5 also competes (so a clean one-hot
  or a clean zero vector both give 0.5); minimised over inputs.

Inputs are padded with PAD to max_seq_len + 1 and run in fixed-size batches, so
each model compiles once; PAD keys are masked, so padding never changes outputs.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, Iterable, List, NamedTuple, Optional, Sequence

import numpy as np

from depthcraft.constructions.cache import hypothesis_dir
from depthcraft.constructions.devices import rows_multiple
from depthcraft.constructions.files import to_json
from depthcraft.constructions.model import BATCH, CompiledModel
from depthcraft.verify.tasks.base import Task

#: Bytes of residual stream (rows * (max_seq_len + 1) * d_model * 4) one forward call may hold: past the
#: CPU's cache, bigger batches run slower per row (:func:`batch_rows`; docs/performance.md, "Checks").
CACHE_BUDGET = 16 << 20
#: Margins below these are reported as warnings (exact, but fragile).
MIN_ATTENTION = 0.99
MIN_OUTPUT_GAP = 0.1
#: Upper limit on batch * seq^2 per forward call (a float32 attention map of one head over the batch:
#: 4 MiB). Past it the attention core leaves the cache: at khop_constant_width n=1024 (d_model 47) one row
#: per call ran 115 sequences/s and 4 rows 64/s, where 32 rows (the limit of 2^26 before) ran 34/s
#: (results/performance/benchmark.json, sparse_scores.json; docs/performance.md, "Checks").
MAX_ATTENTION_ELEMENTS = 1 << 20


@dataclasses.dataclass
class Counterexample:
    """One failing input: tokens, expected and decoded outputs, the wrong positions (1-based)."""

    check: str
    tokens: List[Any]
    expected: List[Any]
    got: List[Any]
    positions: List[int]
    shrunk: bool = False

    def to_json(self) -> Dict[str, Any]:
        return to_json(dataclasses.asdict(self))


@dataclasses.dataclass
class CheckResult:
    """Outcome of one check kind (random, edge, exhaustive, hypothesis)."""

    inputs: int = 0
    failed: int = 0
    counterexample: Optional[Counterexample] = None
    attention: Optional[List[float]] = None  # min weight on top keys, per attention sublayer
    output_gap: Optional[float] = None

    @property
    def exact(self) -> bool:
        return self.inputs > 0 and self.failed == 0

    def to_json(self) -> Dict[str, Any]:
        return {"inputs": self.inputs, "exact": self.exact, "failed": self.failed,
                "counterexample": self.counterexample.to_json() if self.counterexample else None}

    def merge_margins(self, attention, gap) -> None:
        if attention is not None:
            self.attention = attention if self.attention is None else \
                [min(a, b) for a, b in zip(self.attention, attention)]
        if gap is not None:
            self.output_gap = gap if self.output_gap is None else min(self.output_gap, gap)


def batch_rows(model: CompiledModel, budget: int = CACHE_BUDGET, cap: int = BATCH) -> int:
    """Rows per forward call for ``model``, chosen from the working set.

    The largest power of two ``b <= cap`` whose residual stream, ``b * T * D * 4`` bytes
    (T = max_seq_len + 1 positions, D = d_model, float32), fits in ``budget`` bytes, and
    whose attention map ``b * T^2`` stays within :data:`MAX_ATTENTION_ELEMENTS`; at least 1.
    Past the cache, bigger batches run slower per row (docs/performance.md, "Checks").

    Args:
        model: the compiled model (its ``max_seq_len`` and ``residual_labels`` give T and D).
        budget: bytes of the residual stream of one call.
        cap: most rows per call.
    Returns:
        A power of two in 1..cap (cap itself when cap is not a power of two and everything fits).
    """
    length = model.max_seq_len + 1
    width = max(1, len(model.residual_labels))
    rows = min(budget // (length * width * 4), MAX_ATTENTION_ELEMENTS // length ** 2)
    if rows >= cap:
        return cap
    return 1 << max(0, int(rows).bit_length() - 1)


def bucket(rows: int, batch: int) -> int:
    """Padded row count of a call with ``rows`` real rows: the next power of two, at most ``batch``.

    Powers of two keep the number of distinct shapes (XLA compilations) per model at
    about log2(batch) + 1; a single input runs as one row, not a padded batch.
    """
    return min(batch, 1 << max(0, rows - 1).bit_length())


def _forward_rows(model: CompiledModel, ids: np.ndarray, batch: int, dtype: Any, mantissa_bits: Optional[int]):
    """Yield (start, logits [rows, T, O], attention mass [rows, L_attn] float64) per call of ``batch`` rows.

    Each call's rows are split over every local JAX device (:mod:`constructions.devices`; a call
    is padded to a multiple of the device count). The next call is dispatched before the
    previous one's outputs are read, so the host's work on them overlaps the forward.
    """
    r = len(ids)
    pending = None
    for start in range(0, r, batch):
        chunk = ids[start:start + batch]
        rows = len(chunk)
        size = rows_multiple(batch if r > batch else bucket(rows, batch))
        if rows < size:  # pad with copies of the first row (outputs of padding rows are dropped)
            chunk = np.concatenate([chunk, np.repeat(chunk[:1], size - rows, axis=0)])
        res = model.forward_ids(chunk, mantissa_bits=mantissa_bits, split=True) if dtype is None else \
            model.forward_ids(chunk, dtype=dtype, mantissa_bits=mantissa_bits, split=True)
        if pending is not None:
            yield _fetch(*pending)
        pending = (start, rows, res)
    if pending is not None:
        yield _fetch(*pending)


def _fetch(start: int, rows: int, res):
    """One call's (start, logits [rows, T, O], attention mass [rows, L_attn]) as numpy, padding rows dropped."""
    mass = [np.asarray(m, dtype=np.float64)[:rows].min(-1) for m in res.attn_mass]
    return start, np.asarray(res.logits)[:rows], \
        np.nan_to_num(np.stack(mass, -1), nan=0.0) if mass else np.ones((rows, 0))


def _read(model: CompiledModel, logits: np.ndarray, n: int, none_value: Any):
    """Logits [b, T, O] of inputs of length n -> (outputs [b, n], gap [b, n] or None)."""
    logits = logits[:, 1:n + 1]
    outs = model.decode(logits, none_value)
    if not model.categorical_output:
        return outs, None
    aug = np.concatenate([logits, np.full(logits.shape[:-1] + (1,), 0.5, logits.dtype)], -1)
    top2 = -np.partition(-aug, 1, axis=-1)[..., :2] if aug.shape[-1] > 1 else aug
    return outs, np.nan_to_num(top2[..., 0] - top2[..., 1], nan=0.0)  # NaN (overflow): no margin


def predict_many(model: CompiledModel, xs: Sequence[np.ndarray], none_value: Any = None,
                 batch: Optional[int] = None, dtype: Any = None, mantissa_bits: Optional[int] = None,
                 ids: Optional[np.ndarray] = None):
    """Run several groups of inputs (one length per group, lengths may differ) in shared forward calls.

    All groups are padded with PAD to max_seq_len + 1 and stacked, so small groups (edge
    cases, single hypothesis examples) fill one call instead of one padded call each.

    Args:
        model: the compiled model.
        xs: arrays [b_i, n_i] of token values, n_i <= max_seq_len.
        none_value: decoded value of a "no value" output.
        batch: rows per forward call (default :func:`batch_rows`); the last call is padded
            to :func:`bucket` rows.
        dtype, mantissa_bits: see :func:`predict`.
        ids: the stacked encoding of ``xs`` [sum b_i, max_seq_len + 1] when already made
            (:func:`pack`), e.g. to run the same inputs through several models.
    Returns:
        One (outputs [b_i, n_i], gap [b_i, n_i] float or None, attention mass [b_i, L_attn] float)
        per group, in order.
    Raises:
        InputError: bad tokens or length (see CompiledModel.encode).
    """
    xs = [np.asarray(x) for x in xs]
    length = model.max_seq_len + 1
    if not xs:
        return []
    if ids is None:
        ids = np.concatenate([model.encode(x, length=length) for x in xs])
    batch = batch_rows(model) if batch is None else batch
    bounds = np.cumsum([0] + [len(x) for x in xs])
    pieces: List[List[Any]] = [[] for _ in xs]
    for start, logits, mass in _forward_rows(model, ids, batch, dtype, mantissa_bits):
        stop = start + len(logits)
        for g in range(np.searchsorted(bounds, start, "right") - 1, len(xs)):  # groups overlapping the call
            lo, hi = max(start, bounds[g]), min(stop, bounds[g + 1])
            if lo >= stop:
                break
            if lo < hi:
                outs, gap = _read(model, np.asarray(logits[lo - start:hi - start], np.float64),
                                  xs[g].shape[1], none_value)
                pieces[g].append((outs, gap, mass[lo - start:hi - start]))
    out = []
    for g, x in enumerate(xs):
        parts = pieces[g]
        if not parts:  # an empty group
            n_attn = sum(spec.kind == "attn" for spec in model.arch.sublayers)
            out.append((np.zeros(x.shape, object), None, np.ones((0, n_attn))))
            continue
        gap = None if parts[0][1] is None else np.concatenate([q[1] for q in parts])
        out.append((np.concatenate([q[0] for q in parts]), gap, np.concatenate([q[2] for q in parts])))
    return out


def predict(model: CompiledModel, tokens: np.ndarray, none_value: Any = None, batch: Optional[int] = None,
            dtype: Any = None, mantissa_bits: Optional[int] = None):
    """Run same-length inputs through the model.

    Args:
        model: the compiled model.
        tokens: [B, n] token values, n <= max_seq_len.
        none_value: decoded value of a "no value" output.
        batch: rows per forward call (default :func:`batch_rows`, from the working set); a
            call with fewer rows is padded to the next power of two (:func:`bucket`).
        dtype, mantissa_bits: compute dtype (None = float32) and emulated mantissa width, see
            :func:`constructions.runtime.forward`.
    Returns:
        (outputs [B, n], gap [B, n] float or None, attention mass [B, L_attn] float)
    Raises:
        InputError: bad tokens or length (see CompiledModel.encode).
    """
    return predict_many(model, [tokens], none_value, batch, dtype, mantissa_bits)[0]


class Labelled(NamedTuple):
    """Inputs [b, n] with their reference outputs: (x, expected [b, n], scored [b, n] bool)."""

    x: np.ndarray
    expected: np.ndarray
    scored: np.ndarray


def label(task: Task, p: Dict[str, Any], batches: Iterable[np.ndarray]) -> List[Labelled]:
    """Each non-empty batch with ``task.reference`` computed once (for repeated checks: ablation, precision)."""
    out = []
    for x in batches:
        x = np.asarray(x)
        if x.size:
            out.append(Labelled(x, *task.reference(p, x)))
    return out


class Packed(NamedTuple):
    """Labelled batches run in shared forward calls, with their stacked encoding [sum b_i, max_seq_len + 1]."""

    items: List[Labelled]
    ids: Optional[np.ndarray] = None


def _packs(model: CompiledModel, task: Task, p: Dict[str, Any], batches: Iterable[Any], rows: int):
    """Consecutive batches grouped into :class:`Packed` of at most ``rows`` rows (a bigger batch is one pack).

    Lazy: holds at most one pack, so a streamed input (the exhaustive check) stays streamed.
    """
    items: List[Labelled] = []
    size = 0
    for item in batches:
        if isinstance(item, Packed):
            if items:
                yield Packed(items)
                items, size = [], 0
            yield item
            continue
        if not isinstance(item, Labelled):
            x = np.asarray(item)
            if x.size == 0:
                continue
            item = Labelled(x, *task.reference(p, x))
        if items and size + len(item.x) > rows:
            yield Packed(items)
            items, size = [], 0
        items.append(item)
        size += len(item.x)
    if items:
        yield Packed(items)


def pack(model: CompiledModel, task: Task, p: Dict[str, Any], batches: Iterable[Any]) -> List[Packed]:
    """Label and encode batches once, for checking the same inputs many times (ablation: once per layer).

    Args:
        model: a model with the architecture, vocabulary and max_seq_len of the models to be run.
        task, p: the task and resolved parameters (``task.reference`` runs once per batch).
        batches: arrays [b_i, n_i] or :class:`Labelled` batches.
    Returns:
        Packs of at most :func:`batch_rows` rows each (a bigger batch is a pack of its own), for
        :func:`check_batches`.
    Raises:
        InputError: bad tokens or length (see CompiledModel.encode).
    """
    length = model.max_seq_len + 1
    return [Packed(pk.items, np.concatenate([model.encode(it.x, length=length) for it in pk.items]))
            for pk in _packs(model, task, p, batches, batch_rows(model))]


def check_batches(model: CompiledModel, task: Task, p: Dict[str, Any], batches: Iterable[Any],
                  name: str, result: Optional[CheckResult] = None, dtype: Any = None,
                  mantissa_bits: Optional[int] = None,
                  progress: Optional[Callable[[int], None]] = None) -> CheckResult:
    """Compare the model with the reference on every input of ``batches``.

    Consecutive small batches (edge-case groups) share forward calls of up to
    :func:`batch_rows` rows; the result is the same as checking them one by one.

    Args:
        model, task, p: the model, its task and the resolved parameters.
        batches: arrays [b_i, n_i] (one length per array), :class:`Labelled` batches
            from :func:`label`, or :class:`Packed` ones from :func:`pack` when the same inputs
            are checked several times.
        name: check name recorded in the counterexample.
        result: accumulate into this result (default: a new one).
        dtype, mantissa_bits: passed to :func:`predict`.
        progress: called with the number of inputs checked so far after each shared call group.
    Returns:
        The CheckResult (inputs, failures, the shortest failing input, margins).
    """
    res = result or CheckResult()
    for pk in _packs(model, task, p, batches, batch_rows(model)):
        preds = predict_many(model, [it.x for it in pk.items], task.none_value, dtype=dtype,
                             mantissa_bits=mantissa_bits, ids=pk.ids)
        for (x, expected, scored), (got, gap, mass) in zip(pk.items, preds):
            _tally(res, task, p, name, x, expected, scored, got, gap, mass)
        if progress is not None:
            progress(res.inputs)
    return res


def _tally(res: CheckResult, task: Task, p: Dict[str, Any], name: str, x, expected, scored, got, gap, mass) -> None:
    """Add one batch's outcome to ``res``: counts, the shortest counterexample, margins."""
    wrong = task.mismatch(p, got, expected) & scored
    bad_rows = wrong.any(1)
    res.inputs += len(x)
    res.failed += int(bad_rows.sum())
    if bad_rows.any():
        r = int(np.flatnonzero(bad_rows)[0])
        cand = Counterexample(name, x[r].tolist(), expected[r].tolist(), got[r].tolist(),
                              (np.flatnonzero(wrong[r]) + 1).tolist())
        if res.counterexample is None or len(cand.tokens) < len(res.counterexample.tokens):
            res.counterexample = cand
    res.merge_margins(mass.min(0).tolist() if mass.size else [],
                      float(gap[scored].min()) if gap is not None and scored.any() else None)


def _hypothesis_settings(max_examples: int, seed: int):
    from hypothesis import HealthCheck, Phase, settings
    from hypothesis import seed as hyp_seed

    hypothesis_dir()  # hypothesis's files go to the user's cache folder, not ./.hypothesis

    def wrap(fn):
        return hyp_seed(seed)(settings(max_examples=max_examples, deadline=None, database=None, derandomize=False,
                                       phases=(Phase.generate, Phase.shrink), print_blob=False,
                                       suppress_health_check=list(HealthCheck))(fn))
    return wrap


def hypothesis_examples(task: Task, p: Dict[str, Any], max_examples: int, seed: int = 0) -> List[List[Any]]:
    """The inputs hypothesis draws for ``task`` when every one of them passes, in order.

    Hypothesis's generation with a fixed seed depends only on the outcomes of earlier
    examples, so a test that records and passes sees exactly the examples
    :func:`hypothesis_check` would check one at a time while none fails.
    """
    from hypothesis import given

    drawn: List[List[Any]] = []

    @_hypothesis_settings(max_examples, seed)
    @given(task.strategy(p))
    def record(seq):
        drawn.append(list(seq))

    record()
    return drawn


def hypothesis_check(model: CompiledModel, task: Task, p: Dict[str, Any], max_examples: int,
                     seed: int = 0) -> CheckResult:
    """Property test with hypothesis over the task's strategy; a failure is shrunk by hypothesis.

    The drawn examples are first checked together, in shared forward calls (:func:`hypothesis_examples`);
    only if one fails (or the batched check raises) does the property test run example by example,
    so that hypothesis finds and shrinks the failure exactly as it would alone. The result is the
    same either way.

    Args:
        model: the compiled weights.
        task: its ``strategy(p)`` draws one input (a token list) and ``reference`` labels it.
        p: resolved task parameters.
        max_examples: hypothesis examples to draw.
        seed: hypothesis seed (reproducible runs).
    Returns:
        CheckResult; on failure its counterexample is hypothesis's minimal example.
    Raises:
        Exceptions other than a mismatch (e.g. a reference that raises) propagate.
    """
    examples = hypothesis_examples(task, p, max_examples, seed)
    try:
        res = _check_examples(model, task, p, examples)
    except Exception:  # noqa: BLE001 - the example-by-example run below raises it again, shrunk by hypothesis
        res = None
    if res is not None and res.failed == 0:
        return res
    return hypothesis_one_by_one(model, task, p, max_examples, seed)


def _check_examples(model: CompiledModel, task: Task, p: Dict[str, Any],
                    examples: List[List[Any]]) -> Optional[CheckResult]:
    """Check single examples in shared forward calls: grouped by length and dtype as ``np.asarray([seq])`` makes them.

    None when an example is empty (the one-by-one run reports it).
    """
    if any(len(seq) == 0 for seq in examples):
        return None
    groups: Dict[Any, List[np.ndarray]] = {}
    for seq in examples:
        x = np.asarray([seq])
        groups.setdefault((x.shape[1], x.dtype.kind), []).append(x)
    batches = [np.concatenate(g) for g in groups.values()]
    res = check_batches(model, task, p, batches, "hypothesis")
    res.counterexample = None
    return res


def hypothesis_one_by_one(model: CompiledModel, task: Task, p: Dict[str, Any], max_examples: int,
                          seed: int = 0) -> CheckResult:
    """The property test example by example (one forward call each): what :func:`hypothesis_check` runs
    when an example fails, so that hypothesis shrinks it. Arguments and result as :func:`hypothesis_check`."""
    from hypothesis import given

    res = CheckResult()
    last_fail: Dict[str, Any] = {}

    @_hypothesis_settings(max_examples, seed)
    @given(task.strategy(p))
    def prop(seq):
        x = np.asarray([seq])
        expected, scored = task.reference(p, x)
        got, gap, mass = predict(model, x, task.none_value)
        wrong = task.mismatch(p, got, expected) & scored
        res.inputs += 1
        res.merge_margins(mass.min(0).tolist() if mass.size else [],
                          float(gap[scored].min()) if gap is not None and scored.any() else None)
        if wrong.any():
            last_fail["cx"] = Counterexample("hypothesis", list(seq), expected[0].tolist(), got[0].tolist(),
                                             (np.flatnonzero(wrong[0]) + 1).tolist(), shrunk=True)
            raise AssertionError("mismatch")

    try:
        prop()
    except AssertionError:
        res.failed = 1
        res.counterexample = last_fail.get("cx")
    return res


# --------------------------------------------------------------------- causal selectors

#: Most predicate evaluations the concrete search of :func:`causal_selector_failures` spends on one
#: selector over SOps other than ``tokens`` / ``indices`` (each input of length t costs t^2).
CAUSAL_SEARCH_BUDGET = 200_000


def _plain(v: Any) -> Any:
    """A JSON-friendly RASP value (a numpy scalar becomes a Python one)."""
    return v.item() if isinstance(v, np.generic) else v


def _value_set_witness(expr: Any, vocab: List[Any], n: int):
    """(key value, query value, input, query index, key index) for a Select over ``tokens`` / ``indices``
    that selects a later key, decided from the value sets alone (certain); None when it selects none."""
    import itertools

    from tracr.rasp import rasp

    ks, qs = expr.keys, expr.queries
    k_idx, q_idx = isinstance(ks, rasp.IndicesType), isinstance(qs, rasp.IndicesType)
    kvals = list(range(n)) if k_idx else vocab
    qvals = list(range(n)) if q_idx else vocab
    first = vocab[0]
    for k, q in itertools.product(kvals, qvals):
        if k_idx and q_idx:
            later = k > q
        elif k_idx:  # the key sits at index k; a query token at index 0 comes before it when k >= 1
            later = k >= 1
        else:  # a key token can sit right after any query
            later = (q < n - 1) if q_idx else n >= 2
        if not later:
            continue
        try:
            hit = bool(expr.predicate(k, q))
        except Exception:  # noqa: BLE001 - undefined here: no selection to report
            continue
        if not hit:
            continue
        if k_idx and q_idx:
            return k, q, [first] * (k + 1), q, k
        if k_idx:
            return k, q, [q] + [first] * k, 0, k
        if q_idx:
            return k, q, [first] * (q + 1) + [k], q, q + 1
        return k, q, [q, k], 0, 1
    return None


def _searched_witness(expr: Any, inputs: Sequence[List[Any]]):
    """(key value, query value, input, query index, key index): the first of ``inputs`` on which the RASP
    selector ``expr`` (its reference semantics) selects a key after its query; None when none does."""
    from depthcraft.constructions.reference import Evaluator

    for xs in inputs:
        try:
            ev = Evaluator()
            matrix = ev.evaluate(expr, list(xs))
            keys, queries = ev.evaluate(expr.keys, list(xs)), ev.evaluate(expr.queries, list(xs))
        except Exception:  # noqa: BLE001 - the program is undefined on this input: try the next one
            continue
        for q, row in enumerate(matrix):
            for k in range(q + 1, len(row)):
                if row[k]:
                    return keys[k], queries[q], list(xs), q, k
    return None


def causal_selector_failures(model: CompiledModel, seed: int = 0) -> List[Dict[str, Any]]:
    """RASP selectors that select a key after their query in a causally masked model (SPEC §8).

    A RASP ``Select`` is bidirectional; a causal compile masks every key after the query, so a
    selector that can select one computes something else, whatever a reference says. For a
    selector whose keys and queries are ``tokens`` or ``indices`` this is decided from the value
    sets (certain); for a selector over other SOps, the RASP program is evaluated on the edge-case
    inputs and seeded random inputs (:data:`CAUSAL_SEARCH_BUDGET` predicate evaluations at most)
    and the first input where it selects a later key is the witness (a search: it can miss one).
    No certificate is needed.

    Args:
        model: a compiled model; one without a linked program (a loaded file) or a bidirectional
            one has nothing to check.
        seed: seeds the random inputs of the search.
    Returns:
        One dict per such selector: ``selector`` (its label), ``key`` and ``query`` (the RASP values
        of a selecting pair), ``input`` (a concrete input, a list of tokens), ``query_position`` and
        ``key_position`` (1-based input positions: the query attends the key in RASP, the mask
        hides it), ``rasp`` and ``model`` (the program's bidirectional output and the compiled
        model's output on that input), ``differs_at`` (1-based positions where they differ) and
        ``why``. [] when there is none.
    """
    from tracr.rasp import rasp

    from depthcraft.constructions.reference import evaluate
    from depthcraft.verify.strategies import edge_sequences

    link = model.program
    if link is None or not model.arch.causal:
        return []
    n, vocab = int(model.max_seq_len), list(model.vocab)
    searched: Optional[List[List[Any]]] = None
    out = []
    for label, expr in link.nodes.items():
        if not isinstance(expr, rasp.Select):
            continue
        if all(isinstance(x, (rasp.IndicesType, rasp.TokensType)) for x in (expr.keys, expr.queries)):
            found = _value_set_witness(expr, vocab, n)
        else:
            if searched is None:
                rng = np.random.default_rng(seed)
                searched = [s for s in edge_sequences(vocab, n)]
                searched += [[vocab[i] for i in rng.integers(0, len(vocab), size=n)] for _ in range(16)]
                spent, kept = 0, []
                for s in sorted(searched, key=len):
                    spent += len(s) ** 2
                    if spent > CAUSAL_SEARCH_BUDGET:
                        break
                    kept.append(s)
                searched = kept
            found = _searched_witness(expr, searched)
        if found is None:
            continue
        key, query, xs, qi, ki = found
        try:
            want = [_plain(v) for v in evaluate(link.nodes[link.sink], xs)]
        except Exception:  # noqa: BLE001 - the program is undefined there: show the model's output only
            want = None
        got = [_plain(v) for v in model.run(np.asarray([xs], dtype=object))[0].tolist()]
        differs = [] if want is None else [i + 1 for i, (a, b) in enumerate(zip(want, got)) if a != b]
        out.append({"selector": label, "key": _plain(key), "query": _plain(query), "input": [_plain(v) for v in xs],
                    "query_position": qi + 1, "key_position": ki + 1, "rasp": want, "model": got,
                    "differs_at": differs,
                    "why": "causal model: the selector selects a key after the query, which the mask hides"})
    return out
