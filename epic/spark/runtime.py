"""``epic deploy``: every node of a topology a Spark Structured Streaming query, linked by topics.

Layout of a work directory::

    <workdir>/deploy.json            topology name, partitions per keyed node (fixed at first start)
    <workdir>/topics/<stream>        one Arrow topic per stream (a splitstream: one, with _port)
    <workdir>/checkpoints/<node>     the node query's Spark checkpoint
    <workdir>/state/<node>/p<i>/     the node's state snapshots per partition and batch id
    <workdir>/sinks/<node>           topics behind console and collect sinks
    <workdir>/status.json            per-node progress, rewritten while the deploy runs
    <workdir>/STOP                   `epic stop` creates it; the driver stops and exits

Mapping (see ``docs/deploy.md``): a source node is a query over a Python data source wrapping the
epic source (:mod:`epic.spark.source_query`); map / filter / flat_map / splitstream are
``mapInArrow`` over their input topic; window, process, merge, combine and a round-robin splitstream
keep their state in snapshot files (:mod:`epic.spark.tasks`), keyed ones after ``repartition`` by
key, global ones on one partition; sinks are queries writing files exactly once
(:mod:`epic.spark.sink_query`) or topics.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time as _time
import uuid
from dataclasses import dataclass, field

import pyarrow as pa

from epic.atomic import atomic_json
from epic.errors import EpicError, TopologyError
from epic.spark.tags import IN, PORT, POS, topic_schema
from epic.topics import Topic
from epic.topology import (FilterNode, FlatMapNode, MapNode, MergeNode, ProcessNode,
                           SinkNode, SourceNode, SplitNode, Stream, Topology, WindowNode)

__all__ = ["deploy", "DeployResult", "read_status", "request_stop", "plan_modes"]

STATUS = "status.json"
#: With ``--io direct``: at most about this many bytes of topic files per input per micro-batch.
MAX_BATCH_BYTES = 256 << 20
STOP = "STOP"


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


def plan_groups(topology: Topology, fuse: bool = True, split_tails: bool = False) -> list[list]:
    """The nodes each query runs, in topological order of their first node (``--fuse``).

    A node joins the group of the node producing its single input when that producer has no
    other consumer, neither is a splitstream or a merge, the group does not end in a sink yet, and
    the group then holds at most one stateful node (window, process, combine). A source may head a
    group; a sink ends one. With ``split_tails`` (``--io direct``, where a query writes several
    topics) a splitstream may also end a group. Without ``fuse`` every node is its own group.
    """
    order = topology.topological_order()
    if not fuse:
        return [[n] for n in order]
    modes = plan_modes(topology)
    consumers: dict[str, list[str]] = {}
    for n in order:
        for st in n.inputs:
            consumers.setdefault(st.node, []).append(n.name)
    group_of: dict[str, list] = {}
    groups: list[list] = []
    for n in order:
        ins = list(n.inputs)
        g = None
        if len(ins) == 1 and not isinstance(n, MergeNode) and (
                split_tails or not isinstance(n, SplitNode)):
            p = topology.node(ins[0].node)
            pg = group_of.get(p.name)
            if (pg is not None and pg[-1] is p and not isinstance(p, (SplitNode, SinkNode))
                    and len(consumers.get(p.name, [])) == 1):
                stateful = sum(1 for m in pg if modes.get(m.name, "stateless") != "stateless")
                if modes.get(n.name, "stateless") == "stateless" or stateful == 0:
                    g = pg
        if g is None:
            g = []
            groups.append(g)
        g.append(n)
        group_of[n.name] = g
    return groups


def group_name(group: list) -> str:
    """The query (and producer, checkpoint) name of a group: its nodes joined by ``+``."""
    return "+".join(n.name for n in group)


def unit_name(unit: list) -> str:
    """The query (and checkpoint) name of a unit: its group's name, or for siblings the first
    group's name and ``~<number of groups>`` (names stay short enough for file names)."""
    first = group_name(unit[0])
    return first if len(unit) == 1 else f"{first}~{len(unit)}"


def plan_units(topology: Topology, groups: list[list]) -> list[list[list]]:
    """Groups that share one query (``--fuse`` with direct io): *siblings*, groups that read the
    same input streams and whose first stateful node is keyed by the same key, or is global, or
    which have no stateful node. Their tasks then read the input once (the four windows of DEBS
    Q1 over one stream, keyed by player, are one query). Groups headed by a source or a merge stay
    alone. Order: by each unit's first group."""
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


def _route_split(node: SplitNode) -> bool:
    """One topic with a ``_port`` column (all outputs share a schema) or one topic per output."""
    first = node.outputs[0].schema
    return all(s.schema.equals(first) for s in node.outputs)


def _stream_topic(workdir: str, stream: Stream, topology: Topology,
                  per_port: bool = False) -> tuple[str, int | None]:
    """Topic path of ``stream`` and the ``_port`` to filter on (None: the topic is the stream).
    ``per_port``: every splitstream writes one topic per output (``--io direct``)."""
    node = topology.node(stream.node)
    if isinstance(node, SplitNode):
        if _route_split(node) and not per_port:
            return f"{workdir}/topics/{node.name}", stream.port
        return f"{workdir}/topics/{node.name}.{stream.port}", None
    return f"{workdir}/topics/{node.name}", None


