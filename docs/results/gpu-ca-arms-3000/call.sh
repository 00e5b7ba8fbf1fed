#!/bin/bash
# 2026-11-27 lease: arms 00/02/14/15 at 3,000 updates, seeds 11-12, checkpoints kept; then the
# 3,000-update checkpoints of 02/14/15 seed 11 and 15 seed 12 without optimizer state, for the
# gate statistics on the CPU afterwards.
set -u
export DEADLINE=${DEADLINE:-548} CONFIGS="00-* 02-* 14-* 15-*" SEEDS="${SEEDS:-11 12}" UPDATES=3000 CURVE=2000 VALID_BLEU= NO_BENCH=1
export STUDY="--train-loss --keep-checkpoints --pair 14-context_aware-context_dropout=02-context_aware-gate_half --pair 15-context_aware-deep_only=02-context_aware-gate_half"
bash docs/results/gpu-ca-study-2000/run.sh
S=${S:-/tmp/gw/study}; export S
(cd "$OUT" && tar cf results.tar quality.json table.md curves.png runs.tar.gz 2>/dev/null && rm -f quality.json table.md curves.png runs.tar.gz)
python3 - <<'PY' >>"$OUT/setup.log" 2>&1
import os, torch
S, OUT = os.environ["S"], os.environ["OUT"]
for cfg, seed in [("02-context_aware-gate_half", 11), ("14-context_aware-context_dropout", 11),
                  ("15-context_aware-deep_only", 11), ("15-context_aware-deep_only", 12)]:
    p = f"{S}/runs/{cfg}/seed{seed}/checkpoints/checkpoint_last.pt"
    if not os.path.exists(p):
        print("missing", p); continue
    s = torch.load(p, map_location="cpu", weights_only=False)
    s.pop("last_optimizer_state", None)
    print(cfg, seed, "num_updates", s["optimizer_history"][-1].get("num_updates"))
    torch.save(s, f"{OUT}/ckpt-{cfg[:2]}-s{seed}.pt")
PY
ls -la "$OUT" >>"$OUT/setup.log"
