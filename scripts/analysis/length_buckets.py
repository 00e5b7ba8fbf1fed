#!/usr/bin/env python
"""BLEU by source-length bucket for several systems (table + PNG): see
fairseq_ctx/evaluation/length_buckets.py (`fairseq-ctx-length-buckets`)."""
import sys

try:
    from fairseq_ctx.cli import length_buckets
except ModuleNotFoundError as error:  # run from a checkout, the package is importable only once installed
    if error.name != "fairseq_ctx":
        raise
    sys.exit("fairseq_ctx is not importable: run `pip install -e .` in the checkout (or `make setup`)")

if __name__ == "__main__":
    sys.exit(length_buckets())
