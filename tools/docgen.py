"""Generated documentation: every number in README.md and docs/ is drawn from results/.

A page holds generated blocks between two markers::

    <!-- BEGIN generated:status (depthcraft docs; edit tools/docgen.py, not this block) -->
    ...
    <!-- END generated:status -->

``depthcraft docs`` from a checkout (or ``python -m tools.docgen`` from its root) rewrites every block of every
Markdown page under the project root from the files under ``results/`` (verification reports
written by ``depthcraft verify --json``, the precision study, the trained cross-check's
``claims.json``) and, for ``docs/architecture.md``, from the package's own module graph.
``--check`` writes nothing and exits 1 naming every page that differs from what it would
write; ``tests/test_docs_fresh.py`` runs it, so a committed page cannot fall behind its results.

A renderer is a function ``root -> Markdown text`` registered in :data:`RENDERERS`; it reads
only files under ``root`` and raises :class:`DocgenError` naming a missing or malformed file.
"""

from __future__ import annotations

import json
import pathlib
import re
import sys
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from depthcraft.constructions.errors import DepthcraftError
from depthcraft.verify.report import certificate_kind, checked_inputs


class DocgenError(DepthcraftError):
    """A results file a page needs is missing or malformed, or a page names an unknown block."""


BLOCK = re.compile(r"(<!-- BEGIN generated:(?P<name>[a-z0-9_]+)[^>]*-->\n)(?P<body>.*?)(<!-- END generated:(?P=name) -->)",
                   re.S)

#: Where the verification reports that pages cite live (relative to the root).
VERIFY_ALL = "results/verify_all/verify_all.json"
CLAIMS = "results/crosscheck/claims.json"


# ---------------------------------------------------------------------------------------------
# Reading results
# ---------------------------------------------------------------------------------------------


def load_json(root: pathlib.Path, rel: str) -> Any:
    """The JSON document at ``root/rel``.

    Raises:
        DocgenError: the file is missing or is not JSON (the message names it and the command
            that writes it, from the COMMAND file beside it when there is one).
    """
    path = root / rel
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        command = path.parent / "COMMAND"
        hint = f"; regenerate it with {command.relative_to(root)}" if command.is_file() else ""
        raise DocgenError(f"{rel} is missing{hint}") from None
    except json.JSONDecodeError as e:
        raise DocgenError(f"{rel} is not valid JSON: {e}") from None


def reports(root: pathlib.Path, rel: str) -> List[Dict[str, Any]]:
    """The reports of a ``depthcraft verify --json`` file."""
    doc = load_json(root, rel)
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), list) or not doc["results"]:
        raise DocgenError(f"{rel} holds no verification reports ({{'results': [...]}})")
    return doc["results"]


# ---------------------------------------------------------------------------------------------
# Formatting
# ---------------------------------------------------------------------------------------------


def link(rel: str, text: Optional[str] = None) -> str:
    """A Markdown link to ``rel`` (a path under the root), fixed up for each page by :func:`regenerate`."""
    return f"[{text or rel}](@/{rel})"


def signed(x: float, digits: int = 1) -> str:
    """``-4.02`` -> ``"- 4.0"``, ``3`` -> ``"+ 3.0"`` (a term of a fitted formula)."""
    return f"{'-' if x < 0 else '+'} {abs(x):.{digits}f}"


def cell(v: Any) -> str:
    """A Markdown table cell (pipes escaped, None as an em dash)."""
    return "—" if v is None else str(v).replace("|", "\\|").replace("\n", " ")


def table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def runs(values: Sequence[int]) -> str:
    """``[1, 2, 3, 5, 7, 8]`` -> ``"1-3, 5, 7-8"``."""
    vals = sorted(set(values))
    out, i = [], 0
    while i < len(vals):
        j = i
        while j + 1 < len(vals) and vals[j + 1] == vals[j] + 1:
            j += 1
        out.append(str(vals[i]) if i == j else f"{vals[i]}-{vals[j]}")
        i = j + 1
    return ", ".join(out)


def count(n: int) -> str:
    """``1048576`` -> ``"1,048,576"``."""
    return f"{n:,}"


def bound_text(r: Mapping[str, Any], key: str) -> str:
    """``"3 / 3"`` (measured / bound), ``"4 / ≥2"`` for a lower bound, ``"33"`` with no bound."""
    measured = r["structure"][key]
    b = (r.get("bound_checks") or {}).get(key)
    if not b:
        return str(measured)
    return f"{measured} / {'≥' if b['kind'] == 'lower' else ''}{b['bound']}"


def inputs_text(r: Mapping[str, Any]) -> str:
    """``"500 random, 22 edge, 100 hypothesis"`` (``exhaustive`` first when it ran)."""
    c = checked_inputs(r)
    order = ("exhaustive", "random", "edge", "hypothesis")
    return ", ".join(f"{count(c[k])} {k}" for k in order if k in c)


def params_text(p: Mapping[str, Any], skip: Iterable[str] = ("distribution",)) -> str:
    """``"k=8 n=100 vocab=4"``."""
    return " ".join(f"{k}={v}" for k, v in p.items() if k not in set(skip))


# ---------------------------------------------------------------------------------------------
# Renderers
# ---------------------------------------------------------------------------------------------


def certificate_text(cert: Optional[Mapping[str, Any]]) -> str:
    """A certificate in a table cell: ``certified``, ``certified on the domain`` (the tables used the
    task's domain as a precondition: the scope covers the domain's inputs only), ``exhaustive``,
    ``no: attn 1 head 0 (why)`` or ``—``."""
    kind = certificate_kind(cert)
    if kind is None:
        return "—"
    if kind != "no":
        return {"exhaustive": "exhaustive", "domain": "certified on the domain", "tables": "certified"}[kind]
    u = cert["uncertified"][0] if cert["uncertified"] else {}
    where = " ".join(x for x in (u.get("layer") or "", f"head {u['head']}" if u.get("head") is not None else "") if x)
    why = (u.get("why") or "").split(":")[0]
    return f"no: {where} ({why})" if where else f"no ({why})"


def render_status(root: pathlib.Path) -> str:
    """README: one row per report of ``verify --all`` (the embedded defaults), with the certificate."""
    rows = []
    for r in reports(root, VERIFY_ALL):
        rows.append([f"`{r['construction']}`", params_text(r["params"]), bound_text(r, "attn_layers"),
                     bound_text(r, "heads"), bound_text(r, "d_model"), inputs_text(r),
                     certificate_text(r.get("certificate")), "**pass**" if r["passed"] else "**FAIL**"])
    passed = sum(1 for r in reports(root, VERIFY_ALL) if r["passed"])
    kinds = [certificate_kind(r.get("certificate")) for r in reports(root, VERIFY_ALL)]
    by_tables, by_domain, by_exhaustive = (kinds.count(k) for k in ("tables", "domain", "exhaustive"))
    total = len(rows)
    head = (f"`depthcraft verify --all --certify`: {passed}/{total} reports pass; {by_tables}/{total} certified "
            f"for every input up to their n, {by_exhaustive} proved by the exhaustive check of the task's whole "
            f"input set, {by_domain} certified on the task's declared domain only (the scope names it), "
            f"{total - by_tables - by_exhaustive - by_domain} not certified "
            f"({link(VERIFY_ALL)}; [certification](@/docs/certification.md)). "
            "L and H are measured from the weights and shown as "
            "measured / bound (≥b: a lower bound, which a correct construction must meet or exceed).\n\n")
    return head + table(["construction", "parameters", "L", "H", "d_model", "inputs checked", "certificate",
                         "result"], rows)


CERTIFY = "results/certify/certify.json"
CERTIFY_SPEED = "results/performance/certify_speed.json"
CERTIFY_SYMMETRY = "results/certify/tripling_symmetry.json"


def render_certify_worked(root: pathlib.Path) -> str:
    """docs/certification.md: the worked layer's score table and its certificate entry."""
    w = load_json(root, CERTIFY)["worked"]
    levels = w["scores_by_key_position"]
    header = ["pointer P"] + ["BOS"] + [str(j) for j in range(1, len(levels["0"]))]
    rows = [[p] + [f"{v:g}" for v in row] for p, row in levels.items()]
    e = w["certificate_entry"]
    return (table(header, rows) + f"\n\nCertificate entry ({w['layer']}, head {e['head']}): smallest gap "
            f"{e['min_gap']:.4g}, delta {e['delta']:.3g}, leak bound {e['leak_bound']:.3g}, radius in "
            f"{e['radius_in']:.3g}, radius out {e['radius_out']:.3g}; whole model certified: {w['certified']} "
            f"({link(CERTIFY)}).")


def render_certify_scale(root: pathlib.Path) -> str:
    """docs/certification.md: the certificate at the scale targets, and the theorem's half."""
    d = load_json(root, CERTIFY)
    rows = []
    for t in d["targets"]:
        stop = t["stops_at"]
        result = "**certified**" if t["certified"] else \
            f"not certified: {stop['layer']}{'' if stop['head'] is None else ' head ' + str(stop['head'])}: {stop['why']}"
        th = t.get("theorem")
        theorem = "—" if not th else (
            f"{'exact' if th['exhaustive']['exact'] else '**wrong**'} on {count(th['exhaustive']['inputs'])} inputs "
            f"n ≤ {th['exhaustive']['n']}; {'exact' if th['random']['exact'] else '**wrong**'} on "
            f"{count(th['random']['inputs'])} random at n = {th['random']['n']} ({th['seconds']:.0f} s)")
        rows.append([f"`{t['construction']}`", params_text(t["params"]), count(t["d_model"]),
                     f"{t['seconds']:.1f} s", f"{count(t['peak_rss_mib'])} MiB", result, theorem])
    return (f"Certificates at the issue's scale targets, without sampled checks "
            f"(`{d['command']}`, {link(CERTIFY)}; peak RSS of the whole run so far):\n\n"
            + table(["construction", "parameters", "d_model", "certify", "peak RSS", "certificate",
                     "theorem's half (program vs Definition 4.1)"], rows))


def render_certify_symmetry(root: pathlib.Path) -> str:
    """docs/certification.md and docs/tripling_certification.md: retrieval_tripling certified by symmetry."""
    d = load_json(root, CERTIFY_SYMMETRY)
    rows = []
    for r in d["rows"]:
        dom, sub = r["domain"], r["sampled_shape"]
        how = (f"{count(dom['pieces'])} pieces" if dom.get("method") == "locality" else
               f"{count(dom['orbits'])} orbits" if dom.get("orbits") else dom.get("method") or "")
        whole = (f"**certified** by {dom.get('method')} ({how}; {dom['seconds']:.1f} s, "
                 f"{count(dom['peak_rss_mib'])} MiB)" if dom["certified"] else f"not certified: {dom.get('why')}")
        part = (f"**certified** ({sub['seconds']:.1f} s, {count(sub['peak_rss_mib'])} MiB)" if sub["certified"]
                else f"not certified: {sub['why']}")
        rows.append([params_text(r["params"]), str(r["n"]), count(r["d_model"]), count(r["domain_orbits"]), whole,
                     part, f"{sub['min_gap']:.2f}", f"{sub['max_leak_bound']:.2g}", f"{sub['max_radius']:.2g}"])
    return (f"`retrieval_tripling` by symmetry (`{d['command']}`, {link(CERTIFY_SYMMETRY)}; peak RSS of the "
            f"whole run so far; orbits are enumerated up to {d['rows'][0]['max_orbits']}, above that the route "
            f"uses locality; gap, leak and radius are the sampler's shape's):\n\n"
            + table(["parameters", "n", "d_model", "orbits of the domain", "whole domain",
                     "sampler's shape only (sub-domain)", "min gap (nats)", "leak", "radius"], rows))


