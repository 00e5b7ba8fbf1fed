"""transformer_context_aware through the real fairseq CLI (train, resume, generate with
beam search, interactive), with context on both sides so that beam search reorders the
decoder's running prefix sums as well as the attention caches. With the (not-in-the-paper) gate
bias, so that its parameter goes through a checkpoint, a resume, generate and interactive too
(without it, the demo's context-aware row is trained and translated in tests/test_demo.py), and
dropout on C U (not in the paper either), so that a model trained with it goes the same road (that
it is the identity in generation is pinned by tests/test_context_aware_model.py); and the pairing
and exact resume of --context-dropout runs through fairseq-train."""
import os
import re

import torch

import fairseq_ctx.models  # noqa: F401
from tests.conftest import TRAIN_DEFAULTS, USER_DIR, fairseq_cli, run

TINY = [
    "--encoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32", "--encoder-layers", "2",
    "--encoder-attention-heads", "2", "--decoder-embed-dim", "16", "--decoder-ffn-embed-dim", "32",
    "--decoder-layers", "2", "--decoder-attention-heads", "2", "--share-decoder-input-output-embed",
]


def test_cli_train_resume_generate_interactive_both_sides(cli_roundtrip):
    cli_roundtrip(
        ["--arch", "transformer_context_aware", "--encoder-context", "deep_global+deep",
         "--decoder-context", "deep_global+deep", "--context-gate-bias", "-2",
         "--context-dropout", "0.1", *TINY],
        beam=3,
    )


def test_context_dropout_keeps_the_stock_training_noise_and_resumes_exactly(tiny_corpus, tmp_path):
    """Through fairseq-train (stock --dropout on, 2 micro-batches per update): a run with a
    vanishing --context-dropout logs exactly the losses of the run without it (the same start
    and the same stock dropout masks: the pairing the initialisation study's arm 14 relies on);
    with 0.5 the losses move; and 2 updates + a resume to 4 end with the weights of 4 updates in
    one go (the masks are keyed to fairseq's per-update seed, not to the process)."""
    data = str(tiny_corpus / "bin")
    args = ["--arch", "transformer_context_aware", "--encoder-context", "deep_global+deep", *TINY,
            "--update-freq", "2", "--attention-dropout", "0.1"]

    def train(name, updates, *extra):
        save_dir = str(tmp_path / name)
        proc = run([*fairseq_cli("train", data, "--user-dir", USER_DIR, *TRAIN_DEFAULTS, *args, *extra,
                                 "--save-dir", save_dir, "--max-update", str(updates))])
        losses = re.findall(r"train_inner \|.*? loss=([0-9.]+)", proc.stdout + proc.stderr)
        return losses, os.path.join(save_dir, "checkpoint_last.pt")

    def weights(checkpoint):
        return torch.load(checkpoint, map_location="cpu", weights_only=False)["model"]

    plain, _ = train("plain", 4)
    vanishing, _ = train("vanishing", 4, "--context-dropout", "1e-9")
    dropped, in_one_go = train("dropped", 4, "--context-dropout", "0.5")
    assert len(plain) == 4 and vanishing == plain
    assert dropped != plain
    train("resumed", 2, "--context-dropout", "0.5")
    resumed, after_resume = train("resumed", 4, "--context-dropout", "0.5")
    assert resumed == dropped[2:]
    expected, got = weights(in_one_go), weights(after_resume)
    assert sorted(expected) == sorted(got)
    for name in expected:
        assert torch.equal(expected[name], got[name]), name
