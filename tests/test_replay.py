"""Paced replay (``replay_speed=``, epic/replay.py): rows released at event-time pace, batches cut
at 10 ms, ``_entry`` stamped with each row's scheduled release time, output equal to the unpaced
run."""

from __future__ import annotations

import time

import numpy as np
import pyarrow as pa
import pytest

import epic
from epic.errors import SpecError
from epic.replay import MAX_WAIT_NS, RELEASE_KEY, entry_times, paced

SCHEMA = {"k": "int64", "ts": "int64", "v": "int64"}


class FakeClock:
    """A clock that only moves when slept on, recording every sleep."""

    def __init__(self, start=1_000_000_000):
        self.now = start
        self.sleeps = []

    def __call__(self):
        return self.now

    def sleep(self, s):
        self.sleeps.append(s)
        self.now += max(1, int(round(s * 1e9)))


def _rows(n, step_ms, keys=3, jitter=None):
    ts = np.arange(n, dtype=np.int64) * step_ms
    if jitter is not None:
        ts = ts + jitter
    return [{"k": i % keys, "ts": int(t), "v": (i * 7) % 23} for i, t in enumerate(ts)]


def _batch(rows):
    return pa.RecordBatch.from_pylist(rows, schema=pa.schema([(k, pa.int64()) for k in SCHEMA]))


def _release_log(items, clock):
    """(wall time yielded, batch) for every item of ``items`` (a paced iterator)."""
    out = []
    for b in items:
        out.append((clock(), b))
    return out


@pytest.mark.parametrize("speed", [1.0, 10.0, 100.0])
def test_fake_clock_releases_each_batch_at_its_last_rows_time(speed):
    clock = FakeClock()
    rows = _rows(3000, 1)  # one row per ms, 3 s of event time
    log = _release_log(paced([_batch(rows[:1700]), _batch(rows[1700:])], "ts", "ms", speed,
                             wall_ns=clock, mono_ns=clock, sleep=clock.sleep), clock)
    start = 1_000_000_000
    got = [r for _, b in log for r in b.to_pylist()]
    assert got == rows
    for at, b in log:
        ts = b.column("ts").to_numpy()
        scheduled = [start + (t - rows[0]["ts"]) * 1e6 / speed for t in ts]
        # released once its last row is due, never before, never 1 ms after
        assert scheduled[-1] <= at < scheduled[-1] + 1e6
        # no row waits more than 10 ms (paced) for a later row of its batch
        assert scheduled[-1] - scheduled[0] <= MAX_WAIT_NS
        # the _entry stamps are the scheduled release times
        assert entry_times(b, lambda: 0).to_pylist() == [int(s) for s in scheduled]
    # at 100x a 10 ms cut holds 1000 event-ms: batches are not cut smaller than they need be
    if speed == 100.0:
        assert [b.num_rows for _, b in log] == [1001, 699, 1001, 299]


def test_rows_out_of_order_wait_for_no_time_already_passed():
    clock = FakeClock(0)
    rows = [{"k": 0, "ts": t, "v": 0} for t in (0, 500, 200, 1000, 900, 1500)]
    log = _release_log(paced([_batch(rows)], "ts", "ms", 1.0, wall_ns=clock, mono_ns=clock,
                             sleep=clock.sleep), clock)
    assert [b.column("ts").to_pylist() for _, b in log] == [[0], [500, 200], [1000, 900], [1500]]
    assert [round(at / 1e6) for at, _ in log] == [0, 500, 1000, 1500]
    # a late row's entry is the release time of the largest time before it
    assert [entry_times(b, lambda: -1).to_pylist() for _, b in log][1] == [500_000_000] * 2


def test_cuts_do_not_depend_on_the_clock():
    """A reader that falls behind gets the same items (a Spark replay skips by item count)."""
    rows = _rows(500, 3)
    fast = FakeClock()
    a = [b.num_rows for b in paced([_batch(rows)], "ts", "ms", 5.0, wall_ns=fast, mono_ns=fast,
                                   sleep=fast.sleep)]
    slow = FakeClock()
    b = []
    for x in paced([_batch(rows)], "ts", "ms", 5.0, wall_ns=slow, mono_ns=slow,
                   sleep=slow.sleep):
        b.append(x.num_rows)
        slow.now += 200_000_000      # the reader takes 200 ms per item: far behind
    assert a == b and sum(a) == 500
    assert len(slow.sleeps) < len(fast.sleeps)


def test_watermark_items_are_paced_too():
    clock = FakeClock(0)
    items = [_batch(_rows(1, 1)), epic.Watermark(2000), _batch([{"k": 0, "ts": 3000, "v": 1}])]
    log = _release_log(paced(items, "ts", "ms", 2.0, wall_ns=clock, mono_ns=clock,
                             sleep=clock.sleep), clock)
    assert isinstance(log[1][1], epic.Watermark)
    assert [round(at / 1e6) for at, _ in log] == [0, 1000, 1500]


