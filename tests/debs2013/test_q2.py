"""Query 2: ball in play, hits (threshold, 1 m, closest player, epsilon), possession, teams."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from debs2013.config import Q2Config
from debs2013.q2 import (HIT, OUT, STOP, TEAM_SLICE_SCHEMA, TIME, BallHitter,
                         PossessionOperator, TeamShare, team_rows)
from epic.aggregates import AggSpec
from epic.windows import WindowOperator, few_time
from qkit import MS, PS, assert_cut_invariant, cut, game, run, run_table, shoe_rows

T_END = 4 * PS


def body(sids, x, y, z=0, t1=T_END):
    return shoe_rows(sids, 0, t1, 5 * MS, x=x, y=y, z=z)


def keepers():
    # A's keeper near -y, B's near +y: A attacks goal 1 (+y)
    return body((13, 14), 26000, -33000) + body((61, 62), 26000, 33000)


def ball(kicks=(), x=10300, y=0, z=100, t1=T_END, sid=4):
    """Ball 4 at 2000 Hz; kicks: (start ps, duration ps) with |a| = 60 m/s²."""
    def acc(t):
        return 60_000_000 if any(s <= t < s + d for s, d in kicks) else 0
    return shoe_rows([sid], 0, t1, MS // 2, x=x, y=y, z=z, a=acc)


def hits(rows, **cfg):
    out = run_table(lambda: BallHitter(Q2Config(origin=0, **cfg), ball_rows=False), game(rows))
    return [(r["ts"], r["player_id"]) for r in out.to_pylist() if r["kind"] == HIT]


def test_closest_player_within_one_metre_gets_the_hit():
    """Dennis at 316 mm, Kevin at 374 mm: Dennis; Kevin alone beyond 1 m: no hit."""
    rows = keepers() + body((47, 16), 10000, 0) + body((63, 64), 10500, 300) + ball([(PS, 10 * MS)])
    assert hits(rows) == [(PS, "Dennis Dotterweich")]
    rows = keepers() + body((63, 64), 11300, 300) + ball([(PS, 10 * MS)])
    assert hits(rows) == []


def test_threshold_inclusive_switch():
    """|a| exactly 55 m/s² is a hit with >= (default), not with >."""
    rows = keepers() + body((47, 16), 10000, 0) + ball()
    rows.append({"sid": 4, "ts": PS + 1, "x": 10300, "y": 0, "z": 100, "a": 55_000_000})
    assert hits(rows) == [(PS + 1, "Dennis Dotterweich")]
    assert hits(rows, acc_inclusive=False) == []


def test_3d_distance_and_2d_switch():
    """A ball 1.2 m above the shoe is out of reach in 3D but a hit in 2D."""
    rows = keepers() + body((47, 16), 10000, 0) + ball([(PS, MS)], x=10000, z=1200)
    assert hits(rows) == []
    assert hits(rows, distance_3d=False) == [(PS, "Dennis Dotterweich")]


def test_epsilon_drops_the_same_contact():
    """Qualifying rows within 0.2 s of the player's hit are one contact; later ones are new."""
    rows = keepers() + body((47, 16), 10000, 0) + ball([(PS, 10 * MS), (PS + 150 * MS, 5 * MS),
                                                       (PS + 300 * MS, 5 * MS)])
    assert hits(rows) == [(PS, "Dennis Dotterweich"), (PS + 300 * MS, "Dennis Dotterweich")]
    # chained from the last qualifying row: 150 ms and 300 ms are each < 0.2 s from the previous
    assert hits(rows, epsilon_from="last_event") == [(PS, "Dennis Dotterweich")]


def test_other_player_within_epsilon_is_a_new_hit():
    """Kevin touching 50 ms after Dennis still makes a hit."""
    rows = keepers() + body((47, 16), 10000, 0, t1=PS + 20 * MS) + body((63, 64), 10700, 0)
    rows += ball([(PS, 5 * MS), (PS + 50 * MS, 5 * MS)])
    rows = [r for r in rows if not (r["sid"] in (47, 16) and r["ts"] > PS + 20 * MS)]
    # after 1.02 s Dennis's shoes jump away, so the second kick is Kevin's
    rows += [{"sid": s, "ts": PS + 30 * MS, "x": 5000, "y": 0} for s in (47, 16)]
    assert hits(rows) == [(PS, "Dennis Dotterweich"), (PS + 50 * MS, "Kevin Baer")]


