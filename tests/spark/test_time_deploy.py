"""`epic deploy` = `epic run` under disorder and lateness, for 1, 2 and 3 partitions, fused or not.

The streams are generated (seeded) with ties and rows out of order within and beyond the
windows' lateness, so late-row decisions, origins and count-window order are exercised; every
partition of a keyed window must follow the *stream's* clock (docs/windows.md, "Event time").
"""

from __future__ import annotations

import json
import random

import pytest

import epic
from epic.spark.runtime import deploy
from epic.testing import rows_key

pytestmark = pytest.mark.spark

SCHEMA = {"k": "int64", "ts": "int64", "v": "int64"}


def _rows(seed: int, n: int = 240) -> list[dict]:
    rnd = random.Random(seed)
    t, out = 0, []
    for _ in range(n):
        t += rnd.choice([0, 1, 1, 2, 3])
        back = rnd.choice([0, 0, 0, 1, 2, 5, 12])
        out.append({"k": rnd.randrange(5), "ts": t - back, "v": rnd.randrange(-5, 10)})
    return out


def _topology(rows: list[dict], batch_rows: int) -> epic.Topology:
    t = epic.Topology("time_deploy")
    data = list(rows)

    def gen():
        yield from data

    s = t.source("events", epic.iterator_source(gen, schema=SCHEMA, time="ts", unit="s",
                                                batch_rows=batch_rows))
    w = t.window("late1", s, epic.tumbling(10, origin=0, lateness=1), key="k",
                 aggregates=[epic.count("n"), epic.sum("v")])
    t.sink("late1_out", w, epic.collect_sink())
    t.sink("late1_rows", t.late("late1_late", w), epic.collect_sink())
    f = t.window("few", s, epic.few_time(6, 3, 1, lateness=4), key="k",
                 aggregates=[epic.count("n"), epic.max("v")])
    t.sink("few_out", f, epic.collect_sink())
    c = t.window("cnt", s, epic.tumbling_count(3, ef=1, lateness=2), key="k",
                 aggregates=[epic.sum("v")])
    t.sink("cnt_out", c, epic.collect_sink())
    pw = epic.predicate_window(lambda cur: cur["v"] % 3 == 0, lambda first, cur: cur["v"] > 5,
                               kind="sliding", lateness=3)
    p = t.window("runs", s, pw, key="k", aggregates=[epic.count("n"), epic.collect("v")])
    t.sink("runs_out", p, epic.collect_sink())
    return t


CASES = [
    # the repro: (1,5) is late for tumbling(10, lateness=1) on every partition count
    ([{"k": k, "ts": ts, "v": 1} for k, ts in [(0, 0), (1, 0), (0, 10), (1, 5), (0, 20),
                                                 (1, 20)]], 2),
    (_rows(7), 37),
]


# every partition count once, fused and unfused each with several partitions (the suite's time)
@pytest.mark.parametrize("partitions,fuse", [(1, False), pytest.param(3, False, marks=pytest.mark.slow),
                                             (2, True)])
def test_deploy_equals_run_under_disorder(spark, tmp_path, partitions, fuse):
    """Generated disordered keyed streams: the deploy's rows equal epic run's, per sink."""
    for i, (rows, batch_rows) in enumerate(CASES):
        want = epic.run(_topology(rows, batch_rows))
        result = deploy(_topology(rows, batch_rows), str(tmp_path / f"wd{i}"), spark=spark,
                        timeout=240, fuse=fuse, partitions=partitions, batch_rows=batch_rows,
                        conf={"spark.sql.session.timeZone": "UTC"})
        assert result.status["state"] == "finished"
        # --conf reaches the session and the resolved settings are recorded in the work dir
        recorded = json.loads((tmp_path / f"wd{i}" / "spark-conf.json").read_text())
        assert recorded["spark.sql.session.timeZone"] == "UTC"
        for sink in ("late1_out", "few_out", "cnt_out", "late1_rows", "runs_out"):
            got = result.collected[sink].to_pylist()
            exp = want.collected[sink].to_pylist()
            assert sorted(got, key=rows_key) == sorted(exp, key=rows_key), (i, sink)
        if i == 0:
            k1 = [r for r in want.collected["late1_out"].to_pylist()
                  if r["k"] == 1 and r["window_start"] == 0]
            assert [r["n"] for r in k1] == [1]
            assert want.nodes["late1"].late_rows == 1
            assert [(r["k"], r["ts"], r["late_watermark"]) for r in
                    result.collected["late1_rows"].to_pylist()] == [(1, 5, 9)]
        # late counts: the deploy reports epic run's
        for node in ("late1", "few", "cnt", "runs"):
            assert result.status["late_rows"][node] == want.nodes[node].late_rows, (i, node)
