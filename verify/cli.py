"""The ``depthcraft`` command line (click).

Exit status: 0 when every check passed, 1 when a check failed, 2 on bad usage or
bad input or an interrupted run (one line on stderr, no traceback, no partial files:
every file is written to a temporary name and renamed when complete).
"""

from __future__ import annotations

import sys
from typing import List, Optional

import click
from rich.console import Console
from rich.table import Table

from depthcraft.constructions.errors import DepthcraftError
from depthcraft.constructions.files import check_outputs, json_text, write_json_atomic, write_text_atomic
from depthcraft.constructions.params import MAX_SAMPLES, MAX_SEED, expand_sweeps, parse_assignments
from depthcraft.verify.report import console, markdown_table, print_reports

err_console = Console(stderr=True, highlight=False, width=None if sys.stderr.isatty() else 200)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def cli() -> None:
    """depthcraft: executable depth bounds for transformers (RASP -> tracr -> verified weights)."""


@cli.command("list")
@click.argument("name", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def list_cmd(name: Optional[str], as_json: bool) -> None:
    """List every construction with its task, source and bound formulas; with NAME, its parameters."""
    from depthcraft.verify.lookup import all_constructions, get, param_specs

    chosen = [get(name)] if name else all_constructions()
    rows = []
    for c in chosen:
        rows.append({"name": c.name, "task": c.task, "source": c.source, "attention": c.attention,
                     "causal": c.causal, "bounds": {k: b.text for k, b in c.bounds.items()},
                     "params": {s.name: s.default for s in param_specs(c)}, "summary": c.summary, "notes": c.notes})
    if as_json:
        click.echo(json_text(rows), nl=False)
        return
    if name:
        c, r = chosen[0], rows[0]
        console.print(f"[bold]{c.name}[/bold] (task {c.task}): {c.summary}\nsource: {c.source}")
        for key, text in r["bounds"].items():
            console.print(f"bound {key}: {text}")
        if c.notes:
            console.print(f"notes: {c.notes}")
        t = Table(title=f"parameters of {c.name} (-p KEY=VALUE)")
        for col in ("name", "type", "default", "allowed", "meaning"):
            t.add_column(col)
        for s in param_specs(c):
            if s.choices:
                allowed = ", ".join(map(str, s.choices))
            elif s.minimum is None and s.maximum is None:
                allowed = "any"
            else:
                allowed = "..".join("" if v is None else f"{v:g}" for v in (s.minimum, s.maximum))
            t.add_row(s.name, s.type.__name__, str(s.default), allowed, s.help)
        console.print(t)
        return
    t = Table(title="depthcraft constructions (depthcraft list NAME: its parameters)")
    for col in ("name", "task", "L bound", "H bound", "d_model bound", "attention", "source"):
        t.add_column(col)
    for r in rows:
        b = r["bounds"]
        t.add_row(r["name"], r["task"], b.get("attn_layers", "report"), b.get("heads", "report"),
                  b.get("d_model", "report"), f"{r['attention']}, {'causal' if r['causal'] else 'bidirectional'}",
                  r["source"])
    console.print(t)


@cli.command("verify")
@click.argument("name", required=False)
@click.option("--all", "run_all", is_flag=True, help="Verify every construction at its embedded defaults.")
@click.option("-p", "--param", "params", multiple=True, metavar="KEY=VALUE",
              help="Parameter, e.g. -p k=8; a sweep: -p k=1..16, -p k=1-16 or -p n=16,128,1024 "
                   "(one report per combination).")
@click.option("--samples", type=click.IntRange(0, MAX_SAMPLES), default=None,
              help="Random inputs per check (default 1000; 500 with --all).")
@click.option("--exhaustive", is_flag=True, help="Also check every input of length n (small n and vocab only).")
@click.option("--hypothesis", "hyp", type=click.IntRange(0, MAX_SAMPLES), default=100, show_default=True,
              help="Hypothesis examples (failures are shrunk).")
@click.option("--seed", type=click.IntRange(0, MAX_SEED), default=0, show_default=True,
              help="Seed for random inputs and hypothesis.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
              help="Write the JSON report here.")
@click.option("--markdown", "md_path", type=click.Path(dir_okay=False), default=None,
              help="Write the measured-vs-bound table here (Markdown, one row per report).")
def verify_cmd(name, run_all, params, samples, exhaustive, hyp, seed, json_path, md_path) -> None:
    """Compile a construction, measure it, check its bound and its exactness."""
    from depthcraft.verify.lookup import resolve
    from depthcraft.verify.verifier import verify, verify_all

    if bool(name) == bool(run_all):
        raise click.UsageError("give a construction NAME or --all (not both)")
    if run_all and params:
        raise click.UsageError("-p cannot be combined with --all (it uses each construction's defaults)")
    if run_all and exhaustive:
        raise click.UsageError("--exhaustive cannot be combined with --all (most defaults have far too many inputs; "
                               "--all already checks every input where the input set is small)")
    check_outputs([json_path, md_path])
    given = parse_assignments(params)
    varying = ["construction", "params"]
    if run_all:
        reports = []
        with console.status("verifying") as status:
            def progress(cname, p):
                status.update(f"verifying {cname} {' '.join(f'{k}={v}' for k, v in p.items())}")
            for r in verify_all(samples=500 if samples is None else samples, exhaustive=exhaustive, seed=seed,
                                hypothesis_examples=hyp, progress=progress):
                reports.append(r)
    else:
        varying, sweep = expand_sweeps(given)
        for p in sweep:  # fail fast on a bad value anywhere in the sweep, before any compile
            resolve(name, p)
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
    if md_path:
        write_text_atomic(md_path, markdown_table(reports, varying))
        console.print(f"table written to {md_path}")
    sys.exit(0 if passed else 1)


@cli.command("run")
@click.argument("name")
@click.option("-p", "--param", "params", multiple=True, metavar="KEY=VALUE", help="Parameter, e.g. -p k=2.")
@click.option("--input", "text", required=True, help='Input tokens, e.g. "b a e b c" or "baebc".')
def run_cmd(name, params, text) -> None:
    """Run a construction on one input and compare with the reference."""
    from depthcraft.verify.checks import predict
    from depthcraft.verify.lookup import resolve

    r = resolve(name, parse_assignments(params))
    p, task = r.params, r.task
    tokens = task.parse_tokens(p, text)
    model = r.build()
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


from depthcraft.verify.commands import register_commands  # noqa: E402  (show, save, verify-saved: issue 5)
from depthcraft.verify.crosscheck.command import train_cmd  # noqa: E402
from depthcraft.verify.precision import precision_cmd  # noqa: E402

register_commands(cli)
cli.add_command(train_cmd)
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