def test_ball_in_play_out_of_field_and_stopped_game():
    """A spare ball outside never hits; an OUT row when the ball leaves; no hits while stopped."""
    rows = keepers() + body((47, 16), 10000, 0)
    rows += [r for r in ball([(PS, 5 * MS), (3 * PS, 5 * MS)]) if r["ts"] < 2 * PS]
    rows += [{"sid": 4, "ts": 2 * PS, "x": -100, "y": 0, "z": 100}]
    rows += ball([(PS, 5 * MS)], x=-2000, sid=8)        # spare ball outside, kicked at 1 s
    rows += [{"ts": PS // 2, "marker": "stop"}, {"ts": PS // 2 + 400 * MS, "marker": "resume"}]
    rows += ball([(600 * MS, 5 * MS)], t1=PS)            # kick while stopped
    out = run_table(lambda: BallHitter(Q2Config(origin=0), ball_rows=False), game(rows))
    ev = [(r["ts"], r["kind"], r["sid"]) for r in out.to_pylist()]
    assert (2 * PS, OUT, 4) in ev
    assert [e for e in ev if e[1] == HIT] == [(PS, HIT, 4)]


def test_sides_from_goalkeepers_and_default():
    """The hitter's team attacks the goal away from its keeper; default before any keeper row."""
    rows = body((13, 14), 26000, 33000) + body((61, 62), 26000, -33000) + body((47, 16), 10000, 0)
    rows += ball([(PS, 5 * MS)])
    out = run_table(lambda: BallHitter(Q2Config(origin=0, kickoffs=(0,)), ball_rows=False),
                    game(rows)).to_pylist()
    assert [r["attack"] for r in out if r["kind"] == HIT] == [-1]
    rows = body((47, 16), 10000, 0) + ball([(PS, 5 * MS)])
    out = run_table(lambda: BallHitter(Q2Config(origin=0, kickoffs=(0,)), ball_rows=False),
                    game(rows)).to_pylist()
    assert [r["attack"] for r in out if r["kind"] == HIT] == [1]


def _events(spec):
    """Ball events (ts in ms, kind, player) as a BallHitter output table."""
    from debs2013.q2 import BALL_EVENT_SCHEMA
    rows = []
    for t, k, p in spec:
        team = None if p is None else ("A" if p in ("Dennis Dotterweich", "Nick Gertje") else "B")
        r = {f.name: 0 for f in BALL_EVENT_SCHEMA}
        r.update(ts=t * MS, kind=k, player_id=p, team=team)
        rows.append(r)
    return pa.Table.from_pylist(rows, schema=BALL_EVENT_SCHEMA)


D, K, G = "Dennis Dotterweich", "Kevin Baer", "Nick Gertje"
SCRIPT = [(1000, HIT, D), (1500, HIT, D), (2200, HIT, D), (3000, HIT, K), (3100, HIT, K),
          (4000, OUT, None), (5000, HIT, G), (5600, HIT, D), (6000, STOP, None),
          (6500, HIT, K), (7000, 0, None)]


def _players(**cfg):
    out = run_table(lambda: PossessionOperator(Q2Config(origin=0, team_period_ps=PS, **cfg),
                                               emit="players"), _events(SCRIPT))
    return [(r["ts"] // MS, r["player_id"], round(r["time"], 6), r["hits"]) for r in
            out.to_pylist()]


def test_possession_first_to_last_touch():
    """Time from first to last touch of a run; a single touch is zero; every contact counts."""
    assert _players() == [(1000, D, 0.0, 1), (1500, D, 0.5, 2), (2200, D, 1.2, 3),
                          (3000, K, 0.0, 1), (3100, K, 0.1, 2), (5000, G, 0.0, 1),
                          (5600, D, 1.2, 4), (6500, K, 0.1, 3)]


def test_possession_until_end_and_hits_per_possession():
    """until_end: until another player's hit, the ball out or a stop; hits per possession."""
    assert _players(possession_time="until_end", hits_count="possession") == [
        (1000, D, 0.0, 1), (1500, D, 0.5, 1), (2200, D, 1.2, 1), (3000, D, 2.0, 1),
        (3000, K, 0.0, 1), (3100, K, 0.1, 1), (4000, K, 1.0, 1), (5000, G, 0.0, 1),
        (5600, G, 0.6, 1), (5600, D, 2.0, 2), (6000, D, 2.4, 2), (6500, K, 1.0, 2)]


def test_team_slices_and_window_percent():
    """Team A from 1.0 to 3.0 s and 5.0 to 6.0 s; B 3.0 to 4.0 s and from 6.5 s on."""
    out = run_table(lambda: PossessionOperator(Q2Config(origin=0, team_period_ps=PS),
                                               emit="team"), _events(SCRIPT))
    sl = [(r["ts"] // PS, r["time_a"] / PS, r["time_b"] / PS) for r in out.to_pylist()]
    assert sl == [(1, 1.0, 0.0), (2, 1.0, 0.0), (3, 0.0, 1.0), (4, 0.0, 0.0), (5, 1.0, 0.0),
                  (6, 0.0, 0.5)]
    w = WindowOperator(few_time(3, 1, 1, origin=0), [AggSpec(TeamShare(), ("time_a", "time_b"),
                                                             "share")],
                       TEAM_SLICE_SCHEMA, "ts", "ps")
    res = w.on_batch(out.combine_chunks().to_batches()[0]) + w.on_end()
    rows = [r for b in res for r in team_rows(b).to_pylist()]
    at4 = {r["team_id"]: r for r in rows if r["ts"] == 4 * PS}  # window [1, 4)
    assert at4["A"]["time"] == pytest.approx(2.0) and at4["B"]["time"] == pytest.approx(1.0)
    assert at4["A"]["time_percent"] == pytest.approx(200 / 3)


@pytest.mark.parametrize("n", [0, 1, 7, 300])
def test_team_rows_match_a_row_by_row_reference(n):
    """Two rows per emission, A then B, ``time_percent = 100 * time / (A + B)`` computed as
    Python does it, 0 when both are 0 (some emissions have a zero team or both)."""
    rng = np.random.default_rng(n)
    ta = rng.integers(0, 10**13, n) * 1e-12
    tb = rng.integers(0, 10**13, n) * 1e-12
    ta[: n // 3] = 0.0
    tb[: n // 5] = 0.0
    ends = np.arange(n, dtype=np.int64) * PS + 7
    batch = pa.record_batch([pa.array(ends), pa.StructArray.from_arrays(
        [pa.array(ta), pa.array(tb)], names=["time_a", "time_b"])], names=["window_end", "share"])
    want = []
    for t, a, b in zip(ends.tolist(), ta.tolist(), tb.tolist()):
        for team, v in (("A", a), ("B", b)):
            want.append({"ts": t, "team_id": team, "time": v,
                         "time_percent": 100.0 * v / (a + b) if a + b > 0 else 0.0})
    got = team_rows(batch)
    assert got.schema.names == ["ts", "team_id", "time", "time_percent"]
    assert got.to_pylist() == want


def test_cut_invariance_and_snapshots():
    """Random cuts and snapshot/restore give identical hitter and possession output."""
    rows = keepers() + body((47, 16), 10000, 0) + body((63, 64), 10500, 300)
    rows += ball([(PS, 10 * MS), (PS + 150 * MS, 5 * MS), (2 * PS, 3 * MS), (3 * PS, 3 * MS)])
    rows += [{"ts": 2500 * MS, "marker": "stop"}, {"ts": 2900 * MS, "marker": "resume"}]
    for br in (False, True):
        assert_cut_invariant(lambda: BallHitter(Q2Config(origin=0), ball_rows=br), game(rows),
                             strip=_no_marks)
    for emit in ("players", "team"):
        assert_cut_invariant(lambda: PossessionOperator(Q2Config(origin=0), emit=emit),
                             _events(SCRIPT))


def _no_marks(table: pa.Table) -> pa.Table:
    """The hitter's output without its time marks (one per input batch: they follow the cuts)."""
    return table.filter(pa.compute.not_equal(table["kind"], TIME))


@pytest.mark.parametrize("ball_rows", [False, True])
def test_time_marks_bound_the_output_and_release_team_slices(ball_rows):
    """A time mark (kind TIME) closes an input batch whose last row no other output row
    reaches: no later output row is older than it, it is held at the ball's last row while the
    ball's data may still stop, and none comes before the first ball in play. Fed batch by batch
    to the possession node, the marks release every team slice the input has passed without a
    watermark, and the slices equal the one-batch run's."""
    rows = keepers() + body((47, 16), 10000, 0) + body((63, 64), 10500, 300, t1=3 * PS)
    rows += ball([(PS, 10 * MS), (PS + 150 * MS, 5 * MS), (2 * PS, 3 * MS)], t1=3 * PS + PS // 2)
    rows += [{"ts": 2500 * MS, "marker": "stop"}, {"ts": 2900 * MS, "marker": "resume"}]
    g = game(rows)
    first_ball = min(r["ts"] for r in rows if r.get("sid") == 4)
    cfg = Q2Config(origin=0, team_period_ps=100 * MS)
    for seed in range(6):
        batches = cut(g, np.random.default_rng(seed), max_cuts=12)
        op = BallHitter(cfg, ball_rows=ball_rows)
        poss = PossessionOperator(cfg, emit="team")
        for b in batches:
            out = [r for t in op.on_batch(b) for r in t.to_pylist()]
            marks = [k for k, r in enumerate(out) if r["kind"] == TIME]
            assert len(marks) <= 1 and (not marks or marks[0] == len(out) - 1)
            if not b.num_rows:
                continue
            newest = max(b.column("ts").to_pylist())
            if marks:
                mark = out[-1]["ts"]
                assert mark >= first_ball
                assert all(r["ts"] < mark for r in out[:-1])
                assert mark <= newest
            if newest < first_ball:
                assert not out
                continue
            # the output reaches the input's time, less the ball timeout at most (the hold)
            assert out and out[-1]["ts"] >= newest - cfg.ball_timeout_ps - MS
            t = pa.Table.from_pylist(out, schema=op.output_schema)
            slices = [r for x in poss.on_batch(t.to_batches()[0]) for r in x.to_pylist()]
            # so every team slice ending by then is out, without a watermark
            top = out[-1]["ts"]
            P = cfg.team_period_ps
            assert poss._s["inc_done"] == top // P * P
            assert not slices or slices[-1]["ts"] + P <= top
        tail = [r for x in op.on_end() for r in x.to_pylist()]
        assert all(r["kind"] != TIME for r in tail)
    # the marks hold at the ball's last row while its data may stop: the ball stops at 3.5 s
    # while players report on to 4 s, so no mark passes 3.5 s - 0.5 ms before the OUT row
    op = BallHitter(cfg, ball_rows=ball_rows)
    out = run(lambda: op, g.to_batches(max_chunksize=500))
    ts = out.column("ts").to_pylist()
    kinds = out.column("kind").to_pylist()
    assert ts == sorted(ts)
    last_ball = max(r["ts"] for r in rows if r.get("sid") == 4)
    k_out = kinds.index(OUT)
    assert ts[k_out] == last_ball
    assert all(t <= last_ball for t, k in zip(ts[:k_out], kinds[:k_out]) if k == TIME)
    assert any(k == TIME and t > last_ball for t, k in zip(ts, kinds))


def test_possession_stops_when_the_ball_data_stops():
    """Ball 4 reports until 2 s, players until 4 s, the game is stopped at 3.5 s: the ball
    hitter writes an OUT row at the ball's last row (2 s - 0.5 ms), so Dennis's team holds the
    ball from his hit at 1 s to the ball's last row, not to the stop at 3.5 s (spec §1.4:
    possession stops with the ball's data). Cut- and snapshot-invariant."""
    last = 2 * PS - MS // 2
    rows = (keepers() + body((47, 16), 10000, 0) + ball([(PS, 10 * MS)], t1=2 * PS)
            + [{"ts": 3 * PS + PS // 2, "marker": "stop"}])
    g = game(rows)
    ev = _no_marks(assert_cut_invariant(lambda: BallHitter(Q2Config(origin=0)), g,
                                        strip=_no_marks))
    outs = [r for r in ev.to_pylist() if r["kind"] == OUT]
    assert [(r["ts"], r["sid"]) for r in outs] == [(last, 4)]
    assert ev.column("ts").to_pylist() == sorted(ev.column("ts").to_pylist())
    team = run_table(lambda: PossessionOperator(Q2Config(origin=0, team_period_ps=PS),
                                                emit="team"), ev).to_pylist()
    assert sum(r["time_a"] for r in team) == last - PS
    assert sum(r["time_b"] for r in team) == 0
    # a gap shorter than the timeout (50 ms of missing ball rows) does not stop it
    short = [r for r in rows if not (r.get("sid") == 4 and 1.5 * PS <= r["ts"] < 1.55 * PS)]
    ev2 = run_table(lambda: BallHitter(Q2Config(origin=0)), game(short))
    assert [r["ts"] for r in ev2.to_pylist() if r["kind"] == OUT] == [last]
    # the watermark reveals the stop when no later input row does
    op = BallHitter(Q2Config(origin=0))
    op.on_batch(game([r for r in rows if r["ts"] <= last]).to_batches()[0])
    assert op.output_watermark == last
    assert op.on_watermark(last + Q2Config().ball_timeout_ps) == []
    got = op.on_watermark(last + Q2Config().ball_timeout_ps + 1)
    assert got[0].column("kind").to_pylist() == [OUT] and got[0].column("ts").to_pylist() == [last]
    assert op.output_watermark is None
