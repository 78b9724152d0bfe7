"""A deploy's file sink writer (epic/spark/sink_query.py) driven without Spark, for the sink
tests: its tasks run in this process with a fake TaskContext, and its commit reads end-of-stream
markers from a set the test fills."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pyarrow as pa

import epic
from epic.spark import sink_query


class TaskCtx:
    """The TaskContext of one task: its micro-batch and partition."""

    def __init__(self, batch, part):
        self.batch, self.part = batch, part

    def getLocalProperty(self, key):
        assert key == "streaming.sql.batchId"
        return str(self.batch)

    def partitionId(self):
        return self.part


def sink_writer(tmp_path, monkeypatch, sink, ends=()):
    """``(writer, task)`` of the sink ``sink`` (reading ``ts, v`` int64 rows; deploy id ``d1``):
    ``task(batch, part, values)`` writes rows ``ts = x, v = 7x`` in that task and returns its
    commit message. A micro-batch in the set ``ends`` is the end of the stream (a test may add
    to it later)."""
    import pyspark

    import epic.spark.offsets as offsets

    t = epic.Topology("sinkwriter")
    s = t.source("src", epic.iterator_source(lambda: iter(()), schema={"ts": "int64", "v": "int64"},
                                             time="ts", unit="ms"))
    t.sink("out", s, sink)
    wd = tmp_path / "wd"
    wd.mkdir()
    (wd / "deploy.json").write_text(json.dumps({"id": "d1"}))
    monkeypatch.setattr(offsets, "batch_markers", lambda checkpoint, batch_id: [
        SimpleNamespace(eos=batch_id in ends, watermark=None)])
    ctx = {}
    monkeypatch.setattr(pyspark.TaskContext, "get", staticmethod(lambda: ctx["now"]))
    w = sink_query.file_sink_writer(t.nodes["out"], checkpoint=str(tmp_path / "ck"),
                                    workdir=str(wd))

    def task(batch, part, values):
        ctx["now"] = TaskCtx(batch, part)
        rows = [pa.record_batch({"ts": pa.array(values, pa.int64()),
                                 "v": pa.array([x * 7 for x in values], pa.int64())})]
        return w.write(iter(rows))
    return w, task
