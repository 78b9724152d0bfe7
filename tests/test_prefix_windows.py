"""The prefix-sum window engine gives exactly the general engine's output (rows, order, flags)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import epic.aggregates as A
from epic.errors import SpecError, StateError
from epic.windows import PrefixWindowOperator, prefix_eligible
from epic.sinks import ENTRY_COLUMN
from epic.windows import WindowOperator, build_window_operator, few_count, few_time, landmark


class IntStats(A.Aggregate):
    """[sum of v, sum of v*v, number of odd v] in both forms: add/remove and lift/lower."""

    name = "istats"

    def init(self):
        return [0, 0, 0]

    def add(self, s, e):
        e = int(e)
        return [s[0] + e, s[1] + e * e, s[2] + (e & 1)]

    def remove(self, s, e):
        e = int(e)
        return [s[0] - e, s[1] - e * e, s[2] - (e & 1)]

    def result(self, s):
        return {"sum": s[0], "sq": s[1], "odd": s[2]}

    def output_type(self, input_types):
        return pa.struct([("sum", pa.int64()), ("sq", pa.int64()), ("odd", pa.int64())])

    def lift(self, values):
        v = np.asarray(values, np.int64)
        return np.stack([v, v * v, v & 1], axis=1)

    def lower(self, sums, counts):
        return pa.StructArray.from_arrays([pa.array(sums[:, j]) for j in range(3)],
                                          names=["sum", "sq", "odd"])


AGGS = [A.count(), A.AggSpec(IntStats(), ("v",), "st")]


def schema_for(entry: bool) -> pa.Schema:
    fields = [("k", pa.int64()), ("ts", pa.int64()), ("v", pa.int64())]
    return pa.schema(fields + ([(ENTRY_COLUMN, pa.int64())] if entry else []))


def batches(rows, cuts, entry):
    bounds = [0, *sorted(set(c for c in cuts if 0 < c < len(rows))), len(rows)]
    sch = schema_for(entry)
    for a, b in zip(bounds, bounds[1:]):
        part = rows[a:b]
        cols = [pa.array([r[j] for r in part], pa.int64()) for j in range(3)]
        if entry:
            cols.append(pa.array([1000 + 7 * (a + i) % 13 for i in range(len(part))], pa.int64()))
        yield pa.record_batch(cols, schema=sch)


def drive(make, rows, cuts, entry, marks, restore_at=()):
    op = make()
    out = []
    for i, b in enumerate(batches(rows, cuts, entry)):
        out += op.on_batch(b)
        if i in marks:
            out += op.on_watermark(marks[i])
        if i in restore_at:
            fresh = make()
            fresh.restore(op.snapshot())
            op = fresh
    out += op.on_end()
    return pa.Table.from_batches(out, schema=op.output_schema).to_pylist(), op


def _keyed_rows(draw, times, latenesses, max_keys):
    """A lateness drawn from ``latenesses``, the times jittered within it (out-of-order rows the
    window must accept), and a key (of up to ``max_keys``) and a value per row."""
    n = len(times)
    lateness = draw(st.sampled_from(latenesses))
    if lateness:
        jit = draw(st.lists(st.integers(0, lateness), min_size=n, max_size=n))
        times = [t - j for t, j in zip(times, jit)]
    nkeys = draw(st.integers(1, max_keys))
    keys = draw(st.lists(st.integers(0, nkeys - 1), min_size=n, max_size=n))
    values = draw(st.lists(st.integers(-20, 20), min_size=n, max_size=n))
    return lateness, times, keys, values


@st.composite
def cases(draw):
    n = draw(st.integers(1, 150))
    steps = draw(st.lists(st.sampled_from([0, 0, 1, 1, 2, 3, 5, 17, 80, 400]), min_size=n,
                          max_size=n))
    start = draw(st.integers(-50, 10**6))
    times = np.cumsum([start, *steps[1:]]).tolist()
    lateness, times, keys, values = _keyed_rows(draw, times, [0, 0, 3, 20], 4)
    cuts = draw(st.lists(st.integers(0, n), max_size=8))
    if draw(st.integers(0, 5)) == 0:
        L = S = None
        E = draw(st.integers(1, 30))
    else:
        L = draw(st.integers(1, 60))
        S = draw(st.integers(1, L))
        E = draw(st.one_of(st.none(), st.integers(1, L)))
    origin = draw(st.one_of(st.none(), st.just(start - 7)))
    entry = draw(st.booleans())
    # watermarks from before the first row to 25,000 past it (the rows span up to 60,000):
    # marks drawn on the absolute scale could land 10^6 past a stream starting near 0, and a
    # landmark then emits every instant up to them (up to 4 M rows; 9-215 s per run)
    marks = draw(st.dictionaries(st.integers(0, 8), st.integers(start - 1000, start + 25_000),
                                 max_size=3))
    restore_at = draw(st.sets(st.integers(0, 8), max_size=3))
    return (list(zip(keys, times, values)), cuts, (L, S, E), lateness, origin, entry, marks,
            restore_at)


@settings(max_examples=150, deadline=None)   # ~65 ms each
@given(cases(), st.sampled_from([None, 1]), st.sampled_from([1, 2, None]))
def test_prefix_engine_equals_general_engine(case, raw_min, collapse):
    """Any FEW time window, batch cuts, lateness, watermarks, delay column, snapshot/restore
    (``raw_min`` 1: every array of a snapshot a raw segment, as a long window's are), with the
    elements folded into grid cells as soon as 1 or 2 wait (``collapse``), or at the default."""
    from unittest import mock

    from epic import serde
    from epic.windows import prefix

    with mock.patch.object(serde, "RAW_MIN", raw_min or serde.RAW_MIN), \
            mock.patch.object(prefix, "COLLAPSE_MIN", collapse or prefix.COLLAPSE_MIN):
        _prefix_equals_general(case)


def drive_segmented(make, rows, cuts, entry, marks):
    """:func:`drive` as a deploy runs it: a fresh operator per batch, restored from the last
    snapshot, and every snapshot packed with a segment sink whose files a dict keeps (the
    frozen segments stored once, later snapshots referring to them). Returns the rows, the
    files and how many bytes each save wrote (snapshot and new segment file)."""
    from epic import serde

    files: dict[str, bytes] = {}
    written = []
    snap = None
    out = []
    op = None
    for i, b in enumerate(batches(rows, cuts, entry)):
        op = make()
        if snap is not None:
            with serde.segments(source=serde.SegmentSource(files.__getitem__)):
                op.restore(snap)
        out += op.on_batch(b)
        if i in marks:
            out += op.on_watermark(marks[i])
        sink = serde.SegmentSink(f"{i}.seg")
        with serde.segments(sink=sink):
            snap = op.snapshot()
        assert all(name in files or name == sink.name for name in sink.files)
        if sink.parts:
            files[sink.name] = b"".join(bytes(memoryview(p).cast("B")) for p in sink.parts)
        written.append(len(snap) + (len(files[sink.name]) if sink.parts else 0))
    if op is None:
        op = make()
    out += op.on_end()
    return pa.Table.from_batches(out, schema=op.output_schema).to_pylist(), files, written


@st.composite
def sliding_cases(draw):
    """Streams long against their windows (up to 600 rows, small time steps, up to 40 cuts),
    so that a window spans several batches and slides over many segments: entries are dropped
    in the middle of frozen segments and before the first one."""
    n = draw(st.integers(20, 600))
    steps = draw(st.lists(st.sampled_from([0, 1, 1, 2, 3, 9]), min_size=n, max_size=n))
    times = np.cumsum(steps).tolist()
    lateness, times, keys, values = _keyed_rows(draw, times, [0, 0, 2, 5], 3)
    cuts = draw(st.lists(st.integers(0, n), max_size=40))
    L = draw(st.integers(1, 150))
    S = draw(st.integers(1, L))
    E = draw(st.one_of(st.none(), st.integers(1, L)))
    marks = draw(st.dictionaries(st.integers(0, 40), st.integers(0, int(times[-1]) + 50),
                                 max_size=3))
    return (list(zip(keys, times, values)), cuts, (L, S, E), lateness,
            draw(st.one_of(st.none(), st.just(0))), draw(st.booleans()), marks, set())


@settings(max_examples=80, deadline=None)
@given(st.one_of(cases(), sliding_cases()), st.sampled_from([1, 2, 3, 8]),
       st.sampled_from([1, 2, None]))
def test_frozen_segments_restore_every_batch_as_if_never_stopped(case, seg, collapse):
    """A deploy's snapshots (frozen segments of ``seg`` entries, stored once and referred to
    afterwards) restored before every batch give the general engine's rows, for any FEW time
    window, batch cuts, disorder within the lateness, watermarks and delay column."""
    from unittest import mock

    from epic.windows import prefix

    rows, cuts, (L, S, E), lateness, origin, entry, marks, _ = case
    spec = few_time(L, S, E, lateness=lateness, origin=origin)
    sch = schema_for(entry)
    with mock.patch.object(prefix, "SEG_ENTRIES", seg), \
            mock.patch.object(prefix, "COLLAPSE_MIN", collapse or prefix.COLLAPSE_MIN):
        general, _ = drive(lambda: WindowOperator(spec, AGGS, sch, "ts", "s", "k"), rows, cuts,
                           entry, marks)
        got, _, _ = drive_segmented(
            lambda: PrefixWindowOperator(spec, AGGS, sch, "ts", "s", "k"), rows, cuts, entry,
            marks)
    assert got == general


def test_a_snapshot_writes_what_changed_not_the_whole_window():
    """A long window over a dense stream, snapshotted after every batch: with frozen segments
    each save writes about one batch of entries (plus less than a segment), not the window's
    entries; a fresh operator restored from the segments ends as the uninterrupted one."""
    from unittest import mock

    from epic.windows import prefix

    spec = few_time(2_000, 1, 1, origin=0)          # 2,000 cells of one element each
    sch = schema_for(True)
    rows = [(k, t, t % 7) for t in range(12_000) for k in (0, 1)]
    cuts = list(range(0, len(rows), 400))           # 200 time units per batch
    want, whole = drive(lambda: PrefixWindowOperator(spec, AGGS, sch, "ts", "s", "k"), rows,
                        cuts, True, {})
    with mock.patch.object(prefix, "SEG_ENTRIES", 128):
        got, files, written = drive_segmented(
            lambda: PrefixWindowOperator(spec, AGGS, sch, "ts", "s", "k"), rows, cuts, True, {})
    assert got == want
    full = len(whole.snapshot())                    # a window of entries, inline
    steady = written[len(written) // 2:]
    assert full > 100_000
    # per save: 200 new entries per key, twice, and less than a segment (128) of tail: not
    # the 2,000 of the window
    assert max(steady) < 0.4 * full, (max(steady), full)
    # frozen files no snapshot refers to any more are a store's to delete; all read back here
    assert files


def _prefix_equals_general(case):
    rows, cuts, (L, S, E), lateness, origin, entry, marks, restore_at = case
    spec = few_time(L, S, E, lateness=lateness, origin=origin)
    sch = schema_for(entry)
    general, gop = drive(lambda: WindowOperator(spec, AGGS, sch, "ts", "s", "k"), rows, cuts,
                         entry, marks)
    prefix, pop = drive(lambda: PrefixWindowOperator(spec, AGGS, sch, "ts", "s", "k"), rows,
                        cuts, entry, marks, restore_at)
    assert prefix == general
    assert pop.late_rows == gop.late_rows


def test_long_gap_is_emitted_in_bounded_batches_in_instant_then_key_order():
    """A landmark over a long quiet stretch: every instant, bounded batches, keys interleaved."""
    rows = [(k, t, 1) for t in (0, 1) for k in (0, 1, 2)] + [(0, 200_000, 1)]
    sch = schema_for(False)
    op = PrefixWindowOperator(landmark(1), AGGS, sch, "ts", "s", "k")
    out = []
    for b in batches(rows, [6], False):
        out += op.on_batch(b)
    assert max(b.num_rows for b in out) <= 65_536
    tab = pa.Table.from_batches(out).to_pylist()
    assert len(tab) == 3 * 200_000  # instants 1..200000, every key (the watermark is 200000)
    ends = [r["window_end"] for r in tab]
    assert ends == sorted(ends)
    assert [r["k"] for r in tab[:6]] == [0, 1, 2, 0, 1, 2]
    assert [r["count"] for r in tab[-3:]] == [2, 2, 2]


def test_sliding_window_skips_empty_stretches_quickly():
    """A one-day gap with a 1 s window at 1 ms stride: only non-empty windows are visited."""
    day = 86_400_000
    rows = [(0, 0, 1), (0, 1, 2), (0, day, 3), (0, day + 5, 4)]
    sch = schema_for(False)
    spec = few_time(1, Fraction(1, 1000), Fraction(1, 1000))  # ticks: ms
    op = PrefixWindowOperator(spec, AGGS, sch, "ts", "ms", "k")
    out = []
    for b in batches(rows, [1, 2, 3], False):
        out += op.on_batch(b)
    out += op.on_end()
    got = pa.Table.from_batches(out).to_pylist()
    ref, _ = drive(lambda: WindowOperator(spec, AGGS, sch, "ts", "ms", "k"), rows, [1, 2, 3],
                   False, {})
    assert got == ref
    assert len(got) == 1001 + 6  # 1001 instants hold the first rows; 6 up to the end (day+6)


def test_builder_picks_the_prefix_engine_only_when_every_aggregate_has_the_group_form():
    sch = schema_for(False)
    assert isinstance(build_window_operator(few_time(10, 1, 1), AGGS, sch, "ts", "s", "k"),
                      PrefixWindowOperator)
    mixed = AGGS + [A.max("v")]
    assert isinstance(build_window_operator(few_time(10, 1, 1), mixed, sch, "ts", "s", "k"),
                      WindowOperator)
    assert not prefix_eligible(few_count(10, 1, 1), AGGS)
    assert not prefix_eligible(few_time(10, 1, 1, panes=True), AGGS)


def test_lift_must_be_integer_and_snapshot_format_is_checked():
    class FloatLift(IntStats):
        def lift(self, values):
            return np.asarray(values, float)[:, None]

    sch = schema_for(False)
    op = PrefixWindowOperator(few_time(10, 1, 1), [A.AggSpec(FloatLift(), ("v",), "f")], sch,
                              "ts", "s", "k")
    with pytest.raises(SpecError, match="'f'.*integers"):
        op.on_batch(next(batches([(0, 1, 2)], [], False)))
    general = WindowOperator(few_time(10, 1, 1), AGGS, sch, "ts", "s", "k")
    with pytest.raises(StateError, match="not a epic.window.prefix/5 snapshot"):
        PrefixWindowOperator(few_time(10, 1, 1), AGGS, sch, "ts", "s", "k").restore(
            general.snapshot())


def test_plain_function_aggregate_with_the_group_form_runs_on_prefix_sums():
    """aggregate_function(..., lift=, lower=): registered once, the prefix engine picks it up."""
    A.aggregate_function("pf_sum", init=lambda: 0, add=lambda s, e: s + int(e),
                         remove=lambda s, e: s - int(e), result_type=pa.int64(), replace=True,
                         lift=lambda v: np.asarray(v, np.int64)[:, None],
                         lower=lambda sums, counts: pa.array(sums[:, 0]))
    sch = schema_for(False)
    spec = few_time(5, 1, 1)
    aggs = [A.agg("pf_sum", "v")]
    op = build_window_operator(spec, aggs, sch, "ts", "s", "k")
    assert isinstance(op, PrefixWindowOperator)
    rows = [(0, t, t % 7) for t in range(40)]
    fast, _ = drive(lambda: build_window_operator(spec, aggs, sch, "ts", "s", "k"), rows, [9],
                    False, {})
    slow, _ = drive(lambda: WindowOperator(spec, aggs, sch, "ts", "s", "k"), rows, [9], False, {})
    assert fast == slow and len(fast) == 40  # instants 1..40
    with pytest.raises(SpecError, match="both lift and lower"):
        A.aggregate_function("pf_bad", init=lambda: 0, add=lambda s, e: s, replace=True,
                             lift=lambda v: v)


def test_a_key_keeps_one_entry_per_cell_of_its_window_not_one_per_element():
    """20 elements per time unit in a window of 50 units sliding by 5: once the watermark has
    passed them, a key's elements fold into one entry per 5-unit cell, so its state stays ~10
    entries + what the watermark has not passed, and the rows equal the general engine's."""
    spec = few_time(50, 5, 5, origin=0)
    sch = schema_for(True)
    rows = [(0, t // 20, t % 7) for t in range(40_000)]
    general, _ = drive(lambda: WindowOperator(spec, AGGS, sch, "ts", "s", "k"), rows,
                       list(range(0, 40_000, 1000)), True, {})
    op = PrefixWindowOperator(spec, AGGS, sch, "ts", "s", "k")
    out = []
    for b in batches(rows, list(range(0, 40_000, 1000)), True):
        out += op.on_batch(b)
        ks = op._key_state[0]
        # the window's cells, the elements of the cell being formed, fewer than COLLAPSE_MIN
        # waiting to be folded: not the window's 1,000 elements
        assert ks.n - ks.head <= 50 // 5 + 2 + 20 + 256, ks.n - ks.head
    snap = op.snapshot()
    assert len(snap) < 20_000   # a window of elements: 1,000 x (time, 3 sums, count, arrival)
    fresh = PrefixWindowOperator(spec, AGGS, sch, "ts", "s", "k")
    fresh.restore(snap)
    out += fresh.on_end()
    assert pa.Table.from_batches(out, schema=op.output_schema).to_pylist() == general


@pytest.mark.parametrize("fmt", ["epic.window.prefix/3", "epic.window.prefix/4"])
def test_a_snapshot_of_a_previous_format_is_restored(fmt):
    """epic.window.prefix/3 (before cells were folded: no counts) restores as one entry per
    element, /4 (before frozen segments) with its counts, and the window goes on as if never
    stopped."""
    from epic import serde

    spec = few_time(8, 2, 1, origin=0)
    sch = schema_for(False)
    rows = [(i % 3, i // 2, i % 5) for i in range(400)]
    want, _ = drive(lambda: PrefixWindowOperator(spec, AGGS, sch, "ts", "s", "k"), rows,
                    [200], False, {})
    op = PrefixWindowOperator(spec, AGGS, sch, "ts", "s", "k")
    it = batches(rows, [200], False)
    out = op.on_batch(next(it))
    st = serde.unpack_state(op.snapshot(), "epic.window.prefix/5")
    assert all(not len(k["counts"]) for k in st["keys"])   # too few elements to fold yet
    del st["seg_entries"]
    for k in st["keys"]:
        assert not k["segs"] and k["pre"] is None      # no segment store: all inline
        new_fields = ("segs", "seg0", "gone", "pre", "scanned", "counted")
        for f in new_fields + (("counts",) if fmt.endswith("3") else ()):
            del k[f]
    fresh = PrefixWindowOperator(spec, AGGS, sch, "ts", "s", "k")
    fresh.restore(serde.pack_state(fmt, st))
    out += fresh.on_batch(next(it)) + fresh.on_end()
    assert pa.Table.from_batches(out, schema=op.output_schema).to_pylist() == want
