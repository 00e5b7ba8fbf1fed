#!/usr/bin/env python
"""routing statistics of a trained model over a data set (table + PNG): see fairseq_ctx/analysis/model_statistics.py."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from fairseq_ctx.analysis.model_statistics import main  # noqa: E402

if __name__ == "__main__":
    main("routing")
