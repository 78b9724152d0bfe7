#!/usr/bin/env python
"""Benchmark of epic's CSV writer (issue 16, point 4); exits non-zero when a target is missed.

Writing the DEBS outputs' CSV was half of a deploy's task CPU (py-spy, docs/performance.md,
"CSV writing"). This script times :class:`epic.csvio.CsvWriter` against its peer, pyarrow's own
``pyarrow.csv.write_csv`` called the way epic called it before (one call per written table, its
default 1,024-row batches), on three tables shaped like the DEBS outputs that dominate the bytes:

* ``q3``: heat-map rows: delay stamps and a timestamp in long runs, a player name, four cell
  corners out of a 100-value grid, a mostly distinct percentage, a grid name;
* ``q1b``: running statistics: three stamps, a player name, twelve floats of which each changes
  for one player at a time (few distinct values per table);
* ``q1a``: one row per run of a player: stamps, two integers, two strings, two distinct floats.

Each table is written in writes of ``--write-rows`` rows (5,000: what the DEBS windows hand their
sinks), to a file in a temporary directory; the best of ``--repeat`` runs counts. The bytes of the
writers must be equal, or the case fails. CsvWriter is timed twice: as a deploy's part writer
(``hold_rows=65536``: writes of at least that many rows; a part is read only once closed) and as
``epic run``'s sinks use it (every write reaches the file; small tables are not preformatted).

Targets: the part writer at least 1.3x faster than the peer on every table, the other no slower
(at least 0.95x, for the noise).

Run ``.venv/bin/python scripts/bench_csv.py`` (``--rows 200000`` for a quicker run).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from epic.csvio import CsvWriter  # noqa: E402

TARGET = 1.3
TARGET_UNHELD = 0.95


def _players(rng, n):
    names = np.array([f"Player {i:02d}" for i in range(16)])
    return pa.array(names[np.sort(rng.integers(0, 16, n))])


def _stamps(rng, n, runs):
    cuts = np.sort(rng.integers(0, n, runs))
    base = 1_795_607_505_778_862_317 + np.cumsum(rng.integers(1, 10**9, runs + 1))
    return base[np.searchsorted(cuts, np.arange(n), side="right")].astype(np.int64)


def table_q3(rng, n):
    corners = np.arange(100, dtype=np.int64) * 524 + 19_681
    i = rng.integers(0, 100, n)
    return pa.table({
        "entry_time": _stamps(rng, n, n // 20_000 + 1),
        "write_time": _stamps(rng, n, n // 10_000 + 1),
        "ts": _stamps(rng, n, n // 3_000 + 1),
        "player_id": _players(rng, n),
        "cell_x1": corners[i], "cell_y1": corners[(i * 7) % 100],
        "cell_x2": corners[i] + 524, "cell_y2": corners[(i * 7) % 100] + 524,
        "percent_time_in_cell": rng.random(n) * 100,
        "grid": pa.array(np.array(["8x13", "16x25", "32x50", "64x100"])[np.sort(rng.integers(0, 4, n))]),
    })


def table_q1b(rng, n):
    cols = {"entry_time": _stamps(rng, n, n // 5_000 + 1),
            "write_time": _stamps(rng, n, n // 5_000 + 1),
            "ts": _stamps(rng, n, n // 8 + 1),
            "player_id": pa.array(np.array([f"Player {i:02d}" for i in range(16)])[np.arange(n) % 16])}
    for name in ("standing", "trot", "low", "medium", "high", "sprint"):
        # a running total: one value per player, changing every few hundred rows
        vals = np.cumsum(rng.random(n // 300 + 1))[np.arange(n) // 300]
        cols[f"{name}_time"] = vals
        cols[f"{name}_distance"] = vals * 1.7
    return pa.table(cols)


def table_q1a(rng, n):
    return pa.table({
        "entry_time": _stamps(rng, n, n // 4_000 + 1),
        "write_time": _stamps(rng, n, n // 4_000 + 1),
        "ts_start": np.sort(rng.integers(10**16, 10**16 + 10**15, n)),
        "ts_stop": _stamps(rng, n, n // 15 + 1),
        "player_id": _players(rng, n),
        "intensity": pa.array(np.array(["stop", "trot", "low", "medium", "high", "sprint"])
                              [rng.integers(0, 6, n)]),
        "distance": rng.random(n) * 50, "speed": rng.random(n) * 30,
    })


def epic_write(path, table, step, hold=0):
    with CsvWriter(path, header=False, hold_rows=hold) as w:
        for i in range(0, table.num_rows, step):
            w.write(table.slice(i, step))


def peer_write(path, table, step):
    with pa.OSFile(str(path), "wb") as f:
        for i in range(0, table.num_rows, step):
            pacsv.write_csv(table.slice(i, step), f, write_options=pacsv.WriteOptions(
                include_header=False, quoting_style="none"))


def best_of(fn, repeat):
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--write-rows", type=int, default=5_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(2013)
    failed = False
    print(f"{args.rows:,} rows per table, writes of {args.write_rows:,} rows, best of "
          f"{args.repeat}; targets: epic part writer >= {TARGET}x the peer, epic run's writer "
          f">= {TARGET_UNHELD}x")
    print(f"{'table':6} {'MB':>6} {'peer ns/row':>12} {'epic part ns/row':>17} {'speed-up':>9} "
          f"{'epic run ns/row':>16} {'speed-up':>9}  bytes   result")
    with tempfile.TemporaryDirectory() as d:
        for name, make in (("q3", table_q3), ("q1b", table_q1b), ("q1a", table_q1a)):
            table = make(rng, args.rows)
            a, u, b = (os.path.join(d, f) for f in ("epic.csv", "unheld.csv", "peer.csv"))
            t_peer = best_of(lambda: peer_write(b, table, args.write_rows), args.repeat)
            t_epic = best_of(lambda: epic_write(a, table, args.write_rows, 1 << 16), args.repeat)
            t_unheld = best_of(lambda: epic_write(u, table, args.write_rows), args.repeat)
            with open(a, "rb") as fa, open(u, "rb") as fu, open(b, "rb") as fb:
                ref = fb.read()
                same = fa.read() == ref and fu.read() == ref
            ratio, ratio_u = t_peer / t_epic, t_peer / t_unheld
            ok = same and ratio >= TARGET and ratio_u >= TARGET_UNHELD
            failed |= not ok
            ns = 1e9 / args.rows
            print(f"{name:6} {os.path.getsize(a) / 1e6:6.0f} {t_peer * ns:12.0f} "
                  f"{t_epic * ns:17.0f} {ratio:8.2f}x {t_unheld * ns:16.0f} {ratio_u:8.2f}x  "
                  f"{'equal' if same else 'DIFFER'}  {'ok' if ok else 'MISSED'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
