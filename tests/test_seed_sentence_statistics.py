"""The interval under seed AND sentence sampling (crossed seed x sentence design).

References are written from the definitions: corpus BLEU recomputed by sacreBLEU on the
text without one sentence (jackknife), the two-way ANOVA's mean squares by explicit sums,
and coverage checked by simulating the design itself (fresh seeds and fresh sentences in
every repetition, scored with sacreBLEU's BLEU)."""
import math
import random

import numpy as np
import pytest
import sacrebleu
from scipy import stats

from fairseq_ctx.analysis.seed_sentence_statistics import (jackknife_contributions, seed_and_sentence_difference,
                                                             set_gap)
from fairseq_ctx.evaluation.scoring import bleu_of_statistics, paired_test, sentence_statistics

WORDS = [f"w{i}" for i in range(60)]


def _sentences(n, seed):
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 14))) for _ in range(n)]


def _noisy(refs, keep, seed):
    rng = random.Random(seed)
    return [" ".join(w if rng.random() < keep else rng.choice(WORDS) for w in r.split()) for r in refs]


def test_jackknife_contributions_are_corpus_bleu_without_each_sentence_recomputed_by_sacrebleu():
    refs = _sentences(40, 0)
    hyps = _noisy(refs, 0.6, 1)
    full, contributions = jackknife_contributions(sentence_statistics(hyps, refs, "en"), bleu_of_statistics("en"))
    assert full == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs]).score, abs=1e-9)
    loo = [sacrebleu.corpus_bleu(hyps[:i] + hyps[i + 1:], [refs[:i] + refs[i + 1:]]).score for i in range(40)]
    pseudo = [39 * (full - x) for x in loo]
    centre = sum(pseudo) / 40
    assert contributions == pytest.approx([x - centre for x in pseudo], abs=1e-9)
    assert sum(contributions) == pytest.approx(0, abs=1e-9)


def test_one_seed_jackknife_variance_agrees_with_a_bootstrap_of_sacrebleus_statistics():
    # what the interaction term stands for within one seed: the sentence sampling the
    # paired bootstrap resamples
    refs = _sentences(300, 2)
    base, system = _noisy(refs, 0.55, 3), _noisy(refs, 0.6, 4)
    score = bleu_of_statistics("en")
    _, cb = jackknife_contributions(sentence_statistics(base, refs, "en"), score)
    _, cs = jackknife_contributions(sentence_statistics(system, refs, "en"), score)
    jackknife_sd = math.sqrt(float(np.sum((cs - cb) ** 2)) / 300 ** 2)
    metric = sacrebleu.metrics.BLEU()
    stats_b = np.array(metric._extract_corpus_statistics(base, [refs]))
    stats_s = np.array(metric._extract_corpus_statistics(system, [refs]))
    rng = np.random.default_rng(0)
    idx = rng.integers(0, 300, size=(2000, 300))
    boot = [metric._compute_score_from_stats(stats_s[i].sum(0)).score
            - metric._compute_score_from_stats(stats_b[i].sum(0)).score for i in idx]
    assert jackknife_sd == pytest.approx(float(np.std(boot)), rel=0.15)
    # and the library behind paired_test sees the same BLEU
    _, b, s = paired_test(base, system, refs, metric, samples=10)
    assert s.score - b.score == pytest.approx(metric.corpus_score(system, [refs]).score
                                              - metric.corpus_score(base, [refs]).score)


def _mean_score(total):  # rows (value, 1): the score is the mean value, contributions are value - mean
    return total[0] / total[1]


def _rows(values):
    return [[v, 1.0] for v in values]


