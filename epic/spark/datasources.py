"""The Python data sources of ``epic deploy``: thin adapters from Spark's data source API to
epic's own planner and committer classes.

A direct query (:mod:`epic.spark.direct`) is ``readStream.format(<reader>)...writeStream
.format(<writer>)``. Spark instantiates the registered :class:`~pyspark.sql.datasource.DataSource`
classes itself, pickles them to its planner process and to the tasks; all they do is hand every
call to the epic object they carry:

- :class:`PlannerReader` -> a :class:`~epic.spark.direct.GroupPlanner` (offsets, the tasks of a
  micro-batch, commit; ``read`` runs a task);
- :class:`CommitWriter` -> a :class:`~epic.spark.direct.Committer` (a task's commit messages;
  the driver's commit and abort).

Each query registers its own pair under unique format names (:func:`reader_source`,
:func:`writer_source`): the planner's factory and the committer are the class's payload, pickled
by value with it, as Spark designs a data source's state to travel.
"""

from __future__ import annotations

from typing import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamArrowWriter, DataSourceStreamReader
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from epic.spark.executor import prepare_worker

__all__ = ["PlannerReader", "CommitWriter", "reader_source", "writer_source"]


class PlannerReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Spark's stream reader over an epic planner (``initial_offset``, ``latest_offset``,
    ``partitions``, ``commit``, ``read``, ``prepare_available_now``)."""

    def __init__(self, planner, batch_rows: int):
        self.planner = planner
        self.batch_rows = batch_rows

    def initialOffset(self) -> dict:
        return self.planner.initial_offset()

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.batch_rows)

    def prepareForTriggerAvailableNow(self) -> None:
        self.planner.prepare_available_now()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        return self.planner.latest_offset(start, limit)

    def partitions(self, start: dict, end: dict):
        return self.planner.partitions(start, end)

    def commit(self, end: dict) -> None:
        self.planner.commit(end)

    def read(self, partition) -> Iterator[pa.RecordBatch]:
        yield from self.planner.read(partition)


class CommitWriter(DataSourceStreamArrowWriter):
    """Spark's Arrow stream writer over an epic committer (``collect``, ``commit``, ``abort``)."""

    def __init__(self, committer):
        # Made in a reused Python worker for every micro-batch (the writer for the tasks, and
        # the commit): keep the worker's gc.collect() after the call short.
        prepare_worker()
        self.committer = committer

    def write(self, iterator):
        return self.committer.collect(iterator)

    def commit(self, messages, batchId: int) -> None:
        self.committer.commit(messages, batchId)

    def abort(self, messages, batchId: int) -> None:
        self.committer.abort(messages, batchId)


def reader_source(name: str, schema: pa.Schema, make_planner, batch_rows: int) -> type:
    """A ``DataSource`` class (format ``name``, rows of ``schema``) reading through the planner
    ``make_planner()`` builds in Spark's planner process (the class carries the factory with the
    whole plan; a planner pickled to a task carries only what the task needs)."""
    from pyspark.sql.pandas.types import from_arrow_schema

    spark_schema_ = from_arrow_schema(schema)

    def spark_schema(self):
        return spark_schema_

    def stream_reader(self, schema):  # noqa: ARG001 - Spark passes it by keyword
        return PlannerReader(make_planner(), batch_rows)

    return type(f"EpicReader_{_ident(name)}", (DataSource,), {
        "name": classmethod(lambda cls: name), "schema": spark_schema,
        "streamReader": stream_reader})


def writer_source(name: str, committer) -> type:
    """A ``DataSource`` class (format ``name``) committing through ``committer``."""

    def stream_writer(self, schema, overwrite):  # noqa: ARG001 - Spark passes them by keyword
        return CommitWriter(committer)

    return type(f"EpicWriter_{_ident(name)}", (DataSource,), {
        "name": classmethod(lambda cls: name), "streamWriter": stream_writer})


def _ident(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name)
