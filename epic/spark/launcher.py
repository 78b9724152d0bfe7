"""Starting, watching and stopping the streaming queries of a :class:`~epic.spark.planner.DeployPlan`.

Each :class:`~epic.spark.planner.QueryPlan` becomes ``readStream.format(<reader>).load()
.writeStream.format(<writer>)`` over the thin data-source adapters of
:mod:`epic.spark.datasources`, registered under names unique to this launch.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import time as _time
import uuid

from epic.errors import EpicError
from epic.sinks import console_value
from epic.spark.planner import DeployPlan
from epic.spark.trace import span
from epic.topics import Topic
from epic.topology import SinkNode

__all__ = ["Launcher", "explain"]


@contextlib.contextmanager
def _python_exec(spark):
    """Register data sources with the warm zygote's interpreter (:mod:`epic.spark.zygote`) as
    their ``pythonExec`` where it applies: their planner and worker processes then start as
    forks of a process that has imported pyspark, pyarrow and epic already."""
    from epic.spark import zygote

    exe = zygote.python_for(spark)
    sc = spark.sparkContext
    if exe is None:
        yield
        return
    before = sc.pythonExec
    sc.pythonExec = exe
    try:
        yield
    finally:
        sc.pythonExec = before


class Launcher:
    """The running queries of one deploy.

    Args:
        spark: the session.
        plan: the deploy's plan.
        trigger_interval: seconds between micro-batch triggers of each query.
    """

    def __init__(self, spark, plan: DeployPlan, trigger_interval: float):
        self.spark = spark
        self.plan = plan
        self.trigger = f"{max(1, int(trigger_interval * 1000))} milliseconds"
        self.tag = uuid.uuid4().hex[:8]
        self.queries: dict[str, object] = {}
        #: How to start each query again: its source and sink names and its checkpoint.
        self._how: dict[str, tuple[str, str, str]] = {}
        #: Restarts after a transient failure (:data:`TRANSIENT`), per query.
        self.restarts: dict[str, int] = {}
        from epic.spark.sink_query import deploy_id

        self.deploy_id = deploy_id(plan.workdir)
        #: Per file sink: its commit record's signature at the last full check (_record_sig).
        self._seen: dict[str, tuple] = {}
        self._local_side: dict[str, str | None] = {}   # its local path (None: remote)
        self._done: set[str] = set()                    # file sinks seen at their end

    def start_all(self) -> None:
        """Start every query in topological order, at most :attr:`starting` initialising at once;
        in reverse topological order when a source is live (unbounded or paced), the queries that
        read a live source (alone or as a merge's inlet) last: a live source's rows are due from
        the moment its query reads, so the queries downstream are ready first and no row waits
        for a query still initialising.

        A query's initialisation is Spark spawning a fresh Python planner process for its data
        source (about 0.9 s here), so a deploy of many queries waits about that long per query
        when they start one at a time. With more cores a few initialise at once. Starting all at
        once (53 queries of an unfused DEBS deploy) overran two cores until planner processes
        failed to connect back to the JVM within Spark's timeout. The ``start()`` calls are all
        made from this thread."""
        from epic.spark.datasources import reader_source, writer_source

        pending: list = []
        starting = self.starting
        queries = self.plan.queries()
        if any(getattr(n.source, "live", False) for n in self.plan.sources):
            # the queries reading a live source (alone or as a merge's inlet) last
            queries = sorted(queries[::-1], key=lambda q: q.live)
        for qp in queries:
            safe = re.sub(r"\W", "_", qp.name)
            src = reader_source(f"epic_group_{self.tag}_{safe}", qp.schema, qp.make_planner,
                                qp.batch_rows)
            dst = writer_source(f"epic_commit_{self.tag}_{safe}", qp.committer)
            with _python_exec(self.spark):
                self.spark.dataSource.register(src)
                self.spark.dataSource.register(dst)
            with span("await_slot", qp.name, "driver"):
                pending = self._await_slots(pending, starting)
            self._how[qp.name] = (src.name(), dst.name(), qp.checkpoint)
            with span("start", qp.name, "driver"):
                q = self._start(qp.name)
            pending.append(q)

    def _start(self, name: str):
        src, dst, checkpoint = self._how[name]
        q = (self.spark.readStream.format(src).load().writeStream
             .format(dst).option("checkpointLocation", checkpoint)
             .queryName(name).trigger(processingTime=self.trigger).start())
        self.queries[name] = q
        return q

    #: Failures of a query that say nothing about the deploy: Spark gave a Python process it
    #: spawned (a planner, a commit runner or a task's worker) a fixed 10 seconds to connect back,
    #: and an overloaded machine can miss that. The query is started again from its checkpoint
    #: (the failed micro-batch is replayed, so outputs stay exactly once), at most
    #: :data:`MAX_RESTARTS` times per query.
    TRANSIENT = re.compile(r"Python worker failed to connect back|Timed out while waiting for "
                           r"the Python worker to connect back")
    MAX_RESTARTS = 3

    #: The Spark setting that overrides :attr:`starting` (``--conf spark.epic.startingQueries=N``).
    STARTING_CONF = "spark.epic.startingQueries"

    @property
    def starting(self) -> int:
        """Queries initialising at once: ``spark.epic.startingQueries`` if set, else half the
        driver's cores (1 to 4). On two cores one at a time: two planner processes spawning at
        once beside three drivers and two executors (the cluster test) once missed Spark's
        10-second connect-back (``Python worker failed to connect back``)."""
        n = self.parse_starting(self.spark.conf.get(self.STARTING_CONF, None))
        return n if n is not None else max(1, min(4, (os.cpu_count() or 2) // 2))

    @classmethod
    def parse_starting(cls, v) -> int | None:
        """The value of ``spark.epic.startingQueries`` (None: not set)."""
        if v is None or v == "":
            return None
        try:
            return max(1, int(v))
        except ValueError:
            raise EpicError(f"--conf {cls.STARTING_CONF}={v!r}: expected a whole number "
                            "of queries, e.g. 2") from None

    def _await_slots(self, pending: list, starting: int, timeout: float = 60.0) -> list:
        """Wait until fewer than ``starting`` of ``pending`` are still initialising (or
        ``timeout`` passed: a slow start is then the watch loop's to report); those still
        initialising."""
        deadline = _time.monotonic() + timeout
        while True:
            pending = [q for q in pending if not _initialised(q)]
            if len(pending) < starting or _time.monotonic() > deadline:
                return pending
            _time.sleep(0.02)

    # -- watching --------------------------------------------------------------------------
    def _record_sig(self, path: str) -> tuple | None | bool:
        """The signature (mtime, size, inode) of file sink ``path``'s local commit record, None
        when it has none yet, False when it is remote (no cheap check)."""
        local = self._local_side.get(path, False)
        if local is False:
            from epic.spark.sink_query import sidecar_location

            side = sidecar_location(path)
            local = self._local_side[path] = side.path if side.is_local else None
        if local is None:
            return False
        try:
            st = os.stat(local)
        except FileNotFoundError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def sinks_changed(self, sinks) -> bool:
        """Whether ``sinks`` may all have committed their end of stream since the last
        :meth:`sink_done` checks: a cheap test the deploy runs between its full checks, so a
        finished deploy returns within milliseconds of its last commit. It stats the commit
        record of the first local file sink not yet seen done (the deploy cannot have finished
        before that one has). Topic sinks and remote file sinks are left to the full checks."""
        from epic.sinks import CsvSink, ParquetSink

        for node in sinks:
            sink = node.sink
            if not isinstance(sink, (CsvSink, ParquetSink)) or sink.path in self._done:
                continue
            sig = self._record_sig(sink.path)
            if sig is False:
                continue
            return self._seen.get(sink.path, ()) != sig
        return False

    def sink_done(self, node: SinkNode) -> bool:
        """Whether sink ``node`` committed its end of stream."""
        from epic.sinks import CsvSink, ParquetSink
        from epic.spark.sink_query import read_sidecar

        sink = node.sink
        if isinstance(sink, (CsvSink, ParquetSink)):
            if sink.path in self._done:   # an end of stream stays
                return True
            sig = self._record_sig(sink.path)   # before the read: a later commit changes it
            if sig is not False and sink.path in self._seen and self._seen[sink.path] == sig:
                return False   # the record read last time (no end of stream), unchanged
            rec = read_sidecar(sink.path, self.deploy_id)
            self._seen[sink.path] = sig
            if rec and rec.get("eos"):
                self._done.add(sink.path)
                return True
            return False
        try:
            topic = Topic.open(self.plan.sink_topic(node))
        except EpicError:
            return False  # not created yet
        return topic.status().eos  # a corrupt segment raises: the deploy stops, naming it

    def failure(self) -> EpicError | None:
        """The first failed query's error, explained; a query that failed transiently
        (:data:`TRANSIENT`) is started again instead, with a warning on stderr."""
        for name, q in list(self.queries.items()):
            exc = q.exception()
            if exc is None:
                continue
            n = self.restarts.get(name, 0)
            transient = self.TRANSIENT.search(str(exc))
            if transient and n < self.MAX_RESTARTS and name in self._how:
                self.restarts[name] = n + 1
                print(f"warning: node {name!r}: {transient.group(0)} "
                      "(Spark allows a Python process 10 s to start; this machine is "
                      f"overloaded): restarting the query from its checkpoint "
                      f"({n + 1} of {self.MAX_RESTARTS})", file=sys.stderr, flush=True)
                with span("restart", name, "driver"):
                    self._start(name)
                continue
            return EpicError(explain(name, exc))
        return None

    def print_console(self, printed: dict) -> None:
        """Print the rows console sinks committed since the last call as ``epic run`` prints
        them: a header line before the first row, at most the sink's ``limit`` rows
        (``printed``: per sink ``[next segment, rows printed]``, also kept in
        ``<sink topic>/printed`` across restarts)."""
        from epic.sinks import ConsoleSink
        from epic.spark.sink_query import sink_tables

        for n in self.plan.sinks:
            if not isinstance(n.sink, ConsoleSink):
                continue
            path = self.plan.sink_topic(n)
            mark = os.path.join(path, "printed")
            if n.name not in printed:
                printed[n.name] = self._printed_mark(mark)
            try:
                topic = Topic.open(path)
            except EpicError:
                continue
            limit = n.sink.limit
            for after, table in sink_tables(topic, printed[n.name][0]):
                names = table.schema.names
                for row in table.to_pylist():
                    if limit is not None and printed[n.name][1] >= limit:
                        break
                    if printed[n.name][1] == 0:
                        print(f"[{n.name}] " + "\t".join(map(console_value, names)))
                    printed[n.name][1] += 1
                    print(f"[{n.name}] " + "\t".join(console_value(row[c]) for c in names))
                printed[n.name][0] = after
                text = "%d %d" % tuple(printed[n.name])
                if self.plan.loc is not None:
                    from epic.storage import publish, resolve

                    loc = resolve(mark)
                    publish(loc.fs, loc.path, text.encode())
                else:
                    with open(mark, "w") as f:
                        f.write(text)
            sys.stdout.flush()

    def _printed_mark(self, mark: str) -> list[int]:
        """``[next segment, rows printed]`` of a console sink from its mark file (an older
        epic's holds the segment only: its rows count as printed once, the header with them)."""
        try:
            if self.plan.loc is not None:  # a remote work directory
                from epic.storage import read_small

                raw = read_small(mark)
                text = "" if raw is None else raw.decode()
            else:
                text = open(mark).read()
            vals = [int(v) for v in text.split()]
        except (FileNotFoundError, ValueError, UnicodeDecodeError):
            return [0, 0]
        if not vals:
            return [0, 0]
        return [vals[0], vals[1] if len(vals) > 1 else int(vals[0] > 0)]

    # -- stopping --------------------------------------------------------------------------
    def stop(self, drain: float = 0.0) -> None:
        """Stop every query. ``drain``: first wait up to this many seconds for micro-batches in
        flight to finish (a finished deploy: a query may still run a batch of trailing markers;
        stopping it mid-batch makes Spark log an aborted write)."""
        deadline = _time.monotonic() + drain
        for q in self.queries.values():
            try:
                while (_time.monotonic() < deadline and q.isActive
                       and q.status.get("isTriggerActive")):
                    _time.sleep(0.05)
                q.stop()
            except Exception:  # noqa: BLE001 - stopping is best effort
                pass


def _initialised(q) -> bool:
    """Whether query ``q`` is past "Initializing sources" (its planner process answered), has
    stopped or failed."""
    if q.exception() is not None or not q.isActive or q.recentProgress:
        return True
    return not q.status.get("message", "").startswith("Initializing")


_CAUSE = re.compile(r"(?:epic\.errors\.)?(NodeFailure|TopologyError|InputError|SpecError|"
                    r"StateError|OutputError|EpicError): (.+)")


def explain(query: str, exc) -> str:
    """One line for a failed query: epic's own error if Spark's text holds one, else the last
    exception line."""
    text = str(exc)
    m = _CAUSE.search(text)
    if m:
        return f"{m.group(1)}: {m.group(2).strip()} (query of node {query!r})"
    first = next((ln for ln in text.splitlines() if ln.strip()), text)
    last = [ln for ln in text.splitlines() if re.match(r"^\w+(\.\w+)*(Error|Exception): ", ln)]
    cause = last[-1] if last else first
    return f"query of node {query!r} failed: {cause.strip()[:500]}"
