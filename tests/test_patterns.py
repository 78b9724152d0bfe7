"""Sequence patterns: semantics rule by rule, streaming edge cases, and a brute-force property."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import epic
from epic.errors import InputError, NodeFailure, TopologyError
from epic.patterns import PatternMatcher
from pattern_reference import brute_matches

SCHEMA = pa.schema([("k", pa.int64()), ("ts", pa.int64()), ("id", pa.int64()),
                    ("v", pa.int64())])


def rows_of(values, k=0, t0=0, step=1):
    return [{"k": k, "ts": t0 + i * step, "id": i, "v": v} for i, v in enumerate(values)]


def operator(pat, select=None, schema=None, key=("k",)):
    return PatternMatcher(pat, SCHEMA, "ts", "s", key, select, schema)()


def drive(op, rows, cuts=(), watermarks=True):
    """Feed ``rows`` cut at ``cuts``; a watermark (the largest time so far) after each batch."""
    out, last = [], 0
    for c in [*sorted(cuts), len(rows)]:
        part = rows[last:c]
        last = c
        if part:
            out += op.on_batch(pa.RecordBatch.from_pylist(part, schema=SCHEMA))
            if watermarks:
                out += op.on_watermark(max(r["ts"] for r in part))
    out += op.on_end()
    return [r for b in out for r in b.to_pylist()]


IDS = {"first": lambda m: _first(m), "last": lambda m: _last(m)}


def _first(m):
    v = next(iter(m._vals.values()))
    return v.first["id"] if isinstance(v, epic.StarValue) else v["id"]


def _last(m):
    v = list(m._vals.values())[-1]
    return v.last["id"] if isinstance(v, epic.StarValue) else v["id"]


def spans(pat, values, **kw):
    """(first id, last id) of each match over one key's ``values``."""
    op = operator(pat, select=IDS, schema={"first": "int64", "last": "int64"})
    return [(r["first"], r["last"]) for r in drive(op, rows_of(values), **kw)]


def test_consecutive_variables_no_intervening_row():
    """(X, Y, Z) matches three consecutive rows only; the search resumes after a match."""
    p = epic.pattern(epic.var("X", lambda c: c["v"] == 1), epic.var("Y", lambda c: c["v"] == 2),
                     epic.var("Z", lambda c: c["v"] == 3))
    assert spans(p, [1, 2, 3, 1, 2, 9, 3, 1, 1, 2, 3]) == [(0, 2), (8, 10)]


def test_star_is_maximal_and_never_gives_rows_back():
    """*Y takes every row it can; Z must match the row that ended the star."""
    y_then_z = epic.pattern(epic.star("Y", lambda c: c["v"] < 5), epic.var("Z", lambda c: True))
    assert spans(y_then_z, [1, 2, 3, 7, 1, 8]) == [(0, 3), (4, 5)]
    same = epic.pattern(epic.star("Y", lambda c: c["v"] < 5), epic.var("Z", lambda c: c["v"] < 5))
    assert spans(same, [1, 2, 3, 7]) == []


def test_failed_attempt_restarts_at_next_row():
    """A failed attempt is retried from the next row, which may lie inside the failed run."""
    p = epic.pattern(epic.star("A", lambda c: c["v"] != 9, having=lambda m: m["A"].count < 3),
                     epic.var("B", lambda c: c["v"] == 9))
    # the run 0..4 is too long; starting at 3 it has 2 rows, then B
    assert spans(p, [0, 0, 0, 0, 0, 9]) == [(3, 5)]


def test_previous_is_the_previous_row_of_the_same_star():
    """prev is None for a star's first row, then the star's previous row."""
    seen = []

    def where(cur, prev):
        seen.append(None if prev is None else prev["id"])
        return prev is None or cur["v"] < prev["v"]

    p = epic.pattern(epic.var("X", lambda c: c["v"] == 9), epic.star("Y", where))
    assert spans(p, [9, 5, 4, 6]) == [(0, 2), (3, 3)][:1]
    assert seen[:3] == [None, 1, 2]


