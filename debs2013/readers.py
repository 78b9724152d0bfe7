"""Readers for the DEBS 2013 input files: the sensor stream, the metadata and the referee events.

* :func:`read_game` streams the 13-field ``full-game`` CSV as Arrow batches through
  :mod:`epic.csvio` (strict or lenient), with ``ts`` kept as exact int64 picoseconds.
* :func:`read_metadata` parses ``metadata.txt`` into sensor -> player -> team maps.
* :func:`read_interruptions`, :func:`read_shots` and :func:`read_possession` parse the referee-event
  annotation files exactly as published (``,`` or ``;``, with or without header, short or long event
  names, a ``Statistic:`` tail, out-of-step counters, an unmatched last ``Begin``), mapping the
  annotation clock onto sensor picoseconds by option A, B or C of spec §4.3 (A by default).

Annotation times are converted with integer arithmetic only: ``00:29:36.577`` is exactly
``1_776_577_000_000_000`` ps after the half's annotation zero.
"""

from __future__ import annotations

import os
import re
import unicodedata
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

import pyarrow as pa

from debs2013 import constants as C
from epic.csvio import STRICT, CsvBatchReader, read_csv_batches
from epic.errors import InputError, SpecError

__all__ = [
    "SHARED_ENV",
    "shared_dir",
    "SENSOR_SCHEMA",
    "read_game",
    "speed_kmh",
    "accel_ms2",
    "velocity_ms",
    "velocity_mm_s",
    "kmh_to_raw",
    "Person",
    "GameMetadata",
    "normalize_name",
    "read_metadata",
    "AnnotationRow",
    "read_annotation_rows",
    "parse_annotation_time",
    "clock_offset",
    "Interruption",
    "InterruptionMarker",
    "MARKER_SCHEMA",
    "read_interruptions",
    "read_game_interruptions",
    "interruption_markers",
    "markers_table",
    "Shot",
    "read_shots",
    "Possession",
    "read_possession",
    "read_possession_dir",
]

#: Environment variable overriding where the shared DEBS files live.
SHARED_ENV = "EPIC_DEBS_SHARED"


def shared_path() -> Path:
    """Where :func:`shared_dir` looks (without checking that it exists)."""
    env = os.environ.get(SHARED_ENV)
    if env:
        return Path(env)
    path = Path(__file__).resolve().parents[1].parent / "shared" / "debs2013"
    return path if path.is_dir() else Path(__file__).resolve().parent / "shared"


def shared_dir() -> Path:
    """The directory holding ``metadata.txt`` and ``referee-events/``.

    ``$EPIC_DEBS_SHARED`` if set, else ``../shared/debs2013`` next to the repository root, else
    the byte-exact copy of those real files shipped in ``debs2013/shared/`` (so a clone anywhere
    runs).

    Raises:
        InputError: the directory does not exist (set ``EPIC_DEBS_SHARED`` to fix it).
    """
    path = shared_path()
    if not path.is_dir():
        raise InputError(f"DEBS 2013 side files not found; set {SHARED_ENV} to the directory "
                         "holding metadata.txt and referee-events/", path=str(path))
    return path


# --------------------------------------------------------------------------------------------------
# The sensor stream.

# |v| and |a| are int64: a ball kick can exceed 2147 m/s² (int32's limit in µm/s²) on noisy
# readings, and widening costs nothing next to the int64 timestamp.
SENSOR_SCHEMA = pa.schema([
    pa.field("sid", pa.int32(), nullable=False),
    pa.field("ts", pa.int64(), nullable=False),
    pa.field("x", pa.int32(), nullable=False),
    pa.field("y", pa.int32(), nullable=False),
    pa.field("z", pa.int32(), nullable=False),
    pa.field("v", pa.int64(), nullable=False),
    pa.field("a", pa.int64(), nullable=False),
    pa.field("vx", pa.int32(), nullable=False),
    pa.field("vy", pa.int32(), nullable=False),
    pa.field("vz", pa.int32(), nullable=False),
    pa.field("ax", pa.int32(), nullable=False),
    pa.field("ay", pa.int32(), nullable=False),
    pa.field("az", pa.int32(), nullable=False),
], metadata={"epic.event_time": "ts", "epic.time_unit": "ps"})


