"""splitstream: row form vs vectorised form (property test), built-ins, combine."""

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import epic
from epic.operator import ENTRY_COLUMN
from epic.operators.split import CombineOperator, SplitOperator
from epic.split import (as_query, combine, hash_partition,
                        pairs_split, round_robin, stable_hash, vector_split)

SCHEMA = pa.schema([("sid", pa.int64()), ("ts", pa.int64()), ("v", pa.float64())])


def rows_strategy():
    row = st.fixed_dictionaries({
        "sid": st.integers(0, 20),
        "ts": st.integers(0, 2**62),
        "v": st.floats(-1e6, 1e6, allow_nan=False),
    })
    return st.lists(row, max_size=60)


def run_split(query, n, batches, schemas=None, schema=SCHEMA):
    op = SplitOperator(query, n, schema, schemas or [schema] * n)
    outs = [[] for _ in range(n)]
    for b in batches:
        for i, bl in enumerate(op.split(b)):
            outs[i].extend(bl)
    return [pa.Table.from_batches(o, schema=(schemas or [schema] * n)[i]).to_pylist()
            for i, o in enumerate(outs)]


def to_batches(rows, cut):
    b = pa.RecordBatch.from_pylist(rows, schema=SCHEMA)
    cut = min(cut, len(rows))
    return [b.slice(0, cut), b.slice(cut)]


@settings(max_examples=150, deadline=None)
@given(rows=rows_strategy(), n=st.integers(1, 4), cut=st.integers(0, 60),
       thresholds=st.lists(st.integers(0, 20), min_size=4, max_size=4),
       modes=st.lists(st.sampled_from(["all", "none", "mask"]), min_size=4, max_size=4))
def test_row_and_vectorised_forms_agree(rows, n, cut, thresholds, modes):
    """For random data, routes and batch cuts, the per-row query equals the vectorised one."""

    def row_query(i, ev):
        m = modes[i]
        return m == "all" or (m == "mask" and ev["sid"] < thresholds[i])

    def vec_query(i, b):
        m = modes[i]
        if m == "all":
            return True
        if m == "none":
            return False
        return pc.less(b["sid"], thresholds[i])

    batches = to_batches(rows, cut)
    assert run_split(row_query, n, batches) == run_split(vector_split(vec_query), n, batches)


@settings(max_examples=100, deadline=None)
@given(rows=rows_strategy(), cut=st.integers(0, 60),
       thresholds=st.lists(st.integers(0, 3), min_size=4, max_size=4))
def test_outputs_with_equal_numpy_masks_get_the_same_rows(rows, cut, thresholds):
    """Numpy masks (equal ones share a filtered batch): each output has its own rows."""

    def row_query(i, ev):
        return ev["sid"] % 4 < thresholds[i]

    def vec_query(i, b):
        return np.asarray(b["sid"]) % 4 < thresholds[i]

    batches = to_batches(rows, cut)
    assert run_split(row_query, 4, batches) == run_split(vector_split(vec_query), 4, batches)


@settings(max_examples=100, deadline=None)
@given(rows=rows_strategy(), cut=st.integers(0, 60), k=st.integers(0, 20))
def test_row_transform_equals_vectorised_projection(rows, cut, k):
    """Transforming tuples per row equals a mask plus a column projection per output."""
    proj = pa.schema([("ts", pa.int64()), ("sid", pa.int64())])

    def row_query(i, ev):
        if i == 0:
            return ev["sid"] >= k and {"ts": ev["ts"], "sid": ev["sid"]}
        return True

    vec = vector_split(lambda i, b: pc.greater_equal(b["sid"], k) if i == 0 else True,
                       project=[["ts", "sid"], None])
    batches = to_batches(rows, cut)
    assert run_split(row_query, 2, batches, [proj, SCHEMA]) == \
        run_split(vec, 2, batches, [proj, SCHEMA])


