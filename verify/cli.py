"""The ``depthcraft`` command line (click).

Exit status: 0 when every check passed, 1 when a check failed, 2 on bad usage or
bad input (one line on stderr, no traceback), 130 when interrupted.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from typing import Any, Dict, List, Optional

import click
from rich.console import Console
from rich.table import Table

from constructions import registry
from constructions.errors import DepthcraftError, ParameterError
from constructions.params import parse_assignments

# Wide tables when the output is a file or a pipe (rich would wrap them at 80 columns).
console = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
err_console = Console(stderr=True, highlight=False, width=None if sys.stderr.isatty() else 200)


def write_json_atomic(path: str, data: Any) -> None:
    """Write JSON to ``path`` via a temporary file and rename: never a half-written file.

    Raises:
        ParameterError: the directory does not exist or is not writable.
    """
    directory = os.path.dirname(os.path.abspath(path))
    check_writable(path)
    fd, tmp = tempfile.mkstemp(prefix=".depthcraft-", suffix=".json", dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=2, default=_json_default)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def check_writable(path: str) -> None:
    """Raise ParameterError unless ``path`` can be created or replaced."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise ParameterError(f"cannot write {path}: directory {directory} does not exist")
    if os.path.isdir(path):
        raise ParameterError(f"cannot write {path}: it is a directory")
    if not os.access(directory, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise ParameterError(f"cannot write {path}: permission denied")


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
    return f"{m}" if b is None else f"{m} / {b}" + ("" if m <= b else " ✗")


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
            note = " (shrunk by hypothesis)" if cx.get("shrunk") else ""
            console.print(f"[red]{r['construction']}[/] counterexample{note}, wrong at positions {cx['positions']}:")
            console.print(f"  input    {cx['tokens_text']}")
            console.print(f"  expected {cx['expected_text']}")
            console.print(f"  got      {cx['got_text']}")
        for w in r.get("warnings", []):
            console.print(f"[yellow]warning[/] {r['construction']}: {w}")
        for key, b in r.get("bound_checks", {}).items():
            if not b["ok"]:
                console.print(f"[red]{r['construction']}[/]: {key} = {b['measured']} exceeds the bound {b['bound']}")


@cli.command("verify")
@click.argument("name", required=False)
@click.option("--all", "run_all", is_flag=True, help="Verify every construction at its embedded defaults.")
@click.option("-p", "--param", "params", multiple=True, metavar="KEY=VALUE", help="Parameter, e.g. -p k=8.")
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
    from verify.verifier import verify, verify_all

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
        with console.status(f"verifying {name}"):
            reports = [verify(name, given, samples=1000 if samples is None else samples, exhaustive=exhaustive,
                              seed=seed, hypothesis_examples=hyp)]
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


from verify.crosscheck.command import train_cmd  # noqa: E402

cli.add_command(train_cmd)


def main(argv: Optional[List[str]] = None) -> None:
    """Console-script entry point: runs the CLI with one-line errors for bad usage or input."""
    try:
        cli.main(args=argv, prog_name="depthcraft", standalone_mode=False)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.Abort:
        err_console.print("depthcraft: interrupted")
        sys.exit(130)
    except click.ClickException as e:  # usage errors, bad option values, unreadable files
        err_console.print(f"depthcraft: error: {e.format_message()}", soft_wrap=True)
        sys.exit(2)
    except DepthcraftError as e:
        err_console.print(f"depthcraft: error: {e}", soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        err_console.print("depthcraft: interrupted")
        sys.exit(130)
    sys.exit(0)


if __name__ == "__main__":  # pragma: no cover
    main()
