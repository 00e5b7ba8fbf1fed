"""fairseq_ctx.evaluate: every sentence accounted for, corpus order, sacreBLEU with signature."""
import pytest

from fairseq_ctx.evaluate import evaluate, parse_hypotheses, score
from tests.conftest import TINY_TEST_SENTENCES

GENERATE_OUTPUT = "S-1\tb\nH-1\t-0.5\tsecond\nD-1\t-0.5\tsecond\nS-0\ta\nH-0\t-0.1\tfirst\n"


def test_hypotheses_are_returned_in_corpus_order():
    assert parse_hypotheses(GENERATE_OUTPUT, 2) == ["first", "second"]


def test_a_dropped_sentence_is_an_error_not_a_lower_score():
    with pytest.raises(RuntimeError, match=r"translated 2 sentences but the reference has 3: missing ids \[2\]"):
        parse_hypotheses(GENERATE_OUTPUT, 3)


def test_duplicate_hypotheses_are_rejected():
    with pytest.raises(RuntimeError, match="more than one hypothesis"):
        parse_hypotheses(GENERATE_OUTPUT + "H-0\t-0.2\tagain\n", 2)


def test_score_reports_sacrebleu_signature_and_tokenizer_per_language():
    perfect = score(["The cat sat on the mat."], ["The cat sat on the mat."], "en")
    assert perfect["bleu"] == 100.0 and "tok:13a" in perfect["signature"]
    assert "tok:zh" in score(["猫坐在垫子上。"], ["猫坐在垫子上。"], "zh")["signature"]


def test_stock_transformer_cli_roundtrip_then_evaluate_every_sentence(cli_roundtrip, tiny_corpus, tmp_path):
    """Foundation check: train -> resume -> generate -> interactive on real data, then score."""
    arch = ["--arch", "transformer", "--encoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32",
            "--encoder-layers", "1", "--encoder-attention-heads", "2", "--decoder-embed-dim", "16",
            "--decoder-ffn-embed-dim", "32", "--decoder-layers", "1", "--decoder-attention-heads", "2"]
    result = cli_roundtrip(arch)
    assert len(result["hypotheses"]) == TINY_TEST_SENTENCES
    checkpoint = str(tmp_path / "checkpoints" / "checkpoint_last.pt")
    scored = evaluate(str(tiny_corpus / "bin"), checkpoint, "zh", "en", str(tiny_corpus / "raw" / "test.en"),
                      beam=2, out_dir=str(tmp_path / "eval"), extra_args=["--max-len-b", "10"])
    assert scored["sentences"] == TINY_TEST_SENTENCES and 0.0 <= scored["bleu"] <= 100.0
    assert scored["signature"].startswith("nrefs:1|") and (tmp_path / "eval" / "bleu.json").exists()
    with open(tmp_path / "eval" / "hyp.detok.en", encoding="utf-8") as handle:
        assert len(handle.read().splitlines()) == TINY_TEST_SENTENCES
