"""The road from a config to a paper's table, fault by fault: effective batch on several nodes,
each row's own baseline, failing cells fail the command, row configs mean what their rows
claim, trained models reused across tables, cells of different settings kept apart,
checkpoints kept only as evaluation needs them, per-column training options, footers."""
import glob
import json
import os
import pathlib
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest

from fairseq_ctx.reproduce import runner, tables, train
from tests.conftest import ROOT, cli_env, shadow_checkout


# -- effective batch ---------------------------------------------------------------------------


@pytest.mark.parametrize("setting,nnodes,gpus,want", [("p40", 1, None, 32768), ("p40", 2, 4, 32768), ("p40", 2, None, 32768),
                                                      ("p40", 1, 2, 32768), ("cao", 2, 1, 49152), ("iida", 2, 1, 4000),
                                                      ("modern", 2, 4, 32768), ("modern", 1, 1, 32768)])
def test_effective_batch_counts_every_node(setting, nnodes, gpus, want):
    hw = train.hardware(setting, "yang2019", gpus, nnodes)
    assert hw.effective == hw.nnodes * hw.gpus * hw.max_tokens * hw.update_freq == want


@pytest.mark.parametrize("setting,nnodes,gpus", [("p40", 2, 8), ("p40", 1, 3), ("cao", 1, 5), ("modern", 1, 3)])
def test_a_gpu_count_that_changes_the_papers_batch_is_refused(setting, nnodes, gpus):
    with pytest.raises(train.BatchError, match="differs from the paper's"):
        train.hardware(setting, "yang2019", gpus, nnodes)
    hw = train.hardware(setting, "yang2019", gpus, nnodes, allow_batch_change=True)  # on request: a warning
    assert hw.effective != hw.paper_effective


def test_reproduce_dry_run_prints_the_effective_batch_of_every_cell_on_two_nodes(tmp_path):
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "reproduce", "wang2019_table2.py"), "--dry-run",
                           "--results", str(tmp_path), "--nnodes", "2", "--gpus", "4", "--launcher", "torchrun",
                           "--node-rank", "1", "--master-addr", "node0"],
                          capture_output=True, text=True, env=cli_env(), cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    batches = re.findall(r"effective batch: (\d+) tokens", proc.stdout)
    assert batches == ["32768"] * 12
    assert proc.stdout.count("--nnodes 2 --node-rank 1 --master-addr node0") == 12
    # node 1 never evaluates: its dry-run printed node 0's evaluation commands as its own
    assert "fairseq_ctx.evaluation" not in proc.stdout and "# node 1 only trains" in proc.stdout
    refused = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "reproduce", "wang2019_table2.py"),
                              "--dry-run", "--results", str(tmp_path), "--nnodes", "2", "--gpus", "8",
                              "--launcher", "torchrun", "--master-addr", "node0"], capture_output=True, text=True, env=cli_env(), cwd=ROOT)
    assert refused.returncode != 0 and "65,536" in refused.stderr and "Traceback" not in refused.stderr


def test_slurm_launcher_uses_fairseqs_own_slurm_support(monkeypatch):
    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    cmd = train.build_command(os.path.join(train.CONFIGS, "yang2019", "transformer_base.args"), "p40", "BIN", "SAVE",
                              launcher="slurm", gpus=4, nnodes=2, master_port=12345)
    assert cmd[:8] == ["srun", "--nodes", "2", "--ntasks-per-node", "4", "--gpus-per-node", "4", "--gpu-bind=none"]
    assert cmd[cmd.index("--distributed-world-size") + 1] == "8" and cmd[cmd.index("--distributed-port") + 1] == "12345"
    with pytest.raises(train.BatchError, match="torchrun"):
        train.build_command(os.path.join(train.CONFIGS, "yang2019", "transformer_base.args"), "p40", "BIN", "SAVE",
                            gpus=4, nnodes=2)
    # inside a job with --cpus-per-task: each srun step gets them too (Slurm 22.05+ does not pass them on)
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "4")
    cmd = train.build_command(os.path.join(train.CONFIGS, "yang2019", "transformer_base.args"), "p40", "BIN", "SAVE",
                              launcher="slurm", gpus=4, nnodes=2, master_port=12345)
    assert cmd[8:10] == ["--cpus-per-task", "4"], cmd[:12]


def _last_value(cmd, option):
    return [cmd[i + 1] for i, word in enumerate(cmd) if word == option][-1]  # argparse: the last wins


def test_the_cpu_setting_decides_the_accumulation_as_every_setting_does():
    """iida2019/lstm_multihop.args carries --update-freq 2: under the cpu setting that one row
    (dep_h2k2) trained on twice the tokens per update of the rows it is compared with."""
    config = os.path.join(train.CONFIGS, "iida2019", "lstm_multihop.args")
    assert "--update-freq" in train.model_args(config)
    for setting in ("cpu", "iida"):
        assert _last_value(train.build_command(config, setting, "BIN", "SAVE"), "--update-freq") == "1"
    # the options after -- still decide
    cmd = train.build_command(config, "cpu", "BIN", "SAVE", extra=["--update-freq", "3"])
    assert _last_value(cmd, "--update-freq") == "3"


def test_cpu_processes_start_through_torchrun_with_gloo():
    """fairseq's spawn launcher starts one process per GPU: --setting cpu --gpus 2 with it was
    accepted and could not start; torchrun needed --backend gloo, said nowhere."""
    config = os.path.join(train.CONFIGS, "cao", "cross_zero.args")
    with pytest.raises(train.BatchError, match="--launcher torchrun"):
        train.build_command(config, "cpu", "BIN", "SAVE", gpus=2)
    cmd = train.build_command(config, "cpu", "BIN", "SAVE", gpus=2, launcher="torchrun")
    assert _last_value(cmd, "--distributed-backend") == "gloo" and "--cpu" in cmd
    assert "--distributed-backend" not in train.build_command(config, "cpu", "BIN", "SAVE")  # one process
    with pytest.raises(train.BatchError, match="slurm"):  # its srun line asks for GPUs
        train.build_command(config, "cpu", "BIN", "SAVE", launcher="slurm")


def test_the_cpu_settings_accumulation_leaves_the_other_cells_keys_as_they_were():
    """--update-freq 1 is added only where a row config names an accumulation: every other cpu /
    smoke cell's command, and so its training directory, stays as it was."""
    config = os.path.join(train.CONFIGS, "cao", "cross_self.args")
    assert "--update-freq" not in train.build_command(config, "cpu", "BIN", "SAVE")


