"""`epic deploy --fuse`: chains of nodes in one query give `epic run`'s output, also after SIGKILLs.

Reuses the helpers of test_deploy (examples, window transcripts) and test_recovery (crash points).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import epic
from epic.cli import load_topology
from epic.spark.planner import group_name, plan_groups, plan_modes
from epic.spark.runtime import deploy

from test_deploy import EXAMPLES, ROOT, TRANSCRIPTS, _csv_lines, _same_rows, _transcript_topology
from test_recovery import _lines, reference  # noqa: F401 - fixture

pytestmark = pytest.mark.spark


def _deploy(topo, wd, out, crash=None):
    """test_recovery's subprocess deploy, with --fuse."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("EPIC_CRASH_AT", "EPIC_DRIVER_PGID")}
    if crash:
        env["EPIC_CRASH_AT"] = crash
    cmd = [sys.executable, "-m", "epic.spark.cli", "deploy", str(topo), "--workdir", str(wd),
           "--batch-rows", "500", "--no-progress", "--timeout", "240", "--fuse", "--",
           "--out", str(out)]
    return subprocess.run(cmd, env=env, start_new_session=True, capture_output=True, text=True,
                          timeout=300)


def test_plan_groups():
    """Chains fuse; splitstreams, merges and a second stateful node start new queries."""
    t = load_topology(ROOT / "topologies" / "sensor_averages.py", params={"out": "/tmp/x"})
    groups = [group_name(g) for g in plan_groups(t)]
    assert len(groups) < len(t.nodes)
    for g in plan_groups(t):
        modes = plan_modes(t)
        assert sum(1 for n in g if modes.get(n.name, "stateless") != "stateless") <= 1
    assert [len(g) for g in plan_groups(t, fuse=False)] == [1] * len(t.nodes)


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_fused_example_equals_run(spark, tmp_path, name):
    params = EXAMPLES[name]
    ref = load_topology(ROOT / "topologies" / f"{name}.py",
                        params={**params, "out": str(tmp_path / "ref")})
    dep = load_topology(ROOT / "topologies" / f"{name}.py",
                        params={**params, "out": str(tmp_path / "dep")})
    epic.run(ref)
    result = deploy(dep, str(tmp_path / "wd"), spark=spark, timeout=240, fuse=True)
    assert result.status["state"] == "finished"
    files = sorted((tmp_path / "ref").glob("*.csv"))
    assert files
    for f in files:
        assert _csv_lines(tmp_path / "dep" / f.name) == _csv_lines(f), f.name


@pytest.mark.parametrize("tr", TRANSCRIPTS, ids=[t.name for t in TRANSCRIPTS])
def test_fused_transcript_equals_run(spark, tmp_path, tr):
    """source -> window -> collect sink runs as one query and gives epic run's rows."""
    topo = _transcript_topology(tr)
    want = epic.run(topo).collected["out"].to_pylist()
    result = deploy(_transcript_topology(tr), str(tmp_path / "wd"), spark=spark, timeout=120,
                    fuse=True)
    assert list(result.status["nodes"]) == ["input+window+out"]
    assert _same_rows(result.collected["out"].to_pylist(), want)


def test_fused_kill_then_rerun(reference, tmp_path):  # noqa: F811 - fixture
    """source -> filter -> window -> CSV as one query, SIGKILLed after the window task saved its
    snapshot (before the sink wrote that batch); the rerun's file is epic run's."""
    topo, want = reference
    for crash in ("node-state:3",):
        run = _deploy(topo, tmp_path / "wd", tmp_path / "out", crash)
        assert run.returncode == -9, (crash, run.returncode, run.stderr[-3000:])
    # Spark's temp directories, which the killed driver could not delete, are in the work
    # directory (not /tmp); the next deploy there deletes them first.
    scratch = tmp_path / "wd" / "spark-local"
    left = set(os.listdir(scratch))
    assert left, "the killed deploy's Spark temp directories are not in <workdir>/spark-local"
    last = _deploy(topo, tmp_path / "wd", tmp_path / "out")
    assert last.returncode == 0, last.stderr[-3000:]
    assert _lines(tmp_path / "out" / "sums.csv") == want
    assert not left & set(os.listdir(scratch)), "the killed deploy's temp directories are left"
    conf = json.loads((tmp_path / "wd" / "spark-conf.json").read_text())
    assert conf["spark.local.dir"] == str(scratch)
