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