def test_continuous_aggregate_ends_the_star_and_having_tests_it_complete():
    """ccount(Y) <= 3 stops the star at 3 rows; LAST(*Y) is tested when it completes."""
    p = epic.pattern(
        epic.var("X", lambda c: c["v"] >= 50),
        epic.star("Y", lambda cur, prev, m: (cur["v"] < (prev or m["X"])["v"]
                                             and m["Y"].count <= 3),
                  having=lambda m: m["Y"].last["v"] < 0.3 * m["X"]["v"]))
    assert spans(p, [60, 40, 20, 10, 5]) == [(0, 3)]          # 3 rows, last 10 < 18
    assert spans(p, [60, 50, 40, 30, 25]) == []               # the 4th row is not taken


def test_star_aggregates_in_conditions_and_select():
    """Declared aggregates are continuous in where, final in having and select."""
    p = epic.pattern(epic.star("A", lambda cur, prev, m: m["A"]["total"] <= 10,
                               aggregates=[epic.sum("v", name="total"), epic.max("v")],
                               having=lambda m: m["A"].count >= 2))
    op = operator(p, select={"total": "A.total", "top": "A.max_v", "n": "A.count",
                             "lastv": "A.last.v"})
    got = drive(op, rows_of([4, 5, 3, 6, 2, 20, 1]))
    assert [(r["total"], r["top"], r["n"], r["lastv"]) for r in got] == \
        [(9, 5, 2, 5), (9, 6, 2, 6)]
    assert op.output_schema.field("total").type == pa.int64()


def test_within_bounds_a_match_and_cuts_a_star():
    """Rows more than `within` after the first cannot join: they end a star."""
    p = epic.pattern(epic.var("X", lambda c: c["v"] == 1), epic.star("Y", lambda c: c["v"] == 2),
                     within=2)
    assert spans(p, [1, 2, 2, 2, 2]) == [(0, 2)]
    q = epic.pattern(epic.var("X", lambda c: c["v"] == 1), epic.var("Y", lambda c: c["v"] == 2),
                     within=2)
    op = operator(q, select=IDS, schema={"first": "int64", "last": "int64"})
    rows = [{"k": 0, "ts": 0, "id": 0, "v": 1}, {"k": 0, "ts": 3, "id": 1, "v": 2}]
    assert drive(op, rows) == []


def test_watermark_emits_a_trailing_star_match_without_the_next_row():
    """With within, once the watermark passes the bound the star is complete: emitted then."""
    p = epic.pattern(epic.var("X", lambda c: c["v"] == 1), epic.star("Y", lambda c: c["v"] == 2),
                     within=5)
    op = operator(p)
    out = op.on_batch(pa.RecordBatch.from_pylist(rows_of([1, 2, 2]), schema=SCHEMA))
    assert out == [] and op.on_watermark(5) == []
    assert op.output_watermark == 0          # holds downstream time at the attempt's start
    got = op.on_watermark(6)
    assert [r["match_end"] for b in got for r in b.to_pylist()] == [2]
    assert op.output_watermark is None


def test_match_emitted_when_recognised():
    """A pattern ending with a var is emitted in the step that completes it: by the batch when
    the input watermark already covers its end, else by the watermark that follows it."""
    p = epic.pattern(epic.var("X", lambda c: c["v"] == 1), epic.var("Y", lambda c: c["v"] == 2))
    op = operator(p)
    assert op.on_batch(pa.RecordBatch.from_pylist(rows_of([1]), schema=SCHEMA)) == []
    assert op.on_watermark(0) == []
    assert op.on_batch(pa.RecordBatch.from_pylist(rows_of([2], t0=1), schema=SCHEMA)) == []
    got = op.on_watermark(1)
    assert [r["match_start"] for b in got for r in b.to_pylist()] == [0]
    op = operator(p)
    op.on_watermark(5)   # a watermark ahead of the rows (a quiet input's pushed time)
    op.on_batch(pa.RecordBatch.from_pylist(rows_of([1], t0=5), schema=SCHEMA))
    got = op.on_batch(pa.RecordBatch.from_pylist(rows_of([2], t0=5), schema=SCHEMA))
    assert [r["match_end"] for b in got for r in b.to_pylist()] == [5]


def test_anchored_tries_the_first_row_of_each_key_only():
    """anchored=True: one attempt per key, at its first row."""
    p = epic.pattern(epic.star("A", lambda c: c["v"] != 9, having=lambda m: m["A"].count < 3),
                     epic.var("B", lambda c: c["v"] == 9), anchored=True)
    assert spans(p, [0, 0, 0, 9, 0, 9]) == []
    assert spans(p, [0, 0, 9, 0, 9]) == [(0, 2)]


