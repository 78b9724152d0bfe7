"""Crash points for recovery tests: ``EPIC_CRASH_AT=name:N`` SIGKILLs the deploy the N-th time
execution reaches point ``name`` in this run (counted across the run's processes in
``<workdir>/.crash-counts``).

Points: ``source-plan`` (a source planned a micro-batch), ``node-state`` (a stateful task saved
its snapshot, before returning its output), ``topic-commit`` (unused by default), ``sink-commit``
(a CSV sink commit appended its first part, before recording the commit). The whole process group
is killed (driver, JVM, Python workers), as a machine failure would.
"""

from __future__ import annotations

import fcntl
import os
import signal

__all__ = ["crash_point"]

ENV = "EPIC_CRASH_AT"


def crash_point(name: str, workdir: str) -> None:
    """Count a pass through point ``name``; SIGKILL the process group on the configured pass."""
    spec = os.environ.get(ENV)
    if not spec or ":" not in spec:
        return
    point, _, nth = spec.rpartition(":")
    if point != name:
        return
    # Counted per run (the driver's process group), so each rerun counts from zero.
    pgid = int(os.environ.get("EPIC_DRIVER_PGID", "0")) or os.getpgrp()
    d = os.path.join(workdir, ".crash-counts")
    os.makedirs(d, exist_ok=True)
    p = os.path.join(d, f"{name}.{pgid}")
    with open(p, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        n = len(f.read()) + 1
        f.write("x")
        f.flush()
        os.fsync(f.fileno())
    if n == int(nth):
        # Python workers run in their own process groups (pyspark's daemon): kill the driver's.
        os.killpg(pgid, signal.SIGKILL)
