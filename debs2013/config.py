"""Switches of the DEBS 2013 queries: every ambiguity of the spec (section 10) with its default.

Each query node takes one frozen config. The defaults are the spec's defaults; every field names the
spec section it settles. Values are raw input units: picoseconds, mm, µm/s, µm/s².

Example:
    >>> Q1Config().emit_period_ps == 20_000_000_000          # 50 Hz
    True
    >>> Q1Config(emit_period_ps=10**12).emit_period_ps      # EPIC's 1 s emission
    1000000000000
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from debs2013 import constants as C
from epic.errors import SpecError

__all__ = ["Q1Config", "Q2Config", "Q3Config", "Q4Config", "DEFAULT_ORIGIN"]

#: Where emission grids and window origins start: the 1st-half kick-off (spec §1.4).
DEFAULT_ORIGIN = C.FIRST_HALF_START


def _choice(owner: str, name: str, value, allowed) -> None:
    if value not in allowed:
        raise SpecError(f"{owner}: {name}={value!r} is not one of {', '.join(map(repr, allowed))}")


def _positive(owner: str, name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise SpecError(f"{owner}: {name} must be a positive integer (ps / raw units), "
                        f"got {value!r}")


@dataclass(frozen=True)
class Q1Config:
    """Query 1, running analysis (spec §5).

    Attributes:
        boundary: ``"le"``: a speed equal to a class's upper limit belongs to that (lower) class
            (E, M; default); ``"lt"``: to the upper class (J).
        speed_edges_raw: class upper limits in µm/s (standing|trot|low|medium|high|sprint).
        min_segment_ps: how long a new intensity must last to count (the 1-second rule).
        short_stretch: ``"next"``: a stretch shorter than ``min_segment_ps`` goes to the next
            intensity that lasts (OV's worked example; default); ``"previous"``: to the segment
            before it.
        distance: ``"speed"``: the integral of the player's speed (mean of the two shoes' latest
            ``|v|``) over time (default: one speed source for both speed and distance);
            ``"displacement"``: the sum of 2D displacements of the mean shoe position.
        emit_period_ps: emission period of q1a rows and of the aggregate increments: 50 Hz
            (spec; default) or e.g. ``10**12`` (1 s, as EPIC did).
        max_gap_ps: a player's last sample stands for at most this long; beyond it the player is
            unobserved (no time, no distance, no q1a row), e.g. across half-time.
        origin: the emission grid is ``origin + m * emit_period_ps`` (kick-off by default); use
            the same value as ``origin=`` of the window specs so slices and windows align.
    """

    boundary: str = "le"
    speed_edges_raw: tuple[int, ...] = C.SPEED_EDGES_RAW
    min_segment_ps: int = C.MIN_SEGMENT_PS
    short_stretch: str = "next"
    distance: str = "speed"
    emit_period_ps: int = C.Q1_EMIT_PERIOD_PS
    max_gap_ps: int = C.PS_PER_S
    origin: int = DEFAULT_ORIGIN

    def __post_init__(self):
        _choice("Q1Config", "boundary", self.boundary, ("le", "lt"))
        _choice("Q1Config", "short_stretch", self.short_stretch, ("next", "previous"))
        _choice("Q1Config", "distance", self.distance, ("speed", "displacement"))
        for name in ("min_segment_ps", "emit_period_ps", "max_gap_ps"):
            _positive("Q1Config", name, getattr(self, name))
        if len(self.speed_edges_raw) != len(C.INTENSITIES) - 1 or list(
                self.speed_edges_raw) != sorted(self.speed_edges_raw):
            raise SpecError("Q1Config: speed_edges_raw needs 5 increasing limits (µm/s)")


@dataclass(frozen=True)
class Q2Config:
    """Query 2, ball possession (spec §2, §3, §6), also the hit rule used by query 4.

    Attributes:
        hit_acc_raw: minimum ``|a|`` of a hit in µm/s² (55 m/s²).
        acc_inclusive: ``True``: ``|a| >= hit_acc_raw`` (default); ``False``: ``>``.
        hit_dist_mm: maximum ball-to-shoe distance of a hit.
        distance_3d: 3D distance (default) or 2D (``False``, as S).
        include_hands: goalkeeper hand sensors count for hits (M); default no (F).
        epsilon_ps: the dropping policy: after a counted hit by player P, qualifying events
            attributed to P within ``epsilon_ps`` of that hit are the same contact and dropped.
            A qualifying event of another player is always a new hit.
        epsilon_from: ``"hit"``: the window is measured from P's last *counted* hit (default);
            ``"last_event"``: from P's last qualifying event (a contact is a chain of events less
            than epsilon apart).
        field_inclusive: bounds of the FAQ rectangle are inside the field (default) or not.
        ball_timeout_ps: the ball in play's data has stopped when it has no row for longer than
            this (0.1 s; the ball reports every 0.5 ms): no ball is in play from its last row
            on, so possession ends there (spec §1.4: no ball data for the last ~159 s of the
            first half; a short game's half simply ends).
        possession_time: ``"first_to_last"``: a player's time runs from his first touch to his
            last touch of an unbroken run (default; matches the annotations); ``"until_end"``: to
            the end of the possession (next player's hit, ball out, stop).
        hits_count: ``"contact"``: every counted hit (default); ``"possession"``: only hits that
            start a possession.
        team_time: ``"until_end"``: a team has the ball from a hit of one of its players until a
            hit by the other team, the ball leaving the field or a stop, passes included
            (default); ``"player"``: the sum of its players' possession times as in
            ``possession_time``.
        team_period_ps: slice length of the team-possession increments (the windows' ``ef``).
        origin: the slice grid origin (kick-off by default).
        kickoffs: event times at which the sides are re-inferred from the goalkeepers.
        default_attack: fallback sides, ``(half index, team) -> +1`` (attacks the +y goal 1) or
            ``-1``, used while no goalkeeper sample has been seen since the kick-off.
    """

    hit_acc_raw: int = C.HIT_ACC_RAW
    acc_inclusive: bool = True
    hit_dist_mm: int = C.HIT_DIST_MM
    distance_3d: bool = True
    include_hands: bool = False
    epsilon_ps: int = 200_000_000_000
    epsilon_from: str = "hit"
    field_inclusive: bool = True
    ball_timeout_ps: int = 100_000_000_000
    possession_time: str = "first_to_last"
    hits_count: str = "contact"
    team_time: str = "until_end"
    team_period_ps: int = C.Q1_EMIT_PERIOD_PS
    origin: int = DEFAULT_ORIGIN
    kickoffs: tuple[int, ...] = (C.FIRST_HALF_START, C.SECOND_HALF_START)
    default_attack: tuple[tuple[int, int], ...] = ((+1, -1), (-1, +1))  # per half: (A, B)

    def __post_init__(self):
        _choice("Q2Config", "epsilon_from", self.epsilon_from, ("hit", "last_event"))
        _choice("Q2Config", "possession_time", self.possession_time,
                ("first_to_last", "until_end"))
        _choice("Q2Config", "hits_count", self.hits_count, ("contact", "possession"))
        _choice("Q2Config", "team_time", self.team_time, ("until_end", "player"))
        for name in ("hit_acc_raw", "hit_dist_mm", "team_period_ps", "ball_timeout_ps"):
            _positive("Q2Config", name, getattr(self, name))
        if self.epsilon_ps < 0:
            raise SpecError("Q2Config: epsilon_ps must be >= 0")
        if len(self.default_attack) < len(self.kickoffs):
            raise SpecError("Q2Config: default_attack needs one (A, B) pair per kick-off")


@dataclass(frozen=True)
class Q3Config:
    """Query 3, heat map (spec §7).

    Attributes:
        base_grid: the grid kept in state, ``(cells along x, ny1[, ny2 ...])``: along y the
            union of the edges of ``ny1``, ``ny2``, ... equal parts (pairwise coprime counts).
            The default ``(64, 100, 13)`` has 64 x 112 cells and derives all four grids exactly
            (every edge of 8x13, 16x25, 32x50 and 64x100 is a base edge), which spec §7 needs:
            each sample's time belongs to the cell it lies in. ``(64, 1300)`` is exact too, with
            13x the state; ``(64, 100)`` can only split a base cell's time over the 8x13 cells
            in proportion to their overlap (up to 0.8 percentage points off).
        period_ps: one heat map per player per period (1 s) and the windows' ``ef``.
        max_gap_ps: a position sample stands for at most this long (see :class:`Q1Config`).
        denominator: ``"field"``: percent of the player's time inside the field in the window
            (default); ``"window"``: percent of the window's length.
        dense: every cell every emission (``True``) or non-zero cells only (default).
        corners: ``"mm"``: cell corners rounded to whole millimetres, as in the spec's worked
            example (the first 8x13 cell is (0, -33960)-(6560, -28735)), written as integers
            (default; it also halves the CSV formatting cost of q3, the largest output);
            ``"exact"``: the unrounded ``i*w`` corners as floats.
        origin: the heat-map grid origin (kick-off by default).
    """

    base_grid: tuple[int, ...] = (64, 100, 13)
    period_ps: int = C.Q3_EMIT_PERIOD_PS
    max_gap_ps: int = C.PS_PER_S
    denominator: str = "field"
    dense: bool = False
    corners: str = "mm"
    origin: int = DEFAULT_ORIGIN

    def __post_init__(self):
        _choice("Q3Config", "denominator", self.denominator, ("field", "window"))
        _choice("Q3Config", "corners", self.corners, ("mm", "exact"))
        for name in ("period_ps", "max_gap_ps"):
            _positive("Q3Config", name, getattr(self, name))
        if len(self.base_grid) < 2 or min(self.base_grid) <= 0:
            raise SpecError("Q3Config: base_grid must be (nx, ny[, ny2 ...]) with positive "
                            "counts, e.g. (64, 100, 13)")
        ys = self.base_grid[1:]
        for a in range(len(ys)):
            for b in range(a + 1, len(ys)):
                if math.gcd(ys[a], ys[b]) != 1:
                    raise SpecError(f"Q3Config: base_grid y counts {ys[a]} and {ys[b]} share "
                                    "interior edges; use pairwise coprime counts, e.g. 100, 13")


@dataclass(frozen=True)
class Q4Config:
    """Query 4, shot on goal (spec §3, §8).

    Attributes:
        horizon_ps: the projection must reach the goal within this time (1.5 s).
        gravity: subtract ``½·g·t²`` from the projected height (J); default off (P, E).
        pending_ps: after a hit the shot test runs on every ball event of the ball in play for
            this long and the shot starts at the first event that passes (default 0.2 s). A kick's
            acceleration spike starts before the ball has its new velocity, and a curve ball may
            only line up with the goal a little later; 0 tests the hit event alone.
        settle_acc_raw: a shot starts only at a ball row with ``|a|`` below this (µm/s²):
            the touch's acceleration spike has settled, so the projected velocity is the one
            the ball leaves with (default: the hit threshold, 55 m/s²). Rows inside a spike
            carry a blend of the old and new velocity and would report 2-10 ms "blip shots"
            at touches of a goalward ball. ``None``: test every row (the old behaviour).
        deflection_ends: a hit by another player ends a live shot (and may start a new one);
            default False: the report continues under the original shooter (F).
        goal_pos_y, goal_neg_y: the goal areas (goal 1 at +y, goal 2 at -y).
    """

    horizon_ps: int = int(C.SHOT_HORIZON_S * C.PS_PER_S)
    gravity: bool = False
    pending_ps: int = 200_000_000_000
    settle_acc_raw: int | None = C.HIT_ACC_RAW
    deflection_ends: bool = False
    goal_pos_y: tuple[float, float, float, float] = (
        C.GOAL_POS_Y["x_lo"], C.GOAL_POS_Y["x_hi"], C.GOAL_POS_Y["y"], C.GOAL_POS_Y["z_max"])
    goal_neg_y: tuple[float, float, float, float] = (
        C.GOAL_NEG_Y["x_lo"], C.GOAL_NEG_Y["x_hi"], C.GOAL_NEG_Y["y"], C.GOAL_NEG_Y["z_max"])

    def __post_init__(self):
        _positive("Q4Config", "horizon_ps", self.horizon_ps)
        if self.pending_ps < 0:
            raise SpecError("Q4Config: pending_ps must be >= 0")
        if self.settle_acc_raw is not None:
            _positive("Q4Config", "settle_acc_raw", self.settle_acc_raw)
