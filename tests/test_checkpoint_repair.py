"""A checkpoint_last.pt cut off while fairseq copied it (fairseq_ctx/checkpoint_repair.py):
replaced by the newest whole checkpoint before a training resumes, in the reproduce runner,
fairseq-ctx-train and by hand; real fairseq-train resumes from the repaired directory."""
import os
import subprocess
import sys

import pytest
import torch

from fairseq_ctx.checkpoint_repair import repair_before_resuming, training_position
from fairseq_ctx.reproduce import runner, tables
from tests.conftest import TRAIN_DEFAULTS, USER_DIR, cli_env, fairseq_cli, run


def _save(path, value):
    torch.save({"model": torch.full((500,), float(value))}, path)
    return path.read_bytes()


def _cut(path):
    path.write_bytes(path.read_bytes()[:-300])  # a zip's directory is at its end


def test_checkpoints_are_ordered_by_where_training_wrote_them_not_by_name_or_time():
    names = ["checkpoint_10_900.pt", "checkpoint2.pt", "checkpoint_2_150.pt", "checkpoint_3_210.pt",
             "checkpoint_2_99.pt", "checkpoint1.pt", "checkpoint10.pt"]
    ordered = sorted(names, key=training_position)
    assert ordered == ["checkpoint1.pt", "checkpoint_2_99.pt", "checkpoint_2_150.pt", "checkpoint2.pt",
                       "checkpoint_3_210.pt", "checkpoint_10_900.pt", "checkpoint10.pt"]
    for other in ("checkpoint_last.pt", "checkpoint_best.pt", "checkpoint.best_loss_4.12.pt",
                  "average_last5.pt", "checkpoint_last.pt.cut-off"):
        assert training_position(other) is None


def test_a_cut_off_last_is_replaced_by_the_newest_whole_checkpoint(tmp_path):
    _save(tmp_path / "checkpoint1.pt", 1)
    _save(tmp_path / "checkpoint_2_300.pt", 2)
    newest_whole = _save(tmp_path / "checkpoint2.pt", 3)  # the end of epoch 2
    _save(tmp_path / "checkpoint_3_500.pt", 4)
    _cut(tmp_path / "checkpoint_3_500.pt")  # newer, but damaged too
    _save(tmp_path / "checkpoint_best.pt", 5)  # whole, but not where training was
    _save(tmp_path / "checkpoint_last.pt", 6)
    _cut(tmp_path / "checkpoint_last.pt")
    os.utime(tmp_path / "checkpoint1.pt", (4e9, 4e9))  # copied last: the newest file, the oldest point
    said = []
    message = repair_before_resuming(str(tmp_path), log=said.append)
    assert (tmp_path / "checkpoint_last.pt").read_bytes() == newest_whole
    assert said == [message] and "fairseq resumes from a copy of checkpoint2.pt" in message
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["checkpoint1.pt", "checkpoint_2_300.pt", "checkpoint2.pt", "checkpoint_3_500.pt", "checkpoint_best.pt",
         "checkpoint_last.pt"])  # no temporary copy left


def test_without_a_whole_checkpoint_the_cut_off_one_is_kept_aside_and_training_starts_over(tmp_path):
    damaged = _save(tmp_path / "checkpoint_last.pt", 1)[:-300]
    (tmp_path / "checkpoint_last.pt").write_bytes(damaged)
    _save(tmp_path / "checkpoint_best.pt", 2)
    message = repair_before_resuming(str(tmp_path), log=lambda m: None)
    assert not (tmp_path / "checkpoint_last.pt").exists()
    assert (tmp_path / "checkpoint_last.pt.cut-off").read_bytes() == damaged
    assert "the training starts from the beginning" in message


def test_a_whole_or_absent_last_is_left_alone(tmp_path):
    assert repair_before_resuming(str(tmp_path), log=pytest.fail) is None
    whole = _save(tmp_path / "checkpoint_last.pt", 1)
    _save(tmp_path / "checkpoint_2_300.pt", 2)
    assert repair_before_resuming(str(tmp_path), log=pytest.fail) is None
    assert (tmp_path / "checkpoint_last.pt").read_bytes() == whole