def _spark_schema(schema: pa.Schema):
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(pa.schema([f.with_nullable(True) for f in schema]))


def _user_modules(topology: Topology) -> set[str]:
    """Modules whose functions the nodes use and that Python workers may not import."""
    import types

    seen, mods = set(), set()

    def visit(obj, depth):
        if depth > 4 or id(obj) in seen:
            return
        seen.add(id(obj))
        if isinstance(obj, (types.FunctionType, type)):
            mods.add(getattr(obj, "__module__", None))
            if isinstance(obj, types.FunctionType):
                for c in obj.__closure__ or ():
                    try:
                        visit(c.cell_contents, depth + 1)
                    except ValueError:
                        pass
            return
        if isinstance(obj, (str, bytes, int, float, bool, type(None), pa.Schema, pa.DataType)):
            return
        if isinstance(obj, (list, tuple)):
            for x in obj:
                visit(x, depth + 1)
            return
        if isinstance(obj, dict):
            for x in obj.values():
                visit(x, depth + 1)
            return
        mods.add(type(obj).__module__)
        d = getattr(obj, "__dict__", None)
        if d:
            for x in d.values():
                visit(x, depth + 1)

    for n in topology.nodes.values():
        visit(n, 0)
    out = set()
    for m in mods:
        if not m or m in ("builtins",) or m.split(".")[0] in ("epic", "pyarrow", "numpy"):
            continue
        if m in sys.modules and not _importable(m):
            out.add(m)
    return out


def _importable(module: str) -> bool:
    """Whether a Python worker can import ``module`` by name: its top-level package is found on
    ``sys.path`` (installed, editable or not). A topology file loaded from a path, and modules next
    to it, are not; those are shipped by value. Shipping an importable package by value would
    drag its whole module state along (and fail on what cannot be pickled)."""
    import importlib.machinery

    top = module.split(".")[0]
    return importlib.machinery.PathFinder.find_spec(top, sys.path) is not None


