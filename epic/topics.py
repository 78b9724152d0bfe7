"""Arrow topics: durable, append-only streams of record batches that link the nodes of a deploy.

A topic is a directory (a local path, or any store of :mod:`epic.storage`: S3, HDFS...)::

    DIR/
      _topic.json                 manifest: schema, time column and unit, topic id
      segments/
        00000000000000000042.node_a.b7.p0of2.r1000.arrow     one committed segment
        00000000000000000043.node_a.b7.p1of2.r980.arrow
        _tmp/                     temp files of writers; never read
      consumers/<name>            a consumer's commit position (JSON)

**Segments.** Each segment is one Arrow IPC *stream* file. Its file name carries, in order: the
sequence number (20 digits, so names sort by it), the producer id, the producer's batch id, the part
index and part count of that batch, and the row count. Its schema metadata carries the producer id,
the batch id, the producer's watermark (an int in the topic's time unit, absent when unknown) and an
end-of-stream flag, both valid once *all parts of its batch* are read (every part carries the
same values); an end-of-stream segment may have zero rows. The metadata is plain strings; topic
files never contain pickles.

**Visibility.** A writer writes, flushes and fsyncs a temp file under ``segments/_tmp`` and then a
single committer renames it to its final name (an atomic rename within one directory). The parts of
one batch get consecutive sequence numbers and are renamed in part order; readers only see a batch
whose parts are *all* present, so a batch becomes visible atomically with the rename of its last
part. Everything under ``_tmp``, and any file not named like a segment, is ignored. On an object
store (no rename) the temp is an object uploaded whole and the "rename" a server-side copy, which
appears whole or not at all; the small files (manifest, positions, retention floor) are single
PUTs (:mod:`epic.storage`).

**Corruption is an error, never a silent skip.** A committed segment (a final file whose batch is
complete, or which a later segment follows) that is truncated (no IPC end-of-stream marker),
unreadable, holds another row count than its name says, or is missing (a gap in the sequence
numbers above the retention floor, or a batch with parts missing below the newest segment) makes
every reader raise :class:`~epic.errors.InputError` naming the topic, the segment and the batch:
its rows would otherwise be lost without a trace. Only an incomplete batch at the very end of the
topic is invisible without error: a commit in flight, or one a crash interrupted (the producer's
replay deletes and redoes it). Retention records the sequence number below which it may delete
segments in ``_retention.json`` before deleting any, so its gaps are told apart from lost files.

**Exactly once.** :meth:`Topic.commit_batch` is idempotent per ``(producer, batch_id)``: if the batch
(or a later batch of the same producer) is already complete, the new temps are deleted; if only some
parts were renamed before a crash, those invisible parts are deleted and the batch is committed anew.
A topic has one writing producer at a time (sequence numbers are allocated as ``max + 1``).

**Readers** list segments (sequence numbers are *not* contiguous: never compute the next one), read
from an offset, and record their position under ``consumers/``. :meth:`Topic.apply_retention`
deletes segments that every registered consumer has committed past, always keeping the newest
segment so sequence numbers and batch ids stay monotonic.

Example:
    >>> import pyarrow as pa, tempfile
    >>> d = tempfile.mkdtemp()
    >>> t = Topic.create(d + "/t", pa.schema([("ts", pa.int64())]), time_column="ts")
    >>> tmp = t.write_temp([pa.record_batch([[1, 2]], names=["ts"])], producer="p", batch_id=0)
    >>> [s.seq for s in t.commit_batch("p", 0, [tmp], watermark=2)]
    [0]
    >>> t.read_table().column("ts").to_pylist()
    [1, 2]
"""

from __future__ import annotations

import json
import os
import re
import uuid
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Sequence

import pyarrow as pa
import pyarrow.fs as pafs

import pyarrow.ipc as ipc

from epic.errors import EpicError, InputError, TopologyError

from .storage import Location, fsync_local, publish, resolve

__all__ = [
    "Topic",
    "TopicManifest",
    "SegmentInfo",
    "SegmentMeta",
    "TempSegment",
    "TopicStatus",
    "TopicStat",
    "TIME_UNITS",
    "resolve_filesystem",
    "ls",
    "tail",
    "stat",
    "format_ls",
    "format_tail",
    "format_stat",
]

#: Time units a topic may declare for its integer event-time column.
TIME_UNITS = ("s", "ms", "us", "ns", "ps")

MANIFEST_NAME = "_topic.json"
RETENTION_NAME = "_retention.json"
SEGMENTS_DIR = "segments"
TMP_DIR = "_tmp"
CONSUMERS_DIR = "consumers"
FORMAT_VERSION = 1

_META_PRODUCER = b"epic.producer"
_META_BATCH = b"epic.batch_id"
_META_WATERMARK = b"epic.watermark"
_META_EOS = b"epic.eos"
_META_STEP = b"epic.step"
_META_VERSION = b"epic.segment_version"

# What ipc.new_stream writes on close: continuation token + zero length. A final segment lacking it
# was cut short (it cannot come from our writer, which renames only after close and fsync).
_IPC_EOS = b"\xff\xff\xff\xff\x00\x00\x00\x00"

_NAME_RE = re.compile(
    r"^(?P<seq>\d{20})\.(?P<producer>[A-Za-z0-9_-]+)\.b(?P<batch>\d+)"
    r"\.p(?P<part>\d+)of(?P<parts>\d+)\.r(?P<rows>\d+)\.arrow$"
)
_PRODUCER_RE = re.compile(r"\A[A-Za-z0-9_-]+\Z")  # \Z: "$" would accept a trailing newline
_CONSUMER_RE = re.compile(r"\A[A-Za-z0-9_.-]+\Z")


