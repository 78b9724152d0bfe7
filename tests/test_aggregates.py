"""Aggregates: algebraic laws, vectorised == row-wise, serialisation, EPIC registration."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import epic.aggregates as A
from epic import serde
from epic.errors import SpecError, StateError
from epic.windows import WindowOperator, few_time, tumbling

BUILTINS = ["count", "sum", "mean", "min", "max", "variance", "stddev", "first", "last",
            "count_distinct", "collect", "histogram"]
INVERTIBLE = ["count", "sum", "mean", "variance", "stddev", "count_distinct", "collect",
              "histogram"]
MERGEABLE = BUILTINS

ints = st.lists(st.integers(-1000, 1000), max_size=40)


def close(a, b):
    if isinstance(a, float) or isinstance(b, float):
        if a is None or b is None:
            return a is b
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)
    return a == b


def fold(agg, values):
    s = agg.init()
    for v in values:
        s = agg.add(s, v)
    return s


@pytest.mark.parametrize("name", BUILTINS)
@given(xs=ints)
def test_add_batch_equals_row_wise_add(name, xs):
    """The vectorised form gives the same result as adding one element at a time."""
    agg = A.get_aggregate(name)
    a = agg.result(agg.add_batch(agg.init(), np.array(xs, dtype=np.int64)))
    b = agg.result(fold(agg, xs))
    assert close(a, b)


@pytest.mark.parametrize("name", INVERTIBLE)
@given(xs=ints, ys=ints)
def test_remove_undoes_add(name, xs, ys):
    """remove(add(s, e), e) round-trips: adding xs+ys then removing xs leaves ys."""
    agg = A.get_aggregate(name)
    s = fold(agg, xs + ys)
    s = agg.remove_batch(s, np.array(xs, dtype=np.int64))
    assert close(agg.result(s), agg.result(fold(agg, ys)))
    s2 = fold(agg, xs + ys)
    for x in xs:
        s2 = agg.remove(s2, x)
    assert close(agg.result(s2), agg.result(fold(agg, ys)))


@pytest.mark.parametrize("name", MERGEABLE)
@given(xs=ints, ys=ints, zs=ints)
def test_merge_is_associative_and_matches_concatenation(name, xs, ys, zs):
    """merge(merge(a, b), c) == merge(a, merge(b, c)) == fold(a + b + c)."""
    agg = A.get_aggregate(name)
    a, b, c = fold(agg, xs), fold(agg, ys), fold(agg, zs)
    left = agg.merge(agg.merge(a, b), c)
    right = agg.merge(a, agg.merge(b, c))
    whole = fold(agg, xs + ys + zs)
    assert close(agg.result(left), agg.result(right))
    assert close(agg.result(left), agg.result(whole))


@pytest.mark.parametrize("name", BUILTINS)
@given(xs=ints)
def test_state_round_trips_through_msgpack(name, xs):
    """Every built-in state serialises without pickle and comes back equal in effect."""
    agg = A.get_aggregate(name)
    s = fold(agg, xs)
    back = serde.unpackb(serde.packb(s))
    assert close(agg.result(back), agg.result(s))
    # and it keeps working after the round trip
    assert close(agg.result(agg.add(back, 7)), agg.result(agg.add(fold(agg, xs), 7)))


def test_float_sums_do_not_drift():
    """Compensated sums: a million add/remove pairs of awkward floats leave no residue."""
    agg = A.get_aggregate("sum")
    rng = np.random.default_rng(0)
    s = agg.init()
    big = rng.normal(0, 1e9, 1000)
    for chunk in np.split(big, 10):
        s = agg.add_batch(s, chunk)
    for chunk in np.split(big, 10):
        s = agg.remove_batch(s, chunk)
    s = agg.add_batch(s, np.array([0.1, 0.2]))
    assert agg.result(s) == pytest.approx(0.3, abs=1e-6)


@pytest.mark.parametrize("dtype", ["int64", "uint64", "int32"])
def test_integer_sums_are_exact_beyond_int64_in_one_batch(dtype):
    """int64 addition wraps: a batch whose true sum leaves int64 is summed exactly (the window's
    int64 result column then stops the run, docs/windows.md "Built-ins"); in range, sums that
    pass beyond int64 on the way stay exact."""
    agg = A.get_aggregate("sum")
    big = {"int64": 2**62, "uint64": 2**63 + 5, "int32": 2**31 - 1}[dtype]
    values = np.array([big] * 3, dtype=dtype)
    assert agg.result(agg.add_batch(agg.init(), values)) == 3 * big
    s = agg.add_batch(agg.init(), np.array([2**62, 2**62, -(2**62)], dtype=np.int64))
    assert agg.result(s) == 2**62
    assert agg.result(agg.remove_batch(s, np.array([2**62, 2**62], np.int64))) == -(2**62)


def test_integer_sum_beyond_int64_stops_a_tumbling_window():
    import epic

    t = epic.Topology("big")
    rows = [{"ts": i, "v": 2**62} for i in range(3)]
    s = t.source("s", epic.iterator_source(rows, schema={"ts": "int64", "v": "int64"},
                                           time="ts", unit="s"))
    w = t.window("w", s, epic.tumbling(10), aggregates=[epic.sum("v")], late="drop")
    t.sink("o", w, epic.collect_sink())
    with pytest.raises(SpecError, match="sum_v.*int64"):
        epic.run(t)


def test_variance_far_from_zero():
    agg = A.variance("v").aggregate
    xs = 1e9 + np.array([1.0, 2.0, 3.0, 4.0])
    assert agg.result(agg.add_batch(agg.init(), xs)) == pytest.approx(1.25)


def test_epic_paper_mysum_example():
    """The EPIC paper's example: register mysum from three plain functions, use it by name
    on a sliding window, and get the same result as the built-in sum."""

    def init():
        return 0

    def add(s, e):
        return s + e

    def remove(s, e):
        return s - e

    A.aggregate_function("mysum", init, add, remove, result_type=pa.int64(), replace=True)
    schema = pa.schema([("ts", pa.int64()), ("x", pa.int64())])
    batch = pa.record_batch([pa.array(range(100)), pa.array([i * i % 17 for i in range(100)])],
                            schema=schema)
    op = WindowOperator(few_time(10, 2, 1), [A.agg("mysum", "x"), A.sum("x")], schema, "ts")
    out = pa.Table.from_batches(op.on_batch(batch) + op.on_end()).to_pylist()
    assert len(out) > 50
    assert all(r["mysum_x"] == r["sum_x"] for r in out)
    assert "mysum" in A.registered_aggregates()


def test_state_can_be_a_dict_or_array():
    """UDA state may be any msgpack value: here a numpy histogram array."""
    hist = A.aggregate_function(
        "bins", init=lambda: np.zeros(4, dtype=np.int64),
        add=lambda s, e: _bump(s, e, 1), remove=lambda s, e: _bump(s, e, -1),
        result=lambda s: s.tolist(), result_type=pa.list_(pa.int64()), replace=True)
    schema = pa.schema([("ts", pa.int64()), ("x", pa.int64())])
    batch = pa.record_batch([pa.array(range(8)), pa.array([0, 1, 1, 2, 3, 3, 3, 0])],
                            schema=schema)
    op = WindowOperator(few_time(4, 2), [A.agg(hist, "x", name="h")], schema, "ts")
    rows = op.on_batch(batch)
    snap = op.snapshot()
    op2 = WindowOperator(few_time(4, 2), [A.agg(hist, "x", name="h")], schema, "ts")
    op2.restore(snap)
    out = pa.Table.from_batches(rows + op2.on_end()).to_pylist()
    # windows [0,4), [2,6), [4,8): the last one closes the data (first instant >= 8)
    assert [r["h"] for r in out] == [[1, 2, 1, 0], [0, 1, 1, 2], [1, 0, 0, 3]]


def _bump(s, e, d):
    s = s.copy()
    s[e] += d
    return s


def test_registration_errors():
    with pytest.raises(SpecError, match="identifier"):
        A.aggregate_function("my sum", lambda: 0, lambda s, e: s)
    A.aggregate_function("dup_name", lambda: 0, lambda s, e: s, replace=True)
    with pytest.raises(SpecError, match="already registered"):
        A.aggregate_function("dup_name", lambda: 0, lambda s, e: s)
    with pytest.raises(SpecError, match="no aggregate named 'nothing'.*Register"):
        A.agg("nothing", "x")
    with pytest.raises(SpecError, match="add must be a function"):
        A.aggregate_function("bad_add", lambda: 0, 3, replace=True)


def test_results_must_fit_declared_type():
    stringy = A.aggregate_function("stringy", lambda: "", lambda s, e: s + "x", replace=True)
    schema = pa.schema([("ts", pa.int64()), ("x", pa.int64())])
    op = WindowOperator(tumbling(2), [A.agg(stringy, "x")], schema, "ts")
    with pytest.raises(SpecError, match="result_type"):
        op.on_batch(pa.record_batch([pa.array([0, 5]), pa.array([1, 2])], schema=schema))


def test_serde_refuses_what_it_cannot_store_without_pickle():
    with pytest.raises(StateError, match="without pickle"):
        serde.packb({"x": object()})
    with pytest.raises(StateError, match="holds a set"):
        serde.packb({1, 2})
    with pytest.raises(StateError):
        serde.unpackb(b"\xc1")
    value = {"a": np.arange(3, dtype=np.int64), "b": [1, 2.5, "x", b"y", None], "big": 2**70}
    back = serde.unpackb(serde.packb(value))
    assert back["a"].tolist() == [0, 1, 2] and back["big"] == 2**70 and back["b"][3] == b"y"


_NULLABLE = {
    "int64": st.one_of(st.none(), st.integers(-3, 3)),
    "float64": st.one_of(st.none(), st.sampled_from([-1.5, 0.0, 0.25, 2.0])),
    "string": st.one_of(st.none(), st.sampled_from(["a", "b", "c"])),
}


def _reference(name, live):
    """docs/windows.md: the numeric aggregates, count_distinct and histogram skip nulls; first,
    last and collect keep them (null in, null out)."""
    vals = [v for v in live if v is not None]
    if name == "count_distinct":
        return len(set(vals))
    if name == "histogram":
        return sorted((v, vals.count(v)) for v in set(vals))
    if name in ("min", "max"):
        return (min if name == "min" else max)(vals) if vals else None
    if name == "first":
        return live[0]
    if name == "last":
        return live[-1]
    return list(live)   # collect


@settings(max_examples=60, deadline=None)
@given(data=st.data(), typ=st.sampled_from(sorted(_NULLABLE)),
       params=st.sampled_from([(100, 100, 100), (2, 1, 1), (3, 1, 1), (4, 2, 1)]))
def test_non_numeric_builtins_over_nullable_columns_equal_a_reference(data, typ, params):
    """count_distinct, histogram, min, max (strings too), first, last and collect over int,
    float and string columns holding nulls, on tumbling and sliding windows, equal the rule
    written out in :func:`_reference` (a float null comes back as null, not NaN)."""
    values = data.draw(st.lists(_NULLABLE[typ], min_size=1, max_size=12))
    names = ["count_distinct", "histogram", "min", "max", "first", "last", "collect"]
    schema = pa.schema([("ts", pa.int64()), ("v", pa.type_for_alias(typ))])
    op = WindowOperator(few_time(*params), [getattr(A, n)("v") for n in names], schema, "ts",
                        "s")
    out = []
    for ts, v in enumerate(values):
        out += [r for b in op.on_batch(pa.record_batch(
            [pa.array([ts], pa.int64()), pa.array([v], schema.field("v").type)], schema=schema))
            for r in b.to_pylist()]
    out += [r for b in op.on_end() for r in b.to_pylist()]
    assert out
    for r in out:
        live = [v for ts, v in enumerate(values) if r["window_start"] <= ts < r["window_end"]]
        for n in names:
            assert r[f"{n}_v"] == _reference(n, live), (n, r, live)


def test_a_class_aggregate_without_init_or_add_is_refused_when_bound():
    class NoInit(A.Aggregate):
        def add(self, s, e):
            return s + e

    class NoAdd(A.Aggregate):
        def init(self):
            return 0

    with pytest.raises(SpecError, match=r"aggregate 'x' \(NoInit\): no init\(\); Fix: define"):
        A.agg(NoInit(), "v", name="x")
    with pytest.raises(SpecError, match=r"aggregate 'y' \(NoAdd\): no add\(\)"):
        A.agg(NoAdd(), "v", name="y")


def test_uint64_sums_stay_on_the_vectorised_path(monkeypatch):
    """A uint64 batch whose sum is well inside int64 is summed by numpy, not element by element
    in Python (that path, ~150x slower, is for sums beyond int64 only)."""
    agg = A.get_aggregate("sum")

    def python_sum(*_a, **_k):
        raise AssertionError("summed element by element")
    monkeypatch.setattr(A, "_builtin_sum", python_sum)
    u = np.arange(1_000_000, dtype=np.uint64)
    assert agg.result(agg.add_batch(agg.init(), u)) == 499_999_500_000
    assert agg.result(agg.add_batch(agg.init(), u.astype(np.int64))) == 499_999_500_000
