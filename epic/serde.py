"""Pickle-free serialisation of operator state: msgpack with numpy arrays as extension types.

Everything epic checkpoints goes through :func:`packb` / :func:`unpackb`. Supported values: None,
bool, int (up to 64 bits), float, str, bytes, list/tuple (tuples come back as lists), dict (keys of
any supported hashable type), numpy scalars and arrays of fixed-width dtypes. Anything else raises a
:class:`~epic.errors.StateError` that names the offending type, instead of silently pickling it.
"""

from __future__ import annotations

import msgpack
import numpy as np

from .errors import StateError

__all__ = ["packb", "unpackb"]

_EXT_NDARRAY = 1
_EXT_BIGINT = 2


def _default(obj):
    if isinstance(obj, np.ndarray):
        if obj.dtype.hasobject:
            return msgpack.ExtType(_EXT_NDARRAY, _pack_obj_array(obj))
        arr = np.ascontiguousarray(obj)
        header = msgpack.packb([arr.dtype.str, list(arr.shape)])
        return msgpack.ExtType(_EXT_NDARRAY, header + arr.tobytes())
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, int):  # beyond 64 bits
        return msgpack.ExtType(_EXT_BIGINT, str(obj).encode())
    if isinstance(obj, (set, frozenset)):
        raise StateError(f"state holds a {type(obj).__name__} ({_short(obj)}), which cannot be "
                         "checkpointed. Fix: use a sorted list, or a dict with True values")
    raise StateError(
        f"state holds a {type(obj).__module__}.{type(obj).__qualname__} ({_short(obj)}), which "
        "cannot be checkpointed without pickle. Fix: use numbers, str, bytes, lists, dicts or "
        "numpy arrays"
    )


def _short(obj) -> str:
    try:
        text = repr(obj)
    except Exception:  # noqa: BLE001 - only for the message
        text = object.__repr__(obj)
    return text if len(text) <= 60 else text[:57] + "..."


def _pack_obj_array(arr: np.ndarray) -> bytes:
    header = msgpack.packb(["O", list(arr.shape)])
    return header + packb(arr.ravel().tolist())


def _ext_hook(code, data):
    if code == _EXT_NDARRAY:
        unpacker = msgpack.Unpacker(raw=False)
        unpacker.feed(data)
        dtype, shape = unpacker.unpack()
        offset = unpacker.tell()
        if dtype == "O":
            arr = np.empty(len(_flat := unpackb(data[offset:])), dtype=object)
            arr[:] = _flat
            return arr.reshape(shape)
        return np.frombuffer(data[offset:], dtype=np.dtype(dtype)).reshape(shape).copy()
    if code == _EXT_BIGINT:
        return int(data.decode())
    raise StateError(f"unknown msgpack extension type {code} in state")


def packb(value) -> bytes:
    """Serialise ``value`` to msgpack bytes (numpy arrays as extension types)."""
    try:
        return msgpack.packb(value, default=_default, use_bin_type=True, strict_types=False)
    except StateError:
        raise
    except (TypeError, ValueError, OverflowError) as exc:
        raise StateError(f"cannot serialise state: {exc}") from exc


def unpackb(data: bytes):
    """Inverse of :func:`packb`; tuples come back as lists."""
    try:
        return msgpack.unpackb(data, ext_hook=_ext_hook, raw=False, strict_map_key=False,
                               use_list=True)
    except StateError:
        raise
    except Exception as exc:  # msgpack raises several unrelated types on corrupt input
        raise StateError(f"corrupt state: {exc}") from exc


def pack_state(fmt: str, fields: dict) -> bytes:
    """A snapshot: the named ``fields`` with their ``format`` tag (``"epic.window/2"``), as msgpack.

    Every operator snapshot is such a map, so a snapshot names what it holds and a reader can
    refuse one of another kind or version (:func:`unpack_state`)."""
    if "format" in fields:
        raise StateError("a snapshot field may not be called 'format'")
    return packb({"format": fmt, **fields})


def unpack_state(data: bytes, fmt: str) -> dict:
    """The fields of a :func:`pack_state` snapshot; a :class:`StateError` naming both formats when
    ``data`` is not a snapshot of format ``fmt``."""
    st = unpackb(data)
    found = st.get("format") if isinstance(st, dict) else None
    if found != fmt:
        raise StateError(f"not a {fmt} snapshot (found {found or 'no format tag'}); was the "
                         "state written by another operator or an older epic? Restore the "
                         "matching version or reset the node's state")
    del st["format"]
    return st
