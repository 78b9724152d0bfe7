"""The node driver both runtimes share: how a node's operator is called, and what it forwards.

``epic run`` (:mod:`epic.runner`) and every Spark task (:mod:`epic.spark.tasks`) drive a node's
operator through one :class:`NodeDriver`, so the rules below exist once:

* **Rows** go to ``on_batch`` (a merge's with the input index; a splitstream's ``split``); a
  node whose operator keeps the stream's clock (``stream_clock``, the window operators of
  :mod:`epic.timecore`) also gets each row's stream high-water mark when the runtime feeds it only
  some keys (``before``), the stream's high-water mark of rows it did not get (``observe``) and,
  for the time and count windows (``ranked``), each row's position in the stream (``positions``:
  a key's rank is its first on-time row's position, whatever partition runs it).
* **Watermarks** are kept per input; one that does not advance its input is ignored. The
  watermark the node **forwards** is a merge's frontier (``op.watermark``), else the minimum over
  its inputs, held back by the operator's ``output_watermark`` (a window's emission watermark, a
  process node's hold); None until every input has one.
* **Input ends**: a merge hears of each (``on_input_end``); the node ends (``on_end``) once all
  its inputs have ended, and forwards nothing after that.
* **State**: after the node's first rows, one trial snapshot (``check_state``) validates the
  operator's state, as every ``epic deploy`` snapshot does (``snapshot_state``).
* **Failures**: a user exception becomes :class:`~epic.errors.NodeFailure` naming the node, the
  operator function and the batch (``batch``: the runtime's batch number).

The driver's bookkeeping is plain state (:meth:`state` / :meth:`restore_state`), saved with the
operator's snapshot by the Spark tasks.
"""

from __future__ import annotations

from typing import Any

from .errors import EpicError, InputError, NodeFailure
from .operator import check_state, watermark_hold

__all__ = ["NodeDriver"]


class NodeDriver:
    """Drives one node's operator (see the module docstring).

    Args:
        name: the node's name (for errors).
        op: the node's operator (from :func:`epic.operators.build`).
        inputs: the number of input streams.
        merge: the node is a merge (per-input calls, its own frontier).
        split: the node is a splitstream (``split`` instead of ``on_batch``; outputs per port).
        label: the function named when the rows' call fails (default ``Operator.on_batch``):
            e.g. the user's function of a stateless node.
    """

    def __init__(self, name: str, op: Any, inputs: int, *, merge: bool = False,
                 split: bool = False, label: str | None = None):
        self.label = label
        self.name = name
        self.op = op
        self.inputs = inputs
        self.merge = merge
        self.split = split
        self.stream_clock = bool(getattr(op, "stream_clock", False))
        self.applied: list[int | None] = [None] * inputs
        self.inputs_ended = [False] * inputs
        self.ended = False
        #: the runtime's batch number, named in failures
        self.batch: int | None = None
        #: validate the state after the first rows (epic run; a Spark task snapshots anyway)
        self.check = True
        self._checked = False

    # -- calls ---------------------------------------------------------------------------------
    def _guard(self, what: str, fn, *args):
        try:
            return fn(*args)
        except InputError as exc:
            if f"node {self.name!r}" in str(exc):
                raise
            # bad data found inside an operator (an event time outside the range windows
            # take, ...): name the node, keep the type and fields
            exc.args = (f"node {self.name!r}: {exc}",) + exc.args[1:]
            raise
        except EpicError:
            raise
        except Exception as exc:  # noqa: BLE001 - named and re-raised
            user = bool(self.label) and what in ("on_batch", "split")
            label = self.label if user else f"{type(self.op).__name__}.{what}"
            raise NodeFailure(self.name, label, self.batch, exc, user=user) from exc

    def rows(self, batch, input: int = 0, before=None, positions=None):
        """Rows of input ``input``; returns the operator's output (per port for a split).

        ``before`` / ``positions``: each row's stream high-water mark and position in the input
        stream, when the runtime gives the operator only some keys' rows (``stream_clock``).

        After the node's first rows, a trial snapshot validates its state (with
        ``check_state``): a state no checkpoint could hold fails every runtime at the same
        point, naming the node and the offending type."""
        op = self.op
        if self.split:
            out = self._guard("split", op.split, batch)
        elif self.merge:
            out = self._guard("on_batch", op.on_batch, batch, input)
        elif positions is not None and getattr(op, "ranked", False):
            out = self._guard("on_batch", op.on_batch, batch, before, positions)
        elif before is not None and self.stream_clock:
            out = self._guard("on_batch", op.on_batch, batch, before)
        else:
            out = self._guard("on_batch", op.on_batch, batch)
        if not self._checked:
            self._checked = True
            if self.check:
                check_state(self.name, op)
        return out

    def observe(self, high: int | None):
        """The input stream reached event time ``high`` in rows this operator did not get."""
        if high is None or not self.stream_clock:
            return []
        return self._guard("observe", self.op.observe, int(high))

    def watermark(self, watermark: int | None, input: int = 0):
        """A watermark on input ``input``: applied if it advances that input, else ignored."""
        if watermark is None:
            return None
        w = int(watermark)
        last = self.applied[input]
        if last is not None and w <= last:
            return None
        self.applied[input] = w
        if self.merge:
            return self._guard("on_watermark", self.op.on_watermark, w, input)
        return self._guard("on_watermark", self.op.on_watermark, w)

    def input_end(self, input: int):
        """Input ``input`` ended; returns output (a merge's), or None."""
        if self.inputs_ended[input]:
            return None
        self.inputs_ended[input] = True
        if self.merge and not all(self.inputs_ended):
            return self._guard("on_input_end", self.op.on_input_end, input)
        return None

    @property
    def all_inputs_ended(self) -> bool:
        return all(self.inputs_ended)

    def end(self):
        """Every input ended: the operator flushes (``on_end``)."""
        self.ended = True
        return self._guard("on_end", self.op.on_end)

    @property
    def forwarded(self) -> int | None:
        """The watermark the node forwards now (see the module docstring)."""
        if self.merge:
            return self.op.watermark
        if any(w is None for w in self.applied):
            return None
        return watermark_hold(self.op, min(self.applied))

    # -- state ---------------------------------------------------------------------------------
    def state(self) -> dict:
        return {"applied": list(self.applied), "inputs_ended": list(self.inputs_ended),
                "ended": self.ended}

    def restore_state(self, st: dict) -> None:
        self.applied = list(st["applied"])
        self.inputs_ended = list(st["inputs_ended"])
        self.ended = bool(st["ended"])
