"""Resumptions read from fairseq-train's log (fairseq_ctx/resumptions.py): the lines are fairseq
0.12's own (fairseq_cli/train.py "task: X"; fairseq/trainer.py "Loaded checkpoint ... (epoch E @ N
updates)" and "No existing checkpoint found"; fairseq/checkpoint_utils.py "loading pretrained
model from ...")."""
import json
import os
import sys

import pytest

from fairseq_ctx.resumptions import batched_each_epoch, resumptions_in_log

TASK = "2026-11-29 11:52:10 | INFO | fairseq_cli.train | task: {}"
LOADED = "2026-11-29 11:52:11 | INFO | fairseq.trainer | Loaded checkpoint x/checkpoint_last.pt (epoch {} @ {} updates)"
FRESH = "2026-11-29 09:00:00 | INFO | fairseq.trainer | No existing checkpoint found x/checkpoint_last.pt"
PRETRAINED = ("2026-11-29 09:00:00 | INFO | fairseq.checkpoint_utils | loading pretrained model from p.pt: "
              "optimizer, lr scheduler, meters, dataloader will be reset")


def _log(tmp_path, *lines):
    path = tmp_path / "train.log"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.mark.parametrize("task, epoch, options, expected", [
    ("TranslationTask", 4, ["--max-tokens", "4096"], False),  # regrouped with --seed + 4
    ("TranslationTask", 1, [], True),  # epoch 1 is grouped with --seed + 1 either way
    ("ExactResumeTranslationTask", 4, [], True),
    ("TranslationTask", 4, ["--update-epoch-batch-itr", "True"], True),  # batched afresh every epoch anyway
    ("TranslationTask", 4, ["--update-epoch-batch-itr=1"], True),
    ("TranslationTask", 4, ["--grouped-shuffling"], True),  # sets --update-epoch-batch-itr when it is not given
    ("TranslationTask", 4, ["--update-epoch-batch-itr", "False"], False),
    ("TranslationTask", 4, ["--grouped-shuffling", "--update-epoch-batch-itr", "False"], False),
    ("TranslationTask", 4, ["--reset-dataloader"], False),  # the data starts again at epoch 1
    ("ExactResumeTranslationTask", 1, ["--reset-dataloader"], False),
    ("ExactResumeTranslationTask", 4, ["--update-ordered-indices-seed"], False),
    ("ExactResumeTranslationTask", 1, ["--update-ordered-indices-seed"], True),
    ("TranslationTask", 4, ["--update-epoch-batch-itr", "True", "--update-ordered-indices-seed"], True),
    ("TranslationTask", 4, ["--grouped-shuffling", "--reset-dataloader"], False),
    ("TranslationMultiSimpleEpochTask", 4, ["--reset-dataloader"], False),  # fairseq's loading, any task
    ("TranslationMultiSimpleEpochTask", 4, [], None),  # another task: not known
    ("TranslationMultiSimpleEpochTask", 1, ["--update-epoch-batch-itr", "True"], None),
])
def test_each_resumption_says_whether_its_batches_were_the_uninterrupted_trainings(
        tmp_path, task, epoch, options, expected):
    log = _log(tmp_path, FRESH, TASK.format("TranslationTask"), LOADED.format(1, 3),
               TASK.format(task), LOADED.format(epoch, 504))
    first, second = resumptions_in_log(log, options)
    assert first["update"] == 3 and first["task"] == "TranslationTask"
    assert {k: second[k] for k in ("update", "epoch", "task", "batches_as_uninterrupted")} == {
        "update": 504, "epoch": epoch, "task": task, "batches_as_uninterrupted": expected}
    assert ("why" in second) == (expected is False)


def test_data_in_shards_is_batched_every_epoch(tmp_path):
    log = _log(tmp_path, TASK.format("TranslationTask"), LOADED.format(4, 504))
    assert resumptions_in_log(log, [], "bin1")[0]["batches_as_uninterrupted"] is False
    assert resumptions_in_log(log, [], "bin1:bin2")[0]["batches_as_uninterrupted"] is True
    assert batched_each_epoch([], "a:b") and not batched_each_epoch(["--seed", "1"], "a")


def test_a_training_started_again_from_nothing_or_a_pretrained_model_drops_the_earlier_resumptions(tmp_path):
    log = _log(tmp_path, TASK.format("TranslationTask"), FRESH, TASK.format("TranslationTask"), LOADED.format(3, 40),
               TASK.format("TranslationTask"), FRESH, TASK.format("ExactResumeTranslationTask"), LOADED.format(2, 30))
    assert resumptions_in_log(log) == [
        {"update": 30, "epoch": 2, "task": "ExactResumeTranslationTask", "batches_as_uninterrupted": True}]
    # --finetune-from-model: the first launch loads the pretrained model (with its epoch), dataloader reset
    log = _log(tmp_path, TASK.format("TranslationTask"), LOADED.format(3, 40), TASK.format("TranslationTask"),
               PRETRAINED, LOADED.format(9, 5000), TASK.format("TranslationTask"), LOADED.format(1, 20))
    assert [(r["update"], r["batches_as_uninterrupted"]) for r in resumptions_in_log(log)] == [(20, True)]


def test_a_pretrained_start_that_died_before_loading_does_not_hide_a_later_resumption(tmp_path):
    log = _log(tmp_path, TASK.format("TranslationTask"), PRETRAINED,  # died before its "Loaded" line
               TASK.format("TranslationTask"), FRESH, TASK.format("TranslationTask"), LOADED.format(3, 40))
    assert [(r["update"], r["batches_as_uninterrupted"]) for r in resumptions_in_log(log)] == [(40, False)]


def test_an_attempt_without_a_task_line_is_not_told_by_the_one_before(tmp_path):
    """The reproduce runner writes "$ command" before each attempt."""
    log = _log(tmp_path, "$ fairseq-train a", TASK.format("TranslationTask"), LOADED.format(1, 3),
               "$ fairseq-train a", LOADED.format(3, 40))
    assert resumptions_in_log(log)[1] == {"update": 40, "epoch": 3, "task": None, "batches_as_uninterrupted": None}
    assert resumptions_in_log(str(tmp_path / "absent.log")) == []


