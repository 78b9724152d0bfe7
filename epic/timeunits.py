"""Event time: one integer column per stream, in a unit the stream declares.

Window parameters are given in seconds (``int``, ``float``, ``Fraction``) or as
:class:`datetime.timedelta`, and converted once to integer *ticks* of the stream's unit. DEBS
timestamps are picoseconds above 2**53, so event time is never a float.
"""

from __future__ import annotations

import math
from datetime import timedelta
from decimal import Decimal
from fractions import Fraction
from numbers import Real

from .errors import SpecError

__all__ = ["UNITS", "TICKS_PER_SECOND", "check_unit", "to_ticks", "ticks_to_seconds"]

#: Supported time units and their ticks per second.
TICKS_PER_SECOND: dict[str, int] = {
    "s": 1,
    "ms": 10**3,
    "us": 10**6,
    "ns": 10**9,
    "ps": 10**12,
}
UNITS = tuple(TICKS_PER_SECOND)


def check_unit(unit: str) -> str:
    """Return ``unit`` if it is a supported time unit, else raise :class:`SpecError`."""
    if unit not in TICKS_PER_SECOND:
        raise SpecError(f"unknown time unit {unit!r}; use one of {', '.join(UNITS)}")
    return unit


def to_ticks(value: Real | timedelta | Decimal, unit: str, *, what: str = "duration") -> int:
    """Convert a duration in seconds (or a ``timedelta``) to integer ticks of ``unit``.

    Exact for ints, ``Fraction``, ``Decimal`` and ``timedelta``; floats go through their exact
    decimal repr so that ``0.1`` s is exactly 100 ms. A duration that is not a whole number of
    ticks raises, because silently rounding a window length would shift every boundary.

    >>> to_ticks(1.5, "ms")
    1500
    >>> to_ticks(timedelta(minutes=1), "ps")
    60000000000000
    """
    check_unit(unit)
    per_s = TICKS_PER_SECOND[unit]
    if isinstance(value, timedelta):
        exact = Fraction(value.days * 86400 + value.seconds) + Fraction(value.microseconds, 10**6)
    elif isinstance(value, bool):
        raise SpecError(f"{what} must be a number of seconds or a timedelta, not a bool")
    elif isinstance(value, (float, Decimal)) and not math.isfinite(value):
        raise SpecError(f"{what} must be a finite number of seconds, got {value!r}")
    elif isinstance(value, float):   # numpy's float64 too (its repr is np.float64(...))
        exact = Fraction(Decimal(repr(float(value))))
    elif isinstance(value, (int, Fraction, Decimal)):
        exact = Fraction(value)
    elif isinstance(value, Real):
        if not math.isfinite(float(value)):
            raise SpecError(f"{what} must be a finite number of seconds, got {value!r}")
        exact = Fraction(Decimal(repr(float(value))))
    else:
        raise SpecError(f"{what} must be a number of seconds or a timedelta, got {value!r}")
    ticks = exact * per_s
    if ticks.denominator != 1:
        shown = str(value) if isinstance(value, timedelta) else f"{value!r} s"
        near = round(ticks) or (1 if ticks > 0 else -1)
        raise SpecError(f"{what} {shown} is not a whole number of {unit} ticks (the stream's "
                        f"unit): it is {float(ticks):g} ticks; give a multiple of 1 {unit}, e.g. "
                        f"{_seconds_text(near, per_s)} s ({near} tick{'' if near == 1 else 's'})")
    if abs(ticks) > MAX_TICKS:
        shown = str(value) if isinstance(value, timedelta) else f"{value!r} s"
        raise SpecError(f"{what} {shown} is {int(ticks)} {unit} ticks, beyond the 2**60 ticks "
                        f"epic takes (event times and durations stay inside int64 together); "
                        f"give a shorter {what} or a coarser unit")
    return int(ticks)


#: The longest duration (window length, stride, lateness, ...) in ticks: with event times in
#: ``[-2**60, 2**62)`` (``epic.timecore.TIME_MIN``/``TIME_MAX``), a time minus or plus it stays
#: inside int64 and above the engines' "not started" value.
MAX_TICKS = 2**60


def _seconds_text(ticks: int, per_s: int) -> str:
    """``ticks / per_s`` seconds as exact decimal text (per_s is a power of ten)."""
    return format(Decimal(ticks) / Decimal(per_s), "f").rstrip("0").rstrip(".") or "0"


def ticks_to_seconds(ticks: int, unit: str) -> float:
    """Convert ticks to float seconds, for display only."""
    return ticks / TICKS_PER_SECOND[check_unit(unit)]
