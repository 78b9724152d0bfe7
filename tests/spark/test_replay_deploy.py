"""`epic deploy` of a paced source (``replay_speed=``): the Spark source planner reads the same
paced iterator as `epic run`, so the rows equal the unpaced run and the ``_entry`` stamps are the
scheduled release times (delays count the time rows wait for a micro-batch)."""

from __future__ import annotations

import time

import numpy as np
import pytest

import epic
from epic.spark.runtime import deploy
from epic.testing import rows_key

from test_replay import _topology  # noqa: E402  (tests/ is on the path, as test_deploy is)

pytestmark = [pytest.mark.spark]


def test_paced_deploy_equals_unpaced_run(spark, tmp_path):
    t0, rows = _topology()
    want = epic.run(t0).collected
    speed = 3.0          # 6 s of event time in 2 s
    tp, _ = _topology(speed, delays=True)
    began = time.time()
    result = deploy(tp, str(tmp_path / "wd"), spark=spark, timeout=240)
    assert result.status["state"] == "finished"
    # a live source's query starts last (status lists queries in start order): the rows it
    # releases find the queries downstream running
    names = list(result.status["nodes"])
    assert len(names) > 1 and names[-1].split("+")[0] == "events", names
    for name in ("rows", "sums"):
        got = result.collected[name].drop_columns(["entry_time", "write_time"]).to_pylist()
        assert sorted(got, key=rows_key) == sorted(want[name].to_pylist(), key=rows_key), name
    r = result.collected["rows"]
    entry = r.column("entry_time").to_numpy()
    # every row's entry is its scheduled release: start + (largest ts so far - ts0) / speed
    high = dict()
    m = None
    for row in rows:
        m = row["ts"] if m is None else max(m, row["ts"])
        high[(row["k"], row["ts"])] = m
    start = int(entry.min())
    assert start >= began * 1e9
    sched = np.array([start + int((high[(k, ts)] - rows[0]["ts"]) * 1e6 / speed)
                      for k, ts in zip(r.column("k").to_pylist(), r.column("ts").to_pylist())])
    assert np.all(np.abs(entry - sched) <= 1)
    # the planner released rows over the 2 s the replay takes, not all at once
    assert entry.max() - entry.min() >= 1.9e9
    write = r.column("write_time").to_numpy()
    assert np.all(write >= entry)


def test_planner_takes_what_has_arrived():
    """No JVM: the source planner of a paced source plans the rows released so far at each
    call and never waits to fill ``batch_rows`` (a live feed's micro-batch is what arrived since
    the last trigger), and every planned row was released before it was planned."""
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from epic.spark.source_query import SourcePlanner
    from epic.spark.tags import NO_WM, PHASE_ROWS, STEP, WM, tag

    speed = 10.0   # 6 s of event time in 0.6 s
    topo, rows = _topology(speed, delays=True)
    node = topo.nodes["events"]
    reader = SourcePlanner(node, source_index=0, n_sources=1, prefetch=True)
    start = reader.initialOffset()
    sizes, items, began = [], [], time.time_ns()
    while True:
        time.sleep(0.1)     # Spark's trigger interval
        end = reader.latestOffset(start, ReadMaxRows(1_000_000))
        planned_at = time.time_ns()
        if end["seq"] == start["seq"] and end.get("eos"):
            break
        batches = reader.planned(start, end)
        n = sum(b.num_rows for b in batches)
        if n:
            entry = np.concatenate([b.column("_entry").to_numpy() for b in batches])
            assert entry.max() <= planned_at, "a row was planned before its release time"
            # a live source's micro-batch is one step: the tags of its first item, whose
            # watermark is the one the micro-batch starts from
            steps = np.concatenate([b.column(STEP).to_numpy() for b in batches])
            wms = np.concatenate([b.column(WM).to_numpy() for b in batches])
            assert len(set(steps.tolist())) == 1 and len(set(wms.tolist())) == 1
            assert int(wms[0]) == start.get("watermark", NO_WM)
            assert int(steps[0]) == tag(int(start["seq"]), PHASE_ROWS)
            items.append(int(end["seq"]) - int(start["seq"]))
        sizes.append(n)
        reader.commit(end)
        start = end
    took = (time.time_ns() - began) / 1e9
    assert sum(sizes) == len(rows)
    assert 0.55 <= took < 3.0
    assert len([s for s in sizes if s]) >= 4, f"micro-batch sizes {sizes}: not paced"
    assert max(sizes) < len(rows) / 2
    assert max(items) > 1, f"items per micro-batch {items}: nothing was coalesced"


