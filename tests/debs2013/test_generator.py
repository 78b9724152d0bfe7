"""Tests of the synthetic DEBS 2013 game generator: format, rates, physics, planted truth."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pytest

from debs2013 import generator as gen

COLS = ["sid", "ts", "x", "y", "z", "v", "a", "vx", "vy", "vz", "ax", "ay", "az"]
SHOES = {sid for p in gen.PEOPLE for sid in p.shoes}
HANDS = {97, 98, 99, 100}
BODY = SHOES | HANDS


@pytest.fixture(scope="module")
def game(tmp_path_factory):
    """A 1-minute-per-half game, read back as numpy columns, with its ground truth."""
    return _generated(tmp_path_factory.mktemp("game") / "game.csv", minutes=1, seed=3)


def _generated(out, **kwargs):
    """``generate_game(out, **kwargs)``'s result, its rows as numpy columns, its truth."""
    res = gen.generate_game(out, **kwargs)
    table = pacsv.read_csv(out, read_options=pacsv.ReadOptions(column_names=COLS),
                           convert_options=pacsv.ConvertOptions(
                               column_types={c: pa.int64() for c in COLS}))
    cols = {c: table.column(c).to_numpy() for c in COLS}
    truth = json.loads(res.truth_path.read_text())
    return res, cols, truth


@pytest.fixture(scope="module")
def clean_game(tmp_path_factory):
    """The same game with ``noise=False``: the exact smoothed paths on the sensors' grids."""
    out = tmp_path_factory.mktemp("clean") / "game.csv"
    res = gen.generate_game(out, minutes=1, seed=3, config=gen.GeneratorConfig(noise=False))
    table = pacsv.read_csv(out, read_options=pacsv.ReadOptions(column_names=COLS),
                           convert_options=pacsv.ConvertOptions(
                               column_types={c: pa.int64() for c in COLS}))
    cols = {c: table.column(c).to_numpy() for c in COLS}
    truth = json.loads(res.truth_path.read_text())
    return res, cols, truth


def test_noise_amplitudes_jitter_and_dropouts(game, clean_game):
    """With noise (default) vs without, same seed: body positions differ by N(0, 20 mm) per
    axis, |v| by ~2 %, timestamps by [0, 20 µs) (each sensor stays in order), about 0.5 % of
    body samples and 0.2 % of ball samples are missing (in blocks), nothing else changes."""
    _, cols, _ = game
    _, clean, _ = clean_game
    cfg = gen.GeneratorConfig()
    for sid, sigma, drop in ((16, cfg.body_pos_sigma_mm, cfg.body_dropout),
                             (13, cfg.body_pos_sigma_mm, cfg.body_dropout),
                             (4, cfg.ball_pos_sigma_mm, cfg.ball_dropout)):
        n, c = _sensor(cols, sid), _sensor(clean, sid)
        assert np.all(np.diff(n["ts"]) > 0)
        # match noisy rows to their grid sample: the jitter is below the period
        k = np.searchsorted(c["ts"], n["ts"], side="right") - 1
        jitter = n["ts"] - c["ts"][k]
        assert jitter.min() >= 0 and jitter.max() < cfg.ts_jitter_ps
        assert np.unique(k).size == k.size
        missing = 1 - len(n["ts"]) / len(c["ts"])
        assert drop / 4 < missing < drop * 4 or (sid == 4 and missing < drop * 4), (sid, missing)
        dx = (n["x"] - c["x"][k]).astype(float)
        assert sigma * 0.85 < dx.std() < sigma * 1.15, (sid, dx.std())
        moving = c["v"][k] > 1_000_000
        rel = n["v"][moving] / c["v"][k][moving] - 1
        assert 0.015 < rel.std() < 0.025


def _sensor(cols, sid):
    m = cols["sid"] == sid
    return {c: v[m] for c, v in cols.items()}


def _in_play_rows(cols, h):
    """The rows of the ball in play of half `h` (truth ``balls_in_play``), in ts order."""
    parts = []
    for b in h["balls_in_play"]:
        lo = b["from_ts"] if b["from_ts"] is not None else h["data_start_ts"]
        hi = b["to_ts"] if b["to_ts"] is not None else h["data_end_ts"] + 1
        parts.append((cols["sid"] == b["sid"]) & (cols["ts"] >= lo) & (cols["ts"] < hi))
    m = np.logical_or.reduce(parts)
    return {c: v[m] for c, v in cols.items()}


