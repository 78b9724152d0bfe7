"""Time semantics (docs/windows.md, "Event time"): disorder, lateness, origins, count windows.

The expected rows come from ``tests/reference.py``, written from the docs: one pass over the
stream decides the late rows, then every window is recomputed from scratch. The engine must give
the same rows for any batch cuts, and a keyed node split over partitions (each partition told the
stream's high-water mark, as the Spark tasks are) must give the rows of one operator.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import epic
from epic import aggregates as A
from epic.timecore import EventClock, stream_before
from epic.windows import (PredicateWindowOperator, WindowOperator, build_window_operator,
                          few_count, few_time, predicate_window, tumbling, tumbling_count)

from reference import few_reference, forseq_reference, on_time

SCHEMA = pa.schema([("k", pa.int64()), ("ts", pa.int64()), ("v", pa.int64())])


def _batch(rows):
    return pa.record_batch([pa.array([r[i] for r in rows], pa.int64()) for i in range(3)],
                           schema=SCHEMA)


def _feed(op, rows, cuts=(), *, parts=None):
    """Feed ``rows`` cut at ``cuts``, then end; return the output rows as dicts.

    ``parts``: a function key -> partition; each batch then goes, per partition, to the
    partition's own operator ``op[p]`` with ``before`` from the whole batch and ``observe`` of
    the batch's largest time (the Spark tasks' protocol)."""
    out = []
    bounds = [0, *sorted(set(c for c in cuts if 0 < c < len(rows))), len(rows)]
    for a, b in zip(bounds, bounds[1:]):
        chunk = rows[a:b]
        if not chunk:
            continue
        if parts is None:
            got = op.on_batch(_batch(chunk))
        else:
            times = np.array([r[1] for r in chunk], np.int64)
            before = stream_before(times)
            got = []
            for p, o in enumerate(op):
                idx = [i for i, r in enumerate(chunk) if parts(r[0]) == p]
                if idx:
                    got += o.on_batch(_batch([chunk[i] for i in idx]), before=before[idx])
                got += o.observe(int(times.max()))
        for x in got:
            out += x.to_pylist()
    for o in (op if parts is not None else [op]):
        for x in o.on_end():
            out += x.to_pylist()
    return out


def _times():
    """An aggregate bound to no column: the list of its elements (the event times)."""
    return A.agg(epic.aggregate_function(
        "times_list", init=lambda: [], add=lambda s, e: s + [int(e)],
        remove=lambda s, e: s[1:], result_type=pa.list_(pa.int64()), replace=True), name="times")


def _key(r):
    return (r["k"], r["window_start"], r["window_end"])


def _check(out, expected, agg="sum_v"):
    got = sorted(out, key=_key)
    assert [(r["k"], r["window_start"], r["window_end"], r["final"]) for r in got] == \
        [(k, s, t, f) for k, s, t, f, _ in expected]
    assert [r[agg] for r in got] == [sum(c) for *_, c in expected]


# -- streams with ties, disorder within and beyond the lateness -----------------------------------

@st.composite
def disordered(draw, max_rows=30):
    """[(key, time, value)] with ties and out-of-order times, and batch cut positions."""
    n = draw(st.integers(0, max_rows))
    keys = draw(st.integers(1, 3))
    t, rows = 0, []
    for _ in range(n):
        t += draw(st.sampled_from([0, 0, 1, 1, 2, 5]))
        back = draw(st.sampled_from([0, 0, 0, 1, 2, 4, 9]))  # jitter back in time
        rows.append((draw(st.integers(0, keys - 1)), t - back, draw(st.integers(-5, 9))))
    cuts = draw(st.lists(st.integers(1, max(1, n)), max_size=6))
    return rows, cuts


FEW = st.sampled_from([(4, 4, None), (4, 2, None), (4, 2, 1), (6, 3, 2), (5, 5, 2), (None, None, 2),
                       (3, 1, 1)])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stream=disordered(), params=FEW, lateness=st.sampled_from([0, 1, 3, 10]),
       origin=st.sampled_from([None, None, 0, 7, -3]), engine=st.sampled_from(["general", "any"]))
def test_time_windows_match_reference_under_disorder(stream, params, lateness, origin, engine):
    """Any FEW time window over keyed, disordered rows: the reference's rows for any batch cuts."""
    rows, cuts = stream
    L, S, E = params
    spec = few_time(L, S, E, origin=origin, lateness=lateness)
    aggs = [A.count(), A.sum("v")]
    make = WindowOperator if engine == "general" else build_window_operator
    op = make(spec, aggs, SCHEMA, "ts", "s", "k")
    out = _feed(op, rows, cuts)
    _check(out, few_reference(rows, L, S, E, origin=origin, lateness=lateness))
    assert op.late_rows == len(on_time(rows, lateness)[1])
    assert all(r["count"] == len(c) for r, (*_, c) in
               zip(sorted(out, key=_key), few_reference(rows, L, S, E, origin=origin,
                                                        lateness=lateness)))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stream=disordered(), params=FEW, lateness=st.sampled_from([0, 2, 10]),
       parts=st.integers(1, 3), prefix=st.booleans())
