"""Scoring as the papers report it: compound splitting, tokenised BLEU, paired bootstrap,
BLEU by source length, checkpoint averaging, the training settings' effective batches."""
import os

import pytest
import torch

from fairseq_ctx.evaluation import scoring
from fairseq_ctx.evaluation.average import average_checkpoints, last_checkpoints
from fairseq_ctx.checkpoint_repair import stored_updates
from fairseq_ctx.reproduce import train
from tests.conftest import TRAIN_DEFAULTS, USER_DIR, fairseq_cli, run


def test_compound_split_matches_get_ende_bleu_perl_rule():
    # perl -ple 's{(\S)-(\S)}{$1 ##AT##-##AT## $2}g' gives exactly this (non-overlapping matches)
    # (output of that perl command; note the single-letter quirk "A-B-C")
    assert scoring.compound_split("Gesundheits-Reform und Ost-West-Handel - ja A-B-C") == (
        "Gesundheits ##AT##-##AT## Reform und Ost ##AT##-##AT## West ##AT##-##AT## Handel - ja "
        "A ##AT##-##AT## B-C")


def test_tokenized_bleu_scores_tokens_not_raw_strings():
    ref = ["Das ist ein Haus-Boot, sagte er."]
    # the tokeniser separates the comma and period; compound splitting scores the compound's parts
    assert scoring.tokenized_bleu(["Das ist ein Haus-Boot , sagte er ."], ref, "de")["bleu"] == 100.0
    partial = scoring.tokenized_bleu(["Das ist ein Haus-Auto, sagte er."], ref, "de")
    unsplit = scoring.tokenized_bleu(["Das ist ein Haus-Auto, sagte er."], ref, "de", compound=False)
    assert 0 < unsplit["bleu"] < partial["bleu"] < 100  # "Haus" still matches once split
    assert "compound-split" in partial["signature"]


def test_paired_bootstrap_separates_a_better_system_from_an_equal_one():
    refs = [f"the cat number {i} sat on the mat today" for i in range(60)]
    good = list(refs)
    bad = [r.replace("sat on", "is near") for r in refs]
    better = scoring.paired_bootstrap(bad, good, refs, "en", samples=200)
    assert better["delta"] > 0 and better["p_value"] < 0.01
    assert scoring.significance_mark(better["p_value"]) == "\u21d1"
    # equally good systems that err on different sentences: not significant
    odd = [b if i % 2 else g for i, (g, b) in enumerate(zip(good, bad))]
    even = [g if i % 2 else b for i, (g, b) in enumerate(zip(good, bad))]
    tie = scoring.paired_bootstrap(odd, even, refs, "en", samples=200)
    assert abs(tie["delta"]) < 0.5 and tie["p_value"] > 0.05
    assert scoring.significance_mark(tie["p_value"], tie["delta"]) == ""
    same = scoring.paired_bootstrap(bad, bad, refs, "en", samples=200)
    assert scoring.significance_mark(same["p_value"], same["delta"]) == ""  # no variance: never marked
    # ... and said to be no test at all: identical outputs, or two systems that score 0 everywhere
    assert better["p_value_meaningful"] and tie["p_value_meaningful"] and not same["p_value_meaningful"]
    zero = scoring.paired_bootstrap(["x y z"] * 60, ["q w e"] * 60, refs, "en", samples=200)
    assert zero["delta"] == 0 and zero["p_value"] < 0.01 and not zero["p_value_meaningful"]


def test_bleu_by_length_uses_ten_word_buckets():
    refs = ["a b c d e", "a b c d e f g h i j k l", "x y z w v u t s r q p o n"]
    hyps = ["a b c d e", "a b c d e f g h i j k l", "nothing right here at all"]
    rows = scoring.bleu_by_length([5, 12, 19], hyps, refs, "en")
    assert [(r["bucket"], r["sentences"]) for r in rows] == [("0-9", 1), ("10-19", 2)]
    assert rows[0]["bleu"] == 100.0 and rows[1]["bleu"] < 100.0


