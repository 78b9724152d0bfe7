"""Query 4, shot on goal: :class:`ShotOperator` over the ball-hitter's events.

**Input**: :data:`debs2013.q2.BALL_EVENT_SCHEMA` from a :class:`~debs2013.q2.BallHitter` built
with ``ball_rows=True`` (every row of the ball in play, hits with the shooter and the goal his team
attacks, ``OUT`` rows and interruption markers). **Output**: :data:`Q4_SCHEMA`, the ball's raw
fields per reported row with the shooter's ``player_id``: ``ts, player_id, x, y, z, v (|v|), vx,
vy, vz, a (|a|), ax, ay, az``.

**Rules** (spec §3, §8; switches in :class:`~debs2013.config.Q4Config`):

* Projection test of a ball row towards goal ``g`` (x range, goal line ``y_g``, height): with the
  velocity ``|v|·(vx, vy, vz)·1e-7`` mm/s, ``t* = (y_g − y) / v_y`` must satisfy
  ``0 < t* ≤ 1.5 s``, ``x_lo < x + v_x·t* < x_hi`` and ``max(0, z + v_z·t* [− ½·9.81 m/s²·t*²]) <
  z_max``. Clamping the height at 0 is the *bounce handling*: a ball projected into the ground is
  taken as rolling or bouncing on along its line, so a low shot that bounces before the line still
  counts (a real bounce then shows as a row whose projection is re-tested like any other).
* *Pending state*: a hit (``HIT`` row) opens a pending state for ``pending_ps`` (0.2 s): the test
  runs on the hit row and on every following ball row; the first row that passes starts the shot
  and is the first row reported. This covers the kick spike (the hit is detected at the first row
  over 55 m/s², before the ball has its new velocity) and a curve ball that lines up with the goal
  shortly after the kick. Another hit replaces the pending state; an ``OUT`` row or a ``STOP``
  marker cancels it; so does the end of the window.
* *Settled start* (``settle_acc_raw``, default the hit threshold 55 m/s²): a shot starts only at
  a row whose ``|a|`` is below it, i.e. once the touch's acceleration spike has settled. Inside
  the spike (a few ms around a touch) the ball's instantaneous velocity is a blend of the old and
  the new one, so a ball that was travelling goalwards and is stopped or turned by a player
  projects into the goal for a few rows; without this rule such a touch is reported as a 2-10 ms
  "shot". A real shot keeps its projection after the spike and is reported from the first settled
  row (a few ms after the kick); a fast pass whose settled path truly reaches the goal mouth within
  1.5 s is a shot by the spec and is reported. ``None`` tests the spike's rows too.
* A live shot reports every ball row of the ball in play while the test towards the same goal
  passes. It ends (the ending row is not reported) at (a) the first row whose projection no longer
  reaches that goal within 1.5 s (the trajectory changed, or the ball passed the goal line:
  ``t* ≤ 0``), (b) an ``OUT`` row, (c) a ``STOP`` marker; with ``deflection_ends`` also at a hit
  by another player, which may start a new shot. No new shot starts while one is live. Hits are
  never detected while the game is stopped (the ball hitter drops them), so no shot starts then.
* The goal is the one the hitter's team attacks (``attack`` of the hit row: sides inferred from the
  goalkeepers at each kick-off); shots at one's own goal do not count.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from debs2013.common import DictStateOperator, column, time_ordered
from debs2013.config import Q4Config
from debs2013.q2 import HIT, OUT, STOP, TIME

__all__ = ["Q4_SCHEMA", "ShotOperator", "reaches_goal"]

_OUT_FIELDS = ("x", "y", "z", "v", "vx", "vy", "vz", "a", "ax", "ay", "az")
Q4_SCHEMA = pa.schema([pa.field("ts", pa.int64()), pa.field("player_id", pa.string())]
                      + [pa.field(f, pa.int64()) for f in _OUT_FIELDS],
                      metadata={"epic.event_time": "ts", "epic.time_unit": "ps"})

_FAR = 1 << 62
G_MM_S2 = 9810.0


def reaches_goal(x, y, z, v, vx, vy, vz, goal, horizon_s: float, gravity: bool) -> np.ndarray:
    """Vectorised projection test of ball rows (raw units) towards ``goal = (x_lo, x_hi, y_line,
    z_max)`` in mm: does the straight (or, with gravity, parabolic in z) path cross the goal line
    inside the goal mouth within ``horizon_s``?"""
    x_lo, x_hi, y_g, z_max = goal
    v = np.asarray(v, np.float64)
    vxm = v * vx * 1e-7
    vym = v * vy * 1e-7
    vzm = v * vz * 1e-7
    with np.errstate(divide="ignore", invalid="ignore"):
        t = (y_g - np.asarray(y, np.float64)) / vym
    ok = np.isfinite(t) & (t > 0) & (t <= horizon_s)
    t = np.where(ok, t, 0.0)
    xs = x + vxm * t
    zs = z + vzm * t
    if gravity:
        zs = zs - 0.5 * G_MM_S2 * t * t
    zs = np.maximum(zs, 0.0)
    return ok & (xs > x_lo) & (xs < x_hi) & (zs < z_max)


def _next(positions: np.ndarray, i: int) -> int:
    k = np.searchsorted(positions, i, side="left")
    return int(positions[k]) if k < len(positions) else _FAR


class ShotOperator(DictStateOperator):
    """The shot-on-goal node (see the module docstring for the rules).

    Args:
        config: :class:`~debs2013.config.Q4Config`.

    Vectorised per batch: the projection test towards both goals for every row; the state
    machine jumps from decision row to decision row with binary searches, so rows of a live shot
    are sliced out, not looped over.
    """

    state_format = "debs2013.q4/1"

    def __init__(self, config: Q4Config = Q4Config()):
        self.config = config
        self.output_schema = Q4_SCHEMA
        # live: [shooter, goal]; pending: [player, goal, until]
        self._state = {"live": None, "pending": None}

    def on_batch(self, batch: pa.RecordBatch) -> list[pa.RecordBatch]:
        n = batch.num_rows
        if n == 0:
            return []
        kind = column(batch, "kind")
        if (kind == TIME).any():   # time marks of the hitter: not ball rows, not events
            batch = batch.filter(pa.array(kind != TIME))
            n = batch.num_rows
            if n == 0:
                return []
        batch, ts = time_ordered(batch)
        cfg = self.config
        kind = column(batch, "kind")
        cols = {f: column(batch, f) for f in _OUT_FIELDS}
        ball = kind <= HIT
        horizon = cfg.horizon_ps * 1e-12
        passes = {}
        for g, goal in ((1, cfg.goal_pos_y), (-1, cfg.goal_neg_y)):
            passes[g] = ball & reaches_goal(cols["x"], cols["y"], cols["z"], cols["v"],
                                            cols["vx"], cols["vy"], cols["vz"], goal, horizon,
                                            cfg.gravity)
        start_ok = ball
        if cfg.settle_acc_raw is not None:
            start_ok = ball & (cols["a"] < cfg.settle_acc_raw)
        pass_pos = {g: np.nonzero(m & start_ok)[0] for g, m in passes.items()}
        fail_pos = {g: np.nonzero(ball & ~m)[0] for g, m in passes.items()}
        hit_pos = np.nonzero(kind == HIT)[0]
        end_pos = np.nonzero((kind == OUT) | (kind == STOP))[0]
        players = batch.column(batch.schema.get_field_index("player_id")).to_pylist()
        attack = column(batch, "attack")
        st = self._state
        reported = []  # (start, stop, shooter) row ranges
        i = 0
        pend_idx = -1
        while i < n:
            live = st["live"]
            if live is not None:
                shooter, g = live
                j = min(_next(fail_pos[g], i), _next(end_pos, i))
                if cfg.deflection_ends:
                    k = i
                    while True:
                        h = _next(hit_pos, k)
                        if h >= j or players[h] != shooter:
                            j = min(j, h)
                            break
                        k = h + 1
                reported.append((i, min(j, n), shooter))
                if j >= n:
                    break
                st["live"] = None
                i = j if kind[j] == HIT else j + 1
                continue
            pending = st["pending"]
            if pending is not None:
                player, g, until = pending
                j_hit = _next(hit_pos, max(i, pend_idx + 1))
                j_pass = _next(pass_pos[g], i)
                j_end = _next(end_pos, i)
                j_time = int(np.searchsorted(ts, until, side="right"))
                j_time = j_time if j_time < n else _FAR
                j = min(j_hit, j_pass, j_end, j_time)
                if j >= n:
                    break
                st["pending"] = None
                pend_idx = -1
                if j == j_hit:
                    i = j  # a new hit: a new pending state from it (tested there)
                elif j == j_pass:
                    st["live"] = [player, g]
                    i = j
                else:
                    i = j + 1 if j == j_end else j
                continue
            h = _next(hit_pos, i)
            if h >= n:
                break
            st["pending"] = [players[h], int(attack[h]), int(ts[h]) + cfg.pending_ps]
            pend_idx = h
            i = h
        if not reported:
            return []
        idx = np.concatenate([np.arange(a, b)[ball[a:b]] for a, b, _ in reported])
        who = [s for a, b, s in reported for _ in range(int(ball[a:b].sum()))]
        arrays = [pa.array(ts[idx], pa.int64()), pa.array(who, pa.string())]
        arrays += [pa.array(cols[f][idx], pa.int64()) for f in _OUT_FIELDS]
        return [pa.RecordBatch.from_arrays(arrays, schema=Q4_SCHEMA)]
