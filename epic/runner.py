"""The in-process runner (``epic run``): deterministic, and the reference result for every runtime.

How it drives a topology:

1. Every node's operator is built by the registry (:func:`epic.operators.build`); sources are opened.
2. Sources take turns, one batch each, in the order they were added (so a run is reproducible).
   A source batch is stamped with the arrival wall time in ``_entry`` when delay logging is on, and
   pushed depth-first through the graph: each consumer's operator gets it, and its outputs are
   pushed on at once. A ``splitstream`` routes batches to its output ports; a ``merge`` tells them
   apart by input index.
3. After each batch the source emits a watermark (the largest event time seen minus its
   ``lateness``); when it is exhausted, a final watermark ``max + 1`` and then the end. A source
   with ``slack=`` / ``punctuation=`` goes through :class:`epic.timecore.Reorderer` instead: the
   rows its watermark passes leave sorted by time, late rows are counted (and written to its
   ``late_file``), and the held rows leave at the end. A node
   forwards a watermark after handling it (a merge forwards the minimum over its inputs); a node
   ends when all its inputs have ended, after flushing (``on_end``).
4. Per node, rows in / out and time spent are counted; edges count rows per stream. With
   ``progress=True`` a live rich table shows them; a summary table is printed at the end.

The wall clock is injected (``clock``) and used only for the delay-logging stamps.
"""

from __future__ import annotations

import json
import time as _time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pyarrow as pa

from .driver import NodeDriver
from .operators import build as build_operator
from .errors import EpicError
from .operator import ENTRY_COLUMN
from .replay import entry_times
from .sources import Watermark
from .timecore import closing_watermark, source_watermark
from .topology import (MergeNode, Node, SinkNode, SourceNode, SplitNode, Stream, Topology)

__all__ = ["run", "RunResult", "NodeStats"]


@dataclass
class NodeStats:
    """Counters of one node in a run."""

    name: str
    kind: str
    rows_in: int = 0
    rows_out: int = 0
    batches_in: int = 0
    seconds: float = 0.0  # time inside this node's operator (and source reads)
    late_rows: int = 0
    extra: dict = field(default_factory=dict)

    def rate(self, elapsed: float) -> float:
        rows = self.rows_out if self.kind == "source" else self.rows_in
        return rows / elapsed if elapsed > 0 else 0.0


@dataclass
class RunResult:
    """What a run produced and measured.

    Attributes:
        topology: the topology's name.
        nodes: per-node counters, in topological order.
        edges: rows per stream name (``node`` or ``node.port``).
        collected: tables of :func:`epic.collect_sink` sinks, by sink name.
        seconds: wall time of the run.
    """

    topology: str
    nodes: dict[str, NodeStats]
    edges: dict[str, int]
    collected: dict[str, pa.Table]
    seconds: float

    def to_json(self) -> str:
        """Counters as JSON (``epic run --stats``; ``epic graph --stats`` draws edge widths)."""
        return json.dumps({
            "topology": self.topology, "seconds": self.seconds, "edges": self.edges,
            "nodes": {n: {"kind": s.kind, "rows_in": s.rows_in, "rows_out": s.rows_out,
                          "seconds": s.seconds, "late_rows": s.late_rows, **s.extra}
                      for n, s in self.nodes.items()},
        }, indent=2, sort_keys=True, default=str)


