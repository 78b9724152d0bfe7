"""Web sessions (ESL-TS example a): an ad page, then an item description, then a purchase.

Per session, the pattern ``(X, Y, Z)`` matches three *consecutive* clicks: X on an ad page, Y on
the item's description page, Z the purchase of the same item. A click in between breaks the
sequence. Clicks are generated from a seed (``sessions`` sessions, about a dozen clicks each).

    epic run topologies/web_purchases.py -- --sessions 200 --out out/web
"""

import os
import random

import epic

sessions = epic.param("sessions", 200)
seed = epic.param("seed", 14)
out_dir = epic.param("out", "out/web_purchases")

PAGES = ["home", "search", "list", "ad", "pd", "buy"]


def clicks():
    """Sessions interleaved in time; each click: session, ts (ms), page type, item."""
    rnd = random.Random(seed)
    rows, ts = [], 0
    active = list(range(sessions))
    left = {s: rnd.randint(3, 20) for s in active}
    while active:
        s = rnd.choice(active)
        ts += rnd.randint(1, 400)
        if rnd.random() < 0.15 and left[s] >= 3:      # plant an ad -> description -> purchase
            item = rnd.randint(1, 30)
            for page in ("ad", "pd", "buy"):
                rows.append({"session": s, "ts": ts, "page": page, "item": item})
                ts += rnd.randint(1, 400)
            left[s] -= 3
        else:
            rows.append({"session": s, "ts": ts, "page": rnd.choice(PAGES),
                         "item": rnd.randint(1, 30)})
            left[s] -= 1
        if left[s] <= 0:
            active.remove(s)
        if len(rows) >= 500:
            yield epic.pa.RecordBatch.from_pylist(rows, schema=SCHEMA)
            rows = []
    if rows:
        yield epic.pa.RecordBatch.from_pylist(rows, schema=SCHEMA)


SCHEMA = epic.as_schema({"session": "int64", "ts": "int64", "page": "string", "item": "int64"})

ad_to_purchase = epic.pattern(
    epic.var("X", mask=lambda b: epic.pc.equal(b["page"], "ad")),
    epic.var("Y", lambda cur, prev, m: cur["page"] == "pd" and cur["item"] == m["X"]["item"]),
    epic.var("Z", lambda cur, prev, m: cur["page"] == "buy" and cur["item"] == m["X"]["item"]))

topology = epic.Topology("web_purchases")
click_stream = topology.source("clicks", epic.iterator_source(clicks, schema=SCHEMA, time="ts",
                                                              unit="ms"))
purchases = topology.pattern("ad_purchases", click_stream, ad_to_purchase, key="session",
                             select={"item": "X.item", "ad_time": "X.ts", "bought": "Z.ts"})
topology.sink("purchase_log", purchases, epic.csv_sink(
    os.path.join(out_dir, "purchases.csv"),
    columns=["session", "item", "ad_time", "bought", "match_start", "match_end"]))