def test_keys_are_independent():
    """Each key has its own sequence; rows of other keys do not intervene."""
    p = epic.pattern(epic.var("X", lambda c: c["v"] == 1), epic.var("Y", lambda c: c["v"] == 2))
    rows = [{"k": i % 2, "ts": i, "id": i, "v": v} for i, v in enumerate([1, 1, 2, 2])]
    got = drive(operator(p), rows)
    assert sorted((r["k"], r["match_start"]) for r in got) == [(0, 0), (1, 1)]


def test_out_of_order_rows_are_refused_or_dropped():
    """A row older than its key's previous row is an error, or dropped and counted."""
    p = epic.pattern(epic.var("X", lambda c: True))
    bad = [{"k": 0, "ts": 5, "id": 0, "v": 1}, {"k": 0, "ts": 4, "id": 1, "v": 1}]
    with pytest.raises(InputError, match="older than the key's previous row"):
        drive(operator(p), bad)
    q = epic.pattern(epic.var("X", lambda c: True), out_of_order="drop")
    op = operator(q)
    assert len(drive(op, bad)) == 1 and op.dropped_rows == 1


def test_snapshot_restore_mid_match_equals_uninterrupted():
    """Restoring a snapshot taken inside a growing star continues exactly."""
    p = epic.pattern(epic.var("X", lambda c: c["v"] > 5),
                     epic.star("Y", lambda c: c["v"] < 5, aggregates=[epic.mean("v")]))
    rows = rows_of([9, 1, 2, 3, 8, 4, 4, 9, 9, 1])
    sel = {"avg": "Y.mean_v"}
    want = drive(operator(p, sel), rows)
    a = operator(p, sel)
    part = a.on_batch(pa.RecordBatch.from_pylist(rows[:3], schema=SCHEMA))
    b = operator(p, sel)
    b.restore(a.snapshot())
    rest = b.on_batch(pa.RecordBatch.from_pylist(rows[3:], schema=SCHEMA)) + b.on_end()
    assert [r for x in part + rest for r in x.to_pylist()] == want
    assert [r["avg"] for r in want] == [2.0, 4.0, 1.0]


def test_mask_is_a_vectorised_row_condition():
    """mask(batch) gives the same matches as the equivalent where."""
    by_row = epic.pattern(epic.var("X", lambda c: c["v"] > 2), epic.star("Y", lambda c: c["v"] < 3))
    by_mask = epic.pattern(epic.var("X", mask=lambda b: pc.greater(b["v"], 2)),
                           epic.star("Y", mask=lambda b: pc.less(b["v"], 3)))
    vals = [3, 1, 0, 4, 5, 2, 9]
    assert spans(by_row, vals, cuts=[2, 5]) == spans(by_mask, vals, cuts=[2, 5]) == \
        [(0, 2), (4, 5)]


def test_linear_matcher_does_not_rescan_a_long_run():
    """On a long run that fails late, backtracking evaluates O(n^2) conditions, linear O(n)."""
    p = dict(having=lambda m: m["A"].count < 20)
    rows = rows_of([0] * 2000 + [9])
    counts = {}
    for matcher in ("linear", "backtracking"):
        pat = epic.pattern(epic.star("A", lambda c: c["v"] == 0, **p),
                           epic.var("B", lambda c: c["v"] == 9), matcher=matcher)
        op = operator(pat)
        got = drive(op, rows, cuts=range(100, 2000, 100))
        assert [r["match_start"] for r in got] == [1981]
        counts[matcher] = op.evaluations
    assert counts["linear"] < 3 * 2001 * 2
    assert counts["backtracking"] > 100 * counts["linear"]


def test_user_errors_name_the_node_and_variable():
    """A condition raising stops the run with the node and the variable."""
    t = epic.Topology("bad")
    s = t.source("s", epic.iterator_source(rows_of([1, 2]), schema=SCHEMA, time="ts", unit="s"))
    p = t.pattern("pat", s, epic.pattern(epic.var("X", lambda c: c["nope"])), key="k")
    t.sink("out", p, epic.collect_sink())
    with pytest.raises(NodeFailure, match=r"node 'pat': user function pattern variable 'X'"):
        epic.run(t)


