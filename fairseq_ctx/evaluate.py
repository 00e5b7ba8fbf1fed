"""Translate a binarized test split with fairseq-generate and score it with sacreBLEU.

Guards against fairseq's silent data loss: generation runs with
``--required-batch-size-multiple 1`` (fairseq otherwise drops a last batch that is not
a multiple of 8) and the run fails unless EVERY test sentence got exactly one
hypothesis. Hypotheses are put back in corpus order, BPE-merged (``--remove-bpe``),
detokenised, and scored against the RAW references with sacreBLEU (signature printed).

Usage: python scripts/evaluate.py --data BIN --path CKPT --src zh --tgt en --ref raw/test.en
           [--subset test] [--beam 5] [--out-dir DIR] [-- extra fairseq-generate args]
"""
import argparse
import json
import os
import re
import subprocess
import sys

import sacrebleu

from .atomic import atomic_write
from .data.tokenize import detokenizer

USER_DIR = os.path.dirname(os.path.abspath(__file__))
HYPOTHESIS = re.compile(r"^H-(\d+)\t(\S+)\t(.*)$")


def sacrebleu_tokenizer(lang):
    return {"zh": "zh", "ja": "ja-mecab"}.get(lang, "13a")


def parse_hypotheses(generate_output, expected):
    """Map sentence id -> hypothesis; raise unless ids are exactly 0..expected-1, once each."""
    hyps = {}
    for line in generate_output.splitlines():
        match = HYPOTHESIS.match(line)
        if match:
            idx = int(match.group(1))
            if idx in hyps:
                raise RuntimeError(f"sentence {idx} has more than one hypothesis (is --nbest > 1?)")
            hyps[idx] = match.group(3)
    missing = sorted(set(range(expected)) - set(hyps))
    extra = sorted(set(hyps) - set(range(expected)))
    if missing or extra:
        raise RuntimeError(
            f"fairseq-generate translated {len(hyps)} sentences but the reference has {expected}: "
            f"missing ids {missing[:10]}{'...' if len(missing) > 10 else ''}, unexpected ids {extra[:10]}"
        )
    return [hyps[i] for i in range(expected)]


def generate(data, path, src, tgt, subset="test", beam=5, batch_size=128, extra_args=()):
    cmd = [
        sys.executable, "-m", "fairseq_cli.generate", data,
        "--user-dir", USER_DIR, "--path", path, "--source-lang", src, "--target-lang", tgt,
        "--gen-subset", subset, "--beam", str(beam), "--batch-size", str(batch_size),
        "--required-batch-size-multiple", "1", "--remove-bpe", "--nbest", "1",
        *extra_args,
    ]
    # fairseq-generate needs the architectures: never pass on the data tools' opt-out
    env = {k: v for k, v in os.environ.items() if k != "FAIRSEQ_CTX_NO_MODELS"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"fairseq-generate failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return proc.stdout


def score(hypotheses, references, tgt):
    bleu = sacrebleu.metrics.BLEU(tokenize=sacrebleu_tokenizer(tgt))
    result = bleu.corpus_score(hypotheses, [references])
    return {"bleu": round(result.score, 2), "signature": str(bleu.get_signature()), "text": str(result)}


def evaluate(data, path, src, tgt, ref, subset="test", beam=5, batch_size=128, out_dir=None, extra_args=()):
    with open(ref, encoding="utf-8") as handle:
        references = [line.rstrip("\n") for line in handle]
    output = generate(data, path, src, tgt, subset, beam, batch_size, extra_args)
    detok = detokenizer(tgt)
    hypotheses = [detok(h) for h in parse_hypotheses(output, len(references))]
    result = score(hypotheses, references, tgt)
    result.update(sentences=len(references), checkpoint=path, beam=beam)
    if out_dir:
        with atomic_write(os.path.join(out_dir, "generate.out")) as handle:
            handle.write(output)
        with atomic_write(os.path.join(out_dir, f"hyp.detok.{tgt}")) as handle:
            handle.writelines(h + "\n" for h in hypotheses)
        with atomic_write(os.path.join(out_dir, "bleu.json")) as handle:
            json.dump(result, handle, indent=1)
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", required=True, help="fairseq binarized data directory")
    parser.add_argument("--path", required=True, help="checkpoint")
    parser.add_argument("--src", required=True)
    parser.add_argument("--tgt", required=True)
    parser.add_argument("--ref", required=True, help="raw (untokenised) reference file of the subset")
    parser.add_argument("--subset", default="test")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--out-dir", default=None, help="write generate.out, detokenised hypotheses, bleu.json")
    parser.add_argument("extra", nargs="*", help="extra fairseq-generate arguments (after --)")
    args = parser.parse_args(argv)
    for path in (args.data, args.path, args.ref):
        if not os.path.exists(path):
            parser.error(f"not found: {path}")
    result = evaluate(args.data, args.path, args.src, args.tgt, args.ref, args.subset, args.beam,
                      args.batch_size, args.out_dir, args.extra)
    print(f"{result['text']}\nsentences: {result['sentences']}")


if __name__ == "__main__":
    main()