def _cell(tmp_path):
    from fairseq_ctx.reproduce import runner, tables
    from tests.test_reproduce_road import _options

    table = tables.TABLES["cao_table2"]
    return runner, runner.build_cells(table, table.rows[:1], _options(), str(tmp_path), str(tmp_path))[0]


def _attempt(runner, cell, lines, code, *options):
    """One training attempt whose output (the log) is ``lines``; it exits ``code``. After a
    training that succeeds the evaluation fails (there is no model), after train.json is written."""
    cell.train_cmd = [sys.executable, "-c", f"import sys; print({chr(10).join(lines)!r}); sys.exit({code})", *options]
    runner.run_cell(cell, "cpu", False, dict(os.environ))


@pytest.mark.parametrize("task, options, regrouped", [
    ("TranslationTask", (), True),
    ("ExactResumeTranslationTask", (), False),
    ("TranslationTask", ("--update-epoch-batch-itr", "True"), False),  # the cell's own options are read
])
def test_the_reproduce_runner_records_every_attempts_resumption_and_names_a_regrouped_one(
        tmp_path, capsys, task, options, regrouped):
    runner, cell = _cell(tmp_path)
    _attempt(runner, cell, [TASK.format(task), LOADED.format(1, 10)], 3, *options)  # killed after resuming in epoch 1
    assert cell.message.startswith("training exited 3")
    _attempt(runner, cell, [TASK.format(task), LOADED.format(3, 40)], 0, *options)
    assert cell.message.startswith("evaluation of"), cell.message
    record = json.loads(tmp_path.joinpath(cell.train_dir, "train.json").read_text())
    assert [(r["update"], r["epoch"], r["task"], r["batches_as_uninterrupted"]) for r in record["resumptions"]] == [
        (10, 1, task, True), (40, 3, task, not regrouped)]
    said = f"resumed at update 40 in epoch 3 under {task} (grouped anew with --seed + 3)"
    assert (said in capsys.readouterr().err) == regrouped


def _checkpoint(path, updates, epoch, optimizer_state=True):
    """A checkpoint as fairseq stores the training position: the optimizer history and state (not
    under --no-save-optimizer-state) and the data iterator's state (the epoch it resumes in)."""
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"model": {}, "optimizer_history": [{"num_updates": updates}],
                **({"last_optimizer_state": {"state": {}}} if optimizer_state else {}),
                "extra_state": {"train_iterator": {"version": 2, "epoch": epoch, "iterations_in_epoch": 5,
                                                   "shuffle": True}}}, path)


def _fairseq_ctx_train(tmp_path, capsys, *extra, own=(), config="yang2019/both.args"):
    from fairseq_ctx.reproduce import train

    train.main([config, "cpu", "--data", str(tmp_path / "bin"), "--save-dir",
                str(tmp_path / "ck"), "--dry-run", *own, "--", *extra])
    return capsys.readouterr().err


@pytest.mark.parametrize("epoch, extra, says", [
    (3, [], "go on as the uninterrupted training's"),  # fairseq-ctx-train's own task
    (3, ["--task", "translation"], "grouped anew with --seed + 3"),
    (1, ["--task", "translation"], "go on as the uninterrupted training's"),
    (3, ["--task", "translation", "--update-epoch-batch-itr", "True"], "go on as the uninterrupted training's"),
    (3, ["--task", "translation_multi_simple_epoch"], "not known for this task"),
])
def test_fairseq_ctx_train_says_before_it_resumes_whether_the_batches_go_on_as_uninterrupted(
        tmp_path, capsys, epoch, extra, says):
    _checkpoint(tmp_path / "ck" / "checkpoint_last.pt", 120, epoch)
    err = _fairseq_ctx_train(tmp_path, capsys, *extra)
    line, = [l for l in err.splitlines() if "resuming from" in l]
    assert f"at update 120 (epoch {epoch}" in line and says in line
    assert line.startswith("train: warning: ") == ("grouped anew" in says)
    assert ("translation_exact_resume resumes with the epoch-1 grouping" in line) == ("grouped anew" in says)
    assert "starts the optimizer" not in err


@pytest.mark.parametrize("extra, optimizer_state, why", [
    (["--reset-optimizer"], True, "--reset-optimizer"),
    ([], False, "the checkpoint holds no optimizer state"),  # saved under --no-save-optimizer-state
])
def test_fairseq_ctx_train_warns_when_fairseq_will_start_the_update_count_over(tmp_path, capsys, extra,
                                                                               optimizer_state, why):
    # fairseq restores the update count with the optimizer state only, and logs "@ 0 updates"
    _checkpoint(tmp_path / "ck" / "checkpoint_last.pt", 120, 3, optimizer_state=optimizer_state)
    err = _fairseq_ctx_train(tmp_path, capsys, *extra, own=["--skip-checkpoint-check"])
    warning, batches = [l for l in err.splitlines() if "resuming from" in l]
    assert warning.startswith("train: warning: ") and "at update 0 (epoch 3" in warning and why in warning
    assert "saved at update 120" in warning and "not a continuation" in warning
    assert "go on as the uninterrupted training's" in batches


def test_the_exact_task_is_advised_only_where_it_would_keep_the_batches(tmp_path, capsys):
    _checkpoint(tmp_path / "ck" / "checkpoint_last.pt", 120, 3)
    for extra in (["--reset-dataloader"], ["--update-ordered-indices-seed"]):
        err = _fairseq_ctx_train(tmp_path, capsys, "--task", "translation", *extra, own=["--skip-checkpoint-check"])
        line, = [l for l in err.splitlines() if "resuming from" in l and "batches" in l]
        assert line.startswith("train: warning: ") and extra[0] in line
        assert "translation_exact_resume" not in line


