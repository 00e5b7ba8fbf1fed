#!/usr/bin/env python3
"""Evaluation step of the "2-to-2" setup (Iida et al., 2019, Section 4.1): keep only the
part after the last <CONCAT> marker of each line (wherever it stands) before scoring.

    strip_concat_context.py HYP REF -o HYP.stripped REF.stripped

A thin command-line wrapper: the code is fairseq_ctx/data/concat_context.py (run with
--help for the options).
"""
import os
import sys

if __name__ == "__main__":  # a text tool: no need to import fairseq's models (~5 s); not when imported
    os.environ.setdefault("FAIRSEQ_CTX_NO_MODELS", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from fairseq_ctx.data.concat_context import (  # noqa: E402,F401  (re-exported for importers of this script)
    MARKER,
    CorpusError,
    strip_context,
    strip_files,
    strip_main,
)

if __name__ == "__main__":
    sys.exit(strip_main())
