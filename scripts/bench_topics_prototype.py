"""Rough measurement of one stateless mapInArrow hop, topic -> Spark -> topic.

Prints rows/s at 1 M- and 100 K-row segments and the fixed cost per micro-batch (1-row segments),
with CPU-seconds of the whole process tree (driver, JVM, Python workers). Prototype for the real
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

from epic.spark import build_session, read_topic, write_topic  # noqa: E402
from epic.topics import Topic  # noqa: E402

SCHEMA = pa.schema([("ts", pa.int64()), ("key", pa.int64()), ("v", pa.float64())])
TICKS = os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds() -> float:
    """User+system CPU of this process and all its live descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    stats: dict[int, list[str]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        stats[int(d)] = fields
        children.setdefault(int(fields[1]), []).append(int(d))
    total, todo = 0, [os.getpid()]
    while todo:
        pid = todo.pop()
        f = stats.get(pid)
        if f:
            total += int(f[11]) + int(f[12])  # utime, stime
        todo.extend(children.get(pid, []))
    return total / TICKS


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
    print(f"{'run':<12} {'rows':>9} {'batches':>7} {'wall s':>7} {'rows/s':>10}"
          f" {'rows/s in batch':>15} {'med batch ms':>12} {'CPU us/row':>10} {'CPU s/batch':>11}")
    for r in runs:
        print(f"{r['name']:<12} {r['rows']:>9} {r['batches']:>7} {r['wall_s']:>7.2f}"
              f" {r['rows_per_s']:>10.0f} {r['rows_per_s_in_batches']:>15.0f}"
              f" {r['median_batch_ms']:>12.0f} {r['cpu_us_per_row']:>10.2f}"
              f" {r['cpu_s_per_batch']:>11.2f}")
    print("segments per micro-batch: _x1 = 1 (one task), _x2 = 2 (both cores)")


if __name__ == "__main__":
    main()
