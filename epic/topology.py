"""The graph model: a :class:`Topology` of named nodes wired by typed :class:`Stream` values.

A topology file builds a module-level topology and runs nothing::

    import epic
    t = epic.Topology("sensors")
    s = t.source("readings", epic.iterator_source(
        [{"sid": 1, "ts": 0, "v": 2.0}, {"sid": 1, "ts": 1, "v": 4.0}],
        schema={"sid": "int64", "ts": "int64", "v": "float64"}, time="ts", unit="s"))
    w = t.window("avg", s, epic.few_time(2, 1, 1), key="sid", aggregates=[epic.mean("v")])
    t.sink("out", w, epic.console_sink())

Every builder method adds one frozen *config* node (a dataclass) and returns its output stream(s).
The node is validated when it is added: its name, its inputs and its parameters, and its output
schema and event-time column are computed then, so a runtime (``epic run``, ``epic deploy``) knows
every schema before any data flows. :meth:`Topology.validate` adds the whole-graph rules (cycles,
unused streams, blocking operators on unbounded streams). Errors are :class:`~epic.errors.TopologyError`
and name the node, the field and the fix.

Nodes are configuration only: :func:`epic.operators.build` (the operator registry) makes their
runtime logic, and this module imports no operator, runtime, Spark or CLI module (the layers are
drawn in docs/architecture.md and checked by tests/test_layers.py).
"""

from __future__ import annotations

import re
import warnings
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Iterable, Mapping, Sequence

import pyarrow as pa

from .aggregates import AggSpec
from .errors import SpecError, TopologyError
from .operator import ENTRY_COLUMN
from .schemas import as_schema, empty_batch as _empty, fn_name as _fn_name
from .schemas import with_entry as _with_entry
from .timeunits import UNITS
from .windows.spec import (CountByStartWindow, PredicateWindow, SnapshotWindow, WindowSpec,
                           check_window, expire_output_schema, window_output_schema)

__all__ = [
    "Topology",
    "Stream",
    "Node",
    "SourceNode",
    "MapNode",
    "FilterNode",
    "FlatMapNode",
    "WindowNode",
    "ExpireNode",
    "ProcessNode",
    "SplitNode",
    "MergeNode",
    "CombineNode",
    "SinkNode",
    "WindowedStream",
    "TopologyWarning",
    "param",
    "as_schema",
]

#: Node names become checkpoint directories, topic producers and Spark query names.
# \Z, not $: "$" also matches before a trailing newline, and a name "x\n" made deploy hang.
NAME_RE = re.compile(r"\A[A-Za-z_][A-Za-z0-9_-]*\Z")


def _name_problem(name: str) -> str:
    """Why ``name`` is not a valid node / topology name, in words, with the fix."""
    bad = sorted({c for c in name if not (c.isascii() and (c.isalnum() or c in "_-"))})
    shown = ", ".join(repr(c) for c in bad)
    if any(c.isspace() or not c.isprintable() for c in bad):
        fix = f"remove the whitespace or control character(s) {shown}"
        stripped = name.strip()
        if stripped and NAME_RE.match(stripped):
            fix += f" (e.g. name it {stripped!r})"
    elif bad:
        fix = f"replace the character(s) {shown}"
    elif not name:
        fix = "give a non-empty name"
    else:
        fix = "start it with a letter or '_'"
    return (f"is not valid. Fix: {fix}; use letters, digits, '_' and '-', starting with a letter "
            "or '_' (names become checkpoint, topic and file names)")


class TopologyWarning(UserWarning):
    """A topology is runnable but probably not what was meant (e.g. an unused stream)."""


def _err(node: str, field_: str, problem: str, fix: str | None) -> TopologyError:
    """``node 'n', field: problem. Fix: fix`` (no ``Fix:`` part when the problem says it)."""
    if fix is None:
        return TopologyError(f"node {node!r}, {field_}: {problem}")
    return TopologyError(f"node {node!r}, {field_}: {problem}. Fix: {fix}")


def _fix_of(problem: str, columns) -> str | None:
    """The fix of a spec's error: none to add when its message names one (``use ...``, ``e.g.
    ...``, ``define ...``), else the input's columns to choose from."""
    said = ("; use ", "e.g. ", "; define ", ": define ", "; give ", "; pass ", "; key by ",
            "; aggregate ", "; convert ", "the input's columns", "; choose from ",
            "; see its documentation", "; delete ", "; keep ", "; leave ", ": create ",
            "; declare ", "; rename ", "; remove ")
    if any(w in problem for w in said):
        return None
    return f"see the docs of the call; the input has columns {', '.join(columns)}"


# --------------------------------------------------------------------------------------------
# Parameters injected from the command line


_PARAMS: ContextVar[dict[str, str] | None] = ContextVar("epic_params", default=None)
_USED: ContextVar[set | None] = ContextVar("epic_used_params", default=None)


def parse_bool(text: str) -> bool | None:
    """``1/0``, ``true/false``, ``yes/no``, ``on/off`` (any case) as a bool; None for anything
    else."""
    low = str(text).strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    return None


def param(name: str, default: Any = None, *, type: Callable[[str], Any] | None = None,  # noqa: A002
          help: str = "") -> Any:  # noqa: A002
    """A topology parameter: the value given on the command line, else ``default``.

    ``epic run topo.py --param input=data.csv`` (or ``epic run topo.py -- --input data.csv``) sets
    it. The text is converted with ``type``, by default the type of ``default`` (``bool`` accepts
    1/0, true/false, yes/no). Read parameters at module level, when the topology is built.

    Example:
        >>> param("threshold", 3.5)
        3.5
    """
    del help  # documentation only, shown by the source
    used = _USED.get()
    if used is not None:
        used.add(name)
    given = (_PARAMS.get() or {}).get(name)
    if given is None:
        return default
    conv = type or (None if default is None else builtins_type(default))
    if isinstance(given, BareFlag) and conv is not bool:
        raise TopologyError(f"parameter {name!r}: --{name.replace('_', '-')} was given without "
                            f"a value (a bare flag means true, for true/false parameters); "
                            f"give it one: --{name.replace('_', '-')} VALUE")
    if conv is None or conv is str:
        return given
    if conv is bool:
        value = parse_bool(given)
        if value is None:
            raise TopologyError(f"parameter {name!r}: {given!r} is not a boolean; use true or "
                                "false")
        return value
    try:
        return conv(given)
    except (TypeError, ValueError) as exc:
        raise TopologyError(f"parameter {name!r}: cannot convert {given!r} with "
                            f"{getattr(conv, '__name__', conv)} ({exc})") from exc


builtins_type = type


class BareFlag(str):
    """The value of a parameter given as a bare ``--flag`` on the command line: ``"true"``,
    refused by :func:`param` where the parameter is not a true/false one."""


class param_scope:
    """Context manager setting the parameters :func:`param` returns (used by the CLI and tests).

    On exit, :attr:`used` holds the parameter names the topology asked for.
    """

    def __init__(self, params: Mapping[str, str]):
        self.params = dict(params)
        self.used: set[str] = set()

    def __enter__(self):
        self._t1 = _PARAMS.set(self.params)
        self._t2 = _USED.set(self.used)
        return self

    def __exit__(self, *exc):
        _PARAMS.reset(self._t1)
        _USED.reset(self._t2)