def test_keyed_partitions_equal_one_operator(stream, params, lateness, parts, prefix):
    """A keyed window split over partitions, each told the stream's high-water mark, emits
    exactly the rows (and counts exactly the late rows) of one operator over the stream."""
    rows, cuts = stream
    L, S, E = params
    spec = few_time(L, S, E, lateness=lateness)
    aggs = [A.count()] if prefix else [A.count(), A.sum("v")]
    one = build_window_operator(spec, aggs, SCHEMA, "ts", "s", "k")
    want = _feed(one, rows, cuts)
    ops = [build_window_operator(spec, aggs, SCHEMA, "ts", "s", "k") for _ in range(parts)]
    got = _feed(ops, rows, cuts, parts=lambda k: k % parts)
    assert sorted(got, key=_key) == sorted(want, key=_key)
    assert sum(o.late_rows for o in ops) == one.late_rows


BUILTINS = [A.count(), A.sum("v"), A.mean("v"), A.min("v"), A.max("v"), A.variance("v"),
            A.stddev("v", ddof=1), A.first("v"), A.last("v"), A.count_distinct("v"),
            A.collect("v"), A.histogram("v")]


def _expected_values(content):
    """Every built-in aggregate of a window's values (in event-time order), by its column name."""
    n = len(content)
    mean = sum(content) / n
    var = sum((x - mean) ** 2 for x in content) / n
    hist = {}
    for x in content:
        hist[x] = hist.get(x, 0) + 1
    return {"count": n, "sum_v": sum(content), "mean_v": mean, "min_v": min(content),
            "max_v": max(content), "variance_v": var,
            "stddev_v": None if n < 2 else (var * n / (n - 1)) ** 0.5,
            "first_v": content[0], "last_v": content[-1], "count_distinct_v": len(set(content)),
            "collect_v": content, "histogram_v": hist}


def _same(got, want):
    if isinstance(want, float) or isinstance(got, float):
        return got is not None and want is not None and abs(got - want) <= 1e-9 * (1 + abs(want))
    if isinstance(want, dict):
        return dict(got) == want if not isinstance(got, list) else dict(got) == want
    return got == want


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stream=disordered(), params=FEW, lateness=st.sampled_from([0, 3]),
       count_mode=st.booleans())
def test_all_builtin_aggregates_under_disorder(stream, params, lateness, count_mode):
    """Every built-in aggregate on time and count windows over disordered keyed rows equals the
    value computed from the reference's window contents, for any batch cuts."""
    rows, cuts = stream
    L, S, E = params
    if count_mode and L is not None and E is not None and E > L:
        return
    spec = (few_count(L, S, E, lateness=lateness) if count_mode
            else few_time(L, S, E, lateness=lateness))
    op = WindowOperator(spec, BUILTINS, SCHEMA, "ts", "s", "k")
    out = sorted(_feed(op, rows, cuts), key=_key)
    want = few_reference(rows, L, S, E, count_mode=count_mode, lateness=lateness)
    assert [(r["k"], r["window_start"], r["window_end"]) for r in out] == \
        [(k, a, b) for k, a, b, _, _ in want]
    for r, (*_, content) in zip(out, want):
        for col, value in _expected_values(content).items():
            got = r[col]
            if col == "histogram_v":
                got = dict(got)
            assert _same(got, value), (col, got, value, content)


COUNT = st.sampled_from([(2, 2, None), (2, 2, 1), (3, 1, None), (4, 2, 1), (None, None, 2),
                         (5, 5, 2)])


