"""Raw CJK text through fairseq's own entry points with the plugin's tokenizers
(fairseq_ctx/tokenizers.py): the hub interface (from_pretrained(...).translate) and
fairseq-interactive with --tokenizer jieba --bpe subword_nmt, on a model trained through
the real fairseq-train CLI; and --tokenizer mecab on real Japanese."""
import argparse
import re

import pytest

from tests.conftest import TRAIN_DEFAULTS, USER_DIR, fairseq_cli, run

# on one parallel test worker (scripts/run-tests.sh): its trained model (trained) is made once
pytestmark = pytest.mark.xdist_group("test_hub_translate")

TINY = [
    "--arch", "transformer_sentential", "--sentential-global", "attention", "--sentential-deep", "rnn",
    "--encoder-embed-dim", "16", "--encoder-ffn-embed-dim", "32", "--encoder-layers", "2",
    "--encoder-attention-heads", "2", "--decoder-embed-dim", "16", "--decoder-ffn-embed-dim", "32",
    "--decoder-layers", "2", "--decoder-attention-heads", "2", "--share-decoder-input-output-embed",
]  # fmt: skip
N = 5  # raw test sentences to translate


def lines(path, n=None):
    with open(path, encoding="utf-8") as handle:
        out = [line.rstrip("\n") for line in handle]
    return out[:n] if n else out


@pytest.fixture(scope="module")
def trained(tiny_corpus, tmp_path_factory):
    save_dir = tmp_path_factory.mktemp("hub") / "checkpoints"
    run(fairseq_cli("train", str(tiny_corpus / "bin"), "--user-dir", USER_DIR, *TRAIN_DEFAULTS, *TINY,
                    "--save-dir", str(save_dir), "--max-update", "3"))
    assert (save_dir / "checkpoint_last.pt").exists()
    return save_dir


def test_hub_translates_raw_chinese_tokenised_as_the_data_preparation_did(tiny_corpus, trained):
    from fairseq.models.transformer import TransformerModel

    from fairseq_ctx.data.tokenize import tokenizer
    from fairseq_ctx.tokenizers import JiebaTokenizer

    hub = TransformerModel.from_pretrained(
        str(trained), checkpoint_file="checkpoint_last.pt", data_name_or_path=str(tiny_corpus / "bin"),
        tokenizer="jieba", bpe="subword_nmt", bpe_codes=str(tiny_corpus / "bpe" / "codes.zh"),
        user_dir=USER_DIR, beam=2, max_len_b=20)
    assert isinstance(hub.tokenizer, JiebaTokenizer)
    # no languages given: inferred from the data directory, as the task does
    assert (hub.tokenizer.source_lang, hub.tokenizer.target_lang) == ("zh", "en")

    raw = lines(tiny_corpus / "raw" / "test.zh", N)
    jieba_zh = tokenizer("zh")
    for sentence, tok, bpe in zip(raw, lines(tiny_corpus / "tok" / "test.zh", N),
                                  lines(tiny_corpus / "bpe" / "test.zh", N)):
        assert " " not in sentence  # raw Chinese: the segmentation must come from the tokenizer
        assert hub.tokenize(sentence) == tok == jieba_zh(sentence)
        assert hub.apply_bpe(hub.tokenize(sentence)) == bpe  # exactly the binarized source

    translations = hub.translate(raw)
    assert len(translations) == N
    for translation in translations:
        assert isinstance(translation, str) and translation.strip()
        assert "@@" not in translation
    single = hub.translate(raw[0])
    assert isinstance(single, str) and single.strip()


