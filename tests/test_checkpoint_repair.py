"""A checkpoint_last.pt cut off while fairseq copied it (fairseq_ctx/checkpoint_repair.py):
replaced by the newest whole checkpoint before a training resumes, in the reproduce runner,
fairseq-ctx-train and by hand; real fairseq-train resumes from the repaired directory."""
import json
import os
import shlex
import pathlib
import shutil
import subprocess
import sys
import types

import pytest
import torch

from fairseq_ctx.checkpoint_repair import repair_before_resuming, stored_updates
from fairseq_ctx.reproduce import runner, tables
from tests.conftest import TRAIN_DEFAULTS, USER_DIR, cli_env, fairseq_cli, run


def _save(path, updates):
    """A checkpoint as fairseq stores the training position: the optimizer history."""
    torch.save({"model": torch.full((500,), float(updates)), "optimizer_history": [{"num_updates": updates}]}, path)
    return path.read_bytes()


def _cut(path):
    path.write_bytes(path.read_bytes()[:-300])  # a zip's directory is at its end


@pytest.mark.parametrize("newest", ["checkpoint_best.pt", "checkpoint2.pt", "checkpoint.best_loss_4.12.pt"])
def test_a_cut_off_last_is_replaced_by_the_whole_checkpoint_saved_last_whatever_its_name(tmp_path, newest):
    """Names and file times do not order fairseq's checkpoints: checkpoint_best.pt (a copy
    of the last save that improved validation) may be the newest whole one, e.g. under
    --no-epoch-checkpoints; an epoch checkpoint may be newer than an interval one."""
    _save(tmp_path / "checkpoint_1_10.pt", 10)
    for name, updates in {"checkpoint2.pt": 25, "checkpoint.best_loss_4.12.pt": 20, "checkpoint_best.pt": 15}.items():
        _save(tmp_path / name, 30 if name == newest else updates)
    newest_whole = (tmp_path / newest).read_bytes()
    _save(tmp_path / "checkpoint_3_40.pt", 40)
    _cut(tmp_path / "checkpoint_3_40.pt")  # newer, but damaged too
    torch.save({"model": torch.zeros(3)}, tmp_path / "checkpoint_averaged.pt")  # whole, no training position
    _save(tmp_path / "checkpoint_last.pt", 40)
    _cut(tmp_path / "checkpoint_last.pt")
    os.utime(tmp_path / "checkpoint_1_10.pt", (4e9, 4e9))  # copied last: the newest file, the oldest point
    said = []
    message = repair_before_resuming(str(tmp_path), log=said.append)
    assert (tmp_path / "checkpoint_last.pt").read_bytes() == newest_whole
    assert said == [message] and f"fairseq resumes from a copy of {newest} (30 updates)" in message
    assert not [p.name for p in tmp_path.iterdir() if "tmp" in p.name]  # no temporary copy left


def test_without_a_whole_checkpoint_the_cut_off_one_is_kept_aside_and_training_starts_over(tmp_path):
    damaged = _save(tmp_path / "checkpoint_last.pt", 7)[:-300]
    (tmp_path / "checkpoint_last.pt").write_bytes(damaged)
    _save(tmp_path / "checkpoint_best.pt", 5)
    _cut(tmp_path / "checkpoint_best.pt")
    message = repair_before_resuming(str(tmp_path), log=lambda m: None)
    assert not (tmp_path / "checkpoint_last.pt").exists()
    assert (tmp_path / "checkpoint_last.pt.cut-off").read_bytes() == damaged
    assert "the training starts from the beginning" in message


def test_a_whole_or_absent_last_is_left_alone(tmp_path):
    assert repair_before_resuming(str(tmp_path), log=pytest.fail) is None
    whole = _save(tmp_path / "checkpoint_last.pt", 1)
    _save(tmp_path / "checkpoint_best.pt", 2)
    assert repair_before_resuming(str(tmp_path), log=pytest.fail) is None
    assert (tmp_path / "checkpoint_last.pt").read_bytes() == whole


def test_the_command_refuses_a_directory_that_is_not_there(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "fairseq_ctx.checkpoint_repair", str(tmp_path / "typo")],
                          capture_output=True, text=True, env=cli_env())
    assert proc.returncode == 1 and "is not a directory" in proc.stderr


