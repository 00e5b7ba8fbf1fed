"""A ``checkpoint_last.pt`` cut off while it was written, put right before fairseq resumes.

fairseq 0.12 writes ``checkpoint_E_U.pt`` / ``checkpointE.pt`` atomically (to a temporary
file, then renamed) and then *copies* the first of them onto ``checkpoint_last.pt`` in
place. A job killed during that copy (pre-emption, a time limit, a crash) leaves a truncated
``checkpoint_last.pt``, and every resubmission of the training fails on it ("PytorchStreamReader
failed reading zip archive") until someone replaces it by hand. The drivers (quality_compare,
the reproduce runner, ``fairseq-ctx-train``, demo.sh) do that here before they start fairseq-train.

Usage: python -m fairseq_ctx.checkpoint_repair SAVE_DIR
"""
import os
import re
import shutil
import sys
import zipfile

LAST = "checkpoint_last.pt"
_INTERVAL = re.compile(r"^checkpoint_(\d+)_(\d+)\.pt$")  # --save-interval-updates: epoch E, update U
_EPOCH_END = re.compile(r"^checkpoint(\d+)\.pt$")  # the end of epoch E


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


def training_position(name):
    """Where in training fairseq wrote the checkpoint NAME, as a sortable key, or None for
    one that is not a point of the training (last, best, averaged): checkpoint_E_U.pt is
    update U of epoch E, checkpointE.pt the end of epoch E (after every checkpoint_E_U.pt,
    before any checkpoint_{E+1}_U.pt). Names, not modification times: copies reorder those."""
    m = _INTERVAL.match(name)
    if m:
        return int(m.group(1)), 0, int(m.group(2))
    m = _EPOCH_END.match(name)
    return (int(m.group(1)), 1, 0) if m else None


def restore_last_from_newest_whole(save_dir):
    """Copy the newest whole checkpoint_E_U.pt / checkpointE.pt of SAVE_DIR over
    checkpoint_last.pt (atomically) and return its path; None when there is none."""
    points = [(training_position(n), n) for n in os.listdir(save_dir)]
    for _, name in sorted((p for p in points if p[0] is not None), reverse=True):
        path = os.path.join(save_dir, name)
        if written_to_the_end(path):
            tmp = os.path.join(save_dir, f"{LAST}.tmp{os.getpid()}")
            shutil.copyfile(path, tmp)
            os.replace(tmp, os.path.join(save_dir, LAST))
            return path
    return None


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
                   f"{os.path.basename(restored)}, the newest whole checkpoint")
    else:
        os.replace(last, last + ".cut-off")
        message = (f"{last} was cut off while it was written and no whole checkpoint_E_U.pt / checkpointE.pt "
                   f"is left: the training starts from the beginning (the damaged file is now {LAST}.cut-off)")
    log(message)
    return message


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0].startswith("-"):
        sys.exit(__doc__.strip().splitlines()[-1])
    if os.path.isdir(argv[0]):
        repair_before_resuming(argv[0], log=lambda m: print(f"checkpoint_repair: {m}", file=sys.stderr))


if __name__ == "__main__":
    main()
