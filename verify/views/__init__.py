"""Teaching views of a compiled model on one input (``depthcraft show``).

For one input sequence, from a real forward pass of the compiled weights:

* the RASP program, one SOp per line in evaluation order (:func:`program_listing`);
* per attention layer and head: which SOps its QK circuit compares (query side x
  key side), what its OV circuit copies into which SOp, and where every query
  position attends (the top key; the keys and weights when the weight is split)
  (:func:`attention_summary`);
* every MLP sublayer and the SOps it writes;
* the residual-stream layout: which dimensions hold which SOp (or pointer) and its
  values, and which sublayer writes them (:func:`residual_layout`);
* optionally a PNG with every head's attention map (:func:`attention_figure`);
* the explore page (``depthcraft explore``): one self-contained interactive HTML file with all of the
  above plus the residual stream after every sublayer (:func:`explore_html`, data from
  :func:`explore_construction`, :func:`explore_saved`, :func:`explore_trained`).

Modules: :mod:`~depthcraft.verify.views.data` (what is shown: :class:`ShowData`,
:func:`for_construction`, :func:`for_program`, :func:`for_saved`),
:mod:`~depthcraft.verify.views.listing` (the RASP program as text),
:mod:`~depthcraft.verify.views.text` (the text view, within a line width),
:mod:`~depthcraft.verify.views.figures` (the PNG) and :mod:`~depthcraft.verify.views.explore` (the HTML page). Positions are model positions
(SPEC §3): 0 is BOS, tokens sit at 1..N.
"""

from depthcraft.verify.views.data import (UNSCORED, Alignment, ExploreData, HeadView, MLPView, ShowData, build,
                                          describe_sublayers, explore_construction, explore_saved, explore_trained,
                                          for_construction, for_program, for_saved, residual_layout)
from depthcraft.verify.views.explore import explore_html, write_explore
from depthcraft.verify.views.figures import attention_figure
from depthcraft.verify.views.listing import describe_expr, program_listing, sop_name
from depthcraft.verify.views.text import attention_summary, outcome_lines, render_text

__all__ = ["UNSCORED", "Alignment", "ExploreData", "HeadView", "MLPView", "ShowData", "attention_figure",
           "attention_summary", "build", "describe_expr", "describe_sublayers", "explore_construction",
           "explore_html", "explore_saved", "explore_trained", "for_construction", "for_program", "for_saved",
           "outcome_lines", "program_listing", "render_text", "residual_layout", "sop_name", "write_explore"]
