"""A realistic, deterministic synthetic DEBS 2013 game in the exact format of the real `full-game` file.

The real 49.6 M-row sensor file cannot be downloaded here, so this module writes a stand-in that
exercises every rule of the challenge (spec: ``shared/docs/debs2013-spec.md``) and records what it
planted in a ground-truth file, so the four queries can be checked against known answers.

What is written (headerless CSV, 13 integer fields ``sid, ts, x, y, z, |v|, |a|, vx, vy, vz, ax, ay,
az``; ``ts`` in picoseconds as exact int64; positions in mm; ``|v|`` in µm/s; ``|a|`` in µm/s²;
directions as unit vectors scaled to 10,000):

- 16 players with two shoe sensors each, the goalkeepers also with two hand sensors, and the referee
  (105, 106): 38 body sensors at 200 Hz.
- The ball in play at 2000 Hz (ball 4 at the start of the 1st half, ball 12 of the 2nd, so a reader
  cannot assume one id) and the spare balls outside the field, also at 2000 Hz but with drop-outs
  while spare, whose duty cycle is calibrated so that a full game has about the real 49,576,080
  rows. Spares are carried and thrown by ball boys outside the field, and after every time the
  ball leaves the field a spare is brought in for the restart and becomes the ball in play
  (``GeneratorConfig.spare_balls``; the truth's ``balls_in_play`` and ``ball_swaps``).
- Both halves at the official timestamps. A full game starts at the real first row's timestamp
  (123.95 s before kick-off, sensor 98 first, as in the real file); there is no ball data at all from
  ``BALL_MISSING_FROM`` to the end of the 1st half.

How the motion is made physically consistent: every sensor has a *raw* path (players: a piecewise
linear polyline of waypoints; balls: piecewise constant-acceleration segments), sampled on the
sensor's own grid and smoothed with a Gaussian kernel. Velocity and acceleration are then the central
first and second finite differences of the smoothed positions, so ``|v|``, ``|a|`` and the direction
vectors agree with the positions' derivatives exactly, up to integer rounding. A kick is a velocity
jump of the raw ball path; smoothing turns it into an acceleration spike of about
``|Δv| / (σ√(2π))`` (σ = 4 ms, so 1 m/s gives ~100 m/s²) centred on the touch. The only other spikes
are ground bounces of lofted passes and rebounds off a goal post, which are planned away from players.

The plan: the 2nd half replays the real annotations (who has the ball when, from the Ball Possession
files; the 24 shots; the interruptions), the 1st half follows its real interruption file with
synthesised possessions and shots. Annotation times map to ``ts`` by spec section 4.3 option A
(``ts = half_start + round(T * 1e12)``). Every interruption begins with the ball leaving the field
(or entering a goal) and ends with a restart from a point inside it. Sides follow implementation F of
the spec (checked there against the annotated shots): in the 1st half team A attacks the +y goal
("goal 1") and its goalkeeper stands near -y; in the 2nd half the sides swap. Goalkeeper positions
at kick-off therefore reveal the sides, as the spec recommends.

Ground truth (``<game>.truth.json``) is computed from the very samples that are written: a planted
touch (passes included) is a *hit* by the spec's rule (§6): at any of its ball samples with ``|a|
>= 55 m/s²``, the closest player shoe (latest written sample, 3D) is within 1 m; the hitter is that
shoe's player at the first such sample. Another player whose shoe is the closest within 1 m at
other qualifying samples of the same touch (an opponent's boot at the ball during a kick) has a
hit too, of kind ``contested``. See :func:`generate_game`.

Sensor noise (on by default, ``GeneratorConfig.noise``; amplitudes there): position noise,
``|v|`` and ``|a|`` noise, timestamp jitter and drop-outs of body and ball sensors, applied to the
smoothed samples as written (so ``|v|`` no longer equals the positions' derivative exactly, as in
a real tracker). Simplified on purpose: shoe offsets are fixed in the world frame (no gait, no heading);
every interruption is a ball out of play (or a goal) followed by a restart with another ball
(with ``spare_balls=False``: the same ball, moved back into the field along a smooth path
without a carrier, and still spares); shots are ground shots (no gravity in the projection
matters); goalkeepers save with the feet; ball boys walk polylines and throws land dead. Measured: the full game (49,579,492 rows, 3.3 GB) in 45 s wall on
this 2-core machine at ~420 MB peak memory.

Example:
    >>> from debs2013.generator import generate_game
    >>> result = generate_game("/tmp/game.csv", minutes=1, seed=7)   # doctest: +SKIP
    >>> result.rows, result.truth_path                               # doctest: +SKIP
"""

from __future__ import annotations

import json
import math
import time
import unicodedata
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from debs2013.readers import shared_path

__all__ = ["GeneratorConfig", "GenerationResult", "generate_game", "truth_path_for"]

# --- Spec section 11 constants (a private copy; debs2013/constants.py is the shared home) ----------
PS_PER_S = 10**12
FIRST_ROW_TS = 10629342490369879  # the real file's first row (sensor 98)
FIRST_HALF_START = 10753295594424116
BALL_MISSING_FROM = 12398000000000000
FIRST_HALF_END = 12557295594424116
SECOND_HALF_START = 13086639146403495
SECOND_HALF_END = 14879639146403495
FIELD_MM = dict(x_min=0, x_max=52483, y_min=-33960, y_max=33965)
GOAL_POS_Y = dict(x_lo=22578.5, x_hi=29898.5, y=33941.0, z_max=2440.0)  # "goal 1"
GOAL_NEG_Y = dict(x_lo=22560.0, x_hi=29880.0, y=-33968.0, z_max=2440.0)  # "goal 2"
TEAM_A = {"Nick Gertje": (13, 14, 97, 98), "Dennis Dotterweich": (47, 16),
          "Niklas Waelzlein": (49, 88), "Wili Sommer": (19, 52),
          "Philipp Harlass": (53, 54), "Roman Hartleb": (23, 24),
          "Erik Engelhardt": (57, 58), "Sandro Schneider": (59, 28)}
TEAM_B = {"Leon Krapf": (61, 62, 99, 100), "Kevin Baer": (63, 64),
          "Luca Ziegler": (65, 66), "Ben Mueller": (67, 68),
          "Vale Reitstetter": (69, 38), "Christopher Lee": (71, 40),
          "Leon Heinze": (73, 74), "Leo Langhans": (75, 44)}
REFEREE = (105, 106)
HIT_ACC_RAW = 55_000_000
HIT_DIST_MM = 1000
SHOT_HORIZON_S = 1.5
HALF_STARTS = {1: FIRST_HALF_START, 2: SECOND_HALF_START}
HALF_ENDS = {1: FIRST_HALF_END, 2: SECOND_HALF_END}

BODY_PERIOD_PS = 5 * 10**9  # 200 Hz
BALL_PERIOD_PS = 5 * 10**8  # 2000 Hz
GAME_BALL = {1: 4, 2: 12}
SPARE_BALLS = {1: (8, 10), 2: (4, 8, 10)}
# Where spare balls lie (m), all outside the FAQ field rectangle.
SPARE_REST = {4: (-2.6, -14.0), 8: (-3.1, 9.5), 10: (55.2, -3.0), 12: (54.9, 17.0)}
# Where ball boys keep spare balls when spares move (GeneratorConfig.spare_balls): the four spots
# above by the touch lines and two behind each goal line.
SPARE_SPOTS = tuple(SPARE_REST.values()) + ((13.0, -37.0), (39.0, -37.0), (13.0, 37.0), (39.0, 37.0))

G = 9.81
BALL_R = 0.11  # ball centre height when on the ground (m)
FIELD = (0.0, 52.483, -33.960, 33.965)  # x_min, x_max, y_min, y_max (m)
CENTRE = (26.24, 0.0)
# Referee files spell three names differently from the metadata (spec section 2).
_NAME_FIX = {"niklas welzlein": "Niklas Waelzlein", "willi sommer": "Wili Sommer",
             "ben muller": "Ben Mueller", "ben muller ": "Ben Mueller"}
DEFAULT_REFEREE_DIR = shared_path() / "referee-events"

# Speed classes (m/s) for free running, kept clear of the Q1 class edges (1, 11, 14, 17, 24 km/h).
_CLASS_SPEEDS = {"standing": (0.0, 0.0), "trot": (0.6, 2.8), "low": (3.15, 3.75),
                 "medium": (4.0, 4.6), "high": (4.85, 6.4), "sprint": (6.85, 8.3)}
_CLASS_P = {"standing": 0.14, "trot": 0.36, "low": 0.13, "medium": 0.13, "high": 0.14,
            "sprint": 0.10}


@dataclass(frozen=True)
class GeneratorConfig:
    """Everything that determines a generated game; equal configs give byte-identical files.

    Attributes:
        seed: Seed of every random choice.
        minutes: Minutes per half for a short game (each half then starts at its official start and
            has no pre-kick-off data); ``None`` for the full game.
        referee_dir: The real ``referee-events`` directory replayed by the plan.
        chunk_seconds: Seconds of game time generated and written per step (bounds memory).
        spare_ball_duty: Fraction of time spare balls transmit; 0.795 reproduces the real row count.
        body_sigma_s: Gaussian smoothing of player paths (s); sets how sharp turns and sprints are.
        ball_sigma_s: Gaussian smoothing of the ball path (s); sets the width of kick spikes.
        ground_decel: Rolling deceleration of a ground pass on grass (m/s²).
        first_half_team_a_attacks: ``"+y"`` (implementation F's finding) or ``"-y"``; sides swap at
            half-time.
        noise: sensor noise, timestamp jitter and drop-outs on (default) or off (``False``:
            the exact smoothed paths, every sample on its grid). With noise, per sample:
            position + N(0, ``body_pos_sigma_mm``) per axis for body sensors (20 mm),
            N(0, ``ball_pos_sigma_mm``) for balls (5 mm); ``|v|`` and ``|a|`` times
            (1 + N(0, ``speed_sigma_rel`` = 2 %)) and (1 + N(0, ``acc_sigma_rel`` = 5 %));
            ``ts`` + U[0, ``ts_jitter_ps``) (20 µs, below every sensor's period, so each sensor
            stays in order); drop-outs: blocks of ``body_dropout_samples`` (20 = 100 ms) body
            samples missing with probability ``body_dropout`` (0.5 %), blocks of
            ``ball_dropout_samples`` (10 = 5 ms) ball samples with ``ball_dropout`` (0.2 %).
            The noise is a pure function of (seed, sensor, sample index), so the ground truth
            is computed from the very samples written.
        spare_balls: move and swap the spare balls as the real game does (default; ``False``:
            the game ball stays in play for the whole half and the spares lie still, as before).
            Rules (see ``_SpareBalls``): after every interruption that begins with the ball
            leaving the field (touch line, goal line or into the goal) the ball that went out
            lies where it stopped for 2-8 s, then a ball boy carries it (lifted to 1 m, at
            ``spare_walk_speed`` m/s) around the outside of the field to its home spot by a
            touch line; the spare closest (walking round the field) to the restart is carried to
            the boundary next to the restart point and handed in (restart within 6 m) or
            rolled in along the ground (a kick-off after a goal), reaching the restart point at
            rest before the restart touch: it becomes the ball in play when it crosses into the
            field. While at their home spots spares rest (sensor noise only) and make
            excursions along the outside of their touch line: carried 3-12 m and back
            (``spare_carry_per_min`` per ball, at walking speed), or thrown 6-15 m to another
            ball boy and carried back (``spare_throw_per_min``). A spare never enters the
            field; every ball reports on the 0.5 ms grid; the duty-cycle silences
            (``spare_ball_duty``) apply only while a ball is a spare.
    """

    seed: int = 0
    minutes: float | None = None
    referee_dir: Path = DEFAULT_REFEREE_DIR
    chunk_seconds: float = 30.0
    spare_ball_duty: float = 0.795
    body_sigma_s: float = 0.10
    ball_sigma_s: float = 0.004
    ground_decel: float = 1.2
    first_half_team_a_attacks: str = "+y"
    noise: bool = True
    body_pos_sigma_mm: float = 20.0
    ball_pos_sigma_mm: float = 5.0
    speed_sigma_rel: float = 0.02
    acc_sigma_rel: float = 0.05
    ts_jitter_ps: int = 20_000_000
    body_dropout: float = 0.005
    body_dropout_samples: int = 20
    ball_dropout: float = 0.002
    ball_dropout_samples: int = 10
    spare_balls: bool = True
    spare_walk_speed: float = 1.4
    spare_carry_per_min: float = 0.5
    spare_throw_per_min: float = 0.25


@dataclass(frozen=True)
class GenerationResult:
    """What :func:`generate_game` wrote.

    Attributes:
        game_path: The CSV file.
        truth_path: The ground-truth JSON file next to it.
        rows: Rows written.
        seconds: Wall time of the generation.
    """

    game_path: Path
    truth_path: Path
    rows: int
    seconds: float


# --------------------------------------------------------------------------------------------------
# People and sensors
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Person:
    name: str
    team: str  # "A", "B" or "-" (referee)
    gk: bool
    shoes: tuple[int, int]
    hands: tuple[int, int] | None


