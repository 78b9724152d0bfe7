"""Direct I/O, the one I/O path of ``epic deploy``: tasks read and write the topics themselves.

(A retired ``--io rows`` mode sent every row through Spark: Arrow -> Spark rows -> Arrow for
``mapInArrow`` -> rows -> Arrow for the topic sink; on two cores that conversion cost several
times the operators' own work, ``docs/performance.md``.)

Each node (or fused group of nodes) is one Spark Structured Streaming query, with Spark's offset
log, commit log, checkpoints and task scheduling, but the rows never enter Spark:

- The query's source is a Python data source over the group's inputs (one or more topics, or an
  epic source): an adapter (:mod:`epic.spark.datasources`) over a :class:`GroupPlanner`, which
  plans micro-batches with the inputs' own planners (a topic's ``TopicStreamReader``, a source's
  ``SourcePlanner``)
  (offsets are theirs; several inputs: ``{"epic_group": name, "inputs": [offset, ...]}``) and hands
  each task a list of segment files: the input topics' segments, or for an epic source the batches
  its planner parsed, spooled to ``<workdir>/spool/<query>/`` (deleted once the batch commits).
- The task reads those files (memory-mapped Arrow; from a remote work directory, each file is
  read whole into memory through pyarrow's filesystem), runs the group's nodes
  (:func:`epic.spark.tasks.run_stateless` / ``run_stateful``: tags, snapshots and markers), and
  writes the output itself (:class:`~epic.spark.topic_sink.TopicStreamWriter`, the CSV / Parquet
  writer of :mod:`epic.spark.sink_query` or :mod:`epic.spark.object_sink`): temp segments or part
  files. It yields one small row per output: the writer's commit message, msgpack-encoded.
- The query's sink is a Python data source whose ``commit(messages, batch_id)`` hands those commit
  messages to the writers' ``commit`` (:class:`Committer`), idempotent per producer and batch id
  (replays drop their temps).

Partitions of a task list: a keyed stateful node gets ``partitions`` tasks per micro-batch, each
reading every segment and keeping the rows whose key hashes to it
(:func:`epic.spark.source_query.key_partition`); a global one one task; a stateless group up to
``partitions`` tasks over contiguous runs of segments. Siblings with stateful nodes (``--fuse``)
may get those tasks per branch (``GroupPlan.branch_tasks``). A splitstream writes one topic per
output, so a consumer reads only its own rows.
"""

from __future__ import annotations

import json
import os
import time as time_
from dataclasses import dataclass, field
from typing import Iterator

import msgpack
import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import InputPartition, WriterCommitMessage

from epic.atomic import atomic_json, atomic_path
from epic.spark.executor import (cpu_slot, keep_or_release, key_partition_of_task,
                                 prepare_worker, release_memory)
from epic.spark.tags import HWM, IN, POS, RANK, STEP, WM, runs
from epic.spark.trace import adopt, span
from epic.storage import deferred_sync, read_small_json

__all__ = ["Output", "Branch", "GroupPlan", "GroupPlanner", "Committer", "PlanInput", "PTR_SCHEMA",
           "split_branches", "upstream_batches", "SPLIT_SECONDS", "SPLIT_SECONDS_FINAL"]

PTR = "ptr"
#: The only rows Spark sees: one msgpack-encoded commit message per task and output.
PTR_SCHEMA = pa.schema([pa.field(PTR, pa.binary())])

#: A micro-batch of siblings expected to take at least this long in one task (the branches'
#: measured seconds per upstream micro-batch, times the upstream micro-batches it holds) runs a
#: task per branch instead (:func:`split_branches`)
SPLIT_SECONDS = 10.0

#: ... and so does the last micro-batch of bounded inputs when expected to take this long
SPLIT_SECONDS_FINAL = 1.0

#: a consumer waits at most this long in all for its input's producer to commit its last
#: micro-batch (:meth:`GroupPlanner._hold`)
HOLD_SECONDS = 30.0

#: a topic's file naming the producers that planned their last micro-batch
ENDING = "_ending"


@dataclass
class Output:
    """One output of a group: a writer (pickled to tasks; its ``commit`` runs on the driver).

    Attributes:
        kind: ``topic`` (a :class:`~epic.spark.topic_sink.TopicStreamWriter`) or ``file`` (the
            CSV / Parquet writer of :func:`epic.spark.object_sink.file_writer`).
        writer: the writer.
        port: for a splitstream's outputs, the port whose rows go here.
        sink: a collect / console / topic sink node whose columns (and delay columns) the rows
            get before they are written, None otherwise.
        keys: for a collect or console sink after a ranked window in its query, the stream's
            time column: the rows keep their merge keys
            (:data:`epic.spark.sink_query.MERGE_KEYS`), by which the sink's readers merge the
            partitions' parts (:func:`epic.spark.sink_query.sink_tables`).
    """

    kind: str
    writer: object
    port: int | None = None
    sink: object = None
    keys: str | None = None


@dataclass
class Branch:
    """One chain of nodes a direct query runs over its input rows.

    Attributes:
        pre: stateless :class:`~epic.spark.tasks.TaskSpec` run before the stateful node.
        st: the stateful node's spec, or None.
        post: stateless specs after it.
        outputs: the chain's outputs (several for a splitstream at its end).
        split: the last node is a splitstream writing one topic per port.
        more: further global stateful nodes after ``post``, as ``(spec, post specs)``: each
            reads the output of the chain before it in the same task, and its markers from that
            chain's last stateful node's snapshot of the batch (``TaskSpec.upstream``).
        children: ``(port, Branch)`` of the groups attached to this one
            (:func:`epic.spark.planner.plan_attached`): each runs in the same task over this
            chain's output (of that port for a splitstream), which no topic then holds.
    """

    pre: list
    st: object
    post: list
    outputs: list
    split: bool = False
    more: list = field(default_factory=list)
    children: list = field(default_factory=list)

    def all_outputs(self) -> list:
        """This chain's outputs, then its children's, depth first (the order the task writes
        them and commit messages index)."""
        return [*self.outputs, *(o for _, c in self.children for o in c.all_outputs())]

    @property
    def files_only(self) -> bool:
        """Every output is a file and nothing runs after the chain: its rows may stream."""
        return not self.children and all(o.kind == "file" for o in self.outputs)


