"""`epic deploy --fuse`: chains of nodes in one query give `epic run`'s output, also after SIGKILLs.

Reuses the helpers of test_deploy (examples, window transcripts) and test_recovery (crash points).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

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
    """Chains fuse; splitstreams, merges and a stateful node after a keyed one start new queries;
    global stateful nodes chain."""
    t = load_topology(ROOT / "topologies" / "sensor_averages.py", params={"out": "/tmp/x"})
    groups = [group_name(g) for g in plan_groups(t)]
    assert len(groups) < len(t.nodes)
    for topo, params in (("sensor_averages", {}), ("parallel_split", {"replicas": "2"})):
        t = load_topology(ROOT / "topologies" / f"{topo}.py", params={**params, "out": "/tmp/x"})
        modes = plan_modes(t)
        for g in plan_groups(t):
            held = [modes[n.name] for n in g if modes.get(n.name, "stateless") != "stateless"]
            assert held == ["keyed"] or set(held) <= {"global"}, (topo, group_name(g))
        assert [len(g) for g in plan_groups(t, fuse=False)] == [1] * len(t.nodes)
    t = load_topology(ROOT / "topologies" / "parallel_split.py",
                      params={"replicas": "2", "out": "/tmp/x"})
    # the round-robin merge, its global reduce window and the sink: one query
    assert "rr-merge+rr-reduce+combined" in [group_name(g) for g in plan_groups(t)]
    chain = load_topology(_chain_file("/tmp/x"), params={"out": "/tmp/x"})
    assert [group_name(g) for g in plan_groups(chain)] == ["readings+sorter+stamp+counts+out"]
    # DEBS Q4 alone: the splitter has one output, so the merge, the splitter, the ball hitter and
    # the shot detector (all global) and the CSV sink are one query; with all four queries the
    # splitter has four outputs and ends its group.
    debs = ROOT / "topologies" / "debs2013.py"
    q4 = load_topology(debs, params={"input": "game.csv", "out": "/tmp/x", "queries": "q4"})
    assert [group_name(g) for g in plan_groups(q4)][-1] == \
        "merge_by_time+debs_splitter+q2_ball_hitter+q4_shots+q4_csv"
    full = load_topology(debs, params={"input": "game.csv", "out": "/tmp/x"})
    assert "merge_by_time+debs_splitter" in [group_name(g) for g in plan_groups(full)]


CHAIN = textwrap.dedent('''
    import os
    import random

    import epic

    out = epic.param("out", "out")


    def readings():
        rnd = random.Random(7)
        for i in range(3000):
            yield {"ts": i * 10 + rnd.randrange(0, 60), "v": (i * 7) % 11}


    class Sorter(epic.Processor):
        """Holds rows until the watermark passes them, then emits them in time order: what it
        emits, and when, follows the watermarks it is given."""

        def init(self, key):
            return []

        def on_element(self, state, row, ctx):
            state.append([row["ts"], row["v"]])  # lists: the state is msgpacked
            ctx.set_timer(row["ts"])
            return state

        def on_timer(self, state, time, ctx):
            keep = []
            for ts, v in sorted(state):
                if ts <= time:
                    ctx.emit({"ts": ts, "v": v})
                else:
                    keep.append([ts, v])
            return keep


    class Stamp(epic.Processor):
        """Each row with the watermark this node had when the row arrived."""

        def on_element(self, state, row, ctx):
            w = ctx.watermark
            ctx.emit({"ts": row["ts"], "v": row["v"], "wm": -1 if w is None else w})
            return state


    topology = epic.Topology("chain")
    s = topology.source("readings", epic.iterator_source(
        readings, schema={"ts": "int64", "v": "int64"}, time="ts", unit="ms", batch_rows=100,
        lateness=0.1))
    a = topology.process("sorter", s, Sorter(), schema={"ts": "int64", "v": "int64"}, time="ts")
    b = topology.process("stamp", a, Stamp(), schema={"ts": "int64", "v": "int64", "wm": "int64"},
                         time="ts")
    w = topology.window("counts", b, epic.tumbling_count(50),
                        aggregates=[epic.count("n"), epic.sum("v", name="total"),
                                    epic.max("wm", name="wm")])
    topology.sink("out", w, epic.csv_sink(os.path.join(out, "counts.csv")))
''')


def _chain_file(d) -> str:
    path = os.path.join(d, "chain_topology.py")
    os.makedirs(d, exist_ok=True)
    with open(path, "w") as f:
        f.write(CHAIN)
    return path


def test_global_chain_equals_run_also_after_kills(tmp_path):
    """Three global stateful nodes (two processes, a count window) and a CSV sink as one query:
    the second and third read the first's output in the same task, and their watermarks from
    its snapshot. The file equals epic run's (the watermark each row met at the second node
    included), also when the deploy is SIGKILLed after snapshots of the chain's nodes and rerun."""
    topo = _chain_file(str(tmp_path))
    epic.run(load_topology(topo, params={"out": str(tmp_path / "ref")}))
    want = _lines(tmp_path / "ref" / "counts.csv")
    assert len(want[1]) > 20
    for crash in ("node-state:4", "node-state:8"):
        run = _deploy(topo, tmp_path / "wd", tmp_path / "out", crash)
        assert run.returncode == -9, (crash, run.returncode, run.stderr[-3000:])
    last = _deploy(topo, tmp_path / "wd", tmp_path / "out")
    assert last.returncode == 0, last.stderr[-3000:]
    status = json.loads((tmp_path / "wd" / "status.json").read_text())
    assert list(status["nodes"]) == ["readings+sorter+stamp+counts+out"]
    assert _lines(tmp_path / "out" / "counts.csv") == want
    assert sorted(os.listdir(tmp_path / "wd" / "state")) == ["counts", "sorter", "stamp"]


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