def _people() -> list[_Person]:
    out = []
    for team, table in (("A", TEAM_A), ("B", TEAM_B)):
        for name, ids in table.items():
            out.append(_Person(name, team, len(ids) == 4, (ids[0], ids[1]),
                               (ids[2], ids[3]) if len(ids) == 4 else None))
    out.append(_Person("Referee", "-", False, REFEREE, None))
    return out


PEOPLE = _people()
_BY_NAME = {p.name: i for i, p in enumerate(PEOPLE)}
_SHOE_OFF = ((-0.12, 0.0), (0.12, 0.0))  # world-frame offsets: no heading needed, no spurious turns
_HAND_OFF = ((-0.32, 0.05), (0.32, 0.05))


@dataclass
class _Sensor:
    sid: int
    person: int  # -1 for a ball
    off: tuple[float, float]
    z0: float
    zamp: float
    zfreq: float
    zphase: float
    period: int
    base_ts: int  # ts of sample k = 0
    t_base: float  # its time in seconds since the half start
    dt: float
    k_end: int  # samples k < k_end exist
    off_intervals: list[tuple[int, int]] = field(default_factory=list)  # ts ranges not transmitted


# --------------------------------------------------------------------------------------------------
# Referee files (a small private parser; debs2013/readers.py is the full one)
# --------------------------------------------------------------------------------------------------

def _clock(text: str) -> float:
    text = text.strip()
    if text in ("", "0"):
        return 0.0
    h, m, s = text.split(":")
    return int(h) * 3600 + int(m) * 60 + float(s)


def _rows(path: Path) -> list[list[str]]:
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    sep = ";" if ";" in lines[0] else ","
    out = []
    for line in lines:
        cells = line.split(sep)
        if not cells[0].strip() or cells[0].startswith("Statistic"):
            break  # data ends at the first empty row or the Statistic block
        if cells[0].strip() == "event_id":
            continue
        out.append(cells)
    return out


def _canonical(name: str) -> str:
    folded = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode().strip()
    folded = folded.replace("A1/4", "u")  # "Ben MÃ¼ller" decoded as latin-1
    return _NAME_FIX.get(folded.lower(), folded)


def _stops(path: Path, half_len: float) -> list[tuple[float, float]]:
    """Stopped intervals (s since the half start): half start to the first End, each Begin to the
    next End (paired by order, not by counter), an unmatched last Begin to the half end."""
    stops, begin = [], 0.0
    for cells in _rows(path):
        t = _clock(cells[2])
        if "Begin" in cells[1]:
            begin = t if begin is None else begin
        elif begin is not None:
            stops.append((begin, t))
            begin = None
    if begin is not None:
        stops.append((begin, half_len))
    return stops


def _annotated_possessions(folder: Path) -> list[tuple[float, float, int]]:
    out = []
    for f in sorted(folder.glob("*.csv")):
        begin = None
        for cells in _rows(f):
            who = _BY_NAME[_canonical(cells[1].rsplit(" ", 1)[0])]
            t = _clock(cells[2])
            if cells[1].endswith("Begin"):
                begin = t
            elif begin is not None:
                out.append((begin, max(begin, t), who))
                begin = None
    return sorted(out)


def _annotated_shots(path: Path) -> list[tuple[float, int]]:
    return [(_clock(c[2]), _BY_NAME[_canonical(c[1])]) for c in _rows(path)]


# --------------------------------------------------------------------------------------------------
# Geometry helpers
# --------------------------------------------------------------------------------------------------

def _attack_sign(cfg: GeneratorConfig, half: int, team: str) -> int:
    a = 1 if cfg.first_half_team_a_attacks == "+y" else -1
    if half == 2:
        a = -a
    return a if team == "A" else -a


def _goal(sign: int) -> dict:
    g = GOAL_POS_Y if sign > 0 else GOAL_NEG_Y
    return dict(x_lo=g["x_lo"] / 1000, x_hi=g["x_hi"] / 1000, y=g["y"] / 1000, z_max=g["z_max"] / 1000)


def _inside(p, margin: float) -> np.ndarray:
    x = np.clip(p[0], FIELD[0] + margin, FIELD[1] - margin)
    y = np.clip(p[1], FIELD[2] + margin, FIELD[3] - margin)
    return np.array([x, y])


def _unit(v) -> np.ndarray:
    n = float(np.hypot(v[0], v[1]))
    return np.array([1.0, 0.0]) if n < 1e-9 else np.asarray(v[:2], float) / n


def _rot(v, ang: float) -> np.ndarray:
    c, s = math.cos(ang), math.sin(ang)
    return np.array([c * v[0] - s * v[1], s * v[0] + c * v[1]])


# Formation in the "attack frame" (own goal at -y); the GK first.
_HOME = [(26.24, -31.6), (10.0, -20.0), (26.2, -22.0), (42.5, -20.0), (14.0, -6.0), (38.5, -6.0),
         (20.0, 8.0), (32.5, 8.0)]


# --------------------------------------------------------------------------------------------------
# Ball path: piecewise constant-acceleration segments
# --------------------------------------------------------------------------------------------------

