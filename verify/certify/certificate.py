"""The typed certificate: the one place where "certified" is decided.

:class:`Certificate` holds the certifier's proof (the report dict of :mod:`.report` or the
symmetry / locality routes), the route that made it, the certificate FILE (the independent
checker's format, :mod:`depthcraft.checker.certificate`) and the checker's verdict on it.
``certified`` is a property computed here and nowhere else:

* the certifier's proof holds (``proof["certified"]``), or, for the exhaustive route, the
  checker's bounded forward proves every listed input;
* the independent checker says *valid*; or it does not confirm the proof without contradicting it:
  its version does not check this route or block kind, or its own (simpler) float32 bounds and
  rules do not prove it (*not independently checked*, with the reason, counted in the README);
* it has not been withdrawn (:meth:`withdraw`: a sampled check beside it failed, or the report
  fails its bound).

A certifier proof the checker REJECTS (a table of the weights differs from the program) is not
certified: the report names the checker's failing obligation. The verifier's exhaustive upgrade goes through
:meth:`Certificate.exhaustive` (the checker proves every input of the task's finite input set).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Dict, List, Optional, Sequence

from depthcraft import checker
from depthcraft.constructions import io
from depthcraft.constructions.model import CompiledModel
from depthcraft.constructions.version import package_version

#: Routes by the certifier's ``method`` key (None: the tables route).
ROUTES = {None: "tables", "symmetry": "symmetry", "locality": "locality", "exhaustive": "exhaustive"}


def model_path_for(cert_path: str) -> str:
    """The model file written beside a certificate file: ``x.json.gz`` / ``x.json`` / ``x`` -> ``x.safetensors``."""
    base = cert_path
    for ext in (".gz", ".json"):
        if base.endswith(ext):
            base = base[: -len(ext)]
    return base + ".safetensors"


def _sink(model: CompiledModel) -> Any:
    link = model.program
    return None if link is None or link.sink not in link.nodes else link.nodes[link.sink]


def checker_model(model: CompiledModel) -> "checker.modelfile.Model":
    """The model as the independent checker reads it: from the bytes of its file (:func:`io.to_bytes`)."""
    return checker.load_model(io.to_bytes(model)[0])


def _issued_by(model: CompiledModel) -> Dict[str, Any]:
    meta = model.meta
    return {"tool": f"depthcraft {package_version()}", "construction": meta.get("construction"),
            "params": {k: v for k, v in (meta.get("params") or {}).items()}, "program_source": meta.get("program_source")}


@dataclasses.dataclass
class Certificate:
    """A certificate of one model (module docstring).

    Attributes:
        proof: the certifier's report dict (``per_layer``, ``uncertified``, ``scope``, ...).
        route: ``tables``, ``exhaustive``, ``symmetry`` or ``locality``.
        file: the certificate file's content (a dict; :func:`depthcraft.checker.write` makes its
            bytes), or None when the certifier's proof does not hold.
        check: the independent checker's :class:`~depthcraft.checker.Verdict` on ``file``, or None.
        withdrawn: why the certificate was withdrawn, or None.
    """

    proof: Dict[str, Any]
    route: str
    file: Optional[Dict[str, Any]] = None
    check: Optional["checker.Verdict"] = None
    withdrawn: Optional[str] = None
    notes: List[str] = dataclasses.field(default_factory=list)

    @property
    def independently_checked(self) -> bool:
        """The independent checker confirmed the proof (its verdict is *valid*)."""
        return self.check is not None and self.check.valid

    @property
    def certified(self) -> bool:
        """The one definition of "certified" (module docstring)."""
        if self.withdrawn is not None:
            return False
        if self.route == "exhaustive":
            return self.check is not None and self.check.valid
        if not self.proof.get("certified"):
            return False
        return self.check is None or self.check.status != "rejected"

    def withdraw(self, why: str, witness: Any = None) -> None:
        """Withdraw a certificate (a failing check beside it); the report names ``why``."""
        if self.certified:
            self.withdrawn = why
            self.proof.setdefault("uncertified", []).append(
                {"layer": None, "head": None, "check": "report", "why": why, "witness": witness})

    def exhaustive(self, model: CompiledModel, inputs: Sequence[Sequence[Any]], what: str,
                   positions: str = "all") -> None:
        """Replace a tables proof that does not hold by the exhaustive route over ``inputs`` (the task's
        whole finite input set, ``what`` says which; ``positions``: the task scores ``all`` or only the
        ``last`` position): the checker checks each input's float32 forward."""
        if self.certified:
            return
        premises = {"inputs": [[checker.certificate._jv(v) for v in xs] for xs in inputs], "input_set": what,
                    "positions": positions}
        cert, verdict = checker.build(checker_model(model), _sink(model), "exhaustive", premises,
                                      _issued_by(model))
        self.notes += [f"not proved by the tables: {u['why']}" for u in self.proof.get("uncertified", [])]
        self.route, self.file, self.check = "exhaustive", cert, verdict
        self.proof.update(method="exhaustive")

    def to_json(self) -> Dict[str, Any]:
        """The report's ``certificate`` entry (SPEC §6 keys, plus ``route`` and ``independent_check``)."""
        out = dict(self.proof)
        out["certified"] = self.certified
        out["route"] = self.route
        if self.route == "exhaustive" and self.file is not None:
            n = self.file["claims"].get("inputs")
            cl = self.file["claims"]
            where = "its last (scored) position" if self.file["premises"].get("positions") == "last" else \
                "every position"
            out["scope"] = (f"each of the {n} inputs of {self.file['premises'].get('input_set')}, at {where}: the "
                            f"model decodes to the RASP program's output ({cl.get('bounded')} inputs for any float32 "
                            f"summation order, {cl.get('computed')} as the checker's own float32 forward computes "
                            f"them); the tables prove nothing here: see notes")
            out["uncertified"] = [] if self.certified else out.get("uncertified", [])
        c = self.check
        out["independent_check"] = None if c is None else {
            "valid": c.valid, "status": {"valid": "valid", "rejected": "rejected"}.get(c.status,
                                                                                      "not independently checked"),
            "why": c.failure, "seconds": round(c.seconds, 3)}
        if c is not None and c.status == "rejected" and self.proof.get("certified") and self.route != "exhaustive":
            out.setdefault("uncertified", []).append({
                "layer": None, "head": None, "check": "independent checker",
                "why": f"the independent checker does not confirm the proof: {c.failure}", "witness": c.witness})
        if self.withdrawn:
            out["withdrawn"] = self.withdrawn
        if self.notes:
            out["notes"] = list(self.notes)
        return out

    def file_bytes(self, path: str) -> bytes:
        """The certificate file's bytes for ``path`` (gzip for ``*.gz``).

        Raises:
            ValueError: there is no certificate file (the proof does not hold).
        """
        if self.file is None or not self.certified:
            raise ValueError("no certificate to write: the model is not certified")
        return checker.write(path, self.file)


