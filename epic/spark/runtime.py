"""``epic deploy``: a topology on Spark Structured Streaming, queries linked by Arrow topics.

:func:`deploy` checks and locks the work directory, builds (or joins) the Spark session, computes
the plan once (:class:`~epic.spark.planner.DeployPlan`: queries, modes, the work directory's
layout), starts the queries (:class:`~epic.spark.launcher.Launcher`), and watches them until every
sink committed its end of stream, a ``STOP`` file appears, a query fails or the timeout passes,
keeping ``status.json`` up to date (:mod:`epic.spark.status`). See ``docs/deploy.md``.
"""

from __future__ import annotations

import json
import os
import sys
import time as _time
import uuid
from dataclasses import dataclass, field


from epic.atomic import atomic_json
from epic.errors import EpicError
from epic.spark.launcher import Launcher
from epic.spark.planner import DeployPlan, plan_modes
from epic.spark.trace import event, span
from epic.spark.status import STATUS, STOP, Stats, read_status, request_stop, status_table
from epic.topics import Topic
from epic.topology import Topology

__all__ = ["deploy", "DeployResult", "read_status", "request_stop", "plan_modes"]


@dataclass
class DeployResult:
    """What a finished deploy produced.

    Attributes:
        topology: the topology's name.
        workdir: the work directory.
        seconds: wall time from the first query start to the last sink's end of stream.
        collected: tables of ``collect_sink`` sinks, by sink name.
        status: the final status document (as in ``status.json``).
    """

    topology: str
    workdir: str
    seconds: float
    collected: dict = field(default_factory=dict)
    status: dict = field(default_factory=dict)


def _check_workdir(workdir: str) -> str:
    from epic.errors import SpecError
    from epic.paths import local_path

    try:
        wd = os.path.abspath(local_path(workdir, "work directory"))
    except SpecError as exc:
        raise EpicError(str(exc)) from None
    try:
        os.makedirs(wd, exist_ok=True)
        probe = os.path.join(wd, f".probe-{uuid.uuid4().hex}")
        with open(probe, "w") as f:
            f.write("x")
        os.remove(probe)
    except OSError as exc:
        raise EpicError(f"work directory {workdir} is not writable ({exc.strerror or exc}); "
                        "choose another --workdir") from None
    return wd


def _manifest(wd: str, topology: Topology, partitions: int, fuse: bool = False) -> int:
    p = os.path.join(wd, "deploy.json")
    if os.path.exists(p):
        with open(p) as f:
            m = json.load(f)
        if m.get("topology") != topology.name:
            raise EpicError(f"{wd} holds a deploy of topology {m.get('topology')!r}, not "
                            f"{topology.name!r}; use another --workdir")
        if bool(m.get("fuse", False)) != bool(fuse):
            raise EpicError(f"{wd} was deployed {'with' if m.get('fuse') else 'without'} --fuse;"
                            " rerun it the same way (its checkpoints are per query)")
        if m.get("io", "rows") != "direct":
            # Written by an epic that still had `--io rows` (its topics' layout and state
            # partitions differ; a deploy.json without "io" is one of those too).
            raise EpicError(f"{wd} was deployed with --io {m.get('io', 'rows')}, an I/O mode epic "
                            "no longer has; deploy into a fresh --workdir")
        return int(m["partitions"])
    doc = {"topology": topology.name, "partitions": partitions, "id": uuid.uuid4().hex,
           "nodes": [n.name for n in topology.topological_order()]}
    if fuse:
        doc["fuse"] = True
    doc["io"] = "direct"   # the layout generation (older work dirs say "rows" or nothing)
    atomic_json(p, doc)
    return partitions