@pytest.mark.parametrize("extra", [["--update-freq", "4"], ["--max-tokens=999"], ["--fp16"], ["--amp"],
                                   ["--batch-size", "8"], ["--distributed-world-size", "2"]])
def test_batch_and_precision_after_the_options_are_refused_for_the_gpu_settings(extra):
    """fairseq takes the later value: `p40 -- --update-freq 4` trained 131,072 tokens per update
    while 32,768 was printed, and `-- --fp16` was filed under p40-...-fp32 as the paper's fp32 run."""
    config = os.path.join(train.CONFIGS, "yang2019", "enc_deep_global_deep.args")
    for setting in ("p40", "modern"):
        with pytest.raises(train.BatchError, match=f"{extra[0].split('=')[0]} after '--': the {setting} setting decides"):
            train.build_command(config, setting, "BIN", "SAVE", extra=extra, gpus=8)
    train.build_command(config, "cpu", "BIN", "SAVE", extra=extra)  # the cpu setting takes them
    train.build_command(config, "p40", "BIN", "SAVE", extra=["--dropout", "0.2"], gpus=8)


def test_another_papers_setting_and_a_modern_batch_sized_without_gpus_are_said(monkeypatch):
    """`iida2019_table2 --setting p40` trained 8x Iida's tokens per update without a word; `modern`
    without --gpus on a GPU-less login node sized the batch for 1 GPU (another directory than the job's)."""
    monkeypatch.setattr(train, "_visible_gpus", lambda: 0)
    said = train.setting_warnings("p40", "iida2019")
    assert len(said) == 1 and "32,768" in said[0] and "iida2019 trained with iida's (4,000)" in said[0]
    assert "cao's batch (49,152" in train.setting_warnings("modern", "yang2019", gpus=8, reference="cao")[0]
    assert "no GPU visible" in " ".join(train.setting_warnings("modern", "yang2019"))
    for setting, paper in (("iida", "iida2019"), ("p40", "wang2019"), ("cao", "cao"), ("cpu", "iida2019")):
        assert train.setting_warnings(setting, paper) == []
    assert train.setting_warnings("modern", "yang2019", gpus=1) == []
    monkeypatch.setattr(train, "_visible_gpus", lambda: 4)
    assert train.setting_warnings("modern", "yang2019") == []


def test_the_language_pair_is_the_first_file_listed_as_fairseq_infers_it(tmp_path, monkeypatch):
    """fairseq's data_utils.infer_language_pair takes the first file os.listdir gives; the data
    check took the first sorted, another pair where a directory holds both."""
    from fairseq.data import data_utils

    from fairseq_ctx.evaluation import direction

    for name in ("dict.en.txt", "train.en-de.en.idx", "train.de-en.de.idx"):
        (tmp_path / name).write_text("")
    listed = ["dict.en.txt", "train.en-de.en.idx", "train.de-en.de.idx"]
    for order in (listed, listed[::-1]):
        monkeypatch.setattr(os, "listdir", lambda path, order=order: list(order))
        assert direction.language_pairs_in(str(tmp_path))[0] == tuple(data_utils.infer_language_pair(str(tmp_path)))


def test_the_visible_gpus_are_counted_once_per_process(monkeypatch):
    """`modern` without --gpus asked torch for the device count twice, in hardware() and in its
    warning; the count does not change while the command runs."""
    import torch

    calls = []
    monkeypatch.setattr(torch.cuda, "device_count", lambda: calls.append(1) or 0)
    train._visible_gpus.cache_clear()
    try:
        train.hardware("modern", "yang2019")
        train.setting_warnings("modern", "yang2019")
        assert len(calls) == 1
    finally:
        train._visible_gpus.cache_clear()  # the next caller counts the real devices


def test_data_fairseq_train_would_stop_on_is_said_before_it_starts(tiny_data_bin, tmp_path, capsys):
    """`fairseq-ctx-train --dry-run --data DIR` said nothing of a DIR without binarised data."""
    import shutil

    config = os.path.join(train.CONFIGS, "iida2019", "lstm.args")

    def problem(data, *extra):
        return train.data_problem(train.build_command(config, "cpu", str(data), "SAVE", extra=list(extra)))

    assert problem(tiny_data_bin) is None
    assert "no such directory" in problem(tmp_path / "nowhere")
    assert "no binarised data" in problem(tmp_path)
    copy = tmp_path / "bin"
    shutil.copytree(tiny_data_bin, copy)
    for path in glob.glob(str(copy / "valid.*")):
        os.remove(path)
    assert ": no valid." in problem(copy)
    assert problem(copy, "--disable-validation") is None
    src, tgt = next(name.split(".")[1].split("-") for name in os.listdir(copy) if name.startswith("train."))
    assert problem(copy, "--disable-validation", "-s", "fr", "-t", tgt).endswith("no dict.fr.txt")
    os.remove(copy / f"train.{src}-{tgt}.{tgt}.bin")  # one side's .bin only
    assert problem(copy, "--disable-validation").endswith(f"no train.{src}-{tgt}.{tgt}.idx / .bin")
    os.remove(copy / f"dict.{src}.txt")
    assert problem(copy, "--disable-validation").endswith(f"no dict.{src}.txt")
    # both directions binarised into one directory: fairseq infers whichever it lists first
    both = tmp_path / "both"
    shutil.copytree(tiny_data_bin, both)
    for path in glob.glob(str(both / f"*.{src}-{tgt}.*")):
        shutil.copy(path, path.replace(f".{src}-{tgt}.", f".{tgt}-{src}."))
    assert problem(both) is None

    def pair_warning(*extra):
        return train.language_pair_warning(train.build_command(config, "cpu", str(both), "SAVE", extra=list(extra)))

    said = pair_warning()
    assert f"2 language pairs ({'-'.join(sorted([src, tgt]))}, " in said and "pass --source-lang" in said, said
    assert pair_warning("-s", src, "--target-lang", tgt) is None
    assert pair_warning("-s", src) is not None  # fairseq infers both when one is missing
    assert train.language_pair_warning(train.build_command(config, "cpu", str(tiny_data_bin), "SAVE")) is None
    train.main([config, "cpu", "--data", str(both), "--save-dir", str(tmp_path / "s"), "--dry-run"])
    assert "train: warning: " + said in capsys.readouterr().err


def test_fairseq_ctx_train_refuses_a_model_fairseq_would_not_build_in_one_line(tiny_data_bin, tmp_path, monkeypatch):
    """A bad model option reached fairseq-train, whose processes each stopped with a traceback;
    now parsed and built on the meta device first (as the reproduction's preflight does)."""
    started = []
    monkeypatch.setattr(train.subprocess, "call", lambda cmd, **kwargs: started.append(cmd) or 0)
    common = ["yang2019/both.args", "cpu", "--data", str(tiny_data_bin), "--save-dir", str(tmp_path / "s"),
              "--skip-checkpoint-check"]
    for extra in (["--context-dropout", "1.5"], ["--no-such-option"]):
        with pytest.raises(SystemExit) as e:
            train.main([*common, "--", *extra])
        assert str(e.value).startswith("train: fairseq-train would stop before its first update: ")
        assert extra[0] in str(e.value) and str(e.value).endswith("nothing was started") and started == []
    with pytest.raises(SystemExit) as e:
        train.main([*common, "--", "--max-update", "2", "--context-dropout", "0.1"])
    assert e.value.code == 0 and len(started) == 1
    # the demo's configs give no optimizer (demo.sh's train.common does): fairseq-train asserts one
    with pytest.raises(SystemExit) as e:
        train.main(["demo/01-transformer_context_aware.args", *common[1:], "--", "--max-update", "2"])
    assert "no --optimizer" in str(e.value) and len(started) == 1


def test_the_papers_train_args_is_refused_as_a_row_config(tmp_path):
    """`fairseq-ctx-train iida2019/train.args` was taken as a row: the schedule without a model."""
    with pytest.raises(SystemExit) as e:
        train.main(["iida2019/train.args", "iida", "--data", str(tmp_path), "--save-dir", str(tmp_path / "s"),
                    "--dry-run"])
    assert "read before every row's config" in str(e.value) and "lstm_multihop.args" in str(e.value)
    own = tmp_path / "myexp" / "train.args"  # a user's own row config of that name is theirs
    own.parent.mkdir()
    own.write_text((pathlib.Path(train.CONFIGS) / "iida2019" / "lstm_multihop.args").read_text())
    train.main([str(own), "cpu", "--data", str(tmp_path), "--save-dir", str(tmp_path / "s"), "--dry-run"])


@pytest.mark.parametrize("address", ["127.0.1.1", "127.0.0.1", "::1", "0.0.0.0", "localhost"])
def test_a_master_address_only_this_machine_reaches_is_refused_for_several_nodes(address):
    with pytest.raises(train.BatchError, match="--master-addr"):
        train.check_launch("torchrun", 2, 0, address)  # Debian's hostname entry is 127.0.1.1
    train.check_launch("torchrun", 2, 0, "10.0.0.5")
    train.check_launch("torchrun", 2, 0, "node0")
    train.check_launch("torchrun", 1, 0, address)  # one node: its own address is right


def test_training_never_drops_validation_sentences():
    cmd = train.build_command(os.path.join(train.CONFIGS, "cao", "cross_zero.args"), "cao", "BIN", "SAVE")
    assert cmd[cmd.index("--required-batch-size-multiple") + 1] == "1"


# -- rows mean what they claim -------------------------------------------------------------------


def _all_rows():
    seen = {}
    for table in tables.TABLES.values():
        for row in table.rows:
            seen.setdefault(row.config, row)
    return sorted(seen.values(), key=lambda r: r.config)


@pytest.mark.parametrize("row", _all_rows(), ids=lambda r: r.config)
def test_every_row_config_is_what_its_row_claims(row):
    from fairseq_ctx.reproduce.params import parse_model_args

    assert row.claims, f"{row.config}: every row states what it stands for (Row.claims)"
    args = parse_model_args(train.model_args(os.path.join(train.CONFIGS, row.config)))
    wrong = {k: (getattr(args, k, None), v) for k, v in row.claims.items() if getattr(args, k, None) != v}
    assert not wrong, f"{row.config}: parsed value != claim: {wrong}"


def test_cao_horizontal_rows_route_horizontally_only():
    from fairseq_ctx.reproduce.params import parse_model_args

    for name in ("horizontal_zero", "horizontal_self"):
        args = parse_model_args(train.model_args(os.path.join(train.CONFIGS, "cao", f"{name}.args")))
        assert args.routing_vertical is False and args.routing_horizontal is True


def test_same_row_shares_one_config_across_tables():
    by_key = {}
    for table in tables.TABLES.values():
        for row in table.rows:
            by_key.setdefault((table.paper, row.key), set()).add(row.config)
    assert all(len(configs) == 1 for configs in by_key.values()), by_key


# -- baselines -------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", ["yang2019_table2", "wang2019_table2"])
def test_big_rows_are_tested_against_transformer_big(key):
    table = tables.TABLES[key]
    for row in table.rows:
        expected = None if row.key in ("base", "big") else "big" if "big" in row.key else "base"
        assert tables.baseline_key(table, row) == expected, row.key


def test_only_the_rows_the_paper_marks_are_tested():
    """Baselines are not marked against each other (Transformer-Big vs Base, Iida's Transformer
    vs the RNN): the papers mark their proposed rows against the counterparts only."""
    assert tables.baseline_key(tables.TABLES["iida2019_table2"], tables.TABLES["iida2019_table2"].rows[-1]) is None
    for key in ("iida2019_table3", "iida2019_table4"):
        table = tables.TABLES[key]
        assert {r.key: tables.baseline_key(table, r) for r in table.rows} == \
            {"base": None, "dep_h2k2": "base", "transformer": None}


def test_length_tables_mark_against_both_baselines():
    for key in ("iida2019_table3", "iida2019_table4"):
        assert [b[0] for b in tables.TABLES[key].baselines] == ["base", "transformer"]
        assert {r.key for r in tables.TABLES[key].rows} == {"base", "dep_h2k2", "transformer"}


# -- cells: reuse, separation, per-column options -----------------------------------------------


def _options(**kw):
    defaults = dict(setting=None, gpus=None, nnodes=1, max_tokens_per_gpu=16384, reference=None, cpu_max_tokens=None,
                    allow_batch_change=False, smoke=False, train_extra=[], launcher="spawn", node_rank=0,
                    master_addr="127.0.0.1", master_port=29500, backend=None, results="R")
    defaults.update(kw)
    return SimpleNamespace(**defaults)


def _cells(key, **kw):
    table = tables.TABLES[key]
    return runner.build_cells(table, table.rows, _options(**kw), "R", "D")


