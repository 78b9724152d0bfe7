"""Runtime logic of splitstream and combine nodes: :class:`SplitOperator`, :class:`CombineOperator`.

Their specs (distribution queries, :class:`~epic.split.Combine`) are in :mod:`epic.split`.
"""

from __future__ import annotations

import reprlib
from typing import Sequence

import numpy as np
import pyarrow as pa

from .. import serde
from ..errors import EpicError, NodeFailure, SpecError
from ..operator import ENTRY_COLUMN
from ..schemas import fractional_int, one_array
from ..split import (
    as_batch,
    Broadcast,
    Combine,
    HashPartition,
    PairsQuery,
    RoundRobin,
    RowQuery,
    SplitQuery,
    VectorQuery,
    as_query,
    stable_hash,
)

__all__ = ['SplitOperator', 'CombineOperator']


class SplitOperator:
    """Runtime logic of a ``splitstream`` node: one input, ``n`` outputs.

    :meth:`split` returns, per output port, a list of batches (rows in input order). The
    ``_entry`` column travels with each row. The state is the round-robin position only.
    """

    def __init__(self, query: SplitQuery, n: int, input_schema: pa.Schema,
                 output_schemas: Sequence[pa.Schema], *, node: str = "split",
                 times: Sequence[str | None] | None = None):
        self.times = list(times) if times is not None else [None] * n
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
        return serde.pack_state("epic.split/1", {"position": self._position})

    def restore(self, data: bytes) -> None:
        st = serde.unpack_state(data, "epic.split/1")
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
                    if v is not True and not isinstance(v, dict):
                        if not isinstance(v, np.bool_):
                            self._bad_answer(i, v)
                        if not v:
                            continue
                        v = True
                    outs[i].append(r if v is True else v)
                    if entries is not None:
                        ents[i].append(entries[j])
        else:
            fn = q.query
            for j, r in enumerate(rows):
                got = fn(r) or ()
                if isinstance(got, (bool, dict)) or not hasattr(got, "__iter__"):
                    raise NodeFailure.returned(
                        self.node, "distribution query", self._batches,
                        f"node {self.node!r}: the query took one parameter, so it is the pairs "
                        f"form (it yields (i, row) pairs), and it returned {got!r}; yield "
                        "(output, True | dict) pairs, or take (i, row) and return True, False, "
                        "None or a dict for each output i")
                for pair in got:
                    try:
                        i, v = pair
                    except (TypeError, ValueError):
                        raise NodeFailure.returned(
                            self.node, "distribution query", self._batches,
                            f"node {self.node!r}: the pairs query yielded {pair!r}; yield "
                            "(output, True | dict) pairs") from None
                    if isinstance(i, (bool, np.bool_)) or not isinstance(i, (int, np.integer)) \
                            or not 0 <= i < n:
                        raise NodeFailure.returned(
                            self.node, "distribution query", self._batches,
                            f"node {self.node!r}: the pairs query yielded output {i!r}; an "
                            f"output is an integer 0..{n - 1}")
                    i = int(i)
                    if v is None or v is False:
                        continue
                    if v is not True and not isinstance(v, dict):
                        if not isinstance(v, np.bool_):
                            self._bad_answer(i, v, pairs=True)
                        if not v:
                            continue
                        v = True
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
            self._check_tuples(i, outs[i], user, cols)
            bad = fractional_int(outs[i], user)
            if bad is not None:
                raise NodeFailure.returned(
                    self.node, "distribution query", self._batches,
                    f"node {self.node!r}: output {i}: a returned tuple holds {bad[2]!r} for the "
                    f"integer column {bad[1]!r} (input batch {self._batches}); round it, or "
                    "declare the column as a float with splitstream(..., schemas=[...])")
            b = pa.RecordBatch.from_pylist(outs[i], schema=user)
            self._check_time(i, b, "{n} tuple(s) with a null event time {t!r}",
                             "return it in every tuple, or True to send the row unchanged")
            if self.entry:
                b = b.append_column(ENTRY_COLUMN, pa.array(ents[i], type=pa.int64()))
            result.append([b])
        return result

    def _check_time(self, i: int, b: pa.RecordBatch, what: str, fix: str) -> None:
        """Output ``i``'s batch ``b`` has an event time in every row, or the run stops naming
        the node, the output, ``what`` (formatted with ``n`` rows and the time column ``t``)
        and the ``fix``."""
        t = self.times[i]
        if t is not None and b.column(t).null_count:
            raise NodeFailure.returned(
                self.node, "distribution query", self._batches,
                f"node {self.node!r}: output {i}: "
                f"{what.format(n=b.column(t).null_count, t=t)} (input batch {self._batches}); "
                f"{fix}")

    def _bad_answer(self, i: int, v, pairs: bool = False) -> None:
        if pairs:
            raise NodeFailure.returned(
                self.node, "distribution query", self._batches,
                f"node {self.node!r}: the pairs query yielded ({i}, {v!r}) ({type(v).__name__}); "
                "pair an output with True (send the row) or a dict (send this tuple); False / "
                "None send nothing")
        raise NodeFailure.returned(
            self.node, "distribution query", self._batches,
            f"node {self.node!r}: the query returned {v!r} ({type(v).__name__}) for output {i}; "
            "return True (send the row), a dict (send this tuple), or False / None; wrap an "
            "`and` / `or` expression in bool(...)")

    def _check_tuples(self, i: int, rows: list, schema: pa.Schema, inputs: list) -> None:
        """A tuple sent to output ``i`` has exactly the output's columns (None for a null): a
        missing one would silently become a column of nulls. (One comparison of key views per
        row; the message is built only for a row that fails it.)"""
        names = schema.names
        want = dict.fromkeys(names).keys()
        for r in rows:
            if r.keys() == want:
                continue
            cols = ", ".join(names)
            if r.keys() == dict.fromkeys(inputs).keys():
                raise NodeFailure.returned(
                    self.node, "distribution query", self._batches,
                    f"node {self.node!r}: output {i} declares the columns {cols}, but the query "
                    f"sent it a row unchanged (True), which has the input's columns "
                    f"{', '.join(inputs)} (input batch {self._batches}); return a tuple with the "
                    "declared columns instead")
            missing = [n for n in names if n not in r]
            extra = [k for k in r if k not in want]
            what = []
            if missing:
                what.append(f"lacks {', '.join(map(repr, missing))}")
            if extra:
                what.append(f"has {', '.join(map(repr, extra))} not in the output")
            raise NodeFailure.returned(
                self.node, "distribution query", self._batches,
                f"node {self.node!r}: output {i}: a returned tuple {' and '.join(what)} (the "
                f"output's columns: {cols}; input batch {self._batches}); return every column "
                "(None for a null), declare the output's columns with splitstream(..., "
                "schemas=[...]), or return True to send the row unchanged")

    def _split_vector(self, batch):
        q = self.query
        masks = [self._vector_mask(i, q.mask(i, batch), batch.num_rows) for i in range(self.n)]
        # Outputs with the same numpy mask share one filtered batch (DEBS: Q1 and Q3 both take
        # the players' rows; comparing masks costs a fraction of filtering every column), and
        # it holds only the columns their projections keep (DEBS: 5 of the game's 14).
        groups: list[tuple[np.ndarray, list[int]]] = []
        group_of: dict[int, int] = {}
        for i, m in enumerate(masks):
            if isinstance(m, np.ndarray) and m.dtype == np.bool_:
                g = next((k for k, (key, _) in enumerate(groups)
                          if key is m or np.array_equal(key, m)), None)
                if g is None:
                    g = len(groups)
                    groups.append((m, []))
                groups[g][1].append(i)
                group_of[i] = g
        filtered: dict[int, pa.RecordBatch] = {}
        result = []
        for i, m in enumerate(masks):
            if m is None:
                result.append([])
                continue
            if m is True:
                part = batch
            elif i in group_of:
                g = group_of[i]
                part = filtered.get(g)
                if part is None:
                    part = filtered[g] = self._filter(batch, groups[g][0], groups[g][1])
            else:
                part = batch.filter(m.fill_null(False) if m.null_count else m)
            if part.num_rows == 0:
                result.append([])
                continue
            p = None if q.project is None else q.project[i]
            if p is not None:
                ent = part.column(ENTRY_COLUMN) if self.entry else None
                part = as_batch(p(part)) if callable(p) else part.select(list(p))
                if ent is not None and ENTRY_COLUMN not in part.schema.names:
                    part = part.append_column(ENTRY_COLUMN, ent)
            part = self._conform(i, part)
            self._check_time(i, part, "the projection left {n} row(s) with a null event time "
                             "{t!r}", "keep the time in every row, or filter such rows")
            result.append([part])
        return result

    def _vector_mask(self, i: int, m, rows: int):
        """The vectorised query's answer for output ``i`` as None (no row), True (every row),
        a numpy bool array or a pyarrow boolean array of ``rows`` values (nulls: not sent);
        anything else stops the run naming the value and the fix, as the row form does."""
        if m is True or m is None or m is False or isinstance(m, np.bool_):
            return True if m else None
        if isinstance(m, (list, tuple)) and all(isinstance(x, (bool, np.bool_)) for x in m):
            m = np.asarray(m, dtype=bool)
        elif not isinstance(m, (np.ndarray, pa.Array, pa.ChunkedArray)) \
                and "bool" in str(getattr(m, "dtype", "")).lower():
            # a pandas boolean Series (bool, "boolean" with NA: not sent, bool[pyarrow])
            try:
                m = pa.array(m)
            except (pa.ArrowException, TypeError, ValueError):
                pass
        if isinstance(m, pa.ChunkedArray):
            m = one_array(m)
        ok = ((isinstance(m, np.ndarray) and m.dtype == np.bool_ and m.ndim == 1)
              or (isinstance(m, pa.Array) and pa.types.is_boolean(m.type)))
        if not ok:
            what = (f"an array of {m.dtype}" if isinstance(m, np.ndarray)
                    else f"an array of {m.type}" if isinstance(m, pa.Array)
                    else f"a {type(m).__name__} of {m.dtype}" if hasattr(m, "dtype")
                    and not np.isscalar(m)
                    else f"{reprlib.repr(m)} ({type(m).__name__})")
            raise NodeFailure.returned(
                self.node, "distribution query", self._batches,
                f"node {self.node!r}: the vectorised query returned {what} for output {i}; "
                "return a boolean mask of the batch's rows (numpy bool or pyarrow boolean), "
                "True (every row) or False / None (none): compare, e.g. "
                "pc.equal(batch['k'], 1) or values != 0")
        if len(m) != rows:
            raise NodeFailure.returned(
                self.node, "distribution query", self._batches,
                f"node {self.node!r}: the vectorised query's mask for output {i} has {len(m)} "
                f"values for a batch of {rows} rows; return one per row")
        return m

    def _filter(self, batch: pa.RecordBatch, mask: np.ndarray, outputs: list[int]):
        """``batch``'s rows where ``mask``, with the columns the projections of ``outputs`` keep
        (all of them if one output has no projection or a callable one)."""
        q = self.query
        keep: list[str] | None = []
        for i in outputs:
            p = None if q.project is None else q.project[i]
            if p is None or callable(p):
                keep = None
                break
            keep.extend(c for c in p if c not in keep)
        if keep is not None:
            if self.entry and ENTRY_COLUMN in batch.schema.names and ENTRY_COLUMN not in keep:
                keep.append(ENTRY_COLUMN)
            names = batch.schema.names
            if len(keep) < len(names) and all(c in names for c in keep):
                batch = batch.select(keep)
        return batch.filter(pa.array(mask))


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
        return serde.pack_state("epic.combine/1", {"order": self._order,
                            "watermark": self._watermark,
                            "groups": [[list(k), g] for k, g in self._groups.items()]})

    def restore(self, data: bytes) -> None:
        st = serde.unpack_state(data, "epic.combine/1")
        self._order = st["order"]
        self._watermark = st["watermark"]
        self._groups = {tuple(k): g for k, g in st["groups"]}
