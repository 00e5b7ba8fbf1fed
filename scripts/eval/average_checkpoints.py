#!/usr/bin/env python
"""Average the last N checkpoints: see fairseq_ctx/analysis/average.py."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from fairseq_ctx.analysis.average import main  # noqa: E402

if __name__ == "__main__":
    main()