def render_certify_speed(root: pathlib.Path) -> str:
    """docs/certification.md: certificate time against the sampled forward, n = 16 .. 1024."""
    d = load_json(root, CERTIFY_SPEED)
    rows = [[str(r["n"]), count(r["d_model"]), f"{r['certify_s']:.2f} s", str(r["certified"]),
             f"{r['forward_s_per_input'] * 1000:.1f} ms", f"{r['sampled_s_extrapolated']:.0f} s",
             f"{r['ratio_sampled_over_certify']:g}x", f"{r['load_1min']:.1f}"] for r in d["rows"]]
    r0 = d["rows"][0]
    return (f"Certificate (every input) against {r0['samples']} sampled forwards, `{r0['construction']}` k = "
            f"{r0['k']} (`{d['command']}`, {link(CERTIFY_SPEED)}; sampled time extrapolated from timed single "
            f"inputs after compilation; load = 1-minute load average of the shared 2-core machine):\n\n"
            + table(["n", "d_model", "certify", "certified", "forward per input", "sampled", "sampled / certify",
                     "load"], rows))


#: Sweeps the README and the claims page summarise: (results file, varied parameter, one-line title).
SWEEPS: Tuple[Tuple[str, str, str], ...] = (
    ("results/khop/khop_doubling_n100_k1-16.json", "k", "`khop_doubling`, n = 100, vocab 4"),
    ("results/khop_floor/n64.json", "k", "`khop_floor`, n = 64, vocab 4"),
    ("results/khop_constant_width/k4.json", "n", "`khop_constant_width`, k = 4, vocab 4"),
    ("results/retrieval/d1-32.json", "d", "`retrieval_doubling`, 2 distractor chains"),
    ("results/khop/khop_rasp_breakdown.json", None, "`khop_rasp` (tracr's primitives only)"),
)


def sweep_facts(rs: Sequence[Mapping[str, Any]], key: Optional[str]) -> Dict[str, Any]:
    """What a sweep of verification reports shows (values, depths, bounds, gaps, widths, exactness)."""
    values = [r["params"][key] for r in rs] if key else list(range(len(rs)))
    layers = [r["structure"]["attn_layers"] for r in rs]
    bounds = [(r.get("bound_checks") or {}).get("attn_layers") for r in rs]
    return {
        "values": values, "layers": layers,
        "bound_kind": bounds[0]["kind"] if bounds[0] else None,
        "bounds": [b["bound"] if b else None for b in bounds],
        "gaps": [b["gap"] if b else None for b in bounds],
        "bound_ok": all(b["ok"] for b in bounds if b),
        "heads": sorted({r["structure"]["heads"] for r in rs}),
        "d_model": [r["structure"]["d_model"] for r in rs],
        "passed": sum(1 for r in rs if r["passed"]), "total": len(rs),
        "exact": sum(1 for r in rs if r.get("exact")),
        "formula": (rs[0].get("bound_formulas") or {}).get("attn_layers"),
        "failing": [r["params"] for r in rs if not r["passed"]],
    }


def _sweep_line(f: Mapping[str, Any], key: Optional[str]) -> str:
    if key is None:
        shown = "; ".join(params_text(p) for p in f["failing"][:4])
        more = f" and {len(f['failing']) - 4} more" if len(f["failing"]) > 4 else ""
        return (f"{f['passed']}/{f['total']} parameter sets pass"
                + (f"; fails at {shown}{more}" if f["failing"] else ""))
    vals = f"{key} = {runs(f['values'])}"
    depth = f"L = {', '.join(map(str, f['layers']))}"
    if f["formula"]:
        gaps = sorted({g for g in f["gaps"] if g is not None})
        rel = "≥" if f["bound_kind"] == "lower" else "≤"
        depth += (f" ({rel} {f['formula']} at every {key}; gap {runs(gaps)})" if f["bound_ok"]
                  else f" (bound {f['formula']} NOT met everywhere)")
    dm = f["d_model"]
    width = f"d_model {dm[0]}" + (f"..{max(dm)}" if max(dm) != dm[0] else " at every size")
    return f"{vals}: {depth}; H = {'/'.join(map(str, f['heads']))}; {width}; {f['passed']}/{f['total']} pass"


def render_sweeps(root: pathlib.Path) -> str:
    """README / claims page: one line per committed sweep."""
    lines = []
    for rel, key, title in SWEEPS:
        if not (root / rel).is_file():
            continue
        lines.append(f"* {title} ({link(rel)}): {_sweep_line(sweep_facts(reports(root, rel), key), key)}.")
    if _connectivity_files(root):
        lines.append(f"* `graph_connectivity`, every sampler ({_connectivity_links(root)}): "
                     f"{_connectivity_line(root)}.")
    return "\n".join(lines)


def _claims_list(root: pathlib.Path) -> List[Dict[str, Any]]:
    """``claims.json``'s list of claims (raises :class:`DocgenError` when it holds none)."""
    doc = load_json(root, CLAIMS)
    claims = doc.get("claims") if isinstance(doc, dict) else None
    if not isinstance(claims, list):
        raise DocgenError(f"{CLAIMS} holds no list 'claims'")
    return claims


def claim_anchor(claim_id: str) -> str:
    """The HTML anchor of a claim's evidence in docs/crosscheck.md (``C1, the authors' models`` ->
    ``evidence-c1-the-authors-models``)."""
    return "evidence-" + re.sub(r"[^a-z0-9]+", "-", claim_id.lower()).strip("-")


def _err(x: Dict[str, Any]) -> str:
    return f"{x['mean']:.3f}"


def _kstars(kstar: Dict[str, Any]) -> str:
    return ", ".join(str(kstar[L]) for L in sorted(kstar, key=int))


def _depth_range(keys) -> str:
    ds = sorted(int(L) for L in keys)
    return f"{ds[0]}-{ds[-1]}" if len(ds) > 1 else str(ds[0])


def _head_recipe(c: Dict[str, Any]) -> str:
    by = (c.get("measured") or {}).get("by_recipe") or {}
    if len(by) < 2:
        return ""
    return " (mixed recipe)" if "mixed" in by else " (hard-only recipe)" if "hard-only" in by else ""


def _c1_fits(k_star: Dict[str, Any], fit: Dict[str, Any]) -> str:
    """k* intervals by depth and both fits' chi2 (C1's rule of 2026-12-07)."""
    ks = ", ".join(f"{lo}" if lo == hi else f"{lo}-{hi if hi is not None else '>'}" for lo, hi in k_star.values())
    g, lin = fit.get("geometric"), fit.get("linear")
    fits = "" if not g else f"; chi2 geometric {g['chi2']:.1f} (x{g['factor']:.2f}/layer), linear {lin['chi2']:.1f}"
    return f"k* at L = {_depth_range(k_star)}: {ks}{fits}"


def claim_numbers(c: Dict[str, Any]) -> str:
    """The numbers that decide a claim's verdict, in a few words (from its ``measured``); "—" when the
    claim was not judged, and a pointer to the evidence when its numbers have an unknown shape."""
    m = c.get("measured") or {}
    if not m:
        return "—"
    try:
        cid = c["id"]
        if cid == "C1":
            return f"{_c1_fits(m['k_star'], m['rule'])} ({m['train_steps']} steps)"
        if cid.startswith("C1,"):
            parts = [f"eval mode: {_c1_fits(m['eval_mode']['k_star'], m['eval_mode'])}"]
            if m.get("errors_json"):
                parts.append(f"errors.json: {_c1_fits(m['errors_json']['k_star'], m['errors_json'])}")
            return "; ".join(parts)
        if cid.startswith("C1 looped"):
            return "; ".join(f"L={d}: mean error {r['looped_mean']:.3f} vs {r['plain_mean']:.3f}"
                             for d, r in m["depths"].items())
        if cid == "C2":
            return "; ".join(f"{name}: error L=1 {_err(m[key]['L1'])}, L=2 {_err(m[key]['L2'])}"
                             for key, name in (("icqa", "ICQA"), ("tm_onehot", "TM held-out (one-hot)")))
        if cid == "C3":
            ds = [L for L in ("L1", "L2", "L3", "L4") if L in m]
            return (f"ICTM error at L = {_depth_range(d[1:] for d in ds)}: {', '.join(_err(m[L]) for L in ds)}"
                    + _head_recipe(c))
        if cid == "C4":
            hs = sorted(m["sc"]["heads"], key=int)
            return f"median learning step at H = {', '.join(hs)}: " + "; ".join(
                f"{task.upper()} " + ", ".join(f"{m[task]['heads'][h]['median_learning_step']:.0f}" for h in hs)
                for task in ("sc", "icqa", "tm"))
        if cid == "C5":
            L = sorted(m["without"], key=int)[-1]
            return (f"D = 3 error at L = {L}: without per-hop targets {_err(m['without'][L])}, with "
                    f"{_err(m['with_curriculum'][L])}" + _head_recipe(c))
        if cid == "C6":
            ds = sorted((k for k in m if k.startswith("d=")), key=lambda k: int(k[2:]))
            return "smallest depth that learns (bound): " + "; ".join(
                f"D = {d[2:]}: {m[d]['smallest_depth'] or 'none'} ({m[d]['bound']})" for d in ds)
        if cid == "C7":
            ns = sorted((k for k in m if k.startswith("n=")), key=lambda k: int(k[2:]))
            return "smallest depth that learns (construction's): " + "; ".join(
                f"n = {n[2:]}: {m[n]['smallest_depth'] or 'none'} ({m[n]['construction_depth']})" for n in ns
            ) + _head_recipe(c)
    except (KeyError, TypeError, ValueError, IndexError):
        pass
    return "see the evidence"


def render_claims(root: pathlib.Path) -> str:
    """The trained cross-check's verdict per training claim C1-C7 (``results/crosscheck/claims.json``,
    written by ``depthcraft claims``): one line per claim (verdict, the deciding numbers, a link to its
    evidence in docs/crosscheck.md, :func:`render_claim_evidence`)."""
    if not (root / CLAIMS).is_file():
        return (f"No `{CLAIMS}` yet: the trained cross-check has not been summarised "
                "(see docs/crosscheck.md for the command).")
    rows = []
    for c in _claims_list(root):
        try:
            paper = re.sub(r" \([^)]*\)", "", c["source"])
            rows.append([c["id"], paper, f"**{c['verdict']}**", claim_numbers(c),
                         f"[evidence](@/docs/crosscheck.md#{claim_anchor(c['id'])})"])
        except KeyError as e:
            raise DocgenError(f"{CLAIMS}: claim {c.get('id', '?')} has no {e}") from None
    return table(["claim", "paper", "verdict", "deciding numbers", "details"], rows)


def render_claim_evidence(root: pathlib.Path) -> str:
    """docs/crosscheck.md: each claim's statement, verdict and full evidence (mean ± spread over seeds),
    and its results folder (``claims.json``); the README's claims table links here."""
    if not (root / CLAIMS).is_file():
        return f"No `{CLAIMS}` yet."
    out = []
    for c in _claims_list(root):
        try:
            folder = c["results"].rstrip("/")
            where = link(folder + "/") if (root / folder).is_dir() else "no results folder"
            out.append(f'<a id="{claim_anchor(c["id"])}"></a>**{c["id"]}** ({c["source"]}): {c["statement"]}. '
                       f"**{c['verdict']}** ({where}).\n\n{c['evidence']}")
        except KeyError as e:
            raise DocgenError(f"{CLAIMS}: claim {c.get('id', '?')} has no {e}") from None
    return "\n\n".join(out)