def test_a_dry_run_says_what_the_real_start_would_do_first(tmp_path, capsys):
    last = tmp_path / "ck" / "checkpoint_last.pt"
    _checkpoint(last, 300, 3)
    err = _fairseq_ctx_train(tmp_path, capsys, "--max-update", "300", own=["--skip-checkpoint-check"])
    assert "a real start would not train again" in err and "resuming" not in err
    last.write_bytes(last.read_bytes()[:-300])
    err = _fairseq_ctx_train(tmp_path, capsys, "--max-update", "400", own=["--skip-checkpoint-check"])
    assert "is cut off: a real start first replaces it" in err and "resuming" not in err


def test_checkpoint_names_with_a_suffix_are_not_foreseen(tmp_path):
    from fairseq_ctx.resumptions import resumption_ahead

    _checkpoint(tmp_path / "checkpoint_last.pt", 120, 3)
    assert resumption_ahead(str(tmp_path), ["--task", "translation"])["update"] == 120
    assert resumption_ahead(str(tmp_path), ["--task", "translation", "--checkpoint-suffix", "-a"]) is None


def test_fairseq_ctx_train_reads_the_checkpoint_fairseq_will_load(tmp_path, capsys):
    # nothing to resume: no line; a --restore-file elsewhere is the one fairseq loads
    assert "resuming" not in _fairseq_ctx_train(tmp_path, capsys, "--task", "translation")
    _checkpoint(tmp_path / "elsewhere.pt", 40, 2)
    err = _fairseq_ctx_train(tmp_path, capsys, "--task", "translation", "--restore-file", str(tmp_path / "elsewhere.pt"),
                             own=["--skip-checkpoint-check"])
    assert f"resuming from {tmp_path / 'elsewhere.pt'} at update 40 (epoch 2" in err and "grouped anew" in err
    # --continue-once: at a first launch its position goes on
    err = _fairseq_ctx_train(tmp_path, capsys, "--task", "translation", "--continue-once", str(tmp_path / "elsewhere.pt"))
    assert f"resuming from {tmp_path / 'elsewhere.pt'} at update 40 (epoch 2" in err
    # a fine-tuning start (no checkpoint_last.pt yet) is no resumption; once it has one, it is
    _checkpoint(tmp_path / "pretrained.pt", 900, 7)
    assert "resuming" not in _fairseq_ctx_train(tmp_path, capsys, "--finetune-from-model", str(tmp_path / "pretrained.pt"))
    _checkpoint(tmp_path / "ck" / "checkpoint_last.pt", 10, 2)
    err = _fairseq_ctx_train(tmp_path, capsys, "--finetune-from-model", str(tmp_path / "pretrained.pt"))
    assert "checkpoint_last.pt at update 10 (epoch 2" in err
    err = _fairseq_ctx_train(tmp_path, capsys, "--continue-once", str(tmp_path / "elsewhere.pt"))
    assert "checkpoint_last.pt at update 10 (epoch 2" in err  # not a first launch any more


def test_fairseq_ctx_train_says_it_before_it_starts_fairseq_train(tmp_path, capsys, monkeypatch):
    from fairseq_ctx.reproduce import train

    _checkpoint(tmp_path / "ck" / "checkpoint_last.pt", 120, 3)
    said_before = []
    monkeypatch.setattr(train.subprocess, "call",
                        lambda cmd, **kwargs: said_before.append(capsys.readouterr().err) or 0)
    with pytest.raises(SystemExit) as exit_:
        train.main(["yang2019/both.args", "cpu", "--data", str(tmp_path / "bin"), "--save-dir", str(tmp_path / "ck"),
                    "--", "--task", "translation"])
    assert exit_.value.code == 0
    assert "train: warning: resuming from" in said_before[0] and "grouped anew with --seed + 3" in said_before[0]


def _checkpoint_trained_with(path, train_argv, updates=120, epoch=3, drop=(), stored=None):
    """A checkpoint holding the options fairseq-train stores for ``train_argv``: parsed, then passed
    through the architecture's build_model (which changes some, as in fairseq-train), in cfg.model
    as fairseq stores them for its legacy architectures; less the options in ``drop`` (a checkpoint
    of code that had no such option), with ``stored`` set over them (one of an older default)."""
    import torch
    from fairseq import options
    from fairseq.data import Dictionary
    from fairseq.models import ARCH_MODEL_REGISTRY
    from types import SimpleNamespace

    _checkpoint(path, updates, epoch)
    namespace = options.parse_args_and_arch(options.get_training_parser(), input_args=train_argv)
    dictionary = Dictionary()
    for word in ("a", "b", "c"):
        dictionary.add_symbol(word)
    ARCH_MODEL_REGISTRY[namespace.arch].build_model(
        namespace, SimpleNamespace(source_dictionary=dictionary, target_dictionary=dictionary))
    for name in drop:
        delattr(namespace, name)
    for name, value in (stored or {}).items():
        setattr(namespace, name, value)
    state = torch.load(path, weights_only=False)
    torch.save({**state, "cfg": {"model": namespace}}, path)


def _fairseq_train_argv(tmp_path, *extra, config="yang2019/both.args"):
    """fairseq-train's arguments in the command _fairseq_ctx_train builds."""
    from fairseq_ctx.paths import config_path
    from fairseq_ctx.reproduce import train

    return train.fairseq_train_argv(train.build_command(config_path(config), "cpu", str(tmp_path / "bin"),
                                                        str(tmp_path / "ck"), list(extra)))


def _refused(tmp_path, capsys, *extra, own=(), config="yang2019/both.args"):
    from fairseq_ctx.reproduce.train import REFUSED_RESUMPTION

    with pytest.raises(SystemExit) as refused:
        _fairseq_ctx_train(tmp_path, capsys, *extra, own=own, config=config)
    assert refused.value.code == REFUSED_RESUMPTION
    message, = [l for l in capsys.readouterr().err.splitlines()
                if "other model options (or language direction) than this command's" in l]
    return message


