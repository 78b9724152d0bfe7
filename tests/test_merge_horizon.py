"""A merge task under `epic deploy` (epic.spark.tasks.run_stateful, driven in-process with fake
markers) against the runner's sequence of calls: it applies every input's watermark of a step
before that step's rows, takes no step beyond its slowest live input's progress (later rows
wait in its snapshot, and so do the markers of inputs ahead), and counts the late rows epic run
counts (docs/deploy.md, "Same results as `epic run`")."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import epic
from epic import serde
from epic.operators.merge import MergeOperator
from epic.spark import tasks
from epic.spark.offsets import TopicOffset
from epic.spark.tags import IN, NO_WM, PHASE_ROWS, POS, STEP, WM, tag, topic_schema

SCH = pa.schema([("ts", pa.int64()), ("v", pa.int64())])


class Harness:
    def __init__(self, tmp_path, monkeypatch, n: int, bounded: bool = True):
        t = epic.Topology("h")
        srcs = [t.source(f"s{i}", epic.iterator_source(lambda: iter([]), schema=SCH, time="ts",
                                                       unit="s", bounded=bounded))
                for i in range(n)]
        t.sink("out", t.merge("m", srcs), epic.collect_sink())
        node = t.nodes["m"]
        self.spec = tasks.TaskSpec(node=node, mode="global",
                                   in_schemas=[x.schema for x in node.inputs],
                                   out_schema=topic_schema(node.output.schema),
                                   input_topics=[f"t{i}" for i in range(n)],
                                   checkpoint=str(tmp_path / "ck"),
                                   state_dir=str(tmp_path / "state"))
        self.markers: dict = {}
        self.batch = 0
        monkeypatch.setattr(tasks, "task_ids", lambda: (self.batch, 0))
        monkeypatch.setattr(tasks, "_markers", lambda spec, b, part=0: self.markers[b])

    def run(self, batch_id: int, rows: list, markers: list) -> tuple[list, dict, dict]:
        """rows: (input, step, wm, ts, v); markers per input: (seq, watermark, eos, step)."""
        self.batch = batch_id
        offs = [TopicOffset(f"t{i}", *m) for i, m in enumerate(markers)]
        self.markers[batch_id] = (offs, max(o.step for o in offs))
        it = []
        if rows:
            c = list(zip(*rows))
            it = [pa.RecordBatch.from_arrays(
                [pa.array(c[3], pa.int64()), pa.array(c[4], pa.int64()),
                 pa.array([tag(s, PHASE_ROWS) for s in c[1]], pa.int64()),
                 pa.array([NO_WM if w is None else w for w in c[2]], pa.int64()),
                 pa.array(c[0], pa.int64()), pa.array(np.arange(len(rows)), pa.int64())],
                names=["ts", "v", STEP, WM, IN, POS])]
        out = [r["ts"] for b in tasks.run_stateful(self.spec, iter(it)) for r in b.to_pylist()]
        st = serde.unpackb(tasks.StateStore(self.spec.state_dir, 0).load_before(batch_id + 1))
        return out, st, serde.unpackb(st["op"])


def _batch(ts, v):
    return pa.RecordBatch.from_pylist([{"ts": ts, "v": v}], schema=SCH)


@pytest.mark.parametrize("a_row_ahead", [True, False])
def test_an_input_ahead_keeps_its_marker_until_the_others_catch_up(tmp_path, monkeypatch,
                                                                   a_row_ahead):
    """Input A (filtered: few rows) is read to step 4, B to step 1: A's watermark after step 4
    must not reach the merge before B's rows of step 3, with or without a row of A held."""
    m = MergeOperator(2, SCH, "ts")
    out = m.on_batch(_batch(5, 0), 0) + m.on_watermark(10, 0)       # step 0 (A)
    out += m.on_batch(_batch(60, 1), 1) + m.on_watermark(100, 1)    # step 1 (B)
    out += m.on_watermark(20, 0)                                    # step 2 (A)
    out += m.on_batch(_batch(30, 1), 1) + m.on_watermark(110, 1)    # step 3 (B)
    if a_row_ahead:
        out += m.on_batch(_batch(55, 0), 0)                         # step 4 (A)
    out += m.on_watermark(50, 0)
    out += m.on_input_end(0) + m.on_end()
    want = (m.late_rows, sorted(r["ts"] for b in out for r in b.to_pylist()))

    h = Harness(tmp_path, monkeypatch, 2)
    rows = [(0, 0, None, 5, 0), (1, 1, None, 60, 1)] + ([(0, 4, 20, 55, 0)] if a_row_ahead
                                                        else [])
    r0, st0, _ = h.run(0, rows, [(3, 50, False, 4), (1, 100, False, 1)])
    assert ("held" in st0) == a_row_ahead
    r1, _, _ = h.run(1, [(1, 3, 100, 30, 1)], [(3, 50, False, 4), (2, 110, False, 3)])
    r2, st2, op = h.run(2, [], [(4, 50, True, 4), (3, 110, True, 3)])
    assert "held" not in st2
    assert (op["late"], sorted(r0 + r1 + r2)) == want


