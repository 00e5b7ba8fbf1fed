"""fairseq-ctx-evaluate: evaluate one trained system as a paper does, and write everything the
tables need.

1. the checkpoint: --path FILE, or in --save-dir the average of the last N checkpoints
   (--average-last N; fairseq_ctx/evaluation/average.py) or the paper's checkpoint file,
2. fairseq-generate with --required-batch-size-multiple 1, and the check that every
   sentence got exactly one hypothesis (fairseq_ctx/evaluation/generate.py),
3. (2-to-2 systems, --strip-concat) only the part after <CONCAT> is kept,
4. detokenised; sacreBLEU with its signature, and tokenised BLEU as the papers report it
   (compound splitting for En-De; fairseq_ctx/evaluation/scoring.py),
5. optional: paired bootstrap against a baseline's hypotheses (--baseline-hyp), BLEU by source
   length (--length-buckets: length.md, length.png).
Writes OUT/result.json, hyp.detok.<tgt>, generate.out (and length.md / length.png with
--length-buckets, average_lastN.pt where it averages); prints one line: BLEU (signature), tokenised
BLEU, the number of sentences. All or nothing: the files are made in a temporary folder inside OUT
and moved in only when every one is done, result.json last, replacing (and saying so) what an
earlier evaluation left in OUT (checkpoints in OUT are kept); a failed evaluation leaves OUT as it
was. One evaluation at a time per OUT (a second is refused at once). Line counts (--ref,
--baseline-hyp, --source, against each other and against the binarised subset's sentences) are
checked before fairseq-generate runs, and so is, with
--strip-concat, that --ref is sentence-level (no <CONCAT>: only the hypotheses are stripped).

--paper P sets beam, length penalty, checkpoint choice, output length bound and tokenised-BLEU
compound splitting to that paper's evaluation (the table below: fairseq_ctx/evaluation/defaults.py,
the same entries fairseq-ctx-reproduce evaluates with); an option given explicitly wins. Without
--paper: the demo's settings. --remove-bpe and --strip-concat follow the data, not the paper
(SentencePiece corpora: --remove-bpe sentencepiece; 2-to-2 data: --strip-concat).

Usage: fairseq-ctx-evaluate [--paper P] --data BIN (--save-dir CKPTS | --path CKPT) --src en --tgt de \\
           --ref raw/test.de --out-dir DIR [--source raw/test.en --length-buckets] \\
           [--baseline-hyp OTHER/hyp.detok.de] [--beam N --lenpen X ...] [-- extra fairseq-generate args]
"""
import argparse
import glob
import json
import re
import os
import shutil
import struct
import sys
import tempfile

from ..atomic import atomic_write
from ..data.streaming import CarriageReturnInside, lines_of
from .defaults import DEFAULT_PAPER, PAPER_DEFAULTS, defaults_table

# the settings --paper decides; each option's default (None) means "the paper's"
PAPER_OPTIONS = ("beam", "lenpen", "average_last", "max_len_a", "max_len_b", "compound_split")


def strip_concat(lines):
    from ..data.concat_context import strip_context

    return [strip_context(line) for line in lines]


def run(args, extra_env=None):
    """Evaluate with resolved arguments (see :func:`parse`); returns what result.json holds.
    ``extra_env``: variables for the fairseq-generate subprocess (see ``generate``)."""
    from ..data.streaming import _terminate_as_exit
    from ..run_lock import RunLock

    out_dir = args.out_dir
    os.makedirs(out_dir, exist_ok=True)
    # one evaluation at a time per folder; SIGTERM (a scheduler's limit) ends it through the finally
    with RunLock(out_dir, ".evaluate.lock", inherited=False, guards="a second evaluation writing into this folder"), \
            _terminate_as_exit():
        for leftover in glob.glob(os.path.join(out_dir, f"{STAGING_PREFIX}*")):  # of a killed evaluation
            shutil.rmtree(leftover, ignore_errors=True)
        staging = tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=out_dir)
        try:
            result = _evaluate_into(args, staging, extra_env)
            _publish(staging, out_dir)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return result


STAGING_PREFIX = "partial-evaluate."
# what an earlier evaluation wrote that a new one replaces or removes (never a checkpoint: the
# average it kept may be the --path of this one)
_EARLIER_OUTPUT = re.compile(r"result\.json|generate\.out|hyp\.detok\..+|length\.(md|png)")