@settings(max_examples=60, deadline=None)
@given(rows=rows_strategy(), cut=st.integers(0, 60), k=st.integers(0, 20))
def test_outputs_sharing_a_mask_keep_their_own_projections(rows, cut, k):
    """Outputs whose numpy masks are equal share one filtered batch of the columns their
    projections keep (here ts and v of three; DEBS: Q1's and Q3's players' rows, 5 of 14): each
    still gets exactly its own columns, in its own order, as the per-row form gives them."""
    p0 = pa.schema([("ts", pa.int64())])
    p1 = pa.schema([("v", pa.float64()), ("ts", pa.int64())])

    def row_query(i, ev):
        if i == 2:
            return True
        keep = ev["sid"] >= k
        if i == 0:
            return keep and {"ts": ev["ts"]}
        return keep and {"v": ev["v"], "ts": ev["ts"]}

    vec = vector_split(lambda i, b: True if i == 2 else np.asarray(b["sid"]) >= k,
                       project=[["ts"], ["v", "ts"], None])
    batches = to_batches(rows, cut)
    assert run_split(row_query, 3, batches, [p0, p1, SCHEMA]) == \
        run_split(vec, 3, batches, [p0, p1, SCHEMA])


@settings(max_examples=50, deadline=None)
@given(rows=rows_strategy(), n=st.integers(1, 5), cut=st.integers(0, 60))
def test_pairs_form_equals_row_form(rows, n, cut):
    """The (i, tuple') pairs form gives the same outputs as the per-output form."""
    batches = to_batches(rows, cut)
    by_row = run_split(lambda i, ev: ev["sid"] % n == i, n, batches)
    by_pairs = run_split(pairs_split(lambda ev: [(ev["sid"] % n, True)]), n, batches)
    assert by_row == by_pairs


def test_listing_1_reads_as_in_the_paper():
    """EPIC Listing 1: (i = 0 and is_player(ev)) or (i = 1) or (i = 2 and is_player(ev))."""
    def is_player(ev):
        return ev["sid"] < 10

    t = epic.Topology("listing1")
    ev = t.source("ev", epic.iterator_source(
        [{"sid": s, "ts": i, "v": 0.0} for i, s in enumerate([1, 50, 3, 99])],
        schema=SCHEMA, time="ts", unit="ps"))
    q1, q2, q3 = t.splitstream("split", ev, 3, lambda i, ev: (
        (i == 0 and is_player(ev)) or (i == 1) or (i == 2 and is_player(ev))))
    for name, s in (("q1", q1), ("q2", q2), ("q3", q3)):
        t.sink(name, s, epic.collect_sink())
    got = epic.run(t).collected
    assert got["q1"].column("sid").to_pylist() == [1, 3]
    assert got["q2"].column("sid").to_pylist() == [1, 50, 3, 99]
    assert got["q3"].column("sid").to_pylist() == [1, 3]


def test_broadcast_hash_and_round_robin():
    """Built-ins: broadcast copies, hash keeps keys together, round robin deals in turn."""
    b = pa.RecordBatch.from_pylist([{"sid": i % 5, "ts": i, "v": 0.0} for i in range(20)],
                                   schema=SCHEMA)
    assert [len(o) for o in run_split(epic.broadcast(), 3, [b])] == [20, 20, 20]
    parts = run_split(hash_partition("sid"), 3, [b])
    assert sum(len(p) for p in parts) == 20
    owners = {}
    for i, p in enumerate(parts):
        for r in p:
            assert owners.setdefault(r["sid"], i) == i
    rr = run_split(round_robin(), 3, [b.slice(0, 7), b.slice(7)])
    assert [[r["ts"] for r in p] for p in rr] == [list(range(k, 20, 3)) for k in range(3)]


