"""Window specs (frozen configs, no data) and their grid arithmetic: the lowest layer of windows.

Specs are built by :func:`few_time`, :func:`few_count`, :func:`tumbling`, :func:`sliding`,
:func:`landmark`, their ``*_count`` forms and :func:`predicate_window`. :class:`Grid` is a FEW
window's geometry in integer ticks; :func:`check_window` validates a spec with its aggregates
against an input schema without building an operator (the graph model calls it);
:func:`window_output_schema` is the output schema. The semantics are in ``docs/windows.md``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from fractions import Fraction
from typing import Callable, Sequence

import numpy as np
import pyarrow as pa

from ..aggregates import AggSpec
from ..errors import SpecError
from ..operator import ENTRY_COLUMN
from ..schemas import is_number
from ..timeunits import check_unit, to_ticks

__all__ = ["WindowSpec", "FewTimeWindow", "FewCountWindow", "PredicateWindow", "SnapshotWindow",
           "CountByStartWindow", "snapshot_window", "count_by_start", "few_time",
           "few_count", "tumbling", "sliding", "landmark", "tumbling_count", "sliding_count",
           "landmark_count", "predicate_window", "Grid", "ceil_div", "choose_mode", "key_tuple",
           "check_columns", "check_window", "window_output_schema", "check_lifetime",
           "expire_output_schema", "Duration", "INT64_MAX"]

Duration = int | float | Fraction | Decimal | timedelta

INT64_MAX = np.iinfo(np.int64).max


class WindowSpec:
    """Base of window specs (frozen configs; no data)."""

    #: name of the output column holding the emission event time, used as the output stream's
    #: event-time column.
    time_column = "window_end"


@dataclass(frozen=True)
class FewTimeWindow(WindowSpec):
    """A FEW (length, stride, emit frequency) window on event time; see :func:`few_time`."""

    length: Duration | None
    stride: Duration | None
    ef: Duration | None
    origin: int | None = None
    lateness: Duration = 0
    panes: bool | None = None

    def __post_init__(self):
        def check(what, v):
            if isinstance(v, bool) or not isinstance(v, (int, float, Fraction, Decimal, timedelta)):
                raise SpecError(f"few_time: {what} must be seconds (a number) or a timedelta, "
                                f"got {v!r}")
            if _seconds(v) <= 0:
                raise SpecError(f"few_time: {what} must be positive, got {v!r}")

        _check_few("few_time", self, check, _seconds)
        if _seconds(self.lateness) < 0:
            raise SpecError("few_time: lateness must be >= 0")
        if self.origin is not None and (isinstance(self.origin, bool)
                                        or not isinstance(self.origin, (int, np.integer))):
            raise SpecError(f"few_time: origin must be an integer event time in the stream's unit,"
                            f" got {self.origin!r}")

    @property
    def is_landmark(self) -> bool:
        return self.length is None

    def resolve(self, unit: str) -> "Grid":
        """Integer ticks of ``unit`` for length, stride and ef."""
        check_unit(unit)
        L = None if self.length is None else to_ticks(self.length, unit, what="length")
        S = None if self.stride is None or L is None else to_ticks(self.stride, unit, what="stride")
        E = None if self.ef is None else to_ticks(self.ef, unit, what="ef")
        return Grid(L, S, E)

    def lateness_ticks(self, unit: str) -> int:
        return to_ticks(self.lateness, unit, what="lateness")


@dataclass(frozen=True)
class FewCountWindow(WindowSpec):
    """A FEW window over element counts per key; see :func:`few_count`."""

    length: int | None
    stride: int | None
    ef: int | None
    panes: bool | None = None
    lateness: Duration = 0

    time_column = "ts"

    def __post_init__(self):
        def check(what, v):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v <= 0:
                raise SpecError(f"few_count: {what} must be a positive whole number of elements, "
                                f"got {v!r}")

        _check_few("few_count", self, check, int)
        if _seconds(self.lateness) < 0:
            raise SpecError("few_count: lateness must be >= 0")

    def lateness_ticks(self, unit: str) -> int:
        return to_ticks(self.lateness, unit, what="lateness")

    @property
    def is_landmark(self) -> bool:
        return self.length is None

    def resolve(self, unit: str | None = None) -> "Grid":
        L = self.length
        return Grid(L, None if L is None else self.stride, self.ef)


@dataclass(frozen=True)
class PredicateWindow(WindowSpec):
    """An XQuery FORSEQ-style window bounded by ``start`` / ``end`` predicates.

    See :func:`predicate_window` for the predicate signatures.
    """

    start: Callable[..., bool]
    end: Callable[..., bool] | str | None
    kind: str = "tumbling"
    force: bool = False
    lateness: Duration = 0

    time_column = "ts"

    def lateness_ticks(self, unit: str) -> int:
        return to_ticks(self.lateness, unit, what="lateness")

    def __post_init__(self):
        if _seconds(self.lateness) < 0:
            raise SpecError("predicate_window: lateness must be >= 0")
        if self.kind not in ("tumbling", "sliding", "landmark"):
            raise SpecError(f"predicate_window: kind must be 'tumbling', 'sliding' or 'landmark',"
                            f" got {self.kind!r}")
        if not callable(self.start):
            raise SpecError("predicate_window: start must be a function (item context -> bool)")
        if self.end is not None and self.end != "newstart" and not callable(self.end):
            raise SpecError("predicate_window: end must be a function, 'newstart' or None")
        if self.end is None and self.kind != "landmark":
            raise SpecError("predicate_window: end is required unless kind='landmark'; use "
                            "end='newstart' to end each window where the next one starts")


@dataclass(frozen=True)
class SnapshotWindow(WindowSpec):
    """StreamInsight's snapshot window over events with a lifetime; see :func:`snapshot_window`."""

    valid_from: str | None = None
    valid_to: str = "valid_to"
    lateness: Duration = 0

    def __post_init__(self):
        if self.valid_from is not None and not isinstance(self.valid_from, str):
            raise SpecError(f"snapshot_window: valid_from must be a column name, "
                            f"got {self.valid_from!r}")
        if not isinstance(self.valid_to, str):
            raise SpecError(f"snapshot_window: valid_to must be a column name, got "
                            f"{self.valid_to!r}")
        if _seconds(self.lateness) < 0:
            raise SpecError("snapshot_window: lateness must be >= 0")

    def lateness_ticks(self, unit: str) -> int:
        return to_ticks(self.lateness, unit, what="lateness")


