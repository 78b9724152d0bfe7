"""The incremental window engine: FEW time and count windows with init/add/remove aggregates.

A spec (:mod:`epic.windows.spec`) plus aggregates, a partition key and the input stream's schema
build a :class:`WindowOperator` (the runtime contract of :mod:`epic.operator`). In short, for a FEW
time window with length ``L``, stride ``S`` and emit frequency ``E``, origin ``o``:

* window ``k`` covers event times ``[o + k*S, o + k*S + L)``;
* emission instants are every ``o + m*E`` and every window end ``o + k*S + L``;
* at an instant ``t`` the window *being formed* is the first one that has not ended before
  ``t``; epic emits the landmark sub-window ``[start, t)`` of it, flagged ``final`` when ``t`` is
  its end; sub-windows without elements are not emitted;
* an instant ``t`` is emitted once the watermark (:mod:`epic.timecore`) reaches ``t``; at the end
  of the input, the instant that closes the data is emitted too.

Count windows apply the same rule to element positions (per key, from 0). :class:`Clocked` is
what every window operator shares (the clock, rows held until the watermark passes them).
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections import deque
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import serde
from ..aggregates import Aggregate, AggSpec
from ..errors import SpecError
from ..operator import ENTRY_COLUMN
from ..schemas import empty_batch
from ..timecore import EventClock
from .spec import (FewCountWindow, PredicateWindow, WindowSpec, check_columns,
                   choose_mode, expire_output_schema, key_tuple, window_output_schema)

__all__ = ["WindowOperator", "Clocked", "TwoStacks", "key_arrays", "expire_arrays", "result_arrays", "NOT_STARTED", "MAX_BATCH_ROWS", "MAX_BATCH_ELEMENTS",
           "int_column", "value_column", "agg_values", "group_rows", "to_arrow", "table_bytes",
           "table_from_bytes"]

INT64_MIN = np.iinfo(np.int64).min

#: ``_Key.done`` of a key whose first boundary is not known yet (``_advance`` jumps to the
#: boundary at or before the key's first pending element, never past the watermark)
NOT_STARTED = INT64_MIN // 4

#: bounds of one output batch of a window operator (see ``WindowOperator._emit_all``)
MAX_BATCH_ROWS = 65_536
MAX_BATCH_ELEMENTS = 4_000_000


class _Buffer:
    """Append-only, time-sorted element store addressed by absolute positions.

    Chunks are kept as they arrive (no quadratic re-concatenation); ``drop_before`` forgets
    chunks that every consumer has passed.
    """

    __slots__ = ("chunks", "starts", "end", "base")

    def __init__(self):
        self.chunks: list[tuple[np.ndarray, list]] = []  # (times, [col arrays])
        self.starts: list[int] = []
        self.end = 0  # absolute position one past the last element
        self.base = 0  # absolute position of the first stored element

    def __len__(self):
        return self.end - self.base

    def append(self, times: np.ndarray, cols: list):
        if not len(times):
            return
        self.chunks.append((times, cols))
        self.starts.append(self.end)
        self.end += len(times)

    def last_time(self):
        return self.chunks[-1][0][-1] if self.chunks else None

    def _chunk_index(self, pos: int) -> int:
        # The chunk holding ``pos`` (the first chunk for a position before it). Removals read
        # at the front (the first chunk); additions and searches near the end, where a window
        # of many small batches keeps hundreds of chunks per key (Q3's 10-minute heat maps:
        # one chunk per second), so not a scan from the front.
        starts = self.starts
        if len(starts) < 2 or starts[1] > pos:
            return 0
        return bisect_right(starts, pos) - 1

    def search(self, t: int, lo: int) -> int:
        """First absolute position ``>= lo`` whose time is ``>= t``."""
        if lo >= self.end:
            return self.end
        i = self._chunk_index(lo)
        while i < len(self.chunks):
            times = self.chunks[i][0]
            start = self.starts[i]
            if times[-1] >= t:
                j = int(times.searchsorted(t))  # the method skips numpy's dispatch wrapper
                return max(start + j, lo)
            i += 1
        return self.end

    def slice(self, a: int, b: int) -> tuple[np.ndarray, list]:
        """Times and columns of positions ``[a, b)``."""
        if a >= b:
            return None
        i = self._chunk_index(a)
        parts_t = []
        parts_c = None
        while a < b:
            times, cols = self.chunks[i]
            start = self.starts[i]
            j0 = a - start
            j1 = min(b - start, len(times))
            parts_t.append(times[j0:j1])
            if parts_c is None:
                parts_c = [[c[j0:j1]] for c in cols]
            else:
                for acc, c in zip(parts_c, cols):
                    acc.append(c[j0:j1])
            a = start + j1
            i += 1
        if len(parts_t) == 1:
            return parts_t[0], [p[0] for p in parts_c]
        return np.concatenate(parts_t), [np.concatenate(p) for p in parts_c]

    def drop_before(self, pos: int):
        while self.chunks and self.starts[0] + len(self.chunks[0][0]) <= pos:
            self.chunks.pop(0)
            self.starts.pop(0)
        self.base = self.starts[0] if self.chunks else self.end

    def replace_tail(self, pos: int, times: np.ndarray, cols: list):
        """Replace everything from absolute ``pos`` on (used to re-sort a pending tail)."""
        if self.end > pos:
            # cut chunks at pos
            while self.chunks and self.starts[-1] >= pos:
                self.chunks.pop()
                self.starts.pop()
            if self.chunks and self.starts[-1] + len(self.chunks[-1][0]) > pos:
                t, c = self.chunks[-1]
                cut = pos - self.starts[-1]
                self.chunks[-1] = (t[:cut], [x[:cut] for x in c])
            self.end = pos
        self.append(times, cols)

    # snapshot ------------------------------------------------------------------------
    def to_state(self):
        if not self.chunks:
            return [self.base, self.end, None, None]
        t, c = self.slice(self.base, self.end)
        return [self.base, self.end, t, c]

    @classmethod
    def from_state(cls, st):
        b = cls()
        base, end, t, c = st
        b.base = b.end = base
        if t is not None:
            b.append(t, c)
        assert b.end == end
        return b


class TwoStacks:
    """FIFO of partials with O(1) amortised ``merge`` queries (front = oldest)."""

    __slots__ = ("agg", "front", "front_aggs", "back", "back_agg")

    def __init__(self, agg: Aggregate):
        self.agg = agg
        self.front: list = []  # oldest at the end (stack top)
        self.front_aggs: list = []  # front_aggs[i] = merge of front[i] and everything newer in front
        self.back: list = []
        self.back_agg = None

    def push(self, partial):
        self.back.append(partial)
        self.back_agg = partial if self.back_agg is None else self.agg.merge(self.back_agg, partial)

    def pop(self):
        if not self.front:
            self._flip()
        self.front.pop()
        self.front_aggs.pop()

    def _flip(self):
        merge = self.agg.merge
        acc = None
        # walk newest -> oldest so the stack top ends up the oldest
        for p in reversed(self.back):
            acc = p if acc is None else merge(p, acc)
            self.front.append(p)
            self.front_aggs.append(acc)
        self.back.clear()
        self.back_agg = None

    def query(self):
        f = self.front_aggs[-1] if self.front_aggs else None
        b = self.back_agg
        if f is None:
            return b
        if b is None:
            return f
        return self.agg.merge(f, b)

    def to_state(self):
        # Ordered oldest -> newest; the structure is rebuilt on restore.
        return list(reversed(self.front)) + list(self.back)

    @classmethod
    def from_state(cls, agg, partials):
        ts = cls(agg)
        for p in partials:
            ts.push(p)
        return ts


#: the stream position of each on-time row inside a ``ranked`` window operator
POS_COLUMN = "__epic_stream_pos"
#: a key's rank on a ``ranked`` operator's output rows (``rank_column``): the position in the
#: node's input stream of the key's first on-time row; output rows of one emission are ordered
#: by time, then rank, in every runtime
RANK_COLUMN = "_rank"


class Clocked:
    """What every window operator shares: the node's :class:`~epic.timecore.EventClock` and, for
    the kinds that take elements in event-time order (count and predicate windows), the on-time
    rows held until the watermark passes them."""

    time: str
    clock: EventClock
    _held: pa.Table | None

    #: the operator takes ``before`` (each row's stream high-water mark) and ``observe``
    stream_clock = True
    #: the operator orders keys by their first on-time row's position in the input stream
    #: (``positions``; :data:`POS_COLUMN` on admitted rows) and can stamp output rows with it
    #: (:data:`RANK_COLUMN`, ``rank_column``): the time and count windows
    ranked = False
    #: add :data:`RANK_COLUMN` to output rows (a Spark task of a keyed node over several
    #: partitions: its consumers merge the partitions' rows in the order ``epic run`` emits)
    rank_column = False
    #: rows of the input stream so far, counted when the runtime gives no positions (epic run)
    _stream_rows = 0

    def admit(self, batch: pa.RecordBatch, before: np.ndarray | None = None,
              positions: np.ndarray | None = None):
        """Split ``batch`` into on-time rows and late rows (either may be None).

        ``positions``: each row's position in the node's input stream, when the runtime gives
        this operator only some keys' rows (a Spark partition); else counted here. A ``ranked``
        operator gets them as :data:`POS_COLUMN` on the on-time rows."""
        n = batch.num_rows
        if n == 0:
            return None, None
        if self.ranked and positions is None:
            positions = np.arange(self._stream_rows, self._stream_rows + n, dtype=np.int64)
            self._stream_rows += n
        keep = self.clock.admit(int_column(batch, self.time), before)
        late = None
        if keep is not None:
            late = batch.filter(pa.array(~keep))
            batch = batch.filter(pa.array(keep))
            if self.ranked:
                positions = np.asarray(positions)[keep]
        if self.ranked and batch.num_rows:
            batch = batch.append_column(POS_COLUMN, pa.array(positions, pa.int64()))
        return (batch if batch.num_rows else None), late

    def observe(self, high: int | None) -> list[pa.RecordBatch]:
        """The input stream reached event time ``high`` in rows this operator did not get."""
        self.clock.observe(high)
        return self._advance_to(self.clock.watermark, final=False)

    def on_watermark(self, watermark: int) -> list[pa.RecordBatch]:
        if not self.clock.push(watermark):
            return []
        return self._advance_to(self.clock.watermark, final=False)

    def on_end(self) -> list[pa.RecordBatch]:
        return self._advance_to(self.clock.end(), final=True)

    @property
    def watermark(self) -> int | None:
        """The operator's watermark: rows with a smaller event time are late."""
        return self.clock.watermark

    @property
    def late_rows(self) -> int:
        """Rows that arrived behind the watermark (counted, never silent)."""
        return self.clock.late_rows

    def _advance_to(self, wm: int | None, final: bool) -> list[pa.RecordBatch]:
        if self.count_mode:
            self._release(wm, final)
        if wm is None:
            return []
        if self._wm is not None and wm < self._wm:
            wm = self._wm
        self._wm = wm
        return self._emit_all(final)

    @property
    def output_watermark(self) -> int | None:
        """The watermark a runtime forwards downstream: no later output row is older (window
        rows are stamped with instants, never below the watermark that released them).

        A count window's rows at the end of the input are stamped with the stream's last event
        time, which the end's watermark (``max + 1``) has passed: it forwards at most the highest
        event time seen, so downstream nodes never find those rows late."""
        wm = self.clock.watermark
        if self.count_mode and wm is not None and self.clock.high is not None:
            return min(wm, self.clock.high)
        return wm

    def _hold(self, batch: pa.RecordBatch) -> None:
        t = pa.Table.from_batches([batch])
        self._held = t if self._held is None else pa.concat_tables([self._held, t])

    def _release(self, wm: int | None, final: bool) -> None:
        """Count windows: rows the watermark has passed get their positions, in time order
        (ties: arrival order)."""
        rows = self._take_ready(wm, final)
        if rows is not None:
            for b in rows.to_batches():
                self._ingest(b, int_column(b, self.time))

    def _take_ready(self, wm: int | None, final: bool) -> pa.Table | None:
        """Held rows below ``wm`` (all at the end), sorted by time then arrival; kept: the rest."""
        held = self._held
        if held is None or held.num_rows == 0 or (wm is None and not final):
            return None
        times = int_column(held, self.time)
        ready = np.ones(len(times), bool) if final else times < wm
        if not ready.any():
            return None
        idx = np.flatnonzero(ready)
        order = idx[np.argsort(times[idx], kind="stable")]
        rows = held.take(pa.array(order)).combine_chunks()
        rest = np.flatnonzero(~ready)
        self._held = held.take(pa.array(rest)) if len(rest) else None
        return rows