def read_game(path: str | os.PathLike[str], *, mode: str = STRICT,
              dead_letter: str | os.PathLike[str] | None = None, batch_rows: int = 1 << 20,
              block_size: int = 16 << 20) -> CsvBatchReader:
    """Stream a ``full-game`` sensor file (13 integer fields, no header) as Arrow batches.

    Args:
        path: the CSV file, plain or ``.gz``.
        mode: ``"strict"`` (stop at the first bad line) or ``"lenient"`` (bad lines to
            ``dead_letter``); see :mod:`epic.csvio`.
        dead_letter: dead-letter CSV path, required in lenient mode.
        batch_rows: rows per batch.
        block_size: bytes per pyarrow parse.

    Returns:
        A single-use iterable of batches of :data:`SENSOR_SCHEMA`, with ``stats``.

    Example:
        >>> import tempfile, os
        >>> p = os.path.join(tempfile.mkdtemp(), "g.csv")
        >>> _ = open(p, "w").write("98,10629342490369879,26406,-6869,1070,1166235,7161971,"
        ...                        "-5706,3485,-7435,-2410,-8454,-4765\\n")
        >>> batch = next(iter(read_game(p)))
        >>> batch.column("ts")[0].as_py(), round(speed_kmh(batch.column("v")[0].as_py()), 1)
        (10629342490369879, 4.2)
    """
    return read_csv_batches(path, SENSOR_SCHEMA, mode=mode, dead_letter=dead_letter,
                            batch_rows=batch_rows, block_size=block_size)


def speed_kmh(v):
    """Speed in km/h from raw ``|v|`` (µm/s): ``|v| · 3.6e-6``. Works on numbers and arrays."""
    return v * 3.6e-6


def accel_ms2(a):
    """Acceleration in m/s² from raw ``|a|`` (µm/s²): ``|a| · 1e-6``."""
    return a * 1e-6


def velocity_ms(magnitude, component):
    """One velocity (or acceleration) component in m/s from ``|v|`` and a direction component
    scaled to 10,000: ``|v| · vi · 1e-10``."""
    return magnitude * component * 1e-10


def velocity_mm_s(magnitude, component):
    """One velocity (or acceleration) component in mm/s: ``|v| · vi · 1e-7``."""
    return magnitude * component * 1e-7


def kmh_to_raw(kmh: float) -> int:
    """A speed threshold in raw µm/s, rounded to the nearest unit (e.g. 11 km/h -> 3,055,556)."""
    return round(kmh / 3.6e-6)


# --------------------------------------------------------------------------------------------------
# Metadata.


@dataclass(frozen=True)
class Person:
    """One person wearing sensors.

    Attributes:
        name: the metadata spelling (``Referee`` for the referee).
        team: ``"A"``, ``"B"``, or ``None`` for the referee.
        left_leg, right_leg: shoe sensor ids.
        left_hand, right_hand: hand sensor ids (goalkeepers only; "Arm" in the file).
    """

    name: str
    team: str | None
    left_leg: int
    right_leg: int
    left_hand: int | None = None
    right_hand: int | None = None

    @property
    def is_goalkeeper(self) -> bool:
        """Whether the person wears hand sensors (only the goalkeepers do)."""
        return self.left_hand is not None

    @property
    def shoes(self) -> tuple[int, int]:
        """The shoe sensor ids."""
        return (self.left_leg, self.right_leg)

    @property
    def sensors(self) -> tuple[int, ...]:
        """Every sensor id, shoes first."""
        hands = tuple(h for h in (self.left_hand, self.right_hand) if h is not None)
        return self.shoes + hands


