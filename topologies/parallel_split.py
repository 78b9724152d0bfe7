"""Parallel split -> n replicas -> reduce.

A stream of (key, ts, value) events is dealt round robin to ``n`` replicas; each replica counts
the events and takes the maximum value per key in 10-second tumbling windows; the replicas' partial
results are merged back and combined (counts summed, maxima maxed) into the same result a single
window node would give. A second branch hash-partitions by key, so each replica owns whole keys
and only a merge is needed.

    epic run topologies/parallel_split.py -- --replicas 8 --events 100000
"""

import os

import epic

replicas = epic.param("replicas", 4)
events = epic.param("events", 40_000)
out_dir = epic.param("out", "out/parallel_split")


def generate():
    """Deterministic events: 16 keys, 100 events per second, values from a LCG (keys from its
    high bits: its low 4 bits repeat every 16 events, which put each key on one replica)."""
    x = 12345
    for start in range(0, events, 5_000):
        rows = []
        for i in range(start, min(start + 5_000, events)):
            x = (1103515245 * x + 12345) % 2**31
            rows.append({"key": (x >> 16) % 16, "ts": i * 10, "value": x % 1000})
        yield rows and epic.pa.RecordBatch.from_pylist(rows)


topology = epic.Topology("parallel_split")

ev = topology.source("events", epic.iterator_source(
    generate, schema={"key": "int64", "ts": "int64", "value": "int64"}, time="ts", unit="ms"))


def replica(t, part, i):
    # the generated events are in time order: no row can be late, so none is kept
    return t.window("window", part, epic.tumbling(10, origin=0), key="key",
                    aggregates=[epic.count("n"), epic.max("value", name="max_value")],
                    late="drop")


reduced = topology.parallel("rr", ev, replicas, replica, partition=epic.round_robin(),
                            reduce=epic.combine(n="sum", max_value="max"))
by_key = topology.parallel("hash", ev, replicas, replica, partition=epic.hash_partition("key"))

columns = ["key", "window_start", "window_end", "n", "max_value"]
topology.sink("combined", reduced, epic.csv_sink(os.path.join(out_dir, "combined.csv"),
                                                 columns=columns))
topology.sink("by_key", by_key, epic.csv_sink(os.path.join(out_dir, "by_key.csv"),
                                              columns=columns))
