#!/usr/bin/env python
"""Sliding windows on Spark (issue 4, section 7): epic deploy against Spark's built-in window().

Workload: 16 keys x 200 Hz x 600 s = 1.92 M events (ms event time, in time order); per key a 60 s
window sliding every 1 s (aligned to 0), mean and max of ``v``. Four ways, in one process, the
SparkSession shared (started before any timing):

* ``epic deploy``: source -> keyed window -> Parquet sink, one query per node; timed from the first
  query start to the sink's end of stream (``DeployResult.seconds``);
* Spark built-in: ``groupBy(window(ts, "60 seconds", "1 second"), key).agg(avg, max)`` over the
  same Parquet file, timed from the action's start to its result (each row is copied into 60
  windows);
* ``epic run``: the in-process runner on the same topology;
* numpy: per-second partial sums / counts / maxima per key, then 60-wide prefix-sum differences and
  a sliding maximum (the no-engine floor).

Results are compared (row counts, and epic's means against numpy within 1e-9 relative). Target:
epic deploy at least 3x faster than Spark's built-in window. Exit status 1 if missed.

    .venv/bin/python scripts/bench_spark_windows.py [--seconds 600]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchkit.tables import text_table  # noqa: E402

import epic  # noqa: E402

KEYS, HZ = 16, 200
TARGET_SPEEDUP = 3.0


def make_data(seconds: int) -> pa.Table:
    n = KEYS * HZ * seconds
    i = np.arange(n, dtype=np.int64)
    ts = (i // KEYS) * 1000 // HZ  # ms, in time order
    key = i % KEYS
    v = np.sin(i * 0.001) * 10 + (i % 97) * 0.01
    return pa.table({"key": key, "ts": ts, "v": v})


def topology(data_path: str, out: str):
    t = epic.Topology("bench_windows")
    s = t.source("events", epic.parquet_source(data_path, time="ts", unit="ms",
                                               batch_rows=200_000))
    w = t.window("win", s, epic.sliding(60, 1, origin=0), key="key",
                 aggregates=[epic.mean("v"), epic.max("v")])
    t.sink("out", w, epic.parquet_sink(out))
    return t


def numpy_reference(table: pa.Table, seconds: int):
    key = table["key"].to_numpy()
    sec = table["ts"].to_numpy() // 1000
    v = table["v"].to_numpy()
    t0 = time.perf_counter()
    idx = key * seconds + sec
    sums = np.bincount(idx, weights=v, minlength=KEYS * seconds).reshape(KEYS, seconds)
    cnts = np.bincount(idx, minlength=KEYS * seconds).reshape(KEYS, seconds)
    mx = np.full(KEYS * seconds, -np.inf)
    np.maximum.at(mx, idx, v)
    mx = mx.reshape(KEYS, seconds)
    cs = np.concatenate([np.zeros((KEYS, 1)), np.cumsum(sums, axis=1)], axis=1)
    cc = np.concatenate([np.zeros((KEYS, 1)), np.cumsum(cnts, axis=1)], axis=1)
    mean = (cs[:, 60:] - cs[:, :-60]) / (cc[:, 60:] - cc[:, :-60])
    wmax = np.lib.stride_tricks.sliding_window_view(mx, 60, axis=1).max(axis=2)
    return time.perf_counter() - t0, mean, wmax


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=int, default=600)
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--fuse", choices=("both", "on", "off"), default="both",
                    help="epic deploy with --fuse (one query: source+window+sink), without, or "
                         "both (default); the target is checked on the fastest")
    args = ap.parse_args()
    from epic.spark import build_session
    from epic.spark.runtime import deploy

    base = args.workdir or tempfile.mkdtemp(prefix="bench_spark_windows_")
    shutil.rmtree(base, ignore_errors=True)
    os.makedirs(base)
    table = make_data(args.seconds)
    data = os.path.join(base, "events.parquet")
    pq.write_table(table, data, row_group_size=200_000)
    t0 = time.perf_counter()
    spark = build_session("local[2]", app_name="bench_spark_windows")
    session_s = time.perf_counter() - t0

    rows = {}
    times = {}
    variants = {"both": (False, True), "on": (True,), "off": (False,)}[args.fuse]
    deps = {}
    for fuse in variants:
        label = "epic deploy --fuse" if fuse else "epic deploy"
        out = os.path.join(base, f"deploy{'_fused' if fuse else ''}.parquet")
        r = deploy(topology(data, out), os.path.join(base, f"wd{'_fused' if fuse else ''}"),
                   spark=spark, timeout=1800, fuse=fuse)
        times[label] = r.seconds
        deps[label] = pq.read_table(out)
        rows[label] = deps[label].num_rows
    labels = list(deps)

    from pyspark.sql import functions as F

    df = spark.read.parquet(data).withColumn("t", F.timestamp_millis("ts"))
    q = (df.groupBy(F.window("t", "60 seconds", "1 second"), "key")
         .agg(F.avg("v").alias("mean_v"), F.max("v").alias("max_v")))
    t0 = time.perf_counter()
    res = q.collect()
    times["spark window()"] = time.perf_counter() - t0
    rows["spark window()"] = len(res)

    t0 = time.perf_counter()
    run = epic.run(topology(data, os.path.join(base, "run.parquet")))
    times["epic run"] = time.perf_counter() - t0
    rows["epic run"] = pq.read_table(os.path.join(base, "run.parquet")).num_rows
    del run

    times["numpy"], mean, wmax = numpy_reference(table, args.seconds)
    rows["numpy"] = mean.size

    # epic's complete windows against numpy: window_start = s .. s+60 for s >= 0.
    ok = True
    for dep in deps.values():
        d = dep.to_pydict()
        for k, ws, m, x in zip(d["key"], d["window_start"], d["mean_v"], d["max_v"]):
            s = ws // 1000
            if 0 <= s < mean.shape[1]:
                ref_m, ref_x = mean[k, s], wmax[k, s]
                if abs(m - ref_m) > 1e-9 * max(1.0, abs(ref_m)) or x != ref_x:
                    ok = False
                    break
    n = table.num_rows
    print(f"# sliding 60 s / 1 s, mean+max, {KEYS} keys x {HZ} Hz x {args.seconds} s = {n:,} "
          f"events; session start {session_s:.1f} s (not counted)")
    print(text_table(["engine", "seconds", "events/s", "rows out"],
                     [[name, f"{times[name]:.2f}", f"{n / times[name]:,.0f}", f"{rows[name]:,}"]
                      for name in (*labels, "spark window()", "epic run", "numpy")],
                     left=("engine",)))
    for name in labels:
        print(f"\n{name} vs Spark window(): {times['spark window()'] / times[name]:.2f}x")
    best = min(times[name] for name in labels)
    speedup = times["spark window()"] / best
    print(f"best epic deploy vs Spark window(): {speedup:.2f}x (target >= {TARGET_SPEEDUP}x); "
          f"epic means/maxima equal numpy: {ok}")
    failed = speedup < TARGET_SPEEDUP or not ok
    if failed:
        print("TARGET MISSED", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
