"""`epic deploy` = `epic run` for snapshot and count-by-start windows and an expiry stream."""

from __future__ import annotations

import random

import pyarrow as pa
import pytest

import epic
from epic.spark.runtime import deploy
from epic.testing import rows_key

pytestmark = pytest.mark.spark

SCHEMA = {"k": "int64", "ts": "int64", "te": "int64", "v": "int64"}


def _rows(seed: int = 3, n: int = 120) -> list[dict]:
    rnd = random.Random(seed)
    t, out = 0, []
    for _ in range(n):
        t += rnd.choice([0, 1, 1, 2])
        s = t - rnd.choice([0, 0, 1, 3])
        out.append({"k": rnd.randrange(3), "ts": s, "te": s + rnd.choice([0, 1, 2, 5, 9]),
                    "v": rnd.randrange(-5, 10)})
    return out


def _topology(rows: list[dict]) -> epic.Topology:
    leaving = epic.aggregate_function(
        "leaving_d", init=lambda: 0, add=lambda s, e: s + 1, remove=lambda s, e: s - 1,
        result_type=pa.int64(),
        expire_schema={"v": "int64", "left": "int64"},
        expire=lambda s, e: [{"v": int(e), "left": s}], replace=True)
    t = epic.Topology("lifetime_deploy")
    data = list(rows)

    def gen():
        yield from data

    s = t.source("events", epic.iterator_source(gen, schema=SCHEMA, time="ts", unit="s",
                                                batch_rows=17))
    snap = t.window("snap", s, epic.snapshot_window("ts", "te", lateness=3), key="k",
                    aggregates=[epic.count("n"), epic.agg(leaving, "v")], late="drop")
    t.sink("snap_out", snap, epic.collect_sink())
    t.sink("gone_out", t.expired("gone", snap), epic.collect_sink())
    cbs = t.window("cbs", s, epic.count_by_start(3, lateness=3), key="k",
                   aggregates=[epic.sum("v"), epic.max("v")], late="drop")
    t.sink("cbs_out", cbs, epic.collect_sink())
    return t


def test_deploy_equals_run_for_lifetime_windows(spark, tmp_path):
    """Snapshot, count-by-start and expiry rows: deploy over 2 partitions equals epic run."""
    rows = _rows()
    want = epic.run(_topology(rows))
    result = deploy(_topology(rows), str(tmp_path / "wd"), spark=spark, timeout=240,
                    partitions=2, batch_rows=17)
    assert result.status["state"] == "finished"
    for sink in ("snap_out", "gone_out", "cbs_out"):
        got = result.collected[sink].to_pylist()
        exp = want.collected[sink].to_pylist()
        assert exp and sorted(got, key=rows_key) == sorted(exp, key=rows_key), sink