class _Deploy:
    def __init__(self, topology: Topology, workdir: str, *, spark, batch_rows: int,
                 trigger_interval: float, partitions: int, fuse: bool = False,
                 io: str = "direct", retention: bool = True):
        self.t = topology
        self.retention = retention and io == "direct"
        self.io = io
        self.direct = io == "direct"
        self.workdir = workdir
        from epic.spark.sink_query import deploy_id

        self.deploy_id = deploy_id(workdir)
        self.spark = spark
        self.batch_rows = batch_rows
        self.trigger = f"{max(1, int(trigger_interval * 1000))} milliseconds"
        self.order = topology.topological_order()
        self.modes = plan_modes(topology)
        if not self.direct:
            # --io rows shuffles rows by key through Spark, so a partition would see only its
            # keys' rows and could not follow the stream's clock (docs/windows.md): its window
            # nodes run as one task. The direct mode keeps them keyed (every task reads the
            # stream and learns each row's high-water mark).
            for n in topology.nodes.values():
                if isinstance(n, WindowNode) and self.modes.get(n.name) == "keyed":
                    self.modes[n.name] = "global"
        self.queries: dict[str, object] = {}
        self.partitions = partitions
        self.tag = uuid.uuid4().hex[:8]
        self.sources = [n for n in self.order if isinstance(n, SourceNode)]
        self.fuse = fuse
        self.groups = plan_groups(topology, fuse, split_tails=self.direct)
        # Queries: with direct io and fuse, sibling groups share one (plan_units).
        self.units = (plan_units(topology, self.groups) if fuse and self.direct
                      else [[g] for g in self.groups])
        # Nodes whose output stays inside a fused query: no topic.
        self.internal = {n.name for g in self.groups for n in g[:-1]}

    # -- paths -----------------------------------------------------------------------------
    def ckpt(self, node: str) -> str:
        return f"{self.workdir}/checkpoints/{node}"

    def out_topic(self, node) -> str:
        return f"{self.workdir}/topics/{node.name}"

    def routed(self, node) -> bool:
        """Whether splitstream ``node`` writes one topic with a ``_port`` column."""
        return _route_split(node) and not self.direct

    def sink_topic(self, node) -> str:
        return f"{self.workdir}/sinks/{node.name}"

    # -- topics ----------------------------------------------------------------------------
    def create_topics(self) -> None:
        for n in self.order:
            if isinstance(n, SinkNode) or n.name in self.internal:
                continue
            if isinstance(n, SplitNode) and self.routed(n):
                specs = [(self.out_topic(n), topic_schema(n.outputs[0].schema, port=True),
                          n.outputs[0])]
            elif isinstance(n, SplitNode):
                specs = [(f"{self.workdir}/topics/{n.name}.{s.port}", topic_schema(s.schema), s)
                         for s in n.outputs]
            else:
                specs = [(self.out_topic(n), topic_schema(n.output.schema), n.output)]
            for path, schema, s in specs:
                try:
                    Topic.create(path, schema, time_column=s.time, time_unit=s.unit,
                                 exist_ok=True)
                except TopologyError as exc:
                    raise TopologyError(
                        f"node {n.name!r}: its topic {path} was created by an earlier deploy with "
                        f"another schema ({exc}). The topology changed: deploy into a fresh "
                        "--workdir (or delete this one)") from None
        if self.retention:
            # Every reading query registers before any query starts, so that retention never
            # deletes a segment a query that has not started yet still has to read.
            for u in self.units:
                if isinstance(u[0][0], SourceNode):
                    continue
                for st in u[0][0].inputs:
                    path, _ = _stream_topic(self.workdir, st, self.t, per_port=True)
                    Topic.open(path).register_consumer(self.consumer(u))

    def consumer(self, unit: list) -> str:
        """The consumer name of a query on its input topics (retention)."""
        return re.sub(r"[^A-Za-z0-9_.-]", "_", unit_name(unit))

    # -- reading ---------------------------------------------------------------------------
    def read(self, stream: Stream, *, position: bool = False):
        from pyspark.sql import functions as F

        from epic.spark.topic_source import FORMAT, register

        register(self.spark)
        path, port = _stream_topic(self.workdir, stream, self.t, per_port=self.direct)
        r = (self.spark.readStream.format(FORMAT).option("path", path)
             .option("max_rows_per_trigger", str(self.batch_rows)))
        if position:
            r = r.option("position_column", POS)
        df = r.load()
        if port is not None:
            df = df.filter(F.col(PORT) == port).drop(PORT)
        return df, Topic.open(path).manifest.topic_id

    def write(self, df, node, path: str, qname: str | None = None, state_dir: str | None = None):
        """``state_dir``: the query's stateful node's snapshots (its output markers)."""
        from epic.spark import write_topic

        qname = qname or node.name
        m = Topic.open(path).manifest
        # A producer id is part of segment names: a fused group's is its nodes joined by "__".
        return (write_topic(df, path, producer=qname.replace("+", "__"),
                            checkpoint=self.ckpt(qname),
                            time_column=m.time_column, time_unit=m.time_unit,
                            query_name=qname, state_dir=state_dir)
                .trigger(processingTime=self.trigger))

    # -- queries ---------------------------------------------------------------------------
    def split_group(self, group: list):
        """``(sink or None, members, pre, stateful or None, post)`` of a fused group: its nodes
        other than source and sink, split around the first stateful one."""
        sink = group[-1] if isinstance(group[-1], SinkNode) else None
        members = [n for n in group if not isinstance(n, (SourceNode, SinkNode))]
        k = next((i for i, n in enumerate(members) if self.modes[n.name] != "stateless"), None)
        if k is None:
            return sink, members, members, None, []
        return sink, members, members[:k], members[k], members[k + 1:]

    def source_query(self, node: SourceNode):
        from epic.spark.source_query import make_source_data_source

        name = f"epic_source_{self.tag}_{node.name.replace('-', '_')}"
        schema = topic_schema(node.output.schema)
        cls = make_source_data_source(node, name=name, schema=schema,
                                      source_index=self.sources.index(node),
                                      n_sources=len(self.sources), batch_rows=self.batch_rows,
                                      parallelism=self.partitions, workdir=self.workdir)
        self.spark.dataSource.register(cls)
        df = self.spark.readStream.format(name).load()
        return self.write(df, node, self.out_topic(node))

    def node_query(self, node):
        from pyspark.sql import functions as F

        from epic.spark.tasks import TaskSpec, node_function

        mode = self.modes[node.name]
        position = mode != "stateless"
        dfs, ids = [], []
        for i, s in enumerate(node.inputs):
            df, tid = self.read(s, position=position)
            if isinstance(node, MergeNode):
                df = df.withColumn(IN, F.lit(i).cast("long"))
            dfs.append(df)
            ids.append(tid)
        df = dfs[0]
        for other in dfs[1:]:
            df = df.unionByName(other)
        if mode == "keyed":
            df = df.repartition(self.partitions, *[F.col(k) for k in node.key])
        elif mode == "global":
            df = df.coalesce(1)
        writers = []
        if isinstance(node, SplitNode) and not _route_split(node):
            targets = [(s.port, f"{self.workdir}/topics/{node.name}.{s.port}", s)
                       for s in node.outputs]
        else:
            targets = [(None, self.out_topic(node), None)]
        for port, path, _s in targets:
            out_schema = Topic.open(path).schema
            spec = TaskSpec(node=node, mode=mode, in_schemas=[s.schema for s in node.inputs],
                            out_schema=out_schema, input_topics=ids,
                            checkpoint=self.ckpt(node.name if port is None
                                                 else f"{node.name}.{port}"),
                            state_dir=f"{self.workdir}/state/{node.name}"
                            + ("" if port is None else f".{port}"),
                            port=port, workdir=self.workdir)
            out = df.mapInArrow(node_function(spec), _spark_schema(out_schema))
            state = spec.state_dir if mode != "stateless" else None
            if port is None:
                writers.append((node.name, self.write(out, node, path, state_dir=state)))
            else:
                from epic.spark import write_topic

                m = Topic.open(path).manifest
                w = (write_topic(out, path, producer=node.name,
                                 checkpoint=self.ckpt(f"{node.name}.{port}"),
                                 time_column=m.time_column, time_unit=m.time_unit,
                                 query_name=f"{node.name}.{port}", state_dir=state)
                     .trigger(processingTime=self.trigger))
                writers.append((f"{node.name}.{port}", w))
        return writers

    def sink_query(self, node: SinkNode, df=None, qname: str | None = None,
                   state_dir: str | None = None):
        from pyspark.sql import functions as F

        from epic.sinks import CollectSink, ConsoleSink, CsvSink, ParquetSink, TopicSink
        from epic.spark.sink_query import make_file_sink_data_source

        sink = node.sink
        qname = qname or node.name
        if df is None:
            df, _ = self.read(node.input)
        if isinstance(sink, (CsvSink, ParquetSink)):
            name = f"epic_sink_{self.tag}_{node.name.replace('-', '_')}"
            cls = make_file_sink_data_source(node, name=name, checkpoint=self.ckpt(qname),
                                             workdir=self.workdir)
            self.spark.dataSource.register(cls)
            return (df.writeStream.format(name)
                    .option("checkpointLocation", self.ckpt(qname))
                    .queryName(qname).trigger(processingTime=self.trigger))
        out = sink.output_schema(node.input.schema)
        cols = []
        for f in out:
            if sink.delays and f.name == sink.delay_columns[0]:
                cols.append(F.col("_entry").alias(f.name))
            elif sink.delays and f.name == sink.delay_columns[1]:
                cols.append((F.unix_micros(F.current_timestamp()) * 1000).alias(f.name))
            else:
                cols.append(F.col(f.name))
        df = df.select(*cols)
        path = sink.path if isinstance(sink, TopicSink) else self.sink_topic(node)
        assert isinstance(sink, (TopicSink, ConsoleSink, CollectSink))
        Topic.create(path, out, time_column=node.input.time if node.input.time in out.names
                     else None, time_unit=node.input.unit, exist_ok=True)
        return self.write(df, node, path, qname, state_dir=state_dir)

    def source_df(self, node: SourceNode, position: bool = False, key=None, apply=None,
                  apply_schema=None):
        """A source node's data source as a streaming DataFrame (for a fused group)."""
        from epic.spark.source_query import make_source_data_source

        name = f"epic_source_{self.tag}_{node.name.replace('-', '_')}"
        cls = make_source_data_source(node, name=name, schema=topic_schema(node.output.schema),
                                      source_index=self.sources.index(node),
                                      n_sources=len(self.sources), batch_rows=self.batch_rows,
                                      parallelism=self.partitions, workdir=self.workdir,
                                      position=position, key=key, apply=apply,
                                      apply_schema=apply_schema)
        self.spark.dataSource.register(cls)
        return self.spark.readStream.format(name).load()

    def group_query(self, group: list):
        """One query running a fused group: [source] stateless* [stateful stateless*] [sink].

        The nodes' functions run in sequence inside ``mapInArrow`` tasks (stateless ones before the
        shuffle of a stateful node, the stateful node and its stateless successors after it), each
        seeing the tagged batches its input topic would hold. Markers come from the group's input
        (source or topic) offsets in the group's checkpoint, as a node behind stateless nodes
        sees its upstream markers unchanged.
        """
        from pyspark.sql import functions as F

        from epic.spark.tasks import TaskSpec, fused_function

        qname = group_name(group)
        ckpt = self.ckpt(qname)
        head = group[0]
        sink, members, pre, st, post = self.split_group(group)
        # The group's output markers are its stateful node's (stateless nodes after it forward
        # its watermark unchanged).
        state = None if st is None else f"{self.workdir}/state/{st.name}"
        # A keyed stateful node right behind a source: the source partitions by key itself, so
        # there is no shuffle (rows stay Arrow from the source task to the node task).
        by_key = (isinstance(head, SourceNode) and st is not None and not pre
                  and self.modes[st.name] == "keyed")

        def spec(n):
            return TaskSpec(node=n, mode=self.modes[n.name],
                            in_schemas=[x.schema for x in n.inputs],
                            out_schema=topic_schema(n.output.schema), input_topics=ids,
                            checkpoint=ckpt, state_dir=f"{self.workdir}/state/{n.name}",
                            workdir=self.workdir)

        ids = None
        spec_ids = [f"source:{head.name}"] if isinstance(head, SourceNode) else None
        if by_key:
            # The stateful node (and its stateless successors) run inside the source's read
            # tasks: Spark only ever sees their output rows.
            ids = spec_ids
            last = ([st] + post)[-1]
            df = self.source_df(head, position=True, key=tuple(st.key),
                                apply=fused_function([spec(n) for n in [st] + post]),
                                apply_schema=topic_schema(last.output.schema))
            st = None
        elif isinstance(head, SourceNode):
            df = self.source_df(head, position=st is not None and not pre)
            ids = spec_ids
        else:
            dfs, ids = [], []
            for i, s_ in enumerate(head.inputs):
                d_, tid = self.read(s_, position=st is not None and not pre)
                if isinstance(head, MergeNode):
                    d_ = d_.withColumn(IN, F.lit(i).cast("long"))
                dfs.append(d_)
                ids.append(tid)
            df = dfs[0]
            for other in dfs[1:]:
                df = df.unionByName(other)

        if pre:
            schema = topic_schema(pre[-1].output.schema)
            if st is not None:
                schema = schema.append(pa.field(POS, pa.int64()))
            df = df.mapInArrow(fused_function([spec(n) for n in pre],
                                              pos_schema=schema if st is not None else None),
                               _spark_schema(schema))
        if st is not None:
            if self.modes[st.name] == "keyed":
                df = df.repartition(self.partitions, *[F.col(c) for c in st.key])
            else:
                df = df.coalesce(1)
            last = ([st] + post)[-1]
            df = df.mapInArrow(fused_function([spec(n) for n in [st] + post]),
                               _spark_schema(topic_schema(last.output.schema)))
        if sink is not None:
            if not members and POS in df.columns:
                df = df.drop(POS)
            return [(qname, self.sink_query(sink, df=df, qname=qname, state_dir=state))]
        return [(qname, self.write(df, members[-1], self.out_topic(members[-1]), qname,
                                   state_dir=state))]

    def direct_query(self, unit: list):
        """One query running the groups of ``unit`` (one group, or siblings: :func:`plan_units`)
        with direct I/O (:mod:`epic.spark.direct`): its tasks read the input files, run the nodes
        and write the outputs; Spark carries one commit message per task and output."""
        from epic.spark.direct import GroupPlan, PlanInput, make_commit_sink, make_group_source
        from epic.spark.source_query import make_source_data_source
        from epic.spark.topic_source import TopicStreamReader

        qname = unit_name(unit)
        ckpt = self.ckpt(qname)
        safe = re.sub(r"\W", "_", qname)
        head = unit[0][0]
        if isinstance(head, SourceNode):
            cls = make_source_data_source(
                head, name=f"epic_src_{self.tag}_{safe}", schema=topic_schema(head.output.schema),
                source_index=self.sources.index(head), n_sources=len(self.sources),
                batch_rows=self.batch_rows, parallelism=self.partitions, workdir=self.workdir,
                prefetch=True)
            inputs = [PlanInput("source", cls({}).streamReader(None))]
            ids = [f"source:{head.name}"]
        else:
            inputs, ids = [], []
            for s_ in head.inputs:
                path, _ = _stream_topic(self.workdir, s_, self.t, per_port=True)
                topic = Topic.open(path)
                # Rows and bytes: a micro-batch of 1 M heat-map rows (DEBS Q3, ~100 KB each)
                # would hold the whole game; a keyed query's tasks each read every file.
                opts = {"max_rows_per_trigger": str(self.batch_rows),
                        "max_bytes_per_trigger": str(MAX_BATCH_BYTES)}
                if self.retention:
                    # Segments every reader has committed past are deleted (the full DEBS game
                    # would otherwise keep ~40 GB of intermediate topics).
                    opts.update(consumer=self.consumer(unit), retention="true")
                inputs.append(PlanInput("topic", TopicStreamReader(topic, None, opts)))
                ids.append(topic.manifest.topic_id)
        branches = [self._branch(g, ckpt, ids, f"{safe}_{i}") for i, g in enumerate(unit)]
        st = next((n for n in unit[0] if self.modes.get(n.name, "stateless") != "stateless"),
                  None)
        plan = GroupPlan(
            name=qname, workdir=self.workdir, merge=len(head.inputs) > 1,
            key=tuple(st.key) if st is not None and self.modes[st.name] == "keyed" else None,
            partitions=self.partitions, branches=branches, stateful=st is not None,
            spool=f"{self.workdir}/spool/{safe}")
        src = make_group_source(plan, inputs, name=f"epic_group_{self.tag}_{safe}",
                                batch_rows=self.batch_rows)
        dst = make_commit_sink(plan.outputs, name=f"epic_commit_{self.tag}_{safe}")
        self.spark.dataSource.register(src)
        self.spark.dataSource.register(dst)
        w = (self.spark.readStream.format(src.name()).load().writeStream.format(dst.name())
             .option("checkpointLocation", ckpt).queryName(qname)
             .trigger(processingTime=self.trigger))
        return [(qname, w)]

    def _branch(self, group: list, ckpt: str, ids: list, safe: str):
        """A fused group as a branch of a direct query: its task specs and output writers."""
        from epic.sinks import CsvSink, ParquetSink, TopicSink
        from epic.spark.direct import Branch, Output
        from epic.spark.sink_query import make_file_sink_data_source
        from epic.spark.tasks import TaskSpec
        from epic.spark.topic_sink import TopicStreamWriter

        head = group[0]
        sink, members, pre, st, post = self.split_group(group)
        state = None if st is None else f"{self.workdir}/state/{st.name}"
        producer = group_name(group).replace("+", "__")

        def spec(n):
            split = isinstance(n, SplitNode)
            return TaskSpec(node=n, mode=self.modes[n.name],
                            in_schemas=[x.schema for x in n.inputs],
                            out_schema=topic_schema((n.outputs[0] if split else n.output).schema),
                            input_topics=ids, checkpoint=ckpt,
                            state_dir=f"{self.workdir}/state/{n.name}", workdir=self.workdir,
                            port_schemas=([topic_schema(x.schema) for x in n.outputs]
                                          if split else None))

        def topic_writer(path: str) -> TopicStreamWriter:
            opts = {"producer": producer, "checkpoint": ckpt}
            if state is not None:
                opts["state_dir"] = state
            return TopicStreamWriter(path, _spark_schema(Topic.open(path).schema), opts)

        last = members[-1] if members else head
        if sink is not None and isinstance(sink.sink, (CsvSink, ParquetSink)):
            cls = make_file_sink_data_source(sink, name=f"epic_file_{self.tag}_{safe}",
                                             checkpoint=ckpt, workdir=self.workdir)
            outputs = [Output("file", cls({}).streamWriter(None, False), sink=sink)]
        elif sink is not None:
            out = sink.sink.output_schema(sink.input.schema)
            path = sink.sink.path if isinstance(sink.sink, TopicSink) else self.sink_topic(sink)
            Topic.create(path, out, time_column=sink.input.time if sink.input.time in out.names
                         else None, time_unit=sink.input.unit, exist_ok=True)
            outputs = [Output("topic", topic_writer(path), sink=sink)]
        elif isinstance(last, SplitNode):
            outputs = [Output("topic", topic_writer(f"{self.workdir}/topics/{last.name}.{x.port}"),
                              port=x.port) for x in last.outputs]
        else:
            outputs = [Output("topic", topic_writer(self.out_topic(last)))]
        return Branch(pre=[spec(n) for n in pre], st=None if st is None else spec(st),
                      post=[spec(n) for n in post], outputs=outputs,
                      split=sink is None and isinstance(last, SplitNode))

    def start_all(self, on_started=None) -> None:
        # One query per unit (direct io) or group (plan_groups: one node each without --fuse),
        # one after the other.
        for u in (self.units if self.direct else [[g] for g in self.groups]):
            g = u[0]
            if self.direct:
                writers = self.direct_query(u)
            elif len(g) > 1:
                writers = self.group_query(g)
            elif isinstance(g[0], SourceNode):
                writers = [(g[0].name, self.source_query(g[0]))]
            elif isinstance(g[0], SinkNode):
                writers = [(g[0].name, self.sink_query(g[0]))]
            else:
                writers = self.node_query(g[0])
            for qname, w in writers:
                q = w.start()
                self.queries[qname] = q
                self._await_first(q)
                if on_started:
                    on_started()

    def _await_first(self, q, timeout: float = 20.0) -> None:
        # Starting two queries at the same instant can kill both (spark-notes pitfall 5).
        deadline = _time.monotonic() + timeout
        while _time.monotonic() < deadline:
            if q.exception() is not None or not q.isActive:
                return
            if q.recentProgress:
                return
            # Past "Initializing sources": the offset log exists, the next start is safe.
            if q.status.get("message", "").startswith(("Waiting", "Getting offsets",
                                                       "Processing")):
                return
            _time.sleep(0.02)

    # -- completion ------------------------------------------------------------------------
    def sink_done(self, node: SinkNode) -> bool:
        from epic.sinks import CsvSink, ParquetSink, TopicSink
        from epic.spark.sink_query import read_sidecar

        sink = node.sink
        if isinstance(sink, (CsvSink, ParquetSink)):
            rec = read_sidecar(os.path.abspath(sink.path), self.deploy_id)
            return bool(rec and rec.get("eos"))
        path = sink.path if isinstance(sink, TopicSink) else self.sink_topic(node)
        try:
            topic = Topic.open(path)
        except EpicError:
            return False  # not created yet
        return topic.status().eos  # a corrupt segment raises: the deploy stops, naming it

    def failure(self) -> EpicError | None:
        for name, q in self.queries.items():
            exc = q.exception()
            if exc is not None:
                return EpicError(_explain(name, exc))
        return None

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


