"""The ``depthcraft`` command line (click).

Exit status: 0 when every check passed, 1 when a check failed, 2 on bad usage or
bad input or an interrupted run (one line on stderr, no traceback, no partial files:
every file is written to a temporary name and renamed when complete).
"""

from __future__ import annotations

import json
import sys
from typing import Any, Dict, List, Optional

import click
from rich.console import Console
from rich.table import Table

from constructions import registry
from constructions.io import atomic_write, check_writable
from constructions.errors import DepthcraftError, ParameterError
from constructions.params import expand_sweeps, parse_assignments

# Wide tables when the output is a file or a pipe (rich would wrap them at 80 columns).
console = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
err_console = Console(stderr=True, highlight=False, width=None if sys.stderr.isatty() else 200)


def write_json_atomic(path: str, data: Any) -> None:
    """Write JSON to ``path`` via a temporary file and rename: never a half-written file.

    Raises:
        ParameterError: the directory does not exist or is not writable.
    """
    def write(tmp: str) -> None:
        with open(tmp, "w") as f:
            json.dump(data, f, indent=2, default=_json_default)
            f.write("\n")

    atomic_write(path, write, suffix=".json")


def _json_default(o):
    import numpy as np

    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """depthcraft: executable depth bounds for transformers (RASP -> tracr -> verified weights)."""


@cli.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def list_cmd(as_json: bool) -> None:
    """List every construction with its task, source and bound formulas."""
    rows = []
    for c in registry.all_constructions():
        rows.append({"name": c.name, "task": c.task, "source": c.source, "attention": c.attention,
                     "causal": c.causal, "bounds": {k: b.text for k, b in c.bounds.items()},
                     "params": {s.name: s.default for s in c.params}, "summary": c.summary, "notes": c.notes})
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    t = Table(title="depthcraft constructions")
    for col in ("name", "task", "L bound", "H bound", "d_model bound", "attention", "source"):
        t.add_column(col)
    for r in rows:
        b = r["bounds"]
        t.add_row(r["name"], r["task"], b.get("attn_layers", "report"), b.get("heads", "report"),
                  b.get("d_model", "report"), f"{r['attention']}, {'causal' if r['causal'] else 'bidirectional'}",
                  r["source"])
    console.print(t)


def _fmt_bound(report: Dict[str, Any], key: str) -> str:
    m = report["structure"][key]
    b = report["bound"].get(key)
    check = report.get("bound_checks", {}).get(key, {})
    lower = "≥" if check.get("kind") == "lower" else ""
    return f"{m}" if b is None else f"{m} / {lower}{b}" + ("" if check.get("ok", m <= b) else " ✗")


def _fmt_check(c: Optional[Dict[str, Any]]) -> str:
    if c is None:
        return "-"
    return f"{c['inputs']} ✓" if c["exact"] else f"{c['failed']}/{c['inputs']} ✗"


def _fmt_ablation(ablation: Optional[List[Dict[str, Any]]]) -> str:
    """Exact fraction with each attention layer removed, e.g. '0.00 0.31' (a redundant layer in red)."""
    if not ablation:
        return "-"
    return " ".join(f"[red]{a['exact_fraction']:.2f}[/]" if a["redundant"] else f"{a['exact_fraction']:.2f}"
                    for a in ablation)


def print_reports(reports: List[Dict[str, Any]]) -> None:
    """Print the verification table, then counterexamples and warnings."""
    t = Table(title="depthcraft verify")
    for col in ("construction", "params", "L / bound", "H / bound", "d_model", "random", "edge", "exhaustive",
                "hypothesis", "min attn", "ablated", "passed", "s"):
        t.add_column(col, overflow="fold")
    for r in reports:
        params = " ".join(f"{k}={v}" for k, v in r["params"].items())
        att = r["min_margin"]["attention"]
        t.add_row(r["construction"], params, _fmt_bound(r, "attn_layers"), _fmt_bound(r, "heads"),
                  _fmt_bound(r, "d_model"), *(_fmt_check(r["checks"][k]) for k in
                                              ("random", "edge", "exhaustive", "hypothesis")),
                  "-" if att is None else f"{att:.4f}", _fmt_ablation(r.get("ablation")),
                  "[green]yes[/]" if r["passed"] else "[red]NO[/]",
                  f"{r['seconds']:.1f}")
    console.print(t)
    for r in reports:
        cx = r.get("counterexample")
        if cx:
            note = f" (found by the {cx['check']} check" + (", shrunk)" if cx.get("shrunk") else ")")
            console.print(f"[red]{r['construction']}[/] counterexample{note}, wrong at positions {cx['positions']}:")
            console.print(f"  input    {cx['tokens_text']}")
            console.print(f"  expected {cx['expected_text']}")
            console.print(f"  got      {cx['got_text']}")
        for w in r.get("warnings", []):
            console.print(f"[yellow]warning[/] {r['construction']}: {w}")
        for key, b in r.get("bound_checks", {}).items():
            if not b["ok"]:
                side = "is below the lower" if b.get("kind") == "lower" else "exceeds the"
                console.print(f"[red]{r['construction']}[/]: {key} = {b['measured']} {side} bound {b['bound']}")