@dataclass(frozen=True)
class GameMetadata:
    """The parsed ``metadata.txt``.

    Attributes:
        players: the 16 players, team A first, in file order.
        referee: the referee.
        balls: half -> ball sensor ids.
    """

    players: tuple[Person, ...]
    referee: Person
    balls: Mapping[int, frozenset[int]]

    @property
    def sensor_to_player(self) -> Mapping[int, str]:
        """Sensor id -> player name, for shoe and hand sensors of players (not the referee)."""
        return MappingProxyType({s: p.name for p in self.players for s in p.sensors})

    @property
    def player_team(self) -> Mapping[str, str]:
        """Player name -> team (``"A"`` or ``"B"``)."""
        return MappingProxyType({p.name: p.team for p in self.players})

    @property
    def goalkeeper_hands(self) -> frozenset[int]:
        """The goalkeepers' hand sensor ids."""
        return frozenset(h for p in self.players if p.is_goalkeeper
                         for h in (p.left_hand, p.right_hand))

    @property
    def all_balls(self) -> frozenset[int]:
        """Every ball sensor of the game."""
        return frozenset().union(*self.balls.values())

    def player(self, name: str) -> Person:
        """The player called ``name`` (any spelling :func:`normalize_name` knows).

        Raises:
            KeyError: no such player.
        """
        wanted = normalize_name(name)
        for p in self.players:
            if p.name == wanted:
                return p
        raise KeyError(f"no player {name!r} (normalised {wanted!r}) in the metadata")

    def as_table(self) -> tuple[tuple, ...]:
        """The metadata in the layout of :data:`debs2013.constants.METADATA_TABLE`."""
        return tuple((p.team, p.name, p.left_leg, p.right_leg, p.left_hand, p.right_hand)
                     for p in (*self.players, self.referee))


def normalize_name(name: str) -> str:
    """The metadata spelling of a person's name as written in any DEBS file.

    Repairs UTF-8 text mis-decoded as Latin-1 (``Ben MÃ¼ller``), applies Unicode NFC, collapses
    whitespace, then maps through :data:`debs2013.constants.NAME_ALIASES`.

    Example:
        >>> [normalize_name(n) for n in ("Ben MÃ¼ller", "Willi Sommer", "Niklas Welzlein")]
        ['Ben Mueller', 'Wili Sommer', 'Niklas Waelzlein']
    """
    text = " ".join(name.split())
    if "Ã" in text or "Â" in text:
        try:
            text = text.encode("latin-1").decode("utf-8")
        except (UnicodeEncodeError, UnicodeDecodeError):
            pass  # not mojibake after all: keep it as written
    text = unicodedata.normalize("NFC", text)
    return C.NAME_ALIASES.get(text, text)


def _sensor_id(text: str, path, line: int) -> int:
    """A sensor id of the metadata file: it must fit the sensor file's ``sid`` column (int64)."""
    sid = int(text)
    if sid > 2**63 - 1:
        raise InputError(f"sensor id {text} does not fit a 64-bit integer (the sensor file's sid)",
                         path=str(path), line=line, value=text)
    return sid


_PERSON = re.compile(r"^(?P<name>[^()]+?)\s*\((?P<sensors>[^()]*)\)\s*$")
_SENSOR = re.compile(r"^\s*(Left|Right)\s+(Leg|Arm|Hand)\s*:\s*(\d+)\s*$", re.IGNORECASE)
_BALLS = re.compile(r"^-?\s*(\d+)(?:st|nd|rd|th)\s+Half\s*:\s*(.*)$", re.IGNORECASE)
_TEAM = re.compile(r"^Team\s+(\w+)\s*:\s*$", re.IGNORECASE)


