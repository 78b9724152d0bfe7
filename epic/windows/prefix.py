"""FEW time windows over *group aggregates*, computed from prefix sums: no Python per emission.

An aggregate whose state is a sum of per-element integer vectors (counts, integer sums, time and
distance per class, ...) can say so with two optional hooks (see :class:`epic.Aggregate`)::

    lift(values)  -> int64 array (n, k): each element's contribution
    lower(sums, counts) -> pyarrow Array: the results of m windows from their (m, k) sums

For such aggregates the window over ``[s, t)`` is ``C(t) - C(s)``, where ``C(x)`` is the running
sum of the contributions of the elements before ``x``. :class:`PrefixWindowOperator` keeps, per
key, the times and running sums of the elements still needed (a window's worth), and computes all
the emission instants a watermark reaches with ``searchsorted`` and one subtraction: the cost per
emitted row is a few numpy element operations instead of a Python call per row and aggregate. The
output is exactly that of :class:`epic.windows.engine.WindowOperator` (same rows, same order, same
batching rules; a property test holds them equal), so :func:`epic.windows.build_window_operator`
picks this engine whenever a time window's aggregates all define ``lift`` and ``lower``.

Each element is lifted once (its "add") and leaves the running sums once, when its time falls
before every window still to be emitted (its "remove"): the cost per element does not grow with the
window length. Integer contributions make ``C(t) - C(s)`` exact however long the stream runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import math
import os

import numpy as np
import pyarrow as pa

from .. import serde
from ..aggregates import AggSpec
from ..errors import SpecError, StateError
from ..operator import ENTRY_COLUMN
from ..schemas import one_array
from ..timecore import EventClock
from .engine import (MAX_BATCH_ROWS, NOT_STARTED, POS_COLUMN, RANK_COLUMN, Clocked, agg_values,
                     group_rows, int_column, value_column)
from .spec import FewTimeWindow, ceil_div, check_columns, key_tuple, window_output_schema

__all__ = ["PrefixWindowOperator", "prefix_eligible"]


def prefix_eligible(spec, aggregates: Sequence[AggSpec]) -> bool:
    """True when ``spec`` is a time window and every aggregate has ``lift`` and ``lower``
    (and panes were not asked for explicitly)."""
    if not isinstance(spec, FewTimeWindow) or getattr(spec, "panes", None) is True:
        return False
    return bool(aggregates) and all(a.aggregate.has_group for a in aggregates)


#: a key's elements are folded into one entry per grid cell (:meth:`_PKey.collapse`) once at
#: least this many wait (fewer: not worth the numpy calls)
COLLAPSE_MIN = 256

#: Entries per frozen segment of a snapshot: a key's entries are numbered from its first one
#: (dropped ones included), and each full run of this many that can no longer change (before
#: ``max(scanned, packed)``: every later element is past them) is stored once as
#: :class:`epic.serde.Frozen` parts; later snapshots refer to it. A deploy's snapshot of a
#: 20-minute window then writes the entries of the last micro-batch, not 20 minutes of them.
#: ``EPIC_SEGMENT_ENTRIES`` sets another size for new state (the tests' deploys use 4); a
#: restored state keeps the size its snapshot was written with.
SEG_ENTRIES = int(os.environ.get("EPIC_SEGMENT_ENTRIES", "4096"))


@dataclass
class _PKey:
    """Prefix state of one key: the elements still needed, with running sums."""

    origin: int
    done: int  # every instant <= done has been emitted (or proved empty)
    first: int  # start of the key's first window (Grid.first_window)
    times: np.ndarray  # [cap] event times, sorted
    cum: np.ndarray  # [cap, K] running sums (including everything dropped before head)
    cnt: np.ndarray  # [cap] running element counts (dropped ones included) of the packed entries
    ent: np.ndarray  # [cap] arrival times (delay logging) or an empty array
    head: int
    n: int
    base: np.ndarray  # [K] sums of the dropped elements
    base_ent: int  # newest arrival time among the dropped elements
    dropped: int  # number of dropped elements
    key_order: int
    with_ent: bool
    #: entries before this index stand for whole grid cells (:meth:`collapse`), with their
    #: counts in ``cnt``; every entry from it on is one element (its count: its position)
    packed: int = 0
    #: entries before this index are known to need no folding (one element per cell)
    scanned: int = 0
    #: entries dropped from the head so far (the number of the entry at ``head``)
    gone: int = 0
    #: the first frozen segment still referred to (entries ``seg0 * SEG_ENTRIES`` on)
    seg0: int = 0
    #: per frozen segment from ``seg0`` on: its stored parts (times, sums[, arrivals]) as
    #: :class:`epic.serde.Frozen` references (no arrays)
    segs: list = field(default_factory=list)

    # storage --------------------------------------------------------------------------
    def _reserve(self, m: int) -> None:
        if self.n + m <= len(self.times):
            return
        live = self.n - self.head
        cap = max(1024, 2 * (live + m))
        times = np.empty(cap, np.int64)
        cum = np.empty((cap, self.cum.shape[1]), np.int64)
        cnt = np.empty(cap, np.int64)
        times[:live] = self.times[self.head:self.n]
        cum[:live] = self.cum[self.head:self.n]
        packed = max(0, self.packed - self.head)
        cnt[:packed] = self.cnt[self.head:self.head + packed]
        if self.with_ent:
            ent = np.empty(cap, np.int64)
            ent[:live] = self.ent[self.head:self.n]
            self.ent = ent
        self.times, self.cum, self.cnt = times, cum, cnt
        self.packed = packed
        self.scanned = max(0, self.scanned - self.head)
        self.head, self.n = 0, live

    def last_sum(self) -> np.ndarray:
        return self.cum[self.n - 1] if self.n > self.head else self.base

    def counts(self, j: np.ndarray) -> np.ndarray:
        """Elements before the ``j``-th live entries (dropped ones included)."""
        p = max(self.packed, self.head)
        if p == self.head:
            # no packed entries: each live entry is one element
            return self.dropped + np.asarray(j, np.int64)
        i = self.head + np.asarray(j, np.int64) - 1   # the last entry counted
        at_p = int(self.cnt[p - 1]) if p > self.head else self.dropped
        out = at_p + (i - p + 1)
        if p > self.head:
            inside = (i >= self.head) & (i < p)
            out = np.where(inside, self.cnt[np.clip(i, self.head, p - 1)], out)
        return np.where(i < self.head, self.dropped, out)

    def count_at(self, j: int) -> int:
        """:meth:`counts` of one ``j``."""
        i = self.head + j - 1
        if i < self.head:
            return self.dropped
        p = max(self.packed, self.head)
        if i < p:
            return int(self.cnt[i])
        return (int(self.cnt[p - 1]) if p > self.head else self.dropped) + (i - p + 1)

    def append(self, t: np.ndarray, lift: np.ndarray, ent: np.ndarray | None) -> None:
        """Add elements (time-sorted); a tail older than the newest stored time is merged in."""
        m = len(t)
        if not m:
            return
        if self.n > self.head and t[0] < self.times[self.n - 1]:
            # out of order within the lateness bound: merge with the stored tail from t[0] on
            view = self.times[self.head:self.n]
            p = self.head + int(view.searchsorted(t[0], side="right"))
            before = self.cum[p - 1] if p > self.head else self.base
            tail_raw = np.diff(self.cum[p:self.n], axis=0, prepend=before[None, :])
            all_t = np.concatenate([self.times[p:self.n], t])
            order = np.argsort(all_t, kind="stable")
            raw = np.concatenate([tail_raw, lift])[order]
            new_ent = (np.concatenate([self.ent[p:self.n], ent])[order]
                       if ent is not None else None)
            self.n = p
            self._write(all_t[order], raw, new_ent, before)
            return
        self._write(t, lift, ent, self.last_sum())

    def _write(self, t, raw, ent, before) -> None:
        m = len(t)
        self._reserve(m)
        a, b = self.n, self.n + m
        self.times[a:b] = t
        np.cumsum(raw, axis=0, out=self.cum[a:b])
        self.cum[a:b] += before
        if ent is not None:
            self.ent[a:b] = ent
        self.n = b

    def drop_before(self, x: int) -> None:
        """Fold the elements with time < x into the base sums."""
        view = self.times[self.head:self.n]
        j = int(view.searchsorted(x, side="left"))
        if j <= 0:
            return
        self.base = self.cum[self.head + j - 1].copy()
        if self.with_ent:
            self.base_ent = max(self.base_ent, int(self.ent[self.head:self.head + j].max()))
        self.dropped = self.count_at(j)
        self.head += j
        self.gone += j
        if self.head == self.n:
            self.head = self.n = self.packed = self.scanned = 0
        else:
            self.packed = max(self.packed, self.head)
            self.scanned = max(self.scanned, self.head)

    def collapse(self, o: int, cell: int, upto: int, least: int = 256) -> None:
        """Keep one entry per grid cell ``[o + i*cell, o + (i+1)*cell)`` for the elements
        before ``upto`` (a cell boundary every window still to come starts or ends at, or after;
        the watermark has passed it, so no element can join those cells any more): the cell's
        last element, its running sums and count, and the newest arrival in the cell.

        Windows start and end on cell boundaries (``cell`` divides the length, the stride and
        the emission frequency), so ``C(x)`` and the counts before any of them read the same
        from the cells as from the elements: the state of a key then holds one entry per cell
        of the window, not one per element. Only when at least ``least`` elements wait."""
        lo = max(self.scanned, self.packed, self.head)
        p = lo + int(self.times[lo:self.n].searchsorted(upto, side="left"))
        if p - lo < least:
            return
        cells = (self.times[lo:p] - o) // cell
        last = np.flatnonzero(np.append(cells[1:] != cells[:-1], True))
        k = len(last)
        if k == p - lo:
            # one element per cell already (a stream no denser than the grid): nothing to
            # fold, and the entries keep their positional counts (none stored)
            self.scanned = p
            return
        if k < p - lo:
            start = max(self.packed, self.head)
            keep = lo + last
            counts = self.counts(keep - self.head + 1)
            if lo > start:   # scanned before, one per cell: their counts become explicit
                self.cnt[start:lo] = self.counts(np.arange(start, lo) - self.head + 1)
            self.times[lo:lo + k] = self.times[keep]
            self.cum[lo:lo + k] = self.cum[keep]
            if self.with_ent:
                starts = np.append(0, last[:-1] + 1)
                self.ent[lo:lo + k] = np.maximum.reduceat(self.ent[lo:p], starts)
            self.cnt[lo:lo + k] = counts
            rest = self.n - p
            if rest:
                self.times[lo + k:lo + k + rest] = self.times[p:self.n].copy()
                self.cum[lo + k:lo + k + rest] = self.cum[p:self.n].copy()
                if self.with_ent:
                    self.ent[lo + k:lo + k + rest] = self.ent[p:self.n].copy()
            self.n = lo + k + rest
        self.packed = self.scanned = lo + k


def _joined(parts: list, out: np.ndarray) -> np.ndarray:
    """``parts`` concatenated into the start of ``out`` (returned whole: the rest is room)."""
    n = sum(len(p) for p in parts)
    np.concatenate(parts, out=out[:n])
    return out


def _segment_array(f) -> np.ndarray:
    """A frozen part read back: its array (inline, or resolved by the deploy's segment source)."""
    if isinstance(f, serde.Frozen):
        if f.array is None:
            raise StateError("the snapshot refers to frozen state segments, and none can be "
                             "read here (restore it inside epic.serde.segments(source=...))")
        return np.asarray(f.array, np.int64)
    return np.asarray(f, np.int64)


class PrefixWindowOperator(Clocked):
    """A FEW time window whose aggregates all have ``lift`` / ``lower`` (see the module doc).

    Same constructor, protocol (``on_batch`` / ``on_watermark`` / ``on_end`` / ``snapshot`` /
    ``restore``) and output as :class:`epic.windows.engine.WindowOperator`.
    """

    def __init__(self, spec: FewTimeWindow, aggregates: Sequence[AggSpec], schema: pa.Schema,
                 time: str, unit: str = "s", key: str | Sequence[str] | None = None):
        if not prefix_eligible(spec, aggregates):
            raise SpecError("PrefixWindowOperator needs a time window whose aggregates all "
                            "define lift and lower")
        self.spec = spec
        self.aggs = list(aggregates)
        self.schema = schema
        self.time = time
        self.unit = unit
        self.keys = key_tuple(key)
        self.grid = spec.resolve(unit)
        self.lateness = spec.lateness_ticks(unit)
        self.fixed_origin = spec.origin
        self.has_entry = ENTRY_COLUMN in schema.names
        check_columns(schema, time, self.keys, self.aggs)
        self.output_schema = window_output_schema(spec, self.aggs, schema, key)
        g = self.grid
        #: every window starts and ends on a multiple of this from the key's origin
        self._cell = math.gcd(*(x for x in (g.L, g.S, g.E) if x is not None))
        #: every window end ``o + L + k*S`` is an emission instant ``o + m*E``
        self._ends_on_grid = (g.E is not None and g.L is not None
                              and g.L % g.E == 0 and g.S % g.E == 0)
        self._widths: list[int] | None = None
        self._key_state: dict[Any, _PKey] = {}
        #: entries per frozen segment of this operator's snapshots (a restore keeps its own)
        self._seg_entries = SEG_ENTRIES
        self.clock = EventClock(self.lateness)
        self._held = None
        self._wm: int | None = None

    # -- public protocol -----------------------------------------------------------------
    ranked = True

    def on_batch(self, batch: pa.RecordBatch, before: np.ndarray | None = None,
                 positions: np.ndarray | None = None) -> list[pa.RecordBatch]:
        batch, _late = self.admit(batch, before, positions)
        if batch is not None:
            self._ingest(batch, int_column(batch, self.time))
        return self._advance_to(self.clock.watermark, final=False)

    count_mode = False

    def _ingest(self, batch: pa.RecordBatch, times: np.ndarray) -> None:
        lift = self._lift(batch, times)
        ent = (batch.column(ENTRY_COLUMN).to_numpy(zero_copy_only=False).astype(np.int64)
               if self.has_entry else None)
        pos = batch.column(POS_COLUMN).to_numpy()
        for key_value, idx in group_rows(batch, self.keys):
            t = times if idx is None else times[idx]
            ks = self._key_state.get(key_value)
            if ks is None:
                # the grid phase: the pinned origin, else the key's first element (arrival order)
                origin = int(self.fixed_origin) if self.fixed_origin is not None else int(t[0])
                ks = self._new_key(origin, int(pos[0] if idx is None else pos[idx].min()))
                self._key_state[key_value] = ks
            first = self.grid.first_window(ks.origin, int(t.min()))
            if first < ks.first:
                ks.first = first
            lk = lift if idx is None else lift[idx]
            ek = None if ent is None else (ent if idx is None else ent[idx])
            if len(t) > 1 and np.any(t[1:] < t[:-1]):
                order = np.argsort(t, kind="stable")
                t, lk = t[order], lk[order]
                ek = None if ek is None else ek[order]
            ks.append(t, lk, ek)

    # -- ingest --------------------------------------------------------------------------
    def _lift(self, batch: pa.RecordBatch, times: np.ndarray) -> np.ndarray:
        parts = []
        cache: dict[str, np.ndarray] = {}
        for a in self.aggs:
            cols = [cache.setdefault(c, value_column(batch, c)) for c in a.columns]
            values = agg_values(cols, list(range(len(cols))), times)
            part = np.asarray(a.aggregate.lift(values))
            if part.ndim == 1:
                part = part[:, None]
            if part.ndim != 2 or part.shape[0] != len(times):
                raise SpecError(f"aggregate {a.name!r}: lift must return an array of shape "
                                f"(n, k) for n={len(times)} elements, got {part.shape}")
            if not np.issubdtype(part.dtype, np.integer):
                raise SpecError(f"aggregate {a.name!r}: lift must return integers (exact "
                                f"running sums), got {part.dtype}")
            parts.append(part.astype(np.int64, copy=False))
        widths = [p.shape[1] for p in parts]
        if self._widths is None:
            self._widths = widths
        elif widths != self._widths:
            raise SpecError(f"lift widths changed between batches: {self._widths} -> {widths}")
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=1)

    def _new_key(self, origin: int, order: int) -> _PKey:
        k = sum(self._widths)
        return _PKey(origin=origin, done=NOT_STARTED, first=origin, times=np.empty(0, np.int64),
                     cum=np.empty((0, k), np.int64), cnt=np.empty(0, np.int64),
                     ent=np.empty(0, np.int64),
                     head=0, n=0, base=np.zeros(k, np.int64), base_ent=0, dropped=0,
                     key_order=order, with_ent=self.has_entry)

    # -- emission ------------------------------------------------------------------------
    def _starts(self, t: np.ndarray, o: int, lo: int) -> np.ndarray:
        g = self.grid
        if g.L is None:
            return np.full(len(t), lo, np.int64)
        k = -((-(t - o - g.L)) // g.S)
        return o + np.maximum(k, (lo - o) // g.S) * g.S

    def _instants(self, o: int, after: int, hi: int, lo: int) -> np.ndarray:
        """Emission instants in ``(after, hi]``: ``o + m*E`` and window ends ``o + k*S + L``."""
        g = self.grid
        parts = []
        if g.E is not None:
            m0 = (after - o) // g.E + 1
            m1 = (hi - o) // g.E
            if m1 >= m0:
                parts.append(o + g.E * np.arange(m0, m1 + 1, dtype=np.int64))
        if g.L is not None:
            k0 = max(ceil_div(after + 1 - o - g.L, g.S), (lo - o) // g.S)
            k1 = (hi - o - g.L) // g.S
            if k1 >= k0:
                parts.append(o + g.L + g.S * np.arange(k0, k1 + 1, dtype=np.int64))
        if not parts:
            return np.empty(0, np.int64)
        if len(parts) == 1 or self._ends_on_grid:
            # window ends on the emission grid (L and S multiples of E): the grid has them all
            return parts[0]
        return np.union1d(parts[0], parts[1])

    def _count_before(self, ks: _PKey, x: int) -> int:
        return ks.count_at(int(ks.times[ks.head:ks.n].searchsorted(x, side="left")))

    def _skip_empty(self, ks: _PKey, limit: int) -> bool:
        """Move ``done`` over instants whose window is provably empty; False: nothing to emit
        up to ``limit``."""
        g = self.grid
        o = ks.origin
        t0 = g.next_instant(o, ks.done, ks.first)
        if t0 > limit:
            return False
        s0 = g.window_start(o, t0, ks.first)
        if self._count_before(ks, t0) - (0 if g.L is None else self._count_before(ks, s0)) > 0:
            return True
        # window at t0 is empty: so is every window up to the next element at or after t0
        view = ks.times[ks.head:ks.n]
        j = int(view.searchsorted(t0, side="left"))
        nxt = int(view[j]) if j < len(view) else None
        if nxt is None or nxt >= limit:
            ks.done = max(ks.done, limit)
            return False
        ks.done = max(ks.done, nxt)
        return g.next_instant(o, ks.done, ks.first) <= limit

    def _evict(self, ks: _PKey) -> None:
        g = self.grid
        if g.L is None:
            ks.drop_before(ks.done)  # C(t) for t > done only needs the sum before done
        else:
            nxt = g.next_instant(ks.origin, ks.done, ks.first)
            ks.drop_before(g.window_start(ks.origin, nxt, ks.first))
        if ks.done > NOT_STARTED:
            # every element before done's cell is in: one entry per cell is enough
            o, c = ks.origin, self._cell
            ks.collapse(o, c, o + ((ks.done - o) // c) * c, COLLAPSE_MIN)

    def _emit_all(self, final: bool) -> list[pa.RecordBatch]:
        wm = self._wm
        if wm is None or not self._key_state:
            return []
        g = self.grid
        limits = {kv: (g.next_instant(ks.origin, wm - 1, ks.first) if final else wm)
                  for kv, ks in self._key_state.items()}
        step = min(x for x in (g.E, g.S) if x is not None)
        out: list[pa.RecordBatch] = []
        pending: list = []
        active = list(self._key_state.items())
        while True:
            active = [(kv, ks) for kv, ks in active if self._skip_empty(ks, limits[kv])]
            if not active:
                break
            start = min(g.next_instant(ks.origin, ks.done, ks.first) for _, ks in active)
            horizon = start + step * max(1, MAX_BATCH_ROWS // (2 * len(active))) - 1
            piece = self._pieces([(kv, ks, min(limits[kv], horizon)) for kv, ks in active])
            for _, ks in active:
                self._evict(ks)
            if piece is not None:
                pending.append(piece)
            if sum(len(p[2][0]) for p in pending) >= MAX_BATCH_ROWS:
                out += self._to_batches(pending)
                pending = []
        out += self._to_batches(pending)
        return out

    def _pieces(self, work: list):
        """The rows of each key's instants in ``(done, hi]``, ``work`` = ``[(key value,
        state, hi)]``: the per-key steps are the searches into each key's own arrays; what
        follows runs once over all keys' rows. Returns None or ``(key values, (each row's
        index into them, each row's key rank), arrays)``."""
        g = self.grid
        inst: dict = {}
        Ts, Ss, cT, cS, sT, sS, ents, kvs, orders = [], [], [], [], [], [], [], [], []
        for kv, ks, hi in work:
            o = ks.origin
            grid_key = (o, ks.done, hi, ks.first)   # keys in step share their instants
            got = inst.get(grid_key)
            if got is None:
                T = self._instants(o, ks.done, hi, ks.first)
                got = inst[grid_key] = (T, None if g.L is None else self._starts(T, o, ks.first))
            ks.done = max(ks.done, hi)
            T, S = got
            if not len(T):
                continue
            view = ks.times[ks.head:ks.n]
            jT = view.searchsorted(T, side="left")
            Ts.append(T)
            cT.append(ks.counts(jT))
            sT.append(self._sums_before(ks, view, jT, len(T)))
            if g.L is not None:
                Ss.append(S)
                jS = view.searchsorted(S, side="left")
                cS.append(ks.counts(jS))
                sS.append(self._sums_before(ks, view, jS, len(T)))
            if self.has_entry:
                if len(view):
                    run = np.maximum.accumulate(ks.ent[ks.head:ks.n])
                    entry = np.where(jT > 0, run[np.maximum(jT - 1, 0)], ks.base_ent)
                    ents.append(np.maximum(entry, ks.base_ent))
                else:
                    ents.append(np.full(len(T), ks.base_ent, np.int64))
            kvs.append(kv)
            orders.append(ks.key_order)
        if not kvs:
            return None
        sizes = [len(t) for t in Ts]
        T = np.concatenate(Ts)
        cnt = np.concatenate(cT)
        sums = np.concatenate(sT)
        if g.L is None:
            S = np.repeat(np.array([self._key_state[kv].first for kv in kvs], np.int64), sizes)
            final = np.zeros(len(T), bool)
        else:
            S = np.concatenate(Ss)
            final = T == S + g.L
            cnt = cnt - np.concatenate(cS)
            sums = sums - np.concatenate(sS)
        row_key = np.repeat(np.arange(len(kvs), dtype=np.int64), sizes)
        keep = cnt > 0
        entry = np.concatenate(ents) if self.has_entry else None
        if not keep.all():
            T, S, final, cnt, sums, row_key = (T[keep], S[keep], final[keep], cnt[keep],
                                               sums[keep], row_key[keep])
            if entry is not None:
                entry = entry[keep]
        if not len(T):
            return None
        order = np.asarray(orders, np.int64)[row_key]
        return kvs, (row_key, order), (T, S, final, cnt, sums, entry)

    @staticmethod
    def _sums_before(ks: _PKey, view: np.ndarray, j: np.ndarray, m: int) -> np.ndarray:
        """The running sums before the ``j``-th live entries (the base sums for ``j`` = 0)."""
        if not len(view):
            return np.broadcast_to(ks.base, (m, len(ks.base))).copy()
        cum = ks.cum[ks.head:ks.n]
        return np.where((j > 0)[:, None], cum[np.maximum(j - 1, 0)], ks.base[None, :])

    def _to_batches(self, pieces: list) -> list[pa.RecordBatch]:
        """Output batches of :meth:`_pieces` results, rows by instant, then key rank."""
        if not pieces:
            return []
        kvs = [kv for p in pieces for kv in p[0]]
        offs = np.cumsum([0] + [len(p[0]) for p in pieces[:-1]])
        which = np.concatenate([p[1][0] + off for p, off in zip(pieces, offs)])
        order_key = np.concatenate([p[1][1] for p in pieces])
        T = np.concatenate([p[2][0] for p in pieces])
        order = np.lexsort((order_key, T))
        S = np.concatenate([p[2][1] for p in pieces])[order]
        fin = np.concatenate([p[2][2] for p in pieces])[order]
        cnt = np.concatenate([p[2][3] for p in pieces])[order]
        sums = np.concatenate([p[2][4] for p in pieces])[order]
        which = which[order]
        T = T[order]
        schema = self.output_schema
        arrays: list[pa.Array] = []
        nkeys = len(self.keys)
        if nkeys:
            for j in range(nkeys):
                vals = pa.array([kv if nkeys == 1 else kv[j] for kv in kvs],
                                type=schema.field(j).type)
                arrays.append(vals.take(pa.array(which)))
        arrays += [pa.array(S, pa.int64()), pa.array(T, pa.int64()), pa.array(fin, pa.bool_())]
        off = 0
        base = nkeys + 3
        for i, (a, w) in enumerate(zip(self.aggs, self._widths)):
            res = a.aggregate.lower(sums[:, off:off + w], cnt)
            off += w
            typ = schema.field(base + i).type
            if not isinstance(res, (pa.Array, pa.ChunkedArray)):
                res = pa.array(res, type=typ)
            if isinstance(res, pa.ChunkedArray):
                res = one_array(res)
            if res.type != typ:
                res = res.cast(typ)
            if len(res) != len(T):
                raise SpecError(f"aggregate {a.name!r}: lower returned {len(res)} results for "
                                f"{len(T)} windows")
            arrays.append(res)
        if self.has_entry:
            arrays.append(pa.array(np.concatenate([p[2][5] for p in pieces])[order], pa.int64()))
        batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
        if self.rank_column:
            batch = batch.append_column(RANK_COLUMN, pa.array(order_key[order], pa.int64()))
        return [batch.slice(i, MAX_BATCH_ROWS) for i in range(0, batch.num_rows, MAX_BATCH_ROWS)]

    # -- snapshot --------------------------------------------------------------------------
    def _segments(self, ks: _PKey) -> tuple[int, int, int, list]:
        """Bring ``ks.segs`` up to date for a snapshot: references of segments now wholly
        dropped go, and each full segment that can no longer change and has no reference yet
        becomes new :class:`~epic.serde.Frozen` parts (views of the arrays: ``t`` times, ``c``
        sums, ``e`` arrivals, ``n`` counts when every entry is a folded cell). Returns the
        indexes of the first frozen entry, of the first after the frozen segments and of the
        first whose explicit count no segment holds (``head`` each without segments), and the
        new parts."""
        S = self._seg_entries
        while ks.segs and (ks.seg0 + 1) * S <= ks.gone:
            ks.segs.pop(0)
            ks.seg0 += 1
        if not ks.segs:
            ks.seg0 = -(-ks.gone // S)
        nxt = ks.seg0 + len(ks.segs)
        final = ks.gone + max(ks.scanned, ks.packed, ks.head) - ks.head
        packed = ks.gone + max(ks.packed, ks.head) - ks.head
        new = []
        while (nxt + 1) * S <= final:
            a = ks.head + nxt * S - ks.gone
            part = {"t": serde.Frozen(ks.times[a:a + S]), "c": serde.Frozen(ks.cum[a:a + S])}
            if ks.with_ent:
                part["e"] = serde.Frozen(ks.ent[a:a + S])
            if (nxt + 1) * S <= packed:   # explicit counts (folded cells) all final
                part["n"] = serde.Frozen(ks.cnt[a:a + S])
            new.append(part)
            nxt += 1
        if not (ks.segs or new):
            return ks.head, ks.head, ks.head, new
        # entries before the first segment (it started after the head: a key's first entries
        # were dropped in the middle of a segment before any was frozen) stay inline
        pre = ks.head + max(0, ks.seg0 * S - ks.gone)
        # the explicit counts from the first entry no frozen segment holds the count of
        counted = ks.head
        if pre == ks.head:
            i = 0
            for part in ks.segs + new:
                if "n" not in part:
                    break
                i += 1
            counted = max(ks.head, ks.head + (ks.seg0 + i) * S - ks.gone)
        return pre, ks.head + nxt * S - ks.gone, counted, new

    def snapshot(self) -> bytes:
        keys = []
        fresh = []
        for kv, ks in self._key_state.items():
            pre, tail, counted, new = self._segments(ks)
            fresh.append((ks, new))
            h = ks.head
            keys.append({
                "key": list(kv) if isinstance(kv, tuple) else kv, "origin": ks.origin,
                # views: pack_state copies them (once, as raw segments when large)
                "done": ks.done, "first": ks.first, "times": ks.times[tail:ks.n],
                "sums": ks.cum[tail:ks.n],
                "counts": ks.cnt[counted:max(counted, ks.packed)],
                "counted": counted - h,
                "entries": ks.ent[tail:ks.n] if ks.with_ent else None,
                "segs": ks.segs + new, "seg0": ks.seg0, "gone": ks.gone,
                "pre": ([ks.times[h:pre], ks.cum[h:pre], ks.ent[h:pre] if ks.with_ent else None]
                        if pre > h else None),
                "scanned": max(0, ks.scanned - ks.head),
                "base": ks.base, "base_entry": ks.base_ent, "dropped": ks.dropped,
                "order": ks.key_order})
        data = serde.pack_state("epic.window.prefix/5", {
            "clock": self.clock.to_state(), "wm": self._wm, "widths": self._widths,
            "keys": keys, "rows": self._stream_rows, "seg_entries": self._seg_entries})
        for ks, new in fresh:
            # stored by a deploy's segment sink: later snapshots refer to them; packed inline
            # (no sink): nothing refers to them, the next snapshot freezes them again
            if new and all(f.ref is not None for part in new for f in part.values()):
                ks.segs.extend([{c: serde.Frozen(None, f.ref) for c, f in part.items()}
                                for part in new])
        return data

    def restore(self, data: bytes) -> None:
        # /4: no frozen segments; /3: one entry per element (no counts stored)
        formats = ("epic.window.prefix/5", "epic.window.prefix/4", "epic.window.prefix/3")
        st = serde.unpackb(data)   # once: a snapshot's arrays are decompressed here
        if not isinstance(st, dict) or st.get("format") not in formats:
            serde.unpack_state(data, formats[0])   # raises the error naming both formats
        del st["format"]
        seg_entries = int(st.get("seg_entries", self._seg_entries))
        if seg_entries < 1:
            raise StateError(f"corrupt prefix window state: {seg_entries} entries per segment")
        self._seg_entries = seg_entries
        self.clock = EventClock.from_state(st["clock"])
        self._wm = st["wm"]
        self._widths = st["widths"]
        self._stream_rows = int(st.get("rows", 0))
        self._key_state = {}
        width = sum(self._widths) if self._widths else 0
        for k in st["keys"]:
            key_value = tuple(k["key"]) if len(self.keys) > 1 else k["key"]
            times = np.asarray(k["times"], np.int64)
            cum = np.asarray(k["sums"], np.int64).reshape(len(times), width)
            ent = k["entries"]
            ent = np.asarray(ent, np.int64) if ent is not None else np.empty(0, np.int64)
            segs = k.get("segs") or []
            gone = int(k.get("gone", 0))
            seg0 = int(k.get("seg0", 0))
            head = 0
            refs = []
            frozen_counts = []
            if segs:
                # the frozen segments, then the tail; the entries of the first segment that
                # were dropped before the snapshot stay before head
                try:
                    parts = [{c: _segment_array(f) for c, f in part.items()} for part in segs]
                    pre = k.get("pre")
                    if pre is not None:
                        parts.insert(0, {"t": pre[0], "c": pre[1], "e": pre[2]})
                    head = max(0, gone - seg0 * seg_entries)
                    parts.append({"t": times, "c": cum, "e": ent})
                    at = 0
                    for part in parts:   # the counts frozen with their segments
                        m = len(part["t"])
                        if "n" in part:
                            frozen_counts.append((at, part["n"]))
                        at += m
                    n = at
                    # room for the next batch's entries: appending to arrays of the exact
                    # size would copy the whole state again (and hold it twice) at the first
                    # append
                    cap = n + n // 4 + 1024
                    times = _joined([p["t"] for p in parts], np.empty(cap, np.int64))
                    cum = _joined([np.asarray(p["c"], np.int64).reshape(-1, width)
                                   for p in parts], np.empty((cap, width), np.int64))
                    if self.has_entry:
                        ent = _joined([p["e"] for p in parts], np.empty(cap, np.int64))
                except (KeyError, TypeError, AttributeError, ValueError) as exc:
                    raise StateError(f"corrupt prefix window state: frozen segments "
                                     f"({type(exc).__name__}: {exc})") from None
                if not 0 <= head <= n:
                    raise StateError("corrupt prefix window state: frozen segments do not "
                                     "cover the live entries")
                if all(isinstance(f, serde.Frozen) for part in segs for f in part.values()):
                    refs = [{c: serde.Frozen(None, f.ref) for c, f in part.items()}
                            for part in segs]
            else:
                n = len(times)
            counts = np.asarray(k.get("counts", []), np.int64)
            counted = head + int(k.get("counted", 0))
            cnt = np.empty(max(len(times), counted + len(counts)), np.int64)
            for at, c in frozen_counts:
                if at + len(c) <= counted:
                    cnt[at:at + len(c)] = c
            cnt[counted:counted + len(counts)] = counts
            # unpacked arrays are fresh and writable: no copies
            self._key_state[key_value] = _PKey(
                origin=k["origin"], done=k["done"], times=times, cum=cum, cnt=cnt,
                packed=counted + len(counts), scanned=head + int(k.get("scanned", 0)),
                ent=ent, head=head, n=n, base=np.asarray(k["base"], np.int64).copy(),
                base_ent=int(k["base_entry"]), dropped=int(k["dropped"]),
                key_order=int(k["order"]), with_ent=self.has_entry, first=int(k["first"]),
                gone=gone, seg0=seg0 if refs else 0, segs=refs)
