"""The independent certificate checker: small, and sharing no code with the certifier.

A certificate (:mod:`.certificate`) says that a model file's float32 forward decodes to a RASP
program's output on a stated set of inputs, and records every number of the proof. This package
re-derives each number from the weights and the program and accepts only when every obligation
holds. Its trusted base is Python, numpy, safetensors (to read the weights), ``tracr.rasp`` (the
program's own functions and tracr's evaluator) and these files:

* :mod:`.float32`: the float32 model, stated once, with its sources;
* :mod:`.modelfile`: reading a model file; the weights' SHA-256;
* :mod:`.program`: the program's graph, value sets and meaning (the hand-built heads' semantics
  written here);
* :mod:`.state`, :mod:`.tables`: the tables route (every input up to N);
* :mod:`.forward`: a bounded forward pass (the exhaustive and symmetry routes);
* :mod:`.certificate`: the file format, the obligations and the check.

It imports nothing else of depthcraft (``tests/test_checker_isolated.py`` enforces it). Run it as
``python -m depthcraft.checker CERT --model FILE --program FILE.py:NAME`` or through
``depthcraft check-certificate``.
"""

from depthcraft.checker.certificate import NotACertificate, Verdict, build, check, read, write
from depthcraft.checker.modelfile import ModelFileError, load as load_model
from depthcraft.checker.program import ProgramError

__all__ = ["NotACertificate", "Verdict", "build", "check", "read", "write", "ModelFileError", "load_model",
           "ProgramError"]
