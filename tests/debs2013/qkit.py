"""Shared helpers of the DEBS query tests: build game streams, run operators, cut batches."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from debs2013.common import GAME_SCHEMA, RESUME, STOP

PS = 10**12
MS = 10**9

FIELDS = [f.name for f in GAME_SCHEMA]


def game(rows) -> pa.Table:
    """A GAME_SCHEMA table from dicts with at least ``sid`` and ``ts`` (others default to 0;
    ``marker="stop"|"resume"`` makes a marker row). Rows are sorted stably by ts."""
    rows = sorted(rows, key=lambda r: r["ts"])
    cols = {f: [] for f in FIELDS}
    for r in rows:
        m = r.get("marker", 0)
        m = {"stop": STOP, "resume": RESUME}.get(m, m)
        for f in FIELDS:
            if f == "marker":
                cols[f].append(m)
            elif f == "sid":
                cols[f].append(r.get("sid", -1) if not m else -1)
            else:
                cols[f].append(int(r.get(f, 0)))
    return pa.Table.from_pydict(cols, schema=GAME_SCHEMA)


def shoe_rows(sids, t0, t1, step, **fields):
    """Rows of several sensors every ``step`` ps in [t0, t1); fields may be callables of t."""
    out = []
    for k, sid in enumerate(sids):
        for t in range(t0 + k, t1, step):
            r = {"sid": sid, "ts": t}
            for name, val in fields.items():
                r[name] = val(t) if callable(val) else val
            out.append(r)
    return out


def cut(table: pa.Table, rng: np.random.Generator, max_cuts: int = 8) -> list[pa.RecordBatch]:
    """The table cut at random positions into record batches (possibly empty ones)."""
    n = table.num_rows
    k = int(rng.integers(0, max_cuts + 1))
    points = sorted(set(rng.integers(0, n + 1, size=k).tolist()) | {0, n})
    return [b for a, z in zip(points, points[1:]) for b in table.slice(a, z - a).to_batches()]


def run(make_op, batches, snapshot_every: bool = False, watermarks=None) -> pa.Table:
    """Run a fresh operator over ``batches`` (+ on_end); optionally snapshot and restore into a
    fresh operator between every two batches."""
    op = make_op()
    out = []
    for i, b in enumerate(batches):
        out += op.on_batch(b)
        if watermarks and i in watermarks:
            out += op.on_watermark(watermarks[i])
        if snapshot_every:
            data = op.snapshot()
            op = make_op()
            op.restore(data)
    out += op.on_end()
    out = [b for b in out if b.num_rows]
    if not out:
        return op.output_schema.empty_table()
    return pa.Table.from_batches(out, schema=op.output_schema)


def run_table(make_op, table: pa.Table) -> pa.Table:
    """One batch, then on_end."""
    return run(make_op, table.to_batches(max_chunksize=table.num_rows or 1))


def assert_cut_invariant(make_op, table: pa.Table, seeds=range(6), strip=None):
    """Random batch cuts, with and without snapshot/restore, give the one-batch output
    (both through ``strip``, when given: it takes off rows that depend on the cuts)."""
    strip = strip or (lambda t: t)
    ref = run_table(make_op, table)
    for seed in seeds:
        rng = np.random.default_rng(seed)
        got = run(make_op, cut(table, rng), snapshot_every=bool(seed % 2))
        assert strip(got).to_pylist() == strip(ref).to_pylist(), f"seed {seed}"
    return ref
