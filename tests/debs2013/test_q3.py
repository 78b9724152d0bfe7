"""Query 3: time-weighted one-second heat maps, the HeatMap UDA and grid derivation."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from debs2013.config import Q3Config
from debs2013.q3 import (HEATMAP_SCHEMA, HeatMap, HeatMapOperator, cell_of, grid_weights,
                         q3_rows)
from epic.aggregates import AggSpec
from epic.windows import WindowOperator, few_time
from qkit import MS, PS, assert_cut_invariant, game, run_table

CFG = Q3Config(origin=0, base_grid=(64, 100))  # small cell numbers in the expectations


def test_cell_numbering_and_edges():
    """i counts along x, j along y from -33960; the max edge is in the last cell; outside -1."""
    assert cell_of([0], [-33960], 1, (8, 13)).tolist() == [0]
    assert cell_of([52483], [33965], 1, (8, 13)).tolist() == [8 * 13 - 1]
    assert cell_of([6560], [-33960], 1, (8, 13)).tolist() == [0]
    assert cell_of([6561], [-33960], 1, (8, 13)).tolist() == [1]
    assert cell_of([-1], [0], 1, (8, 13)).tolist() == [-1]
    # mean of two shoes, exact: (6560 + 6562) / 2 = 6561 -> cell 1
    assert cell_of([6560 + 6562], [2 * -33960], 2, (8, 13)).tolist() == [1]


def test_time_weighting_to_the_next_sample():
    """Each sample's time until the player's next sample goes to its cell, split at seconds."""
    rows = [{"sid": 47, "ts": 0, "x": 100, "y": -33900},
            {"sid": 16, "ts": 0, "x": 100, "y": -33900},
            {"sid": 47, "ts": 700 * MS, "x": 2000, "y": -33900},   # mean x 1050 -> cell 1
            {"sid": 16, "ts": 1300 * MS, "x": 2000, "y": -33900},  # both at 2000 -> cell 2
            {"sid": 13, "ts": 1900 * MS, "x": 30000, "y": 0}]      # another player ends data
    out = run_table(lambda: HeatMapOperator(CFG), game(rows)).to_pylist()
    dennis = [r for r in out if r["player_id"] == "Dennis Dotterweich"]
    assert dennis[0] == {"ts": 0, "player_id": "Dennis Dotterweich", "cells": [0, 1],
                         "times": [700 * MS, 300 * MS]}
    # second 1: cell 1 until 1.3 s; the sample at 1.3 s is Dennis's last: no next sample, so
    # it holds for nothing (only observed time counts)
    assert dennis[1]["cells"] == [1]
    assert dennis[1]["times"] == [300 * MS]


def test_max_gap_and_outside_field():
    """A gap longer than max_gap is unobserved (the sample before it holds for nothing, as does
    the last sample); positions outside the field count nowhere."""
    rows = [{"sid": 47, "ts": 0, "x": 100, "y": 0}, {"sid": 47, "ts": 200 * MS, "x": 100, "y": 0},
            {"sid": 47, "ts": 3 * PS, "x": -5, "y": 0},
            {"sid": 47, "ts": 3 * PS + 200 * MS, "x": 100, "y": 0},
            {"sid": 47, "ts": 3 * PS + 400 * MS, "x": 100, "y": 0},
            {"sid": 13, "ts": 4 * PS, "x": 100, "y": 0}]
    out = run_table(lambda: HeatMapOperator(Q3Config(origin=0, max_gap_ps=PS // 4)),
                    game(rows)).to_pylist()
    dennis = [(r["ts"], sum(r["times"])) for r in out if r["player_id"] == "Dennis Dotterweich"]
    assert dennis == [(0, 200 * MS), (3 * PS, 200 * MS)]


def test_cut_invariance_and_snapshots():
    """Random cuts and snapshot/restore give identical maps."""
    rng = np.random.default_rng(1)
    rows = []
    for sid in (47, 16, 13, 14):
        t = int(rng.integers(0, 5 * MS))
        while t < 6 * PS:
            rows.append({"sid": sid, "ts": t, "x": int(rng.integers(-500, 53000)),
                         "y": int(rng.integers(-34000, 34000))})
            t += int(rng.integers(1, 400 * MS))
    assert_cut_invariant(lambda: HeatMapOperator(CFG), game(rows))


def test_grid_weights_exact_and_proportional():
    """64 -> 32 folds pairs exactly; 100 -> 13 splits base cells by overlap; columns sum to 1."""
    w = grid_weights(64, 32)
    assert set(np.unique(w).tolist()) == {0.0, 1.0} and (w.sum(axis=0) == 1).all()
    w13 = grid_weights(100, 13)
    assert np.allclose(w13.sum(axis=0), 1.0)
    assert w13[0, 7] == pytest.approx(9 / 13) and w13[1, 7] == pytest.approx(4 / 13)
    assert (grid_weights(1300, 13).sum(axis=0) == 1).all()


def _window(maps, length=2):
    spec = AggSpec(HeatMap(CFG.base_grid), ("cells", "times"), "heat")
    w = WindowOperator(few_time(length, 1, 1, origin=0), [spec], HEATMAP_SCHEMA, "ts", "ps",
                       key="player_id")
    out = w.on_batch(maps) + w.on_end()
    return pa.Table.from_batches(out).combine_chunks().to_batches()[0]


def test_uda_window_and_percentages():
    """A 2 s window adds and removes maps; grids derive from the base counts; sums are 100 %."""
    maps = pa.RecordBatch.from_pylist([
        {"ts": 0, "player_id": "P", "cells": [0, 1], "times": [3 * 10**11, 7 * 10**11]},
        {"ts": PS, "player_id": "P", "cells": [1], "times": [PS]},
        {"ts": 2 * PS, "player_id": "P", "cells": [6399], "times": [PS]},
    ], schema=HEATMAP_SCHEMA)
    win = _window(maps)
    at3 = q3_rows(win, (64, 100)).to_pylist()
    rows3 = [r for r in at3 if r["ts"] == 3 * PS]
    exact = Q3Config(corners="exact")
    rows3 = [r for r in q3_rows(win, (64, 100), exact).to_pylist() if r["ts"] == 3 * PS]
    assert [(round(r["cell_x1"], 3), r["percent_time_in_cell"]) for r in rows3] == [
        (round(52483 / 64, 3), 50.0), (round(63 * 52483 / 64, 3), 50.0)]
    # default corners: whole millimetres, the spec's worked example (0, -33960)-(6560, -28735)
    assert [r["cell_x1"] for r in at3 if r["ts"] == 3 * PS] == [820, 51663]
    coarse = [r for r in q3_rows(win, (8, 13)).to_pylist() if r["ts"] == 2 * PS]
    assert len(coarse) == 1 and coarse[0]["percent_time_in_cell"] == pytest.approx(100.0)
    assert [coarse[0][f"cell_{c}"] for c in ("x1", "y1", "x2", "y2")] == [0, -33960, 6560, -28735]
    fine = [r for r in q3_rows(win, (8, 13), exact).to_pylist() if r["ts"] == 2 * PS]
    assert fine[0]["cell_x2"] == pytest.approx(6560.375)
    assert fine[0]["cell_y2"] == pytest.approx(-33960 + 5225)
    dense = q3_rows(win, (8, 13), Q3Config(dense=True)).to_pylist()
    assert len(dense) == 104 * len(win)
    for t in {r["ts"] for r in dense}:
        assert sum(r["percent_time_in_cell"] for r in dense if r["ts"] == t) == pytest.approx(100)
    agg = HeatMap()
    s = agg.add(agg.init(), ([1, 5], [10, 20]))
    res = agg.result(agg.merge(s, s))
    assert (res["cells"].tolist(), res["times"].tolist()) == ([1, 5], [20, 40])
    # add and remove work in place (epic.Aggregate allows it); a result is a copy
    kept = agg.result(s)
    assert not agg.remove(s, ([1, 5], [10, 20])).any()
    assert kept["times"].tolist() == [10, 20]


def test_no_map_is_emitted_behind_the_forwarded_watermark():
    """The runtime contract (epic/operator.py): after each call a runtime forwards
    ``min(input watermark, output_watermark)``, and no later map may be older than that, or the
    q3 windows drop it as late. Players whose samples stop (a gap over max_gap, the end of their
    data) hold their last period back while the others' samples move the watermark on."""
    from epic.operator import watermark_hold

    rng = np.random.default_rng(3)
    rows = []
    for sid, stop in ((47, 6 * PS), (16, 6 * PS), (13, 2 * PS + 300 * MS), (14, 4 * PS)):
        t = int(rng.integers(0, 5 * MS))
        while t < stop:
            rows.append({"sid": sid, "ts": t, "x": int(rng.integers(0, 52000)),
                         "y": int(rng.integers(-33000, 33000))})
            t += int(rng.integers(1, 400 * MS)) if rng.random() < 0.9 else int(1.5 * PS)
    table = game(rows)
    checked = 0
    for seed in range(4):
        op = HeatMapOperator(Q3Config(origin=0, base_grid=(64, 100)))
        forwarded = None
        cuts = np.sort(np.random.default_rng(seed).choice(table.num_rows, 12, replace=False))
        for a, b in zip([0, *cuts], [*cuts, table.num_rows]):
            part = table.slice(a, b - a)
            if not part.num_rows:
                continue
            wm = int(part.column("ts").to_numpy().max())
            for out in (op.on_batch(part.to_batches()[0]), op.on_watermark(wm)):
                for batch in out:
                    ts = batch.column("ts").to_numpy()
                    if forwarded is not None:
                        assert ts.min() >= forwarded, (seed, int(ts.min()), forwarded)
                    checked += len(ts)
                forwarded = watermark_hold(op, wm)
    assert checked > 20


def _heat_rows(rng, n, size, per_row, shuffle=False):
    """A window batch of ``n`` random sparse heat maps over ``size`` base cells (cells ascending
    per row, as HeatMap.result gives them, unless ``shuffle``), some rows empty."""
    agg = HeatMap()
    cells, times = [], []
    for i in range(n):
        k = 0 if i % 17 == 5 else int(rng.integers(1, per_row))
        c = np.unique(rng.integers(0, size, k)).astype(np.int32)
        if shuffle:
            c = rng.permutation(c)
        cells.append(c)
        times.append(rng.integers(1, 2 * 10**12, len(c)).astype(np.int64))
    heat = pa.StructArray.from_arrays(
        [pa.array(cells, pa.list_(pa.int32())), pa.array(times, pa.list_(pa.int64()))],
        fields=list(agg.output_type([]))) if n else None
    ends = (np.arange(n) + 1) * PS
    return pa.record_batch(
        [pa.array([f"P{int(x)}" for x in rng.integers(0, 16, n)]), pa.array(ends - 60 * PS),
         pa.array(ends), pa.array([True] * n), heat],
        names=["player_id", "window_start", "window_end", "final", "heat"])


def _reference_rows(batch, cfg, got) -> dict:
    """The rows of :func:`q3_rows`, one window row and one grid at a time, in the report's
    (window row, grid, cell) order, as columns named like ``got``'s (window ends distinct)."""
    from debs2013 import constants as C
    from debs2013.dataflow import grid_name

    per_grid = {g: q3_rows(batch, g, cfg).to_pylist() for g in C.Q3_GRIDS}
    exp = {k: [] for k in got}
    for end in batch.column("window_end").to_pylist():
        for g in C.Q3_GRIDS:
            for r in per_grid[g]:
                if r["ts"] == end:
                    for k, v in r.items():
                        exp[k].append(v)
                    exp["grid"].append(grid_name(g))
    return exp


def _assert_rows_equal(got: dict, exp: dict, rtol: float) -> None:
    for k in got:
        if k == "percent_time_in_cell":
            np.testing.assert_allclose(got[k], exp[k], rtol=rtol, atol=0)
        else:
            assert got[k] == exp[k], k


@pytest.mark.parametrize("base_grid", [(64, 100, 13), (64, 100), (64, 1300), (128, 200)])
@pytest.mark.parametrize("per_row", [4, 3000])
@pytest.mark.parametrize("shuffle", [False, True], ids=["ascending", "shuffled"])
def test_all_grids_equal_the_per_row_reference(base_grid, per_row, shuffle):
    """The vectorised q3 report (every grid of a batch at once; sparse rows folded by segments
    of a coarse row, dense ones through a table of every cell) gives the rows of
    :func:`q3_rows`, one window row and one grid at a time: same rows in (window row, grid,
    cell) order, same corners, percentages equal to 1e-12 (exact where the grids divide each
    other). Sparse and dense rows, empty rows, base grids that divide the four grids or not,
    and cells out of order (not what HeatMap gives, but not to be miscounted)."""
    from debs2013.dataflow import q3_all_grids
    from debs2013.q3 import base_shape

    rng = np.random.default_rng(per_row * 7 + len(base_grid))
    bx, by = base_shape(base_grid)
    for corners in ("mm", "exact"):
        cfg = Q3Config(base_grid=base_grid, corners=corners)
        batch = _heat_rows(rng, 40, bx * by, per_row, shuffle)
        got = q3_all_grids(batch, cfg).to_pydict()
        exp = _reference_rows(batch, cfg, got)
        assert len(got["ts"]) == len(exp["ts"]) > 0
        _assert_rows_equal(got, exp, rtol=1e-12)