def _inside(x, y):
    f = gen.FIELD_MM
    return (x >= f["x_min"]) & (x <= f["x_max"]) & (y >= f["y_min"]) & (y <= f["y_max"])


def _half_mask(cols, half):
    lo, hi = (gen.FIRST_HALF_START - 200 * gen.PS_PER_S, gen.FIRST_HALF_END) if half == 1 else (
        gen.SECOND_HALF_START, gen.SECOND_HALF_END)
    return (cols["ts"] >= lo) & (cols["ts"] <= hi)


def test_format_is_headerless_13_integer_fields_ordered_by_exact_ts(game):
    """Every line has 13 integers, there is no header, ts is exact int64 above 2^53, in order."""
    res, cols, truth = game
    with open(res.game_path) as f:
        head = [next(f) for _ in range(2000)]
    for line in head:
        fields = line.rstrip("\n").split(",")
        assert len(fields) == 13
        assert all(x.lstrip("-").isdigit() for x in fields)
    assert int(head[0].split(",")[1]) > 2**53
    assert cols["ts"].dtype == np.int64 and np.all(cols["ts"] > 2**53)
    assert np.all(np.diff(cols["ts"]) >= 0)
    assert truth["rows"] == len(cols["ts"]) == res.rows


def test_rates_per_sensor_class(clean_game):
    """Without noise (no jitter, no drop-outs): body sensors every 5 ms; every ball on the 0.5 ms
    grid, without a gap while it is in play (truth ``balls_in_play``), and transmitting about
    ``spare_ball_duty`` of the time while it is a spare (moving or not)."""
    _, cols, truth = clean_game
    duty = gen.GeneratorConfig().spare_ball_duty
    for h, balls in zip(truth["halves"], ({4, 8, 10}, {4, 8, 10, 12})):
        m = _half_mask(cols, h["half"])
        present = set(np.unique(cols["sid"][m]).tolist())
        assert present == BODY | balls
        span = (h["data_end_ts"] - h["data_start_ts"]) / gen.BALL_PERIOD_PS
        for sid in present:
            ts = cols["ts"][m & (cols["sid"] == sid)]
            d = np.diff(ts)
            if sid in BODY:
                assert np.all(d == gen.BODY_PERIOD_PS), sid
                continue
            assert np.all(d % gen.BALL_PERIOD_PS == 0), sid
            assert duty - 0.05 < len(ts) / span <= 1.0, (sid, len(ts) / span)
            for b in h["balls_in_play"]:
                if b["sid"] == sid:
                    lo = b["from_ts"] if b["from_ts"] is not None else h["data_start_ts"]
                    hi = b["to_ts"] if b["to_ts"] is not None else h["data_end_ts"]
                    seg = ts[(ts >= lo) & (ts <= hi)]
                    assert len(seg) > 100 and np.all(np.diff(seg) == gen.BALL_PERIOD_PS), sid


def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path):
    """The generator is a pure function of its seed and arguments."""
    a = gen.generate_game(tmp_path / "a.csv", minutes=0.1, seed=11)
    b = gen.generate_game(tmp_path / "b.csv", minutes=0.1, seed=11)
    c = gen.generate_game(tmp_path / "c.csv", minutes=0.1, seed=12)
    assert a.game_path.read_bytes() == b.game_path.read_bytes()
    assert a.game_path.read_bytes() != c.game_path.read_bytes()


def _vectors(s, mag, prefix):
    return s[mag][:, None] * np.stack([s[prefix + "x"], s[prefix + "y"], s[prefix + "z"]], 1) * 1e-10


