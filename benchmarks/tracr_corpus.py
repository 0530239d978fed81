"""tracr's own integration programs through ``check_program(..., certify=True)`` (issue 30, Must show).

    python benchmarks/tracr_corpus.py [--json results/certify/tracr_corpus.json] [--resume]
        [--only NAME ...] [--cap-s 120] [--max-exhaustive 100000] [--samples 1000]
        [--hypothesis-examples 100] [--compiler depthcraft]

The corpus is ``tracr.compiler.test_cases.TEST_CASES`` of the installed tracr
(43 programs, each with its vocabulary and ``max_seq_len``), written by tracr's
authors, not by this project: the programs a user builds with (length, reverse,
hist, sort, the Dyck programs, frac_prevs, ...). Each program is checked, as a
new user would, by the public API only::

    depthcraft.check_program(program, vocab=case["vocab"], max_seq_len=case["max_seq_len"],
                             reference=lambda xs: rasp.evaluate(program, xs), certify=True,
                             exhaustive=<input space <= --max-exhaustive>)

with tracr's RASP evaluator as the reference (the program's meaning, not the
model's), the default sampled, edge and hypothesis checks, the exhaustive check
(every input of length 1..max_seq_len) where the input space
``sum_{L=1..N} |V|^L`` is at most ``--max-exhaustive``, and the certificate
(report key ``certificate``). tracr's ``UNSUPPORTED_TEST_CASES`` (9 programs
tracr cannot compile) are run the same way and must be refused (a compile
error) or not certified.

Output: ``--json`` (default ``results/certify/tracr_corpus.json``), rewritten
atomically after every program, so an interrupted run loses at most the
program in progress; ``--resume`` keeps the programs already recorded with the
same settings and runs only the others. Per program: name, vocab size,
max_seq_len, passed, the checks' inputs/exact, exhaustive inputs/exact (or why
skipped), certified, the certificate's scope and seconds, and for an
uncertified program every uncertified head (layer, head, why, witness); a
program that raised records its error, one that ran past ``--cap-s`` seconds is
recorded as ``timed_out`` (the cap is a SIGALRM: it interrupts at the next
Python instruction, so a long compiled JAX call finishes first). The summary
counts certified, not certified, errors, timed out, and the two counts that
must be 0: certified but the exhaustive check fails, certified but any check
fails. A compact table (80 columns, rich) is printed per section; a progress line per
finished program goes to stderr.

Cost, measured for the committed results (default settings, one process, nice 5, the shared 2-core
machine with other jobs running): 278 s wall (4 min 42 s under /usr/bin/time; 409 s in a run at
a higher load; 266 s before the parallel heads and MLPs were certified block by block), peak RSS
3.2 GB. The three shuffle_dyck3 programs (55,986 inputs each, exhaustive) take nine tenths of it:
19-32 s of exhaustive checks and 47-69 s of certificate each (they now go through every
sublayer; their later MLPs enumerate many ideal vectors: 2.4 GB peak RSS for one certificate
alone, the run's peak); the shuffle_dyck2 ones 3-4 s, every other program under 2 s; frac_prevs_2, frac_prevs_3
and pair_balance_1 (12,207,030 inputs each) get the sampled, edge and hypothesis checks only. No
program comes near the default 300 s cap. The printed table is kept beside the JSON
(``results/certify/tracr_corpus.txt``).

Exit status: 0 when no certified program fails a check, 1 otherwise, 2 on bad
usage.
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import signal
import sys
import time
from typing import Any, Dict, Iterable, List, Optional, Sequence

DEFAULT_JSON = "results/certify/tracr_corpus.json"


class TimeCap(Exception):
    """Raised by the SIGALRM handler when one program runs past ``--cap-s`` seconds."""


def input_space(vocab_size: int, max_seq_len: int) -> int:
    """Number of inputs of length 1..max_seq_len over ``vocab_size`` tokens: sum_L |V|^L (an int)."""
    return sum(vocab_size ** length for length in range(1, max_seq_len + 1))


def corpus(which: str = "supported") -> List[Dict[str, Any]]:
    """tracr's test cases: ``"supported"`` (``TEST_CASES``) or ``"unsupported"`` (``UNSUPPORTED_TEST_CASES``).

    Returns:
        The installed tracr's list of dicts (keys ``testcase_name``, ``program``
        (a ``rasp.SOp``), ``vocab`` (a set), ``max_seq_len`` (int), and for the
        supported ones ``test_input`` / ``expected_output``), in tracr's order.
        The programs are tracr's objects: do not mutate them.
    Raises:
        ValueError: ``which`` is neither name.
    """
    from tracr.compiler import test_cases

    if which == "supported":
        return list(test_cases.TEST_CASES)
    if which == "unsupported":
        return list(test_cases.UNSUPPORTED_TEST_CASES)
    raise ValueError(f"which must be 'supported' or 'unsupported', got {which!r}")


def rasp_evaluator(program) -> Any:
    """tracr's RASP evaluator as a reference: ``reference(tokens: list) -> list`` (one value per token).

    A program that raises on an input (e.g. a ``Comparison`` on None) raises
    here too; ``check_program`` records that as the expected value of the input.
    """
    from tracr.rasp import rasp

    return lambda xs: rasp.evaluate(program, list(xs))


def _checks(report: Dict[str, Any]) -> Dict[str, Any]:
    """The report's checks as ``{name: {"inputs", "exact"}}`` (None where a check did not run)."""
    out = {}
    for name, c in (report.get("checks") or {}).items():
        out[name] = None if c is None else {"inputs": c.get("inputs"), "exact": c.get("exact")}
    return out