@dataclass(frozen=True)
class CountByStartWindow(WindowSpec):
    """StreamInsight's count-by-start-time window; see :func:`count_by_start`."""

    n: int
    lateness: Duration = 0

    def __post_init__(self):
        if isinstance(self.n, bool) or not isinstance(self.n, (int, np.integer)) or self.n <= 0:
            raise SpecError(f"count_by_start: n must be a positive whole number of start times, "
                            f"got {self.n!r}")
        if _seconds(self.lateness) < 0:
            raise SpecError("count_by_start: lateness must be >= 0")

    def lateness_ticks(self, unit: str) -> int:
        return to_ticks(self.lateness, unit, what="lateness")


def _check_few(kind: str, spec, check_value: Callable, size: Callable) -> None:
    """The parameter rules shared by FEW time and count windows (``size`` makes them comparable)."""
    for what in ("length", "stride", "ef"):
        v = getattr(spec, what)
        if v is not None:
            check_value(what, v)
    if spec.length is None:
        if spec.ef is None:
            example = "landmark_count(ef=1)" if kind == "few_count" else "landmark(ef=1)"
            raise SpecError(f"{kind}: a landmark window (length=None) needs ef, the emit "
                            f"frequency, e.g. {example}")
        return
    if spec.stride is None:
        raise SpecError(f"{kind}: stride is required (use tumbling() for stride=length)")
    if size(spec.stride) > size(spec.length):
        raise SpecError(f"{kind}: stride {spec.stride!r} is longer than length {spec.length!r}, "
                        "which would skip elements; use stride <= length")
    if spec.ef is not None and size(spec.ef) > size(spec.length):
        raise SpecError(f"{kind}: ef {spec.ef!r} is longer than length {spec.length!r}; use ef <= "
                        "length, or ef=None for no early emission")


def _seconds(v: Duration) -> float:
    return v.total_seconds() if isinstance(v, timedelta) else float(v)


