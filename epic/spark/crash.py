"""Crash points for recovery tests: ``EPIC_CRASH_AT=name:N`` SIGKILLs the deploy the N-th time
execution reaches point ``name`` in this run (counted across the run's processes in
``<workdir>/.crash-counts``).

(:func:`fault_point` injects an error instead, for tests that cannot fill a disk.)

Points: ``source-plan`` (a source planned a micro-batch), ``node-state`` (a stateful task saved
its snapshot, before returning its output), ``topic-commit`` (unused by default), ``sink-commit``
(a CSV sink commit appended its first non-empty part, before recording the commit),
``parquet-commit`` (a Parquet sink commit appended its parts to the growing file, before its
footer and record), ``parquet-final`` (the end-of-stream commit renamed the joined file to the
output, before recording the commit). The whole process group
is killed (driver, JVM, Python workers), as a machine failure would.

With a remote work directory (``s3://...``) the counters and fault files live in a local
directory named after it (:func:`points_dir`): these are test hooks, for one machine.
"""

from __future__ import annotations

import fcntl
import os
import signal
import tempfile

__all__ = ["crash_point", "fault_point", "points_dir", "FAULTS_DIR"]

#: ``<workdir>/.faults/<point>`` makes :func:`fault_point` raise (a file, not an environment
#: variable: the Python workers of a running session do not see the test's environment).
FAULTS_DIR = ".faults"

ENV = "EPIC_CRASH_AT"


def points_dir(workdir: str) -> str:
    """Where the crash counters and fault files of ``workdir`` live: the work directory itself,
    or for a remote one (a URI) ``$TMPDIR/epic-points-<hash of the URI>``."""
    if "://" not in workdir:
        return workdir
    import hashlib

    return os.path.join(tempfile.gettempdir(),
                        "epic-points-" + hashlib.sha1(workdir.encode()).hexdigest()[:12])


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
    d = os.path.join(points_dir(workdir), ".crash-counts")
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
        # Python workers run in their own process groups (pyspark's daemon): kill the driver's,
        # and this process too. Before, a worker that reached the point (a sink commit runs in
        # one) outlived the driver's group and finished its commit, so the "crash" came after it.
        try:
            os.killpg(pgid, signal.SIGKILL)
        finally:
            os.kill(os.getpid(), signal.SIGKILL)


def fault_point(name: str, workdir: str) -> None:
    """Fail at point ``name`` if ``<workdir>/.faults/<name>`` exists: a file holding
    ``connect-back`` is consumed and raises the error Spark gives when a Python process it
    spawned did not connect back in time (a transient failure the launcher restarts the query
    for); any other raises ``OSError(ENOSPC)``, a full disk for tests that cannot mount a small
    file system (not root). Points: ``sink-commit`` (a CSV sink commit appended its first
    non-empty part)."""
    if not workdir:
        return
    path = os.path.join(points_dir(workdir), FAULTS_DIR, name)
    try:
        with open(path) as f:
            kind = f.read().strip()
    except FileNotFoundError:
        return
    if kind == "connect-back":
        try:
            os.remove(path)
        except FileNotFoundError:
            return  # another process took it
        raise RuntimeError("Python worker failed to connect back (injected at "
                           f"{name!r} by a test)")
    import errno

    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
