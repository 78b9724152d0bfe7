"""A deploy's CSV sink writer (epic/spark/sink_query.py) without Spark: partition 0 writes its
rows into the output file in place, the others write parts, the driver's commit appends them.
Driven through crashes between a task and its commit, replays of committed batches, aborts and
a commit whose in-place bytes do not follow the committed length. The reference is the rows
written so far, in batch and partition order, under the header (what epic run writes)."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pytest

import epic
from epic.errors import StateError
from epic.spark import sink_query
from sink_writer import TaskCtx, sink_writer


@pytest.fixture
def writer(tmp_path, monkeypatch):
    w, task = sink_writer(tmp_path, monkeypatch, epic.csv_sink(str(tmp_path / "out" / "o.csv")))
    return w, task, tmp_path / "out" / "o.csv"


def _expected(batches):
    lines = ["ts,v"] + [f"{x},{x * 7}" for parts in batches for vals in parts for x in vals]
    return ("\n".join(lines) + "\n").encode()


def test_partition_zero_writes_in_place_and_the_commit_appends_the_others(writer):
    w, task, path = writer
    b0 = [[1, 2, 3], [4, 5]]
    msgs = [task(0, 0, b0[0]), task(0, 1, b0[1])]
    assert msgs[0].path is None and msgs[0].inplace == (len(b"ts,v\n"), path.stat().st_size)
    assert msgs[1].path and os.path.exists(msgs[1].path)
    w.commit(msgs, 0)
    assert path.read_bytes() == _expected([b0])
    assert not os.path.exists(msgs[1].path)
    rec = json.loads((path.parent / "o.csv.epic" / "commit.json").read_text())
    assert rec["batch"] == 0 and rec["length"] == path.stat().st_size and rec["rows"] == 5

    # batch 1: partition 0's first attempt dies before the commit (its rows stay at the end
    # of the file), the replay writes them again after the committed length
    task(1, 0, [90, 91, 92])
    assert path.read_bytes().startswith(_expected([b0])) and path.stat().st_size > rec["length"]
    b1 = [[6], [7, 8]]
    msgs = [task(1, 0, b1[0]), task(1, 1, b1[1])]
    w.commit(msgs, 1)
    assert path.read_bytes() == _expected([b0, b1])

    # a replay of a committed batch writes nothing, and its commit changes nothing
    msgs = [task(1, 0, [66]), task(1, 1, [77])]
    assert msgs[0].inplace is None and msgs[0].rows == 0
    w.commit(msgs, 1)
    assert path.read_bytes() == _expected([b0, b1])

    # an aborted batch's rows stay after the committed ones (abort cuts nothing: another
    # output's failed commit aborts a batch this sink committed already) until the next
    # attempt cuts them; a batch whose partition 0 has no rows then commits the parts alone
    msgs = [task(2, 0, [100, 101])]
    w.abort(msgs, 2)
    assert path.read_bytes().startswith(_expected([b0, b1]))
    w.abort([task(1, 0, [55])], 1)  # a committed batch aborted: nothing is cut
    assert path.read_bytes().startswith(_expected([b0, b1]))
    msgs = [task(2, 0, []), task(2, 1, [9])]
    w.commit(msgs, 2)
    assert path.read_bytes() == _expected([b0, b1, [[], [9]]])


def test_in_place_bytes_that_do_not_follow_the_committed_rows_are_refused(writer):
    w, task, path = writer
    w.commit([task(0, 0, [1])], 0)
    good = path.read_bytes()
    m = task(1, 0, [2, 3])
    wrong = sink_query.part_message(None, 0, m.rows, (m.inplace[0] + 1, m.inplace[1]))
    with pytest.raises(StateError, match="do not follow the committed length"):
        w.commit([wrong], 1)
    # bytes after the task's (another writer's) are refused too, not cut silently
    with open(path, "ab") as f:
        f.write(b"9,63\n")
    with pytest.raises(StateError, match="do not follow the committed length"):
        w.commit([m], 1)
    # a batch with parts but no message from partition 0, whose rows may be in the file
    with pytest.raises(StateError, match="no message from partition 0"):
        w.commit([task(1, 1, [4])], 1)
    # the rerun writes the batch again and commits it
    w.commit([task(1, 0, [2, 3])], 1)
    assert path.read_bytes() == good + b"2,14\n3,21\n"


def test_an_old_deploys_file_is_replaced_by_the_first_in_place_write(writer):
    w, task, path = writer
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"ts,v\n999,0\n" * 100)
    w.commit([task(0, 0, [1, 2])], 0)
    assert path.read_bytes() == _expected([[[1, 2]]])


def test_a_failed_write_is_cut_back_and_names_the_file_and_batch(writer, monkeypatch):
    import errno

    from epic import csvio
    from epic.errors import OutputError

    w, task, path = writer
    w.commit([task(0, 0, [1, 2])], 0)
    good = path.read_bytes()
    real = csvio.CsvWriter.write

    def full(self, data):
        real(self, data)
        self.close()  # the rows reached the file, then the disk is full
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(csvio.CsvWriter, "write", full)
    with pytest.raises(OutputError, match=r"o\.csv: cannot write micro-batch 1: No space left"):
        task(1, 0, [3, 4])
    assert path.read_bytes() == good
    monkeypatch.setattr(csvio.CsvWriter, "write", real)
    w.commit([task(1, 0, [3, 4])], 1)
    assert path.read_bytes() == _expected([[[1, 2]], [[3, 4]]])


def test_an_error_upstream_passes_as_it_is_and_cuts_the_rows_back(writer):
    w, task, path = writer
    w.commit([task(0, 0, [1])], 0)
    good = path.read_bytes()

    def rows():
        yield pa.record_batch({"ts": pa.array([5], pa.int64()), "v": pa.array([35], pa.int64())})
        raise ValueError("a node upstream failed")
    import pyspark

    orig = pyspark.TaskContext.get
    try:
        pyspark.TaskContext.get = staticmethod(lambda: TaskCtx(1, 0))
        with pytest.raises(ValueError, match="a node upstream failed"):
            w.write(rows())
    finally:
        pyspark.TaskContext.get = orig
    assert path.read_bytes() == good


def test_a_parquet_join_takes_this_deploys_parts_only(tmp_path):
    """Parts of an older deploy to the same output are left out of the end-of-stream join;
    parts named without a deploy id (an epic before session 15) count when they are not older
    than the work directory's deploy.json (a deploy resumed across the upgrade)."""
    import time

    parts, wd = tmp_path / "parts", tmp_path / "wd"
    parts.mkdir()
    wd.mkdir()
    old_legacy = parts / "b000000000007.p00000.parquet"
    old_legacy.write_bytes(b"")
    os.utime(old_legacy, (time.time() - 100, time.time() - 100))
    (wd / "deploy.json").write_text("{}")
    for name in ["b000000000001.p00001.d1.parquet", "b000000000001.p00000.d1.parquet",
                 "b000000000000.p00003.d0.parquet", "b000000000002.p00000.parquet",
                 "b000000000010.p00000.d1.parquet"]:
        (parts / name).write_bytes(b"")
    got = [os.path.basename(p) for p in sink_query._own_parts(str(parts), "d1", str(wd))]
    assert got == ["b000000000001.p00000.d1.parquet", "b000000000001.p00001.d1.parquet",
                   "b000000000002.p00000.parquet", "b000000000010.p00000.d1.parquet"]
