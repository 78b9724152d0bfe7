#!/usr/bin/env python
"""DEBS 2013 Grand Challenge benchmark on a generated game (issue DEBS, section 6).

For each case (``q1``, ``q2``, ``q3``, ``q4`` alone and ``all`` four together: EPIC paper figure 5)
the script runs ``topologies/debs2013.py`` as a subprocess, by default with
``epic deploy --fuse`` (Spark local on this machine) or with ``--runtime run`` (the in-process
runner), with delay logging on (``--delays``), and measures:

* wall time of the whole command (Python start, Spark session and JVM start included), input
  events/s (rows of the input file / wall s) and "x real time" (game seconds / wall s; game seconds
  = seconds of the two halves (``debs2013/constants.py``; a short generated game has shorter halves
  from the same kick-offs) in which the input has rows);
* peak memory of the process tree (the ``epic`` process and all its descendants: the JVM and the
  Python workers), the sum of their PSS (``/proc/<pid>/smaps_rollup``: shared pages split between
  the sharers) sampled every 5 s (``--mem-every``; short spikes can be missed);
* per output stream: rows, p50 / p99 / max of ``write_time - entry_time`` (EPIC's delay logging,
  spec section 9: paper figure 6), read streaming with pyarrow (only the two delay columns); exact
  over all rows up to ``--delay-max-values`` rows per stream, above that over every k-th row (the
  table says which).

The parse floor: a plain pyarrow streaming parse of the same file (``pyarrow.csv.open_csv``, 13
int64 columns, no header): wall s, CPU s and rows/s.

Cases are ``q1`` ... ``q4`` and ``all``, each with optional modifiers after ``@`` joined by ``+``
(:func:`benchkit.debs_report.case_mods`): ``run`` / ``deploy`` (the runtime), ``csv`` /
``parquet`` (the topology's ``--format``), ``nodelays`` (no ``--delays``: the table then has row
counts, no delays). The default is the complete run of issue 16, all on the full game: without
delay logging (the issue's configuration, "15 CSV outputs of about 31 GB") ``all@run+nodelays``
(the in-process peer), ``all@nodelays`` and ``all@parquet+nodelays``; with it ``all@run``,
``all`` and ``all@parquet``; and the four queries alone.

Targets (exit 1 on a miss): every run succeeds; an all-queries case on ``epic deploy`` finishes
no slower than the same case on ``epic run`` when that ran too (``all`` against ``all@run``;
with ``--peer-again``, the default, the peer runs again right after the deploy case, as
``all@run#2``, and the deploy is held to the mean of the peer's two runs: the VM's speed drifts
by tens of per cent within minutes, and a run before and one after cancel a steady drift),
with a peak PSS of at most ``--mem-target-gb`` (default 4), and without delay logging within
``--target-seconds`` (default 150 s, CSV) or ``--parquet-target-seconds`` (default 100 s);
``--timed-delays`` applies those two to the cases with delay logging too (their outputs carry two
more int64 columns: 48.8 GB of CSV instead of 33.4). With ``--replay-speed S`` the game is
replayed paced by event time (the topology's
``--replay-speed``, epic/replay.py: S times real time), so the delays are those of a live feed
(a row's ``entry_time`` is its scheduled arrival); then the streams of ``--delay-queries``
(default q2, q4) must have p99 delay <= ``--delay-target-ms`` (default 500 ms), and a stream
without rows counts as a miss (nothing was measured). ``--slice-minutes M`` runs on the first
``M`` minutes of half ``--slice-half`` of the input (written next to it once), so a paced run
takes ``M / S`` minutes rather than the whole game's. A run killed at ``--timeout`` (or because
free disk fell below ``--min-free-gb``) counts as a miss. Exit 2 on a usage / environment error
(missing input and no way to generate it, too little disk).

Floors (peers in the same run, not targets): a plain pyarrow streaming parse of the input, and
after the first successful all-queries case of each output format and delay logging a plain
sequential writer of the same number of output bytes (8 MiB writes, one fsync; ``floor_write``);
after the first successful all-queries Parquet case, the CPU s of pyarrow's own CSV and Parquet
writers on its output rows read back (``floor_encode``: formatting alone, no disk; about 6
minutes on the full game, ``--no-encode-floor`` skips it). ``--no-floor`` skips them all.

Before each case the disk settles (``--settle``, default on: ``sync``, then at most 120 s for
the kernel's dirty pages to drain; ``benchkit.proc.settle``), so a case does not pay for the
write-back of the one before it (``epic run``'s 48.8 GB of CSV).

Also recorded per case: CPU seconds of the process tree by process kind (each process as last
sampled: the epic driver, the JVM, Spark's Python workers by module; in the docs section) and busy
CPU seconds of the whole machine during the run (results.json only).

    .venv/bin/python scripts/bench_debs.py                  # full game, the complete run
    .venv/bin/python scripts/bench_debs.py --minutes 0.5 --cases all   # quick check
    .venv/bin/python scripts/bench_debs.py --input data/slice6m.csv --runtime run --cases q1,all
    .venv/bin/python scripts/bench_debs.py --from-json out/bench_debs/results.json  # re-print
    # real-time delays: a 2-minute slice replayed at real time through epic deploy
    .venv/bin/python scripts/bench_debs.py --minutes 2 --slice-minutes 2 --replay-speed 1 \
        --cases all --no-floor --out-root out/bench_debs_rt

Outputs go to ``<out-root>/<case>`` and Spark work directories to ``<work-root>/<case>`` (both fresh
per run, deleted after measuring unless ``--keep``); results to ``<out-root>/results.json``.

Docs are a separate step: ``scripts/bench_docs.py out/bench_debs/results.json`` regenerates the
section of docs/performance.md between the ``bench_debs`` markers and docs/img/debs_*.png from
that file. ``--write-docs`` (with ``--notes``, ``--also-json``) runs the same step right after
the run (or after ``--from-json``). The measuring machinery (process tree, PSS, CPU, killing) is
in ``scripts/benchkit/proc.py``; the tables, plots and section in
``scripts/benchkit/debs_report.py``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from benchkit import debs_report as report  # noqa: E402
from benchkit import proc as proc_tree  # noqa: E402
from benchkit.debs_report import CASES, HALF_STARTS, split_case  # noqa: E402

from debs2013 import constants as C  # noqa: E402
from debs2013.dataflow import OUTPUT_FILES  # noqa: E402

SENSOR_COLUMNS = ["sid", "ts", "x", "y", "z", "v", "a", "vx", "vy", "vz", "ax", "ay", "az"]
HALF_ENDS = (C.FIRST_HALF_END, C.SECOND_HALF_END)


# ------------------------------------------------------------------------------------------------
# pure helpers (tests/test_bench_debs.py)

def case_queries(case: str) -> list[str]:
    """``"q3"`` -> ``["q3"]``; ``"all"`` (or ``"all@run"``) -> the four queries."""
    case = split_case(case)[0]
    if case == "all":
        return ["q1", "q2", "q3", "q4"]
    if case not in CASES:
        raise ValueError(f"unknown case {case!r} (one of {', '.join(CASES)})")
    return [case]


def parse_cases(text: str) -> list[str]:
    """``"q1, all"`` -> ``["q1", "all"]`` (order kept, duplicates dropped, names checked);
    a ``:seconds`` suffix (a per-case timeout, :func:`case_timeouts`) is dropped."""
    out: list[str] = []
    for c in (s.strip().lower().split(":")[0].strip() for s in text.split(",")):
        if not c:
            continue
        case_queries(c)
        if c not in out:
            out.append(c)
    if not out:
        raise ValueError("no cases given")
    return out


def case_timeouts(text: str) -> dict[str, float]:
    """``"all:1200,q4:300,q1"`` -> ``{"all": 1200.0, "q4": 300.0}``."""
    out = {}
    for item in text.split(","):
        name, _, secs = item.strip().lower().partition(":")
        if secs.strip():
            out[name.strip()] = float(secs)
    return out


def case_files(case: str) -> list[str]:
    """The output files a case writes (``debs2013.dataflow.OUTPUT_FILES`` order)."""
    qs = set(case_queries(case))
    return [f for f, (q, _) in OUTPUT_FILES.items() if q in qs]


def half_seconds(ts: np.ndarray, half_starts=HALF_STARTS, half_ends=HALF_ENDS,
                 ps_per_s: int = C.PS_PER_S) -> set[tuple[int, int]]:
    """``(half, whole seconds since its kick-off)`` of the rows of ``ts`` (ps) inside a half."""
    ts = np.asarray(ts, dtype=np.int64)
    out: set[tuple[int, int]] = set()
    for h, (lo, hi) in enumerate(zip(half_starts, half_ends), start=1):
        t = ts[(ts >= lo) & (ts < hi)]
        if t.size:
            out.update((h, int(s)) for s in np.unique((t - lo) // ps_per_s))
    return out


def game_seconds(ts: np.ndarray, **kw) -> int:
    """Seconds of play covered by the data: whole seconds since each half's kick-off
    (``debs2013/constants.py``) in which ``ts`` has rows (a generated short game starts its halves
    at the same kick-offs and has no rows after its shorter ends)."""
    return len(half_seconds(ts, **kw))


def percentiles_ms(delays_ns: np.ndarray, qs=(50, 99)) -> list[float | None]:
    """Percentiles of delays given in ns, as ms (``None`` for no values)."""
    if delays_ns.size == 0:
        return [None for _ in qs]
    return [float(v) / 1e6 for v in np.percentile(delays_ns, qs)]


def sample_stride(est_rows: float, max_values: int) -> int:
    """Keep every k-th delay so at most about ``max_values`` are kept (k >= 1)."""
    if max_values <= 0 or est_rows <= max_values:
        return 1
    return int(math.ceil(est_rows / max_values))


# ------------------------------------------------------------------------------------------------
# measuring (the process tree is sampled by benchkit.proc)

def floor_parse(path: Path) -> dict:
    """Plain pyarrow streaming parse of the game: 13 int64 columns, no header; rows and wall s."""
    ro = pacsv.ReadOptions(column_names=SENSOR_COLUMNS, block_size=16 << 20)
    co = pacsv.ConvertOptions(column_types={c: pa.int64() for c in SENSOR_COLUMNS})
    t0, c0 = time.perf_counter(), time.process_time()
    rows = 0
    with pacsv.open_csv(path, read_options=ro, convert_options=co) as r:
        for b in r:
            rows += b.num_rows
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {"rows": rows, "wall_s": wall, "cpu_s": cpu, "rows_per_s": rows / wall if wall else None}


def floor_write(directory: Path, nbytes: int, chunk: int = 8 << 20) -> dict:
    """A plain sequential writer of ``nbytes`` bytes (``chunk``-sized writes of incompressible
    bytes, one fsync at the end) into a temp file of ``directory``, deleted after: bytes and wall
    s (the write floor of a case's outputs, measured in the same run)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "_write_floor.bin"
    buf = os.urandom(chunk)
    t0 = time.perf_counter()
    left = int(nbytes)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            while left > 0:
                left -= os.write(fd, buf if left >= chunk else buf[:left])
            os.fsync(fd)
        finally:
            os.close(fd)
        wall = time.perf_counter() - t0
    finally:
        path.unlink(missing_ok=True)
    return {"bytes": int(nbytes), "wall_s": wall, "load": os.getloadavg()[0]}


def floor_encode(out: Path, files: list[str], batch_rows: int = 1 << 20) -> dict:
    """The encode floors of a Parquet case's outputs (the rows and columns the CSV case writes
    too): each ``<stream>.parquet`` read back in ``batch_rows`` batches (not timed), then each
    batch formatted as CSV by pyarrow's own writer (``pyarrow.csv.write_csv``) and encoded as
    Parquet by ``pyarrow.parquet`` (default options), both into memory and dropped. Returns
    rows, the CPU s of the process during each encoder's calls (``time.process_time``: all its
    threads) and the bytes each made: what formatting alone costs, with a library built for it,
    before any query runs or any byte reaches the disk."""
    import pyarrow.parquet as pq
    rows = csv_bytes = pq_bytes = 0
    csv_cpu = pq_cpu = 0.0
    for fname in files:
        path = out / (Path(fname).stem + ".parquet")
        with pq.ParquetFile(path) as pf:
            for batch in pf.iter_batches(batch_size=batch_rows):
                rows += batch.num_rows
                sink = pa.BufferOutputStream()
                c0 = time.process_time()
                pacsv.write_csv(batch, sink)
                csv_cpu += time.process_time() - c0
                csv_bytes += sink.getvalue().size
                sink = pa.BufferOutputStream()
                c0 = time.process_time()
                with pq.ParquetWriter(sink, batch.schema) as w:
                    w.write_batch(batch)
                pq_cpu += time.process_time() - c0
                pq_bytes += sink.getvalue().size
    return {"rows": rows, "csv_cpu_s": csv_cpu, "csv_bytes": csv_bytes,
            "parquet_cpu_s": pq_cpu, "parquet_bytes": pq_bytes, "load": os.getloadavg()[0]}


def scan_game_seconds(path: Path) -> np.ndarray:
    """Second pass (not timed as the floor): the game seconds with data, as the sorted event
    times (ps) of their starts (their count is the game's length in seconds)."""
    ro = pacsv.ReadOptions(column_names=SENSOR_COLUMNS, block_size=16 << 20)
    co = pacsv.ConvertOptions(include_columns=["ts"], column_types={"ts": pa.int64()})
    secs: set[tuple[int, int]] = set()
    with pacsv.open_csv(path, read_options=ro, convert_options=co) as r:
        for b in r:
            secs |= half_seconds(b.column(0).to_numpy())
    return np.sort(np.array([HALF_STARTS[h - 1] + sec * C.PS_PER_S for h, sec in secs],
                            dtype=np.int64))


def slice_game(src: Path, dst: Path, half: int, minutes: float) -> int:
    """Write the rows of ``src`` with event time in the first ``minutes`` of half ``half``
    (from its kick-off, ``debs2013/constants.py``) to ``dst``, same format; returns the rows.
    A contiguous stretch of play: a paced replay of it never waits through the half-time gap."""
    lo = HALF_STARTS[half - 1]
    hi = lo + int(round(minutes * 60 * C.PS_PER_S))
    ro = pacsv.ReadOptions(column_names=SENSOR_COLUMNS, block_size=16 << 20)
    co = pacsv.ConvertOptions(column_types={c: pa.int64() for c in SENSOR_COLUMNS})
    tmp = dst.with_name(dst.name + ".tmp")
    rows = 0
    with pacsv.open_csv(src, read_options=ro, convert_options=co) as r, \
            pacsv.CSVWriter(tmp, r.schema, write_options=pacsv.WriteOptions(
                include_header=False, quoting_style="none")) as w:
        for b in r:
            ts = b.column(1)
            keep = pa.compute.and_(pa.compute.greater_equal(ts, lo), pa.compute.less(ts, hi))
            part = b.filter(keep)
            if part.num_rows:
                w.write_batch(part)
                rows += part.num_rows
    os.replace(tmp, dst)
    return rows


def game_done(starts: np.ndarray, watermark: int | None) -> int | None:
    """Game seconds (of ``starts``, see :func:`scan_game_seconds`) wholly before ``watermark``."""
    if watermark is None:
        return None
    return int(np.searchsorted(starts, int(watermark) - C.PS_PER_S, side="right"))


def _delay_batches(path: Path):
    """``(entry_time, write_time)`` batches of an output file, CSV or Parquet (by suffix)."""
    cols = ["entry_time", "write_time"]
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        yield from pq.ParquetFile(path).iter_batches(columns=cols, batch_size=1 << 20)
        return
    ro = pacsv.ReadOptions(block_size=32 << 20)
    co = pacsv.ConvertOptions(include_columns=cols,
                              column_types={"entry_time": pa.int64(), "write_time": pa.int64()})
    with pacsv.open_csv(path, read_options=ro, convert_options=co) as r:
        yield from r


def read_delays(path: Path, query: str, max_values: int) -> report.StreamDelay:
    """Rows and delay percentiles of one output file, CSV or Parquet (``entry_time, write_time``
    first)."""
    sd = report.StreamDelay(stream=path.name, query=query)
    if not path.is_file():
        sd.error = "missing"
        return sd
    sd.bytes = path.stat().st_size
    t0 = time.perf_counter()
    kept: list[np.ndarray] = []
    rows = 0
    stride = None
    vmax = None
    try:
        for b in _delay_batches(path):
            n = b.num_rows
            if n == 0:
                continue
            d = (b.column(1).to_numpy(zero_copy_only=False)
                 - b.column(0).to_numpy(zero_copy_only=False))
            if stride is None:   # rows estimated from the first block's bytes per row
                stride = sample_stride(sd.bytes / (min(sd.bytes, 32 << 20) / n), max_values)
            m = int(d.max())
            vmax = m if vmax is None else max(vmax, m)
            first = (-rows) % stride       # global row index multiple of the stride
            kept.append(d[first::stride] if stride > 1 else d)
            rows += n
    except (pa.ArrowInvalid, OSError) as e:   # a file cut by a kill: keep what was read
        sd.error = f"{type(e).__name__}: {str(e)[:120]}"
    sd.rows = rows
    sd.sampled = "all" if (stride or 1) == 1 else f"1/{stride}"
    vals = np.concatenate(kept) if kept else np.zeros(0, dtype=np.int64)
    sd.p50_ms, sd.p99_ms = percentiles_ms(vals)
    sd.max_ms = None if vmax is None else vmax / 1e6
    sd.read_s = time.perf_counter() - t0
    return sd


def count_rows(path: Path, query: str) -> report.StreamDelay:
    """Rows of an output file without delay columns (a run without delay logging): Parquet from
    its footer, CSV as lines after the header."""
    sd = report.StreamDelay(stream=path.name, query=query, sampled="-")
    if not path.is_file():
        sd.error = "missing"
        return sd
    sd.bytes = path.stat().st_size
    t0 = time.perf_counter()
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        sd.rows = pq.ParquetFile(path).metadata.num_rows
    else:
        lines, last = 0, b"\n"
        with open(path, "rb") as f:
            for buf in iter(lambda: f.read(1 << 24), b""):
                lines += buf.count(b"\n")
                last = buf[-1:]
        lines += last != b"\n"          # a last line without its newline
        sd.rows = max(0, lines - 1)
    sd.read_s = time.perf_counter() - t0
    return sd


def _status_doc(workdir: Path) -> dict:
    try:
        return json.loads((workdir / "status.json").read_text())
    except (OSError, ValueError):
        return {}


def _progress(doc: dict, runtime: str, n_sinks: int | None = None) -> tuple[dict, list]:
    """Source rows read and the slowest sink's watermark from a deploy's status.json; the queries
    with the most busy time (sum of micro-batch durations with rows)."""
    nodes = doc.get("nodes", {})
    src = {k: v for k, v in nodes.items() if k.split("+")[0] in ("event_reader",)}
    prog = {"elapsed_s": doc.get("elapsed_s"), "state": doc.get("state")}
    if src:
        prog["source_rows"] = max(v.get("rows_in") or 0 for v in src.values())
    # Query names: nodes joined by "+", sibling queries end in "~<groups>" (docs/deploy.md).
    sinks = {k: v for k, v in nodes.items()
             if k.split("~")[0].split("+")[-1].endswith(("_csv", "_parquet"))}
    wms = [v.get("watermark") for v in sinks.values()]
    covered = sum(int(k.split("~")[1]) if "~" in k else 1 for k in sinks)
    missing = sum(w is None for w in wms) + max(0, (n_sinks or 0) - covered)
    if missing:   # a sink query not started yet, or one that has read nothing
        prog["sinks_without_watermark"] = missing
    elif wms:
        prog["min_sink_watermark"] = min(wms)
    top = sorted(((k, v.get("busy_ms") or 0, v.get("rows_in") or 0) for k, v in nodes.items()),
                 key=lambda t: -t[1])[:6]
    return prog, [list(t) for t in top]


def _run_stats_top(path: Path) -> list:
    """Top nodes by busy seconds from ``epic run --stats`` (when the file has them)."""
    try:
        d = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    nodes = d.get("nodes") or {}
    rows = []
    if isinstance(nodes, dict):
        for k, v in nodes.items():
            if isinstance(v, dict):
                busy = v.get("busy_s") or v.get("busy") or v.get("seconds")
                if busy is not None:
                    rows.append([k, int(float(busy) * 1000), v.get("rows_in") or 0])
    return sorted(rows, key=lambda t: -t[1])[:6]


def peer_again(args, r: dict, done: list[dict]) -> str | None:
    """The case to run right after case ``r``: its peer again (``<peer>#2``) when ``r`` is an
    all-queries deploy case whose peer (the same case on ``epic run``, :func:`benchkit.
    debs_report.peers_of`) ran once before it, and ``--peer-again`` is on; else None. The peer
    before and after the deploy: their mean cancels a steady drift of the VM's speed."""
    if not getattr(args, "peer_again", False) or r["runtime"] != "deploy" or \
            split_case(r["case"])[0] != "all" or r["status"] != "ok":
        return None
    peers = report.peers_of(r, done)
    if len(peers) != 1:
        return None
    again = f"{report.base_case(peers[0]['case'])}#2"
    return None if any(c["case"] == again for c in done) else again


def epic_command() -> str:
    """The ``epic`` of this checkout's .venv, else the one on PATH."""
    epic = str(ROOT / ".venv" / "bin" / "epic")
    return epic if os.path.exists(epic) else shutil.which("epic") or "epic"


def case_settings(args, case: str) -> tuple[str, str, bool]:
    """``(runtime, format, delays)`` of a case: its ``@`` modifiers
    (:func:`benchkit.debs_report.case_mods`), else the command line's."""
    mods = report.case_mods(case)
    return (mods.get("runtime") or args.runtime, mods.get("format") or getattr(args, "format", "csv"),
            mods.get("delays", True))


def build_command(args, case: str, out: Path, work: Path, stats: Path) -> list[str]:
    epic = epic_command()
    topo = str(ROOT / "topologies" / "debs2013.py")
    runtime, fmt, delays = case_settings(args, case)
    params = ["--", "--input", str(args.input), "--out", str(out),
              "--queries", ",".join(case_queries(case))] + (["--delays"] if delays else [])
    if getattr(args, "replay_speed", None):
        params += ["--replay-speed", f"{args.replay_speed:g}"]
    if fmt != "csv":
        params += ["--format", fmt]
    if runtime == "deploy":
        cmd = [epic, "deploy", topo, "--workdir", str(work), "--no-progress"]
        if args.fuse:
            cmd.append("--fuse")
        if getattr(args, "trigger", None):
            cmd += ["--trigger", f"{args.trigger:g}"]
        if getattr(args, "partitions", None):
            cmd += ["--partitions", str(args.partitions)]
        if getattr(args, "batch_rows", None):
            cmd += ["--batch-rows", str(args.batch_rows)]
        for c in getattr(args, "conf", None) or []:
            cmd += ["--conf", c]
    else:
        cmd = [epic, "run", topo, "--no-progress", "--no-summary", "--stats", str(stats)]
    return cmd + params


def run_case(args, case: str, console) -> report.CaseResult:
    runtime, fmt, delays = case_settings(args, case)
    args = argparse.Namespace(**{**vars(args), "runtime": runtime, "format": fmt})
    out = args.out_root / case
    work = args.work_root / case
    stats = args.out_root / f"{case}.stats.json"
    cmd = build_command(args, case, out, work, stats)
    res = report.CaseResult(case=case, runtime=args.runtime, fuse=bool(args.fuse and args.runtime ==
                                                                "deploy"),
                     command=shlex.join(os.path.relpath(c, ROOT) if c.startswith(str(ROOT)) else c
                                        for c in cmd),
                     started=_dt.datetime.now(_dt.timezone.utc).strftime("%H:%M:%S"),
                     format=fmt, delays=delays)
    for p in (out, work):
        shutil.rmtree(p, ignore_errors=True)
    stats.unlink(missing_ok=True)
    args.out_root.mkdir(parents=True, exist_ok=True)
    fg = proc_tree.free_gb(args.out_root)
    if fg < args.min_free_gb:
        res.status = f"disk: {fg:.1f} GB free < {args.min_free_gb} GB"
        return res
    log_path = args.out_root / f"{case}.log"
    console.print(f"[bold]{case}[/]: {res.command}")
    t0 = time.perf_counter()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, env={**os.environ, "COLUMNS": "250"})
        sampler = proc_tree.Sampler(proc.pid, every=args.mem_every).start()
        killed = None
        last_print = t0
        while True:
            try:
                proc.wait(timeout=1.0)
                break
            except subprocess.TimeoutExpired:
                pass
            now = time.perf_counter()
            if now - t0 > args.timeout:
                killed = "timeout"
            elif proc_tree.free_gb(args.out_root) < args.min_free_gb:
                killed = "disk"
            if killed:
                if args.runtime == "deploy":
                    res.progress, res.top_nodes = _progress(_status_doc(work), args.runtime,
                                                           len(case_files(case)))
                res.wall_s = now - t0
                proc_tree.kill_tree(proc)
                break
            if now - last_print >= args.print_every:
                last_print = now
                doc = _status_doc(work) if args.runtime == "deploy" else {}
                prog, _ = _progress(doc, args.runtime) if doc else ({}, [])
                src = prog.get("source_rows")
                console.print(f"  {case}: {now - t0:7.0f} s, tree PSS "
                              f"{sampler.last_pss / 2**30:.1f} GiB"
                              + (f", source rows {src:,}" if src is not None else "")
                              + f", free disk {proc_tree.free_gb(args.out_root):.1f} GB")
    if res.wall_s is None:
        res.wall_s = time.perf_counter() - t0
    sampler.stop()
    res.rc = proc.returncode
    res.peak_rss = sampler.peak_pss or None
    res.load = sampler.mean_load
    res.cpu_s, res.machine_cpu_s = sampler.tree_cpu_s, sampler.machine_cpu_s
    res.cpu_kinds = {k: round(v, 1) for k, v in sampler.cpu_by_kind.items()}
    res.pss_kinds = {k: round(v / 2**30, 3) for k, v in sampler.peak_by_kind.items()}
    res.pss_procs = dict(sampler.peak_procs_by_kind)
    if killed == "timeout":
        res.status = f"timeout ({args.timeout:.0f} s)"
    elif killed == "disk":
        res.status = f"killed: free disk < {args.min_free_gb} GB"
    elif proc.returncode == 0:
        res.status = "ok"
    else:
        res.status = f"failed (rc {proc.returncode})"
    if args.runtime == "deploy" and not res.top_nodes:
        res.progress, res.top_nodes = _progress(_status_doc(work), args.runtime,
                                                           len(case_files(case)))
    elif args.runtime == "run":
        res.top_nodes = _run_stats_top(stats)
    if res.status == "ok":
        res.game_done = int(args.game_starts.size)
    elif res.progress.get("min_sink_watermark") is not None:
        res.game_done = game_done(args.game_starts, res.progress["min_sink_watermark"])
    elif res.progress.get("sinks_without_watermark"):
        res.game_done = 0    # a sink had not read anything yet
    try:
        with open(log_path, "rb") as f:
            f.seek(max(0, log_path.stat().st_size - 4000))
            tail = f.read().decode(errors="replace").splitlines()
        res.log_tail = "\n".join(ln for ln in tail if "WARN" not in ln)[-1500:]
        with open(log_path, "rb") as f:
            errs = [ln.decode(errors="replace").strip() for ln in f
                    if ln.lower().startswith((b"error:", b"epicerror", b"nodefailure"))]
        if errs and res.status.startswith("failed"):
            res.status += ": " + errs[-1][:160]
    except OSError:
        pass
    # per-stream rows and delays (also of a killed run: what it wrote so far)
    console.print(f"  {case}: {res.status} after {res.wall_s:.1f} s; reading delay columns")
    streams = []
    for fname in case_files(case):
        path = out / (fname if args.format == "csv" else Path(fname).stem + f".{args.format}")
        sd = (read_delays(path, OUTPUT_FILES[fname][0], args.delay_max_values) if delays
              else count_rows(path, OUTPUT_FILES[fname][0]))
        streams.append(asdict(sd))
    res.streams = streams
    res.rows_out = sum(s["rows"] or 0 for s in streams)
    res.out_bytes = sum(s["bytes"] or 0 for s in streams)
    # floors done in this run: "encode" once, a write floor per (format, delay logging)
    done = getattr(args, "floors_done", set())
    if (args.floor and args.encode_floor and res.status == "ok" and fmt == "parquet"
            and split_case(case)[0] == "all" and "encode" not in done):
        done.add("encode")   # the encode floors of the same rows, once per run
        console.print(f"  {case}: encode floors of its {res.rows_out:,} rows ...")
        try:
            res.encode_floor = floor_encode(out, case_files(case))
            console.print(f"  {case}: encode floors: CSV {res.encode_floor['csv_cpu_s']:.1f} "
                          f"CPU-s, Parquet {res.encode_floor['parquet_cpu_s']:.1f} CPU-s")
        except (OSError, pa.ArrowException) as e:
            console.print(f"  {case}: encode floors failed: {e}")
    if not args.keep:
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)
    if (args.floor and res.status == "ok" and res.out_bytes and split_case(case)[0] == "all"
            and (fmt, delays) not in done):
        free = proc_tree.free_gb(args.out_root)
        if free - res.out_bytes / 1e9 < args.min_free_gb:
            console.print(f"  {case}: no write floor: {free:.1f} GB free for "
                          f"{res.out_bytes / 1e9:.1f} GB (outputs kept?)")
        else:
            done.add((fmt, delays))
            console.print(f"  {case}: write floor of its {res.out_bytes / 1e9:.1f} GB ...")
            try:
                res.write_floor = floor_write(args.out_root, res.out_bytes)
            except OSError as e:
                console.print(f"  {case}: write floor failed: {e}")
    return res