def deploy(topology: Topology, workdir: str, *, master: str | None = None, ui: bool = False,
           fuse: bool = False, retention: bool = True,
           progress: bool = False, console=None, spark=None,
           batch_rows: int = 1_000_000, partitions: int | None = None,
           trigger_interval: float = 0.1, poll_interval: float = 0.25,
           timeout: float | None = None, conf: dict | None = None,
           archive: str | None = None) -> DeployResult:
    """Run ``topology`` on Spark, one streaming query per node, until every sink has ended.

    A finite input ends by itself: the call returns once every sink committed its end of stream.
    A live input runs until :func:`request_stop` (``epic stop WORKDIR``). Rerunning with the same
    ``workdir`` after a crash resumes from the checkpoints; outputs are exactly once.

    Args:
        topology: the topology.
        workdir: work directory (topics, checkpoints, state, status).
        master: Spark master URL (default ``local[*]``); with a cluster, ``workdir`` must be on
            storage every executor sees.
        ui: start the Spark UI.
        fuse: run chains of nodes in one query each (:func:`plan_groups`, docs/deploy.md); the
            work directory must always be deployed with the same choice.
        retention: delete a topic's segments once every query reading it
            has committed past them (each producer's newest batch stays); False keeps every
            topic whole (for inspection with ``epic topics``).
        progress: show a live per-node table (rich).
        console: rich console for progress (default: standard error).
        spark: an existing SparkSession to use (tests share one).
        batch_rows: rows per micro-batch read from a source or topic.
        partitions: partitions of keyed stateful nodes (default: the session's
            ``spark.sql.shuffle.partitions``); fixed at the first start of ``workdir``.
        trigger_interval: seconds between micro-batch triggers of each query.
        poll_interval: seconds between the driver's checks for completion and failures (the
            status document is refreshed at most once a second).
        timeout: give up (stop, raise) after this many seconds.
        conf: Spark settings (``--conf key=value``) for the session epic starts; they override
            epic's. The session's resolved settings are written to ``<workdir>/spark-conf.json``.
        archive: a packed environment (``epic pack``) whose Python the executors run
            (``spark.archives``, :mod:`epic.spark.ship`). With it, or a master that is not
            ``local``, a session epic starts ships epic and the topology's local code as
            ``spark.submit.pyFiles`` (``<workdir>/ship/*.zip``).

    Raises:
        EpicError: Java missing or too old, an unwritable work directory or output directory
            (:class:`~epic.errors.OutputError`), a work directory in use by another deploy (its
            pid and host), a topic whose schema changed, a corrupt topic segment or sink commit
            record (:class:`~epic.errors.InputError`), or a node that failed
            (:class:`~epic.errors.NodeFailure` text: node, function, micro-batch).
    """
    topology.validate(warn=False)
    if archive and spark is not None:
        raise EpicError("archive= applies to a session the deploy starts; pass spark=None")
    wd = _check_workdir(workdir)
    from epic.preflight import check_output_paths
    from epic.spark.lock import WorkdirLock

    lock = WorkdirLock(wd).acquire()  # before anything in wd changes; dropped even on SIGKILL
    try:
        check_output_paths(topology)  # before any query starts
        return _deploy_locked(topology, wd, master=master, ui=ui, fuse=fuse,
                              retention=retention, progress=progress, console=console,
                              spark=spark, batch_rows=batch_rows, partitions=partitions,
                              trigger_interval=trigger_interval, poll_interval=poll_interval,
                              timeout=timeout, conf=conf, archive=archive)
    finally:
        lock.release()