def test_the_reproduce_runner_repairs_before_it_resumes_a_cell(tmp_path, capsys):
    table = tables.TABLES["cao_table2"]
    from tests.test_reproduce_road import _options

    cell = runner.build_cells(table, table.rows[:1], _options(), str(tmp_path), str(tmp_path))[0]
    train_dir = tmp_path.joinpath(cell.train_dir)
    save_dir = _fairseq_save_dir(cell)  # where the cell's fairseq-train writes and resumes
    save_dir.mkdir(parents=True)
    whole = _save(save_dir / "checkpoint_3_900.pt", 900)
    _save(save_dir / "checkpoint_last.pt", 950)
    _cut(save_dir / "checkpoint_last.pt")
    # the training command succeeds only if it finds the whole checkpoint in place; the
    # evaluation that follows fails (there is no model), after train.json is written
    cell.train_cmd = [sys.executable, "-c", f"import sys; sys.exit(0 if open({str(save_dir / 'checkpoint_last.pt')!r}, "
                                            f"'rb').read() == {whole!r} else 4)"]
    runner.run_cell(cell, "cpu", False, dict(os.environ))
    assert cell.message.startswith("evaluation of"), cell.message
    said = "fairseq resumes from a copy of checkpoint_3_900.pt (900 updates)"
    assert said in capsys.readouterr().err and said in (train_dir / "train.log").read_text()
    repairs = json.loads((train_dir / "train.json").read_text())["checkpoint_repair"]
    assert len(repairs) == 1 and said in repairs[0]


def _fairseq_save_dir(cell):
    """The --save-dir of the cell's real training command (before a test replaces it)."""
    import pathlib

    return pathlib.Path(cell.train_cmd[cell.train_cmd.index("--save-dir") + 1])


def _repaired_attempt_that_dies(tmp_path):
    """A cell whose cut-off checkpoint_last.pt is repaired (from update 900) by an attempt
    that then dies: (cell, training directory, save dir)."""
    table = tables.TABLES["cao_table2"]
    from tests.test_reproduce_road import _options

    cell = runner.build_cells(table, table.rows[:1], _options(), str(tmp_path), str(tmp_path))[0]
    train_dir, save_dir = tmp_path.joinpath(cell.train_dir), _fairseq_save_dir(cell)
    save_dir.mkdir(parents=True)
    _save(save_dir / "checkpoint_3_900.pt", 900)
    _save(save_dir / "checkpoint_last.pt", 950)
    _cut(save_dir / "checkpoint_last.pt")
    cell.train_cmd = [sys.executable, "-c", "import sys; sys.exit(3)"]  # killed again
    runner.run_cell(cell, "cpu", False, dict(os.environ))
    assert cell.message.startswith("training exited 3") and not (train_dir / "train.json").exists()
    return cell, train_dir, save_dir


def test_a_repair_stays_recorded_when_the_repaired_attempt_fails(tmp_path):
    """Attempt 1 is repaired and dies; attempt 2 finds a whole checkpoint_last.pt (nothing
    to repair) and finishes: its train.json still says the training resumed from a copy."""
    cell, train_dir, save_dir = _repaired_attempt_that_dies(tmp_path)
    cell.train_cmd = [sys.executable, "-c", "pass"]
    runner.run_cell(cell, "cpu", False, dict(os.environ))
    assert cell.message.startswith("evaluation of"), cell.message
    repairs = json.loads((train_dir / "train.json").read_text())["checkpoint_repair"]
    assert len(repairs) == 1 and "fairseq resumes from a copy of checkpoint_3_900.pt (900 updates)" in repairs[0]


def test_a_training_started_over_is_not_charged_with_an_earlier_repair(tmp_path):
    """A repaired attempt fails; the user deletes the checkpoints and trains again from the
    beginning: that training's train.json says nothing of the earlier repair."""
    cell, train_dir, save_dir = _repaired_attempt_that_dies(tmp_path)
    for path in save_dir.glob("*.pt"):  # only the checkpoints: what a user clears to start over
        path.unlink()
    cell.train_cmd = [sys.executable, "-c", "pass"]
    runner.run_cell(cell, "cpu", False, dict(os.environ))
    assert "checkpoint_repair" not in json.loads((train_dir / "train.json").read_text())