def test_the_reproduce_runner_repairs_before_it_resumes_a_cell(tmp_path, capsys):
    table = tables.TABLES["cao_table2"]
    from tests.test_reproduce_road import _options

    cell = runner.build_cells(table, table.rows[:1], _options(), str(tmp_path), str(tmp_path))[0]
    os.makedirs(cell.train_dir)
    save_dir = tmp_path.joinpath(cell.train_dir)
    whole = _save(save_dir / "checkpoint_3_900.pt", 1)
    _save(save_dir / "checkpoint_last.pt", 2)
    _cut(save_dir / "checkpoint_last.pt")
    # the training command reports what it would resume from, then fails the cell
    cell.train_cmd = [sys.executable, "-c", f"import sys; sys.exit(3 if open({str(save_dir / 'checkpoint_last.pt')!r}, "
                                            f"'rb').read() == {whole!r} else 4)"]
    runner.run_cell(cell, "cpu", False, dict(os.environ))
    assert cell.message.startswith("training exited 3"), cell.message
    assert "fairseq resumes from a copy of checkpoint_3_900.pt" in capsys.readouterr().err
    assert "fairseq resumes from a copy of checkpoint_3_900.pt" in (save_dir / "train.log").read_text()


def test_fairseq_train_resumes_from_a_repaired_directory(tiny_data_bin, tmp_path):
    """Real fairseq-train: killed while copying checkpoint_last.pt, it cannot resume; after
    `python -m fairseq_ctx.checkpoint_repair` it resumes at the newest whole checkpoint's update."""
    save_dir = tmp_path / "checkpoints"
    train = fairseq_cli("train", str(tiny_data_bin), "--user-dir", USER_DIR, *TRAIN_DEFAULTS, "--arch", "transformer",
                        "--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "16",
                        "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32",
                        "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
                        "--save-interval-updates", "2", "--disable-validation", "--save-dir", str(save_dir))
    run([*train, "--max-update", "4"])
    assert (save_dir / "checkpoint_1_2.pt").exists() and (save_dir / "checkpoint_1_4.pt").exists()
    _cut(save_dir / "checkpoint_last.pt")
    _cut(save_dir / "checkpoint_1_4.pt")  # the newest interval checkpoint is damaged as well
    broken = subprocess.run([*train, "--max-update", "6"], capture_output=True, text=True, env=cli_env())
    assert broken.returncode != 0  # what a resubmitted job meets without the repair
    repaired = subprocess.run([sys.executable, "-m", "fairseq_ctx.checkpoint_repair", str(save_dir)],
                              capture_output=True, text=True, env=cli_env())
    assert repaired.returncode == 0 and "the newest whole checkpoint" in repaired.stderr
    resumed = run([*train, "--max-update", "6"])
    log = resumed.stdout + resumed.stderr
    assert "checkpoint_last.pt (epoch 1 @ 2 updates)" in log, log[-3000:]  # checkpoint_1_2.pt
    assert "num_updates=3," in log and "num_updates=1," not in log  # went on, did not start over
    assert "Stopping training due to num_updates: 6 >= max_update: 6" in log


def test_fairseq_ctx_train_repairs_before_it_starts_fairseq(tmp_path, monkeypatch, capsys):
    from fairseq_ctx.reproduce import train

    save_dir = tmp_path / "checkpoints"
    save_dir.mkdir()
    whole = _save(save_dir / "checkpoint_1_10.pt", 1)
    _save(save_dir / "checkpoint_last.pt", 2)
    _cut(save_dir / "checkpoint_last.pt")
    started_with = []
    monkeypatch.setattr(train.subprocess, "call",
                        lambda cmd: started_with.append((save_dir / "checkpoint_last.pt").read_bytes()) or 0)
    with pytest.raises(SystemExit) as exit_:
        train.main(["yang2019/both.args", "cpu", "--data", str(tmp_path), "--save-dir", str(save_dir)])
    assert exit_.value.code == 0 and started_with == [whole]
    assert "train: " in capsys.readouterr().err