class _Engine:
    def __init__(self, topology: Topology, clock: Callable[[], int]):
        self.t = topology
        self.clock = clock
        self.order = topology.topological_order()
        self.ops: dict[str, object] = {}
        self.stats = {n.name: NodeStats(n.name, n.kind) for n in self.order}
        self.edges: dict[str, int] = {}
        self.consumers: dict[Stream, list[tuple[Node, int]]] = {}
        self.remaining: dict[str, int] = {}
        self.out_wm: dict[str, int] = {}
        for n in self.order:
            self.remaining[n.name] = len(n.inputs)
            for s in n.outputs:
                self.consumers[s] = []
                self.edges[s.name] = 0
        for n in self.order:
            for i, s in enumerate(n.inputs):
                self.consumers[s].append((n, i))
        self.drivers: dict[str, NodeDriver] = {}
        for n in self.order:
            if isinstance(n, SourceNode):
                continue
            op = build_operator(n, clock=clock)
            self.ops[n.name] = op
            self.drivers[n.name] = NodeDriver(n.name, op, len(n.inputs),
                                              merge=isinstance(n, MergeNode),
                                              split=isinstance(n, SplitNode))

    # -- pushing -------------------------------------------------------------------------------
    def _timed(self, node: Node, fn, *args):
        """Call a driver method, counting the time in the node's busy seconds."""
        st = self.stats[node.name]
        self.drivers[node.name].batch = st.batches_in
        t0 = _time.perf_counter()
        try:
            return fn(*args)
        finally:
            st.seconds += _time.perf_counter() - t0

    def emit(self, node: Node, outs):
        if not outs:
            return
        if isinstance(node, SplitNode):
            for port, batches in enumerate(outs):
                self._emit_stream(node, node.outputs[port], batches)
        elif node.outputs:
            self._emit_stream(node, node.outputs[0], outs)

    def _emit_stream(self, node: Node, stream: Stream, batches):
        for b in batches:
            if b.num_rows == 0:
                continue
            self.stats[node.name].rows_out += b.num_rows
            self.edges[stream.name] += b.num_rows
            for consumer, idx in self.consumers[stream]:
                self.deliver(consumer, idx, b)

    def deliver(self, node: Node, idx: int, batch: pa.RecordBatch):
        st = self.stats[node.name]
        st.rows_in += batch.num_rows
        st.batches_in += 1
        d = self.drivers[node.name]
        self.emit(node, self._timed(node, d.rows, batch, idx))

    def watermark(self, node: Node, idx: int, wm: int):
        d = self.drivers[node.name]
        self.emit(node, self._timed(node, d.watermark, wm, idx))
        self.forward_watermark(node, d.forwarded)

    def forward_watermark(self, node: Node, wm):
        if wm is None:
            return
        last = self.out_wm.get(node.name)
        if last is not None and wm <= last:
            return
        self.out_wm[node.name] = wm
        for s in node.outputs:
            for consumer, idx in self.consumers[s]:
                self.watermark(consumer, idx, wm)

    def end(self, node: Node, idx: int):
        d = self.drivers[node.name]
        self.emit(node, self._timed(node, d.input_end, idx))
        if not d.all_inputs_ended:
            if d.merge:
                self.forward_watermark(node, d.forwarded)
            return
        self.emit(node, self._timed(node, d.end))
        self.finish(node)

    def finish(self, node: Node):
        for s in node.outputs:
            for consumer, idx in self.consumers[s]:
                self.end(consumer, idx)

    # -- sources -------------------------------------------------------------------------------
    def source_batch(self, node: SourceNode, batch: pa.RecordBatch, state: dict):
        if self.t.delay_logging or ENTRY_COLUMN in node.output.schema.names:
            batch = batch.append_column(ENTRY_COLUMN, entry_times(batch, self.clock))
        if not batch.schema.equals(node.output.schema):
            batch = pa.RecordBatch.from_arrays(batch.columns, schema=node.output.schema)
        times = batch.column(node.source.time)
        if times.null_count:
            raise EpicError(f"source {node.name!r}: event-time column {node.source.time!r} has "
                            "nulls; declare it non-nullable or filter such rows")
        reo = state["reorder"]
        if reo is not None:
            released, late = reo.push(batch)
            if late is not None and state["late"] is not None:
                state["late"].write(late)
            self.source_rows(node, released)
            self.forward_watermark(node, reo.watermark)
            return
        mx = int(np.max(times.to_numpy(zero_copy_only=False)))
        state["max"] = mx if state["max"] is None else max(state["max"], mx)
        self.source_rows(node, batch)
        self.forward_watermark(node, source_watermark(None, state["max"], state["lateness"]))

    def source_rows(self, node: SourceNode, batch):
        if batch is None or not batch.num_rows:
            return
        self.stats[node.name].rows_out += batch.num_rows
        self.edges[node.output.name] += batch.num_rows
        for consumer, idx in self.consumers[node.output]:
            self.deliver(consumer, idx, batch)

    def run(self, progress=None) -> None:
        sources = [n for n in self.order if isinstance(n, SourceNode)]
        active = []
        for n in sources:
            reader = n.source.open()
            active.append((n, reader, iter(reader), {"max": None,
                                                     "lateness": n.source.lateness_ticks(),
                                                     "reorder": n.source.reorderer(),
                                                     "late": n.source.late_writer()}))
        self.reorderers = {n.name: st["reorder"] for n, _, _, st in active}
        self.late_files = {n.name: n.source.late_file for n, _, _, st in active
                           if st["late"] is not None}
        self.readers = {n.name: r for n, r, _, _ in active}
        while active:
            still = []
            for n, reader, it, state in active:
                t0 = _time.perf_counter()
                try:
                    batch = next(it)
                except StopIteration:
                    batch = None
                finally:
                    self.stats[n.name].seconds += _time.perf_counter() - t0
                reo = state["reorder"]
                if isinstance(batch, Watermark):
                    if reo is not None:
                        self.source_rows(n, reo.punctuate(int(batch.time)))
                        self.forward_watermark(n, reo.watermark)
                    else:
                        self.forward_watermark(n, int(batch.time))
                    still.append((n, reader, it, state))
                    continue
                if batch is None:
                    if reo is not None:
                        self.source_rows(n, reo.end())
                        self.forward_watermark(n, reo.closing())
                        if state["late"] is not None:
                            state["late"].close()
                    elif state["max"] is not None:
                        self.forward_watermark(n, closing_watermark(None, state["max"]))
                    self.finish(n)
                    continue
                if batch.num_rows:
                    self.source_batch(n, batch, state)
                still.append((n, reader, it, state))
                if progress is not None:
                    progress()
            active = still


