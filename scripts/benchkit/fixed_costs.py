"""Where a one-query deploy's wall time goes, from its ``EPIC_TRACE`` spans (epic/spark/trace.py).

The phases lie on the deploy's critical path (one query: the planner, the tasks and the commit of
a micro-batch run one after another), so they add up to the deploy's time:

* ``query start``: the driver's ``readStream ... start()`` calls;
* ``planner process start``: from the start call's return to the planner's first call (Spark
  spawns a fresh Python process for the query's data source: interpreter, imports, unpickling);
* ``source read``: the planner's ``latest_offset`` calls (an epic source parses its input here);
* ``planning and spooling``: ``partitions`` (the micro-batch's task list; source batches spooled);
* ``tasks``: per micro-batch, from its first task's start to its last task's end;
* ``commit``: the driver-side commits of the sink (one per micro-batch);
* ``end detection``: from the last commit to the driver seeing every sink's end of stream;
* ``Spark between calls``: the rest (scheduling tasks, offset and commit logs, trigger waits).
"""

from __future__ import annotations

__all__ = ["breakdown", "PHASES"]

PHASES = ("query start", "planner process start", "source read", "planning and spooling",
          "tasks", "commit", "end detection", "Spark between calls")


def _union(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def breakdown(spans: list[dict]) -> dict:
    """Seconds per phase (:data:`PHASES`) and ``total`` (deploy start to sinks done), plus
    ``batches`` (micro-batches with tasks) from the spans of one deploy of one query."""
    t0 = next(d["t0"] for d in spans if d["span"] == "deploy_start")
    done = next(d["t0"] for d in spans if d["span"] == "sinks_done")
    by = {}
    for d in spans:
        if d["t0"] < t0 or d["t0"] > done:
            continue
        by.setdefault(d["span"], []).append(d)
    out = dict.fromkeys(PHASES, 0.0)
    out["query start"] = sum(d["t1"] - d["t0"] for d in by.get("start", ()))
    start_end = max((d["t1"] for d in by.get("start", ())), default=t0)
    planner = [d for d in spans if d["kind"] == "planner" and d["t0"] >= t0]
    first = min((d["t0"] for d in planner), default=start_end)
    out["planner process start"] = max(0.0, first - start_end)
    out["source read"] = sum(d["t1"] - d["t0"] for d in by.get("latest_offset", ()))
    out["planning and spooling"] = sum(d["t1"] - d["t0"] for d in by.get("partitions", ()))
    # Tasks of one micro-batch run between two planner `partitions` calls.
    cuts = sorted(d["t1"] for d in by.get("partitions", ()))
    batches: dict[int, list] = {}
    for d in by.get("task", ()):
        i = sum(1 for c in cuts if c <= d["t0"])
        batches.setdefault(i, []).append((d["t0"], d["t1"]))
    out["tasks"] = sum(_union(v) for v in batches.values())
    commits = by.get("commit", ())
    out["commit"] = sum(d["t1"] - d["t0"] for d in commits)
    last = max((d["t1"] for d in commits), default=done)
    out["end detection"] = max(0.0, done - last)
    total = done - t0
    out["Spark between calls"] = total - sum(out[p] for p in PHASES[:-1])
    out["total"] = total
    out["batches"] = len(batches)
    return out
