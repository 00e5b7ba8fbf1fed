"""Post hoc: BLEU's brevity penalty, length ratio and chrF of each run's final test translations
(the runs trained in this out-dir; imported seeds keep no translations).

    python lengths.py RUNS_DIR [REFERENCES]   (default references: work/demo/data/raw/test.en)
"""
import sys, glob, os
from sacrebleu.metrics import BLEU, CHRF
root = sys.argv[1]
ref_file = sys.argv[2] if len(sys.argv) > 2 else "work/demo/data/raw/test.en"
refs = [l.rstrip("\n") for l in open(ref_file, encoding="utf-8")]
for cfg in sorted(os.listdir(root)):
    for seed_dir in sorted(glob.glob(os.path.join(root, cfg, "seed*"))):
        hyp_file = os.path.join(seed_dir, "eval", "hyp.detok.en")
        if not os.path.exists(hyp_file):
            continue
        hyps = [l.rstrip("\n") for l in open(hyp_file, encoding="utf-8")]
        b = BLEU().corpus_score(hyps, [refs])
        c = CHRF().corpus_score(hyps, [refs])
        print(f"{cfg} {os.path.basename(seed_dir)} BLEU {b.score:.2f} BP {b.bp:.3f} ratio {b.sys_len / b.ref_len:.3f} "
              f"prec {'/'.join(f'{p:.1f}' for p in b.precisions)} chrF {c.score:.2f}")