def test_tables_that_train_the_same_model_share_its_directory():
    t1 = {c.row.key: c.train_dir for c in _cells("yang2019_table1")}
    t3 = {c.row.key: c.train_dir for c in _cells("yang2019_table3")}
    assert t3["base"] == t1["base"] and t3["enc_deep_global_deep"] == t1["enc_deep_global_deep"]
    wang1 = {c.row.key: c.train_dir for c in _cells("wang2019_table1")}
    assert wang1["base"] == t1["base"]  # Yang's and Wang's Transformer-Base: one training
    wang2 = {(c.row.key, c.column.name): c.train_dir for c in _cells("wang2019_table2")}
    assert wang2[("deep_tam", "En-De")] == wang1["deep_tam"]
    iida2 = {(c.row.key, c.column.name): c.train_dir for c in _cells("iida2019_table2")}
    iida3 = {c.row.key: c.train_dir for c in _cells("iida2019_table3")}
    assert iida3["dep_h2k2"] == iida2[("dep_h2k2", "ASPEC ja-en")]
    assert len(set(iida2.values())) == len(iida2)  # 2-to-2 and sentence-level columns never collide


def test_cells_of_different_settings_never_share_a_directory():
    dirs = {c.train_dir for c in _cells("cao_table1")}
    assert not dirs & {c.train_dir for c in _cells("cao_table1", setting="modern", gpus=1)}
    assert not dirs & {c.train_dir for c in _cells("cao_table1", gpus=1)}  # 1 GPU x 24 accumulations


def test_the_same_training_on_another_node_layout_keeps_its_directory(tmp_path):
    """2 nodes x 4 GPUs train what 1 x 8 does (same key, world size, batch and precision): a job
    resubmitted with the other layout, or `--table-only` without the layout options, found nothing
    (p40-2x4x4096x1-fp32 vs p40-1x8x4096x1-fp32) and trained every cell again."""
    table = tables.TABLES["yang2019_table1"]
    results = str(tmp_path)

    def dirs(**kw):
        return [c.train_dir for c in runner.build_cells(table, table.rows[:2], _options(**kw), results, "D")]

    eight = dirs()
    assert dirs(nnodes=2, gpus=4, launcher="torchrun", master_addr="node0") == eight
    assert dirs(nnodes=4, gpus=2, launcher="torchrun", master_addr="node0") == eight
    assert os.path.basename(os.path.dirname(os.path.dirname(eight[0]))) == "p40-8x4096x1-fp32"
    assert not set(dirs(gpus=4)) & set(eight)  # 4 GPUs x 2 accumulations: another training

    # a directory named by the earlier tag (nodes x GPUs) is kept
    relative = [os.path.relpath(d, os.path.join(results, "p40-8x4096x1-fp32")) for d in eight]
    os.makedirs(os.path.join(results, "p40-2x4x4096x1-fp32", relative[0], "checkpoints"))
    os.makedirs(os.path.join(results, "p40-1x4x4096x1-fp32", relative[1]))  # 4 GPUs: not this batch
    kept = dirs(nnodes=2, gpus=4, launcher="torchrun", master_addr="node0")
    assert kept[0] == os.path.join(results, "p40-2x4x4096x1-fp32", relative[0])
    assert dirs() == kept and kept[1] == eight[1]
    # two of them (trained as 2x4, resubmitted as 1x8): refused, naming both (which is further along
    # is not guessed, and node 0's repair must not make another node pick the other one)
    os.makedirs(os.path.join(results, "p40-1x8x4096x1-fp32", relative[0], "checkpoints"))
    with pytest.raises(train.BatchError, match="p40-1x8x4096x1-fp32.* and .*p40-2x4x4096x1-fp32.*hold the same"):
        dirs()
    os.makedirs(eight[0])  # the directory of the current tag, once it exists, wins
    assert dirs()[0] == eight[0]


def test_wang_en_fr_big_uses_vaswanis_en_fr_dropout():
    cells = {(c.row.key, c.column.name): c for c in _cells("wang2019_table2")}
    for row in ("big", "big_deep_rnn", "big_deep_tam"):
        fr = cells[(row, "En-Fr")].train_cmd
        assert fr[len(fr) - 1 - fr[::-1].index("--dropout") + 1] == "0.1"
        assert "--dropout" not in cells[(row, "En-De")].train_cmd
    assert "--dropout" not in cells[("deep_tam", "En-Fr")].train_cmd


def test_checkpoints_kept_are_what_evaluation_uses():
    for key, table in tables.TABLES.items():
        for cell in _cells(key):
            cmd = cell.train_cmd
            if table.evaluation.average_last:
                keep = int(cmd[len(cmd) - 1 - cmd[::-1].index("--keep-interval-updates") + 1])
                assert keep == table.evaluation.average_last, (key, cell.name)
                assert "--no-epoch-checkpoints" in cmd
            else:  # checkpoint_best (+ checkpoint_last to resume)
                assert "--no-epoch-checkpoints" in cmd and "--keep-interval-updates" not in cmd, (key, cell.name)


@pytest.mark.parametrize("key", sorted(k for k, t in tables.TABLES.items() if t.columns))
def test_evaluation_length_bound_is_relative_to_the_source(key):
    ev = tables.TABLES[key].evaluation
    # a 130-word source (the longest bucket of Iida Tables 3-4) gets room for a longer output
    assert ev.max_len_a >= 1.5 and ev.max_len_a * 130 + ev.max_len_b > 200


# -- failing cells fail the command ----------------------------------------------------------------


def test_preflight_refuses_before_any_training_when_data_is_missing(tmp_path):
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "reproduce", "cao_table2.py"),
                           "--results", str(tmp_path / "r"), "--data-root", str(tmp_path / "nodata"), "--setting", "cpu"],
                          capture_output=True, text=True, env=cli_env(), cwd=ROOT)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "preflight found problems (nothing was trained)" in proc.stderr
    assert proc.stderr.count("missing ") >= 2 and "Traceback" not in proc.stderr
    assert not (tmp_path / "r" / "cao").exists()
    # each with the command that prepares it where this run looks: Cao's length filter included
    nodata = tmp_path / "nodata"
    assert (f"fairseq-ctx-prepare-data wmt17-zh-en --max-len 49 --extra-train CWMT/casia2015 --extra-train "
            f"CWMT/casict2011 --extra-train CWMT/casict2015 --extra-train CWMT/datum2015 --extra-train "
            f"CWMT/datum2017 --extra-train CWMT/neu2017 --out {nodata / 'wmt17-zh-en-len50'}") in proc.stderr
    assert f"fairseq-ctx-prepare-data wmt14-en-de --out {nodata / 'wmt14-en-de'}" in proc.stderr


