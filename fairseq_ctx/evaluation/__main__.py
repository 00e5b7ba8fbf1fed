"""python -m fairseq_ctx.evaluation: the same command as fairseq-ctx-evaluate."""
import sys

from ..cli import evaluate

sys.exit(evaluate())
