"""Time-ordered merge of several streams (the DEBS splitter merges game events and interruptions).

Rows are buffered per input and released in event-time order once every input has promised, by
its watermark, that nothing older will come: the output *frontier* is the minimum of the inputs'
watermarks (an ended input counts as +infinity), and every buffered row older than the frontier is
emitted. Ties are broken deterministically: by event time, then input index, then arrival order.

A quiet input must not block the others forever. Sources emit a watermark after every batch and a
final one before they end, so a finite input never blocks. For inputs that may fall silent while
still open, ``idle_after`` (event-time ticks) declares an input *idle* when its watermark lags the
most advanced input by more than that; an idle input stops holding the frontier back. Rows that
arrive older than what was already emitted are *late*: counted in :attr:`MergeOperator.late_rows`
and emitted at once (``late="emit"``), dropped (``"drop"``) or refused (``"error"``); never
silently.

Call order (extends :mod:`epic.operator` to several inputs)::

    op = MergeOperator(n, schema, time)
    (op.on_batch(batch, input=i) | op.on_watermark(wm, input=i) | op.on_input_end(i))*
    op.on_end()

Example:
    >>> import pyarrow as pa
    >>> sch = pa.schema([("ts", pa.int64())])
    >>> m = MergeOperator(2, sch, "ts")
    >>> m.on_batch(pa.record_batch([[1, 5]], schema=sch), input=0)
    []
    >>> m.on_batch(pa.record_batch([[3]], schema=sch), input=1)
    []
    >>> [b.column(0).to_pylist() for b in m.on_watermark(4, input=0) + m.on_watermark(9, input=1)]
    [[1, 3]]
    >>> [b.column(0).to_pylist() for b in m.on_end()]
    [[5]]
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from .. import serde
from ..errors import EpicError
from ..schemas import one_array

__all__ = ["MergeOperator"]

_IN = "__merge_in"
_SEQ = "__merge_seq"


class MergeOperator:
    """Runtime logic of a merge node.

    Args:
        n: number of inputs.
        schema: the common schema of inputs and output.
        time: the event-time column.
        idle_after: ticks an input's watermark may lag the most advanced one before it is idle;
            None: never idle.
        late: ``"emit"``, ``"drop"`` or ``"error"`` for rows behind the emitted frontier.
    """

    def __init__(self, n: int, schema: pa.Schema, time: str, *, idle_after: int | None = None,
                 late: str = "emit", name: str = "merge"):
        self.n = n
        self.name = name
        self.output_schema = schema
        self.time = time
        self.idle_after = idle_after
        self.late = late
        self._wm: list[int | None] = [None] * n
        # the first watermark any input sent: where an input that has sent none yet counts as
        # being for idle_after (sources take turns, so the others' first batches may come first)
        self._start: int | None = None
        self._ended = [False] * n
        self._pending: list[pa.RecordBatch] = []  # with _IN and _SEQ columns
        self._seq = 0
        self._frontier: int | None = None  # everything older has been emitted
        #: rows that arrived behind the frontier
        self.late_rows = 0

    # -- protocol --------------------------------------------------------------------------
    def on_batch(self, batch: pa.RecordBatch, input: int = 0) -> list[pa.RecordBatch]:  # noqa: A002
        if batch.num_rows == 0:
            return []
        out: list[pa.RecordBatch] = []
        if self._frontier is not None:
            times = _times(batch, self.time)
            late = times < self._frontier
            if late.any():
                self.late_rows += int(late.sum())
                if self.late == "error":
                    raise EpicError(
                        f"node {self.name!r} (merge): input {input} sent {int(late.sum())} "
                        f"row(s) older than its "
                        f"frontier {self._frontier} (the merge releases rows in time order up "
                        "to its frontier, so these would come after newer ones); raise "
                        "idle_after, or use late='emit' / 'drop'")
                if self.late == "emit":
                    out.append(batch.filter(pa.array(late)))
                batch = batch.filter(pa.array(~late))
                if batch.num_rows == 0:
                    return out
        n = batch.num_rows
        tagged = batch.append_column(_IN, pa.array(np.full(n, input, dtype=np.int64))) \
            .append_column(_SEQ, pa.array(np.arange(self._seq, self._seq + n, dtype=np.int64)))
        self._seq += n
        self._pending.append(tagged)
        return out + self._release()

    def on_watermark(self, watermark: int, input: int = 0) -> list[pa.RecordBatch]:  # noqa: A002
        cur = self._wm[input]
        if cur is None or watermark > cur:
            self._wm[input] = int(watermark)
        if self._start is None:
            self._start = int(watermark)
        return self._release()

    def on_input_end(self, input: int) -> list[pa.RecordBatch]:  # noqa: A002
        """Input ``input`` has ended: it no longer holds the frontier back."""
        self._ended[input] = True
        return self._release()

    def on_end(self) -> list[pa.RecordBatch]:
        self._ended = [True] * self.n
        return self._release()

    @property
    def watermark(self) -> int | None:
        """The output watermark: no row older than this will be emitted any more."""
        return self._frontier

    # -- release -----------------------------------------------------------------------------
    def _current_frontier(self) -> int | None:
        """Minimum watermark over live, non-idle inputs; None while one is still unknown."""
        live = [i for i in range(self.n) if not self._ended[i]]
        if not live:
            return np.iinfo(np.int64).max
        known = [w for w in self._wm if w is not None]
        if self.idle_after is not None and known:
            # an input lagging the most advanced one by more than idle_after is idle; one that
            # has sent no watermark yet is where the merge started (the first watermark seen)
            top = max(known)
            start = self._start if self._start is not None else min(known)
            live = [i for i in live
                    if (self._wm[i] if self._wm[i] is not None else start) >= top - self.idle_after]
            if not live:
                return None
        marks = [self._wm[i] for i in live]
        if any(m is None for m in marks):
            return None
        return min(marks)

    def _release(self) -> list[pa.RecordBatch]:
        f = self._current_frontier()
        if f is None:
            return []
        if self._frontier is not None and f <= self._frontier:
            return []
        self._frontier = f
        if not self._pending:
            return []
        runs = self._sorted_runs(f)
        if runs is not None:
            out, self._pending = runs
        else:
            out = self._sort_release(f)
        return [pa.RecordBatch.from_arrays(b.drop_columns([_IN, _SEQ]).columns,
                                           schema=self.output_schema)
                for b in out if b.num_rows]

    def _sorted_runs(self, f: int):
        """The common case, each input's pending rows already in time order (a big sorted
        stream merged with a sparse one): the ready rows of each input are a prefix, and the
        output is the inputs' runs between each other's rows, as zero-copy slices. None when an
        input is out of order or the inputs interleave finely (then :meth:`_sort_release`)."""
        tables, times = [], []
        for i in range(self.n):
            batches = [b for b in self._pending if b.column(_IN)[0].as_py() == i]
            if not batches:
                continue
            table = pa.Table.from_batches(batches)
            t = _times(table, self.time)
            if not bool((t[1:] >= t[:-1]).all()):
                return None
            tables.append(table)
            times.append(t)
        ready = [int(np.searchsorted(t, f, side="left")) for t in times]
        if not any(ready):
            return [], self._pending
        # (time, input) order of the ready rows: a stable sort of the inputs' sorted runs
        cat = np.concatenate([t[:k] for t, k in zip(times, ready)])
        order = np.argsort(cat, kind="stable")
        first = np.cumsum([0] + ready[:-1])   # each input's first position in ``cat``
        src = np.searchsorted(first, order, side="right") - 1
        cuts = np.flatnonzero((np.diff(order) != 1) | (np.diff(src) != 0)) + 1
        if len(cuts) > 64:
            return None
        out = []
        for a, b in zip(np.concatenate([[0], cuts]).tolist(),
                        np.concatenate([cuts, [len(order)]]).tolist()):
            j = int(src[a])
            out.extend(tables[j].slice(int(order[a] - first[j]), b - a).to_batches())
        pending = [b for tb, k in zip(tables, ready) for b in tb.slice(k).to_batches()
                   if b.num_rows]
        return out, pending

    def _sort_release(self, f: int) -> list[pa.RecordBatch]:
        """Any order: sort the pending rows by (time, input, arrival) and release the ready."""
        table = pa.Table.from_batches(self._pending).combine_chunks()
        times = _times(table, self.time)
        ready = times < f
        order_keys = np.lexsort((one_array(table.column(_SEQ)).to_numpy(),
                                 one_array(table.column(_IN)).to_numpy(), times))
        ready_sorted = order_keys[ready[order_keys]]
        # What waits stays one input per batch, in arrival order (_sorted_runs takes a batch's
        # input from its first row)
        ins = one_array(table.column(_IN)).to_numpy()
        rest = np.flatnonzero(~ready)
        rest = rest[np.argsort(ins[rest], kind="stable")]
        cuts = (np.flatnonzero(np.diff(ins[rest]) != 0) + 1).tolist()
        self._pending = [b for a, z in zip([0] + cuts, cuts + [len(rest)])
                         for b in table.take(pa.array(rest[a:z])).to_batches() if b.num_rows]
        return table.take(pa.array(ready_sorted)).to_batches()

    # -- state -------------------------------------------------------------------------------
    def snapshot(self) -> bytes:
        data = b""
        if self._pending:
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, self._pending[0].schema) as w:
                for b in self._pending:
                    w.write_batch(b)
            data = sink.getvalue().to_pybytes()
        return serde.pack_state("epic.merge/1", {"wm": self._wm, "ended": self._ended,
                            "seq": self._seq, "frontier": self._frontier,
                            "late": self.late_rows, "pending": data, "start": self._start})

    def restore(self, data: bytes) -> None:
        st = serde.unpack_state(data, "epic.merge/1")
        self._wm, self._ended = st["wm"], st["ended"]
        self._seq, self._frontier, self.late_rows = st["seq"], st["frontier"], st["late"]
        self._pending = list(pa.ipc.open_stream(st["pending"])) if st["pending"] else []
        self._start = st.get("start")


def _times(data, time: str) -> np.ndarray:
    col = one_array(data.column(time))
    return col.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
