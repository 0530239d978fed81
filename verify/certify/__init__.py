"""Certification: a proof, from finite tables, that a compiled model is exact for EVERY input up to N.

Sampling checks a model on some inputs; this package proves, for every input of length
1..N over the vocabulary (BOS prepended), that at every position 1..n the model's decoded
float32 output equals the RASP program's output (SPEC §6). Two facts make it: the float32
output equals the decoded output of the model's *ideal* evaluation (the same weights run in
exact arithmetic with hardmax attention, SPEC §3, on the exact one-hot SOp encodings:
``float32_matches_hardmax``), and every head's and MLP's tables equal the RASP expression
the compiler built them from (the program check). It is abstract interpretation over the
residual stream (docs/certification.md has the method for a reviewer and a worked layer for
a teacher). The modules follow the method's parts, each with its soundness argument:

* :mod:`.state`: the abstract state (residual blocks, their sets of ideal vectors, one
  radius per row, l1 bounds per block) and the enumeration of what a projection reads.
* :mod:`.heads`: attention heads (score tables, levels, clean levels, the leak, the
  output radius).
* :mod:`.relu`: ReLU attention heads (exact sums over the keys scoring above zero).
* :mod:`.positions`: position-wise value sets (combinations no input reaches).
* :mod:`.mlps`: MLP sublayers (every input combination exactly, intervals through ReLU).
* :mod:`.sets`: set-valued blocks (union heads, their threshold MLPs, set copies, the meet):
  a product domain per coordinate instead of enumerated vectors.
* :mod:`.float32`: the float32 rounding model (u = 2^-24, gamma_n sums, exp within 4 ulp).
* :mod:`.program`: the program check (selection, OV and look-up tables against the RASP
  expressions, through ``model.program``), and the causal-selector check of every report.
* :mod:`.symmetry`: the symmetry route: a domain that is a few orbits of token and position
  renamings, proved by one bounded float32 forward per representative once the weights and the
  program are checked to commute with the renamings (tried first where a task declares one); where
  the orbits are too many, *locality*: components proved one piece each, with every key of another
  component bounded below each query's top.
* :mod:`.report`: the driver over the sublayers, the read-out and the report.
* :mod:`.certificate`: the typed :class:`Certificate` (the only place "certified" is set), its
  file, and the independent checker's verdict on it (:mod:`depthcraft.checker`).

What is NOT proved here: that the RASP program computes the task (the theorem's half,
:mod:`depthcraft.verify.theorem` checks it on the cheap reference semantics).
"""

from depthcraft.verify.certify.certificate import Certificate, issue
from depthcraft.verify.certify.float32 import U32, U64
from depthcraft.verify.certify.heads import MAX_TABLE, ROW_CHUNK_ENTRIES
from depthcraft.verify.certify.report import certify
from depthcraft.verify.certify.state import MAX_TUPLES, Block, blocks_of

def prove(model, atol: float = 1e-3, domain=None, precondition=None) -> Certificate:
    """:func:`certify`'s proof as a typed :class:`Certificate`: with the certificate file and the
    independent checker's verdict on it (:mod:`.certificate`; the one place "certified" is decided)."""
    try:
        proof = certify(model, atol, domain=domain, precondition=precondition)
    except (MemoryError, KeyboardInterrupt):
        raise
    except Exception as e:  # noqa: BLE001 - a model the certifier cannot analyse is not certified, never a crash
        why = f"the certifier cannot analyse this model ({type(e).__name__}: {e})"
        proof = {"certified": False, "float32_matches_hardmax": False, "scope": "nothing proved (see uncertified)",
                 "per_layer": [], "readout": None, "seconds": None,
                 "uncertified": [{"layer": None, "head": None, "check": "model", "why": why, "witness": None}]}
    premises = proof.pop("checker_premises", None) or ({} if model.categorical_output else {"atol": float(atol)})
    return issue(model, proof, premises)


__all__ = ["prove", "Certificate", "certify", "Block", "blocks_of", "U32", "U64", "MAX_TABLE", "MAX_TUPLES", "ROW_CHUNK_ENTRIES"]
