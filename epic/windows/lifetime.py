"""StreamInsight's windows: snapshot windows over event lifetimes, count-by-start-time windows.

Both run per partition key on the shared time core (:class:`~epic.windows.engine.Clocked`): rows
are admitted by the stream's event time (late rows follow the clock's rule), held until the
watermark passes them, and then taken in event-time order (ties: arrival order), so disorder
within the lateness, batch cuts and partitions give the same rows. The semantics are stated in
``docs/windows.md`` ("Snapshot windows", "Count-by-start-time windows"); every element is added
once and removed once:

* :class:`SnapshotWindowOperator`: an event is added at its start and removed at its end; the
  ends wait in a heap ordered by ``(valid_to, arrival)``; between two consecutive boundaries of a
  key (a start or an end) one row is emitted over the events alive there.
* :class:`CountByStartOperator`: the events of one distinct start time form a group, added with
  one ``add_batch`` (or as one pane partial); a window is ``n`` consecutive groups, and the oldest
  group leaves with one ``remove_batch`` (or a two-stacks pop) once the window is emitted.

Both also run in *expiry* mode (``expire=i``, the node of ``Topology.expired``): they emit, instead
of window rows, the rows aggregate ``i``'s ``expire(state, e)`` returns as each element leaves.
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import Any, Sequence

import numpy as np
import pyarrow as pa

from .. import serde
from ..aggregates import AggSpec
from ..errors import SpecError
from ..operator import ENTRY_COLUMN
from ..timecore import EventClock
from .engine import (Clocked, TwoStacks, agg_values, expire_arrays, group_rows, int_column,
                     key_arrays, queue_rows, release_queued, result_arrays, table_bytes,
                     table_from_bytes, value_column)
from .spec import (CountByStartWindow, SnapshotWindow, check_columns, check_lifetime,
                   expire_output_schema, key_tuple, window_output_schema)

__all__ = ["SnapshotWindowOperator", "CountByStartOperator"]


class _Lifetime(Clocked):
    """What both operators share: columns, rows to batches, expiry rows, the protocol."""

    count_mode = False

    def __init__(self, spec, aggregates: Sequence[AggSpec], schema: pa.Schema, time: str,
                 unit: str = "s", key=None, expire: int | None = None):
        self.spec = spec
        self.aggs = list(aggregates)
        if not self.aggs:
            raise SpecError("a window needs at least one aggregate, e.g. epic.count()")
        self.schema = schema
        self.time = time
        self.keys = key_tuple(key)
        check_columns(schema, time, self.keys, self.aggs)
        check_lifetime(spec, self.aggs, schema, time)
        self.has_entry = ENTRY_COLUMN in schema.names
        cols: list[str] = []
        for a in self.aggs:
            for c in a.columns:
                if c not in cols:
                    cols.append(c)
        self.value_columns = cols
        # stored per element: aggregate inputs, then event time (its start)
        self._agg_cols = [[cols.index(c) for c in a.columns] for a in self.aggs]
        self.expire = expire
        if expire is not None:
            self.output_schema = expire_output_schema(self.aggs[expire], schema, key)
        else:
            self.output_schema = window_output_schema(spec, self.aggs, schema, key)
        self.clock = EventClock(spec.lateness_ticks(unit))
        self._held: pa.Table | None = None
        self._wm: int | None = None
        self._dtypes: list | None = None
        self._order: dict[Any, int] = {}

    # -- protocol ---------------------------------------------------------------------------
    def on_batch(self, batch: pa.RecordBatch, before: np.ndarray | None = None
                 ) -> list[pa.RecordBatch]:
        batch, _late = self.admit(batch, before)
        if batch is not None:
            self._hold(batch)
        return self._advance_to(self.clock.watermark, final=False)

    def _advance_to(self, wm: int | None, final: bool) -> list[pa.RecordBatch]:
        if wm is None and not final:
            return []
        rows = self._take_ready(None if final else self._ready_bound(wm), final)
        out: list = []
        self._step(rows, wm, final, out)
        return self._emit(out, final)

    def _emit(self, out: list, final: bool) -> list[pa.RecordBatch]:
        """The batch of rows ``out`` (tuples), by time, then the key's rank, then production."""
        if not out:
            return []
        out.sort(key=lambda r: (r[0], r[1], r[2]))
        return [self._to_batch(out)]

    def _ready_bound(self, wm: int) -> int:
        return wm

    def _columns(self, rows: pa.Table) -> list[np.ndarray]:
        cols = [value_column(rows, c) for c in self.value_columns]
        if self._dtypes is None:
            self._dtypes = [c.dtype for c in cols]
        return cols

    def _key_value(self, kv):
        if kv not in self._order:
            self._order[kv] = len(self._order)
        return self._order[kv]

    def _values(self, i: int, cols: list, times: np.ndarray):
        return agg_values(cols, self._agg_cols[i], times)

    def _expired(self, key_value, i: int, st, cols: list, times: np.ndarray, at: int,
                 entry: int, out: list) -> Any:
        """Remove the elements one by one (oldest first), calling ``expire`` after each; returns
        the state. Rows go to ``out`` as ``(at, key order, seq, key, row dict, entry)``."""
        a = self.aggs[i].aggregate
        vals = self._values(i, cols, times)
        elems = list(zip(*(v.tolist() for v in vals))) if isinstance(vals, tuple) \
            else vals.tolist()
        order = self._order[key_value]
        for e in elems:
            st = a.remove(st, e)
            for r in a.expire(st, e) or ():
                out.append((at, order, len(out), key_value, r, entry))
        return st

    def _to_batch(self, rows: list) -> pa.RecordBatch:
        schema = self.output_schema
        nkeys = len(self.keys)
        arrays = key_arrays([r[3] for r in rows], schema, nkeys) if nkeys else []
        if self.expire is not None:
            arrays += expire_arrays([r[0] for r in rows], [r[4] for r in rows], schema, nkeys,
                                    self.has_entry)
        else:
            arrays.append(pa.array([r[4] for r in rows], type=pa.int64()))
            arrays.append(pa.array([r[0] for r in rows], type=pa.int64()))
            arrays.append(pa.array([r[5] for r in rows], type=pa.bool_()))
            base = nkeys + 3
            arrays += result_arrays(self.aggs, [r[6] for r in rows], schema, base, None)
        if self.has_entry:
            arrays.append(pa.array([r[-1] for r in rows], type=pa.int64()))
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    def _row(self, key_value, s: int, t: int, final: bool, results: list, entry: int) -> tuple:
        return (t, self._order[key_value], 0, key_value, s, final, results, entry)

    def _pack_key(self, kv):
        return list(kv) if isinstance(kv, tuple) else kv

    def _unpack_key(self, kv):
        return tuple(kv) if len(self.keys) > 1 else kv

    def _base_state(self) -> dict:
        return {"clock": self.clock.to_state(), "wm": self._wm,
                "held": None if self._held is None else table_bytes(self._held),
                "dtypes": None if self._dtypes is None else [d.str for d in self._dtypes]}

    def _restore_base(self, st: dict) -> None:
        self.clock = EventClock.from_state(st["clock"])
        self._wm = st["wm"]
        self._held = None if st["held"] is None else table_from_bytes(st["held"])
        self._dtypes = None if st["dtypes"] is None else [np.dtype(d) for d in st["dtypes"]]
        self._order = {}