def test_fairseq_train_resumes_from_a_repaired_directory(tiny_data_bin, tmp_path):
    """Real fairseq-train: killed while copying checkpoint_last.pt, it cannot resume; after
    `python -m fairseq_ctx.checkpoint_repair` it resumes where the newest whole checkpoint
    was saved: here checkpoint_best.pt (update 4), the interval checkpoint of update 4 being
    damaged too and the one of update 2 older."""
    save_dir = tmp_path / "checkpoints"
    train = fairseq_cli("train", str(tiny_data_bin), "--user-dir", USER_DIR, *TRAIN_DEFAULTS, "--arch", "transformer",
                        "--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "16",
                        "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32",
                        "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
                        "--save-interval-updates", "2", "--validate-interval-updates", "2", "--save-dir", str(save_dir))
    run([*train, "--max-update", "4"])
    assert stored_updates(str(save_dir / "checkpoint_1_2.pt")) == 2
    assert stored_updates(str(save_dir / "checkpoint_best.pt")) == 4  # validation improved at update 4
    _cut(save_dir / "checkpoint_last.pt")
    _cut(save_dir / "checkpoint_1_4.pt")
    broken = subprocess.run([*train, "--max-update", "6"], capture_output=True, text=True, env=cli_env())
    assert broken.returncode != 0  # what a resubmitted job meets without the repair
    repaired = subprocess.run([sys.executable, "-m", "fairseq_ctx.checkpoint_repair", str(save_dir)],
                              capture_output=True, text=True, env=cli_env())
    assert repaired.returncode == 0 and "a copy of checkpoint_best.pt (4 updates)" in repaired.stderr
    resumed = run([*train, "--max-update", "6"])
    log = resumed.stdout + resumed.stderr
    assert "checkpoint_last.pt (epoch 1 @ 4 updates)" in log, log[-3000:]
    assert "num_updates=5," in log and "num_updates=1," not in log  # went on, did not start over
    assert "Stopping training due to num_updates: 6 >= max_update: 6" in log


def test_fairseq_ctx_train_repairs_before_it_starts_fairseq(tmp_path, monkeypatch, capsys):
    from fairseq_ctx.reproduce import train

    save_dir = tmp_path / "checkpoints"
    save_dir.mkdir()
    whole = _save(save_dir / "checkpoint_1_10.pt", 10)
    _save(save_dir / "checkpoint_last.pt", 12)
    cut = (save_dir / "checkpoint_last.pt").read_bytes()[:-300]
    started_with = []
    monkeypatch.setattr(train.subprocess, "call",
                        lambda cmd, **kwargs: started_with.append((save_dir / "checkpoint_last.pt").read_bytes()) or 0)
    common = ["yang2019/both.args", "cpu", "--data", str(tmp_path), "--save-dir", str(save_dir)]
    # node 1 of two (torchrun: the same command on every node) leaves the shared directory to node 0:
    # it waits (in 5 s steps, here not slept) for node 0 to repair it, up to NODE_WAIT_S, then goes on
    (save_dir / "checkpoint_last.pt").write_bytes(cut)
    waits = []
    monkeypatch.setattr(train, "NODE_WAIT_S", 15)
    monkeypatch.setattr(train, "_node_wait_sleep", waits.append)
    with pytest.raises(SystemExit):
        train.main([*common, "--launcher", "torchrun", "--nnodes", "2", "--node-rank", "1", "--master-addr", "n0"])
    assert started_with == [cut] and waits == [5, 5, 5]
    with pytest.raises(SystemExit) as exit_:
        train.main(common)
    assert exit_.value.code == 0 and started_with == [cut, whole]
    assert "train: " in capsys.readouterr().err


@pytest.mark.parametrize("extra", [["--save-dir", "elsewhere"], ["--save-dir=elsewhere"], ["--checkpoint-suffix", "-a"]])
def test_the_runner_refuses_to_move_a_cells_checkpoints(tmp_path, extra):
    """Repair, averaging and evaluation read <cell>/checkpoints: a --save-dir (or a suffix)
    passed through to fairseq-train would train where none of them looks."""
    with pytest.raises(SystemExit) as e:
        runner.main("cao_table2", ["--dry-run", "--results", str(tmp_path), "--", *extra])
    assert "after '--' is not allowed" in str(e.value) and not any(tmp_path.iterdir())


