"""`epic deploy` on a real standalone cluster (a master and two 1-core workers on loopback).

The daemons run without PYTHONPATH and the executors run the Python of an `epic pack` archive,
which has no epic: epic and the topologies' own packages reach them only through the deploy's
pyFiles. Each deploy is `epic deploy` in a subprocess (its own SparkSession on the cluster) and
must equal `epic run`; the DEBS deploy loses a worker, SIGKILLed while its executor has tasks in
flight, and must still finish with the same outputs. Every daemon is stopped by pid at the end,
also on failure (scripts/cluster.py). The three deploys overlap (fixture ``deploys``): the
DEBS driver starts its session while the two examples run, which keeps the module under about
two minutes; the two tests check the examples' and the DEBS deploy's results.
"""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
import tarfile
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

import epic
from epic.cli import load_topology

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.cluster]

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
from cluster import Cluster, free_port, process_tree  # noqa: E402

# The driver runs `epic deploy` through the CLI's entry point with this worktree first on its
# PYTHONPATH (also for its JVM's planner processes); the cluster's daemons and so the executors
# run without one: they get epic only from the shipped epic.zip.
DRIVER = "import sys; sys.argv[0] = 'epic'; from epic.cli import main; main()"


@pytest.fixture(scope="module")
def packing(tmp_path_factory):
    """`epic pack` started in the background (about 6 s), so that it runs while the cluster's
    daemons start; :func:`archive` waits for it."""
    out = tmp_path_factory.mktemp("pack") / "env.tar.gz"
    p = subprocess.Popen([sys.executable, "-c", DRIVER, "pack", "-o", str(out)], env=_env(),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        yield p, out
    finally:
        if p.poll() is None:
            p.kill()
        p.communicate()


#: Every JVM of the test (daemons, drivers, executors) compiles with C1 only and collects with one
#: thread: on two cores, ten short-lived JVMs otherwise spend more CPU in the C2 compiler than
#: the deploys spend working (measured: the module took 134 s with Spark's defaults, 101 s with
#: these). Nothing the test checks depends on the JIT.
JVM_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


@pytest.fixture(scope="module")
def cluster(packing, tmp_path_factory):
    """Master + two 1-core, 1 GB workers; stopped by pid when the module ends, pass or fail."""
    c = Cluster(2, cores=1, memory="1g", root=str(tmp_path_factory.mktemp("cluster")),
                java_opts=JVM_OPTS)
    try:
        c.start()
        yield c
    finally:
        c.stop()
        left = [p for p in [c.master, *c.workers] if p is not None and p.poll() is None]
        assert not left, f"daemons still running: {[p.pid for p in left]}"


@pytest.fixture(scope="module")
def archive(packing):
    """The `epic pack` output, checked: pyarrow in, epic, debs2013 and pyspark out."""
    p, out = packing
    text, _ = p.communicate(timeout=120)
    assert p.returncode == 0, text
    with tarfile.open(out) as tar:
        names = tar.getnames()
    site = [n for n in names if "/site-packages/" in n]
    assert any("/site-packages/pyarrow/" in n for n in site)
    assert not any(n.split("/site-packages/")[1].split("/")[0].startswith(("epic", "debs2013",
                                                                           "pyspark"))
                   for n in site), "the archive must not hold epic, debs2013 or pyspark"
    return out


def _env() -> dict:
    env = {k: v for k, v in os.environ.items()
           if k != "PYTHONPATH" and not k.startswith("PYSPARK_")}
    env["PYTHONPATH"] = str(ROOT)
    return env


def _deploy(cluster, topology: Path, wd: Path, params: dict, archive: Path, *extra: str,
            ui_port: int | None = None) -> subprocess.Popen:
    cmd = [sys.executable, "-c", DRIVER, "deploy", str(topology),
           "-w", str(wd), "--master", cluster.url, "--archive", str(archive), "--fuse",
           "--no-progress", "--timeout", "150",
           "--conf", "spark.executor.memory=512m", "--conf", "spark.driver.host=127.0.0.1",
           "--conf", f"spark.driver.extraJavaOptions={JVM_OPTS}",
           "--conf", f"spark.executor.extraJavaOptions={JVM_OPTS}"]
    if ui_port:
        cmd += ["--conf", "spark.ui.enabled=true", "--conf", f"spark.ui.port={ui_port}"]
    cmd += list(extra)
    for k, v in params.items():
        cmd += ["-p", f"{k}={v}"]
    log = open(wd.parent / f"{wd.name}.log", "w")
    return subprocess.Popen(cmd, env=_env(), stdout=log, stderr=subprocess.STDOUT,
                            cwd=str(wd.parent), start_new_session=True)


def _finish(p: subprocess.Popen, wd: Path, timeout: float = 170) -> tuple[int, str]:
    """Wait for a deploy (kill its process tree after ``timeout``); its exit code and log."""
    try:
        p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        for pid in reversed(process_tree(p.pid)):
            os.kill(pid, 9)
        p.wait()
    return p.returncode, (wd.parent / f"{wd.name}.log").read_text()


def _value(x: str):
    try:
        return (0, int(x))
    except ValueError:
        try:
            return (1, float(x))
        except ValueError:
            return (2, x)


def _rows(lines: list[bytes]) -> list[tuple]:
    return sorted(tuple(_value(x) for x in r)
                  for r in csv.reader(ln.decode() for ln in lines))


def _same_files(ref: Path, dep: Path) -> list[str]:
    """Every CSV file of ``ref`` is in ``dep`` with the same header and the same rows in any
    order, floats equal to 1e-9. Rows equal as text are matched as text (the DEBS files hold
    1.5 M rows: parsing them all took ~40 s); only the rest are parsed and compared as values."""
    files = sorted(p.name for p in ref.glob("*.csv"))
    assert files and sorted(p.name for p in dep.glob("*.csv")) == files
    for name in files:
        a, b = (ref / name).read_bytes(), (dep / name).read_bytes()
        assert b'"' not in a + b, f"{name}: quoted fields (may span lines): compare by hand"
        a, b = a.splitlines(), b.splitlines()
        assert a[:1] == b[:1] and len(a) == len(b), name
        left, right = Counter(a[1:]), Counter(b[1:])
        x_rows = _rows(list((left - right).elements()))
        y_rows = _rows(list((right - left).elements()))
        assert len(x_rows) == len(y_rows), name
        for x, y in zip(x_rows, y_rows):
            assert len(x) == len(y) and all(
                math.isclose(u[1], v[1], rel_tol=1e-9, abs_tol=1e-12)
                if u[0] == v[0] == 1 else u == v for u, v in zip(x, y)), (name, x, y)
    return files


def _reference(name: str, params: dict, out: Path) -> None:
    epic.run(load_topology(ROOT / "topologies" / f"{name}.py", params={**params, "out": str(out)}))


def _executor_pythons(cluster) -> list[int]:
    """Python processes under the cluster's executors."""
    out = []
    for i in range(len(cluster.workers)):
        for ex in cluster.executor_pids(i):
            for pid in process_tree(ex)[1:]:
                try:
                    exe = os.readlink(f"/proc/{pid}/exe")
                except OSError:
                    continue
                if "python" in os.path.basename(exe):
                    out.append(pid)
    return out


def _api(port: int, path: str):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/{path}", timeout=2) as r:
        return json.load(r)


def _executor_jvm(cluster, i: int, app: str, ex: str) -> int | None:
    for pid in cluster.executor_pids(i, app):
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().decode().split("\0")
        except OSError:
            continue
        if "--executor-id" in cmd and cmd[cmd.index("--executor-id") + 1] == ex:
            return pid
    return None


def _kill_busy_worker(cluster, ui: int):
    """SIGKILL the worker of an executor of the app behind UI port ``ui`` that has tasks in
    flight and its Python started; ``(worker, executor id, active tasks, pids)`` or None."""
    try:
        app = _api(ui, "applications")[0]["id"]
        executors = _api(ui, f"applications/{app}/executors")
    except (OSError, ValueError, IndexError, KeyError):
        return None
    busy = {e["id"]: e["activeTasks"] for e in executors
            if e["id"] != "driver" and e["activeTasks"] > 0}
    for i in range(len(cluster.workers)):
        for ex in busy:
            jvm = _executor_jvm(cluster, i, app, ex)
            if jvm is not None and len(process_tree(jvm)) > 1:  # its Python runs
                return i, ex, busy[ex], cluster.kill_worker(i)
    return None


EXAMPLES = {"sensor_averages": {}, "parallel_split": {"replicas": "2", "events": "20000"}}


@pytest.fixture(scope="module")
def deploys(cluster, archive, tmp_path_factory):
    """The three deploys, overlapping: sensor_averages and parallel_split first (one core, so
    one worker, each), then, once both have started their first query, a short DEBS game
    (fused), whose driver starts its session meanwhile and gets its executors as the examples
    free the workers' cores. The test process computes `epic run`'s outputs meanwhile, records
    the executors' Python processes, and SIGKILLs a worker (with its executor and Pythons)
    while the DEBS driver's REST API shows tasks in flight on its executor there (a 1-core
    worker then holds no other deploy's executor)."""
    from debs2013.generator import generate_game

    tmp = tmp_path_factory.mktemp("deploys")
    game = generate_game(tmp / "game.csv", minutes=0.06, seed=3).game_path
    runs = {**EXAMPLES, "debs2013": {"input": str(game), "q1_period": "1", "q2_period": "1"}}
    ui = free_port()
    procs = {}

    def start(name):
        wd = tmp / f"{name}-wd"
        extra = ["--conf", "spark.cores.max=1"] if name in EXAMPLES else []
        procs[name] = (_deploy(cluster, ROOT / "topologies" / f"{name}.py", wd,
                               {**runs[name], "out": str(tmp / f"{name}-dep")}, archive,
                               *extra, ui_port=ui if name == "debs2013" else None), wd)

    seen, killed, look = {}, None, 0.0
    try:
        for name in EXAMPLES:
            start(name)
        for name, params in runs.items():  # while the drivers' JVMs start
            _reference(name, params, tmp / f"{name}-ref")
        t0 = time.monotonic()
        while time.monotonic() < t0 + 170:
            if "debs2013" not in procs and (
                    all(any((wd / "checkpoints").glob("*/offsets/*")) for _, wd in procs.values())
                    or time.monotonic() > t0 + 45
                    or any(p.poll() is not None for p, _ in procs.values())):
                start("debs2013")  # both example sessions are up, their first queries run
            if not any(p.poll() is None for p, _ in procs.values()):
                break
            if killed is None and "debs2013" in procs and procs["debs2013"][0].poll() is None:
                killed = _kill_busy_worker(cluster, ui)
            if time.monotonic() >= look:
                look = time.monotonic() + 0.3
                for pid in _executor_pythons(cluster):
                    try:
                        maps = Path(f"/proc/{pid}/maps").read_text()
                        cwd = os.readlink(f"/proc/{pid}/cwd")
                        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                    except OSError:
                        continue
                    if "/pyarrow/" in maps:
                        seen[pid] = (cwd, maps, environ)
            time.sleep(0.05)
    finally:
        done = {name: _finish(p, wd) for name, (p, wd) in procs.items()}
    return {"tmp": tmp, "done": done, "seen": seen, "killed": killed,
            "wd": {name: wd for name, (_, wd) in procs.items()}}


def test_examples_equal_run_with_shipped_code(deploys, archive):
    """sensor_averages and parallel_split equal epic run; while they ran, the executors' Python
    processes were the archive's (cwd holds ``environment/``, pyarrow mapped from its
    site-packages) with no directory on PYTHONPATH: epic is the shipped epic.zip."""
    tmp = deploys["tmp"]
    for name in EXAMPLES:
        code, text = deploys["done"][name]
        assert code == 0, text[-4000:]
        assert _same_files(tmp / f"{name}-ref", tmp / f"{name}-dep")
        wd = deploys["wd"][name]
        conf = json.loads((wd / "spark-conf.json").read_text())
        assert conf["spark.submit.pyFiles"].split(",")[:2] == [
            str(wd / "ship" / "epic.zip"), str(wd / "ship" / "topology.zip")]
        assert conf["spark.archives"] == f"{archive}#environment"
        # --conf spark.driver.extraJavaOptions is kept beside epic's quiet log configuration
        java = conf["spark.driver.extraJavaOptions"]
        assert JVM_OPTS in java and "-Dlog4j2.configurationFile=" in java, java
    seen = deploys["seen"]
    assert seen, "no executor Python with pyarrow loaded was seen"
    for pid, (cwd, maps, environ) in seen.items():
        assert os.path.isfile(os.path.join(cwd, "environment", "pyvenv.cfg")), cwd
        libs = {line.split()[-1] for line in maps.splitlines() if "/pyarrow/" in line}
        assert all(lib.startswith(os.path.join(cwd, "environment") + "/") for lib in libs), libs
        path = [e for e in environ if e.startswith(b"PYTHONPATH=")]
        entries = [x for x in path[0][11:].decode().split(":") if x] if path else []
        # pyspark.zip, py4j, Spark's jar: no directory (the worker adds the shipped zips to
        # sys.path itself); the archive has no epic and no system site-packages, so epic can
        # only come from epic.zip.
        assert entries and all(x.endswith((".zip", ".jar")) for x in entries), entries


def test_debs_survives_losing_a_busy_worker(deploys, cluster):
    """The DEBS deploy lost a worker (with its executor and Pythons), SIGKILLed while the
    driver's REST API showed tasks running on that executor; it finished and its 15 files
    equal epic run's."""
    code, text = deploys["done"]["debs2013"]
    assert code == 0, text[-4000:]
    assert deploys["killed"] is not None, "no worker was seen with tasks in flight"
    i, ex, active, pids = deploys["killed"]
    assert active > 0 and len(pids) >= 3  # worker JVM, executor JVM, Python daemon/workers
    assert "Lost executor" in text or "ExecutorLostFailure" in text, text[-3000:]
    assert len(cluster.alive_workers()) == 1, cluster.state()
    tmp = deploys["tmp"]
    assert len(_same_files(tmp / "debs2013-ref", tmp / "debs2013-dep")) == 15
