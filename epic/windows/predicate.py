"""Predicate windows (XQuery 3.0 FORSEQ): windows opened and closed by predicates over items."""

from __future__ import annotations

import inspect
from typing import Any, Callable, Sequence

import numpy as np
import pyarrow as pa

from .. import serde
from ..aggregates import AggSpec
from ..errors import SpecError
from ..operator import ENTRY_COLUMN
from ..timecore import EventClock
from .engine import (Clocked, key_arrays, queue_rows, release_queued, result_arrays,
                     table_bytes, table_from_bytes)
from .spec import PredicateWindow, check_columns, key_tuple, window_output_schema

__all__ = ["PredicateWindowOperator"]


def _arity(fn: Callable, most: int) -> int:
    """How many positional arguments ``fn`` takes, capped at ``most``."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return most
    n = 0
    for p in params:
        if p.kind == p.VAR_POSITIONAL:
            return most
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            n += 1
    return min(n, most)


class PredicateWindowOperator(Clocked):
    """Runtime logic of :func:`predicate_window`, per partition key, item by item.

    Items are taken in event-time order (ties: arrival order): an on-time row waits until the
    watermark has passed it, so rows out of order within the spec's ``lateness`` are seen in
    their place, whatever the batch cuts; rows behind the watermark are late.

    Output rows carry ``window_start`` / ``window_end``: the event times of the window's first and
    last item (both inclusive), ``final`` (False for early landmark results and for windows still
    open when the input ends), ``ts`` (= ``window_end``) and the aggregate results.
    """

    def __init__(self, spec: PredicateWindow, aggregates: Sequence[AggSpec], schema: pa.Schema,
                 time: str, unit: str = "s", key: str | Sequence[str] | None = None):
        self.spec = spec
        self.aggs = list(aggregates)
        if not self.aggs:
            raise SpecError("a window needs at least one aggregate, e.g. epic.count()")
        self.schema = schema
        self.time = time
        self.keys = key_tuple(key)
        check_columns(schema, time, self.keys, self.aggs)
        self.has_entry = ENTRY_COLUMN in schema.names
        self.output_schema = window_output_schema(spec, self.aggs, schema, key)
        self._start_n = _arity(spec.start, 4)
        self._end_fn = spec.end if callable(spec.end) else None
        self._end_n = _arity(self._end_fn, 5) if self._end_fn else 0
        self.lookahead = self._start_n >= 3 or self._end_n >= 4
        self._state: dict[Any, list] = {}  # key -> [pos, prev, pending, open windows]
        self._order: dict[Any, int] = {}
        self.clock = EventClock(spec.lateness_ticks(unit))
        self._held = None
        # Rows produced but not yet safe to send (a key's open window may still emit an older
        # `ts`): the output schema plus the key's rank and the production order.
        self._out: pa.Table | None = None
        self._seq = 0
        # Does an open window hold the output back? Only if it can still emit a row stamped
        # with its last item's time: closed by `newstart`, or emitted open at the end of input.
        self._open_holds = spec.end == "newstart" or (spec.kind != "landmark"
                                                       and not spec.force)

    # item hooks ----------------------------------------------------------------------------
    def _start(self, cur, prev, nxt, pos) -> bool:
        return bool(self.spec.start(*(cur, prev, nxt, pos)[: self._start_n]))

    def _end(self, first, cur, prev, nxt, pos) -> bool:
        return bool(self._end_fn(*(first, cur, prev, nxt, pos)[: self._end_n]))

    def _element(self, spec: AggSpec, item: dict):
        if not spec.columns:
            return item[self.time]
        if len(spec.columns) == 1:
            return item[spec.columns[0]]
        return tuple(item[c] for c in spec.columns)

    def _open(self, item: dict, pos: int) -> list:
        return [item[self.time], pos, [a.aggregate.init() for a in self.aggs], 0, item]

    def _add(self, win: list, item: dict):
        win[2] = [a.aggregate.add(s, self._element(a, item)) for a, s in zip(self.aggs, win[2])]
        win[3] = max(win[3], item.get(ENTRY_COLUMN, 0) or 0) if self.has_entry else 0

    def _row(self, key_value, win: list, last_time: int, final: bool) -> tuple:
        results = [a.aggregate.result(s) for a, s in zip(self.aggs, win[2])]
        return (key_value, win[0], last_time, final, results, win[3])

    def _step(self, key_value, st: list, cur: dict, nxt: dict | None, out: list):
        pos, prev = st[0], st[1]
        windows = st[3]
        kind = self.spec.kind
        starts = self._start(cur, prev, nxt, pos)
        if self.spec.end == "newstart" and starts:
            for w in windows:
                out.append(self._row(key_value, w, prev[self.time], True))
            windows.clear()
        if starts and (kind == "sliding" or not windows):
            windows.append(self._open(cur, pos))
        t = cur[self.time]
        keep = []
        for w in windows:
            self._add(w, cur)
            if self._end_fn is not None and self._end(w[4], cur, prev, nxt, pos):
                out.append(self._row(key_value, w, t, True))
            else:
                if kind == "landmark":
                    out.append(self._row(key_value, w, t, False))
                keep.append(w)
        st[3] = keep
        st[0] = pos + 1
        st[1] = cur

    # protocol ------------------------------------------------------------------------------
    def on_batch(self, batch: pa.RecordBatch, before: np.ndarray | None = None
                 ) -> list[pa.RecordBatch]:
        batch, _late = self.admit(batch, before)
        if batch is not None:
            self._hold(batch)
        return self._release(self._items(self._take_ready(self.clock.watermark, False)))

    def observe(self, high: int | None) -> list[pa.RecordBatch]:
        self.clock.observe(high)
        return self._release(self._items(self._take_ready(self.clock.watermark, False)))

    @property
    def output_watermark(self) -> int | None:
        """Rows still to come are stamped no older than the last item of a key with an open
        window (a ``newstart`` end or the end of the input emits it with that time) nor than a
        key's item waiting for its ``next`` (its rows are produced when the next item comes)."""
        wm = self.clock.watermark
        for st in self._state.values():
            if st[2] is not None:
                t = int(st[2][self.time])
                wm = t if wm is None else min(wm, t)
            if self._open_holds and st[3] and st[1] is not None:
                t = int(st[1][self.time])
                wm = t if wm is None else min(wm, t)
        return wm

    def _release(self, rows: list, final: bool = False) -> list[pa.RecordBatch]:
        """Queue ``rows`` and send the queued rows no later row can precede: ``ts`` below the
        output watermark (all at the end), ordered by ``ts``, then the key's rank (the order in
        which this node took each key's first item), then production. Windows of different keys close in item
        order, not in ``ts`` order (a ``newstart`` window ends at its last item but closes at the
        next start), so without the queue a downstream node would find rows late."""
        if rows:
            self._out = queue_rows(self._out, self._to_batch(rows),
                                   [self._order[r[0]] for r in rows], self._seq)
            self._seq += len(rows)
        if self._out is None or self._out.num_rows == 0:
            return []
        bound = None
        if not final:
            bound = self.output_watermark
            if bound is None:
                return []
        send, self._out = release_queued(self._out, "ts", bound)
        return send

    def _items(self, rows: pa.Table | None) -> list:
        """Step every key through ``rows``' items; the output rows produced (tuples)."""
        out: list = []
        if rows is None:
            return out
        key_cols = self.keys
        for item in rows.to_pylist():
            if not key_cols:
                kv = None
            elif len(key_cols) == 1:
                kv = item[key_cols[0]]
            else:
                kv = tuple(item[c] for c in key_cols)
            st = self._state.get(kv)
            if st is None:
                st = self._state[kv] = [0, None, None, []]
                self._order[kv] = len(self._order)
            if self.lookahead:
                pending, st[2] = st[2], item
                if pending is not None:
                    self._step(kv, st, pending, item, out)
            else:
                self._step(kv, st, item, None, out)
        return out

    def on_watermark(self, watermark: int) -> list[pa.RecordBatch]:
        if not self.clock.push(watermark):
            return []
        return self._release(self._items(self._take_ready(self.clock.watermark, False)))

    def on_end(self) -> list[pa.RecordBatch]:
        out = self._items(self._take_ready(None, True))
        for kv, st in self._state.items():
            if st[2] is not None:
                pending, st[2] = st[2], None
                self._step(kv, st, pending, None, out)
            if not self.spec.force and st[1] is not None:
                for w in st[3]:
                    if self.spec.kind != "landmark":
                        out.append(self._row(kv, w, st[1][self.time], False))
            st[3] = []
        return self._release(out, final=True)

    def _to_batch(self, rows: list) -> pa.RecordBatch:
        schema = self.output_schema
        nkeys = len(self.keys)
        arrays = key_arrays([r[0] for r in rows], schema, nkeys) if nkeys else []
        arrays.append(pa.array([r[1] for r in rows], type=pa.int64()))
        arrays.append(pa.array([r[2] for r in rows], type=pa.int64()))
        arrays.append(pa.array([r[3] for r in rows], type=pa.bool_()))
        arrays.append(pa.array([r[2] for r in rows], type=pa.int64()))
        base = nkeys + 4
        arrays += result_arrays(self.aggs, [r[4] for r in rows], schema, base,
                                [r[5] for r in rows] if self.has_entry else None)
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

    def snapshot(self) -> bytes:
        keys = [{"key": list(kv) if isinstance(kv, tuple) else kv, "position": st[0],
                 "previous": st[1], "pending": st[2], "windows": st[3], "order": self._order[kv]}
                for kv, st in self._state.items()]
        return serde.pack_state("epic.predicate_window/3", {
            "keys": keys, "clock": self.clock.to_state(),
            "held": None if self._held is None else table_bytes(self._held),
            "queued": None if self._out is None else table_bytes(self._out), "seq": self._seq})

    def restore(self, data: bytes) -> None:
        st = serde.unpack_state(data, "epic.predicate_window/3")
        self.clock = EventClock.from_state(st["clock"])
        self._held = None if st["held"] is None else table_from_bytes(st["held"])
        queued = st.get("queued")   # absent in snapshots of epic before the output queue
        self._out = None if queued is None else table_from_bytes(queued)
        self._seq = int(st.get("seq", 0))
        self._state, self._order = {}, {}
        for k in st["keys"]:
            kv = tuple(k["key"]) if len(self.keys) > 1 else k["key"]
            self._state[kv] = [k["position"], k["previous"], k["pending"], k["windows"]]
            self._order[kv] = k["order"]