def test_stable_hash_is_stable_and_handles_strings():
    """The partition hash does not depend on the process (no Python hash randomisation)."""
    import subprocess
    import sys
    b = pa.record_batch([pa.array(["a", "b", "a"]), pa.array([1, 2, 1])], names=["s", "k"])
    h = stable_hash(b, ["s", "k"])
    assert h[0] == h[2] and h[0] != h[1]
    code = ("import pyarrow as pa; from epic.split import stable_hash; "
            "print(stable_hash(pa.record_batch([pa.array(['a', 'b', 'a']), pa.array([1, 2, 1])],"
            " names=['s', 'k']), ['s', 'k']).tolist())")
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, env={"PYTHONHASHSEED": "123"})
    assert other.stdout.strip() == str(h.tolist())


def test_round_robin_position_survives_snapshot():
    """The round-robin counter is operator state and is restored from a snapshot."""
    b = pa.RecordBatch.from_pylist([{"sid": 0, "ts": i, "v": 0.0} for i in range(2)],
                                   schema=SCHEMA)
    op = SplitOperator(round_robin(), 3, SCHEMA, [SCHEMA] * 3)
    op.split(b)
    op3 = SplitOperator(round_robin(), 3, SCHEMA, [SCHEMA] * 3)
    op3.restore(op.snapshot())
    # rows 0, 1 went to outputs 0, 1; the next two go to outputs 2 and 0
    assert [sum(bb.num_rows for bb in x) for x in op3.split(b)] == [1, 0, 1]


def test_entry_column_travels_with_rows():
    """Delay logging: each routed row keeps its own arrival time."""
    sch = SCHEMA.append(pa.field(ENTRY_COLUMN, pa.int64()))
    b = pa.RecordBatch.from_pylist([{"sid": i, "ts": i, "v": 0.0, ENTRY_COLUMN: 100 + i}
                                    for i in range(4)], schema=sch)
    for q in (lambda i, ev: ev["sid"] % 2 == i, vector_split(
            lambda i, bb: pc.equal(pc.bit_wise_and(bb["sid"], 1), i))):
        outs = run_split(q, 2, [b], schema=sch, schemas=[sch, sch])
        assert [[r[ENTRY_COLUMN] for r in o] for o in outs] == [[100, 102], [101, 103]]


def test_as_query_dispatches_on_arity():
    """Two parameters: per-output form; one parameter: pairs form."""
    assert type(as_query(lambda i, r: True)).__name__ == "RowQuery"
    assert type(as_query(lambda r: [])).__name__ == "PairsQuery"


def test_combine_waits_for_the_watermark_and_merges_partials():
    """Partial results are combined per group once the watermark passes their time."""
    sch = pa.schema([("k", pa.int64()), ("window_end", pa.int64()), ("n", pa.int64()),
                     ("hi", pa.float64())])
    op = CombineOperator(combine(n="sum", hi="max"), sch, "window_end")
    assert op.on_batch(pa.RecordBatch.from_pylist(
        [{"k": 1, "window_end": 10, "n": 2, "hi": 3.0}, {"k": 2, "window_end": 10, "n": 1,
                                                          "hi": 1.0}], schema=sch)) == []
    op.on_batch(pa.RecordBatch.from_pylist([{"k": 1, "window_end": 10, "n": 5, "hi": 9.0},
                                            {"k": 1, "window_end": 20, "n": 1, "hi": 0.0}],
                                           schema=sch))
    assert op.on_watermark(10) == []
    out = op.on_watermark(11)[0].to_pylist()
    assert out == [{"k": 1, "window_end": 10, "n": 7, "hi": 9.0},
                   {"k": 2, "window_end": 10, "n": 1, "hi": 1.0}]
    op2 = CombineOperator(combine(n="sum", hi="max"), sch, "window_end")
    op2.restore(op.snapshot())
    assert op2.on_end()[0].to_pylist() == [{"k": 1, "window_end": 20, "n": 1, "hi": 0.0}]