def test_an_ended_input_ends_in_step_order_beside_an_input_ahead(tmp_path, monkeypatch):
    """Three inputs, one ended at step 0 and one read ahead: the end is applied before the
    rows it preceded in epic run, so the late row of step 5 is found."""
    m = MergeOperator(3, SCH, "ts")
    m.on_batch(_batch(1, 0), 0), m.on_watermark(5, 0), m.on_input_end(0)
    m.on_batch(_batch(100, 1), 1), m.on_watermark(100, 1)
    m.on_batch(_batch(101, 2), 2), m.on_watermark(101, 2)
    m.on_batch(_batch(120, 1), 1), m.on_watermark(120, 1)
    m.on_batch(_batch(50, 2), 2), m.on_watermark(130, 2)
    m.on_end()
    assert m.late_rows == 1

    h = Harness(tmp_path, monkeypatch, 3)
    rows = [(0, 0, None, 1, 0), (1, 1, None, 100, 1), (2, 2, None, 101, 2),
            (1, 4, 100, 120, 1)]
    h.run(0, rows, [(1, 5, True, 0), (2, 120, False, 4), (1, 101, False, 2)])
    h.run(1, [(2, 5, 101, 50, 2)], [(1, 5, True, 0), (2, 120, False, 4), (2, 130, False, 5)])
    _, _, op = h.run(2, [], [(1, 5, True, 0), (3, 120, True, 4), (3, 130, True, 5)])
    assert op["late"] == m.late_rows


# A merge input that ends at step 2 while the other input's marker is at step 1 (so the end is
# held as 'ahead'); the next micro-batch brings the other input's rows of step 3. epic run applies
# A's end (step 2) before B's step-3 rows; the deploy task applied them after the rows (found by
# the review of session 35).


def _end_ahead_expected():
    m = MergeOperator(2, SCH, "ts")
    out = m.on_batch(_batch(10, 0), 0) + m.on_watermark(10, 0)        # step 0 (A)
    out += m.on_batch(_batch(100, 1), 1) + m.on_watermark(100, 1)     # step 1 (B)
    out += m.on_input_end(0)                                           # step 2 (A ends)
    out += m.on_batch(_batch(50, 1), 1) + m.on_watermark(100, 1)      # step 3 (B)
    out += m.on_input_end(1) + m.on_end()
    return m.late_rows, sorted(r["ts"] for b in out for r in b.to_pylist())


@pytest.mark.parametrize("b_ends_in_batch_1", [True, False])
def test_an_end_ahead_applies_before_the_later_rows_of_other_inputs(tmp_path, monkeypatch, b_ends_in_batch_1):
    want = _end_ahead_expected()
    h = Harness(tmp_path, monkeypatch, 2)
    # rows: (input, step, wm, ts, v); markers: (seq, watermark, eos, step)
    r0, st0, op0 = h.run(0, [(0, 0, None, 10, 0), (1, 1, None, 100, 1)],
                         [(2, 10, True, 2), (1, 100, False, 1)])
    r1, st1, op1 = h.run(1, [(1, 3, 100, 50, 1)],
                         [(2, 10, True, 2), (2, 100, b_ends_in_batch_1, 3)])
    r2, st2, op2 = h.run(2, [], [(2, 10, True, 2), (3, 100, True, 3)])
    print("epic run late:", want[0], " deploy task late:", op2["late"])
    assert (op2["late"], sorted(r0 + r1 + r2)) == want


def test_an_end_ahead_applies_before_later_rows_with_late_drop(tmp_path, monkeypatch):
    """late='drop': epic run drops the row 50; the deploy task emitted it (review s35)."""
    m = MergeOperator(2, SCH, "ts", late="drop")
    out = m.on_batch(_batch(10, 0), 0) + m.on_watermark(10, 0)
    out += m.on_batch(_batch(100, 1), 1) + m.on_watermark(100, 1)
    out += m.on_input_end(0)
    out += m.on_batch(_batch(50, 1), 1) + m.on_watermark(100, 1)
    out += m.on_input_end(1) + m.on_end()
    want = [r["ts"] for b in out for r in b.to_pylist()]

    import epic
    from epic.spark import tasks
    from epic.spark.tags import topic_schema
    h = Harness(tmp_path, monkeypatch, 2)
    t = epic.Topology("h2")
    srcs = [t.source(f"s{i}", epic.iterator_source(lambda: iter([]), schema=SCH, time="ts",
                                                   unit="s")) for i in range(2)]
    t.sink("out", t.merge("m", srcs, late="drop"), epic.collect_sink())
    h.spec.node = t.nodes["m"]
    h.spec.in_schemas = [x.schema for x in t.nodes["m"].inputs]
    r0, _, _ = h.run(0, [(0, 0, None, 10, 0), (1, 1, None, 100, 1)],
                     [(2, 10, True, 2), (1, 100, False, 1)])
    r1, _, _ = h.run(1, [(1, 3, 100, 50, 1)], [(2, 10, True, 2), (2, 100, False, 3)])
    r2, _, _ = h.run(2, [], [(2, 10, True, 2), (3, 100, True, 3)])
    print("epic run rows:", want, " deploy task rows:", r0 + r1 + r2)
    assert r0 + r1 + r2 == want