def _registered_sum():
    return epic.aggregate_function("tsum_udaf", init=lambda: 0, add=lambda s, e: s + e,
                                   remove=lambda s, e: s - e, result_type=pa.int64(),
                                   replace=True)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stream=disordered(), params=COUNT, lateness=st.sampled_from([0, 1, 3, 10]))
def test_count_windows_match_reference_under_disorder(stream, params, lateness):
    """Count windows: positions in event-time order, late rows by the stream rule, the end row
    [s, n) not final; a registered init/add/remove aggregate agrees with the built-in sum."""
    rows, cuts = stream
    L, S, E = params
    spec = few_count(L, S, E, lateness=lateness)
    op = WindowOperator(spec, [A.sum("v"), A.agg(_registered_sum(), "v", name="u")], SCHEMA,
                        "ts", "s", "k")
    out = _feed(op, rows, cuts)
    _check(out, few_reference(rows, L, S, E, count_mode=True, lateness=lateness))
    assert all(r["u"] == r["sum_v"] for r in out)
    times = [r["ts"] for r in out]
    assert times == sorted(times), "count windows emit in event-time order"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stream=disordered(), lateness=st.sampled_from([0, 2, 10]),
       kind=st.sampled_from(["tumbling", "sliding", "landmark"]))
def test_predicate_windows_batch_cuts_and_disorder(stream, lateness, kind):
    """Predicate windows see each key's on-time items in event-time order, whatever the cuts."""
    rows, cuts = stream
    spec = predicate_window(lambda cur: cur["v"] % 3 == 0, lambda first, cur: cur["v"] > 5,
                            kind=kind, lateness=lateness)
    op = PredicateWindowOperator(spec, [A.collect("v")], SCHEMA, "ts", "s", "k")
    out = _feed(op, rows, cuts)
    keep, late = on_time(rows, lateness)
    want = []
    for key in sorted({r[0] for r in keep}):
        items = sorted(([r for r in keep if r[0] == key]), key=lambda r: r[1])
        items = [{"ts": t, "v": v} for _, t, v in items]
        want += [(key, a, b, f, c) for a, b, f, c in
                 forseq_reference(items, lambda cur: cur["v"] % 3 == 0,
                                  lambda first, cur: cur["v"] > 5, kind, False)]
    got = [(r["k"], r["window_start"], r["window_end"], r["final"], r["collect_v"]) for r in out]
    assert sorted(got, key=repr) == sorted(want, key=repr)
    assert op.late_rows == len(late)


PREDICATES = {
    "end": (lambda cur: cur["v"] % 3 == 0, lambda first, cur: cur["v"] > 5),
    "newstart": (lambda cur: cur["v"] % 3 == 0, "newstart"),
    "next": (lambda cur: cur["v"] % 3 == 0,
             lambda first, cur, prev, nxt: nxt is None or nxt["v"] < 0),
    "open": (lambda cur: cur["v"] % 4 == 0, lambda first, cur: cur["v"] > 8),
}


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stream=disordered(), lateness=st.sampled_from([0, 2, 10]),
       kind=st.sampled_from(["tumbling", "sliding", "landmark"]),
       ends=st.sampled_from(sorted(PREDICATES)), force=st.booleans())
def test_keyed_predicate_rows_are_never_late_downstream(stream, lateness, kind, ends, force):
    """docs/windows.md: a node's rows are stamped no older than the watermark it forwards, so
    downstream nodes never find them late. Keyed predicate windows close in item order, not in
    `ts` order (a `newstart` window ends at its last item and closes at the next start; a window
    still open at the end is emitted with its last item's time; a `next` decision waits for the
    next item): their rows leave in `ts` order, each at or after the watermark forwarded before
    it, the same rows in the same order for any batch cuts."""
    rows, cuts = stream
    start, end = PREDICATES[ends]
    spec = predicate_window(start, end, kind=kind, force=force, lateness=lateness)

    def emitted(cut_at):
        op = PredicateWindowOperator(spec, [A.collect("v")], SCHEMA, "ts", "s", "k")
        out, forwarded = [], None
        bounds = [0, *sorted(set(c for c in cut_at if 0 < c < len(rows))), len(rows)]
        calls = [lambda a=a, b=b: op.on_batch(_batch(rows[a:b]))
                 for a, b in zip(bounds, bounds[1:]) if b > a]
        for call in [*calls, op.on_end]:
            for x in call():
                for r in x.to_pylist():
                    assert forwarded is None or r["ts"] >= forwarded, (r, forwarded)
                    assert not out or r["ts"] >= out[-1]["ts"], (r, out[-1])
                    out.append(r)
            forwarded = op.output_watermark if forwarded is None or \
                op.output_watermark is None else max(forwarded, op.output_watermark)
        return out

    assert emitted(cuts) == emitted(())


