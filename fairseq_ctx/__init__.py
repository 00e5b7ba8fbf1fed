"""fairseq-ctx: load with ``--user-dir <path to fairseq_ctx>``.

Importing this package from fairseq (``--user-dir``, or any process that imported
fairseq first) registers every model family under ``fairseq_ctx/models``. The data and
evaluation helpers (``fairseq_ctx.data``, ``fairseq_ctx.evaluate``) and the pure-torch
``fairseq_ctx.modules`` do not pay for importing fairseq; ``import fairseq_ctx.models``
registers the models explicitly.
"""
import os
import sys

# torch >= 2.6 loads with weights_only=True by default; fairseq checkpoints hold an
# argparse Namespace / omegaconf config, so resume, fairseq-generate and
# fairseq-interactive would fail to load them. torch reads the variable at load time.
os.environ.setdefault("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")

if "fairseq" in sys.modules:
    from . import models  # noqa: F401  (registers the architectures)
