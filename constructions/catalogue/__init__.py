"""The catalogue of named constructions (SPEC §5): the registry and one module per task family.

This subpackage sits one layer above :mod:`depthcraft.rasp_programs` (the family
modules compile its programs) and below :mod:`depthcraft.verify`. Importing it
registers every family:

* :mod:`~depthcraft.constructions.catalogue.khop`: ``khop_doubling``, ``khop_rasp``,
  ``khop_floor``, ``khop_constant_width``;
* :mod:`~depthcraft.constructions.catalogue.chen_zou`: ``sc_memorize``,
  ``icqa_copy_match``, ``tm_parse_map``, ``ictm_parse_copy_match``;
* :mod:`~depthcraft.constructions.catalogue.retrieval`: ``retrieval_doubling``;
* :mod:`~depthcraft.constructions.catalogue.connectivity`: ``graph_connectivity``.

Look a construction up with :func:`get`; resolve its parameters (its own and its
task's) with :func:`depthcraft.verify.lookup.resolve`.
"""

from depthcraft.constructions.catalogue.registry import (BOUND_KEYS, Bound, Construction, all_constructions,
                                                          clear_build_cache, get, register)
# The family modules register at import; this order is the order of `depthcraft list` and `verify --all`.
from depthcraft.constructions.catalogue import khop  # noqa: F401,E402  isort: skip
from depthcraft.constructions.catalogue import chen_zou  # noqa: F401,E402  isort: skip
from depthcraft.constructions.catalogue import retrieval  # noqa: F401,E402  isort: skip
from depthcraft.constructions.catalogue import connectivity  # noqa: F401,E402  isort: skip

__all__ = ["BOUND_KEYS", "Bound", "Construction", "all_constructions", "clear_build_cache", "get", "register"]
