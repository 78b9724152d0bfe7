"""The window engine against a brute-force reference, plus its structural guarantees."""

from __future__ import annotations

import collections

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import epic.aggregates as A
from epic.errors import SpecError, StateError
from epic.windows import (
    WindowOperator,
    build_window_operator,
    few_count,
    few_time,
    landmark,
    landmark_count,
    predicate_window,
    sliding,
    tumbling,
)
from epic.windows.engine import group_rows
from reference import few_reference

SCHEMA = pa.schema([("k", pa.int64()), ("ts", pa.int64()), ("v", pa.int64())])


def batches_of(rows, cuts):
    """Cut ``rows`` [(k, ts, v)] into record batches at the sorted positions ``cuts``."""
    bounds = [0, *sorted(set(c for c in cuts if 0 < c < len(rows))), len(rows)]
    for a, b in zip(bounds, bounds[1:]):
        part = rows[a:b]
        yield pa.record_batch([pa.array([r[0] for r in part], pa.int64()),
                               pa.array([r[1] for r in part], pa.int64()),
                               pa.array([r[2] for r in part], pa.int64())], schema=SCHEMA)


def run(op, rows, cuts=(), watermarks=None):
    out = []
    for b in batches_of(rows, cuts):
        out += op.on_batch(b)
    out += op.on_end()
    return pa.Table.from_batches(out, schema=op.output_schema).to_pylist()


ALL_AGGS = [A.count(), A.sum("v"), A.max("v"), A.min("v"), A.first("v"), A.last("v"),
            A.collect("v"), A.mean("v"), A.count_distinct("v")]


def check_against_reference(out, expected):
    got = sorted(out, key=lambda r: (r["k"], r["window_start"], r["window_end"]))
    assert [(r["k"], r["window_start"], r["window_end"], r["final"]) for r in got] == \
        [(k, s, t, f) for k, s, t, f, _ in expected]
    for r, (_, _, _, _, content) in zip(got, expected):
        assert r["count"] == len(content)
        assert r["sum_v"] == sum(content)
        assert r["max_v"] == max(content) and r["min_v"] == min(content)
        assert r["first_v"] == content[0] and r["last_v"] == content[-1]
        assert r["collect_v"] == content
        assert r["mean_v"] == pytest.approx(sum(content) / len(content), rel=1e-12)
        assert r["count_distinct_v"] == len(set(content))


@st.composite
def streams(draw, max_len=120):
    """Time-ordered rows with equal timestamps, irregular steps, gaps and several keys."""
    n = draw(st.integers(1, max_len))
    steps = draw(st.lists(st.sampled_from([0, 0, 1, 1, 2, 3, 5, 17, 80]), min_size=n, max_size=n))
    start = draw(st.integers(-50, 10**6))
    times = np.cumsum([start, *steps[1:]]).tolist()
    nkeys = draw(st.integers(1, 3))
    keys = draw(st.lists(st.integers(0, nkeys - 1), min_size=n, max_size=n))
    values = draw(st.lists(st.integers(-20, 20), min_size=n, max_size=n))
    cuts = draw(st.lists(st.integers(0, n), max_size=6))
    return list(zip(keys, times, values)), cuts


@st.composite
def few_params(draw):
    if draw(st.integers(0, 5)) == 0:
        return None, None, draw(st.integers(1, 30))
    L = draw(st.integers(1, 40))
    S = draw(st.integers(1, L))
    E = draw(st.one_of(st.none(), st.integers(1, L)))
    return L, S, E


@given(streams(), few_params(), st.sampled_from([None, True, False]))
def test_few_time_matches_brute_force(stream, params, panes):
    """Every FEW time window (any L/S/ef, panes or not) equals recomputation from scratch."""
    rows, cuts = stream
    L, S, E = params
    spec = few_time(L, S, E, panes=panes if L is not None else None)
    aggs = ALL_AGGS if panes is not True else [a for a in ALL_AGGS]
    op = WindowOperator(spec, aggs, SCHEMA, "ts", "s", "k")
    check_against_reference(run(op, rows, cuts), few_reference(rows, L, S, E))


