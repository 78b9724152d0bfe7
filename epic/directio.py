"""Large sequential local writes that bypass the page cache (Linux ``O_DIRECT``).

Writing a CSV output through the page cache costs the writer about as much CPU as formatting it:
every byte is copied into cache pages that the kernel must first find (reclaiming others, or, in a
virtual machine, having the host back them), then write back from a kernel thread. On the
machine of docs/performance.md that was 0.4-2.3 CPU-s per GB, noisy from run to run; a DEBS
full game writes 49 GB of CSV. :class:`DirectAppender` stages the bytes in a reused, page-aligned
8 MB buffer and hands whole 4 KiB blocks to the disk straight from it (0.05 CPU-s per GB there).

What a reader of the file sees is the same as with plain writes, at each
:meth:`~DirectAppender.flush` and at close:

* the file holds every byte written so far and ends there: the partial last block is written
  through the cache (and kept in the buffer; the next direct write of that block carries the
  same bytes, and the kernel writes back and drops the cached copy first), and so are all the
  bytes of a flush that follows fewer than :data:`MIN_DIRECT` new bytes (a direct write waits
  for the disk: for a few MB the cache is faster, and a paced replay's trickle stays cheap);
* the file never holds padding: only whole blocks go direct, at block-aligned offsets, and a
  block is written only once all its bytes are known. Between flushes it holds a prefix of
  what was written.

A ``lazy`` appender (a deploy task's CSV rows: read only once the task closed them) does not
complete the file at a flush; a background thread writes one buffer's blocks while the caller
fills the other, so the writer does not wait for the disk.

An appender opened on an existing file (``append=True``) starts at its end: the partial block
there is read back into the staging buffer and rewritten whole.

:func:`open_append` falls back to a plain buffered file where direct I/O is unavailable: another
OS, a file system that refuses ``O_DIRECT`` (tmpfs on older kernels), or ``EPIC_DIRECT_IO=0``.
"""

from __future__ import annotations

import errno
import mmap
import os

import pyarrow as pa

__all__ = ["BLOCK", "DirectAppender", "ENV", "append_file", "enabled", "native_append",
           "open_append"]

#: ``EPIC_DIRECT_IO=0`` writes every output through the page cache.
ENV = "EPIC_DIRECT_IO"

#: Offsets and lengths of direct writes are multiples of this (4 KiB: every logical block size
#: of Linux block devices divides it).
BLOCK = 4096

#: Direct writes happen in whole blocks of at most this many bytes (the staging buffer's size).
STAGE = 8 << 20

#: A flush after fewer new bytes than this writes them through the cache: a direct write waits
#: for the disk (a deploy's lazy writers do that on a background thread, a flush cannot), which
#: for a few MB costs more wall time than the cache does (``scripts/bench_csv.py``'s 5,000-row
#: writes), and a paced replay's trickle of small writes stays cheap.
MIN_DIRECT = 4 << 20


def enabled() -> bool:
    """Whether outputs may be written with direct I/O (Linux, and ``EPIC_DIRECT_IO`` not 0)."""
    return hasattr(os, "O_DIRECT") and os.environ.get(ENV, "1") not in ("0", "false", "no")


