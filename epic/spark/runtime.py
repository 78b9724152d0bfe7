"""``epic deploy``: a topology on Spark Structured Streaming, queries linked by Arrow topics.

:func:`deploy` checks and locks the work directory, builds (or joins) the Spark session, computes
the plan once (:class:`~epic.spark.planner.DeployPlan`: queries, modes, the work directory's
layout), starts the queries (:class:`~epic.spark.launcher.Launcher`), and watches them until every
sink committed its end of stream, a ``STOP`` file appears, a query fails or the timeout passes,
keeping ``status.json`` up to date (:mod:`epic.spark.status`). See ``docs/deploy.md``.
"""

from __future__ import annotations

import json
import operator
import os
import re
import sys
import time as _time
import uuid
from dataclasses import dataclass, field

import pyarrow as pa

from epic.atomic import atomic_json
from epic.errors import EpicError
from epic.spark.digest import node_settings
from epic.spark.launcher import Launcher
from epic.spark.planner import (BACKGROUND_NICE_CONF, BRANCH_TASKS_CONF, SOURCE_FIRST_CONF,
                                SPLIT_SECONDS_CONF, DeployPlan, plan_modes)
from epic.spark.trace import event, span
from epic.spark.status import STATUS, STOP, Stats, read_status, request_stop, status_table
from epic.topics import Topic
from epic.topology import Topology

__all__ = ["deploy", "DeployResult", "read_status", "request_stop", "plan_modes", "local_jit"]


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
    """The work directory as epic addresses it: an absolute local path, or a URI of a store
    pyarrow reaches (``s3://bucket/prefix``, ``hdfs://...``), checked writable (a probe file)."""
    from epic.errors import SpecError
    from epic.paths import is_remote, workdir_path

    try:
        wd = workdir_path(workdir)
        if is_remote(wd):
            from epic.storage import resolve

            loc = resolve(wd, "work directory")
    except SpecError as exc:
        raise EpicError(str(exc)) from None
    try:
        if is_remote(wd):
            loc.makedirs()
            probe = loc.join(f".probe-{uuid.uuid4().hex}")
            probe.publish(b"x")
            probe.delete()
            return wd
        wd = os.path.abspath(wd)
        os.makedirs(wd, exist_ok=True)
        probe = os.path.join(wd, f".probe-{uuid.uuid4().hex}")
        with open(probe, "w") as f:
            f.write("x")
        os.remove(probe)
    except OSError as exc:
        raise EpicError(f"work directory {workdir} is not writable ({exc.strerror or exc}); "
                        "choose another --workdir") from None
    return wd


def default_checkpoint_dir(workdir: str) -> str:
    """Where a deploy of the remote work directory ``workdir`` keeps its Spark checkpoints on
    the driver's machine by default: ``$XDG_CACHE_HOME/epic/checkpoints/<name>-<hash>`` (or
    ``~/.cache/...``), the same directory for the same URI at every restart.

    >>> default_checkpoint_dir("s3://bucket/wd").split("/")[-1]
    'bucket_wd-5f79f30eb8d0'
    """
    import hashlib
    import re

    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", workdir.split("://", 1)[-1]).strip("_")[-80:]
    digest = hashlib.sha1(workdir.encode()).hexdigest()[:12]
    return os.path.join(cache, "epic", "checkpoints", f"{slug}-{digest}")


def _driver_dir(wd: str, checkpoint_dir: str | None) -> str:
    """The driver-local directory holding ``checkpoints/``, the deploy lock and ``ship/``: the
    work directory itself when it is local and no ``checkpoint_dir`` is given (the classic
    layout), else ``checkpoint_dir`` or :func:`default_checkpoint_dir`."""
    from epic.paths import is_remote

    if checkpoint_dir is None:
        if not is_remote(wd):
            return wd
        checkpoint_dir = default_checkpoint_dir(wd)
    from epic.errors import SpecError
    from epic.paths import local_path

    try:
        d = os.path.abspath(local_path(checkpoint_dir, "--checkpoint-dir"))
    except SpecError as exc:
        raise EpicError(f"{exc} (Spark's checkpoints and the deploy lock stay on the driver's "
                        "disk: pip's pyspark has no Hadoop connector for object stores)") from None
    try:
        os.makedirs(d, exist_ok=True)
    except OSError as exc:
        raise EpicError(f"checkpoint directory {d} cannot be created ({exc.strerror or exc}); "
                        "give another --checkpoint-dir") from None
    return d


#: In a separate checkpoint directory: the deploy whose checkpoints it holds (a copy of the
#: work directory's ``deploy.json``).
OWNER = "deploy.json"


def _read_json(path: str):
    """A JSON file of the work directory (a path or URI); None if it does not exist."""
    from epic.paths import is_remote

    if not is_remote(path):
        if not os.path.exists(path):
            return None
        with open(path) as f:
            return json.load(f)
    from epic.storage import resolve

    loc = resolve(path)
    try:
        return loc.read_json()  # an object being replaced is read again, not cut
    except FileNotFoundError:
        return None


