"""Scoring as the papers report it: compound splitting, tokenised BLEU, paired bootstrap,
BLEU by source length, checkpoint averaging, the training settings' effective batches."""
import os

import pytest
import torch

from fairseq_ctx.evaluation import scoring
from fairseq_ctx.evaluation.average import average_checkpoints, last_checkpoints
from fairseq_ctx.reproduce import train


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


def _checkpoint(path, updates, value):
    torch.save({"model": {"w": torch.full((2,), value)}, "args": None, "cfg": None,
                "optimizer_history": [{"num_updates": updates}], "last_optimizer_state": {}}, path)


def test_the_final_interval_checkpoint_fairseq_did_not_write_is_checkpoint_last(tmp_path, capsys):
    """fairseq writes checkpoint_E_U.pt only mid-epoch: when the training's last interval update
    (here 5000) ends an epoch, only checkpoint_last.pt holds that model, and it is the newest
    of the last 5 (not a window shifted to leave the final model out)."""
    for u in (2000, 3000, 4000):
        _checkpoint(tmp_path / f"checkpoint_{u // 1500 + 1}_{u}.pt", u, u / 1000)
    _checkpoint(tmp_path / "checkpoint_last.pt", 5000, 5.0)
    assert [os.path.basename(p) for p in last_checkpoints(str(tmp_path), 4)] == [
        "checkpoint_2_2000.pt", "checkpoint_3_3000.pt", "checkpoint_3_4000.pt", "checkpoint_last.pt"]
    assert "not evenly spaced" not in capsys.readouterr().err
    # saved off the interval grid (a --max-update that is no multiple of the interval): not a stand-in
    _checkpoint(tmp_path / "checkpoint_last.pt", 5500, 5.5)
    with pytest.raises(FileNotFoundError, match="wanted the last 4"):
        last_checkpoints(str(tmp_path), 4)
    # one missing inside the window (an interval update that ended an epoch mid-training): said
    _checkpoint(tmp_path / "checkpoint_1_1000.pt", 1000, 1.0)
    (tmp_path / "checkpoint_3_3000.pt").unlink()
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