@pytest.mark.parametrize("kw, message", [
    ({"select": {"f": lambda m: 1}}, "select 'f' is a function, so its type must be declared"),
    ({"select": {"f": "Q.v"}}, "no pattern variable 'Q'"),
    ({"select": {"f": "Y.avg"}}, "has no aggregate 'avg'"),
    ({"key": "nokey"}, "key column 'nokey'"),
])
def test_node_validation_messages(kw, message):
    """Bad selects and keys fail when the node is added, naming the node and the fix."""
    t = epic.Topology("v")
    s = t.source("s", epic.iterator_source([], schema=SCHEMA, time="ts", unit="s"))
    with pytest.raises(TopologyError, match=r"node 'p', .*" + message):
        t.pattern("p", s, epic.pattern(epic.var("X"), epic.star("Y")), **kw)


def test_spec_validation():
    """having on a var, duplicate names and bad options are refused at build time."""
    with pytest.raises(epic.SpecError, match="belong to a star"):
        epic.patterns.Element("X", False, None, None, lambda m: True)
    with pytest.raises(epic.SpecError, match="appears twice"):
        epic.pattern(epic.var("X"), epic.var("X"))
    with pytest.raises(epic.SpecError, match="out_of_order"):
        epic.pattern(epic.var("X"), out_of_order="sort")


def test_pattern_in_topology_keyed_with_entry_column():
    """The node is a keyed process node; delay logging carries _entry through."""
    t = epic.Topology("topo", delay_logging=True)
    s = t.source("s", epic.iterator_source(rows_of([1, 2, 1, 2]), schema=SCHEMA, time="ts",
                                           unit="s"))
    p = t.pattern("pat", s, epic.pattern(epic.var("X", lambda c: c["v"] == 1),
                                         epic.var("Y", lambda c: c["v"] == 2)),
                  key="k", select={"y": "Y.id"})
    node = t._nodes["pat"]
    assert node.kind == "process" and node.key == ("k",)
    assert p.time == "match_end" and p.columns == ["k", "match_start", "match_end", "y"]
    t.sink("out", p, epic.collect_sink())
    got = epic.run(t).collected["out"].to_pylist()
    assert "_entry" in p.schema.names
    assert [r["y"] for r in got] == [1, 3]


# --------------------------------------------------------------------------------------------
# Property: streaming matchers == brute force from docs/patterns.md


def _local1(c):
    return [lambda cur: cur["v"] > c, lambda cur: cur["v"] < c, lambda cur: cur["v"] != c,
            lambda cur: cur["v"] % 2 == c % 2]


def _local2():
    return [lambda cur, prev: prev is None or cur["v"] >= prev["v"],
            lambda cur, prev: prev is None or cur["v"] < prev["v"]]


@st.composite
def patterns(draw):
    n = draw(st.integers(1, 3))
    els = []
    for j in range(n):
        is_star = draw(st.booleans())
        name = f"E{j}"
        c = draw(st.integers(0, 4))
        kind = draw(st.sampled_from(["none", "local1", "local2", "dep"]))
        if kind == "local1":
            where = draw(st.sampled_from(_local1(c)))
        elif kind == "local2":
            where = draw(st.sampled_from(_local2()))
        elif kind == "dep":
            earlier = els[-1].name if els else None
            if is_star and draw(st.booleans()):
                where = (lambda name, c: lambda cur, prev, m: m[name].count <= c + 1)(name, c)
            elif is_star:
                where = (lambda name, c: lambda cur, prev, m: m[name]["s"] <= 2 * c + 2)(name, c)
            elif earlier:
                where = (lambda e: lambda cur, prev, m: cur["v"] >= _val(m[e]))(earlier)
            else:
                where = lambda cur, prev, m: cur["v"] <= 3  # noqa: E731
        else:
            where = None
        mask = (lambda c: lambda b: pc.not_equal(b["v"], c))(c) if draw(st.booleans()) else None
        if is_star:
            having = draw(st.sampled_from([
                None, (lambda name, c: lambda m: m[name].count >= c % 3 + 1)(name, c),
                (lambda name, c: lambda m: m[name]["s"] % 2 == c % 2)(name, c)]))
            els.append(epic.star(name, where, having=having, mask=mask,
                                 aggregates=[epic.sum("v", name="s")]))
        else:
            els.append(epic.var(name, where, mask=mask))
    within = draw(st.one_of(st.none(), st.integers(0, 6)))
    return els, within, draw(st.booleans())


