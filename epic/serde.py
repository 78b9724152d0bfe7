"""Pickle-free serialisation of operator state: msgpack with numpy arrays as extension types.

Everything epic checkpoints goes through :func:`packb` / :func:`unpackb`. Supported values: None,
bool, int (any size), float, str, bytes, list, tuple, dict (keys of any supported hashable type,
tuples included), numpy scalars and arrays of fixed-width dtypes (of any shape, 0-d included).
Subclasses of these come back as the base type (a namedtuple as a tuple, a defaultdict as a
dict). Anything else raises a
:class:`~epic.errors.StateError` that names the offending type, instead of silently pickling it.

Snapshots (:func:`pack_state`, and a deploy's state files) use :func:`pack_large`: the same msgpack,
except that arrays of at least :data:`RAW_MIN` bytes, and :class:`Blob` values, follow the
msgpack body as raw segments, copied once when packed and once when read back (as msgpack
extension data they were copied three times each way: a 20-minute window's 108 MB state took
0.24 s to pack and 0.09 s to read). Such an array of at least :data:`ZRAW_MIN` bytes is stored
zstd-compressed when that saves at least 40 % (running sums, sparse counts: a DEBS 20-minute
window's sums 96 -> 10 MB in 0.07 s): a deploy writes every stateful node's snapshot each
micro-batch, and the bytes written were what took the time. :func:`unpackb` reads every form.

**Frozen segments.** An operator whose state is mostly an append-only log (a prefix window's
times and running sums) marks the parts that can no longer change as :class:`Frozen`. Packed
while a :class:`SegmentSink` is active (a deploy's task saving a snapshot: :func:`segments`), a
frozen array is stored once, in the sink's file of that save, and every later snapshot holds
only its reference (:attr:`Frozen.ref`); read back while a :class:`SegmentSource` is active, the
reference yields the array again. A snapshot's cost then follows what changed since the last
one, not the size of the state. Without a sink (``epic run``'s trial snapshot, tests) a frozen
array is packed inline like any other array.
"""

from __future__ import annotations

import contextlib
import contextvars
import struct

import msgpack
import numpy as np

from .errors import StateError

__all__ = ["Blob", "Frozen", "RAW_MIN", "SegmentSink", "SegmentSource", "pack_large", "packb",
           "segments", "unpackb"]

_EXT_NDARRAY = 1
_EXT_BIGINT = 2
_EXT_RAW_ARRAY = 3   # data: msgpack [dtype, shape, offset, nbytes] of a raw segment
_EXT_RAW_BYTES = 4   # data: msgpack [offset, nbytes]
# An object array whose elements are 1-D arrays of one fixed-width dtype (a window's buffer of
# list values): their lengths (int64) and their values concatenated, instead of one extension
# per element (3 us each way per element: a DEBS Q3 window buffer holds tens of thousands).
_EXT_RAGGED = 5      # data: msgpack [dtype, shape, count of values], lengths, values
_EXT_RAW_RAGGED = 6  # data: msgpack [dtype, shape, lengths offset, nbytes, values offset, nbytes]
_EXT_ZRAW_ARRAY = 7  # data: msgpack [dtype, shape, offset, compressed nbytes, nbytes] (zstd)
_EXT_FROZEN = 8      # data: msgpack Frozen.ref: [file, dtype, shape, offset, stored nbytes,
                     #   nbytes, codec or None] in a SegmentSink's file
_EXT_TUPLE = 9       # data: msgpack array of the tuple's items (a tuple comes back a tuple, so
                     #   a state's (value, time) pairs still compare equal and key dicts)

#: :func:`pack_large`'s container: 0xc1 (a byte msgpack never uses, so no msgpack document starts
#: with it), a tag, the body's length (little-endian u64), the msgpack body, then the raw
#: segments, each at a multiple of 8 bytes from the first.
_RAW_MAGIC = b"\xc1EPR1"
_RAW_HEAD = len(_RAW_MAGIC) + 8

#: Arrays of at least this many bytes go to raw segments (smaller ones stay msgpack extensions).
RAW_MIN = 1 << 16
#: Raw arrays of at least this many bytes are stored zstd-compressed when that pays
#: (:func:`_compressed`).
ZRAW_MIN = 1 << 20
_ZRAW_KEEP = 0.6   # compressed only if it takes at most this share of the bytes
#: The codec of :class:`Frozen` segments (:class:`SegmentSink`).
SEGMENT_CODEC = "lz4_raw"
_ZRAW_PROBE = 1 << 16