_CAUSE = re.compile(r"(?:epic\.errors\.)?(NodeFailure|TopologyError|InputError|SpecError|"
                    r"StateError|OutputError|EpicError): (.+)")


def _explain(query: str, exc) -> str:
    text = str(exc)
    m = _CAUSE.search(text)
    if m:
        return f"{m.group(1)}: {m.group(2).strip()} (query of node {query!r})"
    first = next((ln for ln in text.splitlines() if ln.strip()), text)
    last = [ln for ln in text.splitlines() if re.match(r"^\w+(\.\w+)*(Error|Exception): ", ln)]
    cause = last[-1] if last else first
    return f"query of node {query!r} failed: {cause.strip()[:500]}"


# -- status ------------------------------------------------------------------------------------

def read_status(workdir: str) -> dict:
    """The status document a deploy keeps in ``<workdir>/status.json``."""
    p = os.path.join(workdir, STATUS)
    try:
        with open(p) as f:
            return json.load(f)
    except FileNotFoundError:
        raise EpicError(f"{workdir}: no {STATUS}; is this the --workdir of an epic deploy?") \
            from None


def request_stop(workdir: str) -> None:
    """Ask the deploy running in ``workdir`` to stop (it polls for the file)."""
    if not os.path.isdir(workdir):
        raise EpicError(f"{workdir}: no such work directory")
    with open(os.path.join(workdir, STOP), "w") as f:
        f.write(str(_time.time()))


