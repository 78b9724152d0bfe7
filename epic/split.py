"""``splitstream``: distribution queries, built-in partitioners, and combining parallel replicas.

A distribution query decides, for every incoming tuple, to which of the ``n`` outputs it goes and
in what form: route, filter and transform in one (EPIC's ``splitstream``). Three ways to write it:

* **per output** (EPIC's Listing 1 as it reads): ``query(i, row)`` is asked for each output ``i``
  and returns ``True`` (send the row), a dict (send this tuple instead) or ``False`` / ``None``::

      lambda i, ev: (i == 0 and is_player(ev)) or (i == 1) or (i == 2 and is_player(ev))

* **pairs**: ``query(row)`` returns the ``(i, tuple')`` pairs (:func:`pairs_split`).
* **vectorised** (:func:`vector_split`): ``mask(i, batch)`` returns a boolean mask (or ``True`` /
  ``False`` for all / none) and an optional per-output projection (a list of columns or a
  ``batch -> batch`` function). Identical results, much faster.

Built-ins: :func:`broadcast`, :func:`hash_partition`, :func:`round_robin`. Rows keep their input
order inside every output. :func:`combine` merges the partial results of parallel replicas
(:meth:`epic.Topology.parallel`).
"""

from __future__ import annotations

import inspect
import zlib
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import serde
from .aggregates import Aggregate
from .errors import EpicError, NodeFailure, SpecError, StateError
from .operator import ENTRY_COLUMN

__all__ = [
    "SplitQuery",
    "RowQuery",
    "PairsQuery",
    "VectorQuery",
    "Broadcast",
    "HashPartition",
    "RoundRobin",
    "row_split",
    "pairs_split",
    "vector_split",
    "broadcast",
    "hash_partition",
    "round_robin",
    "as_query",
    "SplitOperator",
    "Combine",
    "combine",
    "CombineOperator",
    "stable_hash",
]


class SplitQuery:
    """Base of distribution queries (frozen configs)."""

    def output_schemas(self, schema: pa.Schema, n: int) -> list[pa.Schema]:
        """Output schemas when the node does not declare them: the input schema."""
        return [schema] * n

    def check(self, schema: pa.Schema, n: int, outs: Sequence[pa.Schema]) -> None:
        """Raise :class:`SpecError` if the query cannot run on ``schema`` with ``n`` outputs."""

    def describe(self) -> str:
        return type(self).__name__


def _fn_name(fn) -> str:
    return getattr(fn, "__name__", type(fn).__name__)


@dataclass(frozen=True)
class RowQuery(SplitQuery):
    """``query(i, row) -> True | dict | False | None`` asked for each output ``i``."""

    query: Callable[[int, dict], Any]

    def describe(self):
        return f"rows {_fn_name(self.query)}"


@dataclass(frozen=True)
class PairsQuery(SplitQuery):
    """``query(row) -> iterable of (i, tuple')``."""

    query: Callable[[dict], Any]

    def describe(self):
        return f"pairs {_fn_name(self.query)}"


@dataclass(frozen=True)
class VectorQuery(SplitQuery):
    """Per output ``i``: ``mask(i, batch)`` and an optional projection ``project[i]``."""

    mask: Callable[[int, pa.RecordBatch], Any]
    project: tuple | None = None

    def output_schemas(self, schema, n):
        if self.project is None:
            return [schema] * n
        outs = []
        for i in range(n):
            p = self.project[i] if i < len(self.project) else None
            if p is None:
                outs.append(schema)
            elif callable(p):
                try:
                    outs.append(_as_batch(p(pa.RecordBatch.from_pylist([], schema=schema))).schema)
                except Exception as exc:  # noqa: BLE001
                    raise SpecError(f"projection {i} failed on an empty batch ({exc}); pass "
                                    "schemas=[...] to the splitstream") from exc
            else:
                missing = [c for c in p if c not in schema.names]
                if missing:
                    raise SpecError(f"projection {i} names columns {missing} not in the input "
                                    f"({', '.join(schema.names)})")
                outs.append(pa.schema([schema.field(c) for c in p]))
        return outs

    def check(self, schema, n, outs):
        if self.project is not None and len(self.project) != n:
            raise SpecError(f"{len(self.project)} projections for {n} outputs; give one per "
                            "output (None keeps all columns)")

    def describe(self):
        return f"vector {_fn_name(self.mask)}"