def read_metadata(path: str | os.PathLike[str] | None = None) -> GameMetadata:
    """Parse the DEBS ``metadata.txt`` (by default the shared copy).

    Raises:
        InputError: a line that is none of the known forms, a person listed twice or a sensor id
            given to two persons, naming its line number.
    """
    path = Path(path) if path is not None else shared_dir() / "metadata.txt"
    text = _decode(path.read_bytes())   # UTF-8, else cp1252 (the referee files' rule)
    balls: dict[int, frozenset[int]] = {}
    team: str | None = None
    in_balls = False
    players: list[Person] = []
    referee: Person | None = None
    names: dict[str, int] = {}                    # person -> line
    owners: dict[int, tuple[str, int]] = {}       # sensor id -> (person, line)
    ball_lines: dict[int, int] = {}               # ball sensor id -> line
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line:
            continue
        if line.rstrip(":").strip().lower() == "balls":
            in_balls, team = True, None
            continue
        if (m := _TEAM.match(line)) is not None:
            in_balls, team = False, m.group(1).upper()
            continue
        if in_balls and (m := _BALLS.match(line)) is not None:
            half = int(m.group(1))
            if half not in (1, 2):
                raise InputError(f"half {half}: a game has a 1st and a 2nd half",
                                 path=str(path), line=number)
            if half in balls:
                raise InputError(f"the balls of half {half} are listed twice", path=str(path),
                                 line=number)
            parts = [x for x in re.split(r"[,\s]+", m.group(2)) if x]   # commas or spaces
            bad = [x for x in parts if not (x.isascii() and x.isdigit())]
            if bad or not parts:
                raise InputError(f"ball sensor id {bad[0] if bad else ''!r} is not a whole "
                                 "number; list the half's ball ids separated by commas",
                                 path=str(path), line=number, field="balls",
                                 value=bad[0] if bad else "")
            ids = [_sensor_id(x, path, number) for x in parts]
            for sid in ids:
                if sid in owners:
                    raise InputError(f"ball {sid} is also {owners[sid][0]}'s sensor (line "
                                     f"{owners[sid][1]}): every sensor id belongs to one ball "
                                     "or person", path=str(path), line=number)
            balls[half] = frozenset(ids)
            ball_lines.update((sid, number) for sid in ids)
            continue
        if (m := _PERSON.match(line)) is None:
            raise InputError(f"unrecognised metadata line {line!r}", path=str(path), line=number)
        sensors: dict[str, int] = {}
        for part in m.group("sensors").split(","):
            if (s := _SENSOR.match(part)) is None:
                raise InputError(f"unrecognised sensor {part.strip()!r}", path=str(path),
                                 line=number)
            limb = "hand" if s.group(2).lower() in ("arm", "hand") else "leg"
            sensors[f"{s.group(1).lower()}_{limb}"] = _sensor_id(s.group(3), path, number)
        if "left_leg" not in sensors or "right_leg" not in sensors:
            raise InputError("a person needs a left and a right leg sensor", path=str(path),
                             line=number)
        name = normalize_name(m.group("name"))
        if name in names:
            raise InputError(f"{name} is listed twice (also on line {names[name]})",
                             path=str(path), line=number)
        names[name] = number
        for sid in sensors.values():
            if sid in ball_lines:
                raise InputError(f"sensor {sid} of {name} is also a ball's (line "
                                 f"{ball_lines[sid]}): every sensor id belongs to one ball or "
                                 "person", path=str(path), line=number)
            if sid in owners:
                raise InputError(f"sensor {sid} of {name} is also {owners[sid][0]}'s (line "
                                 f"{owners[sid][1]}): every sensor id belongs to one person",
                                 path=str(path), line=number)
            owners[sid] = (name, number)
        if name.lower() == "referee":
            referee = Person(name, None, **sensors)
        elif team is None:
            raise InputError(f"{name} is listed before any 'Team X:' header", path=str(path),
                             line=number)
        else:
            players.append(Person(name, team, **sensors))
    if referee is None or not players or not balls:
        raise InputError("metadata needs a Balls block, team blocks and a Referee line",
                         path=str(path))
    return GameMetadata(players=tuple(players), referee=referee,
                        balls=MappingProxyType(dict(sorted(balls.items()))))


# --------------------------------------------------------------------------------------------------
# Referee-event annotation files.


@dataclass(frozen=True)
class AnnotationRow:
    """One data row of a referee-event file.

    Attributes:
        line: 1-based line number in the file.
        event_id: the id column as written (e.g. ``"2010"``).
        name: the event-name column as written (e.g. ``"Begin"``, ``"Ben Muller End"``).
        t_ps: annotation-clock time in ps since the half's annotation zero.
        counter: the event counter, if present and numeric.
    """

    line: int
    event_id: str
    name: str
    t_ps: int
    counter: int | None


