"""transformer_cross_agg through the real fairseq CLI: train -> resume -> generate (beam) -> interactive."""
import torch
from fairseq import checkpoint_utils

from tests.conftest import TRAIN_DEFAULTS, USER_DIR, fairseq_cli, run

TINY = [
    "--encoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32", "--encoder-layers", "2",
    "--encoder-attention-heads", "4", "--decoder-embed-dim", "16", "--decoder-ffn-embed-dim", "32",
    "--decoder-layers", "2", "--decoder-attention-heads", "4", "--share-decoder-input-output-embed",
]


def test_cli_train_resume_generate_interactive_both_sides(cli_roundtrip):
    # both sides: the decoder-side routing runs its incremental state through beam search
    cli_roundtrip(["--arch", "transformer_cross_agg", "--routing-side", "both", "--routing-init", "self", *TINY], beam=3)


def test_cli_ramp_counter_is_saved_and_reloaded_by_fairseqs_loader(tiny_data_bin, tmp_path):
    """fairseq-train feeds the ramp through set_num_updates (u = updates done before each
    step), the checkpoint keeps u, and fairseq-generate's loader gives the reloaded model
    the factor of that u: past N updates, r = 1 (Eq. 9 as written)."""
    save_dir = tmp_path / "checkpoints"
    run(fairseq_cli("train", str(tiny_data_bin), "--user-dir", USER_DIR, *TRAIN_DEFAULTS, "--arch",
                    "transformer_cross_agg", *TINY, "--routing-ramp-updates", "2", "--max-update", "3",
                    "--save-dir", str(save_dir)))
    checkpoint = str(save_dir / "checkpoint_last.pt")
    state = torch.load(checkpoint, weights_only=False)
    counters = {k: int(v) for k, v in state["model"].items() if k.endswith("cross_aggregation.num_updates")}
    assert len(counters) == 2 and set(counters.values()) == {2}  # the last step ran with u = 2
    assert state["optimizer_history"][-1]["num_updates"] == 3
    models, _, _ = checkpoint_utils.load_model_ensemble_and_task([checkpoint])
    factors = {m.ramp_factor for m in models[0].modules() if hasattr(m, "ramp_updates")}
    assert factors == {1.0}


def test_cli_gradient_stopped_for_the_first_updates_is_the_stopped_run_continued_as_eq9(tiny_data_bin, tmp_path):
    """fairseq-train with --routing-stop-gradient-updates 2 for 3 updates is, bit for bit, a run
    with --routing-stop-gradient for 2 updates resumed for a third without it (Eq. 9's gradient):
    the switch follows fairseq's own update count, at the update it names."""
    def train(save_dir, max_update, *options):
        run(fairseq_cli("train", str(tiny_data_bin), "--user-dir", USER_DIR, *TRAIN_DEFAULTS, "--arch",
                        "transformer_cross_agg", *TINY, *options, "--max-update", str(max_update),
                        "--save-dir", str(save_dir)))
        return torch.load(save_dir / "checkpoint_last.pt", weights_only=False)["model"]

    switched = train(tmp_path / "switched", 3, "--routing-stop-gradient-updates", "2")
    train(tmp_path / "reference", 2, "--routing-stop-gradient")
    reference = train(tmp_path / "reference", 3)
    assert switched.keys() == reference.keys()
    for name, value in reference.items():
        assert torch.equal(switched[name], value), name
    # and the stop did something inside fairseq-train: Eq. 9 throughout trains other weights
    plain = train(tmp_path / "plain", 3)
    assert not torch.equal(plain["encoder.layers.0.self_attn.q_proj.weight"],
                           reference["encoder.layers.0.self_attn.q_proj.weight"])
