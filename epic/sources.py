"""Sources: where streams come from. Each declares its schema, event-time column and unit.

Sources are frozen configs; :meth:`Source.open` starts a fresh read and returns a
:class:`SourceReader` (an iterable of ``pyarrow.RecordBatch`` with counters). Runtimes stamp the
``_entry`` column and emit watermarks (the largest event time seen, minus ``lateness``, and a final
``max + 1`` before the end); sources themselves never read the clock, except a paced replay:
``replay_speed=`` (every source) releases rows at the wall time their event time says
(:mod:`epic.replay`), and its rows' ``_entry`` stamps are their scheduled release times. ``slack=`` and
``punctuation=`` (every source) make the runtimes re-order the source's rows through
:class:`epic.timecore.Reorderer` (docs/windows.md, "Slack and punctuation").

* :func:`csv_source`: a CSV file through :mod:`epic.csvio` (strict or lenient with dead letters).
* :func:`parquet_source`: a Parquet file or directory.
* :func:`topic_source`: an Arrow topic (:mod:`epic.topics`); ``follow=True`` keeps reading until
  its producer marks the end of the stream (an unbounded source).
* :func:`iterator_source`: Python values: batches, tables, column dicts or row dicts, from a list
  or a generator function.
"""

from __future__ import annotations

import operator
import os
import time as _time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Mapping

import pyarrow as pa

from .errors import InputError, OutputError, SpecError
from .schemas import as_schema, fractional_int
from .timeunits import UNITS, to_ticks

__all__ = [
    "Source",
    "LateWriter",
    "SourceReader",
    "CsvSource",
    "ParquetSource",
    "TopicSource",
    "IteratorSource",
    "csv_source",
    "parquet_source",
    "topic_source",
    "iterator_source",
    "Watermark",
]


class SourceReader:
    """One read of a source: iterate it once; :attr:`stats` holds counts for the summary."""

    def __init__(self, batches: Iterable[pa.RecordBatch], stats: Callable[[], dict] | None = None):
        self._batches = batches
        self._stats = stats

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        return iter(self._batches)

    @property
    def stats(self) -> dict:
        """Counters of this read (e.g. bad lines of a lenient CSV read)."""
        return self._stats() if self._stats else {}


class Source:
    """Base of source configs: ``schema``, ``time``, ``unit``, ``bounded``, ``lateness``."""

    schema: pa.Schema
    time: str
    unit: str
    bounded: bool = True
    lateness: Any = 0
    slack: Any = None
    punctuation: str | None = None
    late_file: str | None = None
    replay_speed: float | None = None

    def open(self) -> SourceReader:
        """Start reading from the beginning."""
        raise NotImplementedError

    @property
    def live(self) -> bool:
        """Rows arrive over time (an unbounded source, or a paced replay): a runtime takes what
        has arrived and never waits to fill a batch."""
        return not self.bounded or self.replay_speed is not None

    def _paced(self, reader: SourceReader) -> SourceReader:
        """``reader`` released at event-time pace with ``replay_speed`` (:mod:`epic.replay`),
        or as it is without one."""
        if self.replay_speed is None:
            return reader
        from .replay import paced

        return SourceReader(paced(reader, self.time, self.unit, self.replay_speed),
                            lambda: reader.stats)

    def describe(self) -> str:
        return type(self).__name__

    def lateness_ticks(self) -> int:
        """How far (in ticks) rows may arrive out of order; the watermark trails by this much."""
        return to_ticks(self.lateness, self.unit, what="lateness")

    def slack_ticks(self) -> int | None:
        """The slack in ticks; None when the source does not re-order."""
        return None if self.slack is None else to_ticks(self.slack, self.unit, what="slack")

    def reorderer(self):
        """A fresh :class:`epic.timecore.Reorderer` for one read, or None (no ``slack=`` and no
        ``punctuation=``: rows pass through as they come)."""
        if self.slack is None and self.punctuation is None:
            return None
        from .timecore import Reorderer

        return Reorderer(self.time, self.slack_ticks(), self.punctuation)

    def late_writer(self):
        """A :class:`LateWriter` for ``late_file`` (truncated: one per read), or None."""
        return None if self.late_file is None else LateWriter(self.late_file)