@pytest.mark.parametrize("extra", [["--save-dir", "elsewhere"], ["--checkpoint-suffix=-a"]])
def test_fairseq_ctx_train_refuses_to_move_the_checkpoints_it_repairs(tmp_path, extra):
    from fairseq_ctx.reproduce import train

    with pytest.raises(SystemExit) as e:
        train.main(["yang2019/both.args", "cpu", "--data", str(tmp_path), "--save-dir", str(tmp_path / "ck"),
                    "--dry-run", "--", *extra])
    assert "after '--' is not allowed" in str(e.value)


@pytest.mark.parametrize("table_key, extra, reason", [
    ("cao_table2", ["--no-save"], "--no-save"),
    ("cao_table2", ["--no-last-checkpoints"], "checkpoint_last.pt"),
    ("cao_table2", ["--keep-interval-updates", "2"], "at least 5 must be kept"),
    ("cao_table2", ["--keep-interval-updates=4"], "at least 5 must be kept"),
    ("cao_table2", ["--max-update", "4999", "--save-interval-updates", "1000"], "writes at most 4 interval checkpoints"),
    ("cao_table2", ["--save-interval-updates", "0"], "no numbered checkpoint"),
    ("iida2019_table2", ["--disable-validation"], "no checkpoint_best.pt"),
    ("iida2019_table2", ["--save-interval", "3", "--validate-interval", "7"], "no epoch is both saved and validated"),
    ("iida2019_table2", ["--max-update", "500", "--validate-after-updates", "501"], "no validation"),
    ("iida2019_table2", ["--reset-meters"], "overwrites checkpoint_best.pt"),
    ("cao_table2", ["--validate-after-updates", "199000"], "writes at most 2 interval checkpoints"),
    ("cao_table2", ["--no-save-optimizer-state"], "resume at update 0"),
    ("cao_table2", ["--reset-optimizer"], "every resumption"),
    ("cao_table2", ["--reset-lr-scheduler"], "every resumption"),
    ("cao_table2", ["--reset-dataloader"], "every resumption"),
    ("cao_table2", ["--update-ordered-indices-seed"], "group its batches with another seed"),
    ("iida2019_table2", ["--restore-file", "/models/pretrained.pt"], "--finetune-from-model"),
])
def test_the_runner_refuses_options_that_leave_the_evaluation_without_its_checkpoints(tmp_path, table_key, extra,
                                                                                      reason):
    """Cao's tables average the last 5 interval checkpoints, Iida's evaluate checkpoint_best.pt:
    a fairseq-train option after '--' that keeps fewer (or none) would fail at the evaluation,
    after the whole training; refused before anything runs, naming the option."""
    with pytest.raises(SystemExit) as e:
        runner.main(table_key, ["--dry-run", "--results", str(tmp_path), "--", *extra])
    message = str(e.value)
    assert reason in message and extra[0].split("=")[0] in message and "nothing was trained" in message
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("table_key, extra", [
    ("cao_table2", ["--keep-interval-updates", "5"]),
    ("cao_table2", ["--keep-interval-updates", "-1", "--max-update", "5000", "--save-interval-updates", "1000"]),
    ("iida2019_table2", ["--keep-last-epochs", "1", "--no-epoch-checkpoints"]),
    ("iida2019_table2", ["--save-interval", "2", "--validate-interval", "4", "--restore-file", "checkpoint_last.pt"]),
    ("cao_table2", ["--finetune-from-model", "/models/pretrained.pt"]),
    ("iida2019_table2", ["--max-update", "500", "--validate-after-updates", "500"]),
], ids=["keeps-exactly-5", "keeps-all-5-written", "best-needs-no-numbered", "epoch-4-saves-and-validates",
        "finetune-from-a-model", "validates-at-the-last-update"])
def test_the_runner_accepts_options_that_keep_what_the_evaluation_reads(tmp_path, table_key, extra, capsys):
    runner.main(table_key, ["--dry-run", "--results", str(tmp_path), "--", *extra])
    assert "fairseq_cli.train" in capsys.readouterr().out


