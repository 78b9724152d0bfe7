"""SIGKILL a deploy at named points, rerun the same command: outputs equal an uninterrupted run.

Each run is ``python -m epic.spark.cli deploy`` as a subprocess in its own process group with
``EPIC_CRASH_AT=point:N`` (:mod:`epic.spark.crash`): the N-th time execution reaches ``point`` the
whole group (driver, JVM, Python workers) is SIGKILLed. The same command is then rerun without the
hook; the CSV it leaves must be `epic run`'s, rows sorted: nothing lost, nothing twice.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

import epic
from epic.cli import load_topology

pytestmark = pytest.mark.spark

TOPOLOGY = textwrap.dedent('''
    import os
    import epic

    out = epic.param("out", "out")


    def readings():
        for i in range(30):
            for j in range(100):
                yield {"k": j % 4, "ts": i * 100 + j, "v": float((i * 7 + j) % 13)}


    topology = epic.Topology("recovery")
    s = topology.source("readings", epic.iterator_source(
        readings, schema={"k": "int64", "ts": "int64", "v": "float64"}, time="ts", unit="ms",
        batch_rows=100))
    f = topology.filter("positive", s, lambda b: epic.pc.greater(b["v"], 1.0))
    w = topology.window("sums", f, epic.few_time(0.5, 0.1, 0.1), key="k",
                        aggregates=[epic.count("n"), epic.sum("v", name="total")])
    topology.sink("log", w, epic.csv_sink(os.path.join(out, "sums.csv")))
''')


def _deploy(topo, wd, out, crash=None):
    env = {k: v for k, v in os.environ.items()
           if k not in ("EPIC_CRASH_AT", "EPIC_DRIVER_PGID")}
    if crash:
        env["EPIC_CRASH_AT"] = crash
    cmd = [sys.executable, "-m", "epic.spark.cli", "deploy", str(topo), "--workdir", str(wd),
           "--batch-rows", "500", "--no-progress", "--timeout", "240", "--", "--out", str(out)]
    return subprocess.run(cmd, env=env, start_new_session=True, capture_output=True, text=True,
                          timeout=300)


def _lines(path):
    lines = path.read_text().splitlines()
    return lines[0], sorted(lines[1:])


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The topology file and epic run's CSV."""
    d = tmp_path_factory.mktemp("recovery")
    topo = d / "recovery_topology.py"
    topo.write_text(TOPOLOGY)
    epic.run(load_topology(topo, params={"out": str(d / "ref")}))
    return topo, _lines(d / "ref" / "sums.csv")


@pytest.mark.slow
def test_kills_at_several_points_then_rerun(reference, tmp_path):
    """Killed while planning a source batch, after a stateful task saved its state, and in the
    middle of a CSV sink commit (three runs), the fourth run finishes: the CSV equals epic run's,
    no row lost or doubled."""
    topo, want = reference
    for crash in ("source-plan:3", "node-state:3", "sink-commit:2"):
        run = _deploy(topo, tmp_path / "wd", tmp_path / "out", crash)
        assert run.returncode == -9, (crash, run.returncode, run.stderr[-3000:])
    last = _deploy(topo, tmp_path / "wd", tmp_path / "out")
    assert last.returncode == 0, last.stderr[-3000:]
    assert _lines(tmp_path / "out" / "sums.csv") == want


PREFIX_TOPOLOGY = textwrap.dedent('''
    import os
    import epic

    out = epic.param("out", "out")


    def readings():
        for i in range(30):
            for j in range(100):
                yield {"k": j % 3, "ts": i * 100 + j, "v": (i * 7 + j) % 13}


    topology = epic.Topology("segments")
    s = topology.source("readings", epic.iterator_source(
        readings, schema={"k": "int64", "ts": "int64", "v": "int64"}, time="ts", unit="ms",
        batch_rows=100))
    w = topology.window("counts", s, epic.few_time(1.5, 0.01, 0.01), key="k",
                        aggregates=[epic.count("n")])
    topology.sink("log", w, epic.csv_sink(os.path.join(out, "counts.csv")))
''')


@pytest.mark.slow
def test_frozen_state_segments_survive_a_kill_after_a_save(tmp_path, monkeypatch):
    """A prefix window whose snapshots keep their unchanging entries in segment files (4
    entries each here, ``EPIC_SEGMENT_ENTRIES``): killed right after a task saved its snapshot
    and segments (before the batch committed), the rerun replays the batch over the same
    files and its CSV equals epic run's; snapshots referred to segment files, and only files
    a kept snapshot refers to remain."""
    from epic.spark.tasks import StateStore

    topo = tmp_path / "segments_topology.py"
    topo.write_text(PREFIX_TOPOLOGY)
    epic.run(load_topology(topo, params={"out": str(tmp_path / "ref")}))
    want = _lines(tmp_path / "ref" / "counts.csv")
    monkeypatch.setenv("EPIC_SEGMENT_ENTRIES", "4")
    run = _deploy(topo, tmp_path / "wd", tmp_path / "out", "node-state:4")
    assert run.returncode == -9, run.stderr[-3000:]
    last = _deploy(topo, tmp_path / "wd", tmp_path / "out")
    assert last.returncode == 0, last.stderr[-3000:]
    assert _lines(tmp_path / "out" / "counts.csv") == want
    parts = sorted((tmp_path / "wd" / "state" / "counts").glob("p*"))
    assert parts
    segs = 0
    for p in parts:
        store = StateStore(str(tmp_path / "wd" / "state" / "counts"), int(p.name[1:]))
        kept = sorted(int(f.stem) for f in p.glob("*.state"))
        used = set().union(*(store._refs(i) for i in kept))
        files = {f.name for f in p.glob("*.seg")}
        assert files == used
        segs += len(files)
    assert segs
