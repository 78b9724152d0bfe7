"""Robust streaming CSV reading and exact CSV writing, the core of epic's CSV sources and sinks.

Reading is two-speed. The file is cut into byte blocks at line boundaries (``block_size``, 16 MiB by
default) and each block goes through pyarrow's multi-threaded CSV parser with the caller's explicit
schema. A block is accepted only if pyarrow parsed it *and* produced exactly one row per physical
line *and* no non-nullable column holds a null. Any other block is split into smaller blocks and
retried, down to a few thousand lines, where a careful line-by-line pass classifies every line. So
good data stays on the fast path, and bad data is reported with its exact 1-based file line number.

The careful pass never decides what a *valid* value is on its own: a field it does not recognise by
a cheap pattern is handed to pyarrow alone, and the good lines of a small block are converted by
pyarrow again. The two paths therefore agree on every value, whatever the block boundaries.

Two modes:

* ``strict``: the first bad line stops the read with :class:`~epic.errors.InputError` naming the
  file, the line, the field and the value. Every row before it has been yielded.
* ``lenient``: each bad line goes to a dead-letter CSV (``line,reason,text``) and is counted in
  :class:`ReadStats`; nothing is dropped silently, and the totals are logged at the end.

A bad line has one of the reasons in :data:`REASONS`. Lines end with ``\\n`` or ``\\r\\n``; values
must not contain line breaks (a quoted newline makes rows and lines disagree: the line where the
quoted field opens is reported as bad, ``quoted_newline``). Files ending in ``.gz`` (or another codec pyarrow detects) are decompressed on the
fly. Example::

    schema = pa.schema([pa.field("sid", pa.int32(), nullable=False),
                        pa.field("ts", pa.int64(), nullable=False)])
    reader = read_csv_batches("events.csv", schema, mode="lenient", dead_letter="bad.csv")
    for batch in reader:
        ...
    print(reader.stats.rows, dict(reader.stats.bad_lines))
"""

from __future__ import annotations

import csv
import functools
import io
import logging
import os
import re
from concurrent.futures import Future, ThreadPoolExecutor
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from epic.directio import MIN_DIRECT, native_append
from epic.errors import InputError, OutputError, SpecError
from epic.operator import one_array, repeat_runs

__all__ = [
    "STRICT",
    "LENIENT",
    "EMPTY_LINE",
    "COLUMN_COUNT",
    "TRUNCATED_LINE",
    "INVALID_VALUE",
    "OUT_OF_RANGE",
    "MISSING_VALUE",
    "INVALID_UTF8",
    "QUOTED_NEWLINE",
    "REASONS",
    "DEAD_LETTER_COLUMNS",
    "BadLine",
    "ReadStats",
    "CsvBatchReader",
    "read_csv_batches",
    "CsvWriter",
    "write_csv",
    "header_line",
]

_log = logging.getLogger(__name__)

STRICT = "strict"
LENIENT = "lenient"

#: The line is empty (or holds only ``\\r``).
EMPTY_LINE = "empty_line"
#: The line has more or fewer fields than the schema.
COLUMN_COUNT = "column_count"
#: The last line has no newline and too few fields: the file was cut off while being written.
TRUNCATED_LINE = "truncated_line"
#: A field is not a value of its column's type (e.g. ``12a`` or ``1.5`` for an integer).
INVALID_VALUE = "invalid_value"
#: An integer field is well formed but outside its column type's range (e.g. int32 overflow).
OUT_OF_RANGE = "out_of_range"
#: A field is empty but its column is declared non-nullable.
MISSING_VALUE = "missing_value"
#: The line is not valid UTF-8.
INVALID_UTF8 = "invalid_utf8"
#: A quoted field is not closed on its line: a value with a line break, which epic does not read
#: (rows are lines), or a stray quote.
QUOTED_NEWLINE = "quoted_newline"

REASONS = (EMPTY_LINE, COLUMN_COUNT, TRUNCATED_LINE, INVALID_VALUE, OUT_OF_RANGE, MISSING_VALUE,
           INVALID_UTF8, QUOTED_NEWLINE)

#: Header of every dead-letter file.
DEAD_LETTER_COLUMNS = ("line", "reason", "text")

# Below this many lines a failing block is classified line by line instead of split again: a few
# thousand lines take milliseconds in Python, and splitting further costs more pyarrow calls.
_LEAF_LINES = 2048
# Fan-out when a failing block is split: one bad line in a 16 MiB block costs about 16 + 16 small
# pyarrow parses plus one Python pass over ~1/256 of the block.
_SPLIT_WAYS = 16

# Blocks parsed ahead of the one being consumed; each holds block_size bytes plus its table.
_PREFETCH = 2

_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True)
class BadLine:
    """One rejected input line.

    Attributes:
        line: 1-based physical line number in the file (the header, if any, is line 1).
        reason: one of :data:`REASONS`.
        message: what is wrong, in words.
        text: the line as read, without its line ending (undecodable bytes backslash-escaped).
        field: the offending column's name, when one field is to blame.
        value: the offending field's text, when one field is to blame.
    """

    line: int
    reason: str
    message: str
    text: str
    field: str | None = None
    value: str | None = None


@dataclass(frozen=True)
class ReadStats:
    """Counts of one CSV read, complete once the iteration has ended.

    Attributes:
        path: the file read.
        lines: physical lines consumed so far, header included.
        rows: good rows yielded so far.
        bad_lines: bad-line counts by reason (only reasons that occurred).
        dead_letter: where the bad lines were written (lenient mode), else ``None``.
    """

    path: str
    lines: int = 0
    rows: int = 0
    bad_lines: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    dead_letter: str | None = None

    @property
    def bad_total(self) -> int:
        """Number of bad lines of every reason."""
        return sum(self.bad_lines.values())


@dataclass(frozen=True)
class _Block:
    """Bytes of whole lines; ``first_line`` is the file line number of its first line."""

    data: bytes | bytearray
    first_line: int
    n_lines: int


# --------------------------------------------------------------------------------------------------
# Field checkers for the careful pass.


