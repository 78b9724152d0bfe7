"""Helpers that run inside Spark's Python workers (executor side), never on the driver only."""

from __future__ import annotations

import gc
import sys

__all__ = ["freeze_gc_once", "release_memory"]

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


def release_memory() -> None:
    """Hand the memory Arrow's allocator keeps cached back to the system.

    Arrow's default pool (mimalloc) keeps freed pages for reuse. A reused Python worker runs the
    tasks of several queries one after another and then sits idle in Spark's pool, and the
    planner and commit processes live as long as their query: each kept the high-water mark of
    its largest micro-batch (a full DEBS deploy's processes held several hundred MB that way).
    Called at the end of every task, planned micro-batch and commit; it costs well under a
    millisecond when there is nothing to hand back."""
    import pyarrow as pa

    pa.default_memory_pool().release_unused()
