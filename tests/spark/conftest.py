"""One local[2] SparkSession for the whole test session (starting one costs 5-15 s)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    """The shared session, with epic's settings and the epic_topic data source registered."""
    from epic.spark import build_session

    session = build_session("local[2]", app_name="epic-tests")
    yield session
    for q in session.streams.active:
        q.stop()
    session.stop()
