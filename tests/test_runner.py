"""The in-process runner: determinism, watermarks, delay logging, sources and sinks."""

import io
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import epic
from epic.errors import InputError, NodeFailure

SCH = {"sid": "int64", "ts": "int64", "v": "float64"}


def events(n=200, keys=3):
    return [{"sid": i % keys, "ts": i * 10, "v": float(i % 7)} for i in range(n)]


def test_runs_are_deterministic():
    """Two runs of the same topology give identical outputs."""
    def once():
        t = epic.Topology("d")
        s = t.source("s", epic.iterator_source(events(), schema=SCH, time="ts", unit="ms",
                                               batch_rows=13))
        a, b = t.splitstream("sp", s, 2, epic.round_robin())
        w1 = t.window("w1", a, epic.few_time(0.1, 0.05, 0.02), key="sid",
                      aggregates=[epic.mean("v")])
        w2 = t.window("w2", b, epic.few_time(0.1, 0.05, 0.02), key="sid",
                      aggregates=[epic.mean("v")])
        t.sink("out", t.merge("m", [w1, w2]), epic.collect_sink())
        return epic.run(t).collected["out"]
    assert once().equals(once())


def test_watermarks_let_windows_emit_before_the_end():
    """Windows emit as the source's watermark advances, not only at the end of the input."""
    seen = []

    class Spy(epic.Processor):
        def on_element(self, state, row, ctx):
            seen.append((row["window_end"], ctx.watermark))
            return state

    t = epic.Topology("wm")
    s = t.source("s", epic.iterator_source(events(100, 1), schema=SCH, time="ts", unit="ms",
                                           batch_rows=10))
    w = t.window("w", s, epic.tumbling(0.1, origin=0), aggregates=[epic.count()])
    p = t.process("spy", w, Spy(), schema={"ts": "int64"}, time="ts")
    t.sink("out", p, epic.console_sink())
    epic.run(t)
    assert [e for e, _ in seen] == list(range(100, 1001, 100))
    assert seen[0][1] is not None and seen[0][1] < 990  # emitted mid-stream


def test_delay_columns_are_monotone_and_non_negative(tmp_path):
    """entry <= write for every row; both are non-decreasing along each sink's output."""
    ticks = iter(range(1_000_000, 10_000_000, 1000))
    t = epic.Topology("delays", delay_logging=True)
    s = t.source("s", epic.iterator_source(events(500), schema=SCH, time="ts", unit="ms",
                                           batch_rows=37))
    f = t.filter_rows("f", s, lambda r: r["v"] > 0)
    w = t.window("w", f, epic.few_time(0.2, 0.1, 0.05, origin=0),
                 aggregates=[epic.count(), epic.max("v")])
    t.sink("raw", f, epic.csv_sink(tmp_path / "raw.csv", columns=["ts", "v"], delays=True))
    t.sink("win", w, epic.collect_sink(delays=True))
    res = epic.run(t, clock=lambda: next(ticks))
    import pyarrow.csv as pacsv
    raw = pacsv.read_csv(tmp_path / "raw.csv")
    assert raw.column_names[:2] == ["entry_time", "write_time"]
    for tab in (raw, res.collected["win"]):
        entry = tab.column("entry_time").to_pylist()
        write = tab.column("write_time").to_pylist()
        assert all(w >= e for e, w in zip(entry, write))
        assert write == sorted(write) and entry == sorted(entry)
        assert min(entry) >= 1_000_000


def test_delay_columns_with_the_real_clock():
    """With the wall clock, delays are non-negative."""
    t = epic.Topology("real", delay_logging=True)
    s = t.source("s", epic.iterator_source(events(), schema=SCH, time="ts", unit="ms"))
    t.sink("out", s, epic.collect_sink(delays=True))
    tab = epic.run(t).collected["out"]
    d = [w - e for e, w in zip(tab.column("entry_time").to_pylist(),
                               tab.column("write_time").to_pylist())]
    assert min(d) >= 0


