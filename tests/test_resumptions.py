"""Resumptions read from fairseq-train's log (fairseq_ctx/resumptions.py): the lines are fairseq
0.12's own (fairseq_cli/train.py "task: X", fairseq/trainer.py "Loaded checkpoint ... (epoch E @ N
updates)" and "No existing checkpoint found")."""
import pytest

from fairseq_ctx.resumptions import resumptions_in_log

TASK = "2026-11-29 11:52:10 | INFO | fairseq_cli.train | task: {}"
LOADED = "2026-11-29 11:52:11 | INFO | fairseq.trainer | Loaded checkpoint x/checkpoint_last.pt (epoch {} @ {} updates)"
FRESH = "2026-11-29 09:00:00 | INFO | fairseq.trainer | No existing checkpoint found x/checkpoint_last.pt"


def _log(tmp_path, *lines):
    path = tmp_path / "train.log"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.mark.parametrize("task, epoch, options, expected", [
    ("TranslationTask", 4, ["--max-tokens", "4096"], False),  # regrouped with --seed + 4
    ("TranslationTask", 1, [], True),  # epoch 1 is grouped with --seed + 1 either way
    ("ExactResumeTranslationTask", 4, [], True),
    ("TranslationTask", 4, ["--update-epoch-batch-itr"], True),  # batched afresh every epoch anyway
    ("TranslationTask", 4, ["--grouped-shuffling=True"], True),
    ("TranslationMultiSimpleEpochTask", 4, [], None),  # another task: not known
])
def test_each_resumption_says_whether_its_batches_were_the_uninterrupted_trainings(
        tmp_path, task, epoch, options, expected):
    log = _log(tmp_path, FRESH, TASK.format("TranslationTask"), LOADED.format(1, 3),
               TASK.format(task), LOADED.format(epoch, 504))
    assert resumptions_in_log(log, options) == [
        {"update": 3, "epoch": 1, "task": "TranslationTask", "batches_as_uninterrupted": True},
        {"update": 504, "epoch": epoch, "task": task, "batches_as_uninterrupted": expected}]


def test_a_training_started_again_from_nothing_drops_the_earlier_trainings_resumptions(tmp_path):
    log = _log(tmp_path, TASK.format("TranslationTask"), FRESH, TASK.format("TranslationTask"), LOADED.format(3, 40),
               TASK.format("TranslationTask"), FRESH, TASK.format("ExactResumeTranslationTask"), LOADED.format(2, 30))
    assert resumptions_in_log(log) == [
        {"update": 30, "epoch": 2, "task": "ExactResumeTranslationTask", "batches_as_uninterrupted": True}]


def test_no_log_and_no_task_line(tmp_path):
    assert resumptions_in_log(str(tmp_path / "absent.log")) == []
    assert resumptions_in_log(_log(tmp_path, LOADED.format(3, 40))) == [
        {"update": 40, "epoch": 3, "task": None, "batches_as_uninterrupted": None}]


@pytest.mark.parametrize("task, regrouped", [("TranslationTask", True), ("ExactResumeTranslationTask", False)])
def test_the_reproduce_runner_records_a_cells_resumptions_and_names_a_regrouped_one(tmp_path, capsys, task, regrouped):
    import json
    import os
    import sys

    from fairseq_ctx.reproduce import runner, tables
    from tests.test_reproduce_road import _options

    table = tables.TABLES["cao_table2"]
    cell = runner.build_cells(table, table.rows[:1], _options(), str(tmp_path), str(tmp_path))[0]
    # a training attempt whose fairseq log says it resumed in epoch 3; the evaluation that
    # follows fails (there is no model), after train.json is written
    lines = [TASK.format(task), LOADED.format(3, 40)]
    cell.train_cmd = [sys.executable, "-c", f"print({chr(10).join(lines)!r})"]
    runner.run_cell(cell, "cpu", False, dict(os.environ))
    assert cell.message.startswith("evaluation of"), cell.message
    record = json.loads(tmp_path.joinpath(cell.train_dir, "train.json").read_text())
    assert record["resumptions"] == [{"update": 40, "epoch": 3, "task": task, "batches_as_uninterrupted": not regrouped}]
    said = "resumed at update 40 in epoch 3 under fairseq's TranslationTask: its batches from there on were grouped anew"
    assert (said in capsys.readouterr().err) == regrouped