def test_parallel_round_robin_with_combine_equals_single_window():
    """n replicas + merge + combine give what one window node gives."""
    rng = np.random.default_rng(3)
    rows = [{"sid": int(rng.integers(0, 6)), "ts": i, "v": float(rng.integers(0, 100))}
            for i in range(3000)]

    def build(parallel):
        t = epic.Topology("p")
        s = t.source("s", epic.iterator_source(rows, schema=SCHEMA, time="ts", unit="ms",
                                               batch_rows=256))
        aggs = [epic.count("n"), epic.max("v", name="hi")]
        spec = epic.few_time(0.1, 0.1, 0.05, origin=0)
        if parallel:
            out = t.parallel("par", s, 3, lambda t, p, i: t.window("w", p, spec, key="sid",
                                                                   aggregates=aggs),
                             reduce=combine(n="sum", hi="max"))
        else:
            out = t.window("w", s, spec, key="sid", aggregates=aggs)
        t.sink("out", out, epic.collect_sink())
        tab = epic.run(t).collected["out"]
        return sorted(tuple(r.values()) for r in tab.to_pylist())

    assert build(True) == build(False)


def _split_topology(query, schemas=None):
    rows = [{"sid": i % 2, "ts": i, "v": float(i)} for i in range(6)]
    t = epic.Topology("split_tuples")
    s = t.source("src", epic.iterator_source(rows, schema={"sid": "int64", "ts": "int64",
                                                           "v": "float64"},
                                             time="ts", unit="s"))
    a, b = t.splitstream("split", s, 2, query, schemas=schemas)
    t.sink("a", a, epic.collect_sink())
    t.sink("b", b, epic.collect_sink())
    return t


def test_a_returned_tuple_names_every_column_and_its_event_time():
    """A dict returned by a row query is the tuple sent: a missing column (the event time
    included) stops the run naming the split node, the output and the fixes, instead of a
    column of nulls that a window downstream would refuse without naming the split."""
    import pytest

    from epic.errors import NodeFailure

    ok = epic.run(_split_topology(lambda i, r: {"sid": r["sid"], "ts": r["ts"], "v": -r["v"]}
                                  if i == 0 else r["sid"] == 1))
    assert ok.collected["a"].column("v").to_pylist() == [-float(i) for i in range(6)]
    assert ok.collected["b"].column("ts").to_pylist() == [1, 3, 5]
    with pytest.raises(NodeFailure, match=r"node 'split': output 0: a returned tuple lacks "
                                        r"'ts'.*schemas=\[\.\.\.\].*True"):
        epic.run(_split_topology(lambda i, r: {"sid": r["sid"], "v": r["v"]} if i == 0 else True))
    with pytest.raises(NodeFailure, match=r"output 1: a returned tuple has 'w' not in the output"):
        epic.run(_split_topology(lambda i, r: {**r, "w": 1} if i == 1 else True))
    with pytest.raises(NodeFailure, match=r"output 0: 6 tuple\(s\) with a null event time 'ts'"):
        epic.run(_split_topology(lambda i, r: {**r, "ts": None} if i == 0 else True))
    # a declared output schema: tuples of its columns, nulls given as None
    t = _split_topology(lambda i, r: {"sid": r["sid"], "ts": r["ts"], "w": None} if i == 0
                        else True, schemas=[{"sid": "int64", "ts": "int64", "w": "float64"},
                                            {"sid": "int64", "ts": "int64", "v": "float64"}])
    assert epic.run(t).collected["a"].column("w").null_count == 6
    # a row sent unchanged to an output that declares other columns
    t = _split_topology(lambda i, r: True, schemas=[
        {"sid": "int64", "ts": "int64", "w": "float64"},
        {"sid": "int64", "ts": "int64", "v": "float64"}])
    with pytest.raises(NodeFailure, match=r"output 0 declares the columns sid, ts, w, but the "
                                        r"query sent it a row unchanged \(True\)") as info:
        epic.run(t)
    assert "user function" not in str(info.value)


