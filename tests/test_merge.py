"""Time-ordered merge: order, ties, a late input, an idle input, snapshots."""

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st
import pytest

import epic
from epic.errors import EpicError
from epic.operators.merge import MergeOperator

SCH = pa.schema([("ts", pa.int64()), ("src", pa.string())])


def batch(ts, src):
    return pa.RecordBatch.from_pylist([{"ts": t, "src": src} for t in ts], schema=SCH)


def rows(outs):
    return [(r["ts"], r["src"]) for b in outs for r in b.to_pylist()]


def test_sort_merge_with_deterministic_ties():
    """Rows come out by time, then input index, then arrival order."""
    m = MergeOperator(2, SCH, "ts")
    out = m.on_batch(batch([1, 4, 4], "b"), input=1)
    out += m.on_batch(batch([0, 4, 7], "a"), input=0)
    out += m.on_watermark(7, input=0) + m.on_watermark(9, input=1)
    out += m.on_end()
    assert rows(out) == [(0, "a"), (1, "b"), (4, "a"), (4, "b"), (4, "b"), (7, "a")]


def test_quiet_input_blocks_until_its_watermark_arrives():
    """Without idle_after, a silent input holds the output back until its heartbeat."""
    m = MergeOperator(2, SCH, "ts")
    assert m.on_batch(batch([1, 2, 3], "a"), input=0) == []
    assert m.on_watermark(3, input=0) == []
    out = m.on_watermark(100, input=1)  # a heartbeat: no data below 100 on input 1
    assert rows(out) == [(1, "a"), (2, "a")]
    assert m.watermark == 3


def test_idle_input_does_not_block_and_its_late_rows_are_counted():
    """An idle input stops holding the frontier; its rows behind it are late, emitted, counted.
    An input that has sent no watermark yet counts as being where the merge started (the first
    watermark any input sent), so it is idle only once another is idle_after beyond that."""
    m = MergeOperator(2, SCH, "ts", idle_after=10)
    out = m.on_batch(batch([1, 5, 20], "a"), input=0)
    out += m.on_watermark(20, input=0)  # input 1 has not spoken: at the start, 20, not idle
    assert out == []
    out += m.on_watermark(31, input=0)  # 11 beyond the start: input 1 is idle
    assert rows(out) == [(1, "a"), (5, "a"), (20, "a")]
    late = m.on_batch(batch([3, 35], "b"), input=1)  # 3 is behind the frontier 31
    assert rows(late) == [(3, "b")]
    assert m.late_rows == 1
    out = m.on_watermark(35, input=1) + m.on_watermark(40, input=0)
    assert rows(out) == []  # 35 waits: input 1 may still send more rows at 35
    assert rows(m.on_end()) == [(35, "b")]


def test_an_input_that_has_not_spoken_yet_is_not_idle():
    """Sources take turns, one batch each: with idle_after, the second source's first rows are
    not late because the first source's watermark came first (audit s35 L: 9 late rows of 60
    for any idle_after, lost with late='drop')."""
    import epic

    def topo(late):
        t = epic.Topology("idle")
        srcs = [t.source(f"s{j}", epic.iterator_source(
            [{"ts": i, "v": j} for i in range(30)], schema={"ts": "int64", "v": "int64"},
            time="ts", unit="s", batch_rows=10)) for j in range(2)]
        m = t.merge("mg", srcs, idle_after=15, late=late)
        t.sink("o", m, epic.collect_sink())
        return t

    for late in ("emit", "drop", "error"):
        r = epic.run(topo(late))
        ts = r.collected["o"].column("ts").to_pylist()
        assert len(ts) == 60 and ts == sorted(ts)
        assert r.nodes["mg"].late_rows == 0


def test_late_policy_drop_and_error():
    """late='drop' drops and counts; late='error' refuses with a fix."""
    m = MergeOperator(2, SCH, "ts", idle_after=0, late="drop")
    m.on_watermark(10, input=0)
    m.on_watermark(10, input=1)
    assert m.on_batch(batch([5], "a"), input=0) == [] and m.late_rows == 1
    e = MergeOperator(1, SCH, "ts", late="error", name="joiner")
    e.on_watermark(10, input=0)
    with pytest.raises(EpicError, match=r"node .joiner. \(merge\): input 0 .*older than its "
                                        r"frontier 10.*idle_after"):
        e.on_batch(batch([5], "a"), input=0)