def _mean_std_cells(row: Dict[str, Any], ks) -> List[Optional[str]]:
    """One C1 table row's cells: "mean ± std" per k (None where k was not trained)."""
    return [f"{row[f'k={k}']['mean']:.3f} ± {row[f'k={k}']['std']:.3f}" if f"k={k}" in row else None for k in ks]


def render_claim_recipes(root: pathlib.Path) -> str:
    """docs/crosscheck.md: which training recipe (hard-only, mixed, curriculum; issue 25) gave which
    verdict, per claim (``claims.json``'s ``recipes``; "—" = that recipe was not run for the claim)."""
    from depthcraft.verify.crosscheck.claims import RECIPES

    if not (root / CLAIMS).is_file():
        return f"No `{CLAIMS}` yet."
    rows = []
    for c in load_json(root, CLAIMS).get("claims", []):
        rec = c.get("recipes") or {}
        rows.append([c["id"], c["statement"], *[rec.get(r, "—") for r in RECIPES], f"**{c['verdict']}**"])
    return table(["claim", "statement", *RECIPES, "verdict"], rows)


def render_c1_table(root: pathlib.Path) -> str:
    """docs/crosscheck.md: C1's k-hop error table (mean ± spread over seeds) per number of training
    steps (the c1 and c1_long sweeps, ``measured.by_steps``) beside SPEC §7a's (on each depth's
    first row)."""
    from depthcraft.verify.crosscheck.claims import PAPER_KHOP

    if not (root / CLAIMS).is_file():
        return f"No `{CLAIMS}` yet."
    c1 = next((c for c in load_json(root, CLAIMS).get("claims", []) if c.get("id") == "C1"), None)
    measured = (c1 or {}).get("measured", {})
    if not measured.get("errors"):
        state = (c1 or {}).get("verdict", "not run")
        return f"C1 {'has no measured errors' if c1 else 'is missing'} in `{CLAIMS}` ({state})."
    by_steps = measured["by_steps"]  # judge_c1 always writes it, one entry per sweep
    ks = sorted({int(k.split('=')[1]) for m in by_steps.values() for row in m["errors"].values() for k in row})
    paper_ks = sorted({k for row in PAPER_KHOP.values() for k in row})
    depths_all = sorted({int(L) for m in by_steps.values() for L in m["errors"]} | set(PAPER_KHOP))
    rows = []
    for L in depths_all:
        theirs = [PAPER_KHOP.get(L, {}).get(k) for k in paper_ks]
        paper = [None if x is None else f"{x:.3f}" for x in theirs]
        trained = [s for s in sorted(by_steps, key=int) if str(L) in by_steps[s]["errors"]] or [None]
        for i, steps in enumerate(trained):
            ours = _mean_std_cells(by_steps[steps]["errors"][str(L)] if steps else {}, ks)
            rows.append([L, steps, *ours, *(paper if i == 0 else [None] * len(paper_ks))])
    for steps in sorted(by_steps, key=int):  # the capacity controls: 2x heads and width, same recipe
        control = by_steps[steps].get("control") or {}
        for L in sorted(control, key=int):
            rows.append([f"{L} (control: 2x heads, 2x width)", steps, *_mean_std_cells(control[L], ks),
                         *[None] * len(paper_ks)])
    return table(["L", "steps", *[f"k={k} (ours)" for k in ks], *[f"k={k} (paper)" for k in paper_ks]], rows)


PUBLISHED = "results/crosscheck/published/results.json"


def render_published(root: pathlib.Path) -> str:
    """docs/crosscheck.md: the k-hop paper's published models (``depthcraft published``, issue 31): error
    by depth and k, ours (eval mode) beside their errors.json and our dropout-on re-measurement; the
    port's logit difference; C1's rule on them; the finite-sample runs; the alignment per layer."""
    if not (root / PUBLISHED).is_file():
        return f"No `{PUBLISHED}` yet (run `depthcraft published HOP_REPO`)."
    d = load_json(root, PUBLISHED)
    runs = d.get("runs") or {}
    show = ("1", "2", "4", "8", "16")
    rows = []
    fresh = sorted((r for r in runs if r.startswith("width4-depth") and "samples" not in r),
                   key=lambda r: runs[r]["depth"])
    for r in fresh:
        v = runs[r]
        rows.append([str(v["depth"]), "ours, no dropout", *(f"{v['errors'][k]:.3f}" for k in show)])
        if "dropout_error" in v:
            rows.append([str(v["depth"]), "ours, dropout on", *(f"{v['dropout_error'][k]:.3f}" for k in show)])
        rows.append([str(v["depth"]), "their errors.json", *(f"{v['theirs'][k]:.3f}" for k in show)])
    n = (d.get("protocol") or {}).get("inputs_per_k")
    at = d.get("max_abs_diff_at") or {}
    ex = d.get("explained_by_dropout") or {}
    port = d.get("port") or {}
    out = [f"{len(d.get('present', []))} of 25 runs present, {len(d.get('evaluated', []))} evaluated "
           f"({n} fresh inputs per k, k = 0..16); absent: {', '.join(d.get('absent', {})) or 'none'}"
           + (f"; pending: {', '.join(d['pending'])}" if d.get("pending") else "") + f" ({link(PUBLISHED)}).", ""]
    out.append(table(["L", "errors", *(f"k={k}" for k in show)], rows))
    out.append("")
    out.append(f"max |ours - theirs| = {d.get('max_abs_diff', 0):.3f} ({at.get('run')}, k={at.get('k')}); "
               f"{len(d.get('over_threshold', []))} (run, k) cells differ by more than {d.get('threshold')}; "
               f"with dropout on ({d.get('port_dropout_inputs_per_k') or '—'} inputs per k), {ex.get('within_noise', 0)} "
               f"of the {ex.get('checked', 0)} such cells measured agree with theirs within 3 sqrt(2) standard "
               f"errors of a 100-input estimate. "
               + (f"Port: max |logit difference| against Hugging Face's GPT2Model "
                  f"{port['max_abs_logit_diff']:.1e} over {port['runs_checked']} runs "
                  f"(torch {port.get('torch')}, transformers {port.get('transformers')})." if port else ""))
    c1 = d.get("c1") or {}
    crow = []
    for who, label in (("ours", f"published models, ours (no dropout, {c1.get('ours_inputs_per_k')}/k)"),
                       ("theirs", "their errors.json (100/k, binomial SE bound)")):
        c = c1.get(who)
        if not c or "geometric" not in c:
            continue
        g, lin = c.get("geometric") or {}, c.get("linear") or {}
        ks = ", ".join(f"{lo}" if lo == hi else f"{lo}-{hi if hi is not None else '>'}" for lo, hi in c["k_star"].values())
        crow.append([label, ks, f"{g.get('chi2', float('nan')):.2f} (b {g.get('b', float('nan')):.2f}, "
                                f"p {g.get('p', float('nan')):.3f})",
                     f"{lin.get('chi2', float('nan')):.2f} (p {lin.get('p', float('nan')):.3f})", c["verdict"]])
    if crow:
        out += ["", f"C1 (rule of {c1.get('rule_written')}: {c1.get('rule')}):", "",
                table(["models", "k* by L (interval)", "chi2 geometric", "chi2 linear", "verdict"], crow)]
    fs = d.get("finite_sample") or {}
    if fs.get("ours_mean_error"):
        sizes = sorted({k.split(" ")[0] for k in fs["ours_mean_error"]}, key=lambda t: int(t[2:]))
        depths = sorted({int(k.split("L=")[1]) for k in fs["ours_mean_error"]})
        frows = []
        for t in sizes:
            frows.append([t, "ours", *(f"{fs['ours_mean_error'][f'{t} L={L}']:.3f}" if f"{t} L={L}" in fs["ours_mean_error"]
                                       else "—" for L in depths)])
            frows.append([t, "theirs", *(f"{fs['theirs_mean_error'][f'{t} L={L}']:.3f}" if f"{t} L={L}" in fs.get("theirs_mean_error", {})
                                         else "—" for L in depths)])
        verdict = (fs.get("ours") or {}).get("verdict", "—")
        out += ["", f"Finite training sets (mean error over k = 1..16; smallest difference that matters "
                    f"{fs.get('min_difference', '—')}; rule of {fs.get('rule_written')}: "
                    f"**{verdict}**, {(fs.get('ours') or {}).get('reason', '')}):", "",
                table(["samples", "errors", *(f"L={L}" for L in depths)], frows)]
    al = d.get("alignment") or {}
    arows = []
    for r in fresh:
        if r in al:
            arows.append([str(runs[r]["depth"]), str(al[r]["reference_k"]),
                          *(f"{l['expected']} {l['alignment']:.2f}"
                            + ("" if l["best_ref"] == l["expected"] else f" (best: {l['best_ref']} {l['best_ref_alignment']:.2f})")
                            for l in al[r]["layers"])])
    if arows:
        width = max(len(a) for a in arows)
        arows = [a + [""] * (width - len(a)) for a in arows]
        out += ["", "Alignment per layer (fresh-sample runs, at k = 2^(L-2)): the doubling construction's map for "
                    "that layer and the best alignment of one of the layer's heads with it; in brackets, when "
                    "another construction map fits one of its heads better, that map (chance, uniform causal "
                    "attention: about 0.2):", "",
                table(["L", "k", *(f"layer {i}" for i in range(1, width - 1))], arows)]
    sch = d.get("schedules") or {}
    if sch.get("models"):
        srows = []
        for name, rec in sch["models"].items():
            srows.append([name, str(rec["depth"]), str(rec["k_ref"]),
                          " | ".join(",".join(x.replace("find", "f") for x in l["schedule"]) or "—"
                                     for l in rec["layers"]),  # cell() escapes the pipes
                          " ".join(f"{l['find']['m']} ({l['find']['mass']:.2f})" for l in rec["layers"])])
        cons = "; ".join(f"L={k}: " + " \\| ".join(x.replace("find", "f") for x in v)
                         for k, v in sch.get("construction", {}).items())
        out += ["", f"Hop schedules (`results/crosscheck/published/schedules.json`): per layer the references that a head puts "
                    f"at least {sch.get('match')} of its attention on (f<m> = find^m, bos = parking on position 0), "
                    "and the furthest find^m a matched head reads, with its mass. The construction: " + cons + ".", "",
                table(["model", "L", "k", "schedule per layer", "find m (mass) per layer"], srows)]
        for name, rec in sch["models"].items():
            if rec.get("source") == "authors" and name in fresh:
                cons = sch.get("construction", {}).get(str(rec["depth"]), [])
                diff = [f"layer {l['layer']} {', '.join(l['schedule']) or 'no matched head'} (construction: "
                        f"{cons[l['layer'] - 1] if l['layer'] - 1 < len(cons) else '—'})"
                        for l in rec["layers"] if (cons[l["layer"] - 1] if l["layer"] - 1 < len(cons) else None)
                        not in l["schedule"] or len(l["schedule"]) > 1]
                out += ["", f"Depth {rec['depth']} ({name}, k = {rec['k_ref']}): "
                        + ("; ".join(diff) if diff else "the construction's schedule") + "."]
    return "\n".join(out)


