"""`epic status` and `epic stop` without Spark: a status left "running" by a killed deploy, and
`epic stop` where no deploy runs."""

from __future__ import annotations

import json
import re
import os
import signal
import subprocess
import sys
import time

import pytest
from typer.testing import CliRunner

from epic.cli import app
from epic.errors import EpicError
from epic.spark.lock import lock_holder
from epic.spark.status import read_status

HOLD = """
import json, os, sys, time
from epic.spark.lock import WorkdirLock
wd = sys.argv[1]
lock = WorkdirLock(wd).acquire()
with open(os.path.join(wd, "status.json"), "w") as f:
    json.dump({"topology": "t", "state": "running", "pid": os.getpid(), "elapsed_s": 1.0,
               "nodes": {}}, f)
print("held", flush=True)
time.sleep(600)
"""


def _deploy_dir(tmp_path, **manifest):
    wd = tmp_path / "wd"
    wd.mkdir()
    (wd / "deploy.json").write_text(json.dumps({"topology": "t", "id": "x", **manifest}))
    return wd


def _holder(wd, script=HOLD, *args):
    p = subprocess.Popen([sys.executable, "-c", script, str(wd), *map(str, args)],
                         stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    return p


def test_status_of_a_killed_deploy_is_gone_and_stop_is_refused(tmp_path):
    wd = _deploy_dir(tmp_path)
    p = _holder(wd)
    try:
        assert lock_holder(str(wd))["pid"] == p.pid
        assert read_status(str(wd))["state"] == "running"
        r = CliRunner().invoke(app, ["stop", str(wd)])
        assert r.exit_code == 0, r.output
        assert (wd / "STOP").exists()
        (wd / "STOP").unlink()
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    assert lock_holder(str(wd)) is None
    doc = read_status(str(wd))
    assert doc["state"] == "gone"
    assert f"pid {p.pid}" in doc["error"] and f"--workdir {wd}" in doc["error"]
    r = CliRunner().invoke(app, ["status", str(wd)])
    assert r.exit_code == 0 and "gone" in r.output and "resumes" in r.output
    r = CliRunner().invoke(app, ["status", str(wd), "--json"])
    assert json.loads(r.output)["state"] == "gone"
    r = CliRunner().invoke(app, ["stop", str(wd)])
    assert r.exit_code == 1 and "no deploy is running" in r.output and "gone" in r.output
    assert not (wd / "STOP").exists()


def test_status_after_a_deploy_ended_is_what_it_wrote(tmp_path):
    wd = _deploy_dir(tmp_path)
    (wd / "deploy.lock").write_text("")   # released: emptied, not removed
    for state in ("finished", "failed", "stopped"):
        (wd / "status.json").write_text(json.dumps(
            {"topology": "t", "state": state, "pid": 1, "elapsed_s": 1.0, "nodes": {}}))
        assert read_status(str(wd))["state"] == state
        r = CliRunner().invoke(app, ["stop", str(wd)])
        assert r.exit_code == 1 and f"its status: {state}" in r.output


def test_a_lock_on_another_host_is_not_judged_from_here(tmp_path):
    """A work directory whose driver (and lock) is on another machine keeps its status."""
    wd = _deploy_dir(tmp_path, checkpoint_dir=str(tmp_path / "ck"), driver_host="elsewhere-x")
    (wd / "status.json").write_text(json.dumps(
        {"topology": "t", "state": "running", "pid": 1, "elapsed_s": 1.0, "nodes": {}}))
    assert read_status(str(wd))["state"] == "running"


def test_stop_outside_a_work_directory_writes_nothing(tmp_path):
    d = tmp_path / "plain"
    d.mkdir()
    r = CliRunner().invoke(app, ["stop", str(d)])
    assert r.exit_code == 1 and "no deploy.json" in r.output
    assert os.listdir(d) == []
    r = CliRunner().invoke(app, ["stop", str(tmp_path / "missing")])
    assert r.exit_code == 1 and "no such work directory" in r.output


def test_lock_holder_sees_a_lock_only_while_it_is_held(tmp_path):
    from epic.spark.lock import WorkdirLock

    assert lock_holder(str(tmp_path)) is None        # no lock file
    lock = WorkdirLock(str(tmp_path)).acquire()
    try:
        held = lock_holder(str(tmp_path))
        assert held["pid"] == os.getpid() and held["started"] <= time.time()
    finally:
        lock.release()
    assert lock_holder(str(tmp_path)) is None
    WorkdirLock(str(tmp_path)).acquire().release()   # free for the next deploy


@pytest.mark.parametrize(("setting", "message"), [
    ("spark.epic.startingQueries=abc", r"spark.epic.startingQueries='abc': expected a whole"),
    ("spark.epic.backgroundNice=high", r"spark.epic.backgroundNice='high': expected a nice"),
    ("spark.epic.backgroundNice=50", r"spark.epic.backgroundNice='50': expected a nice value"),
    ("spark.epic.startingQueries= ", r"spark.epic.startingQueries=' ': expected a whole"),
    ("spark.epic.splitSeconds=-3", r"spark.epic.splitSeconds='-3': expected seconds"),
    ("spark.epic.sourceFirst=perhaps", r"spark.epic.sourceFirst='perhaps': expected true or"),
    ("spark.epic.sourcefirst=true", r"spark.epic.sourcefirst: not a setting of epic's; epic "
                                    r"reads spark.epic.startingQueries"),
])
def test_a_bad_epic_setting_is_refused_before_anything_is_written(tmp_path, setting, message):
    """`epic deploy --conf spark.epic.X=...`: an unknown epic key or a bad value stops the
    deploy at once (exit 1, the key named) and leaves no work directory behind."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    wd = tmp_path / "wd"
    r = CliRunner().invoke(app, ["deploy", os.path.join(root, "topologies", "sensor_averages.py"),
                                 "-w", str(wd), "--no-progress", "--conf", setting,
                                 "-p", f"out={tmp_path / 'out'}"])
    assert r.exit_code == 1, r.output
    assert re.search(message, r.output), r.output
    assert not wd.exists() and not (tmp_path / "out").exists()


def test_a_deploy_starting_while_epic_status_looks_is_not_refused(tmp_path):
    """lock_holder holds a shared lock for an instant; a deploy taking the lock then waits for
    it instead of refusing (naming a dead holder's pid)."""
    import fcntl
    import threading

    from epic.spark.lock import LOCK_NAME, WorkdirLock

    (tmp_path / LOCK_NAME).write_text('{"pid": 999999, "host": "h", "started": 0}')
    fd = os.open(tmp_path / LOCK_NAME, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_SH)   # a status look in progress
    threading.Timer(0.1, lambda: os.close(fd)).start()
    WorkdirLock(str(tmp_path)).acquire().release()
    held = WorkdirLock(str(tmp_path)).acquire()   # a real holder is still refused
    try:
        with pytest.raises(EpicError, match="in use by another epic deploy"):
            WorkdirLock(str(tmp_path)).acquire()
    finally:
        held.release()


class _Query:
    """A query still active when its deploy's last document is written (Spark's ``isActive``)."""
    isActive = True
    lastProgress = None


@pytest.mark.parametrize("state", ["failed", "stopped", "finished"])
def test_a_deploy_that_ended_shows_no_node_running(tmp_path, state):
    """The last document of a deploy that failed or was stopped is written before its queries
    stop: its nodes are not running, in the document and in `epic status`'s table."""
    from pathlib import Path

    from epic.cli import load_topology
    from epic.spark.planner import DeployPlan
    from epic.spark.status import Stats

    root = Path(__file__).resolve().parent.parent
    t = load_topology(root / "topologies" / "sensor_averages.py",
                      params={"out": str(tmp_path / "out")})
    wd = _deploy_dir(tmp_path)
    plan = DeployPlan(t, str(wd), partitions=1, fuse=True, batch_rows=1000)
    plan.create_topics()
    names = [q.name for q in plan.queries()]
    stats = Stats(plan, {n: _Query() for n in names})
    assert all(n["active"] for n in stats.doc("running", 1.0)["nodes"].values())
    doc = stats.doc(state, 1.0)
    assert not any(n["active"] for n in doc["nodes"].values())
    (wd / "deploy.lock").write_text("")
    (wd / "status.json").write_text(json.dumps(doc))
    r = CliRunner().invoke(app, ["status", str(wd)], terminal_width=200)
    assert r.exit_code == 0 and state in r.output
    assert "running" not in r.output, r.output


def test_a_gone_deploy_shows_no_node_running(tmp_path):
    """A deploy killed while running left a document whose nodes were active: `epic status`
    says gone, and none of its nodes running."""
    wd = _deploy_dir(tmp_path)
    (wd / "deploy.lock").write_text("")
    node = {"kind": "window", "mode": "fused", "rows_in": 5, "rows_out": 2, "rows_per_s": 1.0,
            "batch_ms": 3, "batches": 1, "busy_ms": 3, "watermark": None, "ended": False,
            "active": True}
    (wd / "status.json").write_text(json.dumps(
        {"topology": "t", "state": "running", "pid": 1, "elapsed_s": 1.0,
         "nodes": {"avg": node}}))
    r = CliRunner().invoke(app, ["status", str(wd)], terminal_width=200)
    assert r.exit_code == 0 and "gone" in r.output and "stopped" in r.output
    assert "running" not in r.output.replace("no deploy is running", ""), r.output


def test_stop_reaches_a_first_deploy_that_is_still_starting(tmp_path):
    """A first deploy writes deploy.json once its session runs, seconds after its status says
    starting: `epic stop` meanwhile writes the request it will find (it holds the lock)."""
    wd = tmp_path / "wd"
    wd.mkdir()
    _stop_reaches(_holder(wd), wd)   # holds the lock, status says running; no deploy.json
    (wd / "STOP").unlink()
    r = CliRunner().invoke(app, ["stop", str(wd)])   # nobody holds it now: not a deploy's
    assert r.exit_code == 1 and "no deploy.json" in r.output
    assert not (wd / "STOP").exists()


def _sensor_topology(tmp_path, **params):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    from epic.cli import load_topology

    return load_topology(os.path.join(root, "topologies", "sensor_averages.py"),
                         params={"out": str(tmp_path / "out"), **params})


@pytest.mark.parametrize(("rerun", "words"), [
    (["-p", "out={out2}"],
     r"holds a deploy of topology .sensor_averages. .*rerun with the same parameters"),
    (["--fuse"], r"was deployed without --fuse"),
])
def test_a_refused_rerun_leaves_the_work_directory_as_it_was(tmp_path, rerun, words):
    """A rerun with other topology parameters (here the output path) or another --fuse is
    refused before the session starts, naming what differs; status.json stays as it was."""
    from epic.spark.runtime import _manifest

    wd = tmp_path / "wd"
    wd.mkdir()
    _manifest(str(wd), _sensor_topology(tmp_path), 1)
    finished = {"topology": "sensor_averages", "state": "finished", "pid": 1, "elapsed_s": 3.0,
                "nodes": {}}
    (wd / "status.json").write_text(json.dumps(finished))
    (wd / "deploy.lock").write_text("")   # as a deploy that ended leaves it
    before = sorted(os.listdir(wd))
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    args = [a.format(out2=tmp_path / "out2") for a in rerun]
    r = CliRunner().invoke(app, ["deploy", os.path.join(root, "topologies", "sensor_averages.py"),
                                 "-w", str(wd), "--no-progress",
                                 *(["-p", f"out={tmp_path / 'out'}"] if "-p" not in args else []),
                                 *args], terminal_width=300)
    assert r.exit_code == 1, r.output
    assert re.search(words, " ".join(r.output.split())), r.output
    assert json.loads((wd / "status.json").read_text()) == finished
    assert sorted(os.listdir(wd)) == before


SETTINGS = """
import json, sys
from epic.cli import load_topology
from epic.spark.digest import node_settings
print(json.dumps({f: node_settings(load_topology(f, params={"out": sys.argv[1]}))
                  for f in sys.argv[2:]}))
"""


def test_the_same_parameters_give_the_same_settings_in_any_process(tmp_path):
    """The digest of each node's settings is the same in processes with other hash seeds (no
    memory addresses, no set order), and another parameter changes some nodes' digests."""
    from epic.spark.digest import node_settings

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    files = [os.path.join(root, "topologies", f) for f in ("sensor_averages.py", "monitoring.py",
                                                           "debs2013.py")]
    runs = []
    for seed in ("1", "4242"):
        r = subprocess.run([sys.executable, "-c", SETTINGS, str(tmp_path / "out"), *files],
                           capture_output=True, text=True, timeout=300, cwd=root,
                           env={**os.environ, "PYTHONHASHSEED": seed})
        assert r.returncode == 0, r.stderr
        runs.append(json.loads(r.stdout))
    assert runs[0] == runs[1]
    a = node_settings(_sensor_topology(tmp_path))
    assert a == runs[0][files[0]]
    b = node_settings(_sensor_topology(tmp_path, out=str(tmp_path / "elsewhere")))
    assert {n for n in a if a[n] != b[n]} and {n for n in a if a[n] == b[n]}


@pytest.mark.parametrize(("option", "words"), [
    (["--partitions", "0"], "--partitions 0: give a whole number of at least 1"),
    (["--trigger", "-1"], "--trigger -1.0: give seconds"),
    (["--timeout", "0"], "--timeout 0.0: give a number of seconds above 0"),
])
def test_deploy_options_out_of_range_are_refused(tmp_path, option, words):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    wd = tmp_path / "wd"
    r = CliRunner().invoke(app, ["deploy", os.path.join(root, "topologies", "sensor_averages.py"),
                                 "-w", str(wd), "--no-progress", *option,
                                 "-p", f"out={tmp_path / 'out'}"], terminal_width=300)
    assert r.exit_code == 1 and words in r.output, r.output
    assert not wd.exists()


def test_a_session_that_cannot_start_is_one_error_line_and_a_failed_status(tmp_path):
    """`--master nonsense`: one error line naming the master (no Java stack without --debug),
    and `epic status` says failed with that error, not gone."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    wd = tmp_path / "wd"
    r = subprocess.run([sys.executable, "-m", "epic", "deploy",
                        os.path.join(root, "topologies", "sensor_averages.py"), "-w", str(wd),
                        "--no-progress", "--master", "nonsense", "-p",
                        f"out={tmp_path / 'out'}"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 1
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "cannot start the Spark session (master 'nonsense')" in lines[0]
    assert "Traceback" not in r.stderr and "╭" not in r.stderr, r.stderr[-2000:]
    doc = read_status(str(wd))
    assert doc["state"] == "failed" and "cannot start the Spark session" in doc["error"]


HOLD_ELSEWHERE = """
import json, os, sys, time
from epic.spark.lock import WorkdirLock
wd, ck = sys.argv[1], sys.argv[2]
lock = WorkdirLock(ck, wd).acquire()
with open(os.path.join(wd, "status.json"), "w") as f:
    json.dump({"topology": "t", "state": "starting", "pid": os.getpid(), "elapsed_s": 0.0,
               "nodes": {}, "lock_dir": ck}, f)
print("held", flush=True)
time.sleep(600)
"""


def test_stop_reaches_a_starting_deploy_whose_lock_is_in_its_checkpoint_dir(tmp_path):
    wd, ck = tmp_path / "wd", tmp_path / "ck"
    wd.mkdir()
    ck.mkdir()
    _stop_reaches(_holder(wd, HOLD_ELSEWHERE, ck), wd)


def _stop_reaches(p, wd):
    """`epic stop wd` writes its request while ``p`` holds the lock; then ``p`` is killed."""
    try:
        r = CliRunner().invoke(app, ["stop", str(wd)])
        assert r.exit_code == 0, r.output
        assert (wd / "STOP").exists()
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()


@pytest.mark.parametrize(("exc", "state"), [
    ("refused", None), ("refused_rerun", "finished"), ("oserror", "failed"), ("bug", "failed")])
def test_an_error_before_the_queries_start_leaves_a_true_status(tmp_path, monkeypatch, exc,
                                                                 state):
    """Before any query starts: a refusal leaves the status as it was (none for a first
    deploy), any other error says failed with the error; the error itself is raised as it is."""
    import epic.spark.runtime as rt

    errors = {"refused": rt.Refused("holds checkpoints of 1 query"),
              "refused_rerun": rt.Refused("holds checkpoints of 1 query"),
              "oserror": OSError(28, "No space left on device"),
              "bug": TypeError("unexpected keyword")}
    wd = tmp_path / "wd"
    wd.mkdir()
    if exc == "refused_rerun":
        (wd / "status.json").write_text(json.dumps({"topology": "sensor_averages",
                                                    "state": "finished", "nodes": {}}))

    def fail(*args, **kwargs):
        assert json.loads((wd / "status.json").read_text())["state"] == "starting"
        raise errors[exc]

    monkeypatch.setattr(rt, "_prepare", fail)
    t = _sensor_topology(tmp_path)
    with pytest.raises(type(errors[exc])) as info:
        rt._deploy_locked(t, str(wd), str(wd), master=None, ui=False, fuse=False,
                          retention=True, progress=False, console=None, spark=None,
                          batch_rows=None, partitions=None, trigger_interval=0.1,
                          poll_interval=0.1, timeout=None)
    assert info.value is errors[exc]
    if state is None:
        assert not (wd / "status.json").exists()
        return
    doc = json.loads((wd / "status.json").read_text())
    assert doc["state"] == state
    if state == "failed":
        assert str(errors[exc]) in doc["error"]
