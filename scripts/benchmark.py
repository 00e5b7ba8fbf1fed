#!/usr/bin/env python
"""Speed / memory benchmark of fairseq-ctx architectures against stock fairseq baselines:
see fairseq_ctx/benchmarking/ (`fairseq-ctx-benchmark`; --help for the options and an example)."""
import sys

try:
    from fairseq_ctx.cli import benchmark
except ModuleNotFoundError as error:  # run from a checkout, the package is importable only once installed
    if error.name != "fairseq_ctx":
        raise
    sys.exit("fairseq_ctx is not importable: run `make setup` in the checkout "
             "(or `pip install --no-build-isolation -e .` where torch and fairseq are installed)")

if __name__ == "__main__":
    sys.exit(benchmark())
