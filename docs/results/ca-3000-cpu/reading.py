"""Every figure of readings.md for `02` (context-aware gate_half) - `00` (transformer) at 3,000 updates
on the CPU, from fairseq-ctx-quality-compare's JSON reports (the run directories need not exist).

    python docs/results/ca-3000-cpu/reading.py REPORT.json [REPORT.json ...] [--final]

Always printed (descriptive): per seed, `02` - `00` of the log's valid loss at every update both runs
validated at, of the exact eval-mode valid loss and the train-set loss at 3,000 (--train-loss), of
test BLEU at 1,200 / 2,000 / 3,000; the check that each run's first 1,200 updates are the
1,200-update study's run of its config and seed (valid loss at 1,200 against
../ca-arms-1200-cpu/quality-12-18-seeds1-5.json).
With --final (the planned reading, once seeds 1-6 are in; refused with fewer): the primary
contrast (95 % t CI over seeds, paired t), the equivalence test within +-0.008 (two one-sided
t-tests), the seeds a 0.016 / 0.008 difference needs at the observed sd, and the platform contrast
against the GPU's 13 seeds (Welch t; secondary). Nothing here decides a reading: readings.md does.
"""
import argparse
import json
import os
import statistics

from scipy import stats

os.environ.setdefault("FAIRSEQ_CTX_NO_MODELS", "1")  # statistics only: no fairseq, no torch
from fairseq_ctx.analysis.seed_statistics import (  # noqa: E402
    detectable_difference, equivalence_test, seed_difference, seeds_needed)

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.dirname(HERE)
SYSTEM, BASELINE = "02-context_aware-gate_half", "00-transformer"
UPDATES = 3000
PLANNED_SEEDS = 6
MARGIN = 0.008
GPU_REPORTS = [os.path.join(RESULTS, "gpu-ca-study-3000-seeds6-10", "quality-10-seeds.json"),  # seeds 1-10
               os.path.join(RESULTS, "gpu-ca-arms-3000", "quality-3-seeds-vs00.json")]  # seeds 11-13
STUDY_1200 = os.path.join(RESULTS, "ca-arms-1200-cpu", "quality-12-18-seeds1-5.json")


def runs_of(paths):
    runs = {}
    for path in paths:
        with open(path, encoding="utf-8") as handle:
            for config, seeds in json.load(handle)["runs"].items():
                for seed, record in seeds.items():
                    runs.setdefault(config, {}).setdefault(int(seed), record)
    return runs


def log_valid(record, updates):
    return ((record.get("valid") or {}).get(str(updates)) or {}).get("loss")


def exact_valid(record, updates):
    return ((record.get("fit_gap") or {}).get(str(updates)) or {}).get("valid_loss")


def train_loss(record, updates):
    return ((record.get("train_loss") or {}).get(str(updates)) or {}).get("loss")


def test_bleu(record, updates):
    return ((record.get("curve") or {}).get(str(updates)) or {}).get("bleu")


def paired(runs, measure, updates):
    """{seed: system - baseline} over the seeds both configs have a value for."""
    out = {}
    for seed in sorted(set(runs.get(SYSTEM, {})) & set(runs.get(BASELINE, {}))):
        a, b = measure(runs[SYSTEM][seed], updates), measure(runs[BASELINE][seed], updates)
        if a is not None and b is not None:
            out[seed] = round(a - b, 6)
    return out


def fmt(x, digits=3):
    return "n/a" if x is None else f"{x:+.{digits}f}"