@dataclass
class GroupPlan:
    """What the tasks of a direct query run (pickled with the reader).

    A query runs one branch per fused group; several when ``--fuse`` puts *siblings* together:
    groups reading the same input streams whose stateful nodes partition the same way (e.g. the
    four windows of DEBS Q1 over the same stream, keyed by player). Their tasks read the input
    once.

    Attributes:
        name: the query name.
        workdir: the deploy's work directory.
        merge: the head has several inputs (a merge, a combine): rows get an ``_in`` column,
            their input's index.
        key: key columns of the branches' keyed stateful nodes (None: global or stateless).
        partitions: tasks per micro-batch of a keyed node; at most this many for a stateless group.
        branches: the chains.
        stateful: the branches have a stateful node (all of them or none).
        spool: where an epic source's planned batches are spooled (a path of ``fs``).
        fs: the work directory's pyarrow filesystem when it is remote (``s3://``...); None for
            a local one (files are memory-mapped).
        fs_root: the work directory's path in ``fs``.
        checkpoint: the query's checkpoint; with ``fs``, the driver's disk, so the tasks get the
            micro-batch's offsets with their partition instead of reading its offset log.
        trace: the driver's ``EPIC_TRACE`` file (:mod:`epic.spark.trace`), adopted by the
            planner process and the tasks.
        inlet_pre: input index -> the stateless specs of that input's inlet
            (:func:`epic.spark.planner.plan_inlets`): a source's nodes before the merge, run
            over the input's rows as they are read.
        nice: > 0: the tasks run at this nice value (a query that reads no source, with a live
            source or ``sourceFirst``: :data:`epic.spark.planner.BACKGROUND_NICE`).
        branch_tasks: siblings with stateful nodes run each branch in tasks of its own
            (``branches x partitions`` tasks per micro-batch, each reading the input): Spark
            then spreads a query's windows over the cores instead of running them one after
            another in one task (:data:`epic.spark.planner.BRANCH_TASKS_CONF`).
        cpu_slots: with ``nice``, at most this many tasks of such queries of the deploy work at
            once on a machine (:func:`epic.spark.executor.cpu_slot`; 0: no limit).
        keep_slots: the cores of a local master, 0 on a cluster: the memory the deploy's task
            workers keep in all (:func:`epic.spark.executor.keep_or_release`).
        ranks: input index -> the stream's time column, for an input topic written by a keyed
            time or count window over several partitions (rows with ``_rank``): the parts of
            each of its batches are read merged (:func:`merge_parts`).
        costs: siblings' seconds per upstream micro-batch, branch by branch, as the tasks
            measured them: a JSON file on the driver's disk that the committer adds to and the
            planner reads to decide when a micro-batch runs a task per branch
            (:func:`split_branches`); "" for none (one branch, or a remote work directory).
        split_seconds: a micro-batch of siblings expected to take this long runs a task per
            branch (:data:`SPLIT_SECONDS`, :data:`epic.spark.planner.SPLIT_SECONDS_CONF`).
    """

    name: str
    workdir: str
    merge: bool
    key: tuple | None
    partitions: int
    branches: list
    stateful: bool
    spool: str = ""
    fs: object = None
    fs_root: str | None = None
    checkpoint: str = ""
    trace: str = ""
    inlet_pre: dict = field(default_factory=dict)
    nice: int = 0
    branch_tasks: bool = False
    cpu_slots: int = 0
    keep_slots: int = 0
    ranks: dict = field(default_factory=dict)
    costs: str = ""
    split_seconds: float = SPLIT_SECONDS

    @property
    def outputs(self) -> list:
        """Every branch's outputs, in branch order, each branch's attached children's after
        its own (commit messages index into this list)."""
        return [o for b in self.branches for o in b.all_outputs()]


class GroupPartition(InputPartition):
    """The files one task reads: ``(input index, path, kind)`` with kind ``topic`` or ``spool``;
    ``key_part``: the hash partition a keyed node's task keeps (None: every row); ``end``: the
    micro-batch's end offset when the tasks cannot read the offset log (a remote work
    directory: the checkpoints are on the driver's disk), else None; ``branch``: the one
    branch the task runs (``GroupPlan.branch_tasks``; None: all). ``out_part``: the partition
    its state and output parts belong to: Spark's partition id, but with a task per branch the
    key partition (0 for a global node)."""

    def __init__(self, index: int, items: tuple, key_part: int | None, end: dict | None = None,
                 branch: int | None = None):
        super().__init__(index)
        self.part = index
        self.items = items
        self.key_part = key_part
        self.end = end
        self.branch = branch
        self.out_part = index if branch is None else key_part or 0


# -- executor side -------------------------------------------------------------------------------

def _read_items(plan: GroupPlan, part: GroupPartition) -> Iterator[pa.RecordBatch]:
    """The rows of the partition's files in order; an inlet's rows through its nodes, and with
    several inputs each batch with its input's index (``_in``)."""
    from epic.spark.tasks import run_stateless

    items = part.items
    a = 0
    while a < len(items):
        i = items[a][0]
        b = a
        while b < len(items) and items[b][0] == i:
            b += 1
        it = (_read_files(plan, items[a:b]) if i not in plan.ranks
              else merge_parts(plan, items[a:b], plan.ranks[i]))
        for spec in plan.inlet_pre.get(i, ()):
            it = run_stateless(spec, it)
        for batch in it:
            if batch.num_rows:
                yield (batch.append_column(IN, pa.array(np.full(batch.num_rows, i,
                                                                dtype=np.int64)))
                       if plan.merge else batch)
        a = b