@pytest.mark.parametrize("sid", [13, 98, 59, 105, 4, 12])
def test_velocity_and_acceleration_match_finite_differences_of_positions(clean_game, sid):
    """Without noise, exact discrete identities: sum of 2h*v_j telescopes to positions; the
    trapezoid sum of a equals the change of v. Only integer rounding separates the two sides."""
    _, cols, _ = clean_game
    for half in (1, 2):
        full = _sensor(cols, sid)
        s = {c: v[_half_mask(full, half)] for c, v in full.items()}
        if len(s["ts"]) < 500:
            continue
        h = float(np.diff(s["ts"][:2])[0]) / gen.PS_PER_S
        p = np.stack([s["x"], s["y"], s["z"]], 1) * 1e-3
        v = _vectors(s, "v", "v")
        a = _vectors(s, "a", "a")
        n = len(p)
        rng = np.random.default_rng(sid)
        # windows of consecutive samples only (a spare ball's silences break the sums)
        step = np.diff(s["ts"]) == np.diff(s["ts"][:2])[0]
        gapless = np.r_[0, np.cumsum(~step)]
        starts = [int(x) for x in rng.integers(1, n - 400, 400)
                  if gapless[x - 1] == gapless[x + 302]][:40]
        assert len(starts) >= 10
        for start in starts:
            lo, hi = int(start), int(start) + 300
            lhs = 2 * h * v[lo:hi + 1].sum(axis=0)
            rhs = (p[hi + 1] + p[hi]) - (p[lo] + p[lo - 1])
            assert np.all(np.abs(lhs - rhs) <= 2.5e-3 + 2e-4 * np.abs(v[lo:hi + 1]).sum(0) * h), (sid, lo)
            dv = v[hi] - v[lo]
            trap = h * (a[lo:hi + 1].sum(axis=0) - 0.5 * (a[lo] + a[hi]))
            tol = 0.01 + 3e-4 * np.abs(a[lo:hi + 1]).sum(0) * h + 2e-4 * np.abs(v[[lo, hi]]).sum(0)
            assert np.all(np.abs(dv - trap) <= tol), (sid, lo, dv, trap)
        moving = s["v"] > 0
        norm = np.sqrt(s["vx"] ** 2 + s["vy"] ** 2 + s["vz"] ** 2)[moving]
        assert np.all(np.abs(norm - 10000) <= 2)


def _latest(cols_sensor, ts):
    i = np.searchsorted(cols_sensor["ts"], ts, side="right") - 1
    assert np.all(i >= 0)
    return np.stack([cols_sensor["x"][i], cols_sensor["y"][i], cols_sensor["z"][i]], 1)


def test_planted_hits_satisfy_the_hit_rule_and_are_the_only_contacts(game):
    """At each planted hit the ball has |a| >= 55 m/s^2 within 1 m of the player's shoe; every
    qualifying ball sample (any player) belongs to a planted hit."""
    _, cols, truth = game
    shoes = {sid: _sensor(cols, sid) for sid in SHOES}
    for h in truth["halves"]:
        ball = _in_play_rows(cols, h)
        assert len(h["hits"]) > 10
        hit_ts = np.array(sorted(x["ts"] for x in h["hits"]), dtype=np.int64)
        for hit in h["hits"]:
            i = np.searchsorted(ball["ts"], hit["ts"])
            assert ball["ts"][i] == hit["ts"]
            assert ball["a"][i] >= gen.HIT_ACC_RAW
            pos = np.array([ball["x"][i], ball["y"][i], ball["z"][i]])
            shoe = _latest(shoes[hit["sensor"]], np.array([hit["ts"]]))[0]
            assert np.linalg.norm(shoe - pos) <= gen.HIT_DIST_MM
        strong = ball["a"] >= gen.HIT_ACC_RAW
        bp = np.stack([ball["x"], ball["y"], ball["z"]], 1)[strong]
        near = np.zeros(strong.sum(), bool)
        for sid, sh in shoes.items():
            near |= np.linalg.norm(_latest(sh, ball["ts"][strong]) - bp, axis=1) <= gen.HIT_DIST_MM
        contact_ts = ball["ts"][strong][near]
        j = np.clip(np.searchsorted(hit_ts, contact_ts), 1, len(hit_ts) - 1)
        gap = np.minimum(np.abs(contact_ts - hit_ts[j - 1]), np.abs(contact_ts - hit_ts[j]))
        assert np.all(gap <= 20 * 10**9), "a qualifying contact that was not planted"


