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

from .aggregates import Aggregate
from .errors import SpecError
from .schemas import is_number
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
    "Combine",
    "combine",
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
                    outs.append(as_batch(p(pa.RecordBatch.from_pylist([], schema=schema))).schema)
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
    keys = (key,) if isinstance(key, str) else tuple(key)
    if not keys or not all(isinstance(k, str) and k for k in keys):
        raise SpecError(f"hash_partition({key!r}): name the key column(s), e.g. "
                        "hash_partition('sid') or hash_partition(['team', 'sid'])")
    return HashPartition(keys)


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
        required = [p for p in params if p is not None and p.default is p.empty]
        if len(required) > 2:
            raise SpecError(f"the distribution query {_fn_name(query)} takes {len(required)} "
                            "parameters; give a function of (i, row) (per output) or of (row) "
                            "(it yields (i, row) pairs)")
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
            ct = schema.field(col).type
            if r == "sum" and not is_number(ct):
                raise SpecError(f"reducer 'sum' for {col!r}: the column is {ct}, and 'sum' adds "
                                f"numbers; use 'first', 'last', 'min', 'max' or a function")
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


def as_batch(x) -> pa.RecordBatch:
    if isinstance(x, pa.RecordBatch):
        return x
    if isinstance(x, pa.Table):
        return x.combine_chunks().to_batches()[0] if x.num_rows else \
            pa.RecordBatch.from_pylist([], schema=x.schema)
    if isinstance(x, Mapping):
        return pa.RecordBatch.from_pydict(dict(x))
    raise TypeError(f"expected a RecordBatch, Table or dict of columns, got {type(x).__name__}")
