"""Issue 12 at deploy level, on small topologies: a corrupt committed segment, a sink commit
interrupted by a full file system, a second deploy on one work directory, and a SIGKILL inside a
fused CSV sink commit. The per-point tests without Spark are in tests/test_faults.py; the table of
faults tried is in docs/deploy.md."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

import epic
from epic.cli import load_topology
from epic.errors import EpicError
from epic.spark.runtime import deploy
from epic.topics import Topic

from test_fuse import _deploy as _fused_subprocess_deploy
from test_recovery import _lines, reference  # noqa: F401 - fixture

pytestmark = pytest.mark.spark


def _copy_topology(src, out: Path, rows: int = 0) -> epic.Topology:
    t = epic.Topology("copy")
    s = t.source("rows", src)
    t.sink("out", s, epic.csv_sink(out))
    return t


def test_deploy_stops_at_a_corrupt_committed_segment(spark, tmp_path):
    """A deploy reading a 30-row topic whose middle segment was overwritten fails naming the
    topic, the segment and its batch; it used to finish with 20 rows (exit 0)."""
    t = Topic.create(tmp_path / "t", pa.schema([("ts", pa.int64()), ("v", pa.int64())]),
                     time_column="ts", time_unit="ms")
    for b in range(3):
        t.append([pa.record_batch([list(range(10 * b, 10 * b + 10)), [b] * 10],
                                  names=["ts", "v"])], producer="src", batch_id=b)
    mid = t.segments()[1]
    Path(mid.path).write_bytes(b"\0" * mid.size)
    topo = _copy_topology(epic.topic_source(tmp_path / "t"), tmp_path / "out.csv")
    with pytest.raises(EpicError) as err:
        deploy(topo, str(tmp_path / "wd"), spark=spark, timeout=120)
    msg = str(err.value)
    assert "InputError" in msg and f"topic {tmp_path / 't'}" in msg
    assert mid.name in msg and "batch 1" in msg
    status = json.loads((tmp_path / "wd" / "status.json").read_text())
    assert status["state"] == "failed"


def _mount_small(path: Path, size: str) -> bool:
    if os.geteuid() != 0:
        return False
    path.mkdir(parents=True, exist_ok=True)
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True).returncode == 0


def test_full_file_system_during_sink_commit(spark, tmp_path):
    """A CSV sink commit that runs out of space (a 640 KiB tmpfs holding the ~380 KB part and the
    output; else an injected ENOSPC) fails naming the file and the OS error, and cuts the file
    back to its last committed batch; with space again, the same deploy resumes and the file is
    epic run's, exactly."""
    out = tmp_path / "out"
    mounted = _mount_small(out, "640k")
    wd = tmp_path / "wd"

    def items():
        for i in range(30):
            yield {"ts": list(range(i * 1000, i * 1000 + 1000)),
                   "v": [j * 7919 for j in range(i * 1000, i * 1000 + 1000)]}

    def topology(path):
        return _copy_topology(epic.iterator_source(
            items, schema={"ts": "int64", "v": "int64"}, time="ts", unit="ms"), path)
    try:
        if not mounted:
            (wd / ".faults").mkdir(parents=True)
            (wd / ".faults" / "sink-commit").write_text("")
        with pytest.raises(EpicError) as err:
            deploy(topology(out / "o.csv"), str(wd), spark=spark, timeout=120)
        msg = str(err.value)
        assert "OutputError" in msg and str(out / "o.csv") in msg
        assert "No space left on device (errno 28)" in msg
        # the commit appending a part, or partition 0 writing its rows in place
        assert "cannot commit micro-batch" in msg or "cannot write micro-batch" in msg
        data = (out / "o.csv").read_bytes()
        assert data.endswith(b"\n")  # the last committed batch's rows, whole
        side = json.loads((out / "o.csv.epic" / "commit.json").read_text()) \
            if (out / "o.csv.epic" / "commit.json").exists() else {"length": len(b"ts,v\n")}
        assert len(data) == side["length"]
        if mounted:
            subprocess.run(["mount", "-o", "remount,size=8m", str(out)], check=True)
        else:
            (wd / ".faults" / "sink-commit").unlink()
        deploy(topology(out / "o.csv"), str(wd), spark=spark, timeout=120)
        epic.run(topology(tmp_path / "ref.csv"))
        assert (out / "o.csv").read_bytes() == (tmp_path / "ref.csv").read_bytes()
    finally:
        if mounted:
            subprocess.run(["umount", str(out)], check=False)


