"""Peak memory of data preparation against corpus size, on a synthetic corpus in the real
archive layout (no corpus text: random words, with a vocabulary that grows with the corpus).

    python -m fairseq_ctx.data.memory_check --pairs 200000 2000000 [--work DIR] [--workers 2]

For each size: builds WMT14 En-De's archives (the real file and member names, gzip'd tars,
SGM dev / test sets) with that many training pairs in --local-dir layout plus a checksum
manifest with the synthetic counts, then runs the steps of prepare-wmt.sh as separate
processes (the raw step ``corpora wmt``, ``pretokenize`` of the training data, ``corpora
clean``, subword-nmt BPE learned and applied through ``fairseq_ctx.data.bpe``) and prints
each step's peak resident memory and wall time. The peak is GNU time's ``%M``: the largest
resident size of any single process of the step (the step or one of its workers; the
workers' sizes are not summed: with W workers the step's total is at most about W + 1 times
that). Streaming readers keep the peak flat as the corpus grows; a reader that holds the
corpus makes it grow with it.
"""
import argparse
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tarfile
import time

from ..paths import WORK_DIR, python_env
from .corpora import CORPORA

TIME = "/usr/bin/time"


RARE_SHARE = 0.02  # tokens drawn from an unbounded id space: the vocabulary grows with the corpus


def _words(rng, vocabulary, n):
    """``n`` words: mostly from a closed list of 5,000, RARE_SHARE of them new ones (names,
    numbers, typos: about 860,000 word types at 2M pairs). A closed vocabulary alone would hide
    what grows with the number of word types (subword-nmt's word counts and BPE cache)."""
    return " ".join(f"{vocabulary[0][:2]}r{rng.randrange(10 ** 9)}" if rng.random() < RARE_SHARE
                    else rng.choice(vocabulary) for _ in range(n))


def _write_tgz(path, members):
    """members: {name: iterable of lines}; streamed into a gzip'd tar (a member is built on
    disk first: tar needs its size up front)."""
    with tarfile.open(path, "w:gz") as tar:
        for name, lines in members.items():
            tmp = path + ".member"
            with open(tmp, "w", encoding="utf-8") as handle:
                for line in lines:
                    handle.write(line + "\n")
            tar.add(tmp, arcname=name)
            os.unlink(tmp)


def _sgm(lines, lang):
    yield f'<srcset setid="synthetic" srclang="any"><doc docid="0" genre="news" origlang="{lang}">'
    for index, line in enumerate(lines, 1):
        yield f'<seg id="{index}">{line}</seg>'
    yield "</doc></srcset>"


