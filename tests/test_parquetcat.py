"""epic.parquetcat: Parquet files joined byte for byte equal the decoded tables concatenated
(the reference decodes every file with pyarrow), and files it cannot join exactly are refused
before anything is written."""

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings, strategies as st

from epic.parquetcat import NotConcatenable, append_parquet, concat_parquet, decode_struct, \
    encode_struct, finish_parquet, pack_footer, read_footer, unpack_footer

SCHEMA = pa.schema([
    ("ts", pa.int64()), ("player", pa.string()), ("pct", pa.float64()), ("flag", pa.bool_()),
    ("cells", pa.list_(pa.int32())), ("small", pa.int16()),
], metadata={"epic.event_time": "ts", "epic.time_unit": "ps"})


def _table(rng, n: int, base: int) -> pa.Table:
    cells = [None if k % 5 == 0 else list(range(k % 4)) for k in range(n)]
    pct = rng.random(n)
    return pa.table({
        "ts": np.arange(n, dtype=np.int64) + base,
        "player": pa.array([None if k % 11 == 0 else f"p{k % 17}" for k in range(n)]),
        "pct": pa.array(pct, mask=pct < 0.05),
        "flag": rng.random(n) > 0.5,
        "cells": pa.array(cells, pa.list_(pa.int32())),
        "small": rng.integers(-300, 300, n).astype(np.int16),
    }, schema=SCHEMA)


def _write(path, table, group_rows, **kw):
    with pq.ParquetWriter(path, table.schema, **kw) as w:
        if table.num_rows == 0:
            w.write_table(table)
        for s in range(0, table.num_rows, group_rows):
            w.write_table(table.slice(s, group_rows))


@settings(max_examples=25, deadline=None)
@given(sizes=st.lists(st.integers(0, 700), min_size=1, max_size=6),
       group_rows=st.sampled_from([3, 7, 1000, 1 << 20]),
       compression=st.sampled_from(["snappy", "zstd", "none"]),
       seed=st.integers(0, 2**16))
def test_joined_file_equals_the_decoded_tables_concatenated(tmp_path_factory, sizes, group_rows,
                                                            compression, seed):
    d = tmp_path_factory.mktemp("pq")
    rng = np.random.default_rng(seed)
    paths, tables = [], []
    for i, n in enumerate(sizes):
        t = _table(rng, n, i * 10**6)
        p = str(d / f"b{i:04d}.parquet")
        _write(p, t, group_rows, compression=compression)
        paths.append(p)
        tables.append(pq.read_table(p))
    out = str(d / "all.parquet")
    assert concat_parquet(paths, out) == sum(sizes)
    got = pq.read_table(out)
    assert got.equals(pa.concat_tables(tables))
    assert got.schema.metadata == SCHEMA.metadata
    pf = pq.ParquetFile(out)
    assert pf.metadata.num_rows == sum(sizes)
    # every row group readable on its own, in order, with its statistics
    groups = [pf.read_row_group(g) for g in range(pf.num_row_groups)]
    assert pa.concat_tables(groups).equals(got) if groups else got.num_rows == 0
    assert pf.num_row_groups == sum(pq.ParquetFile(p).num_row_groups for p in paths)


@settings(max_examples=20, deadline=None)
@given(sizes=st.lists(st.integers(0, 800), min_size=1, max_size=6),
       cuts=st.lists(st.integers(1, 3), min_size=1, max_size=6),
       failed=st.integers(0, 5), seed=st.integers(0, 2**16))
def test_appending_in_steps_gives_the_bytes_of_one_join(tmp_path_factory, sizes, cuts, failed,
                                                        seed):
    """A growing file joined a few files per commit, its footer kept between commits as
    pack_footer's bytes, and one commit that died half-way and was repeated (its bytes after the
    recorded length are cut), ends as the same bytes as concat_parquet of all the files."""
    d = tmp_path_factory.mktemp("grow")
    rng = np.random.default_rng(seed)
    paths = []
    for i, n in enumerate(sizes):
        p = str(d / f"b{i:04d}.parquet")
        _write(p, _table(rng, n, i * 10**6), 300)
        paths.append(p)
    whole = str(d / "whole.parquet")
    concat_parquet(paths, whole)
    grow, length, kept, at, step = str(d / "grow.parquet"), 0, None, 0, 0
    while at < len(paths):
        batch = paths[at:at + cuts[step % len(cuts)]]
        meta = None if kept is None else unpack_footer(kept)
        if step == failed:   # dies after appending: the next attempt starts from the record
            append_parquet(grow, length, meta, batch)
            meta = None if kept is None else unpack_footer(kept)
        length, meta = append_parquet(grow, length, meta, batch)
        kept = pack_footer(meta)
        at, step = at + len(batch), step + 1
    assert finish_parquet(grow, length, unpack_footer(kept)) == sum(sizes)
    assert open(grow, "rb").read() == open(whole, "rb").read()


