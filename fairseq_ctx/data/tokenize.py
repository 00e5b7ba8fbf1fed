"""Tokenise / detokenise one language, line by line (stdin -> stdout).

zh: jieba word segmentation; ja: MeCab via fugashi with unidic-lite; other languages:
sacremoses (Moses) tokenizer with escaping off, so detokenisation is exact.

Usage: python -m fairseq_ctx.data.tokenize --lang zh [--detok] < in > out
"""
import argparse
import logging
import sys


def tokenizer(lang):
    if lang == "zh":
        import jieba

        jieba.setLogLevel(logging.WARNING)
        jieba.initialize()  # the dictionary now, not at the first line: loaded once before workers fork
        return lambda line: " ".join(w for w in jieba.cut(line) if w.strip())
    if lang == "ja":
        import fugashi

        tagger = fugashi.Tagger()
        return lambda line: " ".join(word.surface for word in tagger(line))
    from sacremoses import MosesTokenizer

    moses = MosesTokenizer(lang=lang)
    return lambda line: moses.tokenize(line, escape=False, return_str=True)


def detokenizer(lang):
    if lang in ("zh", "ja"):
        # Segmenters only inserted spaces between CJK words; references keep the
        # original spacing, and sacreBLEU's zh / ja-mecab tokenisers re-segment.
        return lambda line: "".join(line.split())
    from sacremoses import MosesDetokenizer

    moses = MosesDetokenizer(lang=lang)
    return lambda line: moses.detokenize(line.split())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lang", required=True)
    parser.add_argument("--detok", action="store_true")
    args = parser.parse_args(argv)
    fn = (detokenizer if args.detok else tokenizer)(args.lang)
    for line in sys.stdin:
        sys.stdout.write(fn(line.strip()) + "\n")


if __name__ == "__main__":
    main()
