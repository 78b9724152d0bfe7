#!/usr/bin/env python
"""Linear vs backtracking sequence-pattern matching (epic.patterns), measured in one run.

Both matchers run the same pattern over the same generated rows, fed to the operator in batches
of 1000 with a watermark after each; the script checks that their matches are identical and
prints seconds, user-condition calls and rows/s. Workloads:

* ``browse``: ``(*A, B)`` with A = "not a description page", B = a description page,
  ``count(*A) < 20`` (ESL-TS example b without anchoring). Browsing runs are long (1..max_run
  pages), so every failed attempt restarts inside a run: backtracking re-reads the run
  (quadratic per run), the linear matcher jumps to the run's known end.
* ``browse_x4``: the same with runs 4x longer: backtracking time grows ~4x per row, linear stays.
* ``jam``: ``(X, *Y)`` with Y decreasing, ``ccount(Y) <= 6``, ``LAST(*Y) < 0.3 X`` (example c):
  Y's condition reads X and the star's count, so it cannot be shared; both matchers do the same
  bounded work (reported, not gated).

Exit status 1 if the linear matcher is not at least ``--margin`` (default 5) times faster than
backtracking on ``browse``, or if any outputs differ.

    python scripts/bench_patterns.py [--rows 60000] [--max-run 200] [--margin 5]
"""

from __future__ import annotations

import argparse
import random
import sys
import time

import pyarrow as pa

import epic
from epic.patterns import PatternMatcher

SCHEMA = pa.schema([("k", pa.int64()), ("ts", pa.int64()), ("page", pa.string()),
                    ("speed", pa.float64())])


def browse_rows(n: int, max_run: int, seed: int = 1) -> list[dict]:
    rnd = random.Random(seed)
    rows, ts, keys = [], 0, 8
    left = {k: 0 for k in range(keys)}
    while len(rows) < n:
        k = rnd.randrange(keys)
        if left[k] == 0:
            left[k] = rnd.randint(1, max_run)
            page = "pd"
        else:
            left[k] -= 1
            page = rnd.choice(["ad", "home", "search", "list"])
        ts += 1
        rows.append({"k": k, "ts": ts, "page": page, "speed": 0.0})
    return rows


def jam_rows(n: int, seed: int = 2) -> list[dict]:
    rnd = random.Random(seed)
    rows, speed = [], {k: 60.0 for k in range(8)}
    for i in range(n):
        k = i % 8
        s = speed[k]
        s = s * rnd.uniform(0.55, 0.95) if rnd.random() < 0.7 and s > 8 else rnd.uniform(30, 90)
        speed[k] = s
        rows.append({"k": k, "ts": i, "page": "", "speed": round(s, 2)})
    return rows


BROWSE = dict(
    elements=lambda: [epic.star("A", lambda cur: cur["page"] != "pd",
                                having=lambda m: m["A"].count < 20),
                      epic.var("B", lambda cur: cur["page"] == "pd")],
    select={"pages": "A.count"})
JAM = dict(
    elements=lambda: [epic.var("X", lambda cur: cur["speed"] > 50),
                      epic.star("Y", lambda cur, prev, m: (cur["speed"] < (prev or m["X"])["speed"]
                                                           and m["Y"].count <= 6),
                                having=lambda m: m["Y"].last["speed"] < 0.3 * m["X"]["speed"])],
    select={"n": "Y.count"})


def measure(spec: dict, rows: list[dict], matcher: str) -> tuple[float, int, list]:
    pat = epic.pattern(*spec["elements"](), matcher=matcher)
    op = PatternMatcher(pat, SCHEMA, "ts", "s", ("k",), spec["select"])()
    batches = [pa.RecordBatch.from_pylist(rows[i:i + 1000], schema=SCHEMA)
               for i in range(0, len(rows), 1000)]
    out = []
    t0 = time.perf_counter()
    for b in batches:
        out += op.on_batch(b)
        out += op.on_watermark(b.column("ts")[-1].as_py())
    out += op.on_end()
    secs = time.perf_counter() - t0
    return secs, op.evaluations, [r for b in out for r in b.to_pylist()]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--rows", type=int, default=60_000)
    ap.add_argument("--max-run", type=int, default=200)
    ap.add_argument("--margin", type=float, default=5.0,
                    help="required speed-up of linear over backtracking on 'browse'")
    args = ap.parse_args(argv)
    work = [("browse", BROWSE, browse_rows(args.rows, args.max_run)),
            ("browse_x4", BROWSE, browse_rows(args.rows, 4 * args.max_run)),
            ("jam", JAM, jam_rows(args.rows))]
    print(f"{'workload':<10} {'rows':>7} {'matcher':<13} {'seconds':>8} {'conditions':>11} "
          f"{'matches':>8} {'rows/s':>10} {'speed-up':>9}")
    ok = True
    for name, spec, rows in work:
        res = {m: measure(spec, rows, m) for m in ("backtracking", "linear")}
        if res["linear"][2] != res["backtracking"][2]:
            print(f"{name}: the matchers' outputs differ", file=sys.stderr)
            ok = False
        ratio = res["backtracking"][0] / res["linear"][0]
        for m, (secs, evals, out) in res.items():
            print(f"{name:<10} {len(rows):>7} {m:<13} {secs:>8.3f} {evals:>11} {len(out):>8} "
                  f"{len(rows) / secs:>10.0f} {ratio if m == 'linear' else 1.0:>8.1f}x")
        if name == "browse" and ratio < args.margin:
            print(f"browse: linear is {ratio:.1f}x faster, below the required {args.margin}x",
                  file=sys.stderr)
            ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
