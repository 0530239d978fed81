"""Precision study: how many bits a construction needs as the input length grows.

``depthcraft precision NAME -p ... --over n=16,32,...`` (:mod:`depthcraft.verify.cli.precision`)
builds the construction at each value of one parameter (default ``n``), runs the same inputs (random from
the task's distribution plus the task's edge cases) through the one runtime
(:func:`constructions.runtime.forward`) in float64, float32, bfloat16 and
float16, and reports per dtype whether the outputs stay exact and the minimum
margins (SPEC §3: attention weight on the top key, read-out gap).

With ``--bits`` (default on) it also finds, per value, the fewest mantissa bits
that keep the model exact in an emulated float format with float32's exponent
range (8 bits, so only precision is varied): every operation's result is rounded
to that many mantissa bits (see ``forward(..., mantissa_bits=...)``). The search
assumes exactness is monotone in the mantissa width (binary search).

Weights are stored in float32 (tracr's float64 values rounded once), so the
float64 rows measure float64 *compute* with float32-rounded weights.

For ``khop_constant_width`` the angle look-ups separate positions by
1 - cos(2π/(n+1)) ≈ 2π²/n², so the bits needed should grow like 2 log2 n
(the theorem assumes Θ(log N) bits of precision); for the one-hot
constructions the recency table spans ~2n hardness units, about log2 n bits.
"""

from __future__ import annotations

import math
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from depthcraft.constructions.errors import ParameterError

#: dtype name -> (jax dtype, mantissa bits).
DTYPES: Dict[str, Tuple[Any, int]] = {
    "float64": (jnp.float64, 52),
    "float32": (jnp.float32, 23),
    "bfloat16": (jnp.bfloat16, 7),
    "float16": (jnp.float16, 10),
}
#: Exponent bits of the emulated formats in the bits-needed search (float32's, as bfloat16's).
EXPONENT_BITS = 8
#: Mantissa widths the bits-needed search covers.
MANTISSA_RANGE = (1, 23)
DEFAULT_OVER = "n=16,32,64,128,256,512,1024"


def run_inputs(model, task, p, inputs: Sequence[np.ndarray], dtype: str = "float32",
               mantissa_bits: Optional[int] = None) -> Dict[str, Any]:
    """Exactness and minimum margins of ``model`` on ``inputs`` in one numeric format.

    Args:
        model, task, p: compiled model, its task, resolved parameters.
        inputs: arrays [b_i, n_i] of token values (or :func:`verify.checks.label` batches).
        dtype: a key of :data:`DTYPES` (compute dtype).
        mantissa_bits: optional emulated mantissa width, on top of ``dtype``.
    Returns:
        {"exact", "inputs", "failed", "min_attention", "min_output_gap"}.
    Raises:
        ParameterError: unknown dtype.
    """
    from depthcraft.verify.checks import check_batches
    from depthcraft.verify.verifier import margins

    if dtype not in DTYPES:
        raise ParameterError(f"unknown dtype {dtype!r}; expected one of {list(DTYPES)}")
    jdtype = DTYPES[dtype][0]
    if dtype == "float64":
        with jax.enable_x64(True):
            res = check_batches(model, task, p, inputs, dtype, dtype=jdtype, mantissa_bits=mantissa_bits)
    else:
        res = check_batches(model, task, p, inputs, dtype, dtype=jdtype, mantissa_bits=mantissa_bits)
    margin, _ = margins({"run": res}, model.meta.get("soft_attention_layers", ()))  # soft-by-design layers excluded
    return {"exact": res.exact, "inputs": res.inputs, "failed": res.failed,
            "min_attention": margin["attention"], "min_output_gap": res.output_gap}