class SnapshotWindowOperator(_Lifetime):
    """Runtime logic of :func:`~epic.windows.spec.snapshot_window`, per partition key.

    An event ``[valid_from, valid_to)`` is taken once the watermark reaches its start (rows are
    admitted by their start, the stream's event time), added to the key's state at its start and
    removed at its end. The boundaries of a key up to the watermark are then known: a later
    on-time event starts at or after the watermark. Between two consecutive boundaries ``b1 <
    b2`` where some event is alive, the row ``[b1, b2)`` is emitted once the watermark reaches
    ``b2`` (at the end of the input: every remaining boundary). Ends wait in a heap: O(log a) per
    event for ``a`` events alive, whatever the window's length in time.
    """

    def __init__(self, spec: SnapshotWindow, aggregates: Sequence[AggSpec], schema: pa.Schema,
                 time: str, unit: str = "s", key=None, expire: int | None = None):
        super().__init__(spec, aggregates, schema, time, unit, key, expire)
        self.valid_to = spec.valid_to
        # per key: [cur boundary or None, alive count, states, heap of ends, entry, seq]
        self._keys: dict[Any, list] = {}

    @property
    def output_watermark(self) -> int | None:
        return self.clock.watermark

    def _ready_bound(self, wm: int) -> int:
        return wm + 1  # starts at the watermark are boundaries up to it: take them too

    def _step(self, rows: pa.Table | None, wm: int | None, final: bool, out: list) -> None:
        limit = None if final else wm
        if rows is not None and rows.num_rows:
            rows = rows.combine_chunks()
            starts = int_column(rows, self.time)
            ends = int_column(rows, self.valid_to)
            ends = np.maximum(ends, starts + 1)  # a point event lives one tick
            cols = self._columns(rows)
            entry = (rows.column(ENTRY_COLUMN).to_numpy(zero_copy_only=False).astype(np.int64)
                     if self.has_entry else None)
            for kv, idx in group_rows(rows, self.keys):
                self._key_value(kv)
                ks = self._keys.get(kv)
                if ks is None:
                    ks = self._keys[kv] = [None, 0, [a.aggregate.init() for a in self.aggs],
                                           [], 0, 0]
                sel = (lambda c: c) if idx is None else (lambda c: c[idx])
                self._run_key(kv, ks, sel(starts), sel(ends), [sel(c) for c in cols],
                              None if entry is None else sel(entry), limit, out)
        for kv, ks in self._keys.items():
            if ks[3] and (limit is None or ks[3][0][0] <= limit):
                self._run_key(kv, ks, None, None, None, None, limit, out)

    def _run_key(self, kv, ks: list, starts, ends, cols, entry, limit, out: list) -> None:
        """Process the key's boundaries up to ``limit`` (None: all): new starts (sorted) and the
        ends waiting in the heap, emitting a row between consecutive boundaries."""
        heap = ks[3]
        n = 0 if starts is None else len(starts)
        i = 0
        inf = None
        while True:
            bs = int(starts[i]) if i < n else inf
            be = heap[0][0] if heap else inf
            if bs is None and be is None:
                break
            b = bs if be is None else (be if bs is None else min(bs, be))
            if limit is not None and b > limit:
                break
            cur = ks[0]
            if ks[1] > 0 and cur is not None and b > cur and self.expire is None:
                out.append(self._row(kv, cur, b, True,
                                     [a.aggregate.result(s) for a, s in zip(self.aggs, ks[2])],
                                     ks[4]))
            if be is not None and be == b:
                gone = []
                while heap and heap[0][0] == b:
                    gone.append(heapq.heappop(heap))
                self._leave(kv, ks, gone, b, out)
            if bs is not None and bs == b:
                j = int(np.searchsorted(starts, b, side="right"))
                self._enter(ks, starts[i:j], ends[i:j], [c[i:j] for c in cols],
                            None if entry is None else entry[i:j])
                i = j
            ks[0] = b
        if i < n:  # starts beyond the limit cannot be: rows are taken up to the watermark
            raise AssertionError("snapshot window: a start beyond the watermark was taken")

    def _enter(self, ks: list, starts, ends, cols, entry) -> None:
        for i, a in enumerate(self.aggs):
            ks[2][i] = a.aggregate.add_batch(ks[2][i], self._values(i, cols, starts))
        ks[1] += len(starts)
        if entry is not None:
            ks[4] = max(ks[4], int(entry.max()))
        seq = ks[5]
        lists = [c.tolist() for c in cols]
        for j, (t, e) in enumerate(zip(starts.tolist(), ends.tolist())):
            heapq.heappush(ks[3], (e, seq + j, t, [c[j] for c in lists]))
        ks[5] = seq + len(starts)

    def _leave(self, kv, ks: list, gone: list, at: int, out: list) -> None:
        times = np.array([g[2] for g in gone], dtype=np.int64)
        cols = [np.array([g[3][c] for g in gone], dtype=self._dtypes[c])
                for c in range(len(self.value_columns))]
        for i, a in enumerate(self.aggs):
            if i == self.expire:
                ks[2][i] = self._expired(kv, i, ks[2][i], cols, times, at, ks[4], out)
            elif a.aggregate.fifo_remove:
                ks[2][i] = None   # rebuilt below from the events still alive
            else:
                ks[2][i] = a.aggregate.remove_batch(ks[2][i], self._values(i, cols, times))
        ks[1] -= len(gone)
        if ks[1] == 0:
            ks[2] = [a.aggregate.init() for a in self.aggs]  # exactly empty, no residue
            return
        alive = None
        for i, a in enumerate(self.aggs):
            if ks[2][i] is None:
                # Events leave in end order, not start order: an aggregate whose remove takes
                # only the oldest element (collect) is rebuilt from the live events in start
                # order, O(a log a) for a alive (its result is O(a) anyway).
                if alive is None:
                    live = sorted(ks[3], key=lambda h: h[1])
                    alive = (np.array([h[2] for h in live], dtype=np.int64),
                             [np.array([h[3][c] for h in live], dtype=self._dtypes[c])
                              for c in range(len(self.value_columns))])
                ks[2][i] = a.aggregate.add_batch(a.aggregate.init(),
                                                 self._values(i, alive[1], alive[0]))

    def snapshot(self) -> bytes:
        keys = [{"key": self._pack_key(kv), "order": self._order[kv], "cur": ks[0],
                 "alive": ks[1], "states": ks[2], "ends": [list(h) for h in ks[3]],
                 "entry": ks[4], "seq": ks[5]} for kv, ks in self._keys.items()]
        order = [[self._pack_key(kv), o] for kv, o in self._order.items()]
        return serde.pack_state("epic.snapshot_window/1",
                                {**self._base_state(), "keys": keys, "order": order})

    def restore(self, data: bytes) -> None:
        st = serde.unpack_state(data, "epic.snapshot_window/1")
        self._restore_base(st)
        self._order = {self._unpack_key(kv): o for kv, o in st["order"]}
        self._keys = {}
        for k in st["keys"]:
            heap = [(int(e), int(s), int(t), list(v)) for e, s, t, v in k["ends"]]
            heapq.heapify(heap)
            self._keys[self._unpack_key(k["key"])] = [k["cur"], k["alive"], k["states"], heap,
                                                      k["entry"], k["seq"]]