_TIME = re.compile(r"^(\d+):(\d{1,2}):(\d{1,2})(?:\.(\d{1,12}))?$")


def parse_annotation_time(text: str) -> int:
    """Annotation time ``HH:MM:SS.mmm`` (or ``0``) in integer picoseconds.

    Raises:
        ValueError: ``text`` is not such a time.

    Example:
        >>> parse_annotation_time("00:29:36.577")
        1776577000000000
    """
    text = text.strip()
    if text == "0":
        return 0
    m = _TIME.match(text)
    if m is None:
        raise ValueError(f"{text!r} is not an annotation time HH:MM:SS.mmm")
    h, mnt, s, frac = m.groups()
    frac_ps = int((frac or "0").ljust(12, "0"))
    return ((int(h) * 60 + int(mnt)) * 60 + int(s)) * C.PS_PER_S + frac_ps


def _decode(raw: bytes) -> str:
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        return raw.decode("cp1252", errors="replace")


def _check_nothing_after(lines: list[str], empty: int, sep: str, path) -> None:
    """Reading stops at an empty row (spec §4.2); an event row after it, before the
    ``Statistic:`` block, would be lost unseen: refuse the file, naming both lines."""
    for number, line in enumerate(lines[empty:], start=empty + 1):
        fields = [f.strip() for f in line.split(sep)]
        if not any(fields):
            continue
        if fields[0].lower().startswith("statistic"):
            return
        if len(fields) >= 3 and fields[1]:
            try:
                parse_annotation_time(fields[2])
            except ValueError:
                continue
            raise InputError(f"the empty row on line {empty} ends the events (spec §4.2), but "
                             f"an event row follows ({line.strip()!r}); remove the empty row",
                             path=str(path), line=number)


def read_annotation_rows(path: str | os.PathLike[str]) -> tuple[AnnotationRow, ...]:
    """The data rows of a referee-event file, however it is laid out.

    Accepts ``,`` or ``;`` (whichever the first line uses), an optional ``event_id`` header, and 4
    or 5 columns. Reading stops at the first empty row (also ``;;;;``) or at ``Statistic:``, since
    what follows is the organisers' summary block, not events; an event row after an empty row
    (before ``Statistic:``) is an error, not a silent loss.

    Raises:
        InputError: a data row without a name or with a bad time, naming the line.
    """
    text = _decode(Path(path).read_bytes())
    lines = text.splitlines()
    first = next((ln for ln in lines if ln.strip()), "")
    sep = ";" if first.count(";") > first.count(",") else ","
    rows: list[AnnotationRow] = []
    for number, line in enumerate(lines, start=1):
        fields = [f.strip() for f in line.split(sep)]
        if not any(fields):
            _check_nothing_after(lines, number, sep, path)
            break
        if fields[0].lower().startswith("statistic"):
            break
        if number == 1 and fields[0].lower() == "event_id":
            continue
        if len(fields) < 3 or not fields[1]:
            raise InputError(f"expected event_id{sep}event_name{sep}event_time_real"
                             f"{sep}event_counter, got {line!r}", path=str(path), line=number)
        try:
            t_ps = parse_annotation_time(fields[2])
        except ValueError as exc:
            raise InputError(str(exc), path=str(path), line=number, field="event_time_real",
                             value=fields[2]) from None
        counter = int(fields[3]) if len(fields) > 3 and fields[3].isdigit() else None
        rows.append(AnnotationRow(number, fields[0], fields[1], t_ps, counter))
    return tuple(rows)


