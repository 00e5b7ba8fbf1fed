"""A ``checkpoint_last.pt`` cut off while it was written, put right before fairseq resumes.

fairseq 0.12 saves a checkpoint by writing the first file that is due (``checkpointE.pt``,
``checkpoint_E_U.pt``, ``checkpoint_best.pt``, ``checkpoint.best_*.pt``, in that order)
atomically (to a temporary file, then renamed) and *copying* it in place onto the others,
``checkpoint_last.pt`` last. A job killed during a copy (pre-emption, a time limit, a crash)
leaves a truncated ``checkpoint_last.pt``, and every resubmission of the training fails on
it ("PytorchStreamReader failed reading zip archive") until someone replaces it by hand.
Under ``--no-epoch-checkpoints`` without interval saves (e.g. the iida2019 configs),
``checkpoint_best.pt`` may be the only other copy of the training state, so every
``checkpoint*.pt`` is a candidate, ranked by the update count stored in it (names and file
times do not say it: best files carry none, copies reorder times). quality_compare, the
reproduce runner and ``fairseq-ctx-train`` (node 0) do this before they start fairseq-train;
by hand, before resubmitting a plain fairseq-train (never while a training writes there):

    python -m fairseq_ctx.checkpoint_repair SAVE_DIR

Not handled: names with ``--checkpoint-suffix`` or shard suffixes (FSDP, model parallel).
"""
import os
import re
import shutil
import sys
import zipfile

LAST = "checkpoint_last.pt"


def written_to_the_end(checkpoint):
    """False for a checkpoint cut off or damaged: torch.save writes a zip whose directory
    comes last. A zip is read whole (CRC of every member); another format is not judged,
    except for the traces of a cut: nothing, part of the zip signature, zeros."""
    signature = b"PK\x03\x04"
    with open(checkpoint, "rb") as f:
        head = f.read(4)
    if head == signature:
        try:
            with zipfile.ZipFile(checkpoint) as z:
                return z.testzip() is None and any(n.endswith("data.pkl") for n in z.namelist())
        except (zipfile.BadZipFile, OSError, EOFError, ValueError):
            return False
    cut = len(head) < len(signature) and signature.startswith(head)
    return not cut and not head.startswith(b"\0")


def stored_position(checkpoint):
    """(update count, epoch of its data iterator or None, whether it holds the optimizer state) a
    whole fairseq checkpoint was saved at (its optimizer history, extra_state's train_iterator,
    last_optimizer_state: absent under --no-save-optimizer-state), or None when it holds no update
    count (not a training checkpoint, or unreadable). The tensors are memory-mapped, not read."""
    import torch

    try:
        state = torch.load(checkpoint, map_location="cpu", mmap=True, weights_only=False)
        updates = int(state["optimizer_history"][-1]["num_updates"])
    except Exception:  # noqa: BLE001  (any file that does not load is no resume point)
        return None
    try:
        epoch = int(state["extra_state"]["train_iterator"]["epoch"])
    except (KeyError, TypeError, ValueError):
        epoch = None
    return updates, epoch, state.get("last_optimizer_state") is not None


def stored_updates(checkpoint):
    """The update count a whole fairseq checkpoint was saved at (its optimizer history), or
    None when it holds none (not a training checkpoint, or unreadable)."""
    position = stored_position(checkpoint)
    return None if position is None else position[0]


def finished_at(save_dir, max_update):
    """The update count of SAVE_DIR/checkpoint_last.pt when it is whole and at ``max_update``
    or beyond, else None. fairseq-train started on such a directory takes one more step before
    it checks --max-update and overwrites checkpoint_last / _best with a model trained one
    update too long: a driver whose training finished after the driver itself was gone (killed,
    preempted) must not start it again."""
    last = os.path.join(save_dir, LAST)
    if max_update <= 0 or not os.path.exists(last) or not written_to_the_end(last):
        return None
    updates = stored_updates(last)
    return updates if updates is not None and updates >= max_update else None