def _write_json(path: str, doc, indent: int | None = 1) -> None:
    """Write a JSON file of the work directory atomically, by its store's rule."""
    from epic.paths import is_remote

    if not is_remote(path):
        atomic_json(path, doc, indent=indent)
        return
    from epic.storage import resolve

    loc = resolve(path)
    atomic_json(loc.path, doc, fs=loc.fs, indent=indent)


def _check_driver_dir(wd: str, driver: str, existing: dict | None) -> None:
    """Refuse a restart whose Spark checkpoints are not where the work directory's deploy left
    them (a remote work directory, or ``--checkpoint-dir``): the queries would restart at batch
    0 over committed topics and state (duplicates or losses), or resume checkpoints of another
    deploy."""
    if driver == wd:
        return
    owner = _read_json(os.path.join(driver, OWNER))
    if existing is None:
        has = os.path.isdir(os.path.join(driver, "checkpoints")) and os.listdir(
            os.path.join(driver, "checkpoints"))
        if owner is not None and has:
            raise EpicError(
                f"checkpoint directory {driver} holds the Spark checkpoints of deploy "
                f"{owner.get('id')} of {owner.get('workdir')!r}, but work directory {wd} holds "
                "no deploy (deleted?): they would resume a stream that no longer exists. "
                f"Delete {driver}, or give another --checkpoint-dir")
        return
    if owner is None or owner.get("id") != existing.get("id"):
        where = existing.get("checkpoint_dir")
        host = existing.get("driver_host")
        if where is None:  # a local work directory deployed with its checkpoints inside
            raise EpicError(
                f"work directory {wd} holds deploy {existing.get('id')}, whose Spark checkpoints "
                f"are in {wd}/checkpoints, not in {driver}: rerun it without --checkpoint-dir, "
                "or deploy into a fresh --workdir")
        raise EpicError(
            f"work directory {wd} holds deploy {existing.get('id')}, whose Spark checkpoints "
            f"(offset and commit logs) are on its driver's disk"
            + (f": {where} on host {host}" if where else "")
            + f", not in {driver} on this machine. Restarting without them would replay or "
            "skip committed batches. Rerun on that machine"
            + (f" with --checkpoint-dir {where}" if where else "")
            + ", or deploy into a fresh --workdir")


def _check_manifest(m: dict, wd: str, topology: Topology, fuse: bool) -> None:
    """Refuse to resume the deploy recorded in ``m`` (the work directory's ``deploy.json``) with
    another topology, another --fuse, other nodes or other node settings: its checkpoints and
    outputs follow the old ones."""
    if m.get("topology") != topology.name:
        raise EpicError(f"{wd} holds a deploy of topology {m.get('topology')!r}, not "
                        f"{topology.name!r}; use another --workdir")
    if bool(m.get("fuse", False)) != bool(fuse):
        raise EpicError(f"{wd} was deployed {'with' if m.get('fuse') else 'without'} --fuse;"
                        " rerun it the same way (its checkpoints are per query), or use a "
                        "fresh --workdir")
    had = m.get("nodes")
    now = [n.name for n in topology.topological_order()]
    if had is not None and set(had) != set(now):
        added, gone = sorted(set(now) - set(had)), sorted(set(had) - set(now))
        raise EpicError(
            f"{wd} holds a deploy of another version of topology {topology.name!r} ("
            + "; ".join(x for x in (f"nodes added: {', '.join(added)}" if added else "",
                                    f"nodes removed: {', '.join(gone)}" if gone else "") if x)
            + "): its checkpoints and topics follow the old nodes; deploy into a fresh "
            "--workdir")
    was = m.get("settings")
    if was is not None:
        now_s = node_settings(topology)
        changed = [n for n in now if n in was and was[n] != now_s.get(n)]
        if changed:
            raise EpicError(
                f"{wd} holds a deploy of topology {topology.name!r} with other settings of "
                f"node(s) {', '.join(changed)} (a topology parameter, a path, a window, a "
                "schema...): its checkpoints and outputs follow the old ones; rerun with the "
                "same parameters to finish it, or deploy into a fresh --workdir")
    if m.get("io", "rows") != "direct":
        # Written by an epic that still had `--io rows` (its topics' layout and state
        # partitions differ; a deploy.json without "io" is one of those too).
        raise EpicError(f"{wd} was deployed with --io {m.get('io', 'rows')}, an I/O mode epic "
                        "no longer has; deploy into a fresh --workdir")