@pytest.mark.parametrize("config, extra, reason", [
    ("yang2019/both.args", ["--keep-interval-updates", "3"], "--paper yang2019"),
    ("iida2019/lstm.args", ["--disable-validation"], "--paper iida2019"),
    ("iida2019/lstm.args", ["--no-save"], "nothing to evaluate"),
])
def test_fairseq_ctx_train_refuses_options_that_leave_the_evaluation_without_its_checkpoints(tmp_path, config, extra,
                                                                                            reason):
    from fairseq_ctx.reproduce import train

    with pytest.raises(SystemExit) as e:
        train.main([config, "cpu", "--data", str(tmp_path), "--save-dir", str(tmp_path / "ck"), "--dry-run", "--",
                    *extra])
    assert reason in str(e.value) and extra[0] in str(e.value) and not (tmp_path / "ck").exists()


def test_fairseq_ctx_train_can_be_told_to_train_a_run_no_one_evaluates(tmp_path, capsys):
    from fairseq_ctx.reproduce import train

    with pytest.raises(SystemExit) as e:
        train.main(["cao/transformer_base.args", "cpu", "--data", str(tmp_path), "--save-dir", str(tmp_path / "ck"),
                    "--dry-run", "--", "--max-update", "300"])
    assert "lower --save-interval-updates" in str(e.value) and "--skip-checkpoint-check" in str(e.value)
    train.main(["cao/transformer_base.args", "cpu", "--data", str(tmp_path), "--save-dir", str(tmp_path / "ck"),
                "--dry-run", "--skip-checkpoint-check", "--", "--max-update", "300"])
    assert "--max-update 300" in capsys.readouterr().out


@pytest.mark.parametrize("extra, warned", [
    (["--max-update", "5000", "--save-interval-updates", "1000"], "exactly 5 interval checkpoints"),
    (["--max-update", "6000", "--save-interval-updates", "1000"], None),
])
def test_a_training_with_no_margin_for_the_average_is_warned_about(tmp_path, capsys, extra, warned):
    runner.main("cao_table2", ["--dry-run", "--results", str(tmp_path), "--only", "base", "--", *extra])
    err = capsys.readouterr().err
    assert (warned in err) if warned else ("warning: exactly" not in err)


def test_iida_epochs_trained_but_never_saved_are_warned_about(tmp_path, capsys):
    runner.main("iida2019_table2", ["--dry-run", "--results", str(tmp_path), "--", "--save-interval", "3"])
    assert "the last 2 epoch(s) are trained but never saved" in capsys.readouterr().err
    # a --max-update stop saves and validates, if it comes before --max-epoch: said, not refused
    runner.main("iida2019_table2", ["--dry-run", "--results", str(tmp_path), "--", "--save-interval", "30",
                                    "--max-update", "500"])
    assert "exists only if --max-update 500 comes first" in capsys.readouterr().err


@pytest.mark.parametrize("extra, warned", [
    (["--patience", "10"], "--patience 10: fairseq does not save the early-stopping count"),
    (["--patience", "-1"], None),
    (["--stop-time-hours", "0.5"], "--stop-time-hours 0.5: starting this command again"),
    (["--stop-time-hours", "0"], None),
])
def test_stops_a_relaunch_would_not_see_as_finished_are_warned_about(tmp_path, capsys, extra, warned):
    from fairseq_ctx.reproduce import train

    train.main(["iida2019/lstm.args", "cpu", "--data", str(tmp_path), "--save-dir", str(tmp_path / "ck"),
                "--dry-run", "--", *extra])
    err = capsys.readouterr().err
    assert (warned in err) if warned else (extra[0] not in err)


def test_the_disk_estimate_counts_every_checkpoint_fairseq_keeps():
    def cell(*words):
        return types.SimpleNamespace(train_cmd=["fairseq-train", "--optimizer", "adam", *words])

    per, weights = 1000 * 4 * 3, 1000 * 4
    five = ["--max-update", "5000", "--save-interval-updates", "1000"]
    assert runner.estimated_checkpoint_bytes(cell(*five, "--keep-interval-updates", "5"), 1000) == per * 7 + weights
    assert runner.estimated_checkpoint_bytes(cell(*five, "--keep-interval-updates=-1"), 1000) == per * 7 + weights
    assert runner.estimated_checkpoint_bytes(cell(*five, "--keep-interval-updates", "0"), 1000) == per * 7 + weights
    assert runner.estimated_checkpoint_bytes(cell(*five, "--keep-interval-updates", "2"), 1000) == per * 4 + weights
    assert runner.estimated_checkpoint_bytes(cell("--max-update", "5000"), 1000) == per * 2 + weights