def test_a_run_whose_cells_fail_exits_nonzero_with_one_line_per_cell(tmp_path):
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "reproduce", "cao_table2.py"),
                           "--results", str(tmp_path / "r"), "--data-root", str(tmp_path / "nodata"), "--setting", "cpu",
                           "--skip-preflight", "--only", "base"], capture_output=True, text=True, env=cli_env(), cwd=ROOT)
    assert proc.returncode == 1
    failed = [line for line in proc.stderr.splitlines() if line.startswith("cell cao_table2 base / ")]
    assert len(failed) == 2 and all("FAILED: training exited" in line for line in failed)
    # one line per cell first, then each failed log's tail
    lines = proc.stderr.splitlines()
    assert max(lines.index(line) for line in failed) < min(i for i, line in enumerate(lines) if line.startswith("--- "))
    assert "0 of 2 cells ok" in proc.stderr
    assert "| missing |" in proc.stdout  # the table still prints what exists


# -- assembling a table: marks against the row's own baseline, paper formatting, footers -----------


def _fake_cell(table, row, column, root, hyps, refs):
    cell = runner.Cell(table, row, column, os.path.join(root, row.key), os.path.join(root, "data"), [column.subset],
                       [], None)
    os.makedirs(cell.eval_dir(column.subset), exist_ok=True)
    os.makedirs(os.path.join(cell.data_dir, "raw"), exist_ok=True)
    with open(os.path.join(cell.data_dir, "raw", f"{column.subset}.{column.tgt}"), "w") as handle:
        handle.writelines(r + "\n" for r in refs)
    with open(os.path.join(cell.eval_dir(column.subset), f"hyp.detok.{column.tgt}"), "w") as handle:
        handle.writelines(h + "\n" for h in hyps)
    from fairseq_ctx.evaluation.scoring import tokenized_bleu

    result = {"tokenized": tokenized_bleu(hyps, refs, column.tgt),
              "sacrebleu": {"bleu": 1.0, "signature": "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"}}
    with open(cell.result_path(column.subset), "w") as handle:
        json.dump(result, handle)
    return cell


def test_big_row_is_marked_against_big_not_base(tmp_path):
    table = tables.TABLES["wang2019_table2"]
    column = tables.EN_DE
    refs = [f"the cat number {i} sat on the mat today" for i in range(60)]
    poor = [f"a dog {i}" for i in range(60)]
    rows = {r.key: r for r in table.rows}
    cells = [_fake_cell(table, rows["base"], column, str(tmp_path), poor, refs),
             _fake_cell(table, rows["big"], column, str(tmp_path), refs, refs),
             _fake_cell(table, rows["big_deep_tam"], column, str(tmp_path), refs, refs)]
    text = tables.format_table(table, cells)
    line = {l.split("|")[2].strip(): l for l in text.splitlines() if l.startswith("| ")}
    assert "| 100.00 |" in line["TRANSFORMER-BIG"] and "\u21d1" not in line["TRANSFORMER-BIG"]  # a baseline: no mark
    big_tam = line["+ DEEP (TAM)"]
    assert "100.00 |" in big_tam and "\u2191" not in big_tam.split("|")[5]  # identical to big: no mark
    assert "significantly better than TRANSFORMER-BIG" in text and "for + DEEP (TAM)." in text  # the rows tested


def test_numbers_print_as_the_paper_prints_them_and_assumptions_are_labelled(tmp_path):
    table = tables.TABLES["yang2019_table3"]
    text = tables.format_table(table, [])
    assert "| 26.20 |" in text and "| 26.2 |" not in text
    assert "ASSUMPTION" in text  # averaging / beam / length penalty the paper does not state


def test_cao_table_prints_a_delta_column(tmp_path):
    table = tables.TABLES["cao_table1"]
    text = tables.format_table(table, [])
    assert "\u0394 Zh-En (paper)" in text and "\u0394 Zh-En (ours)" in text


def test_preflight_estimates_checkpoint_disk_before_training(tmp_path):
    table = tables.TABLES["yang2019_table2"]
    cells = runner.build_cells(table, table.rows, _options(), str(tmp_path), str(tmp_path))
    problems = runner.preflight(cells, _options(results=str(tmp_path), setting="p40"), {r.key: 10 ** 12 for r in table.rows})
    assert any("checkpoints need about" in p and "GiB free" in p for p in problems)
    assert any("GPU(s) per node needed by the p40 setting" in p for p in problems)  # no GPU here
    assert sum("missing" in p for p in problems) == 2  # one per data directory, not one per cell


def test_preflight_refuses_a_data_directory_holding_both_directions(tmp_path):
    """The tables' training commands name no languages: fairseq infers them from the first file it
    lists, so a directory into which both directions were binarised trained either."""
    table = tables.TABLES["yang2019_table2"]
    cells = runner.build_cells(table, table.rows, _options(), str(tmp_path / "r"), str(tmp_path))
    bin_dir = cells[0].bin_dir
    os.makedirs(bin_dir)
    src, tgt = cells[0].column.src, cells[0].column.tgt
    for split in ("train", "valid", *cells[0].subsets):
        for lang in (src, tgt):
            for ext in ("idx", "bin"):
                open(os.path.join(bin_dir, f"{split}.{src}-{tgt}.{lang}.{ext}"), "w").close()
    for lang in (src, tgt):
        open(os.path.join(bin_dir, f"dict.{lang}.txt"), "w").close()
    options = _options(results=str(tmp_path / "r"), setting="cpu")
    mine = [c for c in cells if c.bin_dir == bin_dir]
    assert not [p for p in runner.preflight(mine, options) if "language pairs" in p]
    open(os.path.join(bin_dir, f"train.{tgt}-{src}.{tgt}.idx"), "w").close()
    said = [p for p in runner.preflight(mine, options) if "language pairs" in p]
    assert len(said) == 1 and f"holds files of 2 language pairs" in said[0] and f"{src}-{tgt} alone" in said[0], said
    # the dry-run's data line says what the real preflight refuses
    assert runner.mixed_pairs(mine[0]) in said[0]
    named = runner.build_cells(table, table.rows, _options(train_extra=["-s", src, "--target-lang", tgt]),
                               str(tmp_path / "r"), str(tmp_path))
    assert runner.mixed_pairs(named[0]) is None  # languages named after '--': fairseq infers nothing
    assert not [p for p in runner.preflight([c for c in named if c.bin_dir == bin_dir], options) if "language pairs" in p]


# -- a training directory holds exactly one training ------------------------------------------------


def _key_of(key, row_key, column=None, **kw):
    return next(c for c in _cells(key, **kw) if c.row.key == row_key and (column is None or c.column.name == column))