def test_csv_source_strict_and_lenient(tmp_path):
    """Strict mode stops at the bad line; lenient mode counts it and writes a dead letter."""
    p = tmp_path / "in.csv"
    p.write_text("0,1,1.5\n1,2,oops\n2,3,2.5\n")
    t = epic.Topology("csv")
    s = t.source("s", epic.csv_source(p, SCH, time="ts", unit="ms"))
    t.sink("out", s, epic.collect_sink())
    with pytest.raises(InputError, match=r"line 2"):
        epic.run(t)
    t = epic.Topology("csv2")
    s = t.source("s", epic.csv_source(p, SCH, time="ts", unit="ms", mode="lenient",
                                      dead_letter=tmp_path / "bad.csv"))
    t.sink("out", s, epic.collect_sink())
    console_out = io.StringIO()
    from rich.console import Console
    res = epic.run(t, summary=True, console=Console(file=console_out, width=120))
    assert res.collected["out"].column("ts").to_pylist() == [1, 3]
    assert sum(res.nodes["s"].extra["bad_lines"].values()) == 1
    assert "1 bad line(s)" in console_out.getvalue()
    assert (tmp_path / "bad.csv").exists()


def test_csv_sink_exact_columns_and_formatting(tmp_path):
    """The CSV sink writes the chosen columns in order, integers exact, floats as asked."""
    t = epic.Topology("fmt")
    s = t.source("s", epic.iterator_source([{"sid": 1, "ts": 10753295594424116, "v": 1 / 3}],
                                           schema=SCH, time="ts", unit="ps"))
    t.sink("out", s, epic.csv_sink(tmp_path / "o.csv", columns=["ts", "sid", "v"],
                                   float_format=".4f", header=False))
    epic.run(t)
    assert (tmp_path / "o.csv").read_text() == "10753295594424116,1,0.3333\n"


def test_a_second_run_into_a_written_topic_is_refused_before_it_runs(tmp_path):
    """epic run into a topic that already holds the node's output from an earlier run: refused
    (an OutputError naming the sink, the path and the fix) before any node runs, the topic left
    as it was; another node (producer) may still write to it."""
    from epic.errors import OutputError
    from epic.topics import Topic

    def topo(sink_name, out):
        t = epic.Topology("w")
        s = t.source("s", epic.iterator_source(events(20), schema=SCH, time="ts", unit="ms"))
        t.sink(sink_name, s, epic.topic_sink(tmp_path / "topic"))
        t.sink("mark", s, epic.csv_sink(out))
        return t

    epic.run(topo("tp", tmp_path / "a.csv"))
    before = sorted(s.seq for s in Topic.open(tmp_path / "topic").segments())
    with pytest.raises(OutputError, match=r"topic: sink 'tp': the topic already holds \d+ "
                                          r"batch\(es\) of node 'tp' from an earlier run.*Fix: "
                                          r"delete the topic directory"):
        epic.run(topo("tp", tmp_path / "b.csv"))
    assert not (tmp_path / "b.csv").exists()
    assert sorted(s.seq for s in Topic.open(tmp_path / "topic").segments()) == before
    epic.run(topo("tp2", tmp_path / "c.csv"))   # another producer of the same topic


def test_parquet_and_topic_round_trip(tmp_path):
    """Parquet and topic sinks feed Parquet and topic sources with the same rows."""
    rows = events(50)
    t = epic.Topology("w")
    s = t.source("s", epic.iterator_source(rows, schema=SCH, time="ts", unit="ms"))
    t.sink("pq", s, epic.parquet_sink(tmp_path / "o.parquet"))
    t.sink("topic", s, epic.topic_sink(tmp_path / "topic"))
    epic.run(t)
    assert pq.read_table(tmp_path / "o.parquet").to_pylist() == rows
    t2 = epic.Topology("r")
    a = t2.source("a", epic.parquet_source(tmp_path / "o.parquet", time="ts", unit="ms"))
    b = t2.source("b", epic.topic_source(tmp_path / "topic"))
    assert b.unit == "ms" and b.time == "ts"
    t2.sink("ca", a, epic.collect_sink())
    t2.sink("cb", b, epic.collect_sink())
    res = epic.run(t2)
    assert res.collected["ca"].to_pylist() == rows == res.collected["cb"].to_pylist()
    from epic.topics import Topic
    assert Topic.open(tmp_path / "topic").status().eos


def _encodings(path) -> dict:
    """Column name -> the encodings of its first row group's chunk."""
    md = pq.ParquetFile(path).metadata
    g = md.row_group(0)
    return {g.column(i).path_in_schema: set(g.column(i).encodings) for i in range(g.num_columns)}


