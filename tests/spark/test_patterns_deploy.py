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