def bits_needed(model, task, p, inputs, lo: int = MANTISSA_RANGE[0], hi: int = MANTISSA_RANGE[1]) -> Optional[int]:
    """Fewest mantissa bits (float32's exponent range) that keep ``model`` exact on ``inputs``.

    Returns:
        The width in [lo, hi], or None if even ``hi`` bits are not exact.
    """
    def ok(m):
        return run_inputs(model, task, p, inputs, "float32", mantissa_bits=m)["exact"]

    if not ok(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid + 1
    return hi


def parse_over(text: str) -> Tuple[str, List[str]]:
    """``"n=16,32"`` -> ("n", ["16", "32"]) (ranges allowed, see :func:`constructions.params.parse_values`)."""
    from depthcraft.constructions.params import parse_values

    key, sep, values = text.partition("=")
    if not sep or not key.strip():
        raise ParameterError(f"--over {text!r} is not of the form KEY=VALUES (e.g. n=16,32,64)")
    return key.strip(), parse_values(key.strip(), values)


def study(name: str, given: Dict[str, Any], over: str = DEFAULT_OVER, dtypes: Sequence[str] = tuple(DTYPES),
          samples: int = 200, seed: int = 0, bits: bool = True, progress=None) -> Dict[str, Any]:
    """Run the precision study (see the module docstring).

    Args:
        name: registered construction.
        given: fixed parameters (strings or values).
        over: ``KEY=VALUES`` the parameter to vary and its values.
        dtypes: keys of :data:`DTYPES`.
        samples: random inputs per value (plus the task's edge cases).
        seed: seeds the random inputs.
        bits: also search the fewest mantissa bits per value.
        progress: optional callback(str) for status messages.
    Returns:
        {"construction", "params", "over", "values", "dtypes", "points", "bits_needed",
         "bits_fit", "summary"}: ``points`` has one entry per (value, dtype); ``summary[dtype]``
        gives ``largest_exact`` (the largest value such that it and every smaller tested value
        are exact; None if the first fails), ``first_failure``, and the minimum margins over all values.
    Raises:
        ParameterError: unknown construction, dtype or parameter, bad values.
    """
    from depthcraft.verify.checks import label
    from depthcraft.verify import lookup

    c = lookup.get(name)
    key, raw_values = parse_over(over)
    if key in given:
        raise ParameterError(f"parameter {key!r} is both fixed (-p) and varied (--over)")
    bad = [d for d in dtypes if d not in DTYPES]
    if bad or not dtypes:
        raise ParameterError(f"unknown dtype {bad[0] if bad else '(none)'}; expected some of {list(DTYPES)}")
    resolved = [lookup.resolve(c, {**given, key: v}) for v in raw_values]  # all errors before any work
    task = resolved[0].task  # parse_over gives at least one value
    points, bits_rows = [], []
    for r in resolved:
        p = r.params
        value = p[key]
        rng = np.random.default_rng(seed)
        raw = [task.sample(p, rng, samples)] + list(task.edge_cases(p)) if samples else list(task.edge_cases(p))
        inputs = label(task, p, raw)  # one reference for every dtype and bit width
        if progress:
            progress(f"{name}: compiling at {key}={value}")
        model = r.build()
        for d in dtypes:
            if progress:
                progress(f"{name}: {key}={value} in {d}")
            t0 = time.perf_counter()
            r = run_inputs(model, task, p, inputs, d)
            points.append({"value": value, "dtype": d, **r, "seconds": round(time.perf_counter() - t0, 3)})
        if bits:
            if progress:
                progress(f"{name}: {key}={value}: searching the mantissa bits needed")
            bits_rows.append({"value": value, "exponent_bits": EXPONENT_BITS,
                              "mantissa_bits": bits_needed(model, task, p, inputs)})
    values = [r.params[key] for r in resolved]
    return {"construction": name, "params": {k: v for k, v in resolved[0].params.items() if k != key}, "over": key,
            "values": values, "dtypes": list(dtypes), "samples": samples, "seed": seed, "points": points,
            "bits_needed": bits_rows, "bits_fit": _fit(bits_rows), "summary": _summary(points, values, dtypes)}


def _summary(points, values, dtypes) -> Dict[str, Any]:
    out = {}
    for d in dtypes:
        rows = sorted((pt for pt in points if pt["dtype"] == d), key=lambda pt: values.index(pt["value"]))
        largest, first_fail = None, None
        for pt in rows:
            if not pt["exact"]:
                first_fail = pt["value"]
                break
            largest = pt["value"]
        att = [pt["min_attention"] for pt in rows if pt["min_attention"] is not None]
        gap = [pt["min_output_gap"] for pt in rows if pt["min_output_gap"] is not None]
        out[d] = {"mantissa_bits": DTYPES[d][1], "largest_exact": largest, "first_failure": first_fail,
                  "all_exact": all(pt["exact"] for pt in rows),
                  "min_attention": min(att) if att else None, "min_output_gap": min(gap) if gap else None}
    return out


def _fit(bits_rows) -> Optional[Dict[str, float]]:
    """Least-squares line bits = slope * log2(value) + intercept over the values that have a width."""
    pts = [(math.log2(r["value"]), r["mantissa_bits"]) for r in bits_rows
           if r["mantissa_bits"] is not None and isinstance(r["value"], (int, float)) and r["value"] > 0]
    if len(pts) < 2 or len({x for x, _ in pts}) < 2:
        return None
    x, y = np.asarray(pts).T
    slope, intercept = np.polyfit(x, y, 1)
    return {"slope_per_doubling": round(float(slope), 3), "intercept": round(float(intercept), 3)}


def plot(result: Dict[str, Any], path: str) -> None:
    """Two panels: minimum attention margin per dtype against the varied parameter (failures marked),
    and the mantissa bits needed with the dtypes' widths; saved atomically as PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from depthcraft.constructions.files import save_figure_atomic

    key, values = result["over"], result["values"]
    fig, axes = plt.subplots(1, 2 if result["bits_needed"] else 1, figsize=(11 if result["bits_needed"] else 6, 4),
                             squeeze=False)
    ax = axes[0][0]
    for d in result["dtypes"]:
        rows = [pt for pt in result["points"] if pt["dtype"] == d]
        xs = [pt["value"] for pt in rows]
        ys = [pt["min_attention"] if pt["min_attention"] is not None else np.nan for pt in rows]
        line, = ax.plot(xs, ys, marker="o", label=d)
        bad = [(x, y) for x, y, pt in zip(xs, ys, rows) if not pt["exact"]]
        if bad:
            ax.scatter(*zip(*[(x, 0 if np.isnan(y) else y) for x, y in bad]), marker="x", s=80,
                       color=line.get_color(), zorder=3)
    ax.set_xscale("log", base=2)
    ax.set_xlabel(key)
    ax.set_ylabel("min attention weight on the intended key")
    ax.set_ylim(-0.05, 1.05)
    ax.set_title(f"{result['construction']}: margins (x = not exact)")
    ax.legend(fontsize=8)
    if result["bits_needed"]:
        ax = axes[0][1]
        rows = [r for r in result["bits_needed"] if r["mantissa_bits"] is not None]
        ax.plot([r["value"] for r in rows], [r["mantissa_bits"] for r in rows], marker="o", color="k",
                label="measured (8 exponent bits)")
        fit = result.get("bits_fit")
        if fit:
            xs = np.asarray(values, float)
            ax.plot(xs, fit["slope_per_doubling"] * np.log2(xs) + fit["intercept"], ls="--", color="gray",
                    label=f"fit: {fit['slope_per_doubling']:.2f} log2 {key} {fit['intercept']:+.1f}")
        for d in result["dtypes"]:
            if DTYPES[d][1] <= MANTISSA_RANGE[1]:
                ax.axhline(DTYPES[d][1], ls=":", lw=1)
                ax.text(values[0], DTYPES[d][1] + 0.3, d, fontsize=8)
        ax.set_xscale("log", base=2)
        ax.set_xlabel(key)
        ax.set_ylabel("mantissa bits needed for exactness")
        ax.set_title("bits needed")
        ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure_atomic(fig, path)
    plt.close(fig)
