"""Spark Structured Streaming source for Arrow topics (the ``epic_topic`` Python data source).

Usage::

    spark.dataSource.register(TopicDataSource)          # build_session() does this
    df = (spark.readStream.format("epic_topic")
          .option("path", "/work/topics/trades")
          .option("max_rows_per_trigger", 1_000_000)     # optional read limit
          .load())

**Offsets** are JSON dicts ``{"epic_topic": <topic id>, "seq": N, "watermark": W, "eos": bool}``:
``seq`` is the sequence number just past the last segment read (segments are listed, never
counted, so gaps are fine); ``watermark`` and ``eos`` are those of that last segment. They land in
Spark's offset log and in ``query.lastProgress``, which is how the topic sink and a driver learn the
upstream watermark and whether the upstream has ended (see :func:`batch_markers`,
:func:`offsets_from_progress`).

**Partitions** are segments: one Spark task reads one segment and yields its Arrow record batches,
re-labelled to the declared schema (Spark checks names, types and nullability strictly).

Options (all optional except ``path``):

- ``path``: topic path or pyarrow filesystem URI.
- ``max_segments_per_trigger`` / ``max_rows_per_trigger``: read limit per micro-batch (one of them;
  a batch always takes at least one segment). The available-now trigger honours it.
- ``max_bytes_per_trigger``: also stop once the segments' files reach this many bytes.
- ``starting``: ``earliest`` (default) or ``latest``.
- ``consumer``: register as this consumer and commit its position after each batch.
- ``retention``: ``true`` to delete segments every consumer has passed, after each commit.
- ``position_column``: add an int64 column of this name holding ``seq << 32 | row index``, the
  row's position in the topic (the deploy runtime sorts by it after a shuffle).
"""

from __future__ import annotations

from typing import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxFiles,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from epic.errors import EpicError
from epic.spark.executor import prepare_worker
from epic.spark.offsets import TopicOffset
from epic.topics import SegmentMeta, Topic

__all__ = [
    "TopicDataSource",
    "TopicStreamReader",
    "TopicPartition",
    "register",
    "FORMAT",
]

#: The name to pass to ``spark.readStream.format`` / ``writeStream.format``.
FORMAT = "epic_topic"


class TopicPartition(InputPartition):
    """One segment to read in one task (picklable: a path and numbers, no data)."""

    def __init__(self, seq: int, path: str, rows: int):
        super().__init__(seq)
        self.seq = seq
        self.path = path
        self.rows = rows


class TopicDataSource(DataSource):
    """The ``epic_topic`` data source: a streaming reader and an Arrow streaming writer for topics.

    Spark instantiates it with the query's options on the driver and pickles it to executors; it
    holds only option strings.
    """

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def _path(self) -> str:
        path = self.options.get("path")
        if not path:
            raise EpicError('the epic_topic data source needs .option("path", TOPIC_DIR)')
        return path

    def schema(self) -> StructType:
        """The topic's schema as a Spark schema (read from its manifest)."""
        from pyspark.sql.pandas.types import from_arrow_schema

        schema = Topic.open(self._path()).schema
        pos = self.options.get("position_column")
        if pos:
            schema = schema.append(pa.field(pos, pa.int64(), nullable=False))
        return from_arrow_schema(schema)

    def streamReader(self, schema: StructType) -> TopicStreamReader:
        return TopicStreamReader(Topic.open(self._path()), schema, dict(self.options))

    def streamWriter(self, schema: StructType, overwrite: bool):
        from epic.spark.topic_sink import TopicStreamWriter

        return TopicStreamWriter(self._path(), schema, dict(self.options))


class TopicStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Reads a topic segment by segment. Driver-side methods run in one long-lived planner process
    per query (so caches on ``self`` persist there); :meth:`read` runs in executor tasks and must
    only use what was pickled with the reader."""

    def __init__(self, topic: Topic, schema: StructType, options: dict[str, str]):
        self.topic = topic
        self.spark_schema = schema
        opts = {k.lower(): v for k, v in options.items()}
        self.max_segments = _opt_int(opts, "max_segments_per_trigger")
        self.max_rows = _opt_int(opts, "max_rows_per_trigger")
        # Also bounds a micro-batch by the segments' file sizes (wide rows, e.g. heat maps).
        self.max_bytes = _opt_int(opts, "max_bytes_per_trigger")
        if self.max_segments is not None and self.max_rows is not None:
            raise EpicError("epic_topic source: give max_segments_per_trigger or"
                            " max_rows_per_trigger, not both")
        self.starting = opts.get("starting", "earliest")
        if self.starting not in ("earliest", "latest"):
            raise EpicError(f"epic_topic source: starting={self.starting!r}; use earliest or latest")
        self.consumer = opts.get("consumer")
        self.position_column = opts.get("position_column") or None
        self.retention = opts.get("retention", "false").lower() == "true"
        self._target: int | None = None   # available-now end, fixed at prepare time
        self._meta: dict[int, SegmentMeta] = {}
        if self.consumer:
            self.topic.register_consumer(self.consumer)

    def __getstate__(self):
        # Executors need the topic and schema only; the planner's caches stay on the driver.
        state = dict(self.__dict__)
        state["_meta"] = {}
        return state

    # -- driver side --------------------------------------------------------------------------

    def _offset(self, seq: int, last=None) -> dict:
        if last is None:
            return TopicOffset(self.topic.manifest.topic_id, seq).to_dict()
        meta = self._meta.get(last.seq)
        if meta is None:
            meta = self._meta[last.seq] = self.topic.segment_meta(last)
        return TopicOffset(self.topic.manifest.topic_id, seq, meta.watermark, meta.eos,
                           meta.step).to_dict()

    def initialOffset(self) -> dict:
        if self.starting == "latest":
            segs = self.topic.segments()
            if segs:
                return self._offset(segs[-1].seq + 1, segs[-1])
        return self._offset(0)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.max_segments is not None:
            return ReadMaxFiles(self.max_segments)
        if self.max_rows is not None:
            return ReadMaxRows(self.max_rows)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        segs = self.topic.segments()
        self._target = segs[-1].seq + 1 if segs else 0

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = TopicOffset.from_dict(start).seq
        all_segs = segs = self.topic.segments(begin, self._target)
        if isinstance(limit, ReadMaxFiles):
            segs = segs[: max(1, limit.max_files)]
        elif isinstance(limit, ReadMaxRows):
            segs = _cut(segs, "rows", limit.max_rows)
        if self.max_bytes is not None:
            segs = _cut(segs, "size", self.max_bytes)
        # Offsets stop only at batch boundaries: a segment's watermark and end-of-stream flag hold
        # after all parts of its batch, so a cut inside a batch would announce them too early.
        k = len(segs)
        while 0 < k < len(all_segs) and (all_segs[k].producer, all_segs[k].batch_id) == (
                segs[-1].producer, segs[-1].batch_id):
            k += 1
        segs = all_segs[:k]
        if not segs:
            return start  # no new data: Spark compares offsets as JSON, so return it unchanged
        return self._offset(segs[-1].seq + 1, segs[-1])

    def reportLatestOffset(self) -> dict | None:
        segs = self.topic.segments()
        return self._offset(segs[-1].seq + 1, segs[-1]) if segs else None

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        a, b = TopicOffset.from_dict(start).seq, TopicOffset.from_dict(end).seq
        return [TopicPartition(s.seq, s.path, s.rows) for s in self.topic.segments(a, b)]

    def commit(self, end: dict) -> None:
        # Spark calls this once the batch ending at `end` is in its commit log: the rows before
        # `end` will never be read again by this query.
        if self.consumer:
            self.topic.commit_consumer(self.consumer, TopicOffset.from_dict(end).seq)
            if self.retention:
                self.topic.apply_retention()

    # -- executor side ------------------------------------------------------------------------

    def read(self, partition: TopicPartition) -> Iterator[pa.RecordBatch]:
        prepare_worker()
        from pyspark.sql.pandas.types import to_arrow_schema

        schema = to_arrow_schema(self.spark_schema)
        _, batches = self.topic.read_segment(partition.path)
        row = 0
        for b in batches:
            if b.num_rows:
                cols = b.columns
                if self.position_column:
                    import numpy as np

                    cols = cols + [pa.array(np.arange(row, row + b.num_rows, dtype=np.int64)
                                            + (partition.seq << 32))]
                row += b.num_rows
                yield pa.RecordBatch.from_arrays(cols, schema=schema)


def _cut(segs: list, attr: str, limit: int) -> list:
    """The leading segments up to the first at which the sum of ``attr`` reaches ``limit``."""
    n = 0
    for i, s in enumerate(segs):
        n += getattr(s, attr)
        if n >= limit:
            return segs[: i + 1]
    return segs


def _opt_int(opts: dict[str, str], key: str) -> int | None:
    v = opts.get(key)
    if v is None or v == "":
        return None
    try:
        n = int(v)
    except ValueError:
        n = 0
    if n <= 0:
        raise EpicError(f"epic_topic source: {key}={v!r}; give a positive integer")
    return n


def register(spark) -> None:
    """Register the ``epic_topic`` data source with ``spark`` (idempotent)."""
    if not getattr(spark, "_epic_topic_registered", False):
        spark.dataSource.register(TopicDataSource)
        spark._epic_topic_registered = True
