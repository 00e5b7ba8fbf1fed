"""Where a training was resumed, read from fairseq-train's own log, and whether its batches
went on as the uninterrupted training's.

fairseq groups a process's training sentences into batches once, shuffling sentences of equal
length with numpy seed ``--seed`` + the epoch the process starts in; an uninterrupted training
keeps its epoch-1 batches. fairseq's ``translation`` resumed in epoch E > 1 therefore fills the
same batch lengths with other sentences: a valid run of its seed, not the uninterrupted one
(``--task translation_exact_resume``, fairseq_ctx/tasks, keeps the epoch-1 grouping). Each
attempt of fairseq-train logs its task class ("task: X") and, where it resumes, "Loaded
checkpoint ... (epoch E @ N updates)"; a training started from nothing logs "No existing
checkpoint found" (its log's earlier resumptions are then another training's). Kept free of
fairseq imports: the drivers that read logs do not build models.
"""
import re

# the class names fairseq-train logs for fairseq's translation and for translation_exact_resume
TRANSLATION_TASK, EXACT_RESUME_TASK_CLASS = "TranslationTask", "ExactResumeTranslationTask"
# options under which fairseq batches each epoch afresh: resumed in any epoch, a training goes on
# as the uninterrupted one
BATCHED_EACH_EPOCH = ("--update-epoch-batch-itr", "--grouped-shuffling")

_TASK = re.compile(r"\| fairseq_cli\.train \| task: (\w+)")
_LOADED = re.compile(r"Loaded checkpoint .* \(epoch (\d+) @ (\d+) updates\)")
_FRESH = re.compile(r"\| No existing checkpoint found ")


def resumptions_in_log(log_path, options=()):
    """Every resumption of the training ``log_path`` logs (the last training started from nothing,
    where it holds several), in order: [{"update": N, "epoch": E, "task": the task class that
    attempt logged (None where none is logged), "batches_as_uninterrupted": True in epoch 1 (grouped
    with seed + 1, resumed or not), under translation_exact_resume or with ``options`` (the
    training's command-line words) that batch every epoch afresh; False for fairseq's translation
    resumed in a later epoch; None for another task (not known here)}]. [] for no log."""
    try:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    words = {w.split("=", 1)[0] for w in options}  # --opt=value too
    batched_each_epoch = bool(words & set(BATCHED_EACH_EPOCH))
    out, task = [], None
    for line in lines:
        m = _TASK.search(line)
        if m:
            task = m.group(1)
        elif _FRESH.search(line):
            out = []
        else:
            m = _LOADED.search(line)
            if m:
                epoch = int(m.group(1))
                if epoch == 1 or task == EXACT_RESUME_TASK_CLASS or batched_each_epoch:
                    as_uninterrupted = True
                else:
                    as_uninterrupted = False if task == TRANSLATION_TASK else None
                out.append({"update": int(m.group(2)), "epoch": epoch, "task": task,
                            "batches_as_uninterrupted": as_uninterrupted})
    return out
