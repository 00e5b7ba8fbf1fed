"""Data preparation helpers used by scripts/ (corpus extraction, splitting, tokenisation)."""