def test_parquet_sink_options_reach_the_writer(tmp_path):
    """pyarrow's defaults (every column dictionary-encoded, Snappy) unless ``options`` say
    otherwise (here: dictionary for ``sid`` only, zstd); the rows are the same."""
    rows = events(300)
    t = epic.Topology("w")
    s = t.source("s", epic.iterator_source(rows, schema=SCH, time="ts", unit="ms"))
    t.sink("pq", s, epic.parquet_sink(tmp_path / "o.parquet"))
    t.sink("pq2", s, epic.parquet_sink(tmp_path / "o2.parquet",
                                       options={"use_dictionary": ["sid"], "compression": "zstd"}))
    epic.run(t)
    enc = _encodings(tmp_path / "o.parquet")
    assert set(enc) == set(SCH) and all("RLE_DICTIONARY" in e for e in enc.values()), enc
    enc2 = _encodings(tmp_path / "o2.parquet")
    for name, e in enc2.items():
        assert ("RLE_DICTIONARY" in e) == (name == "sid"), (name, e)
    g = pq.ParquetFile(tmp_path / "o.parquet").metadata.row_group(0)
    g2 = pq.ParquetFile(tmp_path / "o2.parquet").metadata.row_group(0)
    assert (g.column(0).compression, g2.column(0).compression) == ("SNAPPY", "ZSTD")
    assert pq.read_table(tmp_path / "o.parquet").to_pylist() == rows
    assert pq.read_table(tmp_path / "o2.parquet").to_pylist() == rows


def _max_def_levels(path) -> dict:
    """Column name -> its Parquet definition level (0: REQUIRED, 1: OPTIONAL)."""
    sch = pq.ParquetFile(path).schema
    return {sch.column(i).name: sch.column(i).max_definition_level for i in range(len(sch))}


def test_parquet_sink_required_columns_are_written_without_definition_levels(tmp_path):
    """``required=True``: every column (the delay columns too) REQUIRED, read back not nullable;
    ``required=[...]``: those only; the rows are those of the stream either way."""
    rows = events(300)
    t = epic.Topology("w", delay_logging=True)
    s = t.source("s", epic.iterator_source(rows, schema=SCH, time="ts", unit="ms"))
    t.sink("all", s, epic.parquet_sink(tmp_path / "all.parquet", delays=True, required=True))
    t.sink("some", s, epic.parquet_sink(tmp_path / "some.parquet", columns=["ts", "v"],
                                        required=["v"]))
    t.sink("none", s, epic.parquet_sink(tmp_path / "none.parquet"))
    epic.run(t)
    assert _max_def_levels(tmp_path / "all.parquet") == {
        "entry_time": 0, "write_time": 0, "sid": 0, "ts": 0, "v": 0}
    assert _max_def_levels(tmp_path / "some.parquet") == {"ts": 1, "v": 0}
    assert set(_max_def_levels(tmp_path / "none.parquet").values()) == {1}
    got = pq.read_table(tmp_path / "all.parquet")
    assert not any(f.nullable for f in got.schema)
    assert got.select(["sid", "ts", "v"]).to_pylist() == rows
    assert pq.read_table(tmp_path / "some.parquet").to_pylist() == [
        {"ts": r["ts"], "v": r["v"]} for r in rows]
    assert pq.read_table(tmp_path / "none.parquet").to_pylist() == rows