def few_time(length: Duration | None, stride: Duration | None = None, ef: Duration | None = None,
             *, origin: int | None = None, lateness: Duration = 0,
             panes: bool | None = None) -> FewTimeWindow:
    """A FEW time window (EPIC's ``fewtWindowize``): length, stride, emit frequency.

    While window ``[s, s + length)`` is being formed, every ``ef`` of event time the landmark
    sub-window ``[s, t)`` is emitted; when the window is complete it is emitted (``final``), and
    the start slides by ``stride``, keeping the elements the next window shares.

    Args:
        length: window length in seconds or a timedelta; ``None`` for a landmark window.
        stride: slide in seconds; defaults to ``length`` (tumbling).
        ef: emit frequency; ``None`` emits complete windows only.
        origin: event time (stream unit) where window 0 starts; default: the key's first element.
        lateness: how far out of order (seconds) elements may arrive and still be counted.
        panes: force (True) or avoid (False) the pane representation for aggregates that have
            both ``merge`` and ``remove``; by default such aggregates use panes when the stride
            is longer than ``ef``. Aggregates with ``merge`` but no ``remove`` always use panes.

    >>> few_time(60, 1, 1)  # [0,1), [0,2), ..., [0,60), then [1,61), [2,62), ...
    FewTimeWindow(length=60, stride=1, ef=1, origin=None, lateness=0, panes=None)
    """
    if stride is None and length is not None:
        stride = length
    return FewTimeWindow(length, stride, ef, origin, lateness, panes)


def tumbling(length: Duration, ef: Duration | None = None, **kw) -> FewTimeWindow:
    """Tumbling time window: ``few_time(length, length, ef)``."""
    return few_time(length, length, ef, **kw)


def sliding(length: Duration, stride: Duration, **kw) -> FewTimeWindow:
    """Sliding time window without early emission: ``few_time(length, stride, None)``."""
    return few_time(length, stride, None, **kw)


def landmark(ef: Duration, **kw) -> FewTimeWindow:
    """Landmark time window from the origin, emitted every ``ef``: ``few_time(None, None, ef)``."""
    return few_time(None, None, ef, **kw)


def few_count(length: int | None, stride: int | None = None, ef: int | None = None,
              *, panes: bool | None = None, lateness: Duration = 0) -> FewCountWindow:
    """A FEW window over element counts per key (positions 0, 1, 2, ...).

    Positions follow event time: an element gets its position once the watermark has passed it
    (so rows out of order within ``lateness`` seconds are counted in time order), and rows are
    emitted in event-time order of the element that closes them.

    >>> few_count(100, 10, 5).length
    100
    """
    if stride is None and length is not None:
        stride = length
    return FewCountWindow(length, stride, ef, panes, lateness)


def tumbling_count(length: int, ef: int | None = None, **kw) -> FewCountWindow:
    """Tumbling count window."""
    return few_count(length, length, ef, **kw)


def sliding_count(length: int, stride: int, **kw) -> FewCountWindow:
    """Sliding count window without early emission."""
    return few_count(length, stride, None, **kw)


def landmark_count(ef: int, **kw) -> FewCountWindow:
    """Landmark count window, emitted every ``ef`` elements."""
    return few_count(None, None, ef, **kw)


def predicate_window(start: Callable[..., bool], end: Callable[..., bool] | str | None = None, *,
                     kind: str = "tumbling", force: bool = False,
                     lateness: Duration = 0) -> PredicateWindow:
    """A window whose boundaries are predicates over items (XQuery 3.0 FORSEQ).

    ``start(cur, prev, next, pos)`` is asked for each item; ``end(first, cur, prev, next, pos)``
    for each item of an open window (``first`` is the window's first item, ``pos`` the current
    item's position in the key's sequence, from 0). Items are dicts of the row's columns;
    ``prev`` / ``next`` are ``None`` at the edges. Predicates may declare fewer parameters
    (they are passed by position, in that order). Asking for ``next`` delays each decision by one
    item.

    Kinds:
        ``tumbling``: a window opens at an item where ``start`` holds and no window is open.
        ``sliding``: every item where ``start`` holds opens a window (they may overlap).
        ``landmark``: like tumbling, but the open window is emitted at every item (early
        results); with ``end=None`` it never closes.

    ``end="newstart"`` closes a window just before the next item where ``start`` holds.
    ``force=True`` drops a window still open when the input ends (XQuery's ``only end``);
    by default it is emitted, not final.
    """
    return PredicateWindow(start, end, kind, force, lateness)


