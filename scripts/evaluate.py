#!/usr/bin/env python
"""Evaluate one trained system (`fairseq-ctx-evaluate`; --help for the options and each paper's
defaults, --paper P): checkpoint averaging or choice, generation with every sentence accounted
for, sacreBLEU + tokenised BLEU, paired bootstrap, BLEU by length. Code: fairseq_ctx/evaluation/."""
import sys

try:
    from fairseq_ctx.cli import evaluate
except ModuleNotFoundError as error:  # run from a checkout, the package is importable only once installed
    if error.name != "fairseq_ctx":
        raise
    sys.exit("fairseq_ctx is not importable: run `make setup` in the checkout "
             "(or `pip install --no-build-isolation -e .` where torch and fairseq are installed)")

if __name__ == "__main__":
    sys.exit(evaluate())
