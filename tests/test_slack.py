"""Slack (a source re-orders within a bound) and punctuation rows (CTIs): issue #14, point 3.

The re-order / late logic is :class:`epic.timecore.Reorderer`, the one implementation both
runtimes call (``epic run``'s source path and the Spark source planner)."""

from __future__ import annotations

import csv

import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

import epic
from epic.errors import SpecError
from epic.timecore import Reorderer

SCHEMA = pa.schema([("ts", pa.int64()), ("v", pa.int64()), ("p", pa.bool_())])


def reference(rows, slack):
    """Row at a time: (released rows in order, late rows)."""
    high = pushed = None
    on_time, late = [], []
    for t, v, p in rows:
        hw = None if (high is None or slack is None) else high - slack
        wm = pushed if hw is None else (hw if pushed is None else max(hw, pushed))
        if p:
            pushed = t if pushed is None else max(pushed, t)
            continue
        if wm is not None and t < wm:
            late.append((t, v))
        else:
            on_time.append((t, v))
        high = t if high is None else max(high, t)
    return sorted(on_time, key=lambda r: r[0]), late   # stable: ties keep arrival order


def through(rows, slack, cuts):
    r = Reorderer("ts", slack, "p")
    out, late = [], []
    bounds = [0] + sorted(set(c for c in cuts if 0 < c < len(rows))) + [len(rows)]
    last_wm = None
    for a, b in zip(bounds, bounds[1:]):
        batch = pa.RecordBatch.from_pylist(
            [{"ts": t, "v": v, "p": p} for t, v, p in rows[a:b]], schema=SCHEMA)
        rel, lt = r.push(batch)
        wm = r.watermark
        if rel is not None:
            got = list(zip(rel.column("ts").to_pylist(), rel.column("v").to_pylist()))
            assert all(t <= wm for t, _ in got)                  # released only behind W
            assert last_wm is None or all(t >= last_wm for t, _ in got)
            out += got
        if lt is not None:
            late += list(zip(lt.column("ts").to_pylist(), lt.column("v").to_pylist()))
        last_wm = wm
    rel = r.end()
    if rel is not None:
        out += list(zip(rel.column("ts").to_pylist(), rel.column("v").to_pylist()))
    return out, late, r.late_rows


rows_st = st.lists(st.tuples(st.integers(0, 40), st.booleans()), max_size=60).map(
    lambda xs: [(t, i, p and i % 3 == 0) for i, (t, p) in enumerate(xs)])


@settings(max_examples=300, deadline=None)
@given(rows=rows_st, slack=st.one_of(st.none(), st.integers(0, 12)),
       cuts=st.lists(st.integers(0, 60), max_size=10))
def test_reorderer_equals_row_at_a_time_reference(rows, slack, cuts):
    out, late, n_late = through(rows, slack, cuts)
    ref_out, ref_late = reference(rows, slack)
    assert out == ref_out
    assert late == ref_late and n_late == len(ref_late)
    assert [t for t, _ in out] == sorted(t for t, _ in out)


def test_slack_and_lateness_are_exclusive_and_punctuation_is_a_bool_column():
    with pytest.raises(SpecError, match="not both"):
        epic.iterator_source([], schema=SCHEMA, time="ts", unit="s", slack=1, lateness=1)
    with pytest.raises(SpecError, match="bool column"):
        epic.iterator_source([], schema=SCHEMA, time="ts", unit="s", punctuation="v")
    with pytest.raises(SpecError, match="late_file"):
        epic.iterator_source([], schema=SCHEMA, time="ts", unit="s", late_file="x.csv")


def _topology(items, **src):
    t = epic.Topology("slack")
    s = t.source("s", epic.iterator_source(items, schema=SCHEMA, time="ts", unit="s",
                                           batch_rows=2, **src))
    w = t.window("w", s, epic.tumbling(10), aggregates=[epic.count(), epic.sum("v")])
    t.sink("out", w, epic.collect_sink())
    return t


