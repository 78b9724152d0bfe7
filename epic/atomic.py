"""Atomic file writes: readers see the old content or the new, never a part (one helper for all).

A file is written to a temp name beside its final path, flushed and fsynced, then renamed over
the final path, and the directory entry is fsynced. A rename is atomic on POSIX file systems
(and HDFS); other stores reached through pyarrow's filesystem layer get the same call sequence,
whose atomicity is the store's (docs/deploy.md). Used by topics (manifests, consumer positions,
retention floors), state snapshots, sink sidecars and the deploy's status documents.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid

import pyarrow.fs as pafs

__all__ = ["atomic_write", "atomic_json", "atomic_path", "fsync_local"]


def fsync_local(fs: pafs.FileSystem, path: str, *, directory: bool = False) -> None:
    """Force data (or a directory entry) to disk; only meaningful, and only done, on local disks.

    pyarrow output streams expose no fsync, so the file is reopened: fsync on any descriptor of a
    file flushes that file's dirty pages on Linux.
    """
    if not isinstance(fs, pafs.LocalFileSystem):
        return
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str, data: bytes, *, fs: pafs.FileSystem | None = None) -> None:
    """Write ``data`` to ``path`` atomically (a plain local path, or a path of ``fs``).

    On a failure the temp file is removed and the old content stays in place."""
    fs = fs or pafs.LocalFileSystem()
    d, name = path.rsplit("/", 1) if "/" in path else (".", path)
    tmp = f"{d}/.{name}.{uuid.uuid4().hex}.tmp"
    try:
        with fs.open_output_stream(tmp) as f:
            f.write(data)
        fsync_local(fs, tmp)
        fs.move(tmp, path)
    except BaseException:
        try:
            fs.delete_file(tmp)
        except (OSError, FileNotFoundError):
            pass
        raise
    fsync_local(fs, d, directory=True)


def atomic_json(path: str, doc, *, fs: pafs.FileSystem | None = None, indent: int | None = 1
                ) -> None:
    """:func:`atomic_write` of ``doc`` as JSON (non-JSON values as their ``str``)."""
    atomic_write(path, json.dumps(doc, indent=indent, default=str).encode(), fs=fs)


@contextlib.contextmanager
def atomic_path(path: str, *, fsync: bool = True, tmp_dir: str | None = None):
    """A local temp path to write ``path``'s content to (any writer: Parquet, Arrow IPC, ...);
    on a clean exit it is fsynced and renamed over ``path``, on an error removed.

        >>> import tempfile
        >>> d = tempfile.mkdtemp()
        >>> with atomic_path(d + "/x.txt") as tmp:
        ...     _ = open(tmp, "w").write("hi")
        >>> open(d + "/x.txt").read()
        'hi'
    """
    d = tmp_dir or os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(d, f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
    try:
        yield tmp
        if fsync:
            fsync_local(pafs.LocalFileSystem(), tmp)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise
