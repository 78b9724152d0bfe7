"""Generated sections of markdown files: the text between a begin and an end marker (HTML
comments such as ``<!-- bench_debs:begin -->``) belongs to a script; the rest of the file is
written by hand and kept as it is."""

from __future__ import annotations

from pathlib import Path

__all__ = ["replace_section", "write_section"]


def replace_section(text: str, section: str, begin: str, end: str) -> str:
    """``text`` with the part from ``begin`` to ``end`` (markers included) replaced by
    ``section`` (which holds both markers); appended after a blank line when the markers are
    missing."""
    if begin in text and end in text:
        a = text.index(begin)
        b = text.index(end) + len(end)
        return text[:a] + section.rstrip("\n") + text[b:]
    return text.rstrip("\n") + "\n\n" + section


def write_section(path: Path, section: str, begin: str, end: str) -> None:
    """:func:`replace_section` in the file ``path``."""
    path = Path(path)
    path.write_text(replace_section(path.read_text(), section, begin, end))
