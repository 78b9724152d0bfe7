"""Replay at event-time pace: a source's rows released at the wall time their event time says.

A source with ``replay_speed=s`` (every source takes it; :mod:`epic.sources`) has its batch
iterator wrapped by :func:`paced`: the first row is released when the read starts (wall time
``start``, event time ``t0``), and a row with event time ``t`` at ``start + (t - t0) / s``. Rows
out of event-time order are released with the largest event time before them (the file's order
is the arrival order; nothing waits for a time already passed). Batches are cut so that no row
waits more than ``max_wait`` (10 ms of paced time) for a later row of its batch; the cut depends
on the rows and the speed only (never on the clock), so every read yields the same items: a
Spark planner replaying after a restart skips items by count. A reader that falls behind gets the
items already due at once, one after the other (no sleep).

Known limitation: a Spark planner re-opening a paced source after a restart skips the items it
had planned through the pacer, so it waits for them again in wall time before it goes on.

Every batch it yields carries, in its schema metadata, what a runtime needs to stamp each row's
``_entry`` (delay logging) with its *scheduled* release time rather than the time the runtime got
to it, so queueing behind a busy runtime counts in the measured delays
(:func:`entry_times`, used by ``epic run`` and the Spark source planner alike).
:class:`epic.sources.Watermark` items are released at their time too.

The clock and the sleep are injected (tests run on a fake clock).
"""

from __future__ import annotations

import json
import math
import time as _time
from typing import Callable, Iterable, Iterator

import numpy as np
import pyarrow as pa

from .errors import EpicError, SpecError
from .timeunits import TICKS_PER_SECOND, check_unit

__all__ = ["paced", "entry_times", "check_speed", "MAX_WAIT_NS", "RELEASE_KEY"]

#: Longest wall time (ns) a row waits for a later row of its batch.
MAX_WAIT_NS = 10_000_000
#: Schema-metadata key of a paced batch: how to compute its rows' scheduled release times.
RELEASE_KEY = b"epic.replay"


def check_speed(speed, what: str = "replay_speed") -> float | None:
    """``speed`` as a float > 0 (None: no pacing); :class:`SpecError` otherwise."""
    if speed is None:
        return None
    if isinstance(speed, bool) or not isinstance(speed, (int, float)) or \
            not math.isfinite(speed) or speed <= 0:
        raise SpecError(f"{what}={speed!r}: give a number > 0 (1 = real time, 10 = ten times "
                        "faster), or None for no pacing")
    return float(speed)


class _Pacer:
    def __init__(self, time_col: str, unit: str, speed: float, wall_ns, mono_ns, sleep,
                 max_wait_ns: int):
        self.time_col = time_col
        self.scale = 1e9 / TICKS_PER_SECOND[check_unit(unit)] / speed   # wall ns per tick
        self.wall_ns, self.mono_ns, self.sleep = wall_ns, mono_ns, sleep
        self.max_wait = max_wait_ns
        self.t0 = None          # event time of the first row
        self.start_wall = self.start_mono = None
        self.high = None        # largest event time released so far

    def _begin(self, t0: int):
        self.t0 = int(t0)
        self.start_wall, self.start_mono = self.wall_ns(), self.mono_ns()

    def _wait_until(self, rel_ns: float) -> None:
        """Sleep until ``rel_ns`` after the start."""
        while True:
            left = self.start_mono + rel_ns - self.mono_ns()
            if left <= 0:
                return
            self.sleep(left / 1e9)

    def _meta(self, batch: pa.RecordBatch, prior_high) -> pa.RecordBatch:
        meta = dict(batch.schema.metadata or {})
        meta[RELEASE_KEY] = json.dumps({"col": self.time_col, "start": self.start_wall,
                                        "t0": self.t0, "scale": self.scale,
                                        "high": prior_high}).encode()
        return batch.replace_schema_metadata(meta)

    def batches(self, batch: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
        col = batch.column(self.time_col)
        if col.null_count:
            raise EpicError(f"replay: event-time column {self.time_col!r} has nulls; every row "
                            "needs a time to be released at")
        t = col.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
        if self.t0 is None:
            self._begin(t[0])
        high = np.maximum.accumulate(t)
        if self.high is not None:
            np.maximum(high, self.high, out=high)
        rel = (high - self.t0).astype(np.float64) * self.scale   # ns after the start, monotone
        n, i = len(t), 0
        while i < n:
            # the rows due within max_wait of this one (cut by event time only, so the items
            # are the same in every read: a Spark planner's replay skips by item count)
            j = max(int(np.searchsorted(rel, rel[i] + self.max_wait, side="right")), i + 1)
            self._wait_until(rel[j - 1])
            prior = self.high
            self.high = int(high[j - 1])
            yield self._meta(batch.slice(i, j - i), prior)
            i = j

    def watermark(self, item):
        if self.t0 is not None:
            self._wait_until(max(0, int(item.time) - self.t0) * self.scale)
        return item


def paced(batches: Iterable, time_col: str, unit: str, speed: float, *,
          wall_ns: Callable[[], int] = _time.time_ns,
          mono_ns: Callable[[], int] = _time.monotonic_ns,
          sleep: Callable[[float], None] = _time.sleep,
          max_wait_ns: int = MAX_WAIT_NS) -> Iterator:
    """``batches`` (RecordBatches and :class:`~epic.sources.Watermark` items) released at
    event-time pace, ``speed`` times faster than real time (see the module docstring).

    Example (a fake clock: the sleeps advance it):
        >>> now = [0]
        >>> def sleep(s): now[0] += int(s * 1e9)
        >>> b = pa.record_batch({"ts": [0, 5, 1000, 2000]})   # ms
        >>> out = list(paced([b], "ts", "ms", 2.0, wall_ns=lambda: now[0],
        ...                  mono_ns=lambda: now[0], sleep=sleep))
        >>> [x.num_rows for x in out], now[0] / 1e9
        ([2, 1, 1], 1.0)
    """
    speed = check_speed(speed)
    pacer = _Pacer(time_col, unit, speed, wall_ns, mono_ns, sleep, max_wait_ns)
    for item in batches:
        if isinstance(item, pa.RecordBatch):
            if item.num_rows:
                yield from pacer.batches(item)
        elif hasattr(item, "time") and type(item).__name__ == "Watermark":
            yield pacer.watermark(item)
        else:
            yield item


def entry_times(batch: pa.RecordBatch, now_ns: Callable[[], int]) -> pa.Array:
    """The ``_entry`` stamps (ns) of ``batch``'s rows: for a batch from :func:`paced`, each row's
    scheduled release time; otherwise ``now_ns()`` for every row (the arrival is now)."""
    meta = batch.schema.metadata or {}
    info = meta.get(RELEASE_KEY)
    if info is None:
        return pa.array(np.full(batch.num_rows, now_ns(), dtype=np.int64))
    d = json.loads(info)
    t = batch.column(d["col"]).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
    high = np.maximum.accumulate(t)
    if d["high"] is not None:
        np.maximum(high, d["high"], out=high)
    rel = (high - d["t0"]).astype(np.float64) * d["scale"]
    return pa.array(d["start"] + rel.astype(np.int64), type=pa.int64())
