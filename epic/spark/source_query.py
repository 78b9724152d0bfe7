"""A source node as a Spark streaming query: a Python data source wrapping any epic source.

The reader's *planner* (Spark runs the driver-side methods in one long-lived Python process per
query) opens the epic source and pulls its items in order, as the in-process runner does; it
stamps ``_entry`` (delay logging) and the bookkeeping columns of :mod:`epic.spark.tags`, and hands
the batches to executor tasks inside the input partitions (Arrow IPC bytes). An **offset** is the
number of source items consumed, plus the watermark, end-of-stream flag, step and largest event
time at that point (a :class:`~epic.spark.topic_source.TopicOffset`-shaped dict, so the topic sink
and downstream nodes read the markers from the offset log like any topic's).

Replay: after a restart Spark asks for the partitions of the last planned batch again; the planner
re-opens the source and skips the items before it (sources are deterministic: files, or a generator
function re-run from the start). A live (unbounded) source is pulled by a background thread so
that planning never blocks on it.

Watermarks follow the runner exactly: after every batch the largest event time seen minus the
source's lateness (forwarded only when it grows); an :class:`epic.sources.Watermark` item forwards
its time; when the source is exhausted, ``max + 1`` and the end of the stream.
"""

from __future__ import annotations

import threading
import time as _time
from collections import deque
from typing import Iterator

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from epic.errors import EpicError
from epic.operator import ENTRY_COLUMN
from epic.spark.executor import freeze_gc_once
from epic.spark.tags import PHASE_ROWS, tag, with_tags

__all__ = ["make_source_data_source"]


class _Items:
    """Pulls a source's items in order, optionally on a background thread.

    Threaded, a pump thread reads ahead while the planner waits for Spark: a live source never
    blocks planning, and a file source parses the next micro-batch while the tasks of the current
    one run (the source query is the critical path of a deploy). At most ``ahead_bytes`` of items
    wait in the queue.
    """

    def __init__(self, source, threaded: bool, ahead_bytes: int = 256 << 20):
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


class _SourcePartition(InputPartition):
    """Rows of a range of source items, as Arrow IPC bytes (shipped to a task, never stored)."""

    def __init__(self, index: int, payload: bytes):
        super().__init__(index)
        self.part = index
        self.payload = payload