@given(streams(), few_params())
def test_few_count_matches_brute_force(stream, params):
    """FEW count windows follow the same rule on element positions per key."""
    rows, cuts = stream
    L, S, E = params
    op = WindowOperator(few_count(L, S, E), ALL_AGGS, SCHEMA, "ts", "s", "k")
    out = run(op, rows, cuts)
    check_against_reference(out, few_reference(rows, L, S, E, count_mode=True))
    # the ts column is the event time of the newest element in the window
    by_key = collections.defaultdict(list)
    for k, t, _ in rows:
        by_key[k].append(t)
    last = {r["k"]: i for i, r in enumerate(out)}
    instants = set(range(E, len(rows) + 1, E)) if E else set()
    if L is not None:
        instants |= set(range(L, len(rows) + 1, S))
    for i, r in enumerate(out):
        n = len(by_key[r["k"]])
        if i == last[r["k"]] and r["window_end"] == n and n not in instants:
            # the end-of-input row is stamped with the stream's last event time
            assert r["ts"] == max(t for _, t, _ in rows)
        else:
            assert r["ts"] == sorted(by_key[r["k"]])[min(r["window_end"], n) - 1]


@given(streams(), few_params(), st.integers(-100, 100))
def test_fixed_origin(stream, params, shift):
    """With an explicit origin, windows align to it for every key."""
    rows, cuts = stream
    L, S, E = params
    origin = min(t for _, t, _ in rows) - abs(shift)
    op = WindowOperator(few_time(L, S, E, origin=origin), ALL_AGGS, SCHEMA, "ts", "s", "k")
    check_against_reference(run(op, rows, cuts), few_reference(rows, L, S, E, origin=origin))


_LOG = collections.Counter()


def _add(s, e):
    _LOG[("add", e)] += 1
    return s + 1


def _remove(s, e):
    _LOG[("remove", e)] += 1
    return s - 1


TRACKED = A.aggregate_function("tracked_count", lambda: 0, _add, _remove, replace=True,
                               result_type=pa.int64())


@given(streams(), few_params())
def test_each_element_added_once_and_removed_once(stream, params):
    """An instrumented aggregate sees every element added once and removed at most once;
    exactly the elements that left the last window are removed."""
    rows, cuts = stream
    L, S, E = params
    assume(L is not None)
    rows = [(k, t, i) for i, (k, t, _) in enumerate(rows)]  # value = unique element id
    _LOG.clear()
    op = WindowOperator(few_time(L, S, E, panes=False), [A.agg("tracked_count", "v", name="c")],
                        SCHEMA, "ts", "s", "k")
    out = run(op, rows, cuts)
    adds = {e: c for (kind, e), c in _LOG.items() if kind == "add"}
    removes = {e: c for (kind, e), c in _LOG.items() if kind == "remove"}
    assert set(adds) == {i for _, _, i in rows}
    assert set(adds.values()) == {1}
    assert set(removes.values()) <= {1}
    assert set(removes) <= set(adds)
    # the count it reports equals the brute-force window size
    exp = few_reference(rows, L, S, E)
    got = sorted((r["k"], r["window_start"], r["window_end"], r["c"]) for r in out)
    assert got == sorted((k, s, t, len(c)) for k, s, t, _, c in exp)


@given(streams(), few_params(), st.data())
def test_snapshot_restore_gives_identical_output(stream, params, data):
    """Snapshot at random batch boundaries, restore into a fresh operator: same output."""
    rows, cuts = stream
    L, S, E = params
    spec = few_time(L, S, E)

    def make():
        return WindowOperator(spec, ALL_AGGS, SCHEMA, "ts", "s", "k")

    reference = run(make(), rows, cuts)
    op = make()
    out = []
    for b in batches_of(rows, cuts):
        out += op.on_batch(b)
        if data.draw(st.booleans()):
            fresh = make()
            fresh.restore(op.snapshot())
            op = fresh
    out += op.on_end()
    assert pa.Table.from_batches(out, schema=op.output_schema).to_pylist() == reference


