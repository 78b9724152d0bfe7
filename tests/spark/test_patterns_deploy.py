"""`epic deploy` runs a pattern node (a keyed process node) with epic run's matches."""

from __future__ import annotations

from pathlib import Path

import pytest

import epic
from epic.cli import load_topology
from epic.spark.runtime import deploy

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]


def test_highway_jams_deploy_equals_run(spark, tmp_path):
    """The jams CSV (a pattern with a star, continuous and final conditions, within) is the same
    under deploy (keyed: partitioned by segment) as under epic run, rows sorted."""
    params = {"segments": "6", "hours": "3"}
    ref = load_topology(ROOT / "topologies" / "highway_jams.py",
                        params={**params, "out": str(tmp_path / "ref")})
    dep = load_topology(ROOT / "topologies" / "highway_jams.py",
                        params={**params, "out": str(tmp_path / "dep")})
    epic.run(ref)
    result = deploy(dep, str(tmp_path / "wd"), spark=spark, timeout=120)
    assert result.status["state"] == "finished"
    want = (tmp_path / "ref" / "jams.csv").read_text().splitlines()
    got = (tmp_path / "dep" / "jams.csv").read_text().splitlines()
    assert len(want) > 5
    assert got[0] == want[0] and sorted(got[1:]) == sorted(want[1:])


def _drop_topology(out):
    rows = [{"k": k, "ts": t, "v": v} for k, t, v in
            [(1, 5, 9), (2, 5, 9), (1, 3, 1), (1, 6, 1), (2, 6, 1), (1, 2, 1), (2, 4, 1),
             (1, 8, 9), (2, 8, 9)]]
    t = epic.Topology("pattern_drops")
    s = t.source("src", epic.iterator_source(rows, schema={"k": "int64", "ts": "int64",
                                                           "v": "int64"},
                                             time="ts", unit="s", lateness=10))
    m = t.pattern("pat", s, epic.pattern(epic.var("X", lambda c: c["v"] > 5),
                                         epic.star("Y", lambda c: c["v"] <= 5),
                                         out_of_order="drop"),
                  key="k", select={"n": "Y.count"})
    t.sink("out", m, epic.csv_sink(str(out)))
    return t


def test_rows_a_pattern_drops_are_counted_in_both_runtimes(spark, tmp_path):
    """out_of_order='drop': the dropped rows are counted in epic run's stats and in the deploy's
    status (`dropped_rows`, summed over the partitions), and the matches are the same."""
    ref = epic.run(_drop_topology(tmp_path / "ref.csv"))
    assert ref.nodes["pat"].extra["dropped_rows"] == 3
    result = deploy(_drop_topology(tmp_path / "dep.csv"), str(tmp_path / "wd"), spark=spark,
                    timeout=120)
    assert result.status["state"] == "finished"
    assert result.status["dropped_rows"] == {"pat": 3}
    want = (tmp_path / "ref.csv").read_text().splitlines()
    got = (tmp_path / "dep.csv").read_text().splitlines()
    assert len(want) == 3 and got[0] == want[0] and sorted(got[1:]) == sorted(want[1:])
