"""Tokenise a large file in parallel with the project's tokenisers (fairseq_ctx.data.tokenize:
jieba / MeCab (fugashi + unidic-lite) / Moses), in order, written atomically.

Moses' punctuation normalisation (normalize-punctuation.perl, as in the WMT scripts) is
applied first for languages other than zh / ja unless --no-normalize.

Usage: python -m fairseq_ctx.data.pretokenize --lang de --input raw/train.de raw/test.de
           --output tok/train.de tok/test.de [--workers 8]
"""
import argparse
import os

from .streaming import default_workers, parallel_map_lines
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
    """Tokenise ``src`` into ``dst`` (atomically), in order, streaming on ``workers``
    processes (``streaming.parallel_map_lines``)."""
    parallel_map_lines(src, dst, _tokenize, f"tokenise {os.path.basename(src)}", workers,
                       initializer=_init, initargs=(lang, normalize))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lang", required=True)
    parser.add_argument("--input", nargs="+", required=True)
    parser.add_argument("--output", nargs="+", required=True)
    parser.add_argument("--workers", type=int, default=default_workers())
    parser.add_argument("--no-normalize", action="store_true")
    args = parser.parse_args(argv)
    if len(args.input) != len(args.output):
        parser.error("--input and --output need the same number of files")
    for src, dst in zip(args.input, args.output):
        tokenize_file(args.lang, src, dst, args.workers, not args.no_normalize)


if __name__ == "__main__":
    main()
