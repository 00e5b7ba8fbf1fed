#!/usr/bin/env python
"""See fairseq_ctx/evaluate.py: generate with every sentence accounted for, detokenise, sacreBLEU."""
from fairseq_ctx.evaluate import main

if __name__ == "__main__":
    main()