# -- the repros of the time-semantics issue, by name ----------------------------------------------

def test_repro_keyed_lateness_is_a_stream_property():
    """tumbling(10, origin=0, lateness=1) keyed: (1,5) is late (5 < 10-1) however the keys are
    spread over partitions; key 1's [0,10) has n=1."""
    rows = [(0, 0, 0), (1, 0, 0), (0, 10, 0), (1, 5, 0), (0, 20, 0), (1, 20, 0)]
    spec = tumbling(10, origin=0, lateness=1)
    for parts in (1, 2):
        ops = [WindowOperator(spec, [A.count()], SCHEMA, "ts", "s", "k") for _ in range(parts)]
        out = _feed(ops, rows, parts=lambda k: k % parts)
        k1 = [r for r in out if r["k"] == 1 and r["window_start"] == 0]
        assert [r["count"] for r in k1] == [1]
        assert sum(o.late_rows for o in ops) == 1


@pytest.mark.parametrize("cuts", [(), (1,)])
def test_repro_in_lateness_row_lands_in_its_window(cuts):
    """few_time(4, 3, 1, lateness=4) over ts 3, 0: ts=0 is counted in the windows its time
    belongs to (never in [3,4)), as one batch or as two."""
    op = WindowOperator(few_time(4, 3, 1, lateness=4), [A.count()], SCHEMA, "ts", "s", "k")
    out = _feed(op, [(0, 3, 0), (0, 0, 0)], cuts)
    rows = {(r["window_start"], r["window_end"]): r["count"] for r in out}
    assert rows[(0, 4)] == 2
    assert all(not (s >= 3 and c == 2) for (s, _), c in rows.items())


def test_repro_pinned_origin_after_data():
    """few_time(4, 2, 1, origin=5) over ts 2, 6, 9: ts=2 is not counted in [5,6)."""
    op = WindowOperator(few_time(4, 2, 1, origin=5), [_times()], SCHEMA, "ts", "s", "k")
    out = _feed(op, [(0, 2, 0), (0, 6, 0), (0, 9, 0)])
    for r in out:
        assert all(r["window_start"] <= t < r["window_end"] for t in r["times"]), r
    assert any(2 in r["times"] for r in out)


@pytest.mark.parametrize("cuts", [(), (1, 2, 3)])
def test_repro_count_windows_emit_in_event_time_order(cuts):
    """tumbling_count(2, ef=1) keyed over (k0,0),(k0,1),(k0,2),(k1,5): output ts 0,1,2,5 for any
    batch cuts, so a downstream tumbling(10) counts all four rows."""
    rows = [(0, 0, 0), (0, 1, 0), (0, 2, 0), (1, 5, 0)]
    op = WindowOperator(tumbling_count(2, ef=1), [A.count()], SCHEMA, "ts", "s", "k")
    out = _feed(op, rows, cuts)
    assert [r["ts"] for r in out] == [0, 1, 2, 5]
    down = WindowOperator(tumbling(10), [A.count()], pa.schema([("ts", pa.int64())]), "ts", "s")
    res = []
    for r in out:
        res += down.on_batch(pa.record_batch({"ts": pa.array([r["ts"]], pa.int64())}))
    res += down.on_end()
    assert sum(x.to_pylist()[0]["count"] for x in res) == 4 and down.late_rows == 0


def test_repro_count_window_aggregate_gets_event_times():
    """An aggregate bound to no column gets the element's event time, not its position."""
    op = WindowOperator(tumbling_count(3), [_times()], SCHEMA, "ts", "s")
    out = _feed(op, [(0, 100, 0), (0, 105, 0), (0, 107, 0)])
    assert out[0]["times"] == [100, 105, 107]


