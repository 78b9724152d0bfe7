"""The test tree itself: pytest imports test modules by basename (no __init__ files here)."""

from collections import Counter
from pathlib import Path


def test_test_module_names_are_unique():
    """Two test files with one basename make pytest stop at collection; keep them unique."""
    names = Counter(p.name for p in Path(__file__).parent.rglob("test_*.py"))
    assert [n for n, c in names.items() if c > 1] == []
