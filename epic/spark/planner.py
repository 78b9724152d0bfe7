"""The plan of an ``epic deploy``: which queries run which nodes, and where every file lives.

Computed once per deploy from the topology (:class:`DeployPlan`); the launcher
(:mod:`epic.spark.launcher`) starts one Spark streaming query per :class:`QueryPlan`, and the
status (:mod:`epic.spark.status`) reads the same layout. Nothing here starts Spark.

Layout of a work directory::

    <workdir>/deploy.json            topology name, partitions per keyed node (fixed at first start)
    <workdir>/topics/<stream>        one Arrow topic per stream (a splitstream: one per output,
                                     <node>.<port>)
    <workdir>/checkpoints/<query>    the query's Spark checkpoint (with a remote work directory
                                     or --checkpoint-dir: <checkpoint dir>/checkpoints/<query>,
                                     on the driver's disk)
    <workdir>/state/<node>/p<i>/     a stateful node's snapshots per partition and batch id
    <workdir>/sinks/<node>           topics behind console and collect sinks
    <workdir>/spool/<query>/         a source's planned batches, until their micro-batch commits
    <workdir>/stats/<query>.json     input rows per query (the planner counts them)
    <workdir>/stats/<q>.branches.json  siblings' seconds per branch, measured by the tasks:
                                     when a micro-batch runs a task per branch
                                     (direct.split_branches)
    <workdir>/status.json            per-query progress, rewritten while the deploy runs
    <workdir>/STOP                   `epic stop` creates it; the driver stops and exits
    <workdir>/spark-local/           Spark's scratch space (spark.local.dir) of a session the
                                     deploy starts; emptied at start (runtime._spark_scratch)

Queries (docs/deploy.md): every node is one query, or with ``fuse`` a chain of nodes
(:func:`plan_groups`), siblings reading the same stream (:func:`plan_units`) and sources read by
the query of the merge they feed (:func:`plan_inlets`). A query's tasks
read its input files (topic segments, or a source's spooled batches), run its nodes and write its
outputs themselves (:mod:`epic.spark.direct`); Spark carries one commit message per task and
output.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass

import pyarrow as pa

from epic.errors import TopologyError
from epic.spark import trace
from epic.spark.tags import stored, topic_schema
from epic.topics import Topic
from epic.topology import (FilterNode, FlatMapNode, MapNode, MergeNode, ProcessNode, SinkNode,
                           SourceNode, SplitNode, Stream, Topology, WindowNode)

__all__ = ["DeployPlan", "QueryPlan", "plan_modes", "plan_groups", "plan_attached", "plan_units",
           "plan_inlets", "group_name", "unit_name", "MAX_BATCH_BYTES", "auto_batch_rows",
           "SPLIT_SECONDS_CONF"]

#: At most about this many bytes of topic files per input per micro-batch.
MAX_BATCH_BYTES = 256 << 20

#: Without ``batch_rows``, a micro-batch reads about this many bytes of its input's columns
#: (:func:`auto_batch_rows`), within :data:`BATCH_ROWS_RANGE` rows.
BATCH_BYTES = 128 << 20
BATCH_ROWS_RANGE = (1_000_000, 8_000_000)


def auto_batch_rows(schema) -> int:
    """Rows per micro-batch of an input with ``schema`` when the deploy does not set
    ``batch_rows``: :data:`BATCH_BYTES` over the width of a row (fixed-width columns their
    width, others 32 bytes), at least 1 M and at most 8 M rows.

    >>> auto_batch_rows(pa.schema([("ts", pa.int64()), ("k", pa.int64()), ("v", pa.float64())]))
    5592405
    >>> auto_batch_rows(pa.schema([(f"c{i}", pa.int64()) for i in range(13)]))
    1290555
    >>> auto_batch_rows(pa.schema([("ts", pa.int64())] + [(f"s{i}", pa.string()) for i in range(5)]))
    1000000
    """
    width = 0
    for f in schema:
        try:
            width += max(1, f.type.bit_width // 8)
        except ValueError:  # variable width: strings, lists...
            width += 32
    lo, hi = BATCH_ROWS_RANGE
    return max(lo, min(hi, BATCH_BYTES // max(1, width)))


def plan_modes(topology: Topology) -> dict[str, str]:
    """How each non-source, non-sink node runs: ``stateless``, ``keyed`` or ``global``."""
    from epic.split import RoundRobin

    out = {}
    for n in topology.topological_order():
        if isinstance(n, (SourceNode, SinkNode)):
            continue
        if isinstance(n, (MapNode, FilterNode, FlatMapNode)):
            out[n.name] = "stateless"
        elif isinstance(n, SplitNode):
            out[n.name] = "global" if isinstance(n.query, RoundRobin) else "stateless"
        elif isinstance(n, (WindowNode, ProcessNode)) and n.key:
            out[n.name] = "keyed"
        else:
            out[n.name] = "global"
    return out


def watermark_origins(topology: Topology, node) -> list[str]:
    """Per input of ``node``: the node whose forwarded watermark that input carries, found by
    going up through maps, filters, flat maps and splitstreams (which forward their input's
    watermark unchanged, on every output). Inputs of one origin carry the same watermark at
    each step, also when a step brought rows to only some of them (docs/deploy.md, "Same
    results as `epic run`")."""
    out = []
    for x in node.inputs:
        name = x.node
        while True:
            p = topology.nodes[name]
            if not isinstance(p, (MapNode, FilterNode, FlatMapNode, SplitNode)) \
                    or len(p.inputs) != 1:
                break
            name = p.inputs[0].node
        out.append(name)
    return out


def ranked_window(n) -> bool:
    """``n`` is a keyed time or count window: its operator ranks keys by their first on-time
    row in the input stream (``ranked``), so over several partitions its output rows carry
    ``_rank`` and consumers merge the partitions' rows into ``epic run``'s order (by time,
    then rank; docs/deploy.md, "Event time across partitions")."""
    from epic.windows import CountByStartWindow, PredicateWindow, SnapshotWindow

    return (isinstance(n, WindowNode) and bool(n.key)
            and not isinstance(n.spec, (PredicateWindow, SnapshotWindow, CountByStartWindow)))


def merging_sink(n) -> bool:
    """``n`` is a sink that, after a keyed time or count window over several partitions in its
    own query, restores ``epic run``'s order from the partitions' parts of each micro-batch
    itself: a local CSV or Parquet file (its commit merges them:
    :func:`epic.spark.sink_query.file_sink_writer`, ``ordered``) or a collect or console sink
    (their readers merge them: :func:`epic.spark.sink_query.sink_tables`). Not a topic sink
    (other programs read it) nor a file on an object store."""
    from epic.paths import is_remote
    from epic.sinks import CollectSink, ConsoleSink, CsvSink, ParquetSink

    if not isinstance(n, SinkNode):
        return False
    if isinstance(n.sink, (CsvSink, ParquetSink)):
        return not is_remote(n.sink.path)
    return isinstance(n.sink, (CollectSink, ConsoleSink))


def split_ranked(groups: list[list]) -> list[list]:
    """Over several partitions, a group that runs nodes after a keyed time or count window
    ends at the window instead, unless the only node after it is a sink that merges the
    partitions' rows itself (:func:`merging_sink`): the window's output topic then carries its
    rows with their ranks, merged into ``epic run``'s order by the next query, which runs the
    nodes after it (those nodes would lose the ranks, and a topic sink or a file on an object
    store would hold the partitions' rows one part after the other)."""
    out = []
    for g in groups:
        cut = next((i for i, n in enumerate(g) if ranked_window(n)), None)
        if (cut is None or cut == len(g) - 1
                or (cut == len(g) - 2 and merging_sink(g[-1]))):
            out.append(g)
        else:
            out += [g[:cut + 1], g[cut + 1:]]
    return out


def _consumers(topology: Topology) -> dict[str, list[str]]:
    """Node name -> the names of the nodes reading any of its outputs, in topological order."""
    out: dict[str, list[str]] = {}
    for n in topology.topological_order():
        for st in n.inputs:
            out.setdefault(st.node, []).append(n.name)
    return out


def plan_groups(topology: Topology, fuse: bool = True) -> list[list]:
    """The nodes each query runs, in topological order of their first node (``--fuse``).

    A node joins the group of the node producing its single input when that producer has no
    other consumer, neither is a merge, the producer is no splitstream with more than one output
    (one with a single output routes, filters and transforms like a stateless node), the group
    does not end in a sink yet, and the group's stateful nodes (window, process, combine) then
    run in one way: at most one keyed node and nothing else stateful, or any number of global
    ones (each runs in the query's single task, after the one before it). A source may head a
    group; a sink or a splitstream with several outputs ends one. Without ``fuse`` every node is
    its own group.
    """
    order = topology.topological_order()
    if not fuse:
        return [[n] for n in order]
    modes = plan_modes(topology)
    consumers = _consumers(topology)
    group_of: dict[str, list] = {}
    groups: list[list] = []
    for n in order:
        ins = list(n.inputs)
        g = None
        if len(ins) == 1 and not isinstance(n, MergeNode):
            p = topology.node(ins[0].node)
            pg = group_of.get(p.name)
            if (pg is not None and pg[-1] is p and not isinstance(p, SinkNode)
                    and not (isinstance(p, SplitNode) and len(p.outputs) > 1)
                    and len(consumers.get(p.name, [])) == 1):
                held = {modes.get(m.name, "stateless") for m in pg} - {"stateless"}
                mode = modes.get(n.name, "stateless")
                if mode == "stateless" or not held or (mode == "global" and held == {"global"}):
                    g = pg
        if g is None:
            g = []
            groups.append(g)
        g.append(n)
        group_of[n.name] = g
    return groups


def plan_attached(topology: Topology, groups: list[list]) -> tuple[dict, set]:
    """Groups that run inside another group's query (``--fuse``), reading its output in the same
    task: ``({head name of attached group: (parent group, (node, port) of the stream it reads)},
    {(node, port) of the streams that therefore need no topic})``.

    A group runs in one task when its first stateful node is global (a *root*), or when it is
    attached. A stream from the last node of such a group (one port of a splitstream, or an
    output with several consumers) is kept inside the query when *every* consumer of it heads a
    group with a single input whose stateful nodes are all global (or which has none): those
    groups are attached, in topological order, so their own outputs may in turn attach groups.
    A keyed group never attaches (its tasks are per key partition); its input stays a topic.
    """
    modes = plan_modes(topology)
    consumers: dict[tuple, list[str]] = {}
    for n in topology.topological_order():
        for st in n.inputs:
            consumers.setdefault((st.node, st.port), []).append(n.name)
    group_by_head = {g[0].name: g for g in groups}

    def held(g) -> set:
        return {modes.get(n.name, "stateless") for n in g} - {"stateless"}

    def eligible(name: str) -> bool:
        g = group_by_head.get(name)
        if g is None:
            return False
        h = g[0]
        return (len(h.inputs) == 1 and not isinstance(h, (SourceNode, MergeNode))
                and held(g) <= {"global"})

    attached: dict[str, tuple] = {}
    inner: set = set()
    for g in groups:
        first = next((modes[n.name] for n in g if modes.get(n.name, "stateless") != "stateless"),
                     None)
        if g[0].name not in attached and first != "global":
            continue   # not one task: a keyed or stateless-only root
        last = g[-1]
        if isinstance(last, SinkNode):
            continue
        for out in last.outputs:
            key = (out.node, out.port)
            names = consumers.get(key, [])
            if names and all(eligible(c) for c in names):
                inner.add(key)
                for c in names:
                    attached[c] = (g, key)
    return attached, inner


def plan_inlets(topology: Topology, groups: list[list]) -> dict[str, dict[int, list]]:
    """Source groups read by the query of the merge they feed (``--fuse``): ``{head name of a
    group with several inputs: {input index: source group}}``.

    A group headed by a source whose other nodes are all stateless, whose output has that
    merge (or combine) as its only consumer, is an *inlet*: the merge's query plans the source
    itself (its :class:`~epic.spark.source_query.SourcePlanner`) and its tasks run the group's
    nodes over that input's rows before the merge, so no topic holds them and no query of its
    own hands them on. A live feed's rows then cross one query fewer on their way to the
    outputs (DEBS: the paced game reader and its markers into ``merge_by_time``).
    """
    modes = plan_modes(topology)
    consumers = _consumers(topology)
    by_last = {g[-1].name: g for g in groups}
    out: dict[str, dict[int, list]] = {}
    for g in groups:
        head = g[0]
        if len(head.inputs) < 2:
            continue
        for i, st in enumerate(head.inputs):
            src = by_last.get(st.node)
            if (src is None or not isinstance(src[0], SourceNode)
                    or isinstance(src[-1], SinkNode) or len(src[-1].outputs) != 1
                    or consumers.get(st.node) != [head.name]
                    or any(modes.get(n.name, "stateless") != "stateless" for n in src[1:])):
                continue
            out.setdefault(head.name, {})[i] = src
    return out


def group_name(group: list) -> str:
    """The producer name of a group: its nodes joined by ``+``."""
    return "+".join(n.name for n in group)


def unit_name(unit: list) -> str:
    """The query (and checkpoint) name of a unit: its group's name, or for siblings the first
    group's name and ``~<number of groups>`` (names stay short enough for file names)."""
    first = group_name(unit[0])
    return first if len(unit) == 1 else f"{first}~{len(unit)}"


def plan_units(topology: Topology, groups: list[list]) -> list[list[list]]:
    """Groups that share one query (``--fuse``): *siblings*, groups that read the same input
    streams and whose first stateful node is keyed by the same key, or is global, or which have
    no stateful node. Their tasks then read the input once (the four windows of DEBS Q1 over one
    stream, keyed by player, are one query). Groups headed by a source or a merge stay alone.
    Order: by each unit's first group."""
    modes = plan_modes(topology)
    units: list[list[list]] = []
    by_sig: dict[tuple, list] = {}
    for g in groups:
        head = g[0]
        if isinstance(head, (SourceNode, MergeNode)) or len(head.inputs) != 1:
            units.append([g])
            continue
        st = next((n for n in g if modes.get(n.name, "stateless") != "stateless"), None)
        part = ("none",) if st is None else (
            ("keyed", tuple(st.key)) if modes[st.name] == "keyed" else ("global",))
        sig = (tuple((s.node, s.port) for s in head.inputs), part)
        u = by_sig.get(sig)
        if u is None:
            u = by_sig[sig] = []
            units.append(u)
        u.append(g)
    return units


def keyed_queries(plan: DeployPlan) -> int:
    """How many of ``plan``'s queries run a keyed stateful node in per-partition tasks."""
    n = 0
    for unit in plan.units:
        st = next((x for x in unit[0] if plan.modes.get(x.name, "stateless") != "stateless"),
                  None)
        n += st is not None and plan.modes[st.name] == "keyed"
    return n


def auto_partitions(topology: Topology, *, cores: int, fuse: bool) -> int:
    """The default partitions of keyed stateful nodes: the cores divided among the queries with
    keyed nodes, at least 1. Each keyed query runs its partitions' tasks side by side: with
    at least as many busy keyed queries as cores, a second partition only adds work (every
    task reads the query's whole input, the CSV parts beyond partition 0's are copied by the
    commit, one more snapshot per micro-batch); with one keyed query (a lone window), the
    partitions are its only parallelism. (The DEBS full game on 2 cores, fused: 219 s with 1
    partition, 245 s with 2; docs/performance.md, session 16.)"""
    probe = DeployPlan(topology, "/nonexistent-epic-probe", partitions=1, fuse=fuse,
                       batch_rows=None)
    return max(1, int(cores) // max(1, keyed_queries(probe)))


#: With a live source (docs/deploy.md, "Who runs first with a live source"), or with bounded
#: ones and :data:`SOURCE_FIRST_CONF`, the tasks of the queries that read no source run at this
#: nice value (``--conf spark.epic.backgroundNice=N``; 0: off): on a busy machine a row's path
#: from the live source to the outputs of the query reading it then waits less for CPU taken by
#: heavier downstream queries (the keyed windows of DEBS Q1 and Q3), which catch up when the CPU
#: is idle (issue 16, point 6).
BACKGROUND_NICE = 10

#: The Spark setting that overrides :data:`BACKGROUND_NICE`.
BACKGROUND_NICE_CONF = "spark.epic.backgroundNice"

#: ``--conf spark.epic.sourceFirst=true`` (bounded sources; off by default): the query reading
#: the source runs first and the others on the CPU it leaves. The queries that read no source
#: run their tasks at :data:`BACKGROUND_NICE`, at most one per core at once on a local master
#: (``cpu_slots``); the local master gets ``runtime.SOURCE_FIRST_SLOTS_PER_CORE`` slots per
#: core; siblings run a task per branch (:data:`BRANCH_TASKS_CONF`). On the DEBS full game
#: (Parquet, 2 cores) single trials gave 136-142 s against 155 s, but the complete benchmark
#: run of session 19 gave 185 s / 4.2 GiB (CSV 197 s / 4.5 GiB, over the 4 GiB target), so it
#: is not the default (docs/performance.md, session 19).
SOURCE_FIRST_CONF = "spark.epic.sourceFirst"

#: With ``--fuse``, siblings with stateful nodes (the four windows of DEBS Q1, or of Q3) may run
#: each branch in tasks of their own (``--conf spark.epic.branchTasks=true``; the default follows
#: :data:`SOURCE_FIRST_CONF`): Spark spreads them over the cores, and a query's micro-batch
#: lasts as long as its heaviest branch instead of all of them in a row. Each such task reads the
#: input itself (memory-mapped topic segments). Off, one task per key partition runs every
#: branch, reading the input once. Alone (without the source first) it made the DEBS full game
#: slower: 174 s against 155 s, the source's query waiting for task slots.
BRANCH_TASKS_CONF = "spark.epic.branchTasks"

#: ``--conf spark.epic.splitSeconds=S``: without :data:`BRANCH_TASKS_CONF`, a micro-batch of
#: siblings expected to take at least S seconds in one task runs a task per branch instead
#: (default :data:`epic.spark.direct.SPLIT_SECONDS`; the last micro-batch of bounded inputs
#: from 1 s, or S if lower; ``inf``: only that last one). See :func:`epic.spark.direct.split_branches`.
SPLIT_SECONDS_CONF = "spark.epic.splitSeconds"


@dataclass
class QueryPlan:
    """One streaming query: its name, checkpoint, the schema of the rows Spark carries (commit
    messages), factories of its planner and committer (:mod:`epic.spark.direct`), and whether
    it reads a live source (alone or as an inlet)."""

    name: str
    checkpoint: str
    schema: object
    make_planner: object
    committer: object
    batch_rows: int
    live: bool = False


class DeployPlan:
    """Groups, units (queries), modes and the work directory's layout of one deploy.

    Args:
        topology: the validated topology.
        workdir: the work directory (an absolute local path, or a URI: ``s3://bucket/prefix``).
        partitions: tasks per micro-batch of a keyed stateful node.
        fuse: chains and siblings share queries (``--fuse``).
        batch_rows: rows per micro-batch read from a source or topic (None: per query, from
            its input's row width, :func:`auto_batch_rows`).
        retention: delete topic segments every reading query has committed past.
        driver_dir: the driver-local directory of ``checkpoints/`` (default: ``workdir``).
        background_nice: with a live source or ``source_first``, the nice value of the tasks
            of the queries that read no source (:data:`BACKGROUND_NICE`; 0: all at the same
            priority).
        branch_tasks: siblings' branches in tasks of their own (:data:`BRANCH_TASKS_CONF`;
            None: as ``source_first``).
        source_first: :data:`SOURCE_FIRST_CONF`.
        cpu_slots: the cores of a local master (0: a cluster): with ``source_first``, the niced
            tasks work at most this many at once on a machine
            (:func:`epic.spark.executor.cpu_slot`), and the task workers' memory budget is this
            many :data:`epic.spark.executor.WORKERS_KEEP_PER_SLOT`
            (:func:`epic.spark.executor.keep_or_release`).
        split_seconds: :data:`SPLIT_SECONDS_CONF` (None: its default).
    """

    def __init__(self, topology: Topology, workdir: str, *, partitions: int, fuse: bool,
                 batch_rows: int | None, retention: bool = True, driver_dir: str | None = None,
                 background_nice: int | None = None, branch_tasks: bool | None = None,
                 source_first: bool = False, cpu_slots: int = 0,
                 split_seconds: float | None = None):
        from epic.paths import is_remote
        from epic.spark.direct import SPLIT_SECONDS
        from epic.storage import resolve

        self.t = topology
        self.workdir = workdir
        self.driver_dir = driver_dir or workdir
        #: The work directory's store when it is remote (None: local, memory-mapped reads).
        self.loc = resolve(workdir, "work directory") if is_remote(workdir) else None
        self.partitions = partitions
        self.fuse = fuse
        self.batch_rows = batch_rows
        self.retention = retention
        self.order = topology.topological_order()
        self.modes = plan_modes(topology)
        self.sources = [n for n in self.order if isinstance(n, SourceNode)]
        #: A source delivers rows over time (unbounded, or a paced replay): the queries reading
        #: one run their tasks ahead of the others' (:data:`BACKGROUND_NICE`).
        self.live = any(n.source.live for n in self.sources)
        self.background_nice = (BACKGROUND_NICE if background_nice is None
                                 else max(0, min(19, int(background_nice))))
        self.source_first = bool(source_first)
        self.branch_tasks = self.source_first if branch_tasks is None else bool(branch_tasks)
        self.cpu_slots = max(0, int(cpu_slots)) if self.source_first else 0
        self.local_cores = max(0, int(cpu_slots))
        self.split_seconds = SPLIT_SECONDS if split_seconds is None else float(split_seconds)
        self.sinks = [n for n in self.order if isinstance(n, SinkNode)]
        self.groups = plan_groups(topology, fuse)
        if self.partitions > 1:
            self.groups = split_ranked(self.groups)
        #: Groups run inside another group's query (head name -> (parent, stream)), and the
        #: streams that stay inside a query because of them (``plan_attached``).
        self.attached, self.inner_streams = (plan_attached(topology, self.groups) if fuse
                                             else ({}, set()))
        #: Source groups read by the query of the merge they feed (``plan_inlets``): head name
        #: of the merge's group -> {input index: source group}.
        self.inlets = plan_inlets(topology, self.groups) if fuse else {}
        inlet_groups = [g for d in self.inlets.values() for g in d.values()]
        inlet_heads = {g[0].name for g in inlet_groups}
        roots = [g for g in self.groups if g[0].name not in self.attached
                 and g[0].name not in inlet_heads]
        self.units = plan_units(topology, roots) if fuse else [[g] for g in self.groups]
        # Nodes whose output stays inside a fused query: no topic.
        self.internal = ({n.name for g in self.groups for n in g[:-1]}
                         | {g[-1].name for g in inlet_groups})

    def _with_inlets(self, group: list, name: str) -> str:
        """``name`` (of ``group`` or its unit) after the names of the group's inlets."""
        pre = [group_name(g) for _, g in sorted(self.inlets.get(group[0].name, {}).items())]
        return "+".join(pre + [name])

    def unit_name(self, unit: list) -> str:
        """The query (and checkpoint) name of a unit (:func:`unit_name`), its inlets' nodes
        first: ``event_reader+mark_events+merge_by_time+...``."""
        return self._with_inlets(unit[0], unit_name(unit))

    def producer(self, group: list) -> str:
        """The producer name of ``group``'s topic segments: its nodes (after its inlets' nodes,
        as the query name has them) joined by ``__``."""
        return self._with_inlets(group, group_name(group)).replace("+", "__")

    # -- layout ----------------------------------------------------------------------------
    def ckpt(self, query: str) -> str:
        return f"{self.driver_dir}/checkpoints/{query}"

    def state_dir(self, node) -> str:
        return f"{self.workdir}/state/{node.name}"

    def stream_topic(self, stream: Stream) -> str:
        """The topic holding ``stream`` (a splitstream's output: ``<node>.<port>``)."""
        if isinstance(self.t.node(stream.node), SplitNode):
            return f"{self.workdir}/topics/{stream.node}.{stream.port}"
        return f"{self.workdir}/topics/{stream.node}"

    def topic_streams(self, node) -> list[Stream]:
        """The output streams of ``node`` that have a topic (none for a sink or a node inside a
        fused query, nor a stream whose consumers are attached to its query)."""
        if isinstance(node, SinkNode) or node.name in self.internal:
            return []
        return [s for s in node.outputs if (s.node, s.port) not in self.inner_streams]

    def node_topics(self, node) -> list[str]:
        """The topics ``node`` writes (:meth:`topic_streams`)."""
        return [self.stream_topic(s) for s in self.topic_streams(node)]

    def sink_topic(self, node: SinkNode) -> str:
        """The topic a console, collect or topic sink writes."""
        from epic.sinks import TopicSink

        if isinstance(node.sink, TopicSink):
            return node.sink.path
        return f"{self.workdir}/sinks/{node.name}"

    def consumer(self, unit: list) -> str:
        """The consumer name of a query on its input topics (retention)."""
        return re.sub(r"[^A-Za-z0-9_.-]", "_", self.unit_name(unit))

    def split_group(self, group: list):
        """``(sink or None, members, pre, stateful or None, post, more)`` of a fused group: its
        nodes other than source and sink, split around the first stateful one; ``more``: the
        further (global) stateful nodes, each with the stateless nodes after it."""
        sink = group[-1] if isinstance(group[-1], SinkNode) else None
        members = [n for n in group if not isinstance(n, (SourceNode, SinkNode))]
        idx = [i for i, n in enumerate(members) if self.modes[n.name] != "stateless"]
        if not idx:
            return sink, members, members, None, [], []
        ends = idx[1:] + [len(members)]
        k = idx[0]
        more = [(members[a], members[a + 1:b]) for a, b in zip(idx[1:], ends[1:])]
        return sink, members, members[:k], members[k], members[k + 1:ends[0]], more

    def unit_partitions(self, unit: list) -> int:
        """Tasks per micro-batch of the unit's keyed node: ``partitions``, except 1 for a keyed
        node that does not rank its rows (a predicate, snapshot or count-by-start window, a
        keyed ``process`` node) when its group's rows go on to another query's nodes (not
        only to sinks): one task emits them in ``epic run``'s order, which the next query could
        not restore from parts (docs/deploy.md, "Event time across partitions")."""
        if self.partitions <= 1:
            return max(1, self.partitions)
        for g in unit:
            st = next((n for n in g if self.modes.get(n.name, "stateless") != "stateless"),
                      None)
            if (st is not None and self.modes[st.name] == "keyed" and not ranked_window(st)
                    and not isinstance(g[-1], SinkNode)
                    and any(not isinstance(self.t.node(c), SinkNode)
                            for c in _consumers(self.t).get(g[-1].name, []))):
                return 1
        return self.partitions

    def ranked(self, n) -> bool:
        """``n``'s output rows carry ``_rank`` (:func:`ranked_window`, over several
        partitions): on its output topic, or, when its output stays inside its query, to the
        sink after it (:func:`split_ranked` leaves nothing else after it there)."""
        return self.partitions > 1 and ranked_window(n)

    def ordered_sink(self, sink: SinkNode) -> str | None:
        """The time column of ``sink``'s input when it reads a ranked window in its own query
        (:func:`merging_sink`): its rows then carry their merge keys to its writer (a file
        sink's commit, a collect or console sink's topic), else None."""
        src = self.t.node(sink.input.node)
        return sink.input.time if src.name in self.internal and self.ranked(src) else None

    # -- topics ----------------------------------------------------------------------------
    def create_topics(self) -> None:
        """Create every topic (idempotent: a restart finds them) and, with retention, register
        every reading query as a consumer before any query starts (so retention never deletes a
        segment a query that has not started yet still has to read)."""
        for n in self.order:
            for s in self.topic_streams(n):
                self._create(n, self.stream_topic(s),
                             topic_schema(s.schema, rank=self.ranked(n)), s.time, s.unit)
        for n in self.sinks:
            if self._topic_sink(n):
                out = n.sink.output_schema(n.input.schema)
                if self.ordered_sink(n) is not None:
                    from epic.spark.sink_query import MERGE_KEYS

                    out = pa.schema(list(out) + [pa.field(k, pa.int64()) for k in MERGE_KEYS])
                self._create(n, self.sink_topic(n), out,
                             n.input.time if n.input.time in out.names else None, n.input.unit)
        if self.retention:
            for u in self.units:
                if isinstance(u[0][0], SourceNode):
                    continue
                inlets = self.inlets.get(u[0][0].name, {})
                for i, st in enumerate(u[0][0].inputs):
                    if i in inlets:
                        continue
                    Topic.open(self.stream_topic(st)).register_consumer(self.consumer(u))

    @staticmethod
    def _topic_sink(node: SinkNode) -> bool:
        from epic.sinks import CollectSink, ConsoleSink, TopicSink

        return isinstance(node.sink, (CollectSink, ConsoleSink, TopicSink))

    @staticmethod
    def _create(node, path: str, schema, time, unit) -> None:
        try:
            Topic.create(path, stored(schema), time_column=time, time_unit=unit, exist_ok=True)
        except TopologyError as exc:
            raise TopologyError(
                f"node {node.name!r}: its topic {path} was created by an earlier deploy with "
                f"another schema ({exc}). The topology changed: deploy into a fresh "
                "--workdir (or delete this one)") from None

    # -- queries ---------------------------------------------------------------------------
    def queries(self) -> list[QueryPlan]:
        """One query per unit, in topological order of their first nodes."""
        return [self.query(u) for u in self.units]

    def query(self, unit: list) -> QueryPlan:
        """The query running the groups of ``unit`` (one group, or siblings: :func:`plan_units`):
        its tasks read the input files, run the nodes and write the outputs; Spark carries one
        commit message per task and output (:mod:`epic.spark.direct`)."""
        from epic.spark.direct import (PTR_SCHEMA, Committer, GroupPlan, GroupPlanner,
                                       PlanInput)
        from epic.spark.source_query import SourcePlanner
        from epic.spark.topic_source import TopicStreamReader

        qname = self.unit_name(unit)
        ckpt = self.ckpt(qname)
        safe = re.sub(r"\W", "_", qname)
        head = unit[0][0]
        rows = self.batch_rows
        inlets = self.inlets.get(head.name, {})

        def source_input(node):
            nonlocal rows
            own = self.batch_rows or auto_batch_rows(node.outputs[0].schema)
            rows = own if rows is None else min(rows, own)
            return PlanInput("source", SourcePlanner(
                node, source_index=self.sources.index(node), n_sources=len(self.sources),
                workdir=self.workdir, prefetch=True, shared=len(head.inputs) > 1))

        ranks = {}
        if isinstance(head, SourceNode):
            inputs = [source_input(head)]
            ids = [f"source:{head.name}"]
        else:
            inputs, ids = [], []
            for i, s_ in enumerate(head.inputs):
                if self.ranked(self.t.node(s_.node)):
                    ranks[i] = s_.time
                if i in inlets:
                    inputs.append(source_input(inlets[i][0]))
                    ids.append(f"source:{inlets[i][0].name}")
                    continue
                topic = Topic.open(self.stream_topic(s_))
                own = self.batch_rows or auto_batch_rows(topic.schema)
                rows = own if rows is None else min(rows, own)
                # Rows and bytes: a micro-batch of 1 M heat-map rows (DEBS Q3, ~100 KB each)
                # would hold the whole game; a keyed query's tasks each read every file.
                opts = {"max_rows_per_trigger": str(own),
                        "max_bytes_per_trigger": str(MAX_BATCH_BYTES)}
                if self.retention:
                    # Segments every reader has committed past are deleted (the full DEBS game
                    # would otherwise keep ~40 GB of intermediate topics).
                    opts.update(consumer=self.consumer(unit), retention="true")
                inputs.append(PlanInput("topic", TopicStreamReader(topic, None, opts)))
                ids.append(topic.manifest.topic_id)
        branches = [self._branch(g, ckpt, ids) for g in unit]
        # An inlet's stateless nodes, run over its input's rows before the merge.
        inlet_pre = {i: [self._spec(n, ckpt, ids, inner=isinstance(n, SplitNode)) for n in g[1:]]
                     for i, g in inlets.items()}
        st = next((n for n in unit[0] if self.modes.get(n.name, "stateless") != "stateless"),
                  None)
        live = any(x.kind == "source" and not x.planner.bounded for x in inputs)
        reads_source = any(x.kind == "source" for x in inputs)
        plan = GroupPlan(
            name=qname, workdir=self.workdir, merge=len(head.inputs) > 1,
            key=tuple(st.key) if st is not None and self.modes[st.name] == "keyed" else None,
            partitions=self.unit_partitions(unit), branches=branches, stateful=st is not None,
            spool=(f"{self.workdir}/spool/{safe}" if self.loc is None
                   else self.loc.join("spool", safe).path),
            fs=None if self.loc is None else self.loc.fs,
            fs_root=None if self.loc is None else self.loc.path, checkpoint=ckpt,
            trace=trace.target(), inlet_pre=inlet_pre,
            nice=self.background_nice if (self.live or self.source_first) and not reads_source
            else 0,
            branch_tasks=self.branch_tasks and st is not None and len(branches) > 1,
            cpu_slots=0 if reads_source or not self.background_nice else self.cpu_slots,
            keep_slots=self.local_cores, ranks=ranks, split_seconds=self.split_seconds,
            # siblings' measured costs (direct.split_branches), on the driver's disk
            costs=(os.path.join(self.workdir, "stats", f"{safe}.branches.json")
                   if st is not None and len(branches) > 1 and self.loc is None else ""))
        return QueryPlan(name=qname, checkpoint=ckpt, schema=PTR_SCHEMA,
                         make_planner=functools.partial(GroupPlanner, plan, inputs, rows),
                         committer=Committer(plan.outputs, plan.name, plan.trace, plan.costs),
                         batch_rows=rows, live=live)

    def _spec(self, n, ckpt: str, ids: list, upstream=None, inner: bool = False):
        """The task spec of node ``n`` in the query with checkpoint ``ckpt`` and inputs ``ids``
        (``upstream``: the stateful node before it in the query, its markers' source;
        ``inner``: a splitstream inside a group, not at its end)."""
        from epic.spark.tasks import TaskSpec

        split = isinstance(n, SplitNode)
        return TaskSpec(inner=inner, node=n, mode=self.modes[n.name],
                        in_schemas=[x.schema for x in n.inputs],
                        out_schema=topic_schema((n.outputs[0] if split else n.output).schema,
                                                rank=self.ranked(n)),
                        input_topics=ids, checkpoint=ckpt, state_dir=self.state_dir(n),
                        workdir=self.workdir,
                        port_schemas=([topic_schema(x.schema) for x in n.outputs]
                                      if split else None),
                        upstream=None if upstream is None else self.state_dir(upstream),
                        origins=(watermark_origins(self.t, n) if len(n.inputs) > 1 else None))

    def _branch(self, group: list, ckpt: str, ids: list, upstream=None):
        """A fused group as a branch of a query: its task specs and output writers, and the
        groups attached to it (:func:`plan_attached`) as its children. ``upstream``: for an
        attached group, the last stateful node before it in the query (its markers' source)."""
        from epic.sinks import CsvSink, ParquetSink
        from epic.spark.direct import Branch, Output
        from epic.spark.object_sink import file_writer
        from epic.spark.topic_sink import TopicStreamWriter
        from pyspark.sql.pandas.types import from_arrow_schema

        head = group[0]
        sink, members, pre, st, post, more = self.split_group(group)
        # The group's output markers are what its last stateful node forwarded (for an
        # attached group without one: the last one before it in the query).
        last_st = more[-1][0] if more else st if st is not None else upstream
        state = None if last_st is None else self.state_dir(last_st)
        producer = self.producer(group)
        last = members[-1] if members else head

        def spec(n, upstream=None):
            return self._spec(n, ckpt, ids, upstream, inner=isinstance(n, SplitNode)
                              and n is not last)

        def topic_writer(path: str) -> TopicStreamWriter:
            opts = {"producer": producer, "checkpoint": ckpt}
            if state is not None:
                opts["state_dir"] = state
            schema = Topic.open(path).schema
            return TopicStreamWriter(path, from_arrow_schema(
                pa.schema([f.with_nullable(True) for f in schema])), opts)

        if sink is not None and isinstance(sink.sink, (CsvSink, ParquetSink)):
            # after a ranked window in this group: the commit merges the partitions' parts
            outputs = [Output("file", file_writer(sink, checkpoint=ckpt, workdir=self.workdir,
                                                  ordered=self.ordered_sink(sink)), sink=sink)]
        elif sink is not None:
            outputs = [Output("topic", topic_writer(self.sink_topic(sink)), sink=sink,
                              keys=self.ordered_sink(sink))]
        elif isinstance(last, SplitNode):
            outputs = [Output("topic", topic_writer(self.stream_topic(x)), port=x.port)
                       for x in last.outputs if (x.node, x.port) not in self.inner_streams]
        elif (last.output.node, last.output.port) in self.inner_streams:
            outputs = []
        else:
            outputs = [Output("topic", topic_writer(self.stream_topic(last.output)))]
        stages, up = [], st
        for n, after in more:
            stages.append((spec(n, upstream=up), [spec(m) for m in after]))
            up = n
        children = []
        if sink is None:
            for x in last.outputs:
                if (x.node, x.port) not in self.inner_streams:
                    continue
                for g in self.groups:
                    if self.attached.get(g[0].name, (None, None))[1] == (x.node, x.port):
                        children.append((x.port, self._branch(g, ckpt, ids, last_st)))
        return Branch(pre=[spec(n) for n in pre],
                      st=None if st is None else spec(st, upstream=upstream),
                      post=[spec(n) for n in post], outputs=outputs,
                      split=sink is None and isinstance(last, SplitNode), more=stages,
                      children=children)
