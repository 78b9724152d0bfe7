"""The late side output of a window node: the rows its clock found behind the watermark.

``Topology.late(name, window)`` adds a node that reads the window's input stream and keeps the
rows the window drops as late, with the window's name and the watermark each one missed. It
decides with the same :class:`~epic.timecore.EventClock` rule, over the same stream, so its rows
are exactly the window's late rows in every runtime (it runs as one global task on Spark, seeing
the whole stream).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from . import serde
from .errors import StateError
from .timecore import EventClock

__all__ = ["LateOperator", "late_schema", "LATE_NODE", "LATE_WATERMARK"]

#: the columns a late row gets after the input's columns
LATE_NODE = "late_node"
LATE_WATERMARK = "late_watermark"


def late_schema(schema: pa.Schema) -> pa.Schema:
    """The late stream's schema: the input's columns, then the node and the missed watermark."""
    return pa.schema(list(schema) + [pa.field(LATE_NODE, pa.string()),
                                     pa.field(LATE_WATERMARK, pa.int64())])


class LateOperator:
    """Emits the rows of its input that a window with ``lateness`` finds late.

    Args:
        window: the window node's name (written in ``late_node``).
        schema: the input schema.
        time: the input's event-time column.
        lateness: the window's lateness in ticks.
    """

    def __init__(self, window: str, schema: pa.Schema, time: str, lateness: int):
        self.window = window
        self.time = time
        self.output_schema = late_schema(schema)
        self.clock = EventClock(lateness)

    def on_batch(self, batch: pa.RecordBatch, before: np.ndarray | None = None):
        if batch.num_rows == 0:
            return []
        col = batch.column(self.time)
        times = col.cast(pa.int64()).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
        thresholds = self.clock.thresholds(times, before)
        keep = self.clock.admit(times, before)
        if keep is None:
            return []
        late = np.flatnonzero(~keep)
        rows = batch.take(pa.array(late))
        n = len(late)
        cols = list(rows.columns) + [pa.array([self.window] * n, pa.string()),
                                     pa.array(thresholds[late], pa.int64())]
        return [pa.RecordBatch.from_arrays(cols, schema=self.output_schema)]

    def on_watermark(self, watermark: int):
        self.clock.push(watermark)
        return []

    def observe(self, high):
        self.clock.observe(high)
        return []

    def on_end(self):
        return []

    @property
    def late_rows(self) -> int:
        return 0  # the rows are emitted, not lost

    def snapshot(self) -> bytes:
        return serde.packb({"format": "epic.late/1", "clock": self.clock.to_state()})

    def restore(self, data: bytes) -> None:
        st = serde.unpackb(data)
        if not isinstance(st, dict) or st.get("format") != "epic.late/1":
            raise StateError("not a late side output snapshot (format epic.late/1)")
        self.clock = EventClock.from_state(st["clock"])
