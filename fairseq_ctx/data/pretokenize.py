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
from .streaming import progress
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


BLOCK = 20000  # lines per worker per round: memory is bounded by workers x BLOCK lines


def _blocks(lines, size):
    block = []
    for line in lines:
        block.append(line)
        if len(block) == size:
            yield block
            block = []
    if block:
        yield block


def tokenize_file(lang, src, dst, workers=1, normalize=True):
    """Tokenise ``src`` into ``dst`` (atomically), in order, streaming: a round of
    ``workers`` blocks is read, tokenised in parallel and written before the next is read
    (Pool.imap would queue the whole file: its feeder reads the input as fast as it can)."""
    with open(src, encoding="utf-8") as handle, atomic_write(dst) as out:
        lines = progress((line.rstrip("\n") for line in handle), f"tokenise {os.path.basename(src)}")
        if workers > 1:
            with multiprocessing.get_context("fork").Pool(workers, _init, (lang, normalize)) as pool:
                for round_ in _blocks(lines, workers * BLOCK):
                    out.writelines(line + "\n" for line in pool.map(_tokenize, round_, chunksize=2000))
        else:
            _init(lang, normalize)
            for line in lines:
                out.write(_tokenize(line) + "\n")


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
