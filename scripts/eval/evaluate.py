#!/usr/bin/env python
"""Average last N checkpoints, generate (every sentence checked), sacreBLEU + tokenised BLEU,
paired bootstrap, BLEU by length: see fairseq_ctx/analysis/evaluation.py (`fairseq-ctx-evaluate`)."""
import sys

try:
    from fairseq_ctx.cli import evaluate
except ModuleNotFoundError as error:  # run from a checkout, the package is importable only once installed
    if error.name != "fairseq_ctx":
        raise
    sys.exit("fairseq_ctx is not importable: run `pip install -e .` in the checkout (or `make setup`)")

if __name__ == "__main__":
    sys.exit(evaluate())