def test_mean_squares_components_and_interval_from_the_anova_definitions():
    y_sys = {1: [9.0, 1.0, 5.0, 2.0, 8.0], 2: [11.0, 2.0, 6.0, 1.0, 9.0], 3: [12.0, 6.0, 10.0, 5.0, 9.0]}
    y_base = {1: [2.0, 1.0, 1.0, 3.0, 2.0], 2: [1.0, 0.0, 2.0, 2.0, 1.0], 3: [0.0, 2.0, 1.0, 1.0, 3.0]}
    r = seed_and_sentence_difference({s: _rows(v) for s, v in y_sys.items()},
                                     {s: _rows(v) for s, v in y_base.items()}, _mean_score)
    y = [[a - b for a, b in zip(y_sys[s], y_base[s])] for s in (1, 2, 3)]
    S, N = 3, 5
    grand = sum(map(sum, y)) / (S * N)
    row = [sum(y[s]) / N for s in range(S)]
    col = [sum(y[s][i] for s in range(S)) / S for i in range(N)]
    ms_seed = N * sum((row[s] - grand) ** 2 for s in range(S)) / (S - 1)
    ms_sent = S * sum((col[i] - grand) ** 2 for i in range(N)) / (N - 1)
    ms_int = sum((y[s][i] - row[s] - col[i] + grand) ** 2 for s in range(S) for i in range(N)) / ((S - 1) * (N - 1))
    assert r["per_seed"] == pytest.approx(row) and r["mean_diff"] == pytest.approx(grand)
    assert r["mean_squares"] == pytest.approx({"seed": ms_seed, "sentence": ms_sent, "interaction": ms_int})
    sigma_seed, sigma_sent = (ms_seed - ms_int) / N, (ms_sent - ms_int) / S
    assert r["components"] == pytest.approx({"seed": sigma_seed, "sentence": sigma_sent, "interaction": ms_int})
    assert sigma_seed > 0 and sigma_sent > 0 and r["truncated"] == []
    # V = sigma_seed^2 / S + sigma_sent^2 / N + sigma_int^2 / (S N)
    v = sigma_seed / S + sigma_sent / N + ms_int / (S * N)
    assert r["se"] == pytest.approx(math.sqrt(v))
    # Satterthwaite df of V S N = MS_seed + MS_sent - MS_int
    df = (v * S * N) ** 2 / (ms_seed ** 2 / (S - 1) + ms_sent ** 2 / (N - 1) + ms_int ** 2 / ((S - 1) * (N - 1)))
    assert r["df"] == pytest.approx(df)
    half = stats.t.ppf(0.975, df) * math.sqrt(v)
    assert (r["ci_low"], r["ci_high"]) == pytest.approx((grand - half, grand + half))
    assert r["p"] == pytest.approx(2 * (1 - stats.t.cdf(abs(grand) / math.sqrt(v), df)))
    assert r["seed_only_se"] == pytest.approx(stats.tstd(row) / math.sqrt(S))
    assert r["seed_spread_f"] == pytest.approx(ms_seed / ms_int)
    assert r["seed_spread_p_lower"] == pytest.approx(stats.f.cdf(ms_seed / ms_int, S - 1, (S - 1) * (N - 1)))
    assert r["variance_shares"] == pytest.approx({"seed": ms_seed / (S * N) / v, "sentence": sigma_sent / N / v})
    assert r["sentence_sampling_variance"] == pytest.approx(sigma_sent / N + ms_int / (S * N))


def _anova(system, base):
    """Mean squares of y = system - base rows (rows (value, 1)), written out."""
    seeds = sorted(system)
    y = [[a[0] - b[0] for a, b in zip(system[s], base[s])] for s in seeds]
    S, N = len(y), len(y[0])
    grand = sum(map(sum, y)) / (S * N)
    row = [sum(r) / N for r in y]
    col = [sum(y[s][i] for s in range(S)) / S for i in range(N)]
    ms_seed = N * sum((x - grand) ** 2 for x in row) / (S - 1)
    ms_sent = S * sum((x - grand) ** 2 for x in col) / (N - 1)
    ms_int = sum((y[s][i] - row[s] - col[i] + grand) ** 2 for s in range(S) for i in range(N)) / ((S - 1) * (N - 1))
    return S, N, ms_seed, ms_sent, ms_int