@pytest.mark.parametrize("base_grid", [(64, 100, 13), (128, 200, 13)])
@pytest.mark.parametrize("denominator", ["field", "window"])
def test_folded_heat_map_state_gives_the_rows_of_the_per_row_reference(base_grid, denominator):
    """``HeatMap(base, grids=Q3_GRIDS)`` folds each map's base cells into the four grids as it
    enters or leaves (add / remove, their batch forms, merge); the report of its results
    (``q3_all_grids(folded=True)``) must equal :func:`q3_rows`, grid by grid, on the base-grid
    states of the same maps: same rows in (window row, grid, cell) order, same corners, the
    same percentages to the last bit (the sums are the same integers)."""
    from debs2013 import constants as C
    from debs2013.dataflow import q3_all_grids, q3_all_grids_chunked, q3_out_schema
    from debs2013.q3 import base_shape

    rng = np.random.default_rng(len(base_grid) + len(denominator))
    bx, by = base_shape(base_grid)
    base, folded = HeatMap(base_grid), HeatMap(base_grid, C.Q3_GRIDS)
    maps = []
    for i in range(60):
        k = 0 if i % 13 == 4 else int(rng.integers(1, 40))
        c = np.unique(rng.integers(0, bx * by, k))
        maps.append((c, rng.integers(1, 10**12, len(c))))
    sb, sf = base.init(), folded.init()
    res_b, res_f, ends = [], [], []
    for i, (c, t) in enumerate(maps):       # a sliding window of 7 maps, in several forms
        if i % 3 == 0:
            sb, sf = base.add(sb, (c, t)), folded.add(sf, (c, t))
        elif i % 3 == 1:
            sb = base.add_batch(sb, (np.array([c], object), np.array([t], object)))
            sf = folded.add_batch(sf, (np.array([c], object), np.array([t], object)))
        else:
            sb = base.merge(sb, base.add(base.init(), (c, t)))
            sf = folded.merge(sf, folded.add(folded.init(), (c, t)))
        if i >= 7:
            old = maps[i - 7]
            sb, sf = base.remove(sb, old), folded.remove_batch(
                sf, (np.array([old[0]], object), np.array([old[1]], object)))
        res_b.append(base.result(sb))
        res_f.append(folded.result(sf))
        ends.append((i + 1) * PS)

    def window_batch(results):
        heat = pa.StructArray.from_arrays(
            [pa.array([r["cells"] for r in results], pa.list_(pa.int32())),
             pa.array([r["times"] for r in results], pa.list_(pa.int64()))],
            fields=list(base.output_type([])))
        e = np.array(ends)
        return pa.record_batch(
            [pa.array([f"P{i % 5}" for i in range(len(results))]), pa.array(e - 7 * PS),
             pa.array(e), pa.array([True] * len(results)), heat],
            names=["player_id", "window_start", "window_end", "final", "heat"])

    for corners in ("mm", "exact"):
        cfg = Q3Config(base_grid=base_grid, corners=corners, denominator=denominator)
        got = q3_all_grids(window_batch(res_f), cfg, folded=True)
        chunks = q3_all_grids_chunked(window_batch(res_f), cfg, max_rows=300, folded=True)
        assert len(chunks) > 1
        # the names as strings: without a roster each chunk has a dictionary of its own
        out = q3_out_schema(cfg)
        assert pa.Table.from_batches(chunks).cast(out).equals(
            pa.Table.from_batches([got]).cast(out))
        got = got.to_pydict()
        exp = _reference_rows(window_batch(res_b), cfg, got)
        assert len(got["ts"]) == len(exp["ts"]) > 100
        _assert_rows_equal(got, exp, rtol=2e-16)


def test_a_folded_heat_map_needs_a_base_grid_that_refines_the_grids():
    from debs2013 import constants as C
    from epic.errors import SpecError

    with pytest.raises(SpecError, match=r"does not refine the 8x13 grid"):
        HeatMap((64, 100), C.Q3_GRIDS)
    with pytest.raises(ValueError, match="a state of 7168 cells, expected 8504"):
        HeatMap((64, 100, 13), C.Q3_GRIDS).result(np.zeros(7168, np.int64))


def test_player_indices_refer_to_the_roster_or_to_the_batch():
    """q3 rows' ``player_id`` (``dataflow._player_indices``): indices into the roster's names,
    the same dictionary object for every batch (a Parquet writer then writes it as it is);
    a name not in the roster, or no roster: a dictionary of the batch's own. Either way the
    values are the batch's names, whatever their order, repeats or absence."""
    from debs2013.dataflow import _player_indices

    rng = np.random.default_rng(7)
    roster = ("Nick Gertje", "Wili Sommer", "", "Erik Engelhardt")
    seen = set()
    for trial in range(200):
        n = int(rng.integers(0, 60))
        names = [roster[k] for k in rng.integers(0, len(roster), n)]
        if trial % 4 == 3 and n:
            names[int(rng.integers(0, n))] = "Not In Roster"
        col = pa.array(names, pa.string())
        for players in (roster, ()):
            idx, dictionary = _player_indices(col, players)
            assert idx.dtype == np.int32 and len(idx) == n
            assert [dictionary[int(k)].as_py() for k in idx] == names, (trial, players)
            if players and "Not In Roster" not in names:
                seen.add(id(dictionary))
                assert dictionary.to_pylist() == list(roster)
    assert len(seen) == 1   # one dictionary for every batch
