"""Window rows are never late at the next window (docs/windows.md, "Event time": "downstream
nodes never find them late"), checked where rows are stamped with times the node's own clock
has passed: a count window's rows at the end of the input (stamped with the stream's last event
time) and a count-by-start window's incomplete window of a key with fewer than ``n`` start
times (stamped ``d_last + 1``, possibly long before other keys' windows)."""

from __future__ import annotations

import warnings

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import epic

SCHEMA = {"k": "int64", "ts": "int64", "v": "int64"}


@st.composite
def streams(draw):
    n = draw(st.integers(1, 25))
    t, rows = 0, []
    for _ in range(n):
        t += draw(st.sampled_from([0, 1, 1, 2, 5]))
        rows.append({"k": draw(st.integers(0, 3)), "ts": t - draw(st.sampled_from([0, 0, 1, 3])),
                     "v": draw(st.integers(-5, 9))})
    return rows


def _run(rows, spec, batch):
    t = epic.Topology("down")
    s = t.source("s", epic.iterator_source(rows, schema=SCHEMA, time="ts", unit="s",
                                           batch_rows=batch))
    w = t.window("w", s, spec, key="k", aggregates=[epic.count("n")], late="drop")
    d = t.window("d", w, epic.tumbling(1000, origin=-1000), aggregates=[epic.sum("n", name="rows")])
    t.sink("o", w, epic.collect_sink())
    t.sink("dd", d, epic.collect_sink())
    t.sink("dl", t.late("d_late", d), epic.collect_sink())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return epic.run(t).collected


SPECS = [lambda: epic.tumbling_count(2, lateness=3), lambda: epic.sliding_count(3, 1),
         lambda: epic.few_count(4, 2, 1), lambda: epic.tumbling_count(3),
         lambda: epic.count_by_start(2), lambda: epic.count_by_start(3, lateness=3)]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=streams(), spec=st.sampled_from(range(len(SPECS))), batch=st.integers(1, 6))
def test_count_window_rows_are_never_late_downstream(rows, spec, batch):
    got = _run(rows, SPECS[spec](), batch)
    assert got["dl"].num_rows == 0
    # every window row reached the downstream window
    assert sum(got["dd"].column("rows").to_pylist()) == sum(got["o"].column("n").to_pylist())
    time = "window_end" if spec >= 4 else "ts"
    ts = got["o"].column(time).to_pylist()
    assert ts == sorted(ts)