def test_interactive_translates_raw_chinese(tiny_corpus, trained):
    from fairseq_ctx.data.tokenize import detokenizer

    # training sentences: every subword is in the dictionary, so S- shows no <unk>
    raw = lines(tiny_corpus / "raw" / "train.zh", N)
    proc = run(fairseq_cli(
        "interactive", str(tiny_corpus / "bin"), "--user-dir", USER_DIR,
        "--path", str(trained / "checkpoint_last.pt"), "--source-lang", "zh", "--target-lang", "en",
        "--tokenizer", "jieba", "--bpe", "subword_nmt", "--bpe-codes", str(tiny_corpus / "bpe" / "codes.zh"),
        "--beam", "2", "--buffer-size", "8", "--batch-size", "8", "--required-batch-size-multiple", "1",
        "--max-len-b", "20"), input="\n".join(raw) + "\n")
    out = proc.stdout

    hypotheses = re.findall(r"^H-(\d+)\t\S+\t(.*)$", out, flags=re.M)
    assert sorted(int(i) for i, _ in hypotheses) == list(range(N)), out[-2000:]
    # S- is the source as the model saw it: jieba + BPE, identical to the binarized training set
    sources = dict(re.findall(r"^S-(\d+)\t(.*)$", out, flags=re.M))
    assert [sources[str(i)] for i in range(N)] == lines(tiny_corpus / "bpe" / "train.zh", N)
    # D- is the hypothesis after BPE removal and the tokenizer's decode: Moses for en
    detok = dict(re.findall(r"^D-(\d+)\t\S+\t(.*)$", out, flags=re.M))
    moses_en = detokenizer("en")
    for i, hypothesis in hypotheses:
        assert detok[i] == moses_en((hypothesis + " ").replace("@@ ", "").strip())


def build(name, source_lang, target_lang, **kwargs):
    import fairseq_ctx  # noqa: F401  (registers the tokenizers)
    from fairseq.data import encoders

    kwargs.setdefault("data", None)
    return encoders.build_tokenizer(argparse.Namespace(
        tokenizer=name, source_lang=source_lang, target_lang=target_lang, **kwargs))


def test_mecab_encodes_and_decodes_real_japanese():
    from fairseq_ctx.data.tokenize import tokenizer

    sentence = "私は昨日、東京駅で友達に会いました。"
    ja_en = build("mecab", "ja", "en")
    encoded = ja_en.encode(sentence)
    assert encoded == tokenizer("ja")(sentence)
    assert encoded.split() == ["私", "は", "昨日", "、", "東京", "駅", "で", "友達", "に", "会い", "まし", "た", "。"]
    assert ja_en.decode("I met a friend at Tokyo Station yesterday .") == "I met a friend at Tokyo Station yesterday."

    en_ja = build("mecab", "en", "ja")
    assert en_ja.encode("I met a friend yesterday.") == "I met a friend yesterday ."
    assert en_ja.decode(encoded) == sentence


def test_jieba_decodes_chinese_target_and_normalizes_a_moses_source_on_request(tmp_path):
    from fairseq_ctx.data.pretokenize import tokenize_file

    sentence = "«Hello», he said."
    en_zh = build("jieba", "en", "zh")
    assert en_zh.encode(sentence) == "« Hello » , he said ."
    assert en_zh.decode("他们 企图 暗杀 总统 。") == "他们企图暗杀总统。"

    # --normalize-punctuation: as the WMT / ASPEC preparation (pretokenize without --no-normalize)
    (tmp_path / "raw.en").write_text(sentence + "\n", encoding="utf-8")
    tokenize_file("en", str(tmp_path / "raw.en"), str(tmp_path / "tok.en"), workers=1, normalize=True)
    prepared = (tmp_path / "tok.en").read_text(encoding="utf-8").rstrip("\n")
    assert prepared == '" Hello , " he said .'
    assert build("jieba", "en", "zh", normalize_punctuation=True).encode(sentence) == prepared


@pytest.mark.parametrize("name,src,tgt", [("jieba", "ja", "en"), ("mecab", "zh", "en"), ("jieba", "de", "en"),
                                          ("jieba", "zh", "ja"), ("mecab", None, "en"), ("jieba", None, None)])
def test_tokenizer_refuses_a_pair_it_cannot_handle(name, src, tgt):
    with pytest.raises(ValueError, match=f"--tokenizer {name}"):
        build(name, src, tgt)


def test_languages_are_inferred_from_the_data_directory_as_the_task_does(tiny_corpus):
    """fairseq's translation task infers a missing --source-lang / --target-lang from the data
    directory but keeps the result to itself: the tokenizer infers it the same way."""
    tokenizer = build("jieba", None, None, data=str(tiny_corpus / "bin"))
    assert (tokenizer.source_lang, tokenizer.target_lang) == ("zh", "en")
    assert tokenizer.decode("I 'm here .") == "I'm here."