def _manifest(wd: str, topology: Topology, partitions: int, fuse: bool = False,
              driver: str | None = None) -> int:
    p = f"{wd}/deploy.json"
    m = _read_json(p)
    if m is not None:
        _check_manifest(m, wd, topology, fuse)
        return int(m["partitions"])
    doc = {"topology": topology.name, "partitions": partitions, "id": uuid.uuid4().hex,
           "nodes": [n.name for n in topology.topological_order()],
           "settings": node_settings(topology)}
    if fuse:
        doc["fuse"] = True
    doc["io"] = "direct"   # the layout generation (older work dirs say "rows" or nothing)
    if driver is not None and driver != wd:
        import socket

        doc.update(checkpoint_dir=driver, driver_host=socket.gethostname())
        # The checkpoint directory names its owner first: a crash between the two writes
        # leaves a work directory without deploy.json, which the next start re-creates.
        _write_json(os.path.join(driver, OWNER), {**doc, "workdir": wd})
    _write_json(p, doc)
    return partitions


class Refused(EpicError):
    """A deploy refused before any query started: its status is left as it was."""


def check_plan(wd: str, checkpoints: str, queries: list[str]) -> None:
    """Refuse to resume a work directory whose checkpoints belong to queries this deploy's plan
    does not have: it was deployed with another topology, or by an epic whose query plan differs
    (e.g. ``--fuse`` groups its nodes otherwise). Its queries' progress, state and sink records
    would not line up with this plan's, so outputs could be repeated or lost.

    Example:
        >>> import tempfile
        >>> d = tempfile.mkdtemp()
        >>> os.makedirs(os.path.join(d, "a+b"))
        >>> check_plan("wd", d, ["a+b", "c"])
        >>> check_plan("wd", d, ["a", "b+c"])
        Traceback (most recent call last):
        ...
        epic.spark.runtime.Refused: wd holds checkpoints of 1 query this deploy does not have ('a+b'): it was deployed with another topology or by an epic that plans queries otherwise; deploy into a fresh --workdir, or finish it with the topology and epic version that started it
    """
    try:
        have = sorted(e for e in os.listdir(checkpoints)
                      if os.path.isdir(os.path.join(checkpoints, e)))
    except FileNotFoundError:
        return
    known = set(queries)
    stray = [q for q in have if q not in known]
    if stray:
        shown = ", ".join(repr(q) for q in stray[:3]) + (", ..." if len(stray) > 3 else "")
        raise Refused(f"{wd} holds checkpoints of {len(stray)} "
                        f"quer{'y' if len(stray) == 1 else 'ies'} this deploy does not have "
                        f"({shown}): it was deployed with another topology or by an epic that "
                        "plans queries otherwise; deploy into a fresh --workdir, or finish it "
                        "with the topology and epic version that started it")