def test_fairseq_ctx_train_refuses_to_resume_a_checkpoint_trained_with_other_model_options(tmp_path, capsys):
    last = tmp_path / "ck" / "checkpoint_last.pt"
    _checkpoint_trained_with(last, _fairseq_train_argv(tmp_path))
    err = _fairseq_ctx_train(tmp_path, capsys)  # the same command resumes
    assert "resuming from" in err and "options than" not in err and "not compared" not in err
    # another config in the same --save-dir, or a flag the first run had: refused, one message
    message = _refused(tmp_path, capsys, "--context-stop-gradient")
    assert "--context-stop-gradient: False in the checkpoint, True now" in message
    assert "--allow-changed-options context_stop_gradient" in message
    assert "--encoder-context: deep_global+deep in the checkpoint, deep now" in _refused(
        tmp_path, capsys, "--encoder-context", "deep")
    # asked for, by name or all: resumed with a warning naming the change; another change is still refused
    for allow in ("context-stop-gradient", "all"):
        err = _fairseq_ctx_train(tmp_path, capsys, "--context-stop-gradient", own=["--allow-changed-options", allow])
        warning, = [l for l in err.splitlines() if "other model options than the checkpoint's" in l]
        assert warning.startswith("train: warning: ") and "--context-stop-gradient: False in the checkpoint" in warning
    message = _refused(tmp_path, capsys, "--context-stop-gradient", "--dropout", "0.3",
                       own=["--allow-changed-options", "context-stop-gradient"])
    assert "--dropout" in message and "stop-gradient" not in message
    # a new training from these weights (the optimizer starts over): told, not refused
    err = _fairseq_ctx_train(tmp_path, capsys, "--context-stop-gradient", "--reset-optimizer",
                             own=["--skip-checkpoint-check"])
    assert "other model options than the checkpoint's: --context-stop-gradient" in err
    # options of the training outside the model: told, not refused
    err = _fairseq_ctx_train(tmp_path, capsys, "--lr", "1e-5", "--seed", "9")
    warning, = [l for l in err.splitlines() if "other training options" in l]
    assert "--seed: 1 in the checkpoint, 9 now" in warning and "--lr: [" in warning
    # the same values spelled otherwise are no change
    assert "options than" not in _fairseq_ctx_train(tmp_path, capsys, "--adam-betas", "(0.9, 0.98)")


def test_another_effective_batch_is_told(tmp_path, capsys):
    _checkpoint_trained_with(tmp_path / "ck" / "checkpoint_last.pt", _fairseq_train_argv(tmp_path, "--max-tokens", "4096"))
    for same in (["--max-tokens", "4096"], ["--max-tokens", "2048", "--update-freq", "2"]):
        assert "options than" not in _fairseq_ctx_train(tmp_path, capsys, *same)
    warning, = [l for l in _fairseq_ctx_train(tmp_path, capsys, "--max-tokens", "999").splitlines() if "options than" in l]
    assert "other training options" in warning
    assert "effective batch (max tokens x update freq x world size): 4096 in the checkpoint, 999 now" in warning


def test_another_language_direction_is_refused(tmp_path, capsys):
    _checkpoint_trained_with(tmp_path / "ck" / "checkpoint_last.pt", _fairseq_train_argv(tmp_path, "-s", "zh", "-t", "en"))
    assert "options than" not in _fairseq_ctx_train(tmp_path, capsys, "-s", "zh", "-t", "en")
    message = _refused(tmp_path, capsys, "-s", "en", "-t", "zh")
    assert "--source-lang: zh in the checkpoint, en now" in message and "--target-lang: en in the checkpoint, zh now" in message


def test_a_resumption_on_data_of_the_other_direction_is_refused_where_fairseq_infers_it(tmp_path, capsys, monkeypatch):
    """Neither fairseq-ctx-train nor the tables name the languages: fairseq infers them, and the
    stored options compared None with None, so the same --save-dir given the other direction's
    data (a joined dictionary: the tensors fit) resumed and trained the reverse without a word. The
    direction is compared as trained (read from the stored training data, else from the starts
    record) and as inferred now; -s / -t given at one start only is no change where they agree."""
    import torch

    from fairseq_ctx.reproduce import train

    for folder, pair in (("bin", "zh-en"), ("bin-rev", "en-zh")):
        (tmp_path / folder).mkdir()
        for lang in pair.split("-"):
            (tmp_path / folder / f"train.{pair}.{lang}.idx").write_text("")
    last = tmp_path / "ck" / "checkpoint_last.pt"

    def trained(*languages, **task):
        _checkpoint_trained_with(last, _fairseq_train_argv(tmp_path, *languages))
        state = torch.load(last, weights_only=False)
        torch.save({**state, "cfg": {**state["cfg"], "task": {"source_lang": None, "target_lang": None,
                                                                "data": str(tmp_path / "bin"), **task}}}, last)

    def resume(data, *extra, own=()):
        train.main(["yang2019/both.args", "cpu", "--data", str(tmp_path / data), "--save-dir",
                    str(tmp_path / "ck"), "--dry-run", *own, "--", *extra])
        return capsys.readouterr().err

    trained()
    assert "resuming from" in resume("bin") and "options than" not in resume("bin")
    with pytest.raises(SystemExit) as refused:
        resume("bin-rev")
    assert refused.value.code == train.REFUSED_RESUMPTION
    message, = [line for line in capsys.readouterr().err.splitlines() if "(or language direction)" in line]
    assert "--source-lang: zh in the checkpoint, en now; --target-lang: en in the checkpoint, zh now" in message
    # the training data gone from here: fairseq-ctx-train's starts record of that start tells
    (tmp_path / "bin").rename(tmp_path / "elsewhere")
    train.record_start(str(tmp_path / "ck"), {"event": "start", "data": str(tmp_path / "bin"), "languages": ["zh", "en"]})
    with pytest.raises(SystemExit):
        resume("bin-rev")
    assert "--source-lang: zh in the checkpoint, en now" in capsys.readouterr().err
    allowed = resume("bin-rev", own=["--allow-changed-options", "source_lang,target_lang"])
    assert "--target-lang: en in the checkpoint, zh now (trained zh -> en, recorded in train_starts.jsonl" in allowed
    assert "options than" not in resume("bin")  # known then, not now (no data here): not compared
    os.remove(tmp_path / "ck" / train.STARTS_RECORD)  # nothing tells: the stored options' comparison (None, None)
    assert "options than" not in resume("bin-rev")
    # trained with -s zh -t en, resumed without them where fairseq infers zh -> en: no change
    (tmp_path / "elsewhere").rename(tmp_path / "bin")
    trained("-s", "zh", "-t", "en", source_lang="zh", target_lang="en")
    assert "options than" not in resume("bin")
    # the same direction named as fairseq's parser takes it: the last of either spelling, glued values
    for same in (["--source-lang", "en", "-s", "zh", "-t", "en"], ["-szh", "-ten"]):
        assert "options than" not in resume("bin-rev", *same)
    with pytest.raises(SystemExit):
        resume("bin-rev")
    assert "(trained zh -> en, named in its training options)" in capsys.readouterr().err
    # not known (a relative training path, resumed from elsewhere, no record): naming the pair fairseq
    # infers from this data is no change; naming another is (the stored options' comparison)
    trained(data="bin")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert "options than" not in resume("bin", "-s", "zh", "-t", "en")
    with pytest.raises(SystemExit):
        resume("bin", "-s", "en", "-t", "zh")
    assert "--source-lang: None in the checkpoint, en now" in capsys.readouterr().err