class CountByStartOperator(_Lifetime):
    """Runtime logic of :func:`~epic.windows.spec.count_by_start`, per partition key.

    Rows are taken once the watermark has passed them, so the events of a start time ``d`` are
    complete when taken (a later on-time row has a time at or after the watermark). Each distinct
    start time is one group: added with one ``add_batch`` (``remove`` mode) or pushed as one
    partial (``pane`` mode, two-stacks); when the key holds ``n`` groups the window is emitted and
    the oldest group leaves (``remove_batch`` / pop). O(1) amortised hook calls per group.
    """

    def __init__(self, spec: CountByStartWindow, aggregates: Sequence[AggSpec],
                 schema: pa.Schema, time: str, unit: str = "s", key=None,
                 expire: int | None = None):
        super().__init__(spec, aggregates, schema, time, unit, key, expire)
        self.n = int(spec.n)
        self.modes = ["remove" if a.aggregate.has_remove else "pane" for a in self.aggs]
        if expire is not None and self.modes[expire] != "remove":
            raise SpecError(f"aggregate {self.aggs[expire].name!r}: expire needs remove")
        # per key: [groups deque of (time, cols, entry), states, panes, emitted, entry]
        self._keys: dict[Any, list] = {}
        self._young: dict[Any, list] = {}    # the keys that emitted no window yet
        # (d_last + 1, key order, key) per young key and group, stale entries popped lazily
        self._young_heap: list = []
        self._queue: pa.Table | None = None  # rows waiting for the young keys' hold (_emit)
        self._qseq = 0

    def _ready_bound(self, wm: int) -> int:
        return wm

    def _young_hold(self) -> int | None:
        """The smallest ``d_last + 1`` of the keys with fewer than ``n`` start times so far (no
        window emitted yet): their next row, at the end of the input or their first complete
        window, is stamped no older. None when there is no such key."""
        heap = self._young_heap
        while heap:
            end, _, kv = heap[0]
            ks = self._young.get(kv)
            if ks is not None and ks[0] and ks[0][-1][0] + 1 == end:
                return end
            heapq.heappop(heap)   # the key grew (a newer entry is in) or emitted a window
        return None

    @property
    def output_watermark(self) -> int | None:
        """The clock's watermark, held at :meth:`_young_hold`, so downstream nodes never find
        a young key's row late."""
        wm = self.clock.watermark
        if wm is None or self.expire is not None:
            return wm
        hold = self._young_hold()
        return wm if hold is None else min(wm, hold)

    def _emit(self, out: list, final: bool) -> list[pa.RecordBatch]:
        """Queue the rows and send those no later row can precede: ``window_end`` below the
        young keys' hold (all at the end), by ``window_end``, the key's rank, production. A
        young key's row (its incomplete window at the end of the input) is older than windows
        other keys completed meanwhile; sent in production order, it would be late
        downstream."""
        if self.expire is not None:
            return super()._emit(out, final)
        if out:
            self._queue = queue_rows(self._queue, self._to_batch(out), [r[1] for r in out],
                                     self._qseq)
            self._qseq += len(out)
        if self._queue is None or self._queue.num_rows == 0:
            return []
        send, self._queue = release_queued(self._queue, "window_end",
                                           None if final else self._young_hold())
        return send

    def _new(self) -> list:
        return [deque(), [a.aggregate.init() if m == "remove" else None
                          for a, m in zip(self.aggs, self.modes)],
                [TwoStacks(a.aggregate) if m == "pane" else None
                 for a, m in zip(self.aggs, self.modes)], False, 0]

    def _step(self, rows: pa.Table | None, wm: int | None, final: bool, out: list) -> None:
        if rows is not None and rows.num_rows:
            rows = rows.combine_chunks()
            times = int_column(rows, self.time)
            cols = self._columns(rows)
            entry = (rows.column(ENTRY_COLUMN).to_numpy(zero_copy_only=False).astype(np.int64)
                     if self.has_entry else None)
            for kv, idx in group_rows(rows, self.keys):
                self._key_value(kv)
                ks = self._keys.get(kv)
                if ks is None:
                    ks = self._keys[kv] = self._young[kv] = self._new()
                t = times if idx is None else times[idx]
                c = cols if idx is None else [x[idx] for x in cols]
                en = None if entry is None else (entry if idx is None else entry[idx])
                cuts = np.flatnonzero(t[1:] != t[:-1]) + 1
                for a, b in zip([0, *cuts.tolist()], [*cuts.tolist(), len(t)]):
                    self._group(kv, ks, int(t[a]), t[a:b], [x[a:b] for x in c],
                                0 if en is None else int(en[a:b].max()), out)
        if final and self.expire is None:
            for kv, ks in self._keys.items():
                if not ks[3] and ks[0]:
                    # fewer than n start times in all: the one incomplete window, not final
                    out.append(self._row(kv, ks[0][0][0], ks[0][-1][0] + 1, False,
                                         self._results(ks), ks[4]))

    def _group(self, kv, ks: list, d: int, times, cols, entry: int, out: list) -> None:
        groups = ks[0]
        for i, (a, m) in enumerate(zip(self.aggs, self.modes)):
            v = self._values(i, cols, times)
            if m == "pane":
                ks[2][i].push(a.aggregate.add_batch(a.aggregate.init(), v))
            else:
                ks[1][i] = a.aggregate.add_batch(ks[1][i], v)
        ks[4] = max(ks[4], entry)
        groups.append((d, times, cols))
        if not ks[3]:
            heapq.heappush(self._young_heap, (d + 1, self._order[kv], kv))
        if len(groups) < self.n:
            return
        end = d + 1
        if self.expire is None:
            out.append(self._row(kv, groups[0][0], end, True, self._results(ks), ks[4]))
        if not ks[3]:
            ks[3] = True
            self._young.pop(kv, None)
        _, ot, oc = groups.popleft()
        for i, (a, m) in enumerate(zip(self.aggs, self.modes)):
            if m == "pane":
                ks[2][i].pop()
            elif i == self.expire:
                ks[1][i] = self._expired(kv, i, ks[1][i], oc, ot, end, ks[4], out)
            else:
                ks[1][i] = a.aggregate.remove_batch(ks[1][i], self._values(i, oc, ot))

    def _results(self, ks: list) -> list:
        res = []
        for i, (a, m) in enumerate(zip(self.aggs, self.modes)):
            if m == "pane":
                st = ks[2][i].query()
                res.append(a.aggregate.result(a.aggregate.init() if st is None else st))
            else:
                res.append(a.aggregate.result(ks[1][i]))
        return res

    def snapshot(self) -> bytes:
        keys = [{"key": self._pack_key(kv), "order": self._order[kv],
                 "groups": [[d, t, c] for d, t, c in ks[0]], "states": ks[1],
                 "panes": [p.to_state() if p is not None else None for p in ks[2]],
                 "emitted": ks[3], "entry": ks[4]} for kv, ks in self._keys.items()]
        order = [[self._pack_key(kv), o] for kv, o in self._order.items()]
        queue = None if self._queue is None else table_bytes(self._queue)
        return serde.pack_state("epic.count_by_start/1",
                                {**self._base_state(), "keys": keys, "order": order,
                                 "queue": queue, "qseq": self._qseq})

    def restore(self, data: bytes) -> None:
        st = serde.unpack_state(data, "epic.count_by_start/1")
        self._restore_base(st)
        self._order = {self._unpack_key(kv): o for kv, o in st["order"]}
        self._keys = {}
        for k in st["keys"]:
            self._keys[self._unpack_key(k["key"])] = [
                deque((int(d), t, list(c)) for d, t, c in k["groups"]), k["states"],
                [TwoStacks.from_state(a.aggregate, p) if p is not None else None
                 for a, p in zip(self.aggs, k["panes"])], k["emitted"], k["entry"]]
        self._young = {kv: ks for kv, ks in self._keys.items() if not ks[3]}
        self._young_heap = [(ks[0][-1][0] + 1, self._order[kv], kv)
                            for kv, ks in self._young.items() if ks[0]]
        heapq.heapify(self._young_heap)
        q = st.get("queue")
        self._queue = None if q is None else table_from_bytes(q)
        self._qseq = int(st.get("qseq", 0))
