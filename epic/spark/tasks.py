"""What runs inside Spark tasks for a node: stateless and stateful runs, and the state store.

A direct query's task (:func:`epic.spark.direct.run_partition`) chains these over the rows it
read from its input files.

**Stateless nodes** (map, filter, flat_map, a splitstream without round robin) run their operator
on every run of equal bookkeeping tags (:mod:`epic.spark.tags`) of a partition, so a user function
sees the very batches the in-process runner gives it, and output rows keep the tags.

**Stateful nodes** (window, process, merge, combine, a round-robin splitstream) keep their state
themselves: per ``(node, partition, batch id)`` a snapshot file (msgpack from
:meth:`epic.operator.Operator.snapshot`, wrapped with the watermarks applied so far). A task of
micro-batch ``B`` restores the newest snapshot with a batch id *below* ``B``, sorts its rows back
into stream order (``_step``, input, position in the input topic: a shuffle interleaves map outputs
arbitrarily), replays them as the runner would, applies the batch's watermark / end-of-stream
markers (read from the query's offset log), writes the snapshot for ``B`` atomically and returns
the output. A replayed batch restores the same snapshot and sees the same rows, so it produces the
same output, which the exactly-once topic sink then drops as a duplicate.

Every user exception is re-raised as :class:`~epic.errors.NodeFailure` naming the node, the
function and the micro-batch; the driver finds that line in Spark's error and reports it alone.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs

from epic import serde
from epic.atomic import atomic_write
from epic.errors import StateError
from epic.operator import snapshot_state
from epic.operators import build as build_operator
from epic.schemas import one_array
from epic.spark.executor import prepare_worker, task_ids
from epic.spark.trace import span
from epic.spark.tags import (HWM, IN, NO_WM, PHASE_END, PHASE_MARK, PHASE_PRE, PHASE_ROWS, POS,
                             RANK, STEP, WM, runs, step_of, tag, with_tags)
from epic.topics import resolve_filesystem

__all__ = ["TaskSpec", "StateStore", "run_stateless", "run_stateful", "node_marker", "node_step",
           "partition_marker", "node_late_rows"]

#: How many snapshots per partition are kept (older ones are deleted).
KEEP_SNAPSHOTS = 3

#: This worker process's newest snapshot of each node partition it saved (local work directories
#: only): ``partition directory -> (batch id, file identity, summary)``, ``summary`` being what
#: consumers read from a snapshot (:func:`_summary`). The nodes attached after a stateful node in
#: one task, and a topic writer stamping its partition's marker, read it from here instead of
#: reading and unpacking the whole snapshot the task has just written; used only while the file
#: is still the one written (same inode, size and mtime).
_WARM: dict[str, tuple] = {}


def _identity(path: str) -> tuple | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def _summary(st: dict) -> tuple:
    """``(mark, ended, last_step)`` of an unpacked snapshot: the watermark the node forwarded
    after the batch (frozen before ``on_end``), whether it ended, its last input step."""
    mark = st.get("mark", st.get("fwd"))
    step = st.get("last_step")
    return ((None if mark is None else int(mark)), bool(st.get("ended")),
            None if step is None else int(step))


@dataclass
class TaskSpec:
    """Everything a task needs about its node (pickled with the query's plan).

    Attributes:
        node: the node config (with the user's functions).
        mode: ``stateless``, ``keyed`` or ``global``.
        in_schemas: per input, the stream's schema (user columns incl. ``_entry``).
        out_schema: the output topic schema (user columns + tags); a splitstream's first port's.
        input_topics: per input, the topic id (maps offset-log entries to inputs).
        checkpoint: the query's checkpoint location (offset log).
        state_dir: ``<workdir>/state/<node>``.
        workdir: the deploy's work directory (crash points of the tests).
        port_schemas: a splitstream's output topic schema per port.
        inner: a splitstream with one output inside a fused group: its rows flow on to the next
            node in the task (plain batches, not per-port ones).
        upstream: for a stateful node fused after another one (``direct.Branch.more``): that
            node's ``state_dir``. The node's input is that node's output in the same task, and its
            markers come from that node's snapshot of the batch instead of the offset log.
        origins: for a node of several inputs, per input the node whose watermark it carries
            (:func:`epic.spark.planner.watermark_origins`): inputs of one origin share each
            step's ``_wm``.
    """

    node: object
    mode: str
    in_schemas: list
    out_schema: pa.Schema
    input_topics: list
    checkpoint: str
    state_dir: str
    workdir: str = ""
    port_schemas: list | None = None
    upstream: str | None = None
    inner: bool = False
    origins: list | None = None


class PortBatch(tuple):
    """``(port, batch)``: a splitstream's output for one port, when its outputs go to one topic
    each written by the task itself."""

    __slots__ = ()

    def __new__(cls, port: int, batch: pa.RecordBatch):
        return tuple.__new__(cls, (port, batch))

    @property
    def port(self) -> int:
        return self[0]

    @property
    def batch(self) -> pa.RecordBatch:
        return self[1]


class StateStore:
    """Snapshots of one node partition: ``<state_dir>/p<part>/<batch id>.state``, written atomically."""

    def __init__(self, state_dir: str, part: int):
        self.fs, root = resolve_filesystem(state_dir)
        self.dir = f"{root}/p{part}"
        self.local = isinstance(self.fs, pafs.LocalFileSystem)

    def _warm(self, batch_id: int) -> tuple | None:
        """This process's entry for the snapshot ``load_before(batch_id)`` reads (that of
        ``batch_id - 1``), if the file is still the one it wrote."""
        w = _WARM.get(self.dir) if self.local else None
        if w is None or w[0] != batch_id - 1:
            return None
        if _identity(f"{self.dir}/{w[0]}.state") != w[1]:
            _WARM.pop(self.dir, None)
            return None
        return w

    def summary_before(self, batch_id: int) -> tuple | None:
        """:func:`_summary` of the snapshot :meth:`load_before` would return (None: none)."""
        w = self._warm(batch_id)
        if w is not None:
            return w[2]
        snap = self.load_before(batch_id)
        return None if snap is None else _summary(serde.unpackb(snap))

    def _ids(self) -> list[int]:
        out = []
        for fi in self.fs.get_file_info(pafs.FileSelector(self.dir, allow_not_found=True)):
            name = fi.base_name
            if name.endswith(".state") and name[:-6].isdigit():
                out.append(int(name[:-6]))
        return sorted(out)

    def load_before(self, batch_id: int) -> bytes | None:
        """The newest snapshot with a batch id below ``batch_id``.

        The previous batch's snapshot is opened by name first: a directory listing can be stale
        on a network file system (attribute and directory caches), which would silently restore
        an older snapshot; an open by name revalidates the entry (NFS close-to-open
        consistency). The listing is the fallback (first batch, batches without a snapshot).
        """
        if batch_id > 0 and batch_id < 2**62:
            try:
                with self.fs.open_input_stream(f"{self.dir}/{batch_id - 1}.state") as f:
                    return f.read()
            except FileNotFoundError:
                pass
        ids = [i for i in self._ids() if i < batch_id]
        if not ids:
            return None
        with self.fs.open_input_stream(f"{self.dir}/{ids[-1]}.state") as f:
            return f.read()

    # Frozen segments (epic.serde.Frozen): an operator's unchanging parts, stored once in
    # ``<batch id>.seg`` beside the snapshot of the batch that first held them; ``<batch
    # id>.refs`` lists the segment files a snapshot refers to (for their deletion).

    def segment_sink(self, batch_id: int) -> serde.SegmentSink:
        """Where the snapshot of ``batch_id`` stores the segments it freezes (:meth:`save`
        writes them)."""
        return serde.SegmentSink(f"{batch_id}.seg")

    def segment_source(self) -> serde.SegmentSource:
        """Reads the segment files a restored snapshot refers to."""
        def read(name: str):
            if "/" in name or not name.endswith(".seg"):
                raise StateError(f"corrupt state: segment file name {name!r}")
            path = f"{self.dir}/{name}"
            if self.local:
                # mapped, not copied: the restore copies each segment once, into its arrays
                # (a file is never changed once written: a replay renames a new one over it)
                return pa.memory_map(path, "r").read_buffer()
            with self.fs.open_input_stream(path) as f:
                return f.read()
        return serde.SegmentSource(read)

    def _refs(self, batch_id: int) -> set[str] | None:
        """The segment files snapshot ``batch_id`` refers to (none without a list: the list is
        written, atomically, before a snapshot that refers to any); None if unreadable."""
        try:
            with self.fs.open_input_stream(f"{self.dir}/{batch_id}.refs") as f:
                got = serde.unpackb(f.read())
        except FileNotFoundError:
            return set()
        except (OSError, StateError):
            return None
        return set(got) if isinstance(got, list) else None

    def save(self, batch_id: int, data: bytes | list, summary: tuple | None = None,
             segments: serde.SegmentSink | None = None) -> None:
        """Write the snapshot of ``batch_id`` (bytes, or parts: ``serde.pack_large(join=False)``)
        atomically, after the segments it froze (``segments``, the sink it was packed with),
        and delete snapshots and segment files no replay needs; on a local work directory
        remember its summary in this process (:data:`_WARM`; ``summary``: :func:`_summary` of
        it, computed from ``data`` if not given)."""
        self.fs.create_dir(self.dir, recursive=True)
        path = f"{self.dir}/{batch_id}.state"
        _WARM.pop(self.dir, None)
        refs = sorted(segments.files) if segments is not None else []
        if segments is not None and segments.parts:
            atomic_write(f"{self.dir}/{segments.name}", segments.parts, fs=self.fs)
        if refs:
            # before the snapshot (no list: the snapshot refers to no segment file)
            atomic_write(f"{self.dir}/{batch_id}.refs", serde.packb(refs), fs=self.fs)
        elif self.local:
            try:   # a replayed batch's earlier attempt may have left one
                os.remove(f"{self.dir}/{batch_id}.refs")
            except OSError:
                pass
        atomic_write(path, data, fs=self.fs)
        if self.local:
            ident = _identity(path)
            if ident is not None:
                if summary is None:
                    summary = _summary(serde.unpackb(
                        b"".join(data) if isinstance(data, list) else data))
                _WARM[self.dir] = (batch_id, ident, summary)
        ids = self._ids()
        for old in ids[:-KEEP_SNAPSHOTS]:
            if old < batch_id:
                for ext in ("state", "refs"):
                    try:
                        self.fs.delete_file(f"{self.dir}/{old}.{ext}")
                    except OSError:
                        pass
        if refs or self._has_segment_files():
            self._prune_segments(batch_id, ids[-KEEP_SNAPSHOTS:])

    def _has_segment_files(self) -> bool:
        """Whether segment files may be left to delete after a snapshot that refers to none
        (on an object store not looked for: a listing per save; the next snapshot with
        segments deletes them)."""
        if not self.local:
            return False
        try:
            return any(n.endswith(".seg") for n in os.listdir(self.dir))
        except OSError:
            return False

    def _prune_segments(self, batch_id: int, kept: list[int]) -> None:
        """Delete the segment files of batches before ``batch_id`` that no kept snapshot refers
        to (none, when a kept snapshot's list cannot be read)."""
        used: set[str] = set()
        for i in kept:
            got = self._refs(i)
            if got is None:
                return
            used |= got
        for fi in self.fs.get_file_info(pafs.FileSelector(self.dir, allow_not_found=True)):
            name = fi.base_name
            if (name.endswith(".seg") and name[:-4].isdigit() and int(name[:-4]) < batch_id
                    and name not in used):
                try:
                    self.fs.delete_file(f"{self.dir}/{name}")
                except OSError:
                    pass


def partition_marker(state_dir: str, part: int, batch_id: int) -> tuple[int | None, bool] | None:
    """The watermark and end-of-stream flag one partition of a stateful node forwarded after
    micro-batch ``batch_id`` (from its snapshot; None if it has none)."""
    got = StateStore(state_dir, part).summary_before(batch_id + 1)
    return None if got is None else got[:2]


def node_step(state_dir: str, batch_id: int) -> int | None:
    """The last input step a stateful node took in micro-batch ``batch_id`` (the smallest over
    its partitions; None if one has none): what its output topic claims as its progress. A
    merge that holds rows beyond its slowest input's progress has taken fewer steps than its
    inputs' largest progress."""
    fs, root = resolve_filesystem(state_dir)
    parts = sorted(int(fi.base_name[1:]) for fi in
                   fs.get_file_info(pafs.FileSelector(root, allow_not_found=True))
                   if fi.type == pafs.FileType.Directory and fi.base_name[:1] == "p"
                   and fi.base_name[1:].isdigit())
    steps = []
    for p in parts:
        got = StateStore(state_dir, p).summary_before(batch_id + 1)
        if got is None or got[2] is None:
            return None
        steps.append(got[2])
    return min(steps) if steps else None


def node_marker(state_dir: str, batch_id: int) -> tuple[int | None, bool] | None:
    """The watermark and end-of-stream flag a stateful node forwarded after ``batch_id``, over all
    its partitions (the minimum watermark, unknown if one partition has none; ended when all
    ended): what its output topic must carry. None if no partition has a snapshot."""
    fs, root = resolve_filesystem(state_dir)
    parts = sorted(int(fi.base_name[1:]) for fi in
                   fs.get_file_info(pafs.FileSelector(root, allow_not_found=True))
                   if fi.type == pafs.FileType.Directory and fi.base_name[:1] == "p"
                   and fi.base_name[1:].isdigit())
    marks = [m for m in (partition_marker(state_dir, p, batch_id) for p in parts) if m is not None]
    if not marks:
        return None
    wms = [w for w, _ in marks]
    return (None if any(w is None for w in wms) else min(wms)), all(e for _, e in marks)


def _operator_states(state_dir: str):
    """Each partition's operator state (a dict) from its newest snapshot."""
    fs, root = resolve_filesystem(state_dir)
    for fi in fs.get_file_info(pafs.FileSelector(root, allow_not_found=True)):
        if fi.type != pafs.FileType.Directory or not fi.base_name[1:].isdigit():
            continue
        snap = StateStore(state_dir, int(fi.base_name[1:])).load_before(2**62)
        if snap is None:
            continue
        op = serde.unpackb(snap).get("op")
        st = serde.unpackb(op) if op else None
        if isinstance(st, dict):
            yield st


def node_late_rows(state_dir: str) -> int:
    """Rows a window node (or a merge) found late, over all its partitions (from their newest
    snapshots; each partition counts the late rows of its own keys)."""
    total = 0
    for st in _operator_states(state_dir):
        if isinstance(st.get("clock"), dict):
            total += int(st["clock"].get("late_rows") or 0)
        elif st.get("format") == "epic.merge/1":
            total += int(st.get("late") or 0)
    return total


def node_dropped_rows(state_dir: str) -> int | None:
    """Rows a pattern node dropped (``out_of_order='drop'``), over all its partitions; None
    for a process node that counts none."""
    total = None
    for st in _operator_states(state_dir):
        inner = st.get("op")
        inner = serde.unpackb(inner) if isinstance(inner, bytes) else None
        if isinstance(inner, dict) and inner.get("format") == "epic.pattern/1":
            total = (total or 0) + int(inner.get("dropped") or 0)
    return total


def _fn_label(node) -> str | None:
    """The user function a stateless node calls, named in a failure (None: epic's operator)."""
    for attr in ("fn", "predicate"):
        f = getattr(node, attr, None)
        if f is not None:
            return getattr(f, "__name__", type(f).__name__)
    return None


def _collect(iterator) -> pa.Table | None:
    """The iterator's non-empty batches as one table, a chunk per batch: not copied (a run of
    rows handed to the node is copied only if it spans batches, by :func:`_user_batch`)."""
    batches = [b for b in iterator if b.num_rows]
    if not batches:
        return None
    return pa.Table.from_batches(batches)


def _user_batch(table: pa.Table, schema: pa.Schema) -> pa.RecordBatch:
    cols = []
    for f in schema:
        c = table.column(f.name)
        c = one_array(c)
        cols.append(c if c.type == f.type else c.cast(f.type))
    return pa.RecordBatch.from_arrays(cols, schema=schema)


# -- stateless ---------------------------------------------------------------------------------

def _emit(spec: TaskSpec, outs, step_tag: int, wm: int | None) -> Iterator[pa.RecordBatch]:
    from epic.topology import SplitNode

    if isinstance(spec.node, SplitNode) and spec.inner:
        for b in outs[0]:
            if b.num_rows:
                yield with_tags(b, spec.out_schema, step_tag, wm)
        return
    if isinstance(spec.node, SplitNode):
        for port, batches in enumerate(outs):
            for b in batches:
                if not b.num_rows:
                    continue
                yield PortBatch(port, with_tags(b, spec.port_schemas[port], step_tag, wm))
        return
    for b in outs:
        if b.num_rows:
            yield with_tags(b, spec.out_schema, step_tag, wm)


def run_stateless(spec: TaskSpec, iterator, stream: bool = False) -> Iterator[pa.RecordBatch]:
    """``stream``: handle each incoming batch on its own (runs of equal tags within it) instead
    of the whole partition as one table: bounded memory behind a node with many output rows."""
    prepare_worker()
    tables = (((pa.Table.from_batches([b]) for b in iterator if b.num_rows)) if stream
              else [t for t in [_collect(iterator)] if t is not None])
    from epic.driver import NodeDriver
    from epic.topology import SplitNode

    node = spec.node
    d = None
    schema = spec.in_schemas[0]
    for table in tables:
        if d is None:
            d = NodeDriver(node.name, build_operator(node), 1, split=isinstance(node, SplitNode),
                           label=_fn_label(node))
            d.batch, _ = task_ids()
            d.check = False  # stateless: nothing is checkpointed
        steps = table.column(STEP).to_numpy()
        wms = table.column(WM).to_numpy()
        for a, b in runs(steps, wms):
            rows = _user_batch(table.slice(a, b - a), schema)
            wm = int(wms[a])
            outs = d.rows(rows)
            yield from _emit(spec, outs, int(steps[a]), None if wm == NO_WM else wm)


# -- stateful ----------------------------------------------------------------------------------

def _markers(spec: TaskSpec, batch_id: int, part: int = 0):
    from epic.spark.offsets import TopicOffset, batch_markers

    if spec.upstream is not None:
        # Fused after another stateful node: what that node forwarded after this batch (its
        # snapshot of the batch is saved: its output was read to the end), as the offset of its
        # topic would carry it.
        got = StateStore(spec.upstream, part).summary_before(batch_id + 1)
        if got is None:
            return [None], None
        wm, eos, step = got
        return [TopicOffset("", 0, wm, eos, step)], step

    offs = batch_markers(spec.checkpoint, batch_id)
    by_id = {o.topic_id: o for o in offs}
    per_input = []
    for i, tid in enumerate(spec.input_topics):
        o = by_id.get(tid)
        if o is None and len(offs) == len(spec.input_topics):
            o = offs[i]
        per_input.append(o)
    steps = [o.step for o in per_input if o is not None and o.step is not None]
    return per_input, (max(steps) if steps else None)


def run_stateful(spec: TaskSpec, iterator, stream: bool = False,
                  high: dict | None = None) -> Iterator[pa.RecordBatch]:
    """``stream``: yield the output of the micro-batch's rows as it is produced, before the
    snapshot is saved (only for outputs that need no markers from the snapshot: file sinks; a
    replay restores the snapshot before the batch either way). The output of the batch-end
    markers still comes after the save.

    ``high``: for a keyed node's partition, ``{"max": ...}`` filled by the reader with the largest
    event time of the whole stream's rows in this micro-batch (rows carry ``_hwm``, the stream's
    high-water mark before each): the node's clock follows the stream, not the partition."""
    from epic.driver import NodeDriver
    from epic.topology import MergeNode, SplitNode

    prepare_worker()
    table = _collect(iterator)
    batch_id, part = task_ids()
    node = spec.node
    n_in = len(spec.in_schemas)
    store = StateStore(spec.state_dir, part)
    d = NodeDriver(node.name, build_operator(node), n_in, merge=isinstance(node, MergeNode),
                   split=isinstance(node, SplitNode))
    d.batch = batch_id
    d.check = False  # every save below validates the state (snapshot_state)
    with span("state_load", node.name, "task"):
        snap = store.load_before(batch_id)
        st = None if snap is None else serde.unpackb(snap)
        if snap is not None:
            if st["op"]:
                with serde.segments(source=store.segment_source()):
                    d.op.restore(st["op"])
            d.restore_state(st)
    if snap is not None:
        last_step = st["last_step"]
        fwd = st["fwd"]
        mark = st.get("mark", fwd)
        ends_at = list(st.get("ends_at") or [None] * n_in)
        last_tag = st.get("last_tag")
    else:
        last_step = None
        fwd = None
        mark = None
        ends_at = [None] * n_in  # per input: the step of its end of stream, once seen
        last_tag = None          # the largest _step tag this node has emitted
    out: list[pa.RecordBatch] = []
    # the rows of the node's input stream before this micro-batch (all partitions): a row's
    # position in the stream, from which a time or count window ranks its keys
    base = 0 if snap is None else int(st.get("stream_rows", 0))
    ranked = high is not None and getattr(d.op, "ranked", False)
    if ranked:
        d.op.rank_column = RANK in spec.out_schema.names

    def forward():
        # What the runner forwards, and when: the node's watermark after a watermark it applied
        # (or a merge input's end while others are live), never lowered; not after rows (the
        # runner re-reads it only at the next watermark, so a hold that moved with the rows
        # reaches consumers then, not between this step's output rows)
        nonlocal fwd
        f = d.forwarded
        if f is not None and (fwd is None or f > fwd):
            fwd = f

    def call(fn, step_tag, *args, wm=None):
        nonlocal last_tag
        # Output tags never decrease in emission order: consumers sort by tag, so a smaller tag
        # would move rows ahead of rows this node emitted earlier. (An input run of one step can
        # follow another run of the same step with a newer watermark: the watermark's output
        # would be tagged phase 0 after the earlier run's phase-1 output.)
        if last_tag is not None and step_tag < last_tag:
            step_tag = last_tag
        last_tag = step_tag
        before = fwd if wm is None else wm
        outs = fn(*args)  # the driver names the node, the function and the batch on failure
        if outs:
            out.extend(_emit(spec, outs, step_tag, before))

    def watermark(i, w, step_tag):
        if w is None or w == NO_WM:
            return
        # the runner calls a node only with a watermark its input advanced to, then forwards;
        # a repeated one emits nothing (the driver ignores it) and forwards nothing
        advanced = d.applied[i] is None or int(w) > d.applied[i]
        call(d.watermark, step_tag, int(w), i)
        if advanced:
            forward()

    # A merge of bounded inputs fed by queries of their own (which progress each at its own
    # pace): rows of steps beyond the slowest live input's progress wait for the next
    # micro-batch (in the snapshot), so every input's rows and watermarks of a step are there
    # when the node takes the step, as in epic run.
    held = st.get("held") if snap is not None else None
    horizon = None
    pre_markers = None
    if (n_in > 1 and high is None and spec.upstream is None and not d.ended
            and all(getattr(x, "bounded", True) for x in getattr(node, "inputs", ()))):
        pre_markers = _markers(spec, batch_id, part)
        # an input that has delivered nothing yet has progressed to no step (-1)
        live = [-1 if o.step is None and o.seq == 0 else o.step
                for o in pre_markers[0] if o is not None and not o.eos]
        if live and all(x is not None for x in live) and len(live) + sum(
                1 for o in pre_markers[0] if o is not None and o.eos) == n_in:
            horizon = min(live)
    if held:
        old = pa.ipc.open_stream(pa.py_buffer(held)).read_all()
        if table is not None:
            old = pa.concat_tables([old.drop_columns([POS]),
                                    table.drop_columns([POS]).select(
                                        [c for c in old.column_names if c != POS])])
        else:
            old = old.drop_columns([POS])
        table = old.append_column(POS, pa.array(np.arange(old.num_rows, dtype=np.int64)))
    held = None
    if table is not None and horizon is not None and not d.ended:
        later = (table.column(STEP).to_numpy() >> 2) > horizon
        if later.any():
            sink_ = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink_, table.schema) as w:
                w.write_table(table.filter(pa.array(later)))
            held = sink_.getvalue().to_pybytes()
            table = table.filter(pa.array(~later)) if not later.all() else None
    if table is not None and not d.ended and table.num_rows == 0:
        table = None

    def marker_view():
        """The batch's markers per input (None for inputs ahead of the horizon: they come
        again), the step they claim, the inputs ahead and each input's progress."""
        per_input, mstep = pre_markers if pre_markers is not None else \
            _markers(spec, batch_id, part)
        ahead = set()
        if horizon is not None:
            # an input that progressed beyond the steps taken: its marker (its watermark after
            # steps not taken yet, with or without rows held) comes again with the next
            # micro-batch; it has delivered every step up to the horizon
            ahead = {i for i, o in enumerate(per_input)
                     if o is not None and o.step is not None and o.step > horizon}
            per_input = [None if i in ahead else o for i, o in enumerate(per_input)]
            mstep = horizon
        progress = [horizon if i in ahead else (None if o is None else o.step)
                    for i, o in enumerate(per_input)]
        return per_input, mstep, progress

    def apply_marks(per_input, progress, step_tag, below=None):
        """Apply the inputs' batch-end markers (``below``: only those of inputs whose marker
        step is below it, before the rows of that step), then the ends they allow."""
        order = sorted((i for i, o in enumerate(per_input) if o is not None
                        and (below is None or (o.step is not None and o.step < below))),
                       key=lambda i: (-1 if progress[i] is None else progress[i], i))
        for i in order:
            o = per_input[i]
            watermark(i, o.watermark, step_tag)
            if o.eos and ends_at[i] is None:
                ends_at[i] = -1 if o.step is None else int(o.step)
        # Inputs end in the runner's order: by the step of their end. A merge's frontier after
        # one input ended is the others' watermark, so the order decides the watermark it
        # forwards last (for DEBS: the sensor data's max + 1, not the referee markers'). Inputs
        # reach a merge query in their own time (one topic may be read to its end before
        # another has a row), so an end is applied once every other input has ended, announced
        # its end, or progressed to that step; until then it waits (in the snapshot).
        while True:
            pending = [i for i in range(n_in) if ends_at[i] is not None and not d.inputs_ended[i]]
            if not pending:
                break
            i = min(pending, key=lambda k: (ends_at[k], k))
            if below is not None and ends_at[i] >= below:
                break
            if not all(j == i or d.inputs_ended[j] or ends_at[j] is not None
                       or (progress[j] is not None and progress[j] >= ends_at[i])
                       for j in range(n_in)):
                break
            call(d.input_end, step_tag, i)
            if d.merge and not d.all_inputs_ended:
                forward()

    # A merge applies an input's batch-end marker (its watermark after its last step, its end)
    # before the rows of any later step of the other inputs, as epic run does: an input ahead
    # of the horizon in the last batch, or one read to its end, has a marker older than the
    # others' rows.
    early = None
    if n_in > 1 and high is None and not d.ended and table is not None:
        if pre_markers is None:
            pre_markers = _markers(spec, batch_id, part)
        early = marker_view()
    spans = high.get("runs") if high is not None and high.get("split") and n_in == 1 else None
    if spans and not d.ended:
        # Over several partitions: replay every run of the *stream* (with or without rows of
        # this partition's keys), and after its rows tell the node how far the stream's time
        # got. So the node's clock, emissions and their tags follow the stream run by run, as
        # in epic run (or one partition), and each run's output rows carry the watermark
        # forwarded before the run in every partition: consumers merge the partitions' parts
        # by (_step, time, _rank) into epic run's order (direct.merge_parts).
        if table is not None:
            pos = table.column(POS).to_numpy()
            if np.any(pos[1:] < pos[:-1]):
                order = np.argsort(pos, kind="stable")
                table, pos = table.take(pa.array(order)), pos[order]
            hwm = table.column(HWM).to_numpy()
        else:
            pos = np.empty(0, np.int64)
        k = 0
        for step_tag, wm, end, top in spans:
            s = step_of(step_tag)
            last_step = s if last_step is None else max(last_step, s)
            watermark(0, wm, tag(s, PHASE_PRE))
            start = fwd
            j = int(np.searchsorted(pos, end))
            if j > k:
                rows = _user_batch(table.slice(k, j - k), spec.in_schemas[0])
                call(d.rows, tag(s, PHASE_ROWS), rows, 0, hwm[k:j], base + pos[k:j], wm=start)
            call(d.observe, tag(s, PHASE_ROWS), top, wm=start)
            k = j
            if stream and out:
                yield from out
                out.clear()
    elif table is not None and not d.ended:
        steps = table.column(STEP).to_numpy()
        ins = table.column(IN).to_numpy() if IN in table.column_names else \
            np.zeros(table.num_rows, dtype=np.int64)
        pos = table.column(POS).to_numpy()
        order = np.lexsort((pos, ins, steps))
        if not np.array_equal(order, np.arange(len(order))):
            table = table.take(pa.array(order))
            steps, ins, pos = steps[order], ins[order], pos[order]
        wms = table.column(WM).to_numpy()
        hwm = (table.column(HWM).to_numpy() if high is not None and HWM in table.column_names
               else None)
        # A run's _wm was in force at its producer before the producer emitted anything of that
        # tag, so before any input's rows of the tag: the runner forwards every watermark
        # between steps, never during one. A node of several inputs (a merge of a split's
        # outputs) applies each input's first such watermark before the tag's rows of every
        # input, as epic run does; otherwise input 1's watermark would come after input 0's
        # rows and the merge would find fewer of them late.
        first_of_tag = None
        if n_in > 1:
            first_of_tag = {}
            for a, b in runs(steps, ins, wms):
                first_of_tag.setdefault(int(steps[a]), {}).setdefault(int(ins[a]), int(wms[a]))
            # Inputs of one origin (a split's outputs, maps of them) carry one watermark: a
            # step's _wm on one of them is also the others' before that step, when the step
            # brought them no rows (epic run forwards it on every output after each step) and
            # they have delivered that step (their topic's progress: an input behind it, e.g.
            # through a slower query when the inputs are unbounded, has rows of it to come).
            origins = getattr(spec, "origins", None)
            if origins is not None and len(set(origins)) < n_in:
                progress = (early if early is not None else marker_view())[2]
                for tag_, per in first_of_tag.items():
                    s_ = step_of(tag_)
                    shared: dict = {}
                    for j, w in per.items():
                        shared[origins[j]] = min(w, shared.get(origins[j], w))
                    for k in range(n_in):
                        if (k not in per and origins[k] in shared and progress[k] is not None
                                and progress[k] >= s_):
                            per[k] = shared[origins[k]]
        seen_tag = None
        for a, b in runs(steps, ins, wms):
            i = int(ins[a])
            s = step_of(steps[a])
            if first_of_tag is not None and int(steps[a]) != seen_tag:
                seen_tag = int(steps[a])
                # the inputs' watermarks in force before this step's rows first, then the
                # markers of inputs that delivered only earlier steps: an idle_after merge
                # judges idleness on what each input told it so far
                for j, w in sorted(first_of_tag[seen_tag].items()):
                    watermark(j, w, tag(s, PHASE_PRE))
                if early is not None:
                    apply_marks(early[0], early[2], tag(s, PHASE_PRE), below=s)
                    if d.ended or all(d.inputs_ended):
                        break
            last_step = s if last_step is None else max(last_step, s)
            watermark(i, int(wms[a]), tag(s, PHASE_PRE))
            rows = _user_batch(table.slice(a, b - a), spec.in_schemas[i])
            call(d.rows, tag(s, PHASE_ROWS), rows, i, None if hwm is None else hwm[a:b],
                 base + pos[a:b] if ranked else None)
            if stream and out:
                yield from out
                out.clear()
    if high is not None and high.get("max") is not None and not d.ended:
        # the stream's rows in other partitions moved its clock too
        call(d.observe, tag(last_step if last_step is not None else 0, PHASE_ROWS), high["max"])

    if not d.ended:
        per_input, mstep, progress = marker_view()
        if mstep is not None:
            last_step = mstep if last_step is None else max(last_step, mstep)
        s = last_step if last_step is not None else 0
        apply_marks(per_input, progress, tag(s, PHASE_MARK))
        # What consumers see as this node's watermark after the batch: the forwarded watermark,
        # frozen before on_end (the runner forwards nothing after a node's on_end, it ends it).
        mark = fwd
        if d.all_inputs_ended:
            call(d.end, tag(s, PHASE_END))

    with span("state_save", node.name, "task"):
        sink = store.segment_sink(batch_id)
        with serde.segments(sink=sink):
            op_state = snapshot_state(d.op, node.name)
        st = {"op": op_state, **d.state(),
              "last_step": last_step, "fwd": fwd, "mark": mark, "ends_at": ends_at,
              "last_tag": last_tag,
              "stream_rows": base + (high.get("rows", 0) if high is not None else 0)}
        if held is not None:
            st["held"] = held
        summary = _summary(st)
        st["op"] = serde.Blob(st["op"])   # a raw segment of the file: not copied twice
        store.save(batch_id, serde.pack_large(st, join=False), summary=summary, segments=sink)
    if spec.workdir:
        from epic.spark.crash import crash_point

        crash_point("node-state", spec.workdir)
    yield from out
