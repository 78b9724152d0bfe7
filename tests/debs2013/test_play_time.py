"""window_time="play" (spec §10.11): windows skip the half-time break, outputs stay in event time."""

from __future__ import annotations

import csv
import functools

import numpy as np
import pyarrow as pa
import pytest

import epic
from debs2013 import constants as C
from debs2013.dataflow import (DebsOptions, PlayClock, Then, ToPlayTime, WindowToEvent,
                               build_topology)
from debs2013.generator import generate_game

PS = C.PS_PER_S
FHE, SHS = C.FIRST_HALF_END, C.SECOND_HALF_START


def test_clock_gap_is_a_multiple_of_every_period_and_the_map_is_monotone():
    c = PlayClock.for_periods(20_000_000_000, PS)
    assert c.gap % PS == 0 and c.gap % 20_000_000_000 == 0
    assert SHS - FHE - PS < c.gap <= SHS - FHE
    ts = np.array([FHE - 5, FHE, FHE + 10 * PS, SHS - 1, SHS, SHS + 7 * PS])
    play = c.to_play(ts)
    assert (np.diff(play) >= 0).all()
    assert play.tolist()[:4] == [FHE - 5, FHE, FHE, FHE]
    assert c.to_event(play[4:]).tolist() == [SHS, SHS + 7 * PS]


SCHEMA = pa.schema([("ts", pa.int64()), ("v", pa.int64())])


def _mini(window_time: str):
    """One value per second in the last 90 s of the 1st half and the first 90 s of the 2nd."""
    times = [FHE - k * PS for k in range(90, 0, -1)] + [SHS + k * PS for k in range(90)]
    rows = [{"ts": t, "v": 1} for t in times]
    t = epic.Topology(f"mini_{window_time}")
    s = t.source("src", epic.iterator_source(rows, schema=SCHEMA, time="ts", unit="ps"))
    clock = PlayClock.for_periods(PS)
    if window_time == "play":
        s = t.process("to_play", s, functools.partial(ToPlayTime, clock, SCHEMA), schema=SCHEMA)
    for name, spec in (("lm", epic.landmark(1, origin=C.FIRST_HALF_START)),
                       ("m1", epic.few_time(60, 1, 1, origin=C.FIRST_HALF_START))):
        w = t.window(name, s, spec, aggregates=[epic.count()])
        if window_time == "play":
            w = t.map(f"{name}_event", w, Then(WindowToEvent(clock), lambda b: b))
        t.sink(f"{name}_out", w, epic.collect_sink())
    res = epic.run(t)
    return {k: res.collected[f"{k}_out"].to_pylist() for k in ("lm", "m1")}


def test_play_time_windows_skip_the_break_and_keep_event_time_stamps():
    ev, pl = _mini("event"), _mini("play")
    gap = PlayClock.for_periods(PS).gap
    in_break = [r for r in pl["lm"] + pl["m1"] if FHE + PS < r["window_end"] < SHS - PS]
    assert in_break == []                       # nothing emitted during the break
    assert len([r for r in ev["lm"] if FHE < r["window_end"] < SHS]) > 500  # event time: all of it
    # a landmark is the same whichever clock, at every instant both emit
    outside = {r["window_end"]: r["count"] for r in ev["lm"]
               if r["window_end"] <= FHE or r["window_end"] > FHE + gap}
    assert {r["window_end"]: r["count"] for r in pl["lm"]} == outside
    # the 1-minute window 10 s after the 2nd kick-off also holds the end of the 1st half
    at = {r["window_end"]: r["count"] for r in pl["m1"]}
    t10 = min(t for t in at if t >= SHS + 10 * PS)
    assert at[t10] == 60
    ev_at = {r["window_end"]: r["count"] for r in ev["m1"]}
    assert ev_at[t10] < 60 and ev_at[t10] == len([k for k in range(90) if SHS + k * PS < t10])


@pytest.fixture(scope="module")
def game(tmp_path_factory):
    d = tmp_path_factory.mktemp("play")
    return generate_game(d / "g.csv", minutes=0.1, seed=4).game_path


def _csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_debs_team_possession_on_play_time(game, tmp_path):
    """Q2's team windows: no rows inside the break; the landmark agrees with event time."""
    out = {}
    for mode in ("event", "play"):
        d = tmp_path / mode
        epic.run(build_topology(DebsOptions(input=str(game), out=str(d), queries=("q2",),
                                            window_time=mode)))
        out[mode] = {w: _csv(d / f"q2teampossession_{w}.csv")
                     for w in ("1min", "landmark")}
    gap = PlayClock.for_periods(C.Q1_EMIT_PERIOD_PS, PS).gap
    play_lm = out["play"]["landmark"]
    assert play_lm and not [r for r in play_lm if FHE + PS < int(r["ts"]) < SHS - PS]
    ev_lm = [r for r in out["event"]["landmark"]
             if int(r["ts"]) <= FHE or int(r["ts"]) > FHE + gap]
    assert play_lm == ev_lm
    skipped = [r for r in out["event"]["landmark"] if FHE < int(r["ts"]) <= FHE + gap]
    assert len(skipped) > 50_000  # event time: two rows every 20 ms through the 688 s break
    assert len(out["event"]["landmark"]) == len(play_lm) + len(skipped)