def _check_common(src: Source, what: str):
    from .schemas import as_schema

    object.__setattr__(src, "schema", as_schema(src.schema, what=f"{what}: schema"))
    if src.unit not in UNITS:
        raise SpecError(f"{what}: unknown time unit {src.unit!r}; use one of {', '.join(UNITS)}")
    if not isinstance(src.time, str) or not src.time:
        raise SpecError(f"{what}: time must name the event-time column")
    try:
        lateness = src.lateness_ticks()
        slack = src.slack_ticks()
    except SpecError as exc:
        raise SpecError(f"{what}: {exc}") from None
    if lateness < 0:
        raise SpecError(f"{what}: lateness={src.lateness!r} must be >= 0 (the watermark trails "
                        "the largest time by it; a negative one would make rows in order late)")
    batch_rows = getattr(src, "batch_rows", 1)
    try:
        whole = operator.index(batch_rows) if not isinstance(batch_rows, bool) else None
    except TypeError:
        whole = None
    if whole is None or whole < 1:
        raise SpecError(f"{what}: batch_rows={batch_rows!r} must be a whole number >= 1 (rows "
                        "per batch)")
    object.__setattr__(src, "batch_rows", whole)
    if slack is not None and slack < 0:
        raise SpecError(f"{what}: slack must be >= 0")
    if slack is not None and src.lateness_ticks():
        raise SpecError(f"{what}: give slack= (re-order within the bound) or lateness= (pass rows "
                        "as they come, watermark trails), not both")
    if src.punctuation is not None:
        if src.punctuation not in src.schema.names or \
                not pa.types.is_boolean(src.schema.field(src.punctuation).type):
            raise SpecError(f"{what}: punctuation={src.punctuation!r} must name a bool column of "
                            f"the schema {src.schema.names}")
    from .replay import check_speed

    object.__setattr__(src, "replay_speed", check_speed(src.replay_speed, f"{what}: replay_speed"))
    if src.late_file is not None:
        if slack is None and src.punctuation is None:
            raise SpecError(f"{what}: late_file is only used with slack= or punctuation=")
        object.__setattr__(src, "late_file", os.fspath(src.late_file))


class LateWriter:
    """Writes a source's late rows (behind its watermark) to a CSV file with a ``_reason`` column.

    The file is truncated when the writer is made (one per read of the source), so a re-read
    (a Spark planner replaying from the start) writes the same file again."""

    def __init__(self, path: str):
        self.path = path
        try:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
            self._f = open(path, "wb")
        except OSError as exc:
            raise OutputError(path, exc, what="late file") from None
        self._w = None
        self._good = 0     # the file's length after the last whole batch
        self._rows = 0

    def write(self, batch: pa.RecordBatch) -> None:
        import pyarrow.csv as pacsv

        reason = pa.array(["late: event time behind the source watermark"] * batch.num_rows)
        b = batch.append_column("_reason", reason)
        try:
            if self._w is None:
                # the header csv_sink writes (pyarrow's quoting_header option needs pyarrow 22)
                from .csvio import header_line

                self._f.write(header_line(b.schema.names))
                self._w = pacsv.CSVWriter(self._f, b.schema, write_options=pacsv.WriteOptions(
                    include_header=False))
            self._w.write_batch(b)
            self._f.flush()
        except OSError as exc:   # cut back to the last whole row: a shorter file needs no space
            try:
                self._f.close()
            except OSError:
                pass
            try:
                os.truncate(self.path, self._good)
            except OSError:
                pass
            raise OutputError(self.path, exc, what="late file",
                              fix=f"free space or fix the permissions; the file ends with the "
                                  f"{self._rows} late rows written before") from None
        self._good = self._f.tell()
        self._rows += batch.num_rows

    def close(self) -> None:
        if self._f.closed:
            return
        try:
            if self._w is not None:
                self._w.close()
            self._f.close()
        except OSError as exc:
            raise OutputError(self.path, exc, what="late file") from None