def test_snapshot_restore_mid_stream():
    """A restored merge continues exactly as the original."""
    m = MergeOperator(2, SCH, "ts")
    m.on_batch(batch([5, 1], "a"), input=0)
    m.on_batch(batch([2], "b"), input=1)
    m.on_watermark(3, input=0)
    m2 = MergeOperator(2, SCH, "ts")
    m2.restore(m.snapshot())
    a = m.on_watermark(9, input=1) + m.on_end()
    b = m2.on_watermark(9, input=1) + m2.on_end()
    assert rows(a) == rows(b) == [(1, "a"), (2, "b"), (5, "a")]


def test_merge_in_a_topology_with_a_late_starting_and_an_early_ending_input():
    """Through the runner: sources of different speeds merge into one time order."""
    t = epic.Topology("m")
    sch = {"ts": "int64", "src": "string"}
    fast = t.source("fast", epic.iterator_source(
        [{"ts": i, "src": "fast"} for i in range(0, 1000, 3)], schema=sch, time="ts", unit="ms",
        batch_rows=7))
    referee = t.source("referee", epic.iterator_source(  # few rows, ends early
        [{"ts": 10, "src": "ref"}, {"ts": 500, "src": "ref"}], schema=sch, time="ts", unit="ms",
        batch_rows=1))
    late_start = t.source("late", epic.iterator_source(
        [{"ts": 900 + i, "src": "late"} for i in range(50)], schema=sch, time="ts", unit="ms",
        batch_rows=10))
    m = t.merge("merged", [fast, referee, late_start])
    t.sink("out", m, epic.collect_sink())
    res = epic.run(t)
    got = res.collected["out"].to_pylist()
    keys = [(r["ts"], ["fast", "ref", "late"].index(r["src"])) for r in got]
    assert keys == sorted(keys)
    assert len(got) == 334 + 2 + 50
    assert res.nodes["merged"].late_rows == 0


@given(st.lists(st.tuples(st.integers(0, 2), st.lists(st.integers(0, 30), max_size=6),
                          st.booleans(), st.integers(0, 3)), max_size=12),
       st.booleans())
def test_merge_equals_a_sort_of_everything_for_any_cuts_and_watermarks(events, snapshot):
    """Brute force: with no late rows, the merged output is every row sorted by (time, input,
    arrival), whatever the batch cuts, the watermarks, the inputs' own order (sorted runs take
    the slicing path, disordered ones the sorting one) and a snapshot/restore in between."""
    m = MergeOperator(3, SCH, "ts")
    sent, out = [], []
    wm = [0, 0, 0]
    for k, (i, ts, sort, step) in enumerate(events):
        ts = [t for t in (sorted(ts) if sort else ts) if t >= wm[i]]
        if ts:
            labels = [f"{i}/{len(sent) + j}" for j in range(len(ts))]
            out += m.on_batch(pa.RecordBatch.from_pylist(
                [{"ts": t, "src": x} for t, x in zip(ts, labels)], schema=SCH), input=i)
            sent += [(t, i, len(sent) + j) for j, t in enumerate(ts)]
        wm[i] += step
        out += m.on_watermark(wm[i], input=i)
        if snapshot and k % 3 == 2:
            data = m.snapshot()
            m = MergeOperator(3, SCH, "ts")
            m.restore(data)
    out += m.on_end()
    assert m.late_rows == 0
    assert rows(out) == [(t, f"{i}/{a}") for t, i, a in sorted(sent)]


def test_rows_left_by_a_sorting_release_keep_their_inputs():
    """An out-of-order input makes a release sort the pending rows; the rows it leaves keep
    their inputs, so a later tie still goes by input index (docs/topologies.md, merge)."""
    m = MergeOperator(2, SCH, "ts")
    out = m.on_batch(batch([1, 3], "a"), input=1) + m.on_watermark(3, input=1)
    out += m.on_batch(batch([3, 2], "b"), input=0) + m.on_watermark(3, input=0)
    out += m.on_end()
    assert rows(out) == [(1, "a"), (2, "b"), (3, "b"), (3, "a")]


def test_a_negative_idle_after_is_refused():
    t = epic.Topology("m")
    s = t.source("s", epic.iterator_source([], schema={"ts": "int64", "src": "string"},
                                           time="ts", unit="s"))
    with pytest.raises(epic.TopologyError, match="node 'm', idle_after: -1 is negative"):
        t.merge("m", [s, s], idle_after=-1)