def deploy(topology: Topology, workdir: str, *, master: str | None = None, ui: bool = False,
           fuse: bool = False, retention: bool = True,
           progress: bool = False, console=None, spark=None,
           batch_rows: int | None = None, partitions: int | None = None,
           trigger_interval: float = 0.1, poll_interval: float = 0.1,
           timeout: float | None = None, conf: dict | None = None,
           archive: str | None = None, checkpoint_dir: str | None = None) -> DeployResult:
    """Run ``topology`` on Spark, one streaming query per node, until every sink has ended.

    A finite input ends by itself: the call returns once every sink committed its end of stream.
    A live input runs until :func:`request_stop` (``epic stop WORKDIR``). Rerunning with the same
    ``workdir`` after a crash resumes from the checkpoints; outputs are exactly once.

    Args:
        topology: the topology.
        workdir: work directory (topics, checkpoints, state, status): a path, a ``file://``
            URI, or a store pyarrow reaches (``s3://bucket/prefix``, ``hdfs://...``;
            docs/deploy.md, "Storage").
        master: Spark master URL (default ``local[*]``); with a cluster, ``workdir`` must be on
            storage every executor sees (a shared mount or an object store).
        ui: start the Spark UI.
        fuse: run chains of nodes in one query each (:func:`plan_groups`, docs/deploy.md); the
            work directory must always be deployed with the same choice.
        retention: delete a topic's segments once every query reading it
            has committed past them (each producer's newest batch stays); False keeps every
            topic whole (for inspection with ``epic topics``).
        progress: show a live per-node table (rich).
        console: rich console for progress (default: standard error).
        spark: an existing SparkSession to use (tests share one).
        batch_rows: rows per micro-batch read from a source or topic; default: per query, about
            128 MB of its input's columns, at least 1 M and at most 8 M rows
            (:func:`epic.spark.planner.auto_batch_rows`).
        partitions: partitions of keyed stateful nodes; fixed at the first start of
            ``workdir``. Default: ``spark.sql.shuffle.partitions`` when ``conf`` sets it, else
            Spark's cores divided by the queries with keyed nodes, at least 1
            (:func:`epic.spark.planner.auto_partitions`).
        trigger_interval: seconds between micro-batch triggers of each query.
        poll_interval: seconds between the driver's checks for completion (at least 0.25 s
            with a remote work directory; failures are checked and the status document is
            refreshed at most once a second).
        timeout: give up (stop, raise) after this many seconds.
        conf: Spark settings (``--conf key=value``) for the session epic starts; they override
            epic's. The session's resolved settings are written to ``<workdir>/spark-conf.json``.
        archive: a packed environment (``epic pack``) whose Python the executors run
            (``spark.archives``, :mod:`epic.spark.ship`). With it, or a master that is not
            ``local``, a session epic starts ships epic and the topology's local code as
            ``spark.submit.pyFiles`` (``<workdir>/ship/*.zip``).
        checkpoint_dir: a driver-local directory for Spark's checkpoints, the deploy lock and
            ``ship/`` (default: the work directory itself when it is local; for a remote one
            :func:`default_checkpoint_dir`). It is recorded in ``deploy.json``; a restart
            without the checkpoints of the work directory's deploy is refused.

    Raises:
        EpicError: Java missing or too old, an unwritable work directory or output directory
            (:class:`~epic.errors.OutputError`), a work directory in use by another deploy (its
            pid and host), a topic whose schema changed, a corrupt topic segment or sink commit
            record (:class:`~epic.errors.InputError`), or a node that failed
            (:class:`~epic.errors.NodeFailure` text: node, function, micro-batch).
    """
    topology.validate(warn=False)
    if partitions is not None:
        try:
            whole = None if isinstance(partitions, bool) else operator.index(partitions)
        except TypeError:
            whole = None
        if whole is None or whole < 1:
            raise EpicError(f"--partitions {partitions}: give a whole number of at least 1")
        partitions = whole
    if not (isinstance(trigger_interval, (int, float)) and trigger_interval >= 0
            and trigger_interval == trigger_interval and trigger_interval != float("inf")):
        raise EpicError(f"--trigger {trigger_interval}: give seconds between micro-batches, 0 "
                        "or more")
    if timeout is not None and not timeout > 0:
        raise EpicError(f"--timeout {timeout}: give a number of seconds above 0")
    if archive and spark is not None:
        raise EpicError("archive= applies to a session the deploy starts; pass spark=None")
    check_epic_conf(conf)   # before anything is written
    wd = _check_workdir(workdir)
    driver = _driver_dir(wd, checkpoint_dir)
    from epic.preflight import check_output_paths
    from epic.spark.lock import WorkdirLock

    # Before anything in wd changes; dropped even on SIGKILL. A remote work directory is locked
    # through its driver-local checkpoint directory (flock); another machine's driver is refused
    # by the checkpoint check (_check_driver_dir).
    lock = WorkdirLock(driver, wd).acquire()
    try:
        existing = _read_json(f"{wd}/deploy.json")
        _check_driver_dir(wd, driver, existing)
        if existing is not None:   # refused before the work directory or its status changes
            _check_manifest(existing, wd, topology, fuse)
        sweep_checkpoint_temps(driver)
        if driver != wd:
            print(f"epic deploy: work directory {wd}; Spark checkpoints in {driver}",
                  file=sys.stderr, flush=True)
        check_output_paths(topology)  # before any query starts
        return _deploy_locked(topology, wd, driver, master=master, ui=ui, fuse=fuse,
                              retention=retention, progress=progress, console=console,
                              spark=spark, batch_rows=batch_rows, partitions=partitions,
                              trigger_interval=trigger_interval, poll_interval=poll_interval,
                              timeout=timeout, conf=conf, archive=archive)
    finally:
        lock.release()


#: A temp file of Spark's metadata logs (``HDFSMetadataLog``: ``offsets/``, ``commits/``): an
#: entry is written to ``.<batch>.<uuid>.tmp`` (and its checksum ``..<batch>.<uuid>.tmp.crc``),
#: then renamed to ``<batch>``.
_LOG_TEMP = re.compile(r"^\.\.?\d+\.[0-9a-fA-F-]{36}\.tmp(\.crc)?$")


def sweep_checkpoint_temps(driver: str) -> list[str]:
    """Delete the temp files a crash left in the queries' metadata logs; returns their paths.

    A SIGKILL between Spark's write of a log entry and its rename leaves the temp file; in a
    query's ``offsets/`` before its first batch, Spark then refuses every restart
    (``STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY ... offsets should be empty on batch 0``). The
    entry was never committed (the rename is the commit), so the file is garbage: the rerun
    plans that batch again, as after any crash. Called under the deploy lock, before any query
    starts."""
    root = os.path.join(driver, "checkpoints")
    gone = []
    if not os.path.isdir(root):
        return gone
    for query in os.listdir(root):
        for log in ("offsets", "commits"):
            d = os.path.join(root, query, log)
            if not os.path.isdir(d):
                continue
            for name in os.listdir(d):
                if _LOG_TEMP.match(name):
                    p = os.path.join(d, name)
                    try:
                        os.remove(p)
                        gone.append(p)
                    except FileNotFoundError:
                        pass
    return gone


