"""The status of a deploy: ``<workdir>/status.json``, the live table, ``epic status`` / ``epic stop``.

The driver refreshes the document while the deploy runs (at most once a second) and writes it a
last time when the deploy ends; ``epic status WORKDIR`` prints it, ``epic stop WORKDIR`` asks the
driver to stop (the ``STOP`` file).
"""

from __future__ import annotations

import json
import os
import time as _time

from epic.errors import EpicError
from epic.spark import trace
from epic.topics import Topic
from epic.topology import MergeNode, ProcessNode, SinkNode, WindowNode

__all__ = ["Stats", "read_status", "request_stop", "status_table", "STATUS", "STOP"]

STATUS = "status.json"
STOP = "STOP"


def read_status(workdir: str) -> dict:
    """The status document a deploy keeps in ``<workdir>/status.json`` (a path or URI).

    A document that still says ``running`` (or ``starting``) while no deploy holds the work
    directory's lock was left by a deploy that died without writing its last status (SIGKILL, an
    out-of-memory kill, a lost machine): it is returned with state ``gone`` and an error saying
    so. The lock is checked when it is on this machine (a local work directory, or a remote one
    whose checkpoint directory is on this host)."""
    if "://" in workdir:
        from epic.storage import read_small_json

        doc = _remote(workdir, lambda: read_small_json(f"{workdir.rstrip('/')}/{STATUS}"))
        if doc is None:
            raise EpicError(f"{workdir}: no {STATUS}; is this the --workdir of an epic deploy?")
        manifest = _remote(workdir, lambda: read_small_json(f"{workdir.rstrip('/')}/deploy.json"))
    else:
        p = os.path.join(workdir, STATUS)
        try:
            with open(p) as f:
                doc = json.load(f)
        except FileNotFoundError:
            raise EpicError(f"{workdir}: no {STATUS}; is this the --workdir of an epic "
                            "deploy?") from None
        try:
            with open(os.path.join(workdir, "deploy.json")) as f:
                manifest = json.load(f)
        except (OSError, ValueError):
            manifest = None
    return _check_alive(workdir, doc, manifest or {})


def _deploy_running(workdir: str, manifest: dict) -> bool | None:
    """Whether a deploy holds ``workdir``'s lock; None when the lock cannot be seen from here
    (a remote work directory without a checkpoint directory here, another machine's driver)."""
    import socket

    from epic.spark.lock import lock_holder

    lock_dir = manifest.get("checkpoint_dir")
    if lock_dir is not None:
        if manifest.get("driver_host") != socket.gethostname():
            return None
    elif "://" in workdir:
        return None
    else:
        lock_dir = workdir
    return lock_holder(lock_dir) is not None


def _check_alive(workdir: str, doc: dict, manifest: dict) -> dict:
    """``doc`` with state ``gone`` when it says running but nobody holds the deploy lock."""
    if doc.get("state") not in ("running", "starting") \
            or _deploy_running(workdir, manifest) is not False:
        return doc
    pid = doc.get("pid", "?")
    return {**doc, "state": "gone", "error": (
        f"the deploy (pid {pid}) ended without writing its final status: it was killed or its "
        "machine failed. Its outputs hold the micro-batches committed before that; `epic "
        f"deploy` of the same topology with --workdir {workdir} resumes from there")}


def request_stop(workdir: str) -> None:
    """Ask the deploy running in ``workdir`` to stop (it polls for the file)."""
    if "://" in workdir:
        from epic.storage import resolve

        def put():
            loc = resolve(workdir.rstrip("/"), "work directory")
            if not loc.join("deploy.json").exists():
                raise EpicError(f"{workdir}: no deploy.json; is this the --workdir of an epic "
                                "deploy?")
            loc.join(STOP).publish(str(_time.time()).encode())
        _remote(workdir, put)
        return
    if not os.path.isdir(workdir):
        raise EpicError(f"{workdir}: no such work directory")
    if not os.path.exists(os.path.join(workdir, "deploy.json")):
        from epic.spark.lock import lock_holder

        # a first deploy writes deploy.json once its session runs (seconds after it says
        # starting): a deploy holding the directory's lock (there, or in its --checkpoint-dir)
        # finds the request when it polls
        try:
            with open(os.path.join(workdir, STATUS)) as f:
                lock_dir = json.load(f).get("lock_dir") or workdir
        except (OSError, ValueError, AttributeError):
            lock_dir = None
        if lock_dir is None or lock_holder(lock_dir) is None:
            raise EpicError(f"{workdir}: no deploy.json; is this the --workdir of an epic "
                            "deploy?")
        with open(os.path.join(workdir, STOP), "w") as f:
            f.write(str(_time.time()))
        return
    try:
        state = read_status(workdir).get("state")
    except EpicError:
        state = None   # a deploy still starting has not written its status yet
    if state in ("finished", "failed", "stopped", "gone"):
        with open(os.path.join(workdir, "deploy.json")) as f:
            manifest = json.load(f)
        if _deploy_running(workdir, manifest) is False:
            raise EpicError(f"no deploy is running in {workdir} (its status: {state}); nothing "
                            "to stop")
    with open(os.path.join(workdir, STOP), "w") as f:
        f.write(str(_time.time()))


