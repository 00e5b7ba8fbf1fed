"""Train / apply a SentencePiece model on pre-tokenised text (Iida et al.: MeCab / Moses
first, then SentencePiece with 32,000 pieces per language, so no piece crosses a token
boundary). Marker tokens (e.g. the 2-to-2 ``<CONCAT>``) are kept whole as
user-defined symbols.

Usage:
  python -m fairseq_ctx.data.sentencepiece_model train --input tok/train.ja --model-prefix spm.ja --vocab-size 32000
  python -m fairseq_ctx.data.sentencepiece_model encode --model spm.ja.model --input a b --output x y [--workers N]

Encoding runs on worker processes (streaming.parallel_map_lines: in order, bounded, atomic
output, a progress bar); lines are split at "\n" (tokeniser outputs hold no other separator).
"""
import argparse
import os

from .streaming import default_workers, parallel_map_lines


def train(input_path, model_prefix, vocab_size, symbols=(), character_coverage=0.9995):
    import sentencepiece as spm
    import sys
    import time

    started = time.time()
    # the library's own log is off (thousands of lines); say what runs, it takes minutes
    print(f"sentencepiece: training {model_prefix}.model on {input_path} (vocabulary {vocab_size}) ...",
          file=sys.stderr, flush=True)

    spm.SentencePieceTrainer.train(
        input=input_path, model_prefix=model_prefix, vocab_size=vocab_size,
        character_coverage=character_coverage, model_type="unigram",
        # fairseq builds its own dictionary from the pieces; keep SentencePiece's
        # specials out of the text (no <s>/</s> ever appear in the encoded lines)
        user_defined_symbols=list(symbols), hard_vocab_limit=False,
        input_sentence_size=10_000_000, shuffle_input_sentence=True,
        minloglevel=2,
    )
    print(f"sentencepiece: {model_prefix}.model trained in {time.time() - started:.0f} s", file=sys.stderr)


_processor = None


def _load(model):
    global _processor
    import sentencepiece as spm

    _processor = spm.SentencePieceProcessor(model_file=model)


def _encode_line(line):
    return " ".join(_processor.encode(line.strip(), out_type=str))


def encode_file(model, src, dst, workers=1):
    """``src`` encoded into pieces with ``model``, one line per line, into ``dst``."""
    parallel_map_lines(src, dst, _encode_line, f"sentencepiece {os.path.basename(src)}", workers,
                       initializer=_load, initargs=(model,))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train")
    t.add_argument("--input", required=True)
    t.add_argument("--model-prefix", required=True)
    t.add_argument("--vocab-size", type=int, default=32000)
    t.add_argument("--symbol", action="append", default=[], help="user-defined symbol kept whole (repeatable)")
    e = sub.add_parser("encode")
    e.add_argument("--model", required=True)
    e.add_argument("--input", nargs="+", required=True)
    e.add_argument("--output", nargs="+", required=True)
    e.add_argument("--workers", type=int, default=default_workers(), help="processes (default: the CPUs this job may use)")
    args = parser.parse_args(argv)
    if args.command == "train":
        train(args.input, args.model_prefix, args.vocab_size, args.symbol)
        return
    if len(args.input) != len(args.output):
        parser.error("--input and --output need the same number of files")
    for src, dst in zip(args.input, args.output):
        encode_file(args.model, src, dst, args.workers)


if __name__ == "__main__":
    main()
