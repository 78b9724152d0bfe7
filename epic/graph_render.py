"""Draw a topology as Graphviz DOT text; render it with ``dot`` when installed.

The DOT text is deterministic (nodes and edges in topological order), so tests compare it as text.
After a run, edge widths follow the measured row counts (like the EPIC paper's figures): the
busiest edge is drawn 8 points wide, the others on a logarithmic scale, and each edge is labelled
with its stream name and row count.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
from typing import Mapping

from .topology import SinkNode, SourceNode, SplitNode, Topology

__all__ = ["to_dot", "render"]

_SHAPES = {
    "source": "cds",
    "sink": "folder",
    "splitstream": "trapezium",
    "merge": "invtrapezium",
    "combine": "invtrapezium",
    "window": "box3d",
    "process": "component",
}


def _q(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def to_dot(topology: Topology, counts: Mapping[str, int] | None = None) -> str:
    """DOT text of ``topology``; ``counts`` (rows per stream name) sets edge widths and labels.

    Example:
        >>> import epic
        >>> t = epic.Topology("tiny")
        >>> s = t.source("src", epic.iterator_source([], schema={"ts": "int64"}, time="ts",
        ...              unit="s"))
        >>> _ = t.sink("out", s, epic.console_sink())
        >>> print(to_dot(t), end="")
        digraph "tiny" {
          rankdir=LR;
          node [fontname="Helvetica", fontsize=10, style=filled, fillcolor="#f5f5f5"];
          edge [fontname="Helvetica", fontsize=9];
          "src" [label="src\\npython list", shape=cds, fillcolor="#dbeafe"];
          "out" [label="out\\nconsole", shape=folder, fillcolor="#dcfce7"];
          "src" -> "out" [label="src", penwidth=1.0];
        }
    """
    lines = [f"digraph {_q(topology.name)} {{", "  rankdir=LR;",
             '  node [fontname="Helvetica", fontsize=10, style=filled, fillcolor="#f5f5f5"];',
             '  edge [fontname="Helvetica", fontsize=9];']
    order = topology.topological_order()
    for n in order:
        attrs = [f"label={_q(n.name + chr(10) + n.describe())}",
                 f"shape={_SHAPES.get(n.kind, 'box')}"]
        if isinstance(n, SourceNode):
            attrs.append('fillcolor="#dbeafe"')
        elif isinstance(n, SinkNode):
            attrs.append('fillcolor="#dcfce7"')
        elif isinstance(n, SplitNode):
            attrs.append('fillcolor="#fef3c7"')
        lines.append(f"  {_q(n.name)} [{', '.join(attrs)}];".replace("\n", "\\n"))
    top = max(counts.values()) if counts else 0
    for n in order:
        for i, s in enumerate(n.inputs):
            label = s.name
            width = 1.0
            if counts is not None:
                rows = counts.get(s.name, 0)
                label = f"{s.name}\\n{rows:,} rows"
                if top > 0 and rows > 0:
                    width = round(1.0 + 7.0 * math.log1p(rows) / math.log1p(top), 2)
                else:
                    width = 0.5
            port = f", taillabel={_q(str(s.port))}" if s.port >= 0 else ""
            head = f", headlabel={_q(str(i))}" if len(n.inputs) > 1 else ""
            lines.append(f"  {_q(s.node)} -> {_q(n.name)} [label={_q(label)}, "
                         f"penwidth={width}{port}{head}];".replace("\\\\n", "\\n"))
    lines.append("}")
    return "\n".join(lines) + "\n"


def render(topology: Topology, path: str | os.PathLike, counts: Mapping[str, int] | None = None
           ) -> tuple[str, str]:
    """Write the graph to ``path``; return ``(written_path, message)``.

    ``.dot`` / ``.gv`` paths get the DOT text. Other suffixes (``.svg``, ``.png``, ``.pdf``) are
    rendered by Graphviz ``dot`` if it is installed; otherwise the DOT text is written next to
    ``path`` with a ``.dot`` suffix and the message says how to get ``dot``.
    """
    path = os.fspath(path)
    text = to_dot(topology, counts)
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    stem, ext = os.path.splitext(path)
    fmt = ext.lstrip(".").lower()
    if fmt in ("dot", "gv", ""):
        out = path if fmt else path + ".dot"
        with open(out, "w", encoding="utf-8") as f:
            f.write(text)
        return out, f"wrote DOT text to {out}"
    dot = shutil.which("dot")
    if dot is None:
        out = stem + ".dot"
        with open(out, "w", encoding="utf-8") as f:
            f.write(text)
        return out, (f"Graphviz `dot` is not installed, so wrote DOT text to {out} instead of "
                     f"{path}; install graphviz (e.g. `apt-get install graphviz`) or render it "
                     f"elsewhere with `dot -T{fmt} {out} -o {path}`")
    proc = subprocess.run([dot, f"-T{fmt}", "-o", path], input=text, text=True,
                          capture_output=True)
    if proc.returncode != 0:
        out = stem + ".dot"
        with open(out, "w", encoding="utf-8") as f:
            f.write(text)
        return out, f"dot failed ({proc.stderr.strip()}); wrote DOT text to {out}"
    return path, f"wrote {path}"
