#!/usr/bin/env python
"""BLEU by source-length bucket for several systems (table + PNG): see
fairseq_ctx/evaluation/length_buckets.py (`fairseq-ctx-length-buckets`)."""
import sys

try:
    from fairseq_ctx.cli import length_buckets
except ModuleNotFoundError as error:  # run from a checkout, the package is importable only once installed
    if error.name != "fairseq_ctx":
        raise
    sys.exit("fairseq_ctx is not importable: run `make setup` in the checkout "
             "(or `pip install --no-build-isolation -e .` where torch and fairseq are installed)")

if __name__ == "__main__":
    sys.exit(length_buckets())