@dataclass(frozen=True)
class CsvSource(Source):
    """See :func:`csv_source`."""

    path: str
    schema: pa.Schema
    time: str
    unit: str
    header: bool = False
    delimiter: str = ","
    mode: str = "strict"
    dead_letter: str | None = None
    batch_rows: int = 1 << 16
    lateness: Any = 0
    slack: Any = None
    punctuation: str | None = None
    late_file: str | None = None
    replay_speed: float | None = None

    def __post_init__(self):
        _check_common(self, "csv_source")
        if self.mode not in ("strict", "lenient"):
            raise SpecError(f"csv_source: mode={self.mode!r}; use 'strict' (stop at the first bad "
                            "line) or 'lenient' (bad lines go to dead_letter)")
        if self.mode == "lenient" and self.dead_letter is None:
            raise SpecError("csv_source: mode='lenient' needs dead_letter=PATH, where bad lines "
                            "are written (never dropped silently)")
        if self.mode == "strict" and self.dead_letter is not None:
            raise SpecError("csv_source: dead_letter is only used with mode='lenient'")

    def open(self) -> SourceReader:
        from .csvio import read_csv_batches

        if not os.path.exists(self.path):
            raise InputError("input file not found; check the path (or the --param that sets it)",
                             path=self.path)
        if self.dead_letter:
            os.makedirs(os.path.dirname(os.path.abspath(self.dead_letter)), exist_ok=True)
        reader = read_csv_batches(self.path, self.schema, header=self.header,
                                  delimiter=self.delimiter, mode=self.mode,
                                  dead_letter=self.dead_letter, batch_rows=self.batch_rows,
                                  required={self.time: f"{self.time!r} is the event-time column; "
                                            "every row needs one"})

        def stats():
            st = reader.stats
            out = {"rows": st.rows, "lines": st.lines}
            if st.bad_total:
                out["bad_lines"] = dict(st.bad_lines)
                out["dead_letter"] = st.dead_letter
            return out
        return self._paced(SourceReader(reader, stats))

    def describe(self):
        return f"csv {os.path.basename(self.path)}"


def csv_source(path: str | os.PathLike, schema, *, time: str, unit: str, header: bool = False,
               delimiter: str = ",", mode: str = "strict", dead_letter: str | None = None,
               batch_rows: int = 1 << 16, lateness=0, slack=None,
               punctuation: str | None = None, late_file=None,
               replay_speed: float | None = None) -> CsvSource:
    """A CSV file with an explicit schema, read in batches by :mod:`epic.csvio`.

    Args:
        path: the file (``.gz`` is decompressed).
        schema: one field per CSV column, in file order (Schema, ``{name: type}`` or pairs).
        time: the integer event-time column; unit: its unit (``s`` .. ``ps``).
        header: the first line is a header equal to the schema's names.
        delimiter: field separator.
        mode: ``"strict"`` stops at the first bad line naming file, line, field and value;
            ``"lenient"`` writes bad lines to ``dead_letter`` and reports the counts.
        dead_letter: CSV file for bad lines (lenient mode).
        batch_rows: rows per batch.
        lateness: seconds rows may arrive out of event-time order (passed on as they come;
            the watermark trails the largest time by this much).
        slack: seconds of disorder the source *re-orders*: rows are held until the watermark
            ``max - slack`` passes them and leave sorted by time; rows already behind it are
            late (counted, written to ``late_file`` if given). Not with ``lateness``.
        punctuation: a bool column; rows with it true are not data but punctuations (CTIs):
            their time advances the watermark. With punctuation and no slack, only
            punctuations (and the end) advance time. See docs/windows.md.
        late_file: CSV file for the late rows of slack/punctuation, with a ``_reason`` column.
        replay_speed: replay the file paced by event time, ``replay_speed`` times faster than
            real time (1: real time): a row with event time ``t`` is released at
            ``start + (t - t0) / replay_speed`` wall time (:mod:`epic.replay`; every source
            takes it). None (default): as fast as it can be read.

    Example:
        >>> src = csv_source("game.csv", {"sid": "int64", "ts": "int64", "x": "int64"},
        ...                  time="ts", unit="ps")
        >>> src.schema.names
        ['sid', 'ts', 'x']
    """
    return CsvSource(os.fspath(path), schema, time, unit, header, delimiter, mode,
                     None if dead_letter is None else os.fspath(dead_letter), batch_rows, lateness,
                     slack, punctuation, late_file, replay_speed)


