"""The one time core: event-time watermarks, lateness and late-row decisions, end of input.

Every piece of epic that decides *when* event time has passed uses :class:`EventClock`: the
window operators (time, count and predicate windows, the prefix-sum engine), the sources of
``epic run`` and the Spark tasks. The rules, stated once (docs/windows.md, "Event time"):

* The **high-water mark** ``H`` of a node's input is the largest event time among the rows of the
  input *stream* so far: all keys, whatever partition a runtime runs the key in. A Spark task of
  a keyed node sees only its keys' rows, so it is told each row's ``H`` before it (``before``)
  and the stream's ``H`` after the micro-batch (:meth:`observe`); ``epic run`` sees every row.
* A runtime may **push** a watermark ``P`` (the upstream's promise that no older row follows).
* The node's **watermark** is ``max(H, P) - lateness``. Instants up to it are emitted.
* A row is **late** when its time is below the watermark in force *just before it*:
  ``t < max(H before the row, P) - lateness``. The decision depends only on the rows before it in
  the stream, never on how the stream is cut into batches or partitions.
* At the **end of the input** the watermark becomes ``max(H + 1, P)``: every row is in, so the
  lateness no longer holds anything back.

The clock is plain state (numbers), snapshotted as a named-field map.
"""

from __future__ import annotations

import numpy as np

__all__ = ["EventClock", "Reorderer", "source_watermark", "closing_watermark", "stream_before",
           "check_times", "TIME_MIN", "TIME_MAX"]

#: the most negative "no time yet" value that still survives subtracting a lateness
_FLOOR = np.iinfo(np.int64).min // 2

#: The event times windows take, in ticks of the stream's unit: ``[TIME_MIN, TIME_MAX]`` (in
#: ns: 1933 to 2116; in ps: -13 to +53 days around 0). Below, a window's start (a time minus a
#: duration, at most ``MAX_TICKS``) would meet the engines' "not started" value (-2**61); above,
#: a window's end or the end of the input would leave int64.
TIME_MIN = -(2**60)
TIME_MAX = 2**62 - 1


def check_times(times: np.ndarray) -> None:
    """Refuse event times outside ``[TIME_MIN, TIME_MAX]`` with an ``InputError`` naming the
    value and the fix (the caller's node name is added by the runtimes)."""
    if not len(times):
        return
    lo, hi = int(times.min()), int(times.max())
    if lo >= TIME_MIN and hi <= TIME_MAX:
        return
    from .errors import InputError

    bad = lo if lo < TIME_MIN else hi
    raise InputError(f"event time {bad} is outside the range windows take, [-2**60, 2**62 - 1] "
                     f"ticks of the stream's unit (in ns 1933 to 2116; in ps -13 to +53 days "
                     f"around 0); shift the times by an epoch near the data (e.g. subtract the "
                     f"first time) or use a coarser unit")