@dataclass
class _Key:
    """Window state of one partition key."""

    origin: int
    done: int  # last processed boundary: elements before it are added, instants up to it emitted
    buf: _Buffer
    hi: int  # absolute position: elements before it were added
    lo: int  # absolute position: elements before it were removed (remove-mode aggregates)
    states: list  # per aggregate: its state (None for pane-mode aggregates)
    panes: list  # per aggregate: a TwoStacks of pane partials (pane mode) or None
    seg_starts: deque  # start time of each non-empty segment between boundaries, oldest first
    seg_counts: deque  # elements in each of those segments
    in_window: int  # elements in the window being formed
    entry: int  # newest arrival time among added elements (delay logging)
    last_time: int  # event time of the newest added element
    seen: int  # elements received (count windows: the next position)
    key_order: int
    first: int = 0  # start of the key's first window (Grid.first_window)


class WindowOperator(Clocked):
    """Runtime logic of a FEW time or count window with aggregates, per partition key.

    Args:
        spec: a :class:`FewTimeWindow` or :class:`FewCountWindow`.
        aggregates: the bound aggregates.
        schema: the input schema.
        time: the input's event-time column.
        unit: the input's time unit.
        key: partition key column(s), or None for one global window.

    Elements are buffered until the watermark passes the next boundary (an emission instant or a
    window start); then the elements before that boundary are added, per aggregate: to the
    running state (``remove``/``add``/``reset`` modes) or as one pane partial (``pane`` mode).
    Every element is added exactly once and, in ``remove`` mode, removed exactly once. Results do
    not depend on how the input is cut into batches.
    """

    def __init__(self, spec: WindowSpec, aggregates: Sequence[AggSpec], schema: pa.Schema,
                 time: str, unit: str = "s", key: str | Sequence[str] | None = None,
                 expire: int | None = None):
        if isinstance(spec, PredicateWindow):
            raise SpecError("predicate windows run in PredicateWindowOperator")
        self.spec = spec
        self.aggs = list(aggregates)
        if not self.aggs:
            raise SpecError("a window needs at least one aggregate, e.g. epic.count()")
        self.schema = schema
        self.time = time
        self.unit = unit
        self.keys = key_tuple(key)
        self.count_mode = isinstance(spec, FewCountWindow)
        self.grid = spec.resolve(unit)
        self.lateness = spec.lateness_ticks(unit)
        self.fixed_origin = None if self.count_mode else spec.origin
        self.has_entry = ENTRY_COLUMN in schema.names
        check_columns(schema, time, self.keys, self.aggs)
        cols: list[str] = []
        for a in self.aggs:
            for c in a.columns:
                if c not in cols:
                    cols.append(c)
        self.value_columns = cols
        # stored per element: aggregate inputs, then event time, then arrival time
        self.stored = cols + ["__time"] + (["__entry"] if self.has_entry else [])
        self._col_index = {c: i for i, c in enumerate(self.stored)}
        self._agg_cols = [[self._col_index[c] for c in a.columns] for a in self.aggs]
        self.modes = [choose_mode(a, spec, self.grid) for a in self.aggs]
        #: expiry mode (``Topology.expired``): the aggregate whose ``expire`` rows are emitted
        #: instead of window rows; its elements leave one by one, so it runs in ``remove`` mode
        self.expire = expire
        self._expired_rows: list = []
        if expire is not None and self.grid.L is not None:
            if not self.aggs[expire].aggregate.has_remove:
                raise SpecError(f"aggregate {self.aggs[expire].name!r}: active expiration needs "
                                "remove(state, e) (elements leave one by one)")
            self.modes[expire] = "remove"
        self.any_remove = "remove" in self.modes
        self.any_reset = "reset" in self.modes
        self.output_schema = (window_output_schema(spec, self.aggs, schema, key) if expire is None
                              else expire_output_schema(self.aggs[expire], schema, key))
        self._key_state: dict[Any, _Key] = {}
        #: count windows: new keys' first on-time row positions, until their state is made
        self._first_pos: dict[Any, int] = {}
        #: the node's time: high-water mark, pushed watermarks, late-row decisions and counts
        self.clock = EventClock(self.lateness)
        #: count windows: on-time rows not yet passed by the watermark (an Arrow table)
        self._held: pa.Table | None = None
        self._wm: int | None = None  # the watermark the windows were last advanced to

    # -- public protocol -----------------------------------------------------------------
    ranked = True

    def on_batch(self, batch: pa.RecordBatch, before: np.ndarray | None = None,
                 positions: np.ndarray | None = None) -> list[pa.RecordBatch]:
        """Rows of the input stream. ``before``: each row's stream high-water mark before it,
        and ``positions`` each row's position in the stream, when the runtime gives this
        operator only some keys' rows (a Spark partition)."""
        batch, _late = self.admit(batch, before, positions)
        if batch is not None:
            if self.count_mode:
                self._note_first(batch)
                self._hold(batch)
            else:
                self._ingest(batch, int_column(batch, self.time))
        return self._advance_to(self.clock.watermark, final=False)

    # -- ingest --------------------------------------------------------------------------
    def _ingest(self, batch: pa.RecordBatch, times: np.ndarray) -> None:
        columns = [value_column(batch, c) for c in self.value_columns]
        columns.append(times)
        if self.has_entry:
            columns.append(batch.column(ENTRY_COLUMN).to_numpy(zero_copy_only=False)
                           .astype(np.int64))
        pos = batch.column(POS_COLUMN).to_numpy() if POS_COLUMN in batch.schema.names else None
        for key_value, idx in group_rows(batch, self.keys):
            ks = self._key_state.get(key_value)
            cols = columns if idx is None else [c[idx] for c in columns]
            if ks is None:
                order = self._first_pos.pop(key_value, None)
                if order is None:   # a time window: the key's first on-time row is here
                    order = (len(self._key_state) if pos is None
                             else int(pos[0] if idx is None else pos[idx].min()))
                ks = self._new_key(self._origin_for(cols[len(self.value_columns)]), order)
                self._key_state[key_value] = ks
            self._append(ks, cols)

    def _note_first(self, batch: pa.RecordBatch) -> None:
        """Count windows hold rows until the watermark passes them: remember the stream
        position of each new key's first on-time row (its rank) until its state is made."""
        if not self.keys:
            return
        pos = batch.column(POS_COLUMN).to_numpy()
        first = self._first_pos
        for key_value, idx in group_rows(batch, self.keys):
            if key_value not in self._key_state and key_value not in first:
                first[key_value] = int(pos[0] if idx is None else pos[idx].min())

    def _origin_for(self, times: np.ndarray) -> int:
        """The grid phase of a new key: the pinned origin, else the key's first element (in
        arrival order: never the minimum of a batch, so batch cuts cannot move it)."""
        if self.count_mode:
            return 0
        if self.fixed_origin is not None:
            return int(self.fixed_origin)
        return int(times[0])

    def _new_key(self, origin: int, order: int) -> _Key:
        return _Key(
            origin=origin, done=NOT_STARTED, first=origin, buf=_Buffer(), hi=0, lo=0,
            states=[a.aggregate.init() if m != "pane" else None
                    for a, m in zip(self.aggs, self.modes)],
            panes=[TwoStacks(a.aggregate) if m == "pane" else None
                   for a, m in zip(self.aggs, self.modes)],
            seg_starts=deque(), seg_counts=deque(), in_window=0, entry=0, last_time=0, seen=0,
            key_order=order,
        )

    def _append(self, ks: _Key, cols: list):
        ti = len(self.value_columns)
        n = len(cols[ti])
        if self.count_mode:
            pos = np.arange(ks.seen, ks.seen + n, dtype=np.int64)
            ks.seen += n
            ks.buf.append(pos, cols)
            return
        ks.seen += n
        t = cols[ti]
        first = self.grid.first_window(ks.origin, int(t.min()))
        if first < ks.first:
            ks.first = first  # an element before the origin (out of order, or a pinned origin)
        if n > 1 and np.any(t[1:] < t[:-1]):
            order = np.argsort(t, kind="stable")
            cols = [c[order] for c in cols]
            t = cols[ti]
        last = ks.buf.last_time()
        if last is not None and ks.buf.end > ks.hi and t[0] < last:
            # out of order within the lateness bound: re-sort the pending (not yet added) tail
            pend_t, pend_c = ks.buf.slice(ks.hi, ks.buf.end)
            all_t = np.concatenate([pend_t, t])
            order = np.argsort(all_t, kind="stable")
            all_c = [np.concatenate([p, c])[order] for p, c in zip(pend_c, cols)]
            ks.buf.replace_tail(ks.hi, all_t[order], all_c)
        else:
            ks.buf.append(t, cols)

    # -- emission ------------------------------------------------------------------------
    def _emit_all(self, final: bool) -> list[pa.RecordBatch]:
        """Emit every instant the watermark has reached, for every key, ordered by instant and
        then by the key's rank (the stream position of its first on-time row). Rows are streamed from per-key generators and converted
        in bounded batches, so a long watermark jump (a gap in the data, half-time) never builds
        one giant batch: at most ``MAX_BATCH_ROWS`` rows or ``MAX_BATCH_ELEMENTS`` nested result
        elements (lists, maps) per batch."""
        wm = self._wm
        gens = [self._advance(key_value, ks, ks.seen if self.count_mode else wm, final)
                for key_value, ks in self._key_state.items()]
        # time windows: by instant, then key; count windows: by the event time of the element
        # that closes the row, then key
        order = (lambda r: (r[6], r[0])) if self.count_mode else (lambda r: (r[2], r[0]))
        rows = gens[0] if len(gens) == 1 else heapq.merge(*gens, key=order)
        out: list[pa.RecordBatch] = []
        chunk: list = []
        weight = 0
        for r in rows:
            chunk.append(r)
            weight += 1 + _nested_size(r[5])
            if len(chunk) >= MAX_BATCH_ROWS or weight >= MAX_BATCH_ELEMENTS:
                out.append(self._rows_to_batch(chunk))
                chunk, weight = [], 0
        if chunk:
            out.append(self._rows_to_batch(chunk))
        return out

    def _rows_to_batch(self, rows: list) -> pa.RecordBatch:
        b = self._rows_batch(rows)
        if self.rank_column:
            b = b.append_column(RANK_COLUMN, pa.array([r[0] for r in rows], pa.int64()))
        return b

    def _advance(self, key_value, ks: _Key, wm: int | None, final: bool):
        """Generator of the key's result rows up to ``wm``, in instant order."""
        if wm is None:
            return
        grid = self.grid
        o = ks.origin
        buf = ks.buf
        # at the end of the input, also the instant that closes the data (first instant >= wm);
        # a count window instead emits its incomplete window once more (below)
        lo = ks.first
        limit = grid.next_instant(o, wm - 1, lo) if final and not self.count_mode else wm
        while True:
            if ks.in_window == 0:
                if ks.hi >= buf.end:
                    break  # idle: nothing in the window, nothing pending
                # skip the boundaries of an empty stretch up to the next pending element, but
                # never past the limit: a row may still arrive between the limit and that element
                # (out of order, within the lateness bound)
                nxt = int(buf.slice(ks.hi, ks.hi + 1)[0][0])
                jump = grid.prev_boundary(o, min(nxt, limit))
                if jump > ks.done:
                    ks.done = jump
            # this loop runs once per emission and key: grid arithmetic is done once here
            inst = grid.next_instant(o, ks.done, lo)
            b = grid.next_boundary(o, ks.done, inst)
            if b > limit:
                break
            hi_new = buf.search(b, ks.hi)
            self._add_segment(ks, ks.hi, hi_new)
            ks.done = b
            if inst != b:
                continue  # a window start that is no emission instant
            s = grid.window_start(o, b, lo)
            is_final = grid.L is not None and b == s + grid.L
            self._evict(ks, s, key_value, ks.last_time if self.count_mode else b)
            if self.expire is not None:
                yield from self._take_expired()
            elif ks.in_window > 0:
                yield self._result_row(key_value, ks, s, b, is_final)
            if self.any_reset and is_final:
                for i, m in enumerate(self.modes):
                    if m == "reset":
                        ks.states[i] = self.aggs[i].aggregate.init()
        n = buf.end
        if final and self.count_mode and n > 0 and grid.next_instant(o, n - 1, lo) != n:
            # the end of the input: the window being formed, [s, n) with n the elements seen,
            # not final (it is incomplete: a complete one ends at an instant, emitted above)
            self._add_segment(ks, ks.hi, n)
            s = grid.window_start(o, n, lo)
            self._evict(ks, s, key_value, max(ks.last_time, self.clock.high))
            if self.expire is not None:
                yield from self._take_expired()
            elif ks.in_window > 0:
                # closed by the end of the input: stamped with the stream's last event time, so
                # rows stay in event-time order and are never behind a downstream watermark
                row = self._result_row(key_value, ks, s, n, False)
                yield row[:6] + (max(row[6], self.clock.high),) + row[7:]
        keep_from = ks.lo if self.any_remove else ks.hi
        if keep_from > buf.base:
            buf.drop_before(keep_from)

    def _add_segment(self, ks: _Key, a: int, b: int):
        """Add elements ``[a, b)`` (times in ``[ks.done, boundary)``) as one segment."""
        if b <= a:
            return
        _, cols = ks.buf.slice(a, b)
        t = cols[self._col_index["__time"]]  # event times (count windows: not positions)
        for i, (spec, mode) in enumerate(zip(self.aggs, self.modes)):
            values = agg_values(cols, self._agg_cols[i], t)
            if mode == "pane":
                ks.panes[i].push(spec.aggregate.add_batch(spec.aggregate.init(), values))
            else:
                ks.states[i] = spec.aggregate.add_batch(ks.states[i], values)
        n = b - a
        if self.grid.L is not None:
            ks.seg_starts.append(ks.done)
            ks.seg_counts.append(n)
        ks.in_window += n
        ks.last_time = int(cols[self._col_index["__time"]][-1])
        if self.has_entry:
            ks.entry = max(ks.entry, int(cols[self._col_index["__entry"]].max()))
        ks.hi = b

    def _take_expired(self):
        rows, self._expired_rows = self._expired_rows, []
        return rows

    def _evict(self, ks: _Key, s: int, key_value=None, at: int = 0):
        """Drop everything before window start ``s`` (expiry mode: the rows of ``expire`` for
        each element leaving, stamped ``at``)."""
        if self.grid.L is None:
            return
        starts, counts = ks.seg_starts, ks.seg_counts
        while starts and starts[0] < s:
            starts.popleft()
            ks.in_window -= counts.popleft()
            for p in ks.panes:
                if p is not None:
                    p.pop()
        if self.any_remove:
            # window starts are segment boundaries, so the window is exactly the newest
            # ``in_window`` added elements: no search needed
            lo_new = ks.hi - ks.in_window
            if lo_new > ks.lo:
                _, cols = ks.buf.slice(ks.lo, lo_new)
                t = cols[self._col_index["__time"]]
                live = None
                for i, (spec, mode) in enumerate(zip(self.aggs, self.modes)):
                    if mode == "remove":
                        a = spec.aggregate
                        vals = agg_values(cols, self._agg_cols[i], t)
                        if i == self.expire:
                            st = self._expire_each(a, ks, vals, key_value, at)
                        else:
                            st = a.remove_batch(ks.states[i], vals)
                        if a.needs_rebuild(st):
                            # large values left: recompute from the live elements, so the
                            # residue of their removal cannot exceed the window's own magnitude
                            if live is None:
                                _, live = ks.buf.slice(lo_new, ks.hi)
                            lt = live[self._col_index["__time"]]
                            st = a.add_batch(a.init(), agg_values(live, self._agg_cols[i], lt))
                        ks.states[i] = st
                ks.lo = lo_new

    def _expire_each(self, a: Aggregate, ks: _Key, vals, key_value, at: int):
        """Remove elements one by one (oldest first), calling ``expire`` after each."""
        st = ks.states[self.expire]
        elems = (list(zip(*(v.tolist() for v in vals))) if isinstance(vals, tuple)
                 else vals.tolist())
        for e in elems:
            st = a.remove(st, e)
            for r in a.expire(st, e) or ():
                # shaped like a result row for _emit_all's order: (order, key, at, ..., time)
                self._expired_rows.append((ks.key_order, key_value, at, None, None, r, at,
                                           ks.entry))
        return st

    def _result_row(self, key_value, ks: _Key, s: int, t: int, is_final: bool) -> tuple:
        results = []
        for i, (spec, mode) in enumerate(zip(self.aggs, self.modes)):
            if mode == "pane":
                st = ks.panes[i].query()
                results.append(spec.aggregate.result(spec.aggregate.init() if st is None else st))
            else:
                results.append(spec.aggregate.result(ks.states[i]))
        return (ks.key_order, key_value, t, s, is_final, results,
                ks.last_time, ks.entry)

    def _rows_batch(self, rows: list) -> pa.RecordBatch:
        schema = self.output_schema
        nkeys = len(self.keys)
        arrays = key_arrays([r[1] for r in rows], schema, nkeys) if nkeys else []
        if self.expire is not None:
            arrays += expire_arrays([r[2] for r in rows], [r[5] for r in rows], schema, nkeys,
                                    self.has_entry)
            if self.has_entry:
                arrays.append(pa.array([r[7] for r in rows], type=pa.int64()))
            return pa.RecordBatch.from_arrays(arrays, schema=schema)
        arrays.append(pa.array([r[3] for r in rows], type=pa.int64()))
        arrays.append(pa.array([r[2] for r in rows], type=pa.int64()))
        arrays.append(pa.array([r[4] for r in rows], type=pa.bool_()))
        base = nkeys + 3
        if self.count_mode:
            arrays.append(pa.array([r[6] for r in rows], type=pa.int64()))
            base += 1
        arrays += result_arrays(self.aggs, [r[5] for r in rows], schema, base,
                                [r[7] for r in rows] if self.has_entry else None)
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    # -- snapshot --------------------------------------------------------------------------
    def snapshot(self) -> bytes:
        keys = []
        for key_value, ks in self._key_state.items():
            keys.append({
                "key": list(key_value) if isinstance(key_value, tuple) else key_value,
                "origin": ks.origin, "done": ks.done, "first": ks.first,
                "buffer": ks.buf.to_state(), "hi": ks.hi, "lo": ks.lo, "states": ks.states,
                "panes": [p.to_state() if p is not None else None for p in ks.panes],
                "seg_starts": list(ks.seg_starts), "seg_counts": list(ks.seg_counts),
                "in_window": ks.in_window, "entry": ks.entry, "last_time": ks.last_time,
                "seen": ks.seen, "order": ks.key_order,
            })
        return serde.pack_state("epic.window/3", {
            "clock": self.clock.to_state(), "wm": self._wm,
            "held": None if self._held is None else table_bytes(self._held), "keys": keys,
            "rows": self._stream_rows,
            "first_pos": [[list(k) if isinstance(k, tuple) else k, v]
                          for k, v in self._first_pos.items()],
        })

    def restore(self, data: bytes) -> None:
        st = serde.unpack_state(data, "epic.window/3")
        self.clock = EventClock.from_state(st["clock"])
        self._wm = st["wm"]
        self._held = None if st["held"] is None else table_from_bytes(st["held"])
        if self._held is not None and POS_COLUMN not in self._held.column_names:
            # held by an older epic (no positions): those keys rank before the later ones
            self._held = self._held.append_column(
                POS_COLUMN, pa.array(np.full(self._held.num_rows, -1, np.int64)))
        self._stream_rows = int(st.get("rows", 0))
        tup = len(self.keys) > 1
        self._first_pos = {(tuple(k) if tup else k): int(v) for k, v in st.get("first_pos", [])}
        self._key_state = {}
        for k in st["keys"]:
            key_value = tuple(k["key"]) if len(self.keys) > 1 else k["key"]
            self._key_state[key_value] = _Key(
                origin=k["origin"], done=k["done"], buf=_Buffer.from_state(k["buffer"]),
                hi=k["hi"], lo=k["lo"], states=k["states"],
                panes=[TwoStacks.from_state(a.aggregate, p) if p is not None else None
                       for a, p in zip(self.aggs, k["panes"])],
                seg_starts=deque(k["seg_starts"]), seg_counts=deque(k["seg_counts"]),
                in_window=k["in_window"], entry=k["entry"], last_time=k["last_time"],
                seen=k["seen"], key_order=k["order"], first=k["first"],
            )


