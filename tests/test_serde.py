"""epic.serde: snapshots packed with raw segments (pack_large) read back equal to plain msgpack
(packb), arrays writable, corrupt containers refused; plain msgpack still read."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from epic import serde
from epic.errors import StateError

_DTYPES = ["<i8", ">i4", "<f8", "<f4", "|u1", "|b1", "<M8[ns]", "<U3", "<c16"]


@st.composite
def arrays(draw):
    dtype = np.dtype(draw(st.sampled_from(_DTYPES)))
    shape = tuple(draw(st.lists(st.integers(0, 40), min_size=0, max_size=3)))
    n = int(np.prod(shape)) if shape else 1
    raw = np.frombuffer(draw(st.binary(min_size=n * dtype.itemsize, max_size=n * dtype.itemsize)),
                        np.uint8)
    if dtype.kind == "b":
        raw = raw % 2
    if dtype.kind == "U":   # valid code points only
        raw = np.frombuffer((np.frombuffer(raw.tobytes(), np.uint32) % 0xD7FF).tobytes(), np.uint8) \
            if n else raw
    arr = raw.view(dtype).reshape(shape) if n else np.zeros(shape, dtype)
    if draw(st.booleans()) and arr.ndim == 2 and arr.shape[1] > 1:
        arr = arr[:, ::2]   # not contiguous
    return arr


values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1) | st.floats(allow_nan=False)
    | st.text(max_size=5) | st.binary(max_size=8) | arrays()
    | st.binary(max_size=64).map(serde.Blob),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=3), inner,
                                                                 max_size=4)
    | st.lists(inner, max_size=3).map(tuple)
    | st.dictionaries(st.tuples(st.integers(-5, 5), st.text(max_size=2)), inner, max_size=3),
    max_leaves=12)


def _plain(v):
    """What packb -> unpackb gives for ``v`` (a Blob as its bytes)."""
    if isinstance(v, serde.Blob):
        return bytes(v.data)
    if isinstance(v, (list, tuple)):
        return type(v)(_plain(x) for x in v)
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    return v


def _equal(a, b) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype
                and a.shape == b.shape and a.tobytes() == np.ascontiguousarray(b).tobytes())
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_equal, a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    return type(a) is type(b) and a == b


def _arrays(v):
    if isinstance(v, np.ndarray):
        yield v
    elif isinstance(v, (list, tuple)):
        for x in v:
            yield from _arrays(x)
    elif isinstance(v, dict):
        for x in v.values():
            yield from _arrays(x)


@settings(max_examples=100, deadline=None)
@given(values, st.booleans())
def test_values_come_back_as_they_were(value, large):
    """A state reads back equal and of the same types: tuples as tuples (also as dict keys),
    arrays with their shape (0-d included), Blobs as their bytes."""
    data = serde.pack_large(value, raw_min=0) if large else serde.packb(_plain(value))
    assert _equal(serde.unpackb(data), _plain(value))


def test_subclasses_come_back_as_their_base_types():
    import collections
    import enum

    class Level(enum.IntEnum):
        HIGH = 3

    class Mode(str, enum.Enum):
        FAST = "fast"

    class Big(int):
        pass

    point = collections.namedtuple("point", "x y")
    state = {"p": point(1, 2), "d": collections.defaultdict(list, {"a": [1]}),
             "lvl": Level.HIGH, "f": np.float64(0.5), "z": np.array(7),
             Mode.FAST: Mode.FAST, "big": Big(2**70)}
    for data in (serde.packb(state), serde.pack_large(state, raw_min=0)):
        got = serde.unpackb(data)
        assert got["p"] == (1, 2) and type(got["p"]) is tuple
        assert got["d"] == {"a": [1]} and type(got["d"]) is dict
        assert got["lvl"] == 3 and type(got["lvl"]) is int
        assert got["f"] == 0.5 and type(got["f"]) is float
        assert got["z"].shape == () and int(got["z"]) == 7
        assert got["fast"] == "fast" and got["big"] == 2**70


@settings(max_examples=100, deadline=None)   # ~0.1 s each: the recursive values are slow to draw
@given(values, st.sampled_from([0, 1, 16, 1 << 16]))
def test_pack_large_reads_back_as_packb_does(value, raw_min):
    expected = serde.unpackb(serde.packb(_plain(value)))
    data = serde.pack_large(value, raw_min=raw_min)
    assert data[:1] != b"\xc1" or data[:5] == b"\xc1EPR1"
    got = serde.unpackb(data)
    assert _equal(got, expected)
    parts = serde.pack_large(value, raw_min=raw_min, join=False)
    assert b"".join(bytes(p) for p in parts) == data
    for a in _arrays(got):
        assert a.flags.writeable and a.flags.c_contiguous
        if a.size:
            a.reshape(-1)[:1] = a.reshape(-1)[:1]   # really writable


def test_large_arrays_and_blobs_become_raw_segments_and_survive_their_source():
    big = np.arange(100_000, dtype=np.int64)
    blob = bytes(range(256)) * 1000
    data = serde.pack_large({"a": big, "small": np.arange(3), "b": serde.Blob(blob)})
    assert data[:5] == b"\xc1EPR1"
    assert len(data) < big.nbytes + len(blob) + 200   # each stored once, no msgpack copy
    big[:] = -1                                        # the packed bytes do not alias it
    got = serde.unpackb(data)
    assert (got["a"] == np.arange(100_000)).all() and got["b"] == blob
    assert isinstance(got["b"], bytes) and list(got["small"]) == [0, 1, 2]
    # small values only: plain msgpack, byte for byte what packb writes
    assert serde.pack_large({"x": np.arange(3)}) == serde.packb({"x": np.arange(3)})


def test_a_truncated_or_damaged_container_is_refused():
    data = serde.pack_large({"a": np.arange(50_000), "k": 1})
    for cut in (3, 12, 40, len(data) - 1):
        with pytest.raises(StateError, match="corrupt state"):
            serde.unpackb(data[:cut])
    bad = bytearray(data)
    bad[5:13] = (10**9).to_bytes(8, "little")   # a body length beyond the end
    with pytest.raises(StateError, match="corrupt state"):
        serde.unpackb(bytes(bad))


def test_plain_msgpack_snapshots_are_still_read():
    old = serde.packb({"format": "epic.x/1", "a": np.arange(100_000)})   # every array inline
    assert old[:1] != b"\xc1"
    st_ = serde.unpack_state(old, "epic.x/1")
    assert (st_["a"] == np.arange(100_000)).all() and st_["a"].flags.writeable


@st.composite
def ragged(draw):
    """An object array of 1-D arrays of one dtype (a window buffer of list values), sometimes
    2-D, sometimes with all elements of one length (which must not broadcast on unpack)."""
    dtype = np.dtype(draw(st.sampled_from(["<i4", "<i8", "<f8", "|b1", ">i2", "<M8[s]"])))
    n = draw(st.integers(1, 12))
    same = draw(st.booleans())
    k0 = draw(st.integers(0, 4))
    out = np.empty(n, dtype=object)
    for i in range(n):
        k = k0 if same else draw(st.integers(0, 6))
        vals = draw(st.lists(st.integers(0, 100), min_size=k, max_size=k))
        out[i] = np.array(vals, dtype=np.int64).astype(dtype)
    if n % 2 == 0 and draw(st.booleans()):
        out = out.reshape(2, n // 2)
    return out


@settings(max_examples=100, deadline=None)
@given(ragged(), st.sampled_from([0, 1 << 16]))
def test_object_arrays_of_arrays_round_trip_as_one_buffer(arr, raw_min):
    """Elements, dtypes and the shape survive packb and pack_large; the elements are writable
    and independent of the source."""
    for data in (serde.packb({"b": arr}), serde.pack_large({"b": arr}, raw_min=raw_min)):
        got = serde.unpackb(data)["b"]
        assert got.dtype == object and got.shape == arr.shape
        for x, y in zip(arr.ravel(), got.ravel()):
            assert type(y) is np.ndarray and y.dtype == x.dtype and y.ndim == 1
            assert y.tobytes() == x.tobytes()
            if len(y):
                y[:1] = y[:1]   # writable
    # 20,000 elements: one extension, not one per element
    big = np.empty(20_000, dtype=object)
    for i in range(len(big)):
        big[i] = np.arange(i % 7, dtype=np.int32)
    data = serde.pack_large({"b": big})
    assert len(data) < 8 * len(big) + 4 * sum(i % 7 for i in range(len(big))) + 400


def test_object_arrays_of_mixed_values_keep_the_element_form():
    mixed = np.empty(3, dtype=object)
    mixed[0], mixed[1], mixed[2] = np.arange(2), np.arange(2.0), "x"
    nested = np.empty(2, dtype=object)
    nested[0], nested[1] = np.arange(2), np.empty(0, dtype=object)
    for arr in (mixed, nested):
        for data in (serde.packb(arr), serde.pack_large(arr, raw_min=0)):
            got = serde.unpackb(data)
            assert [type(x) for x in got] == [type(x) for x in arr]
            assert got[0].dtype == arr[0].dtype and list(got[0]) == list(arr[0])
            assert not isinstance(got[1], np.ndarray) or got[1].dtype == arr[1].dtype


def test_a_ragged_array_with_damaged_lengths_is_refused():
    arr = np.empty(3, dtype=object)
    for i in range(3):
        arr[i] = np.arange(i + 1, dtype=np.int64)
    data = bytearray(serde.packb(arr))
    at = bytes(data).find(np.array([1, 2, 3], np.int64).tobytes())
    assert at > 0
    data[at:at + 8] = np.array([5], np.int64).tobytes()   # lengths 5, 2, 3: 10 values, not 6
    with pytest.raises(StateError, match="corrupt state"):
        serde.unpackb(bytes(data))


def test_large_compressible_arrays_are_stored_compressed_and_read_back_writable():
    """Running sums of one-hot rows (a prefix window's state) take a fraction of their bytes;
    random floats stay raw; a compressed segment cut short is refused as corrupt."""
    rng = np.random.default_rng(3)
    n = 200_000
    onehot = np.zeros((n, 12), np.int64)
    onehot[np.arange(n), rng.integers(0, 12, n)] = rng.integers(1, 10**10, n)
    sums = np.cumsum(onehot, axis=0)
    noise = rng.random(300_000)
    packed = serde.pack_large({"sums": sums, "noise": noise})
    assert len(packed) < noise.nbytes + sums.nbytes // 3
    back = serde.unpackb(packed)
    assert back["sums"].dtype == sums.dtype and back["sums"].shape == sums.shape
    assert np.array_equal(back["sums"], sums) and np.array_equal(back["noise"], noise)
    back["sums"][0, 0] += 1   # fresh and writable, as restore code expects
    alone = serde.pack_large({"noise": noise})
    assert len(alone) >= noise.nbytes   # incompressible: raw
    only = serde.pack_large({"sums": sums})
    with pytest.raises(StateError, match="corrupt"):
        serde.unpackb(only[:len(only) - 1000])


def test_frozen_arrays_are_stored_once_and_referred_to_afterwards():
    """With a segment sink a Frozen array goes to the sink's file (compressed when it pays) and
    the snapshot holds its reference; the next snapshot refers to the same bytes without storing
    them; a source resolves the references; without a source only the references come back;
    without a sink the array is packed inline."""
    import numpy as np

    from epic import serde

    sums = np.cumsum(np.arange(200_000, dtype=np.int64) % 7)     # 1.6 MB, compressible
    noise = np.random.default_rng(1).integers(0, 2**62, 20_000)   # 160 KB, incompressible
    f1, f2 = serde.Frozen(sums), serde.Frozen(noise)
    files = {}
    sink = serde.SegmentSink("3.seg")
    with serde.segments(sink=sink):
        first = serde.pack_large({"a": f1, "b": [f2], "tail": np.arange(5)})
    files[sink.name] = b"".join(bytes(memoryview(p).cast("B")) for p in sink.parts)
    assert f1.ref[0] == f2.ref[0] == "3.seg" and sink.files == {"3.seg"}
    assert len(first) < 1_000                        # references, not arrays
    assert len(files["3.seg"]) < 0.6 * sums.nbytes + noise.nbytes + 64   # compressed
    # later: the operator keeps only the references
    sink2 = serde.SegmentSink("4.seg")
    with serde.segments(sink=sink2):
        second = serde.pack_large({"a": serde.Frozen(None, f1.ref), "tail": np.arange(6)})
    assert not sink2.parts and sink2.files == {"3.seg"}
    with serde.segments(source=serde.SegmentSource(files.__getitem__)):
        got = serde.unpackb(first)
        got2 = serde.unpackb(second)
    assert np.array_equal(got["a"].array, sums) and np.array_equal(got["b"][0].array, noise)
    assert got["a"].ref == f1.ref and np.array_equal(got2["a"].array, sums)
    bare = serde.unpackb(second)
    assert bare["a"].array is None and bare["a"].ref == f1.ref
    inline = serde.unpackb(serde.pack_large({"a": serde.Frozen(sums)}))
    assert isinstance(inline["a"], np.ndarray) and np.array_equal(inline["a"], sums)
    def gone(name):
        raise FileNotFoundError(name)

    with pytest.raises(StateError, match="segment file '3.seg' is missing"):
        with serde.segments(source=serde.SegmentSource(gone)):
            serde.unpackb(first)
