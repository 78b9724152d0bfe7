"""Sequence patterns over a keyed stream (ESL-TS / SQL-TS): specs, the matcher and its operator.

A pattern is a sequence of *elements* matched against consecutive rows of one key, in event-time
order (``docs/patterns.md`` states the semantics exactly, with diagrams)::

    jam = epic.pattern(
        epic.var("X", where=lambda cur: cur["speed"] > 50),
        epic.star("Y", where=lambda cur, prev, m: (cur["speed"] < (prev or m["X"])["speed"]
                                                   and m["Y"].count <= 6),
                  having=lambda m: m["Y"].last["speed"] < 0.3 * m["X"]["speed"]),
        within=360)
    jams = t.pattern("jams", speeds, jam, key="segment",
                     select={"start_speed": "X.speed", "n": "Y.count"})

* :func:`var` matches exactly one row; :func:`star` a *maximal* run of one or more rows.
* ``where`` is asked per row. Its parameters say what it reads, and so how the matcher may share
  work between attempts: ``where(cur)`` and ``where(cur, prev)`` are *local* (the row, and the
  previous row of the same star, ``None`` for a star's first row and for a ``var``);
  ``where(cur, prev, m)`` also reads the match so far: earlier variables (``m["X"]``) and the
  star being grown with the row added (``m["Y"].count``, ``m["Y"]["avg_v"]``: continuous
  aggregates, which decide whether the row extends the star).
* ``having(m)`` is tested once a star is complete (final aggregates, ``m["Y"].last``).
* ``mask(batch)`` is an optional vectorised, row-local part of the condition (a boolean column
  per input batch, computed once with Arrow), ANDed with ``where``.

A :class:`Pattern` is configuration; :class:`PatternOperator` is its runtime logic (the
:mod:`epic.operator` protocol, state as msgpack). ``Topology.pattern`` adds it as a process node,
so both runtimes run it unchanged. Two matchers give identical output: ``"linear"`` (default) and
``"backtracking"`` (the naive matcher, kept for tests and ``scripts/bench_patterns.py``).
"""

from __future__ import annotations

import bisect
import inspect
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pyarrow as pa

from . import serde
from .aggregates import AggSpec
from .errors import EpicError, InputError, NodeFailure, SpecError, StateError
from .timeunits import to_ticks

__all__ = ["Element", "Pattern", "Match", "StarValue", "var", "star", "pattern",
           "PatternMatcher", "PatternOperator"]

MATCHERS = ("linear", "backtracking")
ORDER_POLICIES = ("error", "drop")