class _Stats:
    def __init__(self, d: _Deploy):
        self.d = d
        self.rows_in: dict[str, dict[int, int]] = {}
        self.busy: dict[str, dict[int, int]] = {}
        self.last: dict[str, dict] = {}

    def update(self) -> None:
        for name, q in self.d.queries.items():
            seen = self.rows_in.setdefault(name, {})
            try:
                prog = q.recentProgress
            except Exception:  # noqa: BLE001 - a stopped query
                prog = []
            busy = self.busy.setdefault(name, {})
            for p in prog:
                rows = int(p.get("numInputRows") or 0)
                seen[int(p["batchId"])] = rows
                if rows:
                    busy[int(p["batchId"])] = int((p.get("durationMs") or {})
                                                  .get("triggerExecution") or 0)
            if prog:
                self.last[name] = prog[-1]

    def doc(self, state: str, elapsed: float, error: str | None = None) -> dict:
        from epic.spark.offsets import offsets_from_progress

        nodes = {}
        for name, q in self.d.queries.items():
            p = self.last.get(name) or {}
            offs = offsets_from_progress(p)
            wms = [o.watermark for o in offs if o.watermark is not None]
            node = self.d.t.nodes.get(name.split("~")[0].split(".")[0].split("+")[-1])
            rows_out = None
            if node is not None and not isinstance(node, SinkNode):
                first = name.split("~")[0]   # siblings: the first group's outputs
                rows_out = _topic_rows(self.d, node,
                                       first.replace("+", "__") if "+" in first else node.name)
            rows_in = sum(self.rows_in.get(name, {}).values())
            if self.d.direct:
                # Spark counts the commit-message rows; the planner counts the input rows.
                try:
                    with open(os.path.join(self.d.workdir, "stats", name.replace("/", "_")
                                           + ".json")) as f:
                        rows_in = int(json.load(f)["rows_in"])
                except (FileNotFoundError, ValueError, KeyError):
                    rows_in = 0
            nodes[name] = {
                "kind": node.kind if node is not None else "?",
                "mode": ("fused" if "+" in name else
                         self.d.modes.get(name.split(".")[0], node.kind if node else "?")),
                "rows_in": rows_in,
                "rows_out": rows_out,
                "rows_per_s": round(float(p.get("processedRowsPerSecond") or 0.0), 1),
                "batch_ms": (p.get("durationMs") or {}).get("triggerExecution"),
                "batches": len(self.rows_in.get(name, {})),
                "busy_ms": sum(self.busy.get(name, {}).values()),
                "watermark": min(wms) if wms else None,
                "ended": bool(offs) and all(o.eos for o in offs),
                "active": bool(q.isActive),
            }
        late = {}
        if state != "running":
            # rows behind the watermark, per window node (the clock's counts in the snapshots)
            from epic.spark.tasks import node_late_rows

            for n in self.d.t.nodes.values():
                if isinstance(n, WindowNode):
                    late[n.name] = node_late_rows(f"{self.d.workdir}/state/{n.name}")
            # rows behind a slack/punctuation source's watermark (counted by its planner)
            from epic.spark.offsets import source_late_rows

            for name in self.d.queries:
                late.update(source_late_rows(self.last.get(name)))
        return {"topology": self.d.t.name, "state": state, "pid": os.getpid(),
                "elapsed_s": round(elapsed, 3), "updated": _time.time(), "error": error,
                "nodes": nodes, "late_rows": late}