# Review s35: a merge with idle_after under deploy: input A's early batch-end marker was applied
# before input B's carried watermark (the _wm of B's rows of the same step), so B looked as if it
# had sent nothing, was idle, and its on-time row was dropped as late; epic run keeps it.


def test_idle_after_merge_takes_the_carried_watermark_before_early_markers(tmp_path, monkeypatch):
    m = MergeOperator(2, SCH, "ts", idle_after=50, late="drop")
    out = m.on_batch(_batch(0, 0), 0) + m.on_watermark(0, 0)          # step 0 (A)
    out += m.on_batch(_batch(10, 1), 1) + m.on_watermark(20, 1)       # step 1 (B)
    out += m.on_batch(_batch(40, 2), 0) + m.on_watermark(60, 0)       # step 2 (A) ...
    out += m.on_input_end(0)                                          # ... and A ends
    out += m.on_batch(_batch(25, 3), 1) + m.on_watermark(30, 1)       # step 3 (B)
    out += m.on_end()                                                 # B ends
    want = (m.late_rows, sorted(r["v"] for b in out for r in b.to_pylist()))

    h = Harness(tmp_path, monkeypatch, 2)
    t = epic.Topology("h2")
    srcs = [t.source(f"s{i}", epic.iterator_source(lambda: iter([]), schema=SCH, time="ts",
                                                   unit="s")) for i in range(2)]
    t.sink("out", t.merge("m", srcs, idle_after=50, late="drop"), epic.collect_sink())
    h.spec.node = t.nodes["m"]
    h.spec.in_schemas = [x.schema for x in t.nodes["m"].inputs]
    # rows: (input, step, wm before the step, ts, v); markers: (seq, watermark, eos, step)
    r0, _, op0 = h.run(0, [(0, 0, None, 0, 0), (1, 1, None, 10, 1), (0, 2, 0, 40, 2),
                           (1, 3, 20, 25, 3)],
                       [(3, 60, True, 2), (2, 30, False, 3)])
    r1, _, op = h.run(1, [], [(3, 60, True, 2), (3, 30, True, 3)])
    assert op["late"] == want[0]


@pytest.mark.parametrize("behind", [True, False])
def test_inputs_of_one_origin_share_a_watermark_only_for_steps_they_delivered(
        tmp_path, monkeypatch, behind):
    """Two inputs of one origin (a split's outputs; unbounded, so no horizon holds rows back):
    A's watermark at a step reaches B when B has no rows of that step, if B's topic has
    reached it. Delivered (no rows of step 3 for B): A's row 7 of step 3 is late, as in epic
    run (the session 37 audit M: B's older watermark kept it). Behind (B through a slower
    query): B's row 12 of step 3 is still to come, and A's watermark of step 5 would make it
    late (the review of session 37)."""
    m = MergeOperator(2, SCH, "ts")
    out = m.on_batch(_batch(5, 0), 0) + m.on_batch(_batch(6, 1), 1)            # step 1
    out += m.on_watermark(10, 0) + m.on_watermark(10, 1)
    if behind:
        out += m.on_batch(_batch(15, 0), 0) + m.on_batch(_batch(12, 1), 1)       # step 3
        out += m.on_watermark(20, 0) + m.on_watermark(20, 1)
        out += m.on_batch(_batch(25, 0), 0)                                     # step 5
        out += m.on_watermark(30, 0) + m.on_watermark(30, 1)
    else:
        out += m.on_batch(_batch(7, 0), 0) + m.on_batch(_batch(15, 0), 0)       # step 3
        out += m.on_watermark(20, 0) + m.on_watermark(20, 1)
    out += m.on_input_end(0) + m.on_end()
    want = (m.late_rows, sorted(r["ts"] for b in out for r in b.to_pylist()))
    assert want[0] == (0 if behind else 1)

    h = Harness(tmp_path, monkeypatch, 2, bounded=False)
    h.spec.origins = ["split", "split"]
    first = [(0, 1, None, 5, 0), (1, 1, None, 6, 1)]
    if behind:
        r0, _, _ = h.run(0, first + [(0, 3, 10, 15, 0), (0, 5, 20, 25, 0)],
                         [(2, 30, False, 5), (1, 10, False, 1)])
        r1, _, _ = h.run(1, [(1, 3, 10, 12, 1)], [(2, 30, False, 5), (2, 30, False, 5)])
        last = [(3, 30, True, 5), (3, 30, True, 5)]
    else:
        r0, _, _ = h.run(0, first + [(0, 3, 10, 7, 0), (0, 3, 10, 15, 0)],
                         [(2, 20, False, 3), (2, 20, False, 3)])
        r1 = []
        last = [(3, 20, True, 3), (3, 20, True, 3)]
    r2, _, op = h.run(2, [], last)
    assert (op["late"], sorted(r0 + r1 + r2)) == want