def test_options_build_model_changes_are_compared_as_built(tmp_path, capsys):
    # fairseq's build_model turns on the decoder's input / output sharing under --share-all-embeddings
    # (stored so in the checkpoint), with the stock transformer, the stock LSTM and a family's model
    for config, extra in (("iida2019/transformer.args", ["--share-all-embeddings"]),
                          ("iida2019/lstm.args", ["--share-all-embeddings"]),
                          ("iida2019/lstm_multihop.args", ["--share-all-embeddings"])):
        _checkpoint_trained_with(tmp_path / "ck" / "checkpoint_last.pt", _fairseq_train_argv(tmp_path, *extra, config=config))
        assert "options than" not in _fairseq_ctx_train(tmp_path, capsys, *extra, config=config)


def test_an_option_that_decides_the_start_only_is_told_not_refused(tmp_path, capsys):
    # a checkpoint of the code before --context-init's default became gate_half
    _checkpoint_trained_with(tmp_path / "ck" / "checkpoint_last.pt", _fairseq_train_argv(tmp_path),
                             stored={"context_init": "glorot"})
    warning, = [l for l in _fairseq_ctx_train(tmp_path, capsys).splitlines() if "options than" in l]
    assert "other start options" in warning and "--context-init: glorot in the checkpoint, gate_half now" in warning


def test_an_option_the_checkpoint_does_not_record_counts_only_where_it_is_given(tmp_path, capsys):
    last = tmp_path / "ck" / "checkpoint_last.pt"
    _checkpoint_trained_with(last, _fairseq_train_argv(tmp_path), drop=["context_stop_gradient"])
    assert "options than" not in _fairseq_ctx_train(tmp_path, capsys)
    assert "--context-stop-gradient: not recorded in the checkpoint, True now" in _refused(
        tmp_path, capsys, "--context-stop-gradient")


def test_an_option_set_in_the_checkpoint_and_left_off_now_is_a_change(tmp_path, capsys):
    _checkpoint_trained_with(tmp_path / "ck" / "checkpoint_last.pt",
                             _fairseq_train_argv(tmp_path, "--context-gate-bias", "-0.88"))
    assert "--context-gate-bias: -0.88 in the checkpoint, None now" in _refused(tmp_path, capsys)


def test_options_that_change_memory_use_only_are_not_a_change(tmp_path, capsys):
    _checkpoint_trained_with(tmp_path / "ck" / "checkpoint_last.pt", _fairseq_train_argv(tmp_path))
    assert "options than" not in _fairseq_ctx_train(tmp_path, capsys, "--checkpoint-activations")


def test_options_that_cannot_be_compared_are_said_so(tmp_path, capsys):
    _checkpoint(tmp_path / "ck" / "checkpoint_last.pt", 120, 3)  # records no options
    err = _fairseq_ctx_train(tmp_path, capsys)
    assert "the options were not compared with the checkpoint's" in err and "records no options" in err


@pytest.mark.parametrize("node", [
    [],
    ["--launcher", "torchrun", "--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1"],
])
def test_a_real_start_refuses_before_fairseq_train_on_every_node(tmp_path, capsys, monkeypatch, node):
    from fairseq_ctx.reproduce import train

    _checkpoint_trained_with(tmp_path / "ck" / "checkpoint_last.pt", _fairseq_train_argv(tmp_path))
    monkeypatch.setattr(train.subprocess, "call", lambda *a, **k: pytest.fail("fairseq-train was started"))
    for _ in range(2):  # the second start finds the run lock released
        with pytest.raises(SystemExit) as refused:
            train.main(["yang2019/both.args", "cpu", "--data", str(tmp_path / "bin"), "--save-dir",
                        str(tmp_path / "ck"), *node, "--", "--context-stop-gradient"])
        assert refused.value.code == train.REFUSED_RESUMPTION
        err = capsys.readouterr().err
        assert "nothing was started" in err and "a training is running there" not in err


def test_another_routing_init_is_another_model(tmp_path, capsys):
    # cross-agg's B^init (Eq. 15) is computed in every forward: cross_zero and cross_self differ by it alone
    _checkpoint_trained_with(tmp_path / "ck" / "checkpoint_last.pt", _fairseq_train_argv(tmp_path, config="cao/cross_zero.args"))
    assert "--routing-init: zero in the checkpoint, self now" in _refused(tmp_path, capsys, own=(), config="cao/cross_self.args")