def test_a_smoke_rehearsal_is_refused_before_its_data_is_made(tmp_path, monkeypatch):
    from fairseq_ctx.reproduce import smoke_data

    made = []
    monkeypatch.setattr(smoke_data, "prepare", lambda *a, **k: made.append(a) or "made")
    with pytest.raises(SystemExit) as e:
        runner.main("cao_table2", ["--smoke", "--results", str(tmp_path), "--", "--keep-interval-updates", "2"])
    assert "nothing was trained" in str(e.value) and made == []


def test_a_finished_training_is_not_started_again(tiny_data_bin, tmp_path):
    """Real fairseq-train started on a directory already at --max-update takes one more update
    and overwrites checkpoint_last.pt (the premise, pinned here); finished_at sees it first, and
    the runner's cell and fairseq-ctx-train then do not start fairseq-train again."""
    from fairseq_ctx.checkpoint_repair import finished_at, finished_before_the_exit
    from fairseq_ctx.reproduce import train as train_mod
    from tests.test_reproduce_road import _options

    save_dir = tmp_path / "checkpoints"
    train = fairseq_cli("train", str(tiny_data_bin), "--user-dir", USER_DIR, *TRAIN_DEFAULTS, "--arch", "transformer",
                        "--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "16",
                        "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32",
                        "--encoder-attention-heads", "2", "--decoder-attention-heads", "2", "--save-dir", str(save_dir))
    proc = run([*train, "--max-update", "3"])
    assert finished_at(str(save_dir), 3) == 3 and finished_at(str(save_dir), 4) is None
    # the line finished_before_the_exit looks for is the one real fairseq-train logs
    assert finished_before_the_exit(str(save_dir), 3, proc.stdout + proc.stderr) == 3
    once_more = tmp_path / "once-more"
    shutil.copytree(save_dir, once_more)
    run([*train[:-1], str(once_more), "--max-update", "3"])
    assert stored_updates(str(once_more / "checkpoint_last.pt")) == 4  # fairseq's extra step

    table = tables.TABLES["cao_table2"]
    cell = runner.build_cells(table, table.rows[:1], _options(), str(tmp_path / "results"), str(tmp_path))[0]
    shutil.copytree(save_dir, cell.checkpoint_dir)
    cell.train_cmd = [sys.executable, "-c", "import sys; sys.exit(9)", "--max-update", "3"]
    runner.run_cell(cell, "cpu", False, dict(os.environ))
    assert "training exited 9" not in (cell.message or "")  # not started; its evaluation comes next
    record = json.loads((pathlib.Path(cell.train_dir) / "train.json").read_text())
    assert record["finished_in_an_earlier_attempt_at_update"] == 3
    cell.train_cmd[-1] = "5"
    os.remove(os.path.join(cell.train_dir, "train.json"))
    runner.run_cell(cell, "cpu", False, dict(os.environ))
    assert cell.message.startswith("training exited 9")  # short of --max-update: it trains

    with pytest.raises(SystemExit) as e:
        train_mod.main(["yang2019/both.args", "cpu", "--data", str(tiny_data_bin), "--save-dir", str(save_dir),
                        "--skip-checkpoint-check", "--", "--max-update", "3"])
    assert e.value.code == 0 and stored_updates(str(save_dir / "checkpoint_last.pt")) == 3


