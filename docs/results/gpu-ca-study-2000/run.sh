#!/bin/bash
# One GPU call (2026-11-26): offline install over the image's torch, then the context-aware
# (gate_half) vs transformer study at 2,000 updates x 5 seeds, then, with the time left, the
# GPU speed rows. Everything it reports goes to $OUT (at most 8 files).
# Knobs for a CPU dry run: PY, SKIP_WHEELS=1, DEADLINE (s), STUDY (extra quality-compare args).
# Knobs for other studies (defaults: the run above): SEEDS (space-separated), UPDATES, CURVE
# (curve update counts, comma-separated: --curve-updates takes one value), VALID_BLEU (unset:
# --valid-bleu; set to the empty string: no valid-set decodes; any other value is passed on as
# an argument), NO_BENCH (set to any value, 0 included: no benchmark). The 3,000-update run of
# docs/results/gpu-ca-study-3000/: UPDATES=3000 CURVE=2000 VALID_BLEU= NO_BENCH=1.
# CONFIGS: the configs of fairseq_ctx/configs/init_study/ to train, as --configs patterns
# (space-separated; default "00-* 02-*"). Put every config a comparison needs into one call:
# runs of one seed pair only on one machine (and quality-compare pairs each config with the
# first transformer config it is given). The dropout-on-C U arm after the 3,000-update study,
# with the transformer so that "does it close the remainder" pairs on one machine (9 runs):
# CONFIGS="00-* 02-* 14-*" SEEDS="11 12 13" UPDATES=3000 CURVE=2000 VALID_BLEU= NO_BENCH=1
# STUDY="--train-loss --pair 14-context_aware-context_dropout=02-context_aware-gate_half"
# (14 against 00 from the same report with --import-runs, without --pair). With the deep-context-
# alone arm as well (8 runs per call; --pair may be given several times):
# CONFIGS="00-* 02-* 14-* 15-*" SEEDS="11 12" UPDATES=3000 CURVE=2000 VALID_BLEU= NO_BENCH=1
# STUDY="--train-loss --pair 14-context_aware-context_dropout=02-context_aware-gate_half
#        --pair 15-context_aware-deep_only=02-context_aware-gate_half"
# (run 2026-11-27 on an H200 with --keep-checkpoints: docs/results/gpu-ca-arms-3000/call.sh.)
# The capacity control (init_study/16, extra encoder FFN units) with the no-op-start context-aware
# arm 12 (gate bias) beside 02, so that 02 - 16 and 12 - 16 pair on one machine (8 runs per call,
# ~7-8 min; about 10 seeds over several calls for a 0.015 valid-loss difference):
# CONFIGS="00-* 02-* 12-* 16-*" SEEDS="14 15" UPDATES=3000 CURVE=2000 VALID_BLEU= NO_BENCH=1
# STUDY="--train-loss --pair 02-context_aware-gate_half=16-transformer-extra_ffn
#        --pair 12-context_aware-gate_bias=16-transformer-extra_ffn"
# (16 against 00 is the default pairing: the -vs00 report made afterwards without --pair from the
# returned runs, as in gpu-ca-arms-3000).
# gate_half's start taken apart (2026-11-27, CPU first): 18 = 02's gates at 0.5 without its
# starting context term (U = 0), so 02 - 18 is the starting context term alone and 18 - 12 the
# halving of Q and K (with the gate's slope at 0.5 against 12's 0.018); 00 beside them (8 runs):
# CONFIGS="00-* 02-* 12-* 18-*" SEEDS="14 15" UPDATES=3000 CURVE=2000 VALID_BLEU= NO_BENCH=1
# STUDY="--train-loss --pair 02-context_aware-gate_half=18-context_aware-gate_half_zero_context
#        --pair 18-context_aware-gate_half_zero_context=12-context_aware-gate_bias"
# The gates' start and the training of what the context adds, separated (2026-11-27, CPU first):
# 19 = 18 with nothing the context adds trained (gates fixed at 0.5, U = 0: the transformer with the
# encoder's attention logits times 1/4), so 18 - 19 is what training U and V from that start does and
# 19 - 00 the scaling alone; 20 = 02 with a learned gate bias started at 0, so 20 - 02 is the bias
# parameter and 20 - 12 the gates' starting level (6 runs per seed, ~5-6 min on an H100 by the 8-run calls):
# CONFIGS="00-* 02-* 12-* 18-* 19-* 20-*" SEEDS="14" UPDATES=3000 CURVE=2000 VALID_BLEU= NO_BENCH=1
# STUDY="--train-loss --pair 18-context_aware-gate_half_zero_context=19-context_aware-frozen_half_zero_context
#        --pair 20-context_aware-gate_half_bias0=02-context_aware-gate_half"
# 18's training split in two (2026-11-28, CPU first): 21 = 18 with U frozen at 0 (the gates trained),
# 22 = 18 with the gates frozen at 0.5 (U trained); 18 - 19 = (21 - 19) + (22 - 19) + an interaction:
# CONFIGS="00-* 18-* 19-* 21-* 22-*" SEEDS="14" UPDATES=3000 CURVE=2000 VALID_BLEU= NO_BENCH=1
# STUDY="--train-loss --pair 21-context_aware-half_zero_context_gates_trained=19-context_aware-frozen_half_zero_context
#        --pair 22-context_aware-half_zero_context_projection_trained=19-context_aware-frozen_half_zero_context"
# The kit it installs from (.gpu/, untracked, carried to the machine with work/demo/data):
# scripts/gpu/make-lease-kit.sh (runs before 2026-11-27 used a hand-made .gpu/ holding a copy
# of the extension builder, which was committed beside this script; it is
# scripts/gpu/build_fairseq_ext.py since).
set -u
T0=$(date +%s)
DEADLINE=${DEADLINE:-560}
PY=${PY:-python3}
OUT=${OUT:?}
REPO=$PWD
W=${W:-/tmp/gw}
export PYTHONUNBUFFERED=1
rm -rf "$W"; mkdir -p "$W/src"
elapsed() { echo $(( $(date +%s) - T0 )); }
log() { echo "[$(date -u +%H:%M:%S) +$(elapsed)s] $*" | tee -a "$OUT/setup.log"; }

log "start"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >>"$OUT/setup.log" 2>&1
echo "cpus $(nproc)" >>"$OUT/setup.log"
if [ -z "${SKIP_WHEELS:-}" ]; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$W/site" \
        .gpu/whl/*.whl >>"$OUT/setup.log" 2>&1 || { log "wheel install failed"; exit 1; }
fi
tar xzf .gpu/sdist/fairseq_fixed-0.12.3.1.tar.gz -C "$W" || { log "untar failed"; exit 1; }
FS=$W/fairseq_fixed-0.12.3.1
(cd "$FS" && env -u CUDA_HOME "$PY" "$REPO/scripts/gpu/build_fairseq_ext.py" >"$W/build.log" 2>&1) \
    || { tail -40 "$W/build.log" >>"$OUT/setup.log"; log "fairseq extension build failed"; exit 1; }
log "fairseq extensions built"
cp -r fairseq_ctx "$W/src/" && cp -r work/demo/data "$W/data" || { log "copy failed"; exit 1; }
export PYTHONPATH=$W/src:$FS:$W/site
"$PY" - >>"$OUT/setup.log" 2>&1 <<'EOF' || { log "import check failed"; exit 1; }
import sys, torch, fairseq, sacrebleu, fairseq_ctx, hydra, omegaconf
from fairseq import libbleu
from fairseq.data import data_utils_fast, token_block_utils_fast
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      "gpu", torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
      "fairseq", fairseq.__version__, fairseq.__file__, "sacrebleu", sacrebleu.__version__,
      "fairseq_ctx", fairseq_ctx.__file__)
EOF
log "setup done"

C=$W/src/fairseq_ctx/configs
S=$W/study
mkdir -p "$S"
read -r -a CONFIG_PATTERNS <<<"${CONFIGS:-00-* 02-*}"  # no globbing here: quality-compare matches them
# shellcheck disable=SC2086
setsid "$PY" -m fairseq_ctx.quality_compare --data-dir "$W/data" --config-dir "$C/init_study" \
    --common "$C/demo/train.common" --configs "${CONFIG_PATTERNS[@]}" --seeds ${SEEDS:-1 2 3 4 5} \
    --updates "${UPDATES:-2000}" --curve-updates ${CURVE:-1200} ${VALID_BLEU---valid-bleu} --threads 1 \
    --jobs 10 --out-dir "$S" \
    --json "$S/quality.json" --markdown "$S/table.md" --curve-png "$S/curves.png" ${STUDY:-} \
    >"$OUT/study.log" 2>&1 </dev/null &
pid=$!
while kill -0 "$pid" 2>/dev/null; do
    if [ "$(elapsed)" -ge "$DEADLINE" ]; then
        log "deadline: stopping the study"
        kill -- -"$pid" 2>/dev/null; sleep 3; kill -9 -- -"$pid" 2>/dev/null
        break
    fi
    sleep 5
done
wait "$pid" 2>/dev/null; log "study rc $?"
cp "$S/quality.json" "$S/table.md" "$S/curves.png" "$OUT/" 2>/dev/null
# per-run records (no checkpoints): train logs, scores, translations
(cd "$S" && tar czf "$OUT/runs.tar.gz" --exclude='checkpoints' --exclude='*.pt' runs data.json 2>/dev/null)

left=$(( DEADLINE - $(elapsed) ))
if [ -z "${NO_BENCH:-}" ] && [ "$left" -ge 120 ]; then
    log "benchmark with ${left}s left"
    timeout "$left" "$PY" scripts/benchmark.py --baseline "transformer=--arch transformer" \
        --baseline "lstm=--arch lstm" \
        --system "ctx_dg+d=--arch transformer_context_aware --encoder-context deep_global+deep --decoder-context none --context-apply both" \
        --system "multihop_2x2@lstm=--arch lstm_multihop --attention-heads 2 --attention-hops 2 --hop-mode dependent" \
        --system "cross_agg=--arch transformer_cross_agg --routing-side encoder --routing-vertical --routing-horizontal --routing-init zero --routing-iters 3" \
        --system "sent_deep_rnn=--arch transformer_sentential --sentential-global attention --sentential-deep rnn" \
        --system "transformer_AA=--arch transformer" \
        --dims base --src-lens 20 50 100 --device cuda --dtype bf16 --steps 20 --warmup 5 \
        --json "$OUT/bench.json" --markdown "$OUT/bench.md" >"$W/bench.log" 2>&1
    log "benchmark rc $?"; tail -5 "$W/bench.log" >>"$OUT/setup.log"
fi
log "end"