def render_claim_rules(root: pathlib.Path) -> str:
    """docs/crosscheck.md: each claim's verdict rule and the commands of its sweeps (``claims.json``)."""
    if not (root / CLAIMS).is_file():
        return f"No `{CLAIMS}` yet."
    doc = load_json(root, CLAIMS)
    lines = []
    for c in doc.get("claims", []):
        lines.append(f"**{c['id']}** ({c['source']}): {c['statement']}. *Rule:* {c.get('rule', '—')}")
        lines.append("")
        lines.append("```")
        lines += [s["command"] for s in c.get("sweeps", [])]
        lines.append("```")
        lines.append("")
    return "\n".join(lines).rstrip("\n")


def render_precision(root: pathlib.Path) -> str:
    """The precision study of ``khop_constant_width`` (``depthcraft precision``)."""
    rel = "results/precision/precision_khop_constant_width.json"
    d = load_json(root, rel)
    dtypes = list(d["dtypes"])
    by = {(p["value"], p["dtype"]): p for p in d["points"]}
    bits = {b["value"]: b["mantissa_bits"] for b in d.get("bits_needed") or []}
    rows = []
    for v in d["values"]:
        row = [v]
        for t in dtypes:
            p = by.get((v, t))
            row.append(None if p is None else ("exact" if p["exact"] else f"{p['failed']}/{p['inputs']} wrong"))
        row.append(bits.get(v))
        rows.append(row)
    fit = d.get("bits_fit") or {}
    fit_text = ""
    if fit:
        fit_text = (f"\n\nMantissa bits needed fit **{fit['slope_per_doubling']:.2f} log2 {d['over']} "
                    f"{signed(fit['intercept'])}** "
                    f"(least squares over {d['over']} = {min(d['values'])}..{max(d['values'])}). ")
        for t in dtypes:
            s = d["summary"][t]
            fit_text += (f"{t} ({s['mantissa_bits']} bits): exact up to {d['over']} = {s['largest_exact']}"
                         + (f", first failure at {s['first_failure']}" if s.get("first_failure") else "") + "; ")
        fit_text = fit_text.rstrip("; ") + "."
    head = f"`{d['construction']}` ({params_text(d['params'])}), {link(rel)}:\n\n"
    return head + table([d["over"], *dtypes, "mantissa bits needed"], rows) + fit_text


def render_dedupe(root: pathlib.Path) -> str:
    """d_model before and after the compile-time dedupe (``depthcraft dedupe --all``), the models it narrows."""
    rel = "results/dedupe/dedupe.json"
    d = load_json(root, rel)
    rows = d.get("rows") if isinstance(d, dict) else None
    if not rows:
        raise DocgenError(f"{rel} holds no rows ({{'rows': [...]}})")
    narrowed = [r for r in rows if r["saved"]]
    body = table(["construction", "parameters", "d_model before", "after", "saved", "stored once (dropped = kept)"],
                 [[f"`{r['construction']}`", params_text(r["params"]), r["d_model_before"], r["d_model_after"],
                   r["saved"], ", ".join(f"`{a}` = `{b}`" for a, b in r["merged"])] for r in narrowed])
    return (f"Of the {len(rows)} models of `verify --all`, the dedupe narrows {len(narrowed)} "
            f"({d['total_saved']} residual dimensions in all); depth and heads are unchanged in every row "
            f"({link(rel)}):\n\n" + body)


def render_architecture(root: pathlib.Path) -> str:
    """``docs/architecture.md``: every module, by layer, with the first line of its docstring."""
    from tools import architecture as arch

    files = arch.module_files()
    known = {m: p.read_text(encoding="utf-8") for m, p in files.items()}
    rows = []
    for number, name, _ in arch.LAYERS:
        for m in sorted(x for x in known if arch.layer(x) == number):
            job = re.sub(r":(?:mod|func|class|data|meth|attr):`~?([^`]+)`", r"`\1`", arch.summary_line(known[m]))
            rows.append([number, name, f"`{m}`", job.replace("``", "`")])
    return table(["layer", "", "module", "its job (first line of its docstring)"], rows)


# ---------------------------------------------------------------------------------------------
# The claims page (docs/theorems_vs_measurements.md): one table per paper, each row computed
# ---------------------------------------------------------------------------------------------

VERIFIED = "verified by construction"
DIFFERS = "**differs**"


def _sweep_row(root: pathlib.Path, rel: str, key: str, claim: str) -> List[str]:
    """A claim row from a committed sweep: verified when every report meets the bound and passes."""
    if not (root / rel).is_file():
        return [claim, "not run", f"`{rel}` is missing"]
    f = sweep_facts(reports(root, rel), key)
    ok = f["bound_ok"] and f["passed"] == f["total"]
    return [claim, VERIFIED if ok else DIFFERS, f"{_sweep_line(f, key)} ({link(rel)})"]


def _verify_all_row(root: pathlib.Path, construction: str, claim: str) -> List[str]:
    """A claim row from the ``verify --all`` reports of one construction."""
    rs = [r for r in reports(root, VERIFY_ALL) if r["construction"] == construction]
    if not rs:
        return [claim, "not run", f"no `{construction}` report in {VERIFY_ALL}"]
    ok = all(r["passed"] for r in rs)
    parts = []
    for r in rs:
        parts.append(f"{params_text(r['params'])}: L {bound_text(r, 'attn_layers')}, H {r['structure']['heads']}, "
                     f"{r['structure']['mlp_layers']} MLP layers, d_model {r['structure']['d_model']}, "
                     f"{'exact' if r.get('exact') else 'NOT exact'} on {inputs_text(r)}")
    return [claim, VERIFIED if ok else DIFFERS, "; ".join(parts) + f" ({link(VERIFY_ALL)})"]


def _training_rows(root: pathlib.Path, ids: Sequence[str]) -> List[List[str]]:
    """Rows for training claims from ``claims.json`` (a 'not run' row when it is missing)."""
    if not (root / CLAIMS).is_file():
        return [[f"{i} (training)", "not run", f"`{CLAIMS}` is missing"] for i in ids]
    by_id = {c.get("id"): c for c in load_json(root, CLAIMS).get("claims", [])}
    rows = []
    for i in ids:
        c = by_id.get(i)
        rows.append([f"{i} (training): {c['statement']}", f"{c['verdict']} (trained)", c["evidence"]] if c
                    else [f"{i} (training)", "not run", f"no claim {i} in {CLAIMS}"])
    return rows


def render_theorems_sanford(root: pathlib.Path) -> str:
    """Sanford, Hsu & Telgarsky (ICML 2024): k-hop induction heads."""
    from depthcraft.verify.tasks.khop import hop_k

    example = "baebcabebdea"
    x = [[ord(ch) - ord("a") for ch in example]]
    h1, h2 = (chr(int(hop_k(x, k)[0][-1]) + ord("a")) for k in (1, 2))
    prec = "results/precision/precision_khop_constant_width.json"
    if (root / prec).is_file():
        d = load_json(root, prec)
        fit = d["bits_fit"]
        bits = ", ".join(f"{b['mantissa_bits']} (n={b['value']})" for b in d["bits_needed"])
        prec_row = ["Thm 4.2 assumes Θ(log N) bits of precision", "measured",
                    f"`khop_constant_width` needs {bits} mantissa bits; fit {fit['slope_per_doubling']:.2f} log2 n "
                    f"{signed(fit['intercept'])} ({link(prec)})"]
    else:
        prec_row = ["Thm 4.2 assumes Θ(log N) bits of precision", "not run", f"`{prec}` is missing"]
    rows = [
        ["Def. 4.1 worked example: in `baebcabebdea`, hop_1 at the last position is b and hop_2 is c",
         "verified (reference)" if (h1, h2) == ("b", "c") else DIFFERS,
         f"the task's reference gives hop_1 = {h1}, hop_2 = {h2}"],
        _sweep_row(root, "results/khop_floor/n64.json", "k",
                   "Thm 4.2: hop_k with L = floor(log2 k)+2 layers, one head per layer (`khop_floor`)"),
        _sweep_row(root, "results/khop/khop_doubling_n100_k1-16.json", "k",
                   "Thm 4.2's pointer-doubling proof as written reaches ceil(log2 k)+2 layers (`khop_doubling`)"),
        _sweep_row(root, "results/khop_constant_width/k4.json", "n",
                   "Thm 4.2: width independent of N, at ceil(log2 k)+2 layers (`khop_constant_width`; "
                   "open at floor depth)"),
        prec_row,
        ["Lower bound: Ω(log k) layers under the 1-vs-2-cycles conjecture", "not testable here",
         "a statement about every transformer; training below is empirical evidence only"],
    ]
    rows += _training_rows(root, ["C1"])
    return table(["claim", "status", "what we measured"], rows)


def render_theorems_chen_zou(root: pathlib.Path) -> str:
    """Chen & Zou (ICML 2024): depth for memorisation, reasoning, generalisation (attention-only)."""
    rows = [
        _verify_all_row(root, "sc_memorize", "SC (memorisation): 1 attention layer suffices given enough heads"),
        _verify_all_row(root, "icqa_copy_match", "ICQA (reasoning): 2 layers (copy, then match) suffice"),
        _verify_all_row(root, "tm_parse_map", "TM (generalisation): 2 layers (parse, then map) suffice, "
                                              "for every token, seen or not"),
        _verify_all_row(root, "ictm_parse_copy_match", "ICTM (contextual generalisation): 3 layers "
                                                       "(parse, copy, match) suffice"),
    ]
    rows += _training_rows(root, ["C2", "C3", "C4"])
    return table(["claim", "status", "what we measured"], rows)


#: What ``scripts/retrieval_depth.py`` writes from the retrieval_tripling sweeps (results/retrieval_tripling/COMMAND).
TRIPLING_SUMMARY = "results/retrieval_tripling/summary.json"


def _tripling_rows(root: pathlib.Path) -> List[List[str]]:
    """Claim rows for ``retrieval_tripling``: the D = 1..64 sweep and the exhaustive checks."""
    claim = ("A matching construction: `retrieval_tripling`, L = ceil(log_3(4D+1)) = ceil(log_3(2D)) + c "
             "with c in {0, 1}, 2 heads per layer")
    if not (root / TRIPLING_SUMMARY).is_file():
        return [[claim, "not run", f"`{TRIPLING_SUMMARY}` is missing: run `results/retrieval_tripling/COMMAND`"]]
    s = load_json(root, TRIPLING_SUMMARY)
    rows = s["rows"]
    ok = s["all_passed"] and all(r["bound_ok"] for r in rows)
    ds = [r["d"] for r in rows]
    line = (f"d = {runs(ds)} (distractors = 2): {sum(r['passed'] for r in rows)}/{len(rows)} pass, L >= bound at "
            f"every d; c = 0 at d = {runs(s['c_zero']) or 'none'}, c = 1 at d = {runs(s['c_one']) or 'none'}; "
            f"H = {runs([r['heads'] for r in rows])}; d_model {min(r['d_model'] for r in rows)}.."
            f"{max(r['d_model'] for r in rows)}"
            + (f"; not measured: d = {runs(s['missing'])}" if s["missing"] else "")
            + f" ({link(TRIPLING_SUMMARY)})")
    out = [[claim, VERIFIED if ok else DIFFERS, line]]
    ex = s.get("exhaustive") or []
    if ex:
        parts = [f"{params_text(e['params'])}: {count(e['inputs'])} inputs, {'exact' if e['exact'] else 'NOT exact'}"
                 for e in ex]
        out.append(["`retrieval_tripling` on every input at small D", VERIFIED if all(e["passed"] for e in ex)
                    else DIFFERS, "; ".join(parts) + f" ({link(TRIPLING_SUMMARY)})"])
    return out


