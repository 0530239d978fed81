"""The symmetry route (orbits of renamings): not yet in this checker version."""

from depthcraft.checker.state import Unsupported


def derive(model, sink, premises):
    """(claims, refusal, where): this version does not check the symmetry route."""
    return {}, Unsupported("the symmetry route (not in this checker version)"), None
