"""Machine monitoring: a predicate window for overheating episodes, a process node for silence.

* ``episodes``: per machine, a window opens at the first reading above the threshold and closes
  at the first reading back below ``threshold - hysteresis`` (a predicate window); it reports the episode's length,
  readings and peak temperature.
* ``silence``: a ``process`` node keeps, per machine, the time of the last reading and an
  event-time timer ``timeout`` seconds later; when the timer fires before a newer reading
  arrived, it raises a "silent" alert.
* both alert streams are mapped to one schema and merged in time order into ``alerts.csv``.

    epic run topologies/monitoring.py -- --threshold 80 --timeout 5
"""

import math
import os

import epic

threshold = epic.param("threshold", 80.0)
hysteresis = epic.param("hysteresis", 2.0)
timeout = epic.param("timeout", 5)  # seconds
out_dir = epic.param("out", "out/monitoring")


def readings():
    """3 machines, one reading per second for 10 minutes; machine 2 falls silent twice."""
    for s in range(600):
        rows = []
        for m in range(3):
            if m == 2 and (200 <= s < 230 or 400 <= s < 410):
                continue
            temp = 60 + 25 * math.sin(2 * math.pi * s / (90 + 30 * m)) + 0.5 * ((s * 7 + m) % 5)
            rows.append({"machine": m, "ts": s * 1000 + m, "temp": round(temp, 2)})
        yield rows and epic.pa.RecordBatch.from_pylist(rows)


class Silence(epic.Processor):
    """Per machine: state = last reading time (ms); a timer at last + timeout."""

    def __init__(self, timeout_ms):
        self.timeout_ms = timeout_ms

    def init(self, key):
        return None

    def on_element(self, state, row, ctx):
        if state is not None:
            ctx.delete_timer(state + self.timeout_ms)
        ctx.set_timer(row["ts"] + self.timeout_ms)
        return row["ts"]

    def on_timer(self, state, time, ctx):
        if ctx.at_end:  # the input ended: no evidence the machine went silent
            return state
        ctx.emit({"machine": ctx.key, "ts": time, "last_seen": state})
        return state


topology = epic.Topology("monitoring")

temps = topology.source("temps", epic.iterator_source(
    readings, schema={"machine": "int64", "ts": "int64", "temp": "float64"}, time="ts",
    unit="ms"))

hot = epic.predicate_window(
    start=lambda cur: cur["temp"] > threshold,
    end=lambda first, cur: cur["temp"] < threshold - hysteresis)
episodes = topology.window("episodes", temps, hot, key="machine",
                           aggregates=[epic.count("readings"),
                                       epic.max("temp", name="peak")],
                           late="drop")  # the generated readings are in time order

silent = topology.process("silence", temps, Silence(timeout * 1000), key="machine",
                          schema={"machine": "int64", "ts": "int64", "last_seen": "int64"})

ALERT = {"ts": "int64", "machine": "int64", "kind": "string", "detail": "string"}

overheat_alerts = topology.map_rows("overheat_alerts", episodes, lambda r: {
    "ts": r["ts"], "machine": r["machine"], "kind": "overheat",
    "detail": f"{r['readings']} readings from {r['window_start']} ms, "
              f"peak {r['peak']:.2f}{'' if r['final'] else ' (still open)'}"}, schema=ALERT)
silence_alerts = topology.map_rows("silence_alerts", silent, lambda r: {
    "ts": r["ts"], "machine": r["machine"], "kind": "silent",
    "detail": f"no reading since {r['last_seen']} ms"}, schema=ALERT)

alerts = topology.merge("alerts", [overheat_alerts, silence_alerts])

topology.sink("alert_log", alerts, epic.csv_sink(os.path.join(out_dir, "alerts.csv"),
                                                 columns=["ts", "machine", "kind", "detail"]))
topology.sink("episode_log", episodes, epic.csv_sink(
    os.path.join(out_dir, "episodes.csv"),
    columns=["machine", "window_start", "window_end", "final", "readings", "peak"],
    float_format=".2f"))