def run_case(case: Dict[str, Any], args: argparse.Namespace) -> Dict[str, Any]:
    """Check one tracr test case through ``check_program(..., certify=True)``; return its JSON row.

    Args:
        case: a tracr test case (see :func:`corpus`).
        args: the parsed command line (``samples``, ``hypothesis_examples``,
            ``max_exhaustive``, ``compiler``, ``seed``, ``cap_s``).
    Returns:
        ``{"name", "vocab", "vocab_size", "max_seq_len", "input_space", "passed", "checks",
        "exhaustive": {"inputs", "exact"} | {"skipped": why}, "certified",
        "scope", "certificate_seconds", "uncertified": [{"layer", "head", "why",
        "witness"}], "counterexample", "error", "timed_out", "seconds"}``;
        ``certified`` is None when no certificate was produced (error, time cap).
        Never raises for a program's failure: a compile error or any exception
        is recorded in ``error``.
    """
    from depthcraft import check_program

    vocab = sorted(case["vocab"], key=repr)
    n = int(case["max_seq_len"])
    space = input_space(len(vocab), n)
    exhaustive = space <= args.max_exhaustive
    row: Dict[str, Any] = {"name": case["testcase_name"], "vocab": vocab, "vocab_size": len(vocab), "max_seq_len": n,
                           "input_space": space, "passed": None, "checks": None,
                           "exhaustive": None if exhaustive else
                           {"skipped": f"{space} inputs > --max-exhaustive {args.max_exhaustive}"},
                           "certified": None, "scope": None, "certificate_seconds": None, "uncertified": [],
                           "counterexample": None, "error": None, "timed_out": False}
    t0 = time.perf_counter()
    if args.cap_s:
        signal.alarm(int(args.cap_s))
    try:
        report = check_program(case["program"], vocab=vocab, max_seq_len=n,
                               reference=rasp_evaluator(case["program"]), certify=True,
                               exhaustive=exhaustive, samples=args.samples,
                               hypothesis_examples=args.hypothesis_examples, seed=args.seed,
                               compiler=args.compiler, name=case["testcase_name"])
    except TimeCap:
        row["timed_out"] = True
        row["error"] = f"time cap: still running after {args.cap_s} s"
    except Exception as e:  # a compile error (tracr's reason) or anything else: recorded, not fatal
        row["error"] = f"{type(e).__name__}: {e}"
    else:
        checks = _checks(report)
        row["passed"] = bool(report["passed"])
        row["checks"] = {k: v for k, v in checks.items() if k != "exhaustive"}
        if exhaustive:
            row["exhaustive"] = checks.get("exhaustive")
        cert = report.get("certificate") or {}
        row["certified"] = cert.get("certified")
        row["scope"] = cert.get("scope")
        row["certificate_seconds"] = cert.get("seconds")
        row["uncertified"] = [{"layer": u.get("layer"), "head": u.get("head"), "why": u.get("why"),
                               "witness": u.get("witness")} for u in cert.get("uncertified") or []]
        row["counterexample"] = report.get("counterexample")
    finally:
        signal.alarm(0)
    row["seconds"] = round(time.perf_counter() - t0, 2)
    return row


