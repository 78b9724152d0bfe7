"""The default partitions of keyed stateful nodes (epic.spark.planner.auto_partitions): the cores
divided among the queries with keyed nodes, at least 1 (docs/deploy.md, "Partitions")."""

from __future__ import annotations

from pathlib import Path

import pytest

from epic.cli import load_topology
from epic.spark.planner import DeployPlan, auto_partitions, keyed_queries

ROOT = Path(__file__).resolve().parent.parent
DEBS = ROOT / "topologies" / "debs2013.py"


def _debs(queries: str):
    return load_topology(DEBS, params={"input": "game.csv", "out": "/tmp/x", "queries": queries})


@pytest.mark.parametrize("queries, fuse", [("q1,q2,q3,q4", True), ("q3", True), ("q4", True),
                                           ("q1,q2,q3,q4", False), ("q2", False)])
def test_keyed_queries_match_the_plan(queries, fuse, tmp_path):
    t = _debs(queries)
    plan = DeployPlan(t, str(tmp_path / "wd"), partitions=1, fuse=fuse, batch_rows=1000)
    plan.create_topics()
    reference = sum(1 for q in plan.queries() if q.make_planner.args[0].key is not None)
    assert keyed_queries(plan) == reference


def test_auto_partitions_by_cores_and_keyed_queries():
    full = _debs("q1,q2,q3,q4")        # fused: Q1's and Q3's window queries are keyed
    assert auto_partitions(full, cores=2, fuse=True) == 1
    assert auto_partitions(full, cores=4, fuse=True) == 2
    assert auto_partitions(full, cores=1, fuse=True) == 1
    q3 = _debs("q3")                   # one keyed query: every core is one of its partitions
    assert auto_partitions(q3, cores=2, fuse=True) == 2
    assert auto_partitions(q3, cores=8, fuse=True) == 8
    q4 = _debs("q4")                   # nothing keyed
    assert auto_partitions(q4, cores=2, fuse=True) == 2
    # unfused, every keyed node is a query of its own
    assert auto_partitions(full, cores=2, fuse=False) == 1