def make_source_data_source(node, *, name: str, schema: pa.Schema, source_index: int,
                            n_sources: int, batch_rows: int, parallelism: int,
                            workdir: str = "", position: bool = False,
                            key: tuple | None = None, apply=None,
                            apply_schema: pa.Schema | None = None, prefetch: bool = False):
    """A ``DataSource`` class (registered under ``name``) reading ``node``'s source.

    Args:
        node: the :class:`~epic.topology.SourceNode`.
        name: the data source's format name (unique per node).
        schema: the topic schema (stream columns + bookkeeping columns).
        source_index, n_sources: position of the node among the topology's sources (steps).
        batch_rows: rows per micro-batch (whole source batches; at least one).
        parallelism: at most this many partitions per micro-batch.
        position: add a ``_pos`` column (partition index << 40 | row in the partition: stream
            order within a micro-batch), for a stateful node fused behind the source.
        key: partition the rows by these columns into exactly ``parallelism`` partitions (a
            deterministic hash, :func:`key_partition`), so a keyed stateful node fused behind the
            source needs no shuffle: partition ``i`` of every micro-batch holds the same keys.
        apply: with ``key``: a function of an iterator of (positioned) batches run inside the
            read task (a fused keyed stateful node and its stateless successors); the task then
            yields its output, with schema ``apply_schema``, instead of the source rows.
        prefetch: read a bounded source on a background thread too, ahead of the planner
            (``--io direct``: parsing overlaps the tasks of the previous micro-batch).
    """
    from epic.replay import entry_times
    from epic.timecore import closing_watermark, source_watermark

    src = node.source
    user_schema = node.output.schema
    entry = ENTRY_COLUMN in user_schema.names
    lateness = src.lateness_ticks()
    time_col = src.time
    source_id = f"source:{node.name}"
    bounded = not src.live   # a paced replay: plan what has arrived, as for a live source
    from epic.spark.tags import POS

    out_schema = schema.append(pa.field(POS, pa.int64())) if position else schema
    declared = apply_schema if apply is not None else out_schema

    reorder = src.reorderer() is not None

    def offset(seq, wm, eos, step, mx, late=None):
        d = {"epic_topic": source_id, "seq": seq}
        if late is not None:
            d["late_rows"] = late
        if wm is not None:
            d["watermark"] = wm
        d["eos"] = eos
        if step is not None:
            d["step"] = step
        if mx is not None:
            d["max"] = mx
        return d

    class _Reader(DataSourceStreamReader, SupportsTriggerAvailableNow):
        def __init__(self):
            self._items = None       # _Items, positioned at self._next
            self._next = 0
            self._wm = None          # forwarded watermark after item self._next - 1
            self._max = None
            self._done = False
            self._planned: dict[int, tuple] = {}   # item index -> (rows, tagged batch)
            self._reo = None         # epic.timecore.Reorderer (slack / punctuation), rebuilt
            self._late = None        # the late_file writer, rewritten from the start

        def __getstate__(self):
            # Executors need nothing of the planner's state (open source, planned batches).
            return {}

        def __setstate__(self, state):
            self.__init__()

        # -- planner ----------------------------------------------------------------------
        def initialOffset(self):
            return offset(0, None, False, None, None)

        def getDefaultReadLimit(self) -> ReadLimit:
            return ReadMaxRows(batch_rows)

        def prepareForTriggerAvailableNow(self) -> None:
            pass

        def _seek(self, start: dict):
            seq = int(start["seq"])
            if self._items is not None and self._next == seq:
                return
            if self._items is not None:
                self._items.close()
            if reorder:
                # The re-order buffer (rows held within the slack) is rebuilt by replaying the
                # source from its start through the same Reorderer: the state equals the one
                # the first planning had, and the late file is rewritten identically.
                self._items = _Items(src, threaded=prefetch or not bounded)
                if self._late is not None:
                    self._late.close()
                self._reo, self._late = src.reorderer(), src.late_writer()
                self._next, self._wm, self._max, self._done = 0, None, None, False
                while self._next < seq and not self._done:
                    self._pull(True)
                self._planned = {k: v for k, v in self._planned.items() if k >= seq}
                return
            self._items = _Items(src, threaded=prefetch or not bounded)
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
                if reorder:
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
            step = idx * n_sources + source_index
            wm_before = self._wm
            if reorder and type(item).__name__ == "Watermark" and hasattr(item, "time"):
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
            if entry:
                b = b.append_column(ENTRY_COLUMN, entry_times(b, _time.time_ns))
            b = pa.RecordBatch.from_arrays(b.columns, schema=user_schema)
            times = b.column(time_col)
            if times.null_count:
                raise EpicError(f"source {node.name!r}: event-time column {time_col!r} has "
                                "nulls; declare it non-nullable or filter such rows")
            if reorder:
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
            self._wm = source_watermark(self._wm, self._max, lateness)
            self._planned[idx] = (b.num_rows, with_tags(b, schema, tag(step, PHASE_ROWS),
                                                        wm_before))
            return True

        def _plan_rows(self, idx: int, b, wm_before):
            if b is None or not b.num_rows:
                self._planned[idx] = (0, None)
                return
            step = idx * n_sources + source_index
            self._planned[idx] = (b.num_rows, with_tags(b, schema, tag(step, PHASE_ROWS),
                                                        wm_before))

        def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
            self._seek(start)
            max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
            rows = 0
            block = True
            while max_rows is None or rows < max_rows:
                if not self._pull(block):
                    break
                rows += self._planned[self._next - 1][0]
                block = bounded
            last_step = None if self._next == 0 else (self._next - 1) * n_sources + source_index
            if workdir and self._next != int(start["seq"]):
                from epic.spark.crash import crash_point

                crash_point("source-plan", workdir)
            return offset(self._next, self._wm, self._done, last_step, self._max,
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
            return [self._planned[i][1] for i in range(a, b) if self._planned[i][1] is not None]

        def partitions(self, start: dict, end: dict):
            batches = self.planned(start, end)
            if key:
                groups = [[] for _ in range(max(1, parallelism))]
                for x in batches:
                    pid = key_partition(x, key, len(groups))
                    for p_, g in enumerate(groups):
                        idx = np.flatnonzero(pid == p_)
                        if len(idx) == len(pid):
                            g.append(x)
                        elif len(idx):
                            g.append(x.take(pa.array(idx)))
                return [_SourcePartition(i, _ipc(g, schema) if g else b"")
                        for i, g in enumerate(groups)]
            if not batches:
                return [_SourcePartition(0, b"")]
            total = sum(x.num_rows for x in batches)
            per = max(1, -(-total // max(1, parallelism)))
            parts, cur, n = [], [], 0
            for x in batches:
                cur.append(x)
                n += x.num_rows
                if n >= per:
                    parts.append(cur)
                    cur, n = [], 0
            if cur:
                parts.append(cur)
            out = []
            for i, group in enumerate(parts):
                sink = pa.BufferOutputStream()
                with pa.ipc.new_stream(sink, schema) as w:
                    for x in group:
                        w.write_batch(x)
                out.append(_SourcePartition(i, sink.getvalue().to_pybytes()))
            return out

        def commit(self, end: dict) -> None:
            seq = int(end["seq"])
            for k in [k for k in self._planned if k < seq]:
                del self._planned[k]

        # -- executor ---------------------------------------------------------------------
        def read(self, partition: _SourcePartition) -> Iterator[pa.RecordBatch]:
            freeze_gc_once()
            if apply is not None:
                yield from apply(self._rows(partition))
                return
            yield from self._rows(partition)

        def _rows(self, partition: _SourcePartition) -> Iterator[pa.RecordBatch]:
            if not partition.payload:
                return
            n = int(getattr(partition, "part", 0)) << 40
            for b in pa.ipc.open_stream(partition.payload):
                if position:
                    pos = pa.array(np.arange(n, n + b.num_rows, dtype=np.int64))
                    n += b.num_rows
                    b = pa.RecordBatch.from_arrays(b.columns + [pos], schema=out_schema)
                yield b

    class _Source(DataSource):
        @classmethod
        def name(cls):
            return name

        def schema(self):
            from pyspark.sql.pandas.types import from_arrow_schema

            return from_arrow_schema(declared)

        def streamReader(self, schema):
            return _Reader()

    _Source.__name__ = f"EpicSource_{node.name.replace('-', '_')}"
    return _Source


def _ipc(batches, schema: pa.Schema) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as w:
        for x in batches:
            w.write_batch(x)
    return sink.getvalue().to_pybytes()


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