def issue(model: CompiledModel, proof: Dict[str, Any], premises: Optional[Dict[str, Any]] = None) -> Certificate:
    """The :class:`Certificate` of a certifier proof: where it holds, its file and the checker's verdict.

    The certifier's route decides the checker's: the tables route for a proof over every input
    (no domain fact used), the symmetry route for an orbit proof; a proof that uses a domain
    precondition, or locality, has no checker route in this version (not independently checked).
    """
    route = ROUTES.get(proof.get("method"), "tables")
    cert = Certificate(proof=proof, route=route)
    sink = _sink(model)
    if not proof.get("certified") or sink is None:
        return cert
    dom = proof.get("domain") or {}
    t0 = time.perf_counter()
    if route == "tables" and dom.get("used_as_precondition"):
        cert.check = checker.Verdict(False, "nothing", "the proof uses a domain precondition (this checker version "
                                     "checks proofs over every input)", unsupported=True, status="unsupported")
    elif route == "locality":
        cert.check = checker.Verdict(False, "nothing", "the locality route (not in this checker version)",
                                     unsupported=True, status="unsupported")
    else:
        file, verdict = checker.build(checker_model(model), sink, route, premises or {}, _issued_by(model))
        cert.file, cert.check = file, verdict
    cert.check.seconds = cert.check.seconds or time.perf_counter() - t0
    return cert


__all__ = ["Certificate", "issue", "checker_model", "model_path_for"]
