"""Rough measurement of one stateless mapInArrow hop, topic -> Spark -> topic.

Prints rows/s at 1 M- and 100 K-row segments and the fixed cost per micro-batch (1-row segments),
with CPU-seconds of the whole process tree (driver, JVM, Python workers:
``benchkit.proc.tree_cpu_seconds``). Prototype for the real
``scripts/bench_topics.py``; run with ``.venv/bin/python scripts/bench_topics_prototype.py``.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from benchkit.proc import tree_cpu_seconds  # noqa: E402
from benchkit.tables import text_table  # noqa: E402

from epic.spark import build_session, read_topic, write_topic  # noqa: E402
from epic.topics import Topic  # noqa: E402

SCHEMA = pa.schema([("ts", pa.int64()), ("key", pa.int64()), ("v", pa.float64())])


def make_input(path: str, segments: int, rows: int) -> None:
    t = Topic.create(path, SCHEMA, time_column="ts")
    rng = np.random.default_rng(0)
    for i in range(segments):
        ts = np.arange(i * rows, (i + 1) * rows, dtype=np.int64)
        b = pa.record_batch([ts, rng.integers(0, 1000, rows), rng.random(rows)], schema=SCHEMA)
        t.append([b], producer="gen", batch_id=i, watermark=int(ts[-1]) + 1)


def make_node():
    def node(batches):
        import pyarrow.compute as pc

        for b in batches:
            yield pa.RecordBatch.from_arrays([b.column(0), b.column(1),
                                              pc.multiply(b.column(2), 2.0)], schema=b.schema)
    return node


def hop(spark, base: str, name: str, segments: int, rows: int, per_trigger: int) -> dict:
    src, dst, ckpt = (os.path.join(base, name, n) for n in ("in", "out", "ckpt"))
    make_input(src, segments, rows)
    df = read_topic(spark, src, max_segments_per_trigger=per_trigger)
    out = df.mapInArrow(make_node(), df.schema)
    cpu0, t0 = tree_cpu_seconds(), time.perf_counter()
    q = write_topic(out, dst, producer=name, checkpoint=ckpt).trigger(availableNow=True).start()
    q.awaitTermination()
    wall, cpu = time.perf_counter() - t0, tree_cpu_seconds() - cpu0
    assert Topic.open(dst).read_table().num_rows == segments * rows
    prog = [p for p in q.recentProgress if p["numInputRows"] > 0]
    batch_ms = [p["durationMs"]["triggerExecution"] for p in prog]
    total = segments * rows
    return {"name": name, "rows": total, "batches": len(prog), "wall_s": wall, "cpu_s": cpu,
            "rows_per_s": total / wall, "rows_per_s_in_batches": total / (sum(batch_ms) / 1000),
            "median_batch_ms": float(np.median(batch_ms)),
            "cpu_us_per_row": cpu / total * 1e6, "cpu_s_per_batch": cpu / max(1, len(prog))}


def main() -> None:
    t0 = time.perf_counter()
    spark = build_session("local[2]")
    print(f"session start: {time.perf_counter() - t0:.1f} s")
    base = tempfile.mkdtemp(prefix="epic-bench-")
    try:
        hop(spark, base, "warmup", 2, 1000, 1)
        runs = [
            hop(spark, base, "fixed_1row", 20, 1, 1),
            hop(spark, base, "b100k_x1", 20, 100_000, 1),
            hop(spark, base, "b100k_x2", 20, 100_000, 2),
            hop(spark, base, "b1m_x1", 8, 1_000_000, 1),
            hop(spark, base, "b1m_x2", 8, 1_000_000, 2),
        ]
    finally:
        shutil.rmtree(base, ignore_errors=True)
    cols = ["run", "rows", "batches", "wall s", "rows/s", "rows/s in batch", "med batch ms",
            "CPU us/row", "CPU s/batch"]
    print(text_table(cols, [
        [r["name"], r["rows"], r["batches"], f"{r['wall_s']:.2f}", f"{r['rows_per_s']:.0f}",
         f"{r['rows_per_s_in_batches']:.0f}", f"{r['median_batch_ms']:.0f}",
         f"{r['cpu_us_per_row']:.2f}", f"{r['cpu_s_per_batch']:.2f}"] for r in runs],
        left=("run",)))
    print("segments per micro-batch: _x1 = 1 (one task), _x2 = 2 (both cores)")


if __name__ == "__main__":
    main()
