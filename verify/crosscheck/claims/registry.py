"""The training claims C1-C7: each claim's paper, statement, sweeps and rule, and its ``claims.json`` entry."""

from __future__ import annotations

import pathlib
from typing import Any, Dict, Tuple

from depthcraft.constructions.errors import InputError
from depthcraft.verify.crosscheck.claims.chen_zou import HEADS, judge_c2, judge_c3, judge_c4
from depthcraft.verify.crosscheck.claims.musat import judge_c5, judge_c6
from depthcraft.verify.crosscheck.claims.sanford import judge_c1, judge_c7
from depthcraft.verify.crosscheck.claims.stats import (CURRICULUM, HARD_ONLY, MIXED, NOT_RUN, RECIPES, ROOT,
    Claim, Results, Sweep, is_mixed, rule_text)

# ---------------------------------------------------------------------------------------------
# The claims
# ---------------------------------------------------------------------------------------------

CLAIMS: Tuple[Claim, ...] = (
    Claim("C1", "Sanford, Hsu & Telgarsky (ICML 2024)",
          "each added layer roughly doubles the largest k learned with small error (SPEC §7a)",
          (Sweep("khop", "khop", "c1"), Sweep("khop_long", "khop", "c1_long", optional=True)),
          judge_c1.__doc__ or "", judge_c1),
    Claim("C2", "Chen & Zou (ICML 2024)",
          "one attention layer fails ICQA and TM; two layers learn them (TM on tokens never seen in training)",
          (Sweep("icqa", "icqa", "c2"), Sweep("tm_onehot", "tm", "c2", ("--embedding", "onehot")),
           Sweep("tm_learned", "tm", "c2", ("--embedding", "learned", "--no-control")),
           Sweep("tm_gaussian", "tm", "c2", ("-p", "vocab=48", "-p", "held_out=8", "--embedding", "random",
                                             "--no-control"), optional=True)),
          judge_c2.__doc__ or "", judge_c2),
    Claim("C3", "Chen & Zou (ICML 2024)",
          "ICTM is learned by 3 layers while 1 and 2 stay near chance; 4 layers learn faster",
          (Sweep("ictm", "ictm_dense", "c3", recipe=HARD_ONLY),
           Sweep("ictm_mixed", "ictm_dense", "c3_mixed", recipe=MIXED, optional=True),
           Sweep("ictm_curriculum", "ictm_dense", "c3_curriculum", recipe=CURRICULUM, optional=True)),
          judge_c3.__doc__ or "", judge_c3),
    Claim("C4", "Chen & Zou (ICML 2024)",
          "more heads make SC memorisation learn faster; for ICQA and TM more heads do not clearly help",
          tuple(Sweep(f"{t}_h{h}", t, "c4", ("--heads", str(h))) for t in ("sc", "icqa", "tm") for h in HEADS),
          judge_c4.__doc__ or "", judge_c4),
    Claim("C5", "Mușat (ICLR 2025)",
          "without the implicit curriculum D = 3 retrieval is not learned; with it, it is, and the per-hop "
          "targets are learned one after the other",
          (Sweep("retrieval", "retrieval_slots", "c5", recipe=HARD_ONLY),
           Sweep("retrieval_mixed", "retrieval_slots", "c5_mixed", recipe=MIXED, optional=True),
           Sweep("retrieval_curriculum", "retrieval_slots", "c5_curriculum", recipe=CURRICULUM, optional=True)),
          judge_c5.__doc__ or "", judge_c5),
    Claim("C6", "Mușat (ICLR 2025)", "the depth at which training succeeds, against ceil(log_3 2D)",
          (Sweep("retrieval", "retrieval_slots", "c6"),), judge_c6.__doc__ or "", judge_c6),
    Claim("C7", "Sanford, Hsu & Telgarsky (2024); Merrill & Sabharwal (2025)",
          "graph connectivity needs depth that grows like log n, and log depth suffices: on path-heavy graphs "
          "the smallest depth that learns grows from n = 8 to n = 16 and is at most the construction's",
          (Sweep("connectivity", "connectivity", "cpu", recipe=HARD_ONLY),
           *(Sweep(f"connectivity_{rec}_n{n}", "connectivity_span", f"c7_{rec}", args, recipe=rec, optional=True)
             for rec in (MIXED, CURRICULUM)
             for n, args in ((8, ()), (16, ("-p", "n=16", "-p", "span=4,8,12,16", "--depths", "3-5"))))),
          judge_c7.__doc__ or "", judge_c7),
)


def get_claim(claim_id: str) -> Claim:
    """The claim ``C1``..``C7`` (case-insensitive).

    Raises:
        InputError: no such claim (the message lists them).
    """
    for c in CLAIMS:
        if c.id.lower() == claim_id.lower():
            return c
    raise InputError(f"no claim {claim_id!r}; the claims are {', '.join(c.id for c in CLAIMS)}")



def evaluate_claim(root: pathlib.Path, claim: Claim) -> Dict[str, Any]:
    """The entry of one claim in ``claims.json``: statement, source, sweeps, rule, verdict, evidence."""
    res = Results(root, claim.id, claim.sweeps)
    entry = {"id": claim.id, "source": claim.source, "statement": claim.statement,
             "results": f"{ROOT}/{claim.id.lower()}/",
             "sweeps": [{"label": s.label, "command": s.command(claim.id),
                         "results": f"{s.out_dir(claim.id)}/results.json",
                         "present": s.label in res.docs} for s in claim.sweeps],
             "rule": rule_text(claim.rule)}
    needed = [s.label for s in claim.sweeps
              if not s.optional and not (claim.id == "C2" and s.label in ("tm_random", "tm_learned"))]
    absent = [m for m in res.missing if m.split(" ")[0] in needed]
    if absent:
        entry.update(verdict=NOT_RUN, evidence="not run: " + "; ".join(absent), measured={})
        return entry
    entry.update(claim.judge(res))
    entry["recipes"] = recipe_verdicts(claim, res, entry)
    return entry


def sweep_recipe(sweep: Sweep, doc: Dict[str, Any]) -> str:
    """A sweep's training recipe: its declared one, else read from its settings (a curriculum, one
    model on several conditions = mixed, else hard-only)."""
    if sweep.recipe:
        return sweep.recipe
    settings = doc.get("settings", {})
    if settings.get("curriculum") is not None:
        return CURRICULUM
    return MIXED if is_mixed(doc) else HARD_ONLY


def recipe_verdicts(claim: Claim, res: "Results", entry: Dict[str, Any]) -> Dict[str, str]:
    """``{recipe: verdict}`` for every recipe of a judged claim whose sweeps are present: from the
    claim's ``by_recipe`` where it judges recipes apart, else the claim's verdict for the one recipe
    its sweeps used."""
    by = (entry.get("measured") or {}).get("by_recipe")
    if by:
        return {rec: v["verdict"] for rec, v in by.items()}
    recipes = sorted({sweep_recipe(s, res[s.label]) for s in claim.sweeps if s.label in res.docs},
                     key=RECIPES.index)
    return {rec: entry["verdict"] for rec in recipes}