_SEEN: dict[tuple[str, str], dict[int, int]] = {}


def _topic_rows(d: _Deploy, node, producer: str) -> int:
    """Rows ``producer`` committed to ``node``'s topics: segments seen by any status update (with
    retention, consumed segments disappear; the count keeps them)."""
    total = 0
    paths = ([f"{d.workdir}/topics/{node.name}.{s.port}" for s in node.outputs]
             if isinstance(node, SplitNode) and not d.routed(node) else [d.out_topic(node)])
    for p in paths:
        seen = _SEEN.setdefault((p, producer), {})
        try:
            for s in Topic.open(p).segments():
                if s.producer == producer:
                    seen[s.seq] = s.rows
        except EpicError:
            pass
        total += sum(seen.values())
    return total


def status_table(doc: dict):
    """A rich table of a status document."""
    from rich.table import Table

    tab = Table(title=f"{doc.get('topology')}: {doc.get('state')} {doc.get('elapsed_s', 0):.1f} s",
                title_justify="left")
    for col in ("node", "kind", "rows in", "rows out", "rows/s", "batch ms", "watermark", "state"):
        tab.add_column(col, justify="left" if col in ("node", "kind", "state") else "right")
    for name, n in doc.get("nodes", {}).items():
        tab.add_row(name, str(n.get("mode") or n.get("kind")), f"{n['rows_in']:,}",
                    "-" if n.get("rows_out") is None else f"{n['rows_out']:,}",
                    f"{n['rows_per_s']:,.0f}", str(n.get("batch_ms") or "-"),
                    "-" if n.get("watermark") is None else str(n["watermark"]),
                    "ended" if n.get("ended") else ("running" if n.get("active") else "stopped"))
    return tab