# fairseq_cli.train logs it after its last save (with --write-checkpoints-asynchronously before that
# write is closed: a cut checkpoint_last.pt then fails the zip check of finished_at)
FAIRSEQ_DONE = "done training in"
_FAIRSEQ_DONE_LINE = re.compile(r"^\S.* \| fairseq_cli\.train \| done training in [0-9.]+ seconds$", re.MULTILINE)


def finished_before_the_exit(save_dir, max_update, log_text):
    """For a fairseq-train that exited non-zero: the update count when it had finished before
    the exit (``log_text``, this attempt's output, says "done training in" and checkpoint_last.pt
    is whole at ``max_update``), else None. Such an exit comes from the interpreter's shutdown,
    not the training: fairseq's BufferedIterator leaves a daemon thread collating batches when
    --max-update stops an epoch midway, and Python 3.11 ends a daemon thread that re-takes the GIL
    inside torch code with std::terminate (rc -6, "terminate called without an active
    exception"), after every checkpoint was written."""
    if not _FAIRSEQ_DONE_LINE.search(log_text):  # fairseq's log line, not a command line quoting it
        return None
    return finished_at(save_dir, max_update)


def _candidates(save_dir):
    """checkpoint*.pt of SAVE_DIR but checkpoint_last.pt (and no suffixed / temporary names)."""
    return [n for n in os.listdir(save_dir) if n.startswith("checkpoint") and n.endswith(".pt") and n != LAST
            and "-shard" not in n]


def restore_last_from_newest_whole(save_dir):
    """Copy the whole checkpoint of SAVE_DIR saved at the highest update count over
    checkpoint_last.pt (atomically) and return its path; None when there is none."""
    points = []
    for name in _candidates(save_dir):
        path = os.path.join(save_dir, name)
        if written_to_the_end(path):
            updates = stored_updates(path)
            if updates is not None:
                points.append((updates, name, path))
    if not points:
        return None
    _, _, path = max(points)
    tmp = os.path.join(save_dir, f"{LAST}.tmp{os.getpid()}")
    try:
        shutil.copyfile(path, tmp)
        os.replace(tmp, os.path.join(save_dir, LAST))
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


def repair_before_resuming(save_dir, log=print):
    """Before fairseq-train resumes SAVE_DIR: a cut-off checkpoint_last.pt is replaced by the
    newest whole checkpoint or, with none, moved aside to checkpoint_last.pt.cut-off (the
    training then starts from the beginning; the file is kept, not deleted). Returns what
    was done, as logged, or None when checkpoint_last.pt is whole or absent."""
    last = os.path.join(save_dir, LAST)
    if not os.path.exists(last) or written_to_the_end(last):
        return None
    restored = restore_last_from_newest_whole(save_dir)
    if restored:
        message = (f"{last} was cut off while it was written; fairseq resumes from a copy of "
                   f"{os.path.basename(restored)} ({stored_updates(restored)} updates), the newest whole checkpoint")
    else:
        try:
            os.replace(last, last + ".cut-off")
        except FileNotFoundError:  # another process moved it first
            pass
        message = (f"{last} was cut off while it was written and no whole checkpoint is left: the training "
                   f"starts from the beginning (the damaged file is now {LAST}.cut-off)")
    log(message)
    return message


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0].startswith("-"):
        sys.exit("usage: python -m fairseq_ctx.checkpoint_repair SAVE_DIR")
    if not os.path.isdir(argv[0]):
        sys.exit(f"checkpoint_repair: {argv[0]} is not a directory")
    said = repair_before_resuming(argv[0], log=lambda m: print(f"checkpoint_repair: {m}", file=sys.stderr))
    if said is None:
        print(f"checkpoint_repair: {os.path.join(argv[0], LAST)} is whole or absent: nothing to do", file=sys.stderr)


if __name__ == "__main__":
    main()