def _check_has(path: str, found: pa.Schema, names, given: str, error) -> None:
    """``error`` naming the Parquet file ``path`` when it lacks one of the columns ``names``."""
    missing = [n for n in names if n not in found.names]
    if missing:
        have = ", ".join(n for n in found.names if not n.startswith("__"))
        msg = (f"has no column {', '.join(map(repr, missing))} ({given} names it); the "
               f"file's columns: {have}")
        if error is SpecError:
            raise SpecError(f"parquet_source: {path} {msg}")
        raise error(f"parquet_source: the file {msg}", path=path)


@dataclass(frozen=True)
class ParquetSource(Source):
    """See :func:`parquet_source`."""

    path: str
    schema: pa.Schema | None
    time: str
    unit: str
    columns: tuple[str, ...] | None = None
    batch_rows: int = 1 << 16
    lateness: Any = 0
    slack: Any = None
    punctuation: str | None = None
    late_file: str | None = None
    replay_speed: float | None = None

    def __post_init__(self):
        if self.schema is None:
            try:
                import pyarrow.dataset as ds
                schema = ds.dataset(self.path, format="parquet").schema
            except (OSError, pa.ArrowInvalid, FileNotFoundError) as exc:
                raise SpecError(f"parquet_source: cannot read the schema of {self.path} ({exc}); "
                                "create the file first or pass schema=...") from exc
            if self.columns:
                _check_has(self.path, schema, self.columns, "columns=", SpecError)
                schema = pa.schema([schema.field(c) for c in self.columns])
            object.__setattr__(self, "schema", schema.remove_metadata())
        elif os.path.exists(self.path):
            # a file that is there already is checked now (one that comes later, when read)
            import pyarrow.dataset as ds

            try:
                found = ds.dataset(self.path, format="parquet").schema
            except (OSError, pa.ArrowInvalid):
                found = None   # damaged: reading it says so, naming the file
            if found is not None:
                _check_has(self.path, found,
                           as_schema(self.schema, what="parquet_source: schema").names,
                           "schema=", SpecError)
        _check_common(self, "parquet_source")

    def open(self) -> SourceReader:
        import pyarrow.dataset as ds

        if not os.path.exists(self.path):
            raise InputError("input file not found", path=self.path)
        dataset = ds.dataset(self.path, format="parquet")
        names = list(self.schema.names)
        _check_has(self.path, dataset.schema, names, "schema=", InputError)
        count = [0]

        def batches():
            it = iter(dataset.to_batches(columns=names, batch_size=self.batch_rows))
            while True:
                try:
                    b = next(it)
                    if not b.num_rows:
                        continue
                    out = pa.RecordBatch.from_arrays(
                        [b.column(n).cast(f.type) for n, f in zip(names, self.schema)],
                        schema=self.schema)
                except StopIteration:
                    return
                except (OSError, pa.ArrowException) as exc:
                    # a damaged page or footer, a value that does not fit the declared type
                    raise InputError(f"cannot read on after {count[0]} rows: {exc}",
                                     path=self.path) from None
                t = out.column(self.time)
                if t.null_count:
                    j = t.is_null().to_numpy(zero_copy_only=False).argmax()
                    raise InputError(f"parquet_source: row {count[0] + int(j)} has no event time "
                                     f"{self.time!r} (null)", path=self.path, field=self.time,
                                     value=None)
                count[0] += out.num_rows
                yield out
        return self._paced(SourceReader(batches(), lambda: {"rows": count[0]}))

    def describe(self):
        return f"parquet {os.path.basename(self.path)}"


