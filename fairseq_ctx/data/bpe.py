"""subword-nmt BPE on every core: learn merges and apply them to large files.

The segmentation and the merge learning are subword-nmt's own (``subword_nmt.apply_bpe.BPE``,
``subword_nmt.learn_bpe.learn_bpe``); this module only drives them, because subword-nmt's CLI
(0.3.8) runs ``learn-bpe`` and ``apply-bpe`` on one core whatever ``--num-workers`` says, and
its parallel paths lose a worker's exception and spool through ``$TMPDIR``:

* apply: the lines go through ``streaming.parallel_map_lines`` (in order, bounded, worker
  errors raised, output atomic, a progress bar).
* learn: the word counts are made by our workers (``streaming.map_line_blocks``, with a bar),
  summed and handed to ``learn_bpe`` as its dictionary input; the
  merges are learned on one core, as in subword-nmt, with a bar. Several inputs give joint
  BPE (what ``learn-joint-bpe-and-vocab`` learns, without its second BPE pass over the
  training data to write vocabularies nothing here reads).

Same bytes as subword-nmt on one core (tested) for text whose only line separator is "\n":
subword-nmt's CLI reads through ``codecs``, which also splits lines at \r, \x0b, \x0c,
\x1c-\x1e, \x85, U+2028 and U+2029; here lines end at "\n" only, and every output line ends
with "\n", the last one too. The preparation scripts' BPE inputs are tokeniser outputs, in
which the Moses / jieba / MeCab tokenisers have already turned every whitespace run into one
space, so they hold none of those separators.

Usage:
  python -m fairseq_ctx.data.bpe learn --symbols 32000 --input tok/train.de --output codes.de [--workers N]
  python -m fairseq_ctx.data.bpe learn --symbols 32000 --input tok/train.en tok/train.de --output codes  (joint)
  python -m fairseq_ctx.data.bpe apply --codes codes.de --input tok/train.de tok/valid.de
      --output bpe/train.de bpe/valid.de [--workers N]
"""
import argparse
import codecs
import collections
import io
import os
import sys

from ..atomic import atomic_write
from .streaming import default_workers, map_line_blocks, parallel_map_lines, progress

_bpe = None
# subword-nmt memoises every word it segments and never forgets: on a corpus whose vocabulary
# keeps growing (names, numbers, typos) each worker would grow with it. Emptied when this
# full (a few tens of MB); the output is the same, the frequent words come back at once.
CACHE_WORDS = 100_000


def _load_codes(codes_path):
    global _bpe
    from subword_nmt.apply_bpe import BPE

    with codecs.open(codes_path, encoding="utf-8") as codes:
        _bpe = BPE(codes)


def _segment(line):
    if len(_bpe.cache) > CACHE_WORDS:
        _bpe.cache.clear()
    # process_line keeps the line's leading / trailing whitespace, as the CLI does
    return _bpe.process_line(line)


def apply_file(codes, src, dst, workers=1):
    """``src`` segmented with the merges in ``codes`` into ``dst``."""
    parallel_map_lines(src, dst, _segment, f"apply-bpe {os.path.basename(src)}", workers,
                       initializer=_load_codes, initargs=(codes,))


def _count_words(lines):
    """subword-nmt's get_vocabulary on a block: words split at single spaces."""
    counts = collections.Counter()
    for line in lines:
        for word in line.strip("\r\n ").split(" "):
            if word:
                counts[word] += 1
    return counts


def word_counts(paths, workers=1):
    """Word counts of the files (keys in order of first occurrence, as subword-nmt counts;
    its merge choice breaks frequency ties by the pair itself, so the order does not matter)."""
    total = collections.Counter()
    for path in paths:
        for counts in map_line_blocks(path, _count_words, f"learn-bpe count {os.path.basename(path)}", workers):
            total.update(counts)
    return total


def learn_file(src, dst, symbols, workers=1, min_frequency=2):
    """Learn ``symbols`` merges on ``src`` (a path, or several for joint BPE) into ``dst``."""
    from subword_nmt import learn_bpe as learn_bpe_module

    paths = [src] if isinstance(src, str) else list(src)
    counts = word_counts(paths, workers)
    vocabulary = io.StringIO("".join(f"{word} {count}\n" for word, count in counts.items()))
    del counts
    plain_tqdm = learn_bpe_module.tqdm
    learn_bpe_module.tqdm = lambda iterable, *args, **kwargs: progress(
        iterable, "learn-bpe merges", unit="merges", total=len(iterable))
    try:
        with atomic_write(dst) as outfile:
            learn_bpe_module.learn_bpe(vocabulary, outfile, symbols, min_frequency=min_frequency, is_dict=True)
    finally:
        learn_bpe_module.tqdm = plain_tqdm
    learned = merges_in(dst)
    if learned < symbols:  # subword-nmt's own line ("no pair has frequency >= 2") is lost in the logs
        print(f"learn-bpe: warning: {learned:,} of {symbols:,} merges learned: after that no pair of symbols occurs "
              f"{min_frequency} times or more in {', '.join(paths)} (a corpus too small for this many merges: "
              "the vocabulary is smaller than asked)", file=sys.stderr, flush=True)
    return learned


def merges_in(codes):
    """The merges in a subword-nmt codes file (its '#version' header line not counted)."""
    with open(codes, encoding="utf-8") as handle:
        return sum(1 for line in handle if line.strip() and not line.startswith("#version"))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    learn = commands.add_parser("learn", help="learn BPE merges (subword-nmt learn-bpe)")
    learn.add_argument("--symbols", "-s", type=int, required=True, help="number of merge operations")
    learn.add_argument("--min-frequency", type=int, default=2)
    learn.add_argument("--input", nargs="+", required=True, help="one file, or several for joint BPE")
    learn.add_argument("--output", required=True)
    apply = commands.add_parser("apply", help="apply BPE merges (subword-nmt apply-bpe)")
    apply.add_argument("--codes", "-c", required=True)
    apply.add_argument("--input", nargs="+", required=True)
    apply.add_argument("--output", nargs="+", required=True)
    for sub in (learn, apply):
        sub.add_argument("--workers", type=int, default=default_workers(),
                         help="processes (default: the CPUs this job may use)")
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error(f"--workers must be >= 1, got {args.workers}")
    if args.command == "learn":
        learn_file(args.input, args.output, args.symbols, args.workers, args.min_frequency)
    else:
        if len(args.input) != len(args.output):
            parser.error("--input and --output need the same number of files")
        for src, dst in zip(args.input, args.output):
            apply_file(args.codes, src, dst, args.workers)


if __name__ == "__main__":
    main()
