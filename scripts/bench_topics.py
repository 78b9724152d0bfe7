#!/usr/bin/env python
"""Throughput and latency of epic deploy hops over Arrow topics (issue 4, section 7).

Cases (one shared local[2] SparkSession, started before any timing):

* ``chain``: source -> map -> filter -> map -> Parquet sink, ``--rows`` rows in 1 M-row batches;
  per stateless hop: rows / (sum of that query's micro-batch durations);
* ``stateful 16`` / ``stateful 10000``: source -> keyed 1 s tumbling count window -> sink, with 16
  and 10 000 keys; the same rate for the window hop, and its microseconds per row;
* CPU-us per row per hop: CPU time of the machine (``/proc/stat``, ``benchkit.proc``) during the
  case / rows / hops (so it includes Spark's own overhead and the source and sink queries);
* ``latency``: a live source producing 200 K rows/s (20 K-row batches every 0.1 s) with delay
  logging -> map -> CSV sink with delay columns, run for ``--live-seconds`` then stopped; p50/p99
  of write time - entry time.

With ``--fuse both`` (default) every case also runs with ``epic deploy --fuse``: the whole chain is
one query (``src+scale+keep+shift+out``), whose busy time is charged as ONE hop (conservative: it
also does the source and sink work); the latency case then runs fused.

Targets: >= 200 K rows/s per stateless hop (checked on the fused chain when it runs); stateful hop
<= 6 us/row at 16 keys. Exit 1 if missed.

    .venv/bin/python scripts/bench_topics.py [--rows 4000000] [--live-seconds 20] [--fuse both]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchkit.proc import machine_cpu_seconds  # noqa: E402
from benchkit.tables import text_table  # noqa: E402

import epic  # noqa: E402

STATELESS_TARGET = 200_000
STATEFUL_US_TARGET = 6.0


def _batches(rows: int, keys: int, batch: int = 1_000_000):
    def gen():
        for start in range(0, rows, batch):
            n = min(batch, rows - start)
            i = np.arange(start, start + n, dtype=np.int64)
            yield {"key": i % keys, "ts": i // 1000, "v": (i % 1000).astype(np.float64)}
    return gen


SCHEMA = {"key": "int64", "ts": "int64", "v": "float64"}


def chain_topology(rows: int, out: str):
    t = epic.Topology("bench_chain")
    s = t.source("src", epic.iterator_source(_batches(rows, 16), schema=SCHEMA, time="ts",
                                             unit="ms", batch_rows=1_000_000))
    a = t.map("scale", s, lambda b: {"key": b["key"], "ts": b["ts"],
                                     "v": epic.pc.multiply(b["v"], 2.0)})
    f = t.filter("keep", a, lambda b: epic.pc.greater_equal(b["v"], 0.0))
    c = t.map("shift", f, lambda b: {"key": b["key"], "ts": b["ts"],
                                     "v": epic.pc.add(b["v"], 1.0)})
    t.sink("out", c, epic.parquet_sink(out))
    return t, ["scale", "keep", "shift"]


def stateful_topology(rows: int, keys: int, out: str):
    t = epic.Topology(f"bench_state_{keys}")
    s = t.source("src", epic.iterator_source(_batches(rows, keys), schema=SCHEMA, time="ts",
                                             unit="ms", batch_rows=1_000_000))
    w = t.window("count", s, epic.tumbling(1, origin=0), key="key", aggregates=[epic.count()])
    t.sink("out", w, epic.parquet_sink(out))
    return t, ["count"]


def hop_rates(result, hops):
    out = {}
    for h in hops:
        n = result.status["nodes"][h]
        out[h] = n["rows_in"], n.get("busy_ms") or 0
    return out


def run_case(spark, base, name, topo_hops, rows, fuse=False):
    from epic.spark.runtime import deploy

    t, hops = topo_hops
    n_hops = len(hops)
    cpu0 = machine_cpu_seconds()
    r = deploy(t, os.path.join(base, name), spark=spark, timeout=3600, fuse=fuse)
    cpu = machine_cpu_seconds() - cpu0
    if fuse:
        # One query runs source, hops and sink: its busy time is charged as one hop (conservative).
        hops = [q for q in r.status["nodes"] if "+" in q]
    res = []
    for h in hops:
        n = r.status["nodes"][h]
        busy = n["busy_ms"] / 1000.0
        # Fused, Spark counts what the source tasks yield: behind a keyed window that is the
        # window's output, so the case's input rows are used instead.
        n_in = rows if fuse else n["rows_in"]
        res.append((h, n_in, busy, n_in / busy if busy else float("nan"),
                    busy * 1e6 / max(1, n_in)))
    return r.seconds, cpu * 1e6 / (rows * (n_hops + 2)), res


def latency_case(spark, base, seconds: float, fuse: bool = False):
    from epic.spark.runtime import deploy, request_stop

    rate, batch = 200_000, 20_000

    def live():
        i0 = 0
        next_t = time.monotonic()
        while True:
            i = np.arange(i0, i0 + batch, dtype=np.int64)
            i0 += batch
            yield {"key": i % 16, "ts": i // 200, "v": (i % 1000).astype(np.float64)}
            next_t += batch / rate
            time.sleep(max(0.0, next_t - time.monotonic()))

    out = os.path.join(base, "latency.csv")
    t = epic.Topology("bench_latency", delay_logging=True)
    s = t.source("live", epic.iterator_source(live, schema=SCHEMA, time="ts", unit="ms",
                                              bounded=False))
    m = t.map("scale", s, lambda b: {"key": b["key"], "ts": b["ts"],
                                     "v": epic.pc.multiply(b["v"], 2.0)})
    t.sink("out", m, epic.csv_sink(out, delays=True))
    wd = os.path.join(base, "latency")
    threading.Timer(seconds, lambda: request_stop(wd)).start()
    deploy(t, wd, spark=spark, batch_rows=200_000, fuse=fuse)
    import pyarrow.csv as pacsv

    tab = pacsv.read_csv(out)
    d = (tab["write_time"].to_numpy() - tab["entry_time"].to_numpy()) / 1e9
    # Skip the first seconds (query start-up) to measure the steady state.
    t0 = tab["entry_time"].to_numpy().min()
    steady = d[tab["entry_time"].to_numpy() > t0 + 5e9]
    return tab.num_rows, float(np.percentile(steady, 50)), float(np.percentile(steady, 99))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=4_000_000)
    ap.add_argument("--live-seconds", type=float, default=20.0)
    ap.add_argument("--fuse", choices=("both", "on", "off"), default="both",
                    help="run the cases with epic deploy --fuse, without, or both (default)")
    args = ap.parse_args()
    from epic.spark import build_session

    base = tempfile.mkdtemp(prefix="bench_topics_")
    spark = build_session("local[2]", app_name="bench_topics")
    failed = False
    print(f"# {args.rows:,} rows per case, 1 M-row batches, local[2]")
    table = []

    def cases(tag):
        return [("chain", chain_topology(args.rows, os.path.join(base, f"chain{tag}.parquet"))),
                ("stateful 16", stateful_topology(args.rows, 16,
                                                  os.path.join(base, f"s16{tag}.parquet"))),
                ("stateful 10000", stateful_topology(args.rows, 10_000,
                                                     os.path.join(base, f"s10k{tag}.parquet")))]
    variants = {"both": (False, True), "on": (True,), "off": (False,)}[args.fuse]
    runs = [(f"{name} --fuse" if fuse else name, th, fuse)
            for fuse in variants for name, th in cases("_fused" if fuse else "")]
    for name, th, fuse in runs:
        wall, cpu_us, res = run_case(spark, base, name.replace(" ", "_"), th, args.rows, fuse)
        name = name.replace(" --fuse", "+fuse")
        for h, rows, busy, rate, us in res:
            if fuse:
                h = "fused"
            table.append([name, h, f"{rows:,}", f"{busy:.2f}", f"{rate:,.0f}", f"{us:.2f}",
                          f"{cpu_us:.2f}", f"{wall:.1f}"])
            print(f"  {name} {h}: {rate:,.0f} rows/s, {us:.2f} us/row", flush=True)
            if name == "chain" and rate < STATELESS_TARGET and variants == (False,):
                failed = True
            if name == "chain+fuse" and rate < STATELESS_TARGET:
                failed = True
            if name == "stateful 16" and us > STATEFUL_US_TARGET:
                failed = True
    print(text_table(["case", "hop", "rows", "busy s", "rows/s per hop", "us/row",
                      "CPU-us/row/hop", "wall s"], table, left=("case", "hop")))
    n, p50, p99 = latency_case(spark, base, args.live_seconds, fuse=variants[-1])
    print(f"\nlive producer 200 K rows/s for {args.live_seconds:.0f} s, source -> map -> CSV"
          f"{' (--fuse: one query)' if variants[-1] else ''}: "
          f"{n:,} rows, end-to-end latency p50 {p50:.2f} s, p99 {p99:.2f} s (first 5 s skipped)")
    shutil.rmtree(base, ignore_errors=True)
    if failed:
        print("TARGET MISSED", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
