"""Evaluate a trained system as the papers do, and write everything the tables need.

1. average the last N checkpoints (``--average-last N``; fairseq_ctx.analysis.average),
2. fairseq-generate with ``--required-batch-size-multiple 1`` and the check that every
   sentence got exactly one hypothesis (fairseq_ctx.evaluate.generate / parse_hypotheses),
3. (2-to-2 systems, ``--strip-concat``) keep only the part after ``<CONCAT>``,
4. detokenise; sacreBLEU with its signature (fairseq_ctx.evaluate.score),
5. tokenised BLEU as the papers report it (compound splitting for En-De),
6. optional: paired bootstrap against a baseline's hypotheses, BLEU by source length
   (table + PNG).
Writes OUT/result.json (+ hyp.detok.<tgt>, generate.out, length.md / length.png).

Usage: fairseq-ctx-evaluate --data BIN --save-dir CKPTS --average-last 5 \
           --src en --tgt de --ref raw/test.de --source raw/test.en --out-dir results/row5 \
           [--baseline-hyp results/row1/hyp.detok.de] [--length-buckets] [--strip-concat] \
           [--remove-bpe sentencepiece] [--beam 4 --lenpen 0.6] [-- extra fairseq-generate args]
"""
import argparse
import json
import os
import sys

from ..atomic import atomic_write
from ..data.tokenize import detokenizer, tokenizer
from ..evaluate import generate, parse_hypotheses, score
from . import scoring


def read_lines(path):
    with open(path, encoding="utf-8") as handle:
        return [line.rstrip("\n") for line in handle]


def strip_concat(lines):
    from ..data.concat_context import strip_context

    return [strip_context(line) for line in lines]


def run(args):
    out_dir = args.out_dir
    os.makedirs(out_dir, exist_ok=True)
    checkpoint = args.path
    result = {}
    if args.average_last:
        from .average import average_last

        checkpoint = os.path.join(out_dir, f"average_last{args.average_last}.pt")
        result["averaged"] = [os.path.basename(p) for p in average_last(args.save_dir, args.average_last, checkpoint)]
    elif not checkpoint:
        checkpoint = os.path.join(args.save_dir, "checkpoint_best.pt")
    references = read_lines(args.ref)
    extra = ["--lenpen", str(args.lenpen), "--max-len-a", str(args.max_len_a), "--max-len-b", str(args.max_len_b)]
    if args.remove_bpe:
        extra += ["--remove-bpe", args.remove_bpe]  # overrides evaluate.generate's default "@@ "
    output = generate(args.data, checkpoint, args.src, args.tgt, args.subset, args.beam, args.batch_size,
                      extra + list(args.extra))
    hypotheses = parse_hypotheses(output, len(references))
    if args.strip_concat:
        hypotheses = strip_concat(hypotheses)
    detok = detokenizer(args.tgt)
    hypotheses = [detok(h) for h in hypotheses]
    result.update(checkpoint=checkpoint, subset=args.subset, beam=args.beam, sentences=len(references))
    result["sacrebleu"] = score(hypotheses, references, args.tgt)
    result["tokenized"] = scoring.tokenized_bleu(hypotheses, references, args.tgt,
                                                 None if args.compound_split == "auto" else args.compound_split == "yes")
    with atomic_write(os.path.join(out_dir, "generate.out")) as handle:
        handle.write(output)
    with atomic_write(os.path.join(out_dir, f"hyp.detok.{args.tgt}")) as handle:
        handle.writelines(h + "\n" for h in hypotheses)
    if args.baseline_hyp:
        baseline = read_lines(args.baseline_hyp)
        result["bootstrap"] = scoring.paired_bootstrap(baseline, hypotheses, references, args.tgt,
                                                       samples=args.bootstrap_samples, tokenized=True)
    if args.length_buckets:
        if not args.source:
            raise SystemExit("--length-buckets needs --source (the raw source of the subset)")
        tok = tokenizer(args.src)
        lengths = [len(tok(line).split()) for line in read_lines(args.source)]
        rows = scoring.bleu_by_length(lengths, hypotheses, references, args.tgt, width=args.bucket_width)
        result["length_buckets"] = rows
        with atomic_write(os.path.join(out_dir, "length.md")) as handle:
            handle.write(scoring.markdown_table(["source length", "sentences", "BLEU"],
                                                [(r["bucket"], r["sentences"], r["bleu"]) for r in rows]))
        try:
            scoring.plot_length_buckets({args.name or "system": rows}, os.path.join(out_dir, "length.png"))
        except RuntimeError as error:
            print(f"evaluate: {error}", file=sys.stderr)
    result["name"] = args.name
    result["generation"] = {"beam": args.beam, "lenpen": args.lenpen, "max_len_a": args.max_len_a,
                            "max_len_b": args.max_len_b, "average_last": args.average_last}
    if args.provenance and os.path.exists(args.provenance):
        with open(args.provenance, encoding="utf-8") as handle:
            result["provenance"] = json.load(handle)
    with atomic_write(os.path.join(out_dir, "result.json")) as handle:
        json.dump(result, handle, indent=1)
    return result


