"""lstm_multihop through the real fairseq CLI: train -> resume -> generate -> interactive."""
import shlex
from pathlib import Path

import torch

from fairseq_ctx.paths import CONFIGS as _CONFIGS

CONFIGS = Path(_CONFIGS)

# argparse keeps the last value of a repeated option: these shrink any config to test size
TINY_DIMS = [
    "--encoder-embed-dim", "16", "--encoder-hidden-size", "8", "--encoder-bidirectional",
    "--decoder-embed-dim", "16", "--decoder-hidden-size", "24", "--decoder-out-embed-dim", "16",
]  # fmt: skip


def read_args(path: Path):
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    assert len(lines) == 1, f"{path} must hold the arguments on one line"
    return shlex.split(lines[0])


def test_cli_train_generate_interactive_resume(cli_roundtrip):
    cli_roundtrip(["--arch", "lstm_multihop", *TINY_DIMS, "--attention-heads", "2", "--attention-hops", "2"], beam=3)


def test_paper_config_nag_trains_from_cli(cli_roundtrip, tmp_path):
    """fairseq_ctx/configs/iida2019/lstm_multihop.args (NAG, lr 0.005, clip 25, ...) at tiny dims."""
    args = read_args(CONFIGS / "iida2019" / "lstm_multihop.args")
    assert args[args.index("--optimizer") + 1] == "nag" and args[args.index("--lr") + 1] == "0.005"
    cli_roundtrip([*args, *TINY_DIMS, "--max-tokens", "400", "--update-freq", "1"], beam=2)
    # the checkpoint records what was trained: NAG at lr 0.005 with the paper's model
    state = torch.load(tmp_path / "checkpoints" / "checkpoint_last.pt", map_location="cpu", weights_only=False)
    cfg = state["cfg"]
    assert cfg["optimizer"]["_name"] == "nag" and list(cfg["optimization"]["lr"]) == [0.005]
    assert cfg["optimization"]["clip_norm"] == 25
    assert cfg["model"].arch == "lstm_multihop" and cfg["model"].hop_mode == "dependent"
    assert "momentum_buffer" in str(state["last_optimizer_state"]["state"])  # NAG's own state was saved


def test_demo_rows_differ_only_by_the_multihop_options():
    base = read_args(CONFIGS / "demo" / "05-lstm.args")
    multihop = read_args(CONFIGS / "demo" / "06-lstm_multihop.args")
    assert base[:2] == ["--arch", "lstm"] and multihop[:2] == ["--arch", "lstm_multihop"]
    extra = multihop[2 + len(base) - 2 :]
    assert multihop[2 : len(base)] == base[2:]  # same dims as the baseline row
    assert extra == ["--attention-heads", "2", "--attention-hops", "2", "--hop-mode", "dependent"]