def test_repro_count_window_end_row_is_not_final():
    """tumbling_count(6) over 4 elements ends with [0, 4), final=False, n=4."""
    op = WindowOperator(tumbling_count(6), [A.count()], SCHEMA, "ts", "s")
    out = _feed(op, [(0, t, 0) for t in range(4)])
    assert [(r["window_start"], r["window_end"], r["final"], r["count"]) for r in out] == \
        [(0, 4, False, 4)]


def test_clock_rules():
    """The clock: watermark max(H, P) - lateness, per-row late thresholds, end max(H+1, P)."""
    c = EventClock(2)
    assert c.watermark is None and c.end() is None
    assert c.admit(np.array([10, 7, 8, 12])) is not None  # 7 < 10 - 2 is late
    assert c.late_rows == 1 and c.high == 12 and c.watermark == 10
    assert c.push(20) and c.watermark == 18 and c.end() == 20
    c2 = EventClock.from_state(c.to_state())
    assert (c2.high, c2.pushed, c2.late_rows, c2.lateness) == (12, 20, 1, 2)


# -- floating-point residue after removals --------------------------------------------------------

FSCHEMA = pa.schema([("ts", pa.int64()), ("x", pa.float64())])


def _float_rows(op, rows):
    out = []
    for ts, x in rows:
        for b in op.on_batch(pa.record_batch({"ts": pa.array([ts], pa.int64()),
                                              "x": pa.array([x], pa.float64())})):
            out += b.to_pylist()
    for b in op.on_end():
        out += b.to_pylist()
    return out


def test_repro_residue_one_element_window_has_zero_variance():
    """tumbling(3) over (0, 1.0), (1, -470924.9156379751), (4, 4.23...): the one-element
    window's variance is exactly 0, and its sum and mean are the element, to the last bit."""
    spec = few_time(3, 1, 1)
    op = WindowOperator(spec, [A.variance("x"), A.sum("x"), A.mean("x")], FSCHEMA, "ts", "s")
    x = 4.232556985820463
    out = _float_rows(op, [(0, 1.0), (1, -470924.9156379751), (4, x)])
    lone = [r for r in out if r["window_start"] >= 2]
    assert lone and all(r["variance_x"] == 0.0 for r in lone)
    assert all(r["sum_x"] == x and r["mean_x"] == x for r in lone)


def test_repro_residue_window_with_only_a_null_is_exactly_empty():
    """A sliding window whose numeric elements all left, holding only a null, sums to exactly 0
    and has no mean."""
    spec = few_time(3, 1, 1)
    op = WindowOperator(spec, [A.sum("x"), A.mean("x")], FSCHEMA, "ts", "s")
    out = []
    for ts, x in [(0, 0.1), (1, 1e5 / 3), (2, None), (4, None)]:
        for b in op.on_batch(pa.record_batch({"ts": pa.array([ts], pa.int64()),
                                              "x": pa.array([x], pa.float64())})):
            out += b.to_pylist()
    out += [r for b in op.on_end() for r in b.to_pylist()]
    only_null = [r for r in out if r["window_start"] >= 2]
    assert only_null and all(r["sum_x"] == 0 and r["mean_x"] is None for r in only_null)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.one_of(
    st.floats(-1e12, 1e12, allow_nan=False), st.floats(-10, 10, allow_nan=False))),
    min_size=1, max_size=40))
def test_sliding_float_sums_stay_within_a_few_ulps(steps):
    """A sliding sum/mean over floats of wildly different magnitudes stays within a few ulps of
    the window's own magnitude (sum of |x| of its elements) of the exact value."""
    from fractions import Fraction

    rows, t = [], 0
    for dt, x in steps:
        t += dt
        rows.append((t, x))
    op = WindowOperator(few_time(4, 1, 1), [A.sum("x")], FSCHEMA, "ts", "s")
    out = _float_rows(op, rows)
    for r in out:
        live = [x for ts, x in rows if r["window_start"] <= ts < r["window_end"]]
        exact = float(sum(Fraction(x) for x in live))
        mag = sum(abs(x) for x in live)
        assert abs(r["sum_x"] - exact) <= 8 * np.finfo(float).eps * max(mag, 1e-300), (r, live)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.one_of(
    st.floats(-1e12, 1e12, allow_nan=False), st.floats(-10, 10, allow_nan=False))),
    min_size=1, max_size=40),
    st.sampled_from([(4, 1, 1), (3, 1, 1), (4, 2, 1), (6, 3, 3)]), st.sampled_from([0, 1]))