def test_a_query_whose_python_did_not_connect_back_is_restarted(spark, tmp_path, capfd):
    """Spark gives a Python process it spawns 10 s to connect back; on an overloaded machine a
    commit runner can miss that ("Python worker failed to connect back"). The deploy starts that
    query again from its checkpoint, says so on stderr, and the output is still epic run's,
    exactly once (the failed commit had appended its first part)."""
    wd = tmp_path / "wd"

    def items():
        for i in range(12):
            yield {"ts": list(range(i * 500, i * 500 + 500)), "v": list(range(i, i + 500))}

    def topology(path):
        return _copy_topology(epic.iterator_source(
            items, schema={"ts": "int64", "v": "int64"}, time="ts", unit="ms"), path)
    (wd / ".faults").mkdir(parents=True)
    (wd / ".faults" / "sink-commit").write_text("connect-back")
    deploy(topology(tmp_path / "o.csv"), str(wd), spark=spark, timeout=120, batch_rows=1000)
    err = capfd.readouterr().err
    assert "Python worker failed to connect back" in err
    assert "restarting the query from its checkpoint (1 of 3)" in err
    assert not (wd / ".faults" / "sink-commit").exists()  # the fault fired
    epic.run(topology(tmp_path / "ref.csv"))
    assert (tmp_path / "o.csv").read_bytes() == (tmp_path / "ref.csv").read_bytes()


def test_transient_failures_are_restarted_at_most_three_times():
    """The launcher's policy, without Spark: a connect-back failure restarts the query up to
    three times, then it is the deploy's error; any other failure is the error at once."""
    from epic.spark.launcher import Launcher

    class Q:
        def __init__(self, exc):
            self.exc = exc

        def exception(self):
            return self.exc

    started = []
    la = Launcher.__new__(Launcher)
    la.queries, la.restarts = {}, {}
    la._how = {"a": ("s", "d", "c"), "b": ("s2", "d2", "c2")}

    def start(name):
        started.append(name)
        la.queries[name] = Q(RuntimeError("org.apache.spark.SparkException: Python worker "
                                          "failed to connect back."))
        return la.queries[name]
    la._start = start
    la.queries = {"a": Q(None), "b": Q(None)}
    assert la.failure() is None and started == []
    start("a")
    started.clear()
    for i in range(3):
        assert la.failure() is None
    assert started == ["a", "a", "a"] and la.restarts == {"a": 3}
    err = la.failure()
    assert err is not None and "query of node 'a' failed" in str(err)
    la.queries = {"b": Q(ValueError("boom"))}
    err = la.failure()
    assert "boom" in str(err) and la.restarts == {"a": 3}


def test_second_deploy_on_the_same_workdir_is_refused(spark, tmp_path):
    """While a deploy runs, a second one on its work directory is refused with the first's pid
    and host, before touching anything; the first finishes normally, and the lock is free after."""
    topo_path = Path(__file__).resolve().parents[2] / "topologies" / "sensor_averages.py"

    def topo(out):
        return load_topology(topo_path, params={"out": str(out)})
    wd = tmp_path / "wd"
    second: dict = {}

    def run_second():
        # The second deploy runs on a helper thread: Spark's Python data sources registered by
        # the first are only visible on the thread that registered them, and the refused deploy
        # must not need them.
        lock = wd / "deploy.lock"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (lock.exists() and lock.read_text().strip()):
            time.sleep(0.005)
        try:
            deploy(topo(tmp_path / "b"), str(wd), spark=spark, timeout=120)
        except BaseException as exc:  # noqa: BLE001 - checked below
            second["error"] = exc
    th = threading.Thread(target=run_second)
    th.start()
    result = deploy(topo(tmp_path / "a"), str(wd), spark=spark, timeout=120)
    th.join(60)
    assert result.status["state"] == "finished"
    err = second.get("error")
    assert isinstance(err, EpicError), err
    assert f"pid {os.getpid()} on host {socket.gethostname()}" in str(err) and "in use" in str(err)
    assert not (tmp_path / "b").exists()
    assert (wd / "deploy.lock").read_text() == ""  # released


