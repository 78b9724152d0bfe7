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
