"""Windows: specs and grid (:mod:`.spec`), the incremental engine (:mod:`.engine`), the prefix-sum
engine (:mod:`.prefix`) and predicate windows (:mod:`.predicate`). The exact semantics, with
diagrams, are in ``docs/windows.md``; event time (watermarks, lateness, late rows) is
:mod:`epic.timecore`'s.
"""

from __future__ import annotations

from typing import Sequence

import pyarrow as pa

from ..aggregates import AggSpec
from .engine import WindowOperator
from .predicate import PredicateWindowOperator
from .prefix import PrefixWindowOperator, prefix_eligible
from .spec import (FewCountWindow, FewTimeWindow, PredicateWindow, WindowSpec, check_window,
                   few_count, few_time, landmark, landmark_count, predicate_window, sliding,
                   sliding_count, tumbling, tumbling_count, window_output_schema)

__all__ = [
    "WindowSpec", "FewTimeWindow", "FewCountWindow", "PredicateWindow", "few_time", "few_count",
    "tumbling", "sliding", "landmark", "tumbling_count", "sliding_count", "landmark_count",
    "predicate_window", "check_window", "window_output_schema", "WindowOperator",
    "PredicateWindowOperator", "PrefixWindowOperator", "prefix_eligible", "build_window_operator",
]


def build_window_operator(spec: WindowSpec, aggregates: Sequence[AggSpec], schema: pa.Schema,
                          time: str, unit: str = "s", key=None):
    """The runtime logic for any window spec: predicate windows, prefix sums when every
    aggregate has the group form (:mod:`.prefix`), else the general engine."""
    if isinstance(spec, PredicateWindow):
        return PredicateWindowOperator(spec, aggregates, schema, time, unit, key)
    if prefix_eligible(spec, aggregates):
        return PrefixWindowOperator(spec, aggregates, schema, time, unit, key)
    return WindowOperator(spec, aggregates, schema, time, unit, key)
