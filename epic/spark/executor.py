"""Helpers that run inside Spark's Python workers (executor side), never on the driver only."""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import threading

__all__ = ["freeze_gc_once", "prepare_worker", "release_memory", "tune_malloc", "use_system_pool",
           "WORKER_KEEPS", "WORKERS_KEEP_PER_SLOT", "keep_or_release", "task_ids",
           "key_partition_of_task", "cpu_slot",
           "cpu_slot_dir", "remove_cpu_slots"]

_task = threading.local()   # .part: the key partition a direct query's task runs (see below)

_frozen_at = -1   # len(sys.modules) at the last freeze
_malloc_tuned = False


def prepare_worker() -> None:
    """What every Python function epic runs inside Spark workers calls first: once per process
    :func:`tune_malloc` and, where that applied, :func:`use_system_pool`; then
    :func:`freeze_gc_once`."""
    global _malloc_tuned
    if not _malloc_tuned:
        _malloc_tuned = True
        if tune_malloc():
            use_system_pool()
    freeze_gc_once()


@contextlib.contextmanager
def key_partition_of_task(part: int):
    """Within it, :func:`task_ids` on this thread gives ``part`` as the task's partition: a
    direct query whose sibling branches run in tasks of their own (:mod:`epic.spark.direct`)
    numbers its Spark partitions ``branch * partitions + key partition``, while state
    directories and output parts are per key partition."""
    old = getattr(_task, "part", None)
    _task.part = int(part)
    try:
        yield
    finally:
        _task.part = old