def snapshot_window(valid_from: str | None = None, valid_to: str = "valid_to", *,
                    lateness: Duration = 0) -> SnapshotWindow:
    """StreamInsight's snapshot window over events with a lifetime ``[valid_from, valid_to)``.

    Every instant where an event of the key starts or ends is a window boundary; between two
    consecutive boundaries the window holds the events alive there, and the aggregates are over
    them. A window is emitted once the watermark reaches its end; windows where no event is alive
    are not emitted. Aggregates need ``remove`` (events leave in any order).

    Args:
        valid_from: the start column; it must be the stream's event-time column (rows are
            admitted, and are late, by their start). ``None``: the stream's event-time column.
        valid_to: the end column (exclusive, same unit); an end at or before the start makes a
            point event ``[valid_from, valid_from + 1)``.
        lateness: how far out of order (seconds) rows may arrive and still be counted.

    >>> snapshot_window("start", "stop")
    SnapshotWindow(valid_from='start', valid_to='stop', lateness=0)
    """
    return SnapshotWindow(valid_from, valid_to, lateness)


def count_by_start(n: int, *, lateness: Duration = 0) -> CountByStartWindow:
    """StreamInsight's count-by-start-time window: the events whose start times are ``n``
    consecutive distinct start times of the key, sliding by one start time.

    Window ``i`` of a key holds the events starting at its distinct start times ``d_i`` ..
    ``d_{i+n-1}``; it covers ``[d_i, d_{i+n-1} + 1)`` and is emitted once the watermark reaches
    that end. A key with fewer than ``n`` start times emits its one incomplete window, not final,
    at the end of the input.

    >>> count_by_start(3)
    CountByStartWindow(n=3, lateness=0)
    """
    return CountByStartWindow(n, lateness)