def test_sliding_variance_after_large_values_left_is_the_small_values_variance(steps, params,
                                                                                ddof):
    """docs/windows.md, "Rounding after removals": once the large values (up to 1e12) have left
    a sliding window, its variance is that of the small ones still in it (within 1e-9), also
    when the first value the state was centred on was a large one that left."""
    from fractions import Fraction

    rows, t = [], 0
    for dt, x in steps:
        t += dt
        rows.append((t, x))
    op = WindowOperator(few_time(*params), [A.variance("x", ddof=ddof)], FSCHEMA, "ts", "s")
    for r in _float_rows(op, rows):
        live = [x for ts, x in rows if r["window_start"] <= ts < r["window_end"]]
        if len(live) <= ddof:
            assert r["variance_x"] is None, (r, live)
            continue
        if max(abs(x) for x in live) > 10:
            continue
        mean = sum(Fraction(x) for x in live) / len(live)
        exact = float(sum((Fraction(x) - mean) ** 2 for x in live) / (len(live) - ddof))
        assert abs(r["variance_x"] - exact) <= 1e-9, (r, live, exact)


def test_variance_merge_of_states_centred_far_apart():
    """Merging two variance states whose first values are 1e12 apart gives the variance of all
    their values (the merge re-centres on the merged mean)."""
    import statistics

    agg = A.variance("x").aggregate
    xs, ys = [1e12, 1e12 + 1, 1e12 + 3], [0.25, 0.5]
    state = agg.merge(agg.add_batch(agg.init(), np.array(xs)),
                      agg.add_batch(agg.init(), np.array(ys)))
    assert agg.result(state) == pytest.approx(statistics.pvariance(xs + ys), rel=1e-12)
    small = agg.merge(agg.add_batch(agg.init(), np.array([1e12])),
                      agg.add_batch(agg.init(), np.array(ys)))
    small = agg.remove_batch(small, np.array([1e12]))
    if agg.needs_rebuild(small):
        small = agg.add_batch(agg.init(), np.array(ys))
    assert agg.result(small) == pytest.approx(statistics.pvariance(ys), rel=1e-9)


def _merged(outs: list[list[dict]], time: str) -> list[dict]:
    """Rows of several partitions' calls merged by (time, rank): what the deploy's consumers do
    with the parts of a batch (``direct.merge_parts``), stable in partition order."""
    rows = [r for out in outs for r in out]
    return sorted(rows, key=lambda r: (r[time], r["_rank"]))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stream=disordered(), params=FEW, lateness=st.sampled_from([0, 2, 10]),
       parts=st.integers(2, 3), count_mode=st.booleans(), prefix=st.booleans())
def test_partitions_merged_by_time_and_rank_give_one_operators_order(stream, params, lateness,
                                                                     parts, count_mode, prefix):
    """A keyed time or count window over partitions, each given its keys' rows with the
    stream's high-water marks and positions, and told after each batch how far the stream got:
    per batch, their rows merged by (time, rank) are one operator's rows *in its order*, ranks
    included (a key's rank: the stream position of its first on-time row)."""
    rows, cuts = stream
    L, S, E = params
    if count_mode:
        spec, time = few_count(L, S, E, lateness=lateness), "ts"
    else:
        spec, time = few_time(L, S, E, origin=0, lateness=lateness), "window_end"
    aggs = [A.count()] if prefix else [A.count(), A.last("v")]
    one = build_window_operator(spec, aggs, SCHEMA, "ts", "s", "k")
    ops = [build_window_operator(spec, aggs, SCHEMA, "ts", "s", "k") for _ in range(parts)]
    for o in [one, *ops]:
        o.rank_column = True
    bounds = [0, *sorted(set(c for c in cuts if 0 < c < len(rows))), len(rows)]
    for a, b in zip(bounds, bounds[1:]):
        chunk = rows[a:b]
        if not chunk:
            continue
        want = [r for x in one.on_batch(_batch(chunk)) for r in x.to_pylist()]
        times = np.array([r[1] for r in chunk], np.int64)
        before = stream_before(times)
        outs = []
        for p, o in enumerate(ops):
            idx = [i for i, r in enumerate(chunk) if r[0] % parts == p]
            got = []
            if idx:
                got += o.on_batch(_batch([chunk[i] for i in idx]), before[idx],
                                  np.array(idx, np.int64) + a)
            got += o.observe(int(times.max()))
            outs.append([r for x in got for r in x.to_pylist()])
        assert _merged(outs, time) == want
    want = [r for x in one.on_end() for r in x.to_pylist()]
    assert _merged([[r for x in o.on_end() for r in x.to_pylist()] for o in ops], time) == want


