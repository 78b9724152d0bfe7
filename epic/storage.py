"""Where epic's files live: a local path, a ``file://`` URI, or a store reached through pyarrow.

:func:`resolve` turns a path or URI into a :class:`Location` (a pyarrow filesystem and a path in
it) once, with the operations epic needs: open for reading and writing, list, exists, makedirs,
delete, and :meth:`Location.publish`, the atomic write of a small file (a manifest, a consumer
position, a snapshot, a commit record) by the rule of the store (:func:`commit_rule`):

=========  ===================================================================================
store      how a file is published so that readers see the old content or the new, never a part
=========  ===================================================================================
local      temp file beside it, flush, ``fsync``, ``rename`` over it, ``fsync`` the directory
           (``rename`` is atomic on POSIX file systems). Plain paths and ``file://`` URIs.
hdfs       temp file beside it, then rename (atomic in the NameNode). pyarrow replaces an
           existing destination by deleting it first, so a reader may briefly find a replaced
           file absent (epic's readers do not retry). Untested: no libhdfs on the test machine.
object     (``s3://``, ``gs://``, ``abfs://``) no rename exists (pyarrow's ``move`` is a copy and
           a delete). An object is written once under its final name: the upload becomes visible
           whole when it completes, or not at all, so the PUT is the commit. Data that must
           appear under a name chosen later (topic segments: their sequence number is allocated
           by the committer) is written to a unique temp name and copied server-side; the copy is
           again all or nothing. Listing is read-after-write consistent on S3 (since 2020) and
           GCS; epic relies on that for topic segments and state snapshots.
=========  ===================================================================================

Local paths keep epic's fast code paths (``os``, ``fsync``, ``rename``, memory maps): a
:class:`Location` of the local file system is a plain absolute path.

A URI names only the bucket and path (``s3://bucket/prefix``); endpoint, region and credentials
come from the store's usual environment (``AWS_ENDPOINT_URL``, ``AWS_DEFAULT_REGION``,
``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY`` or ``~/.aws``...), which Spark's executors
inherit. Options or credentials in the URI are refused (epic appends paths to it, and records it
in ``deploy.json`` and messages). A scheme pyarrow has no filesystem for, or whose filesystem
cannot be loaded here (``hdfs://`` without libhdfs and a JVM), is refused with the reason;
nothing is ever written to a local directory named after a URI.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import unquote, urlparse

import pyarrow.fs as pafs

from .errors import SpecError

__all__ = ["Location", "resolve", "check_uri", "store_kind", "commit_rule", "publish", "fsync_local",
           "deferred_sync", "copy_into",
           "read_small", "read_small_json", "REMOTE_SCHEMES", "LOCAL"]

#: The local file system (one instance: it holds no state).
LOCAL = pafs.LocalFileSystem()

#: URI schemes handed to ``pyarrow.fs.FileSystem.from_uri``, and the kind of store each is.
REMOTE_SCHEMES = {"s3": "object", "gs": "object", "gcs": "object", "abfs": "object",
                  "abfss": "object", "hdfs": "hdfs", "viewfs": "hdfs"}

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")

_RULES = {
    "local": "temp file, fsync, rename over the target, fsync the directory (POSIX rename is "
             "atomic)",
    "hdfs": "temp file, rename over the target (atomic in the NameNode; pyarrow deletes an "
            "existing target first)",
    "object": "one PUT under the final name (the object appears whole when the upload "
              "completes); a name chosen later gets a unique temp object copied server-side",
    "other": "temp file, then the filesystem's move (its atomicity is the filesystem's)",
}


def store_kind(fs: pafs.FileSystem) -> str:
    """``"local"``, ``"hdfs"``, ``"object"`` or ``"other"`` (e.g. pyarrow's mock filesystem).

    >>> store_kind(LOCAL)
    'local'
    """
    name = fs.type_name
    if name == "subtree":
        return store_kind(fs.base_fs)
    if name == "local":
        return "local"
    if name == "hdfs":
        return "hdfs"
    if name in ("s3", "gcs", "abfs"):
        return "object"
    return "other"


def commit_rule(fs: pafs.FileSystem) -> str:
    """How :func:`publish` makes a file visible atomically on ``fs`` (see the module table)."""
    return _RULES[store_kind(fs)]


def copy_into(dst, src_path: str, start: int = 0, length: int | None = None) -> int:
    """Copy bytes ``[start, start + length)`` of the local file ``src_path`` (to its end if
    ``length`` is None) into the open local file ``dst`` at its position, which moves past them:
    in the kernel (``copy_file_range``, no copy through Python: the CSV parts of DEBS Q3 are
    ~30 GB), else in 1 MiB chunks. Returns the bytes copied (fewer when the file is shorter)."""
    dst.flush()
    with open(src_path, "rb") as src:
        if length is None:
            length = max(os.fstat(src.fileno()).st_size - start, 0)
        at, done = dst.tell(), 0
        try:
            while done < length:
                k = os.copy_file_range(src.fileno(), dst.fileno(), length - done, start + done,
                                       at + done)
                if k == 0:
                    break
                done += k
        except (AttributeError, OSError):
            pass  # not supported here (or a full disk, which the plain writes raise again)
        dst.seek(at + done)
        src.seek(start + done)
        while done < length:
            chunk = src.read(min(1 << 20, length - done))
            if not chunk:
                break
            dst.write(chunk)
            done += len(chunk)
    return done


def fsync_local(fs: pafs.FileSystem, path: str, *, directory: bool = False) -> None:
    """Force data (or a directory entry) to disk; only meaningful, and only done, on local disks.

    pyarrow output streams expose no fsync, so the file is reopened: fsync on any descriptor of a
    file flushes that file's dirty pages on Linux. An object store's upload is durable when it
    completes.
    """
    if not isinstance(fs, pafs.LocalFileSystem):
        return
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    pending = getattr(_DEFERRED, "pending", None)
    if pending is not None:
        # Inside deferred_sync(): the descriptor is kept (it still names the file after a
        # rename) and synced when the block ends.
        if directory:
            if path in pending.dirs:
                os.close(fd)
            else:
                pending.dirs[path] = fd
        else:
            pending.files.append(fd)
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _Pending:
    def __init__(self):
        self.files: list[int] = []
        self.dirs: dict[str, int] = {}

    def sync(self) -> None:
        """fsync the files, then the directories; several at once (the file system's journal
        commits them together)."""
        for group in (self.files, list(self.dirs.values())):
            if len(group) > 2:
                list(_sync_pool().map(os.fsync, group))
            else:
                for fd in group:
                    os.fsync(fd)

    def close(self) -> None:
        for fd in [*self.files, *self.dirs.values()]:
            try:
                os.close(fd)
            except OSError:
                pass
        self.files, self.dirs = [], {}


_POOL: tuple[int, object] | None = None


def _sync_pool():
    """This process's threads for :meth:`_Pending.sync` (made once per process: a forked child
    gets none of its parent's threads)."""
    global _POOL
    if _POOL is None or _POOL[0] != os.getpid():
        from concurrent.futures import ThreadPoolExecutor

        _POOL = (os.getpid(), ThreadPoolExecutor(8, thread_name_prefix="epic-fsync"))
    return _POOL[1]


#: Per thread, ``pending``: the fsyncs a :func:`deferred_sync` block has put off (absent or None:
#: outside one).
_DEFERRED = threading.local()


@contextmanager
def deferred_sync():
    """Put off this thread's :func:`fsync_local` calls to the end of the block, where they run
    together, before the block returns: what was written inside is durable when it ends, not
    step by step.

    For work whose result counts only once the block ends: a Spark task's snapshots and topic
    segments matter only once its micro-batch commits, after the task returned (a crash before
    that replays the batch, which writes them again), so the fsyncs leave the path between a
    row's arrival and its output. A rename inside the block may thus reach the disk before the
    renamed file's data; a crash in between leaves a file of a batch that never committed. Nested
    blocks join the outermost one. An exception skips the syncs (the work is void).
    """
    if getattr(_DEFERRED, "pending", None) is not None:
        yield
        return
    pending = _DEFERRED.pending = _Pending()
    try:
        yield
        _DEFERRED.pending = None
        pending.sync()
    finally:
        _DEFERRED.pending = None
        pending.close()


def publish(fs: pafs.FileSystem, path: str, data: bytes | list) -> None:
    """Write ``data`` to ``path`` of ``fs`` atomically, by the store's rule (:func:`commit_rule`).
    ``data``: bytes, or a list of bytes-like parts written one after another.

    On a failure the old content stays in place and no temp file is left behind.
    """
    parts = data if isinstance(data, list) else [data]
    if store_kind(fs) == "object":
        # The upload completes at close; an exception before that aborts it (nothing visible).
        with fs.open_output_stream(path) as f:
            for part in parts:
                f.write(part)
        return
    d, name = path.rsplit("/", 1) if "/" in path else (".", path)
    tmp = f"{d}/.{name}.{uuid.uuid4().hex}.tmp"
    try:
        with fs.open_output_stream(tmp) as f:
            for part in parts:
                f.write(part)
        fsync_local(fs, tmp)
        fs.move(tmp, path)
    except BaseException:
        try:
            fs.delete_file(tmp)
        except (OSError, FileNotFoundError):
            pass
        raise
    fsync_local(fs, d, directory=True)


@dataclass(frozen=True)
class Location:
    """A path in a filesystem: what :func:`resolve` returns. Picklable (pyarrow filesystems are;
    an S3 filesystem re-reads its credentials from the environment where it is unpickled).

    Attributes:
        fs: The pyarrow filesystem.
        path: The path in ``fs`` (absolute for the local file system, ``bucket/key`` for S3).
        uri: What the user gave (for messages); joined paths extend it.
    """

    fs: pafs.FileSystem
    path: str
    uri: str

    @property
    def kind(self) -> str:
        """The store kind (:func:`store_kind`)."""
        return store_kind(self.fs)

    @property
    def is_local(self) -> bool:
        """True for the local file system: ``path`` is an OS path (``os``, memory maps work)."""
        return isinstance(self.fs, pafs.LocalFileSystem)

    @property
    def name(self) -> str:
        """The last path component."""
        return self.path.rstrip("/").rsplit("/", 1)[-1]

    def join(self, *names: str) -> Location:
        """The location of ``names`` below this one.

        >>> resolve("/data/wd").join("topics", "a").path
        '/data/wd/topics/a'
        """
        tail = "/".join(n.strip("/") for n in names)
        return Location(self.fs, f"{self.path.rstrip('/')}/{tail}",
                        f"{self.uri.rstrip('/')}/{tail}")

    def parent(self) -> Location:
        """The enclosing directory."""
        p = self.path.rstrip("/").rsplit("/", 1)[0] or "/"
        u = self.uri.rstrip("/").rsplit("/", 1)[0]
        return Location(self.fs, p, u)

    def sibling(self, suffix: str) -> Location:
        """This path with ``suffix`` appended to its last component (``out.csv`` -> ``out.csv.epic``)."""
        return Location(self.fs, self.path.rstrip("/") + suffix, self.uri.rstrip("/") + suffix)

    # -- queries ---------------------------------------------------------------------------

    def info(self) -> pafs.FileInfo:
        return self.fs.get_file_info(self.path)

    def exists(self) -> bool:
        """Whether a file or directory is there."""
        return self.info().type != pafs.FileType.NotFound

    def is_dir(self) -> bool:
        return self.info().type == pafs.FileType.Directory

    def list(self) -> list[pafs.FileInfo]:
        """The entries directly below this directory, by name (empty if it does not exist)."""
        infos = self.fs.get_file_info(pafs.FileSelector(self.path, allow_not_found=True))
        return sorted(infos, key=lambda fi: fi.base_name)

    # -- reading and writing -----------------------------------------------------------------

    def read_bytes(self) -> bytes:
        with self.fs.open_input_stream(self.path) as f:
            return f.read()

    def read_json(self):
        """The JSON document in this file, read whole even while a writer replaces it.

        On an object store a read is a HEAD (for the size) and a ranged GET: an object replaced in
        between is read cut to the old size. A cut JSON document does not parse (its closing
        bracket is its last byte), so a document that does not parse is read again; it is
        corrupt only when two reads in a row return the same bytes and the parser did not stop
        at their end. A parser stopping at the end or in an unterminated string (the document cut
        short) is read again up to eight times in all, whatever the bytes: a record replaced over
        and over is cut to the same prefix by different versions (``{"position": 10`` of 100 and
        of 1000), which two equal reads took for corruption, and a consumer's position skipped
        that way would have let retention delete what it still needed.

        Raises:
            FileNotFoundError: there is no such file.
            ValueError: the file holds no JSON document (read twice unchanged, or cut short eight
                times).
        """
        if self.is_local:
            with open(self.path, "rb") as f:
                return json.loads(f.read())
        prev = None
        for attempt in range(8):
            data = self.read_bytes()
            try:
                return json.loads(data)
            except ValueError as e:
                cut = isinstance(e, json.JSONDecodeError) and (
                    e.pos >= len(e.doc) or e.msg.startswith("Unterminated string"))
                if data == prev and not cut:
                    raise
                prev = data
                time.sleep(0.02 * (attempt + 1))
        return json.loads(data)

    def open_input(self):
        """A random-access file (``read_at``, ``size``) for pyarrow readers."""
        return self.fs.open_input_file(self.path)

    def open_output(self):
        """A new output stream; on an object store the object appears when it is closed."""
        return self.fs.open_output_stream(self.path)

    def publish(self, data: bytes) -> None:
        """Write ``data`` atomically by the store's rule (:func:`publish`)."""
        publish(self.fs, self.path, data)

    def makedirs(self) -> None:
        """Create this directory and its parents (on an object store: a marker object, harmless)."""
        self.fs.create_dir(self.path, recursive=True)

    def delete(self) -> None:
        """Delete the file; a missing file is not an error (deletion is idempotent)."""
        try:
            self.fs.delete_file(self.path)
        except (FileNotFoundError, OSError):
            pass

    def delete_dir(self) -> None:
        """Delete the directory and everything below it; a missing one is not an error."""
        try:
            self.fs.delete_dir(self.path)
        except (FileNotFoundError, OSError):
            pass

    def move_to(self, dest: Location) -> None:
        """Rename (local, HDFS) or copy-and-delete (object stores: the copy is all or nothing)."""
        self.fs.move(self.path, dest.path)

    def __str__(self) -> str:
        return self.uri


def check_uri(uri: str, what: str = "path") -> str | None:
    """Check a path or URI without touching the store; return its remote scheme (None if local).

    What can be told from the text alone is refused here (at topology build time): an unknown
    scheme, a ``file://`` URI naming another host, options or credentials in the URI. Whether the
    store can be reached is told by :func:`resolve`, at start.

    >>> check_uri("s3://bucket/out.csv"), check_uri("out.csv"), check_uri("file:///tmp/x")
    ('s3', None, None)
    """
    p = os.fspath(uri)
    m = _SCHEME.match(p)
    if not m:
        return None
    scheme = m.group(1).lower()
    u = urlparse(p)
    if scheme == "file":
        if u.netloc not in ("", "localhost"):
            raise SpecError(f"{what} {p!r}: a file:// URI with host {u.netloc!r} is not local; "
                            "use file:///absolute/path (or mount the share and give its path)")
        return None
    if scheme not in REMOTE_SCHEMES:
        raise SpecError(f"{what} {p!r}: the {scheme}:// scheme is not supported: epic writes "
                        "to a path or file:// URI, or through pyarrow's filesystems to "
                        f"{', '.join(s + '://' for s in sorted(REMOTE_SCHEMES))}")
    if u.query or u.fragment or u.params:
        raise SpecError(f"{what} {p!r}: options in a {scheme}:// URI are not supported (epic "
                        "appends paths to it): give s3://bucket/path and set the endpoint, "
                        "region and credentials in the environment (AWS_ENDPOINT_URL, "
                        "AWS_DEFAULT_REGION, AWS_ACCESS_KEY_ID, ... for S3)")
    if "@" in u.netloc and scheme in ("s3", "gs", "gcs"):
        raise SpecError(f"{what}: credentials in a {scheme}:// URI are not supported (the URI is "
                        "recorded in deploy.json and shown in messages): set them in the "
                        "environment or the store's config file instead")
    return scheme


def resolve(path: str | os.PathLike | Location, what: str = "path", *,
            filesystem: pafs.FileSystem | None = None) -> Location:
    """The :class:`Location` of a plain path or a URI (resolved once; join paths to the result).

    Plain paths and ``file://`` URIs (also Hadoop's ``file:/abs/path``) are local: the path is
    made absolute. ``s3://``, ``gs://``, ``abfs://``, ``hdfs://`` go through pyarrow. With
    ``filesystem``, ``path`` is a path in it (tests: pyarrow's mock or sub-tree filesystems).

    >>> resolve("file:///data/wd").path
    '/data/wd'
    >>> resolve("ftp://host/x")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    epic.errors.SpecError: path 'ftp://host/x': the ftp:// scheme is not supported ...

    Raises:
        SpecError: an unsupported scheme, a ``file://`` URI naming another host, options or
            credentials in the URI, or a store pyarrow cannot load here; each with the reason.
    """
    if isinstance(path, Location):
        return path
    p = os.fspath(path)
    if filesystem is not None:
        return Location(filesystem, p.rstrip("/") or "/", p)
    if p.startswith("file:") and not p.startswith("file://"):
        p = p[len("file:"):]  # Hadoop-style "file:/abs/path", as Spark may hand it over
    scheme = check_uri(p, what)
    if scheme is None:
        if _SCHEME.match(p):
            p = unquote(urlparse(p).path)
        return Location(LOCAL, os.path.abspath(p), os.fspath(path))
    try:
        fs, fpath = pafs.FileSystem.from_uri(p)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises OSError, ArrowInvalid, ...
        raise SpecError(f"{what} {p!r}: the {scheme}:// store cannot be opened through "
                        f"pyarrow's filesystem layer here: {str(exc).splitlines()[0]}. Give a "
                        "path or file:// URI on a mounted file system, or install what the "
                        "store needs") from None
    return Location(fs, fpath.rstrip("/"), p.rstrip("/"))


def read_small(path: str | os.PathLike) -> bytes | None:
    """The content of a small file (a status, manifest or marker file) at a path or URI; None if
    it does not exist."""
    p = os.fspath(path)
    try:
        if _SCHEME.match(p) is None:
            with open(p, "rb") as f:
                return f.read()
        return resolve(p).read_bytes()
    except FileNotFoundError:
        return None


def read_small_json(path: str | os.PathLike):
    """The JSON document in a small file (a status, record or stats file) at a path or URI, read
    whole even while a writer replaces it (:meth:`Location.read_json`); None if it does not exist.

    Raises:
        ValueError: the file holds no JSON document.
    """
    p = os.fspath(path)
    try:
        return (resolve(p) if _SCHEME.match(p) else Location(LOCAL, p, p)).read_json()
    except FileNotFoundError:
        return None
