"""Sinks: where streams go. CSV (exact column order and formatting), Parquet, Arrow topic,
console, and an in-memory collector for tests.

Sinks are frozen configs. A runtime wraps one in a :class:`SinkOperator`, which selects and orders
the columns and, with ``delays=True``, prepends EPIC's two delay-logging columns: the row's entry
time (the newest arrival wall time among the input rows that made it, carried in ``_entry``) and
the wall time when the row is written, both in nanoseconds since the epoch. Their difference is
the row's delay. Delay columns need ``Topology(..., delay_logging=True)``.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import pyarrow as pa

from .errors import OutputError, SpecError
from .paths import is_remote, output_path
from .operator import ENTRY_COLUMN

__all__ = [
    "Sink",
    "CsvSink",
    "ParquetSink",
    "TopicSink",
    "ConsoleSink",
    "CollectSink",
    "csv_sink",
    "parquet_sink",
    "topic_sink",
    "console_sink",
    "collect_sink",
    "DELAY_COLUMNS",
]

#: Default names of the delay-logging columns a sink prepends.
DELAY_COLUMNS = ("entry_time", "write_time")


class Sink:
    """Base of sink configs."""

    columns: tuple[str, ...] | None = None
    delays: bool = False
    delay_columns: tuple[str, str] = DELAY_COLUMNS
    #: True if the output is only usable once the input has ended (not for unbounded streams).
    blocking: bool = False

    def check(self, schema: pa.Schema, time: str, unit: str) -> None:
        """Raise :class:`SpecError` if the sink cannot write ``schema``."""
        if self.columns is not None:
            missing = [c for c in self.columns if c not in schema.names or c == ENTRY_COLUMN]
            if missing:
                raise SpecError(f"columns {missing} are not in the stream; choose from "
                                f"{', '.join(n for n in schema.names if n != ENTRY_COLUMN)}")
            if len(set(self.columns)) != len(self.columns):
                raise SpecError(f"columns {list(self.columns)} repeat a column; give each "
                                "column once")
        if self.delays and ENTRY_COLUMN not in schema.names:
            raise SpecError("delays=True needs delay logging: create the topology with "
                            "epic.Topology(name, delay_logging=True)")

    def output_schema(self, schema: pa.Schema) -> pa.Schema:
        """The schema of the rows written, given the input schema."""
        names = list(self.columns) if self.columns is not None else \
            [n for n in schema.names if n != ENTRY_COLUMN]
        fields = [schema.field(n) for n in names]
        if self.delays:
            fields = [pa.field(self.delay_columns[0], pa.int64()),
                      pa.field(self.delay_columns[1], pa.int64())] + fields
        return pa.schema(fields)

    def open(self, schema: pa.Schema, time: str, unit: str, node: str):
        """A writer with ``write(batch, watermark)`` and ``close(watermark)``."""
        raise NotImplementedError

    def describe(self) -> str:
        return type(self).__name__


def _parent(path: str):
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)


def _staged(path: str, what: str):
    """``(local file to write, publish(), discard())`` for a file sink's output: a local path is
    written in place; a remote one (``s3://``...) to a local temp file uploaded by ``publish``
    when the stream ends. An object cannot be appended to, and the upload makes it visible whole
    or not at all (docs/deploy.md, "Storage")."""
    import tempfile

    from .storage import resolve

    if not is_remote(path):
        _parent(path)
        return path, lambda: None, lambda: None
    loc = resolve(path, what)
    fd, tmp = tempfile.mkstemp(prefix=f".{loc.name}.", suffix=".tmp")
    os.close(fd)

    def publish():
        import pyarrow.fs as pafs

        from .storage import LOCAL

        try:
            pafs.copy_files(tmp, loc.path, source_filesystem=LOCAL,
                            destination_filesystem=loc.fs)
        finally:
            os.remove(tmp)

    def discard():
        try:
            os.remove(tmp)
        except OSError:
            pass
    return tmp, publish, discard


def _cols(columns) -> tuple[str, ...] | None:
    if columns is None:
        return None
    if isinstance(columns, str):
        raise SpecError(f"columns must be a list of names, got the string {columns!r}")
    return tuple(columns)


@dataclass(frozen=True)
class CsvSink(Sink):
    """See :func:`csv_sink`."""

    path: str
    columns: tuple[str, ...] | None = None
    header: bool = True
    delimiter: str = ","
    float_format: str | None = None
    delays: bool = False
    delay_columns: tuple[str, str] = DELAY_COLUMNS

    def __post_init__(self):
        if len(self.delimiter) != 1:
            raise SpecError(f"csv_sink: delimiter={self.delimiter!r}; give one character")
        if self.float_format is not None:
            try:
                format(1.5, self.float_format)
            except ValueError as exc:
                raise SpecError(f"csv_sink: float_format={self.float_format!r} is not a format "
                                "spec for floats (try '.6f')") from exc

    def open(self, schema, time, unit, node):
        from .csvio import CsvWriter
        from .errors import OutputError

        target, publish, discard = _staged(self.path, f"sink {node!r}")
        out = self.output_schema(schema)
        w = CsvWriter(target, columns=out.names, header=self.header,
                      delimiter=self.delimiter, float_format=self.float_format, background=True)

        def close(wm):
            try:
                w.close()
            except BaseException:
                discard()
                raise
            try:
                publish()
            except OSError as exc:
                raise OutputError(self.path, exc, fix="check the store's credentials and "
                                  "permissions and rerun") from None
        return _Writer(lambda b, wm: w.write(b), close)

    def describe(self):
        return f"csv {os.path.basename(self.path)}"


def csv_sink(path: str | os.PathLike, *, columns: Sequence[str] | None = None, header: bool = True,
             delimiter: str = ",", float_format: str | None = None, delays: bool = False,
             delay_columns: tuple[str, str] = DELAY_COLUMNS) -> CsvSink:
    """Write CSV with exactly the given columns, in that order (EPIC-style logs).

    Integers keep every digit; floats use the shortest round-trip form unless ``float_format``
    (e.g. ``".6f"``). With ``delays=True`` two columns (entry time, write time, ns) come first.

    Example:
        >>> csv_sink("out/q1.csv", columns=["ts", "player_id", "speed"], float_format=".3f").columns
        ('ts', 'player_id', 'speed')
    """
    return CsvSink(output_path(path, "csv_sink path"), _cols(columns), header, delimiter, float_format, delays,
                   tuple(delay_columns))


@dataclass(frozen=True)
class ParquetSink(Sink):
    """See :func:`parquet_sink`."""

    path: str
    columns: tuple[str, ...] | None = None
    delays: bool = False
    delay_columns: tuple[str, str] = DELAY_COLUMNS
    blocking: bool = True  # the file is readable only once closed
    #: ``pyarrow.parquet.ParquetWriter`` keywords given to :func:`parquet_sink`, as sorted
    #: ``(name, value)`` pairs (lists as tuples: the sink is hashable)
    options: tuple = ()
    #: the columns written as Parquet REQUIRED (no nulls); True: every column
    required: tuple[str, ...] | bool = ()

    def writer_options(self, schema: pa.Schema) -> dict:
        """The keywords of this sink's ``pyarrow.parquet.ParquetWriter`` (its ``options``)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in self.options}

    def output_schema(self, schema: pa.Schema) -> pa.Schema:
        """The rows' schema, the :attr:`required` columns not nullable."""
        out = super().output_schema(schema)
        if not self.required:
            return out
        req = set(out.names) if self.required is True else set(self.required)
        return pa.schema([f.with_nullable(False) if f.name in req else f for f in out])

    def check(self, schema, time, unit):
        super().check(schema, time, unit)
        if self.required and self.required is not True:
            names = super().output_schema(schema).names
            missing = [c for c in self.required if c not in names]
            if missing:
                raise SpecError(f"parquet_sink {self.path}: required columns {missing} are not "
                                f"written; choose from {', '.join(names)}")
        if not self.options:
            return
        import pyarrow.parquet as pq

        out = self.output_schema(schema)
        try:   # an empty file in memory: the options' names and values as the writer sees them
            pq.ParquetWriter(pa.BufferOutputStream(), out, **self.writer_options(out)).close()
        except (TypeError, ValueError, pa.ArrowException) as exc:
            raise SpecError(f"parquet_sink {self.path}: options {dict(self.options)!r} are not "
                            f"accepted by pyarrow.parquet.ParquetWriter ({exc}); see its "
                            "documentation for the names and values") from None

    def open(self, schema, time, unit, node):
        import uuid

        import pyarrow.parquet as pq

        from .errors import OutputError

        target, publish, discard = _staged(self.path, f"sink {node!r}")
        out = self.output_schema(schema)
        # Written to a temp file renamed at the end: the file is only readable once closed, and
        # a failed write (a full disk) must not leave a broken file under the final name. A
        # remote output's local staging file is that temp file; its upload is the rename.
        tmp = target if target != self.path else os.path.join(
            os.path.dirname(os.path.abspath(self.path)),
            f".{os.path.basename(self.path)}.{uuid.uuid4().hex}.tmp")

        files = []   # the temp file's handle: closed on a failure too (no descriptor held
        #              on a deleted file until the writer is garbage-collected)

        def guarded(fn):
            def call(*args):
                try:
                    return fn(*args)
                except OSError as exc:
                    for f in files:
                        try:
                            f.close()
                        except OSError:
                            pass
                    try:
                        os.remove(tmp)
                    except OSError:
                        pass
                    raise OutputError(self.path, exc, fix="free space or fix the permissions"
                                      " and rerun") from None
            return call

        def open_writer(path):
            files.append(pa.OSFile(path, "wb"))
            return pq.ParquetWriter(files[0], out, **self.writer_options(out))

        w = guarded(open_writer)(tmp)
        group = ParquetGroups(w, out)

        def close(wm):
            group.close()
            w.close()
            files[0].close()
            if target == self.path:
                os.replace(tmp, self.path)
            else:
                publish()
        return _Writer(guarded(lambda b, wm: group.write(b)), guarded(close))

    def describe(self):
        return f"parquet {os.path.basename(self.path)}"


#: Rows per row group of a Parquet sink's file: batches are buffered up to this many rows (or
#: :data:`PARQUET_GROUP_BYTES`) and written as one row group. Small row groups cost: each starts
#: its dictionaries afresh (real q3 rows, 15-minute slice: 95-100 ns per row in groups of 256 K
#: rows, 77-80 ns in groups of 1 M; docs/performance.md, session 22).
PARQUET_GROUP_ROWS = 1 << 20
#: ... or this many bytes of Arrow data, whichever comes first (memory stays bounded).
PARQUET_GROUP_BYTES = 64 << 20


class ParquetGroups:
    """Batches into a ``ParquetWriter`` in row groups of :data:`PARQUET_GROUP_ROWS` rows (or
    fewer, at :data:`PARQUET_GROUP_BYTES` and at the end; a batch that crosses the limit is
    split), each encoded and written on a background thread while the
    caller goes on (pyarrow releases the GIL: the window or report that makes the next rows
    runs meanwhile), one row group at most in flight. :meth:`close` writes what is held and
    waits; a failed write raises there or at the next :meth:`write`. As a context manager, on
    an exception it only waits for the row group in flight (so that the writer can be closed).
    """

    def __init__(self, writer, schema: pa.Schema):
        from concurrent.futures import ThreadPoolExecutor

        self.writer = writer
        self.schema = schema
        self._held: list[pa.RecordBatch] = []
        self._rows = 0
        self._bytes = 0
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="epic-parquet")
        self._flight = None   # the Future of the row group being written

    def write(self, batch: pa.RecordBatch) -> None:
        if not batch.num_rows:
            return
        self._held.append(pa.RecordBatch.from_arrays(batch.columns, schema=self.schema))
        self._rows += batch.num_rows
        self._bytes += batch.nbytes
        while self._rows >= PARQUET_GROUP_ROWS or self._bytes >= PARQUET_GROUP_BYTES:
            self._submit(PARQUET_GROUP_ROWS)

    def _submit(self, limit: int | None = None) -> None:
        """Write the held rows as a row group: at most ``limit`` of them, the rest held for the
        next (a table of 1.4 M rows would otherwise be written as groups of 1 M and 0.4 M)."""
        if not self._held:
            return
        table = pa.Table.from_batches(self._held, schema=self.schema)
        self._held, rows, nbytes = [], self._rows, self._bytes
        self._rows = self._bytes = 0
        if limit is not None and table.num_rows > limit:
            rest = table.slice(limit)
            table = table.slice(0, limit)
            self._held = [b for b in rest.to_batches() if b.num_rows]
            self._rows = rest.num_rows
            self._bytes = nbytes * rest.num_rows // rows
        self._wait()
        self._flight = self._pool.submit(self.writer.write_table, table,
                                         row_group_size=PARQUET_GROUP_ROWS)

    def _wait(self) -> None:
        if self._flight is not None:
            flight, self._flight = self._flight, None
            flight.result()   # re-raises a failed write

    def close(self) -> None:
        """Write the held rows, wait for every row group, stop the thread."""
        try:
            self._submit()
            self._wait()
        finally:
            self._stop()

    def _stop(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def __enter__(self) -> "ParquetGroups":
        return self

    def __exit__(self, kind, exc, tb) -> None:
        if kind is None:
            self.close()
            return
        try:
            self._wait()
        except Exception:   # the write's own error; the one raised already is reported
            pass
        finally:
            self._stop()


#: Keywords of ``pyarrow.parquet.ParquetWriter`` that a sink decides itself.
_NOT_OPTIONS = frozenset({"where", "schema", "filesystem"})


def parquet_sink(path: str | os.PathLike, *, columns: Sequence[str] | None = None,
                 delays: bool = False, options: dict | None = None,
                 required: bool | Sequence[str] = False) -> ParquetSink:
    """Write one Parquet file (complete when the input ends, so only for bounded streams).

    The file is written by ``pyarrow.parquet.ParquetWriter`` with its defaults (Snappy
    compression, dictionary encoding and statistics for every column) unless ``options`` (its
    keywords) say otherwise, e.g. ``{"compression": "zstd"}``, or ``{"use_dictionary":
    [columns]}`` to dictionary-encode only those: writing is then faster for columns whose
    values rarely repeat, but larger for those whose values do (docs/performance.md, session
    19). The options are checked when the topology is built. Rows are written in row groups of
    about :data:`PARQUET_GROUP_ROWS` rows, each encoded on a background thread
    (:class:`ParquetGroups`).

    ``required`` (True: every column, the delay columns too; or a list of columns) writes those
    columns as Parquet ``REQUIRED``, not nullable: the writer then encodes no definition levels
    for them (DEBS q1b and q3 rows: 20-40 % less writing CPU; docs/performance.md, session 43),
    and a reader gets them as not nullable. A null in a required column stops the run (or the
    deploy) with an error naming the file, the column and the count; a deploy's file keeps
    its committed micro-batches.

    Example:
        >>> parquet_sink("out/q1.parquet").blocking
        True
        >>> parquet_sink("out/q1.parquet", options={"compression": "zstd"}).options
        (('compression', 'zstd'),)
    """
    opts = dict(options or {})
    bad = sorted(set(opts) & _NOT_OPTIONS)
    if bad:
        raise SpecError(f"parquet_sink {path}: options {bad} are set by the sink itself; "
                        "leave them out")
    pairs = tuple(sorted((str(k), tuple(v) if isinstance(v, list) else v)
                         for k, v in opts.items()))
    if isinstance(required, str):
        raise SpecError(f"parquet_sink {path}: required={required!r}: give True or a list of "
                        f"columns, e.g. required=[{required!r}]")
    req = bool(required) if isinstance(required, bool) else _cols(required) or ()
    return ParquetSink(output_path(path, "parquet_sink path"), _cols(columns), delays,
                       options=pairs, required=req)


@dataclass(frozen=True)
class TopicSink(Sink):
    """See :func:`topic_sink`."""

    path: str
    columns: tuple[str, ...] | None = None
    delays: bool = False
    delay_columns: tuple[str, str] = DELAY_COLUMNS

    def check(self, schema, time, unit):
        super().check(schema, time, unit)
        out = self.output_schema(schema)
        if time not in out.names:
            raise SpecError(f"a topic needs the event-time column {time!r}; keep it in columns")
        from .storage import resolve

        if resolve(self.path, "topic_sink path").join("_topic.json").exists():
            from .topics import Topic
            existing = Topic.open(self.path).schema
            if [(f.name, f.type) for f in existing] != [(f.name, f.type) for f in out]:
                raise SpecError(f"topic {self.path} exists with columns "
                                f"{[f'{f.name}: {f.type}' for f in existing]} but the stream "
                                f"writes {[f'{f.name}: {f.type}' for f in out]}; delete the topic "
                                "or write to a new path")

    def earlier_batches(self, node: str) -> int:
        """Batches (and markers) node ``node`` has already written to the topic (0: none)."""
        from .storage import resolve
        from .topics import Topic

        if not resolve(self.path, "topic_sink path").join("_topic.json").exists():
            return 0
        producer = node.replace(".", "_")
        return len({s.batch_id for s in Topic.open(self.path).segments()
                    if s.producer == producer})

    def open(self, schema, time, unit, node):
        from .topics import Topic

        out = self.output_schema(schema)
        topic = Topic.create(self.path, out, time_column=time, time_unit=unit, exist_ok=True)
        producer = node.replace(".", "_")
        last = topic.last_batch_id(producer)
        state = {"batch": -1 if last is None else last}

        def failed(exc: OSError) -> OutputError:
            # a segment is published whole (written to a temp file, then renamed): the topic
            # holds the batches committed before
            return OutputError(self.path, exc, what=f"sink {node!r} (topic)",
                               fix=f"free space or fix the permissions; the topic holds the "
                                   f"{state['batch']} batches committed before")

        def write(b, wm):
            try:
                topic.append([b], producer=producer, batch_id=state["batch"] + 1, watermark=wm)
            except OSError as exc:
                raise failed(exc) from None
            state["batch"] += 1

        def close(wm):
            try:
                topic.append_marker(producer=producer, batch_id=state["batch"] + 1,
                                    watermark=wm, eos=True)
            except OSError as exc:
                raise failed(exc) from None
            state["batch"] += 1
        return _Writer(write, close)

    def describe(self):
        return f"topic {os.path.basename(os.path.normpath(self.path))}"


def topic_sink(path: str | os.PathLike, *, columns: Sequence[str] | None = None,
               delays: bool = False) -> TopicSink:
    """Append to an Arrow topic (created if missing; batches carry the watermark; an
    end-of-stream marker is committed when the input ends). The producer id is the node name.

    Example:
        >>> topic_sink("topics/q1").describe()
        'topic q1'
    """
    return TopicSink(output_path(path, "topic_sink path"), _cols(columns), delays)


@dataclass(frozen=True)
class ConsoleSink(Sink):
    """See :func:`console_sink`."""

    columns: tuple[str, ...] | None = None
    limit: int | None = None
    delays: bool = False
    delay_columns: tuple[str, str] = DELAY_COLUMNS

    def open(self, schema, time, unit, node):
        out = self.output_schema(schema)
        state = {"rows": 0, "header": False}
        file = sys.stdout

        def write(b, wm):
            if not state["header"]:
                print(f"[{node}] " + "\t".join(map(console_value, out.names)), file=file)
                state["header"] = True
            for row in b.to_pylist():
                if self.limit is not None and state["rows"] >= self.limit:
                    return
                state["rows"] += 1
                print(f"[{node}] " + "\t".join(console_value(row[c]) for c in out.names), file=file)
        return _Writer(write, lambda wm: file.flush())

    def describe(self):
        return "console"


_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def console_value(v) -> str:
    """A value as the console sink prints it: floats by ``repr``, None empty, and a backslash,
    tab or line break inside a value escaped (``\\t``, ``\\n``), so every row stays one
    prefixed line of tab-separated fields."""
    if isinstance(v, float):
        return repr(v)
    return "" if v is None else str(v).translate(_ESCAPES)


def console_sink(*, columns: Sequence[str] | None = None, limit: int | None = None,
                 delays: bool = False) -> ConsoleSink:
    """Print rows to standard output, tab-separated, prefixed by the sink's name.

    Example:
        >>> console_sink(limit=10).limit
        10
    """
    return ConsoleSink(_cols(columns), limit, delays)


@dataclass(frozen=True, eq=False)
class CollectSink(Sink):
    """See :func:`collect_sink`."""

    columns: tuple[str, ...] | None = None
    delays: bool = False
    delay_columns: tuple[str, str] = DELAY_COLUMNS

    def open(self, schema, time, unit, node):
        out = self.output_schema(schema)
        batches: list[pa.RecordBatch] = []
        w = _Writer(lambda b, wm: batches.append(b), lambda wm: None)
        w.table = lambda: pa.Table.from_batches(batches, schema=out)
        return w

    def describe(self):
        return "collect"


def collect_sink(*, columns: Sequence[str] | None = None, delays: bool = False) -> CollectSink:
    """Keep the rows in memory: ``epic.run(t).collected[sink_name]`` is a ``pyarrow.Table``.

    Example:
        >>> collect_sink().describe()
        'collect'
    """
    return CollectSink(_cols(columns), delays)


class _Writer:
    def __init__(self, write: Callable[[pa.RecordBatch, Any], None], close: Callable[[Any], None]):
        self.write = write
        self.close = close
        self.table = None
