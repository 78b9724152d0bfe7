"""`epic deploy` = `epic run` for a source with slack= and punctuation= (issue #14, point 3):
the Spark source planner calls the same epic.timecore.Reorderer as the runner."""

from __future__ import annotations

import csv
import random

import pytest

import epic
from epic.spark.runtime import deploy
from epic.testing import rows_key

pytestmark = pytest.mark.spark

SCHEMA = {"k": "int64", "ts": "int64", "v": "int64", "hb": "bool"}


def _rows(seed: int, n: int = 60) -> list[dict]:
    rnd = random.Random(seed)
    t, out = 0, []
    for i in range(n):
        t += rnd.choice([0, 1, 2, 3])
        back = rnd.choice([0, 0, 1, 3, 6, 15])        # slack 6: the 15s are late
        out.append({"k": rnd.randrange(3), "ts": t - back, "v": rnd.randrange(10), "hb": False})
        if i % 11 == 10:                                # a heartbeat (CTI) now and then
            out.append({"k": 0, "ts": t - 4, "v": 0, "hb": True})
    return out


def _topology(rows, late_file) -> epic.Topology:
    t = epic.Topology("slack_deploy")
    data = list(rows)

    def gen():
        yield from data

    s = t.source("events", epic.iterator_source(gen, schema=SCHEMA, time="ts", unit="s",
                                                batch_rows=7, slack=6, punctuation="hb",
                                                late_file=late_file))
    w = t.window("w", s, epic.tumbling(10, origin=0), key="k",
                 aggregates=[epic.count("n"), epic.sum("v")])
    t.sink("out", w, epic.collect_sink())
    return t


def test_deploy_equals_run_with_slack_and_punctuation(spark, tmp_path):
    rows = _rows(3)
    want = epic.run(_topology(rows, str(tmp_path / "run_late.csv")))
    assert want.nodes["events"].late_rows > 0
    assert want.nodes["w"].late_rows == 0
    result = deploy(_topology(rows, str(tmp_path / "dep_late.csv")), str(tmp_path / "wd"),
                    spark=spark, timeout=240, partitions=2, batch_rows=7)
    assert result.status["state"] == "finished"
    for sink in ("out",):
        got = result.collected[sink].to_pylist()
        exp = want.collected[sink].to_pylist()
        assert sorted(got, key=rows_key) == sorted(exp, key=rows_key), sink
    assert result.status["late_rows"]["events"] == want.nodes["events"].late_rows
    assert result.status["late_rows"]["w"] == 0
    run_late = list(csv.reader(open(tmp_path / "run_late.csv")))
    dep_late = list(csv.reader(open(tmp_path / "dep_late.csv")))
    assert run_late == dep_late and len(run_late) == 1 + want.nodes["events"].late_rows


def _plan_all(reader, start, limit):
    """Drive the planner as Spark does: [(start, end, rows of the micro-batch)] to the end."""
    out = []
    while True:
        end = reader.latestOffset(start, limit)
        if end["seq"] == start["seq"] and end.get("eos"):
            return out
        out.append((start, end, [b.to_pylist() for b in reader.planned(start, end)]))
        reader.commit(end)
        start = end


def test_planner_replay_rebuilds_the_reorder_buffer(tmp_path):
    """No JVM: the source planner, asked again for a middle micro-batch by a fresh reader (a
    restart), plans the same rows, watermarks and late file, as the buffer is rebuilt."""
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from pyspark import cloudpickle

    from epic.spark.source_query import SourcePlanner

    late = tmp_path / "late.csv"
    topo = _topology(_rows(5), str(late))
    node = topo.nodes["events"]
    def planner():
        return SourcePlanner(node, source_index=0, n_sources=1)

    first = _plan_all(planner(), planner().initialOffset(), ReadMaxRows(7))
    want_late = late.read_text()
    assert len(first) > 4 and want_late.count("\n") > 1
    rows = [r for _, _, bs in first for b in bs for r in b]
    ts = [r["ts"] for r in rows]
    assert ts == sorted(ts)                               # the stream leaves in time order
    wms = [e.get("watermark") for _, e, _ in first]
    assert all(a <= b for a, b in zip(wms, wms[1:]) if a is not None)
    mid = len(first) // 2
    again = cloudpickle.loads(cloudpickle.dumps(planner()))   # as Spark ships it
    for start, end, batches in first[mid:]:
        assert [b.to_pylist() for b in again.planned(start, end)] == batches
    assert again.latestOffset(first[-1][1], ReadMaxRows(7)) == first[-1][1]
    assert late.read_text() == want_late


@pytest.mark.parametrize("slack", [None, 6])
def test_planner_lets_go_of_spooled_batches_and_regenerates_them(tmp_path, slack):
    """No JVM: once a micro-batch is spooled (``spooled``) the planner of a bounded source holds
    none of its batches; asked for them again it plans the same rows, and the micro-batches
    after it are what they were."""
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from epic.spark.source_query import SourcePlanner

    rows = _rows(5)
    t = epic.Topology("spooled")
    s = t.source("events", epic.iterator_source(
        lambda: iter(rows), schema=SCHEMA, time="ts", unit="s", batch_rows=7, slack=slack,
        punctuation="hb" if slack else None,
        late_file=str(tmp_path / "late.csv") if slack else None))
    t.sink("out", s, epic.collect_sink())
    node = t.nodes["events"]
    want = _plan_all(SourcePlanner(node, source_index=0, n_sources=1),
                     SourcePlanner(node, source_index=0, n_sources=1).initialOffset(),
                     ReadMaxRows(10))
    assert len(want) > 3
    p = SourcePlanner(node, source_index=0, n_sources=1, prefetch=True)
    start, got = p.initialOffset(), []
    while True:
        end = p.latestOffset(start, ReadMaxRows(10))
        if end["seq"] == start["seq"] and end.get("eos"):
            break
        first = [b.to_pylist() for b in p.planned(start, end)]
        p.spooled(start, end)
        assert not any(start["seq"] <= i < end["seq"] for i in p._planned)
        assert [b.to_pylist() for b in p.planned(start, end)] == first   # regenerated
        p.spooled(start, end)
        got.append((start, end, first))
        p.commit(end)
        start = end
    assert got == want