def test_a_finished_training_is_not_started_again_on_several_nodes(tmp_path, monkeypatch):
    """The finished check was skipped with --nnodes > 1: a requeued multi-node job whose training had
    finished (its driver gone before train.json) took one more update and overwrote checkpoint_last /
    _best. Every node now judges the same whole checkpoint_last.pt (a node > 0 after node 0's repair)."""
    import dataclasses

    from fairseq_ctx.reproduce import train as train_mod
    from tests.test_reproduce_road import _options

    table = tables.TABLES["cao_table2"]
    cell = runner.build_cells(table, table.rows[:1], _options(), str(tmp_path / "results"), str(tmp_path))[0]
    os.makedirs(cell.checkpoint_dir)
    _save(pathlib.Path(cell.checkpoint_dir) / "checkpoint_last.pt", 3)
    cell.hw = dataclasses.replace(cell.hw, nnodes=2)
    cell.train_cmd = [sys.executable, "-c", "import sys; sys.exit(9)", "--max-update", "3"]
    assert runner.run_follower([cell], 1) == ""  # node 1: not started (it would exit 9: FAILED)
    runner.run_cell(cell, "cpu", False, dict(os.environ))  # node 0
    assert "training exited 9" not in (cell.message or "")
    assert json.loads((pathlib.Path(cell.train_dir) / "train.json").read_text())[
        "finished_in_an_earlier_attempt_at_update"] == 3

    started = []
    monkeypatch.setattr(train_mod.subprocess, "call", lambda cmd, **kwargs: started.append(cmd) or 0)
    for rank in (0, 1):
        with pytest.raises(SystemExit) as e:
            train_mod.main(["yang2019/both.args", "cpu", "--data", str(tmp_path), "--save-dir", cell.checkpoint_dir,
                            "--launcher", "torchrun", "--nnodes", "2", "--node-rank", str(rank), "--master-addr", "n0",
                            "--skip-checkpoint-check", "--", "--max-update", "3"])
        assert e.value.code == 0 and started == []
    with pytest.raises(SystemExit):  # short of --max-update: it trains
        train_mod.main(["yang2019/both.args", "cpu", "--data", str(tmp_path), "--save-dir", cell.checkpoint_dir,
                        "--launcher", "torchrun", "--nnodes", "2", "--node-rank", "1", "--master-addr", "n0",
                        "--skip-checkpoint-check", "--", "--max-update", "4"])
    assert len(started) == 1


def test_fairseq_ctx_train_refuses_a_directory_a_training_holds(tmp_path, monkeypatch):
    """A resubmitted job while the first one still trains: the second starts nothing (the
    first one's fairseq-train holds the save directory's lock, inherited)."""
    import fcntl

    from fairseq_ctx.reproduce import train

    save_dir = tmp_path / "ck"
    save_dir.mkdir()
    started = []
    monkeypatch.setattr(train.subprocess, "call", lambda cmd, **kwargs: started.append(kwargs) or 0)
    common = ["yang2019/both.args", "cpu", "--data", str(tmp_path), "--save-dir", str(save_dir), "--skip-checkpoint-check"]
    with open(save_dir / "train.lock", "w") as other:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        other.write("pid 4242 on node7\n")
        other.flush()
        with pytest.raises(SystemExit) as e:
            train.main(common)
        assert "in use by pid 4242 on node7" in str(e.value) and started == []
    with pytest.raises(SystemExit) as e:
        train.main(common)
    assert e.value.code == 0 and len(started[0]["pass_fds"]) == 1  # the training holds it too


# A fairseq-train that saves checkpoint_last.pt at update SAVED, logs fairseq's "done training"
# line (or not), and dies of SIGABRT, as Python 3.11's shutdown kills it when fairseq's batch
# thread is still collating ("terminate called without an active exception", rc -6).
ABORT_AFTER_SAVING = """
import os, sys, torch
save_dir, saved, says_done, cut = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4] == "1"
os.makedirs(save_dir, exist_ok=True)
last = os.path.join(save_dir, "checkpoint_last.pt")
torch.save({"model": torch.zeros(500), "optimizer_history": [{"num_updates": saved}]}, last)
if cut:  # the write cut off (e.g. an asynchronous save not yet closed)
    with open(last, "r+b") as f:
        f.truncate(os.path.getsize(last) - 300)
if says_done:
    print("2026-11-27 20:00:00 | INFO | fairseq_cli.train | done training in 1.0 seconds", flush=True)
print("terminate called without an active exception", flush=True)
os.abort()
"""


@pytest.mark.parametrize("saved, says_done, cut, finished", [
    (3, True, False, True), (2, True, False, False), (3, False, False, False), (3, True, True, False)])