def _publish(staging, out_dir):
    """Move every file of ``staging`` (this evaluation's, finished) into ``out_dir``, replacing an
    earlier evaluation's: its result.json goes first (a folder without one holds no finished
    evaluation), then its outputs this one does not write (length.md of a run with
    --length-buckets, say); result.json comes in last."""
    earlier = sorted(name for name in os.listdir(out_dir)
                     if _EARLIER_OUTPUT.fullmatch(name) and os.path.isfile(os.path.join(out_dir, name)))
    marker = os.path.join(out_dir, "result.json")
    if "result.json" in earlier:
        try:
            with open(marker, encoding="utf-8") as handle:
                before = json.load(handle).get("checkpoint")
        except (OSError, ValueError, AttributeError):
            before = None
        print(f"evaluate: replacing the earlier evaluation in {out_dir}" + (f" (of {before})" if before else ""),
              file=sys.stderr, flush=True)
        os.unlink(marker)
    new = sorted(os.listdir(staging))
    for name in earlier:
        if name != "result.json" and name not in new:
            os.unlink(os.path.join(out_dir, name))
    for name in sorted(new, key=lambda n: n == "result.json"):
        os.replace(os.path.join(staging, name), os.path.join(out_dir, name))


def _evaluate_into(args, staging, extra_env):
    """The evaluation, its files written into ``staging`` under the names they get in args.out_dir."""
    from ..data.tokenize import detokenizer, tokenizer
    from . import scoring
    from .generate import generate, parse_hypotheses

    result = {}
    if args.path:
        checkpoint = args.path
    elif args.average_last:
        from .average import average_last

        checkpoint = os.path.join(staging, f"average_last{args.average_last}.pt")
        try:
            averaged = average_last(args.save_dir, args.average_last, checkpoint)
        except FileNotFoundError as error:
            raise SystemExit(f"evaluate: {error}; --paper {args.paper} averages the last {args.average_last}: "
                             "pass --average-last K (0: no averaging) or --path CHECKPOINT") from None
        result["averaged"] = [os.path.basename(p) for p in averaged]
    else:
        checkpoint = os.path.join(args.save_dir, args.checkpoint)
        if not os.path.exists(checkpoint):
            raise SystemExit(f"evaluate: {checkpoint} not found (--paper {args.paper} evaluates {args.checkpoint}; "
                             "pass --path for another checkpoint)")
    references = lines_of(args.ref)
    extra = ["--lenpen", str(args.lenpen), "--max-len-a", str(args.max_len_a), "--max-len-b", str(args.max_len_b)]
    if args.remove_bpe:
        extra += ["--remove-bpe", args.remove_bpe]  # overrides generate's default "@@ "
    output = generate(args.data, checkpoint, args.src, args.tgt, args.subset, args.beam, args.batch_size,
                      extra + list(args.extra), extra_env=extra_env)
    hypotheses = parse_hypotheses(output, len(references))
    if args.strip_concat:
        hypotheses = strip_concat(hypotheses)
    detok = detokenizer(args.tgt)
    hypotheses = [detok(h) for h in hypotheses]
    compound = scoring.compound_flag(args.compound_split)
    if args.average_last and not args.path:  # recorded where it will be once published
        checkpoint = os.path.join(args.out_dir, os.path.basename(checkpoint))
    result.update(checkpoint=checkpoint, subset=args.subset, beam=args.beam, sentences=len(references))
    result["sacrebleu"] = scoring.score(hypotheses, references, args.tgt)
    result["tokenized"] = scoring.tokenized_bleu(hypotheses, references, args.tgt, compound)
    with atomic_write(os.path.join(staging, "generate.out")) as handle:
        handle.write(output)
    with atomic_write(os.path.join(staging, f"hyp.detok.{args.tgt}")) as handle:
        handle.writelines(h + "\n" for h in hypotheses)
    if args.baseline_hyp:
        baseline = lines_of(args.baseline_hyp)
        result["bootstrap"] = scoring.paired_bootstrap(baseline, hypotheses, references, args.tgt,
                                                       samples=args.bootstrap_samples, tokenized=True,
                                                       compound=compound)
    if args.length_buckets:
        tok = tokenizer(args.src)
        lengths = [len(tok(line).split()) for line in lines_of(args.source)]
        rows = scoring.bleu_by_length(lengths, hypotheses, references, args.tgt, width=args.bucket_width,
                                      compound=compound)
        result["length_buckets"] = rows
        with atomic_write(os.path.join(staging, "length.md")) as handle:
            handle.write(scoring.markdown_table(["source length", "sentences", "BLEU"],
                                                [(r["bucket"], r["sentences"], r["bleu"]) for r in rows]))
        try:
            scoring.plot_length_buckets({args.name or "system": rows}, os.path.join(staging, "length.png"))
        except RuntimeError as error:
            print(f"evaluate: {error}", file=sys.stderr)
    result["name"] = args.name
    result["paper"] = args.paper
    result["generation"] = {"beam": args.beam, "lenpen": args.lenpen, "max_len_a": args.max_len_a,
                            "max_len_b": args.max_len_b, "average_last": args.average_last,
                            "compound_split": args.compound_split,
                            "remove_bpe": args.remove_bpe or "@@ ", "batch_size": args.batch_size,
                            "extra_generate_args": list(args.extra)}
    if args.provenance and os.path.exists(args.provenance):
        with open(args.provenance, encoding="utf-8") as handle:
            result["provenance"] = json.load(handle)
    with atomic_write(os.path.join(staging, "result.json")) as handle:
        json.dump(result, handle, indent=1)
    return result