@given(streams(), few_params())
def test_batching_does_not_change_results(stream, params):
    """Row-at-a-time and one-big-batch feeding give byte-identical results."""
    rows, _ = stream
    L, S, E = params
    spec = few_time(L, S, E)
    aggs = [A.mean("v"), A.variance("v"), A.sum("v")]
    whole = run(WindowOperator(spec, aggs, SCHEMA, "ts", "s", "k"), rows)
    single = run(WindowOperator(spec, aggs, SCHEMA, "ts", "s", "k"), rows, range(len(rows)))
    assert sorted(map(repr, whole)) == sorted(map(repr, single))


def test_issue_examples_60_1_1():
    """stride = ef = 1 s, length 60 s: [0,t) every second for a minute, then [t-60,t)."""
    rows = [(0, t, 1) for t in range(0, 130)]
    out = run(WindowOperator(few_time(60, 1, 1), [A.count()], SCHEMA, "ts", "s", "k"), rows)
    bounds = [(r["window_start"], r["window_end"], r["final"]) for r in out]
    assert bounds[:3] == [(0, 1, False), (0, 2, False), (0, 3, False)]
    assert bounds[59] == (0, 60, True)
    assert bounds[60:62] == [(1, 61, True), (2, 62, True)]


def test_issue_examples_600_60_10():
    """length 600, stride 60, ef 10: [0,10)...[0,600), then [60,610)...[60,660), ..."""
    rows = [(0, t, 1) for t in range(0, 700)]
    out = run(WindowOperator(few_time(600, 60, 10), [A.count()], SCHEMA, "ts", "s", "k"), rows)
    bounds = [(r["window_start"], r["window_end"]) for r in out]
    assert bounds[:2] == [(0, 10), (0, 20)]
    assert bounds[59] == (0, 600)
    assert bounds[60:66] == [(60, 610), (60, 620), (60, 630), (60, 640), (60, 650), (60, 660)]
    assert bounds[66] == (120, 670)
    assert [r["count"] for r in out][59] == 600


def test_gap_emissions_come_when_later_data_proves_time_passed():
    """A stretch without events still produces its emissions once later data arrives."""
    op = WindowOperator(few_time(10, 2, 2), [A.count()], SCHEMA, "ts", "s", "k")
    first = op.on_batch(next(batches_of([(0, 0, 1), (0, 1, 1)], [])))
    assert first == []  # nothing proves t=2 has passed yet
    out = op.on_batch(next(batches_of([(0, 30, 1)], [])))
    ends = [r["window_end"] for b in out for r in b.to_pylist()]
    assert ends == [2, 4, 6, 8, 10]  # then the window is empty until t=30


def test_watermark_without_data_emits():
    """on_watermark alone advances emission (a quiet input)."""
    op = WindowOperator(few_time(10, 5, 5), [A.count()], SCHEMA, "ts", "s", "k")
    op.on_batch(next(batches_of([(0, 0, 1), (0, 3, 1)], [])))
    out = op.on_watermark(12)
    assert [(r["window_start"], r["window_end"]) for b in out for r in b.to_pylist()] == [(0, 5),
                                                                                         (0, 10)]


def test_late_rows_are_counted_not_silently_dropped():
    """Rows behind the watermark are dropped and counted; lateness admits them."""
    rows = [(0, 10, 1), (0, 5, 1), (0, 11, 1)]
    op = WindowOperator(tumbling(100), [A.count()], SCHEMA, "ts", "s", "k")
    out = run(op, rows)
    assert op.late_rows == 1 and out[0]["count"] == 2
    op = WindowOperator(tumbling(100, lateness=10), [A.count()], SCHEMA, "ts", "s", "k")
    out = run(op, rows)
    # ts=5 is before the key's origin (its first element, 10): it lands in the window of the
    # grid extended before the origin that holds it, [-90, 10)
    assert op.late_rows == 0 and [(r["window_start"], r["count"]) for r in out] == [(-90, 1),
                                                                                    (10, 2)]


