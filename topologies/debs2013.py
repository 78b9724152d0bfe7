"""The DEBS 2013 Grand Challenge (soccer monitoring): EPIC's dataflow for queries 1-4.

Event reader + interrupt reader -> merge by time -> the DEBS splitter (EPIC's Listing 1) -> Q1
(running), Q2/Q4 (ball possession, shots on goal), Q3 (heat maps) -> EPIC's 15 output files.
The graph is built by :func:`debs2013.dataflow.build_topology`; docs/debs2013.md explains it.

    epic run topologies/debs2013.py -- --input data/game.csv --out out/debs2013
    epic run topologies/debs2013.py -- --input G.csv --referee-events DIR --clock B --delays
    epic deploy topologies/debs2013.py -w W -- --input G.csv --replay-speed 1 --delays
    epic run topologies/debs2013.py -- --input G.csv --format parquet

Every switch of the spec's ambiguities is a parameter (defaults = the spec's defaults).
"""

from fractions import Fraction

import epic
from debs2013 import constants as C
from debs2013.config import Q1Config, Q2Config, Q3Config, Q4Config
from debs2013.dataflow import DebsOptions, build_topology
from epic.errors import SpecError


def _ps(seconds: str, name: str) -> int:
    """Seconds as text (``"0.02"``, ``"1"``, ``"1/50"``) -> exact picoseconds; ``name``: the
    parameter (named in the error)."""
    try:
        ps = Fraction(str(seconds).strip()) * C.PS_PER_S
    except (ValueError, ZeroDivisionError):
        raise SpecError(f"--{name.replace('_', '-')} {seconds!r}: expected seconds, e.g. 0.02 or "
                        "1/50") from None
    if ps.denominator != 1:
        raise SpecError(f"--{name.replace('_', '-')} {seconds!r} is not a whole number of "
                        f"picoseconds (it is {float(ps):g} ps); give a multiple of 1 ps")
    return int(ps)


def _grid(text: str) -> tuple[int, ...]:
    """``"64x100"`` -> ``(64, 100)``; ``"64x100+13"`` -> ``(64, 100, 13)`` (y: both edge sets)."""
    try:
        nx, ny = text.lower().split("x")
        return (int(nx),) + tuple(int(v) for v in ny.split("+"))
    except ValueError:
        raise SpecError(f"--q3-base-grid {text!r}: expected NXxNY[+NY2...], e.g. 64x100+13 or "
                        "64x1300") from None


def _ps_time(text: str, name: str) -> int | None:
    """A sensor time in ps (``''``: none)."""
    if not str(text).strip():
        return None
    try:
        return int(str(text).strip())
    except ValueError:
        raise SpecError(f"--{name.replace('_', '-')} {text!r}: expected a sensor time in ps "
                        "(a whole number), or '' for none") from None


# inputs, outputs, run shape
input_path = epic.param("input", "data/full-game", help="game CSV (13 integer fields, no header)")
referee_events = epic.param("referee_events", "", help="referee-events dir; '' = shared real files")
metadata = epic.param("metadata", "", help="metadata.txt; '' = the spec's sensor table")
out_dir = epic.param("out", "out/debs2013", help="directory of the 15 output files")
delays = epic.param("delays", False, help="prepend entry/write wall-clock columns (ns)")
out_format = epic.param("format", "csv", help="csv | parquet: the 15 streams as <name>.csv or "
                                            "<name>.parquet")
replay_speed = epic.param("replay_speed", 0.0,
                          help="0: read as fast as it parses; N: replay the game paced by event "
                               "time, N times real time (1 = real time)")
lenient = epic.param("lenient", False, help="bad input lines to a dead-letter file")
dead_letter = epic.param("dead_letter", "", help="dead-letter CSV; '' = <out>/dead-letter.csv")
queries = epic.param("queries", "q1,q2,q3,q4", help="which queries to build")
batch_rows = epic.param("batch_rows", 1 << 18, help="rows per input batch (a step of every node)")
# the splitter
clock = epic.param("clock", "A", help="annotation clock option of spec 4.3: A, B or C")
scope = epic.param("scope", "halves", help="halves: drop rows outside the halves; all: keep")
q1_interruptions = epic.param("q1_interruptions", "ignore", help="ignore | drop")
q3_interruptions = epic.param("q3_interruptions", "ignore", help="ignore | drop")
trim_markers = epic.param("trim_markers", True, help="drop markers outside the input's time span")
window_time = epic.param("window_time", "event", help="event | play: windows skip half-time")
play_break_from = epic.param("play_break_from", "",
                             help="play time: ps where the cut-out break starts; '' = 1st-half end")
