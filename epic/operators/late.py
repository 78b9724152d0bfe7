"""Runtime logic of a window's late side output: :class:`LateOperator` (see :mod:`epic.late`)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from .. import serde
from ..late import late_schema
from ..timecore import EventClock

__all__ = ['LateOperator']


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
        return serde.pack_state("epic.late/1", {"clock": self.clock.to_state()})

    def restore(self, data: bytes) -> None:
        st = serde.unpack_state(data, "epic.late/1")
        self.clock = EventClock.from_state(st["clock"])
