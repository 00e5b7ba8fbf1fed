#!/usr/bin/env python
"""Average the last N checkpoints: see fairseq_ctx/evaluation/average.py
(`fairseq-ctx-average-checkpoints`; fairseq-ctx-evaluate --average-last N does it itself)."""
import sys

try:
    from fairseq_ctx.cli import average_checkpoints
except ModuleNotFoundError as error:  # run from a checkout, the package is importable only once installed
    if error.name != "fairseq_ctx":
        raise
    sys.exit("fairseq_ctx is not importable: run `make setup` in the checkout "
             "(or `pip install --no-build-isolation -e .` where torch and fairseq are installed)")

if __name__ == "__main__":
    sys.exit(average_checkpoints())
