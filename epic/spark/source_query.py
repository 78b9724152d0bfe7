"""A source node's planner: pulls an epic source's items in order for the query that reads it.

The planner (:class:`SourcePlanner`; Spark runs planning in one long-lived Python process per
query) opens the epic source and pulls its items in order, as the in-process runner does; it
stamps ``_entry`` (delay logging) and the bookkeeping columns of :mod:`epic.spark.tags`. The
query's :class:`~epic.spark.direct.GroupPlanner` spools each micro-batch's planned batches to files
its tasks read. An **offset** is the number of source items consumed, plus the watermark,
end-of-stream flag, step and largest event time at that point (a
:class:`~epic.spark.offsets.TopicOffset`-shaped dict, so downstream nodes read the markers from the
offset log like any topic's).

Replay: after a restart Spark asks for the partitions of the last planned batch again; the planner
re-opens the source and skips the items before it (sources are deterministic: files, or a generator
function re-run from the start). A live (unbounded) source is pulled by a background thread so
that planning never blocks on it.

Watermarks follow the runner exactly: after every batch the largest event time seen minus the
source's lateness (forwarded only when it grows); an :class:`epic.sources.Watermark` item forwards
its time; when the source is exhausted, ``max + 1`` and the end of the stream.

A live source (unbounded, or a paced replay) is one step per micro-batch: everything it yielded
since the last micro-batch is planned as one step, tagged with the step and watermark of its first
item (:func:`coalesced`), as if the source had delivered it as one batch. Its items are as small
as their arrival makes them (a paced replay cuts at 10 ms), and the consumer's cost per step, in
every query downstream, would otherwise grow with the number of items a micro-batch holds and
never catch up with a backlog. A bounded source keeps a step per item, as `epic run` has them.
"""

from __future__ import annotations

import threading
import time as _time
from collections import deque

import numpy as np
import pyarrow as pa

from epic.errors import EpicError
from epic.operator import ENTRY_COLUMN
from epic.replay import entry_times
from epic.spark.tags import PHASE_ROWS, STEP, WM, tag, topic_schema, with_tags
from epic.timecore import closing_watermark, source_watermark

__all__ = ["SourcePlanner", "key_partition"]


class _Items:
    """Pulls a source's items in order, optionally on a background thread.

    Threaded, a pump thread reads ahead while the planner waits for Spark: a live source never
    blocks planning, and a file source parses the next micro-batch while the tasks of the current
    one run (the source query is the critical path of a deploy). At most ``ahead_bytes`` of items
    wait in the queue.
    """

    def __init__(self, source, threaded: bool, ahead_bytes: int = 128 << 20):
        self._it = iter(source.open())
        self.threaded = threaded
        self.error: BaseException | None = None
        if threaded:
            self._q: deque = deque()
            self._bytes = 0
            self._ahead = ahead_bytes
            self._closed = False
            self._cv = threading.Condition()
            self._t = threading.Thread(target=self._pump, daemon=True)
            self._t.start()

    @staticmethod
    def _size(item) -> int:
        return int(getattr(item, "nbytes", 0) or 0)

    def _pump(self):
        try:
            for item in self._it:
                with self._cv:
                    while self._bytes > self._ahead and self._q and not self._closed:
                        self._cv.wait(0.5)
                    if self._closed:
                        return
                    self._q.append(item)
                    self._bytes += self._size(item)
                    self._cv.notify_all()
        except BaseException as exc:  # noqa: BLE001 - reported to the planner
            self.error = exc
        with self._cv:
            self._q.append(StopIteration)
            self._cv.notify_all()

    def close(self) -> None:
        """Stop the pump thread (a replay re-opens the source)."""
        if self.threaded:
            with self._cv:
                self._closed = True
                self._cv.notify_all()

    def take(self, block: bool):
        """The next item, ``StopIteration`` at the end, or None if a live source has none yet."""
        if not self.threaded:
            try:
                return next(self._it)
            except StopIteration:
                return StopIteration
        deadline = _time.monotonic() + (30.0 if block else 0.0)  # live: what has arrived
        with self._cv:
            while not self._q:
                left = deadline - _time.monotonic()
                if left <= 0:
                    return None
                self._cv.wait(left)
            item = self._q.popleft()
            self._bytes -= self._size(item)
            self._cv.notify_all()
        if item is StopIteration:
            with self._cv:
                self._q.appendleft(StopIteration)   # the end stays the end
            if self.error is not None:
                raise self.error
        return item