def test_sigkill_inside_a_fused_csv_sink_commit(reference, spark, tmp_path):  # noqa: F811
    """--fuse: SIGKILL after the fused sink appended a part of its second commit, before its
    record: the file then holds uncommitted bytes (the kill landed inside the commit). The rerun
    cuts them off and re-appends: the file is epic run's, no row lost or doubled."""
    topo, want = reference
    run = _fused_subprocess_deploy(topo, tmp_path / "wd", tmp_path / "out", "sink-commit:2")
    assert run.returncode == -9, run.stderr[-3000:]
    out = tmp_path / "out" / "sums.csv"
    side = json.loads((tmp_path / "out" / "sums.csv.epic" / "commit.json").read_text())
    assert out.stat().st_size > side["length"], "the kill did not land inside the sink commit"
    result = deploy(load_topology(topo, params={"out": str(tmp_path / "out")}),
                    str(tmp_path / "wd"), spark=spark, fuse=True, batch_rows=500, timeout=120)
    assert result.status["state"] == "finished"
    assert _lines(out) == want


def test_a_session_on_another_master_is_refused_not_reused(spark):
    """getOrCreate would hand back the running session: a deploy asked to run on a cluster would
    silently run locally."""
    from epic.spark import build_session

    master = spark.sparkContext.master
    assert build_session(master) is spark          # the same master: the shared session
    assert build_session() is spark                # no master asked for: the running one
    with pytest.raises(EpicError, match=r"master 'local\[3\]' cannot take effect") as e:
        build_session("local[3]")
    assert repr(master) in str(e.value) and "spark.stop()" in str(e.value)


def test_a_work_directory_of_another_plan_is_refused(spark, tmp_path):
    """A work directory of another version of the topology (nodes added or removed), or whose
    checkpoints belong to queries the new deploy's plan does not have (another epic grouped the
    nodes otherwise), is refused before any query starts, naming what differs and the fix;
    rerunning the topology that made it is still accepted."""
    rows = [{"k": i % 3, "ts": i * 1000, "v": float(i)} for i in range(60)]

    def topo(extra: bool):
        t = epic.Topology("plans")
        s = t.source("src", epic.iterator_source(
            [pa.Table.from_pylist(rows).to_batches()[0]],
            schema={"k": "int64", "ts": "int64", "v": "float64"}, time="ts", unit="ms"))
        if extra:
            s = t.map("double", s, lambda b: {"k": b.column("k"), "ts": b.column("ts"),
                                              "v": pa.compute.multiply(b.column("v"), 2.0)})
        w = t.window("w", s, epic.tumbling_count(10), key="k", aggregates=[epic.count("n")],
                     late="drop")
        t.sink("out", w, epic.collect_sink())
        return t

    wd = str(tmp_path / "wd")
    first = deploy(topo(False), wd, spark=spark, fuse=False, timeout=120)
    assert first.status["state"] == "finished"
    with pytest.raises(EpicError, match=r"another version of topology 'plans' \(nodes added: "
                                        r"double\).*fresh --workdir"):
        deploy(topo(True), wd, spark=spark, fuse=False, timeout=120)
    # the same nodes, but a checkpoint of a query this plan does not have (another epic's plan)
    stray = os.path.join(wd, "checkpoints", "src+w", "offsets")
    os.makedirs(stray)
    with pytest.raises(EpicError, match=r"holds checkpoints of 1 query this deploy does not "
                                        r"have \('src\+w'\).*fresh --workdir"):
        deploy(topo(False), wd, spark=spark, fuse=False, timeout=120)
    os.removedirs(stray)
    again = deploy(topo(False), wd, spark=spark, fuse=False, timeout=120)
    assert again.status["state"] == "finished"
    assert sorted(r["n"] for r in again.collected["out"].to_pylist()) == [10] * 6
