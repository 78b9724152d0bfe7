"""Arrow schemas and batches as the graph model and the operators use them (a base module).

``as_schema`` turns the user's schema forms into a ``pyarrow.Schema``; ``with_entry`` adds or
removes the delay-logging column; ``empty_batch`` and ``fn_name`` are small shared helpers, and
``one_array`` (defined in :mod:`epic.operator`, which the base modules may import) is here too.
"""

from __future__ import annotations

import decimal
import fractions
import operator
from typing import Any, Iterable, Mapping

import numpy as np
import pyarrow as pa

from .errors import SpecError
from .operator import ENTRY_COLUMN, one_array

__all__ = ["as_schema", "with_entry", "empty_batch", "one_array", "fn_name"]

_TYPE_NAMES = {
    "int8": pa.int8(), "int16": pa.int16(), "int32": pa.int32(), "int64": pa.int64(),
    "uint8": pa.uint8(), "uint16": pa.uint16(), "uint32": pa.uint32(), "uint64": pa.uint64(),
    "float32": pa.float32(), "float64": pa.float64(), "double": pa.float64(),
    "bool": pa.bool_(), "string": pa.string(), "str": pa.string(), "binary": pa.binary(),
}


def as_schema(schema: Any, *, what: str = "schema") -> pa.Schema:
    """A ``pyarrow.Schema`` from a schema, a ``{name: type}`` dict or ``[(name, type)]`` pairs.

    Types may be Arrow types or names such as ``"int64"``, ``"float64"``, ``"string"``.

    >>> as_schema({"ts": "int64", "v": "float64"}).names
    ['ts', 'v']
    """
    if isinstance(schema, pa.Schema):
        _once(schema.names, what)
        return schema
    if isinstance(schema, Mapping):
        items = list(schema.items())
    elif isinstance(schema, Iterable) and not isinstance(schema, (str, bytes)):
        items = list(schema)
    else:
        raise SpecError(f"{what} must be a pyarrow.Schema, a {{name: type}} dict or (name, type) "
                        f"pairs, got {schema!r}")
    fields = []
    for item in items:
        if isinstance(item, pa.Field):
            fields.append(item)
            continue
        name, typ = item
        if isinstance(typ, str):
            if typ not in _TYPE_NAMES:
                raise SpecError(f"{what}: unknown type name {typ!r} for column {name!r}; use one "
                                f"of {', '.join(_TYPE_NAMES)} or a pyarrow type")
            typ = _TYPE_NAMES[typ]
        fields.append(pa.field(name, typ))
    _once([f.name for f in fields], what)
    return pa.schema(fields)


def _once(names: list[str], what: str) -> None:
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise SpecError(f"{what}: column {', '.join(map(repr, twice))} given more than once; "
                        "give each column once")


def with_entry(schema: pa.Schema, entry: bool) -> pa.Schema:
    """``schema`` with (``entry``) or without the ``_entry`` delay-logging column."""
    has = ENTRY_COLUMN in schema.names
    if entry and not has:
        return schema.append(pa.field(ENTRY_COLUMN, pa.int64()))
    if not entry and has:
        return schema.remove(schema.get_field_index(ENTRY_COLUMN))
    return schema


def empty_batch(schema: pa.Schema) -> pa.RecordBatch:
    """A batch of no rows with ``schema``."""
    return pa.RecordBatch.from_pylist([], schema=schema)


def fn_name(fn) -> str:
    """A user function's name for messages (its class name for callables without one)."""
    return getattr(fn, "__name__", type(fn).__name__)


def is_number(t: pa.DataType, *, time: bool = False) -> bool:
    """Whether ``t`` holds numbers (integer, floating, decimal); with ``time``, also booleans,
    durations and timestamps (numpy reads them as numbers: a window can sum or average them)."""
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t):
        return True
    return time and (pa.types.is_boolean(t) or pa.types.is_duration(t)
                     or pa.types.is_timestamp(t))


def fractional_int(rows: list, schema: pa.Schema) -> tuple[int, str, float] | None:
    """The first ``(row index, column, value)`` where a Python dict row holds a float with a
    fraction for an integer column of ``schema``: pyarrow's conversion drops the fraction
    (10.7 -> 10) without a word. None when there is none."""
    cols = [f.name for f in schema if pa.types.is_integer(f.type)]
    first = None
    for name in cols:
        # the column's values' types first: rows of ints are not looked at one by one (200,000
        # rows of 4 integer columns: 277 -> 127 ms)
        try:
            kinds = set(map(type, map(operator.itemgetter(name), rows)))
        except (KeyError, TypeError):   # a row without it (a null), or no dict
            kinds = {type(r.get(name)) for r in rows if isinstance(r, Mapping)}
        if not any(issubclass(k, _FRACTIONAL) for k in kinds):
            continue
        vals = [r.get(name) if isinstance(r, Mapping) else None for r in rows]
        for j, v in enumerate(vals if first is None else vals[:first[0]]):
            if isinstance(v, _FRACTIONAL) and _has_fraction(v):
                first = (j, name, v)
                break
    return first


#: the Python number types that can hold a fraction (pyarrow truncates each into an integer)
_FRACTIONAL = (float, np.floating, decimal.Decimal, fractions.Fraction)


def _has_fraction(v) -> bool:
    if isinstance(v, fractions.Fraction):
        return v.denominator != 1
    if isinstance(v, decimal.Decimal):
        return v.is_finite() and v != v.to_integral_value()
    return not float(v).is_integer()