def test_average_checkpoints_is_the_mean_of_the_last_n(tmp_path):
    for step, value in ((1, 1.0), (2, 2.0), (3, 4.0)):
        torch.save({"model": {"w": torch.full((2,), value), "steps": torch.tensor(step)}, "args": None,
                    "cfg": None, "last_optimizer_state": {}}, tmp_path / f"checkpoint_1_{step}.pt")
    torch.save({"model": {}}, tmp_path / "checkpoint_last.pt")
    paths = last_checkpoints(str(tmp_path), 2)
    assert [os.path.basename(p) for p in paths] == ["checkpoint_1_2.pt", "checkpoint_1_3.pt"]
    state = average_checkpoints(paths)
    assert torch.equal(state["model"]["w"], torch.full((2,), 3.0))
    assert state["model"]["steps"].item() == 3 and "last_optimizer_state" not in state
    with pytest.raises(FileNotFoundError, match="wanted the last 5"):
        last_checkpoints(str(tmp_path), 5)


def test_the_final_interval_checkpoint_fairseq_did_not_write_is_checkpoint_last(tiny_data_bin, tmp_path, capsys):
    """Real fairseq-train: it writes checkpoint_E_U.pt only mid-epoch, so when the training's
    last interval update ends an epoch (here: one epoch, an interval of 1 update), only
    checkpoint_last.pt holds that model; it is the newest of the averaged window (not a window
    shifted to leave the final model out)."""
    save_dir = tmp_path / "checkpoints"
    run(fairseq_cli("train", str(tiny_data_bin), "--user-dir", USER_DIR, *TRAIN_DEFAULTS, "--arch", "transformer",
                    "--encoder-layers", "1", "--decoder-layers", "1", "--encoder-embed-dim", "16",
                    "--decoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32",
                    "--encoder-attention-heads", "2", "--decoder-attention-heads", "2", "--max-epoch", "1",
                    "--save-interval-updates", "1", "--keep-interval-updates", "3", "--save-dir", str(save_dir)))
    end = stored_updates(str(save_dir / "checkpoint_last.pt"))
    assert end > 3 and not (save_dir / f"checkpoint_1_{end}.pt").exists()  # fairseq's rule, as the premise
    assert [os.path.basename(p) for p in last_checkpoints(str(save_dir), 3)] == [
        f"checkpoint_1_{end - 2}.pt", f"checkpoint_1_{end - 1}.pt", "checkpoint_last.pt"]
    assert "not evenly spaced" not in capsys.readouterr().err


def _checkpoint(path, updates, value, interval=1000, iterations_in_epoch=0):
    """A checkpoint with the fields fairseq saves (checkpoint_utils.save_checkpoint)."""
    torch.save({"model": {"w": torch.full((2,), value)}, "args": None,
                "cfg": {"checkpoint": {"save_interval_updates": interval}},
                "extra_state": {"train_iterator": {"epoch": 2, "iterations_in_epoch": iterations_in_epoch}},
                "optimizer_history": [{"num_updates": updates}], "last_optimizer_state": {}}, path)


@pytest.mark.parametrize("updates, iterations_in_epoch", [(5500, 0), (5000, 17)],
                         ids=["off-the-interval-grid", "saved-mid-epoch"])
def test_checkpoint_last_stands_in_for_nothing_else(tmp_path, updates, iterations_in_epoch, capsys):
    """A checkpoint_last.pt saved off the interval grid (a --max-update that is no multiple of the
    interval) or mid-epoch (then fairseq wrote the numbered one itself) is not an interval point."""
    for u in (2000, 3000, 4000):
        _checkpoint(tmp_path / f"checkpoint_2_{u}.pt", u, u / 1000)
    _checkpoint(tmp_path / "checkpoint_last.pt", updates, 5.0, iterations_in_epoch=iterations_in_epoch)
    with pytest.raises(FileNotFoundError, match="wanted the last 4"):
        last_checkpoints(str(tmp_path), 4)
    # one missing inside the window (an interval update that ended an epoch mid-training): said
    _checkpoint(tmp_path / "checkpoint_1_1000.pt", 1000, 1.0)
    (tmp_path / "checkpoint_2_3000.pt").unlink()
    assert len(last_checkpoints(str(tmp_path), 3)) == 3
    assert "not evenly spaced (updates 1000, 2000, 4000)" in capsys.readouterr().err