def clock_offset(half: int, clock: str | Mapping[int, int] = "A",
                 first_end_ps: int | None = None) -> int:
    """Picoseconds added to annotation time before adding the half start (spec §4.3).

    Args:
        half: 1 or 2.
        clock: ``"A"`` (no offset, the default), ``"B"`` (the half's first End on the half start),
            ``"C"`` (B minus the measured lag, 0.9885 s / 0.84795 s), or an explicit
            ``{half: offset_ps}`` mapping.
        first_end_ps: the half's first End in annotation ps (for B and C); the real files' values
            (3.092 s, 0.455 s) when omitted.

    Example:
        >>> clock_offset(1, "C")
        -4080500000000
    """
    if half not in C.HALVES:
        raise SpecError(f"half={half!r}: use 1 or 2")
    if isinstance(clock, Mapping):
        if half not in clock:
            raise SpecError(f"clock offsets {dict(clock)} have no entry for half {half}")
        return int(clock[half])
    if clock not in C.CLOCK_OPTIONS:
        raise SpecError(f"clock={clock!r}: use 'A', 'B', 'C' (spec §4.3) or {{half: offset_ps}}")
    if clock == "A":
        return 0
    first_end = C.FIRST_END_PS[half] if first_end_ps is None else first_end_ps
    return -first_end - (C.CLOCK_C_LAG_PS[half] if clock == "C" else 0)


def _to_ts(t_ps: int, half: int, offset: int) -> int:
    return C.HALVES[half][0] + offset + t_ps


def _kind(row: AnnotationRow, half: int, ids: tuple[str, str] | None) -> str | None:
    """``"begin"``/``"end"`` from the event name (short or long), else from the event id."""
    word = row.name.split()[-1].lower() if row.name.split() else ""
    if word in ("begin", "end"):
        return word
    if ids is not None and row.event_id in ids:
        return "begin" if row.event_id == ids[0] else "end"
    return None


@dataclass(frozen=True)
class Interruption:
    """One stopped-game interval of a half, in sensor ps.

    Attributes:
        half: 1 or 2.
        begin_ts: when the game stops.
        end_ts: when it resumes (the half end if the file has no matching End).
        begin_line: file line of the Begin row (``None`` if synthesised at the half start).
        end_line: file line of the End row (``None`` if closed by the half end).
    """

    half: int
    begin_ts: int
    end_ts: int
    begin_line: int | None
    end_line: int | None

    @property
    def closed_by_half_end(self) -> bool:
        """Whether no End row closes this interval (the half end does)."""
        return self.end_line is None


@dataclass(frozen=True)
class InterruptionMarker:
    """A point in the stream where the game stops (``kind="begin"``) or resumes (``"end"``)."""

    ts: int
    kind: str
    half: int


#: Arrow schema of interruption markers, for merging into the sensor stream by ``ts``.
MARKER_SCHEMA = pa.schema([
    pa.field("ts", pa.int64(), nullable=False),
    pa.field("kind", pa.string(), nullable=False),
    pa.field("half", pa.int8(), nullable=False),
], metadata={"epic.event_time": "ts", "epic.time_unit": "ps"})