@cli.command("verify")
@click.argument("name", required=False)
@click.option("--all", "run_all", is_flag=True, help="Verify every construction at its embedded defaults.")
@click.option("-p", "--param", "params", multiple=True, metavar="KEY=VALUE",
              help="Parameter, e.g. -p k=8; a sweep: -p k=1..16 or -p k=1,2,4 (one report per combination).")
@click.option("--samples", type=click.IntRange(min=0), default=None,
              help="Random inputs per check (default 1000; 500 with --all).")
@click.option("--exhaustive", is_flag=True, help="Also check every input of length n (small n and vocab only).")
@click.option("--hypothesis", "hyp", type=click.IntRange(min=0), default=100, show_default=True,
              help="Hypothesis examples (failures are shrunk).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for random inputs and hypothesis.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
              help="Write the JSON report here.")
def verify_cmd(name, run_all, params, samples, exhaustive, hyp, seed, json_path) -> None:
    """Compile a construction, measure it, check its bound and its exactness."""
    from verify.verifier import resolve_params, verify, verify_all

    if bool(name) == bool(run_all):
        raise click.UsageError("give a construction NAME or --all (not both)")
    if run_all and params:
        raise click.UsageError("-p cannot be combined with --all (it uses each construction's defaults)")
    if json_path:
        check_writable(json_path)
    given = parse_assignments(params)
    if run_all:
        reports = []
        with console.status("verifying") as status:
            def progress(cname, p):
                status.update(f"verifying {cname} {' '.join(f'{k}={v}' for k, v in p.items())}")
            for r in verify_all(samples=500 if samples is None else samples, exhaustive=exhaustive, seed=seed,
                                hypothesis_examples=hyp, progress=progress):
                reports.append(r)
    else:
        sweep = expand_sweeps(given)
        for p in sweep:  # fail fast on a bad value anywhere in the sweep, before any compile
            resolve_params(registry.get(name), p)
        reports = []
        with console.status(f"verifying {name}") as status:
            for p in sweep:
                status.update(f"verifying {name} {' '.join(f'{k}={v}' for k, v in p.items())}")
                reports.append(verify(name, p, samples=1000 if samples is None else samples,
                                      exhaustive=exhaustive, seed=seed, hypothesis_examples=hyp))
    print_reports(reports)
    passed = all(r["passed"] for r in reports)
    if json_path:
        write_json_atomic(json_path, {"results": reports, "passed": passed})
        console.print(f"report written to {json_path}")
    sys.exit(0 if passed else 1)


@cli.command("run")
@click.argument("name")
@click.option("-p", "--param", "params", multiple=True, metavar="KEY=VALUE", help="Parameter, e.g. -p k=2.")
@click.option("--input", "text", required=True, help='Input tokens, e.g. "b a e b c" or "baebc".')
def run_cmd(name, params, text) -> None:
    """Run a construction on one input and compare with the reference."""
    from verify.checks import predict
    from verify.tasks import get_task
    from verify.verifier import resolve_params

    c = registry.get(name)
    p = resolve_params(c, parse_assignments(params))
    task = get_task(c.task)
    tokens = task.parse_tokens(p, text)
    model = c.build(p)
    import numpy as np

    x = np.asarray([tokens])
    got = predict(model, x, task.none_value)[0][0]
    expected, scored = task.reference(p, x)
    console.print(f"input     {task.format_tokens(p, tokens)}")
    console.print(f"model     {task.format_tokens(p, got)}")
    console.print(f"reference {task.format_tokens(p, expected[0])}")
    ok = bool(((got == expected[0]) | ~scored[0]).all())
    console.print("[green]exact[/]" if ok else "[red]differs[/]")
    sys.exit(0 if ok else 1)


from verify.commands import register_commands  # noqa: E402  (show, save, verify-saved: issue 5)
from verify.crosscheck.command import train_cmd  # noqa: E402
from verify.precision import precision_cmd  # noqa: E402
from verify.sweep import sweep_cmd  # noqa: E402

register_commands(cli)
cli.add_command(train_cmd)
cli.add_command(sweep_cmd)
cli.add_command(precision_cmd)


def main(argv: Optional[List[str]] = None) -> None:
    """Console-script entry point: runs the CLI with one-line errors for bad usage or input."""
    try:
        cli.main(args=argv, prog_name="depthcraft", standalone_mode=False)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.Abort:
        err_console.print("depthcraft: error: interrupted; nothing was written")
        sys.exit(2)
    except click.ClickException as e:  # usage errors, bad option values, unreadable files
        err_console.print(f"depthcraft: error: {e.format_message()}", soft_wrap=True)
        sys.exit(2)
    except DepthcraftError as e:
        err_console.print(f"depthcraft: error: {e}", soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        err_console.print("depthcraft: error: interrupted; nothing was written")
        sys.exit(2)
    sys.exit(0)


if __name__ == "__main__":  # pragma: no cover
    main()
