"""matplotlib for the benchmark plots: no display, one way to save."""

from __future__ import annotations

from pathlib import Path

__all__ = ["pyplot", "save"]


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend (PNG files; no display needed)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def save(fig, path: Path, dpi: int = 100) -> Path:
    """Lay ``fig`` out, write it to ``path`` (its folder created) and close it."""
    plt = pyplot()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path