@dataclass(frozen=True)
class Broadcast(SplitQuery):
    """Every row to every output."""

    def describe(self):
        return "broadcast"


@dataclass(frozen=True)
class HashPartition(SplitQuery):
    """Row to output ``stable_hash(key) % n``: equal keys always go to the same output."""

    key: tuple[str, ...]

    def check(self, schema, n, outs):
        for k in self.key:
            if k not in schema.names:
                raise SpecError(f"hash key column {k!r} is not in the input "
                                f"({', '.join(schema.names)})")

    def describe(self):
        return f"hash({', '.join(self.key)})"


@dataclass(frozen=True)
class RoundRobin(SplitQuery):
    """Row ``j`` of the stream to output ``j % n`` (the counter is operator state)."""

    def describe(self):
        return "round robin"


def row_split(query: Callable[[int, dict], Any]) -> RowQuery:
    """The per-output form: ``query(i, row)`` returns True, a dict (transformed tuple) or False.

    Example:
        >>> q = row_split(lambda i, ev: (i == 0 and ev["sid"] < 9) or i == 1)
        >>> SplitOperator(q, 2, pa.schema([("sid", pa.int64())]),
        ...     [pa.schema([("sid", pa.int64())])] * 2).split(
        ...     pa.record_batch([[3, 12]], names=["sid"]))[0][0].column(0).to_pylist()
        [3]
    """
    if not callable(query):
        raise SpecError(f"row_split: {query!r} is not a function")
    return RowQuery(query)


def pairs_split(query: Callable[[dict], Any]) -> PairsQuery:
    """The pairs form: ``query(row)`` yields ``(i, tuple')`` pairs (``tuple'`` a dict or True).

    Example:
        >>> q = pairs_split(lambda r: [(0, r), (1, {"sid": -r["sid"]})])
        >>> outs = SplitOperator(q, 2, pa.schema([("sid", pa.int64())]),
        ...     [pa.schema([("sid", pa.int64())])] * 2).split(pa.record_batch([[3]], names=["sid"]))
        >>> [o[0].column(0).to_pylist() for o in outs]
        [[3], [-3]]
    """
    if not callable(query):
        raise SpecError(f"pairs_split: {query!r} is not a function")
    return PairsQuery(query)


def vector_split(mask: Callable[[int, pa.RecordBatch], Any],
                 project: Sequence[Sequence[str] | Callable | None] | None = None) -> VectorQuery:
    """The vectorised form: ``mask(i, batch)`` per output, and optional projections.

    ``mask`` returns a boolean Arrow/numpy array, ``True`` (the whole batch) or ``False`` /
    ``None`` (nothing). ``project[i]`` is a list of columns, a ``batch -> batch`` function or None.

    Example (EPIC Listing 1, vectorised)::

        is_player = lambda b: pc.less(b["sid"], 100)
        epic.vector_split(lambda i, b: is_player(b) if i in (0, 2) else True)
    """
    if not callable(mask):
        raise SpecError(f"vector_split: {mask!r} is not a function")
    return VectorQuery(mask, None if project is None else tuple(
        p if (p is None or callable(p)) else tuple(p) for p in project))


def broadcast() -> Broadcast:
    """Send every row to every output.

    >>> broadcast().describe()
    'broadcast'
    """
    return Broadcast()


def hash_partition(key: str | Sequence[str]) -> HashPartition:
    """Partition by a stable hash of the key column(s), the same in every process.

    >>> hash_partition("sid").key
    ('sid',)
    """
    return HashPartition((key,) if isinstance(key, str) else tuple(key))


def round_robin() -> RoundRobin:
    """Deal rows to the outputs in turn.

    >>> round_robin().describe()
    'round robin'
    """
    return RoundRobin()