def _refuse_written_topics(topology: Topology) -> None:
    """A topic sink whose topic already holds the node's batches from an earlier run: a second
    run would append a second copy after the first one's end-of-stream marker."""
    from .errors import OutputError
    from .sinks import TopicSink

    for n in topology.topological_order():
        if isinstance(n, SinkNode) and isinstance(n.sink, TopicSink):
            done = n.sink.earlier_batches(n.name)
            if done:
                raise OutputError(n.sink.path, f"the topic already holds {done} batch(es) of "
                                  f"node {n.name!r} from an earlier run", what=f"sink {n.name!r}",
                                  fix="delete the topic directory or write to a new path (a run "
                                  "does not append a second copy of its output)")


def run(topology: Topology, *, clock: Callable[[], int] = _time.time_ns, progress: bool = False,
        summary: bool = False, console=None, validate: bool = True) -> RunResult:
    """Run ``topology`` in this process, deterministically; return counters and collected rows.

    Args:
        topology: the topology.
        clock: wall clock in ns, used only for delay-logging stamps.
        progress: show a live rich table (rows in / out, rows/s per node).
        summary: print a summary table at the end.
        console: a ``rich.console.Console`` (default: standard error).
        validate: run :meth:`Topology.validate` first.

    Example:
        >>> import epic
        >>> t = epic.Topology("doc")
        >>> s = t.source("s", epic.iterator_source([{"ts": i, "v": i} for i in range(4)],
        ...              schema={"ts": "int64", "v": "int64"}, time="ts", unit="s"))
        >>> w = t.window("sum", s, epic.tumbling(2), aggregates=[epic.sum("v")])
        >>> _ = t.sink("out", w, epic.collect_sink())
        >>> run(t).collected["out"].column("sum_v").to_pylist()
        [1, 5]
    """
    if validate:
        topology.validate()
    from .preflight import check_output_paths

    check_output_paths(topology)   # before anything runs: writable, distinct output paths
    _refuse_written_topics(topology)
    engine = _Engine(topology, clock)
    start = _time.perf_counter()
    live = None
    tick = None  # replaced by a progress callback when --progress is on
    if progress or summary:
        from rich.console import Console
        console = console or Console(stderr=True)
    if progress:
        from rich.live import Live

        live = Live(_table(engine, 0.0, topology.name), console=console, refresh_per_second=4,
                    transient=True)
        live.start()
        last = [0.0]

        def tick():
            now = _time.perf_counter()
            if now - last[0] >= 0.25:
                last[0] = now
                live.update(_table(engine, now - start, topology.name))
    try:
        engine.run(tick)
    finally:
        if live is not None:
            live.stop()
    elapsed = _time.perf_counter() - start
    collected = {}
    for n in engine.order:
        op = engine.ops.get(n.name)
        if isinstance(n, SinkNode):
            tab = op.table()
            if tab is not None:
                collected[n.name] = tab
        late = getattr(op, "late_rows", 0) if op is not None else 0
        engine.stats[n.name].late_rows = int(late or 0)
        dropped = getattr(op, "dropped_rows", None) if op is not None else None
        if dropped is not None:
            engine.stats[n.name].extra["dropped_rows"] = int(dropped)
        if isinstance(n, SourceNode):
            engine.stats[n.name].extra.update(engine.readers[n.name].stats)
            reo = engine.reorderers.get(n.name)
            if reo is not None:
                engine.stats[n.name].late_rows = reo.late_rows
                if n.name in engine.late_files:
                    engine.stats[n.name].extra["late_file"] = engine.late_files[n.name]
    result = RunResult(topology.name, engine.stats, engine.edges, collected, elapsed)
    if summary:
        console.print(_table(engine, elapsed, topology.name, final=True))
        for line in _notes(result):
            console.print(line)
    return result


