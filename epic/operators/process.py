"""Runtime logic of process nodes: :class:`ProcessOperator` (a :class:`~epic.process.Processor`
with keyed state and event-time timers, handed a :class:`Context`) and :class:`OperatorProcess`
(a factory of user :class:`~epic.operator.Operator` objects, the vectorised form).
"""

from __future__ import annotations

import heapq
from typing import Any, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from .. import serde
from ..errors import EpicError, NodeFailure, StateError
from ..operator import ENTRY_COLUMN
from ..process import Context, Processor
from ..process import default_on_batch as _default_on_batch
from ..process import make_operator as _make_operator

__all__ = ['Context', 'ProcessOperator', 'OperatorProcess']


class ProcessOperator:
    """Runtime logic of a process node (the :mod:`epic.operator` protocol).

    Args:
        processor: the user's :class:`Processor` config.
        schema: the input schema.
        time: the input's event-time column.
        output_schema: the output schema (with ``_entry`` if the input has it).
        key: key column(s), or None for one global state.
        node: node name, for error messages.
    """

    def __init__(self, processor: Processor, schema: pa.Schema, time: str,
                 output_schema: pa.Schema, *, key: str | Sequence[str] | None = None,
                 node: str = "process"):
        self.processor = processor
        self.schema = schema
        self.time = time
        self.output_schema = output_schema
        self.keys = () if key is None else ((key,) if isinstance(key, str) else tuple(key))
        self.node = node
        self.entry = ENTRY_COLUMN in schema.names
        self.out_entry = ENTRY_COLUMN in output_schema.names
        self._user_out = (output_schema.remove(output_schema.get_field_index(ENTRY_COLUMN))
                          if self.out_entry else output_schema)
        self._states: dict[Any, Any] = {}
        self._key_entry: dict[Any, int] = {}
        self._timers: set[tuple[int, int]] = set()  # (time, key id)
        self._heap: list[tuple[int, int]] = []
        self._key_ids: dict[Any, int] = {}
        self._keys_by_id: list[Any] = []
        self._watermark: int | None = None
        self._at_end = False
        self._out: list[dict] = []
        self._out_entry: list[int] = []
        self._batches = 0
        self._ctx = Context(self)

    def _key_id(self, key) -> int:
        kid = self._key_ids.get(key)
        if kid is None:
            kid = len(self._keys_by_id)
            self._key_ids[key] = kid
            self._keys_by_id.append(key)
        return kid

    def _set_timer(self, time: int, key) -> None:
        item = (time, self._key_id(key))
        if item not in self._timers:
            self._timers.add(item)
            heapq.heappush(self._heap, item)

    def _call(self, hook: str, key, *args):
        ctx = self._ctx
        ctx.key = key
        ctx._entry = self._key_entry.get(key, 0)
        if key not in self._states:
            self._key_id(key)
            self._states[key] = self._guard("init", self.processor.init, key)
        state = self._guard(hook, getattr(self.processor, hook), self._states[key], *args, ctx)
        self._states[key] = state

    def _guard(self, hook: str, fn, *args):
        try:
            return fn(*args)
        except EpicError:
            raise
        except Exception as exc:
            raise NodeFailure(self.node, f"{type(self.processor).__name__}.{hook}",
                              self._batches, exc) from exc

    def _flush(self) -> list[pa.RecordBatch]:
        if not self._out:
            return []
        rows, ents = self._out, self._out_entry
        self._out, self._out_entry = [], []
        try:
            b = pa.RecordBatch.from_pylist(rows, schema=self._user_out)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, KeyError) as exc:
            raise NodeFailure(self.node, "ctx.emit", self._batches, ValueError(
                f"emitted rows do not fit the declared schema {self._user_out.names}: {exc}")
            ) from exc
        if self.out_entry:
            b = b.append_column(ENTRY_COLUMN, pa.array(ents, type=pa.int64()))
        return [b]

    # -- protocol --------------------------------------------------------------------------
    def on_batch(self, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        self._batches += 1
        rows = batch.to_pylist()
        groups: dict[Any, list] = {}
        for r in rows:
            e = r.pop(ENTRY_COLUMN, 0) if self.entry else 0
            if not self.keys:
                k = None
            elif len(self.keys) == 1:
                k = r[self.keys[0]]
            else:
                k = tuple(r[c] for c in self.keys)
            if k not in groups:
                self._key_id(k)
            groups.setdefault(k, []).append(r)
            if e > self._key_entry.get(k, 0):
                self._key_entry[k] = e
        # key groups in order of first appearance; rows of a key in input order
        per_element = _default_on_batch(self.processor)
        for k, krows in groups.items():
            if per_element:
                for r in krows:
                    self._call("on_element", k, r)
            else:
                self._call("on_batch", k, krows)
        return self._flush()

    def on_watermark(self, watermark: int) -> list[pa.RecordBatch]:
        watermark = int(watermark)
        if self._watermark is not None and watermark <= self._watermark:
            return []
        self._watermark = watermark
        self._fire(lambda t: t < watermark)
        return self._flush()

    def on_end(self) -> list[pa.RecordBatch]:
        self._at_end = True
        self._fire(lambda t: True)
        for k in list(self._states):
            self._call("on_end", k)
        return self._flush()

    def _fire(self, due) -> None:
        heap = self._heap
        while heap and due(heap[0][0]):
            item = heapq.heappop(heap)
            if item not in self._timers:
                continue  # deleted
            self._timers.discard(item)
            self._call("on_timer", self._keys_by_id[item[1]], item[0])

    @property
    def watermark(self) -> int | None:
        return self._watermark

    def snapshot(self) -> bytes:
        keys = self._keys_by_id
        try:
            return self._pack(keys)
        except StateError as exc:
            for k, s in self._states.items():  # name the key whose state is to blame
                try:
                    serde.packb(s)
                except StateError:
                    who = "the global state" if not self.keys else f"the state of key {k!r}"
                    raise StateError(f"{who}: {exc}") from exc
            raise

    def _pack(self, keys) -> bytes:
        return serde.pack_state("epic.process/1", {
            "keys": [list(k) if isinstance(k, tuple) else k for k in keys],
            "states": [[self._key_ids[k], s] for k, s in self._states.items()],
            "entry": [[self._key_ids[k], e] for k, e in self._key_entry.items()],
            "timers": [list(t) for t in sorted(self._timers)],   # lists: no tuple extension each
            "watermark": self._watermark,
        })

    def restore(self, data: bytes) -> None:
        st = serde.unpack_state(data, "epic.process/1")
        keys = [tuple(k) if isinstance(k, list) and len(self.keys) > 1 else k for k in st["keys"]]
        self._keys_by_id = keys
        self._key_ids = {k: i for i, k in enumerate(keys)}
        self._states = {keys[i]: s for i, s in st["states"]}
        self._key_entry = {keys[i]: e for i, e in st["entry"]}
        self._timers = {tuple(t) for t in st["timers"]}
        self._heap = sorted(self._timers)
        self._watermark = st["watermark"]


class OperatorProcess:
    """A process node whose logic is a user :class:`~epic.operator.Operator` (vectorised form).

    Adds what the node promises around the user's operator: delay-logging stamps (the input's
    ``_entry`` column is taken off before the operator sees it, and every output row carries the
    newest arrival time seen so far) and output batches conformed to the declared schema, with an
    error naming the node when they do not fit.
    """

    def __init__(self, factory, schema: pa.Schema, output_schema: pa.Schema, *,
                 node: str = "process"):
        self.node = node
        self.op = _make_operator(node, factory)
        self.output_schema = output_schema
        self.entry_in = ENTRY_COLUMN in schema.names
        self.entry_out = ENTRY_COLUMN in output_schema.names
        self._user_schema = (output_schema.remove(output_schema.get_field_index(ENTRY_COLUMN))
                             if self.entry_out else output_schema)
        self._entry = 0

    def _out(self, batches) -> list[pa.RecordBatch]:
        out = []
        for b in batches:
            if b.num_rows == 0:
                continue
            if b.schema.names != self._user_schema.names:
                raise EpicError(f"node {self.node!r}: the operator emitted columns {b.schema.names}"
                                f", but the node declares {self._user_schema.names}")
            try:
                b = pa.RecordBatch.from_arrays(
                    [c.cast(f.type) if c.type != f.type else c
                     for c, f in zip(b.columns, self._user_schema)], schema=self._user_schema)
            except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
                raise EpicError(f"node {self.node!r}: operator output does not fit the declared "
                                f"schema: {exc}") from exc
            if self.entry_out:
                b = b.append_column(ENTRY_COLUMN, pa.array([self._entry] * b.num_rows,
                                                           type=pa.int64()))
            out.append(b)
        return out

    def on_batch(self, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        if self.entry_in:
            col = batch.column(ENTRY_COLUMN)
            if len(col):
                self._entry = max(self._entry, int(pc.max(col).as_py() or 0))
            batch = batch.drop_columns([ENTRY_COLUMN])
        return self._out(self.op.on_batch(batch))

    def on_watermark(self, watermark: int) -> list[pa.RecordBatch]:
        return self._out(self.op.on_watermark(watermark))

    @property
    def output_watermark(self) -> int | None:
        """The user operator's watermark hold, if it declares one."""
        return getattr(self.op, "output_watermark", None)

    @property
    def dropped_rows(self) -> int | None:
        """Rows the user operator dropped and counted (a pattern's ``out_of_order='drop'``)."""
        return getattr(self.op, "dropped_rows", None)

    def on_end(self) -> list[pa.RecordBatch]:
        return self._out(self.op.on_end())

    def snapshot(self) -> bytes:
        return serde.pack_state("epic.operator_process/1", {"entry": self._entry,
                            "op": self.op.snapshot()})

    def restore(self, data: bytes) -> None:
        st = serde.unpack_state(data, "epic.operator_process/1")
        self._entry = st["entry"]
        self.op.restore(st["op"])