class EventClock:
    """Watermark and late-row decisions of one node input (see the module docstring).

    Args:
        lateness: how far (in ticks) a row may be behind the high-water mark and still count.
    """

    __slots__ = ("lateness", "high", "pushed", "late_rows")

    def __init__(self, lateness: int = 0):
        if lateness < 0:
            raise ValueError("lateness must be >= 0")
        self.lateness = int(lateness)
        self.high: int | None = None     # largest event time in the input stream so far
        self.pushed: int | None = None   # largest watermark pushed in by the runtime
        self.late_rows = 0

    # -- the rules -------------------------------------------------------------------------
    @property
    def watermark(self) -> int | None:
        """``max(H, P) - lateness``; None before any row or pushed watermark."""
        if self.high is None and self.pushed is None:
            return None
        top = self.high if self.pushed is None else (
            self.pushed if self.high is None else max(self.high, self.pushed))
        return top - self.lateness

    def thresholds(self, times: np.ndarray, before: np.ndarray | None = None) -> np.ndarray:
        """Per row, the watermark in force just before it (rows below it are late)."""
        n = len(times)
        prev = np.empty(n, dtype=np.int64)
        base = _FLOOR if self.high is None else self.high
        if self.pushed is not None:
            base = max(base, self.pushed)
        if before is None:
            prev[0] = base
            if n > 1:
                np.maximum.accumulate(times[:-1], out=prev[1:])
                np.maximum(prev[1:], base, out=prev[1:])
        else:
            np.maximum(before, base, out=prev)
        if self.lateness:
            prev -= self.lateness
        return prev

    def admit(self, times: np.ndarray, before: np.ndarray | None = None) -> np.ndarray | None:
        """Decide which rows are on time and advance ``H`` over them.

        Args:
            times: the rows' event times, in stream order.
            before: each row's stream high-water mark before it within this call, when rows of
                the stream are missing (a keyed partition); None: computed from ``times``.

        Returns:
            None when every row is on time, else the boolean mask of on-time rows. Late rows
            are counted in :attr:`late_rows`.
        """
        if not len(times):
            return None
        times = np.asarray(times, dtype=np.int64)
        check_times(times)
        late = times < self.thresholds(times, before)
        mx = int(times.max())
        if before is not None and len(before):
            mx = max(mx, int(before.max()))
        self.observe(mx)
        if not late.any():
            return None
        self.late_rows += int(late.sum())
        return ~late

    def observe(self, high: int | None) -> None:
        """The stream reached event time ``high`` (rows this node's partition does not get)."""
        if high is not None and high > _FLOOR and (self.high is None or high > self.high):
            self.high = int(high)

    def push(self, watermark: int) -> bool:
        """A watermark pushed in by the runtime; True if it raised the node's watermark."""
        before = self.watermark
        w = int(watermark)
        if self.pushed is None or w > self.pushed:
            self.pushed = w
        after = self.watermark
        return after is not None and (before is None or after > before)

    def end(self) -> int | None:
        """The watermark at the end of the input: ``max(H + 1, P)`` (None: nothing ever came)."""
        if self.high is None:
            return self.pushed
        return self.high + 1 if self.pushed is None else max(self.high + 1, self.pushed)

    # -- state -----------------------------------------------------------------------------
    def to_state(self) -> dict:
        return {"lateness": self.lateness, "high": self.high, "pushed": self.pushed,
                "late_rows": self.late_rows}

    @classmethod
    def from_state(cls, st: dict) -> "EventClock":
        c = cls(int(st["lateness"]))
        c.high = st["high"]
        c.pushed = st["pushed"]
        c.late_rows = int(st["late_rows"])
        return c


def stream_before(times: np.ndarray) -> np.ndarray:
    """Per row, the largest time among the rows before it (``_FLOOR`` for the first row)."""
    prev = np.empty(len(times), dtype=np.int64)
    if len(times):
        prev[0] = _FLOOR
        if len(times) > 1:
            np.maximum.accumulate(times[:-1], out=prev[1:])
    return prev


def source_watermark(current: int | None, high: int | None, lateness: int) -> int | None:
    """A source's watermark after a batch: ``max(current, H - lateness)`` (never goes back)."""
    if high is None:
        return current
    cand = int(high) - int(lateness)
    return cand if current is None or cand > current else current


def closing_watermark(current: int | None, high: int | None) -> int | None:
    """The watermark at the end of an input: ``max(current, H + 1)`` (every row is in)."""
    if high is None:
        return current
    return int(high) + 1 if current is None else max(int(current), int(high) + 1)


_ALL = object()   # Reorderer._release: every held row (the end)


