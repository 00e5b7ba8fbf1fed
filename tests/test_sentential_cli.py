"""transformer_sentential through the real fairseq CLI: train -> resume -> generate
(beam 2, every test sentence translated) -> interactive, for both deep aggregators."""
import pytest

TINY = [
    "--encoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32", "--encoder-layers", "2",
    "--encoder-attention-heads", "2", "--decoder-embed-dim", "16", "--decoder-ffn-embed-dim", "32",
    "--decoder-layers", "2", "--decoder-attention-heads", "2", "--share-decoder-input-output-embed",
]  # fmt: skip


@pytest.mark.parametrize("deep_type", ["rnn", "tam"])
def test_cli_train_resume_generate_interactive(cli_roundtrip, deep_type):
    cli_roundtrip(["--arch", "transformer_sentential", "--sentential-global", "attention",
                   "--sentential-deep", deep_type, *TINY], beam=2)  # fmt: skip