def build_corpus(local, pairs, seed=1, held_out=300):
    """WMT14 En-De archives with ``pairs`` training pairs (split over its three archives)."""
    corpus = CORPORA["wmt14-en-de"]
    rng = random.Random(seed)
    vocabulary = {lang: [f"{lang}{i}" for i in range(5000)] for lang in (corpus.src, corpus.tgt)}
    os.makedirs(local, exist_ok=True)
    counts, sums = {}, {}
    shares = [pairs // len(corpus.train)] * len(corpus.train)
    shares[0] += pairs - sum(shares)
    for archive, n in zip(corpus.train, shares):
        members = {}
        for src_member, tgt_member in archive.members:
            lengths = [rng.randint(3, 40) for _ in range(n)]  # both sides the same length: kept by clean
            members[src_member] = (_words(random.Random(seed + i), vocabulary[corpus.src], k) for i, k in enumerate(lengths))
            members[tgt_member] = (_words(random.Random(-seed - i), vocabulary[corpus.tgt], k) for i, k in enumerate(lengths))
        _write_tgz(os.path.join(local, archive.filename), members)
    counts["wmt14-en-de/train"] = pairs
    for split, archive in (("valid", corpus.valid), ("test", corpus.test)):
        members = {}
        for src_member, tgt_member in archive.members:
            for member, lang in ((src_member, corpus.src), (tgt_member, corpus.tgt)):
                members[member] = _sgm([_words(rng, vocabulary[lang], 10) for _ in range(held_out)], lang)
        path = os.path.join(local, archive.filename)
        _write_tgz(path, members)
        counts[f"wmt14-en-de/{split}"] = held_out
        with open(path, "rb") as handle:  # synthetic dev / test sets: not the published md5
            sums[archive.filename] = hashlib.md5(handle.read()).hexdigest()
    manifest = os.path.join(local, "checksums.json")
    with open(manifest, "w") as handle:
        json.dump({"archives": sums, "counts": counts}, handle)
    return manifest


def run_step(command, env, workdir):
    """(peak resident memory in MiB, seconds) of one child process, measured by GNU time
    (``%M``): a child forked from this (fairseq-importing) process would carry this
    process's resident size into its own ru_maxrss."""
    report = os.path.join(workdir, "time.out")
    started = time.time()
    process = subprocess.run([TIME, "-f", "%M", "-o", report, *command], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if process.returncode != 0:
        sys.exit(f"memory_check: {' '.join(command)} failed:\n{process.stderr.decode(errors='replace')[-3000:]}")
    with open(report) as handle:
        kib = int(handle.read().split()[-1])
    return kib / 1024, time.time() - started


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, nargs="+", default=[200_000, 2_000_000])
    parser.add_argument("--work", default=os.path.join(WORK_DIR, "memory-check"), help="default %(default)s")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--keep", action="store_true", help="keep the synthetic corpora and outputs")
    args = parser.parse_args(argv)
    if not os.path.exists(TIME):
        sys.exit(f"memory_check: needs GNU time at {TIME} (Debian: apt install time)")
    env = python_env(dict(os.environ, FAIRSEQ_CTX_NO_MODELS="1"))  # this copy in the `-m` children
    python = sys.executable
    rows = []
    for pairs in args.pairs:
        root = os.path.join(os.path.abspath(args.work), str(pairs))
        shutil.rmtree(root, ignore_errors=True)
        local, raw, tok = (os.path.join(root, d) for d in ("local", "raw", "tok"))
        print(f"memory_check: building {pairs} synthetic pairs in {local}", file=sys.stderr)
        manifest = build_corpus(local, pairs)
        os.makedirs(tok)
        steps = [
            ("raw (corpora wmt)", [python, "-m", "fairseq_ctx.data.corpora", "wmt", "--corpus", "wmt14-en-de",
                                   "--outdir", raw, "--local-dir", local, "--offline", "--checksums", manifest]),
            (f"pretokenize en ({args.workers} workers)",
             [python, "-m", "fairseq_ctx.data.pretokenize", "--lang", "en", "--workers", str(args.workers),
              "--input", os.path.join(raw, "train.en"), "--output", os.path.join(tok, "train.en")]),
            ("clean (corpora clean)", [python, "-m", "fairseq_ctx.data.corpora", "clean",
                                       "--src-in", os.path.join(raw, "train.en"), "--tgt-in", os.path.join(raw, "train.de"),
                                       "--src-out", os.path.join(tok, "clean.en"), "--tgt-out", os.path.join(tok, "clean.de")]),
            (f"learn-bpe en (2,000 merges, {args.workers} workers)",
             [python, "-m", "fairseq_ctx.data.bpe", "learn", "--symbols", "2000", "--workers", str(args.workers),
              "--input", os.path.join(tok, "train.en"), "--output", os.path.join(tok, "codes.en")]),
            (f"apply-bpe en ({args.workers} workers)",
             [python, "-m", "fairseq_ctx.data.bpe", "apply", "--codes", os.path.join(tok, "codes.en"),
              "--workers", str(args.workers), "--input", os.path.join(tok, "train.en"),
              "--output", os.path.join(tok, "bpe.en")]),
        ]
        for name, command in steps:
            rss, seconds = run_step(command, env, root)
            rows.append((pairs, name, rss, seconds))
            print(f"memory_check: {pairs} pairs, {name}: peak RSS {rss:.0f} MiB, {seconds:.0f} s", file=sys.stderr)
        if not args.keep:
            shutil.rmtree(root)
    print("| training pairs | step | peak RSS (MiB) | wall (s) |\n| --- | --- | --- | --- |")
    for pairs, name, rss, seconds in rows:
        print(f"| {pairs:,} | {name} | {rss:.0f} | {seconds:.0f} |")


if __name__ == "__main__":
    main()
