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
from typing import Any, Dict, Iterable, List, NamedTuple, Optional

import numpy as np

from depthcraft.constructions.files import to_json
from depthcraft.constructions.model import BATCH, CompiledModel
from depthcraft.verify.tasks.base import Task

#: Smallest padded batch: single inputs (hypothesis) and small edge-case groups share one compiled shape.
MIN_BUCKET = 64
#: Margins below these are reported as warnings (exact, but fragile).
MIN_ATTENTION = 0.99
MIN_OUTPUT_GAP = 0.1
#: Upper limit on batch * seq^2 per forward call (one float32 attention map: 256 MiB).
MAX_ATTENTION_ELEMENTS = 1 << 26


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


def predict(model: CompiledModel, tokens: np.ndarray, none_value: Any = None, batch: int = BATCH,
            dtype: Any = None, mantissa_bits: Optional[int] = None):
    """Run same-length inputs through the model.

    Args:
        model: the compiled model.
        tokens: [B, n] token values, n <= max_seq_len.
        none_value: decoded value of a "no value" output.
        batch: rows per forward call (the last call is padded to this size); lowered for
            long inputs so that batch * seq^2 <= MAX_ATTENTION_ELEMENTS.
        dtype, mantissa_bits: compute dtype (None = float32) and emulated mantissa width, see
            :func:`constructions.runtime.forward`.
    Returns:
        (outputs [B, n], gap [B, n] float or None, attention mass [B, L_attn] float)
    Raises:
        InputError: bad tokens or length (see CompiledModel.encode).
    """
    tokens = np.asarray(tokens)
    b, n = tokens.shape
    length = model.max_seq_len + 1
    # Keep one attention map per layer within MAX_ATTENTION_ELEMENTS (long inputs: fewer rows per call).
    batch = max(1, min(batch, 1 << max(0, (MAX_ATTENTION_ELEMENTS // length ** 2).bit_length() - 1)))
    outs, gaps, masses = [], [], []
    for start in range(0, b, batch):
        chunk = tokens[start:start + batch]
        rows = len(chunk)
        ids = model.encode(chunk, length=length)
        # Few distinct shapes, few XLA compiles: batches are padded to a power of two >= MIN_BUCKET.
        bucket = batch if b > batch else min(batch, max(MIN_BUCKET, 1 << (rows - 1).bit_length()))
        if rows < bucket:
            ids = np.concatenate([ids, np.repeat(ids[:1], bucket - rows, axis=0)])
        res = model.forward_ids(ids, mantissa_bits=mantissa_bits) if dtype is None else \
            model.forward_ids(ids, dtype=dtype, mantissa_bits=mantissa_bits)
        logits = np.asarray(res.logits, dtype=np.float64)[:rows, 1:n + 1]
        outs.append(model.decode(logits, none_value))
        if model.categorical_output:
            aug = np.concatenate([logits, np.full(logits.shape[:-1] + (1,), 0.5, logits.dtype)], -1)
            top2 = -np.partition(-aug, 1, axis=-1)[..., :2] if aug.shape[-1] > 1 else aug
            gaps.append(np.nan_to_num(top2[..., 0] - top2[..., 1], nan=0.0))  # NaN (overflow): no margin
        mass = [np.asarray(m, dtype=np.float64)[:rows].min(-1) for m in res.attn_mass]
        masses.append(np.nan_to_num(np.stack(mass, -1), nan=0.0) if mass else np.ones((rows, 0)))
    gap = np.concatenate(gaps) if gaps else None
    return np.concatenate(outs), gap, np.concatenate(masses)


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


def check_batches(model: CompiledModel, task: Task, p: Dict[str, Any], batches: Iterable[np.ndarray],
                  name: str, result: Optional[CheckResult] = None, dtype: Any = None,
                  mantissa_bits: Optional[int] = None) -> CheckResult:
    """Compare the model with the reference on every input of ``batches``.

    Args:
        model, task, p: the model, its task and the resolved parameters.
        batches: arrays [b_i, n_i] (one length per array), or :class:`Labelled` batches
            from :func:`label` when the same inputs are checked several times.
        name: check name recorded in the counterexample.
        result: accumulate into this result (default: a new one).
        dtype, mantissa_bits: passed to :func:`predict`.
    Returns:
        The CheckResult (inputs, failures, the shortest failing input, margins).
    """
    res = result or CheckResult()
    for item in batches:
        if isinstance(item, Labelled):  # reference already computed (the same inputs checked many times)
            x, expected, scored = item
        else:
            x = np.asarray(item)
            if x.size == 0:
                continue
            expected, scored = task.reference(p, x)
        got, gap, mass = predict(model, x, task.none_value, dtype=dtype, mantissa_bits=mantissa_bits)
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
    return res


def hypothesis_check(model: CompiledModel, task: Task, p: Dict[str, Any], max_examples: int,
                     seed: int = 0) -> CheckResult:
    """Property test with hypothesis over the task's strategy; a failure is shrunk by hypothesis.

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
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hyp_seed

    res = CheckResult()
    last_fail: Dict[str, Any] = {}

    @hyp_seed(seed)
    @settings(max_examples=max_examples, deadline=None, database=None, derandomize=False,
              phases=(Phase.generate, Phase.shrink), print_blob=False,
              suppress_health_check=list(HealthCheck))
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
