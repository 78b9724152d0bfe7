"""`epic deploy` delivers the end of a stream as `epic run` does: the final watermark a node sees.

Regression for the DEBS 2013 topology's last emissions: a merge of a CSV source and a short
iterator source (which ends first under `epic run`), a ``vector_split`` splitstream behind it and
process nodes that emit on the final watermark. The merge's output topic used to carry the minimum
of its inputs' final watermarks (the short input's ``max + 1``) instead of the merge's own
forwarded frontier (the long input's ``max + 1``); and when the long input's topic reached the
merge query to its end before the short one had a row, the merge ended the long input first, so
its frontier stopped at the short input's watermark. Either way the process nodes ended with an
older watermark than under `epic run`. And the DEBS topology itself on a tiny game: its 15 files
equal `epic run`'s.
"""

from __future__ import annotations

import csv
import math
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import epic
from epic import serde
from epic.cli import load_topology
from epic.spark.runtime import deploy

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]

def _merge_split_process(csv_path: str, delay: float = 0.0) -> epic.Topology:
    # Functions and classes are defined here, so that Spark workers get them by value (the test
    # module is not importable there).
    out = pa.schema([("ts", pa.int64()), ("last_wm", pa.int64()), ("rows", pa.int64())])

    class LastWatermark:
        """Emits one row at the end: the last input row's time, the last watermark, rows seen."""

        output_schema = out

        def __init__(self):
            self.wm = None
            self.rows = 0
            self.last_ts = None

        def on_batch(self, batch):
            self.rows += batch.num_rows
            self.last_ts = int(np.max(batch.column("ts").to_numpy()))
            return []

        def on_watermark(self, wm):
            self.wm = int(wm)
            return []

        def on_end(self):
            return [pa.record_batch([[self.last_ts], [self.wm], [self.rows]], schema=out)]

        def snapshot(self):
            return serde.packb([self.wm, self.rows, self.last_ts])

        def restore(self, data):
            self.wm, self.rows, self.last_ts = serde.unpackb(data)

    def evens(i, batch):
        v = batch.column("v").to_numpy()
        return (v % 2 == 0) if i == 0 else np.ones(len(v), bool)

    sch = {"ts": "int64", "v": "int64"}
    t = epic.Topology("merge_split_end")
    a = t.source("readings", epic.csv_source(csv_path, sch, time="ts", unit="ms", header=True,
                                             batch_rows=50))
    b = t.source("markers", epic.iterator_source([{"ts": 55, "v": -1}, {"ts": 305, "v": -2}],
                                                 schema=sch, time="ts", unit="ms"))

    def late(batch):
        # Late on purpose (deploy only): the merge query then reads the readings to their end
        # before it sees a marker (under `epic run` the markers end first, at step 3).
        time.sleep(delay)
        return batch

    b = t.map("markers_late", b, late, schema=sch)
    m = t.merge("merged", [a, b])
    s0, s1 = t.splitstream("split", m, 2, epic.vector_split(evens))
    t.sink("out0", t.process("last0", s0, LastWatermark), epic.collect_sink())
    t.sink("out1", t.process("last1", s1, LastWatermark), epic.collect_sink())
    return t


def test_merge_split_process_final_watermark(spark, tmp_path):
    """A process node behind merge -> splitstream sees the runner's final watermark: the long
    input's max + 1 (1991), not an older one (before the fix: the short input's 306, or the
    frontier of an earlier micro-batch). Unfused (the DEBS test below runs --fuse)."""
    path = tmp_path / "readings.csv"
    path.write_text("ts,v\n" + "".join(f"{i * 10},{i}\n" for i in range(200)))
    ref = epic.run(_merge_split_process(str(path))).collected
    assert ref["out0"].to_pylist() == [{"ts": 1980, "last_wm": 1991, "rows": 101}]
    assert ref["out1"].to_pylist() == [{"ts": 1990, "last_wm": 1991, "rows": 202}]
    got = deploy(_merge_split_process(str(path), delay=10.0), str(tmp_path / "wd"), spark=spark,
                 timeout=180).collected
    for name in ("out0", "out1"):
        assert got[name].to_pylist() == ref[name].to_pylist(), name


# -- the DEBS topology ---------------------------------------------------------------------------

def _rows(path: Path) -> tuple[list[str], list[tuple]]:
    with open(path, newline="") as f:
        lines = list(csv.reader(f))
    header, body = (lines[0] if lines else []), lines[1:]

    def value(x: str):
        try:
            return (0, int(x))
        except ValueError:
            try:
                return (1, float(x))
            except ValueError:
                return (2, x)
    return header, sorted(tuple(value(x) for x in r) for r in body)


def _same(a: tuple, b: tuple) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x[0] == 1 and y[0] == 1:
            if not math.isclose(x[1], y[1], rel_tol=1e-9, abs_tol=1e-12):
                return False
        elif x != y:
            return False
    return True


@pytest.mark.parametrize("queries", [pytest.param("q1,q2,q3,q4", marks=pytest.mark.slow),
                                     "q2,q4"])
def test_debs_deploy_equals_run(spark, tmp_path, queries):
    """The DEBS 2013 topology on a tiny generated game (EPIC's 1 s emission periods, to keep it
    quick), deployed with --fuse: each file holds epic run's rows, last ones included. With Q2
    and Q4 only, the splitter has one output and runs in one query with the readers and the merge
    before it and the ball hitter after it (a global chain), whose topic feeds Q2's and Q4's
    queries."""
    from debs2013.dataflow import OUTPUT_FILES
    from debs2013.generator import generate_game

    game = generate_game(tmp_path / "game.csv", minutes=0.05, seed=2).game_path
    params = {"input": str(game), "q1_period": "1", "q2_period": "1", "queries": queries}
    epic.run(load_topology(ROOT / "topologies" / "debs2013.py",
                           params={**params, "out": str(tmp_path / "ref")}))
    result = deploy(load_topology(ROOT / "topologies" / "debs2013.py",
                                  params={**params, "out": str(tmp_path / "dep")}),
                    str(tmp_path / "wd"), spark=spark, fuse=True, timeout=240)
    assert result.status["state"] == "finished"
    files = sorted(f for f, (q, _) in OUTPUT_FILES.items() if q in queries.split(","))
    assert sorted(p.name for p in (tmp_path / "ref").glob("*.csv")) == files
    if queries == "q2,q4":
        # the readers are the merge's inlets (planner.plan_inlets)
        assert ("event_reader+mark_events+interrupt_reader+merge_by_time+debs_splitter"
                "+q2_ball_hitter") in result.status["nodes"]
    for name in files:
        want_header, want = _rows(tmp_path / "ref" / name)
        got_header, got = _rows(tmp_path / "dep" / name)
        assert got_header == want_header, name
        assert len(got) == len(want), name
        bad = [(g, w) for g, w in zip(got, want) if not _same(g, w)]
        assert not bad, f"{name}: {len(bad)} rows differ, first {bad[0]}"