def _table(engine: _Engine, elapsed: float, name: str, final: bool = False):
    from rich.table import Table

    tab = Table(title=f"{name}: {'done in' if final else 'running'} {elapsed:.2f} s",
                title_justify="left")
    for col in ("node", "kind", "rows in", "rows out", "rows/s", "busy s"):
        tab.add_column(col, justify="left" if col in ("node", "kind") else "right")
    for n in engine.order:
        s = engine.stats[n.name]
        tab.add_row(n.name, n.kind, f"{s.rows_in:,}" if n.inputs else "-",
                    f"{s.rows_out:,}" if n.outputs else "-",
                    f"{s.rate(elapsed):,.0f}", f"{s.seconds:.3f}")
    return tab


def _notes(result: RunResult) -> list[str]:
    from rich.markup import escape

    notes = []
    for s in result.nodes.values():
        if s.late_rows:
            where = (f", written to {escape(str(s.extra['late_file']))}"
                     if s.extra.get("late_file") else "")
            notes.append(f"[yellow]node {s.name!r}: {s.late_rows} late row(s) (behind the "
                         f"watermark): counted{where}, see the node's late policy[/yellow]")
        if s.extra.get("dropped_rows"):
            notes.append(f"[yellow]node {s.name!r}: {s.extra['dropped_rows']} row(s) older than "
                         "their key's previous row dropped (out_of_order='drop')[/yellow]")
        bad = s.extra.get("bad_lines")
        if bad:
            notes.append(f"[yellow]source {s.name!r}: {sum(bad.values())} bad line(s) "
                         f"{bad} written to {escape(str(s.extra.get('dead_letter')))}[/yellow]")
    return notes
