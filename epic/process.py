"""``process``: a user stateful operator per key (or global), for sequential logic.

A :class:`Processor` is *configuration*: its hooks receive the state and return the new state;
nothing is kept on ``self`` between calls. The state of each key must be serialisable by
:mod:`epic.serde` (numbers, str, bytes, lists, dicts, numpy arrays), because it is checkpointed,
never pickled. Call order, per key::

    state = p.init(key)                              # the first time the key is seen
    state = p.on_batch(state, rows_of_key, ctx)      # per input batch; by default calls
        state = p.on_element(state, row, ctx)        #   on_element for each row, in order
    state = p.on_timer(state, t, ctx)                # event-time timers, in time order, once
                                                     #   the watermark passes t
    state = p.on_end(state, ctx)                     # once, when the input ends (after timers)

``ctx`` (a :class:`Context`) emits output rows (``ctx.emit(dict)``), sets and deletes timers
(``ctx.set_timer(t)``), and tells the ``key`` and the current ``watermark``. A timer at ``t``
fires once every element with event time <= ``t`` has been processed; at the end of the input,
all pending timers fire in time order, with ``ctx.at_end`` True. Rows emitted should carry an event time no older than the
current watermark (downstream windows would count them as late).

Example (a per-key running count)::

    class RunningCount(epic.Processor):
        def init(self, key):
            return 0
        def on_element(self, state, row, ctx):
            ctx.emit({"sid": ctx.key, "ts": row["ts"], "n": state + 1})
            return state + 1
"""

from __future__ import annotations

from typing import Any, Callable

import pyarrow as pa

from .errors import EpicError, NodeFailure

__all__ = ["Processor", "Context", "processor",
           "operator_output_schema"]


class Processor:
    """Base class of user stateful operators (see the module docstring for the call order)."""

    def init(self, key: Any) -> Any:
        """The fresh state for ``key`` (None for a global process node)."""
        return None

    def on_batch(self, state: Any, rows: list[dict], ctx: "Context") -> Any:
        """All rows of one input batch for this key, in input order. Default: ``on_element``."""
        for row in rows:
            ctx._row = row
            state = self.on_element(state, row, ctx)
        return state

    def on_element(self, state: Any, row: dict, ctx: "Context") -> Any:
        """One input row (a dict of column values). Return the new state."""
        return state

    def on_timer(self, state: Any, time: int, ctx: "Context") -> Any:
        """A timer set with ``ctx.set_timer(time)`` fired. Return the new state."""
        return state

    def on_end(self, state: Any, ctx: "Context") -> Any:
        """The input ended (all timers have fired). Return the final state."""
        return state


class _FunctionProcessor(Processor):
    def __init__(self, init, on_element, on_timer, on_end, on_batch):
        self._f = (init, on_element, on_timer, on_end, on_batch)

    def init(self, key):
        return self._f[0](key) if self._f[0] else None

    def on_batch(self, state, rows, ctx):
        if self._f[4]:
            return self._f[4](state, rows, ctx)
        return super().on_batch(state, rows, ctx)

    def on_element(self, state, row, ctx):
        return self._f[1](state, row, ctx) if self._f[1] else state

    def on_timer(self, state, time, ctx):
        return self._f[2](state, time, ctx) if self._f[2] else state

    def on_end(self, state, ctx):
        return self._f[3](state, ctx) if self._f[3] else state


def processor(*, init: Callable[[Any], Any] | None = None,
              on_element: Callable[[Any, dict, "Context"], Any] | None = None,
              on_timer: Callable[[Any, int, "Context"], Any] | None = None,
              on_end: Callable[[Any, "Context"], Any] | None = None,
              on_batch: Callable[[Any, list, "Context"], Any] | None = None) -> Processor:
    """A :class:`Processor` from plain functions (same hooks, same rules).

    >>> p = processor(init=lambda key: 0, on_element=lambda s, row, ctx: s + 1)
    >>> p.on_element(p.init(None), {}, None)
    1
    """
    return _FunctionProcessor(init, on_element, on_timer, on_end, on_batch)


def default_on_batch(p: Processor) -> bool:
    if isinstance(p, _FunctionProcessor):
        return p._f[4] is None
    return type(p).on_batch is Processor.on_batch


def make_operator(node: str, factory):
    from .operator import Operator

    try:
        op = factory()
    except Exception as exc:
        raise NodeFailure(node, f"{getattr(factory, '__name__', factory)!s}()", "build", exc) from exc
    if not isinstance(op, Operator):
        raise EpicError(f"node {node!r}: the process factory returned a "
                        f"{type(op).__name__}, which lacks parts of the epic.Operator protocol "
                        "(output_schema, on_batch, on_watermark, on_end, snapshot, restore)")
    return op


def operator_output_schema(node: str, factory) -> pa.Schema:
    """The output schema of the operators ``factory`` makes (one is built to ask)."""
    return make_operator(node, factory).output_schema


class Context:
    """What a hook may do besides returning the state."""

    def __init__(self, op):  # the node's epic.operators.process.ProcessOperator
        self._op = op
        self.key: Any = None
        self._row: dict | None = None
        self._entry = 0

    @property
    def watermark(self) -> int | None:
        """The input watermark: no element older than this will arrive."""
        return self._op._watermark

    @property
    def at_end(self) -> bool:
        """True while timers fire and ``on_end`` runs because the input has ended."""
        return self._op._at_end

    def emit(self, row: dict) -> None:
        """Emit one output row (a dict with the output schema's columns)."""
        self._op._out.append(row)
        self._op._out_entry.append(self._entry)

    def set_timer(self, time: int) -> None:
        """Call ``on_timer(state, time)`` for this key once the watermark passes ``time``."""
        self._op._set_timer(int(time), self.key)

    def delete_timer(self, time: int) -> None:
        """Cancel this key's timer at ``time`` (no error if there is none)."""
        self._op._timers.discard((int(time), self._op._key_id(self.key)))