def build_parser():
    parser = argparse.ArgumentParser(
        prog="fairseq-ctx-evaluate", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Each paper's defaults (--paper; explicit options win):\n" + defaults_table())
    parser.add_argument("--paper", choices=list(PAPER_DEFAULTS), default=None,
                        help=f"evaluate with this paper's settings (default: {DEFAULT_PAPER}; the table below)")
    paper = " (default: the paper's, see below)"
    parser.add_argument("--data", required=True, help="fairseq binarized data directory")
    checkpoint = parser.add_mutually_exclusive_group(required=True)
    checkpoint.add_argument("--save-dir", help="checkpoint directory: the paper's choice in it (average of the last N, "
                                               "or its checkpoint file)")
    checkpoint.add_argument("--path", help="evaluate this checkpoint file (no averaging)")
    parser.add_argument("--average-last", type=int, default=None, metavar="N",
                        help="with --save-dir: average its last N checkpoints (0: the paper's checkpoint file)" + paper)
    parser.add_argument("--src", required=True)
    parser.add_argument("--tgt", required=True)
    parser.add_argument("--ref", required=True, help="raw (untokenised) references of the subset")
    parser.add_argument("--source", help="raw source of the subset (for --length-buckets)")
    parser.add_argument("--subset", default="test", help="fairseq gen-subset (default test)")
    parser.add_argument("--beam", type=int, default=None, help="beam size" + paper)
    parser.add_argument("--lenpen", type=float, default=None, help="length penalty" + paper)
    parser.add_argument("--max-len-a", type=float, default=None,
                        help="output bound: at most A x source length + B tokens" + paper)
    parser.add_argument("--max-len-b", type=int, default=None, help="see --max-len-a" + paper)
    parser.add_argument("--compound-split", choices=["auto", "yes", "no"], default=None,
                        help="tokenised BLEU: split hyphenated compounds (auto: for a German target)" + paper)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--remove-bpe", default=None, help="e.g. 'sentencepiece' (default: fairseq's '@@ ')")
    parser.add_argument("--strip-concat", action="store_true",
                        help="2-to-2: score only the part of each hypothesis after <CONCAT> (--ref must be the "
                             "sentence-level reference)")
    parser.add_argument("--baseline-hyp", help="detokenised hypotheses of the baseline: paired bootstrap")
    parser.add_argument("--bootstrap-samples", type=int, default=1000)
    parser.add_argument("--length-buckets", action="store_true", help="BLEU by source length (needs --source)")
    parser.add_argument("--bucket-width", type=int, default=10)
    parser.add_argument("--name", default=None, help="the system's name in result.json and length.png")
    parser.add_argument("--provenance", default=None,
                        help="JSON file of the training run (setting, batch, command, versions) copied into "
                             "result.json")
    parser.add_argument("--out-dir", required=True, help="where result.json, hyp.detok.<tgt>, generate.out go")
    return parser


# fairseq-generate options this command sets and records in result.json. After `--` they
# would win in fairseq-generate (argparse keeps the last) while result.json kept this
# command's value: the ones with an option of their own here are taken as that option (and
# recorded), the others are refused. fairseq's parser takes no abbreviations
# (allow_abbrev=False), so the exact names and their aliases are all there is to catch.
GENERATE_OPTIONS_TAKEN = {
    "--beam": "beam", "--lenpen": "lenpen", "--max-len-a": "max_len_a", "--max-len-b": "max_len_b",
    "--remove-bpe": "remove_bpe", "--post-process": "remove_bpe",
    "--batch-size": "batch_size", "--max-sentences": "batch_size",
}
GENERATE_OPTIONS_REFUSED = {
    "--path": "--path or --save-dir", "--gen-subset": "--subset", "-s": "--src", "--source-lang": "--src",
    "-t": "--tgt", "--target-lang": "--tgt", "--nbest": None, "--required-batch-size-multiple": None,
}
_OPTION = re.compile(r"^--?[A-Za-z]")  # an option, not a value such as -0.5


def _take_owned_generate_args(args, parser):
    """Move `-- --beam 9` and the like into ``args``; refuse the options this command
    must decide itself (see GENERATE_OPTIONS_TAKEN / _REFUSED)."""
    given = {action.dest: action for action in parser._actions}
    rest, tokens, taken = [], list(args.extra), set()
    while tokens:
        token = tokens.pop(0)
        name = token.split("=", 1)[0] if token.startswith("--") else token
        if name in GENERATE_OPTIONS_REFUSED:
            ours = GENERATE_OPTIONS_REFUSED[name]
            parser.error(f"{name} after -- would override what this command sets and records in result.json; "
                         + (f"use {ours} instead" if ours else "it cannot be changed here"))
        dest = GENERATE_OPTIONS_TAKEN.get(name)
        if dest is None:
            rest.append(token)
            continue
        if "=" in token:
            value = token.split("=", 1)[1]
        elif tokens and not _OPTION.match(tokens[0]):
            value = tokens.pop(0)
        elif dest == "remove_bpe":
            value = "@@ "  # fairseq's const for a bare --remove-bpe
        else:
            parser.error(f"{name} after -- needs a value")
        if getattr(args, dest) != parser.get_default(dest) and dest not in taken:
            parser.error(f"{name} is given both before and after --: give it once")
        action = given[dest]
        try:
            setattr(args, dest, action.type(value) if action.type else value)
        except ValueError:
            parser.error(f"{name} after --: invalid value {value!r}")
        taken.add(dest)
    args.extra = rest


def resolve(args, parser):
    """Fill every option the command line left out from the paper's defaults; check the rest."""
    _take_owned_generate_args(args, parser)
    if args.path and args.average_last:
        parser.error("--average-last averages the checkpoints of --save-dir: not with --path")
    if args.average_last is not None and args.average_last < 0:
        parser.error(f"--average-last {args.average_last}: 0 (no averaging) or the number of checkpoints")
    args.paper = args.paper or DEFAULT_PAPER
    settings = PAPER_DEFAULTS[args.paper]
    for name in PAPER_OPTIONS:
        if getattr(args, name) is None:
            setattr(args, name, getattr(settings, name))
    args.checkpoint = settings.checkpoint
    if args.path:
        args.average_last = 0  # the file given is evaluated as it is
    if args.length_buckets and not args.source:
        parser.error("--length-buckets needs --source (the raw source of the subset)")
    if args.bucket_width < 1:
        parser.error(f"--bucket-width must be at least 1, not {args.bucket_width}")
    for path in filter(None, (args.data, args.ref, args.source, args.baseline_hyp, args.path, args.save_dir)):
        if not os.path.exists(path):
            parser.error(f"not found: {path}")
    if args.save_dir and not os.path.isdir(args.save_dir):  # (a checkpoint file: --path)
        parser.error(f"--save-dir {args.save_dir}: not a directory (a checkpoint file is evaluated with --path)")
    # before fairseq-generate runs, not after: each is read line by line against the references
    lines = {}
    for option, path in (("--ref", args.ref), ("--baseline-hyp", args.baseline_hyp),
                         ("--source", args.source if args.length_buckets else None)):
        if path:
            try:
                lines[option] = (path, len(lines_of(path)))
            except UnicodeDecodeError as error:
                parser.error(f"{option} {path} is not valid UTF-8 ({error.reason} at byte {error.start}): "
                             "convert it first (e.g. iconv)")
            except CarriageReturnInside as error:
                parser.error(f"{option} {error}")
    for option, (path, count) in lines.items():
        if count != lines["--ref"][1]:
            parser.error(f"{option} {path} has {count} lines but --ref {args.ref} has {lines['--ref'][1]}: "
                         "they must be line-parallel (one line per sentence of the subset)")
    sentences = subset_size(args.data, args.subset, args.src, args.tgt)
    if sentences is not None and sentences != lines["--ref"][1]:  # not after translating the whole subset
        parser.error(f"--ref {args.ref} has {lines['--ref'][1]} lines but the subset {args.subset!r} of {args.data} "
                     f"has {sentences} sentences: pass the reference of that subset (--subset names it)")
    named = os.path.basename(args.ref).split(".")[0]
    if {named, args.subset} <= set(SPLITS) and named != args.subset:  # same count: nothing else tells
        print(f"evaluate: warning: --ref {args.ref} is named as the {named!r} subset's reference, but --subset "
              f"{args.subset!r} is translated and scored against it", file=sys.stderr, flush=True)
    check_direction(args, parser)
    if args.strip_concat:  # only the hypotheses are stripped: a 2-to-2 reference would score context too
        from ..data.concat_context import MARKER

        with_marker = next((i for i, line in enumerate(lines_of(args.ref), 1) if MARKER in line), None)
        if with_marker is not None:
            parser.error(f"--ref {args.ref} line {with_marker} contains {MARKER}: --strip-concat strips only the "
                         "hypotheses; pass the sentence-level reference (the original target sentences), or "
                         "strip this one first with fairseq-ctx-strip-concat-context")
    return args


def check_direction(args, parser):
    """--src / --tgt against the direction the checkpoint was trained in: the reverse is refused
    (with a joined dictionary fairseq-generate runs it and it scores like a bad model), other
    languages are said. The checkpoint read: --path; else in --save-dir with --average-last the
    newest of those averaged (average.numbered_checkpoints; a directory of two trainings is warned
    of when averaged), else the paper's file there, else the first of the training's checkpoints
    there (a file of another name, an average someone put there, need not be the training's)."""
    from .average import numbered_checkpoints
    from .direction import TRAINING_CHECKPOINT, trained_direction

    if args.path:
        candidates = [args.path]
    else:
        numbered = numbered_checkpoints(args.save_dir)[2] if args.average_last else []
        candidates = [*(os.path.join(args.save_dir, name) for _, name in sorted(numbered)[-1:]),
                      os.path.join(args.save_dir, args.checkpoint),
                      *sorted(path for path in glob.glob(os.path.join(glob.escape(args.save_dir), "*.pt"))
                              if TRAINING_CHECKPOINT.fullmatch(os.path.basename(path)))]
    checkpoint = next((path for path in candidates if os.path.isfile(path)), None)
    trained = trained_direction(checkpoint, args.data) if checkpoint else None
    if trained is None or (args.src, args.tgt) == trained[:2]:
        return
    src, tgt, whence, guessed = trained
    if (args.tgt, args.src) == (src, tgt) and not guessed:
        parser.error(f"--src {args.src} --tgt {args.tgt}: {checkpoint} was trained {src} -> {tgt} ({whence}); "
                     f"pass --src {src} --tgt {tgt} (and the {tgt} reference)")
    print(f"evaluate: warning: --src {args.src} --tgt {args.tgt}, but {checkpoint} was trained {src} -> {tgt} "
          f"({whence})", file=sys.stderr, flush=True)


# fairseq-preprocess's subsets, as prepare-data names their raw files (raw/<subset>.<lang>)
SPLITS = ("train", "valid", "test")


# the headers of fairseq's binarised indexes (fairseq/data/indexed_dataset.py), read here instead of
# importing fairseq.data for a count: that import costs ~5.6 s of CPU in every evaluation, whose
# fairseq-generate imports fairseq again in its own process
_MMAP_MAGIC = b"MMIDIDX\x00\x00"  # MMapIndexedDataset.Index: magic, <Q version, <B dtype code, <Q count
_CACHED_MAGIC = b"TNTIDX\x00\x00"  # IndexedDataset (cached / lazy): magic, <Q version, <QQ code / size, <QQ count / s
_HUFFMAN_MAGIC = b"HUFFIDX\x00\x00"  # HuffmanMMapIndex: magic, <Q version, <Q data length, <Q count


def dataset_sentences(prefix):
    """The sentences of one side of a binarised subset, as fairseq's infer_dataset_impl finds it:
    the lines of a raw text PREFIX, else the count in PREFIX.idx's header (mmap, the older
    cached / lazy format, huffman) where PREFIX.bin is there too; None otherwise (no such dataset, or a
    format not read here)."""
    if os.path.isfile(prefix):  # --dataset-impl raw: one sentence per line
        with open(prefix, "rb") as handle:
            return sum(1 for _ in handle)
    if not (os.path.isfile(prefix + ".idx") and os.path.isfile(prefix + ".bin")):
        return None
    with open(prefix + ".idx", "rb") as handle:
        head = handle.read(40)
    if head[:9] == _MMAP_MAGIC and len(head) >= 26:
        return struct.unpack_from("<Q", head, 18)[0]
    if head[:8] == _CACHED_MAGIC and len(head) >= 40:
        return struct.unpack_from("<Q", head, 32)[0]
    if head[:9] == _HUFFMAN_MAGIC and len(head) >= 33:
        return struct.unpack_from("<Q", head, 25)[0]
    return None


def subset_size(data, subset, src, tgt):
    """The number of sentences of a binarised subset (its source side, named as fairseq's
    translation task looks for it: SUBSET.SRC-TGT.SRC, or SUBSET.TGT-SRC.SRC); None where neither
    is there (generate then names what is missing)."""
    root = data.split(os.pathsep)[0]  # fairseq-generate reads a subset from the first shard
    for pair in (f"{src}-{tgt}", f"{tgt}-{src}"):
        count = dataset_sentences(os.path.join(root, f"{subset}.{pair}.{src}"))
        if count is not None:
            return count
    return None


def parse(argv=None):
    """The command line (`--` then extra fairseq-generate arguments) -> resolved arguments."""
    from ..reproduce.train import split_extra

    parser = build_parser()
    argv, extra = split_extra(argv)
    args = parser.parse_args(argv)
    args.extra = extra
    return resolve(args, parser)


def describe(args):
    if args.path:
        checkpoint = args.path
    elif args.average_last:
        checkpoint = f"average of the last {args.average_last} in {args.save_dir}"
    else:
        checkpoint = os.path.join(args.save_dir, args.checkpoint)
    return (f"--paper {args.paper}: checkpoint {checkpoint}; beam {args.beam}, lenpen {args.lenpen}, "
            f"max length {args.max_len_a} x source + {args.max_len_b}; tokenised BLEU compound-split "
            f"{args.compound_split}")


def evaluate(argv, extra_env=None):
    """The command as a function: ``evaluate(["--data", BIN, "--path", CKPT, ...])`` -> result.json's dict."""
    return run(parse(argv), extra_env)


def main(argv=None):
    from ..run_lock import RunInUse

    args = parse(argv)
    print(f"evaluate {describe(args)}", flush=True)
    try:
        result = run(args)
    except RunInUse as error:
        sys.exit(f"evaluate: {error}: another evaluation is writing into this --out-dir")
    line = (f"BLEU {result['sacrebleu']['bleu']} ({result['sacrebleu']['signature']}); "
            f"tokenized {result['tokenized']['bleu']}; {result['sentences']} sentences")
    if "bootstrap" in result:
        b = result["bootstrap"]
        line += f"; vs baseline {b['delta']:+.2f} {b['on']}, paired bootstrap " + (
            f"p={b['p_value']:.4f}" if b["p_value_meaningful"] else "p not meaningful (equal scores)")
    print(line)
