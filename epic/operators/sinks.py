"""Runtime logic of sink nodes: :class:`SinkOperator` (column order, delay columns, the writer).

The sink configs are in :mod:`epic.sinks`.
"""

from __future__ import annotations

import time as _time
from typing import Callable

import numpy as np
import pyarrow as pa

from ..errors import OutputError
from ..operator import ENTRY_COLUMN
from ..sinks import Sink

__all__ = ['SinkOperator']


class SinkOperator:
    """Runtime logic of a sink node: shapes rows and hands them to the sink's writer.

    Args:
        sink: the sink config.
        schema, time, unit: the input stream's.
        node: the sink node's name (producer id for topics, console prefix).
        clock: wall clock in ns for the write-time column (injected; ``time.time_ns`` default).
    """

    def __init__(self, sink: Sink, schema: pa.Schema, time: str, unit: str, *, node: str = "sink",
                 clock: Callable[[], int] | None = None):
        self.sink = sink
        self.schema = schema
        self.time = time
        self.unit = unit
        self.node = node
        self.clock = clock or _time.time_ns
        self.output_schema = sink.output_schema(schema)
        self._names = [n for n in self.output_schema.names
                       if not (sink.delays and n in sink.delay_columns[:2])]
        #: positions in the row of the columns a Parquet sink writes as REQUIRED
        req = getattr(sink, "required", False)
        self._required = [i for i, f in enumerate(self.output_schema)
                          if req is True or (req and f.name in req)]
        self._writer = None
        self._watermark: int | None = None
        self.rows = 0

    def _open(self):
        if self._writer is None:
            self._writer = self.sink.open(self.schema, self.time, self.unit, self.node)
        return self._writer

    def on_batch(self, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        w = self._open()
        if batch.num_rows == 0:
            return []
        arrays = [batch.column(n) for n in self._names]
        if self.sink.delays:
            now = self.clock()
            arrays = [batch.column(ENTRY_COLUMN),
                      pa.array(np.full(batch.num_rows, now, dtype=np.int64))] + arrays
        for i in self._required:
            if arrays[i].null_count:
                raise OutputError(getattr(self.sink, "path", self.node), (
                    f"column {self.output_schema.field(i).name!r} holds "
                    f"{arrays[i].null_count} nulls in this batch, but the sink writes it as "
                    f"required (parquet_sink(required=...))"), what=f"sink {self.node!r}",
                    fix="leave the column out of required=, or fill its nulls upstream")
        w.write(pa.RecordBatch.from_arrays(arrays, schema=self.output_schema), self._watermark)
        self.rows += batch.num_rows
        return []

    def on_watermark(self, watermark: int) -> list[pa.RecordBatch]:
        self._watermark = watermark
        return []

    def on_end(self) -> list[pa.RecordBatch]:
        self._open().close(self._watermark)
        return []

    def table(self) -> pa.Table | None:
        """The rows written, for :func:`collect_sink` (None for other sinks)."""
        w = self._writer
        return w.table() if w is not None and w.table is not None else None

    def snapshot(self) -> bytes:
        return b""

    def restore(self, data: bytes) -> None:
        pass