def test_anything_that_changes_the_training_changes_its_directory(tmp_path):
    plain = _key_of("cao_table2", "cross_zero")
    assert _key_of("cao_table2", "cross_zero").train_dir == plain.train_dir  # deterministic
    assert _key_of("cao_table2", "cross_zero", train_extra=["--seed", "2"]).train_dir != plain.train_dir
    assert _key_of("cao_table2", "cross_zero", train_extra=["--lr", "0.0001"]).train_dir != plain.train_dir
    # the data: its dictionaries and the data script's settings
    table = tables.TABLES["cao_table2"]
    data = tmp_path / "D"
    bin_dir = data / table.columns[0].data / table.columns[0].bin
    bin_dir.mkdir(parents=True)
    (bin_dir / "dict.zh.txt").write_text("a 1\n")
    (bin_dir / "dict.en.txt").write_text("b 1\n")
    dirs = []
    for change in (None, ("dict.en.txt", "b 2\n"), ("../settings", "bpe=40000\n")):
        if change:
            (bin_dir / change[0]).write_text(change[1])
        cells = runner.build_cells(table, table.rows, _options(), "R", str(data))
        dirs.append({c.row.key: c.train_dir for c in cells if c.column is table.columns[0]})
    assert len({d["cross_zero"] for d in dirs}) == 3


def test_a_directory_trained_under_another_key_is_not_reused(tmp_path):
    table = tables.TABLES["cao_table2"]
    cell = runner.build_cells(table, table.rows[:1], _options(), str(tmp_path), str(tmp_path))[0]
    os.makedirs(cell.train_dir)
    with open(os.path.join(cell.train_dir, "train.json"), "w") as handle:
        json.dump({"training_key": "0badc0de"}, handle)
    runner.run_cell(cell, "cpu", False, dict(os.environ))
    assert cell.status == "FAILED" and "holds a training with key 0badc0de" in cell.message


def test_a_directory_being_trained_is_not_trained_twice(tmp_path):
    """Another process training the cell holds train.lock (flock): the cell fails at once and
    trains nothing; a lock file left by a process that is gone holds nothing and is taken over."""
    import fcntl

    table = tables.TABLES["cao_table2"]
    cell = runner.build_cells(table, table.rows[:1], _options(), str(tmp_path), str(tmp_path))[0]
    os.makedirs(cell.train_dir)
    lock = os.path.join(cell.train_dir, "train.lock")
    cell.train_cmd = [sys.executable, "-c", "import sys; sys.exit(3)"]
    with open(lock, "w") as other:  # another open file: flock holds it against this process too
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        other.write("pid 4242 on node7\n")
        other.flush()
        runner.run_cell(cell, "cpu", False, dict(os.environ))
        assert cell.status == "FAILED" and "is in use by pid 4242 on node7" in cell.message
        assert not os.path.exists(os.path.join(cell.train_dir, "train.log"))  # nothing was started
    # released (its holder closed it, as a dead process's kernel does): the cell trains
    runner.run_cell(cell, "cpu", False, dict(os.environ))
    assert cell.message.startswith("training exited 3")


# -- launches that cannot work are refused before anything runs ---------------------------------------


@pytest.mark.parametrize("args, message", [
    (["--launcher", "torchrun", "--nnodes", "2", "--gpus", "4"], "needs --master-addr set to node 0's address"),
    (["--launcher", "torchrun", "--nnodes", "2", "--node-rank", "2", "--master-addr", "n0"], "ranks are 0 .. nnodes - 1"),
    (["--jobs", "2"], "for --setting cpu / --smoke only"),
    (["--launcher", "slurm", "--nnodes", "2", "--gpus", "4", "--node-rank", "1"], "is for --launcher torchrun"),
])
def test_launches_that_cannot_work_are_refused(tmp_path, args, message):
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "reproduce", "wang2019_table2.py"), "--dry-run",
                           "--results", str(tmp_path), *args], capture_output=True, text=True, env=cli_env(), cwd=ROOT)
    assert proc.returncode != 0 and message in proc.stderr and "Traceback" not in proc.stderr


def test_footer_labels_the_output_length_bound_and_iidas_batch_reading():
    text = tables.format_table(tables.TABLES["iida2019_table2"], [])
    assert "--max-len-a 2 --max-len-b 10 (2 x source + 10 tokens): ASSUMPTION" in text
    assert "per GPU (effective batch 4,000 tokens): INTERPRETATION" in text


def test_cao_delta_is_against_row_one_and_blank_without_it(tmp_path):
    table = tables.TABLES["cao_table1"]
    column = table.columns[0]
    refs = [f"the cat number {i} sat on the mat today" for i in range(30)]
    rows = {r.key: r for r in table.rows}
    only_cross = [_fake_cell(table, rows["cross_zero"], column, str(tmp_path), refs, refs)]
    line = next(l for l in tables.format_table(table, only_cross).splitlines() if "| 4 |" in l or "| 4 " in l)
    cells = [c.strip() for c in line.strip("|").split("|")]
    paper_delta = rows["cross_zero"].paper["Zh-En"] - rows["base"].paper["Zh-En"]
    assert cells[-2] == f"{paper_delta:+.2f}" and cells[-1] == ""  # base not run: no delta of ours
    with_base = only_cross + [_fake_cell(table, rows["base"], column, str(tmp_path), refs[:15] + ["x"] * 15, refs)]
    text = tables.format_table(table, with_base)
    line = next(l for l in text.splitlines() if l.startswith("| 4 |"))
    assert line.strip("|").split("|")[-1].strip().startswith("+")
    first = next(l for l in text.splitlines() if l.startswith("| 1 |"))
    assert [c.strip() for c in first.strip("|").split("|")][-2:] == ["-", "-"]  # row 1: "-" as the paper prints


def test_logging_workers_and_launcher_do_not_change_the_directory():
    plain = _key_of("cao_table2", "base")
    for extra in (["--log-interval", "10"], ["--tensorboard-logdir", "/scratch/job123/tb"], ["--num-workers", "8"],
                  ["--no-progress-bar"], ["--log-format=json"]):
        assert _key_of("cao_table2", "base", train_extra=extra).train_dir == plain.train_dir, extra
    assert _key_of("cao_table2", "base", backend="nccl").train_dir == plain.train_dir
    two_nodes = dict(launcher="torchrun", nnodes=2, gpus=1, master_addr="n0")
    rank0, rank1 = _key_of("cao_table2", "base", **two_nodes), _key_of("cao_table2", "base", node_rank=1, **two_nodes)
    assert rank0.train_dir == rank1.train_dir  # every node computes the same directory and port
    assert rank0.train_cmd[rank0.train_cmd.index("--master-port") + 1] == \
        rank1.train_cmd[rank1.train_cmd.index("--master-port") + 1]
    ports = {c.train_cmd[c.train_cmd.index("--master-port") + 1] for c in _cells("cao_table1", **two_nodes)}
    assert len(ports) == len(_cells("cao_table1", **two_nodes))  # one rendezvous port per training