def test_count_window_ranks_keys_by_first_on_time_row():
    """Count windows hold rows until the watermark passes them; ties between keys closing a
    window at the same event time are ordered by the key's first on-time row in the stream,
    not by which key's rows the watermark released first."""
    op = build_window_operator(tumbling_count(1, lateness=5), [A.count()], SCHEMA, "ts", "s",
                               "k")
    op.rank_column = True
    out = op.on_batch(_batch([(1, 10, 0), (2, 8, 0), (2, 10, 0), (1, 8, 0)]))
    out += op.on_end()
    rows = [r for x in out for r in x.to_pylist()]
    # key 1 arrived first (position 0), key 2 second (position 1): at ts 8 and at ts 10 alike
    assert [(r["ts"], r["k"], r["_rank"]) for r in rows] == [(8, 1, 0), (8, 2, 1), (10, 1, 0),
                                                            (10, 2, 1)]


def test_count_window_snapshot_of_an_older_epic_is_restored():
    """A count window's held rows in a snapshot written before ranks (no position column)
    restore, and the window goes on: same rows as without the stop."""
    from epic import serde
    from epic.windows.engine import POS_COLUMN, table_bytes, table_from_bytes

    rows = [(k, t, t % 4) for t in range(40) for k in (0, 1)]
    spec = tumbling_count(3, lateness=5)

    def op():
        return build_window_operator(spec, [A.sum("v")], SCHEMA, "ts", "s", "k")

    whole = op()
    want = [r for x in whole.on_batch(_batch(rows)) + whole.on_end() for r in x.to_pylist()]
    first = op()
    got = [r for x in first.on_batch(_batch(rows[:30])) for r in x.to_pylist()]
    st = serde.unpack_state(first.snapshot(), "epic.window/3")
    assert st["held"] is not None
    held = table_from_bytes(st["held"])
    st["held"] = table_bytes(held.drop_columns([POS_COLUMN]))
    del st["rows"], st["first_pos"]
    again = op()
    again.restore(serde.pack_state("epic.window/3", st))
    got += [r for x in again.on_batch(_batch(rows[30:])) + again.on_end() for r in x.to_pylist()]
    assert sorted(got, key=lambda r: (r["ts"], r["k"])) == sorted(want, key=lambda r: (r["ts"],
                                                                                       r["k"]))


def test_event_times_and_durations_outside_the_range_are_refused_not_lost():
    """Below about -2**61 ticks every window kind emitted nothing and counted nothing late; near
    2**63 the end of the input overflowed (audit s35 K). Event times outside [-2**60, 2**62)
    stop the run naming the node and the fix; durations beyond 2**60 ticks fail the build."""
    import pytest

    import epic
    from epic.errors import InputError, TopologyError

    def run(times, spec):
        t = epic.Topology("range")
        s = t.source("s", epic.iterator_source([{"ts": x} for x in times],
                                               schema={"ts": "int64"}, time="ts", unit="ns"))
        t.sink("o", t.window("w", s, spec, aggregates=[epic.count()], late="drop"),
               epic.collect_sink())
        return epic.run(t).collected["o"]

    for spec in (epic.tumbling(2), epic.landmark(1), epic.tumbling_count(1),
                 epic.snapshot_window(None, "ts"), epic.count_by_start(1)):
        for times in ([-(2**60) - 1, -(2**60)], [2**62 - 2, 2**62]):
            with pytest.raises(InputError, match=r"node 'w': event time -?\d+ is outside the "
                                                 r"range windows take"):
                run(times, spec)
        # the edges themselves are taken
        assert run([-(2**60), -(2**60) + 5], spec).num_rows >= 1
        assert run([2**62 - 3, 2**62 - 1], spec).num_rows >= 1
    with pytest.raises(TopologyError, match=r"length .* beyond the 2\*\*60 ticks"):
        run([1], epic.tumbling(2**60 // 10**9 + 1))
