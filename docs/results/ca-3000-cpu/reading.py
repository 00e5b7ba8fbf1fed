"""Every figure of readings.md for `02` (context-aware gate_half) - `00` (transformer) at 3,000 updates
on the CPU, from fairseq-ctx-quality-compare's JSON reports (the run directories need not exist).

    python docs/results/ca-3000-cpu/reading.py REPORT.json [REPORT.json ...] [--final]

Always printed (descriptive): per seed, `02` - `00` of the log's valid loss at every update both runs
validated at, of the exact eval-mode valid loss and the train-set loss at 3,000 (--train-loss), of
test BLEU at 1,200 / 2,000 / 3,000; the check that each run's first 1,200 updates are the
1,200-update study's run of its config and seed (valid loss at 1,200 against
../ca-arms-1200-cpu/quality-12-18-seeds1-5.json).
Without --final (interim looks): per-seed values only, no mean or CI (readings.md).
With --final (the planned reading: seeds 1-6 of 3,000-update AMD EPYC runs, nothing else accepted):
the primary contrast (95 % t CI over seeds, paired t), the equivalence test within +-0.008 (two
one-sided t-tests), the reading by readings.md's precedence (a-e) for the log's and the exact valid
loss, the seeds a t-test and the equivalence test would need at the observed sd, and the GPU setup
against this CPU setup (Welch t over 6 and 13 seeds; seed-paired over seeds 1-6 as a check;
secondary). The rules are readings.md's; this script applies them.
"""
import argparse
import json
import os
import statistics

from scipy import stats

os.environ.setdefault("FAIRSEQ_CTX_NO_MODELS", "1")  # statistics only: no fairseq, no torch
from fairseq_ctx.analysis.seed_statistics import (  # noqa: E402
    equivalence_seeds_needed, equivalence_test, sd_factor_interval, seed_difference, seeds_needed)

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.dirname(HERE)
SYSTEM, BASELINE = "02-context_aware-gate_half", "00-transformer"
UPDATES = 3000
PLANNED_SEEDS = 6
MARGIN = 0.008
GPU_REPORTS = [os.path.join(RESULTS, "gpu-ca-study-3000-seeds6-10", "quality-10-seeds.json"),  # seeds 1-10
               os.path.join(RESULTS, "gpu-ca-arms-3000", "quality-3-seeds-vs00.json")]  # seeds 11-13
STUDY_1200 = os.path.join(RESULTS, "ca-arms-1200-cpu", "quality-12-18-seeds1-5.json")


def runs_of(paths, refuse_duplicates=False):
    """{config: {seed: record}}; a (config, seed) in two reports is refused when asked (a run moved
    aside after a restart and its rerun must not be mixed silently), else the first report's kept."""
    runs, found_in = {}, {}
    for path in paths:
        with open(path, encoding="utf-8") as handle:
            for config, seeds in json.load(handle)["runs"].items():
                for seed, record in seeds.items():
                    key = (config, int(seed))
                    if key in found_in and refuse_duplicates:
                        raise SystemExit(f"{config} seed {seed} is in {found_in[key]} and in {path}: name one report per run")
                    found_in.setdefault(key, path)
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


def describe(runs, final=False):
    seeds = sorted(set(runs.get(SYSTEM, {})) & set(runs.get(BASELINE, {})))
    print(f"seeds with both configs: {seeds}")
    points = sorted({int(u) for s in seeds for c in (SYSTEM, BASELINE) for u in (runs[c][s].get("valid") or {})})
    print("\n02 - 00, the log's valid loss (base 2), per seed:")
    # interim looks (readings.md): per-seed values only, no mean or CI
    print("updates  " + "  ".join(f"seed {s:>2}" for s in seeds) + ("   mean" if final else ""))
    for u in points:
        d = paired(runs, log_valid, u)
        if len(d) == len(seeds):
            print(f"{u:>7}  " + "  ".join(f"{d[s]:+7.3f}" for s in seeds)
                  + (f"  {statistics.fmean(d.values()):+.4f}" if final else ""))
    for name, measure, updates, digits in (("exact valid loss", exact_valid, UPDATES, 4),
                                           ("train-set loss", train_loss, UPDATES, 4),
                                           ("test BLEU", test_bleu, 1200, 2), ("test BLEU", test_bleu, 2000, 2),
                                           ("test BLEU", test_bleu, UPDATES, 2)):
        d = paired(runs, measure, updates)
        print(f"{name} at {updates}: " + ", ".join(f"seed {s} {fmt(v, digits)}" for s, v in d.items())
              + (f"; mean {statistics.fmean(d.values()):+.{digits}f}" if d and final else ""))
    print("\nfirst 1,200 updates against the 1,200-update study (the log's valid loss at every point both have):")
    earlier = runs_of([STUDY_1200])
    for config in (BASELINE, SYSTEM):
        for seed in seeds:
            new, old = runs[config][seed].get("valid") or {}, (earlier.get(config, {}).get(seed) or {}).get("valid") or {}
            shared = sorted((set(new) & set(old)), key=int)
            if not shared:
                print(f"  {config} seed {seed}: no earlier run (or no shared point)")
                continue
            differ = [u for u in shared if new[u]["loss"] != old[u]["loss"]]
            code = (earlier[config][seed].get("trained_with") or {}).get("model_code")
            here = (runs[config][seed].get("trained_with") or {}).get("model_code")
            print(f"  {config} seed {seed}: {len(shared)} shared points ({shared[0]}-{shared[-1]}): "
                  + ("all the same" if not differ else
                     f"first differs at {differ[0]} ({new[differ[0]]['loss']} here, {old[differ[0]]['loss']} there)")
                  + f"; model code {here} here, {code} there")


