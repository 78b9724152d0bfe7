"""Correctness of the DEBS 2013 queries on a generated game (issue 5, section 5).

* Q1 and Q3 against ``offline.py``, an exact computation written from the spec with numpy/pandas
  that shares no code with ``debs2013/q1.py`` / ``q3.py``: equal within 1e-6 relative.
* Q2 / Q4 against the generator's planted truth (``<game>.truth.json``): hit recall and precision,
  shots, possession time per player.
* FEW windows emit early (every ``ef`` from the origin on).
* The real referee files' interruption counts (34 / 38 per spec §4.2) are checked in
  ``test_readers.py::test_real_first_half_interruptions`` and ``..._second_half_...``; not repeated.

The game is the session fixture ``short_game`` (conftest.py): 1.5 minutes per half.
Until ``topologies/debs2013.py`` exists the operators are run directly, wired as the issue's
dataflow describes (front end -> FEW windows with the UDA).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

import offline as off
from debs2013 import constants as C
from debs2013.config import Q1Config
from debs2013.q1 import INCREMENT_SCHEMA, RunningOperator, RunningStats, q1b_rows
from epic.aggregates import AggSpec
from epic.windows import WindowOperator, few_time, landmark

PS = C.PS_PER_S
REL = 1e-6
BATCH_ROWS = 1 << 18


def _run(op, batches):
    out = []
    for b in batches:
        out += op.on_batch(b)
    out += op.on_end()
    return [b for b in out if b.num_rows]


def _close(expected, got, rel=REL, abs_floor=0.0):
    """Elementwise |expected - got| <= rel * |expected| + abs_floor; returns the bad mask."""
    expected = np.asarray(expected, np.float64)
    got = np.asarray(got, np.float64)
    return np.abs(expected - got) > rel * np.abs(expected) + abs_floor


# ------------------------------------------------------------------------------------------------
# Query 1


@pytest.fixture(scope="module")
def shoes(short_game):
    return off.read_shoes(short_game.path)


@pytest.fixture(scope="module")
def offline_q1(shoes, short_game):
    """Per player: (state, segments) of the offline computation."""
    out = {}
    for name, rows in shoes.items():
        st = off.player_state(rows)
        out[name] = (st, off.segments(st, short_game.end))
    return out


def _instants(first_ts: int, end: int, period: int, origin: int = C.FIRST_HALF_START):
    """Emission grid ``origin + m*period`` in (grid point at or before first_ts, end], plus the
    end of the input when it is off the grid (q1a's last row)."""
    start = origin + ((first_ts - origin) // period) * period
    inst = np.arange(start + period, end + 1, period, dtype=np.int64)
    if (end - origin) % period:
        inst = np.append(inst, np.int64(end))
    return inst


def test_q1a_equals_offline(short_game, offline_q1):
    """q1a at 50 Hz: the same rows (instant rows and segment-closing rows: ts_start, ts_stop,
    player, intensity) and distance / speed within 1e-6 relative."""
    op = RunningOperator(Q1Config(), emit="q1a")
    got = pa.Table.from_batches(_run(op, short_game.table.to_batches(BATCH_ROWS))).to_pandas()
    first = int(np.min(short_game.table.column("ts").to_numpy()))
    inst = _instants(first, short_game.end, Q1Config().emit_period_ps)
    rows = []
    for name, (st, seg) in offline_q1.items():
        for t, s, c, d, v, closing in off.q1a_rows(st, seg, inst):
            rows.append((t, name, s, off.CLASSES[c], d, v, closing))
    exp = pd.DataFrame(rows, columns=["ts_stop", "player_id", "ts_start", "intensity",
                                      "distance", "speed", "closing"])
    assert exp["closing"].sum() > 100  # the game has many segment changes
    assert set(exp["intensity"]) == set(off.CLASSES)
    keys = ["ts_stop", "player_id", "ts_start", "intensity"]
    assert not got.duplicated(keys).any()
    m = exp.merge(got, on=keys, how="outer", indicator=True, suffixes=("_e", "_g"))
    missing = m[m["_merge"] == "left_only"]
    extra = m[m["_merge"] == "right_only"]
    assert missing.empty and extra.empty, (
        f"{len(missing)} expected rows missing, {len(extra)} unexpected rows:\n"
        f"{missing.head().to_string()}\n{extra.head().to_string()}")
    for col in ("distance", "speed"):
        bad = _close(m[col + "_e"], m[col + "_g"], abs_floor=1e-12)
        assert not bad.any(), m[bad].head().to_string()


def _q1b(increments, window, first_half_only=False) -> pd.DataFrame:
    spec = AggSpec(RunningStats(), ("intensity", "time", "distance"), "stats")
    op = WindowOperator(window, [spec], INCREMENT_SCHEMA, "ts", "ps", key="player_id")
    batches = increments
    if first_half_only:
        batches = [b.filter(pa.compute.less(b.column("ts"), C.FIRST_HALF_END)) for b in batches]
    out = _run(op, batches)
    return pd.concat([q1b_rows(b).to_pandas() for b in out], ignore_index=True)


def _check_q1b(got: pd.DataFrame, offline_q1, length_s, end, period):
    """Every q1b row equals the offline per-intensity time / distance of its window."""
    assert len(got)
    for name, (st, seg) in offline_q1.items():
        g = got[got["player_id"] == name].sort_values("ts")
        assert len(g), name
        ends = g["ts"].to_numpy()
        T, D = off.q1b_window(st, seg, ends, None if length_s is None else length_s * PS, end)
        # increments carry distance in whole nanometres (exact add/remove): allow 1 nm per slice
        slices = (np.minimum(ends, end) - np.maximum(
            C.FIRST_HALF_START, ends - (length_s or 10**6) * PS)) / period + 1
        for c, cls in enumerate(off.CLASSES):
            bad_t = _close(T[c], g[f"{cls}_time"].to_numpy(), abs_floor=1e-12)
            bad_d = _close(D[c], g[f"{cls}_distance"].to_numpy(), abs_floor=1e-9 * slices)
            assert not bad_t.any(), (name, cls, ends[bad_t][:3], T[c][bad_t][:3],
                                     g[f"{cls}_time"].to_numpy()[bad_t][:3])
            assert not bad_d.any(), (name, cls, ends[bad_d][:3], D[c][bad_d][:3],
                                     g[f"{cls}_distance"].to_numpy()[bad_d][:3])


@pytest.fixture(scope="module")
def increments_50hz(short_game):
    op = RunningOperator(Q1Config(), emit="increments")
    return _run(op, short_game.table.to_batches(BATCH_ROWS))


@pytest.mark.parametrize("length_s, first_half_only", [(60, False), (300, False), (1200, True),
                                                       (None, True)],
                         ids=["1M", "5M", "20M-1st-half", "landmark-1st-half"])
def test_q1b_50hz_equals_offline(short_game, offline_q1, increments_50hz, length_s,
                                 first_half_only):
    """q1b at 50 Hz (ef = 20 ms) per window. 1M and 5M over both halves; 20M and the landmark
    over the 1st half only (they emit every 20 ms through the 37-minute half-time gap, about 2 M
    rows; the 1-second test below covers them over both halves)."""
    period = Q1Config().emit_period_ps
    ef = period / PS
    window = (landmark(ef, origin=C.FIRST_HALF_START) if length_s is None
              else few_time(length_s, ef, ef, origin=C.FIRST_HALF_START))
    got = _q1b(increments_50hz, window, first_half_only)
    _check_q1b(got, offline_q1, length_s, short_game.end, period)


def test_q1b_1s_emission_all_windows_both_halves(short_game, offline_q1):
    """EPIC's 1-second emission (``emit_period_ps = 1 s``, windows with ef = 1 s): all four
    q1b windows over both halves, across the half-time gap."""
    cfg = Q1Config(emit_period_ps=PS)
    inc = _run(RunningOperator(cfg, emit="increments"), short_game.table.to_batches(BATCH_ROWS))
    for length_s in (60, 300, 1200, None):
        window = (landmark(1, origin=C.FIRST_HALF_START) if length_s is None
                  else few_time(length_s, 1, 1, origin=C.FIRST_HALF_START))
        got = _q1b(inc, window)
        assert (got["ts"] > C.SECOND_HALF_START).any()
        _check_q1b(got, offline_q1, length_s, short_game.end, PS)


# ------------------------------------------------------------------------------------------------
# Query 3

GRIDS = [(8, 13), (16, 25), (32, 50), (64, 100)]
Q3_WINDOWS = [60, 300, 600, None]


def _q3_window_rows(maps, length_s, base_grid, short_game, every=1):
    """The HeatMap window over the one-second maps (every 1 s from kick-off), keeping the rows
    whose instant lies in a half's data (+1 s): in the half-time gap a window only repeats.
    ``every=k`` keeps every k-th instant (and the last) to bound the test's time."""
    from debs2013.q3 import HEATMAP_SCHEMA, HeatMap

    spec = AggSpec(HeatMap(base_grid), ("cells", "times"), "heat")
    window = (landmark(1, origin=C.FIRST_HALF_START) if length_s is None
              else few_time(length_s, 1, 1, origin=C.FIRST_HALF_START))
    op = WindowOperator(window, [spec], HEATMAP_SCHEMA, "ts", "ps", key="player_id")
    t = pa.Table.from_batches(_run(op, maps))
    ts = t.column("window_end").to_numpy()
    keep = np.zeros(len(ts), bool)
    for h in short_game.truth["halves"]:
        keep |= (ts > h["data_start_ts"]) & (ts <= h["data_end_ts"] + PS)
    keep &= (((ts - C.FIRST_HALF_START) // PS) % every == 0) | (ts == ts.max())
    assert keep.sum() > 0
    return t.filter(pa.array(keep)).combine_chunks().to_batches()[0]


def _expected_q3(offline_q1, rows: pd.DataFrame, grid, length_s, end) -> pd.DataFrame:
    """Offline percentages for every (player, instant) present in ``rows``; non-zero cells."""
    parts = []
    nx, ny = grid
    for name, g in rows.groupby("player_id"):
        st = offline_q1[name][0]
        ends = np.unique(g["ts"].to_numpy())
        starts = (np.full(len(ends), C.FIRST_HALF_START, np.int64) if length_s is None
                  else np.maximum(C.FIRST_HALF_START, ends - length_s * PS))
        per = off.heat_windows(st, grid, starts, ends, end)
        tot = per.sum(axis=1, keepdims=True)
        pct = np.divide(100.0 * per, tot, out=np.zeros_like(per), where=tot > 0)
        k, cell = np.nonzero(per)
        parts.append(pd.DataFrame({"ts": ends[k], "player_id": name, "i": cell % nx,
                                   "j": cell // nx, "pct": pct[k, cell]}))
    return pd.concat(parts, ignore_index=True)


def _compare_q3(got: pd.DataFrame, exp: pd.DataFrame, grid):
    nx, ny = grid
    w, h = 52483 / nx, 67925 / ny
    got = got.assign(i=np.rint(got["cell_x1"] / w).astype(int),
                     j=np.rint((got["cell_y1"] + 33960) / h).astype(int))
    # corners per spec §7: x1 = i*w, y1 = -33960 + j*h, x2 = x1 + w, y2 = y1 + h
    assert np.allclose(got["cell_x1"], got["i"] * w, rtol=0, atol=1e-6)
    assert np.allclose(got["cell_x2"], (got["i"] + 1) * w, rtol=0, atol=1e-6)
    assert np.allclose(got["cell_y2"], -33960 + (got["j"] + 1) * h, rtol=0, atol=1e-6)
    keys = ["ts", "player_id", "i", "j"]
    m = exp.merge(got, on=keys, how="outer", indicator=True)
    wrong = m[m["_merge"] != "both"]
    both = m[m["_merge"] == "both"]
    bad = _close(both["pct"], both["percent_time_in_cell"], abs_floor=1e-12)
    return wrong, both[bad], len(m)


@pytest.fixture(scope="module")
def heat_maps(short_game):
    from debs2013.config import Q3Config
    from debs2013.q3 import HeatMapOperator

    def make(base_grid):
        op = HeatMapOperator(Q3Config(base_grid=base_grid))
        return _run(op, short_game.table.to_batches(BATCH_ROWS))
    cache = {}
    return lambda base=(64, 100): cache.setdefault(base, make(base))


def _check_q3(short_game, offline_q1, heat_maps, length_s, grids, base_grid, every=1):
    from debs2013.config import Q3Config
    from debs2013.q3 import q3_rows

    win = _q3_window_rows(heat_maps(base_grid), length_s, base_grid, short_game, every)
    for grid in grids:
        got = q3_rows(win, grid, Q3Config(base_grid=base_grid)).to_pandas()
        exp = _expected_q3(offline_q1, got, grid, length_s, short_game.end)
        assert (got["ts"] > C.SECOND_HALF_START).any() and len(got) > 1000
        wrong, bad, n = _compare_q3(got, exp, grid)
        assert wrong.empty and bad.empty, (
            f"grid {grid}: {len(wrong)} of {n} cells only on one side, {len(bad)} differ:\n"
            f"{wrong.head().to_string()}\n{bad.head().to_string()}")


@pytest.mark.parametrize("length_s, every", [(60, 2), (600, 7), (None, 5)],
                         ids=["1M-every-2s", "10M-every-7s", "landmark-every-5s"])
def test_q3_equals_offline(short_game, offline_q1, heat_maps, length_s, every):
    """q3 (default config: 64x100 base grid) for 64x100, 32x50, 16x25, whose cells are unions of
    base cells: every non-zero cell of every player at the instants of both halves (the
    half-time-gap instants only repeat; 10M / landmark every 5-7 s for time; 5M in a 1.5-minute
    half differs from 10M only by name), percentages within 1e-6 relative."""
    _check_q3(short_game, offline_q1, heat_maps, length_s, GRIDS[1:], (64, 100), every)


def test_q3_8x13_exact_with_64x1300_base(short_game, offline_q1, heat_maps):
    """8x13 from the exact ``base_grid=(64, 1300)`` switch, 1-minute window (every 4 s)."""
    _check_q3(short_game, offline_q1, heat_maps, 60, [(8, 13)], (64, 1300), every=4)


@pytest.mark.xfail(strict=True, reason=(
    "Q3Config's default base_grid=(64, 100) derives 8x13 by splitting each fine cell's time over "
    "the coarse cells in proportion to their overlap (100 is not a multiple of 13); spec §7 gives "
    "each sample's time to the cell its position lies in, so 8x13 cells that a 64x100 row "
    "straddles get wrong percentages (measured: up to tens of percentage points). Exact with "
    "base_grid=(64, 1300)."))
def test_q3_8x13_default_config_equals_offline(short_game, offline_q1, heat_maps):
    _check_q3(short_game, offline_q1, heat_maps, 60, [(8, 13)], (64, 100), every=4)