@dataclass(frozen=True)
class TopicManifest:
    """What a topic holds, written once at creation into ``_topic.json``.

    Attributes:
        schema: Arrow schema of every segment (segment metadata aside).
        time_column: Name of the integer event-time column, or None for an untimed topic.
        time_unit: Unit of ``time_column`` and of watermarks (one of :data:`TIME_UNITS`).
        topic_id: Random id fixed at creation; lets offsets tell a re-created topic apart.
    """

    schema: pa.Schema
    time_column: str | None = None
    time_unit: str = "ms"
    topic_id: str = field(default_factory=lambda: uuid.uuid4().hex)

    def to_json(self) -> str:
        """Serialise to JSON (the schema as base64 Arrow IPC, so every Arrow type survives)."""
        import base64

        return json.dumps(
            {
                "format": "epic-topic",
                "version": FORMAT_VERSION,
                "topic_id": self.topic_id,
                "time_column": self.time_column,
                "time_unit": self.time_unit,
                "schema_ipc": base64.b64encode(self.schema.serialize().to_pybytes()).decode(),
                # Human-readable copy for people inspecting the directory; not read back.
                "schema": [f"{f.name}: {f.type}{'' if f.nullable else ' not null'}"
                           for f in self.schema],
            },
            indent=1,
        )

    @classmethod
    def from_json(cls, text: str, *, path: str = MANIFEST_NAME) -> TopicManifest:
        """Parse the output of :meth:`to_json`."""
        import base64

        try:
            d = json.loads(text)
            if d.get("format") != "epic-topic":
                raise ValueError("not an epic topic manifest")
            if d.get("version") != FORMAT_VERSION:
                raise ValueError(f"unsupported version {d.get('version')!r}")
            schema = ipc.read_schema(pa.py_buffer(base64.b64decode(d["schema_ipc"])))
            return cls(schema=schema, time_column=d["time_column"], time_unit=d["time_unit"],
                       topic_id=d["topic_id"])
        except (ValueError, KeyError, TypeError, pa.ArrowInvalid) as e:
            raise InputError(f"invalid topic manifest: {e}", path=path) from e


@dataclass(frozen=True)
class SegmentInfo:
    """A committed segment as listed from its file name (no file is opened).

    Attributes:
        seq: Sequence number; increasing, with gaps.
        producer: Id of the producer that committed it.
        batch_id: The producer's batch id (a Spark micro-batch id for the Spark sink).
        part: Index of this segment among the parts of its batch.
        parts: Number of parts of its batch.
        rows: Number of rows.
        path: Path of the file in the topic's filesystem.
        size: File size in bytes.
    """

    seq: int
    producer: str
    batch_id: int
    part: int
    parts: int
    rows: int
    path: str
    size: int

    @property
    def name(self) -> str:
        """The file name."""
        return self.path.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class SegmentMeta:
    """The metadata a segment carries in its Arrow schema.

    Attributes:
        producer: Producer id.
        batch_id: Producer's batch id.
        watermark: Producer's watermark after this segment (topic time unit), None if unknown.
        eos: True if the producer declared the end of its stream with this segment.
        step: The deploy runtime's progress counter (source step) reached with this segment, None
            if the producer does not keep one (see ``docs/deploy.md``).
    """

    producer: str
    batch_id: int
    watermark: int | None = None
    eos: bool = False
    step: int | None = None

    def to_metadata(self) -> dict[bytes, bytes]:
        """Encode as Arrow schema metadata (plain strings)."""
        md = {
            _META_VERSION: str(FORMAT_VERSION).encode(),
            _META_PRODUCER: self.producer.encode(),
            _META_BATCH: str(self.batch_id).encode(),
            _META_EOS: b"1" if self.eos else b"0",
        }
        if self.watermark is not None:
            md[_META_WATERMARK] = str(int(self.watermark)).encode()
        if self.step is not None:
            md[_META_STEP] = str(int(self.step)).encode()
        return md

    @classmethod
    def from_metadata(cls, md: dict[bytes, bytes] | None) -> SegmentMeta:
        """Decode what :meth:`to_metadata` wrote."""
        md = md or {}
        wm = md.get(_META_WATERMARK)
        step = md.get(_META_STEP)
        return cls(
            producer=md.get(_META_PRODUCER, b"").decode(),
            batch_id=int(md.get(_META_BATCH, b"-1")),
            watermark=int(wm) if wm is not None else None,
            eos=md.get(_META_EOS) == b"1",
            step=int(step) if step is not None else None,
        )


@dataclass(frozen=True)
class TempSegment:
    """A written, fsynced, not yet visible segment: what a writer task hands to the committer.

    Attributes:
        path: Path of the temp file.
        producer: Producer id.
        batch_id: Batch id.
        part: The writer's partition index (orders the parts of a batch).
        rows: Rows written.
    """

    path: str
    producer: str
    batch_id: int
    part: int
    rows: int


@dataclass(frozen=True)
class TopicStatus:
    """Where a topic's stream stands, from its newest segment.

    Attributes:
        last_seq: Sequence number of the newest visible segment, None if empty.
        next_offset: Offset just past the newest segment (what a reader that read it all holds).
        watermark: Watermark of the newest segment that carries one, None if none does.
        eos: Whether the newest segment marks the end of the stream.
    """

    last_seq: int | None
    next_offset: int
    watermark: int | None
    eos: bool