def test_parquet_groups_are_whole_row_groups_whatever_the_batches(tmp_path):
    """Batches of any size become row groups of PARQUET_GROUP_ROWS rows (the rest carried to
    the next), not a full group and a short one per table that crossed the limit; the rows
    and their order are kept."""
    import numpy as np

    from epic.sinks import PARQUET_GROUP_ROWS, ParquetGroups

    schema = pa.schema([("ts", pa.int64()), ("v", pa.int32())])
    n, start = 0, 0
    with pq.ParquetWriter(tmp_path / "o.parquet", schema) as w, ParquetGroups(w, schema) as g:
        for size in (700_000, 1, 650_000, 1_200_000, 3, 0, 400_000):
            ts = np.arange(start, start + size, dtype=np.int64)
            g.write(pa.record_batch([pa.array(ts), pa.array((ts % 7).astype(np.int32))],
                                    schema=schema))
            start += size
            n += size
    meta = pq.ParquetFile(tmp_path / "o.parquet").metadata
    sizes = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
    assert sizes == [PARQUET_GROUP_ROWS] * (n // PARQUET_GROUP_ROWS) + [n % PARQUET_GROUP_ROWS]
    got = pq.read_table(tmp_path / "o.parquet")
    assert got.column("ts").to_numpy().tolist() == list(range(n))


def test_a_null_in_a_required_parquet_column_stops_the_run_naming_file_and_column(tmp_path):
    rows = events(20)
    rows[13]["v"] = None
    t = epic.Topology("w")
    s = t.source("s", epic.iterator_source(rows, schema=SCH, time="ts", unit="ms"))
    t.sink("pq", s, epic.parquet_sink(tmp_path / "o.parquet", required=True))
    with pytest.raises(epic.errors.EpicError,
                       match=r"o\.parquet.*column 'v' holds 1 nulls.*required.*Fix: leave the "
                             r"column out of required="):
        epic.run(t)
    assert not (tmp_path / "o.parquet").exists()   # a run's file is complete or absent
    # the same rows without required: the null is written as a null
    t = epic.Topology("w")
    s = t.source("s", epic.iterator_source(rows, schema=SCH, time="ts", unit="ms"))
    t.sink("pq", s, epic.parquet_sink(tmp_path / "o.parquet", required=["sid", "ts"]))
    epic.run(t)
    assert pq.read_table(tmp_path / "o.parquet").to_pylist() == rows


@pytest.mark.parametrize("required, match", [
    (["nonesuch"], r"required columns \['nonesuch'\] are not written; choose from"),
    (["sid"], r"required columns \['sid'\] are not written"),   # not in columns=
    ("ts", r"required='ts': give True or a list of columns"),
])
def test_parquet_sink_bad_required_columns_are_refused_when_built(tmp_path, required, match):
    t = epic.Topology("w")
    s = t.source("s", epic.iterator_source(events(3), schema=SCH, time="ts", unit="ms"))
    with pytest.raises((epic.errors.SpecError, epic.errors.TopologyError), match=match):
        t.sink("pq", s, epic.parquet_sink(tmp_path / "o.parquet", columns=["ts", "v"],
                                          required=required))
        t.validate()


@pytest.mark.parametrize("options, match", [
    ({"compresion": "zstd"}, r"not accepted by pyarrow.parquet.ParquetWriter"),
    ({"compression": "nonesuch"}, r"not accepted by pyarrow.parquet.ParquetWriter"),
    ({"schema": None}, r"set by the sink itself"),
])
def test_parquet_sink_bad_options_are_refused_when_built(tmp_path, options, match):
    def build():
        t = epic.Topology("w")
        s = t.source("s", epic.iterator_source(events(3), schema=SCH, time="ts", unit="ms"))
        t.sink("pq", s, epic.parquet_sink(tmp_path / "o.parquet", options=options))
        t.validate()
    # a name the sink sets is refused by parquet_sink; the others when the sink node is built
    with pytest.raises(epic.errors.SpecError if "sink itself" in match
                       else epic.errors.TopologyError, match=match):
        build()
    assert not (tmp_path / "o.parquet").exists()


def test_user_function_errors_name_the_node():
    """A failing map names the node, the function and the batch."""
    def explode(b):
        raise RuntimeError("nope")
    t = epic.Topology("e")
    s = t.source("s", epic.iterator_source(events(5), schema=SCH, time="ts", unit="ms"))
    m = t.map("boom", s, explode, schema=SCH)
    t.sink("out", m, epic.collect_sink())
    with pytest.raises(NodeFailure, match=r"node 'boom': user function explode raised "
                                          r"RuntimeError: nope \(input batch 1\)"):
        epic.run(t)


def test_an_aggregate_hook_raising_names_the_window_operator_and_the_hook():
    """A user aggregate's hook raising inside a window: the failure names the node, epic's
    operator (not as a user function) and the user's frame that raised (function, file, line)."""
    def add(state, e):
        return state + 1 / 0

    bad = epic.aggregate_function("bad_add", init=lambda: 0, add=add,
                                  remove=lambda s, e: s, replace=True)
    t = epic.Topology("e")
    s = t.source("s", epic.iterator_source(events(5), schema=SCH, time="ts", unit="ms"))
    w = t.window("w", s, epic.tumbling(0.002), aggregates=[epic.agg(bad, "v")], late="drop")
    t.sink("out", w, epic.collect_sink())
    with pytest.raises(NodeFailure, match=r"node 'w': operator WindowOperator\.on_batch raised "
                                          r"ZeroDivisionError: .* raised in add \(.*"
                                          r"test_runner\.py:\d+\)") as info:
        epic.run(t)
    assert "user function" not in str(info.value)


def test_vectorised_and_row_forms_of_map_filter_flat_map_agree():
    """map/filter/flat_map: the per-batch and per-row forms produce the same rows."""
    import pyarrow.compute as pc

    def build(rowwise):
        t = epic.Topology("forms")
        s = t.source("s", epic.iterator_source(events(60), schema=SCH, time="ts", unit="ms",
                                               batch_rows=7))
        if rowwise:
            f = t.filter_rows("f", s, lambda r: r["v"] >= 2)
            m = t.map_rows("m", f, lambda r: {"ts": r["ts"], "w": r["v"] * 2},
                           schema={"ts": "int64", "w": "float64"})
            x = t.flat_map_rows("x", m, lambda r: [r, {"ts": r["ts"], "w": -r["w"]}])
        else:
            f = t.filter("f", s, lambda b: pc.greater_equal(b["v"], 2))
            m = t.map("m", f, lambda b: {"ts": b["ts"], "w": pc.multiply(b["v"], 2.0)})

            def both(b):
                neg = pa.RecordBatch.from_arrays([b["ts"], pc.negate(b["w"])], names=["ts", "w"])
                idx = [j for i in range(b.num_rows) for j in (i, i + b.num_rows)]
                return pa.Table.from_batches([b, neg]).take(pa.array(idx, type=pa.int64()))
            x = t.flat_map("x", m, both)
        t.sink("out", x, epic.collect_sink())
        return epic.run(t).collected["out"].to_pylist()
    assert build(True) == build(False)


def test_progress_and_summary_render(tmp_path):
    """The live progress and the summary table are rendered with rich."""
    from rich.console import Console
    buf = io.StringIO()
    t = epic.Topology("prog")
    s = t.source("s", epic.iterator_source(events(), schema=SCH, time="ts", unit="ms"))
    t.sink("out", s, epic.collect_sink())
    res = epic.run(t, progress=True, summary=True,
                   console=Console(file=buf, width=120, force_terminal=True))
    text = buf.getvalue()
    assert "rows in" in text and "rows/s" in text
    assert res.nodes["s"].rows_out == 200 and res.edges["s"] == 200
    assert '"edges"' in res.to_json()


def test_followed_topic_is_unbounded_and_stops_at_end_of_stream(tmp_path):
    """topic_source(follow=True) is unbounded; it reads until the end-of-stream marker."""
    from epic.topics import Topic
    topic = Topic.create(tmp_path / "t", pa.schema([("ts", pa.int64())]), time_column="ts",
                         time_unit="ms")
    topic.append([pa.record_batch([[1, 2]], names=["ts"])], producer="p", batch_id=0)
    topic.append_marker(producer="p", batch_id=1, watermark=3, eos=True)
    t = epic.Topology("follow")
    s = t.source("s", epic.topic_source(tmp_path / "t", follow=True))
    assert s.bounded is False
    t.sink("out", s, epic.collect_sink())
    assert epic.run(t).collected["out"].column("ts").to_pylist() == [1, 2]


def test_iterator_source_accepts_rows_columns_and_batches():
    """Row dicts, column dicts and batches may be mixed; order is kept."""
    def gen():
        yield {"sid": 0, "ts": 0, "v": 0.5}
        yield {"sid": [1, 1], "ts": [1, 2], "v": [1.5, 2.5]}
        yield pa.RecordBatch.from_pylist([{"sid": 2, "ts": 3, "v": 3.5}])
    t = epic.Topology("it")
    s = t.source("s", epic.iterator_source(gen, schema=SCH, time="ts", unit="s"))
    t.sink("out", s, epic.collect_sink())
    assert epic.run(t).collected["out"].column("ts").to_pylist() == [0, 1, 2, 3]
    with pytest.raises(epic.SpecError, match="one-shot iterator"):
        epic.iterator_source(gen(), schema=SCH, time="ts", unit="s")


def test_iterator_items_that_do_not_fit_are_refused_naming_the_item():
    """An iterator_source item with a fractional float in an integer column (pyarrow would drop
    the fraction) or without an event time is an InputError naming the item and the column."""
    from epic.errors import InputError

    def topo(items):
        t = epic.Topology("it")
        s = t.source("s", epic.iterator_source(items, schema={"sid": "int32", "ts": "int64",
                                                              "v": "float64"},
                                               time="ts", unit="ms", batch_rows=2))
        t.sink("o", s, epic.collect_sink())
        return t

    ok = [{"sid": 1, "ts": 10.0, "v": 1}, {"sid": 2, "ts": 11, "v": 2.5}]
    assert epic.run(topo(ok)).collected["o"].column("ts").to_pylist() == [10, 11]
    with pytest.raises(InputError, match=r"item 2: 20\.999 is not a whole number, and column "
                                          r"'ts' is int64"):
        epic.run(topo(ok + [{"sid": 3, "ts": 20.999, "v": 0.0}]))
    with pytest.raises(InputError, match=r"item 3 has no event time 'ts'"):
        epic.run(topo(ok + [{"sid": 3, "ts": 12, "v": 0.0}, {"sid": 4, "v": 0.0}]))
    # values pyarrow cannot convert at all: NaN or 1e30 as a time, a string as a number
    for j, bad in ((3, {"sid": 4, "ts": float("nan"), "v": 0.0}),
                   (3, {"sid": 4, "ts": 1e30, "v": 0.0}),
                   (2, {"sid": 4, "ts": 12, "v": "x"})):
        items = ok + [{"sid": 3, "ts": 12, "v": 0.0}][:j - 2] + [bad]
        col = "v" if bad["v"] == "x" else "ts"
        with pytest.raises(InputError, match=rf"item {j}: column '{col}' .* cannot hold"):
            epic.run(topo(items))
    # a Decimal or a Fraction with a fraction (pyarrow truncates them too); whole ones are taken
    from decimal import Decimal
    from fractions import Fraction

    for bad, shown in ((Decimal("10.5"), r"Decimal\('10\.5'\)"), (Fraction(21, 2), r"Fraction")):
        with pytest.raises(InputError, match=rf"item 2: {shown}.* is not a whole number, and "
                                             r"column 'sid' is int32"):
            epic.run(topo(ok + [{"sid": bad, "ts": 12, "v": 0.0}]))
    whole = [{"sid": Decimal("3"), "ts": Fraction(12, 1), "v": 0.0}]
    assert epic.run(topo(ok + whole)).collected["o"].column("ts").to_pylist() == [10, 11, 12]
    # a key that is no column (a misspelt name would leave its column null)
    with pytest.raises(InputError, match=r"item 2 has 'value', not a column of the schema "
                                          r"\(sid, ts, v\); fix the key"):
        epic.run(topo(ok + [{"sid": 3, "ts": 12, "value": 0.0}]))


def test_console_rows_stay_one_line(capsys):
    """A tab, line break or backslash inside a value is printed escaped (docs/topologies.md)."""
    t = epic.Topology("con")
    s = t.source("s", epic.iterator_source([{"ts": 1, "s": "two\nlines", "u": "a\tb\\c"}],
                                           schema={"ts": "int64", "s": "string", "u": "string"},
                                           time="ts", unit="s"))
    t.sink("con", s, epic.console_sink())
    epic.run(t)
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("[con]")]
    assert lines == ["[con] ts\ts\tu", "[con] 1\ttwo\\nlines\ta\\tb\\\\c"]