def _remote(workdir: str, call):
    """``call()``, with a store's errors (a bad URI, an unreachable store) as :class:`EpicError`."""
    from epic.errors import SpecError

    try:
        return call()
    except SpecError as exc:
        raise EpicError(str(exc)) from None
    except OSError as exc:
        raise EpicError(f"{workdir}: {exc}") from None


class Stats:
    """Per-query progress of a running deploy (Spark's progress reports, the planners' input
    row counts, the rows committed to the output topics) as the status document.

    Args:
        plan: the deploy's :class:`~epic.spark.planner.DeployPlan`.
        queries: the running queries by name (the launcher's, filled as they start).
    """

    def __init__(self, plan, queries: dict):
        self.plan = plan
        self.queries = queries
        self.rows_in: dict[str, dict[int, int]] = {}
        self.busy: dict[str, dict[int, int]] = {}
        self.last: dict[str, dict] = {}

    def update(self) -> None:
        for name, q in self.queries.items():
            seen = self.rows_in.setdefault(name, {})
            try:
                prog = self._new_progress(name, q)
            except Exception:  # noqa: BLE001 - a stopped query
                prog = []
            busy = self.busy.setdefault(name, {})
            for p in prog:
                rows = int(p.get("numInputRows") or 0)
                if trace.enabled() and int(p["batchId"]) not in seen:
                    # Spark's own split of the micro-batch (addBatch, queryPlanning, walCommit...)
                    trace.event("progress", name, "driver", batch=int(p["batchId"]), rows=rows,
                                **{k: int(v) for k, v in (p.get("durationMs") or {}).items()})
                seen[int(p["batchId"])] = rows
                if rows:
                    busy[int(p["batchId"])] = int((p.get("durationMs") or {})
                                                  .get("triggerExecution") or 0)
            if prog:
                self.last[name] = prog[-1]

    def _new_progress(self, name: str, q) -> list[dict]:
        """The progress reports of ``q`` since the last update: Spark's last one, or its recent
        list when more than one batch ended in between (or at the first update).

        ``recentProgress`` costs two py4j calls per report it holds (up to 100) and a JSON parse
        each, in the driver and in the JVM, at every update; ``lastProgress`` two calls."""
        jsq = getattr(q, "_jsq", None)   # classic PySpark: the raw JSON, no wrapper objects
        if jsq is not None:
            jp = jsq.lastProgress()
            last = None if jp is None else json.loads(jp.json())
        else:
            last = q.lastProgress
        if not last:
            return []
        prev = self.last.get(name)
        bid = int(last["batchId"])
        if prev is not None:
            pid = int(prev["batchId"])
            if bid == pid and last.get("timestamp") == prev.get("timestamp"):
                return []              # nothing new
            if bid <= pid + 1:
                return [last]          # the next batch (or a newer report of the same one)
        elif bid == 0:
            return [last]
        if jsq is not None:
            return [json.loads(p.json()) for p in jsq.recentProgress()]
        return list(q.recentProgress)

    def _rows_in(self, name: str) -> int:
        # Spark counts the commit-message rows; the query's planner counts the input rows.
        if self.plan.loc is not None:
            try:
                doc = self.plan.loc.join("stats", name.replace("/", "_") + ".json").read_json()
                return int(doc["rows_in"])
            except (FileNotFoundError, ValueError, KeyError):
                return 0
        try:
            with open(os.path.join(self.plan.workdir, "stats",
                                   name.replace("/", "_") + ".json")) as f:
                return int(json.load(f)["rows_in"])
        except (FileNotFoundError, ValueError, KeyError):
            return 0

    def _topic_rows(self, node, producer: str) -> int:
        """Rows ``producer`` committed to ``node``'s topics, those retention deleted included
        (:meth:`Topic.rows_written`), over every run of the work directory."""
        total = 0
        for p in [self.plan.stream_topic(s) for s in node.outputs]:
            try:
                total += Topic.open(p).rows_written(producer)
            except EpicError:
                pass
        return total

    def doc(self, state: str, elapsed: float, error: str | None = None) -> dict:
        from epic.spark.offsets import offsets_from_progress, source_late_rows
        from epic.spark.tasks import node_dropped_rows, node_late_rows

        plan = self.plan
        nodes = {}
        for name, q in self.queries.items():
            p = self.last.get(name) or {}
            offs = offsets_from_progress(p)
            wms = [o.watermark for o in offs if o.watermark is not None]
            first = name.split("~")[0]   # siblings: the first group's outputs
            node = plan.t.nodes.get(first.split("+")[-1])
            rows_out = None
            rows_in = self._rows_in(name)
            if node is not None and not isinstance(node, SinkNode):
                rows_out = self._topic_rows(node, first.replace("+", "__"))
            nodes[name] = {
                "kind": node.kind if node is not None else "?",
                "mode": "fused" if "+" in name else plan.modes.get(name, node.kind if node
                                                                      else "?"),
                "rows_in": rows_in,
                "rows_out": rows_out,
                # epic's rows over the deploy's time so far (Spark's processedRowsPerSecond
                # counts the commit messages a micro-batch's tasks return, not rows)
                "rows_per_s": round(rows_in / elapsed, 1) if elapsed > 0 else 0.0,
                "batch_ms": (p.get("durationMs") or {}).get("triggerExecution"),
                "batches": len(self.rows_in.get(name, {})),
                "busy_ms": sum(self.busy.get(name, {}).values()),
                "watermark": min(wms) if wms else None,
                # a finished deploy's every sink committed its end of stream: every query
                # ended (its last progress report may not have come in before the driver saw it)
                "ended": state == "finished" or (bool(offs) and all(o.eos for o in offs)),
                # a failed or stopped deploy's document is written before its queries stop
                "active": state in ("running", "starting") and bool(q.isActive),
            }
        late, dropped = {}, {}
        if state != "running":
            # rows behind the watermark, per window node (the clock's counts in the snapshots)
            for n in plan.t.nodes.values():
                if isinstance(n, (WindowNode, MergeNode)):
                    late[n.name] = node_late_rows(plan.state_dir(n))
                elif isinstance(n, ProcessNode):   # a pattern's out-of-order rows dropped
                    d = node_dropped_rows(plan.state_dir(n))
                    if d is not None:
                        dropped[n.name] = d
            # rows behind a slack/punctuation source's watermark (counted by its planner)
            for name in self.queries:
                late.update(source_late_rows(self.last.get(name)))
        return {"topology": plan.t.name, "state": state, "pid": os.getpid(),
                "elapsed_s": round(elapsed, 3), "updated": _time.time(), "error": error,
                "nodes": nodes, "late_rows": late, "dropped_rows": dropped}


def status_table(doc: dict):
    """A rich table of a status document."""
    from rich.table import Table

    tab = Table(title=f"{doc.get('topology')}: {doc.get('state')} {doc.get('elapsed_s', 0):.1f} s",
                title_justify="left")
    for col in ("node", "kind", "rows in", "rows out", "rows/s", "batch ms", "watermark", "state"):
        tab.add_column(col, justify="left" if col in ("node", "kind", "state") else "right")
    live = doc.get("state") in ("running", "starting")   # not a gone deploy's last document
    for name, n in doc.get("nodes", {}).items():
        tab.add_row(name, str(n.get("mode") or n.get("kind")), f"{n['rows_in']:,}",
                    "-" if n.get("rows_out") is None else f"{n['rows_out']:,}",
                    f"{n['rows_per_s']:,.0f}", str(n.get("batch_ms") or "-"),
                    "-" if n.get("watermark") is None else str(n["watermark"]),
                    "ended" if n.get("ended") else ("running" if live and n.get("active")
                                                     else "stopped"))
    return tab