def _read_files(plan: GroupPlan, items) -> Iterator[pa.RecordBatch]:
    from epic.topics import check_segment_rows, corrupt_segment_error

    for i, path, _kind in items:
        # Memory-mapped: the batches reference the page cache (a file deleted meanwhile, by
        # retention or a committed spool, stays readable while mapped).
        topic = path.rsplit("/segments/", 1)[0]
        rows = 0
        try:
            if plan.fs is None:
                reader = pa.ipc.open_stream(pa.memory_map(path, "r"))
            else:
                # A remote store: one GET of the whole file (segments are at most a few MB).
                with plan.fs.open_input_file(path) as f:
                    reader = pa.ipc.open_stream(f.read_buffer())
            batches = iter(reader)
            while True:
                try:
                    b = next(batches)
                except StopIteration:
                    break
                rows += b.num_rows
                if not b.num_rows:
                    continue
                yield b.replace_schema_metadata(None)
        except (OSError, pa.ArrowInvalid, ValueError) as e:
            if _kind != "topic":
                from epic.errors import InputError

                raise InputError(f"spooled source batch cannot be read ({type(e).__name__}: {e})"
                                 "; a replay writes it anew: delete the spool directory and rerun",
                                 path=path) from None
            raise corrupt_segment_error(topic, path, f"{type(e).__name__}: {e}") from None
        if _kind == "topic":
            check_segment_rows(topic, path, rows)


def _part_batch(item) -> tuple | None:
    """``(producer, batch id)`` of a topic segment that is one of several parts of its batch."""
    from epic.topics import segment_batch

    if item[2] != "topic":
        return None
    b = segment_batch(item[1])
    return None if b is None or b[2] < 2 else b[:2]


def upstream_batches(items) -> int:
    """How many upstream micro-batches a task's files hold: the distinct ``(producer, batch
    id)`` of each input's topic segments (a spooled source batch counts as one), the most over
    the inputs; 0 for no files."""
    from epic.topics import segment_batch

    per: dict = {}
    for i, path, kind in items:
        b = segment_batch(path) if kind == "topic" else None
        per.setdefault(i, set()).add(path if b is None else b[:2])
    return max([0] + [len(v) for v in per.values()])


def read_costs(path: str) -> dict[int, tuple[float, float]]:
    """Branch -> (seconds, upstream micro-batches), both decayed sums (:func:`add_costs`), from
    a :attr:`GroupPlan.costs` file (empty when there is none yet)."""
    try:
        with open(path) as f:
            doc = json.load(f)
        return {int(b): (float(v[0]), float(v[1])) for b, v in doc.get("branches", {}).items()}
    except (FileNotFoundError, ValueError, KeyError, TypeError, IndexError):
        return {}


#: each committed micro-batch weighs the costs recorded before it by this much: a branch's cost
#: per row grows as its windows fill (DEBS Q3's whole-game heat maps), so recent batches count most
COST_DECAY = 0.8


def add_costs(path: str, measured: list[dict]) -> None:
    """Add the cost messages of a committed micro-batch (``{"b", "s", "n"}`` per task and
    branch) to the file at ``path``, the earlier sums weighed by :data:`COST_DECAY`."""
    if not measured:
        return
    costs = {b: (s_ * COST_DECAY, n_ * COST_DECAY) for b, (s_, n_) in read_costs(path).items()}
    for m in measured:
        s_, n_ = costs.get(int(m["b"]), (0.0, 0.0))
        costs[int(m["b"])] = (s_ + float(m["s"]), n_ + float(m["n"]))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    atomic_json(path, {"branches": {str(b): [s_, n_] for b, (s_, n_) in sorted(costs.items())}},
                indent=None)


def split_branches(nbranches: int, costs: dict, batches: int, final: bool,
                   seconds: float = SPLIT_SECONDS) -> tuple[list[int] | None, float | None]:
    """Whether a micro-batch of ``nbranches`` siblings holding ``batches`` upstream micro-batches
    runs a task per branch, and in which order: ``(branches, expected seconds)``, branches
    ``None`` for one task running them all.

    Siblings share one task, which reads the input once: cheapest while the query keeps up.
    A query that fell behind (DEBS Q3's four heat-map windows, the heaviest query of the game)
    gets ever larger micro-batches, and its last ones, after every other query has finished,
    ran on one core while the other idled (26-33 s of the full game). So a micro-batch expected
    to take ``seconds`` (:data:`SPLIT_SECONDS`) or more in one task (each branch's measured
    seconds per upstream micro-batch and task, ``costs``, times ``batches``; with key
    partitions, each task runs every branch over its keys), or the last one of bounded inputs
    (``final``) expected to take :data:`SPLIT_SECONDS_FINAL` (or ``seconds`` if lower) or with
    no costs yet, runs a task per branch, the costliest first: Spark starts tasks in partition
    order, so the longest task does not start last (longest processing time first). The
    outputs are the same either way (each branch keeps its state, outputs and producer ids).

    >>> split_branches(3, {0: (4.0, 2), 1: (16.0, 2), 2: (10.0, 2)}, 1, False)
    ([1, 2, 0], 15.0)
    >>> split_branches(3, {0: (4.0, 4), 1: (16.0, 4), 2: (10.0, 4)}, 1, False)
    (None, 7.5)
    """
    if nbranches < 2:
        return None, None
    rate = {b: s_ / n_ for b, (s_, n_) in costs.items() if n_ > 0 and 0 <= b < nbranches}
    known = len(rate) == nbranches
    est = batches * sum(rate.values()) if known else None
    if not (final and (est is None or est >= min(SPLIT_SECONDS_FINAL, seconds))
            or est is not None and est >= seconds):
        return None, est
    return sorted(range(nbranches), key=lambda b: (-rate.get(b, 0.0), b)), est


