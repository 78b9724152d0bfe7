"""Atomic file writes: readers see the old content or the new, never a part (one helper for all).

A file is written to a temp name beside its final path, flushed and fsynced, then renamed over
the final path, and the directory entry is fsynced. A rename is atomic on POSIX file systems
(and HDFS); on an object store, which has no rename, the file is one PUT under its final name
(:mod:`epic.storage` holds the rule of each store; docs/deploy.md, "Storage"). Used by topics
(manifests, consumer positions, retention floors), state snapshots, sink sidecars and the
deploy's status documents.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid

import pyarrow.fs as pafs

from .storage import LOCAL, fsync_local, publish

__all__ = ["atomic_write", "atomic_json", "atomic_path", "fsync_local"]


def atomic_write(path: str, data: bytes | list, *, fs: pafs.FileSystem | None = None) -> None:
    """Write ``data`` (bytes, or a list of bytes-like parts) to ``path`` atomically (a plain local
    path, or a path of ``fs``), by the store's commit rule (:func:`epic.storage.publish`: temp,
    fsync, rename on a local disk; one PUT on an object store).

    On a failure the temp file is removed and the old content stays in place."""
    publish(fs or LOCAL, path, data)


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