@dataclass(frozen=True)
class Grid:
    """Window geometry in integer ticks (or positions). ``L is None`` means landmark."""

    L: int | None
    S: int | None
    E: int | None

    def next_instant(self, o: int, after: int, lo: int | None = None) -> int:
        """First emission instant strictly after ``after`` (instants: o+mE and window ends).

        ``lo``: the start of the key's first window (default ``o``): windows ``k >= 0`` start at
        the origin, and an element before it adds the earlier windows holding it."""
        best = INT64_MAX * 4
        if self.E is not None:
            m = (after - o) // self.E + 1
            best = o + m * self.E
        if self.L is not None:
            k = ceil_div(after + 1 - o - self.L, self.S)
            k0 = 0 if lo is None else (lo - o) // self.S
            if k < k0:
                k = k0
            best = min(best, o + k * self.S + self.L)
        return best

    def next_boundary(self, o: int, after: int, instant: int | None = None,
                      lo: int | None = None) -> int:
        """First pane boundary strictly after ``after``: instants plus window starts.

        ``instant`` is ``next_instant(o, after, lo)`` when the caller already has it.
        """
        b = self.next_instant(o, after, lo) if instant is None else instant
        if self.L is not None:
            k = (after - o) // self.S + 1
            b = min(b, o + k * self.S)
        return b

    def prev_boundary(self, o: int, at: int) -> int:
        """A pane boundary ``<= at`` with no boundary between it and ``at``, on the grid
        extended before the origin (every ``o + m*E``, window start and window end)."""
        best = None
        if self.E is not None:
            best = o + ((at - o) // self.E) * self.E
        if self.L is not None:
            b = o + ((at - o) // self.S) * self.S
            best = b if best is None else max(best, b)
            best = max(best, o + ((at - o - self.L) // self.S) * self.S + self.L)
        return best

    def first_window(self, o: int, earliest: int) -> int:
        """Start of a key's first window: window 0 (at ``o``), or, when the key has an element
        before the origin, the first window that holds it (a landmark: the instant at or before
        it)."""
        if earliest >= o:
            return o
        if self.L is None:
            return o + ((earliest - o) // self.E) * self.E
        return o + ceil_div(earliest - o - self.L + 1, self.S) * self.S

    def window_start(self, o: int, t: int, lo: int | None = None) -> int:
        """Start of the window being formed at instant ``t`` (a landmark: its start ``lo``)."""
        if self.L is None:
            return o if lo is None else lo
        k = ceil_div(t - o - self.L, self.S)
        k0 = 0 if lo is None else (lo - o) // self.S
        return o + max(k, k0) * self.S

    def is_final(self, o: int, t: int, lo: int | None = None) -> bool:
        if self.L is None:
            return False
        s = self.window_start(o, t, lo)
        return t == s + self.L


def ceil_div(a: int, b: int) -> int:
    return -((-a) // b)


def choose_mode(spec: AggSpec, window: WindowSpec, grid: Grid) -> str:
    """How one aggregate runs on this window: 'add' | 'remove' | 'pane' | 'reset'."""
    a = spec.aggregate
    if grid.L is None:
        return "add"  # landmark: nothing ever leaves
    want_panes = getattr(window, "panes", None)
    if want_panes is True:
        if not a.has_merge:
            raise SpecError(f"aggregate {spec.name!r}: panes=True needs a merge hook; define "
                            "merge(older, newer) on the aggregate, or leave panes unset (its "
                            "remove hook then runs)")
        return "pane"
    if a.has_remove and (want_panes is False or not a.has_merge
                         or grid.E is None or grid.S <= grid.E):
        return "remove"
    if a.has_merge:
        return "pane"  # merge-only aggregates (min, max, ...) always run on panes
    if grid.L == grid.S:
        return "reset"
    raise SpecError(
        f"aggregate {spec.name!r} has neither remove nor merge, so it cannot run on a sliding "
        f"window (stride < length): define remove(state, e) or merge(older, newer), or use a "
        f"tumbling or landmark window")


def key_tuple(key) -> tuple[str, ...]:
    if key is None:
        return ()
    if isinstance(key, str):
        return (key,)
    return tuple(key)


def check_columns(schema: pa.Schema, time: str, keys: tuple, aggs: Sequence[AggSpec],
                  reserved: tuple = ()):
    """The columns the window reads exist and the output columns it makes do not clash
    (``reserved``: output columns of the window kind beyond the bounds and ``final``)."""
    names = schema.names
    if time not in names:
        raise SpecError(f"event-time column {time!r} is not in the input; the input's "
                        f"columns: {', '.join(names)}")
    t = schema.field(time).type
    if not (pa.types.is_integer(t) or pa.types.is_timestamp(t)):
        raise SpecError(f"event-time column {time!r} must be an integer column, not {t}; convert "
                        "times to integer ticks at the source (never floats)")
    for k in keys:
        if k not in names:
            raise SpecError(f"key column {k!r} is not in the input; key by one of its columns: "
                            f"{', '.join(names)}")
    for k in keys:
        if k in reserved or k in ("window_start", "window_end", "final"):
            raise SpecError(f"key column {k!r} clashes with the window's output column {k!r}; "
                            f"rename it before the window (t.map)")
    seen = set(keys) | {"window_start", "window_end", "final", *reserved}
    for a in aggs:
        for c in a.columns:
            if c not in names:
                raise SpecError(f"aggregate {a.name!r}: column {c!r} is not in the input; "
                                f"aggregate one of its columns: {', '.join(names)}")
        if getattr(a.aggregate, "numeric", False):
            for c in a.columns:
                ct = schema.field(c).type
                if not is_number(ct, time=True):
                    raise SpecError(f"aggregate {a.name!r}: column {c!r} is {ct}, and "
                                    f"{a.aggregate.name} takes numbers; aggregate a numeric "
                                    f"column, or convert this one before the window (t.map)")
        if a.name in seen:
            raise SpecError(f"aggregate output name {a.name!r} clashes with another output column;"
                            " pass name=... to rename it")
        seen.add(a.name)


def window_output_schema(spec: WindowSpec, aggregates: Sequence[AggSpec], schema: pa.Schema,
                         key=None) -> pa.Schema:
    """Output schema of a window node: keys, bounds, ``final``, (``ts``), results, (``_entry``)."""
    fields = [schema.field(k) for k in key_tuple(key)]
    if isinstance(spec, PredicateWindow):
        fields += [pa.field("window_start", pa.int64()), pa.field("window_end", pa.int64()),
                   pa.field("final", pa.bool_()), pa.field("ts", pa.int64())]
    else:
        fields += [pa.field("window_start", pa.int64()), pa.field("window_end", pa.int64()),
                   pa.field("final", pa.bool_())]
        if isinstance(spec, FewCountWindow):
            fields.append(pa.field("ts", pa.int64()))
    for a in aggregates:
        in_types = [schema.field(c).type for c in a.columns] if all(
            c in schema.names for c in a.columns) else []
        fields.append(pa.field(a.name, a.aggregate.output_type(in_types)))
    if ENTRY_COLUMN in schema.names:
        fields.append(pa.field(ENTRY_COLUMN, pa.int64()))
    return pa.schema(fields)


def check_window(spec: WindowSpec, aggregates: Sequence[AggSpec], schema: pa.Schema, time: str,
                 unit: str, key) -> None:
    """Every check building the window's operator would make, without building it: aggregates
    present, columns, ticks of the parameters, and how each aggregate can run."""
    if not aggregates:
        raise SpecError("a window needs at least one aggregate, e.g. epic.count()")
    check_columns(schema, time, key_tuple(key), aggregates,
                  ("ts",) if isinstance(spec, (PredicateWindow, FewCountWindow)) else ())
    if isinstance(spec, PredicateWindow):
        spec.lateness_ticks(unit)
        return
    if isinstance(spec, (SnapshotWindow, CountByStartWindow)):
        spec.lateness_ticks(unit)
        check_lifetime(spec, aggregates, schema, time)
        return
    grid = spec.resolve(unit)
    spec.lateness_ticks(unit)
    for a in aggregates:
        choose_mode(a, spec, grid)


def check_lifetime(spec: WindowSpec, aggregates: Sequence[AggSpec], schema: pa.Schema,
                   time: str) -> None:
    """The checks of snapshot and count-by-start windows: columns, and how aggregates can run."""
    if isinstance(spec, SnapshotWindow):
        if spec.valid_from is not None and spec.valid_from != time:
            raise SpecError(f"snapshot_window: valid_from {spec.valid_from!r} must be the "
                            f"stream's event-time column {time!r} (rows are admitted by their "
                            f"start); declare the stream with time={spec.valid_from!r}")
        if spec.valid_to not in schema.names:
            raise SpecError(f"snapshot_window: valid_to column {spec.valid_to!r} is not in the "
                            f"input (columns: {', '.join(schema.names)})")
        t = schema.field(spec.valid_to).type
        if not (pa.types.is_integer(t) or pa.types.is_timestamp(t)):
            raise SpecError(f"snapshot_window: valid_to column {spec.valid_to!r} must be an "
                            f"integer column in the stream's unit, not {t}")
        for a in aggregates:
            if not a.aggregate.has_remove:
                raise SpecError(f"aggregate {a.name!r} has no remove hook; snapshot windows "
                                f"remove events in end order, so every aggregate needs "
                                f"remove(state, e)")
        return
    for a in aggregates:
        if not (a.aggregate.has_remove or a.aggregate.has_merge):
            raise SpecError(f"aggregate {a.name!r} has neither remove nor merge, so it cannot "
                            f"run on a count_by_start window (it slides): define remove(state, e)"
                            f" or merge(older, newer)")


def expire_output_schema(aggregate: AggSpec, schema: pa.Schema, key=None) -> pa.Schema:
    """Rows of an expiry stream: the key column(s), ``expire_time`` (the instant the element
    left), the aggregate's ``expire_schema`` columns, and ``_entry`` when the input has it."""
    a = aggregate.aggregate
    extra = getattr(a, "expire_schema", None)
    if not a.has_expire or extra is None:
        raise SpecError(f"aggregate {aggregate.name!r} defines no expire hook and expire_schema; "
                        "define expire(state, e) and expire_schema (the columns of its rows)")
    extra = extra if isinstance(extra, pa.Schema) else pa.schema(
        [(n, t if isinstance(t, pa.DataType) else pa.type_for_alias(t)) for n, t in
         dict(extra).items()])
    fields = [schema.field(k) for k in key_tuple(key)] + [pa.field("expire_time", pa.int64())]
    names = {f.name for f in fields}
    for f in extra:
        if f.name in names or f.name == ENTRY_COLUMN:
            raise SpecError(f"aggregate {aggregate.name!r}: expire_schema column {f.name!r} "
                            "clashes with a key column or expire_time; rename it")
        fields.append(f)
    if ENTRY_COLUMN in schema.names:
        fields.append(pa.field(ENTRY_COLUMN, pa.int64()))
    return pa.schema(fields)