def render_retrieval_tripling(root: pathlib.Path) -> str:
    """retrieval_tripling against the lower bound and retrieval_doubling, D = 1..64, runs of D with equal depths."""
    if not (root / TRIPLING_SUMMARY).is_file():
        return f"`{TRIPLING_SUMMARY}` is missing: run `results/retrieval_tripling/COMMAND`."
    rows = load_json(root, TRIPLING_SUMMARY)["rows"]
    groups: List[List[Dict[str, Any]]] = []
    for r in rows:
        key = (r["bound"], r["attn_layers"], r["doubling_attn_layers"])
        if groups and (groups[-1][-1]["bound"], groups[-1][-1]["attn_layers"],
                       groups[-1][-1]["doubling_attn_layers"]) == key and groups[-1][-1]["d"] + 1 == r["d"]:
            groups[-1].append(r)
        else:
            groups.append([r])
    body = []
    for g in groups:
        body.append([runs([r["d"] for r in g]), g[0]["bound"], g[0]["attn_layers"], g[0]["c"],
                     g[0]["doubling_attn_layers"], runs([r["heads"] for r in g]),
                     runs([r["mlp_layers"] for r in g]),
                     runs([min(r["d_model"] for r in g)]) if len(g) == 1 else
                     f"{min(r['d_model'] for r in g)}..{max(r['d_model'] for r in g)}",
                     f"{sum(r['passed'] for r in g)}/{len(g)}"])
    return table(["D", "bound ceil(log_3 2D)", "tripling L", "c", "doubling L (measured, D <= 32)", "H", "MLP layers",
                  "d_model", "pass"], body)


def render_theorems_musat(root: pathlib.Path) -> str:
    """Mușat (ICLR 2025): D-step retrieval needs at least ceil(log_3 2D) layers."""
    rows = [
        _sweep_row(root, "results/retrieval/d1-32.json", "d",
                   "At least ceil(log_3(2D)) layers are needed; pointer doubling over facts "
                   "(`retrieval_doubling`) meets it from above"),
    ]
    rows += _tripling_rows(root)
    rows += _training_rows(root, ["C5", "C6"])
    return table(["claim", "status", "what we measured"], rows)


RUNTIME = "results/performance/runtime.json"
#: The benchmark table of issue 12 (``benchmarks/runtime_speed.py --json``).
BENCHMARK = "results/performance/benchmark.json"
TRAIN_SPEED = "results/performance/train_speed.json"
VERIFY_TARGETS = "results/performance/verify_targets.json"
VERIFY_TARGETS_BEFORE = "results/performance/verify_targets_before.json"


def _case_text(case: Mapping[str, Any]) -> str:
    if case["construction"] == "--all":
        return "`verify --all`"
    return f"`{case['construction']}` {params_text(case['params'])}, {case['samples']} samples"


def _load_text(case: Optional[Mapping[str, Any]]) -> Optional[str]:
    """The 1-minute load average before and after a case (``"2.1 -> 3.4"``), when recorded."""
    if case is None or "load_1min_before" not in case:
        return None
    return f"{case['load_1min_before']:.1f} -> {case['load_1min_after']:.1f}"


def _run_text(case: Optional[Mapping[str, Any]]) -> Optional[str]:
    """``"47.1 s, 1,003 MiB"``; ``"> 300 s (stopped), ..."``; a failed run names its exit status."""
    if case is None:
        return None
    wall = f"> {case['wall_s']:.0f} s (stopped)" if case["timed_out"] else f"{case['wall_s']:.1f} s"
    text = f"{wall}, {count(case['peak_rss_mib'])} MiB"
    if not case["timed_out"] and (case["exit"] != 0 or not case["passed"]):
        text += f", exit {case['exit']}" + ("" if case["passed"] else ", not passed")
    return text


def render_verify_targets(root: pathlib.Path) -> str:
    """docs/performance.md: wall time and peak RSS of ``depthcraft verify`` per issue-12 case, before and after."""
    after = load_json(root, VERIFY_TARGETS)
    before_doc = load_json(root, VERIFY_TARGETS_BEFORE) if (root / VERIFY_TARGETS_BEFORE).is_file() else None
    key = (lambda c: (c["construction"], json.dumps(c["params"], sort_keys=True), c["samples"]))
    before = {key(c): c for c in (before_doc or {}).get("cases", [])}
    rows = []
    for c in after["cases"]:
        target = " ".join(filter(None, [f"< {c['target_wall_s']} s" if c.get("target_wall_s") else "",
                                        f"< {c['target_rss_gib']} GiB" if c.get("target_rss_gib") else ""]))
        met = None
        if target:
            met = (not c["timed_out"] and c["exit"] == 0 and
                   (not c.get("target_wall_s") or c["wall_s"] < c["target_wall_s"]) and
                   (not c.get("target_rss_gib") or c["peak_rss_mib"] < c["target_rss_gib"] * 1024))
            met = "met" if met else "**not met**"
        before_cell = [] if before_doc is None else [_run_text(before.get(key(c)))]
        rows.append([_case_text(c), *before_cell, _run_text(c), _load_text(c), target or None, met])
    src = link(VERIFY_TARGETS) + ("" if before_doc is None else f", before: {link(VERIFY_TARGETS_BEFORE)}")
    head = (f"`depthcraft verify` wall time and peak RSS, one process per case, stopped after "
            f"{after['timeout_s']:.0f} s ({after['cpus']} CPUs, a shared machine; load: the 1-minute load "
            f"average before and after the case), {src}:\n\n")
    return head + table(["case", *([] if before_doc is None else ["before"]), "wall, peak RSS", "load", "target", ""],
                        rows)


EXHAUSTIVE = "results/performance/exhaustive.json"
EXHAUSTIVE_REPORT = "results/performance/exhaustive_n12.json"


def render_exhaustive(root: pathlib.Path) -> str:
    """docs/performance.md: wall time, inputs/s and peak RSS of the streamed exhaustive check per n."""
    d = load_json(root, EXHAUSTIVE)
    rows = []
    for r in d["runs"]:
        rows.append([r["n"], count(r["exhaustive_inputs"]), "yes" if r["exhaustive_exact"] else "**no**",
                     f"{r['wall_s']:.1f} s", f"{r['inputs_per_s']:,}", f"{count(r['peak_rss_mib'])} MiB",
                     r["cpu_percent"], f"{r['load_before'][0]:.1f} / {r['load_after'][0]:.1f}"])
    first = d["runs"][0]
    head = (f"`depthcraft verify khop_doubling -p k={first['k']} -p vocab={first['vocab']} -p n=N --exhaustive` "
            f"under `/usr/bin/time -v`, one process per n, the whole command (build, every check, ablation) "
            f"({d['cpus']} CPUs, a shared machine: the 1-minute load average before / after each run is "
            f"beside it), {link(EXHAUSTIVE)}")
    big = [r for r in d["runs"] if r["n"] == 12]
    if (root / EXHAUSTIVE_REPORT).is_file():
        head += f"; the n = 12 report: {link(EXHAUSTIVE_REPORT)}"
    tail = ""
    if big:
        met = big[-1]["wall_s"] < d["target_wall_s"]
        tail = (f"\n\nIssue 12's target, n = 12 within {d['target_wall_s']} s: "
                f"{'met' if met else '**not met**'} ({big[-1]['wall_s']:.1f} s).\n")
    return head + ":\n\n" + table(["n", "inputs", "exact", "wall", "inputs/s", "peak RSS", "CPU", "load"],
                                    rows) + tail


def _ratio(x: Optional[float], base: Optional[float]) -> Optional[str]:
    return None if x is None or not base else f"{x / base:.2f}x"


def _rate_text(case: Mapping[str, Any], impl: str) -> Optional[str]:
    """``"1,234/s (batch 16)"``, or why the implementation was not run."""
    rate = case["rates"].get(impl)
    if rate is None:
        why = case.get("not_run", {}).get(impl)
        return f"— ({why})" if why else "—"
    batch = case.get("best_batch", {}).get(impl)
    text = f"{rate:,.0f}/s" if rate >= 100 else f"{rate:,.2f}/s" if rate >= 1 else f"{rate:.3g}/s"
    return text + (f" (batch {batch})" if batch else "")


def _x(x: Optional[float], base: Optional[float]) -> Optional[str]:
    if x is None or not base:
        return "—"
    r = x / base
    return f"{r:,.0f}x" if r >= 100 else f"{r:.2f}x" if r >= 0.01 else f"{r:.1e}x"


def render_runtime(root: pathlib.Path) -> str:
    """docs/performance.md and README: inputs/s of jit(tracr), the dense runtime and the planned one, per batch."""
    d = load_json(root, RUNTIME)
    rows = []
    for size in d["sizes"]:
        label = f"k={size['k']} n={size['n']} (d_model {size['d_model']})"
        for r in size["rows"]:
            if "skipped" in r:
                rows.append([label, r["batch"], "skipped: " + r["skipped"], None, None, None, None])
                continue
            base = r["jit(tracr)"]
            rows.append([label, r["batch"], f"{base:,.1f}", f"{r['dense']:,.1f}", f"{r['plan']:,.1f}",
                         _ratio(r["dense"], base), _ratio(r["plan"], base)])
        best = size["best"]
        if "jit(tracr)" in best:
            base = best["jit(tracr)"][0]
            rows.append([label, "best", *(f"{best[i][0]:,.1f} (at {best[i][1]})" if i in best else None
                                          for i in ("jit(tracr)", "dense", "plan")),
                         _ratio(best.get("dense", [None])[0], base), _ratio(best.get("plan", [None])[0], base)])
    head = (f"`{d['construction']}` (vocab {d['vocab']}), inputs per second on the same compiled weights in one "
            f"process ({d['cpus']} CPUs, a shared machine; read the ratios), {link(RUNTIME)}:\n\n")
    return head + table(["size", "batch", "jit(tracr)", "dense runtime", "planned runtime", "dense / jit",
                         "planned / jit"], rows)


def _cpus_pinned(d: Dict[str, Any]) -> Optional[int]:
    """The CPUs every benchmark process could use, when all were pinned to the same number (else None)."""
    usable = {r.get("cpus_usable") for r in d["runs"]}
    return usable.pop() if len(usable) == 1 and None not in usable else None


def _benchmark_cases(d: Dict[str, Any]) -> List[Dict[str, Any]]:
    """The benchmark's cases by construction, then n (the file appends them in the order they ran)."""
    return sorted(d["cases"], key=lambda c: (c["construction"], c["k"], c["n"]))


