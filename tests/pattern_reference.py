"""A brute-force sequence-pattern matcher written from docs/patterns.md, not from epic.patterns.

It sees each key's whole sequence at once and follows the page's rules literally: an attempt at
row s matches the elements in order (a var takes one row, a star the maximal run), every row of
the match is at most ``within`` after the first; a match resumes the search at the row after it,
a failed attempt at s + 1; an anchored pattern tries s = 0 only. Aggregates are folded from
scratch over the star's rows with init / add / result.
"""

from __future__ import annotations

import inspect

import pyarrow as pa

import epic


def _nargs(fn) -> int:
    return len([p for p in inspect.signature(fn).parameters.values() if p.default is p.empty])


def _star_value(el, rows, time):
    values = {}
    for a in el.aggregates:
        st = a.aggregate.init()
        for r in rows:
            e = (r[time] if not a.columns else r[a.columns[0]] if len(a.columns) == 1
                 else tuple(r[c] for c in a.columns))
            st = a.aggregate.add(st, e)
        values[a.name] = a.aggregate.result(st)
    return epic.StarValue(len(rows), rows[0], rows[-1], values)


def _holds(el, row, prev, m, mask_ok):
    if not mask_ok:
        return False
    if el.where is None:
        return True
    n = _nargs(el.where)
    return bool(el.where(row) if n == 1 else el.where(row, prev) if n == 2
                else el.where(row, prev, m))


def _attempt(pat, seq, masks, s, key, time, within):
    t0 = seq[s][time]
    binds: dict = {}
    i = s

    def ok(i):
        return i < len(seq) and (within is None or seq[i][time] - t0 <= within)

    for j, el in enumerate(pat.elements):
        if not el.star:
            if not ok(i) or not _holds(el, seq[i], None, epic.Match(key, t0, dict(binds)),
                                       masks[i][j]):
                return None
            binds[el.name] = seq[i]
            i += 1
            continue
        run: list = []
        while ok(i):
            trial = {**binds, el.name: _star_value(el, run + [seq[i]], time)}
            if not _holds(el, seq[i], run[-1] if run else None, epic.Match(key, t0, trial),
                          masks[i][j]):
                break
            run.append(seq[i])
            i += 1
        if not run:
            return None
        binds[el.name] = _star_value(el, run, time)
        if el.having is not None and not el.having(epic.Match(key, t0, dict(binds))):
            return None
    return i, binds


def brute_matches(pat, rows: list[dict], *, key: str | None, time: str, within=None,
                  select=None) -> dict:
    """{key: [(start index, end index, selected values...)]} per key, in order."""
    seqs: dict = {}
    for r in rows:
        seqs.setdefault(r[key] if key else None, []).append(r)
    out = {}
    for k, seq in seqs.items():
        if seq:
            batch = pa.RecordBatch.from_pylist(seq)
            masks = [[True] * len(pat.elements) for _ in seq]
            for j, el in enumerate(pat.elements):
                if el.mask is not None:
                    for i, v in enumerate(el.mask(batch)):
                        masks[i][j] = bool(v.as_py() if hasattr(v, "as_py") else v)
        found = []
        s = 0
        while s < len(seq):
            res = _attempt(pat, seq, masks, s, k, time, within)
            if res is None:
                s += 1
            else:
                end, binds = res
                m = epic.Match(k, seq[s][time], binds)
                found.append((seq[s][time], seq[end - 1][time],
                              *[fn(m) for fn in (select or {}).values()]))
                s = end
            if pat.anchored:
                break
        out[k] = found
    return out
