"""Highway jams (ESL-TS example c): a fast reading, then a run of falling speeds to a crawl.

Per road segment, one speed reading per minute. ``(X, *Y)``: X is a speed above 50; Y the
maximal run of at most 6 readings, each below the previous one (the first below X), and the
run must end below 30 % of X's speed (``LAST(*Y).speed < 0.3 * X.speed``). The whole match lies
within 6 minutes. ``ccount(Y) <= 6`` is a continuous aggregate: it is asked per reading and
stops the star; the LAST condition is tested once the star is complete.

    epic run topologies/highway_jams.py -- --segments 20 --hours 6
"""

import math
import os
import random

import epic

segments = epic.param("segments", 20)
hours = epic.param("hours", 6)
seed = epic.param("seed", 16)
out_dir = epic.param("out", "out/highway_jams")

SCHEMA = epic.as_schema({"segment": "int64", "ts": "int64", "speed": "float64"})


def readings():
    """Free flow around 65-110 km/h with noise; now and then a jam: speeds fall in 3-7 minutes."""
    rnd = random.Random(seed)
    state = {s: {"speed": 90.0, "jam": 0} for s in range(segments)}
    for minute in range(hours * 60):
        rows = []
        for s in range(segments):
            st = state[s]
            if st["jam"] == 0 and rnd.random() < 0.01:
                st["jam"] = rnd.randint(3, 7)
            if st["jam"] > 0:
                st["speed"] *= rnd.uniform(0.45, 0.8)
                st["jam"] -= 1
            else:
                target = 85 + 20 * math.sin(minute / 50 + s)
                st["speed"] += 0.5 * (target - st["speed"]) + rnd.gauss(0, 4)
            rows.append({"segment": s, "ts": minute * 60, "speed": round(st["speed"], 1)})
        yield epic.pa.RecordBatch.from_pylist(rows, schema=SCHEMA)


jam = epic.pattern(
    epic.var("X", lambda cur: cur["speed"] > 50),
    epic.star("Y", lambda cur, prev, m: (cur["speed"] < (prev or m["X"])["speed"]
                                         and m["Y"].count <= 6),
              having=lambda m: m["Y"].last["speed"] < 0.3 * m["X"]["speed"]),
    within=6 * 60)

topology = epic.Topology("highway_jams")
speeds = topology.source("speeds", epic.iterator_source(readings, schema=SCHEMA, time="ts",
                                                        unit="s"))
jams = topology.pattern("jams", speeds, jam, key="segment",
                        select={"from_speed": "X.speed", "to_speed": "Y.last.speed",
                                "readings": "Y.count"})
topology.sink("jam_log", jams, epic.csv_sink(
    os.path.join(out_dir, "jams.csv"),
    columns=["segment", "match_start", "match_end", "from_speed", "to_speed", "readings"],
    float_format=".1f"))
