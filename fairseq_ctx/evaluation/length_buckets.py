"""BLEU by source-length bucket for several systems (Iida Tables 3-4, Yang Figure 5):
table + PNG from the detokenised hypotheses that fairseq-ctx-evaluate (scripts/evaluate.py) wrote.

Usage: fairseq-ctx-length-buckets --source raw/test.ja --ref raw/test.en --src ja --tgt en \
           --system "RNN baseline=results/base/eval/hyp.detok.en" --system "multi-hop=..." --out-dir DIR

Source lengths are words of --src's tokeniser (fairseq_ctx/data/tokenize.py: jieba for zh,
MeCab for ja, the Moses tokeniser of sacremoses for every other language); BLEU is computed
on text tokenised the same way for --tgt. --src / --tgt must be ISO 639-1 codes (or a code
sacremoses has nonbreaking prefixes for: mni, tdt, yue); a code the tokeniser has no rules
for (e.g. ko, ar) is accepted with a warning, since Moses then uses English prefixes.

Every input is checked before anything is computed or written: each --system is NAME=HYP
with a distinct, non-empty NAME and an existing HYP, the source, the references and every
hypothesis file have the same number of lines, and --width >= 1; otherwise the command
stops with one error message (exit status 2).
"""
import argparse
import os
import sys

from ..atomic import atomic_write
from ..data.tokenize import tokenizer
from . import scoring

# ISO 639-1 (the two-letter language codes).
ISO_639_1 = frozenset("""
aa ab ae af ak am an ar as av ay az ba be bg bi bm bn bo br bs ca ce ch co cr cs cu cv cy da de dv dz ee el
en eo es et eu fa ff fi fj fo fr fy ga gd gl gn gu gv ha he hi ho hr ht hu hy hz ia id ie ig ii ik io is it
iu ja jv ka kg ki kj kk kl km kn ko kr ks ku kv kw ky la lb lg li ln lo lt lu lv mg mh mi mk ml mn mr ms mt
my na nb nd ne ng nl nn no nr nv ny oc oj om or os pa pi pl ps pt qu rm rn ro ru rw sa sc sd se sg si sk sl
sm sn so sq sr ss st su sv sw ta te tg th ti tk tl tn to tr ts tt tw ty ug uk ur uz ve vi vo wa wo xh yi yo
za zh zu""".split())
SEGMENTED = {"zh": "jieba", "ja": "MeCab (fugashi)"}  # languages the project's tokeniser segments itself


def moses_languages():
    """{code or name: code} of what sacremoses has nonbreaking prefixes for (names such as
    'english' too; those are not language codes here). For anything else MosesTokenizer
    silently uses the English prefixes."""
    from sacremoses.corpus import NonbreakingPrefixes

    return dict(NonbreakingPrefixes().available_langs)


def check_language(option, lang):
    """(error, warning): an error for what is not a language code the tokeniser can be meant
    for (zh, ja, a code sacremoses has prefixes for, an ISO 639-1 code); a warning for an
    ISO 639-1 code sacremoses has no rules for."""
    moses = moses_languages()
    codes = set(moses.values())
    if lang in SEGMENTED or lang in codes:
        return None, None
    if lang not in ISO_639_1:
        low = lang.strip().lower().replace("_", "-")
        guess = low.split("-")[0] if low.split("-")[0] in ISO_639_1 | codes else moses.get(low)
        guess = guess or {"japanese": "ja", "jpn": "ja", "zho": "zh", "chi": "zh", "cmn": "zh"}.get(low)
        hint = f" (did you mean {guess}?)" if guess else ""
        return (f"{option} {lang!r} is not an ISO 639-1 language code{hint}: zh is segmented with jieba, "
                f"ja with MeCab, other languages with the Moses tokeniser"), None
    return None, (f"length_buckets: warning: {option} {lang}: sacremoses has no rules for {lang!r}; tokenised with "
                  f"the Moses tokeniser and its English nonbreaking prefixes (right only for text with spaces "
                  f"between words)")


def read(path):
    with open(path, encoding="utf-8") as handle:
        return [line.rstrip("\n") for line in handle]


def parse_systems(specs):
    """[(name, path)] of the --system NAME=HYP specs, or an error message."""
    systems, seen = [], set()
    for spec in specs:
        name, sep, path = spec.partition("=")
        name = name.strip()
        if not sep:
            return None, f"--system {spec!r}: expected NAME=HYP"
        if not name:
            return None, f"--system {spec!r}: the system has no name (NAME=HYP)"
        if not path:
            return None, f"--system {spec!r}: no hypothesis file (NAME=HYP)"
        if name in seen:
            return None, f"--system {spec!r}: the name {name!r} is given twice"
        seen.add(name)
        systems.append((name, path))
    return systems, None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", required=True, help="the test set's raw source sentences, one a line")
    parser.add_argument("--ref", required=True, help="the raw references, one a line")
    parser.add_argument("--src", required=True, help="source language (ISO 639-1; zh and ja are segmented)")
    parser.add_argument("--tgt", required=True, help="target language (ISO 639-1)")
    parser.add_argument("--system", action="append", required=True, metavar="NAME=HYP",
                        help="a system's detokenised hypotheses, one a line (repeatable; distinct names)")
    parser.add_argument("--width", type=int, default=10, help="bucket width in source words (>= 1; default 10)")
    parser.add_argument("--out-dir", required=True, help="length_buckets.md and length_buckets.png go here")
    args = parser.parse_args(argv)
    if args.width < 1:
        parser.error(f"--width must be >= 1, got {args.width}")
    systems, error = parse_systems(args.system)
    if error:
        parser.error(error)
    warnings = []
    for option, lang in (("--src", args.src), ("--tgt", args.tgt)):
        error, warning = check_language(option, lang)
        if error:
            parser.error(error)
        if warning:
            warnings.append(warning)
    files = [("--source", args.source), ("--ref", args.ref)] + [(f"--system {name}", path) for name, path in systems]
    missing = [f"{option} {path}" for option, path in files if not os.path.isfile(path)]
    if missing:
        parser.error("no such file: " + ", ".join(missing))
    for warning in warnings:
        print(warning, file=sys.stderr)
    source = read(args.source)
    references = read(args.ref)
    hypotheses = {name: read(path) for name, path in systems}
    counts = [(f"--source {args.source}", len(source))] + \
        [(f"--system {name} ({path})", len(hypotheses[name])) for name, path in systems]
    wrong = [f"{what} has {n}" for what, n in counts if n != len(references)]
    if wrong:
        parser.error(f"--ref {args.ref} has {len(references)} lines but " + "; ".join(wrong)
                     + " (one line per test sentence in every file)")
    tok = tokenizer(args.src)
    lengths = [len(tok(line).split()) for line in source]
    series = {name: scoring.bleu_by_length(lengths, hypotheses[name], references, args.tgt, args.width)
              for name, _ in systems}
    first = series[systems[0][0]]
    header = ["sentence length"] + [r["bucket"] for r in first]
    rows = [["number of sentences"] + [r["sentences"] for r in first]]
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
