"""process: per-key state, hooks, event-time timers, msgpack state, errors."""

import pyarrow as pa
import pytest

import epic
from epic.errors import NodeFailure, StateError, TopologyError
from epic.operators import build as build_operator
from epic.operators.process import ProcessOperator

IN = pa.schema([("k", pa.int64()), ("ts", pa.int64()), ("a", pa.float64())])
OUT = pa.schema([("k", pa.int64()), ("ts", pa.int64()), ("what", pa.string())])


def batch(rows):
    return pa.RecordBatch.from_pylist([dict(zip(("k", "ts", "a"), r)) for r in rows], schema=IN)


class HitDetector(epic.Processor):
    """Ball-hit style sequential logic: a hit when |a| crosses 50 upwards; a timer closes it."""

    def init(self, key):
        return {"above": False, "hits": 0}

    def on_element(self, state, row, ctx):
        above = row["a"] >= 50
        if above and not state["above"]:
            state["hits"] += 1
            ctx.emit({"k": ctx.key, "ts": row["ts"], "what": f"hit{state['hits']}"})
            ctx.set_timer(row["ts"] + 10)
        state["above"] = above
        return state

    def on_timer(self, state, time, ctx):
        ctx.emit({"k": ctx.key, "ts": time, "what": "end" if not ctx.at_end else "end@eof"})
        return state


def drive(op, batches, wms):
    out = []
    for b, wm in zip(batches, wms):
        out += op.on_batch(b)
        out += op.on_watermark(wm)
    out += op.on_end()
    return [(r["k"], r["ts"], r["what"]) for b in out for r in b.to_pylist()]


def test_per_key_state_and_timers():
    """State is per key; a timer at t fires once the watermark passes t, in time order."""
    op = ProcessOperator(HitDetector(), IN, "ts", OUT, key="k")
    got = drive(op, [batch([(1, 0, 60), (2, 1, 10), (1, 2, 70), (2, 3, 55)]),
                     batch([(1, 20, 10), (1, 21, 80)])], [15, 22])
    assert got == [(1, 0, "hit1"), (2, 3, "hit1"), (1, 10, "end"), (2, 13, "end"),
                   (1, 21, "hit2"), (1, 31, "end@eof")]


def test_snapshot_restore_equals_uninterrupted_run():
    """Restoring a snapshot mid-stream gives the same output as never stopping."""
    b1 = batch([(1, 0, 60), (2, 1, 10), (1, 2, 70)])
    b2 = batch([(2, 5, 90), (1, 20, 10), (1, 21, 80)])
    full = ProcessOperator(HitDetector(), IN, "ts", OUT, key="k")
    expected = drive(full, [b1, b2], [3, 22])
    first = ProcessOperator(HitDetector(), IN, "ts", OUT, key="k")
    part = drive_partial = first.on_batch(b1) + first.on_watermark(3)
    second = ProcessOperator(HitDetector(), IN, "ts", OUT, key="k")
    second.restore(first.snapshot())
    rest = second.on_batch(b2) + second.on_watermark(22) + second.on_end()
    got = [(r["k"], r["ts"], r["what"]) for b in part + rest for r in b.to_pylist()]
    assert got == expected
    del drive_partial


def test_delete_timer_and_global_process():
    """A deleted timer never fires; without a key there is one global state."""
    class Last(epic.Processor):
        def init(self, key):
            return None

        def on_element(self, state, row, ctx):
            if state is not None:
                ctx.delete_timer(state + 5)
            ctx.set_timer(row["ts"] + 5)
            return row["ts"]

        def on_timer(self, state, time, ctx):
            ctx.emit({"k": -1, "ts": time, "what": f"quiet since {state}"})
            return state

    op = ProcessOperator(Last(), IN, "ts", OUT)
    got = drive(op, [batch([(1, 0, 0), (2, 2, 0), (3, 4, 0)]), batch([(1, 30, 0)])], [10, 31])
    assert got == [(-1, 9, "quiet since 4"), (-1, 35, "quiet since 30")]


def test_on_batch_hook_sees_all_rows_of_a_key():
    """A processor may override on_batch to work on all rows of a key at once."""
    sizes = []
    p = epic.processor(init=lambda k: 0,
                       on_batch=lambda s, rows, ctx: sizes.append((ctx.key, len(rows))) or s)
    op = ProcessOperator(p, IN, "ts", OUT, key="k")
    op.on_batch(batch([(1, 0, 0), (2, 1, 0), (1, 2, 0)]))
    assert sizes == [(1, 2), (2, 1)]


def test_state_must_be_serialisable_without_pickle():
    """A set in state is refused at snapshot time with the fix in the message."""
    p = epic.processor(init=lambda k: set(), on_element=lambda s, r, c: s)
    op = ProcessOperator(p, IN, "ts", OUT, key="k")
    op.on_batch(batch([(1, 0, 0)]))
    with pytest.raises(StateError, match="sorted list"):
        op.snapshot()


def test_user_error_names_node_and_hook():
    """An exception in a hook becomes NodeFailure naming the node and the hook."""
    def boom(state, row, ctx):
        raise ValueError("bad row")
    op = ProcessOperator(epic.processor(on_element=boom), IN, "ts", OUT, node="hits")
    with pytest.raises(NodeFailure, match=r"node 'hits'.*on_element raised ValueError: bad row"):
        op.on_batch(batch([(1, 0, 0)]))


