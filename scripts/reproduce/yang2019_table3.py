#!/usr/bin/env python
"""Reproduce yang2019_table3: run (or print with --dry-run) every row's training and evaluation, then
assemble the table in the paper's layout (see fairseq_ctx/reproduce/tables.py, --help).
The same command as `fairseq-ctx-reproduce yang2019_table3`."""
import sys

try:
    from fairseq_ctx.cli import reproduce
except ModuleNotFoundError as error:  # run from a checkout, the package is importable only once installed
    if error.name != "fairseq_ctx":
        raise
    sys.exit("fairseq_ctx is not importable: run `make setup` in the checkout "
             "(or `pip install --no-build-isolation -e .` where torch and fairseq are installed)")

if __name__ == "__main__":
    sys.exit(reproduce(["yang2019_table3", *sys.argv[1:]]))
