"""BLEU of a Japanese target: sacreBLEU's ja-mecab tokenizer (needs mecab-python3 + ipadic,
the sacrebleu[ja] extra, in requirements/tools.txt) and the papers' tokenised BLEU
(fugashi + unidic-lite)."""
from fairseq_ctx.evaluation import scoring
from fairseq_ctx.evaluation.scoring import sacrebleu_tokenizer, score

REFERENCES = ["私は昨日友達と映画を見に行きました。", "この本はとても面白いです。", "駅までどのくらいかかりますか。"]
HYPOTHESES = ["私は昨日友達と映画を見ました。", "この本はとても面白い。", "駅までどれくらいかかりますか。"]


def test_sacrebleu_scores_a_japanese_target_with_ja_mecab():
    assert sacrebleu_tokenizer("ja") == "ja-mecab"
    result = score(HYPOTHESES, REFERENCES, "ja")
    assert "tok:ja-mecab" in result["signature"]
    # MeCab segments the unspaced text: partial matches score between 0 and 100 (with the
    # default 13a tokenizer each sentence would be one "word" and the BLEU would be 0)
    assert 10.0 < result["bleu"] < 100.0
    assert score(REFERENCES, REFERENCES, "ja")["bleu"] == 100.0


def test_tokenized_bleu_of_a_japanese_target():
    result = scoring.tokenized_bleu(HYPOTHESES, REFERENCES, "ja")
    assert result["signature"].endswith("|pretok:ja") and result["compound_split"] is False
    assert 10.0 < result["bleu"] < 100.0
    assert scoring.tokenized_bleu(REFERENCES, REFERENCES, "ja")["bleu"] == 100.0
    assert 10.0 < scoring.sacre_bleu(HYPOTHESES, REFERENCES, "ja") < 100.0