# --------------------------------------------------------------------------------------------
# Streams


@dataclass(frozen=True)
class Stream:
    """A typed edge: output ``port`` of node ``node``.

    Attributes:
        node: the producing node's name.
        port: output index (0 unless the node is a ``splitstream``).
        schema: the rows' Arrow schema (includes ``_entry`` when delay logging is on).
        time: the integer event-time column.
        unit: the time unit of ``time`` (``s``, ``ms``, ``us``, ``ns``, ``ps``).
        bounded: False when the stream may never end (a followed topic, a live generator).
    """

    node: str
    port: int
    schema: pa.Schema
    time: str
    unit: str
    bounded: bool = True
    owner: int = field(default=0, repr=False, compare=False)

    @property
    def name(self) -> str:
        """``node`` for single-output nodes, ``node.port`` for splitstream outputs."""
        return self.node if self.port < 0 else f"{self.node}.{self.port}"

    @property
    def columns(self) -> list[str]:
        """User-visible column names (without the delay-logging column)."""
        return [n for n in self.schema.names if n != ENTRY_COLUMN]


def _check_time(node: str, schema: pa.Schema, time: str, unit: str, field_: str = "time"):
    if unit not in UNITS:
        raise _err(node, "unit", f"unknown time unit {unit!r}", f"use one of {', '.join(UNITS)}")
    if time not in schema.names:
        raise _err(node, field_, f"event-time column {time!r} is not in the schema (columns: "
                   f"{', '.join(schema.names)})", "name an existing integer column")
    typ = schema.field(time).type
    if not pa.types.is_integer(typ):
        raise _err(node, field_, f"event-time column {time!r} has type {typ}",
                   "event time is an integer column in the declared unit; convert it at the "
                   "source (never floats)")


# --------------------------------------------------------------------------------------------
# Node configs


@dataclass(frozen=True)
class Node:
    """Base of node configs: a unique ``name`` and the input streams.

    ``outputs`` (computed when the node is created) holds the output streams with their schemas
    and event-time columns. A node is configuration only: :func:`epic.operators.build` makes its
    runtime logic.
    """

    name: str
    inputs: tuple[Stream, ...]
    outputs: tuple[Stream, ...] = field(init=False, repr=False, compare=False)

    kind: ClassVar[str] = "node"
    #: True if the node emits only at the end of its input (cannot run on an unbounded stream).
    blocking: ClassVar[bool] = False

    def __post_init__(self):
        if not isinstance(self.name, str) or not NAME_RE.match(self.name):
            raise TopologyError(f"node name {self.name!r} " + (
                _name_problem(self.name) if isinstance(self.name, str)
                else "is not valid. Fix: give a string"))
        object.__setattr__(self, "inputs", tuple(self.inputs))
        for s in self.inputs:
            if not isinstance(s, Stream):
                raise _err(self.name, "input", f"expected a Stream, got {type(s).__name__}",
                           "pass the value a previous t.source/t.map/... call returned")
        object.__setattr__(self, "outputs", tuple(self._outputs()))

    def _outputs(self) -> list[Stream]:
        raise NotImplementedError

    def _stream(self, schema: pa.Schema, time: str, unit: str, port: int = -1,
                bounded: bool | None = None) -> Stream:
        if bounded is None:
            bounded = all(s.bounded for s in self.inputs)
        owner = self.inputs[0].owner if self.inputs else 0
        return Stream(self.name, port, schema, time, unit, bounded, owner)

    @property
    def input(self) -> Stream:
        """The only input stream."""
        return self.inputs[0]

    @property
    def output(self) -> Stream:
        """The only output stream."""
        if len(self.outputs) != 1:
            raise TopologyError(f"node {self.name!r} has {len(self.outputs)} outputs; index "
                                "them (a splitstream returns a tuple)")
        return self.outputs[0]

    @property
    def output_schema(self) -> pa.Schema:
        """Schema of the (only) output stream."""
        return self.output.schema

    def describe(self) -> str:
        """A one-line summary of the node's parameters (for graphs and tables)."""
        return self.kind


@dataclass(frozen=True)
class SourceNode(Node):
    """Reads a source (see :mod:`epic.sources`)."""

    source: Any = None
    delay_logging: bool = False
    owner: int = field(default=0, repr=False, compare=False)
    kind: ClassVar[str] = "source"

    def _outputs(self):
        src = self.source
        from .sources import Source

        if not isinstance(src, Source):
            raise _err(self.name, "source", f"expected an epic source, got {src!r}",
                       "use epic.csv_source, parquet_source, topic_source or iterator_source")
        schema = src.schema
        if ENTRY_COLUMN in schema.names:
            raise _err(self.name, "source.schema", f"{ENTRY_COLUMN!r} is reserved",
                       "rename that column")
        _check_time(self.name, schema, src.time, src.unit, "source.time")
        return [Stream(self.name, -1, _with_entry(schema, self.delay_logging), src.time, src.unit,
                       src.bounded, self.owner)]

    def describe(self) -> str:
        return self.source.describe()


@dataclass(frozen=True)
class MapNode(Node):
    """``fn`` maps each batch (vectorised) or each row (``per_row``) to one output."""

    fn: Callable = None
    schema: pa.Schema | None = None
    time: str | None = None
    per_row: bool = False
    kind: ClassVar[str] = "map"

    def _outputs(self):
        return [_derive_output(self, self.schema, self.time, probe=not self.per_row)]

    def describe(self):
        return f"map{'_rows' if self.per_row else ''} {_fn_name(self.fn)}"


@dataclass(frozen=True)
class FilterNode(Node):
    """Keeps the rows where ``predicate`` holds (a mask per batch, or a bool per row)."""

    predicate: Callable = None
    per_row: bool = False
    kind: ClassVar[str] = "filter"

    def _outputs(self):
        if not callable(self.predicate):
            raise _err(self.name, "predicate", "not a function", "pass batch -> boolean mask "
                       "(filter) or row dict -> bool (filter_rows)")
        s = self.input
        return [self._stream(s.schema, s.time, s.unit)]

    def describe(self):
        return f"filter{'_rows' if self.per_row else ''} {_fn_name(self.predicate)}"


@dataclass(frozen=True)
class FlatMapNode(Node):
    """``fn`` maps each batch (or row) to any number of output rows."""

    fn: Callable = None
    schema: pa.Schema | None = None
    time: str | None = None
    per_row: bool = False
    kind: ClassVar[str] = "flat_map"

    def _outputs(self):
        return [_derive_output(self, self.schema, self.time, probe=not self.per_row)]

    def describe(self):
        return f"flat_map{'_rows' if self.per_row else ''} {_fn_name(self.fn)}"


