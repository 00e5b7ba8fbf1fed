#!/usr/bin/env python
"""Reproduce iida2019_table3: run (or print with --dry-run) every row's training and evaluation, then
assemble the table in the paper's layout (see fairseq_ctx/reproduce/tables.py, --help)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from fairseq_ctx.reproduce.tables import main  # noqa: E402

if __name__ == "__main__":
    main("iida2019_table3")
