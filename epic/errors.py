"""The error hierarchy of epic: one base class and a few children, all in this module."""

from __future__ import annotations

import os

__all__ = [
    "EpicError",
    "SpecError",
    "TopologyError",
    "InputError",
    "StateError",
    "OutputError",
    "NodeFailure",
]


class EpicError(Exception):
    """Base class of every error epic raises on purpose."""


class SpecError(EpicError, ValueError):
    """A window, aggregate or operator spec is invalid (raised when the spec is built)."""


class TopologyError(EpicError):
    """A topology is invalid: names, wiring, cycles, schemas. Raised when it is built or validated."""


class InputError(EpicError):
    """Bad input data: names the file, line, field and value where known."""

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None,
                 field: str | None = None, value: object = None):
        where = []
        if path is not None:
            where.append(str(path))
        if line is not None:
            where.append(f"line {line}")
        if field is not None:
            where.append(f"field {field!r}")
        prefix = (":".join(where[:2]) + (f", {where[2]}" if len(where) > 2 else "")) if where else ""
        super().__init__(f"{prefix}: {message}" if prefix else message)
        self.path = path
        self.line = line
        self.field = field
        self.value = value


class StateError(EpicError):
    """Operator state could not be snapshotted or restored (wrong format, version or content)."""


class OutputError(EpicError):
    """An output file could not be written (disk full, no permission...): names the path and the
    operating system's error. The output is left ending with whole rows: what was written before
    the failure (``epic run``) or the last committed micro-batch (``epic deploy``)."""

    def __init__(self, path: str, exc: BaseException | str, *, what: str = "cannot write",
                 fix: str | None = None):
        import os

        reason = exc if isinstance(exc, str) else (
            f"{os.strerror(exc.errno)} (errno {exc.errno})" if isinstance(exc, OSError)
            and exc.errno else f"{type(exc).__name__}: {exc}")
        super().__init__(f"{path}: {what}: {reason}"
                         + (f". Fix: {fix}" if fix else ""))
        self.path = path
        self.cause = exc


def _user_frame(exc: BaseException) -> str | None:
    """``function (file:line)`` of the innermost frame of ``exc``'s traceback outside epic, the
    standard library and installed packages: the user's hook that raised, if any."""
    import sysconfig

    epic_dir = os.path.dirname(os.path.abspath(__file__)) + os.sep
    skip = tuple(os.path.abspath(p) + os.sep for p in {
        sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")})
    found = None
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        f = os.path.abspath(code.co_filename)
        if not code.co_filename.startswith("<") and not f.startswith(epic_dir) \
                and not f.startswith(skip):
            found = f"{code.co_name} ({code.co_filename}:{tb.tb_lineno})"
        tb = tb.tb_next
    return found


class NodeFailure(EpicError):
    """A user function inside a node raised (or returned what the node cannot take: `returned`).
    Names the node, the function and the batch."""

    def __init__(self, node: str, function: str, batch: object, cause: BaseException, *,
                 user: bool = True):
        if user:
            what = f"user function {function}"
            tail = ""
        else:   # epic's operator method: the cause may be a user hook it called (an aggregate's)
            what = f"operator {function}"
            where = _user_frame(cause)
            tail = (f"; raised in {where}" if where else
                    "; raised in epic's own code (the traceback: --debug)")
        super().__init__(
            f"node {node!r}: {what} raised {type(cause).__name__}: {cause}"
            f" (input batch {batch}){tail}"
        )
        self.node = node
        self.function = function
        self.batch = batch
        self.cause = cause

    @classmethod
    def returned(cls, node: str, function: str, batch: object, message: str) -> NodeFailure:
        """A user function returned what its node cannot take (it raised nothing itself):
        ``message`` names the node, what was wrong and the fix; ``cause`` is None."""
        self = cls.__new__(cls)
        EpicError.__init__(self, message)
        self.node, self.function, self.batch, self.cause = node, function, batch, None
        return self