def test_landmark_and_named_special_cases():
    rows = [(0, t, t) for t in range(10)]
    lm = run(WindowOperator(landmark(3), [A.sum("v")], SCHEMA, "ts", "s", "k"), rows)
    assert [(r["window_start"], r["window_end"], r["sum_v"]) for r in lm] == [
        (0, 3, 3), (0, 6, 15), (0, 9, 36), (0, 12, 45)]
    sl = run(WindowOperator(sliding(4, 2), [A.sum("v")], SCHEMA, "ts", "s", "k"), rows)
    assert [(r["window_start"], r["window_end"]) for r in sl][:3] == [(0, 4), (2, 6), (4, 8)]
    lc = run(WindowOperator(landmark_count(4), [A.count()], SCHEMA, "ts", "s", "k"), rows)
    assert [r["count"] for r in lc] == [4, 8, 10]


def test_timedelta_and_units():
    """Parameters in seconds are converted once to the stream's unit (ps here, above 2**53)."""
    from datetime import timedelta

    base = 10753295594424116
    rows = [(0, base + i * 5 * 10**11, 1) for i in range(50)]  # every 0.5 s
    op = WindowOperator(few_time(timedelta(seconds=10), 5, 5), [A.count()], SCHEMA, "ts", "ps", "k")
    out = run(op, rows)
    assert out[0]["window_end"] - out[0]["window_start"] == 5 * 10**12
    assert out[0]["count"] == 10


def test_multi_column_and_string_keys():
    schema = pa.schema([("team", pa.string()), ("p", pa.int32()), ("ts", pa.int64()),
                        ("v", pa.float64())])
    b = pa.record_batch([pa.array(["A", "B", "A", "A"]), pa.array([1, 1, 2, 1], pa.int32()),
                         pa.array([0, 1, 2, 3]), pa.array([1.0, 2.0, 3.0, 4.0])], schema=schema)
    op = WindowOperator(tumbling(10), [A.sum("v")], schema, "ts", "s", ["team", "p"])
    out = pa.Table.from_batches(op.on_batch(b) + op.on_end()).to_pylist()
    assert sorted((r["team"], r["p"], r["sum_v"]) for r in out) == [("A", 1, 5.0), ("A", 2, 3.0),
                                                                    ("B", 1, 2.0)]


def test_spec_validation_messages_name_the_fix():
    with pytest.raises(SpecError, match="stride <= length"):
        few_time(10, 20, 1)
    with pytest.raises(SpecError, match="ef <= length"):
        few_time(10, 5, 20)
    with pytest.raises(SpecError, match="needs ef"):
        few_time(None)
    with pytest.raises(SpecError, match="positive"):
        few_time(-1, 1)
    with pytest.raises(SpecError, match="not a whole number"):
        WindowOperator(few_time(0.5, 0.5), [A.count()], SCHEMA, "ts", "s", "k")
    with pytest.raises(SpecError, match="column 'nope'"):
        WindowOperator(tumbling(1), [A.sum("nope")], SCHEMA, "ts", "s", "k")
    no_inverse = A.aggregate_function("no_inverse", lambda: 0, lambda s, e: s + e, replace=True)
    with pytest.raises(SpecError, match="define remove"):
        WindowOperator(few_time(10, 1), [A.agg(no_inverse, "v")], SCHEMA, "ts", "s", "k")
    # ... but it is fine on tumbling and landmark windows
    rows = [(0, t, 1) for t in range(25)]
    out = run(WindowOperator(tumbling(10, ef=5), [A.agg(no_inverse, "v")], SCHEMA, "ts", "s", "k"),
              rows)
    assert [r["no_inverse_v"] for r in out] == [5, 10, 5, 10, 5]


