"""Brute-force reference semantics of windows, written from docs/windows.md, not from the engine.

It walks the rows in arrival order once to decide which are late (the stream rule), then, per key,
enumerates every emission instant and recomputes each window from scratch: slow and obvious.
"""

from __future__ import annotations


def _ceil_div(a, b):
    return -((-a) // b)


def on_time(rows, lateness=0):
    """Split ``rows`` = [(key, time, value)] (arrival order) into on-time rows and late rows.

    docs/windows.md: a row is late when its time is below the watermark just before it, the
    largest time among the rows before it in the *stream* (all keys) minus the lateness.
    """
    keep, late, high = [], [], None
    for r in rows:
        if high is not None and r[1] < high - lateness:
            late.append(r)
            continue
        keep.append(r)
        high = r[1] if high is None else max(high, r[1])
    return keep, late


def few_reference(rows, L, S, E, *, count_mode=False, origin=None, wm=None, lateness=0):
    """Expected emissions for ``rows`` = [(key, time, value)] in arrival order.

    Returns sorted tuples (key, window_start, window_end, final, [values in window]); for count
    windows ``window_start`` / ``window_end`` are positions. ``wm``: a final watermark pushed in
    (the end of input is ``max(largest time + 1, wm)``).
    """
    rows, _ = on_time(rows, lateness)
    keys = []
    for k, _, _ in rows:
        if k not in keys:
            keys.append(k)
    out = []
    end = max(t for _, t, _ in rows) + 1 if rows else 0
    if wm is not None:
        end = max(end, wm)
    for key in keys:
        elems = [(t, v) for k, t, v in rows if k == key]
        if count_mode:
            # positions follow event time (ties: arrival order)
            ordered = sorted(range(len(elems)), key=lambda i: (elems[i][0], i))
            coords = [(p, elems[i][1]) for p, i in enumerate(ordered)]
            n = len(coords)
            ts = set(_count_instants(L, S, E, n))
            for t in sorted(ts):
                s = 0 if L is None else max(0, _ceil_div(t - L, S)) * S
                content = [v for (x, v) in coords if s <= x < t]
                if content:
                    out.append((key, s, t, L is not None and t == s + L, content))
            if n and n not in ts:
                s = 0 if L is None else max(0, _ceil_div(n - L, S)) * S
                content = [v for (x, v) in coords if s <= x < n]
                if content:
                    out.append((key, s, n, False, content))
            continue
        o = elems[0][0] if origin is None else origin
        lo_t = min(t for t, _ in elems)
        # the key's first window: window 0 at the origin, or earlier ones holding an element
        # before the origin
        if lo_t >= o:
            first = o
        elif L is None:
            first = o + ((lo_t - o) // E) * E
        else:
            first = o + _ceil_div(lo_t - o - L + 1, S) * S
        inst = set()
        lo_bound = min(first, o) - (E or 0) - (L or 0) - (S or 0)
        if E:
            m = (lo_bound - o) // E
            while True:
                t = o + m * E
                inst.add(t)
                if t >= end:
                    break
                m += 1
        if L is not None:
            k = (first - o) // S
            while True:
                t = o + k * S + L
                inst.add(t)
                if t >= end:
                    break
                k += 1
        closing = min(t for t in inst if t >= end)
        for t in sorted(x for x in inst if x <= closing):
            if L is None:
                s = first
            else:
                s = o + max(_ceil_div(t - o - L, S), (first - o) // S) * S
            content = [v for (x, v) in sorted(elems, key=lambda p: p[0]) if s <= x < t]
            if content:
                out.append((key, s, t, L is not None and t == s + L, content))
    return sorted(out, key=lambda r: (r[0], r[1], r[2]))


def _count_instants(L, S, E, n):
    out = set()
    if E:
        out.update(range(E, n + 1, E))
    if L is not None:
        out.update(t for t in range(L, n + 1, S))
    return sorted(out)


def forseq_reference(items, start, end, kind, force):
    """XQuery FORSEQ windows over one key's items (dicts with ts and v), recomputed plainly.

    ``start(cur, prev, next, pos)``; ``end(first, cur, prev, next, pos)`` or "newstart" or None.
    Returns [(first_ts, last_ts, final, [v ...])] including landmark partial rows.
    """
    n = len(items)

    def ctx(i):
        return (items[i], items[i - 1] if i > 0 else None, items[i + 1] if i + 1 < n else None, i)

    def call(fn, *args):
        return fn(*args[: fn.__code__.co_argcount])

    def starts(i):
        return call(start, *ctx(i))

    def ends(i, j):
        if end == "newstart":
            return j + 1 < n and starts(j + 1)
        if end is None:
            return False
        cur, prev, nxt, pos = ctx(j)
        return call(end, items[i], cur, prev, nxt, pos)

    def close_from(i):
        for j in range(i, n):
            if ends(i, j):
                return j
        return None

    out = []
    if kind == "sliding":
        opened = [i for i in range(n) if starts(i)]
    else:
        opened, i = [], 0
        while i < n:
            if starts(i):
                opened.append(i)
                j = close_from(i)
                if j is None:
                    break
                i = j + 1
            else:
                i += 1
    for i in opened:
        j = close_from(i)
        last = n - 1 if j is None else j
        if kind == "landmark":
            # with end="newstart" the end shows only when the next start arrives: the last item
            # was already emitted as a partial row, then the final row follows
            late_end = end == "newstart"
            for k in range(i, last + 1):
                final = j is not None and k == j and not late_end
                out.append((items[i]["ts"], items[k]["ts"], final,
                            [it["v"] for it in items[i:k + 1]]))
            if late_end and j is not None:
                out.append((items[i]["ts"], items[j]["ts"], True, [it["v"] for it in items[i:j + 1]]))
        elif j is not None or not force:
            out.append((items[i]["ts"], items[last]["ts"], j is not None,
                        [it["v"] for it in items[i:last + 1]]))
    return out
