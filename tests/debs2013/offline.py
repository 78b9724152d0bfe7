"""An exact offline computation of DEBS 2013 queries 1 and 3, written from the spec alone.

This module is the *reference* of ``test_correctness.py``. It deliberately shares no code with
``debs2013/q1.py`` / ``q3.py`` (nor with the readers): it reads the raw game CSV itself with
pyarrow, works on whole numpy arrays per player, and implements the rules of
``shared/docs/debs2013-spec.md`` sections 5 and 7 directly. Where the spec leaves a choice open the
configured default of ``debs2013.config`` is used, and each such choice is named below.

Common rules (spec §2, §5, §7):

* A player's sensors are his two shoes (hands and referee excluded: spec §2 default). His
  *state* after a shoe row is the latest ``|v|`` and latest ``(x, y)`` of each shoe seen so far;
  speed and position are the means over the shoes that have reported (one shoe until both have).
* Time weighting (choice: ``max_gap_ps = 1 s``): the state after row ``k`` holds from ``t_k`` to
  the player's next shoe row if that comes within 1 s; a longer gap (a drop-out, half-time, the
  end of the data) is unobserved time as a whole, so row ``k`` then holds for nothing (only
  observed time counts).
  Rows with equal ``ts`` are taken in file order, so all but the last of them hold for 0 ps.
* Time convention: a quantity "at ``t``" counts rows with ``ts < t`` only.

Query 1 (spec §5):

* class = number of speed limits strictly below the speed (boundary ``<=`` goes to the lower
  class, the spec's default), limits in µm/s as the spec's raw thresholds;
* distance = the integral of the speed over the observed time (the default ``distance="speed"``:
  one speed source for both speed and distance);
* the 1-second rule, short stretch to the *next* lasting intensity (spec default): a *run* is a
  maximal sequence of rows with one class; it *lasts* if the next run starts >= 1 s after it; a
  run that lasts and has a different class than the current segment starts a new segment at the
  end of the previous lasting run (so everything in between joins it); a lasting run of the same
  class absorbs the stretches in between. The decision is known at ``run start + 1 s``. The
  player's first row opens his first segment; if its class does not last 1 s, the first segment
  takes the class of the first run that lasts (a short stretch is not a segment of its own and
  goes to the next lasting intensity; nothing comes before it), decided at that run's start +
  1 s; until then q1a shows the first class (``Segments.provisional``).
* q1a at an emission instant ``t`` (grid ``origin + m * 20 ms``): the segment in force at ``t``
  (decisions with decision time ``<= t``), distance ``D(t) - D(start)`` in m, speed = distance /
  observed time in km/h; a closed segment gives one more row ``ts_start = start, ts_stop = end``
  (written at its decision time).
* q1b over a window ``[a, t)``: per intensity, the observed time and distance of the final
  segments of that intensity inside ``[a, t)`` (segments straddling ``a`` count in proportion).

Query 3 (spec §7): the time of each position sample goes to the cell of its (mean) position,
computed directly on each of the four grids with exact integer arithmetic (``i = floor(x·nx /
52483)``, ``j = floor((y + 33960)·ny / 67925)``, the max edge in the last cell, outside the field in
no cell); percent = 100 · cell time / the player's time in the field in the window.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

PS = 10**12
KICK_OFF = 10753295594424116
# spec §1.3 raw thresholds (µm/s) and §5 class names, §3 field
SPEED_LIMITS = np.array([277_778, 3_055_556, 3_888_889, 4_722_222, 6_666_667], np.float64)
CLASSES = ("standing", "trot", "low", "medium", "high", "sprint")
X_MIN, X_MAX, Y_MIN, Y_MAX = 0, 52483, -33960, 33965
# spec §2: shoe sensors (left, right) per player
PLAYERS = {
    "Nick Gertje": (13, 14), "Dennis Dotterweich": (47, 16), "Niklas Waelzlein": (49, 88),
    "Wili Sommer": (19, 52), "Philipp Harlass": (53, 54), "Roman Hartleb": (23, 24),
    "Erik Engelhardt": (57, 58), "Sandro Schneider": (59, 28),
    "Leon Krapf": (61, 62), "Kevin Baer": (63, 64), "Luca Ziegler": (65, 66),
    "Ben Mueller": (67, 68), "Vale Reitstetter": (69, 38), "Christopher Lee": (71, 40),
    "Leon Heinze": (73, 74), "Leo Langhans": (75, 44),
}
COLUMNS = ["sid", "ts", "x", "y", "z", "v", "a", "vx", "vy", "vz", "ax", "ay", "az"]


def read_shoes(path) -> dict[str, dict[str, np.ndarray]]:
    """The shoe rows of every player from the raw CSV, in file order: ``slot`` (0 left, 1 right),
    ``ts``, ``x``, ``y``, ``v`` as int64 arrays."""
    table = pacsv.read_csv(
        str(path), read_options=pacsv.ReadOptions(column_names=COLUMNS),
        convert_options=pacsv.ConvertOptions(column_types={c: pa.int64() for c in COLUMNS},
                                             include_columns=["sid", "ts", "x", "y", "v"]))
    cols = {c: table.column(c).to_numpy() for c in ("sid", "ts", "x", "y", "v")}
    out = {}
    for name, (left, right) in PLAYERS.items():
        m = (cols["sid"] == left) | (cols["sid"] == right)
        rows = {c: v[m] for c, v in cols.items()}
        order = np.argsort(rows["ts"], kind="stable")
        rows = {c: v[order] for c, v in rows.items()}
        rows["slot"] = (rows.pop("sid") == right).astype(np.int64)
        out[name] = rows
    return out


def _latest(slot: np.ndarray, values: np.ndarray, s: int):
    """Per row: the latest value of shoe ``s`` at or before it, and whether there is one."""
    pos = np.where(slot == s, np.arange(len(slot)), -1)
    last = np.maximum.accumulate(pos)
    return values[np.maximum(last, 0)], last >= 0


@dataclass
class PlayerState:
    """One player's samples: ``t`` (ts), ``hold`` (ps each sample stands for, given the end of
    the data ``end``), ``vsum``/``n`` (sum and count of the latest shoe speeds), ``xsum``/``ysum``
    (sum of the latest shoe positions), ``cls`` (intensity class) and cumulative observed time
    ``T`` / distance ``D`` (µm) *before* each sample."""

    t: np.ndarray
    hold: np.ndarray
    n: np.ndarray
    vsum: np.ndarray
    xsum: np.ndarray
    ysum: np.ndarray
    cls: np.ndarray
    T: np.ndarray
    D: np.ndarray
    gap: int

    def at(self, q: np.ndarray, live: bool = False):
        """(T, D in µm, observed) at times ``q``: rows with ts < q count. The piece of the
        latest row before ``q`` counts up to ``q`` if it is observed: its next row comes
        within the gap; with ``live`` (what a live reading can know at ``q``, q1a) if ``q`` is
        within the gap of it."""
        q = np.asarray(q, np.int64)
        k = np.searchsorted(self.t, q, side="left") - 1
        ok = k >= 0
        kk = np.maximum(k, 0)
        since = q - self.t[kk]
        if live:
            dt = np.where(ok & (since <= self.gap), since, 0)
        else:
            has_next = kk + 1 < len(self.t)
            nxt = self.t[np.minimum(kk + 1, len(self.t) - 1)]
            dt = np.where(ok & has_next & (nxt - self.t[kk] <= self.gap), since, 0)
        speed = self.vsum[kk] / self.n[kk]
        return (np.where(ok, self.T[kk], 0) + dt,
                np.where(ok, self.D[kk] + speed * dt * 1e-12, 0.0),
                ok & (since <= self.gap))


def player_state(rows: dict[str, np.ndarray], gap: int = PS) -> PlayerState:
    t, slot = rows["ts"], rows["slot"]
    n = np.zeros(len(t), np.int64)
    vsum = np.zeros(len(t), np.int64)
    xsum = np.zeros(len(t), np.int64)
    ysum = np.zeros(len(t), np.int64)
    for s in (0, 1):
        v, has = _latest(slot, rows["v"], s)
        x, _ = _latest(slot, rows["x"], s)
        y, _ = _latest(slot, rows["y"], s)
        n += has
        vsum += np.where(has, v, 0)
        xsum += np.where(has, x, 0)
        ysum += np.where(has, y, 0)
    speed = vsum / n
    cls = (speed[:, None] > SPEED_LIMITS[None, :]).sum(axis=1)
    hold = np.where(np.diff(t) <= gap, np.diff(t), 0)
    T = np.concatenate([[0], np.cumsum(hold)])
    D = np.concatenate([[0.0], np.cumsum(speed[:-1] * hold * 1e-12)])  # µm/s * ps -> µm
    return PlayerState(t, hold, n, vsum, xsum, ysum, cls, T, D, gap)


@dataclass
class Segments:
    """A player's Q1 segments after the 1-second rule: ``start`` (ts), ``cls``, ``decided`` (the
    event time at which the segment is known; the first segment at its start)."""

    start: np.ndarray
    cls: np.ndarray
    decided: np.ndarray
    #: (class, until): the first segment's class as q1a shows it before ``until``, when its
    #: first class did not last and another took its place (None: no such change)
    provisional: tuple[int, int] | None = None


def segments(st: PlayerState, data_end: int, min_segment: int = PS) -> Segments:
    """The 1-second rule (short stretches go to the next lasting intensity). ``data_end`` is the
    last ``ts`` of the whole stream: the player's last run lasts if it began 1 s before it (at the
    end of the input a stretch that has not lasted stays with the current segment)."""
    t, cls = st.t, st.cls
    change = np.concatenate([[0], np.nonzero(cls[1:] != cls[:-1])[0] + 1])
    run_start = t[change]
    run_cls = cls[change]
    run_end = np.concatenate([run_start[1:], [data_end]])
    # several rows at the player's first instant: the last of them sets the first class
    first = int(np.searchsorted(run_start, run_start[0], side="right")) - 1
    starts, classes, decided = [int(run_start[0])], [int(run_cls[first])], [int(run_start[0])]
    cur = int(run_cls[first])
    last_lasting_end = int(run_end[first])  # the first class stands until something lasts
    pending_first = run_end[first] - run_start[first] < min_segment
    provisional = None
    for r in range(first + 1, len(run_start)):
        if run_end[r] - run_start[r] < min_segment:
            continue
        c = int(run_cls[r])
        if pending_first:
            # the first class did not last: the first segment (from the player's first row)
            # takes the class of the first run that does
            pending_first = False
            if c != cur:
                provisional = (cur, int(run_start[r]) + min_segment)
                classes[0] = c
                cur = c
            last_lasting_end = int(run_end[r])
            continue
        if c != cur:
            # the stretch since the previous lasting run goes to this run
            starts.append(last_lasting_end)
            classes.append(c)
            decided.append(int(run_start[r]) + min_segment)
            cur = c
        last_lasting_end = int(run_end[r])
    return Segments(np.array(starts, np.int64), np.array(classes, np.int64),
                    np.array(decided, np.int64), provisional)


def q1a_rows(st: PlayerState, seg: Segments, instants: np.ndarray):
    """Expected q1a rows: instant rows at ``instants`` and closing rows of decided segments.

    Returns a list of ``(ts_stop, ts_start, class, distance_m, speed_kmh, closing)``; a closing
    row's ``ts_stop`` is the segment's end (it is written at the decision, ``seg.decided``)."""
    out = []
    T, D, obs = st.at(instants, live=True)
    j = np.searchsorted(seg.decided, instants, side="right") - 1
    ok = obs & (j >= 0)
    jj = np.maximum(j, 0)
    S = seg.start[jj]
    TS, DS, _ = st.at(S)
    shown = seg.cls[jj].copy()
    if seg.provisional is not None:
        before = (jj == 0) & (instants < seg.provisional[1])
        shown[before] = seg.provisional[0]
    for t, s, c, dt, dd in zip(instants[ok].tolist(), S[ok].tolist(), shown[ok].tolist(),
                               (T - TS)[ok].tolist(), (D - DS)[ok].tolist()):
        out.append((t, s, c, dd * 1e-6, (dd * 1e-6) / (dt * 1e-12) * 3.6 if dt > 0 else 0.0,
                    False))
    if len(seg.start) > 1:
        TS, DS, _ = st.at(seg.start)
        for k in range(1, len(seg.start)):
            dt, dd = int(TS[k] - TS[k - 1]), float(DS[k] - DS[k - 1])
            out.append((int(seg.start[k]), int(seg.start[k - 1]), int(seg.cls[k - 1]),
                        dd * 1e-6, (dd * 1e-6) / (dt * 1e-12) * 3.6 if dt > 0 else 0.0, True))
    return out


def q1b_cumulative(st: PlayerState, seg: Segments, q: np.ndarray):
    """Per intensity, observed time (ps) and distance (µm) spent in segments of that intensity
    before each time in ``q``: arrays of shape (6, len(q))."""
    TS, DS, _ = st.at(seg.start)
    # totals of the completed segments per class before segment j (prefix sums over segments)
    k = len(seg.start)
    onehot = np.zeros((6, k), np.float64)
    onehot[seg.cls, np.arange(k)] = 1.0
    segT = np.append(np.diff(TS), 0).astype(np.float64)
    segD = np.append(np.diff(DS), 0.0)
    baseT = np.concatenate([np.zeros((6, 1)), np.cumsum(onehot * segT, axis=1)[:, :-1]], axis=1)
    baseD = np.concatenate([np.zeros((6, 1)), np.cumsum(onehot * segD, axis=1)[:, :-1]], axis=1)
    q = np.asarray(q, np.int64)
    j = np.searchsorted(seg.start, q, side="left") - 1  # segment containing q (start < q)
    ok = j >= 0
    jj = np.maximum(j, 0)
    T, D, _ = st.at(q)
    curT = np.where(ok, T - TS[jj], 0)
    curD = np.where(ok, D - DS[jj], 0.0)
    outT = np.where(ok, baseT[:, jj], 0.0)
    outD = np.where(ok, baseD[:, jj], 0.0)
    cls = seg.cls[jj]
    for c in range(6):
        m = ok & (cls == c)
        outT[c, m] += curT[m]
        outD[c, m] += curD[m]
    return outT, outD


def q1b_window(st: PlayerState, seg: Segments, ends: np.ndarray, length_ps: int | None,
               data_end: int, origin: int = KICK_OFF):
    """Per intensity (time s, distance m) in the windows ``[max(origin, t - length), t)``; no
    time after ``data_end`` (the last instant may lie after the end of the input)."""
    ends = np.asarray(ends, np.int64)
    starts = np.full(len(ends), origin, np.int64) if length_ps is None else np.maximum(
        origin, ends - length_ps)
    T1, D1 = q1b_cumulative(st, seg, np.minimum(ends, data_end))
    T0, D0 = q1b_cumulative(st, seg, starts)
    return (T1 - T0) * 1e-12, (D1 - D0) * 1e-6


# -- Query 3 -------------------------------------------------------------------------------------

def cells(st: PlayerState, grid: tuple[int, int]) -> np.ndarray:
    """Cell id ``j*nx + i`` of each sample's mean position on ``grid``; -1 outside the field."""
    nx, ny = grid
    w, h = X_MAX - X_MIN, Y_MAX - Y_MIN
    sx = st.xsum - st.n * X_MIN
    sy = st.ysum - st.n * Y_MIN
    inside = (sx >= 0) & (sx <= st.n * w) & (sy >= 0) & (sy <= st.n * h)
    i = np.minimum(sx * nx // (st.n * w), nx - 1)
    j = np.minimum(sy * ny // (st.n * h), ny - 1)
    return np.where(inside, j * nx + i, -1)


def heat_windows(st: PlayerState, grid: tuple[int, int], starts, ends, data_end: int):
    """Per-cell time (ps) of the player in each window ``[starts[k], min(ends[k], data_end))``
    on ``grid``: a dense float array (len(ends), nx*ny); its row sum is the in-field time.

    Each sample's hold ``[t, next t)`` (empty when the next row is more than the gap away, or
    there is none) is split at the window bounds; the pieces
    are summed per cell between consecutive bounds and accumulated, so a window is the difference
    of two cumulative rows."""
    nx, ny = grid
    starts = np.asarray(starts, np.int64)
    ends = np.minimum(np.asarray(ends, np.int64), data_end)
    t = st.t
    hold_end = np.minimum(np.concatenate([t[:-1] + st.hold, [t[-1]]]), data_end)
    c = cells(st, grid)
    keep = (c >= 0) & (hold_end > t)
    lo, hi, c = t[keep], hold_end[keep], c[keep]
    q = np.unique(np.concatenate([starts, ends]))
    # split every hold at the bounds q strictly inside it
    k0 = np.searchsorted(q, lo, side="right")
    k1 = np.searchsorted(q, hi, side="left")
    reps = k1 - k0 + 1
    idx = np.repeat(np.arange(len(lo)), reps)
    off = np.arange(len(idx)) - np.repeat(np.cumsum(reps) - reps, reps)
    k = k0[idx] + off  # the piece lies in [q[k-1], q[k]) (k = len(q): after the last bound)
    a = np.where(off == 0, lo[idx], q[np.minimum(k - 1, len(q) - 1)])
    b = np.where(k < k1[idx], q[np.minimum(k, len(q) - 1)], hi[idx])
    dur = (b - a).astype(np.float64)
    ncell = nx * ny
    per = np.bincount(k * ncell + c[idx], weights=dur, minlength=(len(q) + 1) * ncell)
    cum = np.cumsum(per.reshape(len(q) + 1, ncell), axis=0)  # row k: time before q[k]
    ia = np.searchsorted(q, starts)
    ib = np.searchsorted(q, ends)
    return cum[ib] - cum[ia]


def cell_corners(cell: int, grid: tuple[int, int]) -> tuple[float, float, float, float]:
    nx, ny = grid
    w, h = (X_MAX - X_MIN) / nx, (Y_MAX - Y_MIN) / ny
    i, j = cell % nx, cell // nx
    return (X_MIN + i * w, Y_MIN + j * h, X_MIN + (i + 1) * w, Y_MIN + (j + 1) * h)
