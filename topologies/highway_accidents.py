"""Highway accidents (ESL-TS example d): a calm baseline, a sharp rise, then a long disturbance.

Per road segment, every 10 s the absolute speed difference between two adjacent detectors.
``(A, *B, *C)``:

* A: the baseline, a difference at or below 15;
* *B: at most 6 rising differences (each above the previous, the first above A), ending above
  twice the baseline (``LAST(*B).diff > 2 * A.diff``);
* *C: then at most 60 differences that stay above 1.1x the baseline (``ccount(C) <= 60``); the
  star must hold at least 3 readings (``count(*C) >= 3``) and reports its mean and peak.

    epic run topologies/highway_accidents.py -- --segments 10 --hours 4
"""

import os
import random

import epic

segments = epic.param("segments", 10)
hours = epic.param("hours", 4)
seed = epic.param("seed", 17)
out_dir = epic.param("out", "out/highway_accidents")

SCHEMA = epic.as_schema({"segment": "int64", "ts": "int64", "diff": "float64"})


def differences():
    """Calm differences of 10-12; an accident: a rise over 3-6 readings, then 1-15 min of chaos."""
    rnd = random.Random(seed)
    plan = {s: [] for s in range(segments)}
    for step in range(hours * 360):
        rows = []
        for s in range(segments):
            if not plan[s] and rnd.random() < 0.004:
                base = rnd.uniform(20, 30)
                rise = [base + i * rnd.uniform(6, 10) for i in range(rnd.randint(3, 6))]
                chaos = [rnd.uniform(25, 60) for _ in range(rnd.randint(6, 90))]
                plan[s] = rise + chaos
            diff = plan[s].pop(0) if plan[s] else rnd.uniform(10, 12)
            rows.append({"segment": s, "ts": step * 10, "diff": round(diff, 2)})
        yield epic.pa.RecordBatch.from_pylist(rows, schema=SCHEMA)


accident = epic.pattern(
    epic.var("A", lambda cur: cur["diff"] <= 15),
    epic.star("B", lambda cur, prev, m: (cur["diff"] > (prev or m["A"])["diff"]
                                         and m["B"].count <= 6),
              having=lambda m: m["B"].last["diff"] > 2 * m["A"]["diff"]),
    epic.star("C", lambda cur, prev, m: (cur["diff"] > 1.1 * m["A"]["diff"]
                                         and m["C"].count <= 60),
              having=lambda m: m["C"].count >= 3,
              aggregates=[epic.mean("diff"), epic.max("diff")]))

topology = epic.Topology("highway_accidents")
diffs = topology.source("differences", epic.iterator_source(differences, schema=SCHEMA,
                                                            time="ts", unit="s"))
accidents = topology.pattern("accidents", diffs, accident, key="segment",
                             select={"baseline": "A.diff", "rise": "B.count",
                                     "disturbed": "C.count", "mean_diff": "C.mean_diff",
                                     "peak_diff": "C.max_diff"})
topology.sink("accident_log", accidents, epic.csv_sink(
    os.path.join(out_dir, "accidents.csv"),
    columns=["segment", "match_start", "match_end", "baseline", "rise", "disturbed",
             "mean_diff", "peak_diff"], float_format=".2f"))
