"""Per-seed valid loss (train.log, at every validation), train-set loss and test BLEU of the
CPU 1,200-update arms, and seed-paired differences with 95% t intervals (post hoc summary;
the reports of fairseq-ctx-quality-compare are the record)."""
import json, math, os, re, sys
from scipy import stats

# run from the checkout's root: python docs/results/ca-arms-1200-cpu/arms_table.py 1,2,3,4
ROOT = os.environ.get("RUNS", "work/ca-arms-1200/runs")
ARMS = {"00": "00-transformer", "02": "02-context_aware-gate_half", "12": "12-context_aware-gate_bias",
        "16": "16-transformer-extra_ffn", "17": "17-context_aware-no_gate_matched",
        "18": "18-context_aware-gate_half_zero_context", "19": "19-context_aware-frozen_half_zero_context",
        "20": "20-context_aware-gate_half_bias0", "21": "21-context_aware-half_zero_context_gates_trained",
        "22": "22-context_aware-half_zero_context_projection_trained"}
SEEDS = [int(s) for s in sys.argv[1].split(",")] if len(sys.argv) > 1 else [1, 2, 3, 4]


def load(arm, seed):
    base = f"{ROOT}/{ARMS[arm]}/seed{seed}"
    try:
        res = json.load(open(f"{base}/result.json"))
    except OSError:
        return None
    log = open(f"{base}/train.log").read()
    valid = {int(u): float(l) for l, u in re.findall(r"valid on 'valid' subset \| loss ([\d.]+) .*?num_updates (\d+)", log)}
    tl = json.load(open(f"{base}/train_loss/upd1200.json"))
    valid[1200] = tl["valid"]["loss"]  # the exact value (the log rounds to 3 decimals)
    return {"bleu": res["bleu"], "valid": valid, "train": tl["train"]["loss"], "raw_tl": tl}


data = {a: {s: load(a, s) for s in SEEDS} for a in ARMS}
first = next(d for a in data.values() for d in a.values() if d)
print("seed | " + " | ".join(ARMS))
for metric in ("bleu", "valid1200", "train"):
    for s in SEEDS:
        row = []
        for a in ARMS:
            d = data[a][s]
            v = None if d is None else (d["valid"].get(1200) if metric == "valid1200" else d[metric])
            row.append("-" if v is None else (f"{v:.2f}" if metric == "bleu" else f"{v:.4f}"))
        print(metric, s, " | ".join(row))


def contrast(terms, metric, update=1200):
    """sum of coefficient x arm over [(coefficient, arm)], per seed where every arm has the value"""
    get = (lambda d: d["valid"].get(update)) if metric == "valid" else (lambda d: d[metric])
    xs = []
    for s in SEEDS:
        runs = [data[arm][s] for _, arm in terms]
        if any(d is None or get(d) is None for d in runs):
            continue
        xs.append(sum(c * get(d) for (c, _), d in zip(terms, runs)))
    name = "".join(("+" if c > 0 else "-") + arm for c, arm in terms).lstrip("+")
    n = len(xs)
    if n < 2:
        return f"{name} {metric}: n={n} {xs}"
    m = sum(xs) / n
    sd = (sum((x - m) ** 2 for x in xs) / (n - 1)) ** 0.5
    h = stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
    p = stats.ttest_1samp(xs, 0).pvalue
    return (f"{name} {metric}@{update if metric=='valid' else ''}: {m:+.4f} [{m-h:+.4f}, {m+h:+.4f}] p {p:.3f} "
            f"(+{sum(x>0 for x in xs)}/-{sum(x<0 for x in xs)}, n {n}) per seed " + " ".join(f"{x:+.4f}" for x in xs))


def diff(a, b, metric, update=1200):
    return contrast([(1, a), (-1, b)], metric, update)


for a, b in [("02", "00"), ("12", "00"), ("16", "00"), ("17", "00"), ("18", "00"), ("02", "16"), ("12", "16"),
             ("02", "12"), ("17", "16"), ("18", "16"), ("02", "17"), ("02", "18"), ("18", "12"), ("17", "12"),
             ("19", "00"), ("18", "19"), ("02", "19"), ("19", "12"), ("19", "16"),
             ("20", "00"), ("20", "02"), ("20", "12"), ("20", "18"),
             ("21", "19"), ("22", "19"), ("18", "21"), ("18", "22"), ("21", "00"), ("22", "00"), ("21", "22")]:
    for metric in ("valid", "train", "bleu"):
        print(diff(a, b, metric))
    for u in (672, 800, 840, 1008):
        print("   ", diff(a, b, "valid", u))

# whether the two halves of 18's training add up: 18 - 19 = (21 - 19) + (22 - 19) + this interaction
for metric in ("valid", "train", "bleu"):
    print("interaction", contrast([(1, "18"), (-1, "21"), (-1, "22"), (1, "19")], metric))
