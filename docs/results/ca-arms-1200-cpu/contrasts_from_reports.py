"""Seed-paired contrasts of the CPU 1,200-update context-aware arms, read from the reports'
JSON (fairseq-ctx-quality-compare's records; the run directories need not exist): valid loss
(exact eval-mode value at 1,200, the log's at 800), train-set loss (eval mode), test BLEU; mean
[95% t CI over seeds], seeds + / -, paired-t p and Holm over the contrasts named with --holm,
and the true |difference| that t-test finds with 80 % power at the observed sd, unadjusted (a
design figure for the next study, not a bound: the CI is); with --margin, the equivalence test of a
contrast within a margin set beforehand (two one-sided t-tests).
Post hoc summary; the reports are the record.

    python docs/results/ca-arms-1200-cpu/contrasts_from_reports.py REPORT.json [REPORT.json ...] \
        --contrast 24-19 --contrast 21-24 [--holm 24-19,21-24]
"""
import argparse
import json
import math
import os

from scipy import stats

os.environ.setdefault("FAIRSEQ_CTX_NO_MODELS", "1")  # statistics only: no fairseq, no torch
from fairseq_ctx.analysis.seed_statistics import detectable_difference, equivalence_test  # noqa: E402


def runs_of(reports):
    runs = {}
    for path in reports:
        for config, seeds in json.load(open(path))["runs"].items():
            for seed, record in seeds.items():
                runs.setdefault(config[:2], {}).setdefault(int(seed), record)
    return runs


def value(record, metric):
    if metric == "valid":
        return (record.get("fit_gap") or {}).get("1200", {}).get("valid_loss")
    if metric == "valid800":
        return (record.get("valid") or {}).get("800", {}).get("loss")
    if metric == "train":
        return (record.get("train_loss") or {}).get("1200", {}).get("loss")
    return record.get("bleu")


def contrast(runs, terms, metric):
    xs, seeds = [], []
    for seed in sorted(set.intersection(*(set(runs[arm]) for _, arm in terms))):
        values = [value(runs[arm][seed], metric) for _, arm in terms]
        if None not in values:
            xs.append(sum(c * v for (c, _), v in zip(terms, values)))
            seeds.append(seed)
    n = len(xs)
    if n < 2:
        return None
    m = sum(xs) / n
    sd = (sum((x - m) ** 2 for x in xs) / (n - 1)) ** 0.5
    h = stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
    return {"mean": m, "low": m - h, "high": m + h, "p": stats.ttest_1samp(xs, 0).pvalue, "seeds": seeds,
            "per_seed": xs, "plus": sum(x > 0 for x in xs), "minus": sum(x < 0 for x in xs),
            "detectable": detectable_difference(sd, n)}


def parse(text):
    """'24-19' -> [(1, '24'), (-1, '19')]; '18-21-22+19' -> the interaction"""
    terms, sign, arm = [], 1, ""
    for ch in text + "+":
        if ch in "+-":
            if arm:
                terms.append((sign, arm))
            sign, arm = (1 if ch == "+" else -1), ""
        else:
            arm += ch
    return terms


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("reports", nargs="+")
    parser.add_argument("--contrast", action="append", required=True)
    parser.add_argument("--holm", default="", help="contrasts (comma-separated) Holm-corrected together, valid at 1,200")
    parser.add_argument("--margin", action="append", default=[], metavar="CONTRAST=DELTA",
                        help="equivalence (two one-sided t-tests) of CONTRAST's valid loss at 1,200 within "
                             "+-DELTA, a margin set before the result was seen; repeatable")
    args = parser.parse_args()
    runs = runs_of(args.reports)
    results = {c: {m: contrast(runs, parse(c), m) for m in ("valid", "valid800", "train", "bleu")} for c in args.contrast}
    family = [c for c in args.holm.split(",") if c]
    ordered = sorted(family, key=lambda c: results[c]["valid"]["p"])
    holm, running = {}, 0.0
    for i, c in enumerate(ordered):
        running = max(running, min(1.0, (len(ordered) - i) * results[c]["valid"]["p"]))
        holm[c] = running
    margins = {}
    for item in args.margin:
        name, _, delta = item.partition("=")
        if name not in results:
            parser.error(f"--margin {item}: {name} is not one of the --contrast")
        try:
            margins[name] = float(delta)
        except ValueError:
            parser.error(f"--margin {item}: DELTA is not a number (CONTRAST=DELTA)")
        if not (margins[name] > 0 and math.isfinite(margins[name])):
            parser.error(f"--margin {item}: DELTA must be positive and finite")
    for c in args.contrast:
        for m, r in results[c].items():
            if r is None:
                print(f"{c} {m}: fewer than 2 seeds")
                continue
            digits = 2 if m == "bleu" else 4
            extra = f", Holm {holm[c]:.3f}" if m == "valid" and c in holm else ""
            if r["detectable"] is not None:
                extra += f"; 80% power at {r['detectable']:.{digits}f} unadjusted"
            print(f"{c} {m}: {r['mean']:+.{digits}f} [{r['low']:+.{digits}f}, {r['high']:+.{digits}f}] "
                  f"({r['plus']} / {r['minus']}; p {r['p']:.3f}{extra}; seeds {r['seeds']}) per seed "
                  + " ".join(f"{x:+.{digits}f}" for x in r["per_seed"]))
            if m == "valid" and c in margins:
                e = equivalence_test(r["per_seed"], margins[c])
                print(f"{c} valid within +-{margins[c]}: 90% CI [{e['ci_low']:+.4f}, {e['ci_high']:+.4f}], TOST p "
                      f"{e['p']:.3f}: {'equivalent' if e['equivalent'] else 'not shown equivalent'}"
                      + (" (no spread over the seeds)" if e["ci_low"] == e["ci_high"] else ""))
        if "valid" in results[c] and results[c]["valid"] is None and c in margins:
            print(f"{c} valid within +-{margins[c]}: fewer than 2 seeds, no equivalence test")


if __name__ == "__main__":
    main()