@dataclass(frozen=True)
class WindowNode(Node):
    """A window with aggregates (see :mod:`epic.windows`), per ``key`` or global."""

    spec: WindowSpec = None
    aggregates: tuple[AggSpec, ...] = ()
    key: tuple[str, ...] = ()
    #: what happens to rows behind the watermark: ``"stream"`` (kept for :meth:`Topology.late`,
    #: a warning at validation if nothing reads them) or ``"drop"`` (counted only)
    late: str = "stream"
    kind: ClassVar[str] = "window"

    def _outputs(self):
        if self.late not in ("stream", "drop"):
            raise _err(self.name, "late", f"unknown late policy {self.late!r}",
                       "use late='stream' (read them with t.late(...)) or late='drop'")
        if not isinstance(self.spec, WindowSpec):
            raise _err(self.name, "spec", f"expected a window spec, got {self.spec!r}",
                       "use epic.few_time, few_count, tumbling, sliding, landmark or "
                       "predicate_window")
        aggs = tuple(self.aggregates)
        object.__setattr__(self, "aggregates", aggs)
        if not aggs:
            raise _err(self.name, "aggregates", "no aggregates",
                       "pass at least one, e.g. aggregates=[epic.count(), epic.mean('v')]")
        for a in aggs:
            if not isinstance(a, AggSpec):
                raise _err(self.name, "aggregates", f"{a!r} is not a bound aggregate",
                           "use epic.mean('col'), epic.agg(my_aggregate, 'col') ...")
        key = _key_tuple(self.key)
        object.__setattr__(self, "key", key)
        s = self.input
        try:
            check_window(self.spec, aggs, s.schema, s.time, s.unit, key or None)
        except SpecError as exc:
            field_ = "spec" if any(w in str(exc) for w in ("few_", "tick", "seconds")) \
                else "aggregates"
            if "key column" in str(exc):
                field_ = "key"
            raise _err(self.name, field_, str(exc), _fix_of(str(exc), s.columns)) from exc
        schema = window_output_schema(self.spec, aggs, s.schema, key or None)
        return [self._stream(schema, self.spec.time_column, s.unit)]

    def describe(self):
        sp = self.spec
        if isinstance(sp, PredicateWindow):
            w = f"predicate {sp.kind}"
        elif isinstance(sp, SnapshotWindow):
            w = f"snapshot({sp.valid_from or self.input.time}, {sp.valid_to})"
        elif isinstance(sp, CountByStartWindow):
            w = f"count_by_start({sp.n})"
        else:
            kind = "count" if sp.time_column == "ts" else "time"
            w = f"few_{kind}({sp.length}, {sp.stride}, {sp.ef})"
        by = f" by {','.join(self.key)}" if self.key else ""
        return f"window {w}{by}: {', '.join(a.name for a in self.aggregates)}"


@dataclass(frozen=True)
class ExpireNode(WindowNode):
    """The active-expiration stream of a window node (``Topology.expired``): the same window
    over the same input, emitting the rows of aggregate ``aggregate``'s ``expire`` hook instead
    of window rows. A window node of its own (its state, partitions and clock are a window's);
    its late rows are the window's, so they are only counted here (``late="drop"``)."""

    window: str = ""
    aggregate: str = ""
    kind: ClassVar[str] = "expire"

    @property
    def expire_index(self) -> int:
        return [a.name for a in self.aggregates].index(self.aggregate)

    def _outputs(self):
        super()._outputs()
        s = self.input
        names = [a.name for a in self.aggregates]
        if self.aggregate not in names:
            raise _err(self.name, "aggregate", f"window {self.window!r} has no aggregate "
                       f"{self.aggregate!r}", f"use one of {', '.join(names)}")
        if isinstance(self.spec, PredicateWindow):
            raise _err(self.name, "window", "predicate windows have no active expiration",
                       "use a time, count, snapshot or count_by_start window")
        try:
            schema = expire_output_schema(self.aggregates[self.expire_index], s.schema,
                                          self.key or None)
        except SpecError as exc:
            raise _err(self.name, "aggregate", str(exc), _fix_of(str(exc), s.columns)) from exc
        return [self._stream(schema, "expire_time", s.unit)]

    def describe(self):
        return f"expired rows of {self.window}.{self.aggregate}"


@dataclass(frozen=True)
class LateNode(Node):
    """The late side output of a window node (see :mod:`epic.late`): its input is the window's
    input stream; its rows are the ones the window finds late."""

    window: str = ""
    lateness: int = 0  # the window's lateness in ticks of the stream's unit
    kind: ClassVar[str] = "late"

    def _outputs(self):
        from .late import late_schema

        s = self.input
        return [self._stream(late_schema(s.schema), s.time, s.unit)]

    def describe(self):
        return f"late rows of {self.window}"


@dataclass(frozen=True)
class ProcessNode(Node):
    """A user stateful operator (see :mod:`epic.process`)."""

    processor: Any = None
    key: tuple[str, ...] = ()
    schema: pa.Schema | None = None
    time: str | None = None
    kind: ClassVar[str] = "process"

    def _outputs(self):
        from .process import Processor, operator_output_schema

        if not isinstance(self.processor, Processor) and not callable(self.processor):
            raise _err(self.name, "processor", f"expected an epic.Processor, got "
                       f"{type(self.processor).__name__}", "subclass epic.Processor and pass an "
                       "instance (or build one with epic.processor(...)), or pass a factory of "
                       "epic.Operator objects for the vectorised low-level form")
        if self.schema is None and not isinstance(self.processor, Processor):
            object.__setattr__(self, "schema", operator_output_schema(self.name, self.processor))
        key = _key_tuple(self.key)
        object.__setattr__(self, "key", key)
        s = self.input
        for k in key:
            if k not in s.schema.names:
                raise _err(self.name, "key", f"key column {k!r} is not in the input (columns: "
                           f"{', '.join(s.columns)})", "name an input column")
        if self.schema is None:
            raise _err(self.name, "schema", "a process node must declare its output schema",
                       "pass schema={'col': 'int64', ...}")
        schema = as_schema(self.schema, what=f"node {self.name!r} schema")
        object.__setattr__(self, "schema", schema)
        time = self.time or s.time
        _check_time(self.name, schema, time, s.unit)
        return [self._stream(_with_entry(schema, ENTRY_COLUMN in s.schema.names), time, s.unit)]

    def describe(self):
        by = f" by {','.join(self.key)}" if self.key else " global"
        what = (type(self.processor).__name__ if not isinstance(self.processor, type)
                else self.processor.__name__)
        return f"process {what}{by}"


@dataclass(frozen=True)
class SplitNode(Node):
    """``splitstream``: a distribution query routes each row to some of ``n`` outputs."""

    n: int = 0
    query: Any = None
    schemas: tuple | None = None
    kind: ClassVar[str] = "splitstream"

    def _outputs(self):
        from .split import as_query

        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 1:
            raise _err(self.name, "n", f"{self.n!r} outputs", "pass a positive integer")
        try:
            q = as_query(self.query)
        except SpecError as exc:
            raise _err(self.name, "query", str(exc), "pass a function (i, row) -> bool | dict, "
                       "epic.vector_split(...), broadcast(), hash_partition(key) or "
                       "round_robin()") from exc
        object.__setattr__(self, "query", q)
        s = self.input
        user = _with_entry(s.schema, False)
        if self.schemas is None:
            try:
                outs = q.output_schemas(user, self.n)
            except SpecError as exc:
                raise _err(self.name, "query", str(exc),
                           "name columns of the input in the projection, or pass "
                           "schemas=[...]") from exc
        else:
            if len(self.schemas) != self.n:
                raise _err(self.name, "schemas", f"{len(self.schemas)} schemas for {self.n} "
                           "outputs", "give one schema per output")
            outs = [as_schema(x, what=f"node {self.name!r} schemas") for x in self.schemas]
        try:
            q.check(user, self.n, outs)
        except SpecError as exc:
            raise _err(self.name, "query", str(exc), "fix the query's columns or outputs") from exc
        entry = ENTRY_COLUMN in s.schema.names
        streams = []
        for i, o in enumerate(outs):
            _check_time(self.name, o, s.time, s.unit, f"schemas[{i}]")
            streams.append(self._stream(_with_entry(o, entry), s.time, s.unit, port=i))
        return streams

    def describe(self):
        return f"splitstream x{self.n}: {self.query.describe()}"


