"""Snapshot windows, count-by-start-time windows and active expiration (issue #14, points 2, 4).

Expected rows come from ``tests/lifetime_reference.py``, written from docs/windows.md. The
operators must give them for any batch cuts, disorder within the lateness, partitions (each told
the stream's high-water mark, as Spark tasks are) and snapshot/restore at any point.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import epic
from epic import aggregates as A
from epic.errors import SpecError, TopologyError
from epic.timecore import stream_before
from epic.windows import build_window_operator

from lifetime_reference import (count_by_start_reference, snapshot_in_start_order,
                                sliding_expire_reference,
                                snapshot_expire_reference, snapshot_reference)

SCHEMA = pa.schema([("k", pa.int64()), ("ts", pa.int64()), ("te", pa.int64()),
                    ("v", pa.int64())])


def _batch(rows):
    return pa.record_batch([pa.array([r[i] for r in rows], pa.int64()) for i in range(4)],
                           schema=SCHEMA)


def _feed(make, rows, cuts=(), *, parts=1, restore_at=()):
    """Feed ``rows`` cut at ``cuts`` to ``parts`` operators (key % parts), restoring each from its
    snapshot into a fresh operator after the batches in ``restore_at``; return the rows."""
    ops = [make() for _ in range(parts)]
    out = []
    bounds = [0, *sorted(set(c for c in cuts if 0 < c < len(rows))), len(rows)]
    for n, (a, b) in enumerate(zip(bounds, bounds[1:])):
        chunk = rows[a:b]
        if not chunk:
            continue
        times = np.array([r[1] for r in chunk], np.int64)
        before = stream_before(times) if parts > 1 else None
        for p, o in enumerate(ops):
            if parts == 1:
                got = o.on_batch(_batch(chunk))
            else:
                idx = [i for i, r in enumerate(chunk) if r[0] % parts == p]
                got = o.on_batch(_batch([chunk[i] for i in idx]), before=before[idx]) if idx \
                    else []
                got += o.observe(int(times.max()))
            for x in got:
                out += x.to_pylist()
        if n in restore_at:
            fresh = []
            for o in ops:
                f = make()
                f.restore(o.snapshot())
                fresh.append(f)
            ops = fresh
    for o in ops:
        for x in o.on_end():
            out += x.to_pylist()
    return out


def _values():
    return A.agg(epic.aggregate_function(
        "values_list", init=lambda: [], add=lambda s, e: s + [int(e)],
        remove=lambda s, e: _without(s, int(e)), result_type=pa.list_(pa.int64()),
        replace=True), "v", name="vals")


def _without(s, e):
    s = list(s)
    s.remove(e)
    return s


def _rows_of(out):
    return sorted((r["k"], r["window_start"], r["window_end"], r["final"], sorted(r["vals"]))
                  for r in out)


@st.composite
def lifetimes(draw, max_rows=30):
    """[(key, start, end, value)] with ties, starts out of order, ends before starts (point
    events), and batch cuts."""
    n = draw(st.integers(0, max_rows))
    keys = draw(st.integers(1, 3))
    t, rows = 0, []
    for _ in range(n):
        t += draw(st.sampled_from([0, 0, 1, 1, 2, 5]))
        s = t - draw(st.sampled_from([0, 0, 0, 1, 2, 4, 9]))
        e = s + draw(st.sampled_from([-1, 0, 1, 1, 2, 3, 7, 20]))
        rows.append((draw(st.integers(0, keys - 1)), s, e, draw(st.integers(-5, 9))))
    cuts = draw(st.lists(st.integers(1, max(1, n)), max_size=6))
    restore = draw(st.lists(st.integers(0, 6), max_size=2))
    return rows, cuts, restore


COMMON = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])


@settings(max_examples=300, **COMMON)
@given(stream=lifetimes(), lateness=st.sampled_from([0, 1, 3, 10]), parts=st.sampled_from([1, 2]))
def test_snapshot_windows_match_reference(stream, lateness, parts):
    """Snapshot windows: reference rows for any cuts, disorder, partitions, restores."""
    rows, cuts, restore = stream
    make = lambda: build_window_operator(epic.snapshot_window("ts", "te", lateness=lateness),
                                         [_values(), epic.count()], SCHEMA, "ts", "s", "k")
    out = _feed(make, rows, cuts, parts=parts, restore_at=restore)
    assert _rows_of(out) == snapshot_reference(rows, lateness)
    assert all(r["count"] == len(r["vals"]) for r in out)


@settings(max_examples=200, **COMMON)
@given(stream=lifetimes(), lateness=st.sampled_from([0, 1, 3, 10]), parts=st.sampled_from([1, 2]))
def test_snapshot_collect_keeps_the_live_events_in_start_order(stream, lateness, parts):
    """collect over a snapshot window: events leave in end order, not start order; the list
    holds the live events' values in start order (its remove takes only the oldest element)."""
    rows, cuts, restore = stream
    make = lambda: build_window_operator(epic.snapshot_window("ts", "te", lateness=lateness),
                                         [epic.collect("v"), epic.sum("v")], SCHEMA, "ts", "s",
                                         "k")
    out = _feed(make, rows, cuts, parts=parts, restore_at=restore)
    got = sorted((r["k"], r["window_start"], r["window_end"], r["collect_v"]) for r in out)
    assert got == snapshot_in_start_order(rows, lateness)
    assert all(r["sum_v"] == sum(r["collect_v"]) for r in out)