def merge_parts(plan: GroupPlan, items, time: str) -> Iterator[pa.RecordBatch]:
    """The rows of ``items`` (one input's files, in order), the parts of each batch of a keyed
    time or count window merged into the order ``epic run`` emits its rows.

    Each partition's task writes its keys' rows of a micro-batch as one part, in the order of
    their ``_step`` (the source step whose processing emitted them), then time, then the key's
    rank (``_rank``: the position of the key's first on-time row in the window's input stream,
    the same in every partition). ``epic run`` emits the same rows in that order over all keys,
    so a stable sort of the parts' rows by ``(_step, time, _rank)`` restores it: downstream
    nodes see the stream ``epic run`` gives them (late rows, count windows, ties)."""
    from epic.spark.sink_query import merge_order

    a = 0
    while a < len(items):
        grp = _part_batch(items[a])
        b = a + 1
        while grp is not None and b < len(items) and _part_batch(items[b]) == grp:
            b += 1
        if b - a == 1:
            yield from _read_files(plan, items[a:b])
        else:
            batches = list(_read_files(plan, items[a:b]))
            if batches:
                t = merge_order(pa.Table.from_batches(batches), (STEP, time, RANK))
                yield from t.combine_chunks().to_batches()
        a = b


def _positioned(it, key: tuple | None, parts: int, key_part: int | None,
                time: str | None = None, high: dict | None = None):
    """Rows with a ``_pos`` column (their order in the task: every task of a micro-batch reads
    the same files in the same order, so positions are the same in every task and on a replay),
    keeping only the rows of hash partition ``key_part`` for a keyed node.

    ``time``: the stream's event-time column, for a keyed node whose operator keeps the stream's
    clock (:mod:`epic.timecore`): each kept row gets ``_hwm``, the largest time among *all* rows
    read before it, and ``high["max"]`` the largest time of all rows read. So every partition
    decides late rows and watermarks from the whole stream, as ``epic run`` does.

    With ``high``, also ``high["rows"]``, the rows read, and with ``high["split"]`` (several
    partitions) ``high["runs"]``, the stream's runs of equal ``(_step, _wm)`` in read order:
    ``[step tag, watermark, end position, largest time up to its end]``. A task then replays
    every run, with or without rows of its keys (``tasks.run_stateful``), so its clock and
    emissions follow the stream step by step, as ``epic run``'s do."""
    from epic.spark.source_query import key_partition
    from epic.timecore import stream_before

    n = 0
    run_max = None
    # the stream's runs, only for a task of several partitions (tasks.run_stateful replays them)
    spans = high.setdefault("runs", []) if high is not None and high.get("split") else None
    for b in it:
        if not b.num_rows:
            continue
        pos = np.arange(n, n + b.num_rows, dtype=np.int64)
        start = n
        n += b.num_rows
        if high is not None:
            high["rows"] = n
        b = b.append_column(POS, pa.array(pos))
        if key is not None:
            if time is not None:
                times = b.column(time).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
                before = stream_before(times)
                if run_max is not None:
                    np.maximum(before, run_max, out=before)
                bmax = int(times.max())
                run_max = bmax if run_max is None else max(run_max, bmax)
                high["max"] = run_max
                if spans is not None and STEP in b.schema.names:
                    steps = b.column(STEP).to_numpy()
                    wms = b.column(WM).to_numpy()
                    for x, y in runs(steps, wms):
                        top = max(int(before[y - 1]), int(times[x:y].max()))
                        if spans and spans[-1][0] == steps[x] and spans[-1][1] == wms[x]:
                            spans[-1][2:] = [start + y, max(spans[-1][3], top)]
                        else:
                            spans.append([int(steps[x]), int(wms[x]), start + y, top])
                b = b.append_column(HWM, pa.array(before))
            keep = np.flatnonzero(key_partition(b, key, parts) == key_part)
            if len(keep) == 0:
                continue
            if len(keep) != b.num_rows:
                b = b.take(pa.array(keep))
        yield b


def _clock_time(node) -> str | None:
    """The input time column of a node whose operator keeps the stream clock (window nodes)."""
    from epic.topology import WindowNode

    return node.inputs[0].time if isinstance(node, WindowNode) else None


def _shape(sink_node, it, keys: str | None = None) -> Iterator[pa.RecordBatch]:
    """Rows of a collect / console / topic sink: its output columns, delay columns filled
    (``keys``: :attr:`Output.keys`, the merge keys after them)."""
    import time

    from epic.operator import ENTRY_COLUMN
    from epic.spark.sink_query import MERGE_KEYS, with_merge_keys

    sink = sink_node.sink
    out = sink.output_schema(sink_node.input.schema)
    if keys is not None:
        it = with_merge_keys(it, keys)
        out = pa.schema(list(out) + [pa.field(k, pa.int64()) for k in MERGE_KEYS])
    for b in it:
        if not b.num_rows:
            continue
        cols = []
        for f in out:
            if sink.delays and f.name == sink.delay_columns[0]:
                cols.append(b.column(ENTRY_COLUMN))
            elif sink.delays and f.name == sink.delay_columns[1]:
                cols.append(pa.array(np.full(b.num_rows, time.time_ns(), dtype=np.int64)))
            else:
                c = b.column(f.name)
                cols.append(c if c.type == f.type else c.cast(f.type))
        yield pa.RecordBatch.from_arrays(cols, schema=out)