def _jvm_running() -> bool:
    """Whether this process already runs a SparkContext (its JVM's settings are fixed)."""
    from pyspark import SparkContext

    return SparkContext._active_spark_context is not None


#: Seconds between the cheap checks (:meth:`Launcher.sinks_changed`) for a finished file sink
#: within each ``poll_interval``.
DONE_POLL = 0.01

#: Spark's scratch space (``spark.local.dir``) for a session a deploy starts, in its driver-local
#: directory: see :func:`_spark_scratch`.
SCRATCH = "spark-local"


def _spark_scratch(driver: str, master: str | None, conf: dict | None) -> dict:
    """``conf`` with ``spark.local.dir=<driver>/spark-local``, emptied first.

    Spark puts its temp directories (the driver's copy of ``spark.archives``, unpacked: ~300 MB
    with an `epic pack` archive; block manager and user files) under ``spark.local.dir``, /tmp by
    default, and deletes them in a JVM shutdown hook: a SIGKILLed driver left them in /tmp for
    good. In the deploy's own directory they are deleted by the next deploy of that directory
    (which holds the deploy lock, so no other deploy uses them). Left as it is: a
    ``spark.local.dir`` in ``conf`` or ``SPARK_LOCAL_DIRS``; a master other than ``local`` or
    ``spark://`` (standalone executors use their worker's directories, whatever the
    application sets; others may not); a session already running in this process (it keeps its
    own, which may be another deploy's directory).
    """
    conf = dict(conf or {})
    if "spark.local.dir" in conf or os.environ.get("SPARK_LOCAL_DIRS"):
        return conf
    if master and not master.startswith(("local", "spark://")) or _jvm_running():
        return conf
    d = os.path.join(driver, SCRATCH)
    import shutil

    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d, exist_ok=True)
    conf["spark.local.dir"] = d
    return conf


#: The JIT setting of a local deploy's JVM (:func:`local_jit`).
LOCAL_JIT = "-XX:TieredStopAtLevel=1"
#: The garbage collector of a local deploy's JVM (:func:`local_jit`).
LOCAL_GC = "-XX:+UseSerialGC"


#: Task slots per core of the local master a deploy with a live source starts (``--master``
#: unset): see :func:`local_slots`.
LIVE_SLOTS_PER_CORE = 4

#: Task slots per core of the local master a deploy of bounded sources starts with
#: ``--conf spark.epic.sourceFirst=true``: see :func:`local_slots`.
SOURCE_FIRST_SLOTS_PER_CORE = 3


def local_slots(topology: Topology, source_first: bool = False) -> int | None:
    """Task slots of the local master a deploy starts when ``--master`` is not given.

    With a live source (unbounded, or a paced replay), :data:`LIVE_SLOTS_PER_CORE` per core, so
    that a query's micro-batch starts its tasks when it is planned instead of queueing for one
    of ``local[*]``'s slots (one per core) behind other queries' tasks: the operating system
    then shares the cores, and the live source's query runs first
    (``planner.BACKGROUND_NICE``). With bounded sources and ``source_first``
    (``planner.SOURCE_FIRST_CONF``) :data:`SOURCE_FIRST_SLOTS_PER_CORE` per core, for the same
    reason; each slot in use is a Python worker (about 170 MB on the DEBS full game). Otherwise
    None (``local[*]``): every query has its input at hand, and more tasks at once would only
    hold more memory."""
    from epic.topology import SourceNode

    cores = os.cpu_count() or 1
    if any(isinstance(n, SourceNode) and n.source.live for n in topology.nodes.values()):
        return LIVE_SLOTS_PER_CORE * cores
    if source_first:
        return SOURCE_FIRST_SLOTS_PER_CORE * cores
    return None


def _background_nice(v) -> int | None:
    """``--conf spark.epic.backgroundNice=N`` from its value ``v`` (None: not set)."""
    if v is None or v == "":
        return None
    try:
        n = int(v)
    except ValueError:
        n = -1
    if not 0 <= n <= 19:
        raise EpicError(f"--conf {BACKGROUND_NICE_CONF}={v!r}: expected a nice value from 0 "
                        "(off) to 19, e.g. 10") from None
    return n


def _split_seconds(v) -> float | None:
    """``--conf spark.epic.splitSeconds=S`` from its value ``v`` (None: not set)."""
    if v is None or not str(v).strip():
        return None
    try:
        f = float(v)
    except ValueError:
        f = -1.0
    if not f >= 0:
        raise EpicError(f"--conf {SPLIT_SECONDS_CONF}={v!r}: expected seconds (0 or more, "
                        "'inf' for the last micro-batch only), e.g. 10") from None
    return f