# ------------------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    from rich.console import Console

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", type=Path, default=Path("data/full-game"),
                    help="game CSV (default data/full-game; generated when missing)")
    ap.add_argument("--minutes", type=float, default=None,
                    help="use a short generated game (minutes per half, seed 1) instead")
    ap.add_argument("--runtime", choices=("deploy", "run"), default="deploy")
    ap.add_argument("--fuse", action=argparse.BooleanOptionalAction, default=True,
                    help="epic deploy --fuse (default on)")
    ap.add_argument("--trigger", type=float, default=None,
                    help="epic deploy --trigger: seconds between micro-batch triggers")
    ap.add_argument("--partitions", type=int, default=None,
                    help="epic deploy --partitions: tasks per micro-batch of a keyed node")
    ap.add_argument("--batch-rows", type=int, default=None,
                    help="epic deploy --batch-rows: rows per micro-batch read from a source or "
                         "topic (default: the deploy's, about 128 MB of the input's columns)")
    ap.add_argument("--conf", action="append", default=None, metavar="KEY=VALUE",
                    help="epic deploy --conf KEY=VALUE (repeatable), e.g. "
                         "spark.epic.backgroundNice=0")
    ap.add_argument("--cases", default="all@run+nodelays,all@nodelays,all@parquet+nodelays,"
                                       "all@run,all,all@parquet,q1,q2,q3,q4",
                    help="comma list, run in this order: q1..q4, all, each with @ modifiers "
                         "(run, deploy, parquet, csv, nodelays, joined by +); NAME:SECONDS sets "
                         "that case's timeout")
    ap.add_argument("--peer-again", action=argparse.BooleanOptionalAction, default=True,
                    help="run an all-queries deploy case's peer (the same case on epic run, "
                         "run before it) again right after it, as <peer>#2, and compare the "
                         "deploy with the mean of the two (default on: the VM's speed drifts "
                         "by tens of per cent within minutes)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per run (then killed)")
    ap.add_argument("--budget", type=float, default=None,
                    help="total seconds for all runs: a run's timeout is cut to what is left, and "
                         "cases not started when it is used up are reported as not run")
    ap.add_argument("--target-seconds", type=float, default=150.0,
                    help="wall-time target of an all-queries deploy case writing CSV")
    ap.add_argument("--parquet-target-seconds", type=float, default=100.0,
                    help="wall-time target of an all-queries deploy case writing Parquet")
    ap.add_argument("--timed-delays", action="store_true",
                    help="apply the wall-time targets to the cases with delay logging too "
                         "(default: only without it, issue 16's configuration)")
    ap.add_argument("--mem-target-gb", type=float, default=4.0,
                    help="peak PSS target (GiB) of an all-queries deploy case")
    ap.add_argument("--write-docs", action="store_true",
                    help="then update docs/performance.md's section and docs/img/debs_*.png "
                         "(the step scripts/bench_docs.py runs)")
    ap.add_argument("--notes", type=Path, default=None, help="markdown appended to the section")
    ap.add_argument("--also-json", type=Path, action="append", default=[],
                    help="with --write-docs: also render this results.json (another input) in "
                         "the section, after the main run")
    ap.add_argument("--keep", action="store_true", help="keep outputs and work directories")
    ap.add_argument("--out-root", type=Path, default=Path("out/bench_debs"))
    ap.add_argument("--work-root", type=Path, default=Path("work/bench_debs"))
    ap.add_argument("--min-free-gb", type=float, default=4.0,
                    help="refuse to start / kill a run when free disk is below this")
    ap.add_argument("--delay-max-values", type=int, default=20_000_000,
                    help="per stream; above it percentiles use every k-th row")
    ap.add_argument("--no-floor", dest="floor", action="store_false")
    ap.add_argument("--no-encode-floor", dest="encode_floor", action="store_false",
                    help="skip the encode floors (pyarrow's writers on a Parquet case's rows: "
                         "about 6 minutes on the full game)")
    ap.add_argument("--settle", action=argparse.BooleanOptionalAction, default=True,
                    help="before each case, sync and wait (at most 120 s) for the kernel's "
                         "dirty pages to drain, so no case pays the last one's write-back "
                         "(default on; the seconds are in results.json, 'settle')")
    ap.add_argument("--mem-every", type=float, default=5.0,
                    help="seconds between memory samples of the process tree (PSS reads cost "
                         "CPU: ~0.1 s per GB-sized process)")
    ap.add_argument("--print-every", type=float, default=60.0, help="progress line period, s")
    ap.add_argument("--replay-speed", type=float, default=None,
                    help="replay the game paced by event time, this many times real time (the "
                         "topology's --replay-speed); checks the delay target")
    ap.add_argument("--slice-minutes", type=float, default=None,
                    help="run on the first M minutes of half --slice-half of the input")
    ap.add_argument("--slice-half", type=int, choices=(1, 2), default=1)
    ap.add_argument("--delay-target-ms", type=float, default=None,
                    help="p99 delay target of the --delay-queries streams (default 500 with "
                         "--replay-speed, else not checked)")
    ap.add_argument("--delay-queries", default="q2,q4",
                    help="queries whose streams the delay target applies to")
    ap.add_argument("--format", choices=("csv", "parquet"), default="csv",
                    help="the topology's output format (--format)")
    ap.add_argument("--from-json", type=Path, default=None,
                    help="re-print (and with --write-docs re-render) a results.json; run nothing")
    args = ap.parse_args(argv)
    if not sys.stdout.isatty():
        sys.stdout.reconfigure(line_buffering=True)
    console = Console(width=None if sys.stdout.isatty() else 200)

    if args.from_json is not None:
        results = json.loads(args.from_json.read_text())
        report.print_tables(console, results)
    else:
        try:
            cases = parse_cases(args.cases)
        except ValueError as e:
            console.print(f"[red]{e}[/]")
            return 2
        if args.minutes is not None:
            args.input = Path(f"data/bench-{args.minutes:g}min.csv")
        args.input = args.input if args.input.is_absolute() else ROOT / args.input
        args.out_root = args.out_root if args.out_root.is_absolute() else ROOT / args.out_root
        args.work_root = args.work_root if args.work_root.is_absolute() else ROOT / args.work_root
        if not args.input.is_file():
            gen = [epic_command(), "debs", "generate", "--out", str(args.input)]
            if args.minutes is not None:
                gen += ["--minutes", f"{args.minutes:g}", "--seed", "1"]
            elif args.input != ROOT / "data/full-game":
                console.print(f"[red]{args.input}: no such file[/]")
                return 2
            console.print(f"generating {args.input}: {shlex.join(gen)}")
            if subprocess.run(gen, cwd=ROOT).returncode != 0:
                console.print("[red]generating the game failed[/]")
                return 2
        if args.slice_minutes is not None:
            sliced = args.input.with_name(f"{args.input.stem}-h{args.slice_half}-"
                                          f"{args.slice_minutes:g}min.csv")
            if not sliced.is_file():
                n = slice_game(args.input, sliced, args.slice_half, args.slice_minutes)
                console.print(f"sliced {sliced.name}: {n:,} rows")
                if n == 0:
                    console.print(f"[red]{args.input} has no rows in the first "
                                  f"{args.slice_minutes:g} min of half {args.slice_half}[/]")
                    sliced.unlink()
                    return 2
            args.input = sliced
        if args.delay_target_ms is None and args.replay_speed:
            args.delay_target_ms = 500.0
        fg = proc_tree.free_gb(args.out_root)
        console.print(f"free disk at {args.out_root}: {fg:.1f} GB (runs are killed below "
                      f"{args.min_free_gb} GB)")
        if fg < args.min_free_gb + 1:
            console.print(f"[red]too little free disk ({fg:.1f} GB) for the outputs; free some or "
                          "lower --min-free-gb[/]")
            return 2
        load_start = proc_tree.uptime()
        console.print(f"load: {load_start}")
        results = {
            "argv": ".venv/bin/python scripts/bench_debs.py "
                    + shlex.join(sys.argv[1:] if argv is None else argv),
            "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": f"{os.cpu_count()}-CPU {platform.machine()} VM, Python "
                       f"{platform.python_version()}, pyarrow {pa.__version__}",
            "load_start": load_start, "input": os.path.relpath(args.input, ROOT),
            "input_bytes": args.input.stat().st_size, "target_seconds": args.target_seconds,
            "parquet_target_seconds": args.parquet_target_seconds,
            "mem_target_gb": args.mem_target_gb, "timed_delays": args.timed_delays,
            "runtime_label": args.runtime + (" --fuse" if args.fuse and args.runtime == "deploy"
                                             else "")
                             + (f", replay {args.replay_speed:g}x" if args.replay_speed else "")
                             + (f", {args.format}" if args.format != "csv" else ""),
            "replay_speed": args.replay_speed, "format": args.format,
            "delay_target_ms": args.delay_target_ms,
            "delay_queries": [q.strip() for q in args.delay_queries.split(",") if q.strip()],
            "cases": [], "mem_every": args.mem_every,
        }
        if args.floor:
            console.print("floor: pyarrow streaming parse ...")
            results["floor"] = floor_parse(args.input)
            results["floor"]["load"] = os.getloadavg()[0]
            results["input_rows"] = results["floor"]["rows"]
        else:
            results["input_rows"] = None
        args.game_starts = scan_game_seconds(args.input)
        results["game_s"] = int(args.game_starts.size)
        if results.get("floor") and results["game_s"]:
            results["floor"]["x_real_time"] = results["game_s"] / results["floor"]["wall_s"]
        if results["input_rows"] is None:
            with open(args.input, "rb") as f:
                results["input_rows"] = sum(buf.count(b"\n") for buf in
                                            iter(lambda: f.read(1 << 24), b""))
        console.print(f"input: {results['input_rows']:,} rows, {results['game_s']} game s")
        args.out_root.mkdir(parents=True, exist_ok=True)
        json_path = args.out_root / "results.json"
        t_start = time.perf_counter()
        full_timeout = args.timeout
        args.floors_done = set()
        per_case = case_timeouts(args.cases)
        queue = list(cases)
        while queue:
            case = queue.pop(0)
            args.timeout = per_case.get(case, per_case.get(report.base_case(case), full_timeout))
            if args.budget is not None:
                left = args.budget - (time.perf_counter() - t_start)
                if left < 60:
                    console.print(f"[yellow]{case}: not run (budget of {args.budget:.0f} s used "
                                  "up)[/]")
                    results.setdefault("not_run", []).append(case)
                    continue
                args.timeout = min(args.timeout, left)
            settled = proc_tree.settle() if args.settle else None
            if settled is not None:
                console.print(f"  {case}: disk settled in {settled['s']:.1f} s (dirty "
                              f"{settled['dirty_before'] / 2**20:,.0f} -> "
                              f"{settled['dirty_after'] / 2**20:,.0f} MiB)")
            r = run_case(args, case, console)
            r.input_rows = results["input_rows"]
            r.game_s = results["game_s"]
            results["cases"].append({**asdict(r), "settle": settled})
            results["load_end"] = proc_tree.uptime()
            json_path.write_text(json.dumps(results, indent=1, default=str))
            if r.status.startswith("failed") and r.log_tail:
                console.print(f"[red]{case} log tail:[/]\n{r.log_tail[-600:]}")
            again = peer_again(args, results["cases"][-1], results["cases"])
            if again:
                queue.insert(0, again)
        results["load_end"] = proc_tree.uptime()
        json_path.write_text(json.dumps(results, indent=1, default=str))
        console.print(f"results: {os.path.relpath(json_path, ROOT)}")
        report.print_tables(console, results)

    if args.write_docs:   # the docs step, as scripts/bench_docs.py runs it
        notes = args.notes.read_text() if args.notes else ""
        extras = [json.loads(Path(p).read_text()) for p in args.also_json]
        for p in report.render(results, notes, ROOT / "docs" / "performance.md",
                               ROOT / "docs" / "img", extras):
            console.print(f"wrote {os.path.relpath(p, ROOT)}")

    misses = [(r["case"], report.missed(results, r)) for r in results["cases"]]
    misses = [(c, m) for c, m in misses if m is not None]
    misses += [(c, "not run (budget used up)") for c in results.get("not_run", [])]
    misses += report.delay_misses(results)
    if not any(split_case(r["case"])[0] == "all" and r["runtime"] == "deploy"
               for r in results["cases"]):
        console.print("[yellow]no all-queries deploy case was run: its targets are not "
                      "checked[/]")
    for line in report.delay_verdicts(results):
        console.print(line)
    if misses:
        for c, m in misses:
            console.print(f"[red]MISSED[/] {c}: {m}")
        return 1
    console.print("all targets met")
    return 0


if __name__ == "__main__":
    sys.exit(main())