def test_a_negative_sentence_component_is_set_to_zero_and_its_df_is_the_seed_terms():
    base = {s: _rows([0.0] * 6) for s in (1, 2, 3)}
    system = {1: _rows([1, -1, 2, -2, 3, -3]), 2: _rows([0, 2, -1, 3, -2, 4])}
    system[3] = _rows([-(a[0] + b[0]) + 5 for a, b in zip(system[1], system[2])])  # column sums constant
    r = seed_and_sentence_difference(system, base, _mean_score)
    S, N, ms_seed, ms_sent, ms_int = _anova(system, base)
    assert ms_sent < ms_int and "sentence" in r["truncated"] and r["variance_shares"]["sentence"] == 0
    v = max(ms_seed, ms_int) / (S * N)
    assert r["se"] == pytest.approx(math.sqrt(v)) and r["df"] == pytest.approx(S - 1)
    half = stats.t.ppf(0.975, S - 1) * math.sqrt(v)
    assert (r["ci_low"], r["ci_high"]) == pytest.approx((r["mean_diff"] - half, r["mean_diff"] + half))


def test_per_seed_differences_that_agree_more_than_the_interaction_implies_do_not_shrink_the_interval():
    base = {s: _rows([0.0] * 6) for s in (1, 2, 3)}
    # identical per-seed means: MS_seed = 0, below the interaction; the seed-level interval has
    # zero width, but drawing other sentences for these models would still move the mean
    system = {1: _rows([1, -1, 2, -2, 3, -3]), 2: _rows([-1, 1, -2, 2, -3, 3]), 3: _rows([2, -2, 1, -1, 0, 0])}
    r = seed_and_sentence_difference(system, base, _mean_score)
    S, N, ms_seed, ms_sent, ms_int = _anova(system, base)
    assert ms_seed == pytest.approx(0) and r["components"]["seed"] < 0 and "seed" in r["truncated"]
    assert r["seed_only_se"] == pytest.approx(0)
    sentence_sampling = max(ms_sent - ms_int, 0) / (S * N) + ms_int / (S * N)
    assert r["sentence_sampling_variance"] == pytest.approx(sentence_sampling)
    assert r["se"] ** 2 == pytest.approx(sentence_sampling) and r["ci_low"] < r["mean_diff"] < r["ci_high"]


def _study(per_seed_offsets, rng_seed=3, seeds=5, sentences=200, sentence_sd=1.5):
    rng = np.random.default_rng(rng_seed)
    y = rng.normal(0, 17, size=(seeds, sentences)) + rng.normal(0, sentence_sd, size=(1, sentences))
    y = y - y.mean(axis=1, keepdims=True) + np.asarray(per_seed_offsets)[:, None]
    return ({s: _rows(y[s]) for s in range(seeds)}, {s: _rows(np.zeros(sentences)) for s in range(seeds)})


def test_the_interval_is_continuous_where_the_seed_component_crosses_zero_and_holds_both_floors():
    shape = np.array([-1.0, -0.5, 0.0, 0.5, 1.0])
    widths, dfs, fs = [], [], []
    scales = np.linspace(0.5, 2.0, 61)
    for scale in scales:
        r = seed_and_sentence_difference(*_study(0.3 + scale * shape), _mean_score)
        # never below the seed-level variance, nor below the sentence-sampling one
        assert r["se"] ** 2 >= r["seed_only_se"] ** 2 * (1 - 1e-12)
        assert r["se"] ** 2 >= r["sentence_sampling_variance"] * (1 - 1e-12)
        widths.append(r["ci_high"] - r["ci_low"])
        dfs.append(r["df"])
        fs.append(r["seed_spread_f"])
    assert min(fs) < 1 < max(fs)  # the seed component's estimate crosses zero in this range
    # the width grows with the spread it is given, step by step: no jump where F crosses 1
    steps = np.abs(np.diff(widths)) / np.array(widths[:-1])
    assert (steps - np.diff(scales) / scales[:-1]).max() < 0.005, steps
    assert np.abs(np.diff(dfs)).max() < 0.1, dfs