def queue_rows(queue: pa.Table | None, batch: pa.RecordBatch, ranks, seq: int) -> pa.Table:
    """``queue`` with ``batch``'s rows appended, each tagged with its key's rank (``__rank``)
    and its production number from ``seq`` (``__seq``): the output queue of an operator whose
    rows may be produced out of time order (predicate windows, count-by-start windows)."""
    n = batch.num_rows
    t = pa.Table.from_batches([batch]).append_column(
        "__rank", pa.array(ranks, pa.int64())).append_column(
        "__seq", pa.array(np.arange(seq, seq + n, dtype=np.int64)))
    return t if queue is None else pa.concat_tables([queue, t])


def release_queued(queue: pa.Table, time: str, bound: int | None
                   ) -> tuple[list[pa.RecordBatch], pa.Table | None]:
    """The queued rows with ``time`` below ``bound`` (all when None), ordered by time, then
    rank, then production, as batches; and the queue of the rest (None when empty)."""
    ts = queue.column(time).to_numpy()
    ready = np.ones(len(ts), bool) if bound is None else ts < bound
    if not ready.any():
        return [], queue
    idx = np.flatnonzero(ready)
    order = idx[np.lexsort((queue.column("__seq").to_numpy()[idx],
                            queue.column("__rank").to_numpy()[idx], ts[idx]))]
    send = queue.take(pa.array(order)).drop_columns(["__rank", "__seq"]).combine_chunks()
    rest = np.flatnonzero(~ready)
    return send.to_batches(), (queue.take(pa.array(rest)) if len(rest) else None)


