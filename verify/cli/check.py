"""``depthcraft check FILE.py[:NAME]``: verify your own RASP program from the command line.

The power of :func:`depthcraft.check_program` with the table and exit codes of ``verify``::

    depthcraft check my_program.py:reverse --vocab "a b c" --max-seq-len 8 \\
        --reference my_program.py:expected --max-layers 2 --certify

NAME is a module-level ``rasp.SOp`` of the file (or a function of no arguments that returns
one); without ``:NAME``, the file's ``program`` (or its only SOp). ``--vocab`` and
``--max-seq-len`` default to the file's ``VOCAB`` and ``MAX_SEQ_LEN`` when it defines them.
The reference defaults to the program's own RASP semantics, so the check finds where the
compiled weights differ from the program. Exit status: 0 every check passed, 1 a check failed
(the table says which, with a counterexample), 2 bad usage, a file that raises on import, a
NAME that is not an SOp, a reference with the wrong signature, a program tracr cannot compile
(one line each, naming the file, node or value).
"""

from __future__ import annotations

import logging
import re
import sys
import time
from typing import Any, Dict, List, Optional

import click

from depthcraft.constructions.errors import ParameterError
from depthcraft.verify.api import MAX_SEQ_LEN_LIMIT
from depthcraft.verify.cli import options
from depthcraft.verify.cli.render import finish, stream_reports

#: Random inputs per check when --samples is not given.
DEFAULT_SAMPLES = 1000


def parse_vocab(text: str) -> List[Any]:
    """``"a b c"`` or ``"a,b,c"`` -> ``["a", "b", "c"]``; ``"0 1 2"`` -> ``[0, 1, 2]`` (integers when every token is one).

    Raises:
        ParameterError: no token in ``text``.
    """
    tokens = [t for t in re.split(r"[\s,]+", text.strip()) if t]
    if not tokens:
        raise ParameterError(f"--vocab {text!r} holds no token: give the token values, e.g. --vocab \"a b c\"")
    if all(re.fullmatch(r"-?\d+", t) for t in tokens):
        return [int(t) for t in tokens]
    return tokens


def check_kwargs(target: str, vocab: Optional[str], max_seq_len: Optional[int], reference: Optional[str],
                 max_layers: Optional[int], max_heads: Optional[int], max_d_model: Optional[int],
                 causal: Optional[bool], certify: bool, exhaustive: bool, samples: int, hyp: int, seed: int,
                 max_memory: Optional[str], save: Optional[str], mlp_exactness: int = 100,
                 cert_path: Optional[str] = None) -> Dict[str, Any]:
    """The :func:`~depthcraft.verify.api.check_program` arguments of a ``check`` command line.

    One place for the command's meaning, so that a new option is one more keyword here.

    Raises:
        ParameterError: the file, NAME, reference, vocabulary or length is not usable (one line).
    """
    from depthcraft.verify.userfiles import load_module, load_program, load_reference, split_target

    program, name = load_program(target)
    module = load_module(split_target(target)[0])
    if vocab is not None:
        tokens = parse_vocab(vocab)
    elif getattr(module, "VOCAB", None) is not None:
        tokens = list(module.VOCAB)
    else:
        raise click.UsageError("give --vocab (the token values, e.g. --vocab \"a b c\"), or define VOCAB in the file")
    if max_seq_len is None:
        max_seq_len = getattr(module, "MAX_SEQ_LEN", None)
        if max_seq_len is None:
            raise click.UsageError("give --max-seq-len N (the longest input), or define MAX_SEQ_LEN in the file")
        if isinstance(max_seq_len, bool) or not isinstance(max_seq_len, int) or \
                not 1 <= max_seq_len <= MAX_SEQ_LEN_LIMIT:
            raise ParameterError(f"MAX_SEQ_LEN = {max_seq_len!r} in {split_target(target)[0]} must be an integer in "
                                 f"1..{MAX_SEQ_LEN_LIMIT}")
    bound = {k: v for k, v in (("attn_layers", max_layers), ("heads", max_heads), ("d_model", max_d_model))
             if v is not None}
    return dict(program=program, vocab=tokens, max_seq_len=int(max_seq_len),
                reference=None if reference is None else load_reference(reference), bound=bound or None,
                causal=causal, certify=certify, exhaustive=exhaustive, samples=samples, hypothesis_examples=hyp,
                seed=seed, max_memory=max_memory, save=save, name=name, mlp_exactness=mlp_exactness,
                certificate_path=cert_path)