@functools.lru_cache(maxsize=4096)
def _pyarrow_converts(text: str, type_: pa.DataType) -> bool:
    """Whether pyarrow's CSV conversion accepts ``text`` as a non-null ``type_`` value.

    This is the arbiter for anything the quick patterns below do not recognise, so that the careful
    pass never accepts or rejects a value differently from the fast path.
    """
    quoted = '"' + text.replace('"', '""') + '"\n'
    try:
        table = pacsv.read_csv(
            pa.BufferReader(quoted.encode("utf-8")),
            read_options=pacsv.ReadOptions(column_names=["v"]),
            parse_options=pacsv.ParseOptions(ignore_empty_lines=False),
            convert_options=pacsv.ConvertOptions(column_types={"v": type_}, null_values=[""],
                                                 strings_can_be_null=False),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return False
    return table.num_rows == 1 and table.column(0).null_count == 0


_SIGNED = re.compile(r"-?[0-9]+")
#: a field pyarrow would read as a hexadecimal integer
_HEX = re.compile(rb"0[xX][0-9A-Fa-f]")
_UNSIGNED = re.compile(r"[0-9]+")
_FLOAT = re.compile(r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")

# A checker returns None for a good field, else (reason, message).
_Checker = Callable[[str], "tuple[str, str] | None"]


def _rounds_to(text: str, dtype) -> bool:
    """Whether the decimal ``text`` rounds to a finite value of the numpy float ``dtype`` (a
    value just above its largest rounds down to it; only beyond half an ulp is it inf)."""
    with np.errstate(over="ignore"):
        return bool(np.isfinite(np.array([float(text)]).astype(dtype))[0])


def _int_bounds(type_: pa.DataType) -> tuple[int, int]:
    bits = type_.bit_width
    if pa.types.is_signed_integer(type_):
        return -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    return 0, (1 << bits) - 1


def _make_checker(fld: pa.Field, required: str | None = None) -> _Checker:
    """The careful pass's validator for one column; ``required`` (why the column needs a value)
    makes an empty field bad even in a nullable column."""
    type_ = fld.type
    nullable = fld.nullable and required is None
    is_string = pa.types.is_string(type_) or pa.types.is_large_string(type_)

    def missing(text: str) -> tuple[str, str] | None:
        if nullable:
            return None
        return MISSING_VALUE, (f"empty value: {required}" if required
                               else f"empty value in non-nullable {type_} column")

    if is_string and required is None:
        # strings_can_be_null=False: an empty string is a value, never a null.
        return lambda text: None

    if pa.types.is_integer(type_):
        lo, hi = _int_bounds(type_)
        pattern = _SIGNED if pa.types.is_signed_integer(type_) else _UNSIGNED

        def check_int(text: str) -> tuple[str, str] | None:
            if text == "":
                return missing(text)
            if pattern.fullmatch(text):
                # Python ints are exact, so a 19-digit timestamp is compared without rounding.
                if lo <= int(text) <= hi:
                    return None
                return OUT_OF_RANGE, f"{text} is outside the {type_} range [{lo}, {hi}]"
            # pyarrow also reads hexadecimal (0xff), wrapped into the type (0xff in an int8: -1)
            if "x" not in text and "X" not in text and _pyarrow_converts(text, type_):
                return None
            return INVALID_VALUE, f"{text!r} is not a valid {type_}"

        return check_int

    if pa.types.is_floating(type_):
        dtype = type_.to_pandas_dtype()
        top = float(np.finfo(dtype).max)

        def check_float(text: str) -> tuple[str, str] | None:
            if text == "":
                return missing(text)
            if _FLOAT.fullmatch(text):
                # too large for the type: it would be read as inf (a written inf is a value)
                if abs(float(text)) > top and not _rounds_to(text, dtype):
                    return OUT_OF_RANGE, f"{text} is outside the {type_} range (+-{top:g})"
                return None
            if _pyarrow_converts(text, type_):
                return None
            return INVALID_VALUE, f"{text!r} is not a valid {type_}"

        return check_float

    def check_other(text: str) -> tuple[str, str] | None:
        if text == "":
            return missing(text)
        if _pyarrow_converts(text, type_):
            return None
        return INVALID_VALUE, f"{text!r} is not a valid {type_}"

    return check_other


# --------------------------------------------------------------------------------------------------
# Reading.


class CsvBatchReader:
    """A single-use iterable of ``pyarrow.RecordBatch`` read from one CSV file.

    Build it with :func:`read_csv_batches`; iterate it once; read :attr:`stats` at any time (the
    counts are final once the iteration has ended).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        schema: pa.Schema,
        *,
        header: bool = False,
        delimiter: str = ",",
        quote_char: str | None = '"',
        mode: str = STRICT,
        dead_letter: str | os.PathLike[str] | None = None,
        batch_rows: int = 1 << 20,
        block_size: int = 16 << 20,
        use_threads: bool = True,
        required: Mapping[str, str] | None = None,
    ):
        if mode not in (STRICT, LENIENT):
            raise SpecError(f"mode={mode!r}: use {STRICT!r} (stop at the first bad line) or "
                            f"{LENIENT!r} (send bad lines to dead_letter)")
        if mode == LENIENT and dead_letter is None:
            raise SpecError("mode='lenient' needs dead_letter=PATH: bad lines are written there, "
                            "never dropped")
        if mode == STRICT and dead_letter is not None:
            raise SpecError("dead_letter is only used with mode='lenient'; drop it or switch mode")
        if not isinstance(schema, pa.Schema) or len(schema) == 0:
            raise SpecError("schema must be a non-empty pyarrow.Schema naming every CSV column")
        if len(delimiter) != 1 or delimiter in "\r\n":
            raise SpecError(f"delimiter={delimiter!r}: give one character other than a newline")
        if quote_char is not None and (len(quote_char) != 1 or quote_char == delimiter):
            raise SpecError(f"quote_char={quote_char!r}: give one character other than the "
                            "delimiter, or None")
        if batch_rows < 1:
            raise SpecError(f"batch_rows={batch_rows}: must be at least 1")
        if block_size < 1024:
            raise SpecError(f"block_size={block_size}: use at least 1024 bytes (16 MiB is fast)")
        self._path = os.fspath(path)
        self._schema = schema
        self._header = header
        self._delimiter = delimiter
        self._quote_char = quote_char
        self._mode = mode
        self._dead_letter = None if dead_letter is None else os.fspath(dead_letter)
        self._batch_rows = batch_rows
        self._block_size = block_size
        self._names = list(schema.names)
        required = dict(required or {})
        unknown = sorted(set(required) - set(self._names))
        if unknown:
            raise SpecError(f"required={unknown}: not columns of the schema {self._names}")
        self._checkers = [_make_checker(f, required.get(f.name)) for f in schema]
        self._has_ints = any(pa.types.is_integer(f.type) for f in schema)
        self._floats = [i for i, f in enumerate(schema) if pa.types.is_floating(f.type)]
        self._quote = None if quote_char is None else quote_char.encode()
        self._non_nullable = [i for i, f in enumerate(schema)
                              if not f.nullable or f.name in required]
        # an empty line gives a null in these (strings: an empty string, not a null)
        texts = (pa.types.is_string, pa.types.is_large_string, pa.types.is_binary,
                 pa.types.is_large_binary)
        self._null_if_empty = any(not any(is_text(schema.field(i).type) for is_text in texts)
                                  for i in self._non_nullable)
        self._read_options = pacsv.ReadOptions(column_names=self._names, use_threads=use_threads,
                                               block_size=1 << 20)
        self._parse_options = pacsv.ParseOptions(
            delimiter=delimiter,
            quote_char=quote_char if quote_char is not None else False,
            ignore_empty_lines=False,
        )
        self._convert_options = pacsv.ConvertOptions(
            column_types={f.name: f.type for f in schema},
            null_values=[""],
            strings_can_be_null=False,
            include_columns=self._names,
        )
        self._started = False
        self._lines = 0
        self._rows = 0
        self._bad: dict[str, int] = {}

    @property
    def schema(self) -> pa.Schema:
        """The schema of every yielded batch (exactly the one given)."""
        return self._schema

    @property
    def stats(self) -> ReadStats:
        """A snapshot of the counts so far."""
        return ReadStats(path=self._path, lines=self._lines, rows=self._rows,
                         bad_lines=MappingProxyType(dict(self._bad)),
                         dead_letter=self._dead_letter)

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        if self._started:
            raise InputError("a CsvBatchReader can be iterated only once; build a new one",
                             path=self._path)
        self._started = True
        return self._run()

    # -- driver --------------------------------------------------------------------------------

    def _run(self) -> Iterator[pa.RecordBatch]:
        sink = None
        writer = None
        dead = {"good": 0, "lines": 0}   # the dead-letter file's length after its last line

        def dead_line(row) -> None:
            try:
                writer.writerow(row)
                sink.flush()   # bad lines are rare: each reaches the file (or fails) here
            except OSError as exc:
                try:
                    sink.close()
                except OSError:
                    pass
                try:
                    os.truncate(self._dead_letter, dead["good"])
                except OSError:
                    pass
                raise OutputError(self._dead_letter, exc, what="dead-letter file",
                                  fix=f"free space or fix the permissions; the file ends with "
                                      f"the {dead['lines']} bad lines written before") from None
            dead["good"] = sink.tell()
            dead["lines"] += 1

        if self._dead_letter is not None:
            try:
                sink = open(self._dead_letter, "w", newline="", encoding="utf-8")
            except OSError as exc:
                raise OutputError(self._dead_letter, exc, what="dead-letter file") from None
            writer = csv.writer(sink, lineterminator="\n")
            dead_line(DEAD_LETTER_COLUMNS)
            dead["lines"] = 0
        pending: list[pa.Table] = []
        pending_rows = 0
        # pyarrow releases the GIL while parsing, so the next blocks are parsed on a worker thread
        # while this one reads the file, cuts lines and assembles batches.
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="epic-csv")
        ahead: deque[tuple[_Block, Future]] = deque()

        unreadable: list[InputError] = []  # the file could not be read on (a cut .gz)

        def parsed() -> Iterator[tuple[_Block, pa.Table | None]]:
            try:
                for block in self._blocks():
                    ahead.append((block, executor.submit(self._fast, block)))
                    if len(ahead) > _PREFETCH:
                        done, future = ahead.popleft()
                        yield done, future.result()
            except InputError as exc:
                unreadable.append(exc)  # raised once the blocks read before it are handed over
            while ahead:
                done, future = ahead.popleft()
                yield done, future.result()

        try:
            for block, fast in parsed():
                final = block.data[-1:] != b"\n"
                items = ([fast] if fast is not None
                         else self._parse(block, final_block=final, fast_failed=True))
                for item in items:
                    if isinstance(item, pa.Table):
                        pending.append(item)
                        pending_rows += item.num_rows
                        if pending_rows >= self._batch_rows:
                            pending, pending_rows = yield from self._emit(pending, full_only=True)
                        continue
                    self._bad[item.reason] = self._bad.get(item.reason, 0) + 1
                    if self._mode == STRICT:
                        # Rows before the bad line are good: hand them over before stopping.
                        yield from self._emit(pending, full_only=False)
                        pending, pending_rows = [], 0
                        self._lines = item.line
                        raise InputError(f"{item.reason}: {item.message}", path=self._path,
                                         line=item.line, field=item.field, value=item.value)
                    dead_line((item.line, item.reason, item.text))
                self._lines += block.n_lines
            yield from self._emit(pending, full_only=False)
            if unreadable:
                raise unreadable[0]
        finally:
            for _, future in ahead:
                future.cancel()
            executor.shutdown(wait=True)
            if sink is not None:
                sink.close()
        if self._bad:
            _log.warning("%s: %d bad lines (%s), written to %s", self._path, sum(self._bad.values()),
                         ", ".join(f"{k}={v}" for k, v in sorted(self._bad.items())),
                         self._dead_letter)

    def _emit(self, pending: list[pa.Table], *, full_only: bool):
        """Yield batches of exactly ``batch_rows`` rows (and the remainder unless ``full_only``).

        Returns the still-pending tables and their row count.
        """
        if not pending:
            return [], 0
        # not combined: a batch within one parsed block is a slice of it (no copy); only a batch
        # across blocks is concatenated (one_array)
        table = pending[0] if len(pending) == 1 else pa.concat_tables(pending)
        n = table.num_rows
        if n == 0:
            return [], 0
        cut = (n // self._batch_rows) * self._batch_rows if full_only else n
        for start in range(0, cut, self._batch_rows):
            part = table.slice(start, min(self._batch_rows, cut - start))
            arrays = [one_array(c) for c in part.columns]
            batch = pa.RecordBatch.from_arrays(arrays, schema=self._schema)
            self._rows += batch.num_rows
            yield batch
        if cut == n:
            return [], 0
        return [table.slice(cut)], n - cut

    def _blocks(self) -> Iterator[_Block]:
        """Cut the file into blocks of whole lines, tracking exact line numbers."""
        next_line = 1
        rest = b""
        first = True
        broken: BaseException | None = None
        with pa.input_stream(self._path, compression="detect") as stream:
            while True:
                # A fresh buffer per block: the previous one may still be parsed on another thread.
                buf = bytearray(len(rest) + self._block_size)
                buf[:len(rest)] = rest
                if broken is not None:
                    # Decompression failed (a cut or damaged .gz); the complete lines before it
                    # were handed over.
                    raise InputError(
                        f"cannot read on ({broken}): the compressed file is truncated or damaged"
                        f" after line {next_line - 1}, the last complete line read. Fix: "
                        "recompress or re-download it (gzip -t checks it)",
                        path=self._path, line=next_line)
                view = memoryview(buf)[len(rest):]
                got = 0
                try:
                    # In 1 MiB steps: what was decompressed before an error is kept.
                    while got < len(view):
                        k = stream.readinto(view[got:got + (1 << 20)])
                        if k == 0:
                            break
                        got += k
                except (OSError, pa.ArrowInvalid) as exc:
                    broken = exc
                    view.release()
                    del buf[len(rest) + got:]
                    end = buf.rfind(b"\n") + 1
                    if end == 0:
                        continue  # no complete line: report
                    got = end - len(rest)
                view.release()
                eof = got == 0
                del buf[len(rest) + got:]
                if first and buf:
                    first = False
                    if buf.startswith(_BOM):
                        del buf[:len(_BOM)]
                    if self._header:
                        end = buf.find(b"\n")
                        if end < 0 and not eof:
                            # The header is longer than one read: keep reading until it ends.
                            rest, first = bytes(buf), True
                            continue
                        head = bytes(buf[:end]) if end >= 0 else bytes(buf)
                        del buf[:end + 1 if end >= 0 else len(buf)]
                        self._check_header(head)
                        next_line += 1
                        self._lines += 1
                if eof:
                    if buf:
                        n_lines = 1 + buf.count(b"\n")
                        yield _Block(bytes(buf), next_line, n_lines)
                    if first and self._header:
                        raise InputError("the file is empty but header=True expects a header "
                                         "line", path=self._path, line=1)
                    return
                cut = buf.rfind(b"\n") + 1
                if cut == 0:
                    rest = bytes(buf)  # one line longer than block_size: read on
                    continue
                rest = bytes(buf[cut:])
                del buf[cut:]
                # numpy releases the GIL (bytearray.count holds it): the parse threads run on
                n_lines = int(np.count_nonzero(np.frombuffer(buf, np.uint8) == 10))
                yield _Block(buf, next_line, n_lines)
                next_line += n_lines

    def _check_header(self, raw: bytes) -> None:
        text = raw.rstrip(b"\r").decode("utf-8", errors="backslashreplace")
        names = self._split(text)
        if names != self._names:
            raise InputError(
                f"header {names} does not match the schema's column names {self._names}; "
                "fix the schema (names and order) or read with header=False",
                path=self._path, line=1)

    # -- parsing -------------------------------------------------------------------------------

    def _parse(self, block: _Block, *, final_block: bool,
               fast_failed: bool = False) -> Iterator[pa.Table | BadLine]:
        """Good rows (tables) and bad lines of ``block``, in file order."""
        table = None if fast_failed else self._fast(block)
        if table is not None:
            yield table
            return
        if block.n_lines <= _LEAF_LINES:
            yield from self._careful(block, final_block=final_block)
            return
        for part in self._split_block(block):
            is_last = part.first_line + part.n_lines == block.first_line + block.n_lines
            yield from self._parse(part, final_block=final_block and is_last)

    def _fast(self, block: _Block, *, checked: bool = False) -> pa.Table | None:
        """pyarrow's parse of ``block`` if it is certainly right, else ``None`` (``checked``:
        lines the careful pass accepted)."""
        data = block.data
        # With ignore_empty_lines=False pyarrow reads an empty line as a row of nulls (empty
        # strings in string columns), so empty lines must take the careful path. With a
        # non-nullable column that is not a string the null check below sends them there; else
        # look for them (two scans of the block, ~3 s of CPU per GB).
        if not self._null_if_empty and (data.startswith((b"\n", b"\r\n")) or b"\n\n" in data
                                       or b"\n\r\n" in data):
            return None
        # pyarrow reads 0x.. in integer columns as hexadecimal (and wraps 0xff into int8 as -1):
        # a block with an x in it is looked at first (one fast scan each, ~0.1 s per GB)
        if not checked and self._has_ints and (b"x" in data or b"X" in data) \
                and _HEX.search(data) and self._hex_in_ints(data):
            return None
        # the last line of the file (no newline after it) cut off inside a quoted field: pyarrow
        # closes the quote at the end of the data and reads a row
        if not checked and self._quote and not data.endswith(b"\n") \
                and self._quote in data[data.rfind(b"\n") + 1:]:
            return None
        try:
            table = pacsv.read_csv(pa.BufferReader(data), read_options=self._read_options,
                                   parse_options=self._parse_options,
                                   convert_options=self._convert_options)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None
        # A stray '\r' or a quoted newline makes pyarrow's rows differ from physical lines.
        if table.num_rows != block.n_lines:
            return None
        for i in self._non_nullable:
            if table.column(i).null_count:
                return None
        # a number too large for its float type is read as inf: the careful pass tells it from
        # a written inf
        for i in () if checked else self._floats:
            col = table.column(i)
            if col.null_count < len(col) and pc.any(pc.is_inf(col)).as_py():
                return None
        return table

    def _hex_in_ints(self, data: bytes) -> bool:
        """Whether an integer column of ``data`` may hold an x (the block has 0x somewhere: in
        a string column it is a value like any other); read as text once more to tell."""
        ints = [f.name for f in self._schema if pa.types.is_integer(f.type)]
        opts = pacsv.ConvertOptions(column_types={n: pa.string() for n in ints},
                                    strings_can_be_null=False, include_columns=ints)
        try:
            table = pacsv.read_csv(pa.BufferReader(data), read_options=self._read_options,
                                   parse_options=self._parse_options, convert_options=opts)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return True
        return any(pc.any(pc.match_substring_regex(table.column(n), "[xX]")).as_py()
                   for n in ints)

    def _split_block(self, block: _Block) -> list[_Block]:
        data = block.data
        parts = []
        start = 0
        line = block.first_line
        step = max(1, len(data) // _SPLIT_WAYS)
        while start < len(data):
            end = data.find(b"\n", start + step - 1) + 1
            if end == 0:
                end = len(data)
            chunk = data[start:end]
            n = chunk.count(b"\n") + (0 if chunk.endswith(b"\n") else 1)
            parts.append(_Block(chunk, line, n))
            line += n
            start = end
        return parts

    def _split(self, text: str) -> list[str]:
        if self._quote_char is not None and self._quote_char in text:
            return next(csv.reader([text], delimiter=self._delimiter, quotechar=self._quote_char,
                                   doublequote=True, strict=False))
        return text.split(self._delimiter)

    def _open_quote(self, text: str) -> bool:
        """True when ``text`` ends inside a quoted field (the quote closes on a later line)."""
        try:
            next(csv.reader([text], delimiter=self._delimiter, quotechar=self._quote_char,
                            doublequote=True, strict=True))
        except csv.Error as exc:
            return "unexpected end of data" in str(exc)
        return False

    def _careful(self, block: _Block, *, final_block: bool) -> Iterator[pa.Table | BadLine]:
        """Classify each line of a small block; convert the good ones with pyarrow."""
        raws = block.data.split(b"\n")
        if block.data.endswith(b"\n"):
            raws.pop()
        ncols = len(self._names)
        good: list[bytes] = []
        for offset, raw in enumerate(raws):
            line_no = block.first_line + offset
            raw = raw[:-1] if raw.endswith(b"\r") else raw
            bad = self._classify(raw, ncols, unterminated=final_block and offset == len(raws) - 1)
            if bad is None:
                good.append(raw)
                continue
            reason, message, fld, value = bad
            if good:
                yield from self._convert_good(good, line_no - len(good))
                good = []
            yield BadLine(line=line_no, reason=reason, message=message,
                          text=raw.decode("utf-8", errors="backslashreplace"), field=fld,
                          value=value)
        if good:
            yield from self._convert_good(good, block.first_line + len(raws) - len(good))

    def _classify(self, raw: bytes, ncols: int, *, unterminated: bool):
        """``None`` for a good line, else ``(reason, message, field, value)``."""
        if not raw:
            return EMPTY_LINE, "empty line", None, None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            return INVALID_UTF8, f"not UTF-8 ({exc.reason} at byte {exc.start})", None, None
        if "\r" in text:
            return INVALID_VALUE, "stray carriage return inside the line", None, None
        if self._quote_char is not None and self._quote_char in text and self._open_quote(text):
            if unterminated:
                return (TRUNCATED_LINE, "last line has no newline and a quoted field that is "
                        "not closed: the file looks cut off", None, None)
            return (QUOTED_NEWLINE, "a quoted field is not closed on this line: values with line "
                    "breaks are not read (each line is one row)", None, None)
        fields = self._split(text)
        if len(fields) != ncols:
            if unterminated and len(fields) < ncols:
                return (TRUNCATED_LINE, f"last line has no newline and {len(fields)} of {ncols} "
                        "fields: the file looks cut off", None, None)
            return (COLUMN_COUNT, f"{len(fields)} fields, expected {ncols} "
                    f"({self._delimiter.join(self._names)})", None, None)
        for name, check, value in zip(self._names, self._checkers, fields):
            problem = check(value)
            if problem is not None:
                return problem[0], problem[1], name, value
        return None

    def _convert_good(self, lines: list[bytes], first_line: int) -> Iterator[pa.Table | BadLine]:
        """Convert lines the careful pass accepted, with the same pyarrow options as the fast path."""
        data = b"\n".join(lines) + b"\n"
        table = self._fast(_Block(data, first_line, len(lines)), checked=True)
        if table is not None:
            yield table
            return
        # Only reachable if the careful checks accept something pyarrow rejects; keep exactness by
        # judging each line alone rather than guessing.
        for offset, raw in enumerate(lines):
            one = self._fast(_Block(raw + b"\n", first_line + offset, 1), checked=True)
            if one is not None:
                yield one
            else:
                yield BadLine(line=first_line + offset, reason=INVALID_VALUE,
                              message="pyarrow rejects this line",
                              text=raw.decode("utf-8", errors="backslashreplace"))


def read_csv_batches(
    path: str | os.PathLike[str],
    schema: pa.Schema,
    *,
    header: bool = False,
    delimiter: str = ",",
    quote_char: str | None = '"',
    mode: str = STRICT,
    dead_letter: str | os.PathLike[str] | None = None,
    batch_rows: int = 1 << 20,
    block_size: int = 16 << 20,
    use_threads: bool = True,
    required: Mapping[str, str] | None = None,
) -> CsvBatchReader:
    """Stream a CSV file as record batches of exactly ``schema``.

    Args:
        path: the CSV file (``.gz`` and other codecs pyarrow detects are decompressed).
        schema: one field per CSV column, in file order. Non-nullable fields reject empty values.
        header: the first line is a header; it must equal the schema's names.
        delimiter: the field separator.
        quote_char: the quote character, or ``None`` for none.
        mode: ``"strict"`` raises :class:`~epic.errors.InputError` at the first bad line;
            ``"lenient"`` writes bad lines to ``dead_letter`` and counts them.
        dead_letter: CSV file (``line,reason,text``) for bad lines; required in lenient mode.
        batch_rows: rows per yielded batch (the last one may be shorter).
        block_size: bytes handed to pyarrow at a time; also the unit a bad line slows down.
        use_threads: let pyarrow parse a block on several threads.
        required: columns that need a value although their field is nullable, each with the
            reason shown for an empty one (an event-time column: ``{"ts": "ts is the event
            time"}``); such a line is a :data:`MISSING_VALUE` bad line.

    Returns:
        A single-use iterable of ``pyarrow.RecordBatch``; its ``stats`` holds the counts.

    Raises:
        SpecError: an invalid option (at call time).
        InputError: in strict mode, at the first bad line (during iteration).

    Example:
        >>> import pyarrow as pa, tempfile, os
        >>> p = os.path.join(tempfile.mkdtemp(), "a.csv")
        >>> _ = open(p, "w").write("1,10629342490369879\\n2,10629342490369880\\n")
        >>> schema = pa.schema([("sid", pa.int32()), ("ts", pa.int64())])
        >>> [b.column(1).to_pylist() for b in read_csv_batches(p, schema)]
        [[10629342490369879, 10629342490369880]]
    """
    return CsvBatchReader(path, schema, header=header, delimiter=delimiter, quote_char=quote_char,
                          mode=mode, dead_letter=dead_letter, batch_rows=batch_rows,
                          block_size=block_size, use_threads=use_threads, required=required)


# --------------------------------------------------------------------------------------------------
# Writing.


def _format_floats(array: pa.Array, float_format: str) -> pa.Array:
    # Python formatting is slow but exact to the user's format; floats are rare in epic's outputs
    # compared with integer and string columns, which pyarrow writes natively.
    values = array.to_pylist()
    return pa.array([None if v is None else format(v, float_format) for v in values], pa.string())


#: a table shorter than this is written as it is (see :func:`_preformat`): below it the
#: per-column cost of the preformatting was more than it saved on DEBS outputs
_PREFORMAT_MIN_ROWS = 16384

#: rows of the first part of a column that tell whether it is worth a dictionary
_PROBE_ROWS = 2048

#: above this share of distinct values in its first rows a float column is taken for distinct
#: (no exact count): DEBS q1a's coordinates and speeds
_PROBE_DISTINCT = 0.97


#: after a float column's dictionary did not pay (too many distinct values), that many of the
#: writer's next tables skip the attempt for it; doubled after each further miss, up to
#: :data:`_SKIP_MAX`, and reset by a hit
_SKIP_FIRST, _SKIP_MAX = 1, 64


def _preformat(table: pa.Table, memo: dict | None = None) -> pa.Table:
    """``table`` with its repetitive numeric columns already turned into the strings pyarrow's
    CSV writer would write for them, each distinct value formatted once.

    Formatting a number is most of the cost of writing CSV (50-90 ns per int64, 120-200 ns per
    double in pyarrow), and stream outputs repeat values a lot: a run of rows shares a
    timestamp or a delay stamp, a heat map has a hundred cell corners, running totals change
    for one player at a time. A column whose values come in runs (at most one change in four
    rows) is formatted at its run heads and repeated; one whose first rows hold at most half
    distinct values is dictionary-encoded and its dictionary formatted, and so is a float column
    whose first rows are not nearly all distinct when, counted over the whole table, at most 60 %
    of its values are. That count costs as much as formatting the column (90 ns per q3
    percentage): ``memo`` (a writer's, per column) remembers a column whose dictionary did not
    pay and skips the count for its next tables (1, then 2, 4 ... up to 64 of them; a hit
    resets it). Both use pyarrow's own
    cast to string, the one its CSV writer uses, and tell values apart by their bits (-0.0 and
    0.0 stay apart), so the bytes written are the same. Columns with nulls, non-numeric columns
    and short tables are left to the writer.
    """
    if table.num_rows < _PREFORMAT_MIN_ROWS:
        return table
    cols, changed = [], False
    for name, col in zip(table.column_names, table.columns):
        out = None
        t = col.type
        if (pa.types.is_integer(t) or pa.types.is_floating(t)) and col.null_count == 0 \
                and not pa.types.is_float16(t):
            count = True
            if memo is not None:
                skip, gap = memo.get(name, (0, 0))
                if skip > 0:
                    memo[name] = (skip - 1, gap)
                    count = False
            out = _preformat_column(one_array(col), count)
            if memo is not None and count and pa.types.is_floating(t):
                if out is _MISSED:
                    gap = min(max(2 * gap, _SKIP_FIRST), _SKIP_MAX)
                    memo[name] = (gap, gap)
                elif out is not None:
                    memo.pop(name, None)
            if out is _MISSED:
                out = None
        changed |= out is not None
        cols.append(col if out is None else out)
    return pa.table(cols, names=table.column_names) if changed else table


#: :func:`_preformat_column`'s answer when a float column was counted and its dictionary did
#: not pay
_MISSED = object()


def _preformat_column(arr: pa.Array, count: bool = True):
    n = len(arr)
    a = arr.to_numpy(zero_copy_only=True)
    if a.dtype.kind == "f":
        a = a.view(np.dtype(f"u{a.dtype.itemsize}"))  # compare bits: -0.0 is not 0.0
    heads = np.flatnonzero(a[1:] != a[:-1]) + 1
    if len(heads) * 4 < n:
        starts = np.concatenate(([0], heads))
        text = arr.take(pa.array(starts)).cast(pa.string())
        return repeat_runs(text, heads, n)   # half the cost of a take of strings
    probe = a[:_PROBE_ROWS]
    distinct = len(np.unique(probe))
    if distinct * 2 > len(probe):
        # A float column whose first rows are not all distinct may still repeat enough over the
        # whole table for its dictionary to pay (q3's percentages: 77-95 % distinct in the first
        # rows, 6-94 % in whole tables): count exactly, and format the dictionary when at most
        # 60 % of the values are distinct (formatting a double costs ~80 ns, the dictionary's
        # hash and take ~30).
        if not pa.types.is_floating(arr.type) or distinct > _PROBE_DISTINCT * len(probe) \
                or not count:
            return None
        enc = pc.dictionary_encode(arr)
        if len(enc.dictionary) * 5 > n * 3:
            return _MISSED
    else:
        enc = pc.dictionary_encode(arr)
    return enc.dictionary.cast(pa.string()).take(enc.indices)


#: tables a background CsvWriter may hold ahead of its caller
_QUEUE = 4

#: rows pyarrow formats per step (its default, 1024, costs 10-35 % more per row on DEBS outputs)
_CSV_BATCH = 16384


class CsvWriter:
    """Writes record batches to a CSV file with a fixed column order and exact formatting.

    Integers are written as integers (an int64 above 2^53 keeps every digit; never float or
    exponent form), strings are quoted only when they contain the delimiter, a quote or a line
    break, nulls are empty fields. Floats use the shortest round-trip form unless ``float_format``
    (a :func:`format` spec such as ``".6f"``) is given. Use as a context manager, or call
    :meth:`close`; a writer that got no rows still writes the header if it knows the columns.

    ``hold_rows``: write tables of fewer rows together, once this many are held (or at
    :meth:`close`). Faster for small tables, but the held rows are not in the file until then:
    for writers whose file is read only after ``close`` (a deploy's part files). 0 (default):
    every :meth:`write` reaches the file (the background thread's queue aside).

    ``append``: the rows go after the end of the existing local file ``path`` (``header=False``);
    a failed write cuts the file back to where it ended before the writer's last whole write.

    Example:
        >>> import pyarrow as pa, tempfile, os
        >>> p = os.path.join(tempfile.mkdtemp(), "out.csv")
        >>> with CsvWriter(p, columns=["ts", "player_id"]) as w:
        ...     w.write(pa.table({"player_id": ["Nick Gertje"], "ts": [10753295594424116]}))
        >>> open(p).read()
        'ts,player_id\\n10753295594424116,Nick Gertje\\n'
    """

    def __init__(self, path: str | os.PathLike[str], *, columns: Sequence[str] | None = None,
                 header: bool = True, delimiter: str = ",", float_format: str | None = None,
                 background: bool = False, filesystem=None, hold_rows: int = 0,
                 append: bool = False):
        if len(delimiter) != 1 or delimiter in "\r\n\"":
            raise SpecError(f"delimiter={delimiter!r}: give one character other than a quote or "
                            "a newline")
        if float_format is not None:
            try:
                format(1.5, float_format)
            except ValueError as exc:
                raise SpecError(f"float_format={float_format!r} is not a format spec for floats "
                                "(try '.6f')") from exc
        self._path = os.fspath(path)
        # A pyarrow filesystem to write ``path`` in (an object store: the object appears when
        # the writer closes); None: a local path.
        self._fs = filesystem
        self._columns = None if columns is None else list(columns)
        self._header = header
        self._delimiter = delimiter
        self._float_format = float_format
        self._sink: pa.NativeFile | None = None
        self._rows = 0
        self._good = 0  # file length after the last complete write: whole rows end there
        self._closed_on_error = False
        self._raw = None   # the DirectAppender under the sink (None: a plain file)
        # (file length, rows) after each write whose bytes may not be on the disk yet (a
        # direct appender stages blocks; held rows go out together): after a failed write the
        # file is cut back to the last of these it holds whole
        self._marks: list[tuple[int, int]] = []
        # Characters that force quoting of a string value (Python's csv QUOTE_MINIMAL rule).
        self._needs_quote = "[" + re.escape(delimiter + '"\r\n') + "]"
        # background=True: formatting and writing run on one worker thread (pyarrow releases the
        # GIL), at most _QUEUE tables ahead of the caller; errors surface on the next call.
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="epic-csv") if background else None
        self._pending: deque[Future] = deque()
        self._hold_rows = int(hold_rows)
        # append=True: rows go after the file's current end (a local path; no header is
        # written), e.g. a deploy task writing its rows in place after the committed length
        self._append = bool(append)
        if self._append and (filesystem is not None or header):
            raise SpecError("CsvWriter(append=True) writes a local file's rows after its end: "
                            "give header=False and no filesystem")
        self._through = None   # the DirectAppender of an unheld local file (write_through)
        self._held: list[pa.Table] = []  # prepared tables not yet handed to _write
        self._memo: dict = {}  # _preformat's per-column skips (its writing thread only)
        self._held_rows = 0
        self._accepted = 0

    @property
    def rows(self) -> int:
        """Rows given to :meth:`write` so far (all of them are in the file once it is closed)."""
        return self._accepted

    def _prepare(self, data: pa.Table | pa.RecordBatch) -> pa.Table:
        table = pa.Table.from_batches([data]) if isinstance(data, pa.RecordBatch) else data
        if self._columns is not None:
            missing = [c for c in self._columns if c not in table.column_names]
            if missing:
                raise SpecError(f"columns {missing} are not in the data (it has "
                                f"{table.column_names}); fix the sink's column list")
            table = table.select(self._columns)
        arrays = []
        for col in table.columns:
            if pa.types.is_dictionary(col.type):
                col = pc.cast(col, col.type.value_type)
            if self._float_format is not None and pa.types.is_floating(col.type):
                col = pa.chunked_array([_format_floats(c, self._float_format) for c in col.chunks],
                                       pa.string())
            arrays.append(col)
        return pa.table(arrays, names=table.column_names)

    def _open(self, names: list[str]) -> pa.NativeFile:
        if self._fs is None:
            # whole blocks straight to the disk where the file system allows (epic.directio)
            sink, raw = native_append(self._path, append=self._append,
                                      lazy=self._hold_rows > 0)
            self._raw = raw
            self._through = raw if not self._hold_rows else None
        else:
            sink = self._fs.open_output_stream(self._path)
        if self._header:
            sink.write(header_line(names, self._delimiter))
        return sink

    def _quoted_rows(self, table: pa.Table) -> bytes:
        """The CSV text of a table some of whose strings need quotes: each column as the text
        pyarrow's writer gives it (its cast to string), a value quoted (quotes doubled) when it
        holds the delimiter, a quote, ``\\r`` or ``\\n``. (Python's csv module leaves a lone
        ``\\r`` unquoted when lines end with ``\\n``: no reader then sees one row.)"""
        specials = self._delimiter + '"\r\n'
        cols = []
        for col in table.columns:
            if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
                col = pc.cast(col, pa.string())
            cols.append(col.to_pylist())
        delim = self._delimiter

        def field(v):
            if v is None:
                return ""
            if any(c in v for c in specials):
                return '"' + v.replace('"', '""') + '"'
            return v

        return "".join(delim.join(field(v) for v in row) + "\n"
                       for row in zip(*cols)).encode("utf-8")

    def _quoting_needed(self, table: pa.Table) -> bool:
        # Look for the delimiter, a quote or a line break in the string columns' bytes (memchr
        # speed) instead of a regex per value; only a hit pays for the exact per-value check.
        # A sliced chunk shares its parent's data buffer: only the slice's bytes are looked at.
        specials = [c.encode("utf-8") for c in self._delimiter + '"\r\n']
        for col in table.columns:
            large = pa.types.is_large_string(col.type)
            if not (pa.types.is_string(col.type) or large):
                continue
            for chunk in col.chunks:
                _, offsets, data = chunk.buffers()[:3]
                if data is None or data.size == 0 or len(chunk) == 0:
                    continue
                offs = np.frombuffer(offsets, np.int64 if large else np.int32)
                lo, hi = int(offs[chunk.offset]), int(offs[chunk.offset + len(chunk)])
                raw = data.slice(lo, hi - lo).to_pybytes()
                if any(c in raw for c in specials):
                    if pc.any(pc.match_substring_regex(chunk, self._needs_quote)).as_py():
                        return True
        return False

    def write(self, data: pa.Table | pa.RecordBatch) -> None:
        """Append the rows of ``data`` (its columns are selected and ordered as configured).

        With ``hold_rows``, smaller tables are held and written together (pyarrow's writer and
        :func:`_preformat` cost a fixed ~0.1 ms per column and call, more than the rows of a
        few-thousand-row table)."""
        table = self._prepare(data)
        if self._held and table.schema != self._held[0].schema:
            self._flush_held()
        self._held.append(table)
        self._held_rows += table.num_rows
        self._accepted += table.num_rows
        if self._held_rows >= self._hold_rows:
            self._flush_held()

    def _flush_held(self) -> None:
        if not self._held:
            return
        held, self._held, self._held_rows = self._held, [], 0
        table = held[0] if len(held) == 1 else pa.concat_tables(held)
        if self._pool is None:
            self._write(table)
            return
        while self._pending and (self._pending[0].done() or len(self._pending) >= _QUEUE):
            self._pending.popleft().result()  # re-raises a failed write
        self._pending.append(self._pool.submit(self._write, table))

    def _write(self, table: pa.Table) -> None:
        try:
            self._write_rows(table)
        except OSError as exc:
            raise self._failed(exc) from None

    def _failed(self, exc: OSError) -> OutputError:
        """Cut the file back to its last whole row (a shorter length needs no space) and say
        which file and which error."""
        try:
            if self._sink is not None:
                self._sink.close()
        except OSError:
            pass
        self._sink = None
        self._closed_on_error = True
        rows = self._rows
        try:
            if self._fs is None and os.path.exists(self._path):
                size = os.path.getsize(self._path)
                # the last write whose bytes all reached the file (staged blocks may not have)
                end, rows = self._good, self._rows
                for off, n in reversed(self._marks):
                    if off <= size:
                        end, rows = off, n
                        break
                else:
                    if self._marks:
                        end, rows = 0, 0
                if size > end:
                    os.truncate(self._path, end)
        except OSError:
            pass
        return OutputError(self._path, exc, fix="free space or fix the permissions; the file "
                           f"ends with the {rows} rows written before")

    def _write_rows(self, table: pa.Table) -> None:
        if self._closed_on_error:
            raise OSError("the file was closed after an earlier write error")
        if self._sink is None:
            self._sink = self._open(table.column_names)
            self._good = self._tell()
            self._marks = [(self._good, self._rows)]
        if not self._quoting_needed(table):
            # pyarrow's own quoting styles quote every string, so quote-free tables (the common
            # case) are written unquoted by pyarrow and the rare others by Python's csv module.
            table = _preformat(table, self._memo)
            options = pacsv.WriteOptions(include_header=False, delimiter=self._delimiter,
                                         quoting_style="none", batch_size=_CSV_BATCH)
            if self._through is not None and table.nbytes < MIN_DIRECT:
                # a small table of a file every write reaches: through the page cache at once
                # (epic.directio's staging and direct writes pay off for large ones only)
                buf = pa.BufferOutputStream()
                pacsv.write_csv(table, buf, write_options=options)
                self._through.write_through(buf.getvalue())
            else:
                pacsv.write_csv(table, self._sink, write_options=options)
        else:
            self._sink.write(self._quoted_rows(table))
        if not self._hold_rows:
            self._sink.flush()   # every write reaches the file (epic.directio stages blocks)
        self._rows += table.num_rows
        self._good = self._tell()
        self._mark()

    def _tell(self) -> int:
        """The file's length once every byte written so far is in it. (pyarrow's PythonFile
        over a direct appender reports the offset of its own first write: the header's end.)"""
        return self._raw.tell() if self._raw is not None else self._sink.tell()

    def _mark(self) -> None:
        """Remember (length, rows) after a write; forget the ones the file surely holds."""
        durable = self._raw._flushed if self._raw is not None else (
            self._good if self._fs is None else 0)
        marks = self._marks
        marks.append((self._good, self._rows))
        if len(marks) > 2 and marks[1][0] <= durable:
            keep = max(i for i, (off, _) in enumerate(marks) if off <= durable)
            del marks[:keep]

    def close(self) -> None:
        """Flush and close the file (after every pending background write)."""
        error: BaseException | None = None
        try:
            self._flush_held()
        except BaseException as exc:  # noqa: BLE001 - re-raised once the file is closed
            error = exc
        if self._pool is not None:
            try:
                while self._pending:
                    self._pending.popleft().result()
            except BaseException as exc:  # noqa: BLE001 - re-raised once the file is closed
                error = exc
            finally:
                self._pool.shutdown(wait=True, cancel_futures=True)
                self._pool = None
                self._pending.clear()
        if error is not None:
            if self._sink is not None:
                try:
                    self._sink.close()
                except OSError:
                    pass
            raise error
        if self._closed_on_error:
            return
        try:
            if self._sink is None and self._columns is not None:
                self._sink = self._open(self._columns)
            if self._sink is not None:
                self._sink.close()
        except OSError as exc:
            raise self._failed(exc) from None

    def __enter__(self) -> CsvWriter:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def header_line(names: Sequence[str], delimiter: str = ",") -> bytes:
    """The header line :class:`CsvWriter` writes for ``names`` (quoted as the rows are).

    >>> header_line(["ts", "a,b"])
    b'ts,"a,b"\\n'
    """
    text = io.StringIO()
    csv.writer(text, delimiter=delimiter, lineterminator="\n").writerow(names)
    return text.getvalue().encode("utf-8")


def write_csv(path: str | os.PathLike[str],
              data: pa.Table | pa.RecordBatch | Iterable[pa.RecordBatch], *,
              columns: Sequence[str] | None = None, header: bool = True, delimiter: str = ",",
              float_format: str | None = None) -> int:
    """Write ``data`` to a CSV file in the given column order; return the number of rows.

    See :class:`CsvWriter` for the formatting rules.

    Example:
        >>> import pyarrow as pa, tempfile, os
        >>> p = os.path.join(tempfile.mkdtemp(), "q.csv")
        >>> write_csv(p, pa.table({"a": [2**60], "b": [0.5]}), float_format=".3f")
        1
        >>> open(p).read()
        'a,b\\n1152921504606846976,0.500\\n'
    """
    with CsvWriter(path, columns=columns, header=header, delimiter=delimiter,
                   float_format=float_format) as writer:
        if isinstance(data, (pa.Table, pa.RecordBatch)):
            writer.write(data)
        else:
            for batch in data:
                writer.write(batch)
        return writer.rows
