"""The four tasks of Chen & Zou (ICML 2024), as this project formalises them (SPEC §4.2).

* :class:`~verify.tasks.chen_zou.sc.SCTask` (``sc``): memorisation of a labelled dataset.
* :class:`~verify.tasks.chen_zou.icqa.ICQATask` (``icqa``): in-context question answering.
* :class:`~verify.tasks.chen_zou.tm.TMTask` (``tm``): template matching.
* :class:`~verify.tasks.chen_zou.ictm.ICTMTask` (``ictm``): in-context template matching.
* :class:`~verify.tasks.chen_zou.ictm.ICTMDenseTask` (``ictm_dense``): ICTM with several scored
  queries and distinct labels (a training variant for the cross-check).

The template machinery (canonical patterns, injective substitutions) is in
:mod:`rasp_programs.templates`, the SC dataset and TM templates in
:mod:`rasp_programs.chen_zou_data` (the constructions need them too). The paper's full text was not available: the
formats are the project's formalisation of its description.
"""

from depthcraft.verify.tasks.chen_zou.common import NONE
from depthcraft.verify.tasks.chen_zou.icqa import ICQATask
from depthcraft.verify.tasks.chen_zou.ictm import ICTMDenseTask, ICTMTask
from depthcraft.verify.tasks.chen_zou.sc import SCTask
from depthcraft.verify.tasks.chen_zou.tm import TMTask

CHEN_ZOU_TASKS = (SCTask(), ICQATask(), TMTask(), ICTMTask(), ICTMDenseTask())

__all__ = ["NONE", "SCTask", "ICQATask", "TMTask", "ICTMTask", "ICTMDenseTask", "CHEN_ZOU_TASKS"]