def table_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def table_from_bytes(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()


def _nested_size(results: list) -> int:
    """Elements inside list / map / struct results (0 for scalars): how heavy a row is."""
    n = 0
    for v in results:
        if isinstance(v, dict):
            for x in v.values():
                n += _size(x)
        else:
            n += _size(v)
    return n


def _size(v) -> int:
    if isinstance(v, (str, bytes)) or not hasattr(v, "__len__"):
        return 0
    if isinstance(v, np.ndarray) and v.ndim == 0:   # a 0-d array is a scalar
        return 0
    return len(v)


def int_column(batch: pa.RecordBatch, name: str) -> np.ndarray:
    col = batch.column(name)
    if pa.types.is_timestamp(col.type):
        col = col.cast(pa.int64())
    if col.null_count:
        raise SpecError(f"event-time column {name!r} has nulls")
    return col.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)


def value_column(batch: pa.RecordBatch, name: str) -> np.ndarray:
    col = batch.column(name)
    if pa.types.is_integer(col.type) and col.null_count:
        return np.array(col.to_pylist(), dtype=object)
    return col.to_numpy(zero_copy_only=False)


def agg_values(cols: list, idx: list[int], times: np.ndarray):
    if not idx:
        return times
    if len(idx) == 1:
        return cols[idx[0]]
    return tuple(cols[i] for i in idx)


