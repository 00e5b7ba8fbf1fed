"""fairseq tokenizers for the CJK pairs: ``--tokenizer jieba`` (zh) and ``--tokenizer mecab`` (ja).

They make ``fairseq-interactive`` and the hub interface (``from_pretrained(...).translate``)
take raw text, tokenised exactly as the data preparation did (``fairseq_ctx.data.tokenize``).

fairseq has one ``--tokenizer`` for both sides: it applies ``encode`` to the source and
``decode`` to the hypothesis. So, like fairseq's own ``moses`` tokenizer, these tokenise
for the source language and detokenise for the target language. The languages are
``--source-lang`` / ``--target-lang`` (hub: ``source_lang=`` / ``target_lang=``) or else,
as the translation task does, inferred from the data directory's file names
(``train.zh-en.zh.bin``): the task keeps what it infers to itself, so the tokenizer
infers it again from the same directory.

* encode: ``tokenizer(source_lang)``: jieba for zh, MeCab (fugashi + unidic-lite) for ja,
  Moses (escaping off) for any other language;
* decode: ``detokenizer(target_lang)``: spaces removed for zh / ja, Moses detokenisation
  otherwise.

So zh->en encodes with jieba and decodes with Moses (en); en->zh encodes with Moses and
decodes by joining. The name says which CJK language the pair must contain: ``jieba``
refuses a pair without zh (or with ja), ``mecab`` a pair without ja (or with zh).
"""
from dataclasses import dataclass, field
from typing import Optional

from fairseq import utils
from fairseq.data import data_utils
from fairseq.data.encoders import register_tokenizer
from fairseq.dataclass import FairseqDataclass
from omegaconf import II

from .data.tokenize import detokenizer, tokenizer

CJK = ("zh", "ja")


@dataclass
class CJKTokenizerConfig(FairseqDataclass):
    # No help text: fairseq's argparse layer then leaves --source-lang / --target-lang and the
    # data directory to the task and copies their values here; the hub resolves the
    # interpolations against the checkpoint's task config (with from_pretrained's overrides).
    source_lang: Optional[str] = II("task.source_lang")
    target_lang: Optional[str] = II("task.target_lang")
    data: Optional[str] = II("task.data")
    normalize_punctuation: bool = field(default=False, metadata={
        "help": "apply Moses punctuation normalisation to a non-CJK source before tokenising "
                "(as scripts/data/prepare-wmt*.sh and prepare-aspec.sh do; prepare-tatoeba.sh does not)"})


class _CJKTokenizer:
    lang = None  # the CJK language the pair must contain

    def __init__(self, cfg):
        src, tgt, data = (_get(cfg, key) for key in ("source_lang", "target_lang", "data"))
        name = type(self).name
        if (not src or not tgt) and data:
            src, tgt = data_utils.infer_language_pair(utils.split_paths(data)[0])
        if not src or not tgt:
            raise ValueError(f"--tokenizer {name} needs the language pair: pass --source-lang and "
                             f"--target-lang (got {src!r} -> {tgt!r}, none inferred from data {data!r})")
        if self.lang not in (src, tgt) or any(l in CJK and l != self.lang for l in (src, tgt)):
            raise ValueError(f"--tokenizer {name} is for {self.lang}-X / X-{self.lang} pairs "
                             f"with X not in {CJK}, not {src}->{tgt}")
        self.source_lang, self.target_lang = src, tgt
        self._encode = tokenizer(src)
        self._decode = detokenizer(tgt)
        self._normalize = None
        if cfg.normalize_punctuation and src not in CJK:
            from sacremoses import MosesPunctNormalizer

            self._normalize = MosesPunctNormalizer(lang=src).normalize

    def encode(self, x: str) -> str:
        x = x.strip()
        if self._normalize is not None:
            x = self._normalize(x).strip()
        return self._encode(x)

    def decode(self, x: str) -> str:
        return self._decode(x)


def _get(cfg, key):
    try:
        return getattr(cfg, key, None)
    except Exception:  # an interpolation that does not resolve (e.g. a legacy Namespace task)
        return None


@register_tokenizer("jieba", dataclass=CJKTokenizerConfig)
class JiebaTokenizer(_CJKTokenizer):
    name, lang = "jieba", "zh"


@register_tokenizer("mecab", dataclass=CJKTokenizerConfig)
class MecabTokenizer(_CJKTokenizer):
    name, lang = "mecab", "ja"