def _encode(index: int, msg) -> bytes:
    from epic.spark.topic_sink import TopicCommitMessage

    if isinstance(msg, TopicCommitMessage):
        t = msg.temp
        return msgpack.packb({"o": index, "k": "topic", "wm": msg.watermark, "eos": msg.eos,
                              "temp": None if t is None else
                              [t.path, t.producer, t.batch_id, t.part, t.rows]})
    return msgpack.packb({"o": index, "k": "file", "path": msg.path, "part": msg.part,
                          "rows": msg.rows, "at": msg.inplace})


def _decode(data: bytes):
    from epic.spark.sink_query import part_message
    from epic.spark.topic_sink import TopicCommitMessage
    from epic.topics import TempSegment

    d = msgpack.unpackb(data)
    if d["k"] == "cost":
        return None, d
    if d["k"] == "topic":
        t = d["temp"]
        return d["o"], TopicCommitMessage(None if t is None else TempSegment(*t), d["wm"],
                                          bool(d["eos"]))
    return d["o"], part_message(d["path"], d["part"], d["rows"], d.get("at"))


def run_partition(plan: GroupPlan, part: GroupPartition) -> Iterator[pa.RecordBatch]:
    """A task: read the partition's files, run each branch, write its outputs; yield the commit
    messages as pointer rows."""

    prepare_worker()
    # The task's snapshots and topic segments are fsynced together at its end (deferred_sync):
    # they count only once the micro-batch commits, so the syncs stay off the path from a row
    # to the outputs written before them.
    with deferred_sync(), key_partition_of_task(part.out_part):
        if part.end is not None:
            from epic.spark.offsets import task_offsets

            with task_offsets(plan.checkpoint, part.end):
                out = list(_run_partition(plan, part))
        else:
            out = list(_run_partition(plan, part))
    yield from out


def _run_partition(plan: GroupPlan, part: GroupPartition) -> Iterator[pa.RecordBatch]:
    from epic.spark.tasks import run_stateful, run_stateless

    branches = plan.branches
    msgs: list = []
    first = 0
    if part.branch is not None:
        # one branch: its outputs' commit messages keep their indexes in ``plan.outputs``
        msgs = [None] * sum(len(b.all_outputs()) for b in branches[:part.branch])
        branches = [branches[part.branch]]
        first = part.branch
    shared = len(branches) > 1
    rows = list(_read_items(plan, part)) if shared else None
    keyed = None   # the positioned (and key-filtered) rows, shared by branches without pre
    costs = []     # (branch, seconds) for the planner's split_branches
    for bi, br in enumerate(branches, start=first):
        t0 = time_.perf_counter()
        # Outputs that are all files need no markers from the snapshot: stream them (a Q3
        # micro-batch of heat-map windows is ~10^8 CSV rows).
        stream = br.files_only
        it = iter(rows) if shared else _read_items(plan, part)
        for spec in br.pre:
            it = run_stateless(spec, it)
        if br.st is not None:
            time = _clock_time(br.st.node)
            if br.pre or not shared:
                high = {"max": None, "split": plan.partitions > 1}
                it = _positioned(it, plan.key, plan.partitions, part.key_part, time, high)
            else:
                if keyed is None:
                    high = {"max": None, "split": plan.partitions > 1}
                    keyed = list(_positioned(it, plan.key, plan.partitions, part.key_part,
                                             time, high))
                it = iter(keyed)
            it = run_stateful(br.st, it, stream=stream,
                               high=high if plan.key is not None and time else None)
        _finish(br, _rest(br, it, stream), msgs)
        costs.append((bi, time_.perf_counter() - t0))
    rows = keyed = it = None
    keep_or_release(plan.workdir, plan.keep_slots)
    msgs = [m for m in msgs if m is not None]
    n = upstream_batches(part.items) if plan.costs else 0
    if n:   # an empty micro-batch measures nothing
        msgs += [msgpack.packb({"o": -1, "k": "cost", "b": b, "s": sec, "n": n})
                 for b, sec in costs]
    yield pa.RecordBatch.from_arrays([pa.array(msgs, pa.binary())], schema=PTR_SCHEMA)


def _rest(br: Branch, it, stream: bool):
    """The chain after its first stateful node: stateless successors, further stateful nodes."""
    from epic.spark.tasks import run_stateful, run_stateless

    for spec in br.post:
        it = run_stateless(spec, it, stream=stream)
    for st, post in br.more:
        # The chain's output so far, in emission order, as a topic would hold it.
        it = run_stateful(st, _positioned(it, None, 1, None), stream=stream)
        for spec in post:
            it = run_stateless(spec, it, stream=stream)
    return it


def _attached(br: Branch, it, msgs: list) -> None:
    """An attached group (``Branch.children``) over its parent's output rows ``it``, in the
    parent's (single) task."""
    from epic.spark.tasks import run_stateful, run_stateless

    stream = br.files_only
    for spec in br.pre:
        it = run_stateless(spec, it)
    if br.st is not None:
        it = run_stateful(br.st, _positioned(it, None, 1, None), stream=stream)
    # EPIC_TRACE: the group's whole work (its rows are pulled through it by the writes)
    head = br.st if br.st is not None else (br.pre[0] if br.pre else None)
    with span("attached", "" if head is None else head.node.name, "task"):
        _finish(br, _rest(br, it, stream), msgs)


