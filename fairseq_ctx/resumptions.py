"""Where a training was resumed, read from fairseq-train's own log, and whether its batches
went on as the uninterrupted training's.

fairseq 0.12 groups the training sentences into batches when it builds a process's epoch
iterator, shuffling sentences of equal length with numpy seed ``--seed`` + the epoch it is built
for, and keeps that iterator for every later epoch of the process (unless the batches are built
afresh every epoch: ``--update-epoch-batch-itr True``, ``--grouped-shuffling``, data split into
shards ``bin1:bin2``). An uninterrupted training thus keeps its epoch-1 batches, and fairseq's
``translation`` resumed in epoch E > 1 fills the same batch lengths with other sentences: a
valid run of its seed, not the uninterrupted one (``--task translation_exact_resume``,
fairseq_ctx/tasks, keeps the epoch-1 grouping). Each attempt of fairseq-train logs its task
class ("task: X") and, where it resumes from a checkpoint's data position, "Loaded checkpoint
... (epoch E @ N updates)" with E the epoch its iterator is built for; a training started from
nothing logs "No existing checkpoint found", one started from a pretrained model
(``--finetune-from-model``) "loading pretrained model from": the log's earlier resumptions are
then another training's.
"""
import ast
import os
import re

from .checkpoint_repair import LAST, stored_position
from .reproduce.train import EXACT_RESUME_TASK, option_value

# the class names fairseq-train logs for fairseq's translation and for translation_exact_resume
TRANSLATION_TASK, EXACT_RESUME_TASK_CLASS = "TranslationTask", "ExactResumeTranslationTask"

# --task names -> the class names fairseq-train logs (other tasks are not judged)
_TASK_CLASSES = {"translation": TRANSLATION_TASK, EXACT_RESUME_TASK: EXACT_RESUME_TASK_CLASS}

_TASK = re.compile(r"\| fairseq_cli\.train \| task: (\w+)")
_LOADED = re.compile(r"Loaded checkpoint .* \(epoch (\d+) @ (\d+) updates\)")
_FRESH = re.compile(r"\| No existing checkpoint found ")
_PRETRAINED = re.compile(r"\| loading pretrained model from .*dataloader will be reset")


def _names(options):
    return {w.split("=", 1)[0] for w in options}


def batched_each_epoch(options, data_path=None):
    """Whether fairseq builds the training batches afresh every epoch (resumed or not): data in
    shards, or ``--update-epoch-batch-itr`` true (fairseq's eval_bool of its value), which
    without a value given follows the ``--grouped-shuffling`` flag."""
    if data_path and ":" in data_path:
        return True
    value = option_value(options, "--update-epoch-batch-itr")
    if value is None:
        return "--grouped-shuffling" in _names(options)
    try:
        return bool(ast.literal_eval(value))
    except (ValueError, SyntaxError):
        return False


def _judge(task, epoch, options, data_path):
    """(batches_as_uninterrupted, why when not): see ``resumptions_in_log``."""
    names = _names(options)
    if "--reset-dataloader" in names:  # (fairseq's checkpoint loading, whatever the task)
        return False, "--reset-dataloader: the data restarted at epoch 1"
    if task not in (TRANSLATION_TASK, EXACT_RESUME_TASK_CLASS):
        return None, None  # another task may batch otherwise
    if epoch == 1 or batched_each_epoch(options, data_path):
        return True, None
    if "--update-ordered-indices-seed" in names:
        return False, (f"--update-ordered-indices-seed: batches grouped and ordered with seeds moved by the epoch "
                       f"it resumed in ({epoch})")
    if task == EXACT_RESUME_TASK_CLASS:
        return True, None
    return False, f"grouped anew with --seed + {epoch}"


