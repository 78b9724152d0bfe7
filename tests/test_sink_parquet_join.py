"""A deploy's Parquet sink writer (epic/spark/sink_query.py) without Spark: each commit appends
its micro-batch's parts to a growing file, the end-of-stream commit writes the footer and renames
it to the output (docs/deploy.md, "Parquet parts joined as they commit"). Driven through commits
that die at every step (the disk, before the footer, before the record, between the rename and
the record) and are retried, replays of committed batches and a deploy resumed from the old
layout. The reference is the rows written, in batch and partition order (what epic run writes).
"""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import epic
from epic.spark import sink_query
from sink_writer import sink_writer


class Crash(Exception):
    """Stands for a process killed at a crash point."""


@pytest.fixture
def writer(tmp_path, monkeypatch):
    ends, crash = set(), {}

    def point(name, workdir):
        if crash.get(name):
            crash[name] -= 1
            if not crash[name]:
                raise Crash(name)
    monkeypatch.setattr(sink_query, "crash_point", point)
    w, task = sink_writer(tmp_path, monkeypatch,
                          epic.parquet_sink(str(tmp_path / "out" / "o.parquet")), ends)
    return SimpleNamespace(w=w, task=task, path=tmp_path / "out" / "o.parquet", ends=ends,
                           crash=crash, meta=tmp_path / "out" / "o.parquet.epic")


def _batch(fx, b, parts):
    return [fx.task(b, i, vals) for i, vals in enumerate(parts)]


def _rows(batches):
    return [{"ts": x, "v": 7 * x} for parts in batches for vals in parts for x in vals]


def _record(fx):
    return json.loads((fx.meta / "commit.json").read_text())


def _leftovers(fx):
    """Files in the sink's directory besides the record and what the record needs."""
    parts = sorted(os.listdir(fx.meta / "parts")) if (fx.meta / "parts").is_dir() else []
    rest = sorted(n for n in os.listdir(fx.meta) if n not in ("commit.json", "parts", "_tmp",
                                                             "write.lock"))
    return parts, rest


def test_commits_append_to_one_file_and_the_end_renames_it(writer):
    fx = writer
    done = []
    for b, parts in enumerate([[[1, 2, 3], [4]], [[], [5, 6]], [[7]], [[], []]]):
        fx.w.commit(_batch(fx, b, parts), b)
        done.append(parts)
        rec = _record(fx)
        assert rec["batch"] == b and rec["rows"] == len(_rows(done)) and not rec["eos"]
        # the joined parts are gone; the growing file and one footer remain
        assert _leftovers(fx) == ([], ["joined.d1.b%d.footer" % rec["joined"]["batch"],
                                       "joined.d1.parquet"])
        assert os.path.getsize(fx.meta / "joined.d1.parquet") == rec["joined"]["length"]
        assert not fx.path.exists()
    assert _record(fx)["joined"]["batch"] == 2   # batch 3 had no rows: nothing appended
    fx.ends.add(4)
    fx.w.commit(_batch(fx, 4, [[8, 9], [10]]), 4)
    done.append([[8, 9], [10]])
    rec = _record(fx)
    assert rec["eos"] and rec["join"] == "copy" and rec["rows"] == 10
    assert pq.read_table(fx.path).to_pylist() == _rows(done)
    assert pq.ParquetFile(fx.path).metadata.num_row_groups == 6
    assert _leftovers(fx) == ([], [])
    # a replay of the committed end changes nothing
    fx.w.commit(_batch(fx, 4, [[8, 9], [10]]), 4)
    assert pq.read_table(fx.path).to_pylist() == _rows(done)


def test_parts_are_not_fsynced_the_joined_file_is(writer, monkeypatch):
    """A task's part need not reach the disk (the commit copies it and fsyncs the copy; a
    crash before the commit replays the batch): its write fsyncs nothing, the commit fsyncs
    the joined file."""
    synced = []

    def fsync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
    monkeypatch.setattr(os, "fsync", fsync)
    fx = writer
    msgs = _batch(fx, 0, [[1, 2], [3]])
    assert all(m.path and os.path.exists(m.path) for m in msgs)
    assert not [p for p in synced if p.endswith(".parquet") or p.endswith(".tmp")], synced
    fx.w.commit(msgs, 0)
    assert str(fx.meta / "joined.d1.parquet") in synced, synced


