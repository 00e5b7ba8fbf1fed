"""The encoder rows of the gate statistics in sizes/ (fairseq-ctx-gate-statistics, one JSON per
config, seed, checkpoint and mode) as one markdown table: python sizes_table.py [RESULTS_DIR] > sizes.md
(RESULTS_DIR: the folder holding sizes/, by default this one's; also used for ../gpu-ca-arms-3000)"""
import glob
import json
import os
import re
import sys

HERE = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
rows = []
for path in sorted(glob.glob(os.path.join(HERE, "sizes", "*.json"))):
    config, seed, updates, mode = re.match(r"(\d\d)-.*-seed(\d+)-(\d+)-(eval|train)\.json", os.path.basename(path)).groups()
    result = json.load(open(path))
    for row in result["gates"]["encoder"]:
        rows.append((int(updates), mode, row["layer"], config, int(seed), row, result["sentences"]))


def fmt(value):
    return "" if value is None else f"{value:.3f}"


print("| updates | mode | layer | config | seed | lambda_Q / lambda_K | context term Q / K | TV vs no context term | TV vs Q, K |")
print("|---|---|---|---|---|---|---|---|---|")
for updates, mode, layer, config, seed, row, sentences in sorted(rows, key=lambda r: r[:5]):
    assert sentences == 1000
    print(f"| {updates} | {mode} | {layer} | `{config}` | {seed} | {fmt(row.get('lambda_q'))} / {fmt(row.get('lambda_k'))} | "
          f"{fmt(row['context_q'])} / {fmt(row['context_k'])} | {fmt(row['tv_context'])} | {fmt(row['tv_stock'])} |")
