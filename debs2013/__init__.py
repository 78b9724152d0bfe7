"""The DEBS 2013 Grand Challenge (soccer monitoring) on epic: constants and input readers.

See ``../shared/docs/debs2013-spec.md`` for the challenge. Only epic's public API is used here.
"""

from debs2013.readers import (
    SENSOR_SCHEMA,
    GameMetadata,
    Interruption,
    InterruptionMarker,
    Person,
    Possession,
    Shot,
    interruption_markers,
    normalize_name,
    read_game,
    read_game_interruptions,
    read_interruptions,
    read_metadata,
    read_possession,
    read_possession_dir,
    read_shots,
    shared_dir,
)

__all__ = [
    "SENSOR_SCHEMA",
    "GameMetadata",
    "Interruption",
    "InterruptionMarker",
    "Person",
    "Possession",
    "Shot",
    "interruption_markers",
    "normalize_name",
    "read_game",
    "read_game_interruptions",
    "read_interruptions",
    "read_metadata",
    "read_possession",
    "read_possession_dir",
    "read_shots",
    "shared_dir",
]