def test_row_forms_refuse_what_the_vectorised_forms_refuse():
    """map_rows and the row splitstream stop on a float with a fraction in an integer column, a
    missing column and a null event time, as map does (pyarrow would truncate and fill nulls);
    vector_split's projections may not leave a null event time (docs/topologies.md)."""
    import epic
    from epic.errors import NodeFailure

    schema = {"k": "int64", "ts": "int64", "v": "int64"}

    def run(build):
        t = epic.Topology("rows")
        s = t.source("s", epic.iterator_source([{"k": 1, "ts": 1, "v": 1},
                                                {"k": 3, "ts": 2, "v": 2}],
                                               schema=schema, time="ts", unit="s"))
        t.sink("o", build(t, s), epic.collect_sink())
        return epic.run(t)

    cases = [
        (lambda t, s: t.map_rows("m", s, lambda r: {**r, "k": r["k"] / 2}),
         "returned 0.5 for the integer column 'k'"),
        (lambda t, s: t.map_rows("m", s, lambda r: {"k": r["k"], "ts": r["ts"]}),
         "lacks 'v'"),
        (lambda t, s: t.map_rows("m", s, lambda r: {**r, "ts": None}),
         "2 row\\(s\\) with a null event time 'ts'"),
        (lambda t, s: t.splitstream("sp", s, 1, lambda i, r: {**r, "v": 1.5})[0],
         "holds 1.5 for the integer column 'v'"),
        # numpy floats too (np.float64 is a float subclass, np.float32 is not)
        (lambda t, s: t.map_rows("m", s, lambda r: {**r, "k": np.float64(r["k"]) / 2}),
         "returned np.float64\\(0.5\\) for the integer column 'k'"),
        (lambda t, s: t.map_rows("m", s, lambda r: {**r, "k": np.float32(r["k"] / 2)}),
         "returned np.float32\\(0.5\\) for the integer column 'k'"),
        (lambda t, s: t.splitstream("sp", s, 1, lambda i, r: {**r, "v": np.float64(1.5)})[0],
         "holds np.float64\\(1.5\\) for the integer column 'v'"),
        (lambda t, s: t.splitstream("sp", s, 1, epic.vector_split(
            lambda i, b: True, project=[lambda b: b.set_column(
                1, "ts", pa.nulls(b.num_rows, pa.int64()))]))[0],
         "the projection left 2 row\\(s\\) with a null event time"),
    ]
    for build, words in cases:
        with pytest.raises(NodeFailure, match=words):
            run(build)
    assert run(lambda t, s: t.map_rows("m", s, lambda r: {**r, "k": r["k"] * 2})
               ).collected["o"].column("k").to_pylist() == [2, 6]


def _run_split_of_four(query, n=2) -> dict:
    """epic run of rows k = ts = 0..3 split by ``query`` into ``n`` collected outputs o0, o1..."""
    t = epic.Topology("odd")
    s = t.source("s", epic.iterator_source([{"k": k, "ts": k} for k in range(4)],
                                           schema={"k": "int64", "ts": "int64"},
                                           time="ts", unit="s"))
    outs = t.splitstream("sp", s, n, query)
    for i, o in enumerate(outs):
        t.sink(f"o{i}", o, epic.collect_sink())
    return epic.run(t).collected


def test_odd_answers_of_a_distribution_query_name_the_fix():
    """A row query answering 0/1 (``i == 1 and row["k"] % 2``) or a one-parameter query (the
    pairs form) answering a bool stop with what was returned and the fix, not an
    AttributeError from inside epic (audit s35 L); numpy booleans count as booleans; a merge
    given a bare stream and a projection naming no input column are build errors naming the
    node."""
    import epic
    from epic.errors import NodeFailure, TopologyError

    run = _run_split_of_four
    with pytest.raises(NodeFailure, match=r"returned 0 \(int\) for output 1; return True"):
        run(lambda i, r: i == 0 or (i == 1 and r["k"] % 2))
    with pytest.raises(NodeFailure, match="took one parameter, so it is the pairs form"):
        run(lambda r: r["k"] > 1)
    got = run(lambda i, r: np.bool_(r["k"] % 2 == i))
    assert got["o0"].column("k").to_pylist() == [0, 2]
    assert got["o1"].column("k").to_pylist() == [1, 3]
    t = epic.Topology("odd2")
    s = t.source("s", epic.iterator_source([{"k": 1, "ts": 1}], schema={"k": "int64",
                                                                        "ts": "int64"},
                                           time="ts", unit="s"))
    with pytest.raises(TopologyError, match=r"node 'm', streams: got Stream, not a list"):
        t.merge("m", s)
    with pytest.raises(TopologyError, match=r"node 'sp', query: projection 0 names columns "
                                            r"\['zz'\] not in the input"):
        t.splitstream("sp", s, 2, epic.vector_split(lambda i, b: True,
                                                    project=[["k", "ts", "zz"], None]))


