#!/usr/bin/env python
"""Throughput and latency of epic deploy hops over Arrow topics (issues 4 and 16).

Runs ``epic deploy`` (its direct I/O: tasks read and write the topic files, Spark carries one
commit message per task). Cases (one shared local[2] SparkSession, started
before any timing):

* ``chain``: source -> map -> filter -> map -> Parquet sink, ``--rows`` rows in 1 M-row batches;
  per stateless hop: rows / (sum of that query's micro-batch durations);
* ``single``: source -> map -> Parquet sink: one stateless hop (fewer queries sharing the cores;
  shown, not checked);
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

Per hop it also shows micro-batches, ms per micro-batch and where the busy time goes (Spark's
``durationMs`` phases, collected by a ``StreamingQueryListener``: ``addBatch`` runs the tasks,
``latestOffset`` plans, ``walCommit`` / ``commitOffsets`` write Spark's logs), and per case the
CPU seconds of the benchmark's process tree by process kind (JVM, query planners, task workers,
commit runners, the processes Spark starts for each query's data sources; sampled every 0.5 s).

An untimed warm-up runs the chain first (``--warmup-rows``, 1 M; per ``--fuse`` variant): without
it the first case carries the JVM's JIT compilation of Spark's and the data sources' paths (the
chain's hops measured 0.31-0.44 M rows/s cold against 1.8-2.3 M warm, same session).

Targets (issue 16, point 3): >= 1 M rows/s per stateless hop at 1 M-row batches, stateful hop
<= 1 us/row at 16 keys, checked on the unfused hops (on the fused ones when only ``--fuse on``
runs). Prints the table; exit 1 if a target is missed. Results go to ``--json``; ``--write-docs``
regenerates the section of docs/performance.md between the ``bench_topics`` markers
(``benchkit/topics_report.py``), also from a saved file with ``--from-json``.

    .venv/bin/python scripts/bench_topics.py [--rows 4000000] [--live-seconds 20] [--fuse both]
    .venv/bin/python scripts/bench_topics.py --from-json out/bench_topics/results.json --write-docs
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shlex
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchkit import topics_report as report  # noqa: E402
from benchkit.proc import argv_of, cpu_by_pid, machine_cpu_seconds, uptime  # noqa: E402

import epic  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
STATELESS_TARGET = 1_000_000
STATEFUL_US_TARGET = 1.0
BATCH_ROWS = 1_000_000


def _batches(rows: int, keys: int, batch: int = BATCH_ROWS):
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


def single_topology(rows: int, out: str):
    """source -> one map -> Parquet sink: one stateless hop, with less company on the two cores
    than the chain's three (tells a hop's own cost from waiting for a core)."""
    t = epic.Topology("bench_single")
    s = t.source("src", epic.iterator_source(_batches(rows, 16), schema=SCHEMA, time="ts",
                                             unit="ms", batch_rows=1_000_000))
    a = t.map("scale", s, lambda b: {"key": b["key"], "ts": b["ts"],
                                     "v": epic.pc.multiply(b["v"], 2.0)})
    t.sink("out", a, epic.parquet_sink(out))
    return t, ["scale"]


def stateful_topology(rows: int, keys: int, out: str):
    t = epic.Topology(f"bench_state_{keys}")
    s = t.source("src", epic.iterator_source(_batches(rows, keys), schema=SCHEMA, time="ts",
                                             unit="ms", batch_rows=1_000_000))
    w = t.window("count", s, epic.tumbling(1, origin=0), key="key", aggregates=[epic.count()])
    t.sink("out", w, epic.parquet_sink(out))
    return t, ["count"]


class Phases:
    """Spark's micro-batch phases (``durationMs``) per query name, summed over the micro-batches
    with input (those the status' ``busy_ms`` counts), from a ``StreamingQueryListener``."""

    def __init__(self, spark):
        from pyspark.sql.streaming import StreamingQueryListener

        self.by_query: dict[str, dict[str, int]] = {}
        self.batches: dict[str, int] = {}
        phases = self

        class _Listener(StreamingQueryListener):
            def onQueryStarted(self, event):
                pass

            def onQueryProgress(self, event):
                p = event.progress
                if not p.numInputRows:
                    return
                d = phases.by_query.setdefault(p.name, {})
                phases.batches[p.name] = phases.batches.get(p.name, 0) + 1
                for k, v in (p.durationMs or {}).items():
                    d[k] = d.get(k, 0) + int(v)

            def onQueryIdle(self, event):
                pass

            def onQueryTerminated(self, event):
                pass

        self.listener = _Listener()
        spark.streams.addListener(self.listener)

    def take(self, name: str) -> tuple[dict[str, int], int]:
        """(summed phases in ms, micro-batches with input) of query ``name``."""
        return self.by_query.pop(name, {}), self.batches.pop(name, 0)


def process_kind(pid: int) -> str:
    """What a process of this benchmark's tree is, from its command line."""
    if pid == os.getpid():
        return "driver"
    cmd = " ".join(argv_of(pid))   # a zygote child's real command line (epic/spark/zygote.py)
    if not cmd.strip():
        return "ended"    # a zombie: ended, not yet reaped
    if "epic-zygote-" in cmd or "epic.spark.zygote" in cmd:
        return "zygote and relays"
    if "java" in cmd.split(" ")[0]:
        return "JVM"
    if "streaming_source_runner" in cmd:
        return "query planners"    # every query's Python data source planner
    if "streaming_sink_runner" in cmd:
        return "sink commit runners"
    if "pyspark.daemon" in cmd or "pyspark.worker" in cmd:
        words = cmd.split()
        mod = words[-1].rsplit(".", 1)[-1] if words[-1].startswith("pyspark.sql.") else ""
        # plain daemon forks run the tasks; the data source daemons start queries and writers
        return f"Python {mod}" if mod else "Python task workers"
    return "other: " + " ".join(cmd.split(" ")[:3])[:60]


class CpuWatch:
    """Samples the benchmark's process tree every ``every`` s: each process's CPU seconds as last
    seen and its kind as first seen (so short-lived query processes count too)."""

    def __init__(self, every: float = 0.5):
        self.every = every
        self.seen: dict[int, list] = {}      # pid -> [cpu s, kind]
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, daemon=True)

    def sample(self) -> None:
        for p, c in cpu_by_pid(os.getpid()).items():
            if p in self.seen:
                self.seen[p][0] = max(self.seen[p][0], c)
            else:
                self.seen[p] = [c, process_kind(p)]

    def _loop(self):
        while not self._stop.wait(self.every):
            self.sample()

    def start(self) -> CpuWatch:
        self.sample()
        self._t.start()
        return self

    def snapshot(self) -> dict[int, tuple[float, str]]:
        self.sample()
        return {p: (c, k) for p, (c, k) in self.seen.items()}

    def stop(self) -> None:
        self._stop.set()