def test_required_columns_stay_required_through_parts_and_joins(tmp_path, monkeypatch):
    """A sink's REQUIRED columns (``required=True``): every task's part and the joined file
    have them, and the joined rows are the parts' in order."""
    ends = set()
    w, task = sink_writer(tmp_path, monkeypatch, epic.parquet_sink(
        str(tmp_path / "out" / "o.parquet"), required=True), ends)
    batches = [[[1, 2, 3], [4]], [[5], []], [[6, 7], [8]]]
    for b, parts in enumerate(batches):
        if b == len(batches) - 1:
            ends.add(b)
        w.commit([task(b, i, vals) for i, vals in enumerate(parts)], b)
    path = tmp_path / "out" / "o.parquet"
    assert pq.read_table(path).to_pylist() == _rows(batches)
    sch = pq.ParquetFile(path).schema
    assert [sch.column(i).max_definition_level for i in range(len(sch))] == [0, 0]
    assert not any(f.nullable for f in pq.read_schema(path))


@pytest.mark.parametrize("where", ["parquet-commit", "footer", "record", "parquet-final",
                                   "end-record"])
def test_a_commit_that_dies_anywhere_is_retried_to_the_same_file(writer, monkeypatch, where):
    """The batch's tasks run again (rewriting their parts under the same names) and the commit
    is retried: the file holds every row once, in order."""
    fx = writer
    b0, b1, b2 = [[1, 2], [3]], [[4], [5, 6]], [[7, 8, 9], []]
    fx.w.commit(_batch(fx, 0, b0), 0)
    fx.ends.add(2)
    last = 2 if where in ("parquet-final", "end-record") else 1
    fx.w.commit(_batch(fx, 1, b1), 1) if last == 2 else None
    if where in ("parquet-commit", "parquet-final"):
        fx.crash[where] = 1
    else:
        real = {"footer": sink_query.atomic_write, "record": sink_query._write_sidecar,
                "end-record": sink_query._write_sidecar}[where]
        name = "atomic_write" if where == "footer" else "_write_sidecar"

        def dies(*a, **k):
            monkeypatch.setattr(sink_query, name, real)
            if where == "footer":
                real(*a, **k)   # written, then the process dies before the record
            raise Crash(where)
        monkeypatch.setattr(sink_query, name, dies)
    batch = b1 if last == 1 else b2
    with pytest.raises(Crash):
        fx.w.commit(_batch(fx, last, batch), last)
    if where == "parquet-final":
        assert fx.path.exists() and not (fx.meta / "joined.d1.parquet").exists()
    fx.w.commit(_batch(fx, last, batch), last)
    if last == 1:
        fx.w.commit(_batch(fx, 2, b2), 2)
    assert pq.read_table(fx.path).to_pylist() == _rows([b0, b1, b2])
    rec = _record(fx)
    assert rec["batch"] == 2 and rec["eos"] and rec["rows"] == 9 and rec["join"] == "copy"
    assert _leftovers(fx) == ([], [])


def test_a_failed_append_is_cut_back_on_the_retry(writer, monkeypatch):
    from epic import parquetcat
    from epic.errors import OutputError

    fx = writer
    fx.w.commit(_batch(fx, 0, [[1, 2]]), 0)
    size = os.path.getsize(fx.meta / "joined.d1.parquet")
    real = parquetcat.copy_into
    calls = []

    def half(dst, src, start=0, length=None):
        calls.append(src)
        if len(calls) == 2:      # the second part: half of it, then the disk is full
            dst.write(b"x" * 100)
            raise OSError(28, "No space left on device")
        return real(dst, src, start, length)
    monkeypatch.setattr(parquetcat, "copy_into", half)
    with pytest.raises(OutputError, match="cannot commit micro-batch 1"):
        fx.w.commit(_batch(fx, 1, [[3], [4, 5]]), 1)
    assert os.path.getsize(fx.meta / "joined.d1.parquet") > size
    assert _record(fx)["joined"]["length"] == size
    monkeypatch.setattr(parquetcat, "copy_into", real)
    fx.ends.add(1)
    fx.w.commit(_batch(fx, 1, [[3], [4, 5]]), 1)
    assert pq.read_table(fx.path).to_pylist() == _rows([[[1, 2]], [[3], [4, 5]]])


