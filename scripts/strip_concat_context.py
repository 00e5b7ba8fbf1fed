#!/usr/bin/env python3
"""Evaluation step of the "2-to-2" setup (Iida et al., 2019, Section 4.1): keep only the
part after the last <CONCAT> marker of each line (wherever it stands) before scoring.

    strip_concat_context.py HYP REF -o HYP.stripped REF.stripped

The same command as `fairseq-ctx-strip-concat-context`: the code is
fairseq_ctx/data/concat_context.py (run with --help for the options).
"""
import os
import sys

if __name__ == "__main__":  # a text tool: no need to import fairseq's models (~4 s); not when imported
    os.environ.setdefault("FAIRSEQ_CTX_NO_MODELS", "1")
try:
    from fairseq_ctx.cli import strip_concat_context
except ModuleNotFoundError as error:  # run from a checkout, the package is importable only once installed
    if error.name != "fairseq_ctx":
        raise
    sys.exit("fairseq_ctx is not importable: run `make setup` in the checkout "
             "(or `pip install --no-build-isolation -e .` where torch and fairseq are installed)")
from fairseq_ctx.data.concat_context import (  # noqa: E402,F401  (re-exported for importers of this script)
    MARKER,
    CorpusError,
    strip_context,
    strip_files,
    strip_main,
)

if __name__ == "__main__":
    sys.exit(strip_concat_context())