def parquet_source(path: str | os.PathLike, *, time: str, unit: str, schema=None,
                   columns=None, batch_rows: int = 1 << 16, lateness=0, slack=None,
                   punctuation: str | None = None, late_file=None,
                   replay_speed: float | None = None) -> ParquetSource:
    """A Parquet file (or directory); the schema is read from the file unless given.

    Example:
        >>> import tempfile, pyarrow.parquet as pq
        >>> p = tempfile.mkdtemp() + "/x.parquet"
        >>> pq.write_table(pa.table({"ts": [1, 2], "v": [0.5, 1.5]}), p)
        >>> parquet_source(p, time="ts", unit="ms").schema.names
        ['ts', 'v']
    """
    return ParquetSource(os.fspath(path), schema, time, unit,
                         None if columns is None else tuple(columns), batch_rows, lateness,
                         slack, punctuation, late_file, replay_speed)


@dataclass(frozen=True)
class TopicSource(Source):
    """See :func:`topic_source`."""

    path: str
    schema: pa.Schema | None = None
    time: str | None = None
    unit: str | None = None
    follow: bool = False
    poll_seconds: float = 0.2
    lateness: Any = 0
    slack: Any = None
    punctuation: str | None = None
    late_file: str | None = None
    replay_speed: float | None = None

    def __post_init__(self):
        from .topics import Topic

        manifest = None
        if _topic_exists(self.path):
            manifest = Topic.open(self.path).manifest
        if self.schema is None:
            if manifest is None:
                raise SpecError(f"topic_source: no topic at {self.path} yet, so its schema is "
                                "unknown; pass schema=..., time=... and unit=...")
            object.__setattr__(self, "schema", manifest.schema)
        if self.time is None:
            if manifest is None or manifest.time_column is None:
                raise SpecError(f"topic_source {self.path}: pass time=... (the topic declares no "
                                "event-time column)")
            object.__setattr__(self, "time", manifest.time_column)
        if self.unit is None:
            object.__setattr__(self, "unit", manifest.time_unit if manifest else "ms")
        _check_common(self, "topic_source")
        object.__setattr__(self, "bounded", not self.follow)

    def open(self) -> SourceReader:
        from .topics import Topic

        count = [0, 0]

        def batches():
            deadline_free = True
            while deadline_free:
                if not _topic_exists(self.path):
                    if not self.follow:
                        raise InputError("not a topic (no _topic.json)", path=self.path)
                    _time.sleep(self.poll_seconds)
                    continue
                topic = Topic.open(self.path)
                ended = False
                for info in topic.segments(count[1]):
                    meta, bs = topic.read_segment(info)
                    count[1] = info.seq + 1
                    for b in bs:
                        if b.num_rows:
                            count[0] += b.num_rows
                            yield topic.conform(b) if b.schema != self.schema else b
                    ended = ended or meta.eos
                if ended or not self.follow:
                    return
                _time.sleep(self.poll_seconds)
        return self._paced(SourceReader(batches(), lambda: {"rows": count[0]}))

    def describe(self):
        return f"topic {os.path.basename(os.path.normpath(self.path))}"


def _topic_exists(path: str) -> bool:
    """Whether a topic manifest is at ``path`` (a local path, or a URI of :mod:`epic.storage`)."""
    from .storage import resolve

    return resolve(path, "topic_source path").join("_topic.json").exists()


