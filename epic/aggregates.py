"""Incremental aggregates: a config object with ``init`` / ``add`` / ``remove`` / ``result``.

An :class:`Aggregate` is *configuration*: it holds parameters, never data. The data lives in a
separate *state* value that :meth:`~Aggregate.init` creates and every other hook takes and returns.
The window engine calls the hooks in this order, per window and key::

    state = agg.init()
    state = agg.add(state, e)        # each element exactly once, in event-time order
    state = agg.remove(state, e)     # each element exactly once, oldest first (if defined)
    value = agg.result(state)        # whenever the window emits; must not change ``state``
    state = agg.merge(older, newer)  # combine two partials (if defined; panes and two-stacks)

``add`` / ``remove`` (and ``add_batch`` / ``remove_batch``) may change ``state`` in place and return
it: an engine keeps each state in one place and replaces it with the returned value. ``merge`` must
not change its arguments (two-stacks keeps them), ``result`` must not change ``state``, and a
result must not share mutable parts with the state (it is emitted, then the state moves on).

``add_batch`` / ``remove_batch`` are the vectorised forms over a numpy column (or a tuple of
columns); by default they loop over ``add`` / ``remove``. An aggregate whose state is a sum of
per-element integer vectors can also define the *group form*, ``lift(values)`` (each element's
contribution, an int64 array ``(n, k)``) and ``lower(sums, counts)`` (``m`` results from ``(m, k)``
window sums, as an Arrow array): time windows then run on prefix sums
(:mod:`epic.windows.prefix`) with no Python call per emitted row. State must be serialisable by
:mod:`epic.serde` (msgpack: numbers, str, bytes, lists, dicts, numpy arrays), because it is
checkpointed; it is never pickled.

Which hooks an aggregate defines decides how windows run it:

* ``remove`` defined: sliding windows add and remove elements, O(1) per element.
* ``merge`` defined: windows keep one partial per pane and combine them with the two-stacks
  algorithm, amortised O(1) merges per pane (min, max, first, last do this).
* neither: allowed on tumbling and landmark windows only, where nothing is ever removed.

The plain-function form of the EPIC paper registers an aggregate by name::

    >>> mysum = aggregate_function("mysum", init=lambda: 0, add=lambda s, e: s + e,
    ...                            remove=lambda s, e: s - e)
    >>> agg("mysum", "x").name
    'mysum_x'
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
import pyarrow as pa

from .errors import SpecError

__all__ = [
    "Aggregate",
    "FunctionAggregate",
    "AggSpec",
    "aggregate_function",
    "registered_aggregates",
    "get_aggregate",
    "agg",
    "count",
    "sum",
    "mean",
    "min",
    "max",
    "variance",
    "stddev",
    "first",
    "last",
    "count_distinct",
    "collect",
    "histogram",
]

_builtin_sum = sum
_builtin_min = min
_builtin_max = max


class Aggregate:
    """Base class of incremental aggregates (see the module docstring for the hook order).

    Subclasses override :meth:`init` and :meth:`add`, and optionally :meth:`remove`,
    :meth:`merge`, :meth:`result`, :meth:`add_batch`, :meth:`remove_batch` and
    :meth:`output_type`. Nothing may be stored on ``self`` by the hooks.

    Attributes:
        result_type: the Arrow type of :meth:`result` values, used for output schemas when
            :meth:`output_type` is not overridden. Defaults to ``float64``.
    """

    result_type: pa.DataType = pa.float64()

    #: True when :meth:`remove` can only take the oldest element (``collect``): a window whose
    #: elements leave in another order (snapshot windows) rebuilds the state from its live
    #: elements instead of calling it.
    fifo_remove: bool = False

    #: True for aggregates of numbers only (``sum``, ``mean``, ``variance``, ``stddev``): a
    #: window binding one to a column of another type fails when the topology is built.
    numeric: bool = False

    def init(self) -> Any:
        """Return a fresh state for an empty window."""
        raise NotImplementedError

    def add(self, state: Any, e: Any) -> Any:
        """Return ``state`` with element ``e`` added (``state`` itself may be changed)."""
        raise NotImplementedError

    def remove(self, state: Any, e: Any) -> Any:  # optional
        """Return ``state`` with element ``e`` (added earlier) removed (``state`` itself may be
        changed)."""
        raise NotImplementedError

    def merge(self, older: Any, newer: Any) -> Any:  # optional
        """Combine two partial states; ``older`` covers earlier elements than ``newer``."""
        raise NotImplementedError

    def result(self, state: Any) -> Any:
        """The value to emit for a window with this state. Must not modify ``state``."""
        return state

    #: the columns of :meth:`expire`'s rows (a ``pa.Schema`` or ``{name: type}``), or None
    expire_schema: Any = None

    def expire(self, state: Any, e: Any) -> Any:  # optional: active expiration
        """Called when element ``e`` leaves the window being formed (oldest first), right after
        ``remove(state, e)``; ``state`` is the state without ``e``. Returns rows to emit at that
        moment (an iterable of dicts over :attr:`expire_schema`'s columns) or None. The rows
        reach the stream of ``Topology.expired``; they never change the window's own rows."""
        return None

    def needs_rebuild(self, state: Any) -> bool:  # optional
        """True when removals may have left more rounding residue in ``state`` than a few ulps
        of what it now holds: the window engine then rebuilds the state from the window's live
        elements (``add_batch(init(), live)``). Default: never."""
        return False

    def add_batch(self, state: Any, values: Any) -> Any:
        """Add a column of elements (numpy array, or tuple of arrays for several columns)."""
        add = self.add
        for e in _iter_elements(values):
            state = add(state, e)
        return state

    def remove_batch(self, state: Any, values: Any) -> Any:
        """Remove a column of elements, oldest first."""
        remove = self.remove
        for e in _iter_elements(values):
            state = remove(state, e)
        return state

    def output_type(self, input_types: Sequence[pa.DataType]) -> pa.DataType:
        """The Arrow type of results, given the Arrow types of the input columns."""
        return self.result_type

    def lift(self, values: Any) -> np.ndarray:  # optional: the group form
        """Each element's contribution to the state, an integer array ``(n, k)``; the state of
        a window is the sum of its elements' contributions (``init`` is the zero vector)."""
        raise NotImplementedError

    def lower(self, sums: np.ndarray, counts: np.ndarray) -> pa.Array:  # optional
        """Results of ``m`` windows from their summed contributions ``(m, k)`` and element
        counts ``(m,)``, as an Arrow array of :meth:`output_type` (or a list of values)."""
        raise NotImplementedError

    @property
    def has_group(self) -> bool:
        """True when the aggregate defines the group form (:meth:`lift` and :meth:`lower`)."""
        return _overrides(self, "lift") and _overrides(self, "lower")

    @property
    def has_expire(self) -> bool:
        """True when the aggregate defines :meth:`expire` (active expiration)."""
        return _overrides(self, "expire")

    @property
    def has_remove(self) -> bool:
        """True when the aggregate defines :meth:`remove` (it is invertible)."""
        return _overrides(self, "remove")

    @property
    def has_merge(self) -> bool:
        """True when the aggregate defines :meth:`merge` (partials can be combined)."""
        return _overrides(self, "merge")

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def _overrides(obj: Aggregate, hook: str) -> bool:
    if isinstance(obj, FunctionAggregate):
        return getattr(obj, f"_{hook}_fn", None) is not None
    return getattr(type(obj), hook) is not getattr(Aggregate, hook)


def _iter_elements(values: Any):
    """Elements of a column as plain Python values (tuples for several columns)."""
    if isinstance(values, tuple):
        return zip(*(_as_list(v) for v in values))
    return _as_list(values)


def _as_list(values: Any) -> list:
    if isinstance(values, np.ndarray):
        return values.tolist()
    return list(values)


class FunctionAggregate(Aggregate):
    """An aggregate made of plain functions (EPIC's ``create aggregate`` form).

    Built by :func:`aggregate_function`; the functions must be pure and keep nothing between calls.
    """

    def __init__(self, name: str, init: Callable[[], Any], add: Callable[[Any, Any], Any],
                 remove: Callable[[Any, Any], Any] | None = None,
                 result: Callable[[Any], Any] | None = None,
                 merge: Callable[[Any, Any], Any] | None = None,
                 result_type: pa.DataType = pa.float64(),
                 lift: Callable[[Any], Any] | None = None,
                 lower: Callable[[Any, Any], Any] | None = None,
                 expire: Callable[[Any, Any], Any] | None = None, expire_schema: Any = None):
        for role, fn in (("init", init), ("add", add)):
            if not callable(fn):
                raise SpecError(f"aggregate {name!r}: {role} must be a function, got {fn!r}")
        for role, fn in (("remove", remove), ("result", result), ("merge", merge),
                         ("lift", lift), ("lower", lower), ("expire", expire)):
            if fn is not None and not callable(fn):
                raise SpecError(f"aggregate {name!r}: {role} must be a function or None")
        if (lift is None) != (lower is None):
            raise SpecError(f"aggregate {name!r}: the group form needs both lift and lower")
        if (expire is None) != (expire_schema is None):
            raise SpecError(f"aggregate {name!r}: expire needs expire_schema (the columns of "
                            "its rows, e.g. {'sensor_value': 'float64'}) and the other way round")
        self.name = name
        self._expire_fn = expire
        self.expire_schema = expire_schema
        self._init_fn = init
        self._add_fn = add
        self._remove_fn = remove
        self._result_fn = result
        self._merge_fn = merge
        self._lift_fn = lift
        self._lower_fn = lower
        self.result_type = result_type

    def init(self):
        return self._init_fn()

    def add(self, state, e):
        return self._add_fn(state, e)

    def remove(self, state, e):
        if self._remove_fn is None:
            raise NotImplementedError(f"aggregate {self.name!r} has no remove")
        return self._remove_fn(state, e)

    def merge(self, older, newer):
        if self._merge_fn is None:
            raise NotImplementedError(f"aggregate {self.name!r} has no merge")
        return self._merge_fn(older, newer)

    def result(self, state):
        return state if self._result_fn is None else self._result_fn(state)

    def expire(self, state, e):
        return None if self._expire_fn is None else self._expire_fn(state, e)

    def lift(self, values):
        if self._lift_fn is None:
            raise NotImplementedError(f"aggregate {self.name!r} has no group form")
        return self._lift_fn(values)

    def lower(self, sums, counts):
        if self._lower_fn is None:
            raise NotImplementedError(f"aggregate {self.name!r} has no group form")
        return self._lower_fn(sums, counts)

    def add_batch(self, state, values):
        add = self._add_fn
        for e in _iter_elements(values):
            state = add(state, e)
        return state

    def remove_batch(self, state, values):
        remove = self._remove_fn
        for e in _iter_elements(values):
            state = remove(state, e)
        return state

    def __repr__(self) -> str:
        return f"FunctionAggregate({self.name!r})"


_REGISTRY: dict[str, Aggregate] = {}


def aggregate_function(name: str, init: Callable[[], Any], add: Callable[[Any, Any], Any],
                       remove: Callable[[Any, Any], Any] | None = None, *,
                       result: Callable[[Any], Any] | None = None,
                       merge: Callable[[Any, Any], Any] | None = None,
                       result_type: pa.DataType = pa.float64(), replace: bool = False,
                       lift: Callable[[Any], Any] | None = None,
                       lower: Callable[[Any, Any], Any] | None = None,
                       expire: Callable[[Any, Any], Any] | None = None,
                       expire_schema: Any = None) -> FunctionAggregate:
    """Register an aggregate made of plain functions under ``name`` and return it.

    Once registered it is usable by name on every window kind: ``agg("mysum", "x")``.

    Args:
        name: registry name; must be an identifier.
        init: ``() -> state``.
        add: ``(state, e) -> state``.
        remove: ``(state, e) -> state``; without it the aggregate needs ``merge`` for sliding
            windows.
        result: ``state -> value``; identity by default.
        merge: ``(older, newer) -> state``.
        result_type: Arrow type of the results.
        replace: allow re-registering an existing name.
        lift, lower: the optional group form (both or neither; see :class:`Aggregate`): time
            windows then run on prefix sums.
        expire, expire_schema: active expiration (both or neither): ``expire(state, e)`` is
            called when ``e`` leaves the window, right after ``remove``, and returns rows (dicts
            over ``expire_schema``'s columns) for ``Topology.expired`` (docs/windows.md).
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise SpecError(f"aggregate name must be an identifier, got {name!r}")
    if name in _REGISTRY and not replace:
        raise SpecError(f"aggregate {name!r} is already registered; pass replace=True to replace it")
    fa = FunctionAggregate(name, init, add, remove, result, merge, result_type, lift, lower,
                           expire, expire_schema)
    _REGISTRY[name] = fa
    return fa


def registered_aggregates() -> dict[str, Aggregate]:
    """A copy of the registry of named aggregates (built-ins included)."""
    return dict(_REGISTRY)


def get_aggregate(name: str) -> Aggregate:
    """The aggregate registered under ``name``; the error lists the known names."""
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY))
        raise SpecError(f"no aggregate named {name!r}; registered: {known}. "
                        "Register one with epic.aggregate_function(name, init, add, remove)") from None


@dataclass(frozen=True)
class AggSpec:
    """An aggregate bound to input columns and an output column name.

    Attributes:
        aggregate: the :class:`Aggregate` config.
        columns: input column names; an element is the column value (one column), a tuple of
            values (several columns) or the event time (no column).
        name: output column name.
    """

    aggregate: Aggregate
    columns: tuple[str, ...]
    name: str

    def __post_init__(self):
        if not isinstance(self.aggregate, Aggregate):
            raise SpecError(f"aggregate {self.name!r}: expected an epic.Aggregate, "
                            f"got {type(self.aggregate).__name__}")
        if not self.name or not isinstance(self.name, str):
            raise SpecError("an aggregate needs a non-empty output column name")
        cls = type(self.aggregate)
        missing = [h for h in ("init", "add") if getattr(cls, h) is getattr(Aggregate, h)]
        if missing:
            raise SpecError(
                f"aggregate {self.name!r} ({cls.__name__}): no {' and no '.join(missing)}(); "
                "Fix: define init(self) returning an empty window's state and add(self, state, "
                "e) returning it with element e added (remove, merge, result and the batch forms "
                "are optional)")


def agg(aggregate: Aggregate | str, *columns: str, name: str | None = None) -> AggSpec:
    """Bind an aggregate (an instance, or a registered name) to columns.

    >>> agg(Mean(), "speed", name="avg_speed").name
    'avg_speed'
    """
    if isinstance(aggregate, str):
        label = aggregate
        aggregate = get_aggregate(aggregate)
    else:
        label = getattr(aggregate, "name", type(aggregate).__name__.lower())
    if name is None:
        name = "_".join([label, *columns]) if columns else label
    return AggSpec(aggregate, tuple(columns), name)


# --------------------------------------------------------------------------------------------
# Built-ins. All vectorised over numpy columns; floating sums are compensated (Neumaier) so that
# long runs of add/remove do not drift.


def _two_sum(hi: float, lo: float, x: float) -> tuple[float, float]:
    t = hi + x
    if abs(hi) >= abs(x):
        lo += (hi - t) + x
    else:
        lo += (x - t) + hi
    return t, lo


def _is_int_type(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_boolean(t)


def _finite(values: np.ndarray) -> np.ndarray:
    """Drop nulls (None / NaN) from a column: aggregates ignore missing values, as SQL does."""
    if values.dtype.kind == "f":
        mask = ~np.isnan(values)
        return values if mask.all() else values[mask]
    if values.dtype.kind == "O":
        return np.array([v for v in values if v is not None])
    return values


def _is_null(e) -> bool:
    """An element that is no value: None, or NaN (a float column's null is read as NaN)."""
    return e is None or (isinstance(e, float) and e != e)


def _sum_count(values: np.ndarray) -> tuple[float, int]:
    """Float64 sum and number of the non-null values of a column.

    Windows call this once per emission, so the common case (a float column without NaN) takes
    one numpy reduction: a NaN anywhere makes the sum NaN, and only then are nulls filtered.
    """
    if values.dtype.kind == "f":
        total = float(np.add.reduce(values, dtype=np.float64))
        if total == total:
            return total, len(values)
    values = _finite(values)
    if not len(values):
        return 0.0, 0
    return float(np.add.reduce(values, dtype=np.float64)), len(values)


class Count(Aggregate):
    """Number of elements (rows) in the window."""

    name = "count"
    result_type = pa.int64()

    def init(self):
        return 0

    def add(self, state, e):
        return state + 1

    def remove(self, state, e):
        return state - 1

    def merge(self, older, newer):
        return older + newer

    def add_batch(self, state, values):
        return state + len(values[0] if isinstance(values, tuple) else values)

    def remove_batch(self, state, values):
        return state - len(values[0] if isinstance(values, tuple) else values)

    def lift(self, values):
        return np.ones((len(values[0] if isinstance(values, tuple) else values), 1), np.int64)

    def lower(self, sums, counts):
        return pa.array(counts, pa.int64())


#: a float state is recomputed from the window's live elements once the magnitude of what it
#: holds (the sum of |x|) has fallen this many times below its peak since the last rebuild:
#: removals of large values leave a rounding residue of about eps * peak, which would then
#: exceed a few ulps of the window's own magnitude
REBUILD_RATIO = 8.0


def _mag_peak(mag: float, peak: float, add: float) -> tuple[float, float]:
    mag += add
    return mag, (peak if peak >= mag else mag)


def _needs_rebuild(mag: float, peak: float) -> bool:
    return peak > REBUILD_RATIO * abs(mag)


class Sum(Aggregate):
    """Sum of a numeric column; exact for integers, compensated for floats.

    State ``[hi, lo, n, mag, peak]``: the compensated sum, the number of non-null elements (an
    empty window is exactly ``init()`` again), the sum of |x| of the live elements and its peak
    (see :data:`REBUILD_RATIO`)."""

    name = "sum"
    numeric = True

    def init(self):
        return [0, 0.0, 0, 0.0, 0.0]

    def add(self, state, e):
        if e is None or e != e:
            return state
        return self.add_batch(state, np.array([e]))

    def remove(self, state, e):
        if e is None or e != e:
            return state
        return self.remove_batch(state, np.array([e]))

    def merge(self, older, newer):
        hi, lo = older[0], older[1]
        if isinstance(hi, int) and isinstance(newer[0], int):
            hi, lo = hi + newer[0], lo + newer[1]
        else:
            hi, lo = _two_sum(float(hi), lo, float(newer[0]))
            lo += newer[1]
        mag = older[3] + newer[3]
        return [hi, lo, older[2] + newer[2], mag, _builtin_max(older[4], newer[4], mag)]

    def _total(self, values):
        if values.dtype.kind in "iub":
            if not len(values):
                return 0, 0.0
            # int64 addition wraps; its result is the exact sum modulo 2**64, so it is exact
            # whenever the true sum is well inside int64 (a float sum tells). Otherwise the
            # exact Python sum: the window's result then fails its int64 column with the fix.
            # (unsigned values are never negative: a float sum below 2**62 bounds each one, so
            # a uint64 batch that passes converts to int64 exactly). First the cheaper bound
            # (a third of the float pass's cost): no partial sum can leave int64.
            if len(values) * _builtin_max(-int(values.min()), int(values.max())) < 2 ** 63 \
                    or abs(float(values.sum(dtype=np.float64))) < 2.0 ** 62:
                return int(values.sum(dtype=np.int64)), 0.0
            return _builtin_sum(int(x) for x in values.tolist()), 0.0
        v = values.astype(np.float64, copy=False)
        total = math.fsum(v.tolist()) if len(v) < 64 else float(np.sum(v))
        return total, float(np.abs(v).sum())

    def add_batch(self, state, values):
        values = _finite(values)
        if not len(values):
            return state
        hi, lo, n, mag, peak = state
        total, a = self._total(values)
        if isinstance(total, int) and isinstance(hi, int):
            return [hi + total, lo, n + len(values), mag, peak]
        hi, lo = _two_sum(float(hi), lo, float(total))
        mag, peak = _mag_peak(mag, peak, a)
        return [hi, lo, n + len(values), mag, peak]

    def remove_batch(self, state, values):
        values = _finite(values)
        if not len(values):
            return state
        hi, lo, n, mag, peak = state
        n -= len(values)
        if n <= 0:
            return self.init()  # an empty window is exactly empty, with no rounding residue
        total, a = self._total(values)
        if isinstance(total, int) and isinstance(hi, int):
            return [hi - total, lo, n, mag, peak]
        hi, lo = _two_sum(float(hi), lo, -float(total))
        return [hi, lo, n, mag - a, peak]

    def needs_rebuild(self, state):
        return isinstance(state[0], float) and _needs_rebuild(state[3], state[4])

    def result(self, state):
        hi, lo = state[0], state[1]
        return hi + lo if lo else hi

    def output_type(self, input_types):
        return pa.int64() if input_types and _is_int_type(input_types[0]) else pa.float64()


class Mean(Aggregate):
    """Arithmetic mean; null for an empty window. State ``[n, hi, lo, mag, peak]`` (see
    :class:`Sum`)."""

    name = "mean"
    numeric = True

    def init(self):
        return [0, 0.0, 0.0, 0.0, 0.0]

    def add(self, state, e):
        if e is None or e != e:
            return state
        return self.add_batch(state, np.array([e], dtype=np.float64))

    def remove(self, state, e):
        if e is None or e != e:
            return state
        return self.remove_batch(state, np.array([e], dtype=np.float64))

    def merge(self, older, newer):
        hi, lo = _two_sum(older[1], older[2], newer[1])
        mag = older[3] + newer[3]
        return [older[0] + newer[0], hi, lo + newer[2], mag, _builtin_max(older[4], newer[4], mag)]

    def add_batch(self, state, values):
        total, n, a = _sum_count_abs(values)
        if not n:
            return state
        hi, lo = _two_sum(state[1], state[2], total)
        mag = state[3] + a
        return [state[0] + n, hi, lo, mag, mag if mag > state[4] else state[4]]

    def remove_batch(self, state, values):
        total, n, a = _sum_count_abs(values)
        if not n:
            return state
        if state[0] - n <= 0:
            return self.init()
        hi, lo = _two_sum(state[1], state[2], -total)
        return [state[0] - n, hi, lo, state[3] - a, state[4]]

    def needs_rebuild(self, state):
        return _needs_rebuild(state[3], state[4])

    def result(self, state):
        n = state[0]
        if n <= 0:
            return None
        total = state[1] + state[2]
        return total / n

    def output_type(self, input_types):
        return pa.float64()


def _sum_count_abs(values: np.ndarray) -> tuple[float, int, float]:
    """:func:`_sum_count` plus the sum of the absolute values (the state's magnitude)."""
    if values.dtype.kind == "f":
        total = float(np.add.reduce(values, dtype=np.float64))
        if total == total:
            return total, len(values), float(np.add.reduce(np.abs(values), dtype=np.float64))
    values = _finite(values)
    if not len(values):
        return 0.0, 0, 0.0
    v = values.astype(np.float64, copy=False)
    return float(np.add.reduce(v)), len(v), float(np.add.reduce(np.abs(v)))


class _Extreme(Aggregate):
    """Shared code of min and max: not invertible, so windows use panes + two-stacks."""

    _reduce: Callable = staticmethod(np.min)
    _pick: Callable = staticmethod(_builtin_min)

    def init(self):
        return None

    def add(self, state, e):
        if e is None or e != e:
            return state
        return e if state is None else self._pick(state, e)

    def merge(self, older, newer):
        if older is None:
            return newer
        if newer is None:
            return older
        return self._pick(older, newer)

    def add_batch(self, state, values):
        values = _finite(values)
        if not len(values):
            return state
        if values.dtype.kind in "OUS":   # strings (numpy has no min/max loop for them)
            v = self._pick(values.tolist())
        else:
            v = self._reduce(values)
        v = v.item() if hasattr(v, "item") else v
        return v if state is None else self._pick(state, v)

    def output_type(self, input_types):
        return input_types[0] if input_types else pa.float64()


class Min(_Extreme):
    """Smallest value; amortised O(1) per element on sliding windows (panes + two-stacks)."""

    name = "min"


class Max(_Extreme):
    """Largest value; amortised O(1) per element on sliding windows (panes + two-stacks)."""

    name = "max"
    _reduce = staticmethod(np.max)
    _pick = staticmethod(_builtin_max)


class Variance(Aggregate):
    """Variance (``ddof=0`` population by default, ``ddof=1`` sample), invertible.

    State ``[n, shift, s1, s2]``: sums of ``x - shift`` and its square, with ``shift`` the first
    value seen, which keeps the classic sum-of-squares formula free of cancellation when the data
    sit far from zero.
    """

    name = "variance"
    numeric = True

    def __init__(self, ddof: int = 0, sqrt: bool = False):
        if ddof not in (0, 1):
            raise SpecError(f"variance: ddof must be 0 or 1, got {ddof!r}")
        self.ddof = ddof
        self.sqrt = sqrt

    def init(self):
        return [0, None, 0.0, 0.0, 0.0, 0.0]

    def add(self, state, e):
        if e is None or e != e:
            return state
        return self.add_batch(state, np.array([e], dtype=np.float64))

    def remove(self, state, e):
        if e is None or e != e:
            return state
        return self.remove_batch(state, np.array([e], dtype=np.float64))

    def add_batch(self, state, values):
        values = _finite(values).astype(np.float64, copy=False)
        if not len(values):
            return state
        n, shift, s1, s2, mag, peak = state
        if shift is None:
            shift = float(values[0])
        d = values - shift
        dd = float(np.dot(d, d))
        mag, peak = _mag_peak(mag, peak, dd + float(np.abs(d).sum()))
        return [n + len(values), shift, s1 + float(d.sum()), s2 + dd, mag, peak]

    def remove_batch(self, state, values):
        values = _finite(values).astype(np.float64, copy=False)
        if not len(values):
            return state
        n, shift, s1, s2, mag, peak = state
        d = values - shift
        n -= len(values)
        if n <= 0:
            return self.init()
        dd = float(np.dot(d, d))
        return [n, shift, s1 - float(d.sum()), s2 - dd, mag - dd - float(np.abs(d).sum()), peak]

    def needs_rebuild(self, state):
        """After removals: the magnitude test of the float sums, or the live values' mean far
        from the shift (the first value added, which may have left: a large one leaves sums of
        squares whose difference cancels) -- the squared offset of the mean above
        :data:`CENTRE_RATIO` times the variance."""
        n, _shift, s1, s2, mag, peak = state
        if _needs_rebuild(mag, peak):
            return True
        if n == 1:
            return s1 != 0.0 or s2 != 0.0     # one element left: its variance is exactly 0
        if n < 2 or s1 == 0.0:
            return False
        offset2 = s1 * s1 / n                       # n * (mean - shift)^2
        return offset2 > self.CENTRE_RATIO * _builtin_max(s2 - offset2, 0.0)

    #: see :meth:`needs_rebuild`: the variance's relative rounding error is about
    #: eps * (1 + offset^2 / variance), so at most ~1e3 eps before a rebuild
    CENTRE_RATIO = 1024.0

    def merge(self, older, newer):
        """Chan et al.'s pairwise combination of (count, mean, squared deviations), re-centred
        on the merged mean (re-expressing one state's sums around the other's shift would cancel
        when the shifts are far apart)."""
        if older[0] == 0:
            return list(newer)
        if newer[0] == 0:
            return list(older)
        n1, c1, a1, b1, _m1, p1 = older
        n2, c2, a2, b2, _m2, p2 = newer
        n = n1 + n2
        o1, o2 = a1 / n1, a2 / n2                  # each mean's offset from its own shift
        dev1 = _builtin_max(b1 - a1 * o1, 0.0)
        dev2 = _builtin_max(b2 - a2 * o2, 0.0)
        delta = (c2 - c1) + (o2 - o1)              # the difference of the two means
        dev = dev1 + dev2 + delta * delta * (n1 * n2 / n)
        mean = c1 + o1 + delta * (n2 / n)
        mag = dev + math.sqrt(dev * n)             # sum of d^2 and a bound of sum of |d|
        return [n, mean, 0.0, dev, mag, _builtin_max(p1, p2, mag)]

    def result(self, state):
        n, _shift, s1, s2 = state[:4]
        if n - self.ddof <= 0:
            return None
        var = _builtin_max((s2 - s1 * s1 / n) / (n - self.ddof), 0.0)
        return math.sqrt(var) if self.sqrt else var

    def output_type(self, input_types):
        return pa.float64()

    def __repr__(self):
        return f"Variance(ddof={self.ddof}, sqrt={self.sqrt})"


class First(Aggregate):
    """The earliest element of the window (by event time, then arrival). Merge-only."""

    name = "first"

    def init(self):
        return [False, None]

    def add(self, state, e):
        return state if state[0] else [True, e]

    def merge(self, older, newer):
        return older if older[0] else newer

    def add_batch(self, state, values):
        if state[0] or not len(values):
            return state
        v = values[0]
        return [True, v.item() if hasattr(v, "item") else v]

    def result(self, state):
        v = state[1]
        return None if _is_null(v) else v

    def output_type(self, input_types):
        return input_types[0] if input_types else pa.int64()


class Last(First):
    """The latest element of the window (by event time, then arrival). Merge-only."""

    name = "last"

    def add(self, state, e):
        return [True, e]

    def merge(self, older, newer):
        return newer if newer[0] else older

    def add_batch(self, state, values):
        if not len(values):
            return state
        v = values[-1]
        return [True, v.item() if hasattr(v, "item") else v]


class Histogram(Aggregate):
    """Counts per distinct value: ``{value: count}``, invertible; the result is an Arrow map.
    Nulls (and NaN) are not counted."""

    name = "histogram"

    def init(self):
        return {}

    def add(self, state, e):
        if _is_null(e):
            return state
        state[e] = state.get(e, 0) + 1
        return state

    def remove(self, state, e):
        if _is_null(e):
            return state
        c = state[e] - 1
        if c:
            state[e] = c
        else:
            del state[e]
        return state

    def merge(self, older, newer):
        out = dict(older)
        for k, c in newer.items():
            out[k] = out.get(k, 0) + c
        return out

    def add_batch(self, state, values):
        if isinstance(values, np.ndarray):
            values = _finite(values)
            if values.dtype.kind in "iub" and len(values) > 8:
                uniq, counts = np.unique(values, return_counts=True)
                get = state.get
                for k, c in zip(uniq.tolist(), counts.tolist()):
                    state[k] = get(k, 0) + c
                return state
        return super().add_batch(state, values)

    def remove_batch(self, state, values):
        if isinstance(values, np.ndarray):
            values = _finite(values)
            if values.dtype.kind in "iub" and len(values) > 8:
                uniq, counts = np.unique(values, return_counts=True)
                for k, c in zip(uniq.tolist(), counts.tolist()):
                    left = state[k] - c
                    if left:
                        state[k] = left
                    else:
                        del state[k]
                return state
        return super().remove_batch(state, values)

    def result(self, state):
        return sorted(state.items())

    def output_type(self, input_types):
        return pa.map_(input_types[0] if input_types else pa.int64(), pa.int64())


class CountDistinct(Histogram):
    """Number of distinct non-null values, invertible (keeps a histogram as state)."""

    name = "count_distinct"
    result_type = pa.int64()

    def result(self, state):
        return len(state)

    def output_type(self, input_types):
        return pa.int64()


class Collect(Aggregate):
    """All elements of the window in order, as a list (nulls kept). State ``[items, head]``.

    Removal advances ``head`` and compacts the list when half of it is dead, so each element costs
    amortised O(1).
    """

    name = "collect"
    fifo_remove = True   # remove drops the head: elements must leave oldest first

    def init(self):
        return [[], 0]

    def add(self, state, e):
        state[0].append(None if _is_null(e) else e)   # a float null (read as NaN) kept as null
        return state

    def remove(self, state, e):
        items, head = state
        head += 1
        if head * 2 > len(items) and head > 32:
            del items[:head]
            head = 0
        return [items, head]

    def merge(self, older, newer):
        return [older[0][older[1]:] + newer[0][newer[1]:], 0]

    def add_batch(self, state, values):
        if isinstance(values, np.ndarray) and values.dtype.kind == "f" and np.isnan(values).any():
            state[0].extend(None if v != v else v for v in values.tolist())
        else:
            state[0].extend(_iter_elements(values))
        return state

    def remove_batch(self, state, values):
        n = len(values[0] if isinstance(values, tuple) else values)
        items, head = state
        head += n
        if head * 2 > len(items) and head > 32:
            del items[:head]
            head = 0
        return [items, head]

    def result(self, state):
        return state[0][state[1]:]

    def output_type(self, input_types):
        return pa.list_(input_types[0] if input_types else pa.int64())


def count(name: str = "count") -> AggSpec:
    """Number of rows in the window."""
    return AggSpec(Count(), (), name)


def sum(column: str, name: str | None = None) -> AggSpec:  # noqa: A001 - the natural name
    """Sum of ``column`` (int64 for integer columns, float64 otherwise)."""
    return AggSpec(Sum(), (column,), name or f"sum_{column}")


def mean(column: str, name: str | None = None) -> AggSpec:
    """Mean of ``column`` (nulls ignored; null for a window without values)."""
    return AggSpec(Mean(), (column,), name or f"mean_{column}")


def min(column: str, name: str | None = None) -> AggSpec:  # noqa: A001
    """Minimum of ``column``."""
    return AggSpec(Min(), (column,), name or f"min_{column}")


def max(column: str, name: str | None = None) -> AggSpec:  # noqa: A001
    """Maximum of ``column``."""
    return AggSpec(Max(), (column,), name or f"max_{column}")


def variance(column: str, name: str | None = None, ddof: int = 0) -> AggSpec:
    """Variance of ``column`` (population by default; ``ddof=1`` for the sample variance)."""
    return AggSpec(Variance(ddof), (column,), name or f"variance_{column}")


def stddev(column: str, name: str | None = None, ddof: int = 0) -> AggSpec:
    """Standard deviation of ``column``."""
    return AggSpec(Variance(ddof, sqrt=True), (column,), name or f"stddev_{column}")


def first(column: str, name: str | None = None) -> AggSpec:
    """Earliest value of ``column`` in the window."""
    return AggSpec(First(), (column,), name or f"first_{column}")


def last(column: str, name: str | None = None) -> AggSpec:
    """Latest value of ``column`` in the window."""
    return AggSpec(Last(), (column,), name or f"last_{column}")


def count_distinct(column: str, name: str | None = None) -> AggSpec:
    """Number of distinct values of ``column``."""
    return AggSpec(CountDistinct(), (column,), name or f"count_distinct_{column}")


def collect(column: str, name: str | None = None) -> AggSpec:
    """The values of ``column`` in the window, in order."""
    return AggSpec(Collect(), (column,), name or f"collect_{column}")


def histogram(column: str, name: str | None = None) -> AggSpec:
    """Counts per distinct value of ``column`` (an Arrow map)."""
    return AggSpec(Histogram(), (column,), name or f"histogram_{column}")


for _cls in (Count, Sum, Mean, Min, Max, Variance, First, Last, CountDistinct, Collect, Histogram):
    _REGISTRY[_cls.name] = _cls()
_REGISTRY["stddev"] = Variance(sqrt=True)
del _cls