def test_an_exit_after_the_training_finished_is_taken_as_finished(tmp_path, capsys, monkeypatch, saved, says_done,
                                                                   cut, finished):
    """A non-zero exit of fairseq-train after it logged "done training" with checkpoint_last.pt
    whole at --max-update is a finished training (the runner's cell, fairseq-ctx-quality-compare,
    fairseq-ctx-train go on); short of --max-update, cut off, or without the line where a log is
    read, a failure as before."""
    from fairseq_ctx import quality_compare as qc
    from fairseq_ctx.reproduce import train as train_mod
    from tests.test_reproduce_road import _options

    def fake(save_dir):
        return [sys.executable, "-c", ABORT_AFTER_SAVING, str(save_dir), str(saved), "1" if says_done else "0",
                "1" if cut else "0"]

    table = tables.TABLES["cao_table2"]
    cell = runner.build_cells(table, table.rows[:1], _options(), str(tmp_path / "results"), str(tmp_path))[0]
    cell.train_cmd = [*fake(cell.checkpoint_dir), "--max-update", "3"]
    runner.run_cell(cell, "cpu", False, dict(os.environ), train_only=True)
    log = (pathlib.Path(cell.train_dir) / "train.log").read_text()
    if finished:
        assert cell.status == "trained" and "exited -6 after it had finished" in log
        assert json.loads((pathlib.Path(cell.train_dir) / "train.json").read_text())["exit_after_finishing"] == -6
    else:
        assert cell.status == "FAILED" and cell.message.startswith("training exited -6")
        assert not (pathlib.Path(cell.train_dir) / "train.json").exists()

    real_run = qc.subprocess.run
    monkeypatch.setattr(qc.subprocess, "run", lambda cmd, **kw: real_run(fake(cmd[cmd.index("--save-dir") + 1]), **kw))
    save_dir, log_path = tmp_path / "qc" / "checkpoints", tmp_path / "qc-train.log"
    with open(log_path, "w") as f:  # an earlier attempt's line in the same log must not count
        f.write("2026-11-27 19:00:00 | INFO | fairseq_cli.train | done training in 9.0 seconds\n")
    if finished:
        qc.train("data", [], [], 3, 1, str(save_dir), str(log_path))
        assert "exited -6 after it had finished" in log_path.read_text() + capsys.readouterr().out
    else:
        with pytest.raises(RuntimeError, match=r"training failed \(rc -6\)"):
            qc.train("data", [], [], 3, 1, str(save_dir), str(log_path))

    if says_done:  # fairseq-ctx-train reads no log: its start checked that it had not finished
        save_dir = tmp_path / "ctx-train"
        real_call = train_mod.subprocess.call
        monkeypatch.setattr(train_mod.subprocess, "call",
                            lambda cmd, **kw: real_call(fake(save_dir), stdout=subprocess.DEVNULL))
        with pytest.raises(SystemExit) as e:
            train_mod.main(["yang2019/both.args", "cpu", "--data", str(tmp_path), "--save-dir", str(save_dir),
                            "--skip-checkpoint-check", "--", "--max-update", "3"])
        assert e.value.code == (0 if finished else -6)
        assert ("exited -6 after the training had finished" in capsys.readouterr().err) == finished


def test_a_dry_run_marks_a_training_finished_without_its_record(tmp_path, capsys):
    """A real run does not start a training whose checkpoint_last.pt is whole at --max-update (its
    driver gone before train.json); the dry-run printed it as a training still to run."""
    from tests.test_reproduce_road import _options

    table = tables.TABLES["cao_table2"]
    results, data = str(tmp_path / "results"), str(tmp_path / "data")
    cell = runner.build_cells(table, table.rows[:1], _options(), results, data)[0]
    max_update = runner.train_mod.option_int(cell.train_cmd, "--max-update", 0)
    assert max_update > 0
    os.makedirs(cell.checkpoint_dir)
    _save(pathlib.Path(cell.checkpoint_dir) / "checkpoint_last.pt", max_update - 1)
    argv = ["--dry-run", "--results", results, "--data-root", data, "--only", table.rows[0].key]
    runner.main("cao_table2", argv)
    assert "# finished:" not in capsys.readouterr().out
    _save(pathlib.Path(cell.checkpoint_dir) / "checkpoint_last.pt", max_update)
    runner.main("cao_table2", argv)
    out = capsys.readouterr().out
    assert f"# finished: checkpoint_last.pt at update {max_update} (--max-update)" in out
    assert f"# done: {shlex.join(cell.train_cmd)}" in out