def test_a_gate_bias_changed_between_values_decides_the_start_only(tmp_path, capsys):
    _checkpoint_trained_with(tmp_path / "ck" / "checkpoint_last.pt",
                             _fairseq_train_argv(tmp_path, "--context-gate-bias", "-0.88"))
    warning, = [l for l in _fairseq_ctx_train(tmp_path, capsys, "--context-gate-bias", "-0.5").splitlines()
                if "options than" in l]
    assert "other start options" in warning and "--context-gate-bias: -0.88 in the checkpoint, -0.5 now" in warning


def test_the_effective_batch_counts_the_processes_torchrun_starts(tmp_path, capsys):
    # torchrun hands fairseq its world size at run time (distributed_entry): the checkpoint holds it
    _checkpoint_trained_with(tmp_path / "ck" / "checkpoint_last.pt",
                             [*_fairseq_train_argv(tmp_path, "--max-tokens", "4096"), "--distributed-world-size", "2"])
    torchrun = ["--launcher", "torchrun", "--gpus", "2"]
    assert "options than" not in _fairseq_ctx_train(tmp_path, capsys, "--max-tokens", "4096", own=torchrun)
    err = _fairseq_ctx_train(tmp_path, capsys, "--max-tokens", "4096", own=["--launcher", "torchrun", "--gpus", "1"])
    assert "effective batch (max tokens x update freq x world size): 8192 in the checkpoint, 4096 now" in err


def test_a_change_of_direction_can_be_allowed_by_name(tmp_path, capsys):
    _checkpoint_trained_with(tmp_path / "ck" / "checkpoint_last.pt", _fairseq_train_argv(tmp_path, "-s", "zh", "-t", "en"))
    err = _fairseq_ctx_train(tmp_path, capsys, "-s", "en", "-t", "zh",
                             own=["--allow-changed-options", "source-lang,target_lang,dropout"])
    warning, = [l for l in err.splitlines() if "other data options" in l]
    assert "--source-lang: zh in the checkpoint, en now" in warning
    assert "--allow-changed-options names dropout: not changed" in err


def test_allow_changed_options_does_not_take_the_config(tmp_path, capsys):
    from fairseq_ctx.reproduce import train

    with pytest.raises(SystemExit) as refused:
        train.main(["--allow-changed-options", "yang2019/both.args", "cpu", "--data", str(tmp_path / "bin"),
                    "--save-dir", str(tmp_path / "ck"), "--dry-run"])
    assert refused.value.code != 0  # argparse's own error (no SETTING) or ours
    with pytest.raises(SystemExit) as refused:
        train.main(["yang2019/both.args", "cpu", "--allow-changed-options", "yang2019/both.args", "--data",
                    str(tmp_path / "bin"), "--save-dir", str(tmp_path / "ck"), "--dry-run"])
    assert "takes option names or 'all'" in str(refused.value.code)


def test_a_command_fairseq_rejects_is_not_compared(tmp_path, capsys):
    _checkpoint_trained_with(tmp_path / "ck" / "checkpoint_last.pt", _fairseq_train_argv(tmp_path))
    err = _fairseq_ctx_train(tmp_path, capsys, "--no-such-option")
    assert "the options were not compared with the checkpoint's: fairseq-train rejects these options" in err


def test_positions_left_unset_are_not_compared_and_a_change_is_told(tmp_path, capsys):
    _checkpoint_trained_with(tmp_path / "ck" / "checkpoint_last.pt",
                             _fairseq_train_argv(tmp_path, "--max-source-positions", "256"))
    assert "options than" not in _fairseq_ctx_train(tmp_path, capsys)
    warning, = [l for l in _fairseq_ctx_train(tmp_path, capsys, "--max-source-positions", "512").splitlines()
                if "options than" in l]
    assert "other training options" in warning and "--max-source-positions: 256 in the checkpoint, 512 now" in warning


def test_another_node_waits_for_the_checkpoint_node_0_repairs_before_it_judges(tmp_path, capsys, monkeypatch):
    from fairseq_ctx.reproduce import train

    last = tmp_path / "ck" / "checkpoint_last.pt"
    _checkpoint_trained_with(last, _fairseq_train_argv(tmp_path))
    whole = last.read_bytes()
    last.write_bytes(whole[:-300])  # cut off: node 0 is replacing it by a whole one
    monkeypatch.setattr(train, "_node_wait_sleep", lambda seconds: last.write_bytes(whole))
    monkeypatch.setattr(train.subprocess, "call", lambda *a, **k: pytest.fail("fairseq-train was started"))
    with pytest.raises(SystemExit) as refused:
        train.main(["yang2019/both.args", "cpu", "--data", str(tmp_path / "bin"), "--save-dir", str(tmp_path / "ck"),
                    "--launcher", "torchrun", "--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1",
                    "--", "--context-stop-gradient"])
    assert refused.value.code == train.REFUSED_RESUMPTION


def _real_start(tmp_path, monkeypatch, *extra, own=(), exit_code=0, saves_at=None):
    """fairseq-ctx-train (no --dry-run) with fairseq-train replaced by one that saves checkpoint_last.pt
    at update ``saves_at`` (the epoch after the loaded one) and exits ``exit_code``. -> SystemExit code."""
    from fairseq_ctx.reproduce import train

    def fairseq_train(cmd, **kwargs):
        if saves_at is not None:
            _checkpoint(tmp_path / "ck" / "checkpoint_last.pt", saves_at, 4)
        return exit_code

    monkeypatch.setattr(train.subprocess, "call", fairseq_train)
    with pytest.raises(SystemExit) as ended:
        train.main(["yang2019/both.args", "cpu", "--data", str(tmp_path / "bin"), "--save-dir",
                    str(tmp_path / "ck"), *own, "--", *extra])
    return ended.value.code