# Q1
q1_period = epic.param("q1_period", "0.02", help="q1 emission period, s (50 Hz; EPIC: 1)")
q1_boundary = epic.param("q1_boundary", "le", help="speed on a class limit: le (lower) | lt")
q1_short = epic.param("q1_short_stretch", "next", help="1-second rule: next | previous")
q1_distance = epic.param("q1_distance", "speed", help="speed (integral) | displacement")
# Q2 / Q4
q2_period = epic.param("q2_period", "0.02", help="team-possession emission period, s")
hands = epic.param("hands", False, help="goalkeeper hand sensors count for hits")
hit_strict = epic.param("hit_strict", False, help="|a| > 55 m/s^2 instead of >=")
hit_2d = epic.param("hit_2d", False, help="2D ball-to-shoe distance instead of 3D")
epsilon = epic.param("epsilon", "0.2", help="hit dropping policy window, s")
ball_timeout = epic.param("ball_timeout", "0.1",
                          help="s without a row of the ball in play: its data stopped (ends possession)")
possession_time = epic.param("possession_time", "first_to_last", help="| until_end")
hits_count = epic.param("hits_count", "contact", help="contact | possession")
team_time = epic.param("team_time", "until_end", help="until_end | player")
gravity = epic.param("gravity", False, help="Q4 projection subtracts gravity")
deflection_ends = epic.param("deflection_ends", False, help="another player's hit ends a shot")
shot_pending = epic.param("shot_pending", "0.2", help="Q4 pending window after a hit, s")
shot_settle = epic.param("shot_settle", True,
                         help="a shot starts only once the touch's |a| spike is below 55 m/s^2")
# Q3
dense = epic.param("dense", False, help="every cell every second (huge) instead of non-zero")
q3_denominator = epic.param("q3_denominator", "field", help="field | window")
q3_base_grid = epic.param("q3_base_grid", "64x100+13",
                          help="64x100+13 (exact, every grid) | 64x1300 (exact) | 64x100 (8x13 "
                               "approximate)")
q3_corners = epic.param("q3_corners", "mm", help="mm: corners rounded to whole mm | exact")

if dead_letter and not lenient:
    raise SpecError("--dead-letter is where --lenient writes the bad input lines; add --lenient, "
                    "or leave --dead-letter out (strict: the first bad line stops the run)")

topology = build_topology(DebsOptions(
    input=input_path,
    referee_events=referee_events or None,
    metadata=metadata or None,
    out=out_dir,
    clock=clock.upper(),
    lenient=lenient,
    dead_letter=dead_letter or None,
    delays=delays,
    format=out_format.lower(),
    replay_speed=replay_speed or None,
    queries=tuple(q.strip() for q in queries.split(",") if q.strip()),
    scope=scope,
    q1_interruptions=q1_interruptions,
    q3_interruptions=q3_interruptions,
    trim_markers=trim_markers,
    batch_rows=batch_rows,
    window_time=window_time,
    play_break_from=_ps_time(play_break_from, "play_break_from"),
    q1=Q1Config(emit_period_ps=_ps(q1_period, "q1_period"), boundary=q1_boundary, short_stretch=q1_short,
                distance=q1_distance),
    q2=Q2Config(acc_inclusive=not hit_strict, distance_3d=not hit_2d, include_hands=hands,
                epsilon_ps=_ps(epsilon, "epsilon"), ball_timeout_ps=_ps(ball_timeout, "ball_timeout"),
                possession_time=possession_time, hits_count=hits_count,
                team_time=team_time, team_period_ps=_ps(q2_period, "q2_period")),
    q3=Q3Config(base_grid=_grid(q3_base_grid), denominator=q3_denominator, dense=dense,
                corners=q3_corners),
    q4=Q4Config(gravity=gravity, deflection_ends=deflection_ends, pending_ps=_ps(shot_pending, "shot_pending"),
                settle_acc_raw=C.HIT_ACC_RAW if shot_settle else None),
))