def _compressed(flat: np.ndarray):
    """zstd (level 1) of the bytes ``flat``, or None when they do not compress to at most
    :data:`_ZRAW_KEEP` of their size; a probe of the first 64 KiB decides first, so that
    incompressible data (random floats) costs little."""
    import pyarrow as pa

    probe = pa.compress(flat[:_ZRAW_PROBE], codec="zstd")
    if probe.size > _ZRAW_KEEP * min(len(flat), _ZRAW_PROBE):
        return None
    out = pa.compress(flat, codec="zstd")
    return out if out.size <= _ZRAW_KEEP * len(flat) else None


class Blob:
    """Bytes :func:`pack_large` stores as a raw segment (read back as ``bytes``): another
    snapshot embedded in a state, without msgpack copying it twice."""

    __slots__ = ("data",)

    def __init__(self, data: bytes):
        self.data = data


class Frozen:
    """An array whose content no later snapshot will change (see the module doc).

    ``array``: the values (None once only the reference is kept); ``ref``: where a
    :class:`SegmentSink` stored them, set by :func:`pack_large` (None: not stored yet). An
    operator keeps the ``ref`` of each frozen part (not the array) and hands the same
    reference to every later snapshot that still holds the part."""

    __slots__ = ("array", "ref")

    def __init__(self, array: np.ndarray | None = None, ref: list | None = None):
        if array is None and ref is None:
            raise ValueError("Frozen needs an array or a reference")
        self.array = array
        self.ref = ref


class SegmentSink:
    """Collects the frozen arrays one snapshot stores for the first time, as the parts of one
    file named ``name`` (written by the caller, before the snapshot that refers to it)."""

    def __init__(self, name: str):
        self.name = name
        self.parts: list = []
        self.size = 0
        #: files every reference of the snapshot points to (this one included when used)
        self.files: set[str] = set()

    def add(self, arr: np.ndarray) -> list:
        import pyarrow as pa

        arr = _contiguous(arr)
        flat = arr.reshape(-1).view(np.uint8)
        # LZ4 (raw blocks), not zstd: a segment is compressed once and decompressed at every
        # restore of the snapshots that refer to it. A DEBS window's running sums: zstd 11x at
        # 0.6 GB/s back, LZ4 6x at 5.4 GB/s.
        z = pa.compress(flat, codec=SEGMENT_CODEC) if flat.nbytes >= 4096 else None
        if z is not None and z.size > _ZRAW_KEEP * flat.nbytes:
            z = None
        data = flat if z is None else z
        n = data.nbytes if z is None else z.size
        off = self.size
        self.parts.append(data)
        pad = _pad8(n)
        if pad:
            self.parts.append(b"\0" * pad)
        self.size += n + pad
        self.files.add(self.name)
        return [self.name, arr.dtype.str, list(arr.shape), off, n, flat.nbytes,
                None if z is None else SEGMENT_CODEC]


