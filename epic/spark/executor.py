"""Helpers that run inside Spark's Python workers (executor side), never on the driver only."""

from __future__ import annotations

import gc
import sys

__all__ = ["freeze_gc_once"]

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
