#!/usr/bin/env python
"""Average last N checkpoints, generate (every sentence checked), sacreBLEU + tokenised BLEU,
paired bootstrap, BLEU by length: see fairseq_ctx/analysis/evaluation.py."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from fairseq_ctx.analysis.evaluation import main  # noqa: E402

if __name__ == "__main__":
    main()
