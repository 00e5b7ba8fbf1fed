"""Post-hoc (2026-11-26): the split-2 study per subset of its sentences. Its test set (4,000) is the demo
split's test (lines 1-1000) + the demo split's valid (1001-2000) + 2,000 sentences the demo split trained
on (2001-4000); its valid set is 1,000 more such sentences. Seed-level and seeds-and-sentences
statistics of gate_half - transformer on each subset, and the gaps between subsets (set_gap).
Run from the checkout: .venv/bin/python docs/results/split2-ca-2000/subsets.py work/split2/study 1 2 3 4"""
import json
import sys
import numpy as np
from fairseq_ctx.analysis.seed_sentence_statistics import seed_and_sentence_difference, set_gap
from fairseq_ctx.analysis.seed_statistics import seed_difference
from fairseq_ctx.evaluation.scoring import sentence_statistics, bleu_of_statistics

out_dir, seeds = sys.argv[1], [int(s) for s in sys.argv[2:]]
DATA = 'work/split2/data/raw'
score = bleu_of_statistics('en')
def lines(p): return [l.rstrip('\n') for l in open(p, encoding='utf-8')]
arms = {'00': '00-transformer', '02': '02-context_aware-gate_half'}
sets = {'test': lines(f'{DATA}/test.en'), 'valid': lines(f'{DATA}/valid.en')}
hyp = {(a, s, name): lines(f'{out_dir}/runs/{arms[a]}/seed{s}/' + ('eval' if name == 'test' else 'valid/upd2000/eval') + '/hyp.detok.en')
       for a in arms for s in seeds for name in sets}
subsets = {'old test (1-1000)': ('test', 0, 1000), 'old valid (1001-2000)': ('test', 1000, 2000),
           'new (2001-4000)': ('test', 2000, 4000), 'whole test (4,000)': ('test', 0, 4000),
           'new valid (1,000)': ('valid', 0, 1000), 'all new (3,000)': (None, None, None),
           'everything (5,000)': ('all', None, None)}
def stats(a, s, name, lo, hi):
    if name is None:  # new test + new valid
        h = hyp[a, s, 'test'][2000:] + hyp[a, s, 'valid']; r = sets['test'][2000:] + sets['valid']
    elif name == 'all':
        h = hyp[a, s, 'test'] + hyp[a, s, 'valid']; r = sets['test'] + sets['valid']
    else:
        h = hyp[a, s, name][lo:hi]; r = sets[name][lo:hi]
    return np.asarray(sentence_statistics(h, r, 'en'), float)
def f(x, fmt='+.2f'):
    return 'n/a' if x is None else format(x, fmt)
res = {}
for label, (name, lo, hi) in subsets.items():
    st = {a: {s: stats(a, s, name, lo, hi) for s in seeds} for a in arms}
    bleu = {a: {s: score(st[a][s].sum(0)) for s in seeds} for a in arms}
    sl = seed_difference(bleu['02'], bleu['00'])
    ss = seed_and_sentence_difference(st['02'], st['00'], score)
    res[label] = {'bleu': bleu, 'seed_level': sl, 'seeds_and_sentences': ss}
    print(f"{label:22s} 00 {np.mean(list(bleu['00'].values())):.2f} 02 {np.mean(list(bleu['02'].values())):.2f} "
          f"per seed {np.round(ss['per_seed'], 2)} seed-level {f(sl['mean_diff'])} [{f(sl['ci_low'])}, {f(sl['ci_high'])}] p {f(sl.get('p_t'), '.3f')} "
          f"both sampled [{f(ss.get('ci_low'))}, {f(ss.get('ci_high'))}] p {f(ss.get('p'), '.3f')} df {f(ss.get('df'), '.1f')} F {f(ss.get('seed_spread_f'), '.2f')}")
for a, b in (('old test (1-1000)', 'old valid (1001-2000)'), ('old test (1-1000)', 'new (2001-4000)'),
             ('old valid (1001-2000)', 'new (2001-4000)')):
    g = set_gap(res[a]['seeds_and_sentences'], res[b]['seeds_and_sentences'])
    res[f'gap {a} - {b}'] = g
    print(f"gap {a} - {b}: {f(g['mean'])} (sd {f(g['model_sd'], '.2f')}, p {f(g['p'], '.3f')}) per seed {np.round(g['per_seed'] or [], 2)}")
json.dump(res, open(f'{out_dir}/subsets.json', 'w'), indent=1, default=str)