@pytest.mark.parametrize("speed", [10.0, 100.0])
def test_real_clock_pacing_holds(speed):
    """Measured release times against event times, on the real clock (a shared machine: the
    bound on lateness is generous, the bound on earliness is exact)."""
    span_ms = int(0.4 * speed * 1000)          # 0.4 s of wall time at this speed
    rows = _rows(2000, span_ms // 2000)
    src = epic.iterator_source(rows, schema=SCHEMA, time="ts", unit="ms", batch_rows=512,
                               replay_speed=speed)
    log = []
    t_start = time.time_ns()
    for b in src.open():
        log.append((time.time_ns(), b))
    wall = (time.time_ns() - t_start) / 1e9
    assert [r for _, b in log for r in b.to_pylist()] == rows
    start = entry_times(log[0][1], lambda: 0)[0].as_py()
    late = []
    for at, b in log:
        sched = entry_times(b, lambda: 0).to_numpy()
        want = start + ((b.column("ts").to_numpy() - rows[0]["ts"]) * 1e6 / speed).astype(np.int64)
        assert np.all(np.abs(sched - want) <= 1)
        assert at >= sched[-1], "a batch was released before its last row was due"
        assert sched[-1] - sched[0] <= MAX_WAIT_NS
        late.append(at - sched[-1])
    assert np.percentile(late, 90) < 20e6, f"release lateness p90 {np.percentile(late, 90)/1e6} ms"
    assert 0.39 <= wall < 1.5


def _topology(replay_speed=None, delays=False):
    """source -> map -> keyed window; collect sinks after the map and the window (also used by
    tests/spark/test_replay_deploy.py)."""
    t = epic.Topology("paced", delay_logging=delays)
    rows = _rows(1200, 5, jitter=np.tile([0, 3, -2, 1], 300))   # slight disorder
    s = t.source("events", epic.iterator_source(rows, schema=SCHEMA, time="ts", unit="ms",
                                                 batch_rows=256, lateness=0.01,
                                                 replay_speed=replay_speed))
    m = t.map("double", s, lambda b: b.set_column(2, "v", epic.pc.multiply(b["v"], 2)))
    w = t.window("window", m, epic.tumbling(0.5, origin=0), key="k",
                 aggregates=[epic.count("n"), epic.sum("v", name="total")], late="drop")
    t.sink("rows", m, epic.collect_sink(delays=delays))
    t.sink("sums", w, epic.collect_sink(delays=delays))
    return t, rows


def test_epic_run_paced_equals_unpaced_and_stamps_scheduled_entries():
    t0, rows = _topology()
    want = epic.run(t0).collected
    speed = 20.0    # 6 s of event time in 0.3 s
    tp, _ = _topology(speed, delays=True)
    began = time.time_ns()
    got = epic.run(tp).collected
    took = (time.time_ns() - began) / 1e9
    assert took >= 6.0 / speed * 0.95
    for name in ("rows", "sums"):
        assert got[name].drop_columns(["entry_time", "write_time"]).to_pylist() == \
            want[name].to_pylist(), name
    r = got["rows"]
    entry = r.column("entry_time").to_numpy()
    ts = r.column("ts").to_numpy()
    high = np.maximum.accumulate(ts)
    sched = entry[0] + ((high - ts[0]) * 1e6 / speed).astype(np.int64)
    assert np.all(np.abs(entry - sched) <= 1), "entry stamps are the scheduled release times"
    assert np.all(r.column("write_time").to_numpy() >= entry)


def test_replay_speed_is_checked():
    for bad in (0, -1, float("inf"), "fast", True):
        with pytest.raises(SpecError, match="replay_speed"):
            epic.iterator_source([], schema=SCHEMA, time="ts", unit="ms", replay_speed=bad)
    src = epic.csv_source("x.csv", SCHEMA, time="ts", unit="ms", replay_speed=10)
    assert src.replay_speed == 10.0 and src.live and src.bounded
    assert not epic.csv_source("x.csv", SCHEMA, time="ts", unit="ms").live


def test_unpaced_batches_have_no_release_metadata():
    src = epic.iterator_source(_rows(10, 1), schema=SCHEMA, time="ts", unit="ms")
    (b,) = list(src.open())
    assert RELEASE_KEY not in (b.schema.metadata or {})
    assert entry_times(b, lambda: 42).to_pylist() == [42] * 10


def test_csv_and_parquet_sources_pace(tmp_path):
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    rows = _rows(300, 10)
    tab = pa.Table.from_pylist(rows)
    pacsv.write_csv(tab, tmp_path / "e.csv", pacsv.WriteOptions(include_header=False))
    pq.write_table(tab, tmp_path / "e.parquet")
    for src in (epic.csv_source(tmp_path / "e.csv", SCHEMA, time="ts", unit="ms",
                                replay_speed=30),
                epic.parquet_source(tmp_path / "e.parquet", time="ts", unit="ms",
                                    replay_speed=30)):
        t = time.perf_counter()
        out = list(src.open())
        assert time.perf_counter() - t >= 2.99 / 30 * 0.95, src.describe()
        assert [r for b in out for r in b.to_pylist()] == rows
        assert all(RELEASE_KEY in b.schema.metadata for b in out)


def test_topic_source_paces(tmp_path):
    from epic.topics import Topic

    d = tmp_path / "t"
    topic = Topic.create(d, pa.schema([("ts", pa.int64())]), time_column="ts", time_unit="ms")
    topic.append([pa.record_batch({"ts": list(range(0, 300, 10))})], producer="p", batch_id=0)
    src = epic.topic_source(d, replay_speed=1)
    assert src.live and src.bounded and src.replay_speed == 1.0
    t = time.perf_counter()
    assert sum(b.num_rows for b in src.open()) == 30
    assert time.perf_counter() - t >= 0.29 * 0.95
