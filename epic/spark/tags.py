"""The bookkeeping columns ``epic deploy`` adds to every stream topic, and how rows are ordered.

The in-process runner (:mod:`epic.runner`) is the reference: it pushes each source batch through the
graph depth-first and follows it with that source's watermark. Operators whose output depends on
*when* a watermark arrives relative to rows (a ``process`` node's timers, a merge's frontier, a
combine's releases) must see the same interleaving under Spark, where a micro-batch holds many
source batches. So every row in a deploy topic carries:

``_step`` (int64)
    ``4 * step + phase``. ``step`` numbers source batches in the runner's order (source ``k`` of
    ``K``, its ``j``-th item: ``j * K + k``; a live source's micro-batch is one step, numbered by
    its first item: :func:`epic.spark.source_query.coalesced`); ``phase`` orders what a node
    emits for one step: 0 = output of a watermark applied before the step's rows, 1 = output of the rows,
    2 = output of the watermark at the end of a micro-batch, 3 = output of the end of the input.
``_wm`` (int64)
    The watermark the producer had forwarded when it emitted the row (``INT64_MIN``: none yet).

A consumer sorts its rows by ``(_step, input, position)`` and replays, per run of equal
``(_step, input, _wm)``: ``on_watermark(_wm)`` if it advanced, then ``on_batch(rows)``; after the
micro-batch, the watermark and end-of-stream markers of its input segments. That is the runner's
sequence of calls, except that consecutive watermarks without rows in between collapse into the
last one, which no operator can tell apart.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from epic.windows.engine import RANK_COLUMN

STEP = "_step"
WM = "_wm"
POS = "_pos"
IN = "_in"
PORT = "_port"
#: a keyed node's rows in a Spark task: the largest event time among the rows of the *stream*
#: before each row (all partitions' rows; the task reads them all), see epic.timecore
HWM = "_hwm"
#: on the rows of a time or count window keyed over several partitions: the key's rank (the
#: position of its first on-time row in the window's input stream). A consumer merges the
#: partitions' segments of a batch by ``(_step, time, _rank)``: ``epic run``'s order
#: (:func:`epic.spark.direct.merge_parts`)
RANK = RANK_COLUMN
INTERNAL = (STEP, WM, POS, IN, PORT, HWM, RANK)

NO_WM = -(2**63)
PHASE_PRE, PHASE_ROWS, PHASE_MARK, PHASE_END = 0, 1, 2, 3


def tag(step: int, phase: int) -> int:
    """The ``_step`` value of output emitted in ``phase`` of source step ``step``."""
    return 4 * int(step) + phase


def step_of(tag_value: int) -> int:
    """The source step of a ``_step`` value."""
    return int(tag_value) >> 2


def topic_schema(user: pa.Schema, *, port: bool = False, rank: bool = False) -> pa.Schema:
    """A deploy topic's schema: the stream's columns, then the bookkeeping columns (``rank``:
    :data:`RANK` too). The batches between the nodes of a fused query have it as it is; the
    topic itself stores :func:`stored` of it."""
    fields = list(user) + [pa.field(STEP, pa.int64()), pa.field(WM, pa.int64())]
    if port:
        fields.append(pa.field(PORT, pa.int32()))
    if rank:
        fields.append(pa.field(RANK, pa.int64()))
    return pa.schema(fields)


def stored(schema: pa.Schema) -> pa.Schema:
    """``schema`` as a topic stores it: a dictionary-encoded column as its values (Spark has no
    dictionary type, and an Arrow IPC file holds one dictionary per column where each
    micro-batch may bring its own). A topic's writer decodes such a column
    (:meth:`epic.topics.Topic.conform`), a reader casts it back to the stream's type."""
    if not any(pa.types.is_dictionary(f.type) for f in schema):
        return schema
    return pa.schema([f.with_type(f.type.value_type) if pa.types.is_dictionary(f.type) else f
                      for f in schema], metadata=schema.metadata)


def with_tags(batch: pa.RecordBatch, schema: pa.Schema, step_tag: int, wm: int | None,
              port: int | None = None) -> pa.RecordBatch:
    """``batch`` (user columns) with constant tag columns, labelled with ``schema``."""
    n = batch.num_rows
    cols = [batch.column(f.name) for f in schema if f.name not in INTERNAL]
    cols.append(pa.array(np.full(n, step_tag, dtype=np.int64)))
    cols.append(pa.array(np.full(n, NO_WM if wm is None else wm, dtype=np.int64)))
    if port is not None:
        cols.append(pa.array(np.full(n, port, dtype=np.int32)))
    if schema.names[-1] == RANK:
        cols.append(batch.column(RANK) if RANK in batch.schema.names
                    else pa.array(np.zeros(n, dtype=np.int64)))
    return pa.RecordBatch.from_arrays(cols, schema=schema)


def runs(*keys: np.ndarray) -> list[tuple[int, int]]:
    """``[(start, stop)]`` of the maximal runs where every key array is constant."""
    n = len(keys[0]) if keys else 0
    if n == 0:
        return []
    change = np.zeros(n, dtype=bool)
    change[0] = True
    for k in keys:
        change[1:] |= k[1:] != k[:-1]
    starts = np.flatnonzero(change)
    stops = np.append(starts[1:], n)
    return list(zip(starts.tolist(), stops.tolist()))