def test_process_node_in_topology_requires_schema_and_carries_entry():
    """The node declares its output schema; with delay logging rows carry _entry."""
    t = epic.Topology("p", delay_logging=True)
    s = t.source("s", epic.iterator_source([{"k": 1, "ts": 0, "a": 60.0}], schema=IN, time="ts",
                                           unit="ms"))
    with pytest.raises(TopologyError, match=r"node 'h', schema: .*declare its output schema"):
        t.process("h", s, HitDetector(), key="k", schema=None)
    with pytest.raises(TopologyError, match=r"node 'h', key: key column 'nope'"):
        t.process("h", s, HitDetector(), key="nope", schema=OUT)
    h = t.process("h", s, HitDetector(), key="k", schema=OUT)
    assert h.schema.names == ["k", "ts", "what", "_entry"]
    t.sink("out", h, epic.collect_sink())
    tab = epic.run(t, clock=lambda: 42).collected["out"]
    assert tab.column("what").to_pylist() == ["hit1", "end@eof"]


class _CountSoFar:
    """A minimal vectorised operator: per batch, one row with the running row count."""

    output_schema = pa.schema([("ts", pa.int64()), ("n", pa.int64())])

    def __init__(self):
        self.n = 0

    def on_batch(self, batch):
        self.n += batch.num_rows
        ts = batch.column("ts")[batch.num_rows - 1].as_py()
        return [pa.record_batch([pa.array([ts]), pa.array([self.n])], schema=self.output_schema)]

    def on_watermark(self, wm):
        return []

    def on_end(self):
        return []

    def snapshot(self):
        return epic.serde.packb(self.n)

    def restore(self, data):
        self.n = epic.serde.unpackb(data)


def test_process_takes_an_operator_factory():
    """The low-level form: a factory of epic.Operator objects; schema comes from the operator;
    delay stamps are carried through."""
    t = epic.Topology("opfactory", delay_logging=True)
    s = t.source("s", epic.iterator_source([{"ts": i} for i in range(10)],
                                           schema={"ts": "int64"}, time="ts", unit="s",
                                           batch_rows=4))
    p = t.process("count", s, _CountSoFar)
    t.sink("out", p, epic.collect_sink(delays=True))
    out = epic.run(t, clock=iter(range(100, 200)).__next__).collected["out"]
    assert out.column("n").to_pylist() == [4, 8, 10]
    entry = out.column("entry_time").to_pylist()
    assert entry == sorted(entry) and entry[0] >= 100
    node = t.node("count")
    assert node.outputs[0].schema.names == ["ts", "n", "_entry"]
    op = build_operator(node)
    op.on_batch(pa.record_batch([pa.array([1, 2]), pa.array([7, 8])],
                                schema=pa.schema([("ts", pa.int64()), ("_entry", pa.int64())])))
    fresh = build_operator(node)
    fresh.restore(op.snapshot())
    assert fresh.op.n == 2


def test_process_factory_must_build_an_operator():
    t = epic.Topology("badfactory")
    s = t.source("s", epic.iterator_source([], schema={"ts": "int64"}, time="ts", unit="s"))
    with pytest.raises(epic.EpicError, match="lacks parts of the epic.Operator protocol"):
        t.process("bad", s, lambda: object())


class _DelayByOneBatch:
    """Emits each batch's rows only when the next batch arrives (older than the watermark by
    then), declaring that with a watermark hold when ``hold`` is set."""

    output_schema = pa.schema([("ts", pa.int64())])

    def __init__(self, hold):
        self.hold = hold
        self.pending = None

    @property
    def output_watermark(self):
        if not self.hold or self.pending is None or not len(self.pending):
            return None
        return self.pending[0]

    def on_batch(self, batch):
        out, self.pending = self.pending, batch.column("ts").to_pylist()
        return [pa.record_batch([pa.array(out, pa.int64())], schema=self.output_schema)] if out else []

    def on_watermark(self, wm):
        return []

    def on_end(self):
        out, self.pending = self.pending, None
        return [pa.record_batch([pa.array(out, pa.int64())], schema=self.output_schema)] if out else []

    def snapshot(self):
        return epic.serde.packb(self.pending)

    def restore(self, data):
        self.pending = epic.serde.unpackb(data)


@pytest.mark.parametrize("hold", [True, False])
def test_watermark_hold_keeps_delayed_rows_on_time(hold):
    """A process operator that emits rows later than it received them declares a hold
    (output_watermark); the runtime forwards min(input, hold), so a window downstream counts
    every row. Without the hold, the same rows arrive late and are dropped (and counted)."""
    t = epic.Topology("hold")
    s = t.source("s", epic.iterator_source([{"ts": i} for i in range(40)], schema={"ts": "int64"},
                                           time="ts", unit="s", batch_rows=5))
    d = t.process("delay", s, lambda: _DelayByOneBatch(hold))
    w = t.window("count", d, epic.tumbling(10), aggregates=[epic.count()])
    t.sink("out", w, epic.collect_sink())
    res = epic.run(t)
    total = sum(res.collected["out"].column("count").to_pylist())
    late = res.nodes["count"].late_rows
    assert total + late == 40
    assert (late == 0) if hold else (late > 0)
