"""``depthcraft claims``: the verdict of each training claim C1-C7 from the committed sweeps.

Writes ``results/crosscheck/claims.json`` (:func:`depthcraft.verify.crosscheck.claims.write_claims`)
and each judged claim's ``claim.png``, and prints one line per claim. ``--commands`` prints the ``depthcraft train`` commands that
produce each claim's sweeps instead (the claim's COMMAND file holds the same lines).
"""

from __future__ import annotations

import pathlib

import click

from depthcraft.verify.cli.render import echo


@click.command("claims")
@click.option("--root", default=".", show_default=True, type=click.Path(file_okay=False, exists=True),
              help="Project root (holds results/crosscheck/).")
@click.option("--commands", "show_commands", is_flag=True,
              help="Print the sweeps' commands per claim; write nothing.")
def claims_cmd(root, show_commands) -> None:
    """Judge the training claims C1-C7 from results/crosscheck/ and write claims.json."""
    from depthcraft.verify.crosscheck import claims as claims_mod

    base = pathlib.Path(root).resolve()
    if show_commands:
        for c in claims_mod.CLAIMS:
            echo(f"# {c.id}: {c.statement}")
            for s in c.sweeps:
                echo(s.command(c.id))
        return
    path = claims_mod.write_claims(base)
    doc = claims_mod.build_claims(base)
    figures = claims_mod.write_figures(base, doc)
    for c in doc["claims"]:
        echo(f"{c['id']}: {c['verdict']}")
    for f in [str(path), *figures]:
        echo(f"written: {pathlib.Path(f).relative_to(base)}")


__all__ = ["claims_cmd"]