def resolve_filesystem(path: str | os.PathLike, filesystem: pafs.FileSystem | None = None
                       ) -> tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem and normalised path for a local path or a filesystem URI
    (:func:`epic.storage.resolve`: an unsupported scheme raises ``SpecError`` with the reason)."""
    loc = resolve(path, "topic path", filesystem=filesystem)
    return loc.fs, loc.path

def _same_columns(a: pa.Schema, b: pa.Schema) -> bool:
    """Same names and types in the same order; nullability and metadata may differ (Spark marks
    every column of a computed frame nullable)."""
    return a.names == b.names and all(x.type == y.type for x, y in zip(a, b))


def segment_batch(path: str) -> tuple[str, int, int] | None:
    """``(producer, batch id, parts)`` of a segment file from its name (None: not a segment)."""
    m = _NAME_RE.match(path.rsplit("/", 1)[-1])
    return None if m is None else (m["producer"], int(m["batch"]), int(m["parts"]))


def _segment_name(seq: int, producer: str, batch_id: int, part: int, parts: int, rows: int) -> str:
    return f"{seq:020d}.{producer}.b{batch_id}.p{part}of{parts}.r{rows}.arrow"


def _check_producer(producer: str) -> None:
    if not _PRODUCER_RE.match(producer or ""):
        raise EpicError(
            f"invalid producer id {producer!r}: use letters, digits, '_' and '-' only"
            " (it becomes part of segment file names)"
        )


class Topic:
    """One Arrow topic directory. Cheap to construct; holds no open files.

    Instances are picklable (the filesystem and paths only), so Spark can ship them to executors.
    Use :meth:`create` or :meth:`open` rather than the constructor.
    """

    def __init__(self, fs: pafs.FileSystem, root: str, manifest: TopicManifest, uri: str):
        self.fs = fs
        self.root = root
        self.manifest = manifest
        self.uri = uri
        self._valid: dict[tuple[str, int], bool] = {}  # (name, size) -> tail check result

    def __getstate__(self):
        # The validation cache is per process; a fresh one is cheap to rebuild.
        return {"fs": self.fs, "root": self.root, "manifest_json": self.manifest.to_json(),
                "uri": self.uri}

    def __setstate__(self, state):
        self.__init__(state["fs"], state["root"], TopicManifest.from_json(state["manifest_json"]),
                      state["uri"])

    def __repr__(self) -> str:
        return f"Topic({self.uri!r})"

    # -- creation ---------------------------------------------------------------------------

    @classmethod
    def create(cls, path: str | os.PathLike, schema: pa.Schema, *, time_column: str | None = None,
               time_unit: str = "ms", exist_ok: bool = False,
               filesystem: pafs.FileSystem | None = None) -> Topic:
        """Create a topic (or, with ``exist_ok``, open an existing one with the same schema).

        Args:
            path: Local path or any pyarrow filesystem URI (``file:///``, ``hdfs://``, ...).
            schema: Arrow schema of the topic's rows.
            time_column: Integer event-time column, if the stream is timed.
            time_unit: Unit of ``time_column`` and watermarks, one of :data:`TIME_UNITS`.
            exist_ok: Open an existing topic instead of failing; its schema must equal ``schema``.
            filesystem: Filesystem to use with a plain ``path`` (default: from the URI / local).

        Raises:
            TopologyError: The time column or unit is invalid, or an existing topic differs.
            EpicError: The topic exists and ``exist_ok`` is false.
        """
        if time_unit not in TIME_UNITS:
            raise TopologyError(f"topic {os.fspath(path)}: time_unit {time_unit!r} is not one of"
                                f" {TIME_UNITS}")
        if time_column is not None:
            if time_column not in schema.names:
                raise TopologyError(f"topic {os.fspath(path)}: time_column {time_column!r} is not"
                                    f" in the schema {schema.names}")
            if not pa.types.is_integer(schema.field(time_column).type):
                raise TopologyError(
                    f"topic {os.fspath(path)}: time_column {time_column!r} has type"
                    f" {schema.field(time_column).type}; event time must be an integer column"
                    " (convert timestamps to integers at the source)")
        fs, root = resolve_filesystem(path, filesystem)
        manifest_path = f"{root}/{MANIFEST_NAME}"
        if fs.get_file_info(manifest_path).type != pafs.FileType.NotFound:
            if not exist_ok:
                raise EpicError(f"topic {os.fspath(path)} already exists")
            topic = cls.open(path, filesystem=filesystem)
            if not _same_columns(topic.schema, schema):
                raise TopologyError(
                    f"topic {os.fspath(path)} exists with schema {topic.schema} but the writer"
                    f" has {schema}; delete the topic or fix the node's output schema")
            return topic
        manifest = TopicManifest(schema=schema.remove_metadata(), time_column=time_column,
                                 time_unit=time_unit)
        for d in (root, f"{root}/{SEGMENTS_DIR}/{TMP_DIR}", f"{root}/{CONSUMERS_DIR}"):
            fs.create_dir(d, recursive=True)
        publish(fs, manifest_path, manifest.to_json().encode())
        return cls(fs, root, manifest, os.fspath(path))

    @classmethod
    def open(cls, path: str | os.PathLike, *, filesystem: pafs.FileSystem | None = None) -> Topic:
        """Open an existing topic.

        Raises:
            InputError: There is no topic manifest at ``path``.
        """
        fs, root = resolve_filesystem(path, filesystem)
        manifest_path = f"{root}/{MANIFEST_NAME}"
        try:
            with fs.open_input_stream(manifest_path) as f:
                text = f.read().decode()
        except (FileNotFoundError, OSError) as e:
            raise InputError(f"not a topic (no {MANIFEST_NAME}): {e}", path=os.fspath(path)) from e
        return cls(fs, root, TopicManifest.from_json(text, path=manifest_path), os.fspath(path))

    @property
    def schema(self) -> pa.Schema:
        """The rows' Arrow schema."""
        return self.manifest.schema

    @property
    def segments_dir(self) -> str:
        return f"{self.root}/{SEGMENTS_DIR}"

    @property
    def tmp_dir(self) -> str:
        return f"{self.root}/{SEGMENTS_DIR}/{TMP_DIR}"

    # -- listing ----------------------------------------------------------------------------

    def _list_final(self) -> list[SegmentInfo]:
        """Every well-named final file, complete batch or not, truncated or not, by seq."""
        out = []
        for fi in self.fs.get_file_info(pafs.FileSelector(self.segments_dir, allow_not_found=True)):
            if fi.type != pafs.FileType.File:
                continue
            m = _NAME_RE.match(fi.base_name)
            if not m:
                continue
            out.append(SegmentInfo(seq=int(m["seq"]), producer=m["producer"],
                                   batch_id=int(m["batch"]), part=int(m["part"]),
                                   parts=int(m["parts"]), rows=int(m["rows"]), path=fi.path,
                                   size=fi.size))
        out.sort(key=lambda s: s.seq)
        return out

    def _record(self, path: str):
        """The JSON record at ``path``, read whole while its writer replaces it (an object
        store's read may be cut: a cut retention floor failed a rerun, and a cut consumer
        position skipped would let retention delete what that consumer still needs)."""
        return Location(self.fs, path, path).read_json()

    def _floor(self) -> int:
        """Sequence number below which retention may have deleted segments (0 if it never ran)."""
        path = f"{self.root}/{RETENTION_NAME}"
        try:
            return int(self._record(path)["floor"])
        except FileNotFoundError:
            return 0
        except (ValueError, KeyError, TypeError, OSError) as e:
            raise InputError(f"topic {self.uri}: unreadable retention record ({e}); it holds the "
                             "sequence number below which segments were deleted on purpose. "
                             "Fix: restore it, or write {\"floor\": N} with N the smallest "
                             "sequence number present", path=f"{self.root}/{RETENTION_NAME}") \
                from None

    def corrupt(self, s: SegmentInfo | str, why: str) -> InputError:
        """The error a reader raises for a committed segment it cannot read (see the module doc)."""
        return corrupt_segment_error(self.uri, s if isinstance(s, str) else s.path, why)

    def _is_intact(self, s: SegmentInfo) -> bool:
        """Whether the file ends with the IPC end-of-stream marker; False if it is gone."""
        key = (s.name, s.size)
        ok = self._valid.get(key)
        if ok is None:
            try:
                with self.fs.open_input_file(s.path) as f:
                    ok = s.size >= len(_IPC_EOS) and f.read_at(len(_IPC_EOS),
                                                                 s.size - len(_IPC_EOS)) == _IPC_EOS
            except (FileNotFoundError, OSError):
                return False  # not cached: the caller decides whether it is gone on purpose
            if ok:
                self._valid[key] = ok
        return ok

    def segments(self, start: int = 0, end: int | None = None) -> list[SegmentInfo]:
        """Visible segments with ``start <= seq < end``, in sequence order.

        A segment is visible when every part of its batch is present and intact. Sequence numbers
        have gaps (retention): iterate over this list, never compute the next number.

        Raises:
            InputError: a committed segment in the range is truncated or missing (module doc).
        """
        finals = self._list_final()
        floor = self._floor()  # read after listing: a deletion seen in the listing is covered
        # Sequence numbers are consecutive and retention keeps the newest segment, so a reader
        # never stands past the newest segment + 1 unless committed segments vanished.
        newest = finals[-1].seq if finals else -1
        if start > max(newest + 1, floor):
            raise InputError(
                f"topic {self.uri}: a reader is at sequence number {start} but the newest "
                f"segment is {newest if finals else 'none'}: committed segments it read were "
                f"deleted (or the topic was re-created under its readers). {_LOST}")
        if not finals:
            return []
        groups: dict[tuple[str, int], list[SegmentInfo]] = {}
        for s in finals:
            groups.setdefault((s.producer, s.batch_id), []).append(s)
        top = finals[-1].seq
        visible = []
        for s in finals:
            if s.seq < start or (end is not None and s.seq >= end):
                continue
            g = groups[(s.producer, s.batch_id)]
            if len(g) != s.parts or {x.part for x in g} != set(range(s.parts)):
                if max(x.seq for x in g) == top:
                    continue  # the newest batch, being committed (or its commit crashed)
                raise self.corrupt(s, f"batch {s.batch_id} of producer {s.producer!r} has parts "
                                      f"{sorted(x.part for x in g)} of 0..{s.parts - 1}: a "
                                      "committed part is missing")
            for x in g:
                if not self._is_intact(x):
                    if self.fs.get_file_info(x.path).type == pafs.FileType.NotFound:
                        if x.seq < self._floor():
                            break  # deleted by retention meanwhile: simply absent
                        raise self.corrupt(x, "the committed segment was deleted")
                    raise self.corrupt(x, "the file is truncated (no Arrow IPC end-of-stream "
                                          "marker)")
            else:
                visible.append(s)
        lo = max(start, floor)
        hi = top if end is None else min(top, end - 1)
        if hi >= lo:
            present = {s.seq for s in finals if lo <= s.seq <= hi}
            if len(present) != hi - lo + 1:
                gone = next(q for q in range(lo, hi + 1) if q not in present)
                before = [s for s in finals if s.seq < gone]
                after = next(s for s in finals if s.seq > gone)
                raise InputError(
                    f"topic {self.uri}: the committed segment with sequence number {gone} is "
                    f"missing (between {before[-1].name if before else 'the start'} and "
                    f"{after.name}; retention deletes only below {floor}). {_LOST}")
        return visible

    def segment_meta(self, segment: SegmentInfo | str) -> SegmentMeta:
        """Read a segment's metadata (its schema message only, not its data)."""
        path = segment.path if isinstance(segment, SegmentInfo) else segment
        try:
            with self.fs.open_input_stream(path) as f:
                return SegmentMeta.from_metadata(ipc.open_stream(f).schema.metadata)
        except (OSError, pa.ArrowInvalid, ValueError) as e:
            raise self.corrupt(path, f"{type(e).__name__}: {e}") from None

    def status(self) -> TopicStatus:
        """Newest visible segment's sequence number, watermark and end-of-stream flag.

        This is how a driver learns that an upstream topic has ended (``status().eos``).
        """
        segs = self.segments()
        if not segs:
            return TopicStatus(last_seq=None, next_offset=0, watermark=None, eos=False)
        last = segs[-1]
        meta = self.segment_meta(last)
        wm = meta.watermark
        # A producer may commit segments without a watermark after ones with one; the watermark
        # never goes back, so the newest one that has it holds.
        for s in reversed(segs[:-1]):
            if wm is not None:
                break
            wm = self.segment_meta(s).watermark
        return TopicStatus(last_seq=last.seq, next_offset=last.seq + 1, watermark=wm, eos=meta.eos)

    # -- reading ----------------------------------------------------------------------------

    def read_segment(self, segment: SegmentInfo | str) -> tuple[SegmentMeta, list[pa.RecordBatch]]:
        """Read one whole segment: its metadata and its record batches (schema metadata removed)."""
        path = segment.path if isinstance(segment, SegmentInfo) else segment
        try:
            with self.fs.open_input_stream(path) as f:
                reader = ipc.open_stream(f)
                meta = SegmentMeta.from_metadata(reader.schema.metadata)
                batches = [b.replace_schema_metadata(None) for b in reader]
        except (OSError, pa.ArrowInvalid, ValueError) as e:
            raise self.corrupt(path, f"{type(e).__name__}: {e}") from None
        check_segment_rows(self.uri, path, sum(b.num_rows for b in batches))
        return meta, batches

    def read(self, start: int = 0, end: int | None = None
             ) -> Iterator[tuple[SegmentInfo, SegmentMeta, list[pa.RecordBatch]]]:
        """Yield ``(info, meta, batches)`` for each visible segment with ``start <= seq < end``."""
        for s in self.segments(start, end):
            meta, batches = self.read_segment(s)
            yield s, meta, batches

    def read_table(self, start: int = 0, end: int | None = None) -> pa.Table:
        """All rows of the visible segments with ``start <= seq < end`` as one table."""
        batches = [b for _, _, bs in self.read(start, end) for b in bs]
        return pa.Table.from_batches(batches, schema=self.schema)

    # -- writing ----------------------------------------------------------------------------

    def conform(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """Re-label ``batch`` with the topic schema (zero-copy), or explain the mismatch.

        Raises:
            TopologyError: Column names or types differ from the topic's.
        """
        if batch.schema.equals(self.schema):
            return batch
        if len(self.schema) == batch.num_columns and \
                any(pa.types.is_dictionary(t) for t in batch.schema.types):
            # a dictionary-encoded column is stored as its values (epic.spark.tags.stored)
            batch = pa.RecordBatch.from_arrays(
                [c.cast(f.type) if pa.types.is_dictionary(c.type) and c.type.value_type == f.type
                 else c for c, f in zip(batch.columns, self.schema)],
                names=batch.schema.names)
        if not _same_columns(batch.schema, self.schema):
            raise TopologyError(
                f"topic {self.uri}: schema mismatch: the topic has"
                f" [{', '.join(f'{f.name}: {f.type}' for f in self.schema)}] but a batch has"
                f" [{', '.join(f'{f.name}: {f.type}' for f in batch.schema)}];"
                " fix the producing node's output schema or write to a new topic")
        return pa.RecordBatch.from_arrays(batch.columns, schema=self.schema)

    def open_temp(self, *, producer: str, batch_id: int, part: int = 0,
                  watermark: int | None = None, eos: bool = False,
                  step: int | None = None) -> TempWriter:
        """Start a temp segment to write batches into incrementally (see :class:`TempWriter`)."""
        _check_producer(producer)
        return TempWriter(self, SegmentMeta(producer, batch_id, watermark, eos, step), part)

    def write_temp(self, batches: Iterable[pa.RecordBatch], *, producer: str, batch_id: int,
                   part: int = 0, watermark: int | None = None, eos: bool = False,
                   step: int | None = None) -> TempSegment:
        """Write ``batches`` to a durable temp file (invisible until :meth:`commit_batch`)."""
        with self.open_temp(producer=producer, batch_id=batch_id, part=part,
                            watermark=watermark, eos=eos, step=step) as w:
            for b in batches:
                w.write(b)
        return w.result

    def commit_batch(self, producer: str, batch_id: int, temps: Sequence[TempSegment | None], *,
                     watermark: int | None = None, eos: bool = False,
                     write_marker: bool | None = None,
                     step: int | None = None, marker_after: bool = False) -> list[SegmentInfo]:
        """Make a batch's temp segments visible, exactly once per ``(producer, batch_id)``.

        Steps: if this batch or a later batch of ``producer`` is complete, the temps are replays
        and are deleted; otherwise the invisible leftovers of an interrupted earlier commit of this
        batch are deleted, then the non-empty temps are renamed, in part order, to consecutive
        sequence numbers after the newest final file. Finally the producer's stale temp files
        (failed task attempts) are removed.

        Args:
            producer: Producer id (one producer writes a topic at a time).
            batch_id: The producer's batch id; batch ids of a producer never decrease.
            temps: The batch's temp segments (``None`` and zero-row entries are skipped).
            watermark: Watermark for a marker segment written when no temp has rows.
            eos: End-of-stream flag for such a marker segment.
            step: Progress counter for such a marker segment (see :class:`SegmentMeta`).
            write_marker: Write a zero-row marker segment when no temp has rows. Default: only
                when it carries news (``eos``, or a watermark newer than the producer's last).
            marker_after: When temps have rows, also append a zero-row segment carrying
                ``watermark`` / ``eos`` / ``step`` as the batch's last part (readers take a batch's
                markers from its last part): for a producer whose temps were stamped with other
                markers than the batch's (the partitions of a keyed stateful node).

        Returns:
            The batch's visible segments (the earlier ones on a replay), empty if nothing to write.
        """
        _check_producer(producer)
        finals = self._list_final()
        mine = [s for s in finals if s.producer == producer]
        done = [s for s in mine if s.batch_id >= batch_id and self._group_complete(s, mine)]
        if done:
            self._delete([t.path for t in temps if t is not None])
            self._clean_tmp(producer, batch_id)
            return [s for s in done if s.batch_id == batch_id]
        leftovers = [s for s in mine if s.batch_id == batch_id]
        self._delete([s.path for s in leftovers])
        finals = [s for s in finals if s not in leftovers]

        full = sorted((t for t in temps if t is not None and t.rows > 0), key=lambda t: t.part)
        self._delete([t.path for t in temps if t is not None and t.rows == 0])
        if not full:
            if write_marker is None:
                write_marker = eos or (watermark is not None and self._news(mine, watermark))
            if not write_marker:
                self._clean_tmp(producer, batch_id)
                return []
            full = [self.write_temp([], producer=producer, batch_id=batch_id,
                                    watermark=watermark, eos=eos, step=step)]
        elif marker_after:
            full.append(self.write_temp([], producer=producer, batch_id=batch_id,
                                        part=full[-1].part + 1, watermark=watermark, eos=eos,
                                        step=step))
        seq0 = max(finals[-1].seq + 1 if finals else 0, self._floor())
        out = []
        for i, t in enumerate(full):
            name = _segment_name(seq0 + i, producer, batch_id, i, len(full), t.rows)
            dest = f"{self.segments_dir}/{name}"
            self.fs.move(t.path, dest)
            out.append(SegmentInfo(seq0 + i, producer, batch_id, i, len(full), t.rows, dest,
                                   self.fs.get_file_info(dest).size))
        fsync_local(self.fs, self.segments_dir, directory=True)
        self._clean_tmp(producer, batch_id)
        return out

    def append(self, batches: Iterable[pa.RecordBatch], *, producer: str, batch_id: int,
               watermark: int | None = None, eos: bool = False) -> list[SegmentInfo]:
        """Write and commit one single-part batch (for producers outside Spark, and tests)."""
        tmp = self.write_temp(batches, producer=producer, batch_id=batch_id, watermark=watermark,
                              eos=eos)
        return self.commit_batch(producer, batch_id, [tmp], watermark=watermark, eos=eos)

    def append_marker(self, *, producer: str, batch_id: int, watermark: int | None = None,
                      eos: bool = False) -> list[SegmentInfo]:
        """Commit a zero-row segment that only carries a watermark and/or end of stream."""
        return self.commit_batch(producer, batch_id, [], watermark=watermark, eos=eos,
                                 write_marker=True)

    def last_batch_id(self, producer: str) -> int | None:
        """Highest complete batch id of ``producer``, None if it has committed nothing visible."""
        ids = [s.batch_id for s in self.segments() if s.producer == producer]
        return max(ids) if ids else None

    def newest_batch_id(self, producer: str) -> int | None:
        """Highest batch id among ``producer``'s segment files, None if there is none: a listing
        only, without :meth:`segments`' checks (the batch may be partly renamed yet, and
        retention may have deleted parts of older ones)."""
        ids = [s.batch_id for s in self._list_final() if s.producer == producer]
        return max(ids) if ids else None

    def _news(self, mine: list[SegmentInfo], watermark: int) -> bool:
        for s in reversed(mine):
            wm = self.segment_meta(s).watermark
            if wm is not None:
                return watermark > wm
        return True

    @staticmethod
    def _group_complete(s: SegmentInfo, mine: list[SegmentInfo]) -> bool:
        parts = {x.part for x in mine if x.batch_id == s.batch_id}
        return parts == set(range(s.parts))

    def _delete(self, paths: Iterable[str]) -> None:
        for p in paths:
            try:
                self.fs.delete_file(p)
            except (FileNotFoundError, OSError):
                pass  # already gone: deletion is idempotent by design

    def _clean_tmp(self, producer: str, batch_id: int) -> None:
        """Delete ``producer``'s temps of batches up to ``batch_id``: all such writers are done."""
        stale = []
        for fi in self.fs.get_file_info(pafs.FileSelector(self.tmp_dir, allow_not_found=True)):
            parts = fi.base_name.split(".")
            if len(parts) >= 3 and parts[0] == producer and parts[1].startswith("b"):
                try:
                    if int(parts[1][1:]) <= batch_id:
                        stale.append(fi.path)
                except ValueError:
                    continue
        self._delete(stale)

    # -- consumers and retention --------------------------------------------------------------

    def _consumer_path(self, name: str) -> str:
        if not _CONSUMER_RE.match(name or ""):
            raise EpicError(f"invalid consumer name {name!r}: use letters, digits, '_', '.', '-'")
        return f"{self.root}/{CONSUMERS_DIR}/{name}"

    def register_consumer(self, name: str) -> int:
        """Register ``name`` (position 0 if new) so retention waits for it; return its position."""
        pos = self.consumers().get(name)
        if pos is None:
            self.commit_consumer(name, 0)
            pos = 0
        return pos

    def commit_consumer(self, name: str, position: int) -> None:
        """Record that consumer ``name`` has processed every segment with ``seq < position``.

        Positions never go back: a smaller position than the recorded one is ignored (a replayed
        commit after a restart).
        """
        path = self._consumer_path(name)
        old = self.consumers().get(name)
        if old is not None and position <= old:
            return
        publish(self.fs, path, json.dumps({"position": int(position)}).encode())

    def unregister_consumer(self, name: str) -> None:
        """Forget consumer ``name``: retention no longer waits for it."""
        self._delete([self._consumer_path(name)])

    def consumers(self) -> dict[str, int]:
        """Registered consumers and their positions."""
        out = {}
        for fi in self.fs.get_file_info(pafs.FileSelector(f"{self.root}/{CONSUMERS_DIR}",
                                                          allow_not_found=True)):
            if fi.type != pafs.FileType.File or fi.base_name.startswith("."):
                continue
            try:
                out[fi.base_name] = int(self._record(fi.path)["position"])
            except (ValueError, KeyError, OSError):
                continue  # a half-written file cannot exist (atomic write); skip foreign files
        return out

    def apply_retention(self) -> list[SegmentInfo]:
        """Delete segments every registered consumer has committed past; return them.

        Nothing is deleted without registered consumers. The newest final segment, and every part
        of each producer's newest batch, are always kept: sequence numbers continue from the
        former, and :meth:`commit_batch` detects a replay of a producer's last batch (a crash
        between its commit here and the producer's own commit record) by the latter.
        """
        lock = None
        if isinstance(self.fs, pafs.LocalFileSystem):
            # the queries reading a topic commit (and run this) in processes of their own: the
            # record's read-modify-write (floor, rows deleted) is serialised on a local disk
            import fcntl

            lock = open(os.path.join(self.root, "_retention.lock"), "a")
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            cons = self.consumers()
            return self._apply_retention(min(cons.values())) if cons else []
        finally:
            if lock is not None:
                lock.close()

    def _apply_retention(self, low: int) -> list[SegmentInfo]:
        finals = self._list_final()
        if not finals:
            return []
        newest = finals[-1].seq
        last_batch: dict[str, int] = {}
        for s in finals:
            last_batch[s.producer] = max(last_batch.get(s.producer, s.batch_id), s.batch_id)
        doomed = [s for s in finals if s.seq < low and s.seq != newest
                  and s.batch_id != last_batch[s.producer]]
        if doomed:
            # Recorded before anything is deleted: readers tell these gaps from lost files. The
            # record also counts, per producer, the rows of the segments it lets go: a
            # producer's doomed segments are all of its segments below a bound (retention keeps
            # only its newest batch), so "counted below" is one number per producer, and a
            # segment a crashed run counted but did not delete is not counted twice.
            old = self._retention_record()
            floor = max(old["floor"], max(s.seq for s in doomed) + 1)
            rows, below = dict(old["rows"]), dict(old["below"])
            for s in doomed:
                if s.seq >= old["below"].get(s.producer, 0):
                    rows[s.producer] = rows.get(s.producer, 0) + s.rows
                below[s.producer] = max(below.get(s.producer, 0), s.seq + 1)
            publish(self.fs, f"{self.root}/{RETENTION_NAME}",
                    json.dumps({"floor": floor, "rows": rows, "below": below}).encode())
        self._delete([s.path for s in doomed])
        return doomed

    def _retention_record(self) -> dict:
        """``{"floor": ..., "rows": {producer: rows deleted}, "below": {producer: seq}}``: every
        segment of a producer below its ``below`` was counted in ``rows`` (a record of an older
        epic has neither: its deleted rows are not counted)."""
        floor = self._floor()
        try:
            rec = self._record(f"{self.root}/{RETENTION_NAME}")
        except FileNotFoundError:
            rec = {}
        return {"floor": floor,
                "rows": {str(k): int(v) for k, v in (rec.get("rows") or {}).items()},
                "below": {str(k): int(v) for k, v in (rec.get("below") or {}).items()}}

    def rows_written(self, producer: str) -> int:
        """Rows ``producer`` committed to the topic in all: its segments present and those
        retention deleted (counted in the retention record when it let them go)."""
        rec = self._retention_record()
        below = rec["below"].get(producer, 0)
        return rec["rows"].get(producer, 0) + sum(
            s.rows for s in self._list_final() if s.producer == producer and s.seq >= below)


class TempWriter:
    """Writes one temp segment incrementally; on a clean ``close`` the file is flushed and fsynced.

    Opened lazily: no file exists until the first batch (or ``close`` of an empty writer, which
    writes a zero-row segment). Use as a context manager; an exception deletes the temp file.
    """

    def __init__(self, topic: Topic, meta: SegmentMeta, part: int):
        self.topic = topic
        self.meta = meta
        self.part = part
        self.rows = 0
        self.path = (f"{topic.tmp_dir}/{meta.producer}.b{meta.batch_id}.p{part}."
                     f"{uuid.uuid4().hex}.arrow")
        self._sink = None
        self._writer = None
        self.result: TempSegment | None = None

    def _open(self) -> None:
        self._sink = self.topic.fs.open_output_stream(self.path)
        schema = self.topic.schema.with_metadata(self.meta.to_metadata())
        self._writer = ipc.new_stream(self._sink, schema)

    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Append rows (a batch or a table) after checking them against the topic schema."""
        if self._writer is None:
            self._open()
        if isinstance(batch, pa.Table):
            for b in batch.to_batches():
                self.write(b)
            return
        self._writer.write_batch(self.topic.conform(batch))
        self.rows += batch.num_rows

    def close(self) -> TempSegment:
        """Finish the file (IPC end marker), flush and fsync it; return the :class:`TempSegment`."""
        if self._writer is None:
            self._open()
        self._writer.close()
        self._sink.close()
        fsync_local(self.topic.fs, self.path)
        self.result = TempSegment(self.path, self.meta.producer, self.meta.batch_id, self.part,
                                  self.rows)
        return self.result

    def discard(self) -> None:
        """Abandon the file."""
        try:
            if self._writer is not None:
                self._sink.close()
        finally:
            self.topic._delete([self.path])

    def __enter__(self) -> TempWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.discard()


_LOST = ("Its rows would be lost, so the consumer stops. Fix: restore the file from a backup, or "
         "reset the topic from its producer (docs/deploy.md, 'Corrupt topics and sidecars')")


def corrupt_segment_error(topic: str, path: str, why: str) -> InputError:
    """An :class:`InputError` for a committed segment that cannot be read: names the topic, the
    segment, its producer and batch, and what the user does about it."""
    name = path.rsplit("/", 1)[-1]
    m = _NAME_RE.match(name)
    what = (f"segment {name} (producer {m['producer']!r}, batch {m['batch']}, part "
            f"{int(m['part']) + 1} of {m['parts']})" if m else f"segment {name}")
    err = InputError(f"topic {topic}: {what} is corrupt: {why}. {_LOST}")
    err.path = path
    return err


def check_segment_rows(topic: str, path: str, rows: int) -> None:
    """Raise :func:`corrupt_segment_error` if ``rows`` differs from the count in the file name."""
    m = _NAME_RE.match(path.rsplit("/", 1)[-1])
    if m and int(m["rows"]) != rows:
        raise corrupt_segment_error(topic, path, f"it holds {rows} rows, its name says "
                                                 f"{m['rows']}")


# -- inspection helpers for `epic topics ls|tail|stat` -------------------------------------------

@dataclass(frozen=True)
class TopicStat:
    """Summary of a topic for ``epic topics stat``.

    Attributes:
        uri: The topic path or URI.
        manifest: Its manifest.
        segments: Visible segments.
        rows: Total visible rows.
        bytes: Total visible bytes.
        first_seq: Smallest visible sequence number, None if empty.
        status: Newest segment's position, watermark and end-of-stream flag.
        consumers: Registered consumers and positions.
        hidden_files: Final files not visible (incomplete batch or truncated).
        temp_files: Files under ``_tmp`` (in-flight writes or orphans).
    """

    uri: str
    manifest: TopicManifest
    segments: int
    rows: int
    bytes: int
    first_seq: int | None
    status: TopicStatus
    consumers: dict[str, int]
    hidden_files: int
    temp_files: int


def ls(path: str | os.PathLike, *, with_meta: bool = True
       ) -> list[tuple[SegmentInfo, SegmentMeta | None]]:
    """Visible segments of the topic at ``path``, each with its metadata if ``with_meta``."""
    t = Topic.open(path)
    return [(s, t.segment_meta(s) if with_meta else None) for s in t.segments()]


def tail(path: str | os.PathLike, rows: int = 10) -> pa.Table:
    """The last ``rows`` rows of the topic at ``path`` (reads only the newest segments needed)."""
    t = Topic.open(path)
    picked, n = [], 0
    for s in reversed(t.segments()):
        if n >= rows:
            break
        picked.append(s)
        n += s.rows
    batches = [b for s in reversed(picked) for b in t.read_segment(s)[1]]
    table = pa.Table.from_batches(batches, schema=t.schema)
    return table.slice(max(0, table.num_rows - rows))


def stat(path: str | os.PathLike) -> TopicStat:
    """Summarise the topic at ``path``."""
    t = Topic.open(path)
    finals = t._list_final()
    segs = t.segments()
    temps = [fi for fi in t.fs.get_file_info(pafs.FileSelector(t.tmp_dir, allow_not_found=True))
             if fi.type == pafs.FileType.File]
    return TopicStat(uri=t.uri, manifest=t.manifest, segments=len(segs),
                     rows=sum(s.rows for s in segs), bytes=sum(s.size for s in segs),
                     first_seq=segs[0].seq if segs else None, status=t.status(),
                     consumers=t.consumers(), hidden_files=len(finals) - len(segs),
                     temp_files=len(temps))


def format_ls(entries: list[tuple[SegmentInfo, SegmentMeta | None]]) -> str:
    """Render :func:`ls` output as an aligned text table."""
    lines = [f"{'seq':>8} {'producer':<16} {'batch':>7} {'part':>7} {'rows':>10} {'bytes':>12}"
             f" {'watermark':>20} eos"]
    for s, m in entries:
        wm = "" if m is None or m.watermark is None else str(m.watermark)
        eos = "" if m is None else ("yes" if m.eos else "")
        lines.append(f"{s.seq:>8} {s.producer:<16} {s.batch_id:>7} {f'{s.part + 1}/{s.parts}':>7}"
                     f" {s.rows:>10} {s.size:>12} {wm:>20} {eos}")
    return "\n".join(lines)


def format_tail(table: pa.Table) -> str:
    """Render :func:`tail` output as text (one row per line, ints exact)."""
    cols = table.column_names
    lines = ["\t".join(cols)]
    for row in table.to_pylist():
        lines.append("\t".join(str(row[c]) for c in cols))
    return "\n".join(lines)


def format_stat(s: TopicStat) -> str:
    """Render :func:`stat` output as text."""
    m = s.manifest
    out = [
        f"topic      {s.uri}",
        f"id         {m.topic_id}",
        f"schema     {', '.join(f'{f.name}: {f.type}' for f in m.schema)}",
        f"time       {m.time_column or '-'} ({m.time_unit})",
        f"segments   {s.segments}"
        + (f" (seq {s.first_seq}..{s.status.last_seq})" if s.segments else ""),
        f"rows       {s.rows}",
        f"bytes      {s.bytes}",
        f"watermark  {'-' if s.status.watermark is None else s.status.watermark}",
        f"ended      {'yes' if s.status.eos else 'no'}",
        f"consumers  {', '.join(f'{k}@{v}' for k, v in sorted(s.consumers.items())) or '-'}",
    ]
    if s.hidden_files or s.temp_files:
        out.append(f"invisible  {s.hidden_files} incomplete/truncated, {s.temp_files} temp files")
    return "\n".join(out)