def build_parser():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True)
    parser.add_argument("--save-dir", help="checkpoint directory (with --average-last, or its checkpoint_best.pt)")
    parser.add_argument("--path", help="a checkpoint (instead of --save-dir)")
    parser.add_argument("--average-last", type=int, default=0, metavar="N")
    parser.add_argument("--src", required=True)
    parser.add_argument("--tgt", required=True)
    parser.add_argument("--ref", required=True, help="raw references of the subset")
    parser.add_argument("--source", help="raw source of the subset (for --length-buckets)")
    parser.add_argument("--subset", default="test")
    parser.add_argument("--beam", type=int, default=4)
    parser.add_argument("--lenpen", type=float, default=0.6)
    # relative to the source (fairseq: max length = a * source length + b): a fixed bound
    # (fairseq's default 0 * len + 200) would cut the long-sentence buckets the length tables are about
    parser.add_argument("--max-len-a", type=float, default=2.0)
    parser.add_argument("--max-len-b", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--remove-bpe", default=None, help="e.g. 'sentencepiece' (default: fairseq's '@@ ')")
    parser.add_argument("--strip-concat", action="store_true", help="2-to-2: score only the part after <CONCAT>")
    parser.add_argument("--compound-split", choices=["auto", "yes", "no"], default="auto")
    parser.add_argument("--baseline-hyp", help="detokenised hypotheses of the baseline: paired bootstrap")
    parser.add_argument("--bootstrap-samples", type=int, default=1000)
    parser.add_argument("--length-buckets", action="store_true")
    parser.add_argument("--bucket-width", type=int, default=10)
    parser.add_argument("--name", default=None)
    parser.add_argument("--provenance", default=None,
                        help="JSON file of the training run (setting, batch, command, versions) copied into result.json")
    parser.add_argument("--out-dir", required=True)
    return parser


def main(argv=None):
    from ..reproduce.train import split_extra

    parser = build_parser()
    argv, extra = split_extra(argv)
    args = parser.parse_args(argv)
    args.extra = extra
    if not (args.save_dir or args.path):
        parser.error("pass --save-dir or --path")
    for path in filter(None, (args.data, args.ref, args.source, args.baseline_hyp, args.path, args.save_dir)):
        if not os.path.exists(path):
            parser.error(f"not found: {path}")
    result = run(args)
    line = f"BLEU {result['sacrebleu']['bleu']} ({result['sacrebleu']['signature']}); tokenized {result['tokenized']['bleu']}"
    if "bootstrap" in result:
        b = result["bootstrap"]
        line += f"; vs baseline {b['delta']:+.2f} p={b['p_value']:.4f}"
    print(line)


if __name__ == "__main__":
    main()
