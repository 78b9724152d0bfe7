"""Where a deploy's time goes: spans written by every process of a deploy when ``EPIC_TRACE`` is set.

``EPIC_TRACE=/path/trace.jsonl epic deploy ...`` makes the driver, Spark's planner processes (one
per query: offsets, micro-batch planning, source parsing and spooling), the commit runners and the
tasks append one JSON line per span to that file: ``{"span", "query", "pid", "kind", "t0", "t1",
"cpu"}`` plus span fields (``t0``/``t1``: ``time.time()`` seconds, comparable across processes
on one machine; ``cpu``: the CPU seconds of the thread in the span, where wall time also counts
waiting for a core). Each line is one ``write`` to a file opened with ``O_APPEND``, so lines
from concurrent processes do not interleave. Unset (the default), :func:`span` costs one
dictionary lookup.

``scripts/bench_spark_windows.py --trace`` turns a trace into the table of docs/performance.md
("Where the fixed cost goes"); :func:`load` reads one back.
"""

from __future__ import annotations

import json
import os
import time
from contextlib import contextmanager

__all__ = ["span", "event", "enabled", "load", "target", "adopt"]

ENV = "EPIC_TRACE"


def enabled() -> bool:
    """Whether this process writes spans (``EPIC_TRACE`` set)."""
    return bool(os.environ.get(ENV))


_first = True


def _proc_start() -> float | None:
    """This process's start time (``time.time()`` scale; Linux ``/proc``), else None."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
        return time.time() - age
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def target() -> str:
    """The trace file this process writes ("" if none): the driver puts it in what it pickles to
    Spark's processes (a query's plan and committer), which :func:`adopt` it."""
    return os.environ.get(ENV, "")


def adopt(path: str) -> None:
    """Write this process's spans to ``path``, the driver's trace file for the work in hand, or
    to none if ``path`` is "" (Spark reuses its Python workers across deploys: a worker that ran
    a traced deploy's tasks must not trace the next, untraced one)."""
    if path:
        if os.environ.get(ENV) != path:
            os.environ[ENV] = path
    else:
        os.environ.pop(ENV, None)


def _write(doc: dict) -> None:
    global _first
    path = os.environ.get(ENV)
    if not path:
        return
    if _first:  # the first span of a process says when the process started
        _first = False
        doc["proc_start"] = _proc_start()
    line = (json.dumps(doc, separators=(",", ":"), default=str) + "\n").encode()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


@contextmanager
def span(name: str, query: str = "", kind: str = "", **fields):
    """Time the block as span ``name`` of ``query``; ``kind``: the process kind (``planner``,
    ``task``, ``commit``, ``driver``). Fields set on the yielded dict are recorded too."""
    if not os.environ.get(ENV):
        yield {}
        return
    extra = dict(fields)
    t0 = time.time()
    c0 = time.thread_time()
    try:
        yield extra
    finally:
        _write({"span": name, "query": query, "kind": kind, "pid": os.getpid(), "t0": t0,
                "t1": time.time(), "cpu": round(time.thread_time() - c0, 6), **extra})


def event(name: str, query: str = "", kind: str = "driver", **fields) -> None:
    """A point in time (``t0 == t1``)."""
    if os.environ.get(ENV):
        t = time.time()
        _write({"span": name, "query": query, "kind": kind, "pid": os.getpid(), "t0": t,
                "t1": t, **fields})


def load(path: str) -> list[dict]:
    """The spans of a trace file, in start order (a torn last line is skipped)."""
    out = []
    with open(path) as f:
        for ln in f:
            try:
                out.append(json.loads(ln))
            except ValueError:
                continue
    return sorted(out, key=lambda d: d["t0"])
