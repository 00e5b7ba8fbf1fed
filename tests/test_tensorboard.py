"""--tensorboard-logdir through the real fairseq-train CLI writes the loss to tensorboard.

fairseq silently skips tensorboard logging when neither torch.utils.tensorboard (the
tensorboard package) nor tensorboardX imports; this fails if tensorboard is missing."""
import math
import re

from tests.conftest import TRAIN_DEFAULTS, USER_DIR, fairseq_cli, run

TINY = [
    "--arch", "transformer", "--encoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32",
    "--encoder-layers", "1", "--encoder-attention-heads", "2", "--decoder-embed-dim", "16",
    "--decoder-ffn-embed-dim", "32", "--decoder-layers", "1", "--decoder-attention-heads", "2",
]  # fmt: skip


def scalars(logdir):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(logdir), size_guidance={"scalars": 0})
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def test_train_writes_loss_event_files(tiny_corpus, tmp_path):
    import torch.utils.tensorboard  # noqa: F401  (what fairseq's progress bar imports)

    logdir = tmp_path / "tb"
    proc = run(fairseq_cli("train", str(tiny_corpus / "bin"), "--user-dir", USER_DIR, *TRAIN_DEFAULTS, *TINY,
                           "--save-dir", str(tmp_path / "checkpoints"), "--no-save", "--max-update", "3",
                           "--tensorboard-logdir", str(logdir)))
    log = proc.stdout + proc.stderr

    for split in ("train", "valid"):
        assert list((logdir / split).glob("events.out.tfevents.*")), f"no event file in {logdir / split}"
        loss = scalars(logdir / split).get("loss")
        assert loss, f"no loss scalar under {logdir / split}"
        assert all(math.isfinite(value) for _, value in loss)

    # the last validation loss is the one fairseq logged, at the update it logged it
    valid = re.findall(r"valid on 'valid' subset \| loss ([\d.]+) .*\| num_updates (\d+)", log)
    assert valid, log[-3000:]
    step, value = scalars(logdir / "valid")["loss"][-1]
    assert (step, round(value, 3)) == (int(valid[-1][1]), float(valid[-1][0]))
    train_inner = scalars(logdir / "train_inner")["loss"]
    assert [s for s, _ in train_inner] == [1, 2, 3]
