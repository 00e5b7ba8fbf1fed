"""Tokenise a large file in parallel with the project's tokenisers (fairseq_ctx.data.tokenize:
jieba / MeCab (fugashi + unidic-lite) / Moses), in order, written atomically.

Moses' punctuation normalisation (normalize-punctuation.perl, as in the WMT scripts) is
applied first for languages other than zh / ja unless --no-normalize.

Usage: python -m fairseq_ctx.data.pretokenize --lang de --input raw/train.de raw/test.de
           --output tok/train.de tok/test.de [--workers 8]
"""
import argparse
import multiprocessing
import os

from ..atomic import atomic_write
from .tokenize import tokenizer

_worker_fn = None


def _init(lang, normalize):
    global _worker_fn
    tok = tokenizer(lang)
    if normalize and lang not in ("zh", "ja"):
        from sacremoses import MosesPunctNormalizer

        norm = MosesPunctNormalizer(lang=lang)
        _worker_fn = lambda line: tok(norm.normalize(line).strip())  # noqa: E731
    else:
        _worker_fn = tok


def _tokenize(line):
    return _worker_fn(line.strip())


def tokenize_file(lang, src, dst, workers=1, normalize=True):
    with open(src, encoding="utf-8") as handle:
        lines = [line.rstrip("\n") for line in handle]
    if workers > 1 and len(lines) > 10000:
        with multiprocessing.get_context("fork").Pool(workers, _init, (lang, normalize)) as pool:
            out = pool.map(_tokenize, lines, chunksize=2000)
    else:
        _init(lang, normalize)
        out = [_tokenize(line) for line in lines]
    with atomic_write(dst) as handle:
        handle.writelines(line + "\n" for line in out)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lang", required=True)
    parser.add_argument("--input", nargs="+", required=True)
    parser.add_argument("--output", nargs="+", required=True)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--no-normalize", action="store_true")
    args = parser.parse_args(argv)
    if len(args.input) != len(args.output):
        parser.error("--input and --output need the same number of files")
    for src, dst in zip(args.input, args.output):
        tokenize_file(args.lang, src, dst, args.workers, not args.no_normalize)


if __name__ == "__main__":
    main()
