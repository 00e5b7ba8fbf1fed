#!/bin/bash
# 24 seed 1 again on this VM, the command quality-compare ran (as logged for 26 seed 1, 24's args), to 504 updates
cd /work/main
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
D=work/repro-24/seed1
/work/main/.venv/bin/python -m fairseq_cli.train work/demo/data/bin --user-dir /work/main/fairseq_ctx --optimizer adam --adam-betas '(0.9,0.98)' --clip-norm 1.0 --lr 2e-3 --lr-scheduler inverse_sqrt --warmup-updates 150 --criterion label_smoothed_cross_entropy --label-smoothing 0.1 --dropout 0.1 --max-tokens 4096 --required-batch-size-multiple 1 --no-epoch-checkpoints --num-workers 0 --log-interval 25 --no-progress-bar $(cat fairseq_ctx/configs/init_study/24-context_aware-frozen_scale_half.args) --max-update 504 --seed 1 --save-dir $D/checkpoints --save-interval-updates 800 --keep-interval-updates -1 --validate-interval-updates 800 --source-lang zh --target-lang en --task translation_exact_resume > $D/train.log 2>&1
echo "repro exit $? $(date -u +%T)"
