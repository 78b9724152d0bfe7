"""Query 1: intensity classes, the 1-second rule, distance, q1a rows, increments and the q1b UDA."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from debs2013 import constants as C
from debs2013.config import Q1Config
from debs2013.q1 import INCREMENT_SCHEMA, RunningOperator, RunningStats, q1b_rows
from epic.aggregates import AggSpec
from epic.windows import WindowOperator, few_time, landmark
from qkit import MS, PS, assert_cut_invariant, cut, game, run, run_table

DENNIS = (47, 16)
SAMPLE = 5 * MS


def kmh(k: float) -> int:
    return int(round(k / 3.6e-6))


def phases(*spans, sids=DENNIS, t0=0):
    """Both shoes of one player at 200 Hz with the same |v|, phase by phase: (seconds, raw v)."""
    rows, t = [], t0
    for seconds, v in spans:
        end = t + int(seconds * PS)
        for ts in range(t, end, SAMPLE):
            rows += [{"sid": s, "ts": ts, "v": v} for s in sids]
        t = end
    return rows


def q1a(rows, **cfg):
    config = Q1Config(origin=0, emit_period_ps=cfg.pop("period", PS // 2), **cfg)
    return run_table(lambda: RunningOperator(config, emit="q1a"), game(rows)).to_pylist()


def segments(out):
    """(ts_start, intensity) of the segments in the q1a output, in order of appearance."""
    seen = []
    for r in out:
        key = (r["ts_start"], r["intensity"])
        if key not in seen:
            seen.append(key)
    return seen


@pytest.mark.parametrize("boundary, expected", [("le", "standing"), ("lt", "trot")])
def test_boundary_value_goes_to_lower_class_by_default(boundary, expected):
    """A speed equal to a limit (1 km/h = 277,778 µm/s) is in the lower class with 'le'."""
    out = q1a(phases((2, 277_778)), boundary=boundary)
    assert {r["intensity"] for r in out} == {expected}


@pytest.mark.parametrize("kmh_value, name", [(0.5, "standing"), (5, "trot"), (12, "low"),
                                              (15, "medium"), (20, "high"), (30, "sprint")])
def test_each_class(kmh_value, name):
    """Each speed range maps to its class name."""
    assert {r["intensity"] for r in q1a(phases((2, kmh(kmh_value))))} == {name}


def test_short_stretch_goes_to_next_lasting_intensity():
    """trot 2 s, low 0.5 s, high 2 s: the low burst joins the high segment (spec default)."""
    out = q1a(phases((2, kmh(5)), (0.5, kmh(12)), (2, kmh(20))))
    assert segments(out) == [(0, "trot"), (2 * PS, "high")]
    # the closing row (decided when high has lasted 1 s, at 3.5 s) is written in ts_stop order:
    # at the segment's end, 2 s, before the instant rows after it (which waited for it)
    closing = [r for r in out if r["ts_stop"] == 2 * PS and r["ts_start"] == 0]
    assert closing and closing[0]["intensity"] == "trot"
    k = out.index(closing[0])
    assert all(r["ts_stop"] < 2 * PS for r in out[:k])
    assert all(r["ts_stop"] >= 2 * PS for r in out[k:])
    assert closing[0]["distance"] == pytest.approx(2 * 5 / 3.6, rel=1e-6)
    assert closing[0]["speed"] == pytest.approx(5.0, rel=1e-6)


def test_short_stretch_to_previous_switch():
    """With short_stretch='previous' the low burst stays with trot."""
    out = q1a(phases((2, kmh(5)), (0.5, kmh(12)), (2, kmh(20))), short_stretch="previous")
    assert segments(out) == [(0, "trot"), (2 * PS + PS // 2, "high")]
    closing = [r for r in out if r["ts_stop"] == 2 * PS + PS // 2 and r["intensity"] == "trot"
               and r["ts_start"] == 0][-1]
    assert closing["distance"] == pytest.approx((2 * 5 + 0.5 * 12) / 3.6, rel=1e-6)


def test_returning_to_the_same_class_absorbs_the_stretch():
    """trot, a 0.5 s low burst, trot again: one trot segment, nothing closes."""
    out = q1a(phases((2, kmh(5)), (0.5, kmh(12)), (2, kmh(5))))
    assert segments(out) == [(0, "trot")]
    last = out[-1]
    assert last["distance"] == pytest.approx((4 * 5 + 0.5 * 12) / 3.6 - 0.005 * 5 / 3.6,
                                             rel=1e-6)


def test_exactly_one_second_lasts():
    """A new class lasting exactly 1 s opens a segment; 1 s minus one sample does not."""
    out = q1a(phases((2, kmh(5)), (1, kmh(20)), (2, kmh(5))))
    assert [s[1] for s in segments(out)] == ["trot", "high", "trot"]
    out = q1a(phases((2, kmh(5)), (1 - 0.005, kmh(20)), (2, kmh(5))))
    assert [s[1] for s in segments(out)] == ["trot"]


def test_speed_is_mean_of_both_shoes_and_distance_integrates_it():
    """One shoe at 10 km/h, the other at 20: 15 km/h (medium); 4 s give 4*15/3.6 m."""
    rows = []
    for ts in range(0, 4 * PS + 1, SAMPLE):
        rows += [{"sid": 47, "ts": ts, "v": kmh(10)}, {"sid": 16, "ts": ts, "v": kmh(20)}]
    out = q1a(rows)
    assert {r["intensity"] for r in out} == {"medium"}
    last = [r for r in out if r["ts_stop"] == 4 * PS][-1]
    assert last["distance"] == pytest.approx(4 * 15 / 3.6, rel=1e-6)
    assert last["speed"] == pytest.approx(15.0, rel=1e-6)


def test_displacement_distance_switch():
    """distance='displacement': 2D path length of the mean shoe position."""
    rows = []
    for i, ts in enumerate(range(0, 2 * PS + 1, SAMPLE)):
        x = 1000 + i * 10  # 10 mm per 5 ms = 2 m/s
        rows += [{"sid": 47, "ts": ts, "x": x, "y": 0, "v": kmh(7.2)},
                 {"sid": 16, "ts": ts, "x": x, "y": 400, "v": kmh(7.2)}]
    out = q1a(rows, distance="displacement")
    last = [r for r in out if r["ts_stop"] == 2 * PS][-1]
    # jumps of events before t = 2 s: the 400 samples after the first one
    assert last["distance"] == pytest.approx(3.99, abs=1e-9)


def test_unobserved_gap_adds_nothing():
    """A 10 s silence (beyond max_gap) adds no time or distance and no q1a rows."""
    rows = phases((2, kmh(18))) + phases((2, kmh(18)), t0=12 * PS)
    out = q1a(rows)
    assert not [r for r in out if 2 * PS + PS // 2 < r["ts_stop"] < 12 * PS]
    last = out[-1]
    # one segment; only observed time: 4 s of data less the 5 ms after the last sample of
    # each stretch (the sample before the silence and the last one hold for nothing)
    assert last["ts_start"] == 0
    assert last["distance"] == pytest.approx((4 - 0.005 - 0.005) * 5, rel=1e-6)


def test_increments_sum_to_segment_totals_and_respect_the_rule():
    """Increments per slice: per-intensity totals follow the segments, not the raw classes."""
    rows = phases((2, kmh(5)), (0.5, kmh(12)), (2, kmh(20)))
    cfg = Q1Config(origin=0, emit_period_ps=PS // 2)
    inc = run_table(lambda: RunningOperator(cfg, emit="increments"), game(rows)).to_pylist()
    per = {}
    for r in inc:
        k = C.INTENSITIES[r["intensity"]]
        t, d = per.get(k, (0, 0))
        per[k] = (t + r["time"], d + r["distance"])
    assert set(per) == {"trot", "high"}
    assert per["trot"][0] == 2 * PS
    assert per["high"][0] == 2 * PS + PS // 2 - SAMPLE
    assert per["high"][1] == pytest.approx((0.5 * 12 + (2 - 0.005) * 20) / 3.6 * 1e9, rel=1e-6)
    ts = [r["ts"] for r in inc]
    assert ts == sorted(ts) and all(t % (PS // 2) == 0 for t in ts)


def test_q1a_rows_in_ts_stop_order():
    """q1a is written in event-time (ts_stop) order, closing rows included (their ts_stop is
    the segment end, up to 1 s before the decision), with random batch cuts; the rows are the
    same as when sorted afterwards."""
    rows = (phases((2, kmh(5)), (0.5, kmh(12)), (1.5, kmh(20)), (1.2, kmh(1)), (2, kmh(30)))
            + phases((1.2, kmh(15)), (0.7, kmh(3)), (3, kmh(25)), sids=(13, 14), t0=7 * MS))
    cfg = Q1Config(origin=0, emit_period_ps=20 * MS)
    for batches in (game(rows).to_batches(),
                    cut(game(rows), np.random.default_rng(5), max_cuts=30)):
        out = run(lambda: RunningOperator(cfg, emit="q1a"), batches).to_pylist()
        stops = [r["ts_stop"] for r in out]
        assert stops == sorted(stops)
        closing = [r for r in out if r["ts_stop"] % (20 * MS)]
        assert len(closing) >= 2  # segment ends off the emission grid: closing rows
    both = run(lambda: RunningOperator(cfg, emit="both"), game(rows).to_batches()).to_pylist()
    q1a_ts = [r["ts"] for r in both if r["kind"] == "q1a"]
    assert q1a_ts == sorted(q1a_ts)


def test_increments_count_only_observed_time_across_a_break():
    """A half ending at 2 s and the next starting at 12 s (another player's data goes on): the
    last sample before the break holds for nothing, so the slices after 2 s - 5 ms get no time
    (before: up to max_gap = 1 s of extra time per player); same with random batch cuts."""
    rows = (phases((2, kmh(18))) + phases((2, kmh(18)), t0=12 * PS)
            + phases((14, kmh(5)), sids=(13, 14), t0=MS))
    cfg = Q1Config(origin=0, emit_period_ps=PS // 2)
    inc = assert_cut_invariant(lambda: RunningOperator(cfg, emit="increments"), game(rows))
    dennis = [r for r in inc.to_pylist() if r["player_id"] == "Dennis Dotterweich"]
    assert sum(r["time"] for r in dennis) == 2 * (2 * PS - SAMPLE)
    assert not [r for r in dennis if 2 * PS - SAMPLE <= r["ts"] < 12 * PS and r["time"]]
    assert max(r["ts"] for r in dennis if r["ts"] < 12 * PS) == 3 * PS // 2


def test_cut_invariance_and_snapshots():
    """Random batch cuts and snapshot/restore give identical output, for every emit mode."""
    rows = (phases((2, kmh(5)), (0.5, kmh(12)), (0.4, kmh(30)), (2, kmh(20)), (0.3, kmh(1)))
            + phases((1.2, kmh(15)), (0.7, kmh(3)), (2, kmh(25)), sids=(13, 14), t0=7 * MS))
    for distance in ("speed", "displacement"):
        for stretch in ("next", "previous"):
            cfg = Q1Config(origin=0, emit_period_ps=20 * MS, distance=distance,
                           short_stretch=stretch)
            for emit in ("q1a", "increments"):
                assert_cut_invariant(lambda: RunningOperator(cfg, emit=emit), game(rows))
            both = lambda: RunningOperator(cfg, emit="both")  # noqa: E731
            ref = sorted(run_table(both, game(rows)).to_pylist(), key=lambda r: r["kind"])
            got = run(both, cut(game(rows), np.random.default_rng(3)), snapshot_every=True)
            assert sorted(got.to_pylist(), key=lambda r: r["kind"]) == ref


def test_watermark_emits_instants_without_data():
    """A watermark settles the instants before it."""
    cfg = Q1Config(origin=0, emit_period_ps=PS // 2)
    op = RunningOperator(cfg, emit="q1a")
    first = op.on_batch(game(phases((0.2, kmh(5)))).to_batches()[0])
    assert not first
    out = op.on_watermark(PS // 2)
    assert [r["ts_stop"] for b in out for r in b.to_pylist()] == [PS // 2]


def test_running_stats_uda_on_windows():
    """The UDA over increments on a sliding window counts straddling segments in proportion."""
    rows = phases((3, kmh(5)), (3, kmh(20)))
    cfg = Q1Config(origin=0, emit_period_ps=PS // 2)
    inc = run_table(lambda: RunningOperator(cfg, emit="increments"), game(rows))
    spec = AggSpec(RunningStats(), ("intensity", "time", "distance"), "stats")
    win = WindowOperator(few_time(2, 0.5, 0.5, origin=0), [spec], INCREMENT_SCHEMA, "ts", "ps",
                         key="player_id")
    out = win.on_batch(inc.combine_chunks().to_batches()[0]) + win.on_end()
    rows_b = q1b_rows(pa.Table.from_batches(out).combine_chunks().to_batches()[0]).to_pylist()
    at = {r["ts"]: r for r in rows_b}
    # window [2.5 s, 4.5 s): 0.5 s trot, 1.5 s high
    r = at[4 * PS + PS // 2]
    assert r["trot_time"] == pytest.approx(0.5) and r["high_time"] == pytest.approx(1.5)
    assert r["trot_distance"] == pytest.approx(0.5 * 5 / 3.6, rel=1e-6)
    assert r["high_distance"] == pytest.approx(1.5 * 20 / 3.6, rel=1e-6)
    assert r["standing_time"] == 0.0
    land = WindowOperator(landmark(0.5, origin=0), [spec], INCREMENT_SCHEMA, "ts", "ps",
                          key="player_id")
    out = land.on_batch(inc.combine_chunks().to_batches()[0]) + land.on_end()
    last = q1b_rows(out[-1]).to_pylist()[-1]
    assert last["trot_time"] == pytest.approx(3.0)
    assert last["high_time"] == pytest.approx(3.0 - 0.005)


def test_running_stats_add_remove_merge():
    """remove(add(s, e), e) == s; merge adds; add_batch equals repeated add."""
    agg = RunningStats()
    s = agg.init()
    s1 = agg.add(s, (3, 100, 7))
    assert agg.remove(s1, (3, 100, 7))[0].tolist() == [0] * 6
    b = agg.add_batch(agg.init(), (np.array([1, 1, 5]), np.array([1, 2, 3]), np.array([4, 5, 6])))
    assert b[0].tolist() == [0, 3, 0, 0, 0, 3] and b[1].tolist() == [0, 9, 0, 0, 0, 6]
    m = agg.merge(b, s1)
    assert m[0].tolist() == [0, 3, 0, 100, 0, 3]
    assert agg.result(m)["medium_time"] == pytest.approx(100e-12)