def _deploy_locked(topology: Topology, wd: str, *, master, ui, fuse, retention, progress,
                   console, spark, batch_rows, partitions, trigger_interval, poll_interval,
                   timeout, conf=None, archive=None) -> DeployResult:
    """:func:`deploy` once the work directory is checked and locked."""
    from pyspark import cloudpickle

    try:
        os.remove(os.path.join(wd, STOP))
    except FileNotFoundError:
        pass
    # Crash points (tests) kill the driver's process group, whichever process reaches them.
    os.environ["EPIC_DRIVER_PGID"] = str(os.getpgrp())
    if spark is None:
        from epic.spark.session import build_session
        from epic.spark.ship import shipping

        spark = build_session(master, ui=ui, conf=shipping(topology, wd, master=master,
                                                            archive=archive, conf=conf))
    elif conf:
        for k, v in conf.items():  # a shared session: only what can change at runtime
            if not spark.conf.isModifiable(k) and spark.conf.get(k, None) != v:
                raise EpicError(f"--conf {k}: the Spark session is already running and this "
                                "setting cannot change now; set it when the session starts")
            spark.conf.set(k, v)
    settings = dict(spark.sparkContext.getConf().getAll())
    settings.update(spark.conf.getAll)
    atomic_json(os.path.join(wd, "spark-conf.json"), dict(sorted(settings.items())))
    if partitions is None:
        partitions = int(spark.conf.get("spark.sql.shuffle.partitions"))
    partitions = _manifest(wd, topology, partitions, fuse)
    for sub in ("topics", "checkpoints", "state", "sinks"):
        os.makedirs(os.path.join(wd, sub), exist_ok=True)
    from epic.spark.ship import by_value_modules

    for m in by_value_modules(topology):
        try:
            cloudpickle.register_pickle_by_value(sys.modules[m])
        except (ValueError, KeyError):
            pass
    plan = DeployPlan(topology, wd, partitions=partitions, fuse=fuse, batch_rows=batch_rows,
                      retention=retention)
    plan.create_topics()
    launcher = Launcher(spark, plan, trigger_interval)
    stats = Stats(plan, launcher.queries)
    status_path = os.path.join(wd, STATUS)
    live = None
    if progress:
        from rich.console import Console
        from rich.live import Live

        live = Live(status_table(stats.doc("starting", 0.0)),
                    console=console or Console(stderr=True), refresh_per_second=4,
                    transient=False)
        live.start()
    start = _time.perf_counter()
    sinks = plan.sinks
    printed: dict[str, int] = {}
    state, error = "running", None
    event("deploy_start", topology.name)
    try:
        launcher.start_all()
        next_status = 0.0
        while True:
            elapsed = _time.perf_counter() - start
            # The status document parses every query's recent progress (JSON through py4j): at
            # most once a second; completion and failures are checked every poll.
            refresh = elapsed >= next_status
            if refresh:
                stats.update()
                next_status = elapsed + max(poll_interval, 1.0)
            launcher.print_console(printed)
            exc = launcher.failure()
            if exc is not None:
                state, error = "failed", str(exc)
                raise exc
            if all(launcher.sink_done(n) for n in sinks):
                event("sinks_done", topology.name)
                state = "finished"
                break
            if os.path.exists(os.path.join(wd, STOP)):
                state = "stopped"
                break
            if timeout is not None and elapsed > timeout:
                state, error = "failed", f"timed out after {timeout} s"
                raise EpicError(f"deploy of {topology.name!r} timed out after {timeout} s")
            if refresh:
                doc = stats.doc(state, elapsed)
                atomic_json(status_path, doc)
                if live is not None:
                    live.update(status_table(doc))
            _time.sleep(poll_interval)
    finally:
        elapsed = _time.perf_counter() - start
        try:
            stats.update()
            launcher.print_console(printed)
            doc = stats.doc(state if state != "running" else "failed", elapsed, error)
        except Exception:  # noqa: BLE001 - the status must not mask the real error
            doc = {"topology": topology.name, "state": "failed", "error": error, "nodes": {}}
        with span("stop", topology.name, "driver"):
            launcher.stop(drain=10.0 if state == "finished" else 0.0)
        if state == "finished":
            # Spooled source batches are only read by their own micro-batch (a replay spools
            # them again); the last one's files are left when the deploy ends right after it.
            import shutil

            shutil.rmtree(os.path.join(wd, "spool"), ignore_errors=True)
        atomic_json(status_path, doc)
        if live is not None:
            live.update(status_table(doc))
            live.stop()
    collected = {}
    from epic.sinks import CollectSink

    for n in sinks:
        if isinstance(n.sink, CollectSink):
            t = Topic.open(plan.sink_topic(n)).read_table()
            collected[n.name] = t
    return DeployResult(topology.name, wd, elapsed, collected, doc)
