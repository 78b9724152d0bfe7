"""Spark Structured Streaming sink for Arrow topics, exactly once.

Usage::

    (df.writeStream.format("epic_topic")
       .option("path", "/work/topics/out")
       .option("producer", "node_a")                 # a node name: stable across restarts
       .option("checkpointLocation", ckpt)
       .option("time_column", "ts").option("time_unit", "ms")   # when the sink creates the topic
       .start())

**Protocol.** Each task writes its partition of micro-batch ``B`` into a temp file under the
topic's ``segments/_tmp`` (flushed and fsynced) and returns its path as the commit message; a task
with no rows writes nothing. The driver's ``commit(messages, B)`` hands the temps to
:meth:`epic.topics.Topic.commit_batch`, which renames them to final segment names in part order.
That call is idempotent per ``(producer, B)``: when Spark replays batch ``B`` after a crash (its
commit-log entry missing), a ``B`` already complete in the topic makes the commit drop the new temps,
and a ``B`` only partly renamed is invisible to readers and is replaced. So every batch appears
exactly once.

**Markers.** By default (option ``markers=input``; ``none`` turns it off) the sink reads the
batch's source offsets from Spark's offset log in the query's ``checkpointLocation`` (or option
``checkpoint``), see :func:`epic.spark.topic_source.batch_markers`, and stamps every segment of the
batch with the upstream watermark (minimum over inputs) and end-of-stream flag (all inputs ended).
A batch without rows still writes a zero-row segment when it carries a newer watermark or the end of
stream, so markers flow through empty batches. For inputs that are not topics, a driver can append
markers with :meth:`epic.topics.Topic.append_marker`.

A stateful producer (``epic deploy`` passes option ``state_dir``, its node's snapshots) forwards
its *own* watermark, not its inputs' (a merge's frontier; an operator's watermark hold; frozen
before ``on_end``): each task stamps its segment with the value its partition's node task stored
in snapshot ``B`` (:func:`epic.spark.tasks.partition_marker`), and the commit, which sees every
partition, appends a zero-row marker part when the minimum over partitions
(:func:`epic.spark.tasks.node_marker`) differs from what the batch's last part carries.

**Restarts.** A new (empty) checkpoint with a topic that already holds this producer's output is
refused: batch ids restart at 0, and the replay check would silently drop every batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from epic.errors import EpicError
from epic.spark.executor import prepare_worker, task_ids
from epic.spark.offsets import (batch_markers, checkpoint_is_fresh, combine_markers,
                                     combine_step)
from epic.topics import TempSegment, Topic

__all__ = ["TopicStreamWriter", "TopicCommitMessage", "TopicPush"]


@dataclass(frozen=True)
class TopicCommitMessage(WriterCommitMessage):
    """What a write task reports to the driver: its temp segment, or None if it had no rows, and
    the watermark / end-of-stream flag it stamped on it."""

    temp: TempSegment | None
    watermark: int | None = None
    eos: bool = False


class TopicStreamWriter(DataSourceStreamArrowWriter):
    """Writes each micro-batch of a streaming query as segments of one topic.

    Created on the driver when the query starts (creating the topic from the query's schema if it
    does not exist), then pickled to executors for :meth:`write`; :meth:`commit` and :meth:`abort`
    run on the driver.
    """

    def __init__(self, path: str, schema: StructType, options: dict[str, str]):
        from pyspark.sql.pandas.types import to_arrow_schema

        opts = {k.lower(): v for k, v in options.items()}
        self.producer = opts.get("producer", "spark")
        # Spark passes the query's checkpointLocation to the data source among its options.
        checkpoint = opts.get("checkpoint") or opts.get("checkpointlocation") or None
        markers = opts.get("markers", "input")
        if markers not in ("input", "none"):
            raise EpicError(f"epic_topic sink: markers={markers!r}; use input or none")
        self.checkpoint = checkpoint if markers == "input" else None
        # A stateful producer (epic deploy): its markers are what the node forwarded, read from
        # its state snapshots, not its inputs' (a merge's frontier, an operator's watermark hold).
        self.state_dir = (opts.get("state_dir") or None) if markers == "input" else None
        arrow_schema = to_arrow_schema(schema)
        self.topic = Topic.create(path, arrow_schema, time_column=opts.get("time_column") or None,
                                  time_unit=opts.get("time_unit", "ms"), exist_ok=True)
        if checkpoint and checkpoint_is_fresh(checkpoint) and (
                self.topic.last_batch_id(self.producer) is not None):
            # Batch ids restart at 0 with a new checkpoint; the replay check would then drop every
            # batch as already written. Refuse instead of silently losing output.
            raise EpicError(
                f"topic {path} already holds output of producer {self.producer!r}, but the query's"
                f" checkpoint {checkpoint} is new: if the first deploy was given --checkpoint-dir,"
                " rerun with the same --checkpoint-dir; else delete the topic too, or restore the"
                " checkpoint, or use another producer name")
        self._markers: dict[int, tuple[int | None, bool, int | None]] = {}

    def _batch_markers(self, batch_id: int) -> tuple[int | None, bool, int | None]:
        if self.checkpoint is None:
            return None, False, None
        got = self._markers.get(batch_id)
        if got is None:
            offsets = batch_markers(self.checkpoint, batch_id)
            got = self._markers[batch_id] = (*combine_markers(offsets), combine_step(offsets))
        return got

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TopicCommitMessage:
        push = self.open_push()
        try:
            for batch in iterator:
                push.add(batch)
        except BaseException:
            push.discard()
            raise
        return push.close()

    def open_push(self) -> TopicPush:
        """:meth:`write`, fed one batch at a time: a task with several outputs (a split) writes
        each batch as it is produced instead of holding the micro-batch's rows of every output
        until the last one is known."""
        prepare_worker()
        return TopicPush(self, *task_ids())

    def _open_temp(self, batch_id: int, part: int):
        watermark, eos, step = self._batch_markers(batch_id)
        if self.state_dir is not None:
            from epic.spark.tasks import partition_marker

            # The snapshot of this partition's node task of this batch: written
            # before the task yielded its first row.
            own = partition_marker(self.state_dir, part, batch_id)
            if own is not None:
                watermark, eos = own
            from epic.spark.tasks import StateStore

            got = StateStore(self.state_dir, part).summary_before(batch_id + 1)
            if got is not None and got[2] is not None and step is not None:
                step = min(step, got[2])   # the steps the node took
        return self.topic.open_temp(producer=self.producer, batch_id=batch_id, part=part,
                                    watermark=watermark, eos=eos, step=step)

    def commit(self, messages: list[TopicCommitMessage | None], batchId: int) -> None:
        watermark, eos, step = self._batch_markers(batchId)
        full = sorted((m for m in messages if m is not None and m.temp is not None),
                      key=lambda m: m.temp.part)
        after = False
        if self.state_dir is not None:
            from epic.spark.tasks import node_marker

            node = node_marker(self.state_dir, batchId)
            if node is not None:
                watermark, eos = node
            from epic.spark.tasks import node_step

            took = node_step(self.state_dir, batchId)
            if took is not None and step is not None:
                step = min(step, took)   # a merge holding rows took fewer steps than its inputs
            # Readers take a batch's markers from its last part; partitions of a keyed node may
            # have stamped their own: then a marker part closes the batch.
            live = [m for m in full if m.temp.rows > 0]
            after = bool(live) and (live[-1].watermark, live[-1].eos) != (watermark, eos)
        self.topic.commit_batch(self.producer, batchId, [m.temp for m in full],
                                watermark=watermark, eos=eos, step=step, marker_after=after)
        self._markers.pop(batchId, None)

    def abort(self, messages: list[TopicCommitMessage | None], batchId: int) -> None:
        # The retry of this batch writes fresh temps; these are garbage now.
        self.topic._delete(m.temp.path for m in messages if m is not None and m.temp is not None)


class TopicPush:
    """One task's write of one micro-batch into a topic (:meth:`TopicStreamWriter.open_push`):
    :meth:`add` each batch, then :meth:`close` for the commit message, or :meth:`discard` on an
    error. The temp segment is opened at the first row."""

    def __init__(self, owner: TopicStreamWriter, batch_id: int, part: int):
        self._owner = owner
        self._batch_id = batch_id
        self._part = part
        self._writer = None

    def add(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        if self._writer is None:
            self._writer = self._owner._open_temp(self._batch_id, self._part)
        self._writer.write(batch)

    def close(self) -> TopicCommitMessage:
        w = self._writer
        if w is None:
            return TopicCommitMessage(None)
        return TopicCommitMessage(w.close(), w.meta.watermark, w.meta.eos)

    def discard(self) -> None:
        if self._writer is not None:
            self._writer.discard()