def _val(x):
    return x.last["v"] if isinstance(x, epic.StarValue) else x["v"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=patterns(),
       data=st.lists(st.tuples(st.integers(0, 1), st.integers(0, 2), st.integers(0, 4)),
                     max_size=40),
       cuts=st.lists(st.integers(0, 40), max_size=5),
       matcher=st.sampled_from(["linear", "backtracking"]),
       snap=st.one_of(st.none(), st.integers(0, 5)))
def test_streaming_matchers_equal_brute_force(spec, data, cuts, matcher, snap):
    """Any pattern, keys, batch cuts, watermarks and a restore: the brute force's matches."""
    els, within, anchored = spec
    rows, ts = [], 0
    for i, (k, dt, v) in enumerate(data):
        ts += dt
        rows.append({"k": k, "ts": ts, "id": i, "v": v})
    pat = epic.pattern(*els, within=within, anchored=anchored, matcher=matcher)
    select = {"first": _first, "last": _last}
    want = brute_matches(pat, rows, key="k", time="ts", within=within, select=select)
    op = operator(pat, select=select, schema={"first": "int64", "last": "int64"})
    out, last = [], 0
    for n, c in enumerate([*sorted(cuts), len(rows)]):
        part = rows[last:c]
        last = max(last, c)
        if part:
            out += op.on_batch(pa.RecordBatch.from_pylist(part, schema=SCHEMA))
            out += op.on_watermark(part[-1]["ts"])
        if snap == n:
            fresh = operator(pat, select=select, schema={"first": "int64", "last": "int64"})
            fresh.restore(op.snapshot())
            op = fresh
    out += op.on_end()
    got: dict = {}
    for r in (r for b in out for r in b.to_pylist()):
        got.setdefault(r["k"], []).append((r["match_start"], r["match_end"], r["first"],
                                           r["last"]))
    assert got == {k: v for k, v in want.items() if v}


def _stream_of(data):
    """Rows in each key's time order, keys' clocks apart (the input is out of time order across
    keys), and after each row the honest watermark: the least of the keys' clocks."""
    rows, clock = [], {0: 0, 1: 0, 2: 0}
    for i, (k, dt, v) in enumerate(data):
        clock[k] += dt
        rows.append({"k": k, "ts": clock[k], "id": i, "v": v, "wm": min(clock.values())})
    return rows


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=patterns(),
       data=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 3), st.integers(0, 4)),
                     max_size=40),
       cuts=st.lists(st.integers(0, 40), max_size=5),
       snap=st.one_of(st.none(), st.integers(0, 5)))
@example(spec=([epic.var("E0")], None, False), data=[(0, 3, 0), (1, 1, 0)], cuts=[1], snap=None)
def test_matches_leave_in_time_order_whatever_the_cuts(spec, data, cuts, snap):
    """docs/patterns.md: the output's event time is match_end and downstream windows see matches
    on time. Keys' matches are recognised key by key, and one key's attempt may still end
    before another key's finished match: the rows leave in match_end order (ties: the position
    of the match's last row in the input), never behind the watermark the node forwarded, the same rows
    in the same order for any batch cuts and a restore between them."""
    els, within, anchored = spec
    rows = _stream_of(data)
    wms = [r.pop("wm") for r in rows]
    pat = epic.pattern(*els, within=within, anchored=anchored)
    select = {"first": _first, "last": _last}
    types = {"first": "int64", "last": "int64"}

    def emitted(cut_at, snap_at):
        op = operator(pat, select=select, schema=types)
        out, forwarded, last = [], None, 0

        def take(batches):
            for b in batches:
                for r in b.to_pylist():
                    assert forwarded is None or r["match_end"] >= forwarded, (r, forwarded)
                    assert not out or r["match_end"] >= out[-1]["match_end"], (r, out[-1])
                    out.append(r)

        for n, c in enumerate([*sorted(cut_at), len(rows)]):
            part = rows[last:c]
            last = max(last, c)
            if part:
                take(op.on_batch(pa.RecordBatch.from_pylist(part, schema=SCHEMA)))
                w = wms[min(c, len(rows)) - 1]
                take(op.on_watermark(w))
                hold = op.output_watermark
                wm = w if hold is None else min(w, hold)
                forwarded = wm if forwarded is None else max(forwarded, wm)
            if snap_at == n:
                fresh = operator(pat, select=select, schema=types)
                fresh.restore(op.snapshot())
                op = fresh
        take(op.on_end())
        return out

    assert emitted(cuts, snap) == emitted((), None)
