"""Training settings, per-table experiment definitions and table assembly (scripts/reproduce)."""
