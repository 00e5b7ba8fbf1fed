#!/usr/bin/env python3
"""Build the "2-to-2" extended-context corpus of Iida et al. (2019), Section 4.1:
"<previous> <CONCAT> <current>" within documents, on both sides.

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
    concat_with_previous,
    make_main,
    read_lines,
    split_documents,
    write_atomically,
)

if __name__ == "__main__":
    sys.exit(make_main())