def resumptions_in_log(log_path, options=(), data_path=None):
    """Every resumption of the training ``log_path`` logs (of the last training started from
    nothing or from a pretrained model, where it holds several), in order: [{"update": N,
    "epoch": E, "task": the task class that attempt logged (None where none is logged),
    "batches_as_uninterrupted": True / False / None, "why": where False}]. True where the batches
    from N on are those of the training never stopped: fairseq's translation resumed in epoch 1
    (grouped with seed + 1 either way) or with batches built every epoch, and
    translation_exact_resume; False under --reset-dataloader (any task), for translation resumed in
    a later epoch, and (E > 1) under --update-ordered-indices-seed; None for any other task (not
    known here). ``options``: the training's command-line words; ``data_path``: its data
    directory (shards ``a:b``). [] for no log."""
    try:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    options = list(options)
    out, task, pretrained = [], None, False
    for line in lines:
        if line.startswith("$ "):  # the reproduce runner's line before each attempt
            task, pretrained = None, False
            continue
        m = _TASK.search(line)
        if m:
            task, pretrained = m.group(1), False
        elif _FRESH.search(line):
            out, pretrained = [], False
        elif _PRETRAINED.search(line):
            out, pretrained = [], True  # its "Loaded checkpoint" line is the pretrained model's
        else:
            m = _LOADED.search(line)
            if m and pretrained:
                pretrained = False
            elif m:
                epoch = int(m.group(1))
                as_uninterrupted, why = _judge(task, epoch, options, data_path)
                out.append({"update": int(m.group(2)), "epoch": epoch, "task": task,
                            "batches_as_uninterrupted": as_uninterrupted, **({"why": why} if why else {})})
    return out


def resumption_ahead(save_dir, options, data_path=None):
    """The resumption a fairseq-train with the command-line words ``options`` is about to make, judged
    as ``resumptions_in_log`` judges a logged one, from the checkpoint it will load (``--restore-file``,
    SAVE_DIR/checkpoint_last.pt by default, ``--continue-once`` at a first launch, as fairseq 0.12
    picks it): {"checkpoint", "update": the count fairseq goes on from and logs, "saved_update", "epoch",
    "task": the --task name, "batches_as_uninterrupted", "why" where False, "optimizer_resumed", and
    "why_restarted" where not}. fairseq restores the update count with the optimizer state only: under
    --reset-optimizer, or from a checkpoint without that state (--no-save-optimizer-state), the
    optimizer, the lr schedule and the update count start over at 0 (the data position is kept).
    None when it starts from nothing or from a pretrained model (``--finetune-from-model`` without a
    checkpoint_last.pt), the checkpoint holds no training position, or under --checkpoint-suffix
    (names not followed here)."""
    if option_value(options, "--checkpoint-suffix"):
        return None
    restore = option_value(options, "--restore-file") or LAST
    checkpoint = os.path.join(save_dir, LAST) if restore == LAST else restore
    if restore == LAST and not os.path.isfile(checkpoint):  # a first launch
        # --continue-once: its training position goes on (--finetune-from-model's is reset)
        checkpoint = option_value(options, "--continue-once")
    if not checkpoint or not os.path.isfile(checkpoint):
        return None
    position = stored_position(checkpoint)
    if position is None or position[1] is None:
        return None
    saved_update, epoch, has_optimizer_state = position
    task = option_value(options, "--task") or "translation"
    as_uninterrupted, why = _judge(_TASK_CLASSES.get(task), epoch, list(options), data_path)
    restarted = ("--reset-optimizer" if "--reset-optimizer" in _names(options) else
                 None if has_optimizer_state else "the checkpoint holds no optimizer state")
    return {"checkpoint": checkpoint, "update": 0 if restarted else saved_update, "saved_update": saved_update,
            "epoch": epoch, "task": task, "batches_as_uninterrupted": as_uninterrupted, **({"why": why} if why else {}),
            "optimizer_resumed": not restarted, **({"why_restarted": restarted} if restarted else {})}