def test_run_slack_reorders_so_the_window_sees_nothing_late(tmp_path):
    ts = [3, 1, 12, 5, 9, 25, 16, 21, 2, 30, 28, 40]     # disorder <= 10 except 2 (late)
    items = [{"ts": t, "v": 1, "p": False} for t in ts]
    late = tmp_path / "late.csv"
    res = epic.run(_topology(items, slack=10, late_file=str(late)))
    assert res.nodes["w"].late_rows == 0
    assert res.nodes["s"].late_rows == 1
    assert res.nodes["s"].extra["late_file"] == str(late)
    assert late.read_text().splitlines()[0] == "ts,v,p,_reason"   # as csv_sink writes it
    rows = list(csv.DictReader(open(late)))
    assert [r["ts"] for r in rows] == ["2"] and "late" in rows[0]["_reason"]
    # the same as the sorted on-time rows without slack
    ordered = [{"ts": t, "v": 1, "p": False} for t in sorted(ts) if t != 2]
    assert res.collected["out"].equals(epic.run(_topology(ordered)).collected["out"])
    # without slack, the window (lateness 0) finds the disorder late
    plain = epic.run(_topology(items))
    assert plain.nodes["w"].late_rows > 0


def test_punctuation_rows_advance_a_quiet_stream(capsys):
    """A quiet stream (data only at 1 and 2): heartbeat rows emit its window while the source
    is still open (a CTI), not only at the end."""
    printed_before_end = []

    def gen():
        yield {"ts": 1, "v": 5, "p": False}
        yield {"ts": 2, "v": 6, "p": False}
        for hb in (5, 20):
            yield {"ts": hb, "v": 0, "p": True}
        printed_before_end.append(capsys.readouterr().out)   # runs after the CTI at 20
        yield {"ts": 4, "v": 1, "p": False}               # behind the CTI at 20: late

    t = epic.Topology("cti")
    s = t.source("s", epic.iterator_source(gen, schema=SCHEMA, time="ts", unit="s",
                                           batch_rows=1, punctuation="p", bounded=False))
    w = t.window("w", s, epic.tumbling(10), aggregates=[epic.sum("v")], late="drop")
    t.sink("print", w, epic.console_sink(columns=["sum_v"]))
    t.sink("out", w, epic.collect_sink())
    res = epic.run(t)
    assert "11" in printed_before_end[0]                  # emitted because of the heartbeat
    assert res.collected["out"].column("sum_v").to_pylist() == [11]
    assert res.nodes["s"].late_rows == 1
    assert res.nodes["s"].rows_out == 2                  # punctuation rows are not data


@settings(max_examples=60, deadline=None)
@given(rows=rows_st, slack=st.one_of(st.none(), st.integers(0, 12)),
       batch_rows=st.integers(1, 9), beats=st.lists(st.integers(0, 60), max_size=4))
def test_run_source_stream_equals_reference(rows, slack, batch_rows, beats):
    """Through epic.run (any batch size, Watermark items between rows too): the source's stream
    is the reference's released rows, its late_rows the reference's late count."""
    items, ref_rows = [], []
    for i, r in enumerate(rows):
        if i in beats:                                   # an iterator Watermark = a punctuation
            items.append(epic.Watermark(r[0]))
            ref_rows.append((r[0], -1, True))
        items.append({"ts": r[0], "v": r[1], "p": r[2]})
        ref_rows.append(r)
    ref_out, ref_late = reference(ref_rows, slack)
    t = epic.Topology("slack_prop")
    s = t.source("s", epic.iterator_source(items, schema=SCHEMA, time="ts", unit="s",
                                           batch_rows=batch_rows, slack=slack, punctuation="p"))
    t.sink("out", s, epic.collect_sink())
    res = epic.run(t)
    got = res.collected.get("out")
    got = [] if got is None else list(zip(got.column("ts").to_pylist(),
                                          got.column("v").to_pylist()))
    assert got == ref_out
    assert res.nodes["s"].late_rows == len(ref_late)


def test_a_null_punctuation_field_is_a_data_row_whose_flag_is_false():
    """docs/windows.md: the punctuation column stays in the stream, false on every row; an
    empty (null) flag is a data row, and it leaves with false, not null."""
    rows = [{"ts": 1, "cti": False}, {"ts": 2, "cti": None}, {"ts": 3, "cti": True},
            {"ts": 4, "cti": None}]
    t = epic.Topology("pn")
    s = t.source("s", epic.iterator_source(rows, schema={"ts": "int64", "cti": "bool"},
                                           time="ts", unit="s", punctuation="cti"))
    t.sink("o", s, epic.collect_sink())
    got = epic.run(t).collected["o"].to_pylist()
    assert got == [{"ts": 1, "cti": False}, {"ts": 2, "cti": False}, {"ts": 4, "cti": False}]