class SegmentSource:
    """Reads the arrays of :class:`Frozen` references: ``read(name)`` returns a file's bytes
    (each file is read once per source). The arrays may be read-only views of those bytes: an
    operator copies what it keeps (as it joins its segments)."""

    def __init__(self, read):
        self._read = read
        self._files: dict[str, memoryview] = {}

    def array(self, ref: list) -> np.ndarray:
        try:
            if len(ref) == 6:   # this session's first form: zstd when stored smaller
                name, dtype, shape, off, n, nbytes = ref
                codec = "zstd" if n < nbytes else None
            else:
                name, dtype, shape, off, n, nbytes, codec = ref
        except (TypeError, ValueError):
            raise StateError(f"corrupt state: a frozen segment reference {ref!r}") from None
        mv = self._files.get(name)
        if mv is None:
            try:
                mv = memoryview(self._read(name)).cast("B")
            except FileNotFoundError:
                raise StateError(f"state segment file {name!r} is missing; the snapshot "
                                 "refers to it (was the state directory pruned by hand?)") from None
            self._files[name] = mv
        if off < 0 or n < 0 or off + n > len(mv):
            raise StateError(f"corrupt state: a segment lies beyond the end of {name!r}")
        dt = np.dtype(dtype)
        if codec is not None:
            import pyarrow as pa

            if codec not in ("lz4_raw", "zstd"):
                raise StateError(f"corrupt state: segment codec {codec!r}")
            raw = pa.decompress(mv[off:off + n], nbytes, codec=codec)
            if raw.size != nbytes:
                raise StateError("corrupt state: a compressed segment's size does not match")
            arr = np.frombuffer(raw, dtype=dt, count=nbytes // dt.itemsize)
        else:
            # a read-only view of the file's bytes (the reader copies what it keeps)
            arr = np.frombuffer(mv, dtype=dt, count=nbytes // dt.itemsize, offset=off)
        return arr.reshape(shape)


_SINK: contextvars.ContextVar = contextvars.ContextVar("epic_segment_sink", default=None)
_SOURCE: contextvars.ContextVar = contextvars.ContextVar("epic_segment_source", default=None)


@contextlib.contextmanager
def segments(sink: SegmentSink | None = None, source: SegmentSource | None = None):
    """Within the block, :func:`pack_large` stores :class:`Frozen` arrays in ``sink`` and
    :func:`unpackb` resolves their references from ``source``."""
    t1 = _SINK.set(sink)
    t2 = _SOURCE.set(source)
    try:
        yield
    finally:
        _SINK.reset(t1)
        _SOURCE.reset(t2)


def _ragged(arr: np.ndarray):
    """``(dtype, lengths, values)`` of an object array whose elements are all 1-D numpy arrays
    of one fixed-width dtype (values concatenated in order); else None."""
    flat = arr.ravel()
    if not len(flat):
        return None
    first = flat[0]
    if type(first) is not np.ndarray or first.ndim != 1 or first.dtype.hasobject:
        return None
    dt = first.dtype
    for x in flat:
        if type(x) is not np.ndarray or x.ndim != 1 or x.dtype != dt:
            return None
    parts = flat.tolist()
    lengths = np.fromiter(map(len, parts), np.int64, len(parts))
    values = np.concatenate(parts) if int(lengths.sum()) else np.empty(0, dt)
    return dt, lengths, values.astype(dt, copy=False)


def _from_ragged(shape, lengths: np.ndarray, values: np.ndarray) -> np.ndarray:
    """The object array of :func:`_ragged`: its elements views of ``values`` (fresh memory)."""
    parts = np.split(values, np.cumsum(lengths)[:-1]) if len(lengths) else []
    out = np.empty(len(parts), dtype=object)
    for i, x in enumerate(parts):   # element by element: equal lengths must not broadcast
        out[i] = x
    return out.reshape(shape)


def _default(obj, default=None):
    """msgpack's ``default`` hook: numpy arrays as extension types, then :func:`_base_value`
    (``default``: the hook a tuple's items are packed with, :func:`pack_large`'s there)."""
    if isinstance(obj, np.ndarray):
        if obj.dtype.hasobject:
            r = _ragged(obj)
            if r is not None:
                dt, lengths, values = r
                header = msgpack.packb([dt.str, list(obj.shape), len(values)])
                return msgpack.ExtType(_EXT_RAGGED,
                                       header + lengths.tobytes() + values.tobytes())
            return msgpack.ExtType(_EXT_NDARRAY, _pack_obj_array(obj))
        arr = _contiguous(obj)
        header = msgpack.packb([arr.dtype.str, list(arr.shape)])
        return msgpack.ExtType(_EXT_NDARRAY, header + arr.tobytes())
    base = _base_value(obj, default or _default)
    if base is not _NONE:
        return base
    if isinstance(obj, (set, frozenset)):
        raise StateError(f"state holds a {type(obj).__name__} ({_short(obj)}), which cannot be "
                         "checkpointed. Fix: use a sorted list, or a dict with True values")
    raise StateError(
        f"state holds a {type(obj).__module__}.{type(obj).__qualname__} ({_short(obj)}), which "
        "cannot be checkpointed without pickle. Fix: use numbers, str, bytes, lists, dicts or "
        "numpy arrays"
    )


def _contiguous(arr: np.ndarray) -> np.ndarray:
    """``arr`` in C order, its shape kept (``np.ascontiguousarray`` makes a 0-d array 1-d)."""
    return arr if arr.flags.c_contiguous else arr.copy(order="C")


#: msgpack packs state strictly (``strict_types``): exact ints, floats, strs, bytes, lists and
#: dicts at C speed; everything else goes to the ``default`` hook, so a tuple is not packed as an
#: array (which would come back as a list) and a subclass is packed as its base value.
_STRICT = {"use_bin_type": True, "strict_types": True}
_NONE = object()


def _base_value(obj, default):
    """What strict packing hands to ``default`` that msgpack can hold: a tuple as
    :data:`_EXT_TUPLE` (its items packed with ``default`` too), a numpy scalar as its Python
    value, a subclass of a msgpack type (``IntEnum``, a ``str`` enum, ``defaultdict``, a
    namedtuple, ``np.float64``) as its base value, an int beyond 64 bits as
    :data:`_EXT_BIGINT`; :data:`_NONE` for anything else."""
    if isinstance(obj, tuple):
        return msgpack.ExtType(_EXT_TUPLE, msgpack.packb(list(obj), default=default, **_STRICT))
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, bool):
        return bool(obj)
    if isinstance(obj, int):
        v = int(obj)
        if -2**63 <= v < 2**64 and type(obj) is not int:
            return v
        return msgpack.ExtType(_EXT_BIGINT, str(v).encode())
    if isinstance(obj, float):
        return float(obj)
    if isinstance(obj, str):
        return str.__str__(obj)
    if isinstance(obj, (bytes, bytearray)):
        return bytes(obj)
    if isinstance(obj, dict):
        return dict(obj)
    if isinstance(obj, list):
        return list(obj)
    return _NONE


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
        return np.frombuffer(data, dtype=np.dtype(dtype), offset=offset).reshape(shape).copy()
    if code == _EXT_RAGGED:
        unpacker = msgpack.Unpacker(raw=False)
        unpacker.feed(data)
        dtype, shape, nvals = unpacker.unpack()
        offset = unpacker.tell()
        n = int(np.prod(shape)) if shape else 1
        dt = np.dtype(dtype)
        if offset + 8 * n + nvals * dt.itemsize != len(data):
            raise StateError("corrupt state: a ragged array's lengths do not match its data")
        lengths = np.frombuffer(data, np.int64, n, offset)
        if int(lengths.sum()) != nvals or (n and lengths.min() < 0):
            raise StateError("corrupt state: a ragged array's lengths do not match its data")
        values = np.frombuffer(data, dt, nvals, offset + 8 * n).copy()
        return _from_ragged(shape, lengths, values)
    if code == _EXT_BIGINT:
        return int(data.decode())
    if code == _EXT_FROZEN:
        return _frozen(data)
    if code == _EXT_TUPLE:
        return tuple(msgpack.unpackb(data, ext_hook=_ext_hook, raw=False, strict_map_key=False,
                                     use_list=True))
    raise StateError(f"unknown msgpack extension type {code} in state")


def _frozen(ext) -> Frozen:
    """A :class:`Frozen` reference read back: with its array when a :class:`SegmentSource` is
    active, else the reference alone (a reader that only looks at other fields)."""
    ref = msgpack.unpackb(ext)
    source = _SOURCE.get()
    return Frozen(None if source is None else source.array(ref), ref)


def _pad8(n: int) -> int:
    return -n % 8


def pack_large(value, raw_min: int | None = None, join: bool = True) -> bytes | list:
    """:func:`packb`, with arrays of at least ``raw_min`` bytes (not of objects) and
    :class:`Blob` values as raw segments after the msgpack body: one copy of each.

    ``join=False``: the parts (bytes and buffers viewing the values' memory) whose
    concatenation that is, for a writer that writes them one after another (no copy at all).
    ``raw_min`` None: :data:`RAW_MIN`."""
    if raw_min is None:
        raw_min = RAW_MIN
    segs: list = []
    at = [0]

    def seg(buf, n: int) -> int:
        off = at[0]
        segs.append(buf)
        pad = _pad8(n)
        if pad:
            segs.append(b"\0" * pad)
        at[0] += n + pad
        return off

    sink = _SINK.get()

    def default(obj):
        if isinstance(obj, Frozen):
            if sink is None:
                if obj.array is None:
                    return msgpack.ExtType(_EXT_FROZEN, msgpack.packb(obj.ref))
                return default(obj.array)
            if obj.ref is None:
                obj.ref = sink.add(obj.array)
            sink.files.add(obj.ref[0])
            return msgpack.ExtType(_EXT_FROZEN, msgpack.packb(obj.ref))
        if isinstance(obj, Blob):
            data = memoryview(obj.data).cast("B")
            return msgpack.ExtType(_EXT_RAW_BYTES,
                                   msgpack.packb([seg(data, data.nbytes), data.nbytes]))
        if isinstance(obj, np.ndarray) and obj.dtype.hasobject:
            r = _ragged(obj)
            if r is not None:
                dt, lengths, values = r
                lb, vb = lengths.view(np.uint8), values.view(np.uint8)
                return msgpack.ExtType(_EXT_RAW_RAGGED, msgpack.packb(
                    [dt.str, list(obj.shape), seg(lb, lb.nbytes), lb.nbytes,
                     seg(vb, vb.nbytes), vb.nbytes]))
        if isinstance(obj, np.ndarray) and obj.nbytes >= raw_min and not obj.dtype.hasobject:
            arr = _contiguous(obj)
            flat = arr.reshape(-1).view(np.uint8)
            z = _compressed(flat) if flat.nbytes >= ZRAW_MIN else None
            if z is not None:
                return msgpack.ExtType(_EXT_ZRAW_ARRAY, msgpack.packb(
                    [arr.dtype.str, list(arr.shape), seg(z, z.size), z.size, flat.nbytes]))
            return msgpack.ExtType(_EXT_RAW_ARRAY, msgpack.packb(
                [arr.dtype.str, list(arr.shape), seg(flat, flat.nbytes), flat.nbytes]))
        return _default(obj, default)

    try:
        body = msgpack.packb(value, default=default, **_STRICT)
    except StateError:
        raise
    except (TypeError, ValueError, OverflowError) as exc:
        raise StateError(f"cannot serialise state: {exc}") from exc
    if not segs:
        return body if join else [body]
    parts = [_RAW_MAGIC, struct.pack("<Q", len(body)), body,
             b"\0" * _pad8(_RAW_HEAD + len(body)), *segs]
    return b"".join(parts) if join else parts


def _unpack_large(data) -> object:
    mv = memoryview(data).cast("B")
    if len(mv) < _RAW_HEAD:
        raise StateError("corrupt state: truncated header")
    (blen,) = struct.unpack_from("<Q", mv, len(_RAW_MAGIC))
    end = _RAW_HEAD + blen
    base = end + _pad8(end)
    if end > len(mv):
        raise StateError("corrupt state: truncated body")

    def segment(off: int, n: int) -> int:
        if off < 0 or n < 0 or base + off + n > len(mv):
            raise StateError("corrupt state: a raw segment lies beyond the end")
        return base + off

    def hook(code, ext):
        if code == _EXT_RAW_ARRAY:
            dtype, shape, off, n = msgpack.unpackb(ext)
            dt = np.dtype(dtype)
            start = segment(off, n)
            return np.frombuffer(mv, dtype=dt, count=n // dt.itemsize if dt.itemsize else 0,
                                 offset=start).reshape(shape).copy()
        if code == _EXT_ZRAW_ARRAY:
            import pyarrow as pa

            dtype, shape, off, zn, n = msgpack.unpackb(ext)
            dt = np.dtype(dtype)
            start = segment(off, zn)
            raw = pa.decompress(mv[start:start + zn], n, codec="zstd")   # fresh, writable
            if raw.size != n or (dt.itemsize and n % dt.itemsize):
                raise StateError("corrupt state: a compressed array's size does not match")
            return np.frombuffer(raw, dtype=dt, count=n // dt.itemsize if dt.itemsize else 0
                                 ).reshape(shape)
        if code == _EXT_RAW_BYTES:
            off, n = msgpack.unpackb(ext)
            start = segment(off, n)
            return bytes(mv[start:start + n])
        if code == _EXT_FROZEN:
            return _frozen(ext)
        if code == _EXT_TUPLE:
            return tuple(msgpack.unpackb(ext, ext_hook=hook, raw=False, strict_map_key=False,
                                         use_list=True))
        if code == _EXT_RAW_RAGGED:
            dtype, shape, loff, ln, voff, vn = msgpack.unpackb(ext)
            dt = np.dtype(dtype)
            n = int(np.prod(shape)) if shape else 1
            if ln != 8 * n or (dt.itemsize and vn % dt.itemsize):
                raise StateError("corrupt state: a ragged array's lengths do not match its data")
            lengths = np.frombuffer(mv, np.int64, n, segment(loff, ln))
            values = np.frombuffer(mv, dt, vn // dt.itemsize if dt.itemsize else 0,
                                   segment(voff, vn)).copy()
            if int(lengths.sum()) != len(values) or (len(lengths) and lengths.min() < 0):
                raise StateError("corrupt state: a ragged array's lengths do not match its data")
            return _from_ragged(shape, lengths, values)
        return _ext_hook(code, ext)

    return msgpack.unpackb(mv[_RAW_HEAD:end], ext_hook=hook, raw=False, strict_map_key=False,
                           use_list=True)


def packb(value) -> bytes:
    """Serialise ``value`` to msgpack bytes (numpy arrays as extension types)."""
    try:
        return msgpack.packb(value, default=_default, **_STRICT)
    except StateError:
        raise
    except (TypeError, ValueError, OverflowError) as exc:
        raise StateError(f"cannot serialise state: {exc}") from exc


def unpackb(data: bytes):
    """Inverse of :func:`packb` and :func:`pack_large`."""
    try:
        if data[:len(_RAW_MAGIC)] == _RAW_MAGIC:
            return _unpack_large(data)
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
    return pack_large({"format": fmt, **fields})


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
