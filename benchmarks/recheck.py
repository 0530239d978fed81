"""Re-check every certificate with the independent checker (issue 39, Must show).

    python benchmarks/recheck.py [--json results/certify/recheck.json] [--big]

Rows: every ``depthcraft verify --all --certify`` row (each construction at its defaults, the
exhaustive route where ``verify --all`` uses it) and every program of tracr's corpus
(``tracr.compiler.test_cases.TEST_CASES``) that the certifier certifies. Per row, through the
public paths only: the certificate is issued (:func:`depthcraft.verify.certify.prove`, the
certifier's own proof plus the checker's derivation), written to a file, read back and checked by
:func:`depthcraft.checker.check` against the model as the checker reads it from its file bytes.
Recorded: the route, certified, the checker's status (valid / rejected / not proved by the
checker / not independently checked) and reason, the certificate file's size, the certifier's own
seconds (``certify_seconds``), the seconds to issue the certificate (the certifier and the checker's
derivation, ``issue_seconds``), the checker's seconds to re-check the file (``check_seconds``). ``--big`` adds khop_doubling k = 64,
n = 1024 (about 2 minutes and 1.5 GB). The summary counts each status.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
import warnings
from typing import Any, Dict, List


def _row(name: str, params: Dict[str, Any], model, task=None, p=None, exhaustive: bool = False) -> Dict[str, Any]:
    from depthcraft import checker
    from depthcraft.verify.certify import prove
    from depthcraft.verify.certify.certificate import checker_model
    from depthcraft.verify.verifier import certify_exhaustively

    t0 = time.perf_counter()
    kw = {} if task is None else {"atol": float(getattr(task, "atol", 1e-3)), "domain": task.domain(p),
                                  "precondition": task.domain_precondition(p)}
    cert = prove(model, **kw)
    if not cert.certified and exhaustive and task is not None:
        certify_exhaustively(cert, model, task, p)
    issue_s = time.perf_counter() - t0
    row: Dict[str, Any] = {"name": name, "params": params, "route": cert.route, "certified": cert.certified,
                           "certify_seconds": cert.proof.get("seconds"), "issue_seconds": round(issue_s, 2),
                           "bytes": None, "check_seconds": None}
    c = cert.check
    if cert.file is None or c is None:
        row.update(status="not independently checked" if c is None or c.status == "unsupported" else c.status,
                   why=None if c is None else c.failure)
        return row
    raw = checker.write("c.json.gz", cert.file)
    cm = checker_model(model)
    t1 = time.perf_counter()
    try:
        v = checker.check(checker.certificate.parse(raw), cm, model.program.nodes[model.program.sink])
        status, why = v.status, v.failure
    except checker.NotACertificate as e:
        status, why = "rejected", str(e)
    row.update(bytes=len(raw), check_seconds=round(time.perf_counter() - t1, 2),
               status={"unproved": "not proved by the checker", "unsupported": "not independently checked"}.get(
                   status, status), why=why)
    return row


def rows_verify_all(big: bool) -> List[Dict[str, Any]]:
    from depthcraft.verify import lookup
    out = []
    for c in lookup.all_constructions():
        for given in c.defaults:
            r = lookup.resolve(c.name, given)
            out.append(_row(c.name, dict(given), r.build(), r.task, r.params, exhaustive=c.exhaustive_in_all))
            print(_line(out[-1]), flush=True)
    if big:
        r = lookup.resolve("khop_doubling", {"k": 64, "n": 1024})
        out.append(_row("khop_doubling", {"k": 64, "n": 1024}, r.build(), r.task, r.params))
        print(_line(out[-1]), flush=True)
    return out


def rows_tracr() -> List[Dict[str, Any]]:
    from tracr.compiler import test_cases

    from depthcraft.constructions.compiler import compile_program
    out = []
    for case in test_cases.TEST_CASES:
        m = compile_program(case["program"], sorted(case["vocab"], key=repr), case["max_seq_len"], causal=False)
        row = _row(case["testcase_name"], {"vocab": len(case["vocab"]), "max_seq_len": case["max_seq_len"]}, m)
        row["corpus"] = "tracr"
        if row["certified"]:
            out.append(row)
            print(_line(row), flush=True)
    return out


def _line(r: Dict[str, Any]) -> str:
    return (f"{r['name'][:26]:26s} {r['route'][:10]:10s} cert={'yes' if r['certified'] else 'no '} "
            f"{r['status'][:26]:26s} {r['certify_seconds'] or 0:6.1f}s {r['check_seconds'] or 0:6.1f}s {r['bytes'] or 0:8d}B")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="re-check every certificate with the independent checker")
    ap.add_argument("--json", default="results/certify/recheck.json")
    ap.add_argument("--big", action="store_true", help="also khop_doubling k = 64, n = 1024")
    args = ap.parse_args(argv)
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    from depthcraft.constructions.files import write_json_atomic

    t0 = time.perf_counter()
    rows = rows_verify_all(args.big) + rows_tracr()
    summary: Dict[str, Any] = {}
    for section, rs in (("verify_all", [r for r in rows if "corpus" not in r]),
                        ("tracr", [r for r in rows if "corpus" in r])):
        counts: Dict[str, int] = {}
        for r in rs:
            counts[r["status"]] = counts.get(r["status"], 0) + 1
        summary[section] = {"rows": len(rs), "certified": sum(r["certified"] for r in rs), "status": counts}
    summary["seconds"] = round(time.perf_counter() - t0, 1)
    cmd = "python benchmarks/recheck.py" + (" --big" if args.big else "") + f" --json {args.json}"
    write_json_atomic(args.json, {"command": cmd, "summary": summary, "rows": rows})
    print(summary)
    bad = [r for r in rows if r["certified"] and r["status"] == "rejected"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
