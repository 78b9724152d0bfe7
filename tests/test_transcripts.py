"""Golden transcripts replayed on the window engine (other runtimes replay the same files)."""

from pathlib import Path

import pytest

from epic.testing import load_transcripts, replay_on_operator, rows_key

TRANSCRIPTS = load_transcripts(Path(__file__).parent / "transcripts" / "windows.yaml")


@pytest.mark.parametrize("t", TRANSCRIPTS, ids=[t.name for t in TRANSCRIPTS])
def test_transcript_on_engine(t):
    """The engine emits exactly the expected rows, and at the step the transcript says."""
    per_step, rows = replay_on_operator(t)
    assert sorted(rows, key=rows_key) == sorted((dict(r) for r in t.expected), key=rows_key)
    for step, got in zip(t.steps, per_step):
        if "emits" in step:
            assert sorted(got, key=rows_key) == sorted(step["emits"], key=rows_key), step


@pytest.mark.parametrize("t", TRANSCRIPTS, ids=[t.name for t in TRANSCRIPTS])
def test_transcript_through_epic_run(t):
    """The in-process runner (a topology: source -> window -> sink) gives the expected rows."""
    import epic
    from epic.testing import transcript_topology

    result = epic.run(transcript_topology(t))
    rows = result.collected["out"].to_pylist()
    assert sorted(rows, key=rows_key) == sorted((dict(r) for r in t.expected), key=rows_key)
