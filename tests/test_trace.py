"""EPIC_TRACE spans (epic/spark/trace.py) and the fixed-cost breakdown built from them."""

from __future__ import annotations

import sys
from pathlib import Path

from epic.spark import trace

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from benchkit.fixed_costs import PHASES, breakdown  # noqa: E402


def test_spans_only_when_enabled(tmp_path, monkeypatch):
    path = tmp_path / "t.jsonl"
    monkeypatch.delenv(trace.ENV, raising=False)
    with trace.span("x", "q", "task"):
        pass
    assert not path.exists()
    trace.adopt(str(path))
    with trace.span("task", "q", "task", part=1) as sp:
        sp["rows"] = 5
    trace.event("sinks_done", "t")
    trace.adopt("")  # a reused worker stops tracing when the next work is untraced
    with trace.span("later", "q", "task"):
        pass
    spans = trace.load(str(path))
    assert [d["span"] for d in spans] == ["task", "sinks_done"]
    assert spans[0]["part"] == 1 and spans[0]["rows"] == 5 and spans[0]["t1"] >= spans[0]["t0"]
    assert spans[1]["t0"] == spans[1]["t1"]


def _s(span, kind, t0, t1):
    return {"span": span, "kind": kind, "query": "q", "pid": 1, "t0": t0, "t1": t1}


def test_breakdown_adds_up_to_the_deploy_time():
    spans = [_s("deploy_start", "driver", 0.0, 0.0), _s("start", "driver", 0.0, 0.1),
             _s("initial_offset", "planner", 1.0, 1.0), _s("latest_offset", "planner", 1.0, 1.2),
             _s("partitions", "planner", 1.2, 1.3), _s("task", "task", 1.4, 1.8),
             _s("task", "task", 1.5, 1.7), _s("commit", "commit", 1.9, 2.0),
             _s("latest_offset", "planner", 2.0, 2.1), _s("partitions", "planner", 2.1, 2.2),
             _s("task", "task", 2.3, 2.5), _s("commit", "commit", 2.6, 2.7),
             _s("sinks_done", "driver", 2.9, 2.9)]
    b = breakdown(spans)
    assert abs(b["planner process start"] - 0.9) < 1e-9
    assert abs(b["source read"] - 0.3) < 1e-9
    assert abs(b["tasks"] - 0.6) < 1e-9   # per batch: the union of its tasks' spans
    assert abs(b["end detection"] - 0.2) < 1e-9
    assert b["batches"] == 2
    assert abs(sum(b[p] for p in PHASES) - b["total"]) < 1e-9 and abs(b["total"] - 2.9) < 1e-9
