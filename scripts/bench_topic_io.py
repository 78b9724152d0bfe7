#!/usr/bin/env python
"""Local topic I/O without Spark: 200 single-part commits of 10,000 rows (write_temp +
commit_batch), reading the 2 M rows back, 200 consumer commits, 2000 Topic.open; best of 5 rounds.
Compares trees when run with each first on PYTHONPATH (docs/deploy.md, "Storage").

    PYTHONPATH=. .venv/bin/python scripts/bench_topic_io.py
"""
import tempfile
import time

import numpy as np
import pyarrow as pa

from epic.topics import Topic  # the epic first on PYTHONPATH: compare trees with it

schema = pa.schema([("ts", pa.int64()), ("v", pa.float64())])
b = pa.record_batch([pa.array(np.arange(10000, dtype=np.int64)), pa.array(np.ones(10000))], schema=schema)
def round_():
    d = tempfile.mkdtemp()
    t = Topic.create(d + "/t", schema, time_column="ts")
    t0 = time.perf_counter()
    for i in range(200):
        tmp = t.write_temp([b], producer="p", batch_id=i)
        t.commit_batch("p", i, [tmp], watermark=i)
    t1 = time.perf_counter()
    n = 0
    for s, m, bs in Topic.open(d + "/t").read():
        n += sum(x.num_rows for x in bs)
    t2 = time.perf_counter()
    t.register_consumer("c")
    for i in range(200):
        t.commit_consumer("c", i + 1)
    t3 = time.perf_counter()
    for i in range(2000):
        Topic.open(d + "/t")
    t4 = time.perf_counter()
    assert n == 2_000_000
    return t1 - t0, t2 - t1, t3 - t2, t4 - t3
res = [round_() for _ in range(5)]
best = [min(r[i] for r in res) for i in range(4)]
print(f"commit 200 batches {best[0]*1e3:.1f} ms | read 2M rows {best[1]*1e3:.1f} ms | "
      f"200 consumer commits {best[2]*1e3:.1f} ms | 2000 opens {best[3]*1e3:.1f} ms")