def check_epic_conf(conf) -> None:
    """Refuse an unknown ``spark.epic.*`` key or a bad value of a known one in ``--conf``
    settings, naming it, before the deploy writes anything (a misspelt key would be ignored)."""
    from epic.spark.launcher import Launcher

    known = (Launcher.STARTING_CONF, BACKGROUND_NICE_CONF, BRANCH_TASKS_CONF, SOURCE_FIRST_CONF,
             SPLIT_SECONDS_CONF)
    conf = dict(conf or {})
    for k in conf:
        if k.startswith("spark.epic.") and k not in known:
            raise EpicError(f"--conf {k}: not a setting of epic's; epic reads {', '.join(known)} "
                            "(docs/deploy.md)")

    _background_nice(conf.get(BACKGROUND_NICE_CONF))
    _split_seconds(conf.get(SPLIT_SECONDS_CONF))
    _flag(conf.get(BRANCH_TASKS_CONF), BRANCH_TASKS_CONF)
    _flag(conf.get(SOURCE_FIRST_CONF), SOURCE_FIRST_CONF)
    Launcher.parse_starting(conf.get(Launcher.STARTING_CONF))


def _flag(value, name: str) -> bool | None:
    """A true/false ``--conf`` value (None: not set)."""
    from epic.topology import parse_bool

    if value is None or not str(value).strip():
        return None
    v = parse_bool(value)
    if v is None:
        raise EpicError(f"--conf {name}={value!r}: expected true or false")
    return v


def local_jit(master: str | None, conf: dict) -> dict:
    """``conf`` with the driver JVM compiling by C1 only (:data:`LOCAL_JIT`) and collecting with
    the serial collector (:data:`LOCAL_GC`), for a local master.

    In a deploy the JVM plans micro-batches and carries commit messages (tasks read and write
    the data themselves), so the optimising C2 compiler buys nothing and its compiler threads
    were the largest CPU consumer of the JVM on the DEBS replay at real time (31 of ~100 CPU-s);
    and its live heap is small, where G1 (the default) had grown the JVM to 620-640 MB resident
    on the full DEBS game, the serial collector to 460 MB for the same CPU time.
    Left as it is: a master other than ``local``, a session already running in this process; a
    JIT option of the user's (``spark.driver.extraJavaOptions`` or ``JAVA_TOOL_OPTIONS``
    mentioning ``Tiered``) keeps the JIT, one naming a collector (``GC``) the collector.
    """
    conf = dict(conf)
    if master and not master.startswith("local"):
        return conf
    if _jvm_running():
        return conf
    given = conf.get("spark.driver.extraJavaOptions", "")
    tool = os.environ.get("JAVA_TOOL_OPTIONS", "")
    add = [o for o, mark in ((LOCAL_JIT, "Tiered"), (LOCAL_GC, "GC"))
           if mark not in given and mark not in tool]
    if add:
        conf["spark.driver.extraJavaOptions"] = " ".join(add + [given]).strip()
    return conf


def _deploy_locked(topology: Topology, wd: str, driver: str, *, master, ui, fuse, retention, progress,
                   console, spark, batch_rows, partitions, trigger_interval, poll_interval,
                   timeout, conf=None, archive=None) -> DeployResult:
    """:func:`deploy` once the work directory is checked and locked."""
    from epic.paths import is_remote

    remote = is_remote(wd)
    if remote:
        from epic.storage import resolve

        wloc = resolve(wd, "work directory")
        wloc.join(STOP).delete()
    else:
        try:
            os.remove(os.path.join(wd, STOP))
        except FileNotFoundError:
            pass
    # `epic status` during the start (the session, the plan, the queries' first batches can take
    # many seconds): the deploy is starting, not an unknown directory nor the last run's end
    try:
        before = _read_json(f"{wd}/{STATUS}")
    except (OSError, ValueError):
        before = None
    started = _time.perf_counter()
    _write_json(f"{wd}/{STATUS}", {"topology": topology.name, "state": "starting",
                                   "pid": os.getpid(), "elapsed_s": 0.0,
                                   "updated": _time.time(), "error": None, "nodes": {},
                                   "late_rows": {}, "lock_dir": driver})
    try:
        return _start_and_run(topology, wd, driver, started, master=master, ui=ui, fuse=fuse,
                              retention=retention, progress=progress, console=console,
                              spark=spark, batch_rows=batch_rows, partitions=partitions,
                              trigger_interval=trigger_interval, poll_interval=poll_interval,
                              timeout=timeout, conf=conf, archive=archive, remote=remote,
                              wloc=wloc if remote else None)
    except _StartFailed as exc:
        cause = exc.__cause__ if exc.__cause__ is not None else exc
        if isinstance(cause, Refused):
            if before is not None:   # as it was
                _write_json(f"{wd}/{STATUS}", before)
            else:   # a first deploy's: none
                _remove_status(wd)
            raise cause from None
        error = str(cause) if isinstance(cause, EpicError) else f"{type(cause).__name__}: {cause}"
        _write_json(f"{wd}/{STATUS}", {"topology": topology.name, "state": "failed",
                                       "pid": os.getpid(),
                                       "elapsed_s": round(_time.perf_counter() - started, 3),
                                       "updated": _time.time(), "error": error, "nodes": {},
                                       "late_rows": {}})
        raise cause from None