def _arity(fn: Callable, what: str) -> int:
    """Number of required positional parameters of ``fn`` (3 for ``*args``)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return 1
    n = 0
    for p in params:
        if p.kind == p.VAR_POSITIONAL:
            return 3
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty:
            n += 1
    if n == 0:
        raise SpecError(f"{what}: a condition takes at least the current row (cur)")
    return n


@dataclass(frozen=True)
class Element:
    """One element of a pattern: a tuple variable (:func:`var`) or a star (:func:`star`).

    Attributes:
        name: the variable name (``m["X"]``, ``"X.col"`` in ``select``).
        star: True for a maximal run of one or more rows.
        where: the per-row condition; ``(cur)``, ``(cur, prev)`` or ``(cur, prev, m)``.
        mask: vectorised row-local condition ``batch -> boolean column``, or None.
        having: star only: ``(m) -> bool``, tested when the star is complete.
        aggregates: star only: aggregates over the star's rows (``m["Y"]["name"]``).
    """

    name: str
    star: bool = False
    where: Callable | None = None
    mask: Callable | None = None
    having: Callable | None = None
    aggregates: tuple[AggSpec, ...] = ()

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise SpecError(f"pattern variable name must be an identifier, got {self.name!r}")
        what = f"pattern variable {self.name!r}"
        for role in ("where", "mask", "having"):
            fn = getattr(self, role)
            if fn is not None and not callable(fn):
                raise SpecError(f"{what}: {role} must be a function, got {fn!r}")
        if self.where is not None and _arity(self.where, f"{what}, where") > 3:
            raise SpecError(f"{what}, where: takes (cur), (cur, prev) or (cur, prev, m)")
        if not self.star and (self.having is not None or self.aggregates):
            raise SpecError(f"{what}: having and aggregates belong to a star. Fix: use "
                            f"epic.star({self.name!r}, ...) or move the test into where")
        aggs = tuple(self.aggregates)
        object.__setattr__(self, "aggregates", aggs)
        names = {"count", "first", "last"}
        for a in aggs:
            if not isinstance(a, AggSpec):
                raise SpecError(f"{what}, aggregates: expected epic aggregates such as "
                                f"epic.mean('v'), got {a!r}")
            if a.name in names:
                raise SpecError(f"{what}, aggregates: the name {a.name!r} is taken (count, first "
                                "and last are built in). Fix: pass name=... to the aggregate")
            names.add(a.name)

    @property
    def local(self) -> bool:
        """True when ``where`` reads only the row and its predecessor in the star."""
        return self.where is None or _arity(self.where, self.name) <= 2


def var(name: str, where: Callable | None = None, *, mask: Callable | None = None) -> Element:
    """A tuple variable: exactly one row that satisfies ``where`` (and ``mask``).

    >>> var("X", where=lambda cur: cur["page"] == "ad").star
    False
    """
    return Element(name, False, where, mask)


def star(name: str, where: Callable | None = None, *, having: Callable | None = None,
         mask: Callable | None = None, aggregates: Sequence[AggSpec] = ()) -> Element:
    """A starred variable: the maximal run of one or more consecutive rows satisfying ``where``.

    ``aggregates`` (epic aggregates: ``epic.mean("speed")``, ``epic.agg("mine", "v")``, ...) are
    kept while the star grows; ``count``, ``first`` and ``last`` are always there.

    >>> star("Y", where=lambda cur, prev: prev is None or cur["v"] < prev["v"]).star
    True
    """
    return Element(name, True, where, mask, having, tuple(aggregates))


@dataclass(frozen=True)
class Pattern:
    """A sequence pattern (configuration). Build it with :func:`pattern`.

    Attributes:
        elements: the variables, in order.
        within: the largest allowed ``last time - first time`` of a match, in seconds; None
            for no bound. A row beyond it cannot join the match (it ends a star).
        anchored: only one attempt per key, at its first row (at most one match per key).
        out_of_order: a row older than its key's previous row: ``"error"`` or ``"drop"``.
        matcher: ``"linear"`` (shares work between attempts) or ``"backtracking"`` (naive).
    """

    elements: tuple[Element, ...]
    within: Any = None
    anchored: bool = False
    out_of_order: str = "error"
    matcher: str = "linear"

    def __post_init__(self):
        els = tuple(self.elements)
        object.__setattr__(self, "elements", els)
        if not els:
            raise SpecError("a pattern needs at least one variable")
        names = [e.name for e in els]
        for e in els:
            if not isinstance(e, Element):
                raise SpecError(f"pattern elements are epic.var(...) or epic.star(...), got {e!r}")
            if names.count(e.name) > 1:
                raise SpecError(f"pattern variable {e.name!r} appears twice; names are unique")
        if self.out_of_order not in ORDER_POLICIES:
            raise SpecError(f"pattern out_of_order={self.out_of_order!r}; use 'error' or 'drop'")
        if self.matcher not in MATCHERS:
            raise SpecError(f"pattern matcher={self.matcher!r}; use 'linear' or 'backtracking'")
        if self.within is not None and isinstance(self.within, (int, float)) and self.within < 0:
            raise SpecError(f"pattern within={self.within!r} must not be negative")

    @property
    def names(self) -> list[str]:
        """The variable names, in order."""
        return [e.name for e in self.elements]


def pattern(*elements: Element, within=None, anchored: bool = False,
            out_of_order: str = "error", matcher: str = "linear") -> Pattern:
    """A sequence pattern of :func:`var` and :func:`star` elements (see :class:`Pattern`).

    >>> p = pattern(var("X", lambda cur: cur["v"] > 5), star("Y", lambda cur: cur["v"] < 5),
    ...             within=60)
    >>> p.names
    ['X', 'Y']
    """
    return Pattern(tuple(elements), within, anchored, out_of_order, matcher)


# --------------------------------------------------------------------------------------------
# Views given to conditions


class StarValue:
    """A star's rows so far (in its own ``where``) or complete (later and in ``having``)."""

    __slots__ = ("count", "first", "last", "_values")

    def __init__(self, count: int, first: dict, last: dict, values: dict):
        self.count = count
        self.first = first
        self.last = last
        self._values = values

    def __getitem__(self, aggregate: str) -> Any:
        """The value of one of the star's declared aggregates."""
        try:
            return self._values[aggregate]
        except KeyError:
            raise KeyError(f"star has no aggregate {aggregate!r}; declared: "
                           f"{', '.join(self._values) or 'none'} (count, first, last are "
                           "attributes)") from None

    def __repr__(self):
        return f"StarValue(count={self.count}, first={self.first}, last={self.last})"


