"""The run lock (fairseq_ctx/run_lock.py) of fairseq-ctx-reproduce and
fairseq-ctx-quality-compare: held while a directory trains, by the training itself too, so
that a driver killed while its fairseq-train goes on does not free the directory."""
import fcntl
import os
import subprocess
import sys

import pytest

from fairseq_ctx import quality_compare
from fairseq_ctx.reproduce import runner
from fairseq_ctx.run_lock import RunInUse, RunLock, held_fds


def _locked_by_someone(path):
    """Whether a new open file description of ``path`` cannot take the flock."""
    with open(path, "a") as probe:
        try:
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        return False


def test_a_child_given_the_lock_holds_it_after_its_driver_lets_go(tmp_path):
    run_dir = tmp_path / "runs" / "seed1"
    lock = RunLock(run_dir, ".lock").acquire()
    assert _locked_by_someone(run_dir / ".lock")
    assert held_fds(run_dir / "checkpoints") and held_fds(tmp_path / "elsewhere") == ()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                             pass_fds=held_fds(run_dir / "checkpoints"))
    try:
        lock.release()  # the driver is gone (its descriptor closed); the training is not
        with pytest.raises(RunInUse, match=f"pid {os.getpid()}"):
            RunLock(run_dir, ".lock").acquire()
    finally:
        child.kill()
        child.wait()
    RunLock(run_dir, ".lock").acquire().release()  # the training ended: free again, no stale file to remove


def test_a_lock_file_left_behind_holds_nothing(tmp_path):
    (tmp_path / ".lock").write_text("pid 1 on a-node-that-crashed\n")
    with RunLock(tmp_path, ".lock"):
        assert (tmp_path / ".lock").read_text().startswith(f"pid {os.getpid()} on ")


def test_the_runners_training_inherits_the_cells_lock(tmp_path):
    """run_cell's fairseq-train holds the cell's train.lock too (its evaluations, after the
    training, take no lock: two tables may score one training at once)."""
    from fairseq_ctx.reproduce import tables

    table = tables.TABLES["cao_table2"]
    options = runner.build_parser(table).parse_args(["--setting", "cpu"])
    options.train_extra = []
    cell = runner.build_cells(table, table.rows[:1], options, str(tmp_path), str(tmp_path))[0]
    holds_the_lock = ("import os, sys; fds = os.listdir('/proc/self/fd'); "
                      "sys.exit(0 if any(os.path.realpath('/proc/self/fd/' + f).endswith('/train.lock') "
                      "for f in fds) else 7)")
    cell.train_cmd = [sys.executable, "-c", holds_the_lock]
    runner.run_cell(cell, "cpu", False, dict(os.environ))
    assert "training exited 7" not in (cell.message or ""), cell.message
    unlocked = runner._run_logged(cell.train_cmd, str(tmp_path / "elsewhere" / "train.log"), dict(os.environ))
    assert unlocked == 7  # the probe sees no lock where none is held


def test_the_comparisons_training_inherits_the_runs_lock(tmp_path, monkeypatch):
    run_dir = tmp_path / "runs" / "00-transformer" / "seed1"
    given = []

    def fairseq_train(cmd, pass_fds=(), **kwargs):
        given.append(pass_fds)
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(quality_compare.subprocess, "run", fairseq_train)
    with RunLock(run_dir, ".lock"):
        quality_compare.train("bin", [], ["--arch", "transformer"], 10, 1, str(run_dir / "checkpoints"),
                              str(run_dir / "train.log"))
        assert given == [held_fds(run_dir)] and given[0]


def test_a_filesystem_without_locks_gets_a_warning_not_a_crash(tmp_path, monkeypatch, capsys):
    import errno

    def refused(handle, how):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(fcntl, "flock", refused)
    with RunLock(tmp_path, ".lock"):
        assert held_fds(tmp_path) == ()
    assert "refuses locks" in capsys.readouterr().err

    def broken(handle, how):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(fcntl, "flock", broken)
    with pytest.raises(OSError):  # any other error is not taken for "no locks here"
        RunLock(tmp_path, ".lock").acquire()


def test_a_lock_on_a_file_is_not_handed_to_the_trainings_below_it(tmp_path):
    """A report's lock (inherited=False) guards one file of OUT_DIR: trainings under OUT_DIR get
    their run's lock, not it (else a training outliving its driver would hold the report too)."""
    run_dir = tmp_path / "runs" / "a" / "seed1"
    with RunLock(tmp_path, "quality.json.lock", inherited=False), RunLock(run_dir, ".lock") as run:
        assert held_fds(str(run_dir / "checkpoints")) == (run._handle.fileno(),)
        with pytest.raises(RunInUse):  # held: a second holder is refused
            RunLock(tmp_path, "quality.json.lock", inherited=False).acquire()
    assert held_fds(str(run_dir)) == ()
