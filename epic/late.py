"""The late side output of a window node: the rows its clock found behind the watermark.

``Topology.late(name, window)`` adds a node that reads the window's input stream and keeps the
rows the window drops as late, with the window's name and the watermark each one missed. It
decides with the same :class:`~epic.timecore.EventClock` rule, over the same stream, so its rows
are exactly the window's late rows in every runtime (it runs as one global task on Spark, seeing
the whole stream).
"""

from __future__ import annotations

import pyarrow as pa

__all__ = [ "late_schema", "LATE_NODE", "LATE_WATERMARK"]

#: the columns a late row gets after the input's columns
LATE_NODE = "late_node"
LATE_WATERMARK = "late_watermark"


def late_schema(schema: pa.Schema) -> pa.Schema:
    """The late stream's schema: the input's columns, then the node and the missed watermark."""
    return pa.schema(list(schema) + [pa.field(LATE_NODE, pa.string()),
                                     pa.field(LATE_WATERMARK, pa.int64())])


