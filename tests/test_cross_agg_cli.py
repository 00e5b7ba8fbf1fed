"""transformer_cross_agg through the real fairseq CLI: train -> resume -> generate (beam) -> interactive."""

TINY = [
    "--encoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32", "--encoder-layers", "2",
    "--encoder-attention-heads", "4", "--decoder-embed-dim", "16", "--decoder-ffn-embed-dim", "32",
    "--decoder-layers", "2", "--decoder-attention-heads", "4", "--share-decoder-input-output-embed",
]


def test_cli_train_resume_generate_interactive_both_sides(cli_roundtrip):
    # both sides: the decoder-side routing runs its incremental state through beam search
    cli_roundtrip(["--arch", "transformer_cross_agg", "--routing-side", "both", "--routing-init", "self", *TINY], beam=3)