@dataclass(frozen=True)
class MergeNode(Node):
    """Time-ordered union of several streams with the same schema (see :mod:`epic.operators.merge`)."""

    idle_after: Any = None
    late: str = "emit"
    kind: ClassVar[str] = "merge"

    def _outputs(self):
        if len(self.inputs) < 1:
            raise _err(self.name, "inputs", "no streams to merge", "pass a list of streams")
        first = self.inputs[0]
        for i, s in enumerate(self.inputs[1:], 1):
            if s.unit != first.unit or s.time != first.time:
                raise _err(self.name, f"inputs[{i}]", f"stream {s.name!r} has event time "
                           f"{s.time!r} in {s.unit!r}, but {first.name!r} has {first.time!r} in "
                           f"{first.unit!r}", "map the streams to the same time column and unit")
            if not s.schema.equals(first.schema):
                raise _err(self.name, f"inputs[{i}]", f"stream {s.name!r} has schema "
                           f"{_fmt_schema(s.schema)} but {first.name!r} has "
                           f"{_fmt_schema(first.schema)}",
                           "map both to the same columns and types before merging")
        if self.late not in ("emit", "drop", "error"):
            raise _err(self.name, "late", f"{self.late!r}", "use 'emit', 'drop' or 'error'")
        if self.idle_after is not None:
            from .timeunits import to_ticks
            try:
                ticks = to_ticks(self.idle_after, first.unit, what="idle_after")
            except SpecError as exc:
                raise _err(self.name, "idle_after", str(exc), "give seconds") from exc
            if ticks < 0:
                raise _err(self.name, "idle_after", f"{self.idle_after!r} is negative",
                           "give the seconds an input may lag the most advanced one (>= 0)")
        return [self._stream(first.schema, first.time, first.unit)]

    def describe(self):
        return f"merge {len(self.inputs)} streams by {self.inputs[0].time}"


@dataclass(frozen=True)
class CombineNode(Node):
    """Combines partial results of parallel replicas (see :func:`epic.split.combine`)."""

    spec: Any = None
    kind: ClassVar[str] = "combine"

    def _outputs(self):
        from .split import Combine
        if not isinstance(self.spec, Combine):
            raise _err(self.name, "spec", f"{self.spec!r}", "use epic.combine(...)")
        s = self.input
        try:
            self.spec.check(s.schema, s.time)
        except SpecError as exc:
            raise _err(self.name, "reduce", str(exc), _fix_of(str(exc), s.columns)) from exc
        return [self._stream(s.schema, s.time, s.unit)]

    def describe(self):
        return f"combine {', '.join(f'{c}:{r}' for c, r in self.spec.describe_items())}"


@dataclass(frozen=True)
class SinkNode(Node):
    """Writes a stream out (see :mod:`epic.sinks`)."""

    sink: Any = None
    kind: ClassVar[str] = "sink"

    def _outputs(self):
        from .sinks import Sink
        if not isinstance(self.sink, Sink):
            raise _err(self.name, "sink", f"expected an epic sink, got {self.sink!r}",
                       "use epic.csv_sink, parquet_sink, topic_sink, console_sink or "
                       "collect_sink")
        s = self.input
        try:
            self.sink.check(s.schema, s.time, s.unit)
        except SpecError as exc:
            raise _err(self.name, "sink", str(exc), _fix_of(str(exc), s.columns)) from exc
        return []

    @property
    def blocking(self) -> bool:  # type: ignore[override]
        return self.sink.blocking

    def describe(self):
        return self.sink.describe()


def _fmt_schema(schema: pa.Schema) -> str:
    return "[" + ", ".join(f"{f.name}: {f.type}" for f in schema) + "]"


def _key_tuple(key) -> tuple[str, ...]:
    if key is None or key == ():
        return ()
    if isinstance(key, str):
        return (key,)
    return tuple(key)


def _derive_output(node, schema, time, *, probe: bool) -> Stream:
    """Output stream of a map / flat_map: declared schema, probed schema, or the input's."""
    fn = node.fn
    s = node.input
    if not callable(fn):
        raise _err(node.name, "fn", f"{fn!r} is not a function",
                   "pass batch -> batch (vectorised) or row -> dict (per-row)")
    entry = ENTRY_COLUMN in s.schema.names
    if schema is not None:
        out = as_schema(schema, what=f"node {node.name!r} schema")
    elif probe:
        try:
            result = fn(_empty(s.schema))
            if node.kind == "flat_map":
                result = _first_batch(result, None)
            out = _result_schema(result)
        except Exception as exc:  # noqa: BLE001 - any failure means: ask for the schema
            raise _err(node.name, "schema", f"could not infer the output schema by calling "
                       f"{_fn_name(fn)} on an empty batch ({type(exc).__name__}: {exc})",
                       "pass schema={...} with the output columns and types") from exc
        if out is None:
            raise _err(node.name, "schema", f"{_fn_name(fn)} returned nothing for an empty batch",
                       "pass schema={...}")
    else:
        out = s.schema
    out = _with_entry(out, False)
    object.__setattr__(node, "schema", out)
    t = time or s.time
    if t not in out.names:
        raise _err(node.name, "time", f"the output has no event-time column {t!r} (columns: "
                   f"{', '.join(out.names)})", f"keep {t!r} in the output or pass time=... naming "
                   "the new event-time column")
    _check_time(node.name, out, t, s.unit)
    return node._stream(_with_entry(out, entry), t, s.unit)


def _result_schema(result) -> pa.Schema | None:
    if isinstance(result, (pa.RecordBatch, pa.Table)):
        return result.schema
    if isinstance(result, Mapping):
        return pa.table(dict(result)).schema
    return None


def _first_batch(result, schema):
    if isinstance(result, (pa.RecordBatch, pa.Table, Mapping)) or result is None:
        return result
    items = list(result)
    return items[0] if items else (None if schema is None else _empty(schema))


# --------------------------------------------------------------------------------------------
# The topology


class WindowedStream:
    """``t.window(name, stream, spec, key=...)`` without aggregates; call :meth:`aggregate`."""

    def __init__(self, topology: "Topology", name: str, stream: Stream, spec: WindowSpec, key,
                 late: str = "stream"):
        self._t, self._name, self._stream, self._spec, self._key = topology, name, stream, spec, key
        self._late = late

    def aggregate(self, *aggregates: AggSpec) -> Stream:
        """Add the window node with these aggregates; returns its output stream.

        Example:
            >>> import epic
            >>> t = epic.Topology("doc")
            >>> s = t.source("s", epic.iterator_source([], schema={"ts": "int64", "v": "float64"},
            ...                                         time="ts", unit="s"))
            >>> t.window("w", s, epic.tumbling(10)).aggregate(epic.mean("v")).schema.names
            ['window_start', 'window_end', 'final', 'mean_v']
        """
        if len(aggregates) == 1 and isinstance(aggregates[0], (list, tuple)):
            aggregates = tuple(aggregates[0])
        return self._t.window(self._name, self._stream, self._spec, key=self._key,
                              aggregates=list(aggregates), late=self._late)


