"""Post-hoc (2026-11-26): where does gate_half - transformer (2,000 updates, 5 seeds, ca-study-2000) come from,
per sentence? Jackknife contributions of each sentence to the corpus-BLEU difference, averaged over seeds,
against sentence features. Run from the checkout with the runs of work/ca-study-2000 present:
    .venv/bin/python docs/results/ca-study-2000/per_sentence_features.py"""
import numpy as np
from collections import Counter
from fairseq_ctx.analysis.seed_sentence_statistics import jackknife_contributions
from fairseq_ctx.evaluation.scoring import sentence_statistics, bleu_of_statistics
W = 'work/ca-study-2000/runs'
D = 'work/demo/data'
ARMS = {'00': '00-transformer', '02': '02-context_aware-gate_half'}
score = bleu_of_statistics('en')
def hyps(arm, seed, split):
    p = f'{W}/{ARMS[arm]}/seed{seed}/' + ('eval' if split == 'test' else 'valid/upd2000/eval') + '/hyp.detok.en'
    return [l.rstrip('\n') for l in open(p, encoding='utf-8')]
def lines(p): return [l.rstrip('\n') for l in open(p, encoding='utf-8')]
train_en = set(lines(f'{D}/raw/train.en'))
train_tok_zh = Counter(w for l in lines(f'{D}/tok/train.zh') for w in l.split())
res = {}
for split in ('test', 'valid'):
    refs = lines(f'{D}/raw/{split}.en')
    srcs = lines(f'{D}/tok/{split}.zh')
    C = {}
    H = {}
    for arm in ARMS:
        for s in range(1, 6):
            h = hyps(arm, s, split); H[arm, s] = h
            full, c = jackknife_contributions(sentence_statistics(h, refs, 'en'), score)
            C[arm, s] = c
    d = np.mean([C['02', s] - C['00', s] for s in range(1, 6)], axis=0)
    feats = {
        'src_len': np.array([len(x.split()) for x in srcs], float),
        'ref_len': np.array([len(x.split()) for x in refs], float),
        'ref_in_train': np.array([r in train_en for r in refs], float),
        'src_unseen_frac': np.array([np.mean([train_tok_zh[w] == 0 for w in x.split()]) for x in srcs]),
        'src_rare_frac': np.array([np.mean([train_tok_zh[w] < 5 for w in x.split()]) for x in srcs]),
    }
    for arm in ARMS:
        feats[f'exact_{arm}'] = np.mean([[h == r for h, r in zip(H[arm, s], refs)] for s in range(1, 6)], axis=0)
    print(f'== {split}: mean d (= sum/N is 0; corpus diff is mean of per-seed corpus diffs)')
    corpus = [score(np.asarray(sentence_statistics(H['02', s], refs, 'en'), float).sum(0)) - score(np.asarray(sentence_statistics(H['00', s], refs, 'en'), float).sum(0)) for s in range(1, 6)]
    print('  corpus diff per seed', np.round(corpus, 2), 'mean', round(float(np.mean(corpus)), 3))
    order = np.argsort(d)
    print('  d quantiles', np.round(np.quantile(d, [0, .01, .05, .25, .5, .75, .95, .99, 1]), 2))
    k = 20
    print(f'  sum of {k} most negative d / N', round(d[order[:k]].sum() / len(d), 3), f' {k} most positive', round(d[order[-k:]].sum() / len(d), 3))
    for name, f in feats.items():
        r = np.corrcoef(f, d)[0, 1] if f.std() > 0 else float('nan')
        print(f'  {name:16s} mean {f.mean():.3f}  corr with d {r:+.3f}')
    res[split] = (d, feats, order, refs, srcs, H)
# the most negative test sentences, by line number (no corpus text in the record)
d, feats, order, refs, srcs, H = res['test']
print('  most negative test lines (1-based) and d:', [(int(i) + 1, round(float(d[i]), 1)) for i in order[:8]])
