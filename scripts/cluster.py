#!/usr/bin/env python3
"""A Spark standalone cluster on this machine: one master and N workers from the installed pyspark.

pip's pyspark has no ``start-master.sh``; this starts the daemons with its ``bin/spark-class``
(``org.apache.spark.deploy.master.Master`` / ``...worker.Worker``) on free loopback ports,
waits until the master lists every worker ALIVE, and stops every process it started by pid
(its whole process tree: worker -> executor JVM -> Python daemon and workers), also when
the caller fails. Used by ``tests/spark/test_cluster.py``; usable by hand:

    .venv/bin/python scripts/cluster.py --workers 2      # prints the master URL, Ctrl-C stops
    epic deploy topologies/sensor_averages.py -w /tmp/wd --master spark://127.0.0.1:PORT

The daemons get this environment without ``PYTHONPATH`` and ``PYSPARK_*`` (so executors see
only what the deploy ships them, docs/cluster.md).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

__all__ = ["Cluster", "free_port", "process_tree", "spark_home"]


def spark_home() -> str:
    """The installed pyspark's directory (pip's SPARK_HOME)."""
    import pyspark

    return os.path.dirname(os.path.abspath(pyspark.__file__))


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on now (the kernel's pick)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids.setdefault(ppid, []).append(int(d))
    return kids


def process_tree(pid: int) -> list[int]:
    """``pid`` and all its descendants (from /proc), parents first."""
    kids = _children()
    out, todo = [], [pid]
    while todo:
        p = todo.pop(0)
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def kill_tree(pid: int, sig: int = signal.SIGKILL) -> list[int]:
    """Send ``sig`` to ``pid`` and its descendants (collected first, so none is re-parented away
    before it is signalled); returns the pids signalled."""
    pids = process_tree(pid)
    for p in reversed(pids):
        try:
            os.kill(p, sig)
        except ProcessLookupError:
            pass
    return pids


class Cluster:
    """A standalone master and ``workers`` workers on ``host``, each with ``cores`` cores.

    Args:
        workers: how many workers.
        cores: cores per worker.
        memory: memory per worker (``1g``).
        root: directory for the daemons' logs and work dirs (default: a new temp dir).
        host: the address every daemon binds to.
        java_opts: JVM options of the master and workers (``SPARK_DAEMON_JAVA_OPTS``); an
            executor's come from the application (``spark.executor.extraJavaOptions``).
    """

    def __init__(self, workers: int = 2, *, cores: int = 1, memory: str = "1g",
                 root: str | None = None, host: str = "127.0.0.1", java_opts: str = ""):
        self.n, self.cores, self.memory, self.host = workers, cores, memory, host
        self.java_opts = java_opts
        self.root = Path(root or tempfile.mkdtemp(prefix="epic-cluster-"))
        self.master_port = self.master_ui = 0
        self.master: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen] = []
        self.worker_ui: list[int] = []
        self._logs = []

    # ------------------------------------------------------------------ start / stop

    @property
    def url(self) -> str:
        """The master URL for ``--master``."""
        return f"spark://{self.host}:{self.master_port}"

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if k != "PYTHONPATH" and not k.startswith("PYSPARK_")}
        env["SPARK_HOME"] = spark_home()
        env["SPARK_LOCAL_IP"] = self.host
        env["SPARK_LOG_DIR"] = str(self.root / "logs")
        # The daemons' own JVM heap; executors get --memory.
        env.setdefault("SPARK_DAEMON_MEMORY", "256m")
        if self.java_opts:
            env["SPARK_DAEMON_JAVA_OPTS"] = self.java_opts
        return env

    def _spawn(self, name: str, cls: str, *args: str) -> subprocess.Popen:
        log = open(self.root / f"{name}.log", "wb")
        self._logs.append(log)
        cmd = [os.path.join(spark_home(), "bin", "spark-class"), cls, *args]
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=self._env(),
                                cwd=self.root, start_new_session=True)

    def start(self, timeout: float = 60.0) -> "Cluster":
        """Start the master, then the workers; return once all workers are ALIVE."""
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            self.master_port, self.master_ui = free_port(self.host), free_port(self.host)
            self.master = self._spawn("master", "org.apache.spark.deploy.master.Master",
                                      "--host", self.host, "--port", str(self.master_port),
                                      "--webui-port", str(self.master_ui))
            self._wait(lambda: self.state() is not None, timeout, "the master's web UI")
            for i in range(self.n):
                ui = free_port(self.host)
                self.worker_ui.append(ui)
                work = self.root / f"worker{i}"
                work.mkdir(exist_ok=True)
                self.workers.append(self._spawn(
                    f"worker{i}", "org.apache.spark.deploy.worker.Worker", self.url,
                    "--host", self.host, "--port", str(free_port(self.host)),
                    "--webui-port", str(ui), "--cores", str(self.cores),
                    "--memory", self.memory, "--work-dir", str(work)))
            self._wait(lambda: len(self.alive_workers()) == self.n, timeout,
                       f"{self.n} ALIVE workers")
        except BaseException:
            self.stop()
            raise
        return self

    def _wait(self, ok, timeout: float, what: str) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for p in [self.master, *self.workers]:
                if p is not None and p.poll() is not None:
                    raise RuntimeError(f"a Spark daemon exited ({p.args[1]}, code {p.returncode})"
                                       f"; see the logs in {self.root}")
            if ok():
                return
            time.sleep(0.2)
        raise TimeoutError(f"no {what} after {timeout} s; see the logs in {self.root}")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 5 s, every process tree this cluster started (by pid)."""
        procs = [p for p in [*self.workers, self.master] if p is not None]
        trees = {p.pid: process_tree(p.pid) for p in procs if p.poll() is None}
        for pids in trees.values():
            for pid in reversed(pids):
                try:
                    os.kill(pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        end = time.monotonic() + 5
        for pids in trees.values():
            for pid in pids:
                while _alive(pid) and time.monotonic() < end:
                    time.sleep(0.05)
                if _alive(pid):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
        for p in procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        for log in self._logs:
            log.close()
        self._logs = []

    def __enter__(self) -> "Cluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ------------------------------------------------------------------ state

    def state(self) -> dict | None:
        """The master's JSON (``http://host:webui/json/``), or None if it does not answer."""
        try:
            with urllib.request.urlopen(f"http://{self.host}:{self.master_ui}/json/",
                                        timeout=2) as r:
                return json.load(r)
        except (OSError, ValueError):
            return None

    def alive_workers(self) -> list[dict]:
        doc = self.state() or {}
        return [w for w in doc.get("workers", []) if w.get("state") == "ALIVE"]

    def worker_state(self, i: int) -> dict | None:
        """Worker ``i``'s JSON (its executors with their app ids)."""
        try:
            with urllib.request.urlopen(f"http://{self.host}:{self.worker_ui[i]}/json/",
                                        timeout=2) as r:
                return json.load(r)
        except (OSError, ValueError):
            return None

    def executor_pids(self, i: int, app: str | None = None) -> list[int]:
        """The executor JVMs running under worker ``i`` (children of its JVM); with ``app``,
        only that application's."""
        kids = _children()
        out = []
        for pid in kids.get(self.workers[i].pid, []):
            try:
                cmd = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            except OSError:
                continue
            if b"org.apache.spark.executor.CoarseGrainedExecutorBackend" not in cmd:
                continue
            if app is None or app.encode() in cmd:
                out.append(pid)
        return out

    def kill_worker(self, i: int) -> list[int]:
        """SIGKILL worker ``i`` with its executors and their Python processes."""
        pids = kill_tree(self.workers[i].pid)
        self.workers[i].wait(timeout=10)
        return pids


def main() -> None:  # pragma: no cover - by hand
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--cores", type=int, default=1)
    ap.add_argument("--memory", default="1g")
    ap.add_argument("--root", default=None, help="logs and work dirs (default: a temp dir)")
    a = ap.parse_args()

    def stop(signum, frame):   # SIGTERM (kill, a job control's stop): as Ctrl-C, daemons too
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)
    with Cluster(a.workers, cores=a.cores, memory=a.memory, root=a.root) as c:
        print(f"master {c.url} (web UI http://{c.host}:{c.master_ui}), {a.workers} workers; "
              f"logs in {c.root}. Ctrl-C (or SIGTERM) stops them.", flush=True)
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
