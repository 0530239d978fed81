"""Looped depth on k-hop: an extra row of claims.json, not a paper claim of the project (issue 41).

Saunshi et al. ("Reasoning with latent thoughts: on the power of looped transformers", ICLR
2025) report that a block of layers looped L times matches an L-layer model on p-hop induction.
Our CPU-sized check: the ``c1_looped`` preset (one block, attention + MLP, shared by all L
applications: :class:`~verify.crosscheck.model.ModelConfig` ``looped``) against the ``c1``
sweep (the same recipe unlooped: N = 32, |Σ| = 4, mixed k in {1, 2, 3, 4, 6, 8}, depths 2-5,
4 heads, width 64, 2500 steps, 3 seeds).

The rule (:func:`judge_looped`), written 2026-12-07 before the looped sweep ran:

* per depth L and model kind (looped, plain), the k* interval of C1's rule
  (:func:`verify.crosscheck.c1.k_star_interval` on the seeds' mean error per k, one-sided 95 %
  Student t bound on the seeds' standard error);
* per depth L, the mean error over the grid's k of each kind (mean over seeds of each seed's
  mean over k) and the difference d(L) = looped - plain, with its noise margin
  2 sqrt(s_l^2 / n_l + s_p^2 / n_p) (s: the seeds' standard deviations, ddof 1);
* the looped model is *worse at L* when its k*_hi(L) < the plain model's k*_lo(L) (it surely
  learns fewer k), or d(L) > max(:data:`~verify.crosscheck.published.MIN_DIFFERENCE` (0.01, the
  smallest difference in mean error that matters), the noise margin);
* **reproduced** ("looped matches"): no depth is worse, every configuration with >= 3 seeds;
  **not reproduced**: some depth is worse; **inconclusive**: a sweep is missing or incomplete,
  or a configuration has fewer than 3 seeds.

C1's rule on the looped sweep's own k* (doubling per loop?) is reported beside it, as
information. The verdict says nothing about the paper's scale (their models and k are larger).
"""

from __future__ import annotations

import json
import math
import pathlib
from typing import Any, Dict, List, Mapping, Optional, Sequence

import numpy as np

from depthcraft.verify.crosscheck import c1 as c1_rule
from depthcraft.verify.crosscheck.claims.stats import (INCONCLUSIVE, MIN_DIFFERENCE, MIN_SEEDS, NOT_REPRODUCED,
    NOT_RUN, REPRODUCED, ROOT, conditions, depths, recipe, rule_text, stat)

#: The id of the claims table's row.
LOOPED_ID = "C1 looped (Saunshi et al., extra row)"
#: The looped sweep and the plain sweep it is compared with (relative to the project root).
LOOPED_RESULTS = f"{ROOT}/looped/khop/results.json"
PLAIN_RESULTS = f"{ROOT}/c1/khop/results.json"
#: The command that produces the looped sweep.
LOOPED_COMMAND = f"depthcraft train khop --preset c1_looped --out {ROOT}/looped/khop"
#: The rule's date (before the looped sweep ran).
WRITTEN = "2026-12-07"


def _by_depth(doc: Mapping[str, Any]) -> Dict[int, Dict[int, List[float]]]:
    """depth -> k -> the seeds' errors (non-control runs)."""
    ks = {c: int(c.split("=")[1]) for c in conditions(doc) if c.startswith("k=")}
    return {d: {k: stat(doc, c, depth=d).errors for c, k in ks.items()} for d in depths(doc)}