def _check_runs(runs, seeds):
    """Only the planned runs: 3,000-update CPU (AMD EPYC) trainings without a GPU."""
    for config in (SYSTEM, BASELINE):
        for seed in seeds:
            record = runs[config][seed]
            trained = record.get("trained_with") or {}
            problems = [what for what, bad in (
                (f"settings {record.get('settings', '')[:14]!r}", not record.get("settings", "").startswith(f"updates={UPDATES} ")),
                (f"gpu {trained.get('gpu')}", trained.get("gpu")),
                (f"cpu {trained.get('cpu')}", "AMD EPYC" not in (trained.get("cpu") or ""))) if bad]
            if problems:
                raise SystemExit(f"{config} seed {seed} is not a planned run: {', '.join(problems)}")


def classify(diffs):
    """readings.md's precedence (a-e) for per-seed differences; returns (label, figures)."""
    d = seed_difference(list(diffs), [0.0] * len(diffs), higher_is_better=False)
    if d["ci_low"] is None:
        return f"undefined ({d.get('note')})", d, None
    tost = equivalence_test(list(diffs), MARGIN)
    if d["ci_high"] < 0:
        label = "a. reversed"
    elif d["ci_low"] > 0:
        label = "b. present" + (", smaller than the margin" if tost["equivalent"] else "") + (
            ", smaller than the GPU's mean" if d["ci_high"] < 0.016 else "")
    elif tost["equivalent"]:
        label = "c. absent within the margin"
    elif d["ci_high"] < 0.016:
        label = "d. not at the GPU's size (not: absent)"
    else:
        label = "e. unresolved"
    return label, d, tost


def final(runs):
    primary = paired(runs, log_valid, UPDATES)
    if sorted(primary) != list(range(1, PLANNED_SEEDS + 1)):
        raise SystemExit(f"--final needs seeds 1-{PLANNED_SEEDS} of both configs at {UPDATES} updates; "
                         f"found {sorted(primary)}")
    _check_runs(runs, sorted(primary))
    label, d, tost = classify(primary.values())
    if tost is None:
        raise SystemExit(f"no reading: {label}")
    print(f"\nPRIMARY 02 - 00 log's valid loss at {UPDATES} ({d['n']} seeds): {d['mean_diff']:+.4f} "
          f"[{d['ci_low']:+.4f}, {d['ci_high']:+.4f}], p {d['p_t']:.3g}, higher in {d['worse']} / {d['n']}; "
          f"80 % power at {fmt(d['detectable_80'], 4)}")
    print(f"equivalence within +-{MARGIN}: 90 % CI [{tost['ci_low']:+.4f}, {tost['ci_high']:+.4f}], "
          f"TOST p {tost['p']:.3g}, equivalent: {tost['equivalent']}")
    print(f"READING: {label}")
    sd = d["sd_diff"]
    low, high = sd_factor_interval(d["n"])
    print(f"sd of the per-seed differences {sd:.4f} (95 % range {sd * low:.4f}-{sd * high:.4f})")
    for difference in (0.016, MARGIN, max(d["ci_low"], 0.0) or None):
        if difference:
            print(f"seeds for 80 % power at {difference:.4f} (t-test) with sd {sd:.4f}: {seeds_needed(difference, sd)}")
    print(f"seeds for 80 % power of equivalence within +-{MARGIN} at a true 0 with sd {sd:.4f}: "
          f"{equivalence_seeds_needed(sd, MARGIN)}")
    exact = paired(runs, exact_valid, UPDATES)
    if sorted(exact) == sorted(primary):
        exact_label, e, _ = classify(exact.values())
        print(f"exact eval-mode valid loss: {fmt(e['mean_diff'], 4)} [{fmt(e['ci_low'], 4)}, {fmt(e['ci_high'], 4)}]: "
              f"{exact_label}; {'agrees' if exact_label == label else 'DISAGREES (the log decides)'}")
    else:
        print(f"exact eval-mode valid loss: seeds {sorted(exact)} only; not classified")
    gpu = paired(runs_of(GPU_REPORTS), log_valid, UPDATES)
    welch = stats.ttest_ind(list(primary.values()), list(gpu.values()), equal_var=False)
    ci = welch.confidence_interval(0.95)
    print(f"secondary, the GPU setup against this CPU setup: CPU {statistics.fmean(primary.values()):+.4f} "
          f"({len(primary)} seeds) - GPU {statistics.fmean(gpu.values()):+.4f} ({len(gpu)} seeds) = "
          f"{statistics.fmean(primary.values()) - statistics.fmean(gpu.values()):+.4f} "
          f"[{ci.low:+.4f}, {ci.high:+.4f}] (Welch t, p {welch.pvalue:.3g})")
    both = seed_difference({s: primary[s] for s in primary if s in gpu}, {s: gpu[s] for s in primary if s in gpu})
    print(f"  seed-paired sensitivity check over seeds {both['seeds']}: CPU - GPU {fmt(both['mean_diff'], 4)} "
          f"[{fmt(both['ci_low'], 4)}, {fmt(both['ci_high'], 4)}]")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("reports", nargs="+", help="quality-compare JSON reports of this study")
    parser.add_argument("--final", action="store_true", help="the planned reading (seeds 1-6)")
    args = parser.parse_args()
    runs = runs_of(args.reports, refuse_duplicates=True)
    describe(runs, final=args.final)
    if args.final:
        final(runs)


if __name__ == "__main__":
    main()