@settings(max_examples=300, **COMMON)
@given(stream=lifetimes(), n=st.integers(1, 4), lateness=st.sampled_from([0, 1, 3, 10]),
       parts=st.sampled_from([1, 2]), merge_only=st.booleans())
def test_count_by_start_windows_match_reference(stream, n, lateness, parts, merge_only):
    """Count-by-start windows (remove or pane mode): reference rows under the same stresses."""
    rows, cuts, restore = stream
    extra = epic.max("v") if merge_only else epic.sum("v")
    make = lambda: build_window_operator(epic.count_by_start(n, lateness=lateness),
                                         [_values(), extra], SCHEMA, "ts", "s", "k")
    out = _feed(make, rows, cuts, parts=parts, restore_at=restore)
    assert _rows_of(out) == count_by_start_reference(rows, n, lateness)
    for r in out:
        want = max(r["vals"]) if merge_only else sum(r["vals"])
        assert r[extra.name] == want


def _leaving():
    """An expire hook reporting every element that leaves and how many stay."""
    return A.agg(epic.aggregate_function(
        "leaving", init=lambda: 0, add=lambda s, e: s + 1, remove=lambda s, e: s - 1,
        result_type=pa.int64(), expire_schema={"v": "int64", "left": "int64"},
        expire=lambda s, e: [{"v": int(e), "left": s}], replace=True), "v")


@settings(max_examples=200, **COMMON)
@given(stream=lifetimes(), lateness=st.sampled_from([0, 2, 10]), parts=st.sampled_from([1, 2]))
def test_snapshot_expiration_matches_reference(stream, lateness, parts):
    """Active expiration on snapshot windows: one row per event at its end."""
    rows, cuts, restore = stream
    make = lambda: build_window_operator(epic.snapshot_window("ts", "te", lateness=lateness),
                                         [_leaving(), epic.count()], SCHEMA, "ts", "s", "k",
                                         expire=0)
    out = _feed(make, rows, cuts, parts=parts, restore_at=restore)
    got = sorted((r["k"], r["expire_time"], r["v"], r["left"]) for r in out)
    assert got == snapshot_expire_reference(rows, lateness)


@settings(max_examples=200, **COMMON)
@given(stream=lifetimes(), LS=st.sampled_from([(4, 1), (4, 2), (6, 3), (5, 5)]),
       lateness=st.sampled_from([0, 2, 10]), parts=st.sampled_from([1, 2]))
def test_sliding_expiration_matches_reference(stream, LS, lateness, parts):
    """Active expiration on sliding time windows: each element leaves at the first instant
    whose window starts after it."""
    rows, cuts, restore = stream
    L, S = LS
    make = lambda: build_window_operator(epic.sliding(L, S, origin=0, lateness=lateness),
                                         [_leaving()], SCHEMA, "ts", "s", "k", expire=0)
    out = _feed(make, rows, cuts, parts=parts, restore_at=restore)
    got = sorted((r["k"], r["expire_time"], r["v"], r["left"]) for r in out)
    assert got == sliding_expire_reference(rows, L, S, lateness)


def test_snapshot_window_named_example():
    """docs/windows.md's snapshot example: boundaries at every start and end."""
    rows = [(1, 0, 5, 1), (1, 2, 4, 10), (1, 3, 10, 100)]
    make = lambda: build_window_operator(epic.snapshot_window("ts", "te"), [epic.sum("v")],
                                         SCHEMA, "ts", "s", "k")
    out = _feed(make, rows)
    assert [(r["window_start"], r["window_end"], r["sum_v"]) for r in out] == [
        (0, 2, 1), (2, 3, 11), (3, 4, 111), (4, 5, 101), (5, 10, 100)]


def test_snapshot_rows_wait_for_the_watermark():
    """A snapshot row is emitted once the watermark reaches its end, not before."""
    op = build_window_operator(epic.snapshot_window("ts", "te"), [epic.count()], SCHEMA, "ts",
                               "s", "k")
    assert op.on_batch(_batch([(1, 0, 5, 1)])) == []
    got = [r for b in op.on_batch(_batch([(1, 5, 6, 1)])) for r in b.to_pylist()]
    assert [(r["window_start"], r["window_end"]) for r in got] == [(0, 5)]
    assert [r["window_end"] for b in op.on_end() for r in b.to_pylist()] == [6]


