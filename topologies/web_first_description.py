"""Web sessions (ESL-TS example b): the pages visited before the first description page.

Per session, ``(*A, B)`` anchored at the session's first click: A is the maximal run of pages
that are not item descriptions, B the first description page; the match is kept when
``count(*A) < 20`` (a final aggregate, tested when the star is complete). Output: how many
pages, which page types were seen first and last, and the time to reach the description.

    epic run topologies/web_first_description.py -- --sessions 300
"""

import os
import random

import epic

sessions = epic.param("sessions", 300)
seed = epic.param("seed", 15)
out_dir = epic.param("out", "out/web_first_description")

SCHEMA = epic.as_schema({"session": "int64", "ts": "int64", "page": "string"})


def clicks():
    """Per session a browse of 0..30 non-description pages, then a description, then more."""
    rnd = random.Random(seed)
    rows = []
    for s in range(sessions):
        ts = s * 100_000
        for _ in range(rnd.choice([0, 1, 3, 8, 15, 19, 20, 25, 30])):
            ts += rnd.randint(500, 5000)
            rows.append({"session": s, "ts": ts, "page": rnd.choice(["home", "search", "list",
                                                                     "ad"])})
        for _ in range(rnd.randint(1, 4)):
            ts += rnd.randint(500, 5000)
            rows.append({"session": s, "ts": ts, "page": rnd.choice(["pd", "list", "buy"])})
    rows.sort(key=lambda r: r["ts"])
    for i in range(0, len(rows), 400):
        yield epic.pa.RecordBatch.from_pylist(rows[i:i + 400], schema=SCHEMA)


before_description = epic.pattern(
    epic.star("A", mask=lambda b: epic.pc.not_equal(b["page"], "pd"),
              having=lambda m: m["A"].count < 20),
    epic.var("B", mask=lambda b: epic.pc.equal(b["page"], "pd")),
    anchored=True)

topology = epic.Topology("web_first_description")
click_stream = topology.source("clicks", epic.iterator_source(clicks, schema=SCHEMA, time="ts",
                                                              unit="ms"))
paths = topology.pattern("first_description", click_stream, before_description, key="session",
                         select={"pages": "A.count", "entry_page": "A.first.page",
                                 "last_page": "A.last.page", "reached": "B.ts"})
topology.sink("path_log", paths, epic.csv_sink(
    os.path.join(out_dir, "paths.csv"),
    columns=["session", "pages", "entry_page", "last_page", "match_start", "reached"]))
