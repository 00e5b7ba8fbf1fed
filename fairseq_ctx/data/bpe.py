"""subword-nmt BPE on every core: learn merges and apply them to large files.

The segmentation is subword-nmt's own (``subword_nmt.apply_bpe.BPE``,
``subword_nmt.learn_bpe.learn_bpe``); this module only drives it:

* apply: subword-nmt's CLI (0.3.8) ignores ``--num-workers`` for ``apply-bpe`` and
  ``learn-bpe``, and its parallel ``process_lines`` drops a worker's exception (an
  ``apply_async`` never waited on) and spools through ``$TMPDIR``. Here the lines go
  through ``streaming.parallel_map_lines``: in order, a bounded round at a time, worker
  errors raised, the output written atomically, a progress bar with the line count.
  Byte-identical to ``subword-nmt apply-bpe`` on one core (tested).
* learn: ``learn_bpe`` with ``num_workers`` (its vocabulary count runs on every core;
  the merges are learned on one, as in subword-nmt), written atomically. Its workers'
  temporary files go to ``--tmp-dir`` (default: beside the output), not to ``$TMPDIR``,
  which on a cluster node is often small.

Usage:
  python -m fairseq_ctx.data.bpe learn --symbols 32000 --input tok/train.de --output codes.de [--workers N]
  python -m fairseq_ctx.data.bpe apply --codes codes.de --input tok/train.de tok/valid.de
      --output bpe/train.de bpe/valid.de [--workers N]
"""
import argparse
import codecs
import os
import tempfile

from ..atomic import atomic_write
from .streaming import parallel_map_lines

_bpe = None


def _load_codes(codes_path):
    global _bpe
    from subword_nmt.apply_bpe import BPE

    with codecs.open(codes_path, encoding="utf-8") as codes:
        _bpe = BPE(codes)


def _segment(line):
    # process_line keeps the line's leading / trailing whitespace, as the CLI does
    return _bpe.process_line(line)


def apply_file(codes, src, dst, workers=1):
    """``src`` segmented with the merges in ``codes`` into ``dst``."""
    parallel_map_lines(src, dst, _segment, f"apply-bpe {os.path.basename(src)}", workers,
                       initializer=_load_codes, initargs=(codes,))


def learn_file(src, dst, symbols, workers=1, min_frequency=2, tmp_dir=None):
    """Learn ``symbols`` merges on ``src`` into ``dst`` (subword-nmt's learn-bpe)."""
    from subword_nmt.learn_bpe import learn_bpe

    tmp_dir = tmp_dir or os.path.dirname(os.path.abspath(dst))
    previous = tempfile.tempdir
    tempfile.tempdir = tmp_dir  # where get_vocabulary's workers spool their counts
    try:
        with open(src, encoding="utf-8") as infile, atomic_write(dst) as outfile:
            learn_bpe(infile, outfile, symbols, min_frequency=min_frequency, num_workers=workers)
    finally:
        tempfile.tempdir = previous


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    learn = commands.add_parser("learn", help="learn BPE merges (subword-nmt learn-bpe)")
    learn.add_argument("--symbols", "-s", type=int, required=True, help="number of merge operations")
    learn.add_argument("--min-frequency", type=int, default=2)
    learn.add_argument("--input", required=True)
    learn.add_argument("--output", required=True)
    learn.add_argument("--tmp-dir", help="workers' temporary files (default: the output's directory)")
    apply = commands.add_parser("apply", help="apply BPE merges (subword-nmt apply-bpe)")
    apply.add_argument("--codes", "-c", required=True)
    apply.add_argument("--input", nargs="+", required=True)
    apply.add_argument("--output", nargs="+", required=True)
    for sub in (learn, apply):
        sub.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    if args.workers < 1:
        parser.error(f"--workers must be >= 1, got {args.workers}")
    if args.command == "learn":
        learn_file(args.input, args.output, args.symbols, args.workers, args.min_frequency, args.tmp_dir)
    else:
        if len(args.input) != len(args.output):
            parser.error("--input and --output need the same number of files")
        for src, dst in zip(args.input, args.output):
            apply_file(args.codes, src, dst, args.workers)


if __name__ == "__main__":
    main()
