"""Parameter counts of table rows: each model is built by fairseq from the row's config
(paper train.args + row args, parsed exactly as fairseq-train does) on in-memory
dictionaries, on the meta device (shapes only: nothing is allocated or initialised, so a
whole table takes seconds on CPU; the counts are those of a real build).

Dictionary sizes are not reported by the papers; the assumed sizes (entries per side,
fairseq's 4 special symbols included) are the ones that put each paper's BASELINE row
on its published count, so the other rows test the architectures:
  yang2019 / wang2019: 42,834 per side (shared decoder input/output embeddings) -> 88.0M base;
  iida2019: source 33,264 and target 32,256 entries (SentencePiece 32K per language, fairseq's
            specials, padded to a multiple of 8): the only sizes that put BOTH the LSTM baseline
            (68,460,544) and the Transformer (81,604,608) on Table 5 (two linear equations,
            512 Vs + 1025 Vt and 512 Vs + 1024 Vt; see docs/experiments.md).
"""
import os
from typing import Dict, Iterable, Optional

import torch

from .train import CONFIGS, USER_DIR, model_args

VOCAB = {"yang2019": (42834, 42834), "wang2019": (42834, 42834), "iida2019": (33264, 32256), "cao": (42834, 42834)}


def make_dictionary(entries):
    from fairseq.data import Dictionary

    dictionary = Dictionary()
    for i in range(entries - len(dictionary)):
        dictionary.add_symbol(f"w{i}")
    assert len(dictionary) == entries
    return dictionary


def parse_training_args(argv, return_parser=False):
    """The Namespace ``fairseq-train ARGV`` builds (fairseq's training parser, with the
    plugin's architectures registered and the arch's / task's / criterion's options added);
    with ``return_parser``, also that parser. An argparse error becomes one ValueError with
    argparse's message (not a SystemExit with a usage dump)."""
    import contextlib
    import io

    from fairseq import options

    import fairseq_ctx.models  # noqa: F401  (registers the architectures, as --user-dir does)
    import fairseq_ctx.tasks  # noqa: F401  (and --task translation_exact_resume)

    parser = options.get_training_parser()
    parser.prog = "fairseq-train"  # whose arguments these are (not this command's)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = options.parse_args_and_arch(parser, argv)
    except SystemExit as e:
        msg = [line for line in err.getvalue().splitlines() if "error:" in line]
        # the reason first: callers may shorten the message, and the arguments can be long
        raise ValueError(f"fairseq could not parse the arguments: {msg[-1][:500] if msg else e} "
                         f"(arguments: {' '.join(argv)!r})") from None
    return (args, parser) if return_parser else args


def _error_text(error):
    """One line naming the error: its message's first line, or (a bare assert) the failing
    source line."""
    import traceback

    text = str(error).strip().splitlines()
    if not text and error.__traceback__ is not None:
        frame = traceback.extract_tb(error.__traceback__)[-1]
        text = [f"{frame.line} ({os.path.basename(frame.filename)}:{frame.lineno})"]
    return f"{type(error).__name__}: {text[0] if text else ''}"[:600]


# fairseq's config conversion takes ~0.3 s (hydra composes the whole config): done once per
# distinct set of options outside the model's, which the cells of a table mostly share
_SCHEDULE_ERRORS: Dict[tuple, Optional[str]] = {}


def _schedule_error(args) -> Optional[str]:
    """The error fairseq-train would stop with while converting its options to its config
    (cli_main) or building its lr scheduler (at its start), or None. The scheduler is built
    over a stand-in SGD on one parameter: the configured optimizer's constructor is not run,
    as what it builds depends on the machine that runs it (FairseqAdam takes apex's fused Adam
    where CUDA and apex are there, which opens a CUDA context in this process; --fp16-adam-stats
    needs it), not on the one that will train; its options are type-checked by the conversion."""
    import argparse
    import warnings

    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.models import ARCH_MODEL_REGISTRY
    from fairseq.optim import lr_scheduler
    from fairseq.optim.sgd import SGD

    model_options = argparse.ArgumentParser(add_help=False)
    ARCH_MODEL_REGISTRY[args.arch].add_args(model_options)
    per_cell = {a.dest for a in model_options._actions} | {"arch", "save_dir", "distributed_port"}
    key = tuple(sorted((k, repr(v)) for k, v in vars(args).items() if k not in per_cell))
    if key not in _SCHEDULE_ERRORS:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                cfg = convert_namespace_to_omegaconf(args)
            stand_in = SGD(argparse.Namespace(lr=[0.1], momentum=0.0, weight_decay=0.0),
                           [torch.nn.Parameter(torch.zeros(1))])
            lr_scheduler.build_lr_scheduler(cfg.lr_scheduler, stand_in).step_update(0)
            _SCHEDULE_ERRORS[key] = None
        except Exception as error:  # noqa: BLE001  (whatever stops fairseq-train: say why)
            _SCHEDULE_ERRORS[key] = _error_text(error)
    return _SCHEDULE_ERRORS[key]


