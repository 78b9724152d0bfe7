"""epic.directio: direct-I/O appends give the same file as plain writes, at every step."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from epic import directio
from epic.csvio import CsvWriter
from epic.directio import BLOCK, DirectAppender, append_file, open_append


def _direct_ok(path) -> bool:
    try:
        DirectAppender(str(path)).close()
        return True
    except OSError:
        return False


@pytest.fixture
def direct_dir(tmp_path):
    if not directio.enabled() or not _direct_ok(tmp_path / "probe"):
        pytest.skip("no O_DIRECT on this file system")
    return tmp_path


SIZES = st.lists(st.one_of(st.integers(0, 3 * BLOCK),
                           st.integers(directio.MIN_DIRECT - 2, directio.MIN_DIRECT + 3 * BLOCK)),
                 min_size=1, max_size=12)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(head=st.integers(0, 3 * BLOCK), sizes=SIZES, stage=st.sampled_from([BLOCK, 3 * BLOCK, 1 << 20]),
       seed=st.integers(0, 255), flushes=st.lists(st.sampled_from(["write", "flush", "through"]),
                                                  min_size=12, max_size=12),
       lazy=st.booleans())
def test_appends_equal_plain_writes(direct_dir, head, sizes, stage, seed, flushes, lazy):
    """Any mix of small and large writes (staged, or through the cache), after any existing
    length, flushed or not, lazy or not: after every flush and every write_through (not lazy)
    and at close the file is exactly what was written so far
    (the reference: the bytes concatenated), and between them a prefix of it."""
    path = str(direct_dir / f"f{seed}.bin")
    expect = bytes((i * 7 + seed) % 251 for i in range(head))
    with open(path, "wb") as f:
        f.write(expect)
    w = DirectAppender(path, append=True, stage=stage, lazy=lazy)
    assert w.tell() == head
    for k, n in enumerate(sizes):
        chunk = np.random.default_rng(seed * 100 + k).integers(0, 256, n, np.uint8).tobytes()
        how = flushes[k]
        assert (w.write_through(chunk) if how == "through" else w.write(chunk)) == n
        expect += chunk
        assert w.tell() == len(expect)
        if how == "flush":
            w.flush()
        with open(path, "rb") as f:
            got = f.read()
        if how != "write" and not lazy:
            assert got == expect          # a reader sees every byte, and nothing after them
        elif not lazy:
            assert expect.startswith(got)  # no padding, no byte out of place
    w.close()
    assert os.path.getsize(path) == len(expect)
    with open(path, "rb") as f:
        assert f.read() == expect


def test_truncates_without_append(direct_dir):
    path = str(direct_dir / "t.bin")
    with open(path, "wb") as f:
        f.write(b"x" * 10000)
    with DirectAppender(path) as w:
        w.write(b"abc")
    assert open(path, "rb").read() == b"abc"


def test_memoryview_and_pyarrow_buffers(direct_dir):
    path = str(direct_dir / "b.bin")
    data = bytes(range(256)) * 5000
    with DirectAppender(path) as w:
        w.write(pa.py_buffer(data))
        w.write(memoryview(data)[3:700])
    assert open(path, "rb").read() == data + data[3:700]


def test_write_after_close_refused(direct_dir):
    w = DirectAppender(str(direct_dir / "c.bin"))
    w.close()
    w.close()
    with pytest.raises(ValueError):
        w.write(b"x")


def test_falls_back_where_refused(tmp_path, monkeypatch):
    """EPIC_DIRECT_IO=0, or a file system refusing O_DIRECT: a plain file, same bytes."""
    monkeypatch.setenv(directio.ENV, "0")
    f = open_append(tmp_path / "p.bin")
    assert not isinstance(f, DirectAppender)
    f.write(b"abc")
    f.close()
    monkeypatch.delenv(directio.ENV)

    def refuse(*a, **k):
        raise OSError(22, "Invalid argument")

    monkeypatch.setattr(directio, "DirectAppender", refuse)
    f = open_append(tmp_path / "p.bin", append=True)
    f.write(b"def")
    f.close()
    assert open(tmp_path / "p.bin", "rb").read() == b"abcdef"


def test_shm_falls_back_or_works():
    """tmpfs (no O_DIRECT on older kernels): whichever open_append picks writes the bytes."""
    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm")
    path = f"/dev/shm/epic-directio-{os.getpid()}.bin"
    try:
        f = open_append(path)
        f.write(b"z" * (directio.MIN_DIRECT + 5))
        f.close()
        assert os.path.getsize(path) == directio.MIN_DIRECT + 5
    finally:
        if os.path.exists(path):
            os.remove(path)


def test_csv_writer_same_bytes_either_way(tmp_path, monkeypatch):
    """CsvWriter's file is byte-for-byte the same with and without direct I/O, in both its
    modes (new file with header; append after an existing file)."""
    n = 60_000
    t = pa.table({"ts": pa.array(range(n), pa.int64()),
                  "v": pa.array([i / 7 for i in range(n)], pa.float64()),
                  "s": pa.array([f"k{i % 13}" for i in range(n)])})
    files = {}
    for env in ("0", "1"):
        monkeypatch.setenv(directio.ENV, env)
        out = tmp_path / f"o{env}.csv"
        with CsvWriter(out) as w:
            w.write(t)
            w.write(t.slice(0, 5))
        with CsvWriter(out, header=False, append=True) as w:
            w.write(t.slice(100, 20_000))
        files[env] = out.read_bytes()
    assert files["1"] == files["0"]
    lines = files["1"].decode().split("\n")
    assert lines[0] == "ts,v,s" and lines[-1] == "" and len(lines) == 2 + n + 5 + 20_000
    assert lines[1 + n + 5] == f"100,{100 / 7!r},k{100 % 13}"


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(head=st.integers(0, 2 * BLOCK), parts=st.lists(st.integers(0, 3 * BLOCK + 17), max_size=5),
       big=st.booleans(), env=st.sampled_from(["1", "0"]))
def test_append_file_copies_parts(direct_dir, monkeypatch, head, parts, big, env):
    """Parts (any length, written either way) appended after any existing length: the file is
    the bytes concatenated, with direct I/O on both sides or through the cache."""
    monkeypatch.setenv(directio.ENV, env)
    dst = str(direct_dir / "dst.bin")
    expect = b"h" * head
    with open(dst, "wb") as f:
        f.write(expect)
    srcs = []
    for k, n in enumerate(parts + ([directio.STAGE + 5000] if big else [])):
        p = str(direct_dir / f"part{k}.bin")
        data = bytes((k * 13 + i) % 256 for i in range(n)) if n < 100_000 else os.urandom(n)
        with open_append(p) as f:
            f.write(data)
        srcs.append(p)
        expect += data
    with open_append(dst, append=True) as f:
        total = sum(append_file(f, p) for p in srcs)
        assert f.tell() == len(expect)
    assert total == len(expect) - head
    with open(dst, "rb") as f:
        assert f.read() == expect


def test_a_failed_write_raises_and_closes(direct_dir, monkeypatch):
    """A full disk during a direct or a cached write: the OSError reaches the caller (through
    append_file too) and the appender still closes."""
    src = str(direct_dir / "src.bin")
    with open(src, "wb") as f:
        f.write(os.urandom(3 * directio.STAGE // 2))
    real = os.pwrite
    for fail_after in (0, 1):
        calls = {"n": 0}

        def pwrite(fd, data, at):
            calls["n"] += 1
            if calls["n"] > fail_after:
                raise OSError(28, "No space left on device")
            return real(fd, data, at)

        w = open_append(str(direct_dir / f"dst{fail_after}.bin"))
        monkeypatch.setattr(os, "pwrite", pwrite)
        with pytest.raises(OSError) as err:
            append_file(w, src)
            w.flush()                   # at the latest: the commit flushes before its fsync
        monkeypatch.setattr(os, "pwrite", real)
        assert err.value.errno == 28
        w.close()
        assert w.closed
    # lazy: the background write's error surfaces at the next write or at close
    calls = {"n": 0}

    def failing(fd, data, at):
        raise OSError(28, "No space left on device")

    w = DirectAppender(str(direct_dir / "lazy.bin"), lazy=True, stage=4 * BLOCK)
    monkeypatch.setattr(os, "pwrite", failing)
    with pytest.raises(OSError) as err:
        for _ in range(4):
            w.write(b"y" * (4 * BLOCK))
        w.close()
    monkeypatch.setattr(os, "pwrite", real)
    assert err.value.errno == 28
    w.close()
    assert w.closed


def test_direct_writes_refused_after_open_go_through_the_cache(direct_dir, monkeypatch):
    """A file system that accepts O_DIRECT at open but refuses the writes (EINVAL): the bytes
    go through the cache instead, the file is whole."""
    path = str(direct_dir / "e.bin")
    w = DirectAppender(path)
    real = os.pwrite

    def pwrite(fd, data, at):
        if fd == w._dfd:
            raise OSError(22, "Invalid argument")
        return real(fd, data, at)

    monkeypatch.setattr(os, "pwrite", pwrite)
    data = os.urandom(3 * directio.MIN_DIRECT + 123)
    w.write(data[:directio.MIN_DIRECT + 5])
    w.write(data[directio.MIN_DIRECT + 5:])
    w.close()
    monkeypatch.setattr(os, "pwrite", real)
    assert open(path, "rb").read() == data


def test_plain_fallback_appends_with_the_kernel_copy(tmp_path, monkeypatch):
    """Without direct I/O, append_file is the kernel's copy (copy_file_range, which refuses an
    O_APPEND descriptor): the destination from open_append(append=True) must not be one."""
    monkeypatch.setenv(directio.ENV, "0")
    dst, src = tmp_path / "d.bin", tmp_path / "s.bin"
    dst.write_bytes(b"head")
    src.write_bytes(b"x" * 100_000)
    calls = []
    real = getattr(os, "copy_file_range", None)
    if real is None:
        pytest.skip("no copy_file_range here")

    def spy(*a, **k):
        n = real(*a, **k)          # raises EBADF on an O_APPEND destination
        calls.append(n)
        return n

    monkeypatch.setattr(os, "copy_file_range", spy)
    with open_append(dst, append=True) as f:
        assert f.tell() == 4
        assert append_file(f, str(src)) == 100_000
    assert sum(calls) == 100_000   # all of it copied in the kernel
    assert dst.read_bytes() == b"head" + b"x" * 100_000
    with open_append(tmp_path / "new.bin", append=True) as f:   # a missing file is created
        f.write(b"n")
    assert (tmp_path / "new.bin").read_bytes() == b"n"
