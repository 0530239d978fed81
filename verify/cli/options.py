"""Click options shared by several ``depthcraft`` commands, one definition each.

Each function returns a decorator; :func:`check_options` stacks the four options of
an exactness check (``--samples``, ``--exhaustive``, ``--hypothesis``, ``--seed``)
in the order ``--help`` lists them.
"""

from __future__ import annotations

from typing import Callable, Optional

import click

from depthcraft.constructions.params import MAX_SAMPLES, MAX_SEED

Decorator = Callable[[Callable], Callable]


def stacked(*decorators: Decorator) -> Decorator:
    """One decorator applying ``decorators`` so that ``--help`` lists their options in the order given."""
    def apply(f: Callable) -> Callable:
        for d in reversed(decorators):
            f = d(f)
        return f

    return apply


def params_option(help: str = "Parameter, e.g. -p k=2.") -> Decorator:
    """``-p/--param KEY=VALUE`` (repeatable) -> ``params``: a tuple of strings."""
    return click.option("-p", "--param", "params", multiple=True, metavar="KEY=VALUE", help=help)


def input_option() -> Decorator:
    """``--input TEXT`` (required) -> ``text``: one input, tokens separated by spaces or one letter each."""
    return click.option("--input", "text", required=True, help='Input tokens, e.g. "b a e b c" or "baebc".')


def samples_option(default: Optional[int], help: str) -> Decorator:
    """``--samples N`` -> ``samples`` (0..MAX_SAMPLES); the default is shown when it is not None."""
    return click.option("--samples", type=click.IntRange(0, MAX_SAMPLES), default=default,
                        show_default=default is not None, help=help)


def exhaustive_option(help: str = "Also check every input of length n (small n and vocab only).") -> Decorator:
    """``--exhaustive`` flag -> ``exhaustive``."""
    return click.option("--exhaustive", is_flag=True, help=help)


def hypothesis_option() -> Decorator:
    """``--hypothesis N`` -> ``hyp``: hypothesis examples (0..MAX_SAMPLES, default 100)."""
    return click.option("--hypothesis", "hyp", type=click.IntRange(0, MAX_SAMPLES), default=100, show_default=True,
                        help="Hypothesis examples (failures are shrunk).")


def seed_option(help: str = "Seed for random inputs and hypothesis.") -> Decorator:
    """``--seed S`` -> ``seed`` (0..MAX_SEED, default 0)."""
    return click.option("--seed", type=click.IntRange(0, MAX_SEED), default=0, show_default=True, help=help)


def check_options(samples_default: Optional[int], samples_help: str) -> Decorator:
    """``--samples``, ``--exhaustive``, ``--hypothesis`` and ``--seed`` of an exactness check."""
    return stacked(samples_option(samples_default, samples_help), exhaustive_option(), hypothesis_option(),
                   seed_option())


def max_memory_option() -> Decorator:
    """``--max-memory SIZE`` -> ``max_memory`` (str or None: the default budget, :func:`verify.cost.default_budget`)."""
    return click.option("--max-memory", "max_memory", default=None, metavar="SIZE",
                        help="Refuse a parameter set whose estimated peak memory is above SIZE (e.g. 8G, 500M; "
                             "0: no limit). Default: 60% of the available memory.")


def json_option(help: str = "Write the JSON report here.") -> Decorator:
    """``--json FILE`` -> ``json_path`` (None when not given)."""
    return click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None, help=help)


def markdown_option(help: str = "Write the measured-vs-bound table here (Markdown, one row per report).") -> Decorator:
    """``--markdown FILE`` -> ``md_path`` (None when not given)."""
    return click.option("--markdown", "md_path", type=click.Path(dir_okay=False), default=None, help=help)


def certificate_option() -> Decorator:
    """``--certificate FILE`` -> ``cert_path`` (None when not given): with ``--certify``, where the
    certificate file goes (docs/certificates.md)."""
    return click.option("--certificate", "cert_path", type=click.Path(dir_okay=False), default=None,
                        help="With --certify: write the certificate file there (gzip when it ends in .gz; the model "
                             "beside it; a .safetensors path bundles both); re-check it with depthcraft "
                             "check-certificate.")


def check_certificate_path(cert_path: Optional[str], certify: bool) -> None:
    """Refuse ``--certificate`` without ``--certify`` (a click usage error, exit 2)."""
    if cert_path and not certify:
        raise click.UsageError("--certificate needs --certify (a certificate file holds a proof)")


def png_option(help: str) -> Decorator:
    """``--png FILE`` -> ``png`` (None when not given)."""
    return click.option("--png", "png", type=click.Path(dir_okay=False), default=None, help=help)


__all__ = ["certificate_option", "check_certificate_path", "check_options", "exhaustive_option", "hypothesis_option", "input_option", "json_option",
           "markdown_option", "max_memory_option", "params_option", "png_option", "samples_option", "seed_option", "stacked"]
