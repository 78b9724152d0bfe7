"""Brute-force reference semantics of FEW windows, written independently of the engine.

It enumerates every emission instant and recomputes each window from scratch; slow and obvious.
"""

from __future__ import annotations


def _instants(origin, L, S, E, limit):
    """Sorted emission instants up to and including the first one >= limit."""
    out = set()
    if E:
        m = 1
        while True:
            t = origin + m * E
            out.add(t)
            if t >= limit:
                break
            m += 1
    if L is not None:
        k = 0
        while True:
            t = origin + k * S + L
            out.add(t)
            if t >= limit:
                break
            k += 1
    first_closing = min(t for t in out if t >= limit)
    return sorted(t for t in out if t <= first_closing)


def window_start(origin, L, S, t):
    if L is None:
        return origin
    k = -((-(t - origin - L)) // S)
    return origin + max(k, 0) * S


def few_reference(rows, L, S, E, *, count_mode=False, origin=None, wm=None):
    """Expected emissions for ``rows`` = [(key, time, value)] in arrival order.

    Returns sorted tuples (key, window_start, window_end, final, [values in window]).
    For time windows, ``wm`` is the final watermark (default: max time + 1).
    """
    keys = []
    for k, _, _ in rows:
        if k not in keys:
            keys.append(k)
    out = []
    end = wm if wm is not None else (max(t for _, t, _ in rows) + 1 if rows else 0)
    for key in keys:
        elems = [(t, v) for k, t, v in rows if k == key]
        if count_mode:
            pos = [(i, v) for i, (_, v) in enumerate(elems)]
            o = 0
            limit = len(elems)
            coords = pos
        else:
            o = min(t for t, _ in elems) if origin is None else origin
            limit = end
            coords = elems
        for t in _instants(o, L, S, E, limit):
            s = window_start(o, L, S, t)
            content = [v for (x, v) in sorted(coords, key=lambda p: p[0]) if s <= x < t]
            if content:
                final = L is not None and t == s + L
                out.append((key, s, t, final, content))
    return sorted(out, key=lambda r: (r[0], r[1], r[2]))


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