def test_length_subsets_and_where_extra_corpora_lie_do_not_change_the_data_key(tmp_path):
    bin_dir = tmp_path / "aspec" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "dict.ja.txt").write_text("a 1\n")
    (bin_dir / "dict.en.txt").write_text("b 1\n")
    prints = []
    for settings in ("direction=ja-en top=2000 vocab=2000 length_eval=0",
                     "direction=ja-en top=2000 vocab=2000 length_eval=1 length_eval_tokens=300",
                     "direction=ja-en top=3000 vocab=2000 length_eval=1"):
        (tmp_path / "aspec" / "settings").write_text(settings + "\n")
        prints.append(runner.data_fingerprint(str(bin_dir), "ja", "en"))
    assert prints[0] == prints[1] != prints[2]
    assert runner._training_settings("extra=--extra-train /a/cwmt/casia2015") == \
        runner._training_settings("extra=--extra-train /b/c/casia2015")


def test_on_several_nodes_node_0_trains_every_cell_before_evaluating(tmp_path, monkeypatch):
    table = tables.TABLES["cao_table2"]
    cells = runner.build_cells(table, table.rows, _options(launcher="torchrun", nnodes=2, gpus=1, master_addr="n0"),
                               str(tmp_path), str(tmp_path))
    calls = []

    def fake_run(cmd, log_path, env):
        calls.append("eval" if "fairseq_ctx.evaluation" in cmd else "train")
        return 0 if calls[-1] == "train" else 1

    monkeypatch.setattr(runner, "_run_logged", fake_run)
    os.makedirs(cells[0].bin_dir)
    (pathlib.Path(cells[0].bin_dir) / "train.zh-en.zh.idx").write_text("")
    runner.run_cells(cells, "cao", False)
    assert calls[:len(cells)] == ["train"] * len(cells) and set(calls[len(cells):]) == {"eval"}
    # each start recorded beside the checkpoints before fairseq-train runs: the direction it infers
    # (the evaluation reads it there while train.json is not written), its key, command and data
    for cell in cells:
        with open(os.path.join(cell.checkpoint_dir, train.STARTS_RECORD), encoding="utf-8") as handle:
            (start,) = [json.loads(line) for line in handle]
        assert start["languages"] == (["zh", "en"] if cell.bin_dir == cells[0].bin_dir else None)
        assert (start["event"], start["by"], start["training_key"], start["command"], start["data"]) == (
            "start", "fairseq-ctx-reproduce", cell.key, cell.train_cmd, cell.bin_dir) and start["start_id"]
        with open(os.path.join(cell.train_dir, "train.json"), encoding="utf-8") as handle:
            assert json.load(handle)["start_id"] == start["start_id"]  # which start the finished record is of


# a stand-in for a torchrun worker (`python -m fairseq_ctx.reproduce.distributed_entry`): it
# imports fairseq_ctx the way the worker does, through sys.path, and says which copy it got
_WHICH_COPY = ("import os, sys, fairseq_ctx; "
               "print('copy:', os.path.realpath(os.path.dirname(os.path.dirname(fairseq_ctx.__file__)))); sys.exit(3)")


@pytest.mark.parametrize("path", ["cells", "follower"])
def test_torchrun_workers_import_this_copy_even_with_another_first_on_pythonpath(tmp_path, monkeypatch, path):
    """A user whose environment has PYTHONSAFEPATH=1 and another checkout on PYTHONPATH (their
    own fork, say): the torchrun workers of fairseq-ctx-reproduce (node 0's cells and a
    follower node's trainings) must run the code that planned the cells. The spawn launcher's
    `fairseq_cli.train --user-dir` gets this copy whatever the environment; a torchrun worker's
    `-m fairseq_ctx...` depends on it. The runner's own launcher runs a stand-in for the
    worker with the environment it gives the training command."""
    shadow = shadow_checkout(tmp_path / "other-checkout")
    monkeypatch.setenv("PYTHONSAFEPATH", "1")
    monkeypatch.setenv("PYTHONPATH", str(shadow))
    monkeypatch.setenv("FAIRSEQ_CTX_NO_MODELS", "1")
    table = tables.TABLES["yang2019_table1"]
    cells = runner.build_cells(table, table.rows[:1],
                               _options(launcher="torchrun", nnodes=2, gpus=1, master_addr="n0",
                                        node_rank=0 if path == "cells" else 1),
                               str(tmp_path / "R"), str(tmp_path / "D"))
    worker = cells[0].train_cmd[cells[0].train_cmd.index("torch.distributed.run") + 1:]
    assert worker[worker.index("-m") + 1].startswith("fairseq_ctx."), worker  # what the stand-in stands for
    cells[0].train_cmd = [sys.executable, "-c", _WHICH_COPY]
    if path == "cells":
        runner.run_cells(cells, "p40", True)
        log = glob.glob(os.path.join(cells[0].train_dir, "*.log"))
    else:
        with pytest.raises(SystemExit):
            runner.run_follower(cells, 1)
        log = [os.path.join(cells[0].train_dir, "train.node1.log")]
    assert len(log) == 1
    text = open(log[0], encoding="utf-8").read()
    assert f"copy: {os.path.realpath(runner.ROOT)}\n" in text, text[-2000:]


def test_changed_evaluation_settings_are_evaluated_afresh(monkeypatch):
    import dataclasses

    from fairseq_ctx.evaluation import defaults

    cell = _cells("yang2019_table1")[0]
    before = cell.eval_dir("test")
    assert dataclasses.replace(cell).eval_dir("test") == before
    settings = defaults.PAPER_DEFAULTS["yang2019"]
    for change in ({"beam": settings.beam + 1}, {"lenpen": 1.0}, {"average_last": 0}, {"max_len_b": 50},
                   {"compound_split": "no"}):
        monkeypatch.setitem(defaults.PAPER_DEFAULTS, "yang2019", dataclasses.replace(settings, **change))
        assert cell.eval_dir("test") != before and cell.train_dir == _cells("yang2019_table1")[0].train_dir, change
    monkeypatch.setitem(defaults.PAPER_DEFAULTS, "yang2019", dataclasses.replace(settings, average_last=0))
    without_average = cell.eval_dir("test")
    monkeypatch.setitem(defaults.PAPER_DEFAULTS, "yang2019",
                        dataclasses.replace(settings, average_last=0, checkpoint="checkpoint_last.pt"))
    assert cell.eval_dir("test") != without_average