def test_restore_rejects_foreign_state():
    op = WindowOperator(tumbling(1), [A.count()], SCHEMA, "ts", "s", "k")
    with pytest.raises(StateError):
        op.restore(b"\x93\x01\x02\x03")


# --- predicate windows -----------------------------------------------------------------------

def _pw(spec, values, aggs=None):
    rows = [(0, i, v) for i, v in enumerate(values)]
    op = build_window_operator(spec, aggs or [A.collect("v")], SCHEMA, "ts", "s", "k")
    return [(r["window_start"], r["window_end"], r["final"], r["collect_v"])
            for r in run(op, rows)]


def test_predicate_tumbling_with_next():
    """Runs of positive values: start on a positive item, end before a non-positive one."""
    spec = predicate_window(lambda cur: cur["v"] > 0,
                            lambda first, cur, prev, nxt: nxt is None or nxt["v"] <= 0)
    assert _pw(spec, [1, 2, 0, 0, 3, 0, 4, 5]) == [
        (0, 1, True, [1, 2]), (4, 4, True, [3]), (6, 7, True, [4, 5])]


def test_predicate_end_newstart_and_force():
    spec = predicate_window(lambda cur: cur["v"] == 0, end="newstart")
    assert _pw(spec, [9, 0, 1, 2, 0, 3]) == [(1, 3, True, [0, 1, 2]), (4, 5, False, [0, 3])]
    forced = predicate_window(lambda cur: cur["v"] == 0, end="newstart", force=True)
    assert _pw(forced, [9, 0, 1, 2, 0, 3]) == [(1, 3, True, [0, 1, 2])]


def test_predicate_sliding_overlaps():
    spec = predicate_window(lambda cur: cur["v"] > 4, lambda first, cur: cur["ts"] - first["ts"] >= 1,
                            kind="sliding", force=True)
    assert _pw(spec, [5, 6, 1, 7]) == [(0, 1, True, [5, 6]), (1, 2, True, [6, 1])]


def test_predicate_landmark_emits_every_item():
    spec = predicate_window(lambda cur, prev: prev is None, lambda first, cur: cur["v"] < 0,
                            kind="landmark")
    assert _pw(spec, [1, 2, -1]) == [(0, 0, False, [1]), (0, 1, False, [1, 2]),
                                     (0, 2, True, [1, 2, -1])]


def test_predicate_positions():
    """pos is the item's position in the key's sequence."""
    spec = predicate_window(lambda cur, prev, nxt, pos: pos % 3 == 0,
                            lambda first, cur, prev, nxt, pos: pos % 3 == 2)
    assert [w[3] for w in _pw(spec, list(range(8)))] == [[0, 1, 2], [3, 4, 5], [6, 7]]


START_PREDICATES = [
    lambda cur: cur["v"] % 3 == 0,
    lambda cur, prev: prev is None or cur["v"] > prev["v"],
    lambda cur, prev, nxt: nxt is not None and nxt["v"] % 2 == 0,
    lambda cur, prev, nxt, pos: pos % 4 == 1,
]
END_PREDICATES = [
    lambda first, cur: cur["v"] % 4 == 0,
    lambda first, cur: cur["ts"] - first["ts"] >= 3,
    lambda first, cur, prev, nxt: nxt is None or nxt["v"] < cur["v"],
    lambda first, cur, prev, nxt, pos: pos % 5 == 4,
    "newstart",
    None,
]


@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 9)), max_size=60),
       st.integers(0, len(START_PREDICATES) - 1), st.integers(0, len(END_PREDICATES) - 1),
       st.sampled_from(["tumbling", "sliding", "landmark"]), st.booleans(),
       st.lists(st.integers(0, 60), max_size=5))
