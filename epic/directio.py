"""Large sequential local writes that bypass the page cache (Linux ``O_DIRECT``).

Writing a CSV output through the page cache costs the writer about as much CPU as formatting it:
every byte is copied into cache pages that the kernel must first find (reclaiming others, or, in a
virtual machine, having the host back them), then write back from a kernel thread. On the
machine of docs/performance.md that was 0.4-2.3 CPU-s per GB, noisy from run to run; a DEBS
full game writes 49 GB of CSV. :class:`DirectAppender` hands whole 4 KiB blocks to the disk
straight from one reused, page-aligned staging buffer (0.05 CPU-s per GB there) and writes only
the last, partial block of each large :meth:`~DirectAppender.write` through the cache; a small
write (under :data:`MIN_DIRECT`, a paced replay's trickle) goes through the cache whole.

What a reader of the file sees is the same as with plain writes:

* after each :meth:`~DirectAppender.write` the file holds every byte written so far and ends
  there (the partial block is written through the cache at once and kept in the buffer; the next
  direct write of that block carries the same bytes, and the kernel writes back and drops the
  cached copy first);
* the file never holds padding: only whole blocks go direct, at block-aligned offsets, and a
  block is written only once all its bytes are known.

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

#: A write of fewer bytes goes through the cache only: a trickle of small writes (a paced
#: replay's) pays no synchronous disk write per call. pyarrow's CSV writer hands over ~1-2 MB
#: per call for large tables (16384 rows).
MIN_DIRECT = 256 << 10


def enabled() -> bool:
    """Whether outputs may be written with direct I/O (Linux, and ``EPIC_DIRECT_IO`` not 0)."""
    return hasattr(os, "O_DIRECT") and os.environ.get(ENV, "1") not in ("0", "false", "no")


class DirectAppender:
    """A write-only file object appending to ``path`` with direct I/O (see the module doc).

    ``append``: start at the end of the existing file (else it is created or emptied). Raises
    ``OSError`` where the file system refuses ``O_DIRECT``. ``tell``, ``write``, ``flush`` and
    ``close`` as a file's; wrap it in ``pyarrow.PythonFile`` for pyarrow's writers.

    Example:
        >>> import tempfile, os
        >>> p = os.path.join(tempfile.mkdtemp(), "out.csv")
        >>> f = open_append(p)
        >>> _ = f.write(b"ts,v\\n" + b"1,2\\n" * 3000)
        >>> f.close()
        >>> os.path.getsize(p), open(p, "rb").read()[-8:]
        (12005, b'1,2\\n1,2\\n')
    """

    def __init__(self, path: str, *, append: bool = False, stage: int = STAGE):
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
        self._closed = False
        self._direct_ok = True

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
        start = self._pos   # the file offset of the first new byte
        done = 0
        while done < total:
            k = min(self._cap - self._n, total - done)
            self._stage[self._n:self._n + k] = mv[done:done + k]
            self._n += k
            done += k
            if self._n == self._cap:
                self._direct()
        if total >= MIN_DIRECT:
            self._direct()
        # What is not on disk yet goes through the cache, so that the file ends at the last
        # byte written: the partial last block, or all of a small write.
        at = max(start, self._base)
        if self._base + self._n > at:
            self._pwrite_all(self._bfd, at - self._base, self._base + self._n - at)
        if total < MIN_DIRECT:
            # its whole blocks are in the file: keep only the partial last block
            full = self._n - self._n % BLOCK
            if full:
                self._stage.move(0, full, self._n - full)
                self._base += full
                self._n -= full
        self._pos += total
        return total

    def _direct(self) -> None:
        full = self._n - self._n % BLOCK
        if not full:
            return
        if self._direct_ok:
            try:
                self._pwrite_all(self._dfd, 0, full)
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                # The file system took O_DIRECT at open but refuses these writes (a stricter
                # alignment): the rest goes through the cache (the same bytes, idempotent).
                self._direct_ok = False
        if not self._direct_ok:
            self._pwrite_all(self._bfd, 0, full)
        rest = self._n - full
        if rest:
            self._stage.move(0, full, rest)
        self._base += full
        self._n = rest

    def _pwrite_all(self, fd: int, at: int, length: int) -> None:
        view = memoryview(self._stage)
        try:
            off = 0
            while off < length:
                off += os.pwrite(fd, view[at + off:at + length], self._base + at + off)
        finally:
            try:
                view.release()
            except BufferError:
                pass

    def flush(self) -> None:
        pass

    def fileno(self) -> int:
        """The descriptor of the file's cached side (for ``os.fsync``: either one syncs the
        file)."""
        return self._bfd

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            os.close(self._dfd)
        finally:
            os.close(self._bfd)
            _close_buffer(self._stage)

    def __enter__(self) -> DirectAppender:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def open_append(path: str | os.PathLike[str], *, append: bool = False):
    """A file object appending to the local file ``path`` (``append``: after its current end,
    else created or emptied): a :class:`DirectAppender` where direct I/O works, else a plain
    buffered file."""
    path = os.fspath(path)
    if enabled():
        try:
            return DirectAppender(path, append=append)
        except OSError:
            pass   # e.g. EINVAL: this file system refuses O_DIRECT
    if not append:
        return open(path, "wb")
    # Positioned at the end, but not O_APPEND: copy_file_range refuses appending descriptors.
    f = os.fdopen(os.open(path, os.O_RDWR | os.O_CREAT, 0o644), "r+b")
    f.seek(0, os.SEEK_END)
    return f


def native_append(path: str | os.PathLike[str], *, append: bool = False) -> pa.NativeFile:
    """:func:`open_append` as a pyarrow output stream (for ``pyarrow.csv.write_csv``)."""
    f = open_append(path, append=append)
    if isinstance(f, DirectAppender):
        return pa.PythonFile(f, mode="w")
    f.close()
    return pa.OSFile(os.fspath(path), "ab" if append else "wb")


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