def read_interruptions(path: str | os.PathLike[str], half: int, *,
                       clock: str | Mapping[int, int] = "A") -> tuple[Interruption, ...]:
    """The game interruptions of one half, paired by order (never by the counter column).

    Rows must alternate Begin/End. A leading End is paired with the half start (the game is
    stopped from the half start to the first End); a trailing Begin is closed by the half end.

    Args:
        path: a ``Game Interruption`` file.
        half: 1 or 2 (selects the half start and end and the event ids).
        clock: the annotation-clock option, see :func:`clock_offset`.

    Raises:
        InputError: two Begins or two Ends in a row, a row that is neither, an End earlier than
            its Begin, or a time after the half's end.
    """
    rows = read_annotation_rows(path)
    if not rows and not Path(path).read_bytes().strip():
        raise InputError("the file is empty: expected the header event_id,event_name,"
                         "event_time_real,event_counter and the half's Begin/End rows (a half "
                         "without interruptions: the header alone)", path=str(path), line=1)
    ids = C.INTERRUPTION_IDS.get(half)
    kinds = []
    for row in rows:
        kind = _kind(row, half, ids)
        if kind is None:
            raise InputError(f"{row.name!r} (id {row.event_id}) is neither a Begin nor an End",
                             path=str(path), line=row.line, field="event_name", value=row.name)
        kinds.append(kind)
    first_end = next((r.t_ps for r, k in zip(rows, kinds) if k == "end"), None)
    offset = clock_offset(half, clock, first_end)
    start, end = C.HALVES[half]
    out: list[Interruption] = []
    open_row: AnnotationRow | None = None
    for i, (row, kind) in enumerate(zip(rows, kinds)):
        if kind == "begin":
            if open_row is not None:
                raise InputError("two Begin rows in a row; interruptions pair Begin/End by order",
                                 path=str(path), line=row.line)
            if out and _to_ts(row.t_ps, half, offset) < out[-1].end_ts:
                raise InputError(f"this Begin ({row.t_ps / C.PS_PER_S:.3f} s) is earlier than "
                                 f"the End on line {out[-1].end_line} "
                                 f"({(out[-1].end_ts - start - offset) / C.PS_PER_S:.3f} s):"
                                 " interruptions come in time order and do not overlap",
                                 path=str(path), line=row.line, field="event_time_real")
            open_row = row
        elif open_row is None and i == 0:
            out.append(Interruption(half, start, _to_ts(row.t_ps, half, offset), None, row.line))
        elif open_row is None:
            raise InputError("an End row without a Begin before it", path=str(path),
                             line=row.line)
        else:
            b, e = _to_ts(open_row.t_ps, half, offset), _to_ts(row.t_ps, half, offset)
            if e < b:
                raise InputError(f"this End ({row.t_ps / C.PS_PER_S:.3f} s) is earlier than its "
                                 f"Begin on line {open_row.line} "
                                 f"({open_row.t_ps / C.PS_PER_S:.3f} s)", path=str(path),
                                 line=row.line, field="event_time_real")
            out.append(Interruption(half, b, e, open_row.line, row.line))
            open_row = None
    if open_row is not None:
        out.append(Interruption(half, _to_ts(open_row.t_ps, half, offset), end, open_row.line,
                                None))
    for iv in out:   # (before the start is possible: clock "B" moves the real 1st half's
        #               first Begin 3.092 s before the kick-off)
        for ts, line in ((iv.begin_ts, iv.begin_line), (iv.end_ts, iv.end_line)):
            if line is not None and ts > end:
                raise InputError(f"a time after the end of half {half} "
                                 f"({(ts - start) / C.PS_PER_S:.3f} s after its start; the half "
                                 f"lasts {(end - start) / C.PS_PER_S:.3f} s)", path=str(path),
                                 line=line, field="event_time_real")
    return tuple(out)


def read_game_interruptions(referee_dir: str | os.PathLike[str] | None = None, *,
                            clock: str | Mapping[int, int] = "A") -> tuple[Interruption, ...]:
    """Both halves' interruptions from ``<referee_dir>/Game Interruption/{1st,2nd} Half.csv``.

    ``referee_dir`` defaults to the shared ``referee-events`` directory.
    """
    base = Path(referee_dir) if referee_dir is not None else shared_dir() / "referee-events"
    out: list[Interruption] = []
    for half, name in C.HALF_FILE_NAMES.items():
        out.extend(read_interruptions(base / "Game Interruption" / f"{name}.csv", half,
                                      clock=clock))
    return tuple(out)


def interruption_markers(interruptions: Iterable[Interruption]) -> tuple[InterruptionMarker, ...]:
    """Begin/end markers in time order, for a merge by ``ts`` into the sensor stream.

    At equal ``ts`` an ``end`` sorts before a ``begin``, so a resume and a new stop at the same
    instant leave the game stopped.
    """
    markers = [m for i in interruptions
               for m in (InterruptionMarker(i.begin_ts, "begin", i.half),
                         InterruptionMarker(i.end_ts, "end", i.half))]
    return tuple(sorted(markers, key=lambda m: (m.ts, m.kind != "end")))


def markers_table(markers: Iterable[InterruptionMarker]) -> pa.Table:
    """Markers as an Arrow table of :data:`MARKER_SCHEMA`."""
    markers = list(markers)
    return pa.table([pa.array([m.ts for m in markers], pa.int64()),
                     pa.array([m.kind for m in markers], pa.string()),
                     pa.array([m.half for m in markers], pa.int8())], schema=MARKER_SCHEMA)