def _finish(br: Branch, it, msgs: list) -> None:
    """Write a chain's outputs (appending their commit messages), then run its children."""
    if br.split:
        # A topic output is written batch by batch as the split yields them (a DEBS splitter
        # task held 240 MB of its three outputs' rows otherwise); other outputs and attached
        # children get their port's rows as a list.
        held = {o.port for o in br.outputs if not hasattr(o.writer, "open_push")}
        held |= {port for port, _ in br.children}
        slots = list(range(len(msgs), len(msgs) + len(br.outputs)))
        msgs.extend([None] * len(br.outputs))
        pushes: dict[int, list] = {}
        by_port: dict[int, list] = {}
        try:
            for o in br.outputs:
                if o.port not in held:
                    pushes.setdefault(o.port, []).append(o.writer.open_push())
            for pb in it:
                for push in pushes.get(pb.port, ()):
                    push.add(pb.batch)
                if pb.port in held:
                    by_port.setdefault(pb.port, []).append(pb.batch)
            for slot, o in zip(slots, br.outputs):
                msg = (pushes[o.port].pop(0).close() if o.port not in held
                       else o.writer.write(iter(by_port.get(o.port, ()))))
                msgs[slot] = _encode(slot, msg)
        except BaseException:
            for ps in pushes.values():   # the ones not closed yet
                for push in ps:
                    push.discard()
            raise
        for port, child in br.children:
            _attached(child, iter(by_port.get(port, ())), msgs)
        return
    if br.children:
        out = list(it)   # every consumer of this output runs here: no topic holds it
        for _, child in br.children:
            _attached(child, iter(out), msgs)
        return
    o = br.outputs[0]
    src = it if o.sink is None or o.kind == "file" else _shape(o.sink, it, o.keys)
    msgs.append(_encode(len(msgs), o.writer.write(src)))


# -- planner -------------------------------------------------------------------------------------

class PlanInput:
    """One input of a group's reader: a topic (planned by a
    :class:`~epic.spark.topic_source.TopicStreamReader`) or an epic source (planned by the
    source query's reader, its batches spooled to files)."""

    def __init__(self, kind: str, planner):
        self.kind = kind
        self.planner = planner


def mark_ending(plan: GroupPlan) -> None:
    """Tell the readers of ``plan``'s stream topics that its query planned its last micro-batch:
    ``<topic>/_ending/<producer>.json`` holds the producer's newest committed batch id then, so
    a reader knows the last batch is in flight until a later one is in the topic
    (:meth:`GroupPlanner._hold`). A local work directory only; nothing is lost without it."""
    for o in plan.outputs:
        if o.kind != "topic" or o.sink is not None:
            continue   # a sink's topic: no query of the deploy reads it
        topic, producer = o.writer.topic, o.writer.producer
        try:
            d = os.path.join(topic.root, ENDING)
            os.makedirs(d, exist_ok=True)
            atomic_json(os.path.join(d, f"{producer}.json"),
                        {"producer": producer, "after": topic.newest_batch_id(producer)},
                        indent=None)
        except Exception:  # noqa: BLE001 - readers then do not wait: only the tail's speed
            pass           # depends on it, never a query


def _ending(topic) -> bool:
    """Whether a producer of ``topic`` planned its last micro-batch (:func:`mark_ending`) and has
    not committed it yet."""
    d = os.path.join(topic.root, ENDING)
    try:
        names = os.listdir(d)
    except (OSError, TypeError):
        return False
    for name in names:
        try:
            doc = read_small_json(os.path.join(d, name))
            # the listing only: segments() would check batches retention cut (a wait must never
            # fail the reader's query; its own reads check what it reads)
            last = topic.newest_batch_id(doc["producer"])
            after = doc.get("after")
        except Exception:  # noqa: BLE001
            continue
        if last is None or after is not None and last <= after:
            return True
    return False


