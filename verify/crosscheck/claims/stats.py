"""The training claims' shared definitions: thresholds, sweeps and results, per-configuration statistics.

The definitions every claim's rule reads (:mod:`verify.crosscheck.claims`' docstring states them):
the thresholds (:data:`LEARNED`, :data:`FAILED`, :data:`MIN_SEEDS`, :data:`LEARNED_LOSS`,
:data:`CLEAR_SPEEDUP`), a claim's sweeps (:class:`Sweep`, :class:`Claim`) and their results
(:class:`Results`), the runs of one configuration (:func:`select`, :class:`Stat`, :func:`stat`),
learning steps, condition names, and the verdict helpers shared by the papers' modules
(:func:`depth_threshold`, :func:`by_recipe`, :func:`make_verdict`, :func:`combine`).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from depthcraft.constructions.errors import InputError

#: Mean error below which a configuration learns (SPEC §7's threshold).
LEARNED = 0.05
#: Mean error at or above which a configuration fails.
FAILED = 0.25
#: Seeds a configuration needs to be decided.
MIN_SEEDS = 3
#: Training loss (nats) at or below which a run counts as having learned.
LEARNED_LOSS = 0.1
#: A speed difference is "clear" when one learning step is at most this fraction of the other.
CLEAR_SPEEDUP = 0.67
#: The smallest difference between two mean errors that matters (issue 41; a fraction of tokens): the
#: finite-sample rule (:func:`verify.crosscheck.published.judge_finite_sample`, which re-exports it as
#: ``published.MIN_DIFFERENCE``) and the looped rule (:mod:`verify.crosscheck.claims.looped`) call two
#: errors different only beyond it.
MIN_DIFFERENCE = 0.01

REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE, NOT_RUN = "reproduced", "not reproduced", "inconclusive", "not run"

#: Training recipes of a claim's sweeps (issue 25), in the order they are reported.
HARD_ONLY, MIXED, CURRICULUM = "hard-only", "mixed", "curriculum"
RECIPES = (HARD_ONLY, MIXED, CURRICULUM)

#: Where the claims' sweeps and claims.json live (relative to the project root).
ROOT = "results/crosscheck"
CLAIMS_FILE = f"{ROOT}/claims.json"


@dataclasses.dataclass(frozen=True)
class Sweep:
    """One ``depthcraft train`` sweep a claim reads.

    Attributes:
        label: sub-folder of the claim's results folder.
        task: task name.
        preset: preset name (:mod:`verify.crosscheck.presets`).
        args: extra command-line arguments (e.g. ``("--embedding", "onehot")``).
        recipe: the training recipe (:data:`RECIPES`): ``hard-only`` (the claim's instance alone),
            ``mixed`` (easy and hard instances mixed, named by the BOS token) or ``curriculum``
            (easiest first, moving on at 99% accuracy); "" = the claim has one recipe.
        optional: the claim is judged without this sweep when it is missing.
    """

    label: str
    task: str
    preset: str
    args: Tuple[str, ...] = ()
    recipe: str = ""
    optional: bool = False

    def out_dir(self, claim_id: str) -> str:
        return f"{ROOT}/{claim_id.lower()}/{self.label}"

    def command(self, claim_id: str) -> str:
        parts = ["depthcraft", "train", self.task, "--preset", self.preset, *self.args,
                 "--out", self.out_dir(claim_id)]
        return " ".join(parts)


@dataclasses.dataclass(frozen=True)
class Claim:
    """A training claim of a paper, the sweeps that answer it, and its verdict rule."""

    id: str
    source: str
    statement: str
    sweeps: Tuple[Sweep, ...]
    rule: str
    judge: Callable[["Results"], Dict[str, Any]]


# ---------------------------------------------------------------------------------------------
# Reading results
# ---------------------------------------------------------------------------------------------


class Results:
    """The ``results.json`` of a claim's sweeps, by label (missing or incomplete ones listed apart)."""

    def __init__(self, root: pathlib.Path, claim_id: str, sweeps: Sequence[Sweep]):
        self.docs: Dict[str, Dict[str, Any]] = {}
        self.missing: List[str] = []
        for s in sweeps:
            path = root / s.out_dir(claim_id) / "results.json"
            if not path.is_file():
                self.missing.append(f"{s.label} ({path.relative_to(root)} missing)")
                continue
            try:
                doc = json.loads(path.read_text(encoding="utf-8"))
            except ValueError as e:
                raise InputError(f"{path}: not JSON ({e})") from None
            if not doc.get("complete", False):
                self.missing.append(f"{s.label} (sweep not complete: {len(doc.get('runs', []))} of "
                                    f"{len(doc.get('planned_runs', []))} runs)")
                continue
            self.docs[s.label] = doc

    def __getitem__(self, label: str) -> Dict[str, Any]:
        return self.docs[label]


#: ``position`` value of :func:`run_error` that reads the error on the training distribution
#: (reported when evaluation used other parameters, e.g. TM's held-out tokens).
TRAINING_DISTRIBUTION = 0


def run_error(run: Dict[str, Any], condition: str, position: Optional[int] = None) -> Optional[float]:
    """A run's evaluation error at a condition: overall (None), at one model position (1-based,
    negative counts from the end, -1 = the last position), or on the training distribution
    (:data:`TRAINING_DISTRIBUTION`)."""
    if position is None:
        return run.get("error", {}).get(condition)
    if position == TRAINING_DISTRIBUTION:
        return (run.get("error_training_distribution") or {}).get(condition)
    for e in run.get("eval", []):
        if e.get("condition") == condition:
            per = e.get("error_per_position") or []
            try:
                return per[position - 1 if position > 0 else position]
            except IndexError:
                return None
    return None


def learning_step(run: Dict[str, Any], level: float = LEARNED_LOSS) -> Optional[int]:
    """First logged step with training loss <= ``level`` (None when it never is)."""
    for h in run.get("history", []):
        if h.get("loss") is not None and h["loss"] <= level:
            return int(h["step"])
    return None


def select(doc: Dict[str, Any], *, depth: Optional[int] = None, control: bool = False,
           heads: Optional[int] = None, condition: Optional[str] = None) -> List[Dict[str, Any]]:
    """The runs of a sweep matching depth / control / heads / condition."""
    out = []
    for r in doc.get("runs", []):
        if bool(r.get("control")) != control:
            continue
        if depth is not None and r.get("depth") != depth:
            continue
        if heads is not None and r.get("heads") != heads:
            continue
        if condition is not None and condition not in r.get("conditions", []):
            continue
        out.append(r)
    return out


@dataclasses.dataclass
class Stat:
    """Errors of one configuration over seeds."""

    errors: List[float]
    steps: List[Optional[int]] = dataclasses.field(default_factory=list)
    last_step: int = 0

    @property
    def n(self) -> int:
        return len(self.errors)

    @property
    def mean(self) -> Optional[float]:
        return float(np.mean(self.errors)) if self.errors else None

    @property
    def std(self) -> Optional[float]:
        return float(np.std(self.errors)) if self.errors else None

    @property
    def decided(self) -> bool:
        return self.n >= MIN_SEEDS

    @property
    def learns(self) -> bool:
        return self.decided and self.mean < LEARNED

    @property
    def fails(self) -> bool:
        return self.decided and self.mean >= FAILED

    @property
    def state(self) -> str:
        if not self.decided:
            return f"undecided ({self.n} seed{'s' if self.n != 1 else ''} < {MIN_SEEDS})"
        return "learns" if self.learns else "fails" if self.fails else "unclear"

    @property
    def median_step(self) -> Optional[float]:
        """Median learning step over seeds (never learned = last step + 1)."""
        if not self.steps:
            return None
        return float(np.median([s if s is not None else self.last_step + 1 for s in self.steps]))

    def text(self) -> str:
        if not self.errors:
            return "not run"
        return f"{self.mean:.3f} ± {self.std:.3f} (n={self.n})"

    def to_json(self) -> Dict[str, Any]:
        return {"mean": _r(self.mean), "std": _r(self.std), "seeds": [_r(e) for e in self.errors],
                "state": self.state, "learning_steps": self.steps, "median_learning_step": self.median_step}


def _r(x: Optional[float]) -> Optional[float]:
    return None if x is None else round(float(x), 4)


def curve_learning_step(run: Dict[str, Any], condition: str, level: float = LEARNED_LOSS) -> Optional[int]:
    """First curve step whose evaluation loss on ``condition`` is <= ``level`` nats (None when it never
    is): the learning step of one condition of a mixed run, whose training loss averages all of them."""
    for point in run.get("curve") or []:
        loss = (point.get("loss") or {}).get(condition)
        if loss is not None and loss <= level:
            return int(point["step"])
    return None


def stat(doc: Dict[str, Any], condition: str, *, depth: Optional[int] = None, control: bool = False,
         heads: Optional[int] = None, position: Optional[int] = None, curve_loss: bool = False) -> Stat:
    """Errors over seeds of one configuration (see :func:`select`), with learning steps (from the
    training loss, or with ``curve_loss`` from the condition's evaluation loss on the run's curve)."""
    runs = select(doc, depth=depth, control=control, heads=heads, condition=condition)
    errs, steps = [], []
    last = 0
    for r in runs:
        e = run_error(r, condition, position)
        if e is None:
            continue
        errs.append(float(e))
        steps.append(curve_learning_step(r, condition) if curve_loss else learning_step(r))
        last = max(last, int(r.get("steps") or 0))
    return Stat(errs, steps, last)


def conditions(doc: Dict[str, Any]) -> List[str]:
    return list(doc.get("settings", {}).get("condition_names") or [s["condition"] for s in doc.get("summary", [])])


def is_mixed(doc: Dict[str, Any]) -> bool:
    """Whether a sweep trained one model on several conditions (mixed or curriculum)."""
    return bool(doc.get("settings", {}).get("mixed")) and len(conditions(doc)) > 1


def hard_condition(doc: Dict[str, Any], key: str, contains: str = "") -> str:
    """The claim's instance in a sweep: among the conditions whose name contains ``contains``, the one
    with the largest integer ``key`` (a sweep of one such condition: that one).

    Raises:
        InputError: no condition matches, or one does not name ``key``.
    """
    names = [c for c in conditions(doc) if contains in c]
    if not names:
        raise InputError(f"no condition with {contains!r} among {conditions(doc)}")
    if len(names) == 1:
        return names[0]
    return max(names, key=lambda c: param_of(c, key))


def condition_param(doc: Dict[str, Any], condition: str, key: str) -> int:
    """The integer parameter ``key`` of a sweep's condition: from its settings' conditions (a name
    need not show every parameter), else from the name.

    Raises:
        InputError: neither has it.
    """
    params = doc.get("settings", {}).get("conditions") or []
    names = conditions(doc)
    if condition in names and names.index(condition) < len(params) and key in params[names.index(condition)]:
        return int(params[names.index(condition)][key])
    return param_of(condition, key)


def depths(doc: Dict[str, Any]) -> List[int]:
    return sorted({int(r["depth"]) for r in doc.get("runs", []) if not r.get("control")})


def recipe(doc: Dict[str, Any]) -> str:
    """What was tried: steps, batch, lr, width, heads, MLP, embedding, seeds (from the settings)."""
    s = doc.get("settings", {})
    m, t = s.get("model", {}), s.get("train", {})
    conds = s.get("conditions") or [{}]
    params = " ".join(f"{k}={v}" for k, v in conds[0].items()) if len(conds) == 1 else \
        "; ".join(s.get("condition_names") or [])
    evald = s.get("eval_conditions")
    extra = ""
    if evald:
        diff = {k: v for k, v in evald[0].items() if conds[0].get(k) != v}
        extra = ", evaluated on " + " ".join(f"{k}={v}" for k, v in diff.items())
    return (f"{doc.get('task')} {params}{extra}: {t.get('steps')} steps, batch {t.get('batch')}, lr {t.get('lr')}, "
            f"width {m.get('width')}, {m.get('heads')} heads, {'MLP' if m.get('mlp') else 'attention-only'}, "
            f"{m.get('embedding', 'learned')} token embedding{', looped (one shared block)' if m.get('looped') else ''}, "
            f"{s.get('seeds')} seeds")


def combine(parts: Sequence[str]) -> str:
    """A claim with several parts: reproduced only if every part is; not reproduced if any part is not."""
    if any(p == NOT_RUN for p in parts):
        return NOT_RUN
    if any(p == NOT_REPRODUCED for p in parts):
        return NOT_REPRODUCED
    if all(p == REPRODUCED for p in parts):
        return REPRODUCED
    return INCONCLUSIVE


def make_verdict(verdict: str, evidence: str, **measured) -> Dict[str, Any]:
    """A rule's result: its verdict, the evidence sentence and the measured numbers."""
    return {"verdict": verdict, "evidence": evidence, "measured": measured}


# ---------------------------------------------------------------------------------------------
# Rules
# ---------------------------------------------------------------------------------------------


#: Appended when a claimed depth fails and nothing deeper learns with the same recipe.
BUDGET_NOTE = " (the claimed depth fails and no deeper model learns with this recipe: a budget artefact is not excluded)"


def depth_threshold(doc: Dict[str, Any], condition: str, shallow: Sequence[int], deep: int,
                    position: Optional[int] = None) -> Tuple[str, str, Dict[str, Any]]:
    """Part rule "depths ``shallow`` fail, depth ``deep`` learns" (with the capacity control at
    max(shallow) when the sweep has one).

    reproduced: every shallow depth fails, the deep one learns, and the control (if run) fails;
    not reproduced: a shallow depth or the control learns, or the deep depth fails while depth
    deep + 1 learns with the same recipe (so the failure is not the budget's);
    inconclusive: otherwise (unclear or undecided configurations, depths missing, or the deep
    depth failing with nothing deeper learning: a budget artefact cannot be excluded).
    """
    stats = {d: stat(doc, condition, depth=d, position=position) for d in (*shallow, deep)}
    ctrl = stat(doc, condition, depth=max(shallow), control=True, position=position)
    text = "; ".join(f"L={d} {s.text()}" for d, s in stats.items())
    if ctrl.errors:
        text += f"; control L={max(shallow)} (2x heads, 2x width) {ctrl.text()}"
    measured = {f"L{d}": s.to_json() for d, s in stats.items()}
    measured["control"] = ctrl.to_json() if ctrl.errors else None
    if any(not s.errors for s in stats.values()):
        return INCONCLUSIVE, text + " (a depth was not trained)", measured
    if any(stats[d].learns for d in shallow) or ctrl.learns:
        return NOT_REPRODUCED, text, measured
    if stats[deep].fails:
        deeper = stat(doc, condition, depth=deep + 1, position=position)
        if deeper.learns:
            return NOT_REPRODUCED, text + f"; L={deep + 1} learns: {deeper.text()}", measured
        return INCONCLUSIVE, text + BUDGET_NOTE, measured
    if all(stats[d].fails for d in shallow) and stats[deep].learns and (not ctrl.errors or ctrl.fails):
        return REPRODUCED, text, measured
    return INCONCLUSIVE, text, measured


def by_recipe(res: "Results", recipes: Dict[str, Tuple[str, ...]],
              judge_one: Callable[[Sequence[Dict[str, Any]]], Dict[str, Any]]) -> Dict[str, Any]:
    """A claim judged per training recipe (issue 25): ``judge_one`` on the sweeps of every recipe
    whose sweeps are all present; the verdict is the mixed recipe's when present, else the
    hard-only one's (else the first present). With more than the hard-only recipe the evidence
    lists every recipe's verdict and ``measured["by_recipe"]`` holds ``{recipe: {"verdict",
    "evidence", "sweeps"}}``.

    Args:
        res: the claim's results.
        recipes: recipe -> the labels of its sweeps (in :data:`RECIPES` order).
        judge_one: the rule on one recipe's documents (in the order of its labels).
    Raises:
        InputError: no recipe has all its sweeps (the caller reports the claim as not run first).
    """
    per = {rec: judge_one([res[lab] for lab in labels]) for rec, labels in recipes.items()
           if all(lab in res.docs for lab in labels)}
    if not per:
        raise InputError(f"no recipe has all its sweeps: {dict(recipes)}")
    head = MIXED if MIXED in per else HARD_ONLY if HARD_ONLY in per else next(iter(per))
    out = per[head]
    if list(per) == [HARD_ONLY]:
        return out
    evidence = f"verdict from the {head} recipe. " + " | ".join(
        f"{rec.upper()} ({', '.join(recipes[rec])}): {v['verdict']}: {v['evidence']}" for rec, v in per.items())
    measured = dict(out["measured"])
    measured["by_recipe"] = {rec: {"verdict": v["verdict"], "evidence": v["evidence"], "sweeps": list(recipes[rec])}
                             for rec, v in per.items()}
    return make_verdict(out["verdict"], evidence, **measured)


def merged(docs: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """Sweeps of the same task and condition (e.g. one per head count) as one: runs concatenated."""
    out = dict(docs[0])
    out["runs"] = [r for d in docs for r in d.get("runs", [])]
    return out


def param_of(condition: str, key: str) -> int:
    """The integer value of ``key`` in a condition name such as ``n=8`` (``d=3 targets=every``).

    Raises:
        InputError: the name has no ``key=<int>`` part.
    """
    for part in condition.split():
        if part.startswith(f"{key}=") and part[len(key) + 1:].isdigit():
            return int(part[len(key) + 1:])
    raise InputError(f"condition {condition!r} does not name {key}")




def rule_text(doc: str) -> str:
    """A rule's docstring as one line (the text ``claims.json`` stores)."""
    return " ".join(doc.split())
