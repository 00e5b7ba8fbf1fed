"""Train / apply a SentencePiece model on pre-tokenised text (Iida et al.: MeCab / Moses
first, then SentencePiece with 32,000 pieces per language, so no piece crosses a token
boundary). Marker tokens (e.g. the 2-to-2 ``<CONCAT>``) are kept whole as
user-defined symbols.

Usage:
  python -m fairseq_ctx.data.sentencepiece_model train --input tok/train.ja --model-prefix spm.ja --vocab-size 32000
  python -m fairseq_ctx.data.sentencepiece_model encode --model spm.ja.model --input a b --output x y
"""
import argparse
import os

from ..atomic import atomic_write
from .streaming import progress


def train(input_path, model_prefix, vocab_size, symbols=(), character_coverage=0.9995):
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(
        input=input_path, model_prefix=model_prefix, vocab_size=vocab_size,
        character_coverage=character_coverage, model_type="unigram",
        # fairseq builds its own dictionary from the pieces; keep SentencePiece's
        # specials out of the text (no <s>/</s> ever appear in the encoded lines)
        user_defined_symbols=list(symbols), hard_vocab_limit=False,
        input_sentence_size=10_000_000, shuffle_input_sentence=True,
        minloglevel=2,
    )


def encode(model, lines):
    import sentencepiece as spm

    processor = spm.SentencePieceProcessor(model_file=model)
    for line in lines:
        yield " ".join(processor.encode(line.strip(), out_type=str))


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
    args = parser.parse_args(argv)
    if args.command == "train":
        train(args.input, args.model_prefix, args.vocab_size, args.symbol)
        return
    if len(args.input) != len(args.output):
        parser.error("--input and --output need the same number of files")
    for src, dst in zip(args.input, args.output):
        with open(src, encoding="utf-8") as handle, atomic_write(dst) as out:  # streaming
            lines = progress(handle, f"sentencepiece {os.path.basename(src)}")
            out.writelines(line + "\n" for line in encode(args.model, lines))


if __name__ == "__main__":
    main()
