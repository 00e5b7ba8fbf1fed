"""transformer_context_aware through the real fairseq CLI (train, resume, generate with
beam search, interactive), with context on both sides so that beam search reorders the
decoder's running prefix sums as well as the attention caches. With the (not-in-the-paper) gate
bias, so that its parameter goes through a checkpoint, a resume, generate and interactive too, and
dropout on C U (not in the paper either), so that a model trained with it goes the same road (that it
is the identity in generation is pinned by tests/test_context_aware_model.py)
(without it, the demo's context-aware row is trained and translated in tests/test_demo.py)."""
import fairseq_ctx.models  # noqa: F401

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
