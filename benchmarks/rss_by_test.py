"""pytest plugin: the process's resident memory after every test, one TSV row per test.

Finds which test modules make the suite's memory grow (docs/performance.md, "Test suite")::

    PYTHONPATH=benchmarks RSS_LOG=rss.tsv pytest -q -n 0 -p rss_by_test

Columns: seconds since the plugin loaded, RSS now (MiB, ``/proc/PID/statm``, ``suite_cost.rss_mib``; Linux), peak RSS
so far (MiB, ``ru_maxrss``), the test's node id. Run in one process (``-n 0``): under xdist each
worker would write the same file.
"""

import os
import resource
import time

from suite_cost import rss_mib  # benchmarks/ is on PYTHONPATH (see above)

_LOG = open(os.environ.get("RSS_LOG", "rss_by_test.tsv"), "w")
_LOG.write("seconds\trss_mib\tpeak_rss_mib\ttest\n")
_T0 = time.time()


def pytest_runtest_logfinish(nodeid, location):
    """After each test: append its row (flushed, so a killed run keeps its rows)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    _LOG.write(f"{time.time() - _T0:.1f}\t{rss_mib(os.getpid()):.0f}\t{peak:.0f}\t{nodeid}\n")
    _LOG.flush()
