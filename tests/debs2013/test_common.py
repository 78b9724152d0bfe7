"""debs2013.common helpers."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from debs2013.common import stable_order


@given(st.lists(st.integers(-40000, 70000), max_size=400), st.sampled_from([0, 41, 300, 40000]),
       st.sampled_from(["int32", "int64", "uint32"]))
def test_stable_order_is_numpys_stable_argsort(values, span, dtype):
    """The same permutation as np.argsort(kind="stable") for keys of any range (narrowed to 8 or
    16 bits only when they fit)."""
    a = np.asarray(values, np.int64)
    if span:
        a = a % span - (span // 3 if dtype != "uint32" else 0)
    a = a.astype(dtype)
    assert np.array_equal(stable_order(a), np.argsort(a, kind="stable"))