@dataclass(frozen=True)
class Shot:
    """One annotated shot on goal.

    Attributes:
        player: the shooter (metadata spelling).
        ts: sensor ps of the annotation.
        t_ps: annotation-clock ps.
        half: 1 or 2.
        event_id: the id column as written.
        line: the file line.
    """

    player: str
    ts: int
    t_ps: int
    half: int
    event_id: str
    line: int


def _known_player(name: str, players, path, line: int | None) -> str:
    """``name`` if it is one of ``players`` (None: the default metadata's), else InputError."""
    if players is None:
        players = {p.name for p in read_metadata().players}
    if name not in players:
        raise InputError(f"player {name!r} is not in the metadata (after the spelling repairs "
                         f"of normalize_name); its players: {', '.join(sorted(players))}",
                         path=str(path), line=line, field="player", value=name)
    return name


def read_shots(path: str | os.PathLike[str], half: int, *,
               clock: str | Mapping[int, int] = "A",
               first_end_ps: int | None = None,
               players: Collection[str] | None = None) -> tuple[Shot, ...]:
    """The annotated shots of a ``Shot on Goal`` file, in file order.

    For clock options B and C, ``first_end_ps`` is the half's first interruption End (the real
    files' value when omitted). ``players``: the names a shooter may have (default: the players
    of the shared metadata); another name is an :class:`InputError` naming the file and line.
    """
    offset = clock_offset(half, clock, first_end_ps)
    if players is None:
        players = {p.name for p in read_metadata().players}
    return tuple(Shot(_known_player(normalize_name(r.name), players, path, r.line),
                      _to_ts(r.t_ps, half, offset), r.t_ps, half, r.event_id, r.line)
                 for r in read_annotation_rows(path))


@dataclass(frozen=True)
class Possession:
    """One annotated ball possession (Begin to End; equal times mean a single touch).

    Attributes:
        player: metadata spelling.
        begin_ts, end_ts: sensor ps.
        half: 1 or 2.
        begin_line, end_line: file lines.
    """

    player: str
    begin_ts: int
    end_ts: int
    half: int
    begin_line: int
    end_line: int


def read_possession(path: str | os.PathLike[str], half: int, *,
                    clock: str | Mapping[int, int] = "A",
                    first_end_ps: int | None = None,
                    players: Collection[str] | None = None) -> tuple[Possession, ...]:
    """The possessions of one ``Ball Possession`` file, paired Begin/End by order.

    Raises:
        InputError: rows that do not alternate Begin/End, an unmatched row, or a player not
            among ``players`` (default: the players of the shared metadata).
    """
    offset = clock_offset(half, clock, first_end_ps)
    if players is None:
        players = {p.name for p in read_metadata().players}
    out: list[Possession] = []
    open_row: AnnotationRow | None = None
    for row in read_annotation_rows(path):
        kind = _kind(row, half, None)
        if kind == "begin" and open_row is None:
            open_row = row
        elif kind == "end" and open_row is not None:
            player = _known_player(normalize_name(open_row.name.rsplit(None, 1)[0]), players,
                                   path, open_row.line)
            out.append(Possession(player, _to_ts(open_row.t_ps, half, offset),
                                  _to_ts(row.t_ps, half, offset), half, open_row.line, row.line))
            open_row = None
        else:
            raise InputError(f"possession rows must alternate Begin/End; got {row.name!r}",
                             path=str(path), line=row.line, field="event_name", value=row.name)
    if open_row is not None:
        raise InputError("possession Begin without End", path=str(path), line=open_row.line)
    return tuple(out)


def read_possession_dir(directory: str | os.PathLike[str], half: int, *,
                        clock: str | Mapping[int, int] = "A",
                        players: Collection[str] | None = None
                        ) -> dict[str, tuple[Possession, ...]]:
    """Every ``<Player>.csv`` in a ``Ball Possession/<half>`` directory, keyed by metadata name
    (a file named after nobody in ``players``, default the shared metadata's, is an
    :class:`InputError`)."""
    if players is None:
        players = {p.name for p in read_metadata().players}
    out = {}
    for path in sorted(Path(directory).glob("*.csv")):
        name = _known_player(normalize_name(path.stem), players, path, None)
        out[name] = read_possession(path, half, clock=clock, players=players)
    return out
