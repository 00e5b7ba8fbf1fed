"""Evaluation and analysis used by scripts/eval, scripts/analysis and scripts/reproduce."""
