"""BLEU by source-length bucket for several systems (Iida Tables 3-4, Yang Figure 5):
table + PNG from the detokenised hypotheses that fairseq-ctx-evaluate (scripts/evaluate.py) wrote.

Usage: fairseq-ctx-length-buckets --source raw/test.ja --ref raw/test.en --src ja --tgt en \
           --system "RNN baseline=results/base/eval/hyp.detok.en" --system "multi-hop=..." --out-dir DIR
"""
import argparse
import os
import sys

from ..atomic import atomic_write
from ..data.tokenize import tokenizer
from . import scoring


def read(path):
    with open(path, encoding="utf-8") as handle:
        return [line.rstrip("\n") for line in handle]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", required=True)
    parser.add_argument("--ref", required=True)
    parser.add_argument("--src", required=True)
    parser.add_argument("--tgt", required=True)
    parser.add_argument("--system", action="append", required=True, metavar="NAME=HYP")
    parser.add_argument("--width", type=int, default=10)
    parser.add_argument("--out-dir", required=True)
    args = parser.parse_args(argv)
    tok = tokenizer(args.src)
    lengths = [len(tok(line).split()) for line in read(args.source)]
    references = read(args.ref)
    series = {}
    for spec in args.system:
        name, _, path = spec.partition("=")
        series[name] = scoring.bleu_by_length(lengths, read(path), references, args.tgt, args.width)
    buckets = [r["bucket"] for r in next(iter(series.values()))]
    header = ["sentence length"] + buckets
    rows = [["number of sentences"] + [r["sentences"] for r in next(iter(series.values()))]]
    rows += [[name] + [r["bleu"] for r in data] for name, data in series.items()]
    table = scoring.markdown_table(header, rows)
    with atomic_write(os.path.join(args.out_dir, "length_buckets.md")) as handle:
        handle.write(table)
    try:
        scoring.plot_length_buckets(series, os.path.join(args.out_dir, "length_buckets.png"))
    except RuntimeError as error:
        print(f"length_buckets: {error}", file=sys.stderr)
    print(table)


if __name__ == "__main__":
    main()