def _uncovered_hits(cols, truth):
    """The spec's hit rule (§6) applied to the written rows, sample by sample: a sample of the
    ball in play with |a| >= 55 m/s^2 whose closest player shoe (latest written sample, 3D) is
    within 1 m is a hit of that player. Returns those ``(ts, player)`` that no truth hit of the
    same player brackets (``ts_first <= ts <= ts_last``)."""
    players = gen.PEOPLE[:16]
    shoes = [(p.name, _sensor(cols, sid)) for p in players for sid in p.shoes]
    out = []
    for h in truth["halves"]:
        ball = _in_play_rows(cols, h)
        strong = ball["a"] >= gen.HIT_ACC_RAW
        ts = ball["ts"][strong]
        bp = np.stack([ball["x"], ball["y"], ball["z"]], 1)[strong]
        d = np.stack([np.linalg.norm(_latest(sh, ts) - bp, axis=1) for _, sh in shoes])
        best = d.argmin(axis=0)
        hit = d[best, np.arange(len(ts))] <= gen.HIT_DIST_MM
        for t, k in zip(ts[hit], best[hit]):
            name = shoes[k][0]
            if not any(x["player"] == name and x["ts_first"] <= t <= x["ts_last"]
                       for x in h["hits"]):
                out.append((int(t), name))
    return out


def test_every_hit_of_the_rule_is_in_the_truth(game):
    """Every ball sample that the spec's rule makes a hit is inside a truth hit of the same
    player (an opponent's shoe closest during another player's kick included: kind
    ``contested``)."""
    _, cols, truth = game
    assert _uncovered_hits(cols, truth) == []


@pytest.mark.slow
def test_a_contested_touch_gives_both_players_a_hit(tmp_path):
    """Seed 7, 1 minute per half: during a kick an opponent's shoe becomes the closest within
    1 m while |a| is still >= 55 m/s^2; the truth lists that hit too (about 15 s)."""
    _, cols, truth = _generated(tmp_path / "game.csv", minutes=1, seed=7)
    contested = [x for h in truth["halves"] for x in h["hits"] if x["kind"] == "contested"]
    assert contested and all(x["player"] != x["planned_player"] for x in contested)
    assert _uncovered_hits(cols, truth) == []


def test_shots_project_into_the_opponent_goal_within_1_5_s(game):
    """From the last hit sample of each planted shot the straight line reaches the goal area."""
    _, cols, truth = game
    n = 0
    for h in truth["halves"]:
        ball = _in_play_rows(cols, h)
        for shot in h["shots"]:
            assert shot["goal"] == h["attacks"][shot["team"]]
            assert shot["projects_at_last_hit_sample"]
            hit = next(x for x in h["hits"] if x["ts"] == shot["start_ts"])
            i = np.searchsorted(ball["ts"], hit["ts_last"])
            row = {c: np.array([ball[c][i]], dtype=float) for c in COLS}
            xyz = np.stack([row["x"], row["y"], row["z"]], 1)
            vd = np.stack([row["vx"], row["vy"], row["vz"]], 1)
            assert gen._projects(xyz, row["v"], vd, 1 if shot["goal"] == "+y" else -1)[0]
            n += 1
    assert n >= 2


def test_sides_follow_goalkeepers_at_kick_off(game):
    """The team attacking +y has its goalkeeper on the -y side at kick-off."""
    _, cols, truth = game
    for h in truth["halves"]:
        m = (cols["ts"] >= h["half_start_ts"]) & (cols["ts"] < h["half_start_ts"] + 2 * gen.PS_PER_S)
        for team, gk in (("A", (13, 14)), ("B", (61, 62))):
            y = cols["y"][m & np.isin(cols["sid"], gk)].mean()
            assert (y < 0) == (h["attacks"][team] == "+y")


def test_spare_balls_stay_outside_the_field_and_the_ball_in_play_inside(game):
    """Every ball sample outside its in-play stretch (truth ``balls_in_play``: from its first
    sample inside to the sample after its last one inside) lies outside the FAQ field
    rectangle; inside the stretch (50 ms from its ends: noise at the line) the ball is inside.
    So at most one ball is ever inside the field."""
    _, cols, truth = game
    for h in truth["halves"]:
        span = (cols["ts"] >= h["data_start_ts"]) & (cols["ts"] <= h["data_end_ts"])
        balls = span & np.isin(cols["sid"], [h["game_ball"]] + h["spare_balls"])
        in_play = np.zeros(len(cols["ts"]), bool)
        for b in h["balls_in_play"]:
            lo = b["from_ts"] if b["from_ts"] is not None else h["data_start_ts"]
            hi = b["to_ts"] if b["to_ts"] is not None else h["data_end_ts"] + 1
            m = balls & (cols["sid"] == b["sid"]) & (cols["ts"] >= lo) & (cols["ts"] < hi)
            in_play |= m
            settled = m & (cols["ts"] >= lo + 50 * 10**9) & (cols["ts"] < hi - 50 * 10**9)
            assert _inside(cols["x"][settled], cols["y"][settled]).all(), b
        spare = balls & ~in_play
        assert spare.sum() > 0
        assert not _inside(cols["x"][spare], cols["y"][spare]).any()


