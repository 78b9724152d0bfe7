"""Runtime logic of the stateless nodes: map, filter and flat_map (the Operator protocol).

Each is a few lines of Arrow code around the user's function: results are conformed to the node's
declared schema, delay-logging stamps (``_entry``) are carried through, and a failing user
function becomes a :class:`~epic.errors.NodeFailure` naming the node, the function and the batch.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np
import pyarrow as pa

from ..errors import EpicError, NodeFailure
from ..operator import ENTRY_COLUMN
from ..schemas import empty_batch as _empty
from ..schemas import fn_name as _fn_name
from ..schemas import fractional_int
from ..schemas import one_array
from ..schemas import with_entry as _with_entry

__all__ = ["MapOperator", "FilterOperator", "FlatMapOperator"]


def _entry_max(batch: pa.RecordBatch) -> int:
    col = batch.column(ENTRY_COLUMN)
    return int(np.max(col.to_numpy(zero_copy_only=False))) if len(col) else 0


class _Stateless:
    """Shared plumbing: conform results to the declared schema, carry ``_entry``."""

    def __init__(self, node):
        self.node = node
        self.output_schema = node.outputs[0].schema
        self.entry = ENTRY_COLUMN in self.output_schema.names
        self.user_schema = _with_entry(self.output_schema, False)
        self._batches = 0

    def on_watermark(self, watermark: int) -> list[pa.RecordBatch]:
        return []

    def on_end(self) -> list[pa.RecordBatch]:
        return []

    def snapshot(self) -> bytes:
        return b""

    def restore(self, data: bytes) -> None:
        pass

    def _conform(self, result, fn_name: str, entry=None) -> pa.RecordBatch:
        """Result of a vectorised function as a batch of the output schema."""
        if isinstance(result, pa.Table):
            batches = result.combine_chunks().to_batches()
            result = batches[0] if batches else _empty(result.schema)
        elif isinstance(result, Mapping):
            result = pa.RecordBatch.from_pydict(dict(result))
        if not isinstance(result, pa.RecordBatch):
            raise NodeFailure(self.node.name, fn_name, self._batches,
                              TypeError(f"returned {type(result).__name__}; return a "
                                        "RecordBatch, Table or {column: array}"))
        try:
            arrays = [result.column(f.name).cast(f.type) if result.schema.field(f.name).type
                      != f.type else result.column(f.name) for f in self.user_schema]
        except KeyError as exc:
            raise NodeFailure(self.node.name, fn_name, self._batches, KeyError(
                f"output lacks column {exc}; declared {self.user_schema.names}, got "
                f"{result.schema.names}")) from exc
        except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
            raise NodeFailure(self.node.name, fn_name, self._batches, exc) from exc
        if self.entry:
            if ENTRY_COLUMN in result.schema.names:
                arrays.append(result.column(ENTRY_COLUMN))
            elif entry is not None and isinstance(entry, pa.Array) and len(entry) == len(result):
                arrays.append(entry)
            else:
                arrays.append(pa.array(np.full(result.num_rows, entry if isinstance(entry, int)
                                               else 0, dtype=np.int64)))
        return pa.RecordBatch.from_arrays(arrays, schema=self.output_schema)

    def _rows_to_batch(self, rows: list[dict], entries: list[int] | None, fn_name: str):
        # as the vectorised forms: a missing column and a float with a fraction in an integer
        # column stop the run (pyarrow would fill nulls and drop the fraction without a word)
        names = self.user_schema.names
        want = dict.fromkeys(names).keys()
        for r in rows:
            if not isinstance(r, Mapping) or r.keys() == want:
                continue
            missing = [n for n in names if n not in r]
            if missing:
                raise NodeFailure.returned(
                    self.node.name, fn_name, self._batches,
                    f"node {self.node.name!r}: a row {fn_name} returned lacks "
                    f"{', '.join(map(repr, missing))} (the output's columns: {', '.join(names)}; "
                    f"input batch {self._batches}); return every column (None for a null), or "
                    "declare the output's columns with schema=")
        bad = fractional_int(rows, self.user_schema)
        if bad is not None:
            j, col, v = bad
            raise NodeFailure.returned(
                self.node.name, fn_name, self._batches,
                f"node {self.node.name!r}: {fn_name} returned {v!r} for the integer column "
                f"{col!r} (input batch {self._batches}); round it yourself, or declare the "
                "column as a float with schema=")
        try:
            b = pa.RecordBatch.from_pylist(rows, schema=self.user_schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, KeyError) as exc:
            raise NodeFailure(self.node.name, fn_name, self._batches, exc) from exc
        if self.entry:
            b = b.append_column(ENTRY_COLUMN, pa.array(entries or [], type=pa.int64()))
        return b


class MapOperator(_Stateless):
    """Runtime logic of a map node (vectorised or per row)."""

    def on_batch(self, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        out = self._map(batch)
        time = self.node.outputs[0].time
        for b in out:
            if time in b.schema.names and b.column(time).null_count:
                fn = _fn_name(self.node.fn)
                raise NodeFailure.returned(
                    self.node.name, fn, self._batches,
                    f"node {self.node.name!r}: {fn} left {b.column(time).null_count} row(s) "
                    f"with a null event time {time!r} (input batch {self._batches}); keep the "
                    "time in every row, or filter such rows first")
        return out

    def _map(self, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        self._batches += 1
        fn, name = self.node.fn, _fn_name(self.node.fn)
        has_entry = ENTRY_COLUMN in batch.schema.names
        if not self.node.per_row:
            try:
                result = fn(batch)
            except EpicError:
                raise
            except Exception as exc:
                raise NodeFailure(self.node.name, name, self._batches, exc) from exc
            ent = batch.column(ENTRY_COLUMN) if has_entry else None
            if ent is not None and _rows(result) != batch.num_rows:
                ent = _entry_max(batch)
            return [self._conform(result, name, ent)]
        rows = batch.to_pylist()
        out, entries = [], []
        for r in rows:
            e = r.pop(ENTRY_COLUMN, 0) if has_entry else 0
            try:
                out.append(fn(r))
            except Exception as exc:
                raise NodeFailure(self.node.name, name, self._batches, exc) from exc
            entries.append(e)
        return [self._rows_to_batch(out, entries, name)]


class FilterOperator(_Stateless):
    """Runtime logic of a filter node."""

    def on_batch(self, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        self._batches += 1
        pred, name = self.node.predicate, _fn_name(self.node.predicate)
        try:
            if self.node.per_row:
                cols = [c for c in batch.schema.names if c != ENTRY_COLUMN]
                rows = batch.select(cols).to_pylist()
                mask = pa.array([bool(pred(r)) for r in rows], type=pa.bool_())
            else:
                mask = pred(batch)
                if isinstance(mask, pa.ChunkedArray):
                    mask = one_array(mask)
                if not isinstance(mask, pa.Array):
                    mask = pa.array(np.asarray(mask, dtype=bool))
                if len(mask) != batch.num_rows:
                    raise ValueError(f"mask has {len(mask)} values for {batch.num_rows} rows")
                mask = mask.fill_null(False)
        except EpicError:
            raise
        except Exception as exc:
            raise NodeFailure(self.node.name, name, self._batches, exc) from exc
        out = batch.filter(mask)
        return [out] if out.num_rows else []


class FlatMapOperator(_Stateless):
    """Runtime logic of a flat_map node."""

    def on_batch(self, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        self._batches += 1
        fn, name = self.node.fn, _fn_name(self.node.fn)
        has_entry = ENTRY_COLUMN in batch.schema.names
        if not self.node.per_row:
            try:
                result = fn(batch)
                if isinstance(result, (pa.RecordBatch, pa.Table, Mapping)):
                    items = [result]
                elif result is None:
                    items = []
                else:
                    items = list(result)
            except EpicError:
                raise
            except Exception as exc:
                raise NodeFailure(self.node.name, name, self._batches, exc) from exc
            ent = _entry_max(batch) if has_entry else None
            out = [self._conform(r, name, ent) for r in items]
            return [b for b in out if b.num_rows]
        rows, entries = [], []
        for r in batch.to_pylist():
            e = r.pop(ENTRY_COLUMN, 0) if has_entry else 0
            try:
                produced = list(fn(r) or ())
            except Exception as exc:
                raise NodeFailure(self.node.name, name, self._batches, exc) from exc
            rows.extend(produced)
            entries.extend([e] * len(produced))
        if not rows:
            return []
        return [self._rows_to_batch(rows, entries, name)]


def _rows(result) -> int:
    if isinstance(result, (pa.RecordBatch, pa.Table)):
        return result.num_rows
    if isinstance(result, Mapping):
        for v in result.values():
            return len(v)
    return -1
