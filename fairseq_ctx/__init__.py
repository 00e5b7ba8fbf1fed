"""fairseq-ctx: load with ``--user-dir <path to fairseq_ctx>``.

Importing this package registers every model family under ``fairseq_ctx/models`` with
fairseq (whenever fairseq is installed), so the architectures are available whether
fairseq imports the package through ``--user-dir`` or user code imports it first
(fairseq's ``--user-dir`` does nothing for a package that is already imported), and the
tokenizers ``--tokenizer jieba`` / ``--tokenizer mecab`` (``fairseq_ctx.tokenizers``).
The pure-torch mechanisms live in ``fairseq_ctx.modules``.
"""
import importlib.util
import logging
import os

# torch >= 2.6 loads with weights_only=True by default; fairseq checkpoints hold an
# argparse Namespace / omegaconf config, so resume, fairseq-generate and
# fairseq-interactive would fail to load them. torch reads the variable at load time.
os.environ.setdefault("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")

# FAIRSEQ_CTX_NO_MODELS=1 skips the registration (importing fairseq costs ~5 s of CPU per
# process): set by the data-preparation tools (scripts/data/common.sh, the concat-context
# wrappers), which never build a model.
if importlib.util.find_spec("fairseq") is not None and not os.environ.get("FAIRSEQ_CTX_NO_MODELS"):
    # fairseq's speech-synthesis task logs "Please install tensorboardX" at import, in every
    # command, although tensorboard (what --tensorboard-logdir uses) is installed
    logging.getLogger("fairseq.tasks.text_to_speech").setLevel(logging.WARNING)
    from . import models  # noqa: F401,E402  (registers the architectures)
    from . import tokenizers  # noqa: F401,E402  (registers --tokenizer jieba / mecab)
    from . import tasks  # noqa: F401,E402  (registers --task translation_exact_resume)
