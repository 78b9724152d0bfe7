"""The window engine's conversion of aggregate results to Arrow (``to_arrow``): its path for
numpy arrays (under a list type, or dicts of them under a struct of lists) gives what
``pyarrow.array`` gives for the same values, and every other value goes to ``pyarrow.array``
with its checks."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from epic.errors import SpecError
from epic.windows.engine import _list_of_arrays, _struct_of_arrays, to_arrow

HEAT = pa.struct([pa.field("cells", pa.list_(pa.int32())), pa.field("times", pa.list_(pa.int64()))])

_KINDS = [(pa.int8(), np.int8), (pa.int32(), np.int32), (pa.int64(), np.int64),
          (pa.uint16(), np.uint16), (pa.float32(), np.float32), (pa.float64(), np.float64),
          (pa.bool_(), np.bool_)]


def _same(a: pa.Array, b: pa.Array) -> None:
    assert a.type == b.type
    # to_pylist: NaN compares by identity inside lists, so compare the repr of each value
    assert repr(a.to_pylist()) == repr(b.to_pylist())
    assert a.null_count == b.null_count


@st.composite
def _arrays(draw, dtype):
    n = draw(st.integers(0, 40))
    if dtype is np.bool_:
        return np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), np.bool_)
    if np.issubdtype(dtype, np.floating):
        xs = draw(st.lists(st.one_of(st.floats(width=32), st.just(float("nan"))),
                           min_size=n, max_size=n))
        return np.array(xs, dtype)
    info = np.iinfo(dtype)
    return np.array(draw(st.lists(st.integers(int(info.min), int(info.max)), min_size=n,
                                  max_size=n)), dtype)


@settings(max_examples=60, deadline=None)
@given(data=st.data(), kinds=st.lists(st.sampled_from(range(len(_KINDS))), min_size=1,
                                      max_size=3), rows=st.integers(1, 12))
def test_struct_of_numpy_arrays_equals_pyarrow(data, kinds, rows):
    typ = pa.struct([pa.field(f"f{i}", pa.list_(_KINDS[k][0])) for i, k in enumerate(kinds)])
    values = [{f"f{i}": data.draw(_arrays(_KINDS[k][1])) for i, k in enumerate(kinds)}
              for _ in range(rows)]
    fast = _struct_of_arrays(values, typ)
    assert fast is not None
    _same(fast, pa.array(values, type=typ))
    _same(to_arrow(values, typ, "agg"), pa.array(values, type=typ))


@settings(max_examples=40, deadline=None)
@given(data=st.data(), k=st.sampled_from(range(len(_KINDS))), rows=st.integers(1, 12))
def test_list_of_numpy_arrays_equals_pyarrow(data, k, rows):
    typ = pa.list_(_KINDS[k][0])
    values = [data.draw(_arrays(_KINDS[k][1])) for _ in range(rows)]
    _same(to_arrow(values, typ, "agg"), pa.array(values, type=typ))


@pytest.mark.parametrize("values", [
    [{"cells": [1, 2], "times": [3, 4]}],                                   # lists
    [{"cells": np.array([1, 2]), "times": np.array([3, 4])}],               # int64 cells
    [None, {"cells": np.array([1], np.int32), "times": np.array([3])}],     # a null result
    [{"cells": np.array([1], np.int32)}],                                   # a missing field
    [{"cells": np.array([1], np.int32), "times": np.array([3]), "x": 1}],   # an extra key
    [{"cells": np.zeros((1, 1), np.int32), "times": np.array([[3]])}],     # 2-D arrays
    [],
])
def test_other_values_go_to_pyarrow(values):
    """Anything but exact dicts of 1-D arrays of the declared dtypes: pyarrow converts it."""
    assert _struct_of_arrays(values, HEAT) is None
    try:
        want = pa.array(values, type=HEAT)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError):
        with pytest.raises((SpecError, pa.ArrowInvalid, pa.ArrowTypeError, TypeError,
                            ValueError)):
            to_arrow(values, HEAT, "heat")
        return
    _same(to_arrow(values, HEAT, "heat"), want)


def test_values_that_do_not_fit_still_name_the_aggregate():
    """A value outside the declared type goes to pyarrow, and the error names the aggregate."""
    values = [{"cells": np.array([2**40]), "times": np.array([1])}]
    with pytest.raises(SpecError, match="'heat'.*result_type"):
        to_arrow(values, HEAT, "heat")
    with pytest.raises(SpecError, match="'bins'"):
        to_arrow([np.array(["x"])], pa.list_(pa.int64()), "bins")


def test_offsets_past_int32_fall_back(monkeypatch):
    """More values than a list array's int32 offsets hold: not the concatenating path."""
    big = np.zeros(8, np.int64)
    monkeypatch.setattr(np, "iinfo", lambda t: type("I", (), {"max": 7, "min": -8})())
    assert _list_of_arrays([big], pa.list_(pa.int64())) is None
    assert _list_of_arrays([big[:7]], pa.list_(pa.int64())) is not None
