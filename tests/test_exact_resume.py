"""--task translation_exact_resume: a training stopped and resumed in later epochs ends with the
weights of the training that was never stopped (fairseq's translation task regroups the
batches with the epoch it resumes in); an uninterrupted training is translation's, bit for bit."""
import os
import re
import subprocess

import pytest
import torch

from tests.conftest import TRAIN_DEFAULTS, USER_DIR, fairseq_cli, run

TINY_TRANSFORMER = ["--arch", "transformer", "--encoder-layers", "1", "--decoder-layers", "1",
                    "--encoder-embed-dim", "16", "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32",
                    "--decoder-ffn-embed-dim", "32", "--encoder-attention-heads", "2",
                    "--decoder-attention-heads", "2"]
UPDATES = 16
# the training set is 12 batches of up to 1,000 tokens, 6 updates of two batches: 16 updates run
# three epochs, validated at the end of each (validation draws on the RNG and the iterators too)
BATCH = ["--max-tokens", "1000", "--update-freq", "2"]


def _train(data, save_dir, task, stops):
    """fairseq-train to each number of updates in ``stops`` in turn (each start after the first
    resumes checkpoint_last.pt); returns (final weights, the epochs each resumption started in).
    Before each start, the resumption fairseq_ctx.resumptions.resumption_ahead foresees from the
    checkpoint (what fairseq-ctx-train prints) must be the one fairseq then logs, judged as the
    log-reading judges it."""
    from fairseq_ctx.resumptions import options_changed, resumption_ahead, resumptions_in_log

    train = fairseq_cli("train", str(data), "--user-dir", USER_DIR, *TRAIN_DEFAULTS, *BATCH, *TINY_TRANSFORMER,
                        "--task", task, "--save-dir", str(save_dir))
    epochs, judged = [], []
    for updates in stops:
        ahead = resumption_ahead(str(save_dir), train, str(data))
        # the same command: nothing that fairseq-ctx-train would refuse or warn of
        assert ahead is None or not any(options_changed(ahead["checkpoint"], train[3:]).values())
        out = run([*train, "--max-update", str(updates)])
        loaded = [(int(e), int(u)) for e, u in re.findall(r"[Ll]oaded checkpoint \S+ \(epoch (\d+) @ (\d+) updates\)",
                                                          out.stdout + out.stderr)]
        epochs += [e for e, _ in loaded]
        if not loaded:
            assert ahead is None
            continue
        assert (ahead["epoch"], ahead["update"]) == loaded[0]
        log = save_dir / f"attempt-{updates}.log"
        log.write_text(out.stdout + out.stderr)
        logged, = resumptions_in_log(str(log), train, str(data))
        assert ahead["batches_as_uninterrupted"] == logged["batches_as_uninterrupted"] is not None
        assert ahead.get("why") == logged.get("why")
        judged.append(ahead["batches_as_uninterrupted"])
    state = torch.load(save_dir / "checkpoint_last.pt", map_location="cpu", weights_only=False)
    assert state["optimizer_history"][-1]["num_updates"] == stops[-1]
    return state["model"], epochs, judged


def _same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def uninterrupted(tiny_data_bin, tmp_path_factory):
    return _train(tiny_data_bin, tmp_path_factory.mktemp("whole"), "translation_exact_resume", [UPDATES])[0]


def test_a_training_resumed_in_later_epochs_ends_with_the_uninterrupted_weights(tiny_data_bin, tmp_path, uninterrupted):
    resumed, epochs, judged = _train(tiny_data_bin, tmp_path, "translation_exact_resume", [8, 12, UPDATES])
    assert epochs == [2, 3], epochs  # one inside epoch 2, one at the end of it
    assert judged == [True, True]
    assert _same(resumed, uninterrupted)


def test_fairseqs_translation_regroups_the_batches_of_a_resumed_training_and_is_otherwise_the_same(
        tiny_data_bin, tmp_path, uninterrupted):
    """What the task is for, seen: the stock task's resumed training is another run; its
    uninterrupted training is this task's, bit for bit (recorded runs stay what they were)."""
    whole, _, _ = _train(tiny_data_bin, tmp_path / "whole", "translation", [UPDATES])
    assert _same(whole, uninterrupted)
    resumed, epochs, judged = _train(tiny_data_bin, tmp_path / "resumed", "translation", [8, UPDATES])
    assert epochs and epochs[0] > 1
    assert judged == [False]  # foreseen before the start, as the log tells it after
    assert not _same(resumed, uninterrupted)


def _task_of(cmd):
    at = [i for i, w in enumerate(cmd) if w == "--task"]
    return [cmd[i + 1] for i in at]


def test_every_reproduce_launcher_trains_with_the_task_and_a_task_the_settings_name_is_kept():
    from fairseq_ctx.reproduce import train

    config = os.path.join(train.CONFIGS, "yang2019", "transformer_base.args")
    for launcher in ("spawn", "torchrun", "slurm"):
        cmd = train.build_command(config, "p40", "BIN", "SAVE", launcher=launcher, nnodes=2 if launcher != "spawn" else 1)
        assert _task_of(cmd) == [train.EXACT_RESUME_TASK], launcher
    cmd = train.build_command(config, "p40", "BIN", "SAVE", extra=["--task", "translation"])
    assert _task_of(cmd) == ["translation"]


def test_the_task_leaves_the_reproduce_training_key_as_it_was():
    """Cells trained before the task existed (commands without --task) keep their directories."""
    from fairseq_ctx.reproduce import runner, train

    cmd = train.build_command(os.path.join(train.CONFIGS, "cao", "cross_zero.args"), "cao", "BIN", "SAVE")
    at = cmd.index("--task")
    before = cmd[:at] + cmd[at + 2:]
    assert runner.training_key(cmd, "BIN", "data") == runner.training_key(before, "BIN", "data")
    other = cmd[:at + 1] + ["translation_multi_simple_epoch"] + cmd[at + 2:]
    assert runner.training_key(other, "BIN", "data") != runner.training_key(cmd, "BIN", "data")


def test_quality_compare_trains_with_the_task_unless_the_settings_name_one(monkeypatch, tmp_path):
    from fairseq_ctx import quality_compare as qc

    commands = []

    def fake_run(cmd, **kwargs):
        commands.append(cmd)
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(qc.subprocess, "run", fake_run)
    for arch_args in (["--arch", "transformer"], ["--arch", "transformer", "--task=translation"]):
        qc.train("BIN", ["--optimizer", "adam"], arch_args, 10, 1, str(tmp_path), str(tmp_path / "train.log"))
    assert _task_of(commands[0]) == [qc.EXACT_RESUME_TASK] and _task_of(commands[1]) == []
    assert "--task=translation" in commands[1]


def test_the_task_is_registered_under_the_name_the_commands_use():
    import fairseq_ctx  # noqa: F401  (registers it)
    from fairseq.tasks import TASK_REGISTRY

    from fairseq_ctx.reproduce.train import EXACT_RESUME_TASK
    from fairseq_ctx.tasks.translation_exact_resume import ExactResumeTranslationTask

    assert TASK_REGISTRY[EXACT_RESUME_TASK] is ExactResumeTranslationTask
