"""Windows: specs and grid (:mod:`.spec`), the incremental engine (:mod:`.engine`), the prefix-sum
engine (:mod:`.prefix`) and predicate windows (:mod:`.predicate`). The exact semantics, with
diagrams, are in ``docs/windows.md``; event time (watermarks, lateness, late rows) is
:mod:`epic.timecore`'s.
"""

from __future__ import annotations

from typing import Sequence

import pyarrow as pa

from ..aggregates import AggSpec
from ..errors import SpecError
from .engine import WindowOperator
from .lifetime import CountByStartOperator, SnapshotWindowOperator
from .predicate import PredicateWindowOperator
from .prefix import PrefixWindowOperator, prefix_eligible
from .spec import (CountByStartWindow, FewCountWindow, FewTimeWindow, PredicateWindow,
                   SnapshotWindow, WindowSpec, check_window, count_by_start, few_count, few_time, landmark, landmark_count, predicate_window, sliding,
                   sliding_count, snapshot_window, tumbling, tumbling_count,
                   window_output_schema, expire_output_schema)

__all__ = [
    "WindowSpec", "FewTimeWindow", "FewCountWindow", "PredicateWindow", "few_time", "few_count",
    "tumbling", "sliding", "landmark", "tumbling_count", "sliding_count", "landmark_count",
    "predicate_window", "SnapshotWindow", "CountByStartWindow", "snapshot_window",
    "count_by_start", "SnapshotWindowOperator", "CountByStartOperator", "expire_output_schema",
    "check_window", "window_output_schema", "WindowOperator",
    "PredicateWindowOperator", "PrefixWindowOperator", "prefix_eligible", "build_window_operator",
]


def build_window_operator(spec: WindowSpec, aggregates: Sequence[AggSpec], schema: pa.Schema,
                          time: str, unit: str = "s", key=None, expire: int | None = None):
    """The runtime logic for any window spec: predicate windows, snapshot and count-by-start
    windows (:mod:`.lifetime`), prefix sums when every aggregate has the group form
    (:mod:`.prefix`), else the general engine.

    ``expire``: the index of the aggregate whose ``expire`` rows the operator emits instead of
    window rows (the node of ``Topology.expired``)."""
    if isinstance(spec, SnapshotWindow):
        return SnapshotWindowOperator(spec, aggregates, schema, time, unit, key, expire)
    if isinstance(spec, CountByStartWindow):
        return CountByStartOperator(spec, aggregates, schema, time, unit, key, expire)
    if expire is not None:
        if isinstance(spec, PredicateWindow):
            raise SpecError("predicate windows have no active expiration (their windows close "
                            "whole); use a time, count, snapshot or count_by_start window")
        return WindowOperator(spec, aggregates, schema, time, unit, key, expire=expire)
    if isinstance(spec, PredicateWindow):
        return PredicateWindowOperator(spec, aggregates, schema, time, unit, key)
    if prefix_eligible(spec, aggregates):
        return PrefixWindowOperator(spec, aggregates, schema, time, unit, key)
    return WindowOperator(spec, aggregates, schema, time, unit, key)
