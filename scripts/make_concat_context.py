#!/usr/bin/env python3
"""Build the "2-to-2" extended-context corpus of Iida et al. (2019), Section 4.1:
"<previous> <CONCAT> <current>" within documents, on both sides.

The same command as `fairseq-ctx-make-concat-context`: the code is
fairseq_ctx/data/concat_context.py (run with --help for the options).
"""
import os
import sys

if __name__ == "__main__":  # a text tool: no need to import fairseq's models (~4 s); not when imported
    os.environ.setdefault("FAIRSEQ_CTX_NO_MODELS", "1")
try:
    from fairseq_ctx.cli import make_concat_context
except ModuleNotFoundError as error:  # run from a checkout, the package is importable only once installed
    if error.name != "fairseq_ctx":
        raise
    sys.exit("fairseq_ctx is not importable: run `make setup` in the checkout "
             "(or `pip install --no-build-isolation -e .` where torch and fairseq are installed)")
from fairseq_ctx.data.concat_context import (  # noqa: E402,F401  (re-exported for importers of this script)
    MARKER,
    CorpusError,
    concat_with_previous,
    make_main,
    read_lines,
    split_documents,
    write_atomically,
)

if __name__ == "__main__":
    sys.exit(make_concat_context())