@contextlib.contextmanager
def cpu_slot(key: str, slots: int, poll: float = 0.01):
    """Hold one of ``slots`` CPU slots of this machine shared by the tasks of one deploy
    (``key``, e.g. its work directory) while the block runs: at most ``slots`` such tasks work
    at once, the others wait here before reading anything (so they hold no memory). Slots are
    ``flock``-ed files in the temp directory, released by the kernel if a task dies.
    ``slots <= 0``: no limit."""
    if slots <= 0:
        yield
        return
    import fcntl
    import time

    d = cpu_slot_dir(key)
    os.makedirs(d, exist_ok=True)
    fds = []
    try:
        while True:
            for i in range(slots):
                if len(fds) <= i:
                    fds.append(os.open(os.path.join(d, f"{i}.lock"), os.O_RDWR | os.O_CREAT,
                                       0o600))
                try:
                    fcntl.flock(fds[i], fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue
                try:
                    yield
                finally:
                    fcntl.flock(fds[i], fcntl.LOCK_UN)
                return
            time.sleep(poll)
    finally:
        for fd in fds:
            os.close(fd)


def cpu_slot_dir(key: str) -> str:
    """The directory of :func:`cpu_slot`'s lock files for deploy ``key`` (in the temp
    directory; :func:`remove_cpu_slots` removes it when the deploy finishes)."""
    import hashlib
    import tempfile

    return os.path.join(tempfile.gettempdir(), "epic-cpu-slots-" + hashlib.sha1(
        f"{os.getuid()}:{key}".encode()).hexdigest()[:16])


def remove_cpu_slots(key: str) -> None:
    """Remove the lock files of deploy ``key``'s CPU slots once its queries have stopped (a
    task that still waits for a slot makes them again)."""
    import shutil

    shutil.rmtree(cpu_slot_dir(key), ignore_errors=True)


def task_ids() -> tuple[int, int]:
    """``(micro-batch id, partition)`` of the running Spark task: the partition is the key
    partition set by :func:`key_partition_of_task`, else Spark's partition id."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    part = getattr(_task, "part", None)
    # streaming.sql.batchId: an internal Spark property, the only place a task learns its
    # micro-batch id
    return (int(ctx.getLocalProperty("streaming.sql.batchId")),
            ctx.partitionId() if part is None else part)


def use_system_pool() -> bool:
    """Make glibc's malloc (as :func:`tune_malloc` set it) Arrow's default memory pool in this
    process, instead of mimalloc.

    Spark's Python workers are forked fresh during a deploy. mimalloc's memory in a fresh
    process is backed by transparent huge pages here, and faulting those in (with the kernel
    compacting memory first) cost a keyed task 120-150 ms of system time for the 10 batches of
    1.92 M rows, against 26-28 ms with the system pool; the full DEBS game took 308 CPU-s
    instead of 324 (CSV) and 263 instead of 276 (Parquet). Not done when the user chose a pool
    (``ARROW_DEFAULT_MEMORY_POOL``). Returns whether the pool was switched."""
    if os.environ.get("ARROW_DEFAULT_MEMORY_POOL"):
        return False
    import pyarrow as pa

    pa.set_memory_pool(pa.system_memory_pool())
    return True


#: glibc's ``mallopt`` parameters: ``M_TRIM_THRESHOLD`` and ``M_MMAP_THRESHOLD``.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
#: Blocks up to this size come from the heap (glibc's own ceiling for its adaptive threshold),
#: and a heap keeps up to twice that free at its top, as a warmed-up glibc process does.
MMAP_THRESHOLD = 32 << 20


def tune_malloc() -> bool:
    """Set glibc's malloc to keep the memory of freed batch-sized blocks for the next batch.

    numpy's arrays come from glibc's ``malloc``. By default it serves blocks of 128 KiB and more
    with ``mmap`` and unmaps them when freed, raising that threshold only to the size of a block
    freed so far, and hands a heap's free top back to the system past twice the threshold. A
    task's per-batch arrays (positions, hashes, indices: a few MB each) were therefore mapped,
    faulted in page by page and unmapped again for every batch: about 1,000 page faults per
    200,000 rows, 40 % of a keyed task's read. With the thresholds fixed where a long-running
    process's adaptive ones end (blocks up to 32 MiB from the heap, 64 MiB kept free), the next
    batch reuses the pages. Not done when the user set either threshold (``MALLOC_*_`` variables)
    or on another C library. Returns whether the thresholds were set."""
    if os.environ.get("MALLOC_MMAP_THRESHOLD_") or os.environ.get("MALLOC_TRIM_THRESHOLD_"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        if not hasattr(libc, "gnu_get_libc_version"):
            return False
        return bool(libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)
                    and libc.mallopt(_M_TRIM_THRESHOLD, 2 * MMAP_THRESHOLD))
    except (OSError, AttributeError):
        return False


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

    Arrow's pool keeps freed pages for reuse (mimalloc; in Spark's processes glibc's malloc,
    :func:`use_system_pool`, whose release is ``malloc_trim``). A reused Python worker runs the
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

#: Resident memory the task workers of a local deploy keep in all (:func:`keep_or_release`), per
#: CPU slot: a worker past :data:`WORKER_KEEPS` keeps its cache while the workers' sum stays
#: under this times the slots.
WORKERS_KEEP_PER_SLOT = 1024 << 20


def keep_or_release(key: str | None, slots: int) -> None:
    """At the end of a task: keep this worker's freed memory for the next task, or hand it back.

    Handing it back costs the next task that runs here page faults for all of it (a DEBS source
    task frees about 340 MB of its 470 MB working set, and the kernel zeroes every page again:
    about 1 s of system time per GB). Up to :data:`WORKER_KEEPS` a worker always keeps it. Past
    that, with a local deploy's CPU slots (``key``: the deploy, as for :func:`cpu_slot`;
    ``slots`` > 0), it keeps it while the resident memory of its deploy's task workers, its own
    and the others' as it is at that moment (a worker in a task counts its working set), stays
    under :data:`WORKERS_KEEP_PER_SLOT` times ``slots``: each worker records itself in a file
    next to the slots' lock files, and the decisions are taken one at a time under a lock.
    Spark's idle workers therefore hold a bounded total that shrinks while the running tasks
    need more (four workers keeping 640 MB each had put a deploy of the DEBS game over 4 GiB).
    Without slots (a cluster), :func:`release_memory` past :data:`WORKER_KEEPS`."""
    if not key or slots <= 0:
        release_memory(above=WORKER_KEEPS)
        return
    import fcntl

    d = cpu_slot_dir(key)
    mine = os.path.join(d, f"keep-{os.getpid()}")
    try:
        os.makedirs(d, exist_ok=True)
        fd = os.open(os.path.join(d, "keep.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:
        release_memory(above=WORKER_KEEPS)
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        rss = _resident_bytes()
        if rss > WORKER_KEEPS and rss + _kept_by_others(d) > WORKERS_KEEP_PER_SLOT * slots:
            release_memory()
            rss = _resident_bytes()
        with open(mine, "w") as f:
            f.write(str(rss))
    except OSError:
        release_memory(above=WORKER_KEEPS)
    finally:
        os.close(fd)   # releases the lock


def _kept_by_others(d: str) -> int:
    """The resident memory, as it is now, of the other task workers that recorded themselves in
    ``d`` (:func:`keep_or_release`); the record of a worker that exited is removed."""
    me = f"keep-{os.getpid()}"
    page = os.sysconf("SC_PAGE_SIZE")
    total = 0
    for name in os.listdir(d):
        if not name.startswith("keep-") or name == me:
            continue
        try:
            with open(f"/proc/{name[5:]}/statm") as f:
                total += int(f.read().split()[1]) * page
        except FileNotFoundError:   # a worker that exited keeps nothing
            with contextlib.suppress(OSError):
                os.remove(os.path.join(d, name))
        except (OSError, ValueError, IndexError):
            pass
    return total


def _resident_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 1 << 62   # unknown: release