class Topology:
    """A dataflow of named nodes; build it with the methods below, run it with ``epic run``.

    Args:
        name: the topology's name (used for work directories and graphs).
        delay_logging: sources stamp each row's arrival wall time in the ``_entry`` column, and
            sinks created with ``delays=True`` write the entry and write times (EPIC's delay logs).

    Example:
        >>> import epic
        >>> t = epic.Topology("demo")
        >>> s = t.source("nums", epic.iterator_source(
        ...     [{"ts": i, "x": i * i} for i in range(5)],
        ...     schema={"ts": "int64", "x": "int64"}, time="ts", unit="s"))
        >>> even = t.filter("even", s, lambda b: epic.pc.equal(epic.pc.bit_wise_and(b["x"], 1), 0))
        >>> out = t.sink("out", even, epic.collect_sink())
        >>> epic.run(t).collected["out"].column("x").to_pylist()
        [0, 4, 16]
    """

    def __init__(self, name: str, *, delay_logging: bool = False):
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise TopologyError(f"topology name {name!r} " + (
                _name_problem(name) if isinstance(name, str) else "is not valid. Fix: give a "
                                                                  "string"))
        self.name = name
        self.delay_logging = bool(delay_logging)
        self._nodes: dict[str, Node] = {}
        self._pending_windows: list[str] = []  # t.window(...) calls still waiting for .aggregate

    # -- generic -------------------------------------------------------------------------------
    def add(self, node: Node) -> Node:
        """Add a node config built elsewhere; checks the name and that its inputs are ours."""
        if not isinstance(node, Node):
            raise TopologyError(f"expected a node config, got {node!r}")
        if node.name in self._nodes:
            raise _err(node.name, "name", "a node with this name already exists",
                       "give every node a unique name (names are checkpoint and topic "
                       "identities)")
        for i, s in enumerate(node.inputs):
            self._check_input(node.name, s, f"inputs[{i}]" if len(node.inputs) > 1 else "input")
        self._nodes[node.name] = node
        return node

    def _check_input(self, name: str, s: Stream, field_: str):
        if not isinstance(s, Stream):
            raise _err(name, field_, f"expected a Stream, got {type(s).__name__}",
                       "pass a stream returned by a previous call on this topology")
        producer = self._nodes.get(s.node)
        if producer is None or s.owner != id(self):
            raise _err(name, field_, f"stream {s.name!r} does not belong to topology "
                       f"{self.name!r} (dangling)", "connect only streams of this topology")
        if producer.outputs and s not in producer.outputs:
            raise _err(name, field_, f"stream {s.name!r} is not an output of node {s.node!r}",
                       "use the streams that node returned")

    def _new(self, cls, name, inputs, **kw) -> Node:
        if name in self._nodes:
            raise _err(name, "name", "a node with this name already exists",
                       "give every node a unique name (names are checkpoint and topic identities)")
        inputs = tuple(inputs)
        for i, s in enumerate(inputs):
            self._check_input(name, s, f"inputs[{i}]" if len(inputs) > 1 else "input")
        node = cls(name, inputs, **kw)
        self._nodes[name] = node
        return node

    @property
    def nodes(self) -> dict[str, Node]:
        """Nodes by name, in insertion order (a topological order for built topologies)."""
        return dict(self._nodes)

    def node(self, name: str) -> Node:
        """The node called ``name``."""
        try:
            return self._nodes[name]
        except KeyError:
            raise TopologyError(f"no node named {name!r}; nodes: {', '.join(self._nodes)}") from None

    def stream(self, name: str) -> Stream:
        """The stream called ``name`` (``node`` or ``node.port``)."""
        for n in self._nodes.values():
            for s in n.outputs:
                if s.name == name:
                    return s
        raise TopologyError(f"no stream named {name!r}")

    def consumers(self, stream: Stream) -> list[tuple[Node, int]]:
        """``(node, input index)`` for every node reading ``stream``, in node order."""
        out = []
        for n in self._nodes.values():
            for i, s in enumerate(n.inputs):
                if s == stream:
                    out.append((n, i))
        return out

    # -- builders ------------------------------------------------------------------------------
    def source(self, name: str, source) -> Stream:
        """Add a source node; returns its stream.

        Example:
            >>> import epic
            >>> t = epic.Topology("doc")
            >>> s = t.source("events", epic.iterator_source([], schema={"ts": "int64"}, time="ts",
            ...                                              unit="ps"))
            >>> (s.name, s.time, s.unit)
            ('events', 'ts', 'ps')
        """
        if name in self._nodes:
            raise _err(name, "name", "a node with this name already exists",
                       "give every node a unique name")
        node = SourceNode(name, (), source, self.delay_logging, id(self))
        self._nodes[name] = node
        return node.output

    def map(self, name: str, stream: Stream, fn: Callable[[pa.RecordBatch], Any], *,
            schema=None, time: str | None = None) -> Stream:
        """Vectorised map: ``fn(batch)`` returns a RecordBatch, Table or ``{column: array}``.

        The output schema is ``schema`` if given, else found by calling ``fn`` on an empty batch.
        The event-time column must survive (or ``time`` names the new one).

        Example:
            >>> import epic, pyarrow.compute as pc
            >>> t = epic.Topology("doc")
            >>> s = t.source("s", epic.iterator_source([{"ts": 1, "v": 2.0}],
            ...              schema={"ts": "int64", "v": "float64"}, time="ts", unit="s"))
            >>> m = t.map("double", s, lambda b: {"ts": b["ts"], "v2": pc.multiply(b["v"], 2)})
            >>> m.schema.names
            ['ts', 'v2']
        """
        return self._new(MapNode, name, [stream], fn=fn, schema=schema, time=time).output

    def map_rows(self, name: str, stream: Stream, fn: Callable[[dict], dict], *, schema=None,
                 time: str | None = None) -> Stream:
        """Per-row map: ``fn(row: dict) -> dict``; ``schema`` defaults to the input's.

        Example:
            >>> import epic
            >>> t = epic.Topology("doc")
            >>> s = t.source("s", epic.iterator_source([{"ts": 1, "v": 2}],
            ...              schema={"ts": "int64", "v": "int64"}, time="ts", unit="s"))
            >>> m = t.map_rows("inc", s, lambda r: {**r, "v": r["v"] + 1})
            >>> m.schema.names
            ['ts', 'v']
        """
        return self._new(MapNode, name, [stream], fn=fn, schema=schema, time=time,
                         per_row=True).output

    def filter(self, name: str, stream: Stream, predicate: Callable[[pa.RecordBatch], Any]) -> Stream:
        """Vectorised filter: ``predicate(batch)`` returns a boolean mask (Arrow or numpy).

        Example:
            >>> import epic, pyarrow.compute as pc
            >>> t = epic.Topology("doc")
            >>> s = t.source("s", epic.iterator_source([{"ts": 1, "v": 2.0}],
            ...              schema={"ts": "int64", "v": "float64"}, time="ts", unit="s"))
            >>> t.filter("pos", s, lambda b: pc.greater(b["v"], 0)).name
            'pos'
        """
        return self._new(FilterNode, name, [stream], predicate=predicate).output

    def filter_rows(self, name: str, stream: Stream, predicate: Callable[[dict], bool]) -> Stream:
        """Per-row filter: ``predicate(row: dict) -> bool``.

        Example:
            >>> import epic
            >>> t = epic.Topology("doc")
            >>> s = t.source("s", epic.iterator_source([{"ts": 1, "v": 2.0}],
            ...              schema={"ts": "int64", "v": "float64"}, time="ts", unit="s"))
            >>> t.filter_rows("pos", s, lambda r: r["v"] > 0).name
            'pos'
        """
        return self._new(FilterNode, name, [stream], predicate=predicate, per_row=True).output

    def flat_map(self, name: str, stream: Stream, fn: Callable, *, schema=None,
                 time: str | None = None) -> Stream:
        """Vectorised flat map: ``fn(batch)`` returns a batch / table / dict, or an iterable of them.

        Example:
            >>> import epic, pyarrow as pa
            >>> t = epic.Topology("doc")
            >>> s = t.source("s", epic.iterator_source([{"ts": 1, "n": 2}],
            ...              schema={"ts": "int64", "n": "int64"}, time="ts", unit="s"))
            >>> twice = t.flat_map("twice", s, lambda b: [b, b])
            >>> twice.schema.names
            ['ts', 'n']
        """
        return self._new(FlatMapNode, name, [stream], fn=fn, schema=schema, time=time).output

    def flat_map_rows(self, name: str, stream: Stream, fn: Callable[[dict], Iterable[dict]], *,
                      schema=None, time: str | None = None) -> Stream:
        """Per-row flat map: ``fn(row) -> iterable of dicts``; ``schema`` defaults to the input's.

        Example:
            >>> import epic
            >>> t = epic.Topology("doc")
            >>> s = t.source("s", epic.iterator_source([{"ts": 1, "n": 2}],
            ...              schema={"ts": "int64", "n": "int64"}, time="ts", unit="s"))
            >>> t.flat_map_rows("rep", s, lambda r: [r] * r["n"]).name
            'rep'
        """
        return self._new(FlatMapNode, name, [stream], fn=fn, schema=schema, time=time,
                         per_row=True).output

    def window(self, name: str, stream: Stream, spec: WindowSpec, *, key=None,
               aggregates: Sequence[AggSpec] | None = None,
               late: str = "stream") -> Stream | WindowedStream:
        """A window node; with ``aggregates`` returns its stream, else a :class:`WindowedStream`.

        Output columns: the key columns, ``window_start``, ``window_end``, ``final`` (``ts`` for
        count and predicate windows), one column per aggregate; the event-time column is
        ``spec.time_column``.

        ``late``: rows behind the watermark (docs/windows.md) are never silently lost: with
        ``"stream"`` (default) :meth:`late` turns them into a stream to wire to a sink (without
        it, validation warns that they are only counted); ``"drop"`` counts them and says no more.

        Example:
            >>> import epic
            >>> t = epic.Topology("doc")
            >>> s = t.source("s", epic.iterator_source([], schema={"sid": "int64", "ts": "int64",
            ...              "v": "float64"}, time="ts", unit="s"))
            >>> w = t.window("avg", s, epic.few_time(60, 1, 1), key="sid",
            ...              aggregates=[epic.mean("v")])
            >>> (w.schema.names, w.time)
            (['sid', 'window_start', 'window_end', 'final', 'mean_v'], 'window_end')
        """
        if aggregates is None:
            if name in self._nodes:
                raise _err(name, "name", "a node with this name already exists",
                           "give every node a unique name")
            self._check_input(name, stream, "input")
            self._pending_windows.append(name)
            return WindowedStream(self, name, stream, spec, key, late)
        return self._new(WindowNode, name, [stream], spec=spec, aggregates=tuple(aggregates),
                         key=_key_tuple(key), late=late).output

    def late(self, name: str, window: str | Stream) -> Stream:
        """The late side output of window node ``window``: the rows of its input it finds behind
        the watermark, with ``late_node`` (the window's name) and ``late_watermark`` (the
        watermark the row missed). Its event time is the input's.

        Example:
            >>> import epic
            >>> t = epic.Topology("doc")
            >>> s = t.source("s", epic.iterator_source([], schema={"k": "int64", "ts": "int64"},
            ...              time="ts", unit="s"))
            >>> w = t.window("w", s, epic.tumbling(10, lateness=2), aggregates=[epic.count()])
            >>> t.late("w_late", w).schema.names
            ['k', 'ts', 'late_node', 'late_watermark']
        """
        wname = window.node if isinstance(window, Stream) else window
        node = self._nodes.get(wname)
        if not isinstance(node, WindowNode):
            raise _err(name, "window", f"{wname!r} is not a window node",
                       "pass the name (or the output stream) of a t.window(...) node")
        spec = node.spec
        lateness = spec.lateness_ticks(node.input.unit)
        return self._new(LateNode, name, [node.input], window=wname, lateness=lateness).output

    def expired(self, name: str, window: str | Stream, aggregate: str | None = None) -> Stream:
        """The active-expiration stream of window node ``window``: the rows its aggregate's
        ``expire(state, e)`` returns when an element leaves the window (docs/windows.md,
        "Active expiration"). Columns: the key column(s), ``expire_time`` (the instant the
        element left; the event-time column) and the aggregate's ``expire_schema``.

        ``aggregate``: the output name of the aggregate (default: the window's only aggregate
        that defines ``expire``).

        Example:
            >>> import epic
            >>> t = epic.Topology("doc")
            >>> s = t.source("s", epic.iterator_source([], schema={"k": "int64", "ts": "int64",
            ...              "v": "float64"}, time="ts", unit="s"))
            >>> gone = epic.aggregate_function("gone", init=lambda: 0, add=lambda s, e: s + 1,
            ...     remove=lambda s, e: s - 1, replace=True, expire_schema={"v": "float64"},
            ...     expire=lambda s, e: [{"v": e}] if s == 0 else None)
            >>> w = t.window("w", s, epic.sliding(600, 60), key="k",
            ...              aggregates=[epic.agg("gone", "v")])
            >>> t.expired("w_gone", w).schema.names
            ['k', 'expire_time', 'v']
        """
        wname = window.node if isinstance(window, Stream) else window
        node = self._nodes.get(wname)
        if not isinstance(node, WindowNode) or isinstance(node, ExpireNode):
            raise _err(name, "window", f"{wname!r} is not a window node",
                       "pass the name (or the output stream) of a t.window(...) node")
        if aggregate is None:
            having = [a.name for a in node.aggregates if a.aggregate.has_expire]
            if len(having) != 1:
                raise _err(name, "aggregate", f"window {wname!r} has {len(having)} aggregates "
                           "with an expire hook", "name one: t.expired(name, window, "
                           "aggregate='...')")
            aggregate = having[0]
        return self._new(ExpireNode, name, [node.input], spec=node.spec,
                         aggregates=node.aggregates, key=node.key, late="drop", window=wname,
                         aggregate=aggregate).output

    def process(self, name: str, stream: Stream, processor, *, schema=None, key=None,
                time: str | None = None) -> Stream:
        """A user stateful operator (an :class:`epic.Processor`) per ``key`` or global.

        ``processor`` may also be a factory (a class or a function without arguments) of objects
        implementing the :class:`epic.Operator` protocol: the vectorised low-level form, which
        receives whole Arrow batches and watermarks and snapshots its own state (see
        :mod:`epic.operator`). ``schema`` then defaults to the operator's ``output_schema``, and
        ``key`` only tells runtimes how the input may be partitioned (the operator keeps per-key
        state itself); without ``key`` it sees the whole stream.

        Example:
            >>> import epic
            >>> class Count(epic.Processor):
            ...     def init(self, key):
            ...         return 0
            ...     def on_element(self, state, row, ctx):
            ...         ctx.emit({"ts": row["ts"], "n": state + 1})
            ...         return state + 1
            >>> t = epic.Topology("doc")
            >>> s = t.source("s", epic.iterator_source([{"ts": 1}, {"ts": 2}],
            ...              schema={"ts": "int64"}, time="ts", unit="s"))
            >>> p = t.process("count", s, Count(), schema={"ts": "int64", "n": "int64"})
            >>> _ = t.sink("out", p, epic.collect_sink())
            >>> epic.run(t).collected["out"].column("n").to_pylist()
            [1, 2]
        """
        return self._new(ProcessNode, name, [stream], processor=processor, key=_key_tuple(key),
                         schema=schema, time=time).output

    def pattern(self, name: str, stream: Stream, pattern, *, key=None,
                select: Mapping[str, Any] | None = None, schema=None) -> Stream:
        """A sequence pattern node (ESL-TS, see :mod:`epic.patterns` and ``docs/patterns.md``).

        A ``process`` node whose operator matches ``pattern`` per ``key`` over the rows in
        event-time order and emits one row per match: the key columns, ``match_start`` and
        ``match_end`` (times of the first and last matched rows; the output's event time) and
        the ``select`` columns (``"X.col"``, ``"Y.count"``, ``"Y.last.col"``, ``"Y.<aggregate>"``
        or a function of the match whose type ``schema`` declares).

        Example:
            >>> import epic
            >>> t = epic.Topology("doc")
            >>> s = t.source("s", epic.iterator_source(
            ...     [{"ts": i, "v": v} for i, v in enumerate([1, 9, 3, 2, 8, 1])],
            ...     schema={"ts": "int64", "v": "int64"}, time="ts", unit="s"))
            >>> p = t.pattern("drops", s, epic.pattern(
            ...     epic.var("X", lambda cur: cur["v"] > 5),
            ...     epic.star("Y", lambda cur: cur["v"] < 5)), select={"n": "Y.count"})
            >>> _ = t.sink("out", p, epic.collect_sink())
            >>> epic.run(t).collected["out"].to_pylist()[0]
            {'match_start': 1, 'match_end': 3, 'n': 2}
        """
        from .patterns import PatternMatcher

        self._check_input(name, stream, "input")
        keys = _key_tuple(key)
        for k in keys:
            if k not in stream.schema.names:
                raise _err(name, "key", f"key column {k!r} is not in the input (columns: "
                           f"{', '.join(stream.columns)})", "name an input column")
        try:
            matcher = PatternMatcher(pattern, _with_entry(stream.schema, False), stream.time,
                                     stream.unit, keys, select, schema, node=name)
        except SpecError as exc:
            raise _err(name, "pattern", str(exc), "see docs/patterns.md") from exc
        return self.process(name, stream, matcher, key=keys or None,
                            schema=matcher.output_schema, time="match_end")

    def splitstream(self, name: str, stream: Stream, n: int, query, *,
                    schemas: Sequence | None = None) -> tuple[Stream, ...]:
        """Distribute each row to some of ``n`` outputs with a distribution query.

        ``query`` is a function ``(i, row) -> bool | dict | None`` asked once per output ``i``
        (True: send the row, a dict: send that tuple instead, False/None: not to ``i``), EPIC's
        Listing 1 as it reads; or a vectorised :func:`epic.vector_split`, or a built-in
        (:func:`epic.broadcast`, :func:`epic.hash_partition`, :func:`epic.round_robin`).
        ``schemas`` declares per-output schemas when the query transforms rows.

        Example:
            >>> import epic
            >>> t = epic.Topology("doc")
            >>> ev = t.source("ev", epic.iterator_source([], schema={"sid": "int64",
            ...               "ts": "int64"}, time="ts", unit="ps"))
            >>> is_player = lambda e: e["sid"] < 100
            >>> q1, q2, q3 = t.splitstream("split", ev, 3, lambda i, ev: (
            ...     (i == 0 and is_player(ev)) or (i == 1) or (i == 2 and is_player(ev))))
            >>> [s.name for s in (q1, q2, q3)]
            ['split.0', 'split.1', 'split.2']
        """
        return self._new(SplitNode, name, [stream], n=n, query=query,
                         schemas=None if schemas is None else tuple(schemas)).outputs

    def merge(self, name: str, streams: Sequence[Stream], *, idle_after=None,
              late: str = "emit") -> Stream:
        """Time-ordered union of ``streams`` (same schema and event time); see :mod:`epic.operators.merge`.

        Args:
            idle_after: seconds of event time an input may lag the most advanced input before
                it stops holding the output back (it is then "idle"); None waits for watermarks.
            late: what to do with a row older than what was already emitted: ``"emit"`` it
                (counted), ``"drop"`` it (counted) or raise (``"error"``).

        Example:
            >>> import epic
            >>> t = epic.Topology("doc")
            >>> sch = {"ts": "int64", "v": "int64"}
            >>> a = t.source("a", epic.iterator_source([{"ts": 1, "v": 1}, {"ts": 3, "v": 3}],
            ...              schema=sch, time="ts", unit="s"))
            >>> b = t.source("b", epic.iterator_source([{"ts": 2, "v": 2}], schema=sch,
            ...              time="ts", unit="s"))
            >>> m = t.merge("m", [a, b])
            >>> _ = t.sink("out", m, epic.collect_sink())
            >>> epic.run(t).collected["out"].column("v").to_pylist()
            [1, 2, 3]
        """
        if isinstance(streams, Stream) or not hasattr(streams, "__iter__"):
            raise _err(name, "streams", f"got {type(streams).__name__}, not a list of streams",
                       "pass the inputs as a list: t.merge(name, [s1, s2])")
        return self._new(MergeNode, name, list(streams), idle_after=idle_after, late=late).output

    def combine(self, name: str, stream: Stream, spec) -> Stream:
        """Combine partial results of parallel replicas (see :func:`epic.combine`)."""
        return self._new(CombineNode, name, [stream], spec=spec).output

    def parallel(self, name: str, stream: Stream, n: int,
                 body: Callable[["Topology", Stream, int], Stream], *, partition=None,
                 reduce=None) -> Stream:
        """Split ``stream`` into ``n`` replicas of a sub-topology and merge them back.

        Adds ``splitstream`` node ``name`` (query ``partition``, round robin by default), then
        ``body(scope, part, i)`` for each replica ``i`` (its nodes are named ``{name}-{i}-...``
        automatically), a ``merge`` node ``{name}-merge`` and, with ``reduce`` (an
        :func:`epic.combine` spec), a ``{name}-reduce`` node that combines the partial results.

        Example:
            >>> import epic
            >>> t = epic.Topology("doc")
            >>> s = t.source("s", epic.iterator_source([{"k": i % 3, "ts": i} for i in range(9)],
            ...              schema={"k": "int64", "ts": "int64"}, time="ts", unit="s"))
            >>> out = t.parallel("par", s, 2, lambda t, part, i: t.window(
            ...     "count", part, epic.tumbling(3), key="k", aggregates=[epic.count()]),
            ...     partition=epic.round_robin(), reduce=epic.combine(count="sum"))
            >>> _ = t.sink("out", out, epic.collect_sink())
            >>> epic.run(t).collected["out"].column("count").to_pylist()
            [1, 1, 1, 1, 1, 1, 1, 1, 1]
        """
        from .split import round_robin
        parts = self.splitstream(name, stream, n, partition or round_robin())
        outs = []
        for i, part in enumerate(parts):
            scope = _Scope(self, f"{name}-{i}-")
            out = body(scope, part, i)
            if not isinstance(out, Stream):
                raise _err(name, "body", f"replica {i} returned {out!r}, not a Stream",
                           "return the replica's output stream from body")
            outs.append(out)
        merged = self.merge(f"{name}-merge", outs)
        if reduce is None:
            return merged
        return self.combine(f"{name}-reduce", merged, reduce)

    def sink(self, name: str, stream: Stream, sink) -> SinkNode:
        """Write ``stream`` to a sink (see :mod:`epic.sinks`); returns the sink node.

        Example:
            >>> import epic
            >>> t = epic.Topology("doc")
            >>> s = t.source("s", epic.iterator_source([{"ts": 1}], schema={"ts": "int64"},
            ...              time="ts", unit="s"))
            >>> t.sink("show", s, epic.console_sink()).kind
            'sink'
        """
        return self._new(SinkNode, name, [stream], sink=sink)

    # -- whole-graph rules -----------------------------------------------------------------
    def validate(self, *, warn: bool = True) -> list[str]:
        """Check the whole graph; raise on errors, return (and warn) the warnings.

        Rules: every input is an output of a node of this topology; no cycles; no blocking
        node on an unbounded stream; at least one source and one sink. Warnings: streams that
        no node reads.
        """
        if not self._nodes:
            raise TopologyError(f"topology {self.name!r} is empty. Fix: add a source and a sink")
        produced = {s: n for n in self._nodes.values() for s in n.outputs}
        for n in self._nodes.values():
            for i, s in enumerate(n.inputs):
                if s not in produced:
                    raise _err(n.name, f"inputs[{i}]", f"stream {s.name!r} is not produced by any "
                               "node of this topology (dangling)", "add its producer or "
                               "connect an existing stream")
        self._check_cycles()
        for n in self._nodes.values():
            if n.blocking and not all(s.bounded for s in n.inputs):
                raise _err(n.name, "input", f"{n.kind} {n.describe()!r} emits only when its input "
                           f"ends, but stream {n.inputs[0].name!r} is unbounded",
                           "use a non-blocking node (a topic or CSV sink, a window with ef) or "
                           "make the source bounded")
        if not any(isinstance(n, SourceNode) for n in self._nodes.values()):
            raise TopologyError(f"topology {self.name!r} has no source. Fix: add t.source(...)")
        if not any(isinstance(n, SinkNode) for n in self._nodes.values()):
            raise TopologyError(f"topology {self.name!r} has no sink, so nothing is written. "
                                "Fix: add t.sink(...), e.g. epic.console_sink()")
        read = {s for n in self._nodes.values() for s in n.inputs}
        out = [f"node {name!r}: window(...) was never given aggregates, so the node does not "
               "exist; call .aggregate(...) on it, or pass aggregates=[...]"
               for name in self._pending_windows if name not in self._nodes]
        late_read = {n.window for n in self._nodes.values() if isinstance(n, LateNode)}
        unread = [n.name for n in self._nodes.values() if isinstance(n, WindowNode)
                  and n.late == "stream" and n.name not in late_read]
        if unread:
            out.append(f"window node(s) {', '.join(map(repr, unread))}: rows behind the watermark "
                       f"are counted and dropped; keep them with t.late('{unread[0]}_late', "
                       f"'{unread[0]}') wired to a sink, or pass late='drop' to the window")
        for n in self._nodes.values():
            for s in n.outputs:
                if s not in read:
                    out.append(f"node {n.name!r}: stream {s.name!r} is never read; connect it to "
                               "a node or a sink, or remove it")
        if warn:
            for w in out:
                warnings.warn(w, TopologyWarning, stacklevel=2)
        return out

    def _check_cycles(self):
        deps = {n.name: [s.node for s in n.inputs] for n in self._nodes.values()}
        state: dict[str, int] = {}
        for start in deps:
            if state.get(start):
                continue
            stack = [(start, iter(deps[start]))]
            path = [start]
            state[start] = 1
            while stack:
                node, it = stack[-1]
                nxt = next(it, None)
                if nxt is None:
                    state[node] = 2
                    stack.pop()
                    path.pop()
                    continue
                if state.get(nxt) == 1:
                    cyc = path[path.index(nxt):] + [nxt]
                    raise _err(nxt, "inputs", "cycle " + " <- ".join(cyc),
                               "topologies are acyclic: feed results back through a topic or a "
                               "process node's state instead")
                if not state.get(nxt) and nxt in deps:
                    state[nxt] = 1
                    path.append(nxt)
                    stack.append((nxt, iter(deps[nxt])))

    def topological_order(self) -> list[Node]:
        """Nodes so that every node comes after its producers (stable for insertion order)."""
        self._check_cycles()
        done: set[str] = set()
        order: list[Node] = []
        pending = list(self._nodes.values())
        while pending:
            rest = []
            for n in pending:
                if all(s.node in done for s in n.inputs):
                    order.append(n)
                    done.add(n.name)
                else:
                    rest.append(n)
            if len(rest) == len(pending):
                raise TopologyError("unresolvable inputs: " + ", ".join(n.name for n in rest))
            pending = rest
        return order

    @classmethod
    def from_nodes(cls, name: str, nodes: Iterable[Node], *, delay_logging: bool = False
                   ) -> "Topology":
        """A topology from node configs made elsewhere (programmatic generation, runtimes).

        Inputs may refer to nodes listed later; :meth:`validate` checks for cycles.
        """
        t = cls(name, delay_logging=delay_logging)
        for n in nodes:
            if n.name in t._nodes:
                raise _err(n.name, "name", "a node with this name already exists",
                           "give every node a unique name")
            t._nodes[n.name] = n
        return t

    def __repr__(self) -> str:
        return f"Topology({self.name!r}, {len(self._nodes)} nodes)"


class _Scope:
    """A view of a topology that prefixes every new node name (for parallel replicas)."""

    def __init__(self, topology: Topology, prefix: str):
        self._t = topology
        self._prefix = prefix

    def __getattr__(self, attr):
        method = getattr(self._t, attr)
        if attr in ("map", "map_rows", "filter", "filter_rows", "flat_map", "flat_map_rows",
                    "window", "process", "pattern", "splitstream", "merge", "combine", "sink",
                    "parallel", "source"):
            def scoped(name, *args, **kw):
                return method(self._prefix + name, *args, **kw)
            return scoped
        return method