def test_the_interval_barely_moves_where_the_sentence_component_crosses_zero():
    # tiny per-seed spread (F << 1), the shared sentence effect grown through zero
    widths, dfs, sentence = [], [], []
    for sd in np.linspace(0.0, 4.0, 81):
        r = seed_and_sentence_difference(*_study(0.3 + 0.01 * np.arange(5), sentence_sd=sd), _mean_score)
        widths.append(r["ci_high"] - r["ci_low"])
        dfs.append(r["df"])
        sentence.append(r["components"]["sentence"])
    assert min(sentence) < 0 < max(sentence)
    assert np.abs(np.diff(widths) / np.array(widths[:-1])).max() < 0.02
    assert np.abs(np.diff(dfs)).max() < 0.2, dfs


def test_undefined_cases_say_so():
    one = seed_and_sentence_difference({1: _rows([1, 2, 3])}, {1: _rows([0, 0, 0])}, _mean_score)
    assert one["mean_diff"] == pytest.approx(2) and one["ci_low"] is None and "one seed" in one["note"]
    none = seed_and_sentence_difference({1: _rows([1, 2])}, {2: _rows([1, 2])}, _mean_score)
    assert none["mean_diff"] is None and none["note"] == "no paired seeds"
    flat = seed_and_sentence_difference({1: _rows([1, 1]), 2: _rows([1, 1])}, {1: _rows([0, 0]), 2: _rows([0, 0])},
                                        _mean_score)
    assert flat["mean_diff"] == pytest.approx(1) and flat["ci_low"] is None and "no variance" in flat["note"]
    with pytest.raises(ValueError, match="2 system sentences vs 3"):
        seed_and_sentence_difference({1: _rows([1, 2])}, {1: _rows([1, 2, 3])}, _mean_score)


# --- coverage, simulated: the design itself, scored with sacreBLEU's BLEU ------------------------

SCORE = bleu_of_statistics("en")


def _run_statistics(ref_lengths, hyp_lengths, logits, rng):
    """Per-sentence BLEU statistics of one run: n-gram matches binomial with precision
    sigmoid(logit)^n, at most the reference's n-grams."""
    p = 1 / (1 + np.exp(-logits))
    rows = np.zeros((len(ref_lengths), 10))
    rows[:, 0], rows[:, 1] = hyp_lengths, ref_lengths
    for n in range(1, 5):
        total = np.maximum(hyp_lengths - n + 1, 0)
        rows[:, 5 + n] = total
        rows[:, 1 + n] = np.minimum(rng.binomial(total, p ** n), np.maximum(ref_lengths - n + 1, 0))
    return rows


def _simulate(rng, seeds, sentences, tau_seed, tau_sentence, tau_interaction, effect=0.1):
    """One study: fresh seeds and fresh sentences. Baseline logit = difficulty + shared run
    noise; system = baseline + effect + seed effect + sentence effect + interaction. Output
    lengths: short by a per-seed amount (the brevity penalty is active, as in the demo's runs,
    ratio ~0.85-1.0) plus per-sentence noise."""
    lengths = rng.integers(6, 25, size=sentences)
    difficulty = rng.normal(0.3, 1.0, size=sentences)
    sentence_effect = rng.normal(0, tau_sentence, size=sentences)
    system, base = {}, {}
    for s in range(seeds):
        shared = rng.normal(0, 0.5, size=sentences)
        ratio = rng.uniform(0.85, 1.02)
        for out, logits in ((base, difficulty + shared),
                            (system, difficulty + shared + effect + rng.normal(0, tau_seed) + sentence_effect
                             + rng.normal(0, tau_interaction, size=sentences))):
            hyp = np.maximum(np.round(lengths * (ratio + rng.normal(0, 0.01)) + rng.normal(0, 1.5, size=sentences)),
                             1).astype(np.int64)
            out[s] = _run_statistics(lengths, hyp, logits, rng)
    return system, base


