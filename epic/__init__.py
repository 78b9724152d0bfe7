"""epic: a Python dataflow DSL with a parallel split/reduce runtime (EPIC / SCSQ style).

Build a :class:`Topology` of named nodes, run it in one process with :func:`run` (``epic run``),
or on Spark with ``epic deploy``. See ``docs/topologies.md``.

Example:
    >>> import epic
    >>> t = epic.Topology("hello")
    >>> s = t.source("nums", epic.iterator_source([{"ts": i, "v": float(i)} for i in range(6)],
    ...              schema={"ts": "int64", "v": "float64"}, time="ts", unit="s"))
    >>> w = t.window("avg", s, epic.tumbling(3), aggregates=[epic.mean("v")])
    >>> _ = t.sink("out", w, epic.collect_sink())
    >>> epic.run(t).collected["out"].column("mean_v").to_pylist()
    [1.0, 4.0]
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from .aggregates import (Aggregate, AggSpec, agg, aggregate_function, collect, count,
                         count_distinct, first, histogram, last, max, mean, min, stddev, sum,
                         variance)
from .errors import (EpicError, InputError, NodeFailure, SpecError, StateError, TopologyError)
from .operator import ENTRY_COLUMN, Operator
from .patterns import Match, StarValue, pattern, star, var
from .process import Context, Processor, processor
from .runner import RunResult, run
from .sinks import collect_sink, console_sink, csv_sink, parquet_sink, topic_sink
from .sources import Watermark, csv_source, iterator_source, parquet_source, topic_source
from .split import (broadcast, combine, hash_partition, pairs_split, round_robin, row_split,
                    vector_split)
from .schemas import as_schema
from .topology import Stream, Topology, TopologyWarning, param
from .windows import (count_by_start, few_count, few_time, landmark, landmark_count,
                      predicate_window, sliding, sliding_count, snapshot_window, tumbling,
                      tumbling_count)

__version__ = "0.1.0"

__all__ = [
    # graph model
    "Topology", "Stream", "param", "as_schema", "TopologyWarning",
    # sources and sinks
    "csv_source", "parquet_source", "topic_source", "iterator_source", "Watermark",
    "csv_sink", "parquet_sink", "topic_sink", "console_sink", "collect_sink",
    # windows
    "few_time", "few_count", "tumbling", "sliding", "landmark", "tumbling_count",
    "sliding_count", "landmark_count", "predicate_window", "snapshot_window", "count_by_start",
    # aggregates
    "Aggregate", "AggSpec", "agg", "aggregate_function", "count", "sum", "mean", "min", "max",
    "variance", "stddev", "first", "last", "count_distinct", "collect", "histogram",
    # splitstream and combine
    "row_split", "pairs_split", "vector_split", "broadcast", "hash_partition", "round_robin",
    "combine",
    # process
    "Processor", "Context", "processor",
    # sequence patterns
    "pattern", "var", "star", "Match", "StarValue",
    # running
    "run", "RunResult", "Operator", "ENTRY_COLUMN",
    # errors
    "EpicError", "SpecError", "TopologyError", "InputError", "StateError", "NodeFailure",
    # Arrow, for convenience in topology files
    "pa", "pc",
]