def describe_resumption_ahead(resumption):
    """The lines for the log of a command about to resume a training (``resumption_ahead``)."""
    where = (f"resuming from {resumption['checkpoint']} at update {resumption['update']} "
             f"(epoch {resumption['epoch']}, --task {resumption['task']})")
    lines = []
    if not resumption["optimizer_resumed"]:
        lines.append(f"warning: {where}: {resumption['why_restarted']}: fairseq starts the optimizer, the lr "
                     f"schedule and the update count over (the checkpoint was saved at update "
                     f"{resumption['saved_update']}): another training from these weights, not a continuation")
    judged = resumption["batches_as_uninterrupted"]
    if judged:
        lines.append(f"{where}: the batches go on as the uninterrupted training's")
    elif judged is None:
        lines.append(f"{where}: whether the batches go on as the uninterrupted training's is not known for this task")
    else:
        regrouped = resumption["why"].startswith("grouped anew")  # what the exact task is for
        advice = (f"; --task {EXACT_RESUME_TASK} resumes with the epoch-1 grouping"
                  if regrouped and resumption["task"] == "translation" else "")
        lines.append(f"warning: {where}: {resumption['why']}: from here on the batches are not the uninterrupted "
                     f"training's (a valid run of its seed, not the same run{advice})")
    return lines


# model options that change what the model uses in memory or how it is run, not what it computes
_COMPUTE_ONLY = frozenset({"checkpoint_activations", "offload_activations", "min_params_to_wrap", "export"})
# model options that only decide the start: the loaded weights replace what they initialise
# (cross-agg's --routing-init is not one: B^init, Eq. 15, is computed anew in every forward)
START_ONLY = frozenset({"context_init"})
# start only from one value to another (the starting value of a trained parameter); to or from
# None it adds or removes the parameter (fairseq's strict load refuses that itself)
START_ONLY_WHEN_SET = frozenset({"context_gate_bias"})
# model options that filter the data (sinusoidal positions) or change shapes fairseq's load rejects
# itself (learned positions); None at parse time, filled in by build_model
_POSITIONS = frozenset({"max_source_positions", "max_target_positions"})
# what is translated: another direction with a joined dictionary fits the same tensors
DATA_OPTIONS = ("source_lang", "target_lang")
# options outside the model's whose change makes a resumption another training (the update,
# the loss, the precision, the data order and dropout masks: fairseq seeds each update with
# --seed + its count)
TRAINING_OPTIONS = ("task", "seed", "criterion", "label_smoothing", "optimizer", "lr", "adam_betas", "adam_eps",
                    "clip_norm", "weight_decay", "momentum", "lr_scheduler", "warmup_updates", "warmup_init_lr",
                    "total_num_update", "end_learning_rate", "power", "lr_shrink", "fp16", "bf16", "amp",
                    "memory_efficient_fp16", "memory_efficient_bf16", *sorted(_POSITIONS))


def _stored_options(checkpoint):
    """The namespace of options a fairseq checkpoint was trained with, as a dict (cfg.model holds
    them all for fairseq's legacy architectures; older checkpoints keep ``args``), or None."""
    import torch

    try:
        state = torch.load(checkpoint, map_location="cpu", mmap=True, weights_only=False)
    except Exception:  # noqa: BLE001  (an unreadable checkpoint is fairseq's to report)
        return None
    stored = (state.get("cfg") or {}).get("model") or state.get("args")
    if stored is None:
        return None
    if not isinstance(stored, dict) and hasattr(stored, "keys"):  # an omegaconf DictConfig
        from omegaconf import OmegaConf

        return OmegaConf.to_container(stored, resolve=True)
    return dict(vars(stored)) if not isinstance(stored, dict) else stored


def _model_option_flags(arch):
    """{option: its command-line spellings} for ``arch``'s model class (its add_args)."""
    import argparse

    from fairseq.models import ARCH_MODEL_REGISTRY

    parser = argparse.ArgumentParser(add_help=False)
    if arch in ARCH_MODEL_REGISTRY:
        ARCH_MODEL_REGISTRY[arch].add_args(parser)
    return {action.dest: list(action.option_strings) for action in parser._actions}


def _as_built(options):
    """The options as fairseq's build_model leaves them in the namespace the checkpoint stores
    (TransformerModel and LSTMModel: --share-all-embeddings sets the decoder's input / output
    sharing). (--*-layers-to-keep, which sets the layer count there, fails in fairseq 0.12's
    transformer build_model itself: its parser gives a list where build_model splits a string.)"""
    options = dict(options)
    if options.get("share_all_embeddings"):
        options["share_decoder_input_output_embed"] = True
    return options