class SourcePlanner:
    """Plans the micro-batches of a source node's epic source (in Spark's planner process of the
    query that reads it: :class:`epic.spark.direct.GroupPlanner` spools the planned batches to
    files its tasks read).

    Offsets: ``{"epic_topic": "source:<node>", "seq": items consumed, "watermark", "eos",
    "step", "max", ["late_rows"]}``. Pickled (into a query's data source), it carries its
    configuration only; the open source and the planned batches are rebuilt where it runs.

    Args:
        node: the :class:`~epic.topology.SourceNode`.
        source_index, n_sources: position of the node among the topology's sources (steps).
        workdir: the deploy's work directory (crash points of the tests).
        prefetch: read a bounded source on a background thread too, ahead of the planner
            (parsing overlaps the tasks of the previous micro-batch).
        shared: the query has other inputs too (an inlet of a merge,
            :func:`epic.spark.planner.plan_inlets`): a live source's micro-batch takes what has
            arrived without waiting for a first item, so a quiet feed never holds up the others.
    """

    def __init__(self, node, *, source_index: int, n_sources: int, workdir: str = "",
                 prefetch: bool = False, shared: bool = False):
        self.node = node
        self.source_index = source_index
        self.n_sources = n_sources
        self.workdir = workdir
        self.prefetch = prefetch
        self.shared = shared
        self._reset()

    def __getstate__(self):
        return {k: getattr(self, k) for k in ("node", "source_index", "n_sources", "workdir",
                                               "prefetch", "shared")}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._reset()

    def _reset(self) -> None:
        node = self.node
        src = self.src = node.source
        self.schema = topic_schema(node.output.schema)
        self.user_schema = node.output.schema
        self.entry = ENTRY_COLUMN in self.user_schema.names
        self.lateness = src.lateness_ticks()
        self.time_col = src.time
        self.source_id = f"source:{node.name}"
        self.bounded = not src.live   # a paced replay: plan what has arrived, as for a live source
        self.reorder = src.reorderer() is not None
        self._items = None       # _Items, positioned at self._next
        self._next = 0
        self._wm = None          # forwarded watermark after item self._next - 1
        self._max = None
        self._done = False
        self._planned: dict[int, tuple] = {}   # item index -> (rows, tagged batch)
        self._reo = None         # epic.timecore.Reorderer (slack / punctuation), rebuilt
        self._late = None        # the late_file writer, rewritten from the start

    def _offset(self, seq, wm, eos, step, mx, late=None, ready=True) -> dict:
        d = {"epic_topic": self.source_id, "seq": seq}
        if late is not None:
            d["late_rows"] = late
        if wm is not None:
            d["watermark"] = wm
        d["eos"] = eos
        if step is not None:
            d["step"] = step
        if mx is not None:
            d["max"] = mx
        if ready and not self.bounded:
            d["ready"] = True   # past the empty first micro-batch of a live source
        return d

    # Spark's planner protocol (as a topic's TopicStreamReader offers it).
    def initialOffset(self) -> dict:
        return self._offset(0, None, False, None, None, ready=False)

    def prepareForTriggerAvailableNow(self) -> None:
        pass

    def _seek(self, start: dict):
        seq = int(start["seq"])
        if self._items is not None and self._next == seq:
            return
        if self._items is not None:
            self._items.close()
        if self.reorder:
            # The re-order buffer (rows held within the slack) is rebuilt by replaying the
            # source from its start through the same Reorderer: the state equals the one
            # the first planning had, and the late file is rewritten identically.
            self._items = _Items(self.src, threaded=self.prefetch or not self.bounded)
            if self._late is not None:
                self._late.close()
            self._reo, self._late = self.src.reorderer(), self.src.late_writer()
            self._next, self._wm, self._max, self._done = 0, None, None, False
            while self._next < seq and not self._done:
                self._pull(True)
            self._planned = {k: v for k, v in self._planned.items() if k >= seq}
            return
        self._items = _Items(self.src, threaded=self.prefetch or not self.bounded)
        for _ in range(seq):
            item = self._items.take(block=True)
            if item is StopIteration:
                break
        self._next = seq
        self._wm = start.get("watermark")
        self._max = start.get("max")
        self._done = bool(start.get("eos", False))
        self._planned = {k: v for k, v in self._planned.items() if k >= seq}

    def _pull(self, block: bool):
        """Plan the next item; False if none is available (or the source ended)."""
        if self._done:
            return False
        item = self._items.take(block)
        if item is None:
            return False
        idx = self._next
        if item is StopIteration:
            self._done = True
            if self.reorder:
                # the held rows leave as one more planned item, then the end
                self._plan_rows(idx, self._reo.end(), self._wm)
                if self._planned[idx][1] is not None:
                    self._next += 1
                else:
                    del self._planned[idx]
                self._wm = self._reo.closing()
                if self._late is not None:
                    self._late.close()
                return False
            self._wm = closing_watermark(self._wm, self._max)
            return False
        self._next += 1
        step = idx * self.n_sources + self.source_index
        wm_before = self._wm
        if self.reorder and type(item).__name__ == "Watermark" and hasattr(item, "time"):
            self._plan_rows(idx, self._reo.punctuate(int(item.time)), wm_before)
            if self._reo.watermark is not None:
                self._wm = self._reo.watermark
            return True
        if type(item).__name__ == "Watermark" and hasattr(item, "time"):
            t = int(item.time)
            if self._wm is None or t > self._wm:
                self._wm = t
            self._planned[idx] = (0, None)
            return True
        if not isinstance(item, pa.RecordBatch) or item.num_rows == 0:
            self._planned[idx] = (0, None)
            return True
        b = item
        if self.entry:
            b = b.append_column(ENTRY_COLUMN, entry_times(b, _time.time_ns))
        b = pa.RecordBatch.from_arrays(b.columns, schema=self.user_schema)
        times = b.column(self.time_col)
        if times.null_count:
            raise EpicError(f"source {self.node.name!r}: event-time column {self.time_col!r} has "
                            "nulls; declare it non-nullable or filter such rows")
        if self.reorder:
            released, late = self._reo.push(b)
            if late is not None and self._late is not None:
                self._late.write(late)
            self._max = self._reo.high
            if self._reo.watermark is not None:
                self._wm = self._reo.watermark
            self._plan_rows(idx, released, wm_before)
            return True
        mx = int(np.max(times.to_numpy(zero_copy_only=False)))
        self._max = mx if self._max is None else max(self._max, mx)
        self._wm = source_watermark(self._wm, self._max, self.lateness)
        self._planned[idx] = (b.num_rows, with_tags(b, self.schema, tag(step, PHASE_ROWS),
                                                    wm_before))
        return True

    def _plan_rows(self, idx: int, b, wm_before):
        if b is None or not b.num_rows:
            self._planned[idx] = (0, None)
            return
        step = idx * self.n_sources + self.source_index
        self._planned[idx] = (b.num_rows, with_tags(b, self.schema, tag(step, PHASE_ROWS),
                                                    wm_before))

    def latestOffset(self, start: dict, limit) -> dict:
        """The end of the next micro-batch: at least one item, at most about ``limit.max_rows``
        rows (Spark's ``ReadMaxRows``; another limit: everything available).

        A live source is not opened before its query has run one micro-batch: the first offset
        is the initial one marked ``ready``, an empty micro-batch that pays the query's one-time
        costs (Spark's first job, the Python processes of its writer and commits, its task
        workers). A paced replay's clock starts at the first read, so its first rows would
        otherwise wait seconds for them (docs/deploy.md, "Live and paced sources")."""
        if not self.bounded and not start.get("ready"):
            return {**start, "ready": True}
        self._seek(start)
        max_rows = getattr(limit, "max_rows", None)
        rows = 0
        block = self.bounded or not self.shared
        while max_rows is None or rows < max_rows:
            if not self._pull(block):
                break
            rows += self._planned[self._next - 1][0]
            block = self.bounded
        last_step = None if self._next == 0 else (self._next - 1) * self.n_sources + self.source_index
        if self.workdir and self._next != int(start["seq"]):
            from epic.spark.crash import crash_point

            crash_point("source-plan", self.workdir)
        return self._offset(self._next, self._wm, self._done, last_step, self._max,
                            None if self._reo is None else self._reo.late_rows)

    def planned(self, start: dict, end: dict) -> list[pa.RecordBatch]:
        """The tagged batches of the micro-batch from ``start`` to ``end`` (regenerated
        from the source on a replay after a restart)."""
        a, b = int(start["seq"]), int(end["seq"])
        if any(i not in self._planned for i in range(a, b)):
            if self._items is not None:
                self._items.close()
            self._items = None
            self._seek(start)
            while self._next < b and self._pull(True):
                pass
        out = [self._planned[i][1] for i in range(a, b) if self._planned[i][1] is not None]
        return out if self.bounded else coalesced(out)

    def spooled(self, start: dict, end: dict) -> None:
        """The micro-batch from ``start`` to ``end`` is in files its tasks read: a bounded
        source's planner lets go of its batches (128 MB of the DEBS game's columns, held until
        the micro-batch commits otherwise); a later :meth:`planned` of it regenerates them from
        the source. A live source keeps them: it cannot be read again."""
        if self.bounded:
            for i in range(int(start["seq"]), int(end["seq"])):
                self._planned.pop(i, None)

    def commit(self, end: dict) -> None:
        seq = int(end["seq"])
        for k in [k for k in self._planned if k < seq]:
            del self._planned[k]


def coalesced(batches: list[pa.RecordBatch]) -> list[pa.RecordBatch]:
    """``batches`` (tagged, in step order) as one step: every row tagged with the ``_step`` and
    ``_wm`` of the first batch (the batches stay apart; a consumer's runs of equal tags join them).
    """
    if len(batches) <= 1:
        return batches
    first = batches[0]
    step, wm = first.column(STEP)[0].as_py(), first.column(WM)[0].as_py()
    return [first] + [with_tags(b, first.schema, step, wm) for b in batches[1:]]


def key_partition(batch: pa.RecordBatch, key, parts: int) -> np.ndarray:
    """The partition (0 .. parts-1) of every row of ``batch`` by the ``key`` columns: a hash that
    is the same in every process and run (pandas' SipHash with a fixed key)."""
    import pandas as pd

    cols = list(key)
    if len(cols) == 1:
        h = pd.util.hash_array(batch.column(cols[0]).to_numpy(zero_copy_only=False))
    else:
        h = pd.util.hash_pandas_object(batch.select(cols).to_pandas(), index=False).to_numpy()
    return (h % np.uint64(parts)).astype(np.int64)
