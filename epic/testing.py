"""Transcript tests: golden input / watermark / expected-output files replayed on any runtime.

A transcript file (YAML) holds a list of transcripts; each is::

    name: few_time_early_emission          # unique; becomes the test id
    rule: what semantic rule it pins down  # prose
    schema: {k: int64, ts: int64, v: int64}
    time: ts
    unit: s
    key: k                                 # or a list, or null
    window: {kind: few_time, length: 4, stride: 2, ef: 1}   # any constructor in epic.windows
    aggregates: [{fn: count}, {fn: sum, column: v}]         # fn: a registered aggregate name
    steps:                                 # fed in order
      - rows: [[0, 0, 1], [0, 1, 2]]       # one batch, values in schema order
        emits: [...]                       # optional: rows this step must emit (engine level)
      - watermark: 10
      - end: true
    expected: [...]                        # every output row, as mappings; compared after sorting

Runtimes that cannot observe per-step timing (a Spark deploy) compare ``expected`` only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from . import aggregates as _aggs
from . import windows as _windows
from .errors import SpecError

__all__ = ["Transcript", "load_transcripts", "replay_on_operator", "rows_key", "transcript_topology"]

_WINDOW_KINDS = {
    "few_time": _windows.few_time,
    "few_count": _windows.few_count,
    "tumbling": _windows.tumbling,
    "sliding": _windows.sliding,
    "landmark": _windows.landmark,
    "tumbling_count": _windows.tumbling_count,
    "sliding_count": _windows.sliding_count,
    "landmark_count": _windows.landmark_count,
}


@dataclass(frozen=True)
class Transcript:
    """One golden transcript (see the module docstring for the file format)."""

    name: str
    rule: str
    schema: pa.Schema
    time: str
    unit: str
    key: Any
    window: dict
    aggregates: tuple
    steps: tuple
    expected: tuple

    def window_spec(self):
        """The window spec the transcript describes."""
        params = dict(self.window)
        kind = params.pop("kind")
        try:
            return _WINDOW_KINDS[kind](**params)
        except KeyError:
            raise SpecError(f"transcript {self.name!r}: unknown window kind {kind!r}") from None

    def aggregate_specs(self) -> list:
        """The bound aggregates the transcript describes."""
        out = []
        for a in self.aggregates:
            cols = a.get("columns") or ([a["column"]] if a.get("column") else [])
            out.append(_aggs.agg(a["fn"], *cols, name=a.get("name")))
        return out

    def batches(self):
        """(kind, payload) per step: ('rows', RecordBatch) | ('watermark', int) | ('end', None)."""
        for step in self.steps:
            if "rows" in step:
                cols = list(zip(*step["rows"])) if step["rows"] else [[] for _ in self.schema]
                yield "rows", pa.record_batch(
                    [pa.array(list(c), type=f.type) for c, f in zip(cols, self.schema)],
                    schema=self.schema)
            elif "watermark" in step:
                yield "watermark", int(step["watermark"])
            elif step.get("end"):
                yield "end", None


def load_transcripts(path: str | Path) -> list[Transcript]:
    """Read every transcript of a YAML file."""
    import yaml  # a dev dependency: transcripts are a testing tool

    docs = yaml.safe_load(Path(path).read_text())
    out = []
    for d in docs:
        schema = pa.schema([(n, _type(t)) for n, t in d["schema"].items()])
        out.append(Transcript(
            name=d["name"], rule=d.get("rule", ""), schema=schema, time=d["time"],
            unit=d.get("unit", "s"), key=d.get("key"), window=d["window"],
            aggregates=tuple(d["aggregates"]), steps=tuple(d["steps"]),
            expected=tuple(d["expected"]),
        ))
    names = [t.name for t in out]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise SpecError(f"{path}: transcript names must be unique; repeated: {sorted(dup)}")
    return out


def _type(name: str) -> pa.DataType:
    try:
        return getattr(pa, name)()
    except AttributeError:
        raise SpecError(f"unknown Arrow type {name!r} in a transcript schema") from None


def rows_key(row: dict):
    """Sort key that orders output rows deterministically (by repr of each value)."""
    return tuple(sorted((k, repr(v)) for k, v in row.items()))


def replay_on_operator(t: Transcript):
    """Run a transcript directly on the window engine.

    Returns ``(per_step_outputs, all_rows)``: for each step the list of rows it emitted.
    """
    op = _windows.build_window_operator(t.window_spec(), t.aggregate_specs(), t.schema, t.time,
                                        t.unit, t.key)
    per_step = []
    for kind, payload in t.batches():
        if kind == "rows":
            out = op.on_batch(payload)
        elif kind == "watermark":
            out = op.on_watermark(payload)
        else:
            out = op.on_end()
        per_step.append([r for b in out for r in b.to_pylist()])
    return per_step, [r for step in per_step for r in step]


def transcript_topology(t: Transcript, *, sink: str = "out"):
    """A topology replaying ``t``: an iterator source of its row batches, the window, a sink.

    Runtimes without per-step control (``epic run``, ``epic deploy``) replay transcripts through
    this: watermark steps become :class:`~epic.sources.Watermark` heartbeats of the source; only
    ``expected`` is compared.
    """
    from .sinks import collect_sink
    from .sources import iterator_source
    from .topology import Topology

    from .sources import Watermark

    items = [payload if kind == "rows" else Watermark(payload)
             for kind, payload in t.batches() if kind != "end"]
    topo = Topology(f"transcript_{t.name}")
    s = topo.source("input", iterator_source(items, schema=t.schema, time=t.time, unit=t.unit))
    w = topo.window("window", s, t.window_spec(), key=t.key, aggregates=t.aggregate_specs())
    topo.sink(sink, w, collect_sink())
    return topo