def topic_source(path: str | os.PathLike, *, schema=None, time: str | None = None,
                 unit: str | None = None, follow: bool = False, lateness=0, slack=None,
                 punctuation: str | None = None, late_file=None,
                 replay_speed: float | None = None) -> TopicSource:
    """An Arrow topic; schema, time column and unit come from its manifest unless given.

    With ``follow=False`` (default) it reads the segments visible when the read starts (bounded);
    with ``follow=True`` it polls for new segments until one marks the end of the stream.

    Example:
        >>> import tempfile
        >>> from epic.topics import Topic
        >>> d = tempfile.mkdtemp() + "/t"
        >>> _ = Topic.create(d, pa.schema([("ts", pa.int64())]), time_column="ts", time_unit="us")
        >>> (topic_source(d).time, topic_source(d).unit)
        ('ts', 'us')
    """
    return TopicSource(os.fspath(path), schema, time, unit, follow, 0.2, lateness, slack,
                       punctuation, late_file, replay_speed)


@dataclass(frozen=True)
class Watermark:
    """A heartbeat an iterator source may yield between rows: event time has reached ``time``.

    Downstream windows and merges then emit what that completes, even while no rows arrive
    (a quiet input). ``time`` is in the source's unit.

    Example:
        >>> items = [{"ts": 0, "v": 1}, Watermark(10)]
    """

    time: int


@dataclass(frozen=True)
class IteratorSource(Source):
    """See :func:`iterator_source`."""

    items: Any
    schema: pa.Schema
    time: str
    unit: str
    bounded: bool = True
    batch_rows: int = 4096
    lateness: Any = 0
    slack: Any = None
    punctuation: str | None = None
    late_file: str | None = None
    replay_speed: float | None = None

    def __post_init__(self):
        _check_common(self, "iterator_source")
        if not callable(self.items) and not isinstance(self.items, Iterable):
            raise SpecError("iterator_source: items must be an iterable or a function returning "
                            "one (e.g. a generator function)")
        if isinstance(self.items, Iterator):
            raise SpecError("iterator_source: got a one-shot iterator, which a second run would "
                            "find empty; pass the generator *function* (without calling it) or a "
                            "list")

    def open(self) -> SourceReader:
        items = self.items() if callable(self.items) else self.items
        count = [0]
        schema = self.schema

        def batches():
            rows: list[dict] = []
            for item in items:
                if isinstance(item, Watermark):
                    if rows:
                        yield self._rows(rows, count[0])
                        count[0] += len(rows)
                        rows = []
                    yield item
                    continue
                if isinstance(item, Mapping) and not _is_columns(item):
                    rows.append(item)
                    if len(rows) >= self.batch_rows:
                        yield self._rows(rows, count[0])
                        count[0] += len(rows)
                        rows = []
                    continue
                if rows:
                    yield self._rows(rows, count[0])
                    count[0] += len(rows)
                    rows = []
                for b in _to_batches(item, schema):
                    count[0] += b.num_rows
                    yield b
            if rows:
                first = count[0]
                count[0] += len(rows)
                yield self._rows(rows, first)
        return self._paced(SourceReader(batches(), lambda: {"rows": count[0]}))

    def _rows(self, rows: list[dict], first: int = 0) -> pa.RecordBatch:
        """The rows as a batch; ``first``: the index of the first among the source's items
        (named in errors)."""
        try:
            b = pa.RecordBatch.from_pylist(rows, schema=self.schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError) as exc:
            raise self._misfit(rows, first, exc) from exc
        # pyarrow's conversion leaves out a key that is no column (a misspelt name: its column
        # would be null)
        names = self.schema.names
        want = dict.fromkeys(names).keys()
        for j, r in enumerate(rows):
            if r.keys() != want:
                extra = [k for k in r if k not in want]
                if extra:
                    raise InputError(
                        f"iterator_source: item {first + j} has {', '.join(map(repr, extra))}, "
                        f"not a column of the schema ({', '.join(names)}); fix the key, or add "
                        "the column to the schema", field=str(extra[0]), value=r[extra[0]])
        # pyarrow's conversion drops a float's fraction in an integer column (10.7 -> 10)
        bad = fractional_int(rows, self.schema)
        if bad is not None:
            j, name, v = bad
            raise InputError(f"iterator_source: item {first + j}: {v!r} is not a whole number, "
                             f"and column {name!r} is {self.schema.field(name).type}; round it "
                             "yourself or declare the column as a float", field=name, value=v)
        t = b.column(self.time)
        if t.null_count:
            j = next(j for j, v in enumerate(t.to_pylist()) if v is None)
            raise InputError(f"iterator_source: item {first + j} has no event time "
                             f"{self.time!r} (missing or None)", field=self.time, value=None)
        return b

    def _misfit(self, rows: list[dict], first: int, exc: Exception) -> InputError:
        """The error for rows pyarrow cannot convert: it names the first item and column that
        do not fit (found by converting one at a time, only once the batch failed)."""
        errors = (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError)
        for j, r in enumerate(rows):
            for f in self.schema:
                try:
                    pa.array([r.get(f.name)], type=f.type)
                except errors as e:
                    return InputError(f"iterator_source: item {first + j}: column {f.name!r} "
                                      f"({f.type}) cannot hold {r.get(f.name)!r}: {e}",
                                      field=f.name, value=r.get(f.name))
        return InputError(f"iterator_source: rows do not fit the schema {self.schema.names}: "
                          f"{exc}")

    def describe(self):
        return f"python {getattr(self.items, '__name__', type(self.items).__name__)}"