def group_rows(batch: pa.RecordBatch, keys: tuple):
    """[(key_value, row_indices or None)] in order of first appearance."""
    if not keys:
        return [(None, None)]
    if isinstance(batch, pa.Table):
        # a table's columns are chunked: dictionary_encode would give chunked indices
        batch = batch.combine_chunks().to_batches()[0] if batch.num_rows else \
            empty_batch(batch.schema)
    if len(keys) == 1:
        col = batch.column(keys[0])
        if pa.types.is_integer(col.type) and not col.null_count:
            arr = col.to_numpy()
            lo = arr.min().item()
            if arr.max().item() - lo < 65536:
                return _group_small_ints(arr, lo)
            uniq, first, inv = np.unique(arr, return_index=True, return_inverse=True)
            if len(uniq) == 1:
                return [(uniq[0].item(), None)]
            order = np.argsort(inv, kind="stable")
            counts = np.bincount(inv, minlength=len(uniq))
            splits = np.split(order, np.cumsum(counts)[:-1])
            appearance = np.argsort(first, kind="stable")
            return [(uniq[j].item(), splits[j]) for j in appearance]
        enc = pc.dictionary_encode(col)
        codes = enc.indices.to_numpy(zero_copy_only=False)
        values = enc.dictionary.to_pylist()
        if col.null_count:
            codes = np.where(np.isnan(codes.astype(float)), len(values), codes).astype(np.int64)
            values = values + [None]
        return _split_codes(codes, values)
    codes_list, dicts = [], []
    for k in keys:
        enc = pc.dictionary_encode(batch.column(k))
        c = enc.indices.fill_null(len(enc.dictionary)).to_numpy(zero_copy_only=False)
        codes_list.append(c.astype(np.int64))
        dicts.append(enc.dictionary.to_pylist() + [None])
    stacked = np.stack(codes_list, axis=1)
    uniq, inv = np.unique(stacked, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    values = [tuple(d[c] for d, c in zip(dicts, row)) for row in uniq.tolist()]
    return _split_codes(inv, values)


def _group_small_ints(arr: np.ndarray, lo: int):
    """``group_rows`` for integer keys spanning fewer than 2**16 values (sensor ids, ...).

    Sorting 16-bit codes is a radix sort, an order of magnitude cheaper per batch than
    ``np.unique`` (a comparison sort) followed by a stable argsort of its int64 inverse.
    """
    if arr.dtype.itemsize < 8:
        arr = arr.astype(np.int64)  # narrow types would wrap around in the subtraction
    codes = (arr - lo).astype(np.uint16)
    counts = np.bincount(codes)
    present = np.flatnonzero(counts)
    if len(present) == 1:
        return [(lo + int(present[0]), None)]
    order = np.argsort(codes, kind="stable")
    sizes = counts[present]
    ends = np.cumsum(sizes)
    splits = np.split(order, ends[:-1])
    appearance = np.argsort(order[ends - sizes], kind="stable")  # by each key's first row
    return [(lo + int(present[j]), splits[j]) for j in appearance.tolist()]


def _split_codes(codes: np.ndarray, values: list):
    if len(codes) and 0 <= codes.min() and codes.max() < 65536:
        # dictionary indices: the radix sort of _group_small_ints, not np.unique's sort
        return [(values[c], idx) for c, idx in _group_small_ints(codes, 0)]
    uniq, first, inv = np.unique(codes, return_index=True, return_inverse=True)
    order = np.argsort(inv, kind="stable")
    counts = np.bincount(inv, minlength=len(uniq))
    splits = np.split(order, np.cumsum(counts)[:-1])
    appearance = np.argsort(first, kind="stable")
    if len(uniq) == 1:
        return [(values[uniq[0]], None)]
    return [(values[uniq[j]], splits[j]) for j in appearance]


def to_arrow(values: list, typ: pa.DataType, name: str) -> pa.Array:
    try:
        return pa.array(values, type=typ)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError) as exc:
        raise SpecError(f"aggregate {name!r}: result values do not fit its declared result type "
                        f"{typ} ({exc}); a user aggregate: declare a wider result_type (or "
                        "output_type); a built-in: give it a wider column (e.g. cast to float64 "
                        "with t.map before the window)") from exc