def test_predicate_windows_match_forseq_reference(items, si, ei, kind, force, cuts):
    """Predicate windows of every kind equal a plain FORSEQ recomputation, per key, however the
    input is batched, and across a snapshot/restore."""
    from reference import forseq_reference

    start, end = START_PREDICATES[si], END_PREDICATES[ei]
    if end is None and kind != "landmark":
        kind = "landmark"
    rows = [(k, ts, v) for ts, (k, v) in enumerate(items)]
    spec = predicate_window(start, end, kind=kind, force=force)

    def make():
        return build_window_operator(spec, [A.collect("v")], SCHEMA, "ts", "s", "k")

    op, out = make(), []
    for i, b in enumerate(batches_of(rows, cuts)):
        out += op.on_batch(b)
        if i % 2:
            fresh = make()
            fresh.restore(op.snapshot())
            op = fresh
    out += op.on_end()
    got = sorted((r["k"], r["window_start"], r["window_end"], r["final"], r["collect_v"])
                 for r in pa.Table.from_batches(out, schema=op.output_schema).to_pylist())
    expected = []
    for key in sorted({k for k, _, _ in rows}):
        key_items = [{"k": k, "ts": ts, "v": v} for k, ts, v in rows if k == key]
        expected += [(key, *w) for w in forseq_reference(key_items, start, end, kind, force)]
    assert got == sorted(expected)


def test_fraction_and_decimal_durations():
    """Durations may be exact Fractions or Decimals (docs/windows.md)."""
    from decimal import Decimal
    from fractions import Fraction

    rows = [(0, t, 1) for t in range(0, 40)]
    a = run(WindowOperator(few_time(Fraction(1, 50), Fraction(1, 100)), [A.count()], SCHEMA, "ts",
                           "ms", "k"), rows)
    b = run(WindowOperator(few_time(Decimal("0.02"), 0.01), [A.count()], SCHEMA, "ts", "ms", "k"),
            rows)
    assert a == b and a[0]["window_end"] - a[0]["window_start"] == 20


def test_long_watermark_jump_is_emitted_in_bounded_batches(monkeypatch):
    """A gap that releases many instants at once comes out in bounded batches, in the same
    (instant, key) order and with the same rows as one unbounded batch."""
    import epic.windows.engine as W

    rows = [(k, t, 1) for t in (0, 1, 2) for k in (0, 1, 2)] + [(0, 5000, 1)]
    whole = run(WindowOperator(landmark(1), [A.count(), A.collect("v")], SCHEMA, "ts", "s", "k"),
                rows)
    monkeypatch.setattr(W, "MAX_BATCH_ROWS", 100)
    monkeypatch.setattr(W, "MAX_BATCH_ELEMENTS", 250)
    op = WindowOperator(landmark(1), [A.count(), A.collect("v")], SCHEMA, "ts", "s", "k")
    batches = []
    for b in batches_of(rows, []):
        batches += op.on_batch(b)
    batches += op.on_end()
    assert len(batches) > 10
    assert all(b.num_rows <= 100 for b in batches)
    chunked = pa.Table.from_batches(batches, schema=op.output_schema).to_pylist()
    assert chunked == whole and len(whole) > 3 * 4999
    assert [r["window_end"] for r in chunked] == sorted(r["window_end"] for r in chunked)


def test_late_row_inside_lateness_lands_in_its_own_window_after_an_empty_stretch():
    """Regression: skipping an empty stretch must stop at the watermark. A row at t=4 that
    arrives after a row at t=5 (lateness 3) belongs to [4, 5), not to [5, 6)."""
    rows = [(0, 0, 1), (0, 5, 1), (0, 4, 1)]
    op = WindowOperator(tumbling(1, lateness=3), [A.count()], SCHEMA, "ts", "s", "k")
    out = run(op, rows, cuts=[2])
    assert [(r["window_start"], r["window_end"], r["count"]) for r in out] == [
        (0, 1, 1), (4, 5, 1), (5, 6, 1)]