def test_a_spare_replaces_the_ball_after_each_out_of_field_event(game):
    """Every interruption after the kick-off begins with the ball leaving the field (touch line,
    goal line or goal) and ends with another ball in play: the truth's swaps name a new ball
    each time, the old ball leaves the field around the interruption's begin and the new one
    enters during the interruption, after the old one left."""
    _, cols, truth = game
    total = 0
    for h in truth["halves"]:
        # every interruption that ends inside the data has its swap (one that ends after the
        # data may have it or not: the ball goes out, the game's data ends)
        stops = [i for i in h["interruptions"][1:] if i["begin_ts"] < h["data_end_ts"]]
        swaps = h["ball_swaps"]
        assert len(stops) - 1 <= len(swaps) <= len(stops)
        assert len(swaps) == len(stops) or stops[-1]["end_ts"] >= h["data_end_ts"]
        assert not any(w["skipped"] for w in swaps)
        bip = h["balls_in_play"]
        assert len(bip) == len(swaps) + 1
        for stop, w, old, new in zip(stops, swaps, bip, bip[1:]):
            assert w["out_sid"] == old["sid"] != new["sid"] == w["in_sid"]
            assert new["sid"] in [h["game_ball"]] + h["spare_balls"]
            assert stop["begin_ts"] - 3 * gen.PS_PER_S <= old["to_ts"] <= stop["begin_ts"] + gen.PS_PER_S
            assert old["to_ts"] < new["from_ts"] <= stop["end_ts"] + gen.PS_PER_S
            # the ball that went out is outside from then on (until it is brought in again)
            m = (cols["sid"] == old["sid"]) & (cols["ts"] >= old["to_ts"]) & (cols["ts"] < new["from_ts"])
            assert m.sum() > 100 and not _inside(cols["x"][m], cols["y"][m]).any()
            total += 1
    assert total >= 2


def test_spare_balls_move_outside_the_field():
    """Spares are carried at walking speed and thrown: over 10 minutes of a half every spare
    makes excursions; every leg a ball boy walks (round the field's corners) stays outside."""
    h = gen._Half(gen.GeneratorConfig(seed=5), 2, gen.SECOND_HALF_START,
                  gen.SECOND_HALF_START + 600 * gen.PS_PER_S)
    sp = h.spares
    assert sum(e["carried"] for e in sp.excursions.values()) >= 3
    assert sum(e["thrown"] for e in sp.excursions.values()) >= 1
    assert len(sp.swaps) >= 3 and all(w["in_sid"] is not None for w in sp.swaps)
    assert sp.max_carry_speed <= 3.0
    t = np.arange(h.t_lo, h.t_hi, 0.01)
    for sid, path in sp.paths.items():
        t0, p0, v0, acc = path
        i = np.clip(np.searchsorted(t0, t, side="right") - 1, 0, len(t0) - 1)
        tau = (t - t0[i])[:, None]
        p = p0[i] + v0[i] * tau + 0.5 * acc[i] * tau * tau
        v = v0[i] + acc[i] * tau
        owner = np.array([sp.owner_at(x) == sid for x in t])
        entering = np.zeros(len(t), bool)
        for o in sp.owners:
            if o["sid"] == sid:
                entering |= (t >= o["entry_from"]) & (t < o["own_from"])
        spare = ~owner & ~entering
        inside = _inside(p[:, 0] * 1000, p[:, 1] * 1000)
        assert not inside[spare].any(), sid
        if spare.any():
            assert np.hypot(v[spare, 0], v[spare, 1]).max() > 1.0, sid  # it moved
    rng = np.random.default_rng(0)
    for _ in range(200):
        a, b = (gen._ring_point(rng.uniform(-10, 60, 2), int(rng.integers(4))) for _ in range(2))
        pts = gen._ring_route(a, b)
        for p, q in zip(pts, pts[1:]):
            s = np.linspace(0, 1, 50)[:, None]
            seg = p + s * (q - p)
            assert not _inside(seg[:, 0] * 1000, seg[:, 1] * 1000).any()