def test_statistics_still_prune_after_the_join(tmp_path):
    rng = np.random.default_rng(3)
    paths = []
    for i in range(3):
        p = str(tmp_path / f"{i}.parquet")
        _write(p, _table(rng, 1000, i * 10**6), 250)
        paths.append(p)
    out = str(tmp_path / "all.parquet")
    concat_parquet(paths, out)
    got = pq.read_table(out, filters=[("ts", ">=", 2 * 10**6), ("ts", "<", 2 * 10**6 + 10)])
    assert got.column("ts").to_pylist() == list(range(2 * 10**6, 2 * 10**6 + 10))
    stats = [pq.ParquetFile(out).metadata.row_group(g).column(0).statistics.min
             for g in range(12)]
    assert stats == [i * 10**6 + 250 * k for i in range(3) for k in range(4)]


def test_the_footer_codec_gives_the_same_bytes_back(tmp_path):
    p = str(tmp_path / "x.parquet")
    _write(p, _table(np.random.default_rng(0), 3000, 0), 1000)
    meta, start, size = read_footer(p)
    raw = open(p, "rb").read()[start:size - 8]
    assert encode_struct(decode_struct(raw)) == raw
    # long field deltas, negative numbers, big lists, maps and bools round-trip too
    fields = [[1, 5, -7], [40, 6, -(2**62)], [41, 9, (5, list(range(-20, 20)))],
              [42, 11, (8, 6, [(b"k", 1), (b"l", -2)])], [43, 1, True], [44, 2, False],
              [45, 12, [[1, 8, b"x" * 300]]], [46, 9, (1, [1, 2, 1])]]
    assert decode_struct(encode_struct(fields)) == fields


def _refused(tmp_path, paths, match):
    out = str(tmp_path / "out.parquet")
    with pytest.raises(NotConcatenable, match=match):
        concat_parquet(paths, out)
    assert not os.path.exists(out)


def test_files_it_cannot_join_exactly_are_refused_before_writing(tmp_path):
    rng = np.random.default_rng(1)
    a, b, c, e = (str(tmp_path / f"{n}.parquet") for n in "abce")
    _write(a, _table(rng, 100, 0), 50)
    _write(b, _table(rng, 100, 0).drop_columns(["small"]), 50)
    _write(c, _table(rng, 100, 0), 50, write_page_index=True)
    other = _table(rng, 100, 0)
    _write(e, other.replace_schema_metadata({"x": "y"}), 50)
    _refused(tmp_path, [a, b], "schema")
    _refused(tmp_path, [a, c], "page index")
    _refused(tmp_path, [a, e], "key-value metadata")
    bad = str(tmp_path / "bad.parquet")
    open(bad, "wb").write(b"PAR1 not a footer PARE")
    _refused(tmp_path, [a, bad], "not a plain Parquet file")
    _refused(tmp_path, [], "no files")


def test_offsets_are_shifted_but_a_zero_file_offset_stays_zero(tmp_path):
    """pyarrow writes the deprecated ColumnChunk.file_offset as 0 ("no metadata outside the
    footer"): the join keeps it 0 while every page offset moves with its file's bytes."""
    rng = np.random.default_rng(4)
    paths = []
    for i in range(2):
        p = str(tmp_path / f"{i}.parquet")
        _write(p, _table(rng, 500, i), 500)
        paths.append(p)
    out = str(tmp_path / "all.parquet")
    concat_parquet(paths, out)
    first = pq.ParquetFile(paths[0]).metadata.row_group(0).column(0)
    joined = pq.ParquetFile(out).metadata
    second = joined.row_group(1).column(0)
    assert second.data_page_offset > first.data_page_offset + first.total_compressed_size
    meta, _, _ = read_footer(out)
    groups = [f for f in meta if f[0] == 4][0][2][1]
    offsets = [f[2] for rg in groups for cc in [f for f in rg if f[0] == 1][0][2][1]
               for f in cc if f[0] == 2]
    assert offsets and set(offsets) == {0}


def test_a_footer_that_does_not_decode_is_refused(tmp_path):
    good = str(tmp_path / "good.parquet")
    _write(good, _table(np.random.default_rng(5), 100, 0), 100)
    raw = open(good, "rb").read()
    n = int.from_bytes(raw[-8:-4], "little")
    bad = str(tmp_path / "bad.parquet")
    # the footer's bytes replaced with a struct that never ends (magic and length intact)
    open(bad, "wb").write(raw[:-8 - n] + b"\x19" * n + raw[-8:])
    _refused(tmp_path, [good, bad], "footer")
