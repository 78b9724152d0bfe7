"""The Spark runtime of epic: the shared session and Arrow-topic I/O for Structured Streaming.

This is the only package of epic that imports ``pyspark``.

Example (a stateless node, topic to topic)::

    spark = build_session()
    df = read_topic(spark, "topics/in")
    out = df.mapInArrow(fn, df.schema)
    query = write_topic(out, "topics/out", producer="double", checkpoint="ckpt/double").start()
"""

from __future__ import annotations

import importlib

# Names resolve lazily, so importing a submodule that needs no Spark (``epic.spark.cli``, which
# the ``epic`` command imports) does not import pyspark.
_LAZY = {
    "build_session": "session", "check_java": "session", "freeze_gc_once": "executor",
    "prepare_worker": "executor", "session_conf": "session", "TopicCommitMessage": "topic_sink",
    "TopicStreamWriter": "topic_sink", "FORMAT": "topic_source",
    "TopicDataSource": "topic_source", "TopicOffset": "offsets",
    "TopicStreamReader": "topic_source", "batch_markers": "offsets",
    "offsets_from_progress": "offsets", "register": "topic_source",
}


def __getattr__(name: str):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'epic.spark' has no attribute {name!r}")
    return getattr(importlib.import_module(f"epic.spark.{mod}"), name)


__all__ = [
    "build_session",
    "check_java",
    "freeze_gc_once",
    "prepare_worker",
    "session_conf",
    "read_topic",
    "write_topic",
    "register",
    "batch_markers",
    "offsets_from_progress",
    "TopicOffset",
    "TopicDataSource",
    "TopicStreamReader",
    "TopicStreamWriter",
    "TopicCommitMessage",
    "FORMAT",
]


def read_topic(spark, path: str, *, max_rows_per_trigger: int | None = None,
               max_segments_per_trigger: int | None = None, consumer: str | None = None,
               retention: bool = False, starting: str = "earliest"):
    """A streaming DataFrame over the topic at ``path`` (see :mod:`epic.spark.topic_source`).

    Args:
        spark: The session (with the data source registered, as :func:`build_session` does).
        path: Topic path or pyarrow filesystem URI.
        max_rows_per_trigger: Read limit in rows per micro-batch (whole segments, at least one).
        max_segments_per_trigger: Read limit in segments per micro-batch.
        consumer: Register as this consumer and commit its position after every batch.
        retention: Delete segments every consumer has passed (needs ``consumer``).
        starting: ``earliest`` or ``latest``.
    """
    from epic.spark.topic_source import FORMAT, register

    register(spark)
    r = spark.readStream.format(FORMAT).option("path", str(path)).option("starting", starting)
    if max_rows_per_trigger is not None:
        r = r.option("max_rows_per_trigger", str(max_rows_per_trigger))
    if max_segments_per_trigger is not None:
        r = r.option("max_segments_per_trigger", str(max_segments_per_trigger))
    if consumer is not None:
        r = r.option("consumer", consumer).option("retention", str(retention).lower())
    return r.load()


def write_topic(df, path: str, *, producer: str, checkpoint: str, time_column: str | None = None,
                time_unit: str = "ms", propagate_markers: bool = True, query_name: str | None = None,
                state_dir: str | None = None):
    """A configured, not yet started ``DataStreamWriter`` of ``df`` into the topic at ``path``.

    Set a trigger if needed, then call ``.start()``.

    Args:
        df: A streaming DataFrame.
        path: Topic path or URI (created from ``df``'s schema if missing).
        producer: The node's name; must stay the same across restarts (exactly-once relies on it).
        checkpoint: The query's checkpoint location.
        time_column: Event-time column, recorded when the topic is created.
        time_unit: Its unit.
        propagate_markers: Stamp segments with the upstream watermark and end of stream.
        query_name: Spark query name (default: ``producer``).
        state_dir: for a stateful producer (``epic deploy``): its state snapshots, from which the
            segments take the watermark and end of stream the node forwarded (instead of its
            inputs').
    """
    from epic.spark.topic_source import FORMAT

    w = (df.writeStream.format(FORMAT).option("path", str(path)).option("producer", producer)
         .option("checkpointLocation", str(checkpoint)).option("time_unit", time_unit)
         .queryName(query_name or producer))
    if time_column is not None:
        w = w.option("time_column", time_column)
    if not propagate_markers:
        w = w.option("markers", "none")
    if state_dir is not None:
        w = w.option("state_dir", str(state_dir))
    return w