def test_a_parquet_file_without_a_named_column_is_named(tmp_path):
    """parquet_source's schema= or columns= naming a column the file lacks: at build when the
    file is there, else when it is read; the error names the file and its columns."""
    import pyarrow.parquet as pq

    from epic.errors import InputError, SpecError

    p = tmp_path / "in.parquet"
    late = epic.parquet_source(p, time="ts", unit="ms", schema={"ts": "int64", "w": "float64"})
    pq.write_table(pa.table({"ts": [1, 2], "v": [1.0, 2.0]}), p)
    with pytest.raises(SpecError, match=rf"{p} has no column 'w' \(schema= names it\); the "
                                        r"file's columns: ts, v"):
        epic.parquet_source(p, time="ts", unit="ms", schema={"ts": "int64", "w": "float64"})
    with pytest.raises(SpecError, match=r"has no column 'zz' \(columns= names it\)"):
        epic.parquet_source(p, time="ts", unit="ms", columns=["ts", "zz"])
    t = epic.Topology("pq")
    t.sink("o", t.source("s", late), epic.collect_sink())
    with pytest.raises(InputError, match=r"the file has no column 'w'") as info:
        epic.run(t)
    assert info.value.path == str(p)


def test_a_parquet_row_without_event_time_names_the_file_and_row(tmp_path):
    import pyarrow.parquet as pq

    from epic.errors import InputError

    p = tmp_path / "nullts.parquet"
    pq.write_table(pa.table({"ts": pa.array([1, None, 3], pa.int64()), "v": [1.0, 2.0, 3.0]}), p)
    t = epic.Topology("pq")
    t.sink("o", t.source("s", epic.parquet_source(p, time="ts", unit="ms")), epic.collect_sink())
    with pytest.raises(InputError, match=r"row 1 has no event time 'ts'") as info:
        epic.run(t)
    assert info.value.path == str(p)