def test_prepared_data_lands_where_the_reproduction_looks(tmp_path, monkeypatch):
    """fairseq-ctx-prepare-data's default output root is the reproduction's default data root,
    whatever directory either is run from."""
    from fairseq_ctx import paths
    from fairseq_ctx.reproduce import runner

    monkeypatch.delenv("FAIRSEQ_CTX_WORK", raising=False)
    env = paths.script_env()
    assert env["FAIRSEQ_CTX_WORK"] == paths.WORK_DIR
    for script in glob.glob(os.path.join(paths.SHELL_SCRIPTS, "*.sh")) + glob.glob(os.path.join(paths.DATA_SCRIPTS, "prepare-*.sh")):
        with open(script) as handle:
            defaults = [line for line in handle if line.startswith("out=${out:-")]
        assert all("${FAIRSEQ_CTX_WORK:-work}/" in line for line in defaults), (script, defaults)
    monkeypatch.chdir(tmp_path)  # not the checkout: the defaults must not depend on it
    proc = subprocess.run([sys.executable, "-c", "import sys; from fairseq_ctx.cli import reproduce; "
                           "sys.exit(reproduce(['cao_table2', '--dry-run']))"],
                          capture_output=True, text=True, env=cli_env(), cwd=tmp_path)
    assert os.path.join(paths.WORK_DIR, "wmt17-zh-en-len50") in proc.stdout, proc.stdout[-2000:] + proc.stderr[-2000:]


def _dictionaries_and_training_set_names(cells):
    """What the model build reads of a cell's data: dictionaries (40 entries), and the
    training set's file names, off which fairseq-train reads the language pair."""
    for cell in cells:
        os.makedirs(cell.bin_dir, exist_ok=True)
        for lang in (cell.column.src, cell.column.tgt):
            with open(os.path.join(cell.bin_dir, f"dict.{lang}.txt"), "w") as handle:
                handle.writelines(f"w{i} 1\n" for i in range(40))
        open(os.path.join(cell.bin_dir, f"train.{cell.column.src}-{cell.column.tgt}.{cell.column.src}.idx"), "w").close()


@pytest.mark.parametrize("options", [dict(), dict(smoke=True),
                                     dict(launcher="torchrun", nnodes=2, gpus=4, allow_batch_change=True,
                                          train_extra=["--dropout", "0.2"]),
                                     dict(launcher="slurm", nnodes=2, gpus=4, allow_batch_change=True)],
                         ids=["full", "smoke", "torchrun-extra", "slurm"])
def test_every_cell_of_every_paper_table_builds_its_model(tmp_path, options):
    # each row's config with each column's options, at full size and as the smoke rehearsal
    # shrinks it, for every launcher: the preflight would otherwise refuse a table of ours
    checked = 0
    for key, table in sorted(tables.TABLES.items()):
        if not table.columns:
            continue
        cells = runner.build_cells(table, table.rows, _options(**options), str(tmp_path / "r"), str(tmp_path / "d"))
        _dictionaries_and_training_set_names(cells)
        assert runner.model_build_problems(cells) == [], key
        checked += len(cells)
    assert checked > 100


def _cao_table2_cells_with_data(tmp_path, train_extra):
    table = tables.TABLES["cao_table2"]
    cells = runner.build_cells(table, table.rows, _options(train_extra=train_extra), str(tmp_path / "r"),
                               str(tmp_path / "data"))
    _dictionaries_and_training_set_names(cells)
    return table, cells


def test_preflight_builds_every_cells_model_before_any_training(tmp_path):
    # an extra option that only the cross-aggregation rows accept: the Transformer rows'
    # cells would stop at their own start, hours in; the preflight names them first
    table, cells = _cao_table2_cells_with_data(tmp_path, ["--routing-iters", "2"])
    problems = runner.model_build_problems(cells)
    stock = [c for c in cells if "--arch" in c.train_cmd
             and c.train_cmd[c.train_cmd.index("--arch") + 1] == "transformer"]
    assert stock and len(stock) < len(cells)
    assert len(problems) == len(stock)
    for cell, problem in zip(stock, problems):
        assert problem.startswith(f"{cell.name}: fairseq-train would stop before its first update: ValueError: ")
        assert "fairseq-train: error: unrecognized arguments: --routing-iters 2" in problem
    # a trained cell, a cell without data and a cell with another plugin are not built
    os.makedirs(stock[0].train_dir, exist_ok=True)
    open(os.path.join(stock[0].train_dir, "train.json"), "w").close()
    os.remove(os.path.join(stock[1].bin_dir, f"dict.{stock[1].column.src}.txt"))
    said = []
    assert runner.model_build_problems(cells, log=said.append) == []
    other = runner.build_cells(table, table.rows, _options(train_extra=["--user-dir", str(tmp_path)]),
                               str(tmp_path / "r"), str(tmp_path / "data"))
    assert runner.model_build_problems(other, log=said.append) == []
    assert said and "another --user-dir" in said[-1]
    _dictionaries_and_training_set_names(cells)
    # without the extra every cell builds; a bad value in a row's own option is named too
    assert runner.model_build_problems(runner.build_cells(table, table.rows, _options(), str(tmp_path / "r"),
                                                          str(tmp_path / "data"))) == []
    bad = runner.build_cells(table, table.rows, _options(train_extra=["--dropout", "x"]), str(tmp_path / "r"),
                             str(tmp_path / "data"))
    assert len(runner.model_build_problems(bad)) == len(bad)
    assert runner.preflight(bad, _options(results=str(tmp_path / "r"), setting="cpu"))[:len(bad)] == \
        runner.model_build_problems(bad)


def test_preflight_builds_every_cells_lr_schedule(tmp_path):
    # two learning rates: accepted by fairseq's parser and by the model build, refused by
    # inverse_sqrt when fairseq-train builds its lr scheduler at its start (hours in for a
    # table's later cells)
    _, cells = _cao_table2_cells_with_data(tmp_path, ["--lr", "1e-3,2e-3"])
    problems = runner.model_build_problems(cells)
    assert len(problems) == len(cells) > 1
    assert all("Cannot use a fixed learning rate schedule with inverse_sqrt" in p for p in problems), problems


def test_the_fairseq_train_arguments_of_every_launchers_command():
    config = os.path.join(train.CONFIGS, "cao", "cross_zero.args")
    for launcher in ("spawn", "torchrun", "slurm"):
        cmd = train.build_command(config, "cao", "BIN", "SAVE", launcher=launcher, gpus=2, allow_batch_change=True)
        argv = runner.fairseq_train_argv(cmd)
        assert argv[0] == "BIN" and argv[argv.index("--save-dir") + 1] == "SAVE"
    with pytest.raises(ValueError, match="no fairseq-train entry"):
        runner.fairseq_train_argv(["python", "-m", "something_else", "BIN"])
