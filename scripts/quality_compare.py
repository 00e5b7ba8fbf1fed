#!/usr/bin/env python
"""Real-data quality comparison of the demo configs against their stock baselines: see
fairseq_ctx/quality_compare.py (`fairseq-ctx-quality-compare`; --help)."""
import sys

try:
    from fairseq_ctx.cli import quality_compare
except ModuleNotFoundError as error:  # run from a checkout, the package is importable only once installed
    if error.name != "fairseq_ctx":
        raise
    sys.exit("fairseq_ctx is not importable: run `make setup` in the checkout "
             "(or `pip install --no-build-isolation -e .` where torch and fairseq are installed)")

if __name__ == "__main__":
    sys.exit(quality_compare())