def test_pairs_and_vectorised_answers_follow_the_row_forms_rule():
    """The pairs and vectorised forms take what the row form takes (True or a numpy True: the
    row, a dict: that tuple, False / None / numpy False: nothing) and stop on anything else
    naming the value and the fix: an int or a string paired with an output, an output that is
    not an index, a mask of integers or floats, or of the wrong length (audit s37 M: an
    AttributeError or ArrowInvalid from inside epic, and integer masks taken as truthy). A
    three-parameter query and an empty hash key are build errors."""
    import epic
    from epic.errors import NodeFailure, SpecError, TopologyError

    def run(query, n=2):
        got = _run_split_of_four(query, n)
        return [got[f"o{i}"].column("k").to_pylist() for i in range(n)]

    pairs = epic.pairs_split
    assert run(pairs(lambda r: [(0, np.bool_(r["k"] > 1)), (1, np.int64(1) == 1)])) == \
        [[2, 3], [0, 1, 2, 3]]
    assert run(pairs(lambda r: [(0, False), (1, None), (np.int64(1), {"k": 9, "ts": r["ts"]})])) \
        == [[], [9, 9, 9, 9]]
    for answer, says in ((0, r"yielded \(0, 0\) \(int\); pair an output with True"),
                         ("x", r"yielded \(0, 'x'\) \(str\)")):
        with pytest.raises(NodeFailure, match=says):
            run(pairs(lambda r, a=answer: [(0, a)]))
    for pair, says in (((2, True), "yielded output 2; an output is an integer 0..1"),
                       ((True, True), "yielded output True"), ((0,), r"yielded \(0,\)")):
        with pytest.raises(NodeFailure, match=says):
            run(pairs(lambda r, p=pair: [p]))
    vec = epic.vector_split
    assert run(vec(lambda i, b: np.bool_(i == 0))) == [[0, 1, 2, 3], []]
    assert run(vec(lambda i, b: [True, False, True, False] if i else None)) == [[], [0, 2]]
    import pandas as pd   # pandas boolean Series: bool, nullable "boolean" (NA: not sent)
    assert run(vec(lambda i, b: b.to_pandas()["k"] % 2 == i)) == [[0, 2], [1, 3]]
    assert run(vec(lambda i, b: pd.Series([True, None, False, True], dtype="boolean")
                   if i == 0 else None)) == [[0, 3], []]
    for mask, says in ((lambda i, b: 1, r"returned 1 \(int\) for output 0"),
                       (lambda i, b: b["k"].to_numpy() % 2, "returned an array of int64"),
                       (lambda i, b: b["k"].to_numpy() / 10, "returned an array of float64"),
                       (lambda i, b: pc.bit_wise_and(b["k"], 1), "returned an array of int64"),
                       (lambda i, b: np.ones(3, bool), "has 3 values for a batch of 4 rows"),
                       (lambda i, b: b.to_pandas()["k"] % 2, "returned a Series of int64")):
        with pytest.raises(NodeFailure, match=says):
            run(vec(mask))
    t = epic.Topology("build")
    s = t.source("s", epic.iterator_source([], schema={"k": "int64", "ts": "int64"},
                                           time="ts", unit="s"))
    with pytest.raises(TopologyError, match="takes 3 parameters"):
        t.splitstream("sp", s, 2, lambda i, r, extra: True)
    with pytest.raises(SpecError, match="name the key column"):
        epic.hash_partition([])