def cpu_by_kind(before: dict, after: dict) -> dict[str, list]:
    """``{kind: [CPU seconds, processes]}`` between two snapshots, for the processes that used
    CPU (a process reaped in between is missed: its CPU is not in ``after``; an ended one not
    yet reaped counts as ``ended``)."""
    out: dict[str, list] = {}
    for p, (c, kind) in after.items():
        old = before.get(p)
        if old is not None and kind == "ended":
            kind = old[1]
        d = c - (old[0] if old else 0.0)
        if d > 0.005:
            acc = out.setdefault(kind, [0.0, 0])
            acc[0] = round(acc[0] + d, 2)
            acc[1] += 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1][0]))


def run_case(spark, phases, watch, base, name, topo_hops, rows, fuse=False,
             trigger: float = 0.1) -> list[dict]:
    from epic.spark.runtime import deploy

    t, hops = topo_hops
    n_hops = len(hops)
    phases.by_query.clear()
    cpu0, snap0 = machine_cpu_seconds(), watch.snapshot()
    r = deploy(t, os.path.join(base, name.replace(" ", "_")), spark=spark, timeout=3600,
               fuse=fuse, batch_rows=BATCH_ROWS, trigger_interval=trigger)
    cpu = machine_cpu_seconds() - cpu0
    kinds = cpu_by_kind(snap0, watch.snapshot())
    time.sleep(0.5)   # the listener's last progress events arrive asynchronously
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
        ph, batches = phases.take(h)
        res.append({"case": name.replace(" --fuse", "+fuse"), "hop": "fused" if fuse else h,
                    "query": h, "fused": fuse, "rows": n_in, "batches": batches,
                    "busy_s": busy, "ms_per_batch": busy * 1000 / batches if batches else None,
                    "rows_per_s": n_in / busy if busy else None,
                    "us_per_row": busy * 1e6 / max(1, n_in),
                    "cpu_us_per_row_hop": cpu * 1e6 / (rows * (n_hops + 2)),
                    "wall_s": r.seconds, "phases_ms": ph, "machine_cpu_s": round(cpu, 2),
                    "cpu_by_kind": kinds})
    return res


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=4_000_000)
    ap.add_argument("--warmup-rows", type=int, default=1_000_000,
                    help="rows of an untimed chain run first (0: none)")
    ap.add_argument("--trigger", type=float, default=0.1,
                    help="seconds between micro-batch triggers of each query (deploy's default)")
    ap.add_argument("--live-seconds", type=float, default=20.0,
                    help="seconds of the live-latency case (0: skip it)")
    ap.add_argument("--fuse", choices=("both", "on", "off"), default="both",
                    help="run the cases with epic deploy --fuse, without, or both (default)")
    ap.add_argument("--json", type=Path, default=ROOT / "out" / "bench_topics" / "results.json",
                    help="where the results are written")
    ap.add_argument("--from-json", type=Path, default=None,
                    help="re-print (and with --write-docs re-render) a results.json; run nothing")
    ap.add_argument("--write-docs", action="store_true",
                    help="regenerate the bench_topics section of docs/performance.md")
    ap.add_argument("--notes", type=Path, default=None, help="markdown appended to the section")
    ap.add_argument("--doc", type=Path, default=ROOT / "docs" / "performance.md")
    args = ap.parse_args(argv)
    if args.from_json is not None:
        results = json.loads(args.from_json.read_text())
    else:
        results = measure(args, argv)
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1))
        print(f"results: {args.json}")
    print(report.table_text(results))
    for line in report.cpu_lines(results):
        print(line)
    lat = report.latency_line(results)
    if lat:
        print("\n" + lat)
    if args.write_docs:
        report.write_docs(results, args.notes.read_text() if args.notes else "", args.doc)
        print(f"wrote {args.doc}")
    miss = report.misses(results)
    for m in miss:
        print(f"TARGET MISSED: {m}", file=sys.stderr)
    if not miss:
        print("all targets met")
    return 1 if miss else 0