def _is_columns(item: Mapping) -> bool:
    """A ``{column: values}`` dict (every value a sequence or array), not a row."""
    return bool(item) and all(
        isinstance(v, (list, tuple, pa.Array, pa.ChunkedArray)) or
        (hasattr(v, "__array__") and getattr(v, "ndim", 1) >= 1) for v in item.values())


def _to_batches(item, schema: pa.Schema) -> list[pa.RecordBatch]:
    if isinstance(item, Mapping):
        try:
            item = pa.table(dict(item))
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError) as exc:
            raise InputError(f"iterator_source: a {{column: values}} item is not a table: "
                             f"{exc}") from exc
    if isinstance(item, pa.Table):
        bs = item.to_batches()
    elif isinstance(item, pa.RecordBatch):
        bs = [item]
    else:
        raise InputError(f"iterator_source: cannot turn {type(item).__name__} into rows; yield "
                         "dicts (rows), {column: array} dicts, RecordBatches or Tables")
    out = []
    for b in bs:
        if not b.num_rows:
            continue
        try:
            out.append(pa.RecordBatch.from_arrays(
                [b.column(f.name).cast(f.type) for f in schema], schema=schema))
        except (KeyError, pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
            raise InputError(f"iterator_source: a batch does not fit the schema "
                             f"{schema.names} (it has {b.schema.names}): {exc}") from exc
    return out


def iterator_source(items, *, schema, time: str, unit: str, bounded: bool = True,
                    batch_rows: int = 4096, lateness=0, slack=None,
                    punctuation: str | None = None, late_file=None,
                    replay_speed: float | None = None) -> IteratorSource:
    """Python data: a list, or a function returning an iterable (e.g. a generator function).

    Items are row dicts (grouped into batches of ``batch_rows``), ``{column: array}`` dicts,
    RecordBatches or Tables. ``bounded=False`` declares a live source that may never end.

    Example:
        >>> def gen():
        ...     for i in range(3):
        ...         yield {"ts": i, "v": i / 2}
        >>> src = iterator_source(gen, schema={"ts": "int64", "v": "float64"}, time="ts",
        ...                       unit="s")
        >>> [b.num_rows for b in src.open()]
        [3]
    """
    return IteratorSource(items, schema, time, unit, bounded, batch_rows, lateness, slack,
                          punctuation, late_file, replay_speed)