def render_benchmark(root: pathlib.Path) -> str:
    """docs/performance.md: sequences/s of tracr apply, jit(tracr), the runtime and the numpy reference per case."""
    d = load_json(root, BENCHMARK)
    rows = []
    for c in _benchmark_cases(d):
        rt, rates = c["rates"]["runtime"], c["rates"]
        mem = c.get("memory_mib", {})
        gf = c.get("gflops_per_s", {})
        rows.append([f"`{c['construction']}` k={c['k']} n={c['n']}", c["d_model"],
                     f"{c['flops_per_seq'] / 1e6:,.1f}",
                     *(_rate_text(c, i) for i in ("apply", "jit(tracr)", "runtime", "reference")),
                     _x(rt, rates.get("jit(tracr)")), _x(rt, rates.get("apply")), _x(rt, rates.get("reference")),
                     " / ".join(f"{mem[i]:,.1f}" if mem.get(i) is not None else "—" for i in ("jit(tracr)", "runtime")),
                     " / ".join(f"{gf[i]:,.2f}" if gf.get(i) is not None else "—" for i in ("jit(tracr)", "runtime")),
                     f"{c['matmul_gflops_per_s']:,.0f}", f"{c['load_1min']:.1f}"])
    peak = max(r["peak_rss_mib"] for r in d["runs"])
    pinned = _cpus_pinned(d)
    cpus = f"each pinned to {pinned} of {d['cpus']} CPUs" if pinned else f"{d['cpus']} CPUs"
    head = (f"Sequences per second on the same compiled weights, one process per chunk of cases ({cpus}, "
            f"a shared machine: read the ratios, measured in the same process; peak RSS of the benchmark "
            f"process {peak:,} MiB), {link(BENCHMARK)}. Memory: XLA's arguments + temporaries + outputs of "
            f"one call at the best batch; FLOPs on the live (restricted) rows; matmul: a float32 1024^3 "
            f"product's rate in the same process:\n\n")
    return head + table(["case", "d_model", "MFLOP/seq", "tracr apply", "jit(tracr)", "runtime", "numpy reference",
                         "runtime / jit", "runtime / apply", "runtime / reference", "MiB jit / runtime",
                         "GFLOP/s jit / runtime", "matmul GFLOP/s", "load"], rows)


def render_train_speed(root: pathlib.Path) -> str:
    """docs/performance.md: seed-steps per second of the training loop, the fast trainer and the grad-only ceiling."""
    d = load_json(root, TRAIN_SPEED)
    rates, spread = d["seed_steps_per_second"], d["all_timings"]
    what = {"loop": "one jitted step per call, one seed (the loop before issue 11)",
            "scan-numpy": f"scan over {d['chunk']} steps, {d['seeds']} seeds vmapped, numpy batches",
            "scan-jax": f"scan over {d['chunk']} steps, {d['seeds']} seeds vmapped, JAX sampler in the step",
            "grad-only": f"forward + backward alone, {d['seeds']} seeds vmapped, one batch on the device"}
    rows = [[k, what.get(k, ""), f"{rates[k]:,.1f}", f"{min(spread[k]):,.1f}-{max(spread[k]):,.1f}",
             _ratio(rates[k], rates["loop"])] for k in rates]
    m = d["model"]
    head = (f"k-hop cpu preset model at depth {d['depth']} (width {m['width']}, {m['heads']} heads, batch "
            f"{d['train']['batch']}), optimiser steps per second per seed, median of {d['repeats']} interleaved "
            f"timings in one process ({d['device']['cpu_count']} CPUs, load average "
            f"{d['load_average'][0]:.1f}), {link(TRAIN_SPEED)}:\n\n")
    return head + table(["trainer", "what", "seed-steps/s", "spread", "vs loop"], rows)


ABLATION = "results/performance/ablation.json"


def render_ablation(root: pathlib.Path) -> str:
    """docs/performance.md: the layer ablation's time from the embeddings (before) and from shared prefixes (after)."""
    rows = []
    for c in load_json(root, ABLATION):
        rows.append([f"`{c['construction']}` {params_text(c['params'])}", c["d_model"], c["attn_layers"], c["inputs"],
                     f"{c['old_first_s']:.1f} s / {c['old_s']:.1f} s", f"{c['new_first_s']:.1f} s / {c['new_s']:.1f} s",
                     _x(c["old_s"], c["new_s"]), len(c.get("new_all_s", [c["new_s"]])),
                     "yes" if c["same_result"] else "**no**", f"{c['load_1min']:.1f}"])
    return (f"Layer ablation of `depthcraft verify` (every attention layer removed in turn) on the same inputs, "
            f"first run (compiling, no compilation cache) / compiled run (the fastest of the compiled runs, "
            f"interleaved old / new), one process per case (2 CPUs, a shared machine), {link(ABLATION)}:\n\n" +
            table(["case", "d_model", "attention layers", "inputs", "from the embeddings", "from shared prefixes",
                   "speed-up (compiled)", "compiled runs", "same result", "load"], rows))


COST_MODEL = "results/performance/cost_model.json"


def render_cost_model(root: pathlib.Path) -> str:
    """docs/cost.md: the cost model's estimate against measured peak RSS and CPU time, per parameter set."""
    d = load_json(root, COST_MODEL)
    rows = []
    for r in d["rows"]:
        rows.append([f"`{r['construction']}` {params_text(r['params']) or '(defaults)'}" +
                     (" `--certify`" if r["certify"] else ""), r["split"],
                     f"{r['d_model_est']:,} / {r['d_model']:,}" if r["d_model"] else f"{r['d_model_est']:,} / —",
                     f"{r['rss_est'] / 1e6:,.0f} / {r['rss'] / 1e6:,.0f} MB", f"{r['rss_ratio']:.2f}",
                     f"{r['seconds_est']:.1f} / {r['seconds']:.1f} s", f"{r['seconds_ratio']:.2f}"])
    s = d["summary"]
    head = (f"Estimate / measured per parameter set ({len(d['rows'])} rows; `depthcraft verify` in a fresh process, "
            f"peak RSS and CPU time), {link(COST_MODEL)}. Within 2x: fit rows {s['fit']['rss_within_2x']}/"
            f"{s['fit']['rows']} (memory), {s['fit']['seconds_within_2x']}/{s['fit']['rows']} (time); test rows "
            f"{s['test']['rss_within_2x']}/{s['test']['rows']}, {s['test']['seconds_within_2x']}/{s['test']['rows']}; "
            f"external {s['external']['rss_within_2x']}/{s['external']['rows']}, "
            f"{s['external']['seconds_within_2x']}/{s['external']['rows']}.\n\n")
    return head + table(["case", "rows", "d_model", "peak RSS", "ratio", "CPU time", "ratio"], rows)


SPARSE_SCORES = "results/performance/sparse_scores.json"


def render_sparse_scores(root: pathlib.Path) -> str:
    """docs/performance.md: the forward with dense attention scores (before) and scores by gathers (after)."""
    d = load_json(root, SPARSE_SCORES)
    rows = []
    for c in d["cases"]:
        rate = c["seq_per_s"]
        rows.append([f"`{c['construction']}` k={c['k']} n={c['n']}", c["d_model"], c["batch"],
                     f"{len(c['gathered_layers'])} of {c['attn_layers']}",
                     f"{rate['before']:,.2f}/s", f"{rate['after']:,.2f}/s", _x(rate["after"], rate["before"]),
                     "yes" if c["same_logits_bits"] else "**no**", f"{c['load_1min']:.1f}"])
    return ("Forward passes per second on the same weights and batch (the checks' batch size), planned without "
            "(before) and with (after) the gathered scores, best of the interleaved timings, one process "
            f"({d['cpus']} CPU, a shared machine), {link(SPARSE_SCORES)}:\n\n" +
            table(["case", "d_model", "batch", "layers gathered", "before", "after", "speed-up",
                   "logits bit-identical", "load"], rows))


def render_benchmark_summary(root: pathlib.Path) -> str:
    """README: per case, the runtime's sequences/s at its best batch and its ratio to jit(tracr) and tracr apply."""
    d = load_json(root, BENCHMARK)
    rows = []
    for c in _benchmark_cases(d):
        rt, rates = c["rates"]["runtime"], c["rates"]
        rows.append([f"`{c['construction']}` k={c['k']} n={c['n']}", c["d_model"], _rate_text(c, "runtime"),
                     _x(rt, rates.get("jit(tracr)")), _x(rt, rates.get("apply"))])
    pinned = _cpus_pinned(d)
    cpus = f"pinned to {pinned} of {d['cpus']} CPUs" if pinned else f"{d['cpus']} CPUs"
    return ("Each at its best batch, same weights, one process "
            f"({cpus}; details: [docs/performance.md](@/docs/performance.md)):\n\n" +
            table(["case", "d_model", "runtime", "vs jit(tracr)", "vs tracr apply"], rows))


VERIFY_SIZES = "results/performance/verify_sizes.json"


def _probe_text(p: Mapping[str, Any], limit_s: float) -> str:
    """``"47.1 s, 1,003 MiB"``; a probe stopped at the limit: ``"> 300 s, 2,048 MiB"``."""
    wall = f"> {limit_s:.0f} s" if p["outcome"] == "timeout" else f"{p['wall_s']:.1f} s"
    return f"{wall}, {count(p['peak_rss_mib'])} MiB"


def _size_search_cells(s: Mapping[str, Any], limit_s: float) -> List[Optional[str]]:
    """One search's last three cells: largest verified size, its wall and peak RSS, first size not verified."""
    probes, key = s["probes"], s["size_param"]
    ok = [p for p in probes if p["outcome"] == "verified"]
    bad = next((p for p in probes if p["outcome"] != "verified"), None)
    best = max(ok, key=lambda p: p["size"]) if ok else None
    if best is None:
        largest = f"none (smallest probed: {key}={probes[0]['size']})"
    else:
        largest = f"{key}={best['size']}" + (f" (d_model {best['d_model']})" if "d_model" in best else "")
    if bad is not None:
        why = {"timeout": f"timeout, {_probe_text(bad, limit_s)}"}.get(
            bad["outcome"], f"{bad['outcome']}: {bad['message']}" if bad["message"] else bad["outcome"])
        first = f"{key}={bad['size']} ({why})"
    else:
        left = [z for z in s["sizes"] if z not in {p["size"] for p in probes}]
        first = f"not probed: {key}={left[0]}" if left else f"none up to {key}={s['sizes'][-1]} (last size searched)"
    return [largest, _probe_text(best, limit_s) if best else None, first]


def render_verify_sizes(root: pathlib.Path) -> str:
    """README and docs/performance.md: per construction, the largest size ``depthcraft verify`` passes within 5 minutes."""
    d = load_json(root, VERIFY_SIZES)
    limit = d["timeout_s"]
    rows = []
    for name in d.get("planned", list(d["searches"])):
        s = d["searches"].get(name)
        if s is None or not s["probes"]:
            rows.append([f"`{name}`", None, None, "not searched", None, None])
            continue
        rows.append([f"`{name}`", params_text(s["fixed"]) or "defaults", s["size_param"],
                     *_size_search_cells(s, limit)])
    probes = [p for s in d["searches"].values() for p in s["probes"]]
    loads = [x for p in probes for x in (p["load_1min_before"], p["load_1min_after"])]
    cores = sorted({tuple(r["cpus_usable"]) for r in d["runs"]})
    pinned = (f"pinned to core {', '.join(str(c) for c in cores[0])} of {d['runs'][0]['cpus']}"
              if len(cores) == 1 and len(cores[0]) < d["runs"][0]["cpus"] else f"{d['runs'][0]['cpus']} CPUs")
    load = f"; 1-minute load average {min(loads):.1f}-{max(loads):.1f}" if loads else ""
    head = (f"`depthcraft verify NAME -p SIZE=S` with its default checks (random inputs, edge cases, hypothesis "
            f"examples, layer ablation), one fresh process per size with an empty compilation cache, build included, "
            f"stopped after {limit:.0f} s; sizes doubled until one is not verified ({pinned}, a shared "
            f"machine{load}; every probe: {link(VERIFY_SIZES)}):\n\n")
    return head + table(["construction", "fixed parameters", "size", f"largest verified within {limit / 60:g} min",
                         "wall, peak RSS there", "first size not verified"], rows)