def measure(args, argv) -> dict:
    from epic.spark import build_session

    base = tempfile.mkdtemp(prefix="bench_topics_")
    spark = build_session("local[2]", app_name="bench_topics")
    phases = Phases(spark)
    watch = CpuWatch().start()
    results = {
        "argv": ".venv/bin/python scripts/bench_topics.py "
                + shlex.join(sys.argv[1:] if argv is None else argv),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{os.cpu_count()}-CPU {platform.machine()} VM, Python "
                   f"{platform.python_version()}",
        "io": "direct", "rows": args.rows, "batch_rows": BATCH_ROWS,
        "stateless_target": STATELESS_TARGET, "stateful_us_target": STATEFUL_US_TARGET,
        "load_start": uptime(), "hops": [],
    }
    print(f"# {args.rows:,} rows per case, {BATCH_ROWS:,}-row batches, local[2], direct I/O",
          flush=True)

    def cases(tag):
        return [("chain", chain_topology(args.rows, os.path.join(base, f"chain{tag}.parquet"))),
                ("single", single_topology(args.rows, os.path.join(base, f"one{tag}.parquet"))),
                ("stateful 16", stateful_topology(args.rows, 16,
                                                  os.path.join(base, f"s16{tag}.parquet"))),
                ("stateful 10000", stateful_topology(args.rows, 10_000,
                                                     os.path.join(base, f"s10k{tag}.parquet")))]
    variants = {"both": (False, True), "on": (True,), "off": (False,)}[args.fuse]
    if args.warmup_rows > 0:
        # Untimed: the JVM compiles Spark's and the data sources' paths, the chain's queries
        # being the first to run them; without this the first case carries the JIT's work.
        for fuse in variants:
            tag = "_warm_fused" if fuse else "_warm"
            run_case(spark, phases, watch, base, f"warm-up{tag}",
                     chain_topology(args.warmup_rows, os.path.join(base, f"w{tag}.parquet")),
                     args.warmup_rows, fuse, trigger=args.trigger)
        print(f"# warm-up done (the chain on {args.warmup_rows:,} rows, untimed)", flush=True)
    runs = [(f"{name} --fuse" if fuse else name, th, fuse)
            for fuse in variants for name, th in cases("_fused" if fuse else "")]
    for name, th, fuse in runs:
        for h in run_case(spark, phases, watch, base, name, th, args.rows, fuse,
                          trigger=args.trigger):
            results["hops"].append(h)
            print(f"  {h['case']} {h['hop']}: {h['rows_per_s'] or 0:,.0f} rows/s, "
                  f"{h['us_per_row']:.2f} us/row, {h['batches']} batches", flush=True)
    if args.live_seconds > 0:
        n, p50, p99 = latency_case(spark, base, args.live_seconds, fuse=variants[-1])
        results["latency"] = {"rate": 200_000, "seconds": args.live_seconds,
                              "fused": variants[-1], "rows": n, "p50_s": p50, "p99_s": p99}
    results["load_end"] = uptime()
    spark.streams.removeListener(phases.listener)
    watch.stop()
    spark.stop()
    shutil.rmtree(base, ignore_errors=True)
    return results


if __name__ == "__main__":
    sys.exit(main())