def key_arrays(values: list, schema: pa.Schema, nkeys: int) -> list:
    """The key columns of output rows, from each row's key value (a tuple for several keys)."""
    if nkeys == 1:
        return [pa.array(values, type=schema.field(0).type)]
    return [pa.array([v[j] for v in values], type=schema.field(j).type) for j in range(nkeys)]


def expire_arrays(times: list, payloads: list, schema: pa.Schema, nkeys: int,
                  has_entry: bool) -> list:
    """``expire_time`` and the ``expire_schema`` columns of expired-element rows (after the
    key columns; ``payloads``: one dict per row)."""
    arrays = [pa.array(times, type=pa.int64())]
    extra = schema.names[nkeys + 1: len(schema) - (1 if has_entry else 0)]
    for j, name in enumerate(extra):
        arrays.append(to_arrow([p.get(name) for p in payloads], schema.field(nkeys + 1 + j).type,
                               name))
    return arrays


def result_arrays(aggs: list, results: list, schema: pa.Schema, base: int,
                  entries: list | None) -> list:
    """The aggregate columns of output rows (``results``: one list per row, from schema field
    ``base`` on) and, when ``entries`` is given, the ``_entry`` delay column after them."""
    arrays = [to_arrow([r[i] for r in results], schema.field(base + i).type, a.name)
              for i, a in enumerate(aggs)]
    if entries is not None:
        arrays.append(pa.array(entries, type=pa.int64()))
    return arrays