def summarise(rows: Sequence[Dict[str, Any]], unsupported: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """Counts over the rows of :func:`run_case`.

    Returns:
        ``{"programs", "certified", "not_certified", "errors", "timed_out",
        "passed", "exhaustive_run", "certified_but_exhaustive_fails",
        "certified_but_failed", "unsupported", "unsupported_certified",
        "unsupported_certified_inexact", "unsupported_refused", "first_reasons", "seconds"}``; ``first_reasons`` maps each
        uncertified program's first ``why`` to how many programs stop there.
        (ints; seconds a float). The two ``certified_but_*`` counts and
        ``unsupported_certified_inexact`` must be 0: a certificate never holds where a
        check finds an error, and a program tracr refuses is certified only where the project
        compiles it and the exhaustive check is exact (issue 33: numerical_numerical_aggregate).
    """
    def ex_fails(r):
        ex = r.get("exhaustive") or {}
        return "exact" in ex and ex["exact"] is False

    return {
        "programs": len(rows),
        "certified": sum(r["certified"] is True for r in rows),
        "not_certified": sum(r["certified"] is False for r in rows),
        "errors": sum(r["error"] is not None and not r["timed_out"] for r in rows),
        "timed_out": sum(bool(r["timed_out"]) for r in rows),
        "passed": sum(r["passed"] is True for r in rows),
        "exhaustive_run": sum("exact" in (r.get("exhaustive") or {}) for r in rows),
        "certified_but_exhaustive_fails": sum(r["certified"] is True and ex_fails(r) for r in rows),
        "certified_but_failed": sum(r["certified"] is True and r["passed"] is False for r in rows),
        "unsupported": len(unsupported),
        "unsupported_certified": sum(r["certified"] is True for r in unsupported),
        "unsupported_certified_inexact": sum(r["certified"] is True and not (
            r["passed"] is True and (r.get("exhaustive") or {}).get("exact") is True) for r in unsupported),
        "unsupported_refused": sum(r["certified"] is None and not r["timed_out"] for r in unsupported),
        "first_reasons": _reasons(rows),
        "seconds": round(sum(r["seconds"] for r in rows) + sum(r["seconds"] for r in unsupported), 1),
    }


def _reasons(rows: Sequence[Dict[str, Any]]) -> Dict[str, int]:
    """First uncertified reason -> number of programs, most frequent first."""
    counts: Dict[str, int] = {}
    for r in rows:
        if r["uncertified"]:
            why = r["uncertified"][0]["why"]
            counts[why] = counts.get(why, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def _cell(value: Optional[bool]) -> str:
    return "-" if value is None else ("yes" if value else "NO")


def _why(row: Dict[str, Any]) -> str:
    """The first reason a program is not certified, short: 'attn 1/0 categorical aggregate ...'."""
    if row["timed_out"]:
        return "time cap"
    if row["error"]:
        return row["error"]
    if row["uncertified"]:
        u = row["uncertified"][0]
        where = u["layer"] if u["head"] is None else f"{u['layer']}/{u['head']}"
        return f"{where}: {u['why']}"
    return ""


def table_row(row: Dict[str, Any]) -> List[str]:
    """One table row: name, |V|, N, passed, exhaustive inputs ('-' not run, a trailing '!' = not exact),
    certified, seconds, the first uncertified head and why (or the error)."""
    ex = row.get("exhaustive") or {}
    exh = "-" if "exact" not in ex else f"{ex['inputs']}{'' if ex['exact'] else '!'}"
    return [row["name"], str(row["vocab_size"]), str(row["max_seq_len"]), _cell(row["passed"]), exh,
            _cell(row["certified"]), f"{row['seconds']:.1f}", _why(row)]


def make_table(title: str, columns: int = 80):
    """A rich table ``columns`` wide with the columns of :func:`table_row` (long cells ellipsised)."""
    from rich.table import Table

    t = Table(title=title, box=None, pad_edge=False, padding=(0, 1, 0, 0), title_justify="left")
    widths = (("program", 22), ("V", 2), ("N", 2), ("pass", 4), ("exh.", 6), ("cert", 4), ("s", 5))
    for name, w in widths:
        t.add_column(name, justify="left" if name in ("program", "pass", "cert") else "right", no_wrap=True,
                     overflow="ellipsis", width=w + 1)  # + the one space of right padding
    t.add_column("first uncertified head: why", no_wrap=True, overflow="ellipsis",
                 width=columns - sum(w + 1 for _, w in widths))
    return t


def command_line(argv: Sequence[str]) -> str:
    """The command that reproduces this run (script path relative to the repository root)."""
    return " ".join(["python", "benchmarks/tracr_corpus.py", *map(shlex.quote, argv)])


def _settings(args: argparse.Namespace) -> Dict[str, Any]:
    return {"samples": args.samples, "hypothesis_examples": args.hypothesis_examples, "seed": args.seed,
            "max_exhaustive": args.max_exhaustive, "compiler": args.compiler, "cap_s": args.cap_s}


def _previous(path: str, settings: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    """Rows of an earlier run at ``path`` with the same settings, by section/name (empty if none).

    The time cap is not compared (a resumed run may raise it to finish what timed out); rows that
    timed out are never kept.
    """
    import json

    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as f:
        old = json.load(f)
    same = {k: v for k, v in settings.items() if k != "cap_s"}
    if {k: v for k, v in (old.get("settings") or {}).items() if k != "cap_s"} != same:
        return {}
    keep = {}
    for section in ("programs", "unsupported"):
        for r in old.get(section, []):
            if not r.get("timed_out"):
                keep[f"{section}/{r['name']}"] = r
    return keep


def _versions() -> Dict[str, Optional[str]]:
    """depthcraft's and tracr's installed versions and the checkout's git commit (None where unknown)."""
    import subprocess
    from importlib import metadata

    import depthcraft

    out: Dict[str, Optional[str]] = {"depthcraft": depthcraft.__version__, "tracr": None, "git_commit": None}
    for dist in ("tracr-pypi", "tracr"):
        try:
            out["tracr"] = f"{dist} {metadata.version(dist)}"
            break
        except metadata.PackageNotFoundError:
            continue
    try:
        out["git_commit"] = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                           timeout=10, check=True).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        pass
    return out


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """Parse the command line (argparse; exit 2 on bad usage)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", default=DEFAULT_JSON, help=f"output file (default {DEFAULT_JSON})")
    ap.add_argument("--resume", action="store_true", help="keep programs already in --json (same settings)")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="run only these test cases (tracr's names)")
    ap.add_argument("--cap-s", type=int, default=300, help="per-program time cap in seconds (0 = none)")
    ap.add_argument("--max-exhaustive", type=int, default=100_000,
                    help="run the exhaustive check when sum_L |V|^L is at most this")
    ap.add_argument("--samples", type=int, default=1000, help="random inputs per program")
    ap.add_argument("--hypothesis-examples", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--compiler", choices=("depthcraft", "tracr"), default="depthcraft")
    ap.add_argument("--no-unsupported", action="store_true", help="skip tracr's UNSUPPORTED_TEST_CASES")
    args = ap.parse_args(argv)
    if args.cap_s < 0 or args.max_exhaustive < 0:
        ap.error("--cap-s and --max-exhaustive must be >= 0")
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the corpus, print the table, write the JSON; return the exit status (see the module doc)."""
    import logging

    from rich.console import Console

    from depthcraft.constructions.files import write_json_atomic

    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse(argv)
    logging.getLogger("absl").setLevel(logging.ERROR)  # tracr's "SequenceMap with both inputs" warnings

    def on_alarm(signum, frame):
        raise TimeCap()

    signal.signal(signal.SIGALRM, on_alarm)
    console = Console(width=min(80, Console().width), highlight=False)
    progress = Console(stderr=True, width=80, highlight=False)  # one line per finished program
    settings = _settings(args)
    previous = _previous(args.json, settings) if args.resume else {}
    sections = {"programs": corpus("supported"), "unsupported": [] if args.no_unsupported else corpus("unsupported")}
    names = {c["testcase_name"] for cases in sections.values() for c in cases}
    unknown = sorted(set(args.only or ()) - names)
    if unknown:
        console.print(f"error: unknown test case {unknown[0]!r}")
        return 2
    out: Dict[str, Any] = {
        "command": command_line(argv), "settings": settings,
        "corpus": "tracr.compiler.test_cases (TEST_CASES, UNSUPPORTED_TEST_CASES) of the installed tracr",
        "reference": "tracr.rasp.rasp.evaluate(program, tokens)",
        "versions": _versions(),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "load_1min_start": round(os.getloadavg()[0], 2)},
        "programs": [], "unsupported": [], "summary": None}
    t_all = time.perf_counter()
    total = {k: sum(not args.only or c["testcase_name"] in args.only for c in v) for k, v in sections.items()}
    for section, cases in sections.items():
        table = make_table("tracr TEST_CASES" if section == "programs" else "tracr UNSUPPORTED_TEST_CASES")
        for case in cases:
            if args.only and case["testcase_name"] not in args.only:
                continue
            row = previous.get(f"{section}/{case['testcase_name']}") or run_case(case, args)
            out[section].append(row)
            out["summary"] = summarise(out["programs"], out["unsupported"])
            write_json_atomic(args.json, out)
            progress.print(f"{section} {len(out[section])}/{total[section]} {row['name']}: "
                           f"certified {_cell(row['certified'])}, {row['seconds']} s")
            table.add_row(*table_row(row))
        if table.row_count:
            console.print(table)
        if section == "programs":
            for why, count in _reasons(out["programs"]).items():
                console.print(f"{count} stop at: {why}")
    s = summarise(out["programs"], out["unsupported"])
    s["wall_seconds"] = round(time.perf_counter() - t_all, 1)
    out["summary"] = s
    out["machine"]["load_1min_end"] = round(os.getloadavg()[0], 2)
    write_json_atomic(args.json, out)
    console.print(f"certified {s['certified']} of {s['programs']}, not certified {s['not_certified']}, "
                  f"errors {s['errors']}, timed out {s['timed_out']}")
    console.print(f"passed {s['passed']}; exhaustive run on {s['exhaustive_run']}; "
                  f"{s['seconds']} s of checks, {s['wall_seconds']} s wall")
    console.print(f"must be 0: certified but exhaustive fails {s['certified_but_exhaustive_fails']}, "
                  f"certified but failed {s['certified_but_failed']}")
    console.print(f"unsupported: certified {s['unsupported_certified']} of {s['unsupported']} "
                  f"(without an exact exhaustive check: {s['unsupported_certified_inexact']}, must be 0), "
                  f"refused {s['unsupported_refused']}")
    bad = s["certified_but_exhaustive_fails"] + s["certified_but_failed"] + s["unsupported_certified_inexact"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