REGIMES = {  # (tau_seed, tau_sentence, tau_interaction)
    "sentence effect dominates": (0.0, 0.8, 0.1),
    "seed effect dominates": (0.25, 0.0, 0.1),
    "interaction dominates": (0.0, 0.0, 0.8),
    # a seed effect about as large as the interaction's share: its estimate is often below zero
    "mixed": (0.08, 0.15, 0.8),
}


def _coverage(regime, reps=150, seeds=4, sentences=80, seed=0):
    rng = np.random.default_rng(seed)
    results = [seed_and_sentence_difference(*_simulate(rng, seeds, sentences, *REGIMES[regime]), SCORE)
               for _ in range(reps)]
    # the estimand: the expected difference at this design, estimated from a larger simulation
    truth_rng = np.random.default_rng(seed + 1)
    truth = np.mean([np.mean(seed_and_sentence_difference(*_simulate(truth_rng, seeds, sentences, *REGIMES[regime]),
                                                          SCORE)["per_seed"]) for _ in range(2 * reps)])
    crossed = np.mean([r["ci_low"] <= truth <= r["ci_high"] for r in results])
    seed_level = np.mean([abs(r["mean_diff"] - truth) <= stats.t.ppf(0.975, seeds - 1) * r["seed_only_se"]
                          for r in results])
    return crossed, seed_level


@pytest.mark.parametrize("regime, seeds", [(regime, 4) for regime in sorted(REGIMES)] + [("mixed", 2)])
def test_the_interval_covers_under_fresh_seeds_and_fresh_sentences(regime, seeds):
    crossed, seed_level = _coverage(regime, seeds=seeds)
    # 150 repetitions: a 95 % interval covers 0.95 +- 0.036 (two standard errors); where the
    # interaction dominates, the seed term's S - 1 df make it conservative by design
    assert crossed >= 0.90, (regime, seeds, crossed)
    if regime in ("seed effect dominates", "sentence effect dominates"):
        assert crossed <= 0.99, (regime, crossed)
    if regime == "sentence effect dominates":
        # what the seed-level interval misses: sentences whose difference every seed shares
        assert seed_level < 0.75, seed_level


def test_two_sets_from_one_pool_disagree_as_often_as_the_set_gap_says():
    rng = np.random.default_rng(7)
    rejections, zs = 0, []
    for _ in range(120):
        system, base = _simulate(rng, 4, 160, *REGIMES["mixed"])
        halves = [seed_and_sentence_difference({s: v[part] for s, v in system.items()},
                                               {s: v[part] for s, v in base.items()}, SCORE)
                  for part in (slice(0, 80), slice(80, 160))]
        gap = set_gap(*halves)
        assert gap["per_seed"] == pytest.approx([a - b for a, b in zip(halves[0]["per_seed"], halves[1]["per_seed"])])
        assert gap["model_sd"] == pytest.approx(math.sqrt(halves[0]["sentence_sampling_variance"]
                                                          + halves[1]["sentence_sampling_variance"]))
        assert gap["z"] == pytest.approx(gap["mean"] / gap["model_sd"])
        assert gap["p"] == pytest.approx(2 * stats.norm.sf(abs(gap["z"])))
        zs.append(gap["z"])
        rejections += gap["p"] < 0.05
    # a calibrated sd: z about standard normal, about 5 % of the gaps beyond 1.96
    assert 0.8 < float(np.std(zs)) < 1.25 and rejections / 120 <= 0.11


def test_a_set_gap_between_different_seeds_is_refused_with_a_note():
    one = seed_and_sentence_difference({1: _rows([1, 2]), 2: _rows([2, 3])}, {1: _rows([0, 0]), 2: _rows([0, 1])},
                                       _mean_score)
    other = seed_and_sentence_difference({1: _rows([1, 2]), 3: _rows([2, 3])}, {1: _rows([0, 0]), 3: _rows([0, 1])},
                                         _mean_score)
    gap = set_gap(one, other)
    assert gap["mean"] is None and gap["p"] is None and "same seeds" in gap["note"]
    assert set_gap(one, one)["mean"] == pytest.approx(0)