class DirectAppender:
    """A write-only file object appending to ``path`` with direct I/O (see the module doc).

    ``append``: start at the end of the existing file (else it is created or emptied). Raises
    ``OSError`` where the file system refuses ``O_DIRECT``. ``tell``, ``write``, ``flush`` and
    ``close`` as a file's; wrap it in ``pyarrow.PythonFile`` for pyarrow's writers.

    The file holds every byte written after each :meth:`flush` and at :meth:`close`; between
    them, whole staged blocks reach the disk as the buffer fills. ``lazy``: for a file read only
    once closed (a deploy task's CSV rows): :meth:`flush` does nothing, and the buffer's
    blocks are written by a background thread while the caller fills a second buffer, so the
    caller does not wait for the disk (an error surfaces at the next write or at close).

    Example:
        >>> import tempfile, os
        >>> p = os.path.join(tempfile.mkdtemp(), "out.csv")
        >>> f = open_append(p)
        >>> _ = f.write(b"ts,v\\n" + b"1,2\\n" * 3000)
        >>> f.close()
        >>> os.path.getsize(p), open(p, "rb").read()[-8:]
        (12005, b'1,2\\n1,2\\n')
    """

    def __init__(self, path: str, *, append: bool = False, stage: int = STAGE,
                 lazy: bool = False):
        self._path = path
        flags = os.O_WRONLY | os.O_CREAT | (0 if append else os.O_TRUNC)
        self._dfd = os.open(path, flags | os.O_DIRECT, 0o644)
        self._bfd = -1
        try:
            self._bfd = os.open(path, os.O_WRONLY)
            size = os.fstat(self._dfd).st_size
            self._cap = max(BLOCK, stage - stage % BLOCK)
            self._stage = mmap.mmap(-1, self._cap)   # page-aligned, reused for every write
            self._base = size - size % BLOCK          # file offset of the buffer's first byte
            self._n = size - self._base               # bytes held in the buffer
            if self._n:
                with open(path, "rb") as f:
                    f.seek(self._base)
                    head = f.read(self._n)
                if len(head) != self._n:
                    raise OSError(f"{path}: the file changed size while it was opened")
                self._stage[:self._n] = head
        except BaseException:
            for fd in (self._dfd, self._bfd):
                if fd >= 0:
                    os.close(fd)
            raise
        self._pos = size
        self._flushed = size      # the file holds every byte before this offset
        self._closed = False
        self._direct_ok = True
        self._lazy = bool(lazy)
        self._spare = mmap.mmap(-1, self._cap) if lazy else None
        self._pool = None
        self._pending = None      # the background write of the other buffer (lazy)

    @property
    def closed(self) -> bool:
        return self._closed

    def writable(self) -> bool:
        return True

    def readable(self) -> bool:
        return False

    def seekable(self) -> bool:
        return False

    def tell(self) -> int:
        return self._pos

    def write(self, data) -> int:
        if self._closed:
            raise ValueError("write to a closed file")
        mv = memoryview(data).cast("B")
        total = len(mv)
        done = 0
        while done < total:
            k = min(self._cap - self._n, total - done)
            self._stage[self._n:self._n + k] = mv[done:done + k]
            self._n += k
            done += k
            self._pos += k
            if self._n == self._cap:
                self._blocks()
        return total

    def write_through(self, data) -> int:
        """Write ``data`` through the page cache at once (not ``lazy``): the file then holds
        every byte written and ends there. For small writes, where staging and a direct write
        cost more than the cache (the caller knows a write's size: a CSV table)."""
        if self._closed:
            raise ValueError("write to a closed file")
        if self._lazy:
            return self.write(data)
        self.flush()
        mv = memoryview(data).cast("B")
        total = len(mv)
        if not total:
            return 0
        off = 0
        while off < total:
            off += os.pwrite(self._bfd, mv[off:], self._pos + off)
        end = self._pos + total
        base = end - end % BLOCK
        if base == self._base:
            self._stage[self._n:self._n + total] = mv
            self._n += total
        else:   # crossed a block boundary: the new partial block is all from ``data``
            r = end - base
            self._stage[:r] = mv[total - r:]
            self._base, self._n = base, r
        self._pos = self._flushed = end
        return total

    def flush(self) -> None:
        """Make the file hold every byte written so far and end there (not ``lazy``): the
        staged whole blocks go direct when at least :data:`MIN_DIRECT` bytes came since the
        last flush, else through the cache, like the partial last block."""
        if self._closed or self._lazy or self._flushed == self._pos:
            return
        self._complete(direct=self._pos - self._flushed >= MIN_DIRECT)

    def _complete(self, direct: bool) -> None:
        if direct:
            self._blocks()
        at = max(self._flushed, self._base)
        if self._base + self._n > at:
            self._pwrite_all(self._bfd, self._stage, at - self._base,
                             self._base + self._n - at, self._base)
        if not direct:
            # the whole blocks are in the file now: keep only the partial last block
            full = self._n - self._n % BLOCK
            if full:
                self._stage.move(0, full, self._n - full)
                self._base += full
                self._n -= full
        self._flushed = self._pos

    def _blocks(self) -> None:
        """Write the buffer's whole blocks direct (on the background thread when ``lazy``)."""
        full = self._n - self._n % BLOCK
        if not full:
            return
        rest = self._n - full
        if self._lazy:
            self._wait()
            if self._pool is None:
                from concurrent.futures import ThreadPoolExecutor

                self._pool = ThreadPoolExecutor(1, thread_name_prefix="epic-direct")
            buf, base = self._stage, self._base
            self._pending = self._pool.submit(self._write_blocks, buf, base, full)
            if rest:
                self._spare[:rest] = buf[full:full + rest]
            self._stage, self._spare = self._spare, buf
        else:
            self._write_blocks(self._stage, self._base, full)
            if rest:
                self._stage.move(0, full, rest)
        self._base += full
        self._n = rest
        # a flush after this rewrites nothing before the blocks just written
        self._flushed = max(self._flushed, min(self._base, self._pos))

    def _write_blocks(self, buf: mmap.mmap, base: int, full: int) -> None:
        if self._direct_ok:
            try:
                self._pwrite_all(self._dfd, buf, 0, full, base)
                return
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                # The file system took O_DIRECT at open but refuses these writes (a stricter
                # alignment): the rest goes through the cache (the same bytes, idempotent).
                self._direct_ok = False
        self._pwrite_all(self._bfd, buf, 0, full, base)

    def _wait(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()   # re-raises the background write's error

    @staticmethod
    def _pwrite_all(fd: int, buf: mmap.mmap, at: int, length: int, base: int) -> None:
        view = memoryview(buf)
        try:
            off = 0
            while off < length:
                off += os.pwrite(fd, view[at + off:at + length], base + at + off)
        finally:
            try:
                view.release()
            except BufferError:
                pass

    def fileno(self) -> int:
        """The descriptor of the file's cached side (for ``os.fsync``: either one syncs the
        file)."""
        return self._bfd

    def close(self) -> None:
        """Write what is left (the file then ends at the last byte written) and close."""
        if self._closed:
            return
        self._closed = True
        try:
            self._wait()
            self._lazy = False   # the last blocks are written here, before the descriptors close
            if self._pos != self._flushed:
                self._complete(direct=True)
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None
            try:
                os.close(self._dfd)
            finally:
                os.close(self._bfd)
                _close_buffer(self._stage)
                if self._spare is not None:
                    _close_buffer(self._spare)

    def __enter__(self) -> DirectAppender:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_append(path: str | os.PathLike[str], *, append: bool = False, lazy: bool = False):
    """A file object appending to the local file ``path`` (``append``: after its current end,
    else created or emptied): a :class:`DirectAppender` (``lazy``: see there) where direct I/O
    works, else a plain buffered file."""
    path = os.fspath(path)
    if enabled():
        try:
            return DirectAppender(path, append=append, lazy=lazy)
        except OSError:
            pass   # e.g. EINVAL: this file system refuses O_DIRECT
    if not append:
        return open(path, "wb")
    # Positioned at the end, but not O_APPEND: copy_file_range refuses appending descriptors.
    f = os.fdopen(os.open(path, os.O_RDWR | os.O_CREAT, 0o644), "r+b")
    f.seek(0, os.SEEK_END)
    return f


def native_append(path: str | os.PathLike[str], *, append: bool = False,
                  lazy: bool = False) -> tuple[pa.NativeFile, DirectAppender | None]:
    """:func:`open_append` as a pyarrow output stream (for ``pyarrow.csv.write_csv``; its
    ``flush`` reaches the appender), and the :class:`DirectAppender` under it (None: a plain
    file)."""
    path = os.fspath(path)
    if enabled():
        try:
            f = DirectAppender(path, append=append, lazy=lazy)
            return pa.PythonFile(f, mode="w"), f
        except OSError:
            pass   # e.g. EINVAL: this file system refuses O_DIRECT
    return pa.OSFile(path, "ab" if append else "wb"), None


def append_file(dst, src_path: str) -> int:
    """Append the whole local file ``src_path`` to ``dst`` (from :func:`open_append`); return the
    bytes copied. Into a :class:`DirectAppender` the source is read with direct I/O too (where
    allowed) into one aligned buffer: neither file's bytes pass through the page cache. Into a
    plain file: the kernel's copy (:func:`epic.storage.copy_into`)."""
    if not isinstance(dst, DirectAppender):
        from epic.storage import copy_into

        return copy_into(dst, src_path)
    try:
        fd, direct = os.open(src_path, os.O_RDONLY | os.O_DIRECT), True
    except OSError:
        fd, direct = os.open(src_path, os.O_RDONLY), False
    buf = mmap.mmap(-1, STAGE)
    view = memoryview(buf)
    done = 0
    try:
        while True:
            k = os.preadv(fd, [view], done)
            if k <= 0:
                break
            dst.write(view[:k])
            done += k
            if direct and done % BLOCK:
                # a short read off a block boundary (the end, or an interrupted read): go on
                # through the cache, where offsets need no alignment
                os.close(fd)
                fd, direct = os.open(src_path, os.O_RDONLY), False
    finally:
        os.close(fd)
        try:
            view.release()
        except BufferError:
            pass
        _close_buffer(buf)
    return done


def _close_buffer(buf: mmap.mmap) -> None:
    # After a failed write, the traceback being handled can still hold a view of the buffer:
    # then the mapping is freed with its last reference instead.
    try:
        buf.close()
    except BufferError:
        pass