def test_live_source_opens_after_an_empty_first_batch():
    """No JVM: a live source's first micro-batch is empty and opens nothing (it pays the query's
    one-time costs in Spark); the paced clock starts at the read after it, so the first rows are
    not due before the query has run a micro-batch. A planner restarted past that batch reads at
    once; a bounded source has no such batch."""
    from pyspark.sql.streaming.datasource import ReadMaxRows

    from epic.spark.source_query import SourcePlanner

    topo, rows = _topology(10.0, delays=True)
    node = topo.nodes["events"]
    reader = SourcePlanner(node, source_index=0, n_sources=1, prefetch=True)
    start = reader.initialOffset()
    assert "ready" not in start
    ready = reader.latestOffset(start, ReadMaxRows(1_000_000))
    assert ready == {**start, "ready": True}
    assert reader._items is None, "the source was opened by the empty first batch"
    assert reader.planned(start, ready) == []
    reader.commit(ready)
    time.sleep(0.3)
    opened = time.time_ns()
    end = reader.latestOffset(ready, ReadMaxRows(1_000_000))
    assert end["seq"] >= 1 and end["ready"] is True
    entry = np.concatenate([b.column("_entry").to_numpy() for b in reader.planned(ready, end)])
    assert entry.min() >= opened, "the paced clock started before the source was opened"
    # restarted from the checkpoint of the empty batch: the next read plans rows
    again = SourcePlanner(node, source_index=0, n_sources=1, prefetch=True)
    end2 = again.latestOffset(ready, ReadMaxRows(1_000_000))
    assert end2["seq"] >= 1 and sum(b.num_rows for b in again.planned(ready, end2)) > 0
    # a bounded source plans rows in its first micro-batch
    t0, _ = _topology()
    bounded = SourcePlanner(t0.nodes["events"], source_index=0, n_sources=1)
    first = bounded.latestOffset(bounded.initialOffset(), ReadMaxRows(1_000_000))
    assert first["seq"] >= 1 and "ready" not in first


def test_live_source_beside_other_inputs_plans_without_waiting():
    """No JVM: a live source alone waits (up to its limit) for a first item to plan; one that
    shares its query with other inputs (a merge's inlet, ``shared``) plans what has arrived,
    even nothing, so a quiet feed never holds up the others' micro-batches."""
    import threading

    from pyspark.sql.streaming.datasource import ReadMaxRows

    import epic
    from epic.spark.source_query import SourcePlanner

    gate = threading.Event()

    def feed():
        gate.wait(5)                        # quiet for up to 5 s, then one row and the end
        yield {"ts": 1, "v": 1}

    t = epic.Topology("quiet")
    src = t.source("feed", epic.iterator_source(feed, schema={"ts": "int64", "v": "int64"},
                                                time="ts", unit="s", bounded=False))
    t.sink("out", src, epic.collect_sink())
    node = t.nodes["feed"]
    shared = SourcePlanner(node, source_index=0, n_sources=1, shared=True)
    start = shared.latestOffset(shared.initialOffset(), ReadMaxRows(1000))  # the empty batch
    began = time.monotonic()
    end = shared.latestOffset(start, ReadMaxRows(1000))
    assert time.monotonic() - began < 1.0 and end["seq"] == start["seq"]
    alone = SourcePlanner(node, source_index=0, n_sources=1)
    start = alone.latestOffset(alone.initialOffset(), ReadMaxRows(1000))
    threading.Timer(0.5, gate.set).start()
    began = time.monotonic()
    end = alone.latestOffset(start, ReadMaxRows(1000))
    assert time.monotonic() - began >= 0.4 and end["seq"] >= 1
    gate.set()