class Match:
    """The match so far: ``m["X"]`` is the row of variable X or the :class:`StarValue` of a star."""

    __slots__ = ("key", "start_time", "_vals")

    def __init__(self, key, start_time: int, vals: dict):
        self.key = key
        self.start_time = start_time
        self._vals = vals

    def __getitem__(self, name: str):
        try:
            return self._vals[name]
        except KeyError:
            raise KeyError(f"pattern variable {name!r} is not bound yet (bound: "
                           f"{', '.join(self._vals)}); conditions see earlier variables and "
                           "their own star only") from None

    def __contains__(self, name: str) -> bool:
        return name in self._vals


# --------------------------------------------------------------------------------------------
# Matcher state (plain values, msgpack-serialisable)


class _Run:
    """A star being grown or complete: [start, start+count) with aggregate states / results."""

    __slots__ = ("start", "count", "first", "last", "states", "results")

    def __init__(self, start, count, first, last, states, results):
        self.start, self.count, self.first, self.last = start, count, first, last
        self.states, self.results = states, results

    def dump(self):
        return [self.start, self.count, self.first, self.last, self.states, self.results]


class _Attempt:
    """One attempt to match from row ``s``: at element ``j``, next row ``i``."""

    __slots__ = ("s", "t0", "j", "i", "binds", "run")

    def __init__(self, s, t0, n):
        self.s, self.t0, self.j, self.i = s, t0, 0, s
        self.binds: list = [None] * n
        self.run: _Run | None = None

    def dump(self):
        return [self.s, self.t0, self.j, self.i,
                [b.dump() if isinstance(b, _Run) else b for b in self.binds],
                None if self.run is None else self.run.dump()]


class _Key:
    """Per-key state: buffered rows from the current attempt's start, and the attempt."""

    __slots__ = ("rows", "times", "bits", "pos", "base", "last", "next", "done", "att",
                 "memo", "runs", "suffix", "pruned")

    def __init__(self, n):
        self.rows: list[dict] = []
        self.times: list[int] = []
        self.bits: list[int] = []
        self.pos: list[int] = []   # each row's position in the node's input (output ties)
        self.base = 0          # global index (per key) of rows[0]
        self.last = None       # time of the key's latest row (order check)
        self.next = 0          # start of the next attempt
        self.done = False      # anchored pattern resolved
        self.att: _Attempt | None = None
        self._caches(n)

    def _caches(self, n):
        # Caches of the linear matcher; not snapshotted (conditions are deterministic).
        self.memo = [({}, {}, {}) for _ in range(n)]   # per element: (any, first, cont) idx->bool
        self.runs = [[] for _ in range(n)]             # per star: sorted closed runs [r, e]
        self.suffix = [{} for _ in range(n)]           # per star: end -> [lo, states, results]
        self.pruned = self.base                        # base when the caches were last pruned


_NEED, _FAIL, _MATCH = 0, 1, 2


# --------------------------------------------------------------------------------------------
# The factory (what the process node holds) and the operator


class PatternMatcher:
    """Factory of :class:`PatternOperator` for one node; validates the spec against the input.

    Args:
        pattern: the :class:`Pattern`.
        schema: the input schema (without ``_entry``).
        time: the input's event-time column; ``unit`` its unit.
        key: key column(s).
        select: output columns: ``{name: "X.col" | "Y.count" | "Y.first.col" | "Y.last.col" |
            "Y.<aggregate>" | function(m)}``.
        schema_out: Arrow types of the ``select`` entries given as functions.
        node: the node name, for messages.
    """

    def __init__(self, pattern: Pattern, schema: pa.Schema, time: str, unit: str,
                 key: Sequence[str] = (), select: Mapping[str, Any] | None = None,
                 schema_out: Mapping[str, Any] | None = None, node: str = "pattern"):
        from .schemas import as_schema

        if not isinstance(pattern, Pattern):
            raise SpecError(f"expected an epic.pattern(...), got {type(pattern).__name__}")
        self.pattern = pattern
        self.schema = schema
        self.time = time
        self.unit = unit
        self.key = tuple(key)
        self.node = node
        self.within = (None if pattern.within is None
                       else to_ticks(pattern.within, unit, what="pattern within"))
        cols = {f.name: f.type for f in schema}
        by_name = {e.name: e for e in pattern.elements}
        for e in pattern.elements:
            for a in e.aggregates:
                for c in a.columns:
                    if c not in cols:
                        raise SpecError(f"star {e.name!r}, aggregate {a.name!r}: no input "
                                        f"column {c!r} (columns: {', '.join(cols)})")
        declared = as_schema(schema_out or {}, what="pattern schema")
        fields = [pa.field(k, cols[k]) for k in self.key]
        fields += [pa.field("match_start", cols[time]), pa.field("match_end", cols[time])]
        self.select: list[tuple[str, Any]] = []
        for out, how in (select or {}).items():
            if out in {f.name for f in fields}:
                raise SpecError(f"select {out!r}: the output already has this column")
            if callable(how):
                if out not in declared.names:
                    raise SpecError(f"select {out!r} is a function, so its type must be declared"
                                    f". Fix: pass schema={{{out!r}: 'float64'}}")
                fields.append(declared.field(out))
                self.select.append((out, how))
                continue
            getter, typ = _path(how, by_name, cols, f"select {out!r}")
            fields.append(pa.field(out, declared.field(out).type if out in declared.names
                                   else typ))
            self.select.append((out, getter))
        self.output_schema = pa.schema(fields)

    def __call__(self) -> "PatternOperator":
        return PatternOperator(self)


