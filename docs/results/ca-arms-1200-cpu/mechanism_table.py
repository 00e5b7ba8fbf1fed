"""What the trained gates and context do, per arm, encoder layer and checkpoint, as the mean over
seeds (min-max): python mechanism_table.py [RESULTS_DIR] > mechanism.md. Reads mechanism/*.json,
one fairseq-ctx-gate-statistics JSON per config, seed and update count (eval mode, valid, all 1,000
sentences). "logit scale" is (1 - mean lambda_Q)(1 - mean lambda_K): how much the gates alone shrink
the attention logits Q K^T (1 = stock; 1/4 = both gates at 1/2, as `19` keeps them); it uses the
layer's mean gates, so it is exact only where the gates vary little over positions."""
import glob
import json
import os
import re
import sys
from collections import defaultdict

HERE = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
cells = defaultdict(list)  # (config, updates, layer) -> [(seed, row)]
for path in sorted(glob.glob(os.path.join(HERE, "mechanism", "*.json"))):
    config, seed, updates, mode = re.match(r"(\d\d)-.*-seed(\d+)-(\d+)-(eval|train)\.json",
                                           os.path.basename(path)).groups()
    result = json.load(open(path))
    assert mode == "eval" and result["sentences"] == 1000, path
    for row in result["gates"]["encoder"]:
        cells[config, int(updates), row["layer"]].append((int(seed), row))


def summary(values):
    values = [v for v in values if v is not None]
    if not values:
        return ""
    return f"{sum(values) / len(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def scale(row):
    if row.get("lambda_q") is None:
        return None
    return (1 - row["lambda_q"]) * (1 - row["lambda_k"])


print("| config | updates | layer | seeds | lambda_Q | lambda_K | logit scale | context term Q / K (rms vs the rest) | "
      "TV vs no context term | TV vs Q, K |")
print("|---|---|---|---|---|---|---|---|---|---|")
for (config, updates, layer), runs in sorted(cells.items()):
    rows = [row for _, row in runs]
    seeds = ",".join(str(seed) for seed, _ in sorted(runs, key=lambda r: r[0]))
    print(f"| `{config}` | {updates} | {layer} | {seeds} | {summary([r.get('lambda_q') for r in rows])} | "
          f"{summary([r.get('lambda_k') for r in rows])} | {summary([scale(r) for r in rows])} | "
          f"{summary([r['context_q'] for r in rows])} / {summary([r['context_k'] for r in rows])} | "
          f"{summary([r['tv_context'] for r in rows])} | {summary([r['tv_stock'] for r in rows])} |")