def _same(a, b):
    """Equal, or spelled differently ('(0.9,0.98)' / '(0.9, 0.98)', 0.1 / '0.1')."""
    if a == b:
        return True

    def value(x):
        if isinstance(x, str):
            try:
                return ast.literal_eval(x)
            except (ValueError, SyntaxError):
                return x
        return x

    def normal(x):
        x = value(x)
        return list(x) if isinstance(x, tuple) else x

    return normal(a) == normal(b)


def _effective_batch(options):
    try:
        freq = options.get("update_freq") or [1]
        return int(options["max_tokens"]) * int(freq[-1] if isinstance(freq, (list, tuple)) else freq) \
            * int(options.get("distributed_world_size") or 1)
    except (KeyError, TypeError, ValueError):  # (a batch given in sentences: not compared)
        return None


def options_changed(checkpoint, train_argv, world_size=None):
    """What fairseq-train with ``train_argv`` (its own arguments, data directory first) would
    train otherwise than the checkpoint was trained, as lists of (option, in the checkpoint, now):
    {"model": --arch and each option of the model's architecture (its add_args, after the
    architecture's defaults and build_model's changes) but those that only change memory use, the
    start only (START_ONLY, START_ONLY_WHEN_SET) or the positions; "data": the language direction;
    "start": those that decide the start only;
    "training": TRAINING_OPTIONS and the effective batch (max tokens x update freq x world size)}.
    fairseq resumes from any checkpoint whose tensors fit, so a resumption with another model
    option (another config, or a flag such as --freeze-context or --context-stop-gradient left off)
    trains another model from there without a word. An option the checkpoint does not record (its
    code had no such option) counts only where it is given now; the positions left unset now (the
    model fills them in) are not compared. ``world_size``: the run's processes where the command
    does not give them (torchrun). Raises ValueError where the options cannot be compared
    (the checkpoint records none, or fairseq rejects ``train_argv``: its own message says why)."""
    from fairseq import options as fairseq_options

    stored = _stored_options(checkpoint)
    if stored is None:
        raise ValueError(f"{checkpoint} records no options or cannot be read")
    try:
        now = vars(fairseq_options.parse_args_and_arch(fairseq_options.get_training_parser(),
                                                       input_args=list(train_argv)))
    except SystemExit as error:  # argparse has printed fairseq-train's own message
        raise ValueError(f"fairseq-train rejects these options (exit {error.code})") from None
    except Exception as error:  # noqa: BLE001  (e.g. fairseq's own checks of option combinations)
        raise ValueError(f"fairseq-train rejects these options: {error}") from None
    now = _as_built(now)
    if world_size is not None:  # (torchrun hands fairseq its world size at run time)
        now["distributed_world_size"] = world_size
    flags = {**_model_option_flags(stored.get("arch")), **_model_option_flags(now.get("arch"))}
    given = _names(train_argv)

    def differ(names):
        out = []
        for name in names:
            value = now.get(name)
            if name not in stored:
                spellings = flags.get(name) or [f"--{name.replace('_', '-')}"]
                if value is not None and given & set(spellings):
                    out.append((name, "not recorded", value))
            elif value is None and name in _POSITIONS:
                continue
            elif not _same(stored[name], value):
                out.append((name, stored[name], value))
        return out

    model = sorted(set(flags) - _COMPUTE_ONLY - START_ONLY - _POSITIONS)
    training = differ(TRAINING_OPTIONS)
    before, after = _effective_batch(stored), _effective_batch(now)
    if before is not None and after is not None and before != after:
        training.append(("effective batch (max tokens x update freq x world size)", before, after))
    model_changes, start = differ(["arch", *model]), differ(sorted(START_ONLY & set(flags)))
    start += [c for c in model_changes if c[0] in START_ONLY_WHEN_SET and c[1] is not None and c[2] is not None]
    model_changes = [c for c in model_changes if c not in start]
    return {"model": model_changes, "data": differ(DATA_OPTIONS), "start": start, "training": training}


def describe_options_changed(changed):
    """'--option: V in the checkpoint, W now' for each of ``changed`` (``options_changed``'s lists)."""
    return "; ".join(f"{name if ' ' in name else '--' + name.replace('_', '-')}: {then} in the checkpoint, {now} now"
                     for name, then, now in changed)