def _path(text: Any, by_name: dict, cols: dict, what: str):
    """A getter ``m -> value`` and its Arrow type from ``"X.col"``, ``"Y.count"``, ..."""
    if not isinstance(text, str) or "." not in text:
        raise SpecError(f"{what}: expected 'VAR.column', 'STAR.count|first.col|last.col|"
                        f"<aggregate>' or a function of the match, got {text!r}")
    name, rest = text.split(".", 1)
    e = by_name.get(name)
    if e is None:
        raise SpecError(f"{what}: no pattern variable {name!r} (variables: {', '.join(by_name)})")
    if not e.star:
        if rest not in cols:
            raise SpecError(f"{what}: no input column {rest!r}")
        return (lambda m: m[name][rest]), cols[rest]
    if rest == "count":
        return (lambda m: m[name].count), pa.int64()
    for end in ("first", "last"):
        if rest.startswith(end + "."):
            col = rest[len(end) + 1:]
            if col not in cols:
                raise SpecError(f"{what}: no input column {col!r}")
            return (lambda m: getattr(m[name], end)[col]), cols[col]
    for a in e.aggregates:
        if a.name == rest:
            types = [cols[c] for c in a.columns]
            return (lambda m: m[name][rest]), a.aggregate.output_type(types)
    raise SpecError(f"{what}: star {name!r} has no aggregate {rest!r}; declare it with "
                    f"epic.star({name!r}, aggregates=[...]) or use count, first.col, last.col")