@click.command("check")
@click.argument("target", metavar="FILE.py[:NAME]")
@click.option("--vocab", default=None, metavar="TOKENS",
              help='Token values, e.g. "a b c" or "0,1,2" (integers when every token is one). Default: the file\'s VOCAB.')
@click.option("--max-seq-len", "max_seq_len", type=click.IntRange(1, MAX_SEQ_LEN_LIMIT), default=None,
              help="N, the longest input in tokens. Default: the file's MAX_SEQ_LEN.")
@click.option("--reference", default=None, metavar="FILE.py:FN",
              help="FN(tokens: list) -> one output per token. Default: the program's own RASP semantics.")
@click.option("--max-layers", "max_layers", type=click.IntRange(0), default=None,
              help="Bound: at most this many attention layers.")
@click.option("--max-heads", "max_heads", type=click.IntRange(0), default=None,
              help="Bound: at most this many heads in one attention layer.")
@click.option("--max-d-model", "max_d_model", type=click.IntRange(0), default=None,
              help="Bound: at most this residual width.")
@click.option("--causal/--bidirectional", "causal", default=None,
              help="Mask keys after the query, or not. Default: bidirectional for tracr's primitives (RASP's "
                   "semantics), causal where a hand-built head needs it (as compile_program).")
@click.option("--mlp-exactness", "mlp_exactness", type=click.IntRange(1, 100_000), default=100, show_default=True,
              help="tracr's MLP discretisation (larger: more exact Map/SequenceMap MLPs, wider d_mlp).")
@options.check_options(DEFAULT_SAMPLES, "Random inputs (uniform over the vocabulary at length N).")
@click.option("--certify", is_flag=True, help="Also prove exactness for every input up to N (docs/certification.md).")
@options.certificate_option()
@options.max_memory_option()
@options.json_option()
@click.option("--save", "save", type=click.Path(dir_okay=False), default=None,
              help="Also write the compiled model here (.safetensors, atomically).")
def check_cmd(target, vocab, max_seq_len, reference, max_layers, max_heads, max_d_model, causal, mlp_exactness,
              samples, exhaustive, hyp, seed, certify, cert_path, max_memory, json_path, save) -> None:
    """Compile the RASP program NAME of FILE.py, measure it, check it against a bound and a reference.

    Prints the same table as verify; exit 0 when every check passed, 1 when one failed,
    2 on bad usage or a program that does not load or compile.
    """
    from depthcraft.constructions.files import check_outputs
    from depthcraft.verify.api import check_program
    from depthcraft.verify.cli.render import write_outputs

    started = time.perf_counter()
    logging.disable(logging.WARNING)  # tracr's "Assuming this input will never occur": the report says what matters
    options.check_certificate_path(cert_path, certify)
    check_outputs([json_path, save, cert_path])
    kw = check_kwargs(target, vocab, max_seq_len, reference, max_layers, max_heads, max_d_model, causal, certify,
                      exhaustive, samples, hyp, seed, max_memory, save, mlp_exactness, cert_path)
    label = f"n={kw['max_seq_len']} vocab={','.join(map(str, kw['vocab']))}"
    done = stream_reports(iter([check_program(**kw)]), [label], [kw["name"]], certify=certify)
    written = write_outputs(done, json_path, None, ["construction", "params"])
    if save:
        written.insert(0, f"model written to {save}")
    finish(done, time.perf_counter() - started, written, certify=certify)
    sys.exit(0 if done[0]["passed"] else 1)


__all__ = ["check_cmd", "check_kwargs", "parse_vocab"]