# -- entry point -------------------------------------------------------------------------------

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


def _manifest(wd: str, topology: Topology, partitions: int, fuse: bool = False,
              io: str = "direct") -> int:
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
        if m.get("io", "rows") != io:
            raise EpicError(f"{wd} was deployed with --io {m.get('io', 'rows')}; rerun it the same"
                            " way (the topics' layout and the state's partitions differ)")
        return int(m["partitions"])
    doc = {"topology": topology.name, "partitions": partitions, "id": uuid.uuid4().hex,
           "nodes": [n.name for n in topology.topological_order()]}
    if fuse:
        doc["fuse"] = True
    doc["io"] = io
    atomic_json(p, doc)
    return partitions


def deploy(topology: Topology, workdir: str, *, master: str | None = None, ui: bool = False,
           fuse: bool = False, io: str = "direct", retention: bool = True,
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
        io: ``direct`` (default): tasks read and write the topic files themselves and Spark
            carries one commit message per task (:mod:`epic.spark.direct`); ``rows``: every row
            goes through Spark (``mapInArrow``, Python data source sinks). Fixed per work
            directory.
        retention: with ``io="direct"``, delete a topic's segments once every query reading it
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
    if io not in ("direct", "rows"):
        raise EpicError(f"io={io!r}; use direct or rows")
    if archive and spark is not None:
        raise EpicError("archive= applies to a session the deploy starts; pass spark=None")
    wd = _check_workdir(workdir)
    from epic.preflight import check_output_paths
    from epic.spark.lock import WorkdirLock

    lock = WorkdirLock(wd).acquire()  # before anything in wd changes; dropped even on SIGKILL
    try:
        check_output_paths(topology)  # before any query starts
        return _deploy_locked(topology, wd, master=master, ui=ui, fuse=fuse, io=io,
                              retention=retention, progress=progress, console=console,
                              spark=spark, batch_rows=batch_rows, partitions=partitions,
                              trigger_interval=trigger_interval, poll_interval=poll_interval,
                              timeout=timeout, conf=conf, archive=archive)
    finally:
        lock.release()


def _deploy_locked(topology: Topology, wd: str, *, master, ui, fuse, io, retention, progress,
                   console, spark, batch_rows, partitions, trigger_interval, poll_interval,
                   timeout, conf=None, archive=None) -> DeployResult:
    """:func:`deploy` once the work directory is checked and locked."""
    from pyspark import cloudpickle

    for sub in ("topics", "checkpoints", "state", "sinks"):
        os.makedirs(os.path.join(wd, sub), exist_ok=True)
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
    partitions = _manifest(wd, topology, partitions, fuse, io)
    for m in _user_modules(topology):
        try:
            cloudpickle.register_pickle_by_value(sys.modules[m])
        except (ValueError, KeyError):
            pass
    d = _Deploy(topology, wd, spark=spark, batch_rows=batch_rows,
                trigger_interval=trigger_interval, partitions=partitions, fuse=fuse, io=io,
                retention=retention)
    d.create_topics()
    stats = _Stats(d)
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
    sinks = [n for n in d.order if isinstance(n, SinkNode)]
    printed: dict[str, int] = {}
    state, error = "running", None
    try:
        d.start_all()
        next_status = 0.0
        while True:
            elapsed = _time.perf_counter() - start
            # The status document parses every query's recent progress (JSON through py4j): at
            # most once a second; completion and failures are checked every poll.
            refresh = elapsed >= next_status
            if refresh:
                stats.update()
                next_status = elapsed + max(poll_interval, 1.0)
            _print_console(d, sinks, printed)
            exc = d.failure()
            if exc is not None:
                state, error = "failed", str(exc)
                raise exc
            if all(d.sink_done(n) for n in sinks):
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
            _print_console(d, sinks, printed)
            doc = stats.doc(state if state != "running" else "failed", elapsed, error)
        except Exception:  # noqa: BLE001 - the status must not mask the real error
            doc = {"topology": topology.name, "state": "failed", "error": error, "nodes": {}}
        d.stop(drain=10.0 if state == "finished" else 0.0)
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
            t = Topic.open(d.sink_topic(n)).read_table()
            collected[n.name] = t
    return DeployResult(topology.name, wd, elapsed, collected, doc)


def _print_console(d: _Deploy, sinks, printed: dict) -> None:
    from epic.sinks import ConsoleSink

    for n in sinks:
        if not isinstance(n.sink, ConsoleSink):
            continue
        path = d.sink_topic(n)
        mark = os.path.join(path, "printed")
        if n.name not in printed:
            try:
                printed[n.name] = int(open(mark).read())
            except (FileNotFoundError, ValueError):
                printed[n.name] = 0
        try:
            topic = Topic.open(path)
        except EpicError:
            continue
        names = topic.schema.names
        for seg, _, batches in topic.read(printed[n.name]):
            for b in batches:
                for row in b.to_pylist():
                    print(f"[{n.name}] " + "\t".join(
                        repr(row[c]) if isinstance(row[c], float) else
                        ("" if row[c] is None else str(row[c])) for c in names))
            printed[n.name] = seg.seq + 1
            with open(mark, "w") as f:
                f.write(str(printed[n.name]))
        sys.stdout.flush()