def _starts(tmp_path):
    from fairseq_ctx.reproduce.train import STARTS_RECORD

    path = tmp_path / "ck" / STARTS_RECORD
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_each_start_of_fairseq_train_is_recorded_with_its_resumption_changes_and_end(tmp_path, capsys, monkeypatch):
    from fairseq_ctx.reproduce.train import build_command
    from fairseq_ctx.paths import config_path

    # a first start from nothing: no resumption; it saves at update 120 and exits 0
    assert _real_start(tmp_path, monkeypatch, saves_at=120) == 0
    start, end = _starts(tmp_path)
    assert (start["event"], start["resumed"], start["world_size"], start["nnodes"]) == ("start", None, 1, 1)
    assert start["command"] == build_command(config_path("yang2019/both.args"), "cpu", str(tmp_path / "bin"),
                                             str(tmp_path / "ck"), [])
    assert (end["event"], end["exit_code"], end["checkpoint_last_update"], end["start_id"]) == (
        "end", 0, 120, start["start_id"])
    # a requeued start with a change it was allowed: the resumption, the change and the permission
    _checkpoint_trained_with(tmp_path / "ck" / "checkpoint_last.pt", _fairseq_train_argv(tmp_path), updates=120)
    assert _real_start(tmp_path, monkeypatch, "--dropout", "0.3", own=["--allow-changed-options", "dropout"],
                       exit_code=1, saves_at=150) == 1
    assert len(_starts(tmp_path)) == 4  # appended: the first start's two lines stay
    start, end = _starts(tmp_path)[2:]
    resumed = start["resumed"]
    assert (resumed["from"]["update"], resumed["from"]["epoch"], resumed["from"]["optimizer_resumed"]) == (120, 3, True)
    assert resumed["allowed"] == ["dropout"] and "not_compared" not in resumed
    assert [change[0] for change in resumed["options_changed"]["model"]] == ["dropout"]
    assert resumed["options_changed"]["model"][0][1:] == [0.1, 0.3]
    assert (end["exit_code"], end["fairseq_exit"], end["taken_as_finished"], end["checkpoint_last_update"]) == (
        1, 1, False, 150)
    assert end["start_id"] == start["start_id"] != _starts(tmp_path)[0]["start_id"]
    capsys.readouterr()


def test_a_start_that_trains_nothing_records_nothing(tmp_path, capsys, monkeypatch):
    # a refused resumption, a dry run and a node other than node 0 (the directory is node 0's) add no line
    _checkpoint_trained_with(tmp_path / "ck" / "checkpoint_last.pt", _fairseq_train_argv(tmp_path))
    from fairseq_ctx.reproduce.train import REFUSED_RESUMPTION

    assert _real_start(tmp_path, monkeypatch, "--context-stop-gradient") == REFUSED_RESUMPTION
    _fairseq_ctx_train(tmp_path, capsys)
    node_1 = ["--launcher", "torchrun", "--nnodes", "2", "--node-rank", "1", "--master-addr", "10.0.0.1"]
    assert _real_start(tmp_path, monkeypatch, own=node_1) == 0
    assert _starts(tmp_path) == []
    # a training already at --max-update is not started again, and not recorded
    _checkpoint(tmp_path / "ck" / "checkpoint_last.pt", 300, 3)
    assert _real_start(tmp_path, monkeypatch, "--max-update", "300", own=["--skip-checkpoint-check"]) == 0
    assert _starts(tmp_path) == []
    # (and leaves the directory free: the next start in this process is not refused as running)
    assert _real_start(tmp_path, monkeypatch, "--max-update", "400", own=["--skip-checkpoint-check"]) == 0
    assert len(_starts(tmp_path)) == 2
    capsys.readouterr()


def test_a_start_whose_options_cannot_be_compared_records_why(tmp_path, capsys, monkeypatch):
    _checkpoint(tmp_path / "ck" / "checkpoint_last.pt", 120, 3)  # holds no options
    assert _real_start(tmp_path, monkeypatch, own=["--skip-checkpoint-check"]) == 0
    start, end = _starts(tmp_path)
    assert start["resumed"]["options_changed"] is None and "records no options" in start["resumed"]["not_compared"]
    assert end["checkpoint_last_update"] is None  # (the fake fairseq-train saved nothing this time)
    capsys.readouterr()


def test_an_interrupted_start_is_recorded_and_leaves_the_directory_free(tmp_path, capsys, monkeypatch):
    from fairseq_ctx.reproduce import train

    def interrupted(cmd, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(train.subprocess, "call", interrupted)
    with pytest.raises(KeyboardInterrupt):
        train.main(["yang2019/both.args", "cpu", "--data", str(tmp_path / "bin"), "--save-dir", str(tmp_path / "ck")])
    start, end = _starts(tmp_path)
    assert (end["interrupted"], end["checkpoint_last_update"], end["start_id"]) == (
        "KeyboardInterrupt", None, start["start_id"])
    assert _real_start(tmp_path, monkeypatch, saves_at=10) == 0  # the run lock was released
    assert len(_starts(tmp_path)) == 4
    capsys.readouterr()


def test_sigterm_records_the_end_then_takes_its_default_course(tmp_path, capsys, monkeypatch):
    import signal

    from fairseq_ctx.reproduce import train

    sent = []
    before = signal.getsignal(signal.SIGTERM)

    def killed_by_the_scheduler(cmd, **kwargs):
        _checkpoint(tmp_path / "ck" / "checkpoint_last.pt", 60, 2)  # a save before the time limit
        monkeypatch.setattr(train.os, "kill", lambda pid, signum: sent.append((pid, signum)))
        signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)  # what the interpreter calls on SIGTERM
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # the default: the process would end here
        return -15

    monkeypatch.setattr(train.subprocess, "call", killed_by_the_scheduler)
    with pytest.raises(SystemExit):
        train.main(["yang2019/both.args", "cpu", "--data", str(tmp_path / "bin"), "--save-dir", str(tmp_path / "ck")])
    start, end = _starts(tmp_path)  # one end line: the one written on the signal
    assert (end["signal"], end["checkpoint_last_changed"]) == ("SIGTERM", True) and "exit_code" not in end
    assert sent == [(os.getpid(), signal.SIGTERM)]
    assert signal.getsignal(signal.SIGTERM) == before  # (restored for an in-process caller)
    capsys.readouterr()