class GroupPlanner:
    """The planner of a direct query (epic's, driven through the thin Spark adapter
    :class:`epic.spark.datasources.PlannerReader`): plans micro-batches over ``inputs``
    (``PlanInput``), at most about ``batch_rows`` rows of each input per micro-batch, and runs
    :func:`run_partition` in the tasks.

    Offsets are the inputs' own (one input: its offset; several:
    ``{"epic_group": name, "inputs": [offset, ...]}``). Pickled to the tasks, it carries only the
    plan; the inputs' planners (open sources, caches) stay in Spark's planner process.
    """

    def __init__(self, plan: GroupPlan, inputs: list, batch_rows: int):
        self.plan = plan
        self.inputs = inputs
        self.batch_rows = batch_rows
        self._never_hold = False   # prepared for Trigger.AvailableNow (prepare_available_now)
        self._held_since = None    # when _hold first held a micro-batch back
        adopt(plan.trace)

    def __getstate__(self):
        return {"plan": self.plan, "batch_rows": self.batch_rows}

    def __setstate__(self, state):
        self.plan = state["plan"]
        self.batch_rows = state["batch_rows"]
        self.inputs = None
        self._never_hold = False
        self._held_since = None
        adopt(self.plan.trace)

    def _spool_root(self, i: int) -> str:
        """Where input ``i``'s spooled source batches go: the query's spool directory, with
        several inputs a directory per input (``in<i>``: two sources' sequence numbers
        overlap)."""
        return self.plan.spool if len(self.inputs) == 1 else f"{self.plan.spool}/in{i}"

    def _combine(self, offs: list) -> dict:
        return offs[0] if len(self.inputs) == 1 else {"epic_group": self.plan.name, "inputs": offs}

    def _split(self, off: dict) -> list:
        return [off] if len(self.inputs) == 1 else list(off["inputs"])

    def initial_offset(self) -> dict:
        with span("initial_offset", self.plan.name, "planner"):
            return self._combine([x.planner.initialOffset() for x in self.inputs])

    def prepare_available_now(self) -> None:
        self._never_hold = True   # an empty micro-batch ends such a query: never wait
        for x in self.inputs:
            x.planner.prepareForTriggerAvailableNow()

    def latest_offset(self, start: dict, limit) -> dict:
        """The end of the next micro-batch from ``start`` (``limit``: Spark's read limit)."""
        # Spark asks for the next batch once the batch ending at ``start`` is in its commit
        # log. ``commit(end)`` comes only with the batch after it, so the last batch of a
        # finished source would keep its spool files and go uncounted without this.
        with span("latest_offset", self.plan.name, "planner") as sp:
            starts = self._split(start)
            for i, (x, s_) in enumerate(zip(self.inputs, starts)):
                if x.kind == "source":
                    _unspool(self._spool_root(i), int(s_["seq"]), self.plan.fs)
            ends = [x.planner.latestOffset(s, limit) for x, s in zip(self.inputs, starts)]
            if self._hold(ends):
                sp["held"] = True
                return start
            if self.plan.fs is None and all(bool(e.get("eos")) for e in ends) and not all(
                    bool(s_.get("eos")) for s_ in starts):
                mark_ending(self.plan)
            return self._combine(ends)

    def _hold(self, ends: list) -> bool:
        """Whether to plan no micro-batch yet: an input topic's producer is running its last
        micro-batch (:func:`mark_ending`) whose rows and end of stream this batch would miss,
        and so is every other input this batch would not take to its end.

        Waiting for it makes the end of the input one micro-batch, whose tasks split
        (:func:`split_branches`, ``final``) instead of a partial batch on one core followed by
        an end-of-stream batch: the tail of a bounded deploy, when the other queries are done.
        At most :data:`HOLD_SECONDS` in all, in case the producer stalls."""
        if self.plan.fs is not None or self._never_hold:
            return False
        live = [x for x, e in zip(self.inputs, ends) if not e.get("eos")]
        if not live or any(x.kind != "topic" or not _ending(x.planner.topic) for x in live):
            return False    # an input with more to come: its rows are worth a micro-batch now
        now = time_.monotonic()
        if self._held_since is None:
            self._held_since = now
        return now - self._held_since < HOLD_SECONDS

    def partitions(self, start: dict, end: dict) -> list:
        """The tasks of the micro-batch from ``start`` to ``end``: :class:`GroupPartition`."""
        with span("partitions", self.plan.name, "planner") as sp:
            parts = self._partitions(start, end, sp)
        return parts

    def _partitions(self, start: dict, end: dict, sp: dict) -> list:
        plan = self.plan
        items, rows = [], []
        for i, (x, a, b) in enumerate(zip(self.inputs, self._split(start), self._split(end))):
            if x.kind == "topic":
                for p in x.planner.partitions(a, b):
                    items.append((i, p.path, "topic"))
                    rows.append(p.rows)
            else:
                for j, chunk in enumerate(_chunks(x.planner.planned(a, b), plan.partitions)):
                    path = _spool(self._spool_root(i), int(a["seq"]), int(b["seq"]), j, chunk,
                                  plan.fs)
                    items.append((i, path, "spool"))
                    rows.append(sum(c.num_rows for c in chunk))
                chunk = None
                x.planner.spooled(a, b)
        items = tuple(items)
        sp["rows"] = sum(rows)
        self._count(end, sum(rows))
        e = None if plan.fs is None else end
        if plan.stateful:
            keys = max(1, plan.partitions) if plan.key is not None else 1
            if plan.branch_tasks:
                per = range(len(plan.branches))
            else:
                order = None
                if plan.costs and sum(rows):
                    final = all(bool(x.get("eos")) for x in self._split(end))
                    order, est = split_branches(len(plan.branches), read_costs(plan.costs),
                                                upstream_batches(items), final,
                                                plan.split_seconds)
                    sp["split"] = order is not None
                    if est is not None:
                        sp["expected_s"] = round(est, 2)
                per = (None,) if order is None else order
            return [GroupPartition(i * keys + p, items, p if plan.key is not None else None, e, b)
                    for i, b in enumerate(per) for p in range(keys)]
        if len(items) <= 1:
            return [GroupPartition(0, items, None, e)]
        # Stateless: contiguous runs of files, balanced by rows (file order is stream order
        # and the topic sink commits the parts in partition order).
        n = min(max(1, plan.partitions), len(items))
        per = max(1, -(-sum(rows) // n))
        out, cur, acc = [], [], 0
        for k, (it, r) in enumerate(zip(items, rows)):
            cur.append(it)
            acc += r
            # never between the parts of a batch that are read merged (merge_parts)
            whole = (it[0] not in plan.ranks or k + 1 == len(items)
                     or _part_batch(it) is None or _part_batch(items[k + 1]) != _part_batch(it))
            if acc >= per and len(out) < n - 1 and whole:
                out.append(GroupPartition(len(out), tuple(cur), None, e))
                cur, acc = [], 0
        if cur:
            out.append(GroupPartition(len(out), tuple(cur), None, e))
        return out

    def commit(self, end: dict) -> None:
        with span("source_commit", self.plan.name, "planner"):
            for i, (x, e) in enumerate(zip(self.inputs, self._split(end))):
                x.planner.commit(e)
                if x.kind == "source":
                    _unspool(self._spool_root(i), int(e["seq"]), self.plan.fs)
        release_memory()

    def _count(self, end: dict, n: int) -> None:
        """Add a planned batch's input rows to ``<workdir>/stats/<query>.json`` (Spark's own
        row counts see only the commit-message rows): once per batch, a replay of the last
        planned batch (the only one Spark replays) is not counted again."""
        plan = self.plan
        key = json.dumps(end, sort_keys=True)
        if not plan.workdir:
            return
        name = plan.name.replace("/", "_") + ".json"
        fs = plan.fs
        path = (f"{plan.fs_root}/stats/{name}" if fs is not None
                else os.path.join(plan.workdir, "stats", name))
        try:
            if fs is not None:
                with fs.open_input_stream(path) as f:
                    doc = json.loads(f.read())
            else:
                with open(path) as f:
                    doc = json.load(f)
        except (FileNotFoundError, ValueError):
            doc = {"rows_in": 0, "batches": 0, "end": None}
        if doc.get("end") == key:
            return
        doc = {"rows_in": int(doc["rows_in"]) + int(n), "batches": int(doc["batches"]) + 1,
               "end": key}
        if fs is None:
            os.makedirs(os.path.dirname(path), exist_ok=True)
        atomic_json(path, doc, indent=None, fs=fs)

    def read(self, partition: GroupPartition) -> Iterator[pa.RecordBatch]:
        """A task (executor side)."""
        plan = self.plan
        with span("task", plan.name, "task", part=partition.part):
            if plan.nice:
                with cpu_slot(plan.workdir, plan.cpu_slots):
                    out = _niced(plan.nice, lambda: list(run_partition(plan, partition)))
                yield from out
            else:
                yield from run_partition(plan, partition)


def _niced(nice: int, fn):
    """``fn()`` on a new thread of this process at nice value ``nice`` (or the process's, if
    that is higher).

    Linux gives each thread its own nice value, and any thread may raise its own but not lower
    it again without privileges. Spark reuses a Python worker for the tasks of every query, so a
    task must not lower the priority of its process: it runs on a thread that ends with it.
    Where the nice value cannot be set (another OS), the task runs at the process's priority.
    """
    import threading

    box: dict = {}

    def body():
        try:
            tid = threading.get_native_id()
            os.setpriority(os.PRIO_PROCESS, tid, max(nice, os.getpriority(os.PRIO_PROCESS, tid)))
        except (OSError, AttributeError):
            pass
        try:
            box["out"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised on the task's own thread
            box["err"] = exc

    th = threading.Thread(target=body, name="epic-task", daemon=True)
    th.start()
    th.join()
    if "err" in box:
        raise box["err"]
    return box["out"]


def _chunks(batches: list, n: int) -> list[list]:
    """``batches`` in at most ``n`` contiguous runs of about equal rows."""
    total = sum(b.num_rows for b in batches)
    if not total:
        return []
    per = max(1, -(-total // max(1, n)))
    out, cur, acc = [], [], 0
    for b in batches:
        cur.append(b)
        acc += b.num_rows
        if acc >= per:
            out.append(cur)
            cur, acc = [], 0
    if cur:
        out.append(cur)
    return out


def _spool(root: str, a: int, b: int, j: int, batches: list, fs=None) -> str:
    """Write planned source batches (an Arrow IPC stream) where the tasks read them: atomically,
    the same content on a replay. ``fs``: a remote work directory's filesystem (``root`` is a
    path in it; the file is published by the store's rule)."""
    if fs is not None:
        from epic.storage import publish

        path = f"{root}/{a:012d}-{b:012d}.{j}.arrow"
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, batches[0].schema) as w:
            for x in batches:
                w.write_batch(x)
        publish(fs, path, sink.getvalue().to_pybytes())
        return path
    os.makedirs(root, exist_ok=True)
    path = os.path.join(root, f"{a:012d}-{b:012d}.{j}.arrow")
    # not fsynced: a spool file is re-made from the source on a replay
    with atomic_path(path, fsync=False) as tmp, pa.OSFile(tmp, "wb") as f, \
            pa.ipc.new_stream(f, batches[0].schema) as w:
        for x in batches:
            w.write_batch(x)
    return path


def _unspool(root: str, end: int, fs=None) -> None:
    """Delete the spool files of batches that end at or before ``end`` (committed); ``fs``: the
    remote work directory's filesystem (None: local)."""
    if fs is not None:
        import pyarrow.fs as pafs

        names = [fi.base_name for fi in fs.get_file_info(
            pafs.FileSelector(root, allow_not_found=True))]
        remove = fs.delete_file
    else:
        try:
            names = os.listdir(root)
        except FileNotFoundError:
            return
        remove = os.remove
    for n in names:
        if n.endswith(".arrow"):
            try:
                b = int(n.split(".")[0].split("-")[1])
            except (IndexError, ValueError):
                continue
            if b <= end:
                try:
                    remove(f"{root}/{n}")
                except OSError:
                    pass


# -- committer -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Pointers(WriterCommitMessage):
    """What a task of a direct query returns to the driver: the encoded commit messages of the
    outputs it wrote (:func:`run_partition`)."""

    data: tuple


class Committer:
    """The committer of a direct query (epic's, driven through the thin Spark adapter
    :class:`epic.spark.datasources.CommitWriter`): a task collects the commit messages its
    group task wrote; the driver's ``commit`` hands them, output by output, to the outputs'
    writers (idempotent per producer and batch id)."""

    def __init__(self, outputs: list, name: str = "", trace: str = "", costs: str = ""):
        self.outputs = outputs
        self.name = name  # the query's (trace spans)
        self.trace = trace
        self.costs = costs  # GroupPlan.costs: where the branches' measured seconds go

    def __setstate__(self, state):
        self.__dict__.update(state)
        adopt(self.trace)

    def collect(self, iterator) -> Pointers:
        got = []
        for b in iterator:
            got.extend(b.column(0).to_pylist())
        return Pointers(tuple(got))

    def _by_output(self, messages, costs: list | None = None) -> list[list]:
        per = [[] for _ in self.outputs]
        for m in messages or ():
            if m is None:
                continue
            for data in m.data:
                i, msg = _decode(data)
                if i is None:       # a branch's measured seconds
                    if costs is not None:
                        costs.append(msg)
                    continue
                per[i].append(msg)
        return per

    def commit(self, messages, batch_id: int) -> None:
        with span("commit", self.name, "commit", batch=batch_id):
            costs: list = []
            for o, ms in zip(self.outputs, self._by_output(messages, costs)):
                o.writer.commit(ms, batch_id)
            if self.costs:
                # after the outputs: a replay of this batch may count it twice, which only
                # nudges an estimate (the files are the same with or without a split); nor
                # does a cost that cannot be written fail the commit
                try:
                    add_costs(self.costs, costs)
                except OSError:
                    pass
        release_memory()

    def abort(self, messages, batch_id: int) -> None:
        for o, ms in zip(self.outputs, self._by_output(messages)):
            o.writer.abort(ms, batch_id)