def test_count_by_start_named_example():
    """Two distinct start times per window; a key with fewer emits one row, not final."""
    rows = [(1, 0, 0, 1), (1, 0, 0, 10), (1, 3, 0, 100), (1, 5, 0, 1000), (2, 5, 0, 7)]
    make = lambda: build_window_operator(epic.count_by_start(2), [epic.sum("v")], SCHEMA, "ts",
                                         "s", "k")
    out = _feed(make, rows)
    assert [(r["k"], r["window_start"], r["window_end"], r["final"], r["sum_v"]) for r in out] \
        == [(1, 0, 4, True, 111), (1, 3, 6, True, 1100), (2, 5, 6, False, 7)]


def test_sensor_drops_out_without_a_newer_reading():
    """The issue's example: report a sensor whose last reading leaves the last 10 s window
    with no newer reading, through t.expired in epic.run."""
    silent = epic.aggregate_function(
        "silent", init=lambda: 0, add=lambda s, e: s + 1, remove=lambda s, e: s - 1,
        result_type=pa.int64(), expire_schema={"last_ts": "int64"},
        expire=lambda s, e: [{"last_ts": int(e)}] if s == 0 else None, replace=True)
    data = [{"k": 1, "ts": 0, "te": 0, "v": 1}, {"k": 2, "ts": 1, "te": 0, "v": 1},
            {"k": 1, "ts": 5, "te": 0, "v": 1}, {"k": 2, "ts": 30, "te": 0, "v": 1}]
    t = epic.Topology("sensors")
    s = t.source("s", epic.iterator_source(lambda: iter(data), schema=SCHEMA, time="ts",
                                           unit="s"))
    w = t.window("last10", s, epic.sliding(10, 1, origin=0), key="k",
                 aggregates=[epic.agg("silent"), epic.count()], late="drop")
    t.sink("rows", w, epic.collect_sink())
    gone = t.expired("gone", w)
    assert gone.schema.names == ["k", "expire_time", "last_ts"] and gone.time == "expire_time"
    t.sink("alerts", gone, epic.collect_sink())
    got = epic.run(t).collected["alerts"].to_pylist()
    assert got == [{"k": 2, "expire_time": 12, "last_ts": 1},
                   {"k": 1, "expire_time": 16, "last_ts": 5}]


def test_validation_names_the_fix():
    """Bad specs fail when built, naming the field and the fix."""
    with pytest.raises(SpecError, match="n must be"):
        epic.count_by_start(0)
    t = epic.Topology("bad")
    s = t.source("s", epic.iterator_source([], schema=SCHEMA, time="ts", unit="s"))
    with pytest.raises(TopologyError, match="valid_from"):
        t.window("w1", s, epic.snapshot_window("te", "ts"), aggregates=[epic.count()])
    with pytest.raises(TopologyError, match="remove"):
        t.window("w2", s, epic.snapshot_window("ts", "te"), aggregates=[epic.max("v")])
    w = t.window("w3", s, epic.sliding(4, 2), aggregates=[epic.count()], late="drop")
    with pytest.raises(TopologyError, match="expire"):
        t.expired("w3_gone", w)
    with pytest.raises(SpecError, match="expire_schema"):
        epic.aggregate_function("noschema", init=lambda: 0, add=lambda s, e: s,
                                expire=lambda s, e: None, replace=True)


@settings(max_examples=40, **COMMON)
@given(stream=lifetimes(max_rows=20), batch=st.integers(1, 8),
       kind=st.sampled_from(["snapshot", "count_by_start"]))
def test_string_multi_column_and_null_keys_group_as_integer_keys(stream, batch, kind):
    """Every kind takes ``key=`` a column or a list of columns (docs/windows.md, "Partition
    keys"): keyed by a string, by two columns or by an integer column with a null, snapshot and
    count-by-start windows give the rows they give keyed by the same keys as integers."""
    rows = stream[0]
    spec = (lambda: epic.snapshot_window("ts", "te")) if kind == "snapshot" else \
        (lambda: epic.count_by_start(2))
    names = {0: None, 1: 1, 2: 2}  # the nullable form: key 0 is a null

    def run(key, items, schema):
        t = epic.Topology("keys")
        s = t.source("s", epic.iterator_source(items, schema=schema, time="ts", unit="s",
                                               batch_rows=batch))
        w = t.window("w", s, spec(), key=key, aggregates=[epic.collect("v"), epic.count()])
        t.sink("o", w, epic.collect_sink())
        t.sink("l", t.late("w_late", w), epic.collect_sink())
        r = epic.run(t)
        return [(x["window_start"], x["window_end"], x["collect_v"], x["count"])
                for x in r.collected["o"].to_pylist()], r.collected["l"].num_rows

    base = [{"k": k, "ts": s, "te": e, "v": v} for k, s, e, v in rows]
    sch = {"k": "int64", "ts": "int64", "te": "int64", "v": "int64"}
    want = run("k", base, sch)
    assert run("ks", [{**r, "ks": f"key{r['k']}"} for r in base], {**sch, "ks": "string"}) == want
    assert run(["k", "ks"], [{**r, "ks": "ab"[r["k"] % 2]} for r in base],
               {**sch, "ks": "string"}) == want
    assert run("kn", [{**r, "kn": names[r["k"]]} for r in base], {**sch, "kn": "int64"}) == want