TEST_SUITE = "results/performance/test_suite.json"
#: benchmarks/suite_cost.py's modes, in the order shown, with what each means.
_SUITE_MODES = {
    "workers-cold": "`pytest -q`, empty cache folder (a fresh machine, as CI)",
    "workers-warm": "`pytest -q` again, with the cache folder the run above filled",
    "workers": "`pytest -q` (2 xdist workers, the default)",
    "one-process": "`pytest -q -n 0` (one process)",
    "one-process-keep-caches": "`pytest -q -n 0`, no `release_memory()` between modules (before)",
}


def render_test_suite(root: pathlib.Path) -> str:
    """docs/performance.md: wall time and peak memory of the default test suite per mode."""
    d = load_json(root, TEST_SUITE)
    rows = []
    for mode in [m for m in _SUITE_MODES if any(r["mode"] == m for r in d["rows"])]:
        r = next(r for r in d["rows"] if r["mode"] == mode)
        c = r["counts"]
        result = ", ".join(f"{c[k]} {k}" for k in ("passed", "failed", "errors", "skipped") if c.get(k))
        cpus = (f"{len(r['cpus_usable'])} of {r['cpus']}" if len(r["cpus_usable"]) < r["cpus"] else str(r["cpus"]))
        ok = r["exit"] == 0 and r["wall_s"] < d["target_s"] and r["peak_tree_rss_mib"] < d["target_gib"] * 1024
        comp = r.get("compile")
        compiled = (f"{count(int(comp['compilations'] - comp['cache_hits']))} compiled, "
                    f"{count(int(comp['cache_hits']))} read from the cache; backend {comp['backend_compile_s']:.0f} s, "
                    f"trace and lowering {comp['trace_s'] + comp['lower_s']:.0f} s" if comp else "not recorded")
        cache_state = ("empty" if r.get("cache") == "cold" else f"{count(r['cache_entries_before'])} entries"
                       if r.get("cache") in ("as found", "warm") else "not recorded")
        rows.append([_SUITE_MODES[mode], f"{r['wall_s']:.1f} s", f"{count(r['peak_tree_rss_mib'])} MiB",
                     f"{count(r['peak_process_rss_mib'])} MiB", cache_state, compiled, result, cpus,
                     f"{r['load_1min_before']:.1f} -> {r['load_1min_after']:.1f}", r.get("commit") or "—",
                     "met" if ok else "**not met**"])
    head = (f"The default test suite (`slow` excluded) per way of running it: wall time, peak resident memory of "
            f"the whole process tree (pytest and its workers, sampled every 0.3 s) and of its largest process, "
            f"`python benchmarks/suite_cost.py`, [{TEST_SUITE}](@/{TEST_SUITE}) (target: under "
            f"{d['target_s'] / 60:g} minutes and {d['target_gib']:g} GB). *JAX cache* is the persistent "
            f"compilation cache the run started with; *XLA compilations* are those the test processes asked "
            f"for (CLI subprocesses not included), split into programs XLA compiled and programs read back from the "
            f"cache, with their seconds summed over the processes:\n\n")
    return head + table(["run", "wall", "peak RSS, all processes", "largest process", "JAX cache",
                         "XLA compilations", "tests", "CPUs", "load", "commit", "target"], rows)


RECHECK = "results/certify/recheck.json"
PLANTED = "results/certify/planted_bugs.json"


def render_certificates(root: pathlib.Path) -> str:
    """README: what the independent checker re-checked (``benchmarks/recheck.py``) and the planted-bug
    corpus (``benchmarks/planted_bugs.py``): counts per status, the largest certificate's times, and
    every row the checker did not confirm with its reason."""
    d = load_json(root, RECHECK)
    s = d["summary"]

    def counts(part: Mapping[str, Any]) -> str:
        return ", ".join(f"{v} {k}" for k, v in sorted(part["status"].items(), key=lambda kv: -kv[1]))

    big = max(d["rows"], key=lambda r: r.get("certify_seconds") or 0)
    out = [f"Re-checked by the independent checker (`{d['command']}`, {link(RECHECK)}):", "",
           f"* `verify --all --certify` rows: {s['verify_all']['certified']} of {s['verify_all']['rows']} certified; "
           f"of those, {counts(s['verify_all'])}.",
           f"* tracr's test programs the certifier certifies: {s['tracr']['rows']}; {counts(s['tracr'])}.",
           f"* the largest, `{big['name']}` {params_text(big['params'])}: the certifier {big['certify_seconds']:g} s, "
           f"the checker {big['check_seconds']:g} s, a {big['bytes']:,}-byte certificate."]
    if (root / PLANTED).is_file():
        pb = load_json(root, PLANTED)["summary"]
        out.append(f"* planted bugs ({link(PLANTED)}): {pb['refused_by_certifier']} of {pb['models']} wrong models "
                   f"refused by the certifier; {pb['forgeries_rejected_by_checker']} of {pb['forgeries']} forged "
                   f"certificates for them rejected by the checker.")
    rows = [[f"`{r['name']}`", params_text(r["params"]), r["route"], r["status"], r["why"] or ""]
            for r in d["rows"] if r["certified"] and r["status"] != "valid"]
    if rows:
        out += ["", "Certified rows the checker did not confirm (their `certified` stands on the certifier alone; "
                "the report's `independent_check` says so):", "",
                table(["construction / program", "parameters", "route", "checker", "why"], rows)]
    return "\n".join(out)


README_COMMANDS = "results/performance/readme_commands.json"


def _minutes(seconds: float) -> str:
    """``"4 min 07 s"`` (``"52 s"`` under a minute)."""
    s = int(round(seconds))
    return f"{s // 60} min {s % 60:02d} s" if s >= 60 else f"{s} s"


def render_readme_commands(root: pathlib.Path) -> str:
    """README's first screen: the two commands, each with the time it took from a fresh clone
    (``benchmarks/readme_commands.py``: fresh venv, empty cache; install and run timed apart)."""
    if not (root / README_COMMANDS).is_file():
        return ("```bash\npython3 -m venv .venv && . .venv/bin/activate && pip install -e . && depthcraft verify --all "
                "--certify\npython3 -m venv .venv && . .venv/bin/activate && pip install -e '.[test]' && pytest -q\n```\n\n"
                f"<sub>Not timed yet: `python benchmarks/readme_commands.py` writes {README_COMMANDS}.</sub>")
    d = load_json(root, README_COMMANDS)["commands"]
    what = {"main": "install, then verify and certify every construction at its defaults",
            "tests": "install, then run the tests (the default suite, `slow` excluded)"}
    lines = ["```bash"]
    for name in ("main", "tests"):
        c = d[name]
        result = c["run"]["last_line"].strip("= ")
        lines.append(f"# {what[name]}: measured on {c['cpus']} cores from a fresh clone with an empty cache, install "
                     f"{_minutes(c['install']['wall_s'])}, then {_minutes(c['run']['wall_s'])} ({result})")
        lines.append(c["readme_command"])
    lines.append("```")
    return "\n".join(lines) + (f"\n\n<sub>Times: `python benchmarks/readme_commands.py` "
                               f"([{README_COMMANDS}](@/{README_COMMANDS}), commit {d['tests']['commit']}).</sub>")


#: The connectivity sweeps (``results/graph_connectivity/COMMAND`` writes them, one file per chunk of n:
#: ``nA-B.json``), matched by this pattern under the root.
CONNECTIVITY_SWEEPS = "results/graph_connectivity/n*.json"
CONNECTIVITY_EXHAUSTIVE = "results/graph_connectivity/exhaustive_n2-5.json"


def _connectivity_files(root: pathlib.Path) -> List[str]:
    """The connectivity sweep files that exist (relative to the root), in order of their first n."""
    def first_n(path: pathlib.Path) -> Tuple[int, str]:
        m = re.match(r"n(\d+)", path.name)
        return (int(m.group(1)) if m else 0, path.name)
    return [path.relative_to(root).as_posix() for path in sorted(root.glob(CONNECTIVITY_SWEEPS), key=first_n)]


def _connectivity_links(root: pathlib.Path) -> str:
    return ", ".join(link(rel) for rel in _connectivity_files(root))


def _log2_ceil(n: int) -> int:
    """ceil(log2(n - 1)) for n >= 2 (0 at n = 2), in integers."""
    return max(0, (n - 2).bit_length())


def _connectivity_by_n(root: pathlib.Path) -> Dict[int, Dict[str, Any]]:
    """Per n: the sweep's reports (one per sampler) and the exhaustive report, when there is one."""
    by_n: Dict[int, Dict[str, Any]] = {}
    for r in [r for rel in _connectivity_files(root) for r in reports(root, rel)]:
        by_n.setdefault(r["params"]["n"], {"sweep": [], "exhaustive": None})["sweep"].append(r)
    if (root / CONNECTIVITY_EXHAUSTIVE).is_file():
        for r in reports(root, CONNECTIVITY_EXHAUSTIVE):
            by_n.setdefault(r["params"]["n"], {"sweep": [], "exhaustive": None})["exhaustive"] = r
    return by_n


def _connectivity_line(root: pathlib.Path) -> str:
    """One line on the connectivity sweep: n, L, c, H, d_model, reports passed, exhaustive sizes."""
    by_n = _connectivity_by_n(root)
    ns = sorted(by_n)
    rs = [r for d in by_n.values() for r in d["sweep"] + ([d["exhaustive"]] if d["exhaustive"] else [])]
    layers = [max(r["structure"]["attn_layers"] for r in by_n[n]["sweep"]) for n in ns]
    cs = sorted({r["structure"]["attn_layers"] - _log2_ceil(r["params"]["n"]) for r in rs})
    bounds_ok = all(b["ok"] for r in rs for b in (r.get("bound_checks") or {}).values())
    dm = [by_n[n]["sweep"][0]["structure"]["d_model"] for n in ns]
    ex = [n for n, d in by_n.items() if d["exhaustive"] and d["exhaustive"]["passed"]]
    return (f"n = {runs(ns)}: L = {', '.join(map(str, layers))} (= ceil(log2(n-1)) + c, c = {runs(cs)}; "
            f"{'within the registered bound at every n' if bounds_ok else 'bound NOT met everywhere'}); "
            f"H = {'/'.join(map(str, sorted({r['structure']['heads'] for r in rs})))}; d_model {min(dm)}..{max(dm)}; "
            f"{sum(r['passed'] for r in rs)}/{len(rs)} pass" + (f"; exhaustive for n = {runs(ex)}" if ex else ""))