class PatternOperator:
    """Runtime logic of a pattern node (see :mod:`epic.operator` for the call order).

    Per key it buffers rows from the start of the current attempt only. The ``linear`` matcher
    additionally caches every local condition per row and the end of every star run, so an
    attempt that restarts inside a run it has seen jumps to the run's end instead of re-reading
    rows (``docs/patterns.md``, "Cost").
    """

    def __init__(self, cfg: PatternMatcher):
        self.cfg = cfg
        p = cfg.pattern
        self.els = p.elements
        self.n = len(self.els)
        self.linear = p.matcher == "linear"
        self.within = cfg.within
        self.output_schema = cfg.output_schema
        self.arity = [0 if e.where is None else _arity(e.where, e.name) for e in self.els]
        self.local = [a <= 2 for a in self.arity]
        self.merge_ok = [all(a.aggregate.has_merge for a in e.aggregates) for e in self.els]
        self.all_bits = (1 << self.n) - 1
        self._keys: dict[Any, _Key] = {}
        self._wm: int | None = None
        self._out: list[dict] = []          # matches of this call, in recognition order
        # Matches not yet safe to send (an attempt in progress or a row still to come may end
        # earlier): the output schema plus the input position of each match's last row.
        self._queue: pa.Table | None = None
        self._rows_in = 0                    # rows of the node's input so far (positions)
        self._batches = 0
        self.dropped_rows = 0
        self.evaluations = 0    # calls of user conditions (for the benchmark)

    # -- protocol --------------------------------------------------------------------------
    def on_batch(self, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        self._batches += 1
        n = batch.num_rows
        if not n:
            return []
        bits = self._masks(batch)
        rows = batch.to_pylist()
        times = batch.column(self.cfg.time).to_pylist()
        kc = self.cfg.key
        touched: dict[Any, _Key] = {}
        first = self._rows_in
        self._rows_in += n
        for i, (r, t, b) in enumerate(zip(rows, times, bits)):
            k = (None if not kc else r[kc[0]] if len(kc) == 1 else tuple(r[c] for c in kc))
            ks = touched.get(k)
            if ks is None:
                ks = self._keys.get(k)
                if ks is None:
                    ks = self._keys[k] = _Key(self.n)
                touched[k] = ks
            if ks.last is not None and t < ks.last:
                if self.cfg.pattern.out_of_order == "drop":
                    self.dropped_rows += 1
                    continue
                raise InputError(
                    f"node {self.cfg.node!r}: a row of key {k!r} has time {t}, older than the "
                    f"key's previous row ({ks.last}); a pattern reads each key's rows in "
                    "event-time order. Fix: put a merge or a window before the pattern, or pass "
                    "epic.pattern(..., out_of_order='drop')", field=self.cfg.time, value=t)
            ks.last = t
            if ks.done:
                continue
            ks.rows.append(r)
            ks.times.append(t)
            ks.bits.append(b)
            ks.pos.append(first + i)
        for k, ks in touched.items():
            self._advance(k, ks, False)
        return self._flush(False)

    def on_watermark(self, watermark: int) -> list[pa.RecordBatch]:
        watermark = int(watermark)
        if self._wm is not None and watermark <= self._wm:
            return []
        self._wm = watermark
        if self.within is not None:
            for k, ks in self._keys.items():
                if ks.att is not None:
                    self._advance(k, ks, False)
        return self._flush(False)

    def on_end(self) -> list[pa.RecordBatch]:
        for k, ks in self._keys.items():
            self._advance(k, ks, True)
        return self._flush(True)

    @property
    def output_watermark(self) -> int | None:
        """The oldest buffered row: a match still to come ends at or after it."""
        held = [ks.times[0] for ks in self._keys.values() if ks.times]
        return min(held) if held else None

    # -- matching --------------------------------------------------------------------------
    def _masks(self, batch: pa.RecordBatch) -> list[int]:
        n = batch.num_rows
        if not any(e.mask is not None for e in self.els):
            return [self.all_bits] * n
        acc = np.zeros(n, dtype=np.int64)
        for j, e in enumerate(self.els):
            if e.mask is None:
                acc |= 1 << j
                continue
            try:
                m = e.mask(batch)
                m = np.asarray(m.to_numpy(zero_copy_only=False) if hasattr(m, "to_numpy")
                               else m, dtype=bool)
            except Exception as exc:
                raise NodeFailure(self.cfg.node, f"pattern variable {e.name!r} mask",
                                  self._batches, exc) from exc
            if m.shape != (n,):
                raise NodeFailure(self.cfg.node, f"pattern variable {e.name!r} mask",
                                  self._batches, ValueError(
                                      f"returned {m.shape[0] if m.ndim else 'a scalar'} values "
                                      f"for {n} rows"))
            acc |= m.astype(np.int64) << j
        return acc.tolist()

    def _advance(self, key, ks: _Key, at_end: bool) -> None:
        """Run attempts on ``ks`` until one needs a row that has not arrived."""
        while True:
            att = ks.att
            if att is None:
                if ks.done or ks.next >= ks.base + len(ks.rows):
                    break
                if self.cfg.pattern.anchored and ks.next > 0:
                    ks.done = True
                    break
                att = ks.att = _Attempt(ks.next, ks.times[ks.next - ks.base], self.n)
            try:
                res = self._run(key, ks, att, at_end)
            except EpicError:
                raise
            except Exception as exc:
                e = self.els[min(att.j, self.n - 1)]
                raise NodeFailure(self.cfg.node, f"pattern variable {e.name!r} condition",
                                  self._batches, exc) from exc
            if res == _NEED:
                break
            if res == _MATCH:
                self._emit(key, ks, att)
                ks.next = att.i
            else:
                ks.next = att.s + 1
            ks.att = None
            if self.cfg.pattern.anchored:
                ks.done = True
            self._trim(ks)
        if ks.done and ks.rows:
            ks.base += len(ks.rows)
            ks.rows, ks.times, ks.bits, ks.pos = [], [], [], []

    def _run(self, key, ks: _Key, att: _Attempt, at_end: bool) -> int:
        els, n = self.els, self.n
        deadline = None if self.within is None else att.t0 + self.within
        while True:
            j = att.j
            e = els[j]
            i = att.i
            k = i - ks.base
            if k >= len(ks.rows):
                over = at_end or (deadline is not None and self._wm is not None
                                  and self._wm > deadline)
                if not over:
                    return _NEED
                if att.run is not None:      # a star in progress: no row can extend it
                    if at_end and self.linear and self.local[j]:
                        self._record_run(ks, j, att.run.start, i)   # no row will ever come
                    if not self._complete(key, ks, att):
                        return _FAIL
                    if att.j == n:
                        return _MATCH
                    continue
                return _FAIL
            row = ks.rows[k]
            inside = deadline is None or ks.times[k] <= deadline
            if not e.star:
                if not (inside and self._holds(key, ks, att, j, i, None)):
                    return _FAIL
                att.binds[j] = row
                att.i += 1
                att.j += 1
                if att.j == n:
                    return _MATCH
                continue
            run = att.run
            if run is None:
                if not (inside and self._holds(key, ks, att, j, i, None)):
                    return _FAIL
                att.i += 1
                if self.linear and self.local[j]:
                    self._jump(ks, att, j, i, deadline)
                continue
            if inside and self._holds(key, ks, att, j, i, run.last):
                att.i += 1
                continue
            if self.linear and self.local[j] and inside:
                self._record_run(ks, j, run.start, i)
            if not self._complete(key, ks, att):
                return _FAIL
            if att.j == n:
                return _MATCH

    def _holds(self, key, ks: _Key, att: _Attempt, j: int, i: int, prev) -> bool:
        """Does row ``i`` satisfy element ``j`` (extending ``att.run`` for a star)?"""
        k = i - ks.base
        if not (ks.bits[k] >> j) & 1:
            return False
        e = self.els[j]
        row = ks.rows[k]
        ar = self.arity[j]
        if ar <= 2:
            if ar:
                phase = 0 if ar == 1 else (1 if prev is None else 2)
                memo = ks.memo[j][phase] if self.linear else None
                ok = memo.get(i) if memo is not None else None
                if ok is None:
                    self.evaluations += 1
                    ok = bool(e.where(row) if ar == 1 else e.where(row, prev))
                    if memo is not None:
                        memo[i] = ok
                if not ok:
                    return False
            if e.star:
                self._extend(ks, att, j, i, row, commit=True)
            return True
        # dependent: the match so far, with a star's tentative extension
        if e.star:
            tentative = self._extend(ks, att, j, i, row, commit=False)
            vals = self._values(att, j, tentative)
        else:
            vals = self._values(att, j, None)
        self.evaluations += 1
        ok = bool(e.where(row, prev, Match(key, att.t0, vals)))
        if ok and e.star:
            att.run = tentative
        return ok

    def _extend(self, ks, att, j, i, row, *, commit: bool) -> _Run:
        """``att.run`` with ``row`` added: in place (commit) or as a new tentative run whose
        aggregate results are current (continuous aggregates for a dependent condition)."""
        e = self.els[j]
        run = att.run
        aggs = e.aggregates
        if run is None:
            states = [a.aggregate.init() for a in aggs]
            new = _Run(i, 0, row, row, states, None)
        elif commit:
            new = run
        else:
            # Aggregate add may update a state in place; the rejected-row case only needs the
            # results from before, which run.results keeps.
            new = _Run(run.start, run.count, run.first, run.last, run.states, run.results)
        new.count += 1
        new.last = row
        if aggs:
            new.states = [a.aggregate.add(s, _element(a, row, self.cfg.time))
                          for a, s in zip(aggs, new.states)]
            new.results = ([a.aggregate.result(s) for a, s in zip(aggs, new.states)]
                           if not commit else None)
        if commit:
            att.run = new
        return new

    def _values(self, att: _Attempt, upto: int, tentative: _Run | None) -> dict:
        vals = {}
        for jj in range(upto):
            b = att.binds[jj]
            vals[self.els[jj].name] = self._star_value(jj, b) if isinstance(b, _Run) else b
        if tentative is not None:
            vals[self.els[upto].name] = self._star_value(upto, tentative)
        return vals

    def _star_value(self, j: int, run: _Run) -> StarValue:
        aggs = self.els[j].aggregates
        if aggs and run.results is None:
            run.results = [a.aggregate.result(s) for a, s in zip(aggs, run.states)]
        return StarValue(run.count, run.first, run.last,
                         {a.name: v for a, v in zip(aggs, run.results or ())})

    def _complete(self, key, ks: _Key, att: _Attempt) -> bool:
        """The star at ``att.j`` is complete: finalise it and test ``having``."""
        j = att.j
        run = att.run
        e = self.els[j]
        if e.aggregates and run.results is None:
            run.results = [a.aggregate.result(s) for a, s in zip(e.aggregates, run.states)]
        run.states = None
        att.binds[j] = run
        att.run = None
        if e.having is not None:
            self.evaluations += 1
            if not e.having(Match(key, att.t0, self._values(att, j + 1, None))):
                return False
        att.j += 1
        return True

    # -- the linear matcher's shared work --------------------------------------------------
    def _record_run(self, ks: _Key, j: int, r: int, e: int) -> None:
        """Rows (r, e) satisfy star ``j``'s continuation and row ``e`` does not."""
        runs = ks.runs[j]
        pos = bisect.bisect_right(runs, [r, float("inf")])
        if pos and runs[pos - 1][0] <= r < runs[pos - 1][1]:
            return  # known: every run through r ends at the same row
        runs.insert(pos, [r, e])

    def _jump(self, ks: _Key, att: _Attempt, j: int, p: int, deadline) -> None:
        """Star ``j`` started at row ``p``: if a run through ``p`` is known, take it whole."""
        runs = ks.runs[j]
        pos = bisect.bisect_right(runs, [p, float("inf")])
        if not pos or runs[pos - 1][1] <= p:
            return
        end = runs[pos - 1][1]
        if deadline is not None:
            end = min(end, ks.base + bisect.bisect_right(ks.times, deadline))
        if end <= p + 1:
            return
        run = att.run
        e = self.els[j]
        run.count = end - p
        run.last = ks.rows[end - 1 - ks.base]
        if e.aggregates:
            run.results = self._suffix(ks, j, p, end)
            run.states = None
        att.i = end

    def _suffix(self, ks: _Key, j: int, p: int, end: int) -> list:
        """Aggregate results over rows [p, end), sharing one backward pass per run end."""
        aggs = self.els[j].aggregates
        t = self.cfg.time
        if not self.merge_ok[j]:      # no merge: add the rows (O(run) for this attempt)
            states = [a.aggregate.init() for a in aggs]
            for k in range(p - ks.base, end - ks.base):
                row = ks.rows[k]
                states = [a.aggregate.add(s, _element(a, row, t)) for a, s in zip(aggs, states)]
            return [a.aggregate.result(s) for a, s in zip(aggs, states)]
        cache = ks.suffix[j].get(end)
        if cache is None:
            cache = ks.suffix[j][end] = [end, [a.aggregate.init() for a in aggs], []]
        lo, acc, res = cache
        while lo > p:
            lo -= 1
            row = ks.rows[lo - ks.base]
            acc = [a.aggregate.merge(a.aggregate.add(a.aggregate.init(),
                                                     _element(a, row, t)), s)
                   for a, s in zip(aggs, acc)]
            res.append([a.aggregate.result(s) for a, s in zip(aggs, acc)])
        cache[0], cache[1] = lo, acc
        return res[end - 1 - p]

    def _trim(self, ks: _Key) -> None:
        keep = ks.att.s if ks.att is not None else ks.next
        drop = min(keep - ks.base, len(ks.rows))
        if drop <= 0:
            return
        del ks.rows[:drop], ks.times[:drop], ks.bits[:drop], ks.pos[:drop]
        ks.base += drop
        base = ks.base
        if self.linear and base - ks.pruned > max(1024, 2 * len(ks.rows)):
            # caches: forget rows no attempt can reach (amortised O(1) per row)
            ks.pruned = base
            for j in range(self.n):
                ks.memo[j] = tuple({i: v for i, v in d.items() if i >= base} for d in ks.memo[j])
                ks.runs[j] = [r for r in ks.runs[j] if r[1] > base]
                ks.suffix[j] = {e: c for e, c in ks.suffix[j].items() if e > base}

    def _emit(self, key, ks: _Key, att: _Attempt) -> None:
        kc = self.cfg.key
        out: dict[str, Any] = {}
        if len(kc) == 1:
            out[kc[0]] = key
        elif kc:
            out.update(zip(kc, key))
        out["match_start"] = att.t0
        out["match_end"] = ks.times[att.i - 1 - ks.base]
        last = ks.pos[att.i - 1 - ks.base]
        if self.cfg.select:
            m = Match(key, att.t0, self._values(att, self.n, None))
            for name, getter in self.cfg.select:
                try:
                    out[name] = getter(m)
                except Exception as exc:
                    raise NodeFailure(self.cfg.node, f"pattern select {name!r}", self._batches,
                                      exc) from exc
        self._out.append((last, out))

    def _flush(self, final: bool) -> list[pa.RecordBatch]:
        """Queue this call's matches and send the queued ones no later match can precede:
        ``match_end`` at or before the input watermark (a row still to come is on time, so no
        older, and comes later in the input) and below every key's oldest buffered row (an
        attempt in progress), all at the end; ordered by ``match_end``, then by the position of
        the match's last row in the node's input. Keys' matches are recognised key by key, and an
        attempt in progress may end before another key's match: sent as recognised, a
        downstream window would find rows late, and which ones would depend on the batch
        cuts."""
        if self._out:
            pending, self._out = self._out, []
            try:
                b = pa.Table.from_pylist([r for _, r in pending], schema=self.output_schema)
            except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError) as exc:
                raise NodeFailure(self.cfg.node, "pattern select", self._batches, ValueError(
                    f"selected values do not fit the output schema {self.output_schema}: {exc}")
                ) from exc
            b = b.append_column("__pos", pa.array([p for p, _ in pending], pa.int64()))
            self._queue = b if self._queue is None else pa.concat_tables([self._queue, b])
        q = self._queue
        if q is None or q.num_rows == 0:
            return []
        ends = q.column("match_end").to_numpy()
        if final:
            ready = np.ones(len(ends), bool)
        elif self._wm is None:   # no watermark yet: any key's next row may be older
            return []
        else:
            # A row still to come is on time (at or after the input watermark) and comes later
            # in the input (a later position: ties at the watermark sort after); an attempt in
            # progress may end at its oldest buffered row, its last row possibly earlier.
            ready = ends <= self._wm
            held = self.output_watermark
            if held is not None:
                ready &= ends < held
            if not ready.any():
                return []
        idx = np.flatnonzero(ready)
        order = idx[np.lexsort((q.column("__pos").to_numpy()[idx], ends[idx]))]
        send = q.take(pa.array(order)).drop_columns(["__pos"]).combine_chunks()
        rest = np.flatnonzero(~ready)
        self._queue = q.take(pa.array(rest)) if len(rest) else None
        return send.to_batches()

    # -- state -----------------------------------------------------------------------------
    def snapshot(self) -> bytes:
        keys = []
        for k, ks in self._keys.items():
            keys.append([list(k) if isinstance(k, tuple) else k,
                         [ks.rows, ks.times, ks.bits, ks.base, ks.last, ks.next, ks.done,
                          None if ks.att is None else ks.att.dump(), ks.pos]])
        queued = None
        if self._queue is not None and self._queue.num_rows:
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, self._queue.schema) as w:
                w.write_table(self._queue)
            queued = sink.getvalue().to_pybytes()
        return serde.packb({"format": "epic.pattern/1", "watermark": self._wm, "keys": keys,
                            "dropped": self.dropped_rows, "queued": queued,
                            "rows_in": self._rows_in})

    def restore(self, data: bytes) -> None:
        st = serde.unpackb(data)
        if not isinstance(st, dict) or st.get("format") != "epic.pattern/1":
            raise StateError(f"node {self.cfg.node!r}: not a pattern snapshot (epic.pattern/1)")
        self._wm = st["watermark"]
        self.dropped_rows = st["dropped"]
        queued = st.get("queued")   # absent in snapshots of epic before the output queue
        self._queue = None if queued is None else pa.ipc.open_stream(queued).read_all()
        self._rows_in = int(st.get("rows_in", 0))
        self._keys = {}
        for k, (rows, times, bits, base, last, nxt, done, att, *pos) in st["keys"]:
            ks = _Key(self.n)
            ks.rows, ks.times, ks.bits = rows, times, bits
            # (snapshots before the output queue have no positions: ties then by key order)
            ks.pos = list(pos[0]) if pos else [0] * len(rows)
            ks.base, ks.last, ks.next, ks.done = base, last, nxt, done
            if att is not None:
                a = _Attempt(att[0], att[1], self.n)
                a.j, a.i = att[2], att[3]
                a.binds = [_Run(*b) if isinstance(b, list) else b for b in att[4]]
                a.run = None if att[5] is None else _Run(*att[5])
                ks.att = a
            self._keys[tuple(k) if isinstance(k, list) else k] = ks


def _element(spec: AggSpec, row: dict, time: str):
    cols = spec.columns
    if not cols:
        return row[time]
    if len(cols) == 1:
        return row[cols[0]]
    return tuple(row[c] for c in cols)