@pytest.mark.parametrize("setting,reference,gpus", [("p40", None, None), ("cao", None, None), ("iida", None, None),
                                                    ("modern", "p40", 1), ("modern", "cao", 2), ("modern", "iida", 1)])
def test_settings_keep_the_papers_effective_batch(setting, reference, gpus):
    papers = {"p40": 8 * 4096, "cao": 2 * 2048 * 12, "iida": 2 * 2000}
    world, args = train.setting_args(setting, gpus=gpus, reference=reference)
    tokens, freq = int(args[args.index("--max-tokens") + 1]), int(args[args.index("--update-freq") + 1])
    want = papers[reference or setting]
    assert world * tokens * freq == want
    assert ("--bf16" in args) == (setting == "modern")


def test_train_command_reads_paper_args_then_row_then_setting():
    cmd = train.build_command(os.path.join(train.CONFIGS, "iida2019", "lstm_multihop.args"), "iida", "BIN", "SAVE")
    # lstm_multihop.args says --max-tokens 2000 --update-freq 2 (one GPU); the setting (2 GPUs) wins
    freq_at = max(i for i, a in enumerate(cmd) if a == "--update-freq")
    assert cmd[freq_at + 1] == "1" and cmd[cmd.index("--distributed-world-size") + 1] == "2"
    assert cmd.index("nag") < cmd.index("lstm_multihop")  # paper's train.args first, the row after
    torchrun = train.build_command(os.path.join(train.CONFIGS, "yang2019", "enc_deep_global_deep.args"), "p40",
                                   "BIN", "SAVE", launcher="torchrun", nnodes=2, node_rank=1, master_addr="node0")
    assert torchrun[1:4] == ["-m", "torch.distributed.run", "--nproc-per-node"] and "node0" in torchrun
    assert "fairseq_ctx.reproduce.distributed_entry" in torchrun and "--distributed-world-size" not in torchrun


@pytest.mark.parametrize("setting, gpus", [("modern", 1), ("cpu", None)])
def test_a_one_process_command_names_its_world_size(setting, gpus):
    # without it fairseq-train takes every visible GPU: 8 processes (8x the batch) for --gpus 1 on an 8-GPU node
    cmd = train.build_command(os.path.join(train.CONFIGS, "yang2019", "both.args"), setting, "BIN", "SAVE", gpus=gpus)
    assert cmd[cmd.index("--distributed-world-size") + 1] == "1"


def test_the_cpu_setting_trains_with_a_batch_where_nothing_else_gives_one():
    """fairseq-ctx-train wang2019/deep_tam.args cpu stopped at once in fairseq ("Must specify batch
    size"): no config of Yang / Wang / Cao names one, the cpu setting named none either."""
    config = os.path.join(train.CONFIGS, "wang2019", "deep_tam.args")

    def given(cmd, name):
        return [cmd[i + 1] for i, word in enumerate(cmd) if word == name]

    assert given(train.build_command(config, "cpu", "BIN", "SAVE"), "--max-tokens") == [str(train.CPU_MAX_TOKENS)]
    # one given after -- (or by the config, or the runner's --cpu-max-tokens) is the only one
    assert given(train.build_command(config, "cpu", "BIN", "SAVE", extra=["--max-tokens", "300"]), "--max-tokens") == ["300"]
    assert not given(train.build_command(config, "cpu", "BIN", "SAVE", extra=["--batch-size=8"]), "--max-tokens")
    lstm = train.build_command(os.path.join(train.CONFIGS, "iida2019", "lstm_multihop.args"), "cpu", "BIN", "SAVE")
    assert given(lstm, "--max-tokens") == ["2000"]
    smoke = train.hardware("cpu", cpu_max_tokens=1024)
    assert given(train.build_command(config, "cpu", "BIN", "SAVE", hw=smoke), "--max-tokens") == ["1024"]
