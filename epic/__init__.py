"""epic."""