def test_spare_balls_switch_off(tmp_path):
    """``spare_balls=False``: one ball in play for the whole half and still spares, as before."""
    res = gen.generate_game(tmp_path / "g.csv", minutes=0.5, seed=3,
                            config=gen.GeneratorConfig(spare_balls=False))
    truth = json.loads(res.truth_path.read_text())
    table = pacsv.read_csv(res.game_path, read_options=pacsv.ReadOptions(column_names=COLS))
    sid, v = table.column("sid").to_numpy(), table.column("v").to_numpy()
    for h in truth["halves"]:
        assert not h["spare_balls_move"] and "ball_swaps" not in h
        ts = table.column("ts").to_numpy()
        half = (ts >= h["data_start_ts"]) & (ts <= h["data_end_ts"])
        for b in h["spare_balls"]:
            assert v[half & (sid == b)].max() == 0
        assert v[half & (sid == h["game_ball"])].max() > 0


def test_all_intensity_classes_occur_with_long_runs_and_short_bursts(game):
    """Mean shoe speed per player visits every Q1 class, for > 1 s and in some < 1 s bursts."""
    _, cols, _ = game
    edges = np.array([277778, 3055556, 3888889, 4722222, 6666667])
    long_runs, bursts = set(), set()
    for p in gen.PEOPLE[:16]:
        a, b = (_sensor(cols, sid) for sid in p.shoes)
        n = min(len(a["v"]), len(b["v"]))
        cls = np.searchsorted(edges, (a["v"][:n] + b["v"][:n]) / 2, side="left")
        change = np.flatnonzero(np.diff(cls)) + 1
        starts = np.r_[0, change]
        ends = np.r_[change, n]
        for s0, s1 in zip(starts, ends):
            dur = (s1 - s0) * 0.005
            (long_runs if dur > 1.0 else bursts).add(int(cls[s0]))
    assert long_runs == set(range(6))
    assert len(bursts) >= 4


def test_truth_is_self_consistent(game):
    """Possessions start before they end, hits name shoe sensors, interruptions are ordered."""
    _, _, truth = game
    for h in truth["halves"]:
        for q in h["possessions"]:
            assert q["start_ts"] <= q["end_ts"]
        for hit in h["hits"]:
            assert hit["sensor"] in SHOES and hit["ts_first"] <= hit["ts"] <= hit["ts_last"]
        assert all(i["begin_ts"] <= i["end_ts"] for i in h["interruptions"])
        assert not h["unplanted_hits"]


def test_referee_files_are_replayed():
    """The private parse sees the real counts: 34 and 38 stops, 431 possessions, 24 shots."""
    ref = gen.DEFAULT_REFEREE_DIR
    assert len(gen._stops(ref / "Game Interruption" / "1st Half.csv", 1804.0)) == 34
    stops2 = gen._stops(ref / "Game Interruption" / "2nd Half.csv", 1793.0)
    assert len(stops2) == 38 and stops2[-1] == (pytest.approx(1776.577), 1793.0)
    assert len(gen._annotated_possessions(ref / "Ball Possession" / "2nd Half")) == 431
    assert len(gen._annotated_shots(ref / "Shot on Goal" / "2nd Half.csv")) == 24


def test_full_game_starts_like_the_real_file_and_drops_the_ball_at_12398e12():
    """Sensor 98 writes the real first row's ts; no ball rows from BALL_MISSING_FROM on."""
    h = gen._Half(gen.GeneratorConfig(seed=0), 1, gen.FIRST_ROW_TS, gen.FIRST_HALF_END)
    first = gen._chunk_rows(h, gen.FIRST_ROW_TS, gen.FIRST_ROW_TS + gen.PS_PER_S // 10)
    assert first[0, 0] == 98 and first[0, 1] == gen.FIRST_ROW_TS
    around = gen._chunk_rows(h, gen.BALL_MISSING_FROM - 2 * gen.PS_PER_S,
                             gen.BALL_MISSING_FROM + 2 * gen.PS_PER_S)
    balls = np.isin(around[:, 0], [4, 8, 10, 12])
    assert balls.any()
    assert around[balls, 1].max() < gen.BALL_MISSING_FROM
    assert set(np.unique(around[~balls, 0]).tolist()) == BODY
