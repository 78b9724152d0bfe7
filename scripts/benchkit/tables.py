"""Tables of benchmark results: number formatting, markdown, console.

Every function takes column names and rows of already formatted cells (strings), so a script
formats its numbers once and prints the same rows to the console and into docs.
"""

from __future__ import annotations

__all__ = ["fmt_num", "md_table", "print_table", "text_table"]


def fmt_num(v, digits: int = 0) -> str:
    """``1234567`` -> ``1,234,567``; None -> ``-``."""
    if v is None:
        return "-"
    return f"{v:,.{digits}f}"


def md_table(cols, rows, left=()) -> str:
    """A markdown table; columns named in ``left`` are left-aligned, the others right-aligned
    (numbers). ``|`` in a cell becomes ``/``."""
    out = ["| " + " | ".join(cols) + " |",
           "|" + "|".join("---" if c in left else "---:" for c in cols) + "|"]
    out += ["| " + " | ".join(str(v).replace("|", "/") for v in row) + " |" for row in rows]
    return "\n".join(out)


def text_table(cols, rows, left=()) -> str:
    """A markdown table padded to aligned columns, for a console or a log (same cells as
    :func:`md_table`)."""
    cells = [[str(c) for c in cols]] + [[str(v).replace("|", "/") for v in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(cols))]

    def line(r):
        return "| " + " | ".join(v.ljust(w) if c in left else v.rjust(w)
                                 for v, w, c in zip(r, widths, cols)) + " |"

    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(cells[0]), rule, *map(line, cells[1:])])


def print_table(cols, rows, left=(), title: str | None = None, console=None) -> None:
    """Print a rich table (to ``console``, default a new 140-column one); a plain
    :func:`text_table` where rich is not installed."""
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        if title:
            print(title)
        print(text_table(cols, rows, left))
        return
    t = Table(title=title, title_justify="left")
    for c in cols:
        t.add_column(c, justify="left" if c in left else "right")
    for r in rows:
        t.add_row(*[str(v) for v in r])
    (console or Console(width=140)).print(t)
