"""Tests of epic.csvio: exact values, exact line numbers, strict and lenient bad-input handling."""

from __future__ import annotations

import csv
import gzip
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from epic import csvio
from epic.csvio import CsvWriter, read_csv_batches, write_csv
from epic.errors import InputError, OutputError, SpecError

SCHEMA = pa.schema([
    pa.field("sid", pa.int32(), nullable=False),
    pa.field("ts", pa.int64(), nullable=False),
    pa.field("x", pa.int32(), nullable=False),
])
GOOD = "4,10753295594424116,100\n"


def _write(tmp_path: Path, text: str | bytes, name: str = "in.csv") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def _rows(reader) -> list[tuple]:
    return [row for batch in reader for row in zip(*batch.to_pydict().values())]


def _dead_letter(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_big_int64_timestamps_are_exact(tmp_path):
    """Timestamps above 2^53 come back bit-exact, never rounded through a float."""
    values = [2**53 + 1, 10753295594424117, 14879639146403495, 2**63 - 1, -(2**63)]
    path = _write(tmp_path, "".join(f"1,{v},0\n" for v in values))
    batches = list(read_csv_batches(path, SCHEMA))
    assert batches[0].schema == SCHEMA
    assert [r[1] for r in _rows(batches)] == values
    assert float(2**53 + 1) != 2**53 + 1  # the values above would not survive a float


def test_schema_is_exact_and_batches_have_batch_rows(tmp_path):
    """Every batch has the given schema; all but the last have exactly batch_rows rows."""
    path = _write(tmp_path, "".join(f"{i % 100},{10**16 + i},{i}\n" for i in range(2500)))
    reader = read_csv_batches(path, SCHEMA, batch_rows=1000, block_size=4096)
    batches = list(reader)
    assert [b.num_rows for b in batches] == [1000, 1000, 500]
    assert all(b.schema == SCHEMA for b in batches)
    assert [r[2] for r in _rows(batches)] == list(range(2500))
    assert (reader.stats.rows, reader.stats.lines, reader.stats.bad_total) == (2500, 2500, 0)


BAD_CASES = [
    # (file text, line, reason, field, value)
    (GOOD + GOOD + "4,10753295594424116\n" + GOOD, 3, csvio.COLUMN_COUNT, None, None),
    (GOOD + GOOD + "4,10753295594424116,1,2\n", 3, csvio.COLUMN_COUNT, None, None),
    (GOOD + "4,10753295594424116,12a\n" + GOOD, 2, csvio.INVALID_VALUE, "x", "12a"),
    (GOOD + "4,1.0753e16,1\n", 2, csvio.INVALID_VALUE, "ts", "1.0753e16"),
    (GOOD + "4.5,1,1\n", 2, csvio.INVALID_VALUE, "sid", "4.5"),
    (GOOD + GOOD + GOOD + "\n" + GOOD, 4, csvio.EMPTY_LINE, None, None),
    (GOOD + "\r\n" + GOOD, 2, csvio.EMPTY_LINE, None, None),
    (GOOD + GOOD + "4,107532955", 3, csvio.TRUNCATED_LINE, None, None),
    (GOOD + "2147483648,1,1\n", 2, csvio.OUT_OF_RANGE, "sid", "2147483648"),
    (GOOD + "4,1,-2147483649\n", 2, csvio.OUT_OF_RANGE, "x", "-2147483649"),
    (GOOD + "4,9223372036854775808,1\n", 2, csvio.OUT_OF_RANGE, "ts", "9223372036854775808"),
    (GOOD + "4,,1\n", 2, csvio.MISSING_VALUE, "ts", ""),
    (GOOD.encode() + b"4,1,\xff\n", 2, csvio.INVALID_UTF8, None, None),
    # pyarrow reads hexadecimal integers (and wraps 0xff into -1 in an int8)
    (GOOD + "0xff,1,1\n" + GOOD, 2, csvio.INVALID_VALUE, "sid", "0xff"),
    (GOOD + "4,0X26344A2F8E1FB4,1\n", 2, csvio.INVALID_VALUE, "ts", "0X26344A2F8E1FB4"),
    (GOOD + "4,1,-0x1\n", 2, csvio.INVALID_VALUE, "x", "-0x1"),
    # the file cut off inside a quoted field (pyarrow closes the quote at the end of the data)
    (GOOD + GOOD + '4,10753295594424116,"10', 3, csvio.TRUNCATED_LINE, None, None),
]


@pytest.mark.parametrize(("text", "line", "reason", "field", "value"), BAD_CASES)
def test_strict_stops_at_the_bad_line(tmp_path, text, line, reason, field, value):
    """Strict mode raises InputError naming file, exact line, field and value; earlier rows arrive."""
    path = _write(tmp_path, text)
    reader = read_csv_batches(path, SCHEMA)
    seen = []
    with pytest.raises(InputError) as info:
        for batch in reader:
            seen.extend(batch.column("x").to_pylist())
    err = info.value
    assert (err.path, err.line, err.field, err.value) == (str(path), line, field, value)
    assert str(path) in str(err) and f"line {line}" in str(err) and reason in str(err)
    assert seen == [100] * (line - 1)
    assert reader.stats.bad_lines == {reason: 1}


@pytest.mark.parametrize(("text", "line", "reason", "field", "value"), BAD_CASES)
def test_lenient_sends_the_bad_line_to_the_dead_letter(tmp_path, text, line, reason, field, value):
    """Lenient mode keeps every good row and writes the bad line with its number and reason."""
    path = _write(tmp_path, text)
    dead = tmp_path / "dead.csv"
    reader = read_csv_batches(path, SCHEMA, mode="lenient", dead_letter=dead)
    rows = _rows(reader)
    n_lines = (text if isinstance(text, str) else text.decode("latin-1")).count("\n") + (
        0 if text.endswith("\n" if isinstance(text, str) else b"\n") else 1)
    assert len(rows) == n_lines - 1
    records = _dead_letter(dead)
    assert [(int(r["line"]), r["reason"]) for r in records] == [(line, reason)]
    raw = (text if isinstance(text, str) else text.decode("utf-8", "backslashreplace"))
    assert records[0]["text"] == raw.split("\n")[line - 1].rstrip("\r")
    stats = reader.stats
    assert (stats.rows, stats.lines, dict(stats.bad_lines)) == (n_lines - 1, n_lines, {reason: 1})
    assert stats.dead_letter == str(dead)


def test_lenient_mixed_file_keeps_order_and_counts(tmp_path):
    """Many bad kinds in one file: good rows in order, each bad line once, counts by reason."""
    lines = [f"{i % 100},{10**16 + i},{i}" for i in range(40)]
    lines[3] = "1,2"
    lines[10] = ""
    lines[17] = "1,abc,3"
    lines[25] = "99999999999,1,1"
    lines[39] = "7,10000"  # last line, and the file has no final newline
    path = _write(tmp_path, "\n".join(lines))
    dead = tmp_path / "dead.csv"
    reader = read_csv_batches(path, SCHEMA, mode="lenient", dead_letter=dead)
    assert [r[2] for r in _rows(reader)] == [i for i in range(39) if i not in (3, 10, 17, 25)]
    assert [(int(r["line"]), r["reason"], r["text"]) for r in _dead_letter(dead)] == [
        (4, csvio.COLUMN_COUNT, "1,2"), (11, csvio.EMPTY_LINE, ""),
        (18, csvio.INVALID_VALUE, "1,abc,3"), (26, csvio.OUT_OF_RANGE, "99999999999,1,1"),
        (40, csvio.TRUNCATED_LINE, "7,10000")]
    assert dict(reader.stats.bad_lines) == {csvio.COLUMN_COUNT: 1, csvio.EMPTY_LINE: 1,
                                            csvio.INVALID_VALUE: 1, csvio.OUT_OF_RANGE: 1,
                                            csvio.TRUNCATED_LINE: 1}


def test_line_numbers_exact_across_blocks_and_splits(tmp_path):
    """Bad lines deep inside big blocks (forcing the split-and-retry path) keep exact numbers."""
    n = 60_000
    bad_at = {1, 2047, 2048, 2049, 31_000, 59_999, 60_000}  # 1-based line numbers
    lines = [("9,x,9" if i + 1 in bad_at else f"{i % 50},{2**60 + i},{i}") for i in range(n)]
    path = _write(tmp_path, "\n".join(lines) + "\n")
    for block_size in (1024, 100_000, 16 << 20):
        dead = tmp_path / f"dead{block_size}.csv"
        reader = read_csv_batches(path, SCHEMA, mode="lenient", dead_letter=dead,
                                  block_size=block_size, batch_rows=7777)
        rows = _rows(reader)
        assert [r[2] for r in rows] == [i for i in range(n) if i + 1 not in bad_at]
        assert [r[1] for r in rows][:3] == [2**60 + 1, 2**60 + 2, 2**60 + 3]
        assert [int(r["line"]) for r in _dead_letter(dead)] == sorted(bad_at)
        assert reader.stats.lines == n


def test_header_is_checked_and_counted(tmp_path):
    """A header line counts as line 1 and must equal the schema names."""
    path = _write(tmp_path, "sid,ts,x\r\n" + GOOD + "1,2\r\n")
    with pytest.raises(InputError) as info:
        list(read_csv_batches(path, SCHEMA, header=True))
    assert info.value.line == 3
    wrong = _write(tmp_path, "sid,time,x\n" + GOOD, "wrong.csv")
    with pytest.raises(InputError, match="header") as info:
        list(read_csv_batches(wrong, SCHEMA, header=True))
    assert info.value.line == 1
    empty = _write(tmp_path, "", "empty.csv")
    assert list(read_csv_batches(empty, SCHEMA)) == []
    with pytest.raises(InputError, match="empty"):
        list(read_csv_batches(empty, SCHEMA, header=True))


def test_semicolons_crlf_bom_and_gzip(tmp_path):
    """Delimiter, CRLF endings, a UTF-8 BOM and gzip input all read to the same rows."""
    text = "\ufeff" + "sid;ts;x\r\n4;10753295594424116;1\r\n5;10753295594424117;2\r\n"
    plain = _write(tmp_path, text)
    gz = _write(tmp_path, gzip.compress(text.encode()), "in.csv.gz")
    for path in (plain, gz):
        assert _rows(read_csv_batches(path, SCHEMA, header=True, delimiter=";")) == [
            (4, 10753295594424116, 1), (5, 10753295594424117, 2)]


def test_nullable_columns_accept_empty_fields(tmp_path):
    """An empty field is a null in a nullable column and a missing value otherwise."""
    schema = pa.schema([("a", pa.int64()), ("b", pa.string()), ("c", pa.float64())])
    path = _write(tmp_path, '1,,\n,"x, y",2.5\n')
    assert _rows(read_csv_batches(path, schema)) == [(1, "", None), (None, "x, y", 2.5)]


def test_options_are_validated():
    """Bad options fail when the reader is built, with a message that says how to fix them."""
    with pytest.raises(SpecError, match="dead_letter"):
        read_csv_batches("x.csv", SCHEMA, mode="lenient")
    with pytest.raises(SpecError, match="lenient"):
        read_csv_batches("x.csv", SCHEMA, dead_letter="d.csv")
    with pytest.raises(SpecError, match="mode"):
        read_csv_batches("x.csv", SCHEMA, mode="loose")
    with pytest.raises(SpecError, match="batch_rows"):
        read_csv_batches("x.csv", SCHEMA, batch_rows=0)


# Field texts chosen to sit on the edges of pyarrow's integer parser.
_FIELDS = st.sampled_from(["0", "-0", "7", "-7", " 5", "5 ", "+5", "0x1F", "05", "1.0", "1e3",
                           "", "abc", "2147483647", "2147483648", "-2147483648",
                           "9223372036854775807", "9223372036854775808", "10753295594424116"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(_FIELDS, _FIELDS, _FIELDS), min_size=1, max_size=30))
def test_careful_path_agrees_with_fast_path(tmp_path, rows):
    """Adding one broken line (which forces the careful path) changes nothing about the others."""
    body = "".join(",".join(r) + "\n" for r in rows)
    plain = _write(tmp_path, body, "plain.csv")
    broken = _write(tmp_path, "1,2\n" + body, "broken.csv")
    a = read_csv_batches(plain, SCHEMA, mode="lenient", dead_letter=tmp_path / "a.csv")
    b = read_csv_batches(broken, SCHEMA, mode="lenient", dead_letter=tmp_path / "b.csv")
    assert _rows(a) == _rows(b)
    lines_a = [(int(r["line"]) + 1, r["reason"]) for r in _dead_letter(tmp_path / "a.csv")]
    lines_b = [(int(r["line"]), r["reason"]) for r in _dead_letter(tmp_path / "b.csv")]
    assert lines_b == [(1, csvio.COLUMN_COUNT)] + lines_a


def test_write_csv_exact_order_and_integers(tmp_path):
    """Columns come out in the requested order; big ints keep every digit; floats as asked."""
    table = pa.table({"speed": [1e-7, 12.5], "ts": pa.array([2**53 + 1, 10**18], pa.int64()),
                      "player_id": ["Ben Müller", 'a "b", c']})
    path = tmp_path / "out.csv"
    assert write_csv(path, table, columns=["ts", "player_id", "speed"], float_format=".6f") == 2
    assert path.read_text(encoding="utf-8") == (
        "ts,player_id,speed\n9007199254740993,Ben Müller,0.000000\n"
        '1000000000000000000,"a ""b"", c",12.500000\n')
    with pytest.raises(SpecError, match="not in the data"):
        write_csv(tmp_path / "bad.csv", table, columns=["nope"])


def test_csv_writer_streams_batches_and_reads_back(tmp_path):
    """Batches written one by one read back identically through read_csv_batches."""
    path = tmp_path / "out.csv"
    batch = pa.record_batch([pa.array([1, 2], pa.int32()), pa.array([2**62, 2**62 + 1]),
                             pa.array([-1, 0], pa.int32())], schema=SCHEMA)
    with CsvWriter(path) as writer:
        writer.write(batch)
        writer.write(batch)
    assert writer.rows == 4
    assert _rows(read_csv_batches(path, SCHEMA, header=True)) == [
        (1, 2**62, -1), (2, 2**62 + 1, 0)] * 2
    empty = tmp_path / "empty.csv"
    CsvWriter(empty, columns=["ts", "x"]).close()
    assert empty.read_text() == "ts,x\n"


def test_background_writer_writes_the_same_bytes_and_reports_failures(tmp_path):
    """background=True (used by csv sinks in-process): same file, errors surface on close."""
    from epic.csvio import CsvWriter

    batches = [pa.record_batch({"a": pa.array(list(range(i, i + 50))),
                                "s": pa.array(["x,y" if (i + j) % 17 == 0 else f"v{j}"
                                               for j in range(50)]),
                                "f": pa.array([j / 3 for j in range(50)])}) for i in range(40)]
    paths = {}
    for bg in (False, True):
        paths[bg] = tmp_path / f"bg{bg}.csv"
        w = CsvWriter(paths[bg], columns=["s", "a", "f"], background=bg)
        for b in batches:
            w.write(b)
        w.close()
    assert paths[True].read_bytes() == paths[False].read_bytes()
    assert paths[True].read_text().count("\n") == 1 + 40 * 50
    w = CsvWriter(tmp_path / "missing-dir" / "x.csv", background=True)
    w.write(batches[0])  # the failed open happens on the worker thread
    with pytest.raises(OutputError, match="missing-dir/x.csv: cannot write: No such file"):
        w.close()


# -- numbers formatted once per distinct value (csvio._preformat) ----------------------------------

_POOLS = {
    pa.int8(): [-128, -1, 0, 7, 127],
    pa.int32(): [-2**31, 0, 42, 2**31 - 1],
    pa.int64(): [-2**63, -1, 0, 2**53 + 1, 10**18, 1795607505778862317, 2**63 - 1],
    pa.uint64(): [0, 1, 2**63, 2**64 - 1],
    pa.float32(): [0.0, -0.0, 1.5, 3.4028234663852886e38, 1e-45, float("inf"), float("nan")],
    pa.float64(): [0.0, -0.0, 0.1, 1e-7, 67.57077158957063, 5e-324, 1e300, float("-inf"),
                   float("nan"), 1795607505778862.5],
}


@st.composite
def _numeric_tables(draw):
    n = draw(st.integers(0, 6000))
    cols = {}
    for i, (typ, pool) in enumerate(_POOLS.items()):
        shape = draw(st.sampled_from(["runs", "few", "mixed", "repeats"]))
        seed = draw(st.integers(0, 2**32 - 1))
        rng = np.random.default_rng(seed)
        if shape == "runs":      # long runs of one value (a timestamp, a delay stamp)
            idx = np.sort(rng.integers(0, len(pool), n))
        elif shape == "few":     # few distinct values in any order (heat-map corners)
            idx = rng.integers(0, len(pool), n)
        elif shape == "repeats" and pa.types.is_floating(typ):
            # a value in ~2.5 draws of a pool of 0.4 n (q3's percentages): first rows mostly
            # distinct, the whole column not (an exact count decides)
            m = int(0.4 * n) + 1
            base = np.concatenate([np.array(pool, dtype=typ.to_pandas_dtype()),
                                   rng.standard_normal(m).astype(typ.to_pandas_dtype())])
            arr = pa.array(base[rng.integers(0, len(base), n)], typ)
            idx = None
        else:                    # mostly distinct values: written as they are
            idx = None
        if shape == "repeats" and pa.types.is_floating(typ):
            pass
        elif idx is None:
            if pa.types.is_floating(typ):
                vals = rng.standard_normal(n) * 1e3
                vals[: n // 7] = -0.0
            else:
                info = np.iinfo(typ.to_pandas_dtype())
                vals = rng.integers(info.min, info.max, n, dtype=typ.to_pandas_dtype(),
                                    endpoint=True)
            arr = pa.array(vals, typ)
        else:
            arr = pa.array(np.array(pool, dtype=typ.to_pandas_dtype())[idx], typ)
        cols[f"c{i}"] = arr
    cols["s"] = pa.array([f"p{i % 3}" for i in range(n)])
    cuts = sorted(draw(st.lists(st.integers(0, n), max_size=6)))
    return pa.table(cols), cuts


@given(_numeric_tables(), st.sampled_from([1, 500, csvio._PREFORMAT_MIN_ROWS]),
       st.sampled_from([0, 1000, 1 << 16]), st.booleans())
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_preformatted_numbers_are_the_bytes_pyarrow_writes(tmp_path, data, min_rows, hold,
                                                           background):
    """Whatever the runs, repeats, batch cuts, -0.0 next to 0.0, NaN, infinities and extreme
    integers, held or not, CsvWriter's bytes are pyarrow's plain CSV bytes for the whole table.
    (``min_rows``: the table size from which numbers are preformatted, lowered so that small
    tables take that path too.)"""
    table, cuts = data
    default = csvio._PREFORMAT_MIN_ROWS
    csvio._PREFORMAT_MIN_ROWS = min_rows
    try:
        _check_written_bytes(tmp_path, table, cuts, hold, background)
    finally:
        csvio._PREFORMAT_MIN_ROWS = default


def _check_written_bytes(tmp_path, table, cuts, hold, background):
    import pyarrow.csv as pacsv

    ref = pa.BufferOutputStream()
    pacsv.write_csv(table, ref, write_options=pacsv.WriteOptions(include_header=True,
                                                                 quoting_style="none"))
    path = tmp_path / "pre.csv"
    with CsvWriter(path, hold_rows=hold, background=background) as w:
        for a, b in zip([0] + cuts, cuts + [table.num_rows]):
            if b > a:
                w.write(table.slice(a, b - a))
        if table.num_rows == 0:
            w.write(table)
    expected = ref.getvalue().to_pybytes().replace(b'"', b"")  # header: names unquoted
    assert path.read_bytes() == expected
    assert w.rows == table.num_rows


def test_preformat_formats_each_distinct_value_once():
    """The run and dictionary paths are taken (not only the writer's own formatting)."""
    n = 40_000
    ts = pa.array(np.repeat(np.arange(10, dtype=np.int64) * 10**15, n // 10))
    cell = pa.array(np.tile(np.array([0.0, -0.0, 2.5, 7.25]), n // 4))
    noise = pa.array(np.random.default_rng(1).standard_normal(n))
    out = csvio._preformat(pa.table({"ts": ts, "cell": cell, "noise": noise}))
    assert out.column("ts").type == pa.string()
    assert out.column("cell").type == pa.string()
    assert out.column("cell").to_pylist()[:4] == ["0", "-0", "2.5", "7.25"]
    assert out.column("noise").type == pa.float64()


def test_preformat_counts_a_float_column_whose_first_rows_are_mostly_distinct():
    """A float column whose first rows are mostly but not all distinct is counted over the whole
    table: formatted by dictionary when at most 60 % of its values are distinct (q3's
    percentages), left to the writer when more are (or when its first rows are all distinct)."""
    n = 60_000
    rng = np.random.default_rng(3)
    pool = rng.standard_normal(n // 3)
    repeats = pa.array(pool[rng.integers(0, len(pool), n)])       # ~ 1/3 distinct in all
    head = rng.standard_normal(3000)[rng.integers(0, 3000, 2048)]    # first rows ~ 0.8 distinct
    spread = pa.array(np.concatenate([head, rng.standard_normal(n - 2048)]))
    out = csvio._preformat(pa.table({"repeats": repeats, "spread": spread,
                                     "distinct": pa.array(rng.standard_normal(n))}))
    assert out.column("repeats").type == pa.string()
    assert out.column("repeats").to_pylist() == repeats.cast(pa.string()).to_pylist()
    assert out.column("spread").type == pa.float64()      # ~ 0.99 distinct in all: as is
    assert out.column("distinct").type == pa.float64()


def test_quoting_looks_at_the_bytes_of_a_slice_only(tmp_path):
    """A slice of a column is quoted by its own values: a comma elsewhere in the parent's buffer
    does not matter, one inside the slice does (first, middle and last rows)."""
    parent = pa.table({"name": ["a,b", "c", "d", 'e"f', "g", "h,i"], "n": list(range(6))})
    for start, length, expected in [(1, 2, "c,1\nd,2\n"), (2, 2, 'd,2\n"e""f",3\n'),
                                    (4, 2, 'g,4\n"h,i",5\n'), (0, 1, '"a,b",0\n')]:
        path = tmp_path / f"s{start}.csv"
        with CsvWriter(path, header=False) as w:
            w.write(parent.slice(start, length))
        assert path.read_text() == expected


def test_a_writer_stops_counting_a_float_column_whose_dictionary_does_not_pay(tmp_path,
                                                                              monkeypatch):
    """Counting a float column's distinct values costs as much as formatting it: after a miss
    the writer skips the count for its next tables (1, 2, 4 ... up to 64), and a hit resets the
    skips. The bytes are pyarrow's either way."""
    rng = np.random.default_rng(5)
    n = 20_000
    calls = []
    real = csvio.pc.dictionary_encode
    monkeypatch.setattr(csvio.pc, "dictionary_encode",
                        lambda a, *k, **kw: calls.append(len(a)) or real(a, *k, **kw))

    def table(distinct: bool):
        head = rng.standard_normal(2500)[rng.integers(0, 2500, 2048)]  # ~68 % distinct
        rest = rng.standard_normal(n - 2048) if distinct else \
            rng.standard_normal(50)[rng.integers(0, 50, n - 2048)]
        return pa.table({"pct": np.concatenate([head, rest])})

    kinds = [True] * 12 + [False] + [True] * 3
    tables = [table(d) for d in kinds]
    path = tmp_path / "out.csv"
    with CsvWriter(path, header=False) as w:
        for t in tables:
            w.write(t)
    # counted: table 0 (miss, skip 1), 2 (miss, skip 2), 5 (skip 4), 10 (skip 8: 11-18)...;
    # without the skips every one of the 16 tables would be counted
    assert len(calls) == 4, calls
    ref = pa.BufferOutputStream()
    pacsv.write_csv(pa.concat_tables(tables), ref, write_options=pacsv.WriteOptions(
        include_header=False, quoting_style="none"))
    assert path.read_bytes() == ref.getvalue().to_pybytes()
    # a hit resets the skips: mostly-repeated tables are counted (and formatted by dictionary)
    calls.clear()
    memo = {}
    for d in (True, False, False, False):
        csvio._preformat(table(d), memo)
    assert len(calls) == 3 and memo == {}   # miss, (skip), hit, hit


@pytest.mark.parametrize("schema", [
    SCHEMA,                                                       # non-nullable numbers
    pa.schema([pa.field("name", pa.string(), nullable=False),     # only a string is required
               pa.field("x", pa.int32())]),
    pa.schema([pa.field("x", pa.int32())]),                       # nothing required
], ids=["non-nullable-ints", "non-nullable-string", "all-nullable"])
@pytest.mark.parametrize("where", ["first", "middle", "crlf", "last"])
def test_an_empty_line_is_never_a_row(tmp_path, schema, where):
    """pyarrow reads an empty line as a row of nulls; epic's reader reports it (strict) or sends
    it to the dead letter (lenient) with its line number, whatever the schema's nullability
    (the fast path leaves it to the null check or scans for it)."""
    good = ",".join({"sid": "4", "ts": "10753295594424116", "x": "100", "name": "a"}[f.name]
                    for f in schema) + "\n"
    lines = [good] * 4
    at = {"first": 0, "middle": 2, "crlf": 2, "last": 4}[where]
    lines.insert(at, "\r\n" if where == "crlf" else "\n")
    path = _write(tmp_path, "".join(lines))
    with pytest.raises(InputError, match=f"line {at + 1}: empty_line"):
        list(read_csv_batches(path, schema))
    dead = tmp_path / "dead.csv"
    rows = _rows(read_csv_batches(path, schema, mode="lenient", dead_letter=dead))
    assert len(rows) == 4
    assert [(int(r["line"]), r["reason"]) for r in _dead_letter(dead)] == [(at + 1, "empty_line")]


STRINGS = pa.schema([pa.field("k", pa.int64(), nullable=False),
                     pa.field("ts", pa.int64(), nullable=False), pa.field("s", pa.string())])


@pytest.mark.parametrize("lines", [
    ['1,10,"x', '2,20,y"'],            # both halves parse as rows on their own
    ['1,10,"a', 'b"'],
    ['1,10,"x', '', '2,20,y"'],
])
@pytest.mark.parametrize("before", [0, 3000])   # the careful pass of a small or a split block
def test_a_value_with_a_line_break_is_never_read_as_rows(tmp_path, lines, before):
    """Rows are lines: a quoted field that opens on one line and closes on a later one is a bad
    line (quoted_newline) at the line where it opens, in strict mode an InputError there; never
    two silently misread rows."""
    head = [f"{i},{i},s{i}" for i in range(before)]
    path = _write(tmp_path, "\n".join(head + lines + ["9,99,z"]) + "\n")
    at = before + 1
    with pytest.raises(InputError, match=f"line {at}: quoted_newline"):
        _rows(read_csv_batches(str(path), STRINGS))
    dead = tmp_path / "dead.csv"
    reader = read_csv_batches(str(path), STRINGS, mode="lenient", dead_letter=str(dead))
    rows = _rows(reader)
    bad = [(int(r["line"]), r["reason"]) for r in _dead_letter(dead)]
    assert bad[0] == (at, "quoted_newline")
    assert not any("\n" in (r[2] or "") for r in rows)
    assert rows[-1] == (9, 99, "z") and len(rows) + len(bad) == before + len(lines) + 1


@settings(max_examples=60, deadline=None)
@given(texts=st.lists(st.one_of(st.none(), st.text(alphabet=st.sampled_from(
    list('ab,;"\r\n é')), max_size=6)), min_size=1, max_size=8),
       delimiter=st.sampled_from([",", ";", "\t"]))
def test_written_rows_read_back_with_any_special_character(tmp_path_factory, texts, delimiter):
    """A string holding the delimiter, a quote, \\r or \\n is quoted (quotes doubled), so any CSV
    reader sees one row per table row; the other columns' text is what the unquoted path writes
    for them (pyarrow's formatting: 1e+16, true, 0.1)."""
    d = tmp_path_factory.mktemp("w")
    n = len(texts)
    nums = {"i": pa.array(range(n), pa.int64()),
            "f": pa.array([0.1 * i + 1e16 * (i % 2) for i in range(n)], pa.float64()),
            "b": pa.array([i % 3 == 0 for i in range(n)], pa.bool_())}
    write_csv(d / "q.csv", pa.table({**nums, "s": pa.array(texts, pa.string())}),
              delimiter=delimiter)
    write_csv(d / "plain.csv", pa.table(nums), delimiter=delimiter)
    with open(d / "q.csv", newline="", encoding="utf-8") as f:
        got = list(csv.reader(f, delimiter=delimiter))
    plain = (d / "plain.csv").read_text().splitlines()
    assert len(got) == n + 1 and got[0] == ["i", "f", "b", "s"]
    assert [r[3] for r in got[1:]] == ["" if t is None else t for t in texts]
    assert [delimiter.join(r[:3]) for r in got[1:]] == plain[1:]


def test_hexadecimal_looking_strings_are_read_as_they_are(tmp_path):
    """A block with text like 0x1f in a string column goes the careful way (it might hold a
    hexadecimal integer) and is read exactly, every line a row."""
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("addr", pa.string())])
    lines = [f"{i},{'0x%x' % i if i % 3 else 'plain'}" for i in range(5000)]
    path = _write(tmp_path, "\n".join(lines) + "\n")
    reader = read_csv_batches(path, schema, block_size=4096)
    assert _rows(reader) == [(i, "0x%x" % i if i % 3 else "plain") for i in range(5000)]
    assert (reader.stats.rows, reader.stats.bad_total) == (5000, 0)


@pytest.mark.parametrize(("typ", "text", "ok"), [
    (pa.float64(), "1e400", False), (pa.float64(), "-1.8e308", False),
    (pa.float64(), "1.7976931348623157e308", True), (pa.float64(), "inf", True),
    (pa.float64(), "-Infinity", True), (pa.float32(), "1e39", False),
    (pa.float32(), "3.4028235e38", True), (pa.float32(), "inf", True)])
def test_a_float_too_large_for_its_type_is_out_of_range(tmp_path, typ, text, ok):
    """pyarrow reads a number beyond its float type as inf: that is a bad line (out_of_range),
    while a written inf, and a value that rounds to the largest float, are values."""
    schema = pa.schema([pa.field("ts", pa.int64(), nullable=False), pa.field("x", typ)])
    path = _write(tmp_path, "1,2.5\n" + f"2,{text}\n" + "3,4.5\n")
    if ok:
        rows = _rows(read_csv_batches(path, schema))
        assert [r[0] for r in rows] == [1, 2, 3] and rows[1][1] == pytest.approx(float(text))
        return
    with pytest.raises(InputError, match=rf"line 2, field 'x': out_of_range: {text} is outside"):
        _rows(read_csv_batches(path, schema))
    dead = tmp_path / "dead.csv"
    reader = read_csv_batches(path, schema, mode="lenient", dead_letter=dead)
    assert [r[0] for r in _rows(reader)] == [1, 3]
    assert [(r["line"], r["reason"]) for r in _dead_letter(dead)] == [("2", csvio.OUT_OF_RANGE)]