def model_build_error(argv) -> Optional[str]:
    """The error ``fairseq-train ARGV`` would stop with before its first update, or None:
    ARGV (data directory first) parsed by fairseq's training parser, converted to fairseq's
    config and its lr scheduler built (``_schedule_error``: two --lr values under
    inverse_sqrt, tri_stage without phases, polynomial_decay without --total-num-update fail
    there), the task set up on the data's dictionaries, the model built on the meta device
    (shapes only: no weights, about a second) and its criterion. Not checked: the configured
    optimizer's constructor (see ``_schedule_error``), the --fp16 / --bf16 / --amp optimizer
    wrappers (they need CUDA: e.g. --fp16 with adafactor, which has no flat parameters, fails
    at fairseq-train's start), the datasets and the hardware (e.g. --fp16 without a GPU)."""
    import logging

    from fairseq import tasks

    # setup_task logs each dictionary's size at INFO, a failed config conversion its overrides at
    # ERROR (the error is returned), hydra its job names at DEBUG
    quiet = [logging.getLogger(name) for name in ("fairseq", "hydra")]
    levels = [logger.level for logger in quiet]
    for logger in quiet:
        logger.setLevel(logging.CRITICAL)
    try:
        args = parse_training_args(list(argv))
        if getattr(args, "optimizer", None) is None:  # fairseq-train's main asserts it, before any build
            return "no --optimizer (fairseq-train: \"optimizer is required!\"): a paper's train.args gives one"
        # converted before anything is built, as fairseq-train's cli_main does
        schedule = _schedule_error(args)
        if schedule:
            return schedule
        task = tasks.setup_task(args)
        with torch.device("meta"):
            task.build_model(args)
        task.build_criterion(args)
    except Exception as error:  # noqa: BLE001  (whatever stops fairseq-train: say why)
        return _error_text(error)
    finally:
        for logger, level in zip(quiet, levels):
            logger.setLevel(level)
    return None


def parse_model_args(arch_args, with_options=False):
    """The Namespace fairseq-train builds from these model options (arch defaults filled
    in); with ``with_options``, also the set of option strings fairseq-train accepts for them."""
    argv = ["unused-data", "--user-dir", USER_DIR, "--task", "translation",
            "--source-lang", "src", "--target-lang", "tgt", *arch_args]
    args, parser = parse_training_args(argv, return_parser=True)
    # the arch function fills the defaults only when the model is built: apply it now
    from fairseq.models import ARCH_CONFIG_REGISTRY

    ARCH_CONFIG_REGISTRY[args.arch](args)
    return (args, set(parser._option_string_actions)) if with_options else args


def count_parameters(arch_args, src_entries, tgt_entries=None, device="meta"):
    from fairseq.tasks.translation import TranslationTask

    args = parse_model_args(arch_args)
    task = TranslationTask(args, make_dictionary(src_entries), make_dictionary(tgt_entries or src_entries))
    with torch.device(device):
        model = task.build_model(args)
    return sum(p.numel() for p in model.parameters())


def count_rows(table, rows: Iterable = None, device="meta") -> Dict[str, object]:
    """row key -> parameter count (or the error text when an architecture is missing)."""
    counts = {}
    for row in rows or table.rows:
        try:
            counts[row.key] = count_parameters(model_args(os.path.join(CONFIGS, row.config)),
                                               *VOCAB[table.paper], device=device)
        except Exception as error:  # noqa: BLE001  (an arch not landed yet: say so in the table)
            counts[row.key] = f"not built: {type(error).__name__}: {str(error).splitlines()[0][:80]}"
    return counts