def _remove_status(wd: str) -> None:
    from epic.paths import is_remote

    if is_remote(wd):
        from epic.storage import resolve

        resolve(f"{wd}/{STATUS}").delete()
        return
    try:
        os.remove(os.path.join(wd, STATUS))
    except FileNotFoundError:
        pass


class _StartFailed(Exception):
    """Raised (from the real error) by :func:`_start_and_run` before any query started."""


def _start_error(exc: BaseException, master: str | None) -> str:
    """One line for an error of Spark's while the session starts (a bad master URL, an
    unreachable master): what failed and its first line, not a Java stack."""
    text = str(exc).strip().splitlines()
    first = next((ln.strip() for ln in text if ln.strip()), type(exc).__name__)
    return (f"cannot start the Spark session (master {master or 'local[*]'!r}): {first[:300]}; "
            "check --master (local[N], spark://HOST:PORT of a running master) and that "
            "its machines are reachable")


def _prepare(topology: Topology, wd: str, driver: str, *, master, ui, fuse, retention, spark,
             batch_rows, partitions, conf, archive, remote):
    """The session (started, or ``spark``'s checked), ``deploy.json`` and the plan with its
    topics: ``(spark, plan, partitions)``."""
    from pyspark import cloudpickle

    # Crash points (tests) kill the driver's process group, whichever process reaches them.
    os.environ["EPIC_DRIVER_PGID"] = str(os.getpgrp())
    if spark is None:
        from epic.spark.cds import cds_options
        from epic.spark.session import build_session
        from epic.spark.ship import shipping

        jconf = cds_options(master, local_jit(master, _spark_scratch(driver, master, conf)),
                            _jvm_running())
        with span("session", topology.name, "driver"):
            try:
                spark = build_session(master, ui=ui, slots=local_slots(topology, bool(_flag(
                    (conf or {}).get(SOURCE_FIRST_CONF), SOURCE_FIRST_CONF))), conf=shipping(
                    topology, driver, master=master, archive=archive, conf=jconf))
            except EpicError:
                raise
            except Exception as exc:   # Spark's (a bad master URL, a master that does not answer)
                raise EpicError(_start_error(exc, master)) from exc
    elif conf:
        for k, v in conf.items():  # a shared session: only what can change at runtime
            if not spark.conf.isModifiable(k) and spark.conf.get(k, None) != v:
                raise EpicError(f"--conf {k}: the Spark session is already running and this "
                                "setting cannot change now; set it when the session starts")
            spark.conf.set(k, v)
    settings = dict(spark.sparkContext.getConf().getAll())
    settings.update(spark.conf.getAll)
    _write_json(f"{wd}/spark-conf.json", dict(sorted(settings.items())))
    cores = spark.sparkContext.defaultParallelism
    local = str(spark.conf.get("spark.master", "")).startswith("local")
    if local:
        cores = min(cores, os.cpu_count() or 1)  # local_slots: more slots than cores
    if partitions is None:
        if "spark.sql.shuffle.partitions" in (conf or {}):
            partitions = int(spark.conf.get("spark.sql.shuffle.partitions"))
        else:
            from epic.spark.planner import auto_partitions

            partitions = auto_partitions(topology, fuse=fuse, cores=cores)
    partitions = _manifest(wd, topology, partitions, fuse, driver)
    os.makedirs(os.path.join(driver, "checkpoints"), exist_ok=True)
    if not remote:  # object stores have no directories (and HDFS makes them on write)
        for sub in ("topics", "state", "sinks"):
            os.makedirs(os.path.join(wd, sub), exist_ok=True)
    from epic.spark.ship import by_value_modules

    for m in by_value_modules(topology):
        try:
            cloudpickle.register_pickle_by_value(sys.modules[m])
        except (ValueError, KeyError):
            pass
    from epic.spark.ship import check_picklable

    check_picklable(topology)
    plan = DeployPlan(topology, wd, partitions=partitions, fuse=fuse, batch_rows=batch_rows,
                      retention=retention, driver_dir=driver,
                      background_nice=_background_nice(
                          spark.conf.get(BACKGROUND_NICE_CONF, None)),
                      branch_tasks=_flag(spark.conf.get(BRANCH_TASKS_CONF, None),
                                         BRANCH_TASKS_CONF),
                      source_first=bool(_flag(spark.conf.get(SOURCE_FIRST_CONF, None),
                                              SOURCE_FIRST_CONF)),
                      cpu_slots=cores if local else 0,
                      split_seconds=_split_seconds(spark.conf.get(SPLIT_SECONDS_CONF, None)))
    check_plan(wd, os.path.join(driver, "checkpoints"), [plan.unit_name(u) for u in plan.units])
    plan.create_topics()
    return spark, plan, partitions