def as_query(query) -> SplitQuery:
    """A :class:`SplitQuery` from a query or a function (2 parameters: per-output, 1: pairs)."""
    if isinstance(query, SplitQuery):
        return query
    if callable(query):
        try:
            params = [p for p in inspect.signature(query).parameters.values()
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        except (TypeError, ValueError):
            params = [None, None]
        if len(params) >= 2:
            return RowQuery(query)
        if len(params) == 1:
            return PairsQuery(query)
    raise SpecError(f"{query!r} is not a distribution query")


# --------------------------------------------------------------------------------------------
# Hashing


_MASK64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser over uint64 (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        x = x.astype(np.uint64, copy=True)
        x ^= x >> np.uint64(30)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(27)
        x *= np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
    return x


def _hash_column(col: pa.Array) -> np.ndarray:
    if pa.types.is_integer(col.type) or pa.types.is_boolean(col.type):
        vals = col.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False)
        return _mix64(vals.view(np.uint64) if vals.dtype == np.int64 else vals.astype(np.uint64))
    enc = pc.dictionary_encode(col)
    codes = enc.indices.fill_null(len(enc.dictionary)).to_numpy(zero_copy_only=False)
    words = [zlib.crc32(str(v).encode()) for v in enc.dictionary.to_pylist()] + [0]
    return _mix64(np.asarray(words, dtype=np.uint64)[codes])


def stable_hash(batch: pa.RecordBatch, key: Sequence[str]) -> np.ndarray:
    """A uint64 hash per row of the key columns, equal in every process and run.

    >>> stable_hash(pa.record_batch([[1, 1]], names=["k"]), ["k"]).tolist()[0] == \\
    ...     stable_hash(pa.record_batch([[1]], names=["k"]), ["k"]).tolist()[0]
    True
    """
    h = np.zeros(batch.num_rows, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for k in key:
            h = _mix64(h * np.uint64(31) + _hash_column(batch.column(k)))
    return h


# --------------------------------------------------------------------------------------------
# The operator


def _as_batch(x) -> pa.RecordBatch:
    if isinstance(x, pa.RecordBatch):
        return x
    if isinstance(x, pa.Table):
        return x.combine_chunks().to_batches()[0] if x.num_rows else \
            pa.RecordBatch.from_pylist([], schema=x.schema)
    if isinstance(x, Mapping):
        return pa.RecordBatch.from_pydict(dict(x))
    raise TypeError(f"expected a RecordBatch, Table or dict of columns, got {type(x).__name__}")


class SplitOperator:
    """Runtime logic of a ``splitstream`` node: one input, ``n`` outputs.

    :meth:`split` returns, per output port, a list of batches (rows in input order). The
    ``_entry`` column travels with each row. The state is the round-robin position only.
    """

    def __init__(self, query: SplitQuery, n: int, input_schema: pa.Schema,
                 output_schemas: Sequence[pa.Schema], *, node: str = "split"):
        self.query = as_query(query)
        self.n = n
        self.input_schema = input_schema
        self.output_schemas = list(output_schemas)
        self.node = node
        self.entry = ENTRY_COLUMN in input_schema.names
        self._position = 0
        self._batches = 0

    # the fan-out contract --------------------------------------------------------------------
    def split(self, batch: pa.RecordBatch) -> list[list[pa.RecordBatch]]:
        """Route one batch: ``result[i]`` holds the batches for output ``i``."""
        self._batches += 1
        if batch.num_rows == 0:
            return [[] for _ in range(self.n)]
        q = self.query
        try:
            if isinstance(q, (RowQuery, PairsQuery)):
                return self._split_rows(batch)
            if isinstance(q, Broadcast):
                return [[self._conform(i, batch)] for i in range(self.n)]
            if isinstance(q, HashPartition):
                target = (stable_hash(batch, q.key) % np.uint64(self.n)).astype(np.int64)
                return self._by_target(batch, target)
            if isinstance(q, RoundRobin):
                target = (np.arange(batch.num_rows, dtype=np.int64) + self._position) % self.n
                self._position = (self._position + batch.num_rows) % self.n
                return self._by_target(batch, target)
            if isinstance(q, VectorQuery):
                return self._split_vector(batch)
        except EpicError:
            raise
        except Exception as exc:
            raise NodeFailure(self.node, q.describe(), self._batches, exc) from exc
        raise SpecError(f"unknown query {q!r}")

    def on_watermark(self, watermark: int) -> list[list[pa.RecordBatch]]:
        return [[] for _ in range(self.n)]

    def on_end(self) -> list[list[pa.RecordBatch]]:
        return [[] for _ in range(self.n)]

    def snapshot(self) -> bytes:
        return serde.packb({"format": "epic.split/1", "position": self._position})

    def restore(self, data: bytes) -> None:
        st = serde.unpackb(data)
        if not isinstance(st, dict) or st.get("format") != "epic.split/1":
            raise StateError("not a splitstream snapshot (format epic.split/1)")
        self._position = st["position"]

    # helpers ---------------------------------------------------------------------------------
    def _by_target(self, batch, target: np.ndarray):
        out = []
        for i in range(self.n):
            idx = np.flatnonzero(target == i)
            out.append([self._conform(i, batch.take(pa.array(idx)))] if len(idx) else [])
        return out

    def _conform(self, i: int, b: pa.RecordBatch) -> pa.RecordBatch:
        schema = self.output_schemas[i]
        if b.schema.equals(schema):
            return b
        return pa.RecordBatch.from_arrays(
            [b.column(f.name).cast(f.type) for f in schema], schema=schema)

    def _split_rows(self, batch):
        q = self.query
        cols = [c for c in batch.schema.names if c != ENTRY_COLUMN]
        rows = batch.select(cols).to_pylist()
        entries = batch.column(ENTRY_COLUMN).to_pylist() if self.entry else None
        outs: list[list] = [[] for _ in range(self.n)]
        ents: list[list] = [[] for _ in range(self.n)]
        n = self.n
        if isinstance(q, RowQuery):
            fn = q.query
            for j, r in enumerate(rows):
                for i in range(n):
                    v = fn(i, r)
                    if v is None or v is False:
                        continue
                    outs[i].append(r if v is True else v)
                    if entries is not None:
                        ents[i].append(entries[j])
        else:
            fn = q.query
            for j, r in enumerate(rows):
                for i, v in fn(r) or ():
                    if not 0 <= i < n:
                        raise ValueError(f"output index {i} out of range 0..{n - 1}")
                    if v is None or v is False:
                        continue
                    outs[i].append(r if v is True else v)
                    if entries is not None:
                        ents[i].append(entries[j])
        result = []
        for i in range(n):
            if not outs[i]:
                result.append([])
                continue
            schema = self.output_schemas[i]
            user = schema.remove(schema.get_field_index(ENTRY_COLUMN)) if self.entry else schema
            b = pa.RecordBatch.from_pylist(outs[i], schema=user)
            if self.entry:
                b = b.append_column(ENTRY_COLUMN, pa.array(ents[i], type=pa.int64()))
            result.append([b])
        return result

    def _split_vector(self, batch):
        q = self.query
        result = []
        for i in range(self.n):
            m = q.mask(i, batch)
            if m is None or m is False:
                result.append([])
                continue
            if m is True:
                part = batch
            else:
                if isinstance(m, pa.ChunkedArray):
                    m = m.combine_chunks()
                if not isinstance(m, pa.Array):
                    m = pa.array(np.asarray(m, dtype=bool))
                part = batch.filter(m.fill_null(False))
            if part.num_rows == 0:
                result.append([])
                continue
            p = None if q.project is None else q.project[i]
            if p is not None:
                ent = part.column(ENTRY_COLUMN) if self.entry else None
                part = _as_batch(p(part)) if callable(p) else part.select(list(p))
                if ent is not None and ENTRY_COLUMN not in part.schema.names:
                    part = part.append_column(ENTRY_COLUMN, ent)
            result.append([self._conform(i, part)])
        return result


# --------------------------------------------------------------------------------------------
# Combining partial results of replicas


_REDUCERS: dict[str, Callable[[Any, Any], Any]] = {
    "sum": lambda a, b: a if b is None else (b if a is None else a + b),
    "min": lambda a, b: a if b is None else (b if a is None else (a if a <= b else b)),
    "max": lambda a, b: a if b is None else (b if a is None else (a if a >= b else b)),
    "first": lambda a, b: a,
    "last": lambda a, b: b,
}


@dataclass(frozen=True)
class Combine:
    """Config of a combine node: column -> reducer; rows with equal other columns are merged.

    A reducer is ``"sum"``, ``"min"``, ``"max"``, ``"first"``, ``"last"``, a function
    ``(older, newer) -> value`` or an :class:`~epic.aggregates.Aggregate` with ``merge`` whose
    result is its state (count, min, max).
    """

    reducers: tuple[tuple[str, Any], ...]
    by: tuple[str, ...] | None = None

    def check(self, schema: pa.Schema, time: str) -> None:
        for col, r in self.reducers:
            if col not in schema.names:
                raise SpecError(f"combine column {col!r} is not in the input")
            if isinstance(r, str) and r not in _REDUCERS:
                raise SpecError(f"unknown reducer {r!r} for {col!r}; use one of "
                                f"{', '.join(_REDUCERS)} or a function (a, b) -> c")
            if isinstance(r, Aggregate) and not r.has_merge:
                raise SpecError(f"aggregate {r!r} for {col!r} has no merge hook")
            if not isinstance(r, (str, Aggregate)) and not callable(r):
                raise SpecError(f"reducer for {col!r} must be a name, a function or an Aggregate")
        for c in self.by or ():
            if c not in schema.names:
                raise SpecError(f"combine group column {c!r} is not in the input")

    def group_columns(self, schema: pa.Schema) -> list[str]:
        if self.by is not None:
            return list(self.by)
        reduced = {c for c, _ in self.reducers}
        return [n for n in schema.names if n not in reduced and n != ENTRY_COLUMN]

    def reducer(self, col: str) -> Callable[[Any, Any], Any]:
        r = dict(self.reducers)[col]
        if isinstance(r, str):
            return _REDUCERS[r]
        if isinstance(r, Aggregate):
            return r.merge
        return r

    def describe_items(self):
        return [(c, r if isinstance(r, str) else _fn_name(r)) for c, r in self.reducers]


def combine(*, by: Sequence[str] | None = None, **reducers) -> Combine:
    """Combine the partial results of parallel replicas: ``combine(count="sum", hi="max")``.

    Rows that agree on every other column (or on ``by``) are merged into one, with each named
    column reduced. A group is emitted once the watermark passes its event time, i.e. once every
    replica has reported it.

    Example:
        >>> combine(count="sum", max_v="max").describe_items()
        [('count', 'sum'), ('max_v', 'max')]
    """
    if not reducers:
        raise SpecError("combine needs at least one column=reducer, e.g. combine(count='sum')")
    return Combine(tuple(reducers.items()), None if by is None else tuple(by))


class CombineOperator:
    """Runtime logic of a combine node; groups wait until the watermark passes their time."""

    def __init__(self, spec: Combine, schema: pa.Schema, time: str):
        self.spec = spec
        self.output_schema = schema
        self.time = time
        self.groups_cols = spec.group_columns(schema)
        self.reduced = [c for c, _ in spec.reducers]
        self._fns = [spec.reducer(c) for c in self.reduced]
        self.entry = ENTRY_COLUMN in schema.names
        self._groups: dict[tuple, list] = {}  # key -> [time, order, values, entry]
        self._order = 0
        self._watermark: int | None = None

    def on_batch(self, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        keys = zip(*(batch.column(c).to_pylist() for c in self.groups_cols)) \
            if self.groups_cols else ((),) * batch.num_rows
        vals = list(zip(*(batch.column(c).to_pylist() for c in self.reduced)))
        times = batch.column(self.time).to_pylist()
        ents = batch.column(ENTRY_COLUMN).to_pylist() if self.entry else [0] * batch.num_rows
        for k, v, t, e in zip(keys, vals, times, ents):
            g = self._groups.get(k)
            if g is None:
                self._groups[k] = [t, self._order, list(v), e]
                self._order += 1
            else:
                g[2] = [f(a, b) for f, a, b in zip(self._fns, g[2], v)]
                g[3] = max(g[3], e)
        return []

    def on_watermark(self, watermark: int) -> list[pa.RecordBatch]:
        self._watermark = watermark
        return self._release(lambda t: t < watermark)

    def on_end(self) -> list[pa.RecordBatch]:
        return self._release(lambda t: True)

    def _release(self, ready) -> list[pa.RecordBatch]:
        done = [(g[0], g[1], k) for k, g in self._groups.items() if ready(g[0])]
        if not done:
            return []
        done.sort()
        rows = []
        for _, _, k in done:
            g = self._groups.pop(k)
            row = dict(zip(self.groups_cols, k))
            row.update(zip(self.reduced, g[2]))
            if self.entry:
                row[ENTRY_COLUMN] = g[3]
            rows.append(row)
        return [pa.RecordBatch.from_pylist(rows, schema=self.output_schema)]

    def snapshot(self) -> bytes:
        return serde.packb({"format": "epic.combine/1", "order": self._order,
                            "watermark": self._watermark,
                            "groups": [[list(k), g] for k, g in self._groups.items()]})

    def restore(self, data: bytes) -> None:
        st = serde.unpackb(data)
        if not isinstance(st, dict) or st.get("format") != "epic.combine/1":
            raise StateError("not a combine snapshot (format epic.combine/1)")
        self._order = st["order"]
        self._watermark = st["watermark"]
        self._groups = {tuple(k): g for k, g in st["groups"]}