def describe(runs):
    seeds = sorted(set(runs.get(SYSTEM, {})) & set(runs.get(BASELINE, {})))
    print(f"seeds with both configs: {seeds}")
    points = sorted({int(u) for s in seeds for c in (SYSTEM, BASELINE) for u in (runs[c][s].get("valid") or {})})
    print("\n02 - 00, the log's valid loss (base 2), per seed:")
    print("updates  " + "  ".join(f"seed {s:>2}" for s in seeds) + "   mean")
    for u in points:
        d = paired(runs, log_valid, u)
        if len(d) == len(seeds):
            print(f"{u:>7}  " + "  ".join(f"{d[s]:+7.3f}" for s in seeds) + f"  {statistics.fmean(d.values()):+.4f}")
    for name, measure, updates, digits in (("exact valid loss", exact_valid, UPDATES, 4),
                                           ("train-set loss", train_loss, UPDATES, 4),
                                           ("test BLEU", test_bleu, 1200, 2), ("test BLEU", test_bleu, 2000, 2),
                                           ("test BLEU", test_bleu, UPDATES, 2)):
        d = paired(runs, measure, updates)
        print(f"{name} at {updates}: " + ", ".join(f"seed {s} {fmt(v, digits)}" for s, v in d.items())
              + (f"; mean {statistics.fmean(d.values()):+.{digits}f}" if d else ""))
    print("\nfirst 1,200 updates against the 1,200-update study (log's valid loss at 1,200):")
    earlier = runs_of([STUDY_1200])
    for config in (BASELINE, SYSTEM):
        for seed in seeds:
            new, old = log_valid(runs[config][seed], 1200), log_valid(earlier.get(config, {}).get(seed, {}), 1200)
            verdict = ("no earlier run" if old is None else "no value here" if new is None
                       else "same" if new == old else "DIFFERENT")
            print(f"  {config} seed {seed}: {new} here, {old} in the 1,200-update study: {verdict}")


def final(runs):
    primary = paired(runs, log_valid, UPDATES)
    if len(primary) < PLANNED_SEEDS:
        raise SystemExit(f"--final needs the {PLANNED_SEEDS} planned seeds; {len(primary)} have both configs "
                         f"at {UPDATES} updates ({sorted(primary)})")
    d = seed_difference({s: runs[SYSTEM][s]["valid"][str(UPDATES)]["loss"] for s in primary},
                        {s: runs[BASELINE][s]["valid"][str(UPDATES)]["loss"] for s in primary},
                        higher_is_better=False)
    print(f"\nPRIMARY 02 - 00 valid loss at {UPDATES} ({d['n']} seeds): {d['mean_diff']:+.4f} "
          f"[{d['ci_low']:+.4f}, {d['ci_high']:+.4f}], p {d['p_t']:.3g}, higher in {d['worse']} / {d['n']}; "
          f"80 % power at {fmt(d['detectable_80'], 4)}")
    tost = equivalence_test(list(primary.values()), MARGIN)
    print(f"equivalence within +-{MARGIN}: 90 % CI [{tost['ci_low']:+.4f}, {tost['ci_high']:+.4f}], "
          f"TOST p {tost['p']:.3g}, equivalent: {tost['equivalent']}")
    sd = d["sd_diff"]
    for difference in (0.016, MARGIN):
        print(f"seeds for 80 % power at {difference} with sd {sd:.4f}: {seeds_needed(difference, sd)}")
    exact = paired(runs, exact_valid, UPDATES)
    if len(exact) == len(primary):
        e = seed_difference(list(exact.values()), [0.0] * len(exact))
        print(f"exact eval-mode valid loss: {e['mean_diff']:+.4f} [{e['ci_low']:+.4f}, {e['ci_high']:+.4f}]")
    gpu = paired(runs_of(GPU_REPORTS), log_valid, UPDATES)
    welch = stats.ttest_ind(list(primary.values()), list(gpu.values()), equal_var=False)
    ci = welch.confidence_interval(0.95)
    print(f"secondary, platform: CPU {statistics.fmean(primary.values()):+.4f} ({len(primary)} seeds) - GPU "
          f"{statistics.fmean(gpu.values()):+.4f} ({len(gpu)} seeds) = "
          f"{statistics.fmean(primary.values()) - statistics.fmean(gpu.values()):+.4f} "
          f"[{ci.low:+.4f}, {ci.high:+.4f}] (Welch t, p {welch.pvalue:.3g}); GPU detectable at 80 %: "
          f"{detectable_difference(statistics.stdev(gpu.values()), len(gpu)):.4f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("reports", nargs="+", help="quality-compare JSON reports of this study")
    parser.add_argument("--final", action="store_true", help="the planned reading (seeds 1-6)")
    args = parser.parse_args()
    runs = runs_of(args.reports)
    describe(runs)
    if args.final:
        final(runs)


if __name__ == "__main__":
    main()