def test_the_record_keeps_fairseqs_own_exit_beside_the_one_taken(tmp_path, capsys, monkeypatch):
    # an exit at interpreter shutdown after the last save (rc -6, fairseq_ctx/checkpoint_repair.py) is
    # taken as finished: both are kept
    assert _real_start(tmp_path, monkeypatch, "--max-update", "300", own=["--skip-checkpoint-check"],
                       exit_code=-6, saves_at=300) == 0
    start, end = _starts(tmp_path)
    assert (end["fairseq_exit"], end["exit_code"], end["taken_as_finished"], end["checkpoint_last_update"]) == (
        -6, 0, True, 300)
    capsys.readouterr()


def test_node_0_of_a_multi_node_run_records_and_a_record_that_cannot_be_written_stops_nothing(
        tmp_path, capsys, monkeypatch):
    node_0 = ["--launcher", "torchrun", "--nnodes", "2", "--node-rank", "0", "--master-addr", "10.0.0.1"]
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "2")
    assert _real_start(tmp_path, monkeypatch, own=node_0, saves_at=8) == 0
    start, end = _starts(tmp_path)
    assert (start["nnodes"], start["world_size"], start["job"]) == (2, 2, {"SLURM_JOB_ID": "4242",
                                                                           "SLURM_RESTART_COUNT": "2"})
    assert end["checkpoint_last_update"] == 8
    # a checkpoint_last.pt this start did not save is not reported as its own (even one dated later)
    os.utime(tmp_path / "ck" / "checkpoint_last.pt", (4e9, 4e9))
    assert _real_start(tmp_path, monkeypatch, own=node_0, exit_code=1) == 1
    assert _starts(tmp_path)[-1]["checkpoint_last_update"] is None
    # the record's place taken by a directory: warned of; fairseq-train runs and its exit status is kept
    from fairseq_ctx.reproduce.train import STARTS_RECORD

    (tmp_path / "ck" / STARTS_RECORD).rename(tmp_path / "moved.jsonl")
    (tmp_path / "ck" / STARTS_RECORD).mkdir()
    assert _real_start(tmp_path, monkeypatch, own=node_0, exit_code=7) == 7
    assert "this start's record not written" in capsys.readouterr().err


def test_record_values_are_strict_json():
    from fairseq_ctx.reproduce.train import _jsonable

    class Odd:
        def __str__(self):
            return "odd"

    value = {"a": (1, float("inf")), 2: [float("nan"), Odd(), None, True, 0.5]}
    assert json.loads(json.dumps(_jsonable(value), allow_nan=False)) == {"a": [1, "inf"], "2": ["nan", "odd", None, True, 0.5]}


_DRIVER = """
import sys, time
from fairseq_ctx.reproduce import train
train.subprocess.call = lambda cmd, **kwargs: time.sleep(60) or 0   # fairseq-train, still training
train.main(["yang2019/both.args", "cpu", "--data", sys.argv[1] + "/bin", "--save-dir", sys.argv[1] + "/ck"])
"""


def test_a_real_sigterm_writes_the_end_line_and_ends_the_driver_by_it(tmp_path):
    import signal
    import subprocess
    import time

    from tests.conftest import ROOT

    driver = subprocess.Popen([sys.executable, "-c", _DRIVER, str(tmp_path)], cwd=ROOT, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while not _starts(tmp_path) and time.time() < deadline and driver.poll() is None:
        time.sleep(0.2)
    assert _starts(tmp_path), driver.stderr.read().decode()[-2000:]  # (the handler is installed before it)
    driver.send_signal(signal.SIGTERM)
    assert driver.wait(timeout=60) == -signal.SIGTERM  # the default course: ended by the signal
    start, end = _starts(tmp_path)
    assert (end["signal"], end["checkpoint_last_changed"], end["start_id"]) == ("SIGTERM", False, start["start_id"])


def test_sigterm_handling_someone_else_set_is_left_alone(tmp_path, capsys, monkeypatch):
    import signal

    from fairseq_ctx.reproduce import train

    seen = []
    monkeypatch.setattr(train.subprocess, "call", lambda cmd, **kwargs: seen.append(signal.getsignal(signal.SIGTERM)) or 0)
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)  # an sbatch script's trap '' TERM
    try:
        with pytest.raises(SystemExit):
            train.main(["yang2019/both.args", "cpu", "--data", str(tmp_path / "bin"), "--save-dir", str(tmp_path / "ck")])
        assert seen == [signal.SIG_IGN] and signal.getsignal(signal.SIGTERM) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert [line["event"] for line in _starts(tmp_path)] == ["start", "end"]
    capsys.readouterr()


def test_a_start_in_another_thread_is_recorded(tmp_path, capsys, monkeypatch):
    import threading

    from fairseq_ctx.reproduce import train

    monkeypatch.setattr(train.subprocess, "call", lambda cmd, **kwargs: 0)
    ended = []

    def start():
        try:
            train.main(["yang2019/both.args", "cpu", "--data", str(tmp_path / "bin"), "--save-dir", str(tmp_path / "ck")])
        except SystemExit as exit_:
            ended.append(exit_.code)

    thread = threading.Thread(target=start)
    thread.start()
    thread.join(120)
    assert ended == [0] and [line["event"] for line in _starts(tmp_path)] == ["start", "end"]
    capsys.readouterr()


def test_a_checkpoint_that_cannot_be_read_at_the_end_changes_nothing_but_the_record(tmp_path, capsys, monkeypatch):
    from fairseq_ctx.reproduce import train

    def unreadable(path):
        raise OSError("Stale file handle")

    monkeypatch.setattr(train, "written_to_the_end", unreadable)
    assert _real_start(tmp_path, monkeypatch, exit_code=5, saves_at=30) == 5
    assert _starts(tmp_path)[-1]["checkpoint_last_update"] is None
    capsys.readouterr()
