#!/usr/bin/env python
"""Gate statistics of a trained model over a data set (table + PNG): see
fairseq_ctx/analysis/model_statistics.py (`fairseq-ctx-gate-statistics`)."""
import sys

try:
    from fairseq_ctx.cli import gate_statistics
except ModuleNotFoundError as error:  # run from a checkout, the package is importable only once installed
    if error.name != "fairseq_ctx":
        raise
    sys.exit("fairseq_ctx is not importable: run `make setup` in the checkout "
             "(or `pip install --no-build-isolation -e .` where torch and fairseq are installed)")

if __name__ == "__main__":
    sys.exit(gate_statistics())