class Reorderer:
    """A source's slack: hold rows until the watermark passes them, release them in time order.

    The one implementation of a source's ``slack=`` and ``punctuation=`` (docs/windows.md, "Slack
    and punctuation"), called by ``epic run``'s source path and by the Spark source planner, so
    both runtimes see the same stream:

    * The watermark is ``W = max(H - slack, P)``: ``H`` the largest event time of the data rows
      so far, ``P`` the largest punctuation time (a punctuation row says "no row older than this
      follows"). ``slack=None`` ignores ``H``: only punctuations (and the end) advance time.
    * A data row is **late** when its time is below the watermark in force just before it
      (``t < W``); late rows are returned apart (never released) and counted in
      :attr:`late_rows`. The decision depends only on the rows before it, not on batch cuts.
    * After each :meth:`push`, held rows with ``t <= W`` are released sorted by event time (ties:
      arrival order); :meth:`end` releases the rest. So the released stream is in time order.

    Args:
        time: the event-time column; slack: ticks (``None``: punctuations only).
        punctuation: a boolean column marking punctuation rows (not data), or None.
    """

    def __init__(self, time: str, slack: int | None, punctuation: str | None = None):
        if slack is not None and slack < 0:
            raise ValueError("slack must be >= 0")
        self.time = time
        self.slack = None if slack is None else int(slack)
        self.punctuation = punctuation
        self.high: int | None = None
        self.pushed: int | None = None
        self.late_rows = 0
        self._held = None      # pa.Table of held rows, in arrival order

    @property
    def watermark(self) -> int | None:
        """``max(H - slack, P)``; None before anything advanced it."""
        a = None if (self.high is None or self.slack is None) else self.high - self.slack
        if self.pushed is None:
            return a
        return self.pushed if a is None else max(a, self.pushed)

    def push(self, batch):
        """Take one batch; return ``(released, late)``: the rows now released (time order, or
        None) and the late data rows (arrival order, or None)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        n = batch.num_rows
        if not n:
            return None, None
        times = np.asarray(batch.column(self.time).to_numpy(zero_copy_only=False), dtype=np.int64)
        if self.punctuation is not None:
            pcol = batch.column(self.punctuation)
            punct = np.asarray(pc.fill_null(pcol, False).to_numpy(zero_copy_only=False), dtype=bool)
        else:
            punct = np.zeros(n, dtype=bool)
        data = ~punct
        # per row, the watermark in force just before it
        hv = np.where(data, times, _FLOOR)
        pv = np.where(punct, times, _FLOOR)
        hb = np.empty(n, dtype=np.int64)
        pb = np.empty(n, dtype=np.int64)
        hb[0] = _FLOOR if self.high is None else self.high
        pb[0] = _FLOOR if self.pushed is None else self.pushed
        if n > 1:
            np.maximum.accumulate(np.maximum(hv[:-1], hb[0]), out=hb[1:])
            np.maximum.accumulate(np.maximum(pv[:-1], pb[0]), out=pb[1:])
        if self.slack is None:
            wm = pb
        else:
            wm = np.maximum(np.where(hb > _FLOOR, hb - self.slack, _FLOOR), pb)
        late = data & (times < wm)
        keep = data & ~late
        if data.any():
            self.observe_high(int(times[data].max()))
        if punct.any():
            t = int(times[punct].max())
            if self.pushed is None or t > self.pushed:
                self.pushed = t
        late_batch = None
        if late.any():
            self.late_rows += int(late.sum())
            late_batch = batch.filter(pa.array(late))
        if keep.any():
            kept = batch if keep.all() else batch.filter(pa.array(keep))
            if self.punctuation is not None and kept.column(self.punctuation).null_count:
                # an empty punctuation field is a data row: the column is false on data rows
                i = kept.schema.get_field_index(self.punctuation)
                kept = kept.set_column(i, kept.schema.field(i),
                                       pc.fill_null(kept.column(i), False))
            tab = pa.Table.from_batches([kept])
            self._held = tab if self._held is None else pa.concat_tables([self._held, tab])
        return self._release(self.watermark), late_batch

    def punctuate(self, t: int):
        """A punctuation outside the rows (an iterator source's ``Watermark``): returns the rows
        it releases (or None)."""
        if self.pushed is None or int(t) > self.pushed:
            self.pushed = int(t)
        return self._release(self.watermark)

    def observe_high(self, t: int) -> None:
        if self.high is None or t > self.high:
            self.high = int(t)

    def end(self):
        """The input ended: every held row, in time order (or None)."""
        return self._release(_ALL)

    def closing(self) -> int | None:
        """The watermark at the end: ``max(W, P, H + 1)``."""
        w = self.watermark
        if self.high is None:
            return w
        return self.high + 1 if w is None else max(w, self.high + 1)

    def _release(self, upto: int | None):
        import pyarrow as pa
        import pyarrow.compute as pc

        held = self._held
        if held is None or held.num_rows == 0 or upto is None:
            return None
        if upto is _ALL:
            out, self._held = held, None
        else:
            t = held.column(self.time).to_numpy()
            m = t <= upto
            if not m.any():
                return None
            if m.all():
                out, self._held = held, None
            else:
                out = held.filter(pa.array(m))
                self._held = held.filter(pa.array(~m))
        idx = pc.sort_indices(out, sort_keys=[(self.time, "ascending")])   # a stable sort
        out = out.take(idx).combine_chunks()
        bs = out.to_batches()
        if len(bs) == 1:
            return bs[0]
        return pa.concat_batches(bs)
