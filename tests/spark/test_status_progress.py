"""The deploy status reads Spark's progress reports without missing a batch (fake queries)."""

import json

from epic.spark.status import Stats


class _JReport:
    def __init__(self, d):
        self._d = d

    def json(self):
        return json.dumps(self._d)


class _JQuery:
    """What ``StreamingQuery._jsq`` offers: the last report and the recent ones, counting calls."""

    def __init__(self):
        self.reports = []
        self.recent_calls = 0

    def lastProgress(self):
        return _JReport(self.reports[-1]) if self.reports else None

    def recentProgress(self):
        self.recent_calls += 1
        return [_JReport(r) for r in self.reports[-100:]]


class _Query:
    def __init__(self):
        self._jsq = _JQuery()

    def report(self, batch, rows, ms, ts):
        self._jsq.reports.append({"batchId": batch, "numInputRows": rows, "timestamp": ts,
                                  "durationMs": {"triggerExecution": ms}})


def _expected(reports):
    rows, busy = {}, {}
    for r in reports:
        rows[r["batchId"]] = r["numInputRows"]
        if r["numInputRows"]:
            busy[r["batchId"]] = r["durationMs"]["triggerExecution"]
    return rows, busy


def test_every_batch_counted_whatever_the_polling():
    # batches end one, two or none at a time between updates; an idle report repeats a batch id
    q = _Query()
    stats = Stats(plan=None, queries={"q": q})
    stats.update()                        # no report yet
    steps = [[(0, 0, 5)], [], [(1, 100, 40)], [(2, 50, 30), (3, 70, 20)], [],
             [(3, 0, 1)], [(4, 10, 9)], [(5, 1, 2), (6, 2, 3), (7, 3, 4)], [(8, 9, 9)]]
    ts = 0
    for step in steps:
        for b, rows, ms in step:
            ts += 1
            q.report(b, rows, ms, f"t{ts}")
        stats.update()
    rows, busy = _expected(q._jsq.reports)
    assert stats.rows_in["q"] == rows
    assert stats.busy["q"] == busy
    assert stats.last["q"]["batchId"] == 8
    # the recent list only when more than one report arrived since the last update
    assert q._jsq.recent_calls == 2


def test_first_update_after_several_batches_reads_the_recent_list():
    q = _Query()
    for b in range(3):
        q.report(b, 10 * (b + 1), b + 1, f"t{b}")
    stats = Stats(plan=None, queries={"q": q})
    stats.update()
    assert stats.rows_in["q"] == {0: 10, 1: 20, 2: 30}
    assert sum(stats.busy["q"].values()) == 6
