"""Brute-force reference semantics of snapshot and count-by-start windows and of active
expiration, written from docs/windows.md ("Snapshot windows", "Count-by-start-time windows",
"Active expiration"), not from the operators: slow and obvious.

Rows are ``(key, start, end, value)`` in arrival order (``end`` is ignored by count-by-start).
"""

from __future__ import annotations


def on_time(rows, lateness=0):
    """The stream rule: a row is late when its start is below the largest start before it minus
    the lateness."""
    keep, high = [], None
    for i, r in enumerate(rows):
        if high is not None and r[1] < high - lateness:
            continue
        keep.append((i, *r))
        high = r[1] if high is None else max(high, r[1])
    return keep


def _keys(rows):
    out = []
    for r in rows:
        if r[1] not in out:
            out.append(r[1])
    return out


def snapshot_reference(rows, lateness=0):
    """Sorted (key, window_start, window_end, final, sorted values alive)."""
    rows = on_time(rows, lateness)
    out = []
    for key in _keys(rows):
        ev = [(s, max(e, s + 1), v) for _, k, s, e, v in rows if k == key]
        bounds = sorted({s for s, _, _ in ev} | {e for _, e, _ in ev})
        for b1, b2 in zip(bounds, bounds[1:]):
            alive = sorted(v for s, e, v in ev if s <= b1 and e >= b2)
            if alive:
                out.append((key, b1, b2, True, alive))
    return sorted(out)


def count_by_start_reference(rows, n, lateness=0):
    """Sorted (key, window_start, window_end, final, sorted values)."""
    rows = on_time(rows, lateness)
    out = []
    for key in _keys(rows):
        ev = [(s, v) for _, k, s, _, v in rows if k == key]
        d = sorted({s for s, _ in ev})
        if len(d) < n:
            out.append((key, d[0], d[-1] + 1, False, sorted(v for _, v in ev)))
            continue
        for i in range(len(d) - n + 1):
            ds = set(d[i:i + n])
            out.append((key, d[i], d[i + n - 1] + 1, True, sorted(v for s, v in ev if s in ds)))
    return sorted(out)


def snapshot_expire_reference(rows, lateness=0):
    """Sorted (key, expire_time, value, count left): every event leaves at its end; ``left`` is
    the count of events still in the state just after it left (ends at the same instant leave in
    (start, arrival) order; starts at that instant enter after)."""
    rows = on_time(rows, lateness)
    out = []
    for key in _keys(rows):
        ev = sorted(((s, i, max(e, s + 1), v) for i, k, s, e, v in rows if k == key))
        rank = {x: r for r, x in enumerate(ev)}  # the order events entered
        for x in ev:
            s, i, e, v = x
            left = sum(1 for y in ev if y[0] < e and (y[2] > e or (y[2] == e and rank[y] > rank[x])))
            out.append((key, e, v, left))
    return sorted(out)


def sliding_expire_reference(rows, L, S, lateness=0):
    """Sorted (key, expire_time, value, count left) for ``few_time(L, S, origin=0)``: an element
    at ``t`` leaves at the first instant whose window starts after it, ``(t // S + 1) * S + L``,
    if that instant is emitted (at most the first instant at or after the end of the data)."""
    rows = on_time(rows, lateness)
    if not rows:
        return []
    end = max(r[2] for r in rows) + 1
    k = -((-(end - L)) // S)
    limit = k * S + L
    out = []
    for key in _keys(rows):
        ev = sorted((s, i, v) for i, k2, s, _, v in rows if k2 == key)
        for j, (t, i, v) in enumerate(ev):
            at = (t // S + 1) * S + L
            if at > limit:
                continue
            start = at - L
            left = sum(1 for y in ev[j + 1:] if y[0] < at)
            out.append((key, at, v, left))
    return sorted(out)


def snapshot_in_start_order(rows, lateness=0):
    """Sorted (key, window_start, window_end, values alive in start order, ties by arrival):
    what ``collect`` holds ("all elements of the window in order")."""
    rows = on_time(rows, lateness)
    out = []
    for key in _keys(rows):
        ev = sorted((s, i, max(e, s + 1), v) for i, k, s, e, v in rows if k == key)
        bounds = sorted({s for s, _, _, _ in ev} | {e for _, _, e, _ in ev})
        for b1, b2 in zip(bounds, bounds[1:]):
            alive = [v for s, i, e, v in ev if s <= b1 and e >= b2]
            if alive:
                out.append((key, b1, b2, alive))
    return sorted(out)
