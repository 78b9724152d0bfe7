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

from .errors import EpicError
from .topology import SinkNode, SourceNode, SplitNode, Topology

__all__ = ["to_dot", "render", "layers", "draw_matplotlib"]

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


#: output suffixes: DOT text, or what Graphviz ``dot -T<suffix>`` writes (matplotlib draws
#: svg, png and pdf when ``dot`` is missing)
_FORMATS = {"", "dot", "gv", "svg", "svgz", "png", "pdf", "jpg", "jpeg", "jpe", "gif", "ps",
            "eps", "json", "plain", "canon", "xdot", "bmp", "tif", "tiff", "webp"}


def render(topology: Topology, path: str | os.PathLike, counts: Mapping[str, int] | None = None
           ) -> tuple[str, str]:
    """Write the graph to ``path``; return ``(written_path, message)``.

    ``.dot`` / ``.gv`` paths get the DOT text. Other suffixes (``.svg``, ``.png``, ``.pdf``) are
    rendered by Graphviz ``dot`` if it is installed; otherwise the DOT text is written next to
    ``path`` with a ``.dot`` suffix and the message says how to get ``dot``.
    """
    path = os.fspath(path)
    fmt = os.path.splitext(path)[1].lstrip(".").lower()
    if fmt not in _FORMATS:
        raise EpicError(f"{path}: .{fmt} is not a format a graph is drawn in; name the file "
                          ".svg, .png or .pdf (or .dot for the DOT text)")
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
        if fmt in ("svg", "png", "pdf") and _matplotlib_available():
            draw_matplotlib(topology, path, counts)
            return path, f"wrote {path} (drawn with matplotlib; install graphviz for dot layout)"
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


def _matplotlib_available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def layers(topology: Topology) -> dict[str, tuple[int, int]]:
    """A layered layout: node name -> (column, row). A node's column is the length of the longest
    path from a source to it; rows follow the topological order within a column."""
    order = topology.topological_order()
    depth: dict[str, int] = {}
    for n in order:
        depth[n.name] = 1 + max((depth[s.node] for s in n.inputs), default=-1)
    rows: dict[int, int] = {}
    pos = {}
    for n in order:
        c = depth[n.name]
        pos[n.name] = (c, rows.get(c, 0))
        rows[c] = rows.get(c, 0) + 1
    return pos


_COLOURS = {"source": "#dbeafe", "sink": "#dcfce7", "splitstream": "#fef3c7"}


def draw_matplotlib(topology: Topology, path: str, counts: Mapping[str, int] | None = None
                    ) -> None:
    """Draw the graph with matplotlib (no Graphviz needed): boxes per node in layers, arrows per
    stream, arrow widths by row count as in :func:`to_dot`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch

    pos = layers(topology)
    ncols = 1 + max(c for c, _ in pos.values())
    nrows = 1 + max(r for _, r in pos.values())
    fig, ax = plt.subplots(figsize=(2.6 * ncols + 1, 1.1 * nrows + 1))
    ax.set_axis_off()
    height = {}
    for c, r in pos.values():
        height[c] = max(height.get(c, 0), r + 1)
    # centre each column on the tallest one
    xy = {name: (c * 2.6, -(r + (nrows - height[c]) / 2) * 1.1) for name, (c, r) in pos.items()}
    top = max(counts.values()) if counts else 0
    for n in topology.topological_order():
        for s in n.inputs:
            (x0, y0), (x1, y1) = xy[s.node], xy[n.name]
            rows = counts.get(s.name, 0) if counts else None
            width = 1.0
            if rows is not None:
                width = 1.0 + 7.0 * math.log1p(rows) / math.log1p(top) if top and rows else 0.5
            ax.add_patch(FancyArrowPatch((x0 + 0.9, y0), (x1 - 0.9, y1), arrowstyle="-|>",
                                         mutation_scale=10, linewidth=width, color="#475569",
                                         connectionstyle="arc3,rad=0.0"))
            label = s.name if rows is None else f"{s.name}\n{rows:,}"
            ax.text((x0 + x1) / 2 + 0.1, (y0 + y1) / 2 + 0.12, label, fontsize=6,
                    ha="center", color="#334155")
    for n in topology.topological_order():
        x, y = xy[n.name]
        ax.text(x, y, f"{n.name}\n{n.describe()}", ha="center", va="center", fontsize=7,
                bbox=dict(boxstyle="round,pad=0.35", fc=_COLOURS.get(n.kind, "#f5f5f5"),
                          ec="#64748b"))
    ax.set_xlim(-1.3, (ncols - 1) * 2.6 + 1.3)
    ax.set_ylim(-(nrows - 1) * 1.1 - 0.8, 0.8)
    ax.set_title(topology.name, fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