def test_parts_left_by_the_old_layout_are_joined_first(writer):
    """A deploy resumed after an upgrade: its committed batches' parts were kept for the join
    at the end (no "joined" in the record); the next commit joins them, then its own."""
    fx = writer
    fx.w.commit(_batch(fx, 0, [[1], [2, 3]]), 0)
    fx.w.commit(_batch(fx, 1, [[4]]), 1)
    # rebuild the old state: parts of batches 0 and 1 on disk, a record without "joined"
    rec = _record(fx)
    os.remove(fx.meta / "joined.d1.parquet")
    for n in os.listdir(fx.meta):
        if n.endswith(".footer"):
            os.remove(fx.meta / n)
    _batch(fx, 0, [[1], [2, 3]])
    _batch(fx, 1, [[4]])
    del rec["joined"]
    (fx.meta / "commit.json").write_text(json.dumps(rec))
    fx.ends.add(2)
    fx.w.commit(_batch(fx, 2, [[5]]), 2)
    assert pq.read_table(fx.path).to_pylist() == _rows([[[1], [2, 3]], [[4]], [[5]]])
    assert _leftovers(fx) == ([], [])


def test_no_rows_at_all_gives_a_file_with_the_schema(writer):
    fx = writer
    fx.w.commit(_batch(fx, 0, [[]]), 0)
    fx.ends.add(1)
    fx.w.commit(_batch(fx, 1, [[], []]), 1)
    t = pq.read_table(fx.path)
    assert t.num_rows == 0 and t.schema.names == ["ts", "v"]
    assert _record(fx)["join"] == "reencode"


def test_parts_that_cannot_be_joined_stop_the_joining_and_are_reencoded(writer, monkeypatch):
    from epic import parquetcat

    fx = writer
    fx.w.commit(_batch(fx, 0, [[1, 2]]), 0)
    real = sink_query.append_parquet

    def refuse(*a, **k):
        raise parquetcat.NotConcatenable("a page index")
    monkeypatch.setattr(sink_query, "append_parquet", refuse)
    fx.w.commit(_batch(fx, 1, [[3], [4]]), 1)
    rec = _record(fx)
    assert rec["joined"] == {"batch": 0, "length": rec["joined"]["length"], "stopped": True}
    assert len(_leftovers(fx)[0]) == 2      # batch 1's parts wait for the end
    monkeypatch.setattr(sink_query, "append_parquet", real)
    fx.ends.add(2)
    fx.w.commit(_batch(fx, 2, [[5]]), 2)
    assert pq.read_table(fx.path).to_pylist() == _rows([[[1, 2]], [[3], [4]], [[5]]])
    assert _record(fx)["eos"]
    assert _leftovers(fx) == ([], [])


def test_temps_of_attempts_that_died_are_swept_by_a_later_commit(writer):
    """A killed task leaves its temp file in ``_tmp`` under a name no retry writes again; the
    commit of a later micro-batch deletes the temps of the batches before it, not its own."""
    fx = writer
    fx.w.commit(_batch(fx, 0, [[1]]), 0)
    tmp = fx.meta / "_tmp"
    tmp.mkdir(exist_ok=True)
    dead = [tmp / "b000000000001.p00001.4f2a.csv", tmp / ".b000000000001.p00000.d1.parquet.9c.tmp"]
    live = tmp / ".b000000000002.p00000.d1.parquet.77.tmp"
    for p in dead + [live]:
        p.write_bytes(b"x")
    fx.w.commit(_batch(fx, 1, [[2]]), 1)
    assert all(p.exists() for p in dead) and live.exists()   # batch 1's own: not yet
    fx.w.commit(_batch(fx, 2, [[3]]), 2)
    assert not any(p.exists() for p in dead) and live.exists()