class _BallPath:
    """Raw ball path as segments (t0, p0, v0, acc); segment i holds on [t0_i, t0_{i+1})."""

    def __init__(self, t0: float, p0) -> None:
        self.t0: list[float] = [t0]
        self.p0: list[np.ndarray] = [np.array([p0[0], p0[1], BALL_R], float)]
        self.v0: list[np.ndarray] = [np.zeros(3)]
        self.acc: list[np.ndarray] = [np.zeros(3)]

    def add(self, t0: float, p0, v0, acc) -> None:
        if t0 <= self.t0[-1]:  # a later plan step overrides a segment starting at the same time
            while self.t0 and t0 <= self.t0[-1] and len(self.t0) > 1:
                self.t0.pop(); self.p0.pop(); self.v0.pop(); self.acc.pop()
        self.t0.append(float(t0)); self.p0.append(np.asarray(p0, float))
        self.v0.append(np.asarray(v0, float)); self.acc.append(np.asarray(acc, float))

    def rest(self, t0: float, p) -> None:
        self.add(t0, p, np.zeros(3), np.zeros(3))

    def at(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        i = int(np.searchsorted(self.t0, t, side="right")) - 1
        i = max(i, 0)
        tau = t - self.t0[i]
        return (self.p0[i] + self.v0[i] * tau + 0.5 * self.acc[i] * tau * tau,
                self.v0[i] + self.acc[i] * tau)

    def freeze(self):
        return (np.array(self.t0), np.array(self.p0), np.array(self.v0), np.array(self.acc))

    # Legs ---------------------------------------------------------------------------------------
    def roll(self, ta: float, tb: float, a, b, decel: float) -> np.ndarray:
        """Ground roll from a (at ta) to b (at tb) with constant deceleration; stops early if slow."""
        a = np.array([a[0], a[1], BALL_R]); b = np.array([b[0], b[1], BALL_R])
        d_vec = b - a
        dist = float(np.linalg.norm(d_vec)); T = max(tb - ta, 1e-3)
        if dist < 1e-6:
            self.rest(ta, a)
            return np.zeros(3)
        u = d_vec / dist
        if decel <= 0 or dist >= decel * T * T / 2:
            v0 = dist / T + decel * T / 2
            self.add(ta, a, v0 * u, -decel * u)
            return (v0 - decel * T) * u
        v0 = math.sqrt(2 * decel * dist)
        self.add(ta, a, v0 * u, -decel * u)
        self.rest(ta + v0 / decel, b)
        return np.zeros(3)

    def hop(self, ta: float, tb: float, a, b) -> None:
        T = tb - ta
        a = np.array([a[0], a[1], BALL_R]); b = np.array([b[0], b[1], BALL_R])
        v = np.array([(b[0] - a[0]) / T, (b[1] - a[1]) / T, G * T / 2])
        self.add(ta, a, v, np.array([0.0, 0.0, -G]))

    def move3(self, ta: float, tb: float, a, b) -> None:
        """Move a ball at rest from 3D point a to b (at rest again): trapezoid speed (a third
        accelerating, a third at 1.5x the mean speed, a third braking), no velocity jump."""
        a = np.asarray(a, float); b = np.asarray(b, float)
        d_vec = b - a
        dist = float(np.linalg.norm(d_vec)); T = tb - ta
        if dist < 1e-6 or T <= 0:
            self.rest(ta, b)
            return
        u = d_vec / dist
        acc = 4.5 * dist / (T * T); vc = 1.5 * dist / T
        self.add(ta, a, np.zeros(3), acc * u)
        self.add(ta + T / 3, a + u * dist / 4, vc * u, np.zeros(3))
        self.add(ta + 2 * T / 3, a + u * 3 * dist / 4, vc * u, -acc * u)
        self.rest(tb, b)

    def smooth_move(self, ta: float, tb: float, a, b) -> None:
        """Carry a ball at rest from a to b (at rest again): trapezoid speed, no acceleration spike."""
        a = np.array([a[0], a[1], BALL_R]); b = np.array([b[0], b[1], BALL_R])
        d_vec = b - a
        dist = float(np.linalg.norm(d_vec)); T = tb - ta
        if dist < 1e-6 or T <= 0:
            self.rest(ta, b)
            return
        u = d_vec / dist
        acc = 4.5 * dist / (T * T); vc = 1.5 * dist / T
        self.add(ta, a, np.zeros(3), acc * u)
        self.add(ta + T / 3, a + u * dist / 4, vc * u, np.zeros(3))
        self.add(ta + 2 * T / 3, a + u * 3 * dist / 4, vc * u, -acc * u)
        self.rest(tb, b)


# --------------------------------------------------------------------------------------------------
# The plan of one half
# --------------------------------------------------------------------------------------------------

@dataclass
class _Touch:
    t: float
    person: int
    side: int  # 0 left shoe, 1 right shoe
    kind: str
    poss: int
    fixed: np.ndarray | None = None  # ball point if the ball lies at a fixed place (restarts)
    point: np.ndarray | None = None  # actual ball point, filled once player paths exist


@dataclass
class _Leg:
    kind: str  # roll, dribble, hop2, out, goal, post, rest, shot_roll
    ta: float
    tb: float
    a: tuple  # ("touch", i) or ("point", xy)
    b: tuple
    extra: dict = field(default_factory=dict)


class _HalfPlanner:
    """Builds the event plan of one half: possessions, touches, ball legs and player appointments."""

    def __init__(self, cfg: GeneratorConfig, half: int, t_lo: float, t_hi: float,
                 stops: list[tuple[float, float]], rng: np.random.Generator):
        self.cfg, self.half, self.t_lo, self.t_hi, self.rng = cfg, half, t_lo, t_hi, rng
        self.stops = [(b, e) for b, e in stops if b < t_hi]
        self.touches: list[_Touch] = []
        self.legs: list[_Leg] = []
        self.appts: list[list[tuple[float, np.ndarray, float]]] = [[] for _ in PEOPLE]
        self.ball_plan: list[tuple[float, np.ndarray]] = [(t_lo, np.array(CENTRE))]
        self.possessions: list[dict] = []
        self.shots: list[dict] = []
        self.events: list[dict] = []  # ball out, goals, bounces, posts (planned)
        self.sign = {t: _attack_sign(cfg, half, t) for t in ("A", "B")}
        self.recv_point = None
        self.recv_kind = None
        self.v_after = np.zeros(3)
        self.shot_len: dict[int, float] = {}  # possession index -> planned shot distance (m)

    # -- helpers ----------------------------------------------------------------------------------
    def stopped_between(self, t0: float, t1: float) -> tuple[float, float] | None:
        for b, e in self.stops:
            if t0 < b < t1 or (t0 < e <= t1 and b <= t0):
                return (b, e)
        return None

    def ball_at(self, t: float) -> np.ndarray:
        ts = [p[0] for p in self.ball_plan]
        i = max(0, int(np.searchsorted(ts, t, side="right")) - 1)
        return self.ball_plan[i][1]

    def home(self, person: int, t: float, ball=None) -> np.ndarray:
        p = PEOPLE[person]
        ball = self.ball_at(t) if ball is None else ball
        if p.team == "-":
            return _inside(ball + np.array([5.0, -3.0]), 2.0)
        s = self.sign[p.team]
        idx = list(TEAM_A if p.team == "A" else TEAM_B).index(p.name)
        hx, hy = _HOME[idx]
        if p.gk:
            return np.array([hx + 0.08 * (ball[0] - CENTRE[0]), s * hy])
        return _inside(np.array([hx + 0.25 * (ball[0] - CENTRE[0]), s * hy + 0.45 * ball[1]]), 2.0)

    def last_appt(self, person: int):
        return self.appts[person][-1] if self.appts[person] else None

    def body_for(self, person: int, ball_xy, side: int) -> np.ndarray:
        """Body position that puts shoe `side` next to a ball at ball_xy."""
        s = self.sign.get(PEOPLE[person].team, 1)
        return np.asarray(ball_xy[:2]) - np.array(_SHOE_OFF[side]) - np.array([0.0, 0.10 * s])

    def add_touch(self, t, person, kind, poss, fixed=None) -> int:
        side = int(self.rng.integers(2))
        self.touches.append(_Touch(t, person, side, kind, poss, fixed))
        return len(self.touches) - 1

    def appoint(self, person, t, ball_xy, side, hold=0.0) -> None:
        self.appts[person].append((t, self.body_for(person, ball_xy, side), hold))
        self.ball_plan.append((t, np.asarray(ball_xy[:2], float)))

    # -- possessions ------------------------------------------------------------------------------
    def clean(self, poss: list) -> list[list]:
        poss = sorted((q[0], q[1], q[2], q[3] if len(q) > 3 else False) for q in poss
                      if self.t_lo <= q[0] < self.t_hi - 0.5)
        out: list[list] = []
        for b, e, p, shot in poss:
            if any(sb < b < se for sb, se in self.stops) or b < self.stops[0][1]:
                continue  # the game is stopped: nobody plays the ball
            for sb, se in self.stops:  # ends before the ball has to leave the field
                if b < sb < e:
                    e = max(b, sb - 0.3)
            e = min(e, self.t_hi - 0.5)
            if out and out[-1][2] == p and b - out[-1][1] < 1.0 and not self.stopped_between(out[-1][1], b):
                out[-1][1] = max(out[-1][1], e)  # the same player again: one possession
                out[-1][3] = out[-1][3] or shot
                continue
            if out:
                prev = out[-1]
                if b - prev[1] < 0.12:
                    prev[1] = max(prev[0], b - 0.12)
                    if b - prev[1] < 0.12:
                        b = prev[1] + 0.12
                        e = max(e, b)
            out.append([b, e, p, shot])
        return out

    def synth_possessions(self) -> list[list]:
        """Plausible possessions for a half without annotations (the 1st): ~0.3 touches per second."""
        rng, out = self.rng, []
        plays = []
        prev_end = self.stops[0][1]
        for b, e in self.stops[1:] + [(self.t_hi, self.t_hi)]:
            if b > prev_end:
                plays.append((prev_end, min(b, self.t_hi)))
            prev_end = e
        last_shot = -100.0
        team = "A"
        for p0, p1 in plays:
            t = p0 + rng.uniform(0.4, 1.5)
            team = "B" if team == "A" else "A"
            who = self._pick(team, exclude=None, outfield=True)
            while t < p1 - 0.8:
                dur = 0.0 if rng.random() < 0.4 else rng.uniform(0.5, 4.5)
                e = min(t + dur, p1 - 0.8)
                closing = t + dur + 1.5 >= p1 - 0.8  # the last touch before the interruption
                shot = (not PEOPLE[who].gk and t - last_shot > 40
                        and rng.random() < (0.25 if closing else 0.06))
                out.append([t, max(t, e), who, shot])
                if shot and closing:  # it goes in: the interruption is the goal
                    last_shot = t
                    break
                if shot:
                    last_shot = t
                    opp = "B" if PEOPLE[who].team == "A" else "A"
                    who = self._gk(opp)
                    t = e + rng.uniform(0.35, 1.0)
                    continue
                gap = float(np.clip(rng.lognormal(math.log(1.3), 0.5), 0.25, 4.0))
                t = e + gap
                same = rng.random() < 0.72
                team_now = PEOPLE[who].team if same else ("B" if PEOPLE[who].team == "A" else "A")
                who = self._pick(team_now, exclude=who, outfield=rng.random() < 0.93)
        return out

    def _pick(self, team: str, exclude, outfield: bool) -> int:
        ids = [i for i, p in enumerate(PEOPLE) if p.team == team and i != exclude and not (outfield and p.gk)]
        return int(self.rng.choice(ids))

    @staticmethod
    def _gk(team: str) -> int:
        return next(i for i, p in enumerate(PEOPLE) if p.team == team and p.gk)

    def mark_shots(self, poss: list[list], shots: list[tuple[float, int]]) -> None:
        for t, who in shots:
            cands = [i for i, q in enumerate(poss) if q[2] == who and q[1] <= t + 0.3 and t - q[1] < 6]
            if cands:
                poss[max(cands, key=lambda i: poss[i][1])][3] = True

    # -- the main loop ----------------------------------------------------------------------------
    def plan(self, poss: list[list]) -> None:
        rng, d_g = self.rng, self.cfg.ground_decel
        k0 = self.stops[0][1]
        # Kick-off formation: everybody at home two seconds before the kick-off (or from the start
        # of the data if that is later), so the goalkeepers reveal the sides.
        t_form = k0 - 2.0
        if t_form < self.t_lo or (poss and t_form > poss[0][0] - 1.05):
            t_form = self.t_lo
        for i, p in enumerate(PEOPLE):
            h = self.home(i, k0, np.array(CENTRE))
            if p.team != "-":
                h = np.array([h[0], h[1] * 0.7 if not p.gk else h[1]])
            self.appts[i].append((t_form, h, 0.0))
        ball_fixed = np.array(CENTRE)  # the ball lies here until the next touch
        restart = True
        v_in = np.zeros(3)
        for k, (b, e, who, shot) in enumerate(poss):
            person = PEOPLE[who]
            team = person.team
            s = self.sign[team]
            nxt = poss[k + 1] if k + 1 < len(poss) else None
            # Receive -----------------------------------------------------------------------------
            if restart:
                ti = self.add_touch(b, who, "restart", k, fixed=ball_fixed.copy())
                self.appoint(who, b, ball_fixed, self.touches[ti].side, hold=1.0)
                if k == 0:  # the kick-off taker already waits at the ball in the formation
                    t_f, _, _ = self.appts[who][0]
                    self.appts[who][0] = (t_f, self.appts[who][-1][1].copy(), 0.0)
                first = ti
            else:
                recv = self.recv_point
                kind = "one_touch" if e <= b else "receive"
                if self.recv_kind:
                    kind = self.recv_kind
                ti = self.add_touch(b, who, kind, k)
                self.appoint(who, b, recv, self.touches[ti].side)
                first = ti
            last = first
            pos = ball_fixed if restart else self.recv_point
            # Dribble -------------------------------------------------------------------------------
            if e > b:
                target = None
                if shot:
                    target = self.shot_spot(k, team)
                in_speed = float(np.linalg.norm(v_in))
                shield = (person.gk or rng.random() < 0.35) and in_speed >= 3.0 and target is None
                if shield:
                    # Trapped ball at rest, the player stands over it; no touches until the kick.
                    self.legs.append(_Leg("rest", b, e, ("touch", first), ("touch", first)))
                    self.appts[who].append((e, self.appts[who][-1][1].copy(), 0.0))
                    ti = self.add_touch(e, who, "kick", k)
                    self.touches[ti].side = self.touches[first].side
                    self.touches[ti].fixed = "same"  # the ball has not moved
                    last = ti
                else:
                    n = max(1, int(round((e - b) / rng.uniform(0.4, 0.75))))
                    times = np.linspace(b, e, n + 1)
                    if target is not None:
                        pts = [pos + (target - pos) * j / n for j in range(n + 1)]
                        sp = np.linalg.norm(target - pos) / (e - b)
                        if sp > 6.5:  # too far to dribble: stop short
                            pts = [pos + (target - pos) * (6.5 / sp) * j / n for j in range(n + 1)]
                    else:
                        heading = np.array([0.0, s])
                        if in_speed > 0.5:  # turn away from the incoming ball so the trap is a kick
                            heading = _rot(_unit(v_in[:2]), rng.choice([-1, 1]) * rng.uniform(1.2, 2.4))
                        heading = _rot(heading, rng.uniform(-0.9, 0.9))
                        speed = rng.uniform(2.0, 5.5)
                        pts = [np.asarray(pos, float)]
                        for j in range(n):
                            step = heading * speed * (times[j + 1] - times[j])
                            nxtp = pts[-1] + step
                            if not np.allclose(_inside(nxtp, 3.0), nxtp):
                                heading = _unit(np.array(CENTRE) - pts[-1] + rng.normal(0, 6, 2))
                                nxtp = _inside(pts[-1] + heading * speed * (times[j + 1] - times[j]), 3.0)
                            heading = _rot(heading, rng.uniform(-0.5, 0.5))
                            pts.append(nxtp)
                    prev = last
                    for j in range(1, n + 1):
                        ti = self.add_touch(float(times[j]), who, "dribble" if j < n else "kick", k)
                        self.appoint(who, float(times[j]), pts[j], self.touches[ti].side)
                        self.legs.append(_Leg("dribble", float(times[j - 1]), float(times[j]),
                                              ("touch", prev), ("touch", ti)))
                        prev = ti
                    last = prev
                    pos = pts[-1]
            kick_pos = np.asarray(pos, float)
            kind_before = self.touches[last].kind
            if shot:
                self.touches[last].kind = "shot"
            self.possessions.append(dict(player=who, first=first, last=last, b=b, e=e))
            # What follows the kick -----------------------------------------------------------------
            self.recv_kind = None
            nb = nxt[0] if nxt else self.t_hi + 5.0
            stop = self.stopped_between(e, nb)
            if shot and nxt is None and stop is None:
                # the last kick of a short game: no receiver, goal or save to plan a shot towards
                shot = False
                self.touches[last].kind = kind_before
            restart = stop is not None
            if shot:
                self.plan_shot(k, last, kick_pos, team, nxt, stop)
                if restart:
                    ball_fixed = self.restart_point
                v_in = self.v_after
                continue
            if restart:
                self.plan_out(last, kick_pos, e, stop, nb)
                ball_fixed = self.restart_point
                v_in = np.zeros(3)
                continue
            if nxt is None:
                q = _inside(kick_pos + _rot(np.array([0.0, s]), rng.uniform(-1, 1)) * 12, 2.0)
                self.legs.append(_Leg("roll", e, self.t_hi + 5, ("touch", last), ("point", q),
                                      dict(decel=3.0)))
                break
            # A pass to the next possessor.
            T = nb - e
            recv = self.pass_target(k + 1, nxt, kick_pos, poss)
            dist = float(np.linalg.norm(recv - kick_pos))
            lofted = dist > 15 and T >= 1.2 and dist / T < 18.0 and rng.random() < 0.35
            if lofted:
                self.legs.append(_Leg("hop2", e, nb, ("touch", last), ("touch", len(self.touches))))
                v_in = np.array([*(0.75 * (recv - kick_pos) / T), 0.0])
            else:
                v0 = dist / T + d_g * T / 2
                if v0 > 28.0:  # the ball cannot be that fast: the receiver comes closer
                    dist = (28.0 - d_g * T / 2) * T
                    recv = _inside(kick_pos + _unit(recv - kick_pos) * dist, 1.5)
                elif dist < d_g * T * T / 2 and math.sqrt(2 * d_g * dist) < 3.0:
                    dist = 9.0 / (2 * d_g)  # a kick of at least 3 m/s: the ball rolls further
                    recv = _inside(kick_pos + _unit(recv - kick_pos) * dist, 1.5)
                self.legs.append(_Leg("roll", e, nb, ("touch", last), ("touch", len(self.touches)),
                                      dict(decel=d_g)))
                dist = float(np.linalg.norm(recv - kick_pos))
                v_end = max(dist / T - d_g * T / 2, 0.0)
                v_in = np.array([*(_unit(recv - kick_pos) * v_end), 0.0])
            self.recv_point = recv

    def pass_target(self, kn: int, nxt, kick_pos, poss) -> np.ndarray:
        rng = self.rng
        who = nxt[2]
        if nxt[3]:  # the receiver will shoot: pass him into a shooting position
            team = PEOPLE[who].team
            after = poss[kn + 1] if kn + 1 < len(poss) else None
            nb = after[0] if after else nxt[1] + 10
            T = nb - nxt[1]
            v = rng.uniform(17.0, 26.0)
            if self.stopped_between(nxt[1], nb) or T > 1.2:
                L = rng.uniform(8.0, 20.0)
            else:
                L = float(np.clip(v * T + rng.uniform(0.6, 2.0), 5.0, 22.0))
            self.shot_len[kn] = L
            spot = self.shot_spot(kn, team)
            if nxt[1] > nxt[0]:  # he dribbles a few metres towards goal first
                g = _goal(self.sign[team])
                toward = _unit(np.array([0.5 * (g["x_lo"] + g["x_hi"]), g["y"]]) - spot)
                spot = spot - toward * min((nxt[1] - nxt[0]) * rng.uniform(1.5, 3.5), 6.0)
            return _inside(spot, 1.5)
        la = self.last_appt(who)
        want = self.home(who, nxt[0], ball=kick_pos) + rng.normal(0, 4.0, 2)
        if la is not None:
            reach = 5.5 * max(nxt[0] - la[0], 0.0) * 0.8
            d = want - la[1]
            n = float(np.linalg.norm(d))
            if n > reach:
                want = la[1] + d * (reach / n)
        if np.linalg.norm(want - kick_pos) < 3.0:
            want = kick_pos + _rot(np.array([1.0, 0.0]), rng.uniform(0, 2 * math.pi)) * 3.5
        return _inside(want, 1.5)

    def shot_spot(self, k: int, team: str) -> np.ndarray:
        """Where a shooter stands when he shoots: the planned distance from the goal, ±35° wide."""
        s = self.sign[team]
        g = _goal(s)
        gx = 0.5 * (g["x_lo"] + g["x_hi"])
        if k not in self.shot_len:
            self.shot_len[k] = self.rng.uniform(8.0, 20.0)
        ang = ((k * 0.6180339887) % 1.0 - 0.5) * 1.2  # fixed per possession: dribble and pass agree
        dist = self.shot_len[k]
        spot = np.array([gx, g["y"]]) + dist * np.array([math.sin(ang), -s * math.cos(ang)])
        return _inside(spot, 1.5)

    def plan_shot(self, k, last, kick_pos, team, nxt, stop) -> None:
        rng, d_g = self.rng, self.cfg.ground_decel
        s = self.sign[team]
        g = _goal(s)
        e = self.touches[last].t
        aim = np.array([rng.uniform(g["x_lo"] + 0.6, g["x_hi"] - 0.6), g["y"]])
        L = float(np.linalg.norm(aim - kick_pos))
        v_shot = max(rng.uniform(17.0, 26.0), L / 1.25)
        info = dict(shooter=self.touches[last].person, touch=last, sign=s)
        self.v_after = np.zeros(3)
        if stop is not None:  # the shot goes in: kick-off at the centre afterwards
            v0 = max(v_shot, L / max(stop[0] - e - 0.05, 0.2) + d_g)
            self.legs.append(_Leg("goal", e, stop[0], ("touch", last), ("point", aim), dict(v0=v0)))
            info.update(outcome="goal")
            self.shots.append(info)
            self.carry(stop, np.array(CENTRE), goal_aim=aim, v0=v0, kick_pos=kick_pos, e=e)
            return
        nb = nxt[0]
        T = max(nb - e, 0.05)
        receiver = nxt[2]
        opp_gk = PEOPLE[receiver].gk and PEOPLE[receiver].team != team
        d_stop = rng.uniform(0.6, 2.0) if opp_gk else rng.uniform(1.5, 5.0)
        v_need = (L - d_stop) / T + d_g * T / 2
        if v_need > 34.0:  # no shot is faster: the keeper or a defender meets it further out
            v_need = 34.0
            d_stop = L - (v_need * T - d_g * T * T / 2)
        if L / 1.25 <= v_need:
            point = kick_pos + _unit(aim - kick_pos) * (L - d_stop)
            self.legs.append(_Leg("roll", e, nb, ("touch", last), ("touch", len(self.touches)),
                                  dict(decel=d_g)))
            self.recv_point = point
            self.recv_kind = "save" if opp_gk else "block"
            info.update(outcome=self.recv_kind)
            self.v_after = np.array([*(_unit(aim - kick_pos) * (v_need - d_g * T)), 0.0])
        else:  # too slow a reception for a direct block: the ball comes back off a post
            post_x = g["x_lo"] + 0.13 if aim[0] < 0.5 * (g["x_lo"] + g["x_hi"]) else g["x_hi"] - 0.13
            post = np.array([post_x, g["y"] - s * 0.02])
            Lp = float(np.linalg.norm(post - kick_pos))
            v0 = max(v_shot, Lp / 1.2)
            disc = v0 * v0 - 2 * d_g * Lp
            t_post = e + (v0 - math.sqrt(max(disc, 0.0))) / d_g
            if t_post > nb - 0.5 and nb - 0.5 - e > 0.3:  # hit harder so the rebound has time
                v0 = Lp / (nb - 0.5 - e) + d_g * (nb - 0.5 - e) / 2
                t_post = nb - 0.5
            reb = float(np.clip(rng.uniform(6.0, 14.0) * (nb - t_post), 2.0, 12.0))
            back = _inside(post + _rot(np.array([0.0, -s]), rng.uniform(-0.7, 0.7)) * reb, 1.5)
            self.legs.append(_Leg("shot_roll", e, t_post, ("touch", last), ("point", post),
                                  dict(v0=v0)))
            self.legs.append(_Leg("roll", t_post, nb, ("point", post), ("touch", len(self.touches)),
                                  dict(decel=d_g, bounce="post")))
            self.events.append(dict(kind="post", t=t_post, point=post.tolist()))
            self.recv_point = back
            info.update(outcome="post")
        self.shots.append(info)

    def plan_out(self, last, kick_pos, e, stop, nb) -> None:
        """The last touch before an interruption plays the ball out; it is carried back for the
        restart at the nearest point inside the field."""
        rng = self.rng
        x, y = kick_pos
        cands = [(x - FIELD[0], np.array([-1.0, 0.0])), (FIELD[1] - x, np.array([1.0, 0.0])),
                 (y - FIELD[2] + 6, np.array([0.0, -1.0])), (FIELD[3] - y + 6, np.array([0.0, 1.0]))]
        _, n = min(cands, key=lambda c: c[0])
        exit_pt = np.array(kick_pos, float)
        if n[0] != 0:
            exit_pt[0] = FIELD[0] if n[0] < 0 else FIELD[1]
            exit_pt[1] += rng.normal(0, 3)
        else:
            exit_pt[1] = FIELD[2] if n[1] < 0 else FIELD[3]
            exit_pt[0] += rng.normal(0, 3)
            if 21.5 < exit_pt[0] < 31.0:  # wide of the goal: not a goal
                exit_pt[0] = 19.0 if exit_pt[0] < CENTRE[0] else 33.5
        exit_pt[1] = float(np.clip(exit_pt[1], FIELD[2], FIELD[3]))
        exit_pt[0] = float(np.clip(exit_pt[0], FIELD[0], FIELD[1]))
        rest = exit_pt + n * rng.uniform(1.5, 3.5)
        self.legs.append(_Leg("out", e, stop[0], ("touch", last), ("point", rest),
                              dict(exit=exit_pt, tau=max(stop[0] - e - rng.uniform(0.0, 0.4), 0.3))))
        self.events.append(dict(kind="out", t=stop[0], point=rest.tolist()))
        self.carry(stop, _inside(exit_pt - n * 0.5, 0.5), rest=rest, e=e, kick_pos=kick_pos)

    def carry(self, stop, q, rest=None, goal_aim=None, v0=None, kick_pos=None, e=None) -> None:
        self.restart_point = np.asarray(q, float)
        self.pending_carry = dict(stop=stop, q=self.restart_point)
        self.legs.append(_Leg("carry", stop[0], stop[1], ("point", rest if rest is not None else q),
                              ("point", self.restart_point)))
        self.ball_plan.append((stop[1], self.restart_point))


# --------------------------------------------------------------------------------------------------
# Player paths: appointments joined by free running at all intensity classes
# --------------------------------------------------------------------------------------------------

def _player_waypoints(planner: _HalfPlanner, person: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, int]:
    p = PEOPLE[person]
    appts = sorted(planner.appts[person], key=lambda a: a[0])
    t_lo, t_hi = planner.t_lo - 2.0, planner.t_hi + 2.0
    start = planner.home(person, t_lo) + rng.normal(0, 3, 2)
    ts: list[float] = [t_lo]
    ps: list[np.ndarray] = [_inside(start, 1.0)]
    fast = 0
    names = list(_CLASS_P)
    probs = np.array([_CLASS_P[n] for n in names])
    if p.gk:
        probs = np.array([0.35, 0.5, 0.06, 0.04, 0.03, 0.02])
    elif p.team == "-":
        probs = np.array([0.15, 0.55, 0.12, 0.1, 0.06, 0.02])
    probs = probs / probs.sum()
    for ta_next, target, hold in appts + [(t_hi, None, 0.0)]:
        if ta_next <= ts[-1]:
            if target is not None:
                ps[-1] = target  # two appointments at one instant: keep the later
            continue
        goal_t = ta_next - hold
        while True:
            t, pos = ts[-1], ps[-1]
            if target is None:
                remaining, dist = goal_t - t, 0.0
            else:
                remaining, dist = goal_t - t, float(np.linalg.norm(target - pos))
            if remaining <= 0.35:
                break
            if target is not None and dist / remaining > 4.5:
                break  # no time to wander: run straight there
            cls = names[int(rng.choice(len(names), p=probs))]
            lo, hi = _CLASS_SPEEDS[cls]
            dur = rng.uniform(0.3, 0.9) if rng.random() < 0.15 else (
                rng.uniform(1.1, 2.6) if cls in ("high", "sprint") else rng.uniform(1.1, 4.5))
            dur = min(dur, remaining)
            speed = rng.uniform(lo, hi)
            aim = planner.home(person, t + dur) + rng.normal(0, 2.5 if p.gk else 6.0, 2)
            if p.gk:
                aim = np.array([np.clip(aim[0], 24.7, 27.8), aim[1]])
            heading = _rot(_unit(aim - pos), rng.normal(0, 0.5))
            new = pos + heading * speed * dur
            if not np.allclose(_inside(new, 1.0), new):
                heading = _unit(aim - pos)
                new = _inside(pos + heading * speed * dur, 1.0)
            if target is not None:
                left = goal_t - (t + dur)
                if left <= 0.2 or np.linalg.norm(target - new) / left > 5.0:
                    break
            ts.append(t + dur)
            ps.append(new)
        if target is None:
            continue
        t = ts[-1]
        if goal_t - t > 1e-3:
            if np.linalg.norm(target - ps[-1]) / (goal_t - t) > 9.0:
                fast += 1
            ts.append(goal_t); ps.append(target)
        if hold > 0:
            ts.append(ta_next); ps.append(target)
        elif goal_t <= t:
            ps[-1] = target
    return np.array(ts), np.array(ps), fast


# --------------------------------------------------------------------------------------------------
# Sampling: raw paths -> smoothed positions -> finite differences
# --------------------------------------------------------------------------------------------------

def _mix(*keys) -> np.ndarray:
    """splitmix64 of the keys (uint64 arrays / ints), combined: a counter-based hash."""
    h = np.uint64(0x9E3779B97F4A7C15)
    out = None
    with np.errstate(over="ignore"):
        for k in keys:
            z = (np.asarray(k).astype(np.uint64) + h) if out is None else (out ^ np.asarray(k).astype(np.uint64)) + h
            z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            out = z ^ (z >> np.uint64(31))
    return out


def _uniform(*keys) -> np.ndarray:
    return (_mix(*keys) >> np.uint64(11)).astype(np.float64) / float(1 << 53)


def _gauss(*keys) -> np.ndarray:
    u1 = np.maximum(_uniform(*keys, 1), 1e-300)
    u2 = _uniform(*keys, 2)
    return np.sqrt(-2.0 * np.log(u1)) * np.cos(2 * math.pi * u2)


def _kernel(sigma: float, dt: float) -> np.ndarray:
    m = int(math.ceil(4 * sigma / dt))
    x = np.arange(-m, m + 1) * dt
    k = np.exp(-0.5 * (x / sigma) ** 2)
    return k / k.sum()


class _Half:
    """Everything needed to write one half: sensors, paths, the ball segments and the truth."""

    def __init__(self, cfg: GeneratorConfig, half: int, data_start_ts: int, data_end_ts: int) -> None:
        self.cfg, self.half = cfg, half
        self.h0 = HALF_STARTS[half]
        self.ts_lo, self.ts_hi = data_start_ts, data_end_ts
        self.t_lo = (data_start_ts - self.h0) / PS_PER_S
        self.t_hi = (data_end_ts - self.h0) / PS_PER_S
        rng = np.random.default_rng([cfg.seed, half, 1])
        ref = Path(cfg.referee_dir)
        half_len = (HALF_ENDS[half] - self.h0) / PS_PER_S
        name = "1st Half" if half == 1 else "2nd Half"
        stops = _stops(ref / "Game Interruption" / f"{name}.csv", half_len)
        self.planner = pl = _HalfPlanner(cfg, half, max(self.t_lo, -200.0), self.t_hi, stops, rng)
        if half == 2:
            poss = pl.clean(_annotated_possessions(ref / "Ball Possession" / name))
            pl.mark_shots(poss, [s for s in _annotated_shots(ref / "Shot on Goal" / f"{name}.csv")
                                 if s[0] < self.t_hi - 1.0])
        else:
            poss = pl.clean(pl.synth_possessions())
        self.poss = poss
        pl.plan(poss)
        prng = np.random.default_rng([cfg.seed, half, 2])
        self.paths = []
        self.fast_legs = 0
        for i in range(len(PEOPLE)):
            t, p, fast = _player_waypoints(pl, i, prng)
            self.paths.append((t, p[:, 0].copy(), p[:, 1].copy()))
            self.fast_legs += fast
        self.kb = _kernel(cfg.body_sigma_s, BODY_PERIOD_PS / PS_PER_S)
        self.kball = _kernel(cfg.ball_sigma_s, BALL_PERIOD_PS / PS_PER_S)
        self._make_sensors(np.random.default_rng([cfg.seed, half, 3]))
        self._build_ball(np.random.default_rng([cfg.seed, half, 4]))
        self.spares = _SpareBalls(self, np.random.default_rng([cfg.seed, half, 5])) \
            if cfg.spare_balls else None
        if self.spares is not None:
            self._spare_silences(np.random.default_rng([cfg.seed, half, 6]))

    # -- sensors ----------------------------------------------------------------------------------
    def _make_sensors(self, rng) -> None:
        self.sensors: dict[int, _Sensor] = {}
        for i, p in enumerate(PEOPLE):
            parts = [(sid, _SHOE_OFF[j], 0.07, 0.004) for j, sid in enumerate(p.shoes)]
            if p.hands:
                parts += [(sid, _HAND_OFF[j], 1.05, 0.012) for j, sid in enumerate(p.hands)]
            for sid, off, z0, zamp in parts:
                self._add_sensor(sid, i, off, z0, zamp, BODY_PERIOD_PS, rng)
        balls = (GAME_BALL[self.half],) + SPARE_BALLS[self.half]
        for sid in balls:
            self._add_sensor(sid, -1, (0.0, 0.0), 0.0, 0.0, BALL_PERIOD_PS, rng)
        # Spare balls drop out: off-gaps scaled so that exactly (1 - duty) of their time is silent.
        for sid in SPARE_BALLS[self.half]:
            s = self.sensors[sid]
            # only the ball-visible span counts: silence inside the ball-less stretch is wasted
            span = (min(self.ts_hi, BALL_MISSING_FROM) if self.half == 1 else self.ts_hi) - self.ts_lo
            n = max(1, int(span / PS_PER_S / 75))
            starts = np.sort(rng.uniform(0, 1, n))
            gaps = rng.exponential(1.0, n)
            gaps = gaps / gaps.sum() * (1 - self.cfg.spare_ball_duty) * span
            starts = starts * (span - gaps.sum())
            off, acc = [], 0.0
            for st, g in zip(starts, gaps):
                a = self.ts_lo + int(st + acc)
                off.append((a, a + int(g)))
                acc += g
            s.off_intervals = off

    def _spare_silences(self, rng) -> None:
        """With moving spares every ball is a spare at some time: each ball gets duty-cycle
        silences over the half (as ``_make_sensors`` gives the spares), removed wherever the ball
        is coming in or in play (``_SpareBalls.live``), so only spares are ever silent."""
        span = (min(self.ts_hi, BALL_MISSING_FROM) if self.half == 1 else self.ts_hi) - self.ts_lo
        for sid in (GAME_BALL[self.half],) + SPARE_BALLS[self.half]:
            n = max(1, int(span / PS_PER_S / 75))
            starts = np.sort(rng.uniform(0, 1, n))
            gaps = rng.exponential(1.0, n)
            gaps = gaps / gaps.sum() * (1 - self.cfg.spare_ball_duty) * span
            starts = starts * (span - gaps.sum())
            off, acc = [], 0.0
            for st, g in zip(starts, gaps):
                a = self.ts_lo + int(st + acc)
                off.append((a, a + int(g)))
                acc += g
            for lo, hi in self.spares.live[sid]:  # subtract the live spans
                cut = []
                for a, b in off:
                    if b <= lo or a >= hi:
                        cut.append((a, b))
                        continue
                    if a < lo:
                        cut.append((a, lo))
                    if b > hi:
                        cut.append((hi, b))
                off = cut
            self.sensors[sid].off_intervals = [(a, b) for a, b in off if b > a]

    def _add_sensor(self, sid, person, off, z0, zamp, period, rng) -> None:
        phase = int(rng.integers(0, period))
        if sid == 98 and self.ts_lo == FIRST_ROW_TS:
            phase = 0  # the real file's first row is sensor 98 at FIRST_ROW_TS
        base = self.ts_lo + phase
        k_end = max(0, -(-(self.ts_hi - base) // period))
        self.sensors[sid] = _Sensor(sid, person, off, z0, zamp, float(rng.uniform(0.15, 0.35)),
                                    float(rng.uniform(0, 2 * math.pi)), period, base,
                                    (base - self.h0) / PS_PER_S, period / PS_PER_S, int(k_end))

    # -- raw and smoothed paths -------------------------------------------------------------------
    def _raw(self, s: _Sensor, t: np.ndarray) -> np.ndarray:
        if s.person >= 0:
            wt, wx, wy = self.paths[s.person]
            x = np.interp(t, wt, wx) + s.off[0]
            y = np.interp(t, wt, wy) + s.off[1]
            z = s.z0 + s.zamp * np.sin(2 * math.pi * s.zfreq * t + s.zphase)
            return np.stack([x, y, z], axis=1)
        if self.spares is not None:
            t0, p0, v0, acc = self.spares.paths[s.sid]
            i = np.clip(np.searchsorted(t0, t, side="right") - 1, 0, len(t0) - 1)
            tau = (t - t0[i])[:, None]
            return p0[i] + v0[i] * tau + 0.5 * acc[i] * tau * tau
        if s.sid != GAME_BALL[self.half]:
            rx, ry = SPARE_REST[s.sid]
            return np.tile(np.array([rx, ry, BALL_R]), (len(t), 1))
        t0, p0, v0, acc = self.ball
        i = np.clip(np.searchsorted(t0, t, side="right") - 1, 0, len(t0) - 1)
        tau = (t - t0[i])[:, None]
        return p0[i] + v0[i] * tau + 0.5 * acc[i] * tau * tau

    def samples(self, sid: int, k0: int, k1: int):
        """Positions, velocities and accelerations (SI units) of samples k0 <= k < k1."""
        s = self.sensors[sid]
        ker = self.kb if s.person >= 0 else self.kball
        m = len(ker) // 2
        k = np.arange(k0 - m - 1, k1 + m + 1)
        raw = self._raw(s, s.t_base + k * s.dt)
        sm = np.empty((k1 - k0 + 2, 3))
        for c in range(3):
            sm[:, c] = np.convolve(raw[:, c], ker, mode="valid")
        pos = sm[1:-1]
        vel = (sm[2:] - sm[:-2]) / (2 * s.dt)
        acc = (sm[2:] - 2 * sm[1:-1] + sm[:-2]) / (s.dt * s.dt)
        ts = s.base_ts + np.arange(k0, k1, dtype=np.int64) * s.period
        return ts, pos, vel, acc

    def observed(self, sid: int, k0: int, k1: int):
        """What the sensor reports for samples k0 <= k < k1: ``(ts, pos, vel, acc, kept)`` with
        the configured noise, jitter and drop-outs (a pure function of seed, sensor, k)."""
        ts, pos, vel, acc = self.samples(sid, k0, k1)
        kept = np.ones(len(ts), bool)
        cfg = self.cfg
        if not cfg.noise or k1 <= k0:
            return ts, pos, vel, acc, kept
        s = self.sensors[sid]
        k = np.arange(k0, k1, dtype=np.int64) + (1 << 40)
        seed, half = cfg.seed + 1, self.half
        ball = s.person < 0
        sig = (cfg.ball_pos_sigma_mm if ball else cfg.body_pos_sigma_mm) / 1000.0
        pos = pos + sig * np.stack([_gauss(seed, half, sid, k, c) for c in (11, 12, 13)], axis=1)
        vel = vel * (1 + cfg.speed_sigma_rel * _gauss(seed, half, sid, k, 21))[:, None]
        acc = acc * np.maximum(1 + cfg.acc_sigma_rel * _gauss(seed, half, sid, k, 31), 0)[:, None]
        L = cfg.ball_dropout_samples if ball else cfg.body_dropout_samples
        p = cfg.ball_dropout if ball else cfg.body_dropout
        kept = _uniform(seed, half, sid, k // L, 51) >= p
        # the real file's first row (sensor 98 at FIRST_ROW_TS) stays exactly as it is
        first = (ts == FIRST_ROW_TS) if sid == 98 else np.zeros(len(ts), bool)
        ts = ts + np.where(first, 0, (_uniform(seed, half, sid, k, 41) * cfg.ts_jitter_ps)
                           .astype(np.int64))
        ts = np.minimum(ts, self.ts_hi - 1)  # the half's data end stays as planned
        kept |= first
        return ts, pos, vel, acc, kept

    def shoe_at(self, person: int, side: int, t: float) -> np.ndarray:
        """Smoothed shoe position at an arbitrary time (used to place the ball at touches)."""
        s = self.sensors[PEOPLE[person].shoes[side]]
        m = len(self.kb) // 2
        tt = t + np.arange(-m, m + 1) * s.dt
        return self.kb @ self._raw(s, tt)

    # -- the ball in play -------------------------------------------------------------------------
    def _build_ball(self, rng) -> None:
        pl, cfg = self.planner, self.cfg
        for tc in pl.touches:
            if tc.fixed is None:
                p = self.shoe_at(tc.person, tc.side, tc.t)
                sgn = pl.sign.get(PEOPLE[tc.person].team, 1)
                tc.point = np.array([p[0], p[1] + 0.10 * sgn])
            elif isinstance(tc.fixed, str):
                tc.point = None  # resolved below: the ball lies where the previous touch left it
            else:
                tc.point = np.asarray(tc.fixed, float)[:2]
        for i, tc in enumerate(pl.touches):
            if tc.point is None:
                tc.point = pl.touches[i - 1].point
        bp = _BallPath(pl.t_lo - 10.0, CENTRE)
        self.carries: list[dict] = []  # the ball carried back for a restart (spare-ball swaps)
        self.bounces: list[dict] = []
        self.goal_crossings: list[dict] = []

        def pt(ref):
            return pl.touches[ref[1]].point if ref[0] == "touch" else np.asarray(ref[1], float)[:2]

        for leg in pl.legs:
            a, b = pt(leg.a), pt(leg.b)
            if leg.kind == "rest":
                bp.rest(leg.ta, np.array([a[0], a[1], BALL_R]))
            elif leg.kind == "dribble":
                D = float(np.linalg.norm(b - a)); T = leg.tb - leg.ta
                decel = float(np.clip(2 * (D / T - 0.3) / T, 0.0, 8.0)) if D / T > 0.3 else 0.0
                bp.roll(leg.ta, leg.tb, a, b, decel)
            elif leg.kind == "roll":
                if leg.extra.get("bounce"):
                    self.bounces.append(dict(kind=leg.extra["bounce"], t=leg.ta, point=[*a, BALL_R]))
                bp.roll(leg.ta, leg.tb, a, b, leg.extra["decel"])
            elif leg.kind == "hop2":
                T = leg.tb - leg.ta
                mid = a + 0.7 * (b - a)
                t_b = leg.ta + 0.6 * T
                if self._near_player(mid, t_b) < 2.0:  # a bounce next to a player would be a hit
                    bp.roll(leg.ta, leg.tb, a, b, cfg.ground_decel)
                else:
                    bp.hop(leg.ta, t_b, a, mid)
                    bp.hop(t_b, leg.tb, mid, b)
                    self.bounces.append(dict(kind="ground", t=t_b, point=[*mid, BALL_R]))
            elif leg.kind == "shot_roll":
                u = _unit(b - a)
                v0 = leg.extra["v0"]
                bp.add(leg.ta, [*a, BALL_R], [*(u * v0), 0.0], [*(-u * cfg.ground_decel), 0.0])
                # the post leg that follows starts at the post itself
                p_post, _ = bp.at(leg.tb)
                pl_post = np.array(p_post[:2])
                leg_next = pl.legs[pl.legs.index(leg) + 1]
                leg_next.a = ("point", pl_post)
            elif leg.kind == "goal":
                u = _unit(b - a); v0 = leg.extra["v0"]; d = cfg.ground_decel
                L = float(np.linalg.norm(b - a))
                t_x = (v0 - math.sqrt(max(v0 * v0 - 2 * d * L, 0.0))) / d
                vx = max(v0 - d * t_x, 1.0)
                a_net = min(40.0, vx * vx / (2 * 2.0))  # a soft net: below the 55 m/s² hit level
                bp.add(leg.ta, [*a, BALL_R], [*(u * v0), 0.0], [*(-u * d), 0.0])
                bp.add(leg.ta + t_x, [*b, BALL_R], [*(u * vx), 0.0], [*(-u * a_net), 0.0])
                stop_pt = b + u * vx * vx / (2 * a_net)
                bp.rest(leg.ta + t_x + vx / a_net, [*stop_pt, BALL_R])
                self.goal_crossings.append(dict(t=leg.ta + t_x, point=[*b, BALL_R]))
                nxt = pl.legs[pl.legs.index(leg) + 1]
                nxt.a = ("point", stop_pt)
                nxt.ta = max(nxt.ta, leg.ta + t_x + vx / a_net + 0.3)
            elif leg.kind == "out":
                self._roll_out(bp, leg, a, b, rng)
            elif leg.kind == "carry":
                nxt_touch = next((tc for tc in pl.touches if tc.t >= leg.tb - 1e-9), None)
                t_end = min(leg.tb + 0.5, (nxt_touch.t if nxt_touch else leg.tb + 1) - 0.5)
                rest_from = bp.t0[-1]
                dist = float(np.linalg.norm(b - a))
                t_need = max(dist / 3.0, 1.0)
                t_start = max(rest_from + 0.3, t_end - t_need, leg.ta)
                if t_end - t_start < 0.5:
                    t_start = max(rest_from + 0.05, t_end - 0.5)
                bp.smooth_move(t_start, t_end, a, b)
                prev_kind = pl.legs[pl.legs.index(leg) - 1].kind
                self.carries.append(dict(t_start=t_start, t_end=t_end, rest_from=rest_from,
                                         a=np.asarray(a, float), b=np.asarray(b, float),
                                         stop=leg.extra.get("stop", (leg.ta, leg.tb)),
                                         kind="goal" if prev_kind == "goal" else "out",
                                         next_touch=nxt_touch.t if nxt_touch else None))
        t0, p0, v0, acc = bp.freeze()
        self.ball = (t0, p0, v0, acc)

    def _roll_out(self, bp: _BallPath, leg: _Leg, a, rest, rng) -> None:
        """Roll from a to rest across the boundary, crossing it about tau seconds after the kick."""
        tau = leg.extra["tau"]
        L_O = float(np.linalg.norm(rest - a))
        u = _unit(rest - a)
        # distance to the boundary along u
        L_X = L_O
        for axis, lo, hi in ((0, FIELD[0], FIELD[1]), (1, FIELD[2], FIELD[3])):
            if abs(u[axis]) > 1e-9:
                bound = hi if u[axis] > 0 else lo
                L_X = min(L_X, max((bound - a[axis]) / u[axis], 0.0))
        ratio = min(L_X / max(L_O, 1e-6), 0.999)
        v0 = (2 * L_O / tau) * (1 - math.sqrt(1 - ratio))
        v0 = float(np.clip(v0, 4.0, 25.0))
        d = v0 * v0 / (2 * L_O)
        bp.add(leg.ta, [*a, BALL_R], [*(u * v0), 0.0], [*(-u * d), 0.0])
        bp.rest(leg.ta + v0 / d, [*rest, BALL_R])

    def _near_player(self, xy, t) -> float:
        best = 1e9
        for i in range(len(PEOPLE)):
            for side in (0, 1):
                p = self.shoe_at(i, side, t)
                best = min(best, float(np.hypot(p[0] - xy[0], p[1] - xy[1])))
        return best


# --------------------------------------------------------------------------------------------------
# Spare balls: moved by ball boys outside the field, swapped with the ball in play at restarts
# --------------------------------------------------------------------------------------------------

_RING_OFF = 2.5  # m outside the field: ball boys walk on this rectangle
_RING = (FIELD[0] - _RING_OFF, FIELD[1] + _RING_OFF, FIELD[2] - _RING_OFF, FIELD[3] + _RING_OFF)
_RING_CORNERS = [np.array([_RING[0], _RING[2]]), np.array([_RING[1], _RING[2]]),
                 np.array([_RING[1], _RING[3]]), np.array([_RING[0], _RING[3]])]
_RING_W, _RING_H = _RING[1] - _RING[0], _RING[3] - _RING[2]
_RING_LEN = 2 * (_RING_W + _RING_H)
_CARRY_Z = 1.0  # a carried ball is held at about hip height (m)
_LIFT_S = 0.6   # picking a ball up / putting it down (s)
_HAND_IN_MAX_M = 6.0  # farther restarts (the kick-off after a goal) are rolled in


def _outside_side(p) -> int:
    """The side of the field a point outside lies beyond: 0 bottom (-y), 1 right (+x), 2 top
    (+y), 3 left (-x); the farthest one at a corner."""
    ex = [FIELD[2] - p[1], p[0] - FIELD[1], p[1] - FIELD[3], FIELD[0] - p[0]]
    return int(np.argmax(ex))


def _ring_point(p, side: int) -> np.ndarray:
    """p moved perpendicular to `side` onto the ring (both stay beyond that side)."""
    if side in (0, 2):
        return np.array([float(np.clip(p[0], _RING[0], _RING[1])), _RING[2] if side == 0 else _RING[3]])
    return np.array([_RING[1] if side == 1 else _RING[0], float(np.clip(p[1], _RING[2], _RING[3]))])


def _ring_s(q, side: int) -> float:
    if side == 0:
        return q[0] - _RING[0]
    if side == 1:
        return _RING_W + q[1] - _RING[2]
    if side == 2:
        return _RING_W + _RING_H + _RING[1] - q[0]
    return 2 * _RING_W + _RING_H + _RING[3] - q[1]


def _ring_route(p, q) -> list[np.ndarray]:
    """Walk from outside point p to outside point q without entering the field: straight out to
    the ring, along it the shorter way round (through its corners), straight to q. Every leg
    stays beyond one side of the field."""
    sp, sq = _outside_side(p), _outside_side(q)
    pp, qq = _ring_point(p, sp), _ring_point(q, sq)
    a, b = _ring_s(pp, sp), _ring_s(qq, sq)
    fwd = (b - a) % _RING_LEN
    pts = [np.asarray(p, float)[:2], pp]
    corner_s = [0.0, _RING_W, _RING_W + _RING_H, 2 * _RING_W + _RING_H]
    if fwd <= _RING_LEN / 2:
        cs = sorted(((c - a) % _RING_LEN, i) for i, c in enumerate(corner_s))
        pts += [_RING_CORNERS[i] for d, i in cs if 0 < d < fwd]
    else:
        cs = sorted(((a - c) % _RING_LEN, i) for i, c in enumerate(corner_s))
        pts += [_RING_CORNERS[i] for d, i in cs if 0 < d < _RING_LEN - fwd]
    pts += [qq, np.asarray(q, float)[:2]]
    out = [pts[0]]
    for x in pts[1:]:
        if np.linalg.norm(x - out[-1]) > 0.01:
            out.append(x)
    return out


def _route_len(pts) -> float:
    return float(sum(np.linalg.norm(b - a) for a, b in zip(pts, pts[1:])))


def _entry_spot(b) -> np.ndarray:
    """Where a ball boy hands a ball in for a restart at b: the ring point beyond b's nearest side."""
    d = [b[1] - FIELD[2], FIELD[1] - b[0], FIELD[3] - b[1], b[0] - FIELD[0]]
    return _ring_point(b, int(np.argmin(d)))


class _SpareBalls:
    """The raw path of every ball sensor of one half when spare balls move and swap.

    The ball in play follows the planned play path (``_Half.ball``). At every restart after the
    ball left the field (``_Half.carries``) the ball that went out stays outside and becomes a
    spare; the spare whose walk round the field to the restart is shortest (among those free in
    time to walk there at ``spare_walk_speed``) is carried to the boundary next to the restart
    point and handed in (or rolled in from there), and follows the play path from then on. Spares
    between swaps rest at their home spot (``SPARE_REST``) and make excursions along the outside
    of their touch line (carried and brought back; thrown and brought back).

    Attributes:
        paths: sid -> frozen raw path (t0, p0, v0, acc) as ``_BallPath.freeze``.
        owners: the ball in play per stretch: dicts ``sid, own_from, own_to, entry_from, kind``
            (seconds since the half start; ``own_to`` None for the last one).
        live: sid -> [(ts_a, ts_b)] spans in which the ball transmits without duty silences.
        swaps, excursions, max_carry_speed: what was planned (reported in the truth file).
    """

    def __init__(self, h: "_Half", rng: np.random.Generator) -> None:
        self.h, self.rng, cfg = h, rng, h.cfg
        pl = h.planner
        self.walk = cfg.spare_walk_speed
        balls = (GAME_BALL[h.half],) + SPARE_BALLS[h.half]
        t_first = pl.t_lo - 10.0
        self.ops: dict[int, list] = {sid: [] for sid in balls}
        home = {sid: np.array([*SPARE_REST[sid], BALL_R]) for sid in balls}
        self.home = home  # where each ball lies while a spare (it changes: nearest free spot)
        idle = {sid: t_first for sid in SPARE_BALLS[h.half]}  # free at home from then on
        gaps: dict[int, list] = {sid: [] for sid in balls}  # (from, to) at home, free
        cur, own_from, entry_from, cur_kind = GAME_BALL[h.half], t_first, t_first, None
        self.owners: list[dict] = []
        self.swaps: list[dict] = []
        self.max_carry_speed = 0.0
        touches = sorted(tc.t for tc in pl.touches)
        for c in h.carries:
            if c["t_start"] >= pl.t_hi:
                break  # after the end of the data (a short game)
            plan = self._plan_entry(c, idle, touches)
            if plan is None:
                self.swaps.append(dict(t=c["t_start"], out_sid=cur, in_sid=None, kind=c["kind"],
                                       skipped="no spare could reach the restart in time"))
                continue
            new, route, t_dep, v, t_in0, t_join, mode, w = plan
            # the ball that went out: play path until the carry starts, then it lies there
            self.ops[cur].append((own_from, "play", (own_from, c["t_start"])))
            self.owners.append(dict(sid=cur, own_from=own_from, own_to=c["t_start"],
                                    entry_from=entry_from, came_in_after=cur_kind))
            a3 = np.array([*c["a"][:2], BALL_R])
            self.ops[cur].append((c["t_start"], "rest", (c["t_start"], a3)))
            t_pick = c["t_start"] + float(rng.uniform(2.0, 8.0))
            # the new ball: from its spot (free since idle[new]) to the entry spot, then in
            gaps[new].append((idle[new], t_dep - _LIFT_S))
            # the ball that went out is carried to the nearest free spot
            taken = [tuple(np.round(home[b][:2], 3)) for b in balls if b not in (cur, new)]
            spots = [np.array(q) for q in SPARE_SPOTS if tuple(np.round(q, 3)) not in taken]
            routes = [_ring_route(c["a"], q) for q in spots]
            back = min(routes, key=_route_len)
            home[cur] = np.array([*back[-1], BALL_R])
            t_home = self._carry(cur, t_pick, back, a3, home[cur], self.walk)
            idle[cur] = t_home
            self.max_carry_speed = max(self.max_carry_speed, v)
            w3 = np.array([*w, _CARRY_Z])
            self._carry(new, t_dep - _LIFT_S, route, home[new], w3, v, put_down=False)
            b3 = np.array([*c["b"][:2], BALL_R])
            if mode == "hand":
                self.ops[new].append((t_in0, "move3", (t_in0, t_join, w3, b3)))
            else:
                g3 = np.array([*w, BALL_R])
                self.ops[new].append((t_in0 - _LIFT_S - 0.2, "move3", (t_in0 - _LIFT_S - 0.2,
                                                                      t_in0 - 0.2, w3, g3)))
                self.ops[new].append((t_in0, "roll", (t_in0, t_join, w, c["b"][:2])))
            del idle[new]
            self.swaps.append(dict(t=c["t_start"], out_sid=cur, in_sid=new, kind=c["kind"],
                                   entry=mode, entry_from=t_in0, walk_m=round(_route_len(route), 1),
                                   carry_speed=round(v, 2)))
            cur, own_from, entry_from, cur_kind = new, t_join, t_in0, c["kind"]
        self.ops[cur].append((own_from, "play", (own_from, pl.t_hi + 10.0)))
        self.owners.append(dict(sid=cur, own_from=own_from, own_to=None, entry_from=entry_from,
                                came_in_after=cur_kind))
        for sid, t in idle.items():
            gaps[sid].append((t, pl.t_hi + 10.0))
        self.excursions = {sid: dict(carried=0, thrown=0) for sid in balls}
        for sid, spans in gaps.items():
            for g0, g1 in spans:
                self._excursions(sid, max(g0, pl.t_lo), g1)
        self.paths = {}
        for sid in balls:
            bp = _BallPath(t_first, home[sid][:2]) if sid != GAME_BALL[h.half] else \
                _BallPath(t_first, CENTRE)
            for _, op, args in sorted(self.ops[sid], key=lambda o: o[0]):
                getattr(self, "_op_" + op)(bp, *args)
            self.paths[sid] = bp.freeze()
        self.live = {sid: [] for sid in balls}
        for o in self.owners:
            lo = h.h0 + round(o["entry_from"] * PS_PER_S)
            hi = h.h0 + round(o["own_to"] * PS_PER_S) if o["own_to"] is not None else h.ts_hi + 1
            self.live[o["sid"]].append((lo, hi))

    # -- planning ---------------------------------------------------------------------------------
    def _plan_entry(self, c, idle, touches):
        """Which spare comes in for carry `c`, along which route, when and how."""
        b = c["b"][:2]
        w = _entry_spot(b)
        dist = float(np.linalg.norm(b - w))
        nxt = c["next_touch"] if c["next_touch"] is not None else c["t_end"] + 1.0
        if dist <= _HAND_IN_MAX_M:
            mode, dur = "hand", max(dist / 1.2, 1.0)
        else:
            mode, dur = "roll", max(dist / 4.0, 1.0)
        t_in0 = max(c["t_start"], c["t_end"] - dur)
        t_join = max(c["t_end"], t_in0 + min(dur, 0.3 if mode == "hand" else dist / 15.0))
        if t_join > nxt - 0.1:
            return None
        t_arr = t_in0 - (_LIFT_S + 0.4 if mode == "roll" else 0.2)
        best = None
        for sid, t_free in idle.items():
            route = _ring_route(self.home[sid][:2], w)
            L = _route_len(route)
            walk_t = sum(1.5 * float(np.linalg.norm(q - p)) / self.walk for p, q in zip(route, route[1:]))
            avail = t_arr - (t_free + 0.5 + _LIFT_S)
            if avail <= 0.5:
                continue
            v = self.walk * max(1.0, walk_t / avail)
            key = (v > self.walk + 1e-9, L if v <= self.walk + 1e-9 else v)
            if best is None or key < best[0]:
                t_dep = t_arr - walk_t * self.walk / v
                best = (key, (sid, route, t_dep, v, t_in0, t_join, mode, w))
        return None if best is None else best[1]

    def _carry(self, sid, t0, route, a3, b3, v, put_down=True) -> float:
        """Pick up at t0 (at a3), walk the route at peak speed v (held at _CARRY_Z), put down at
        b3 (or keep holding it there). Returns the end time."""
        pts = [np.array([*p, _CARRY_Z]) for p in route]
        self.ops[sid].append((t0, "move3", (t0, t0 + _LIFT_S, np.asarray(a3, float), pts[0])))
        t = t0 + _LIFT_S
        for p, q in zip(pts, pts[1:]):
            T = 1.5 * float(np.linalg.norm(q - p)) / v
            self.ops[sid].append((t, "move3", (t, t + T, p, q)))
            t += T
        if put_down:
            self.ops[sid].append((t, "move3", (t, t + _LIFT_S, pts[-1], np.asarray(b3, float))))
            t += _LIFT_S
        return t

    def _excursions(self, sid, g0, g1) -> None:
        """Random excursions of a resting spare in [g0, g1): carried along the outside of its
        touch line and back, or thrown to another ball boy and carried back."""
        rng, cfg = self.rng, self.h.cfg
        rate = (cfg.spare_carry_per_min + cfg.spare_throw_per_min) / 60.0
        if rate <= 0:
            return
        p = self.home[sid]
        t = g0 + 2.0
        while True:
            t += float(rng.exponential(1.0 / rate))
            throw = rng.random() < cfg.spare_throw_per_min / 60.0 / rate
            d = float(rng.uniform(6.0, 15.0) if throw else rng.uniform(3.0, 12.0))
            along = 0 if _outside_side(p) in (0, 2) else 1  # parallel to the nearest line
            mid = CENTRE[along]
            sign = -1.0 if p[along] > mid else 1.0  # mostly towards the middle of that line
            sign = sign if rng.random() < 0.8 else -sign
            q = p.copy()
            q[along] += sign * d  # beyond the same line: stays outside
            pause = float(rng.uniform(3.0, 15.0) if throw else rng.uniform(5.0, 30.0))
            T_walk = 1.5 * d / self.walk
            T_f = float(rng.uniform(0.9, 1.3))
            dur = (2 * _LIFT_S + T_f if throw else 2 * _LIFT_S + T_walk) + pause + 2 * _LIFT_S + T_walk
            if t + dur > g1 - 2.0:
                return
            up = np.array([p[0], p[1], _CARRY_Z])
            if throw:
                self.ops[sid].append((t, "move3", (t, t + _LIFT_S, p, up)))
                self.ops[sid].append((t + _LIFT_S, "throw", (t + _LIFT_S, T_f, up, q)))
                t_there = t + _LIFT_S + T_f
            else:
                t_there = self._carry(sid, t, [p[:2], q[:2]], p, q, self.walk)
            self.excursions[sid]["thrown" if throw else "carried"] += 1
            t = self._carry(sid, t_there + pause, [q[:2], p[:2]], q, p, self.walk)

    # -- path operations ----------------------------------------------------------------------------
    def _op_play(self, bp: _BallPath, a: float, b: float) -> None:
        t0, p0, v0, acc = self.h.ball
        i = max(int(np.searchsorted(t0, a, side="right")) - 1, 0)
        tau = a - t0[i]
        bp.add(a, p0[i] + v0[i] * tau + 0.5 * acc[i] * tau * tau, v0[i] + acc[i] * tau, acc[i])
        for j in range(i + 1, len(t0)):
            if t0[j] >= b:
                break
            bp.add(t0[j], p0[j], v0[j], acc[j])

    @staticmethod
    def _op_rest(bp: _BallPath, t: float, p3) -> None:
        bp.rest(t, p3)

    @staticmethod
    def _op_move3(bp: _BallPath, ta, tb, a3, b3) -> None:
        bp.move3(ta, tb, a3, b3)

    @staticmethod
    def _op_roll(bp: _BallPath, ta, tb, a, b) -> None:
        dist = float(np.linalg.norm(np.asarray(b) - np.asarray(a)))
        T = tb - ta
        bp.roll(ta, tb, a, b, 2 * dist / (T * T) * 1.0001)  # comes to rest at b at tb, no spike

    @staticmethod
    def _op_throw(bp: _BallPath, ta, T, a3, b3) -> None:
        a3, b3 = np.asarray(a3, float), np.asarray(b3, float)
        v = np.array([(b3[0] - a3[0]) / T, (b3[1] - a3[1]) / T, (b3[2] - a3[2] + G * T * T / 2) / T])
        bp.add(ta, a3, v, np.array([0.0, 0.0, -G]))
        bp.rest(ta + T, b3)

    # -- queries ------------------------------------------------------------------------------------
    def owner_at(self, t: float) -> int:
        for o in self.owners:
            if o["own_to"] is None or t < o["own_to"]:
                return o["sid"]
        return self.owners[-1]["sid"]



# --------------------------------------------------------------------------------------------------
# Writing
# --------------------------------------------------------------------------------------------------

_SCHEMA = pa.schema([(n, pa.int64()) for n in
                     ("sid", "ts", "x", "y", "z", "v", "a", "vx", "vy", "vz", "ax", "ay", "az")])


def _encode(pos, vel, acc):
    """SI floats to the file's integers: mm, µm/s, µm/s², unit vectors scaled to 10,000."""
    xyz = np.rint(pos * 1000.0).astype(np.int64)
    out = [xyz]
    for vec in (vel, acc):
        mag = np.sqrt((vec * vec).sum(axis=1))
        safe = np.where(mag > 1e-12, mag, 1.0)
        direc = np.where(mag[:, None] > 1e-12, np.rint(vec / safe[:, None] * 10000.0), 0).astype(np.int64)
        out.append((np.rint(mag * 1e6).astype(np.int64), direc))
    return out


def _chunk_rows(h: _Half, c0: int, c1: int) -> dict[str, np.ndarray] | None:
    parts = []
    for sid, s in h.sensors.items():
        k0 = max(0, -(-(c0 - s.base_ts) // s.period))
        k1 = min(s.k_end, -(-(c1 - s.base_ts) // s.period))
        if k1 <= k0:
            continue
        ts, pos, vel, acc, keep = h.observed(sid, k0, k1)
        if s.person < 0:
            if h.half == 1:
                keep &= ts < BALL_MISSING_FROM
            for a, b in s.off_intervals:
                if a < c1 and b > c0:
                    keep &= ~((ts >= a) & (ts < b))
        if not keep.any():
            continue
        xyz, (vm, vd), (am, ad) = _encode(pos[keep], vel[keep], acc[keep])
        n = int(keep.sum())
        block = np.empty((n, 13), np.int64)
        block[:, 0] = sid; block[:, 1] = ts[keep]; block[:, 2:5] = xyz
        block[:, 5] = vm; block[:, 6] = am; block[:, 7:10] = vd; block[:, 10:13] = ad
        parts.append(block)
    if not parts:
        return None
    allrows = np.concatenate(parts)
    order = np.argsort(allrows[:, 1], kind="stable")
    return allrows[order]


# --------------------------------------------------------------------------------------------------
# Ground truth
# --------------------------------------------------------------------------------------------------

def _latest_shoe(h: _Half, sid: int, ts: np.ndarray) -> np.ndarray:
    """Integer (mm) position of the latest written sample of shoe `sid` at or before each ts
    (noise, jitter and drop-outs included: what a reader of the file sees)."""
    s = h.sensors[sid]
    k = np.maximum((ts - s.base_ts) // s.period, 0)
    k0, k1 = max(int(k.min()) - 200, 0), int(k.max()) + 2
    sts, pos, _, _, kept = h.observed(sid, k0, k1)
    sts, pos = sts[kept], pos[kept]
    j = np.maximum(np.searchsorted(sts, ts, side="right") - 1, 0)
    return np.rint(pos[j] * 1000.0).astype(np.int64)


def _ball_in_play(h: _Half, t: float) -> int:
    """The ball sensor that follows the play path at time t (s since the half start)."""
    return h.spares.owner_at(t) if h.spares is not None else GAME_BALL[h.half]


def _written(h: _Half, sid: int, t_a: float, t_b: float):
    """The written samples (ts, integer mm positions) of ball `sid` in [t_a, t_b) (s)."""
    s = h.sensors[sid]
    k0 = max(int(math.floor((t_a - s.t_base) / s.dt)), 0)
    k1 = min(int(math.ceil((t_b - s.t_base) / s.dt)), s.k_end)
    if k1 <= k0:
        return np.zeros(0, np.int64), np.zeros((0, 3), np.int64)
    ts, pos, _, _, keep = h.observed(sid, k0, k1)
    if h.half == 1:
        keep &= ts < BALL_MISSING_FROM
    for a, b in s.off_intervals:
        keep &= ~((ts >= a) & (ts < b))
    return ts[keep], np.rint(pos[keep] * 1000.0).astype(np.int64)


def _in_field_mm(xyz) -> np.ndarray:
    f = FIELD_MM
    return ((xyz[:, 0] >= f["x_min"]) & (xyz[:, 0] <= f["x_max"])
            & (xyz[:, 1] >= f["y_min"]) & (xyz[:, 1] <= f["y_max"]))


def _balls_in_play(h: _Half, ball_visible_until: int) -> list[dict]:
    """The truth's ``balls_in_play``: per ball that followed the play path, the first written
    sample inside the field (``from_ts``: where the spec's rule, §2, makes it the ball in play)
    and the written sample after its last one inside (``to_ts``: it has left the field for good;
    a ball crossing a line can flicker in and out for a few ms with the position noise before;
    ``None`` when it is still inside where the half's ball data end)."""
    out = []
    touches = sorted(tc.t for tc in h.planner.touches)
    for o in h.spares.owners:
        rec = dict(sid=o["sid"], came_in_after=o["came_in_after"], from_ts=None, to_ts=None)
        t_a = max(o["entry_from"], h.t_lo)
        ts, xyz = _written(h, o["sid"], t_a, max(o["own_from"], t_a) + 1.0)
        ins = np.flatnonzero(_in_field_mm(xyz) & (ts < ball_visible_until))
        if len(ins):
            rec["from_ts"] = int(ts[ins[0]])
        end = o["own_to"] + 0.01 if o["own_to"] is not None else h.t_hi
        last = max([t for t in touches if t < end] or [o["own_from"]])
        ts, xyz = _written(h, o["sid"], last, end)
        vis = ts < ball_visible_until
        ts, xyz = ts[vis], xyz[vis]
        ins = np.flatnonzero(_in_field_mm(xyz))
        if len(ins) and ins[-1] + 1 < len(ts):
            rec["to_ts"] = int(ts[ins[-1] + 1])
        out.append(rec)
    return out


def _ball_window(h: _Half, t: float, before: float = 0.015, after: float = 0.015):
    s = h.sensors[_ball_in_play(h, t)]
    kc = int(round((t - s.t_base) / s.dt))
    k0 = max(kc - int(before / s.dt), 0)
    k1 = min(kc + int(after / s.dt) + 1, s.k_end)
    if k1 <= k0:
        return None
    ts, pos, vel, acc, kept = h.observed(s.sid, k0, k1)
    if not kept.any():
        return None
    xyz, (vm, vd), (am, ad) = _encode(pos[kept], vel[kept], acc[kept])
    return ts[kept], xyz, vm, vd, am, ad


def _projects(xyz, vm, vd, sign: int) -> np.ndarray:
    """Spec section 8 default: straight line, no gravity, reaches the goal area within 1.5 s."""
    g = GOAL_POS_Y if sign > 0 else GOAL_NEG_Y
    v = vm[:, None] * vd * 1e-7  # mm/s
    with np.errstate(divide="ignore", invalid="ignore"):
        tstar = (g["y"] - xyz[:, 1]) / v[:, 1]
        x = xyz[:, 0] + v[:, 0] * tstar
        z = xyz[:, 2] + v[:, 2] * tstar
    return (tstar > 0) & (tstar <= SHOT_HORIZON_S) & (x > g["x_lo"]) & (x < g["x_hi"]) & (z < g["z_max"])


def _truth(h: _Half, ball_visible_until: int) -> dict:
    pl = h.planner
    hits, soft = [], []
    touch_hit: dict[int, dict] = {}
    player_shoes = [(i, sid) for i, p in enumerate(PEOPLE[:16]) for sid in p.shoes]
    for idx, tc in enumerate(pl.touches):
        w = _ball_window(h, tc.t)
        if w is None:
            continue
        ts, xyz, vm, vd, am, ad = w
        if ts[0] >= ball_visible_until or tc.t > h.t_hi:
            continue
        p = PEOPLE[tc.person]
        peak = int(np.argmax(am))
        # the spec's rule (§6): a ball sample with |a| >= 55 m/s² is a hit of the player whose
        # shoe is closest, if that shoe is within 1 m (3D, each shoe's latest written sample),
        # at any qualifying sample, not only at the peak
        strong = np.flatnonzero(am >= HIT_ACC_RAW)
        near = np.full(len(ts), np.inf)
        who = np.full(len(ts), -1)
        wsid = np.full(len(ts), -1)
        if len(strong):
            for i, s2 in player_shoes:
                d = np.sqrt(((_latest_shoe(h, s2, ts[strong]) - xyz[strong]) ** 2).sum(axis=1))
                better = d < near[strong]
                near[strong[better]] = d[better]
                who[strong[better]] = i
                wsid[strong[better]] = s2
        qual = near <= HIT_DIST_MM
        rec = dict(ts=int(ts[peak]), player=p.name, team=p.team, sensor=p.shoes[0], kind=tc.kind,
                   acc=int(am[peak]), dist_mm=float(round(min(near[peak], 1e9), 1)))
        if qual.any():
            first = int(np.flatnonzero(qual)[0])
            hitter = PEOPLE[int(who[first])]
            mine = np.flatnonzero(qual & (who == who[first]))
            rec.update(player=hitter.name, team=hitter.team, sensor=int(wsid[first]),
                       planned_player=p.name, closest_is_player=hitter.name == p.name,
                       ts_first=int(ts[mine[0]]), ts_last=int(ts[mine[-1]]),
                       dist_mm=float(round(near[first], 1)))
            hits.append(rec)
            touch_hit[idx] = rec
            # another player's shoe closest at later qualifying samples of the same spike (an
            # opponent's boot at the ball during the kick): by the rule, a hit of that player too
            for o in dict.fromkeys(int(w) for w in who[qual] if w != who[first]):
                theirs = np.flatnonzero(qual & (who == o))
                top = int(theirs[np.argmax(am[theirs])])
                other = PEOPLE[o]
                hits.append(dict(ts=int(ts[top]), player=other.name, team=other.team,
                                 sensor=int(wsid[top]), kind="contested", acc=int(am[top]),
                                 dist_mm=float(round(near[top], 1)), planned_player=p.name,
                                 closest_is_player=False, ts_first=int(ts[theirs[0]]),
                                 ts_last=int(ts[theirs[-1]])))
        else:
            soft.append(rec)
    poss = []
    for q in pl.possessions:
        a, b = touch_hit.get(q["first"]), touch_hit.get(q["last"])
        start = a["ts"] if a else None
        end = b["ts"] if b else None
        if start is None and end is None:
            continue
        p = PEOPLE[q["player"]]
        n_hits = sum(1 for i in range(q["first"], q["last"] + 1) if i in touch_hit)
        poss.append(dict(player=p.name, team=p.team, start_ts=start if start is not None else end,
                         end_ts=end if end is not None else start, hits=n_hits,
                         annotated_start_ts=h.h0 + round(q["b"] * PS_PER_S),
                         annotated_end_ts=h.h0 + round(q["e"] * PS_PER_S)))
    shots = []
    for sh in pl.shots:
        rec = touch_hit.get(sh["touch"])
        if rec is None:
            continue
        tc = pl.touches[sh["touch"]]
        w = _ball_window(h, tc.t, 0.015, 0.06)
        ts, xyz, vm, vd, am, ad = w
        proj = _projects(xyz.astype(float), vm.astype(float), vd.astype(float), sh["sign"])
        after = ts >= rec["ts_first"]
        first_proj = ts[proj & after]
        # the shot ends at the next touch, the post, or when the ball crosses the goal line
        later = [t.t for t in pl.touches if t.t > tc.t + 1e-6]
        t_end = later[0] if later else tc.t + 1.5
        t_end = min([t_end] + [b["t"] for b in h.bounces if b["t"] > tc.t]
                    + [g["t"] for g in h.goal_crossings if g["t"] > tc.t])
        last_i = int(np.flatnonzero(ts == rec["ts_last"])[0])
        shots.append(dict(shooter=rec["player"], team=rec["team"], sensor=rec["sensor"],
                          goal="+y" if sh["sign"] > 0 else "-y", outcome=sh["outcome"],
                          start_ts=rec["ts"], projected_from_ts=int(first_proj[0]) if len(first_proj) else None,
                          projects_at_last_hit_sample=bool(proj[last_i]),
                          end_ts=min(h.h0 + round(t_end * PS_PER_S), h.ts_hi)))
    unplanted = []
    for bnc in h.bounces:
        w = _ball_window(h, bnc["t"], 0.02, 0.02)
        if w is None or w[0][0] >= ball_visible_until:
            continue
        ts, xyz, vm, vd, am, ad = w
        strong = np.flatnonzero(am >= HIT_ACC_RAW)
        if len(strong) == 0:
            continue
        near = min(float(np.sqrt(((_latest_shoe(h, sid, ts[strong]) - xyz[strong]) ** 2).sum(axis=1)).min())
                   for _, sid in player_shoes)
        bnc["ts"] = int(ts[int(np.argmax(am))])
        bnc["nearest_shoe_mm"] = round(near, 1)
        if near <= HIT_DIST_MM:
            unplanted.append(dict(bnc))
    stops = [dict(begin_ts=h.h0 + round(b * PS_PER_S),
                  end_ts=min(h.h0 + round(e * PS_PER_S), HALF_ENDS[h.half])) for b, e in pl.stops]
    sides = {"A": "+y" if pl.sign["A"] > 0 else "-y", "B": "+y" if pl.sign["B"] > 0 else "-y"}
    spare = {}
    if h.spares is not None:
        sp = h.spares
        spare = dict(
            balls_in_play=_balls_in_play(h, ball_visible_until),
            ball_swaps=[dict(ts=h.h0 + round(w["t"] * PS_PER_S), out_sid=w["out_sid"],
                             in_sid=w["in_sid"], kind=w["kind"], entry=w.get("entry"),
                             entry_from_ts=h.h0 + round(w["entry_from"] * PS_PER_S)
                             if "entry_from" in w else None, walk_m=w.get("walk_m"),
                             carry_speed_mps=w.get("carry_speed"), skipped=w.get("skipped"))
                        for w in sp.swaps],
            spare_excursions={str(k): v for k, v in sp.excursions.items()},
            spare_max_carry_speed_mps=round(sp.max_carry_speed, 2))
    return dict(
        half=h.half, half_start_ts=h.h0, half_end_ts=HALF_ENDS[h.half], data_start_ts=h.ts_lo,
        data_end_ts=h.ts_hi, game_ball=GAME_BALL[h.half], spare_balls=list(SPARE_BALLS[h.half]),
        spare_ball_positions_mm={str(b): [round(SPARE_REST[b][0] * 1000), round(SPARE_REST[b][1] * 1000),
                                          round(BALL_R * 1000)] for b in SPARE_BALLS[h.half]},
        spare_ball_silent=[{"sid": sid, "from_ts": a, "to_ts": b}
                           for sid in ((GAME_BALL[h.half],) if h.spares is not None else ())
                           + SPARE_BALLS[h.half] for a, b in h.sensors[sid].off_intervals],
        spare_balls_move=h.spares is not None, **spare,
        ball_data_until_ts=min(ball_visible_until, h.ts_hi),
        attacks=sides, interruptions=stops, hits=hits, soft_touches=soft, possessions=poss,
        shots=shots, bounces=h.bounces, goal_crossings=[
            dict(t_ts=h.h0 + round(g["t"] * PS_PER_S), point_mm=[round(c * 1000) for c in g["point"]])
            for g in h.goal_crossings],
        unplanted_hits=unplanted, infeasible_fast_runs=h.fast_legs,
    )


# --------------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------------

def truth_path_for(game_path: str | Path) -> Path:
    """The ground-truth file written next to a game: ``game.csv`` -> ``game.truth.json``."""
    p = Path(game_path)
    return p.with_name((p.stem if p.suffix == ".csv" else p.name) + ".truth.json")


def _half_ranges(cfg: GeneratorConfig) -> list[tuple[int, int, int]]:
    if cfg.minutes is None:
        return [(1, FIRST_ROW_TS, FIRST_HALF_END), (2, SECOND_HALF_START, SECOND_HALF_END)]
    span = int(round(cfg.minutes * 60 * PS_PER_S))
    return [(1, FIRST_HALF_START, min(FIRST_HALF_START + span, FIRST_HALF_END)),
            (2, SECOND_HALF_START, min(SECOND_HALF_START + span, SECOND_HALF_END))]


def _check_arguments(out_path, minutes, seed, referee_dir) -> None:
    """Refuse, before any file is made, what cannot give a game (a SpecError naming the fix)."""
    from epic.errors import SpecError

    if minutes is not None and not (isinstance(minutes, (int, float)) and math.isfinite(minutes)
                                    and minutes > 0):
        raise SpecError(f"minutes={minutes!r}: give a positive number of minutes per half "
                        "(e.g. 2.5), or none for the full game")
    if not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**32:
        raise SpecError(f"seed={seed!r}: give a whole number from 0 to 2**32 - 1")
    ref = Path(referee_dir)
    if not ref.is_dir():
        raise SpecError(f"referee events {str(ref)!r} is not a directory: give the real "
                        "referee-events directory (the one with the 1st/2nd half "
                        "interruption files)")
    if Path(out_path).is_dir():
        raise SpecError(f"the output {str(out_path)!r} is a directory: give the game file's path "
                        "(e.g. data/game.csv)")


def generate_game(out_path: str | Path, minutes: float | None = None, seed: int = 0,
                  config: GeneratorConfig | None = None, progress=None) -> GenerationResult:
    """Write a synthetic game CSV and its ground truth.

    Args:
        out_path: The game file (headerless CSV, 13 integer fields, ordered by ``ts``).
        minutes: Minutes per half for a short game; ``None`` for the full game (~49.6 M rows).
        seed: Seed of every random choice; the same arguments give byte-identical files.
        config: Further settings; its ``minutes`` and ``seed`` are replaced by the arguments.
        progress: Optional callable ``progress(rows_written, seconds_of_game_done)``.

    Returns:
        A :class:`GenerationResult`. The ground truth is JSON at :func:`truth_path_for` (out_path):
        ``{"format": ..., "config": {...}, "rows": N, "rows_per_sensor": {sid: n},
        "halves": [{"half", "half_start_ts", "half_end_ts", "data_start_ts", "data_end_ts",
        "game_ball", "spare_balls", "attacks": {"A": "+y"|"-y", "B": ...}, "interruptions":
        [{"begin_ts", "end_ts"}], "hits": [{"ts", "ts_first", "ts_last", "player", "team",
        "sensor", "kind", "acc", "dist_mm", "closest_is_player"}], "possessions": [{"player",
        "team", "start_ts", "end_ts", "hits", "annotated_start_ts", "annotated_end_ts"}], "shots":
        [{"shooter", "team", "sensor", "goal", "outcome", "start_ts", "projected_from_ts",
        "projects_at_last_hit_sample", "end_ts"}], "bounces", "goal_crossings", "unplanted_hits",
        "soft_touches", ...}]}``. Every ``*_ts`` is an exact integer picosecond timestamp.
    """
    started = time.perf_counter()
    base = config or GeneratorConfig()
    _check_arguments(out_path, minutes, seed, base.referee_dir)
    cfg = GeneratorConfig(**{**asdict(base), "minutes": minutes, "seed": seed})
    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    rows = 0
    per_sensor: dict[int, int] = {}
    halves = []
    chunk_ps = int(cfg.chunk_seconds * PS_PER_S)
    with pa.OSFile(str(out), "wb") as sink:
        writer = pacsv.CSVWriter(sink, _SCHEMA, write_options=pacsv.WriteOptions(include_header=False))
        for half, lo, hi in _half_ranges(cfg):
            h = _Half(cfg, half, lo, hi)
            c0 = lo
            carry = None  # jittered rows at or after the chunk's end go with the next chunk
            while c0 < hi:
                c1 = min(c0 + chunk_ps, hi)
                block = _chunk_rows(h, c0, c1)
                if carry is not None:
                    block = carry if block is None else np.concatenate([carry, block])
                    block = block[np.argsort(block[:, 1], kind="stable")]
                    carry = None
                if block is not None and c1 < hi:
                    later = block[:, 1] >= c1
                    if later.any():
                        carry, block = block[later], block[~later]
                if block is not None and len(block):
                    writer.write_table(pa.Table.from_arrays(
                        [pa.array(block[:, j]) for j in range(13)], schema=_SCHEMA))
                    rows += len(block)
                    sids, counts = np.unique(block[:, 0], return_counts=True)
                    for sid, n in zip(sids.tolist(), counts.tolist()):
                        per_sensor[sid] = per_sensor.get(sid, 0) + n
                if progress:
                    progress(rows, (c1 - lo) / PS_PER_S)
                c0 = c1
            visible = BALL_MISSING_FROM if half == 1 else HALF_ENDS[2] + 1
            halves.append(_truth(h, visible))
        writer.close()
    truth = dict(
        format="epic-debs2013-truth/1",
        notes=("ts values are integer picoseconds; a planted touch (pass, shot, dribble, ... : "
               "'kind') is a hit when at any of its ball samples with |a| >= 55 m/s^2 the closest "
               "player shoe (latest written sample, 3D) is within 1 m: 'player' is that shoe's "
               "player at the first such sample (spec 6), 'planned_player' the planned toucher, "
               "'ts' the sample of peak |a|, 'ts_first'/'ts_last' the qualifying samples of the "
               "hitter; a player whose shoe is the closest within 1 m at other qualifying "
               "samples of the same touch has a hit of kind 'contested' ('ts' its own peak); "
               "annotation times map to ts by spec 4.3 option A"),
        config={**{k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(cfg).items()}},
        rows=rows, rows_per_sensor={str(k): v for k, v in sorted(per_sensor.items())},
        halves=halves, generator_seconds=round(time.perf_counter() - started, 3),
    )
    tp = truth_path_for(out)
    tp.write_text(json.dumps(truth, indent=1))
    return GenerationResult(out, tp, rows, time.perf_counter() - started)
