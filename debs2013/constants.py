"""Constants of the DEBS 2013 Grand Challenge (spec sections 1-4 and 11), in raw input units.

Time is in picoseconds (``int``; the timestamps exceed 2^53, never use floats), positions in mm,
speed ``|v|`` in µm/s and acceleration ``|a|`` in µm/s². The block between the ``# --- spec §11``
markers is the spec's constants block, with sets made immutable.
"""

from __future__ import annotations

from types import MappingProxyType

# --- spec §11 -------------------------------------------------------------------------------------
PS_PER_S = 10**12
FIRST_HALF_START = 10753295594424116
BALL_MISSING_FROM = 12398000000000000   # no in-field ball until FIRST_HALF_END
FIRST_HALF_END = 12557295594424116
SECOND_HALF_START = 13086639146403495
SECOND_HALF_END = 14879639146403495
FIELD = MappingProxyType(dict(x_min=0, x_max=52483, y_min=-33960, y_max=33965))           # mm
GOAL_POS_Y = MappingProxyType(dict(x_lo=22578.5, x_hi=29898.5, y=33941.0, z_max=2440.0))  # goal 1
GOAL_NEG_Y = MappingProxyType(dict(x_lo=22560.0, x_hi=29880.0, y=-33968.0, z_max=2440.0))  # goal 2
BALLS = MappingProxyType({1: frozenset({4, 8, 10}), 2: frozenset({4, 8, 10, 12})})
REFEREE = frozenset({105, 106})
GK_HANDS = frozenset({97, 98, 99, 100})
TEAM_A = MappingProxyType({
    "Nick Gertje": (13, 14, 97, 98), "Dennis Dotterweich": (47, 16),
    "Niklas Waelzlein": (49, 88), "Wili Sommer": (19, 52),
    "Philipp Harlass": (53, 54), "Roman Hartleb": (23, 24),
    "Erik Engelhardt": (57, 58), "Sandro Schneider": (59, 28)})
TEAM_B = MappingProxyType({
    "Leon Krapf": (61, 62, 99, 100), "Kevin Baer": (63, 64),
    "Luca Ziegler": (65, 66), "Ben Mueller": (67, 68),
    "Vale Reitstetter": (69, 38), "Christopher Lee": (71, 40),
    "Leon Heinze": (73, 74), "Leo Langhans": (75, 44)})
SPEED_EDGES_KMH = (1, 11, 14, 17, 24)   # standing|trot|low|medium|high|sprint
INTENSITIES = ("standing", "trot", "low", "medium", "high", "sprint")
MIN_SEGMENT_PS = 1 * PS_PER_S
HIT_ACC_RAW = 55_000_000                 # µm/s^2
HIT_DIST_MM = 1000
SHOT_HORIZON_S = 1.5
Q1_EMIT_PERIOD_PS = PS_PER_S // 50       # 50 Hz
Q1_WINDOWS_S = (60, 300, 1200, None)     # None = whole game
Q2_WINDOWS_S = (60, 300, 1200, None)
Q3_WINDOWS_S = (60, 300, 600, None)
Q3_GRIDS = ((8, 13), (16, 25), (32, 50), (64, 100))   # (cells along x, along y)
Q3_EMIT_PERIOD_PS = PS_PER_S
INTERRUPTION_IDS = MappingProxyType({1: ("2010", "2011"), 2: ("6014", "6015")})  # (Begin, End)
# --- end of spec §11 ------------------------------------------------------------------------------

#: Half number -> (start, end) in sensor ps (official values, spec §1.4).
HALVES = MappingProxyType({1: (FIRST_HALF_START, FIRST_HALF_END),
                           2: (SECOND_HALF_START, SECOND_HALF_END)})

#: Sensor rates (spec §1.1): period between two reports of one sensor, in ps.
BODY_SENSOR_PERIOD_PS = 5 * 10**9      # 200 Hz
BALL_SENSOR_PERIOD_PS = 5 * 10**8      # 2000 Hz

#: Rows of the real ``full-game`` file (spec §1.2).
FULL_GAME_ROWS = 49_576_080

#: The spec's raw thresholds (§1.3): ``SPEED_EDGES_KMH`` in µm/s, rounded to the nearest unit.
SPEED_EDGES_RAW = (277_778, 3_055_556, 3_888_889, 4_722_222, 6_666_667)
#: Position units: 1 m in mm.
MM_PER_M = 1000

#: Metadata table of spec §2: (team, name, left leg, right leg, left hand, right hand). The referee
#: has team ``None``; hands are ``None`` for field players.
METADATA_TABLE = (
    ("A", "Nick Gertje", 13, 14, 97, 98),
    ("A", "Dennis Dotterweich", 47, 16, None, None),
    ("A", "Niklas Waelzlein", 49, 88, None, None),
    ("A", "Wili Sommer", 19, 52, None, None),
    ("A", "Philipp Harlass", 53, 54, None, None),
    ("A", "Roman Hartleb", 23, 24, None, None),
    ("A", "Erik Engelhardt", 57, 58, None, None),
    ("A", "Sandro Schneider", 59, 28, None, None),
    ("B", "Leon Krapf", 61, 62, 99, 100),
    ("B", "Kevin Baer", 63, 64, None, None),
    ("B", "Luca Ziegler", 65, 66, None, None),
    ("B", "Ben Mueller", 67, 68, None, None),
    ("B", "Vale Reitstetter", 69, 38, None, None),
    ("B", "Christopher Lee", 71, 40, None, None),
    ("B", "Leon Heinze", 73, 74, None, None),
    ("B", "Leo Langhans", 75, 44, None, None),
    (None, "Referee", 105, 106, None, None),
)

#: Spellings in the referee-event files (and their file names) -> the metadata spelling (spec §2).
#: ``Ben MÃ¼ller`` is UTF-8 ``Ben Müller`` mis-decoded as Latin-1; readers also repair such mojibake
#: generically before looking names up here.
NAME_ALIASES = MappingProxyType({
    "Niklas Welzlein": "Niklas Waelzlein",
    "Willi Sommer": "Wili Sommer",
    "Ben Müller": "Ben Mueller",
    "Ben MÃ¼ller": "Ben Mueller",
    "Ben Muller": "Ben Mueller",
})

#: Annotation-clock options of spec §4.3, as the extra lag (ps) subtracted *after* aligning each
#: half's first End on the half start. Option A does no alignment at all (see ``readers``).
CLOCK_OPTIONS = ("A", "B", "C")
CLOCK_C_LAG_PS = MappingProxyType({1: 988_500_000_000, 2: 847_950_000_000})
#: The first End of each half in the real files (spec §4.2), in annotation-clock ps.
FIRST_END_PS = MappingProxyType({1: 3_092_000_000_000, 2: 455_000_000_000})

#: Referee-event file names inside the ``referee-events`` directory (spec §4.1).
HALF_FILE_NAMES = MappingProxyType({1: "1st Half", 2: "2nd Half"})