@given(st.lists(st.one_of(st.integers(0, 3), st.integers(-2**40, 2**40),
                          st.sampled_from(["a", "b", None, "c"])), min_size=1, max_size=300),
       st.sampled_from(["int8", "int32", "int64", "uint16", "string"]))
def test_group_rows_is_rows_by_key_in_order_of_first_appearance(values, kind):
    """Whichever path groups them (small-int radix, np.unique, dictionary codes): each key's
    rows in input order, keys in order of first appearance (a brute-force reference)."""
    if kind == "string":
        vals = [None if v is None else str(v) for v in values]
        col = pa.array(vals, pa.string())
    else:
        info = np.iinfo(kind)
        vals = [v if isinstance(v, int) and info.min <= v <= info.max else 1 for v in values]
        col = pa.array(vals, getattr(pa, kind)())
    got = group_rows(pa.record_batch([col], names=["k"]), ("k",))
    expected: dict = {}
    for i, v in enumerate(vals):
        expected.setdefault(v, []).append(i)
    assert [k for k, _ in got] == list(expected)
    for k, idx in got:
        rows = list(range(len(vals))) if idx is None else np.asarray(idx).tolist()
        assert rows == expected[k]


def test_count_and_predicate_windows_refuse_a_ts_clash_at_build():
    """Count and predicate windows add a ``ts`` column: a key or an aggregate named ``ts`` (the
    stream's time column named otherwise) is a build error with the fix, not a KeyError at run
    time (audit s35 K)."""
    import epic
    from epic.errors import TopologyError

    def build(spec, key=None, aggs=None):
        t = epic.Topology("clash")
        s = t.source("s", epic.iterator_source([{"t0": 1, "ts": 2, "v": 1.0}],
                                               schema={"t0": "int64", "ts": "int64",
                                                       "v": "float64"}, time="t0", unit="s"))
        t.window("w", s, spec, key=key, aggregates=aggs or [epic.count()])

    pred = epic.predicate_window(lambda cur: True, lambda first, cur: True)
    for spec in (epic.tumbling_count(2), pred):
        with pytest.raises(TopologyError, match="key column 'ts' clashes with the window's "
                                                "output column 'ts'"):
            build(spec, key="ts")
        with pytest.raises(TopologyError, match="aggregate output name 'ts' clashes"):
            build(spec, aggs=[epic.sum("v", name="ts")])
    build(epic.tumbling(3), key="ts")   # a time window has no ts column: no clash


def test_numeric_aggregates_and_sum_reducers_refuse_other_columns_at_build():
    """mean / sum / variance / stddev of a string column, and combine's 'sum' of one, fail when
    the topology is built, naming the column and the fix (they built, then failed in the run
    or concatenated strings: audit s35 L)."""
    import epic
    from epic.errors import TopologyError

    sch = {"k": "int64", "ts": "int64", "v": "float64", "name": "string"}
    rows = [{"k": 1, "ts": i, "v": 1.0, "name": "a"} for i in range(3)]

    def src(t):
        return t.source("s", epic.iterator_source(rows, schema=sch, time="ts", unit="s"))

    for agg in (epic.mean, epic.sum, epic.variance, epic.stddev):
        t = epic.Topology("num")
        with pytest.raises(TopologyError, match=r"column 'name' is string, and \w+ takes numbers"):
            t.window("w", src(t), epic.tumbling(10), key="k", aggregates=[agg("name")])
        t = epic.Topology("num")
        t.window("w", src(t), epic.tumbling(10), key="k", aggregates=[agg("v")])
    t = epic.Topology("red")
    with pytest.raises(TopologyError, match="reducer 'sum' for 'last_name': the column is string"):
        t.parallel("p", src(t), 2, lambda t, part, i: t.window(
            "w", part, epic.tumbling(10, origin=0), key="k",
            aggregates=[epic.count("n"), epic.last("name")]),
            reduce=epic.combine(n="sum", last_name="sum"))
