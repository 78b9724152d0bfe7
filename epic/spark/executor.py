"""Helpers that run inside Spark's Python workers (executor side), never on the driver only."""

from __future__ import annotations

import gc
import os
import sys

__all__ = ["freeze_gc_once", "release_memory", "WORKER_KEEPS"]

_frozen_at = -1   # len(sys.modules) at the last freeze


def freeze_gc_once() -> None:
    """Call ``gc.freeze()`` once per set of imported modules; cheap to call on every call.

    PySpark's reused workers run a full ``gc.collect()`` after every request (every task, and
    every planner or commit call a micro-batch makes in the driver's Python workers), which walks
    every object the worker has ever imported (pyspark, pyarrow, numpy, the topology's code...):
    about 30 ms each. Moving what exists into the permanent generation takes it out of those
    walks. It is done again when modules were imported since (a later task may import the
    topology's operators); objects created otherwise are still collected normally.
    """
    global _frozen_at
    n = len(sys.modules)
    if n != _frozen_at:
        _frozen_at = n
        gc.collect()
        gc.freeze()


def release_memory(above: int = 0) -> None:
    """Hand the memory Arrow's allocator keeps cached back to the system, when this process's
    resident memory is above ``above`` bytes.

    Arrow's default pool (mimalloc) keeps freed pages for reuse. A reused Python worker runs the
    tasks of several queries one after another and then sits idle in Spark's pool, and the
    planner and commit processes live as long as their query: each kept the high-water mark of
    its largest micro-batch (a full DEBS deploy's processes held several hundred MB that way).
    Handing pages back costs the next micro-batch page faults (about 15 ms per 100 MB), so a
    task worker does it only past a threshold (:data:`WORKER_KEEPS`)."""
    if above and _resident_bytes() <= above:
        return
    import pyarrow as pa

    pa.default_memory_pool().release_unused()


#: Resident memory a task worker keeps without handing Arrow's cache back (imports take about
#: 150-250 MB of it).
WORKER_KEEPS = 384 << 20


def _resident_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 1 << 62   # unknown: release