def judge_looped(looped: Mapping[str, Any], plain: Mapping[str, Any]) -> Dict[str, Any]:
    """The rule of the module docstring on two sweeps' ``results.json``.

    Args:
        looped, plain: the looped and the plain sweep's results (same task, grid and depths).
    Returns:
        ``{"verdict", "evidence", "measured": {"depths": {L: {"looped_k_star", "plain_k_star",
        "looped_mean", "plain_mean", "difference", "noise", "worse"}}, "c1_on_looped",
        "min_difference"}}``.
    """
    lo, pl = _by_depth(looped), _by_depth(plain)
    grid = sorted({k for per in lo.values() for k in per})
    rows: Dict[str, Any] = {}
    undecided, worse = False, []
    kst_loop = {}
    for d in sorted(set(lo) & set(pl)):
        entry: Dict[str, Any] = {}
        seeds_means = {}
        for name, per in (("looped", lo[d]), ("plain", pl[d])):
            n = min(len(v) for v in per.values()) if per else 0
            undecided |= n < MIN_SEEDS
            mean = {k: float(np.mean(v)) for k, v in per.items() if v}
            se = {k: float(np.std(v, ddof=1) / math.sqrt(len(v))) if len(v) > 1 else 0.0 for k, v in per.items() if v}
            iv = c1_rule.k_star_interval(mean, se, grid, c1_rule.seeds_quantile(n))
            entry[f"{name}_k_star"] = [iv[0], None if iv[1] == math.inf else iv[1]]
            if name == "looped":
                kst_loop[d] = iv
            per_seed = np.mean(np.asarray([per[k][:n] for k in grid]), 0) if n else np.asarray([])
            seeds_means[name] = per_seed
            entry[f"{name}_mean"] = round(float(per_seed.mean()), 4) if n else None
        a, b = seeds_means["looped"], seeds_means["plain"]
        if len(a) and len(b):
            diff = float(a.mean() - b.mean())
            noise = 2 * math.sqrt((np.var(a, ddof=1) / len(a) if len(a) > 1 else 0.0)
                                  + (np.var(b, ddof=1) / len(b) if len(b) > 1 else 0.0))
            lk, pk = entry["looped_k_star"], entry["plain_k_star"]
            surely_fewer = lk[1] is not None and lk[1] < pk[0]
            bad = surely_fewer or diff > max(MIN_DIFFERENCE, noise)
            entry.update(difference=round(diff, 4), noise=round(noise, 4), worse=bad)
            if bad:
                worse.append(f"L={d}" + (" (k* surely smaller)" if surely_fewer else
                                         f" (mean error +{diff:.3f} > max({MIN_DIFFERENCE}, {noise:.3f}))"))
        rows[str(d)] = entry
    c1_on_looped = c1_rule.judge_series(kst_loop) if kst_loop else None
    text = "; ".join(f"L={d}: k* looped {r['looped_k_star']} vs plain {r['plain_k_star']}, mean error "
                     f"{r['looped_mean']} vs {r['plain_mean']}" for d, r in rows.items())
    evidence = f"{text} [looped: {recipe(looped)}; plain: {recipe(plain)}]"
    if c1_on_looped:
        evidence += f"; C1's rule on the looped k*: {c1_on_looped['verdict']} ({c1_on_looped['reason']})"
    measured = {"depths": rows, "c1_on_looped": c1_on_looped, "min_difference": MIN_DIFFERENCE,
                "rule_written": WRITTEN}
    if worse:
        verdict, evidence = NOT_REPRODUCED, evidence + "; looped worse at " + ", ".join(worse)
    elif undecided:
        verdict, evidence = INCONCLUSIVE, evidence + f" (a configuration has fewer than {MIN_SEEDS} seeds)"
    else:
        verdict = REPRODUCED
    return {"verdict": verdict, "evidence": evidence, "measured": measured}


def looped_row(root: pathlib.Path) -> Optional[Dict[str, Any]]:
    """The claims.json row of the looped check (None when neither sweep exists; ``not run`` when one
    is missing or incomplete)."""
    paths = [pathlib.Path(root) / LOOPED_RESULTS, pathlib.Path(root) / PLAIN_RESULTS]
    if not paths[0].is_file():
        return None
    docs = []
    for p in paths:
        docs.append(json.loads(p.read_text(encoding="utf-8")) if p.is_file() else None)
    row = {"id": LOOPED_ID, "source": "Saunshi et al. (ICLR 2025)",
           "statement": "a block looped L times matches an L-layer model on k-hop (CPU size; an extra row, not "
                        "a paper claim)",
           "results": f"{ROOT}/looped/",
           "sweeps": [{"label": "looped", "command": LOOPED_COMMAND, "results": LOOPED_RESULTS,
                       "present": docs[0] is not None},
                      {"label": "plain (C1's khop)", "command": "depthcraft train khop --preset c1 --out "
                       f"{ROOT}/c1/khop", "results": PLAIN_RESULTS, "present": docs[1] is not None}],
           "rule": rule_text(__doc__.split("The rule")[1] if __doc__ else ""), "recipes": {}}
    missing = [str(p.relative_to(root)) for p, d in zip(paths, docs) if d is None or not d.get("complete")]
    if missing:
        return {**row, "verdict": NOT_RUN, "evidence": "not run: " + ", ".join(missing), "measured": {}}
    return {**row, **judge_looped(docs[0], docs[1])}


__all__: Sequence[str] = ("judge_looped", "looped_row", "LOOPED_ID", "LOOPED_RESULTS", "PLAIN_RESULTS")