def render_connectivity(root: pathlib.Path) -> str:
    """The claims page: L, the bound, c, H and d_model of ``graph_connectivity`` by n, with the checks."""
    if not _connectivity_files(root):
        return f"no `{CONNECTIVITY_SWEEPS}` report: run `results/graph_connectivity/COMMAND`."
    rows = []
    for n, d in sorted(_connectivity_by_n(root).items()):
        rs = d["sweep"] + ([d["exhaustive"]] if d["exhaustive"] else [])
        r0 = rs[0]
        layers = sorted({r["structure"]["attn_layers"] for r in rs})
        bound = (r0.get("bound_checks") or {}).get("attn_layers")
        samplers = [r["params"]["sampler"] for r in d["sweep"]]
        ok = [r["params"]["sampler"] for r in d["sweep"] if r["passed"]]
        ex = d["exhaustive"]
        att = min(r["min_margin"]["attention"] for r in rs if r["min_margin"]["attention"] is not None)
        gap = min(r["min_margin"]["output_gap"] for r in rs if r["min_margin"]["output_gap"] is not None)
        inputs = sum(sum(checked_inputs(r).values()) for r in rs)
        rows.append([n, "/".join(map(str, layers)), _log2_ceil(n), "/".join(str(x - _log2_ceil(n)) for x in layers),
                     bound["bound"] if bound else None, "/".join(map(str, sorted({r["structure"]["heads"] for r in rs}))),
                     r0["structure"]["mlp_layers"], r0["structure"]["d_model"],
                     f"{len(ok)}/{len(samplers)}" + ("" if len(ok) == len(samplers) else
                                                     f" (fails: {', '.join(sorted(set(samplers) - set(ok)))})"),
                     (f"{count(ex['checks']['exhaustive']['inputs'])} {'exact' if ex['passed'] else 'NOT exact'}"
                      if ex else None),
                     count(inputs), f"{att:.6f}", f"{gap:.3f}"])
    head = (f"`graph_connectivity` ({_connectivity_links(root)}"
            + (f", {link(CONNECTIVITY_EXHAUSTIVE)}" if (root / CONNECTIVITY_EXHAUSTIVE).is_file() else "")
            + "): L measured from the weights, log = ceil(log2(n-1)), c = L - log, the registered bound, "
              "H, MLP layers, d_model, the samplers (path, cycle, two_components, tree, er) whose report passes, "
              "the exhaustive check, every input checked for that n (random, edge, hypothesis, exhaustive), and "
              "the smallest margins: attention weight on the intended keys and the read-out gap.\n\n")
    return head + table(["n", "L", "log", "c", "bound", "H", "MLP", "d_model", "samplers", "exhaustive",
                         "inputs", "min attention", "min gap"], rows)


def render_theorems_connectivity(root: pathlib.Path) -> str:
    """Sanford, Hsu & Telgarsky (2024); Merrill & Sabharwal (2025): connectivity in log depth."""
    theorem_claim = ("Connectivity of n-vertex graphs (query s, t) in O(log n) layers (Sanford, Hsu & Telgarsky "
                     "2024; Θ(log n): Merrill & Sabharwal 2025)")
    construction_claim = ("`graph_connectivity`: repeated squaring of reachability, L = max(2, ceil(log2(n-1)) + 1), "
                          "one head per layer")
    if not _connectivity_files(root):
        missing = f"no `{CONNECTIVITY_SWEEPS}` report"
        theorem, construction = [theorem_claim, "not run", missing], [construction_claim, "not run", missing]
    else:
        by_n = _connectivity_by_n(root)
        rs = [r for d in by_n.values() for r in d["sweep"] + ([d["exhaustive"]] if d["exhaustive"] else [])]
        cs = sorted({r["structure"]["attn_layers"] - _log2_ceil(r["params"]["n"]) for r in rs})
        ok = all(r["passed"] for r in rs)
        theorem = [theorem_claim, VERIFIED if ok else DIFFERS,
                   "a log-depth construction is exact at every n checked (next row, table below)"]
        construction = [construction_claim, VERIFIED if ok and set(cs) <= {1, 2} else DIFFERS,
                        f"{_connectivity_line(root)} ({_connectivity_links(root)})"]
    rows = [theorem, construction,
            ["Lower bound: Ω(log n) layers (conditional, Merrill & Sabharwal 2025)", "not testable here",
             "a statement about every transformer; training (next row) probes it empirically"],
            *_training_rows(root, ["C7"])]
    return table(["claim", "status", "what we measured"], rows)


#: Build time and memory per build path (``benchmarks/largest_n.py --json``).
BUILD = "results/performance/build.json"


def render_build(root: pathlib.Path) -> str:
    """docs/performance.md: build seconds and peak RSS per n, tracr's assembly vs live rows (``largest_n.py``)."""
    d = load_json(root, BUILD)
    try:
        by = {(r["construction"], r["k"], r["n"], r["path"]): r for r in d["results"]}
        paths = list(d["paths"])
        cases = [tuple(c) for c in d["cases"]]
        machine = d["machine"]
    except (KeyError, TypeError) as e:
        raise DocgenError(f"{BUILD} is malformed (missing {e}); regenerate it with its COMMAND") from None

    def run(r: Optional[Mapping[str, Any]]) -> Optional[str]:
        if r is None:
            return None
        if "error" in r:
            return f"failed: {r['error']}"
        secs = r["seconds"]
        return f"{secs:.{2 if secs < 1 else 1}f} s, {r['peak_rss_mb']:,.0f} MB"

    def ratio(a: Optional[Mapping[str, Any]], b: Optional[Mapping[str, Any]], key: str) -> Optional[str]:
        if not a or not b or "error" in a or "error" in b:
            return None
        return f"{a[key] / b[key]:.1f}x"

    rows = []
    for name, k in cases:
        for n in d["n"]:
            got = {p: by.get((name, k, n, p)) for p in paths}
            if not any(got.values()):
                continue
            d_model = next((r["d_model"] for r in got.values() if r and "d_model" in r), None)
            rows.append([f"`{name}` k={k}", n, d_model, *(run(got[p]) for p in paths),
                         ratio(got["tracr"], got["tracr+proj"], "seconds"), ratio(got["tracr"], got["rows"], "seconds"),
                         ratio(got["tracr"], got["rows"], "peak_rss_mb")])
    head = (f"Build (compile) wall time and the build process's peak RSS (interpreter and JAX included), one "
            f"process per build, vocab 4; tracr's paths skipped where d_model grows with n above "
            f"n = {d['max_tracr_n']} ({machine['cpus']} CPUs, a shared machine, 1-minute load "
            f"{machine['load_1min_before']} before, {machine['load_1min_after']} after; read the ratios), "
            f"{link(BUILD)}:\n\n")
    return head + table(["construction", "n", "d_model", *paths, "time tracr / tracr+proj", "time tracr / rows",
                         "RSS tracr / rows"], rows)


def render_build_profile(root: pathlib.Path) -> str:
    """docs/performance.md: where one build's time goes per build path (cProfile, ``largest_n.py``)."""
    d = load_json(root, BUILD)
    profiles = d.get("profile") or []
    if not profiles:
        raise DocgenError(f"{BUILD} holds no profile (run benchmarks/largest_n.py with --profile-case)")
    first = profiles[0]
    labels = list(next((p["profile"] for p in profiles if "profile" in p), {}))
    rows = [["build, under the profiler", *(None if "error" in p else f"{p['seconds']:.1f}" for p in profiles)]]
    rows += [[label, *(None if "error" in p else f"{p['profile'][label]:.1f}" for p in profiles)] for label in labels]
    head = (f"Cumulative seconds under cProfile (which slows Python code) of one build of `{first['construction']}` "
            f"k={first['k']} n={first['n']} per path, {link(BUILD)}:\n\n")
    return head + table(["function", *(p["path"] for p in profiles)], rows)


RENDERERS: Dict[str, Callable[[pathlib.Path], str]] = {
    "status": render_status,
    "sweeps": render_sweeps,
    "claims": render_claims,
    "claim_evidence": render_claim_evidence,
    "claim_rules": render_claim_rules,
    "claim_recipes": render_claim_recipes,
    "c1_table": render_c1_table,
    "published": render_published,
    "precision": render_precision,
    "dedupe": render_dedupe,
    "architecture": render_architecture,
    "theorems_sanford": render_theorems_sanford,
    "theorems_chen_zou": render_theorems_chen_zou,
    "theorems_musat": render_theorems_musat,
    "retrieval_tripling": render_retrieval_tripling,
    "theorems_connectivity": render_theorems_connectivity,
    "connectivity": render_connectivity,
    "verify_targets": render_verify_targets,
    "exhaustive": render_exhaustive,
    "runtime": render_runtime,
    "benchmark": render_benchmark,
    "benchmark_summary": render_benchmark_summary,
    "verify_sizes": render_verify_sizes,
    "test_suite": render_test_suite,
    "readme_commands": render_readme_commands,
    "certificates": render_certificates,
    "certify_worked": render_certify_worked,
    "certify_scale": render_certify_scale,
    "certify_speed": render_certify_speed,
    "certify_symmetry": render_certify_symmetry,
    "ablation": render_ablation,
    "cost_model": render_cost_model,
    "sparse_scores": render_sparse_scores,
    "train_speed": render_train_speed,
    "build": render_build,
    "build_profile": render_build_profile,
}


# ---------------------------------------------------------------------------------------------
# Pages
# ---------------------------------------------------------------------------------------------


def pages(root: pathlib.Path) -> List[pathlib.Path]:
    """Markdown pages that hold generated blocks: README.md and docs/**/*.md."""
    candidates = [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
    return [p for p in candidates if p.is_file() and "<!-- BEGIN generated:" in p.read_text(encoding="utf-8")]


def regenerate(text: str, root: pathlib.Path, cache: Optional[Dict[str, str]] = None,
               page: Optional[pathlib.Path] = None) -> str:
    """``text`` (the page ``page``, by default at the root) with every generated block rendered anew.

    Links to files under the root are made relative to the page's folder.

    Raises:
        DocgenError: an unknown block name, or a results file a block needs is missing.
    """
    cache = {} if cache is None else cache
    depth = len((page or root / "README.md").resolve().parent.relative_to(root.resolve()).parts)
    prefix = "../" * depth

    def sub(m: "re.Match[str]") -> str:
        name = m.group("name")
        if name not in RENDERERS:
            raise DocgenError(f"unknown generated block {name!r}; known: {sorted(RENDERERS)}")
        if name not in cache:
            cache[name] = RENDERERS[name](root).rstrip("\n") + "\n"
        return m.group(1) + cache[name].replace("](@/", f"]({prefix}") + m.group(4)

    return BLOCK.sub(sub, text)


def run(root: pathlib.Path, check: bool = False) -> List[pathlib.Path]:
    """Regenerate every page (or, with ``check``, only compare); returns the pages that differ(ed)."""
    from depthcraft.constructions.files import write_text_atomic

    stale, cache = [], {}
    for page in pages(root):
        old = page.read_text(encoding="utf-8")
        new = regenerate(old, root, cache, page)
        if new != old:
            stale.append(page)
            if not check:
                write_text_atomic(str(page), new)
    return stale


def main(argv: Optional[List[str]] = None) -> int:
    """``python -m tools.docgen [--root DIR] [--check]``; exit 1 when ``--check`` finds stale pages."""
    import argparse

    ap = argparse.ArgumentParser(prog="depthcraft docs", description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=".", help="project root (holds README.md, docs/ and results/)")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page is stale")
    args = ap.parse_args(argv)
    root = pathlib.Path(args.root).resolve()
    try:
        stale = run(root, check=args.check)
    except DocgenError as e:
        print(f"depthcraft docs: error: {e}", file=sys.stderr)
        return 2
    for p in stale:
        print(f"{'stale' if args.check else 'updated'}: {p.relative_to(root)}")
    return 1 if (args.check and stale) else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())


__all__ = ["DocgenError", "RENDERERS", "pages", "regenerate", "run", "main", "table", "runs"]
