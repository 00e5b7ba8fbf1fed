#!/usr/bin/env python
"""See fairseq_ctx/evaluate.py (`fairseq-ctx-bleu`): generate with every sentence accounted for,
detokenise, sacreBLEU."""
import sys

try:
    from fairseq_ctx.cli import bleu
except ModuleNotFoundError as error:  # run from a checkout, the package is importable only once installed
    if error.name != "fairseq_ctx":
        raise
    sys.exit("fairseq_ctx is not importable: run `pip install -e .` in the checkout (or `make setup`)")

if __name__ == "__main__":
    sys.exit(bleu())