def _start_and_run(topology: Topology, wd: str, driver: str, started: float, *, master, ui,
                   fuse, retention, progress, console, spark, batch_rows, partitions,
                   trigger_interval, poll_interval, timeout, conf, archive, remote,
                   wloc) -> DeployResult:
    """The session, the plan and the queries of :func:`_deploy_locked`; an error before the
    queries start is raised as :class:`_StartFailed` from it."""
    try:
        spark, plan, partitions = _prepare(topology, wd, driver, master=master, ui=ui,
                                           fuse=fuse, retention=retention, spark=spark,
                                           batch_rows=batch_rows, partitions=partitions,
                                           conf=conf, archive=archive, remote=remote)
    except BaseException as exc:
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        raise _StartFailed() from exc
    launcher = Launcher(spark, plan, trigger_interval)
    stats = Stats(plan, launcher.queries)
    status_path = f"{wd}/{STATUS}"
    stop_requested = ((lambda: wloc.join(STOP).exists()) if remote
                      else (lambda: os.path.exists(os.path.join(wd, STOP))))
    live = None
    if progress:
        from rich.console import Console
        from rich.live import Live

        live = Live(status_table(stats.doc("starting", 0.0)),
                    console=console or Console(stderr=True), refresh_per_second=4,
                    transient=False)
        live.start()
    start = started   # the deploy's time: its session and plan included
    sinks = plan.sinks
    printed: dict[str, int] = {}
    state, error = "running", None
    event("deploy_start", topology.name)
    try:
        launcher.start_all()
        next_status = 0.0
        while True:
            elapsed = _time.perf_counter() - start
            # The status document parses every query's recent progress (JSON through py4j) and
            # the failure check asks every query for its exception (two py4j calls each, about
            # 0.6 ms of the driver's and the JVM's CPU): both at most once a second. Completion
            # is checked every poll.
            refresh = elapsed >= next_status
            if refresh:
                stats.update()
                next_status = elapsed + max(poll_interval, 1.0)
            launcher.print_console(printed)
            exc = launcher.failure() if refresh else None
            if exc is not None:
                state, error = "failed", str(exc)
                raise exc
            if all([launcher.sink_done(n) for n in sinks]):
                event("sinks_done", topology.name)
                state = "finished"
                break
            if (refresh or not remote) and stop_requested():  # remote: a request a second
                state = "stopped"
                break
            if timeout is not None and elapsed > timeout:
                state, error = "failed", f"timed out after {timeout} s"
                raise EpicError(f"deploy of {topology.name!r} timed out after {timeout} s")
            if refresh:
                doc = stats.doc(state, elapsed)
                _write_json(status_path, doc)
                if live is not None:
                    live.update(status_table(doc))
            # A remote work dir: its sinks' and topics' end-of-stream records are requests.
            if remote:
                _time.sleep(max(poll_interval, 0.25))
                continue
            # Until the next full check, a stat of the file sinks' commit records every
            # DONE_POLL s: the deploy returns within milliseconds of its last commit.
            wake = _time.perf_counter() + poll_interval
            while True:
                now = _time.perf_counter()
                if now >= wake:
                    break
                _time.sleep(min(DONE_POLL, wake - now))
                if launcher.sinks_changed(sinks):
                    break
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
        # the slots' lock files and the workers' memory records (every task has returned)
        if plan.local_cores and state == "finished":
            from epic.spark.executor import remove_cpu_slots

            remove_cpu_slots(plan.workdir)
        if state == "finished":
            # Spooled source batches are only read by their own micro-batch (a replay spools
            # them again); the last one's files are left when the deploy ends right after it.
            if remote:
                wloc.join("spool").delete_dir()
            else:
                import shutil

                shutil.rmtree(os.path.join(wd, "spool"), ignore_errors=True)
        _write_json(status_path, doc)
        if live is not None:
            live.update(status_table(doc))
            live.stop()
    import pyarrow as pa

    from epic.sinks import CollectSink
    from epic.spark.sink_query import MERGE_KEYS, sink_tables

    collected = {}
    for n in sinks:
        if isinstance(n.sink, CollectSink):
            topic = Topic.open(plan.sink_topic(n))
            tables = [t for _, t in sink_tables(topic)]
            collected[n.name] = (pa.concat_tables(tables) if tables else pa.schema(
                [f for f in topic.schema if f.name not in MERGE_KEYS],
                metadata=topic.schema.metadata).empty_table())
    return DeployResult(topology.name, wd, elapsed, collected, doc)
