"""The gradient norms and clipped fractions fairseq-train logged (train_inner lines: each the mean
over the 25 updates before it, --log-interval 25) for runs of two arms, averaged over seeds and over
the log lines in each stretch of updates (lines at 25-150: updates 1-150, the warm-up; 175-400;
425-800; 825-1200).

    python docs/results/ca-arms-1200-cpu/logged_gradient_norms.py 'work/ca-arms-1200/runs/24-*' \
        'work/ca-arms-1200-25/runs/25-*'
"""
import argparse
import glob
import os
import re
import statistics

LINE = re.compile(r"num_updates=(\d+), lr=\S+ gnorm=([\d.]+), clip=([\d.]+)")
STRETCHES = ((1, 150), (151, 400), (401, 800), (801, 1200))


def logged(train_log):
    """{update: (gnorm, clipped %)} from one train.log."""
    out = {}
    with open(train_log, encoding="utf-8", errors="replace") as handle:
        for line in handle:
            match = LINE.search(line)
            if match:
                out[int(match.group(1))] = (float(match.group(2)), float(match.group(3)))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("arm_globs", nargs="+", help="a glob of an arm's run directory (its seed*/train.log are read)")
    args = parser.parse_args()
    print("arm | seeds | " + " | ".join(f"updates {lo}-{hi}: gnorm, % clipped" for lo, hi in STRETCHES))
    for pattern in args.arm_globs:
        logs = sorted(glob.glob(os.path.join(pattern, "seed*", "train.log")))
        runs = [logged(path) for path in logs]
        cells = []
        for lo, hi in STRETCHES:
            values = [v for run in runs for u, v in run.items() if lo <= u <= hi]
            cells.append(f"{statistics.mean(v[0] for v in values):.3f}, {statistics.mean(v[1] for v in values):.1f}")
        name = os.path.basename(glob.glob(pattern)[0])
        print(f"{name} | {len(logs)} | " + " | ".join(cells))


if __name__ == "__main__":
    main()
